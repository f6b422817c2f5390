package periodic

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// ErrUnknownSchedule is wrapped by the error of [Pause], [Resume] and
// [RunNow] for a name that is no stored schedule: no scheduler declared
// it, or it went stale and a heartbeat removed it. A name that has only a
// last outcome or last tick left is no schedule either.
var ErrUnknownSchedule = errors.New("periodic: no such schedule")

// ErrNotRunning is wrapped by the error of [RunNow] for a stale schedule:
// no running scheduler declares it, so none would pick the request up.
var ErrNotRunning = errors.New("periodic: no running scheduler declares the schedule")

// headerRun is the header of a run-now job: the request it was enqueued
// for ([RunNow]). Its headerTick holds the time of the request.
const headerRun = "delayq-periodic-run"

// runRetention is how long a run-now request is kept after it was made:
// a request sent again within it (the same name and request id) is the
// same request and runs at most once. A request no scheduler picked up
// within it is dropped.
const runRetention = 24 * time.Hour

// maxRequestLen is the longest run-now request id, in bytes.
const maxRequestLen = 64

// States of a Run.
const (
	RunPending  = "pending"  // recorded; no scheduler enqueued its job yet
	RunEnqueued = "enqueued" // its job was enqueued (Run.Queue)
	RunRefused  = "refused"  // its job cannot be enqueued (Run.Error says why)
)

// pause is a schedule's entry in the paused hash (JSON).
type pause struct {
	Paused  int64 `json:"paused"`            // ms
	Resumed int64 `json:"resumed,omitempty"` // ms; 0 while paused
}

// Pause pauses the schedule name in the namespace of b, for every
// scheduler: from its next step (at most Options.Poll later), no scheduler
// enqueues the schedule's ticks; each skipped tick is recorded as its last
// outcome, ResultPaused. The pause is stored in Redis and lasts until
// [Resume], whatever scheduler restarts. Pausing a paused schedule changes
// nothing. A name that is no stored schedule is refused with an error
// wrapping ErrUnknownSchedule, and nothing is written. [RunNow] still
// runs a paused schedule.
func Pause(ctx context.Context, b *broker.Broker, name string) error {
	return setPaused(ctx, b, name, true, time.Time{})
}

// Resume ends the pause of the schedule name ([Pause]): the ticks due
// while it was paused never run, and its ticks after the moment of Resume
// (the Redis server's clock) run as usual: on time, or, when no scheduler
// was there to enqueue them, by the schedule's missed-tick policy counted
// from that moment. Resuming a schedule that is not paused changes
// nothing; a name that is no stored schedule is refused with an error
// wrapping ErrUnknownSchedule.
func Resume(ctx context.Context, b *broker.Broker, name string) error {
	return setPaused(ctx, b, name, false, time.Time{})
}

// setPaused is Pause and Resume at now (zero: the server's clock).
func setPaused(ctx context.Context, b *broker.Broker, name string, paused bool, now time.Time) error {
	verb := "resume"
	if paused {
		verb = "pause"
	}
	if err := validateName(name); err != nil {
		return fmt.Errorf("periodic: cannot %s: %w", verb, err)
	}
	rdb, keys := b.Client(), keyspace.Periodic(b.Namespace())
	update := func(tx *redis.Tx) error {
		known, err := tx.HExists(ctx, keys.Schedules, name).Result()
		if err != nil {
			return err
		}
		if !known {
			return fmt.Errorf("periodic: cannot %s %q: %w (no scheduler declared it, or it went stale and was removed)", verb, name, ErrUnknownSchedule)
		}
		raw, err := tx.HGet(ctx, keys.Paused, name).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		have := err == nil
		var p pause
		decoded := have && json.Unmarshal([]byte(raw), &p) == nil
		switch {
		case paused && decoded && p.Resumed == 0:
			return nil // paused already
		case !paused && (!have || decoded && p.Resumed != 0):
			return nil // not paused
		}
		at := now
		if at.IsZero() {
			if at, err = tx.Time(ctx).Result(); err != nil {
				return err
			}
		}
		if paused {
			p = pause{Paused: at.UnixMilli()}
		} else {
			p.Resumed = at.UnixMilli()
		}
		body, err := json.Marshal(p)
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(pp redis.Pipeliner) error {
			pp.HSet(ctx, keys.Paused, name, body)
			return nil
		})
		return err
	}
	for range 20 {
		err := rdb.Watch(ctx, update, keys.Schedules, keys.Paused)
		if errors.Is(err, redis.TxFailedErr) {
			continue
		}
		if err != nil && !errors.Is(err, ErrUnknownSchedule) {
			return fmt.Errorf("periodic: cannot %s %q: %w", verb, name, err)
		}
		return err
	}
	return fmt.Errorf("periodic: cannot %s %q: the paused schedules kept changing meanwhile", verb, name)
}

