// Package relaystatus is the status outbox relays record in Redis, in the
// hash ns:outbox:relays of the broker's namespace, one field per relay
// name: the record package outbox writes and the reader of `delayq stats`
// and the dashboard.
package relaystatus

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/job"
)

// Status is what a running relay last recorded of itself, as [Read] reads
// it.
type Status struct {
	Name     string        // outbox.RelayOptions.Name
	Table    string        // the outbox table it relays
	Lag      time.Duration // how long the oldest unrelayed row of the table had waited when it recorded; 0 when none
	Pending  int64         // rows of the table waiting for a relay (jobs and cancels)
	Failed   int64         // rows of the table marked failed, skipped
	Relayed  int64         // rows this relay relayed and deleted since it started (failed ones not counted)
	Seen     time.Time     // when it recorded this, by the Redis server's clock
	Interval time.Duration // how often it records (outbox.RelayOptions.StatusInterval)
	// Error is the relay's last error (a failed batch, or the table's lag
	// that could not be read) when it has not done a good batch since;
	// "" when none. Connection details the driver put in it (user and
	// database names, hosts, addresses, ports, socket paths, connection
	// strings) are replaced by xxxxx; the relay's log has the whole error.
	Error string
	// Stale: the relay has not recorded for StaleIntervals of its
	// intervals. It was killed, or cannot reach Redis (or a record that
	// does not decode: Error says so). Lag and Pending are then as old as
	// Seen.
	Stale bool
}

// StaleIntervals is how many of its status intervals a relay may go
// without recording before [Read] reports it Stale.
const StaleIntervals = 3

// Record is the JSON a relay stores under its name.
type Record struct {
	Table      string `json:"table"`
	LagMS      int64  `json:"lag_ms"`
	Pending    int64  `json:"pending"`
	Failed     int64  `json:"failed"`
	Relayed    int64  `json:"relayed"`
	SeenMS     int64  `json:"seen_ms"`
	IntervalMS int64  `json:"interval_ms"`
	Error      string `json:"error,omitempty"`
}

// Read returns the status every relay of namespace ns (the broker's
// Namespace) recorded, sorted by name. A relay that stopped cleanly is not
// listed; one that was killed is listed Stale for a day, then removed by
// the next relay that starts. It reads one hash and the server's clock,
// and changes nothing. A bad namespace gets an error wrapping
// job.ErrInvalid.
func Read(ctx context.Context, rdb redis.UniversalClient, ns string) ([]Status, error) {
	if rdb == nil {
		return nil, invalid("nil Redis client")
	}
	if msg := keyspace.CheckNamespace(ns); msg != "" {
		return nil, invalid("relays: %s", msg)
	}
	now, fields, err := ReadHash(ctx, rdb, keyspace.OutboxRelaysKey(ns))
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(fields))
	for name, raw := range fields {
		out = append(out, parse(name, raw, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ReadHash reads the server's clock and the status hash key in one round
// trip.
func ReadHash(ctx context.Context, rdb redis.UniversalClient, key string) (time.Time, map[string]string, error) {
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

// parse decodes one record; one that does not decode is reported Stale
// with an Error that says so.
func parse(name, raw string, now time.Time) Status {
	var rec Record
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return Status{Name: name, Stale: true, Error: fmt.Sprintf("status record does not decode: %v", err)}
	}
	s := Status{
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

func invalid(format string, args ...any) error {
	return fmt.Errorf("outbox: %w: %s", job.ErrInvalid, fmt.Sprintf(format, args...))
}
