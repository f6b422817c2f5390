package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/fleet"
	"github.com/delayq/delayq/internal/fleetreg"
	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/naming"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/registry"
	"github.com/delayq/delayq/job"
)

// The worker's files, one concern each:
//
//	worker.go    Worker, New, Use, Run: starting and stopping the loops
//	fetch.go     the fetcher: claims for free slots, sleeps until due
//	slots.go     slots: the jobs held, running or prefetched
//	outcome.go   running one job and recording its outcome
//	settler.go   settler: outcomes recorded in batches, one lane per shard
//	leases.go    the heartbeat (one lane per shard), the stall watch and the reaper
//	shutdown.go  the graceful shutdown

// ErrLeaseExpired is the error recorded for a job whose worker did not
// finish it within its lease (the worker crashed, hung or lost Redis).
var ErrLeaseExpired = errors.New("worker: lease expired before the job finished")

// ErrLeaseStale is the cause (context.Cause) with which a running
// handler's context is cancelled when its lease may have run out: no
// extend confirmed it for a lease (less a margin of a tenth), because the
// process was stalled (stopped, a long pause, a frozen VM) or cut off from
// Redis, so another worker may hold the job by now. It is noticed on the
// monotonic clock the moment the process runs again, without a round trip
// to Redis. A handler that returns an error then has it recorded wrapped in
// ErrLeaseStale (and the outcome is fenced like any other: recorded only if
// the lease was still this worker's). A prefetched job whose lease may have
// run out is never started: it is handed back.
var ErrLeaseStale = errors.New("worker: the lease may have run out: no extend confirmed it in time (the process was stalled, or cut off from Redis)")

// Worker handles jobs. Build one with New and call Run.
type Worker struct {
	cfg      Options
	b        protocol.Broker
	caller   protocol.Caller // this worker, to the broker
	log      zerolog.Logger
	running  atomic.Bool
	slots    *slots
	pace     pace // what the adaptive prefetch is made of
	settler  *settler
	extender *extender
	claims   claims   // the fetcher's
	reapSeq  uint64   // call ids of the reaper
	chains   sync.Map // job type → its handler in the middleware (chained)
	// report is reportProgress, made once: a method value made per job
	// would be an allocation per job.
	report  func(context.Context, job.Progress) (time.Time, error)
	chainMu sync.Mutex // builds a chain missing from chains
	// trimSig wakes the goroutine of Options.OnDeadTrimmed (nil without
	// it): a settle kept trimmed records for it.
	trimSig chan struct{}
}

// New checks cfg, fills in its defaults and returns a Worker.
func New(cfg Options) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:    cfg,
		b:      protocol.For(cfg.Broker),
		caller: protocol.Caller{ID: job.NewID(), Lease: cfg.Lease},
		log:    *cfg.Logger,
		slots:  newSlots(cfg.Lease, cfg.Lease/10),
	}
	w.report = w.reportProgress
	if cfg.OnDeadTrimmed != nil {
		w.caller.KeepTrimmed = cfg.DeadTrimmedBuffer
		w.trimSig = make(chan struct{}, 1)
	}
	w.settler = newSettler(w)
	w.extender = newExtender(w)
	return w, nil
}

// Run handles jobs until ctx is cancelled, then shuts down gracefully (see
// the package doc) and returns nil. It returns an error at once if the
// worker is already running.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	names := w.queueNames()
	w.log.Info().Strs("queues", names).Int("concurrency", w.cfg.Concurrency).Int64("lease_ms", w.cfg.Lease.Milliseconds()).Msg("worker started")
	w.warnUnserved()
	services := w.startServices(ctx)
	defer services.Wait()
	// Registered from the start to the end of the drain: the jobs it holds
	// while shutting down are still shown as held by a live process.
	stopRegistry := w.register(context.WithoutCancel(ctx))
	defer stopRegistry()

	// bg outlives ctx: it carries acks, retries and releases of the shutdown.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	// jobs is the parent of every handler context; cancelled at the deadline.
	jobs, cancelJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelJobs()

	notices, unsubscribe := w.b.Wakeups(bg, names)
	defer unsubscribe()
	cancels, stopCancels := w.b.Cancels(bg, names)
	defer stopCancels()
	go w.listenCancels(cancels)

	// The heartbeat and the stall watch keep running through the shutdown
	// wait; the reaper and the fetcher stop with ctx.
	hb, stopHB := context.WithCancel(bg)
	var loops sync.WaitGroup
	stopSettler := make(chan struct{})
	w.settler.start(bg, stopSettler)
	if w.cfg.HeartbeatInterval > 0 {
		loops.Go(func() { every(hb, w.cfg.HeartbeatInterval, func() { w.heartbeat(bg) }) })
	}
	loops.Go(func() { w.watch(hb) })
	if w.cfg.ReapInterval > 0 {
		loops.Go(func() { every(ctx, w.cfg.ReapInterval, func() { w.reap(ctx, bg) }) })
	}
	loops.Go(func() { w.checkEviction(ctx) })
	if w.cfg.ForgetIdleQueues > 0 {
		loops.Go(func() { w.forgetIdle(ctx) })
	}
	if w.cfg.OnDeadTrimmed != nil {
		loops.Go(func() { w.handTrimmed(ctx) })
	}

	var handlers sync.WaitGroup
	w.fetch(ctx, jobs, notices, &handlers)
	w.giveBackClaim(bg)
	w.shutdown(bg, cancelJobs, &handlers)
	stopHB()
	loops.Wait()
	w.extender.stop()
	close(stopSettler)
	w.settler.wait()
	w.log.Info().Msg("worker stopped")
	return nil
}

// forgetIdleEvery is how often a worker unlists idle queues.
const forgetIdleEvery = time.Hour

