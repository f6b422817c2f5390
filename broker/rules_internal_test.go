package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/rules"
	"github.com/delayq/delayq/job"
)

// ruleSetups put a job under an id in each state an enqueue can find it
// in (rules.Found), as the broker's own operations leave it.
var ruleSetups = []struct {
	name  string
	found rules.Found
}{
	{"absent", rules.Absent},
	{"scheduled", rules.Scheduled},
	{"due", rules.Due},
	{"parked", rules.Due},
	{"capped", rules.Due},
	{"held", rules.Held},
	{"remembered", rules.Remembered},
}

// setUp stores under id what setup names: a job ready in an hour, moved
// to a ready time that has passed (due: in the schedule, parked by a
// pause, or held back by its type's cap, as a claim sets it aside), taken
// out of the schedule as a claim does (held), or an id remembered after
// its end.
func setUp(t *testing.T, b *Broker, setup, id string) {
	t.Helper()
	ctx := context.Background()
	k := b.shardQ(t).Keys()
	past := redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: id}
	switch setup {
	case "absent":
		return
	case "remembered":
		b.rdb.ZAdd(ctx, k.Unique, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: id})
		return
	}
	if err := b.Enqueue(ctx, combineEnv(id)); err != nil {
		t.Fatal(err)
	}
	switch setup {
	case "due":
		b.rdb.ZAddXX(ctx, k.Scheduled, past)
	case "parked":
		b.rdb.ZRem(ctx, k.Scheduled, id)
		b.rdb.ZAdd(ctx, k.Parked, past)
	case "capped":
		b.rdb.ZRem(ctx, k.Scheduled, id)
		b.rdb.ZAdd(ctx, k.Held+"t", past)
	case "held":
		b.rdb.ZRem(ctx, k.Scheduled, id) // as a claim does
	}
}

// enqueue.lua decides every enqueue as rules.Enqueue does (the test kit
// decides with that function): for each thing an enqueue can find under its
// id, with and without Unique and Replace, on each path through the script
// (one job alone, jobs with call ids of their own sharing a call, a batch
// call), the script's answer is the rule's outcome, and the error built
// from it is the rule's error. A debounced enqueue (flag "d") decides as
// rules.Debounce does, after no job, a plain job, a Unique job or a
// debounced job with its id earlier in the call, and stores what that
// outcome says: the envelope, ready the window after now or at the due
// job's ready time, kept.
func TestEnqueueScriptFollowsTheRules(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	ctx := context.Background()
	k := b.shardQ(t).Keys()
	founds := append(ruleSetups, struct {
		name  string
		found rules.Found
	}{"earlier in the call", rules.EarlierInCall})
	paths := []string{"alone", "shared", "batch"}
	n := 0
	for _, f := range founds {
		found, fname := f.found, f.name
		for _, unique := range []bool{false, true} {
			for _, replace := range []bool{false, true} {
				for _, path := range paths {
					if path == "alone" && (unique || replace || found == rules.EarlierInCall) {
						continue // the single-job path takes a job without flags
					}
					n++
					name := fmt.Sprintf("%s unique=%v replace=%v %s", fname, unique, replace, path)
					id := fmt.Sprintf("j%d", n)
					if found != rules.EarlierInCall {
						setUp(t, b, fname, id)
					}
					e := combineEnv(id)
					e.Payload = []byte(`{"n":2}`)
					e.Unique, e.Replace = unique, replace
					envs := []*job.Envelope{e}
					if path != "alone" {
						filler := combineEnv(id + "-other")
						if found == rules.EarlierInCall {
							filler = combineEnv(id)
						}
						envs = []*job.Envelope{filler, e}
					}
					bodies := make([][]byte, len(envs))
					idx := make([]int, len(envs))
					for i, env := range envs {
						body, err := b.prepare(env, time.Now())
						if err != nil {
							t.Fatal(err)
						}
						bodies[i], idx[i] = body, i
					}
					errs := make([]error, len(envs))
					var err error
					if path == "batch" {
						err = b.enqueueShard(ctx, b.shardQ(t), envs, bodies, nil, callID(), idx, errs)
					} else {
						cids := make([]string, len(envs))
						for i := range cids {
							cids[i] = callID()
						}
						err = b.enqueueShard(ctx, b.shardQ(t), envs, bodies, cids, "", idx, errs)
					}
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					got := errs[len(errs)-1]
					want := rules.EnqueueErr(rules.Enqueue(found, unique, replace), "q", id)
					if fmt.Sprint(got) != fmt.Sprint(want) {
						t.Errorf("%s: the script answered %v, the rules %v", name, got, want)
					}
					if got == nil {
						body := b.rdb.HGet(ctx, k.Jobs, id).Val()
						if !strings.Contains(body, `"n":2`) {
							t.Errorf("%s: stored %s, want this call's envelope", name, body)
						}
					}
				}
			}
		}
	}
	debounceFollowsTheRules(t, b, n)
}

