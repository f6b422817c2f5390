package faulttest_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	dqadmin "github.com/delayq/delayq/internal/admin"
	"github.com/delayq/delayq/internal/fixture"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/periodic"
)

// TestPeriodicUnderNamespaceACL: everything package periodic sends (the
// schedules' sync, the stale schedule's removal in MULTI, the last tick's
// ZADD GT, the outcome, List) is allowed by admin.ACLRules, as
// docs/periodic.md says.
func TestPeriodicUnderNamespaceACL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	const ns = "tenant-p"
	args := []any{"ACL", "SETUSER", "delayq-p", "reset", "on", ">s3cret"}
	for _, r := range strings.Fields(dqadmin.ACLRules(ns)) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "delayq-p", Password: "s3cret"})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	// Errors are counted (and shown in the test's log).
	var errorsLogged atomic.Int64
	logger := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel).Hook(zerolog.HookFunc(func(_ *zerolog.Event, l zerolog.Level, _ string) {
		if l >= zerolog.ErrorLevel {
			errorsLogged.Add(1)
		}
	}))
	pingType := job.New[tickArgs]("acl.ping", job.Queue("acl"))

	// run runs a scheduler of one schedule on a clock starting at at,
	// until cond holds for the stored schedules.
	run := func(at time.Time, name string, cond func([]periodic.Status) bool) {
		t.Helper()
		began := time.Now()
		s, err := periodic.New(b, periodic.Options{Logger: &logger, Clock: func() time.Time { return at.Add(time.Since(began)) }})
		if err != nil {
			t.Fatal(err)
		}
		if err := periodic.Add(s, name, "@every 1s", pingType, tickArgs{Schedule: name}); err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.Run(runCtx) }()
		defer func() { stop(); <-done }()
		deadline := time.Now().Add(15 * time.Second)
		for {
			list, err := periodic.List(ctx, b, time.Time{})
			if err == nil && cond(list) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("schedule %s: not synced within 15s: %+v, %v", name, list, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	has := func(list []periodic.Status, name string, ticked bool) bool {
		for _, st := range list {
			if st.Name == name && (!ticked || !st.Last.IsZero()) {
				return true
			}
		}
		return false
	}
	run(time.Now().Add(-10*time.Minute), "old", func(l []periodic.Status) bool { return has(l, "old", false) })
	run(time.Now(), "current", func(l []periodic.Status) bool {
		return has(l, "current", true) && !has(l, "old", false) // the stale one removed
	})
	list, err := periodic.List(ctx, b, time.Time{})
	if err != nil || len(list) != 1 {
		t.Fatalf("List: %+v, %v", list, err)
	}
	m := fixture.TickMessage(t, b, "acl", list[0].LastID, 1, time.Time{})
	if err := periodic.Outcomes(b)(job.HandlerFunc(func(context.Context, *job.Message) error { return nil })).Handle(ctx, m); err != nil {
		t.Fatal(err)
	}
	list, err = periodic.List(ctx, b, time.Time{})
	if err != nil || len(list) != 1 || list[0].Outcome == nil || list[0].Outcome.Result != "success" {
		t.Fatalf("List: %+v, %v", list, err)
	}
	if n := errorsLogged.Load(); n > 0 {
		t.Errorf("the scheduler logged %d errors under the namespace's ACL user (see the log)", n)
	}
}
