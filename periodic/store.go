package periodic

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
)

// record is a schedule as the schedules hash stores it (JSON), written by
// every scheduler that declares it at every heartbeat.
type record struct {
	Spec     string `json:"spec"`
	Zone     string `json:"zone"`
	Type     string `json:"type"`
	Queue    string `json:"queue"`
	Missed   string `json:"missed"`
	WithinMS int64  `json:"within_ms,omitempty"`
	Next     int64  `json:"next,omitempty"` // ms; 0: no further tick
	Seen     int64  `json:"seen"`           // ms
	Expires  int64  `json:"expires"`        // ms: stale after this
}

// outcome is a schedule's latest finished attempt as the outcomes hash
// stores it (JSON).
type outcome struct {
	Result  string `json:"result"`
	Tick    int64  `json:"tick"` // ms
	At      int64  `json:"at"`   // ms
	Attempt int    `json:"attempt"`
	Error   string `json:"error,omitempty"`
}

// syncClock measures the offset of the server's clock to the local one.
func (s *Scheduler) syncClock(ctx context.Context) error {
	if s.cfg.Clock != nil {
		return nil
	}
	before := time.Now()
	server, err := s.b.Client().Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("reading the server's clock: %w", err)
	}
	after := time.Now()
	s.offset = server.Sub(before.Add(after.Sub(before) / 2))
	return nil
}

// heartbeat writes the declared schedules with their next run and seen
// time, reads the periodic key (making it when there is none), removes
// the stale schedules this scheduler does not declare, the last ticks and
// outcomes of names that are no schedule, and the expired tick claims.
func (s *Scheduler) heartbeat(ctx context.Context) error {
	if err := s.syncClock(ctx); err != nil {
		return err
	}
	now := s.now()
	fields := make([]any, 0, 2*len(s.entries))
	declared := make(map[string]bool, len(s.entries))
	for _, e := range s.entries {
		r := record{
			Spec: e.spec, Zone: e.loc.String(), Type: e.typ, Queue: e.queue, Missed: e.missed.String(),
			WithinMS: e.within.Milliseconds(), Next: ms(e.sched.Next(now)),
			Seen: now.UnixMilli(), Expires: now.Add(s.cfg.StaleAfter).UnixMilli(),
		}
		body, err := json.Marshal(r)
		if err != nil {
			return err
		}
		fields = append(fields, e.name, body)
		declared[e.name] = true
	}
	rdb := s.b.Client()
	secret, err := loadSecret(ctx, rdb, s.keys.Secret)
	if err != nil {
		return err
	}
	s.secret = secret
	if err := rdb.HSet(ctx, s.keys.Schedules, fields...).Err(); err != nil {
		return fmt.Errorf("writing the schedules: %w", err)
	}
	// One snapshot of the three: a name has a last tick or an outcome
	// only after a scheduler wrote its schedule record.
	var (
		all  *redis.MapStringStringCmd
		last *redis.StringSliceCmd
		outs *redis.StringSliceCmd

		pausedNames *redis.StringSliceCmd
	)
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, s.keys.Schedules)
		last = p.ZRange(ctx, s.keys.Last, 0, -1)
		outs = p.HKeys(ctx, s.keys.Outcomes)
		pausedNames = p.HKeys(ctx, s.keys.Paused)
		return nil
	}); err != nil {
		return fmt.Errorf("reading the schedules: %w", err)
	}
	if err := s.pruneTicks(ctx, now); err != nil {
		return err
	}
	if err := s.pruneRuns(ctx, now); err != nil {
		return err
	}
	var stale, unknown []string
	for name, body := range all.Val() {
		var r record
		if declared[name] || (json.Unmarshal([]byte(body), &r) == nil && r.Expires >= now.UnixMilli()) {
			continue
		}
		stale = append(stale, name)
	}
	seen := map[string]bool{}
	for _, name := range slices.Concat(last.Val(), outs.Val(), pausedNames.Val()) {
		if _, ok := all.Val()[name]; !ok && !seen[name] {
			seen[name] = true
			unknown = append(unknown, name)
		}
	}
	if len(stale) == 0 && len(unknown) == 0 {
		return nil
	}
	sort.Strings(stale)
	sort.Strings(unknown)
	gone := slices.Concat(stale, unknown)
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if len(stale) > 0 {
			p.HDel(ctx, s.keys.Schedules, stale...)
		}
		p.ZRem(ctx, s.keys.Last, toAny(gone)...)
		p.HDel(ctx, s.keys.Outcomes, gone...)
		p.HDel(ctx, s.keys.Paused, gone...)
		return nil
	}); err != nil {
		return fmt.Errorf("removing stale schedules %v and records of unknown names %v: %w", stale, unknown, err)
	}
	if len(stale) > 0 {
		s.log.Info().Strs("schedules", stale).Msg("removed stale schedules that no scheduler declares")
	}
	if len(unknown) > 0 {
		s.log.Info().Strs("names", unknown).Msg("removed last ticks, outcomes and pauses of names that are no schedule")
	}
	return nil
}