// forgetIdle unlists the namespace's idle queues (Options.ForgetIdleQueues)
// at once and then every forgetIdleEvery, until ctx is done. Every
// keyspace.RelistEvery, and before each pass, it lists this worker's own
// queues again (protocol.Broker.Shards does when they are due), so that
// a queue this worker serves is never idle, whether or not its fetcher
// reached it lately.
func (w *Worker) forgetIdle(ctx context.Context) {
	touch := func() {
		for _, q := range w.cfg.Queues {
			_, _ = w.b.Shards(ctx, q.Name)
		}
	}
	pass := func() {
		names, err := w.b.ForgetIdle(ctx, w.cfg.ForgetIdleQueues)
		if len(names) > 0 {
			w.log.Info().Strs("queues", names).Dur("idle", w.cfg.ForgetIdleQueues).Msg("forgot idle queues that held nothing; their next use lists them again")
		}
		if err != nil && ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("forgetting idle queues failed; the next pass tries again")
		}
	}
	touch()
	pass()
	ticks := 0
	every(ctx, keyspace.RelistEvery, func() {
		touch()
		if ticks++; ticks >= int(forgetIdleEvery/keyspace.RelistEvery) {
			pass()
			ticks = 0
		}
	})
}

// listenCancels cancels the handlers of the running jobs that
// Broker.Cancel asks to stop, until notices is closed.
func (w *Worker) listenCancels(notices <-chan protocol.CancelNotice) {
	for n := range notices {
		if w.slots.cancelled(n.Queue, n.ID, n.Token, broker.ErrCancelled) {
			w.log.Info().Str("job_id", n.ID).Str("queue", n.Queue).Msg("job cancelled; cancelling the handler")
		}
	}
}

// warnUnserved logs a warning for each registered type whose queue this
// worker does not serve: its jobs would wait for another worker.
func (w *Worker) warnUnserved() {
	served := make(map[string]bool, len(w.cfg.Queues))
	for _, q := range w.cfg.Queues {
		served[q.Name] = true
	}
	for _, typ := range w.cfg.Registry.Table(registry.Key{}).Types() {
		e, _ := w.cfg.Registry.Table(registry.Key{}).Lookup(typ)
		q := cmp.Or(e.Queue, naming.DefaultQueue)
		if !served[q] {
			w.log.Warn().Str("type", typ).Str("queue", q).Strs("queues", w.queueNames()).
				Msg("job type is registered but its queue is not served by this worker; its jobs wait for a worker that serves it")
		}
	}
}

// startServices runs Options.Services until ctx is done; the WaitGroup
// waits for all of them.
func (w *Worker) startServices(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i, svc := range w.cfg.Services {
		wg.Go(func() {
			defer func() {
				if v := recover(); v != nil {
					w.log.Error().Int("service", i).Str("panic", fmt.Sprint(v)).Str("stack", string(debug.Stack())).Msg("service panicked")
				}
			}()
			if err := svc.Run(ctx); err != nil && !(errors.Is(err, context.Canceled) && ctx.Err() != nil) {
				w.log.Error().Err(err).Int("service", i).Msg("service failed")
				return
			}
			w.log.Debug().Int("service", i).Msg("service stopped")
		})
	}
	return &wg
}

// register records the worker in the process registry (package fleet)
// until the returned func is called, which deregisters it and waits for
// that. Nothing is registered when Options.ProcessTTL is negative; a
// registration that cannot be made is logged, and the worker runs on.
func (w *Worker) register(ctx context.Context) (stop func()) {
	if w.cfg.ProcessTTL < 0 {
		return func() {}
	}
	queues := make([]fleet.Queue, len(w.cfg.Queues))
	for i, q := range w.cfg.Queues {
		queues[i] = fleet.Queue{Name: q.Name, Concurrency: w.cfg.Concurrency}
	}
	reg, err := fleetreg.New(w.cfg.Broker.Client(), w.cfg.Broker.Namespace(), fleet.Process{
		Role:   fleet.RoleWorker,
		Queues: queues,
		Types:  w.cfg.Registry.Table(registry.Key{}).Types(),
		Info:   map[string]string{"concurrency": strconv.Itoa(w.cfg.Concurrency), "worker_id": w.caller.ID},
	}, fleetreg.Options{
		TTL:  w.cfg.ProcessTTL,
		Held: w.heldJobs,
		OnError: func(err error) {
			w.log.Warn().Err(err).Msg("worker cannot record itself in the process registry")
		},
	})
	if err != nil {
		w.log.Error().Err(err).Msg("worker not registered in the process registry")
		return func() {}
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = reg.Run(rctx) }()
	return func() { cancel(); <-done }
}

// heldJobs lists the jobs the worker holds (running, prefetched or being
// settled), in a stable order, for its registry record.
func (w *Worker) heldJobs() []fleet.HeldJob {
	leases := w.slots.held()
	out := make([]fleet.HeldJob, len(leases))
	for i, l := range leases {
		out[i] = fleet.HeldJob{Queue: l.Queue(), ID: l.ID}
	}
	slices.SortFunc(out, func(a, b fleet.HeldJob) int {
		return cmp.Or(cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.ID, b.ID))
	})
	return out
}

func (w *Worker) queueNames() []string {
	names := make([]string, len(w.cfg.Queues))
	for i, q := range w.cfg.Queues {
		names[i] = q.Name
	}
	return names
}

// every runs f every d (with ±10 % jitter so that workers spread out) until
// ctx is done.
func every(ctx context.Context, d time.Duration, f func()) {
	for {
		jittered := d + time.Duration((rand.Float64()-0.5)*0.2*float64(d))
		t := time.NewTimer(jittered)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			f()
		}
	}
}

// signal wakes whoever waits on c (buffered 1) without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