// Run is a run-now request ([RunNow]) and what became of it.
type Run struct {
	ID        string    // the job's id: runID(Name, Request)
	Name      string    // the schedule
	Request   string    // the request id
	Requested time.Time // when it was first made (the Redis server's clock)
	State     string    // RunPending, RunEnqueued or RunRefused
	Queue     string    // the queue of its job, once enqueued
	Error     string    // why its job cannot be enqueued, when refused
}

// run is a Run as the runs hash stores it (JSON).
type run struct {
	Name      string `json:"name"`
	Request   string `json:"request"`
	Requested int64  `json:"requested"` // ms
	State     string `json:"state"`
	Queue     string `json:"queue,omitempty"`
	Error     string `json:"error,omitempty"`
}

func (r run) public(id string) Run {
	return Run{ID: id, Name: r.Name, Request: r.Request, Requested: fromMS(r.Requested), State: r.State, Queue: r.Queue, Error: r.Error}
}

// runID returns the job id of the run-now request of the schedule name:
// "name@run:request". A tick's id has a time after its '@', and a schedule
// name has no '@', so no run-now id is a tick's.
func runID(name, request string) string { return name + "@run:" + request }

// validateRequest checks a run-now request id: 1 to maxRequestLen bytes of
// ASCII letters, digits and '.', '_', '-'.
func validateRequest(request string) error {
	if request == "" || len(request) > maxRequestLen {
		return fmt.Errorf("periodic: %w: run request id %q must be 1 to %d bytes long", job.ErrInvalid, request, maxRequestLen)
	}
	for _, r := range request {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return fmt.Errorf("periodic: %w: run request id %q contains %q; allowed are letters, digits and '._-'", job.ErrInvalid, request, r)
		}
	}
	return nil
}

// RunNow requests one run of the schedule name now, outside its timing,
// and returns the request. The schedulers that declare the schedule pick
// the request up at their next step (at most Options.Poll later) and
// enqueue its job as they build a tick's (the same type, arguments,
// options and queue, signed, through Options.Enqueue) with the id
// name@run:request (Run.ID), ready at once; the schedule's ticks go on as
// before, paused or not. Only a scheduler holds a schedule's arguments,
// which is why the request goes through them.
//
// request identifies the request (1 to 64 ASCII letters, digits and
// '.', '_', '-'): the same name and request within 24 hours is the same
// request, which returns its Run as stored and
// runs at most once (a request resent after a lost reply). An empty
// request makes a random one. A name that is no stored schedule is
// refused (ErrUnknownSchedule), as is a stale one (ErrNotRunning), and a
// bad request id (job.ErrInvalid); nothing is written then. Poll the
// request with [LookupRun].
func RunNow(ctx context.Context, b *broker.Broker, name, request string) (Run, error) {
	return runNow(ctx, b, name, request, time.Time{})
}