// pruneTicks removes the tick claims that expired (and any that do not
// read as one), a few hundred fields per call.
func (s *Scheduler) pruneTicks(ctx context.Context, now time.Time) error {
	rdb := s.b.Client()
	var cursor uint64
	for {
		kv, next, err := rdb.HScan(ctx, s.keys.Ticks, cursor, "", 500).Result()
		if err != nil {
			return fmt.Errorf("reading the tick claims: %w", err)
		}
		var expired []string
		for i := 0; i+1 < len(kv); i += 2 {
			ms, _, _ := strings.Cut(kv[i+1], " ")
			if v, err := strconv.ParseInt(ms, 10, 64); err != nil || v < now.UnixMilli() {
				expired = append(expired, kv[i])
			}
		}
		if len(expired) > 0 {
			if err := rdb.HDel(ctx, s.keys.Ticks, expired...).Err(); err != nil {
				return fmt.Errorf("removing expired tick claims: %w", err)
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// pruneRuns removes the run-now requests older than runRetention (and any
// that do not read as one).
func (s *Scheduler) pruneRuns(ctx context.Context, now time.Time) error {
	rdb := s.b.Client()
	all, err := rdb.HGetAll(ctx, s.keys.Runs).Result()
	if err != nil {
		return fmt.Errorf("reading the run-now requests: %w", err)
	}
	var old []string
	for id, raw := range all {
		var r run
		if json.Unmarshal([]byte(raw), &r) != nil || r.Requested+runRetention.Milliseconds() < now.UnixMilli() {
			old = append(old, id)
		}
	}
	if len(old) == 0 {
		return nil
	}
	if err := rdb.HDel(ctx, s.keys.Runs, old...).Err(); err != nil {
		return fmt.Errorf("removing old run-now requests: %w", err)
	}
	return nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

// resume sets where each schedule left off: its latest enqueued tick, by
// any scheduler. A schedule that never ticked starts at now: its first
// job is its next tick's. The ticks since the latest enqueued one were
// due while this scheduler was away: its first step leaves them to the
// schedule's missed-tick policy.
func (s *Scheduler) resume(ctx context.Context, now time.Time) error {
	for _, e := range s.entries {
		e.cur, e.away = now, true
	}
	return s.catchUp(ctx, true)
}

// catchUp moves each schedule's cursor to the latest tick enqueued by any
// scheduler when that is later (fresh: to it in any case), so that a
// scheduler that was held up does not try ticks the others enqueued.
//
// It reads the paused schedules too, and the pending run-now requests of
// this scheduler's schedules: a schedule resumed later than its cursor
// moves its cursor to the moment it was resumed, so that the ticks due
// while it was paused never run.
func (s *Scheduler) catchUp(ctx context.Context, fresh bool) error {
	var (
		lastCmd *redis.ZSliceCmd
		pauses  *redis.MapStringStringCmd
		runs    *redis.MapStringStringCmd
	)
	if _, err := s.b.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		lastCmd = p.ZRangeWithScores(ctx, s.keys.Last, 0, -1)
		pauses = p.HGetAll(ctx, s.keys.Paused)
		runs = p.HGetAll(ctx, s.keys.Runs)
		return nil
	}); err != nil {
		return fmt.Errorf("reading the schedules' last ticks, pauses and run-now requests: %w", err)
	}
	last := lastCmd.Val()
	lastOf := make(map[string]int64, len(last))
	for _, z := range last {
		if name, ok := z.Member.(string); ok {
			lastOf[name] = int64(z.Score)
		}
	}
	for _, e := range s.entries {
		v := lastOf[e.name]
		if v <= 0 {
			continue
		}
		if t := time.UnixMilli(v).In(e.loc); fresh || t.After(e.cur) {
			e.cur = t
		}
	}
	declared := make(map[string]bool, len(s.entries))
	for _, e := range s.entries {
		declared[e.name] = true
		e.paused = false
		raw, ok := pauses.Val()[e.name]
		if !ok {
			continue
		}
		var p pause
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			s.log.Warn().Str("schedule", e.name).Str("record", truncate(raw, 100)).Msg("the stored pause of a schedule is unreadable; the schedule runs")
			continue
		}
		if p.Resumed == 0 {
			e.paused = true
		} else if t := time.UnixMilli(p.Resumed).In(e.loc); t.After(e.cur) {
			e.cur = t
		}
	}
	s.runs = s.runs[:0]
	now := s.now().UnixMilli()
	for id, raw := range runs.Val() {
		var r run
		if json.Unmarshal([]byte(raw), &r) != nil || r.State != RunPending || !declared[r.Name] ||
			runID(r.Name, r.Request) != id || r.Requested+runRetention.Milliseconds() < now {
			continue
		}
		s.runs = append(s.runs, pendingRun{id: id, r: r})
	}
	sort.Slice(s.runs, func(i, j int) bool { return s.runs[i].id < s.runs[j].id })
	return nil
}

// recordPaused records, for each paused schedule, its latest tick skipped
// as its last outcome, ResultPaused.
func (s *Scheduler) recordPaused(ctx context.Context, now time.Time, skipped map[*entry]time.Time) error {
	if len(skipped) == 0 {
		return nil
	}
	fields := make([]any, 0, 2*len(skipped))
	for e, at := range skipped {
		body, err := json.Marshal(outcome{Result: ResultPaused, Tick: at.UnixMilli(), At: now.UnixMilli()})
		if err != nil {
			return err
		}
		fields = append(fields, e.name, body)
		s.log.Debug().Str("schedule", e.name).Str("tick", at.UTC().Format(tickLayout)).Msg("tick skipped: the schedule is paused")
	}
	if err := s.b.Client().HSet(ctx, s.keys.Outcomes, fields...).Err(); err != nil {
		return fmt.Errorf("recording ticks skipped while paused: %w", err)
	}
	return nil
}

// recordLast raises each schedule's last tick to the one given (never
// lowers it: two schedulers may record out of order).
func (s *Scheduler) recordLast(ctx context.Context, last map[string]time.Time) error {
	if len(last) == 0 {
		return nil
	}
	members := make([]redis.Z, 0, len(last))
	for name, t := range last {
		members = append(members, redis.Z{Score: float64(t.UnixMilli()), Member: name})
	}
	if err := s.b.Client().ZAddGT(ctx, s.keys.Last, members...).Err(); err != nil {
		return fmt.Errorf("recording the last ticks: %w", err)
	}
	return nil
}

// Status is a schedule as stored in Redis, for operators: [List] returns it.
type Status struct {
	Name   string
	Spec   string // the cron expression
	Zone   string // the IANA time zone
	Type   string // the job type
	Queue  string
	Missed string        // the missed-tick policy: "skip", "once" or "all" (SkipMissed, RunMissedOnce, RunMissedAll)
	Within time.Duration // the catch-up window of "once" and "all"

	Next time.Time // the next tick after now; zero when none, or stale
	Last time.Time // the latest tick enqueued; zero when none yet
	// LastID is the job id of the Last tick.
	LastID string
	// Outcome is the latest finished attempt of one of the schedule's
	// jobs, as [Outcomes] recorded it, or the latest tick whose job the
	// scheduler could not enqueue (ResultRefused); nil when none was
	// recorded.
	Outcome *LastOutcome

	// Paused: the schedule is paused ([Pause]) since PausedAt; no
	// scheduler enqueues its ticks. ResumedAt is when it was last resumed
	// (zero when never, or while paused).
	Paused    bool
	PausedAt  time.Time
	ResumedAt time.Time

	Seen    time.Time // the last heartbeat of a scheduler that declares it
	Expires time.Time // when it counts as stale without another heartbeat
	Stale   bool      // no scheduler declared it since Expires

	// Problem says which of the schedule's stored records could not be
	// read and why (e.g. `stored schedule record does not decode: …`);
	// empty when every record decoded. A schedule whose own record does
	// not decode is listed with its name, Problem, and what its other
	// records hold; the fields its record holds are zero.
	Problem string
}

// Results of a LastOutcome.
const (
	ResultSuccess = "success" // the attempt succeeded
	ResultRetry   = "retry"   // the attempt failed; the job is retried
	ResultDead    = "dead"    // the attempt failed for good
	ResultFailed  = "failed"  // the attempt failed outside a worker: what follows is unknown
	// ResultPaused: the scheduler skipped the tick because the schedule
	// was paused ([Pause]).
	ResultPaused = "paused"
	// ResultRefused: the scheduler could not enqueue the tick's job (an
	// expiry before the tick, a job the broker finds invalid) and skipped
	// the tick; Error says why.
	ResultRefused = "refused"
)

// LastOutcome is how the latest finished attempt of a schedule's job
// ended, or why the scheduler could not enqueue its latest tick.
type LastOutcome struct {
	// Result is one of ResultSuccess, ResultRetry, ResultDead,
	// ResultFailed, ResultRefused and ResultPaused.
	Result  string
	Tick    time.Time // the tick of the job
	At      time.Time // when the attempt ended
	Attempt int
	Error   string // the handler's error, for a failure
}

// List returns the schedules stored in namespace of b, sorted by name.
// Stale is judged against now; the zero time means the Redis server's
// clock. A stored record that does not decode does not fail the listing:
// its schedule is listed with Status.Problem naming it, and the others as
// usual. Only a Redis error fails List.
func List(ctx context.Context, b *broker.Broker, now time.Time) ([]Status, error) {
	rdb, keys := b.Client(), keyspace.Periodic(b.Namespace())
	var (
		defs   *redis.MapStringStringCmd
		last   *redis.ZSliceCmd
		outs   *redis.MapStringStringCmd
		pauses *redis.MapStringStringCmd
		clock  *redis.TimeCmd
	)
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		defs = p.HGetAll(ctx, keys.Schedules)
		last = p.ZRangeWithScores(ctx, keys.Last, 0, -1)
		outs = p.HGetAll(ctx, keys.Outcomes)
		pauses = p.HGetAll(ctx, keys.Paused)
		if now.IsZero() {
			clock = p.Time(ctx)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("periodic: reading the schedules: %w", err)
	}
	if clock != nil {
		now = clock.Val()
	}
	lastOf := make(map[string]time.Time, len(last.Val()))
	for _, z := range last.Val() {
		if name, ok := z.Member.(string); ok {
			lastOf[name] = fromMS(int64(z.Score))
		}
	}
	out := make([]Status, 0, len(defs.Val()))
	for name, body := range defs.Val() {
		st := Status{Name: name, Last: lastOf[name]}
		var problems []string
		var r record
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			problems = append(problems, fmt.Sprintf("stored schedule record does not decode: %v (%s)", err, quoteStart(body, 40)))
		} else {
			st.Spec, st.Zone, st.Type, st.Queue = r.Spec, r.Zone, r.Type, r.Queue
			st.Within = time.Duration(r.WithinMS) * time.Millisecond
			st.Seen, st.Expires = fromMS(r.Seen), fromMS(r.Expires)
			st.Stale = now.UnixMilli() > r.Expires
			st.Missed = parseMissed(r.Missed).String()
			// The next tick from the expression itself: the stored one is
			// as old as the last heartbeat. A stale schedule has none:
			// nothing runs it.
			if !st.Stale {
				st.Next = fromMS(r.Next)
				if loc, err := time.LoadLocation(r.Zone); err == nil {
					if sched, err := parseSpec(r.Spec, loc); err == nil {
						st.Next = sched.Next(now).UTC()
					}
				}
			}
		}
		if !st.Last.IsZero() {
			st.LastID = tickID(name, st.Last)
		}
		if raw, ok := outs.Val()[name]; ok {
			var o outcome
			if err := json.Unmarshal([]byte(raw), &o); err != nil {
				problems = append(problems, fmt.Sprintf("stored outcome does not decode: %v (%s)", err, quoteStart(raw, 40)))
			} else {
				st.Outcome = &LastOutcome{Result: o.Result, Tick: fromMS(o.Tick), At: fromMS(o.At), Attempt: o.Attempt, Error: o.Error}
			}
		}
		if raw, ok := pauses.Val()[name]; ok {
			var p pause
			if err := json.Unmarshal([]byte(raw), &p); err != nil {
				problems = append(problems, fmt.Sprintf("stored pause does not decode: %v (%s)", err, quoteStart(raw, 40)))
			} else {
				st.Paused = p.Resumed == 0
				st.PausedAt = fromMS(p.Paused)
				if !st.Paused {
					st.PausedAt, st.ResumedAt = time.Time{}, fromMS(p.Resumed)
				}
			}
		}
		st.Problem = strings.Join(problems, "; ")
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// quoteStart quotes the first n bytes of a stored value, for an error that
// shows what was found.
func quoteStart(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…", cut(s, n))
}