// debounceFollowsTheRules is TestEnqueueScriptFollowsTheRules for
// debounced enqueues, with ids after the first n.
func debounceFollowsTheRules(t *testing.T, b *Broker, n int) {
	ctx := context.Background()
	k := b.shardQ(t).Keys()
	const window = 2 * time.Hour
	debounced := func(id string) *job.Envelope {
		e := combineEnv(id)
		e.Payload, e.Delay, e.Debounce = []byte(`{"n":2}`), 0, window
		return e
	}
	// The jobs that may come before the debounced one in its call, and
	// their rules.
	fillers := []struct {
		name string
		env  func(id string) *job.Envelope
		rule func(found rules.Found) rules.Outcome
	}{
		{"plain", combineEnv, func(f rules.Found) rules.Outcome { return rules.Enqueue(f, false, false) }},
		{"unique", func(id string) *job.Envelope { e := combineEnv(id); e.Unique = true; return e },
			func(f rules.Found) rules.Outcome { return rules.Enqueue(f, true, false) }},
		{"debounced", func(id string) *job.Envelope { e := debounced(id); e.Payload = []byte(`{"n":3}`); return e },
			func(f rules.Found) rules.Outcome { return rules.Debounce(f, rules.NoneEarlier) }},
	}
	for _, s := range ruleSetups {
		for _, earlier := range []string{"none", "plain", "unique", "debounced"} {
			for _, path := range []string{"alone", "shared", "batch"} {
				if path == "alone" && earlier != "none" {
					continue
				}
				n++
				id := fmt.Sprintf("j%d", n)
				name := fmt.Sprintf("debounced, %s, earlier in the call %s, %s", s.name, earlier, path)
				setUp(t, b, s.name, id)
				e := debounced(id)
				envs := []*job.Envelope{e}
				want, fillerWant := rules.Debounce(s.found, rules.NoneEarlier), rules.Outcome(-1)
				switch {
				case earlier != "none":
					for _, f := range fillers {
						if f.name == earlier {
							fillerWant = f.rule(s.found)
							envs = []*job.Envelope{f.env(id), e}
						}
					}
					want = rules.Debounce(s.found, rules.NoneEarlier.After(fillerWant))
				case path != "alone":
					envs = []*job.Envelope{combineEnv(id + "-other"), e}
				}
				bodies := make([][]byte, len(envs))
				idx := make([]int, len(envs))
				for i, env := range envs {
					body, err := b.prepare(env, time.Now())
					if err != nil {
						t.Fatal(err)
					}
					bodies[i], idx[i] = body, i
				}
				errs := make([]error, len(envs))
				before := time.Now()
				var err error
				if path == "batch" {
					err = b.enqueueShard(ctx, b.shardQ(t), envs, bodies, nil, callID(), idx, errs)
				} else {
					cids := make([]string, len(envs))
					for i := range cids {
						cids[i] = callID()
					}
					err = b.enqueueShard(ctx, b.shardQ(t), envs, bodies, cids, "", idx, errs)
				}
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if fillerWant >= 0 {
					if got, w := errs[0], rules.EnqueueErr(fillerWant, "q", id); fmt.Sprint(got) != fmt.Sprint(w) {
						t.Errorf("%s: the earlier job: the script answered %v, the rules %v", name, got, w)
					}
				}
				got := errs[len(errs)-1]
				if w := rules.EnqueueErr(want, "q", id); fmt.Sprint(got) != fmt.Sprint(w) {
					t.Errorf("%s: the script answered %v, the rules %v (%v)", name, got, w, want)
					continue
				}
				if got != nil {
					continue
				}
				if body := b.rdb.HGet(ctx, k.Jobs, id).Val(); !strings.Contains(body, `"n":2`) {
					t.Errorf("%s: stored %s, want this call's envelope", name, body)
				}
				// Where the job is and when it is ready: the end of the
				// window, or its own ready time, passed, in its place.
				var at float64
				var in string
				for _, set := range []string{k.Scheduled, k.Parked, k.Held + "t"} {
					if v, err := b.rdb.ZScore(ctx, set, id).Result(); err == nil {
						at, in = v, set
					}
				}
				switch want {
				case rules.Stored, rules.Replaced:
					if !e.ReadyAt.After(before.Add(window-time.Minute)) || in != k.Scheduled || int64(at) != e.ReadyAt.UnixMilli() {
						t.Errorf("%s (%v): ready %v, score %v in %s; want the end of the window, in the schedule", name, want, e.ReadyAt, at, in)
					}
				case rules.Kept:
					wantIn := map[string]string{"due": k.Scheduled, "parked": k.Parked, "capped": k.Held + "t"}[s.name]
					if !e.ReadyAt.Before(before) || in != wantIn || int64(at) != e.ReadyAt.UnixMilli() {
						t.Errorf("%s (%v): ready %v, score %v in %s; want its ready time kept, in %s", name, want, e.ReadyAt, at, in, wantIn)
					}
				}
			}
		}
	}
}

