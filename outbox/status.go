package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/keyspace"
)

// RelayStatus is what a running [Relay] last recorded of itself in Redis,
// as [Relays] reads it: for `delayq stats`, the dashboard, or an alert.
type RelayStatus struct {
	Name     string        // RelayOptions.Name
	Table    string        // the outbox table it relays
	Lag      time.Duration // how long the oldest unrelayed row of the table had waited when it recorded; 0 when none
	Pending  int64         // rows of the table waiting for a relay (jobs and cancels)
	Failed   int64         // rows of the table marked failed, skipped
	Relayed  int64         // rows this relay relayed and deleted since it started (failed ones not counted)
	Seen     time.Time     // when it recorded this, by the Redis server's clock
	Interval time.Duration // how often it records (RelayOptions.StatusInterval)
	// Error is the relay's last error (a failed batch, or the table's lag
	// that could not be read) when it has not done a good batch since;
	// "" when none. Connection details the driver put in it (user and
	// database names, hosts, addresses, ports, socket paths, connection
	// strings) are replaced by xxxxx; the relay's log has the whole error.
	Error string
	// Stale: the relay has not recorded for StaleIntervals intervals. It
	// was killed, or cannot reach Redis (or a record that does not decode:
	// Error says so). Lag and Pending are then as old as Seen.
	Stale bool
}

// StaleIntervals is how many of its status intervals a relay may go
// without recording before [Relays] reports it Stale.
const StaleIntervals = 3

// DefaultStatusInterval is how often a relay records its status when
// RelayOptions.StatusInterval is 0.
const DefaultStatusInterval = 2 * time.Second

// forgetAfter: a relay records no status for this long (it was killed, or
// renamed) is removed by the next relay of the namespace that starts.
const forgetAfter = 24 * time.Hour

// maxNameLen caps RelayOptions.Name.
const maxNameLen = 200

// statusRecord is the JSON a relay stores under its name.
type statusRecord struct {
	Table      string `json:"table"`
	LagMS      int64  `json:"lag_ms"`
	Pending    int64  `json:"pending"`
	Failed     int64  `json:"failed"`
	Relayed    int64  `json:"relayed"`
	SeenMS     int64  `json:"seen_ms"`
	IntervalMS int64  `json:"interval_ms"`
	Error      string `json:"error,omitempty"`
}

// statusStore is what a relay needs to record its status: the broker's
// client and namespace. *broker.Broker has both.
type statusStore interface {
	Client() redis.UniversalClient
	Namespace() string
}

var _ statusStore = (*broker.Broker)(nil)

// Relays returns the status every relay of namespace ns (the broker's
// Namespace; "" means keyspace.DefaultNamespace) recorded, sorted by name. A
// relay that stopped cleanly is not listed; one that was killed is listed
// Stale for a day, then removed by the next relay that starts. It reads
// one hash and the server's clock, and changes nothing. A bad namespace
// gets an error wrapping job.ErrInvalid.
func Relays(ctx context.Context, rdb redis.UniversalClient, ns string) ([]RelayStatus, error) {
	if rdb == nil {
		return nil, invalid("nil Redis client")
	}
	if ns == "" {
		ns = keyspace.DefaultNamespace
	}
	if msg := keyspace.CheckNamespace(ns); msg != "" {
		return nil, invalid("relays: %s", msg)
	}
	now, fields, err := readStatus(ctx, rdb, keyspace.OutboxRelaysKey(ns))
	if err != nil {
		return nil, err
	}
	out := make([]RelayStatus, 0, len(fields))
	for name, raw := range fields {
		out = append(out, parseStatus(name, raw, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// readStatus reads the server's clock and the status hash in one round
// trip.
func readStatus(ctx context.Context, rdb redis.UniversalClient, key string) (time.Time, map[string]string, error) {
	var tc *redis.TimeCmd
	var hc *redis.MapStringStringCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		tc = p.Time(ctx)
		hc = p.HGetAll(ctx, key)
		return nil
	})
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("outbox: relays: read %s: %w", key, err)
	}
	return tc.Val(), hc.Val(), nil
}

// parseStatus decodes one record; one that does not decode is reported
// Stale with an Error that says so.
func parseStatus(name, raw string, now time.Time) RelayStatus {
	var rec statusRecord
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return RelayStatus{Name: name, Stale: true, Error: fmt.Sprintf("status record does not decode: %v", err)}
	}
	s := RelayStatus{
		Name: name, Table: rec.Table,
		Lag:     time.Duration(rec.LagMS) * time.Millisecond,
		Pending: rec.Pending, Failed: rec.Failed, Relayed: rec.Relayed,
		Seen:     time.UnixMilli(rec.SeenMS),
		Interval: time.Duration(rec.IntervalMS) * time.Millisecond,
		Error:    rec.Error,
	}
	s.Stale = now.Sub(s.Seen) > StaleIntervals*s.Interval
	return s
}

// defaultName is the name of a relay that was given none: host and
// process, and a number from the second relay of a process on.
func defaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	name := host + ":" + strconv.Itoa(os.Getpid())
	if n := relaysMade.Add(1); n > 1 {
		name += "#" + strconv.FormatInt(n, 10)
	}
	return name
}

var relaysMade atomic.Int64

