package sqltest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/pgtest"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/internal/relaystatus"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

// refusingBroker is a broker whose Enqueue fails while refuse is set, like
// a Redis that stopped taking writes; everything else is the real broker,
// so the relay records its status through it.
type refusingBroker struct {
	*broker.Broker
	refuse atomic.Bool
}

var errRefused = errors.New("test: redis refuses writes")

func (b *refusingBroker) Enqueue(ctx context.Context, envs ...*job.Envelope) error {
	if b.refuse.Load() {
		return errRefused
	}
	return b.Broker.Enqueue(ctx, envs...)
}

// relayStatus returns the status of the relay named name, or nil.
func relayStatus(t testing.TB, b *broker.Broker, name string) *relaystatus.Status {
	t.Helper()
	all, err := relaystatus.Read(context.Background(), b.Client(), b.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	for i := range all {
		if all[i].Name == name {
			return &all[i]
		}
	}
	return nil
}

// A running relay records its status in Redis: while rows wait (Redis
// refuses them) their number, their age and the relay's error; once they
// are relayed, the count and an empty outbox; after a clean stop it is
// gone.
func TestRelayStatus(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, tb *testBundle) {
		b := &refusingBroker{Broker: tb.b}
		b.refuse.Store(true)
		const n = 7
		tb.inTx(t, func(tx *sql.Tx) error {
			for i := range n {
				if _, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: fmt.Sprint(i)}, job.ID(fmt.Sprintf("order-%d", i))); err != nil {
					return err
				}
			}
			return nil
		})
		const name = "relay-a"
		_, stop := tb.relay(t, b, outbox.RelayOptions{
			Name: name, StatusInterval: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond,
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		})
		// A record read late on a loaded machine can be stale (older than
		// three intervals): wait for a fresh one, as for the others below.
		var s *relaystatus.Status
		redistest.WaitFor(t, 10*time.Second, "fresh status with rows waiting for 300ms", func() bool {
			s = relayStatus(t, tb.b, name)
			return s != nil && s.Error != "" && s.Lag >= 300*time.Millisecond && !s.Stale
		})
		if s.Pending != n || s.Relayed != 0 || s.Table != "delayq_outbox" || s.Stale ||
			s.Interval != 50*time.Millisecond || !strings.Contains(s.Error, errRefused.Error()) {
			t.Errorf("status while Redis refuses: %+v, want %d pending, none relayed, the error", s, n)
		}
		if d := time.Since(s.Seen); d < -time.Second || d > 10*time.Second {
			t.Errorf("Seen %v is %v from now", s.Seen, d)
		}

		b.refuse.Store(false)
		redistest.WaitFor(t, 10*time.Second, "fresh status with every row relayed", func() bool {
			s = relayStatus(t, tb.b, name)
			return s != nil && s.Relayed == n && s.Pending == 0 && !s.Stale
		})
		if s.Lag != 0 || s.Error != "" || s.Failed != 0 || s.Stale {
			t.Errorf("status after the relay caught up: %+v, want no lag and no error", s)
		}
		stop()
		if s := relayStatus(t, tb.b, name); s != nil {
			t.Errorf("a relay that stopped cleanly is still listed: %+v", s)
		}
	})
}

// Two relays of one namespace are listed apart, sorted by name; the
// default name is the host and process.
func TestRelaysListsEachRelay(t *testing.T) {
	t.Parallel()
	tb := setup(t, "sqlite")
	tb.relay(t, tb.b, outbox.RelayOptions{Name: "zz", StatusInterval: 20 * time.Millisecond})
	tb.relay(t, tb.b, outbox.RelayOptions{StatusInterval: 20 * time.Millisecond})
	var all []relaystatus.Status
	redistest.WaitFor(t, 10*time.Second, "two relays listed", func() bool {
		var err error
		all, err = relaystatus.Read(tb.ctx, tb.b.Client(), tb.b.Namespace())
		return err == nil && len(all) == 2
	})
	if all[1].Name != "zz" || !strings.Contains(all[0].Name, ":") {
		t.Errorf("relays %+v, want a default host:pid name, then zz", all)
	}
	// Another namespace sees none of them.
	other, err := relaystatus.Read(tb.ctx, tb.b.Client(), tb.b.Namespace()+"-other")
	if err != nil || len(other) != 0 {
		t.Errorf("another namespace: %+v, %v", other, err)
	}
}