// Single Enqueues that share a script call each keep their own call
// record: one sent again gets its first outcome while the others are
// decided afresh, in the same script call; a record of the wrong type
// fails the call before anything is written.
func TestSharedCallRecordsPerJob(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	ctx := context.Background()
	k := b.shardQ(t).Keys()
	send := func(cids []string, envs ...*job.Envelope) []error {
		t.Helper()
		bodies := make([][]byte, len(envs))
		idx := make([]int, len(envs))
		for i, env := range envs {
			body, err := b.prepare(env, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			bodies[i], idx[i] = body, i
		}
		errs := make([]error, len(envs))
		if err := b.enqueueShard(ctx, b.shardQ(t), envs, bodies, cids, "", idx, errs); err != nil {
			return []error{err}
		}
		return errs
	}
	first := []string{callID(), callID()}
	a, dup := combineEnv("a"), combineEnv("a")
	if errs := send(first, a, dup); errs[0] != nil || !errors.Is(errs[1], ErrDuplicate) {
		t.Fatalf("two callers with one id in one call: %v", errs)
	}
	b.rdb.HDel(ctx, k.Jobs, "a") // the job ran and ended
	b.rdb.ZRem(ctx, k.Scheduled, "a")
	// The first caller's resend, with a new caller's job with the id.
	again := *a
	again.ReadyAt = time.Time{}
	errs := send([]string{first[0], callID()}, &again, combineEnv("a"))
	if errs[0] != nil || !again.ReadyAt.Equal(a.ReadyAt) || errs[1] != nil {
		t.Fatalf("a resend sharing a call with a new call: %v (ready %v, first %v); want nil with the first ready time, and the new job stored", errs, again.ReadyAt, a.ReadyAt)
	}
	// The duplicate's resend is a duplicate still.
	if errs := send([]string{first[1]}, dup); len(errs) != 1 || !errors.Is(errs[0], ErrDuplicate) {
		t.Fatalf("the duplicate's resend alone: %v, want its first outcome", errs)
	}
	bad := callID()
	b.rdb.HSet(ctx, k.Calls+bad, "x", "y")
	if errs := send([]string{callID(), bad}, combineEnv("c"), combineEnv("d")); len(errs) != 1 || !strings.Contains(errs[0].Error(), k.Calls+bad) {
		t.Fatalf("a call record of the wrong type: %v, want an error naming it", errs)
	}
	if b.rdb.HExists(ctx, k.Jobs, "c").Val() {
		t.Fatal("a job was stored by the call that failed")
	}
}