// checkName refuses a name that would make an unreadable status line.
func checkName(name string) error {
	if len(name) > maxNameLen {
		return invalid("relay name is %d bytes long, the limit is %d", len(name), maxNameLen)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return invalid("relay name %q contains %q; it must be printable", name, r)
		}
	}
	return nil
}

// status is a relay's side of its status record.
type status struct {
	store    statusStore // nil: none recorded
	key      string
	interval time.Duration
	lastErr  atomic.Pointer[string] // the last batch error since a good batch; nil when none
}

// failed records err, without its connection details, as the relay's last
// error; nil clears it.
func (s *status) failed(err error) {
	if err == nil {
		s.lastErr.Store(nil)
		return
	}
	msg := redactConnection(err.Error())
	s.lastErr.Store(&msg)
}

// runStatus records the relay's status at once and then every interval
// until ctx is done; then it removes the record, so that a relay that
// stopped cleanly is not listed. A record that cannot be written (Redis
// down) is written at the next interval.
func (r *Relay) runStatus(ctx context.Context) {
	s := &r.status
	r.forgetOld(ctx)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		if err := r.recordStatus(ctx); err != nil && ctx.Err() == nil {
			r.log.Debug().Err(err).Str("relay", r.opts.Name).Msg("outbox relay: status not recorded")
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.BatchTimeout)
			defer cancel()
			if err := s.store.Client().HDel(dctx, s.key, r.opts.Name).Err(); err != nil {
				r.log.Debug().Err(err).Str("relay", r.opts.Name).Msg("outbox relay: status not removed")
			}
			return
		case <-t.C:
		}
	}
}

// recordStatus reads the table's lag and stores the relay's record, with
// the Redis server's clock as its Seen.
func (r *Relay) recordStatus(ctx context.Context) error {
	s := &r.status
	ctx, cancel := context.WithTimeout(ctx, r.opts.BatchTimeout)
	defer cancel()
	rec := statusRecord{Table: r.o.t.full(), IntervalMS: s.interval.Milliseconds(), Relayed: r.relayed()}
	if p := s.lastErr.Load(); p != nil {
		rec.Error = *p
	}
	if l, err := r.o.Lag(ctx); err != nil {
		if rec.Error == "" {
			rec.Error = redactConnection(err.Error())
		}
	} else {
		rec.LagMS, rec.Pending, rec.Failed = l.Oldest.Milliseconds(), l.Pending, l.Failed
	}
	rdb := s.store.Client()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	rec.SeenMS = now.UnixMilli()
	raw, err := json.Marshal(&rec)
	if err != nil {
		return err
	}
	return rdb.HSet(ctx, s.key, r.opts.Name, raw).Err()
}

// forgetOld removes the records of relays not seen for a day.
func (r *Relay) forgetOld(ctx context.Context) {
	s := &r.status
	ctx, cancel := context.WithTimeout(ctx, r.opts.BatchTimeout)
	defer cancel()
	now, fields, err := readStatus(ctx, s.store.Client(), s.key)
	if err != nil {
		return // tried again at the next start
	}
	var old []string
	for name, raw := range fields {
		var rec statusRecord
		if json.Unmarshal([]byte(raw), &rec) == nil && now.Sub(time.UnixMilli(rec.SeenMS)) > forgetAfter {
			old = append(old, name)
		}
	}
	if len(old) > 0 {
		if err := s.store.Client().HDel(ctx, s.key, old...).Err(); err != nil && !errors.Is(err, context.Canceled) {
			r.log.Debug().Err(err).Msg("outbox relay: old relay records not removed")
		}
	}
}

// relayed is how many rows the relay relayed and deleted.
func (r *Relay) relayed() int64 {
	st := r.Stats()
	return st.Enqueued + st.Duplicates + st.Cancelled + st.NotFound + st.InProgress + st.Expired
}

// statusFor returns the status side of a relay of b: recorded when b has
// a Redis client and namespace (as *broker.Broker has) and interval is
// not negative.
func statusFor(b Broker, interval time.Duration) status {
	store, ok := b.(statusStore)
	if !ok || interval < 0 {
		return status{}
	}
	if interval == 0 {
		interval = DefaultStatusInterval
	}
	return status{store: store, key: keyspace.OutboxRelaysKey(store.Namespace()), interval: interval}
}

// register keeps the relay in the process registry (package fleet) until
// ctx is done; the returned func waits for its deregistration. It is nil
// when the relay has no status store or RelayOptions.ProcessTTL is
// negative.
func (r *Relay) register(ctx context.Context) func() {
	store := r.status.store
	if store == nil {
		store, _ = r.b.(statusStore)
	}
	if store == nil || r.opts.ProcessTTL < 0 {
		return nil
	}
	reg, err := fleet.New(store.Client(), store.Namespace(), fleet.Process{
		Role: fleet.RoleRelay,
		Info: map[string]string{"name": r.opts.Name, "table": r.o.t.full()},
	}, fleet.Options{TTL: r.opts.ProcessTTL, OnError: func(err error) {
		r.log.Debug().Err(err).Str("relay", r.opts.Name).Msg("outbox relay: not recorded in the process registry")
	}})
	if err != nil {
		r.log.Warn().Err(err).Str("relay", r.opts.Name).Msg("outbox relay: not registered")
		return nil
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = reg.Run(rctx) }()
	return func() { cancel(); <-done }
}
