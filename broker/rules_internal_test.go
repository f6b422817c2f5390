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

// enqueue.lua decides every enqueue as rules.Enqueue does (the test kit
// decides with that function): for each thing an enqueue can find under its
// id, with and without Unique and Replace, on each path through the script
// (one job alone, jobs with call ids of their own sharing a call, a batch
// call), the script's answer is the rule's outcome, and the error built
// from it is the rule's error.
func TestEnqueueScriptFollowsTheRules(t *testing.T) {
	t.Parallel()
	b := combineBroker(t)
	ctx := context.Background()
	k := b.shardQ(t).Keys()
	founds := map[rules.Found]string{rules.Absent: "absent", rules.Scheduled: "scheduled", rules.Held: "held",
		rules.Remembered: "remembered", rules.EarlierInCall: "earlier in the call"}
	paths := []string{"alone", "shared", "batch"}
	n := 0
	for found, fname := range founds {
		for _, unique := range []bool{false, true} {
			for _, replace := range []bool{false, true} {
				for _, path := range paths {
					if path == "alone" && (unique || replace || found == rules.EarlierInCall) {
						continue // the single-job path takes a job without flags
					}
					n++
					name := fmt.Sprintf("%s unique=%v replace=%v %s", fname, unique, replace, path)
					id := fmt.Sprintf("j%d", n)
					switch found {
					case rules.Scheduled, rules.Held:
						if err := b.Enqueue(ctx, combineEnv(id)); err != nil {
							t.Fatal(err)
						}
						if found == rules.Held {
							b.rdb.ZRem(ctx, k.Scheduled, id) // as a claim does
						}
					case rules.Remembered:
						b.rdb.ZAdd(ctx, k.Unique, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: id})
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