// runNow is RunNow at now (zero: the server's clock).
func runNow(ctx context.Context, b *broker.Broker, name, request string, now time.Time) (Run, error) {
	if err := validateName(name); err != nil {
		return Run{}, fmt.Errorf("periodic: cannot run now: %w", err)
	}
	if request == "" {
		raw := make([]byte, 8)
		if _, err := rand.Read(raw); err != nil {
			return Run{}, err
		}
		request = hex.EncodeToString(raw)
	}
	if err := validateRequest(request); err != nil {
		return Run{}, fmt.Errorf("periodic: cannot run %q now: %w", name, err)
	}
	rdb, keys := b.Client(), keyspace.Periodic(b.Namespace())
	id := runID(name, request)
	if r, ok, err := lookupRun(ctx, rdb, keys, id); err != nil || ok {
		return r, err
	}
	if now.IsZero() {
		t, err := rdb.Time(ctx).Result()
		if err != nil {
			return Run{}, fmt.Errorf("periodic: cannot run %q now: reading the server's clock: %w", name, err)
		}
		now = t
	}
	body, err := rdb.HGet(ctx, keys.Schedules, name).Result()
	if errors.Is(err, redis.Nil) {
		return Run{}, fmt.Errorf("periodic: cannot run %q now: %w (no scheduler declared it, or it went stale and was removed)", name, ErrUnknownSchedule)
	}
	if err != nil {
		return Run{}, fmt.Errorf("periodic: cannot run %q now: %w", name, err)
	}
	var rec record
	if err := json.Unmarshal([]byte(body), &rec); err == nil && now.UnixMilli() > rec.Expires {
		return Run{}, fmt.Errorf("periodic: cannot run %q now: %w (stale since %s)", name, ErrNotRunning, fromMS(rec.Expires).Format(time.RFC3339))
	}
	r := run{Name: name, Request: request, Requested: now.UnixMilli(), State: RunPending}
	raw, err := json.Marshal(r)
	if err != nil {
		return Run{}, err
	}
	set, err := rdb.HSetNX(ctx, keys.Runs, id, raw).Result()
	if err != nil {
		return Run{}, fmt.Errorf("periodic: cannot run %q now: recording the request: %w", name, err)
	}
	if !set { // the same request, made meanwhile
		got, _, err := lookupRun(ctx, rdb, keys, id)
		return got, err
	}
	return r.public(id), nil
}

// LookupRun returns the run-now request of the schedule name with the id
// request, as stored: pending, enqueued or refused. An unknown request
// (never made, or older than 24 hours) is refused with an error
// wrapping ErrUnknownRun.
func LookupRun(ctx context.Context, b *broker.Broker, name, request string) (Run, error) {
	id := runID(name, request)
	r, ok, err := lookupRun(ctx, b.Client(), keyspace.Periodic(b.Namespace()), id)
	if err == nil && !ok {
		err = fmt.Errorf("periodic: run request %q: %w", id, ErrUnknownRun)
	}
	return r, err
}

// ErrUnknownRun is wrapped by the error of [LookupRun] for a request that
// was never made, or was made longer than 24 hours ago.
var ErrUnknownRun = errors.New("periodic: no such run request")

func lookupRun(ctx context.Context, rdb redis.UniversalClient, keys keyspace.PeriodicKeys, id string) (Run, bool, error) {
	raw, err := rdb.HGet(ctx, keys.Runs, id).Result()
	if errors.Is(err, redis.Nil) {
		return Run{}, false, nil
	}
	if err != nil {
		return Run{}, false, fmt.Errorf("periodic: reading run request %q: %w", id, err)
	}
	var r run
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return Run{}, false, fmt.Errorf("periodic: stored run request %q does not decode: %v (%s)", id, err, quoteStart(raw, 40))
	}
	return r.public(id), true, nil
}

// runJob builds and checks the job of the run-now request r of e, as
// tickJob builds a tick's: ready at once, with the request's id.
func (e *entry) runJob(id string, r run, now time.Time, unique time.Duration) (*job.Envelope, error) {
	opts := []job.Option{job.ID(id), job.Header(headerSchedule, e.name), job.Header(headerRun, r.Request),
		job.Header(headerTick, fromMS(r.Requested).Format(tickLayout))}
	if unique > 0 {
		opts = append(opts, job.Unique(unique), job.UniqueIncludeDead())
	}
	env, err := e.build(opts...)
	if err != nil {
		return nil, err
	}
	if err := job.Prepare(env, now); err != nil {
		return nil, err
	}
	return env, nil
}