// A relay that stopped recording (killed) is Stale; a record that does
// not decode is listed Stale with an error saying so; one not seen for a
// day is removed by the next relay that starts.
func TestRelaysStaleAndForgotten(t *testing.T) {
	t.Parallel()
	tb := setup(t, "sqlite")
	rdb, key := tb.b.Client(), keyspace.OutboxRelaysKey(tb.b.Namespace())
	now, err := rdb.Time(tb.ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	record := func(seen time.Time) string {
		return fmt.Sprintf(`{"table":"delayq_outbox","lag_ms":1500,"pending":3,"relayed":9,"seen_ms":%d,"interval_ms":2000}`, seen.UnixMilli())
	}
	if err := rdb.HSet(tb.ctx, key,
		"fresh", record(now),
		"killed", record(now.Add(-time.Minute)),
		"ancient", record(now.Add(-25*time.Hour)),
		"garbage", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	all, err := relaystatus.Read(tb.ctx, rdb, tb.b.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]relaystatus.Status{}
	for _, s := range all {
		got[s.Name] = s
	}
	if s := got["fresh"]; s.Stale || s.Lag != 1500*time.Millisecond || s.Pending != 3 || s.Relayed != 9 || s.Interval != 2*time.Second {
		t.Errorf("fresh: %+v", s)
	}
	if s := got["killed"]; !s.Stale || s.Pending != 3 {
		t.Errorf("killed: %+v, want Stale with its last figures", s)
	}
	if s := got["garbage"]; !s.Stale || !strings.Contains(s.Error, "does not decode") {
		t.Errorf("garbage: %+v, want Stale with an error", s)
	}
	if len(all) != 4 || all[0].Name != "ancient" {
		t.Errorf("relays %+v, want 4 sorted by name", all)
	}

	tb.relay(t, tb.b, outbox.RelayOptions{Name: "new", StatusInterval: 20 * time.Millisecond})
	redistest.WaitFor(t, 10*time.Second, "the new relay listed", func() bool { return relayStatus(t, tb.b, "new") != nil })
	for name, want := range map[string]bool{"fresh": true, "killed": true, "garbage": true, "ancient": false} {
		if ok := relayStatus(t, tb.b, name) != nil; ok != want {
			t.Errorf("%s listed: %v, want %v", name, ok, want)
		}
	}
}

// Bad input to Relays and bad relay names get errors naming them.
func TestRelayStatusRefusesBadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, "sqlite")
	for _, c := range []struct {
		name string
		call func() error
		want string
	}{
		{"nil client", func() error { _, err := relaystatus.Read(tb.ctx, nil, "ns"); return err }, "nil Redis client"},
		{"bad namespace", func() error { _, err := relaystatus.Read(tb.ctx, tb.b.Client(), "a b"); return err }, `namespace "a b"`},
		{"name with a newline", func() error {
			_, err := outbox.NewRelay(tb.ob, tb.b, outbox.RelayOptions{Name: "a\nb"})
			return err
		}, "must be printable"},
		{"name too long", func() error {
			_, err := outbox.NewRelay(tb.ob, tb.b, outbox.RelayOptions{Name: strings.Repeat("n", 201)})
			return err
		}, "the limit is 200"},
	} {
		if err := c.call(); !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error wrapping job.ErrInvalid containing %q", c.name, err, c.want)
		}
	}
	// A negative interval records nothing.
	tb.inTx(t, func(tx *sql.Tx) error {
		_, err := outbox.EnqueueTyped(tb.ctx, tb.ob, tx, cancelUnpaid, Order{ID: "1"}, job.ID("order-1"))
		return err
	})
	tb.relay(t, tb.b, outbox.RelayOptions{Name: "silent", StatusInterval: -1, PollInterval: 10 * time.Millisecond})
	tb.waitEmpty(t, 10*time.Second)
	if n, err := tb.b.Client().Exists(tb.ctx, keyspace.OutboxRelaysKey(tb.b.Namespace())).Result(); err != nil || n != 0 {
		t.Errorf("status key exists (%d, %v) for a relay with StatusInterval -1", n, err)
	}
}

// TestRelayStatusHidesConnectionDetails runs a relay on a PostgreSQL server
// of its own as user relay_secret_user on database secret_shop_db, reached
// as localhost, then makes its connections fail twice: the role may no
// longer log in (its sessions ended), then the server is stopped. Each
// time the status the relay stores in Redis (and the dashboard and
// `delayq stats` show) says what failed, and holds neither the user, the
// database, the host name, an address nor the port.
func TestRelayStatusHidesConnectionDetails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := pgtest.Start(t)
	admin, err := sql.Open("pgx", pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	for _, stmt := range []string{"CREATE ROLE relay_secret_user LOGIN", "CREATE DATABASE secret_shop_db OWNER relay_secret_user"} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	port := strconv.Itoa(pg.Port())
	db, err := sql.Open("pgx", "postgres://relay_secret_user@localhost:"+port+"/secret_shop_db?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ob, err := outbox.New(db, outbox.Postgres(), outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	rdb, ns := redistest.New(t)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	tb := &testBundle{ctx: ctx, dialect: "postgres", db: db, ob: ob, b: b}
	const name = "relay-secret"
	tb.relay(t, b, outbox.RelayOptions{
		Name: name, StatusInterval: 50 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
	})
	tb.inTx(t, func(tx *sql.Tx) error {
		_, err := outbox.EnqueueTyped(ctx, ob, tx, cancelUnpaid, Order{ID: "1"}, job.ID("order-1"))
		return err
	})
	redistest.WaitFor(t, 10*time.Second, "the row relayed", func() bool {
		s := relayStatus(t, b, name)
		return s != nil && s.Relayed == 1 && s.Error == ""
	})
	check := func(phase, want string) {
		t.Helper()
		var s *relaystatus.Status
		redistest.WaitFor(t, 30*time.Second, phase+": an error with "+strconv.Quote(want), func() bool {
			s = relayStatus(t, b, name)
			return s != nil && strings.Contains(s.Error, want)
		})
		for _, secret := range []string{"relay_secret_user", "secret_shop_db", "localhost", "127.0.0.1", "::1", port} {
			if strings.Contains(s.Error, secret) {
				t.Errorf("%s: the stored error %q shows %q", phase, s.Error, secret)
			}
		}
		t.Logf("%s: %s", phase, s.Error)
	}
	for _, stmt := range []string{
		"ALTER ROLE relay_secret_user NOLOGIN",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'relay_secret_user'",
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	check("role may not log in", "is not permitted to log in")
	pg.Stop()
	check("server stopped", "connection refused")
}
