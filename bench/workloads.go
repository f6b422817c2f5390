package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// benchConfig holds what every run needs.
type benchConfig struct {
	URL         string
	N           int
	Producers   int
	BatchSize   int
	LostTimeout time.Duration
	Settle      time.Duration
}

// workloadSpec is one row kind of the report; "backlog" expands into a run
// with the backlog and the same run with an empty one.
type workloadSpec struct {
	Kind    string
	Backlog int
}

func (w workloadSpec) Label() string {
	if w.Kind == "backlog" {
		return "backlog=" + strconv.Itoa(w.Backlog)
	}
	return w.Kind
}

var knownWorkloads = []string{"spread", "burst", "backlog"}

func expandWorkloads(list string, backlog int) ([]workloadSpec, error) {
	var out []workloadSpec
	for _, name := range splitList(list) {
		switch name {
		case "spread", "burst":
			out = append(out, workloadSpec{Kind: name})
		case "backlog":
			out = append(out, workloadSpec{Kind: name, Backlog: backlog})
			if backlog != 0 {
				out = append(out, workloadSpec{Kind: name, Backlog: 0})
			}
		default:
			return nil, fmt.Errorf("unknown workload %q (known: %s)", name, strings.Join(knownWorkloads, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no workloads given (known: %s)", strings.Join(knownWorkloads, ", "))
	}
	return out, nil
}

// Figures are the measured values of one run. Pointers are null where a
// figure does not apply (n/a).
type Figures struct {
	Enqueued           int      `json:"enqueued"`
	EnqueueErrors      int      `json:"enqueue_errors"`
	Handled            int      `json:"handled"`
	Deliveries         int      `json:"deliveries"`
	EnqueueSeconds     float64  `json:"enqueue_seconds"`
	DrainSeconds       float64  `json:"drain_seconds"`
	EnqueuePerSec      float64  `json:"enqueue_per_s"`
	EnqueueBatchPerSec *float64 `json:"enqueue_batch_per_s"`
	DrainPerSec        float64  `json:"drain_per_s"`
	LatenessP50Ms      *float64 `json:"lateness_p50_ms"`
	LatenessP99Ms      *float64 `json:"lateness_p99_ms"`
	LatenessMaxMs      *float64 `json:"lateness_max_ms"`
	Early              int      `json:"early"`
	EarlyOver1ms       int      `json:"early_over_1ms"`
	EnqueuedAfterReady *int     `json:"enqueued_after_ready"`
	Duplicates         int      `json:"duplicates"`
	Lost               int      `json:"lost"`
	Stray              int      `json:"stray"`
	CPUSecPer100k      float64  `json:"cpu_s_per_100k"`
	RedisCPUSecPer100k *float64 `json:"redis_cpu_s_per_100k"`
	// What the system asked of Redis per job (see redisDelta): during the
	// enqueue of the burst workload (consumers idle; null elsewhere), and
	// over the drain window (burst: claims and acks only; spread and
	// backlog: producers and consumers together).
	EnqueueRedis *redisDelta `json:"enqueue_redis"`
	WindowRedis  *redisDelta `json:"window_redis"`
	// Redis CPU (INFO cpu) per job stored during the burst's enqueue, in
	// µs; null elsewhere.
	EnqueueRedisCPUUsPerJob *float64 `json:"enqueue_redis_cpu_us_per_job"`
	// Heap allocations of the whole harness process (runtime.MemStats
	// Mallocs and TotalAlloc deltas) per job: over the burst's enqueue (per
	// job stored; null elsewhere) and over the drain window (per job
	// handled). Systems run one at a time, so a phase counts the running
	// system's clients and workers plus the harness's own producers and
	// recorder, which are the same for every system.
	EnqueueAllocsPerJob *float64 `json:"enqueue_allocs_per_job"`
	EnqueueBytesPerJob  *float64 `json:"enqueue_alloc_bytes_per_job"`
	WindowAllocsPerJob  *float64 `json:"window_allocs_per_job"`
	WindowBytesPerJob   *float64 `json:"window_alloc_bytes_per_job"`
	// Backlog only: used_memory growth per backlog job over the bulk load.
	BacklogBytesPerJob *float64 `json:"backlog_bytes_per_job"`
}

// allocSnapshot is the process's cumulative heap allocations.
type allocSnapshot struct{ mallocs, bytes uint64 }

func readAllocs() allocSnapshot {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return allocSnapshot{mallocs: m.Mallocs, bytes: m.TotalAlloc}
}

// perJob returns the allocations and bytes from a to b per job.
func (a allocSnapshot) perJob(b allocSnapshot, jobs int) (allocs, bytes *float64) {
	if jobs <= 0 {
		return nil, nil
	}
	x := float64(b.mallocs-a.mallocs) / float64(jobs)
	y := float64(b.bytes-a.bytes) / float64(jobs)
	return &x, &y
}

// RunResult is one system × workload × concurrency run of one round.
type RunResult struct {
	Round       int     `json:"round"`
	System      string  `json:"system"`
	Workload    string  `json:"workload"`
	Backlog     int     `json:"backlog"`
	Concurrency int     `json:"concurrency"`
	Error       string  `json:"error,omitempty"`
	WallSeconds float64 `json:"wall_seconds"`
	Figures     Figures `json:"figures"`

	samples  []jobSample // per-job times for -lateness-csv
	lateness []float64   // spread: every handled job's lateness in ms, sorted, for -svg
}

// jobSample holds one job's times in ms since the start of enqueueing.
type jobSample struct {
	ID        string
	ReadyMs   float64
	EnqMs     float64
	HandledMs float64 // NaN if never handled
}

func makePayload(i int) []byte {
	return []byte(fmt.Sprintf(`{"order_id":"ord-%06d","amount_cents":%d}`, i%1000000, 100+(i*7919)%99900))
}

func makeJobs(prefix string, n int) []Job {
	js := make([]Job, n)
	for i := range js {
		js[i] = Job{ID: prefix + strconv.Itoa(i), Payload: makePayload(i)}
	}
	return js
}

// recorder collects handler starts; job ids are prefix + index.
type recorder struct {
	prefix   string
	first    []atomic.Int64 // unix ns of first handler start, 0 = never
	count    []atomic.Int32
	distinct atomic.Int64
	total    atomic.Int64
	stray    atomic.Int64
	last     atomic.Int64
}

func newRecorder(prefix string, n int) *recorder {
	return &recorder{prefix: prefix, first: make([]atomic.Int64, n), count: make([]atomic.Int32, n)}
}

func (r *recorder) handle(id string) {
	now := time.Now().UnixNano()
	rest, ok := strings.CutPrefix(id, r.prefix)
	idx, err := strconv.Atoi(rest)
	if !ok || err != nil || idx < 0 || idx >= len(r.first) {
		r.stray.Add(1)
		return
	}
	r.total.Add(1)
	if r.count[idx].Add(1) == 1 {
		r.first[idx].Store(now)
		r.distinct.Add(1)
	}
	for {
		l := r.last.Load()
		if now <= l || r.last.CompareAndSwap(l, now) {
			return
		}
	}
}

// wait returns once expected distinct jobs were handled, or once deadline
// has passed and handling has stalled (nothing handled for stallWindow), or
// at hard at the latest.
func (r *recorder) wait(ctx context.Context, expected int64, deadline, hard time.Time) error {
	const stallWindow = 5 * time.Second
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		if r.distinct.Load() >= expected {
			return nil
		}
		now := time.Now()
		if now.After(deadline) {
			last := r.last.Load()
			if last == 0 || now.Sub(time.Unix(0, last)) > stallWindow || now.After(hard) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

type produceResult struct {
	enqRet   []int64 // unix ns when each Enqueue returned
	failed   []bool
	ok, errs int
	elapsed  time.Duration
	firstErr error
}

// produce enqueues jobs with producers goroutines, each calling the
// single-job Enqueue; before, if set, runs just before each call.
func produce(ctx context.Context, sys System, jobs []Job, producers int, before func(*Job)) produceResult {
	res := produceResult{enqRet: make([]int64, len(jobs)), failed: make([]bool, len(jobs))}
	var next atomic.Int64
	var errs atomic.Int64
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) {
					return
				}
				if before != nil {
					before(&jobs[i])
				}
				err := sys.Enqueue(ctx, jobs[i])
				res.enqRet[i] = time.Now().UnixNano()
				if err != nil {
					res.failed[i] = true
					errs.Add(1)
					errOnce.Do(func() { res.firstErr = err })
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.errs = int(errs.Load())
	for i := range jobs {
		if res.enqRet[i] == 0 {
			res.failed[i] = true // never attempted (interrupted)
		} else if !res.failed[i] {
			res.ok++
		}
	}
	return res
}

// bulkLoad schedules count jobs by the fastest path: the batch API in
// chunks of 1000 from 4 goroutines, or else single enqueues from 32.
func bulkLoad(ctx context.Context, sys System, count int, gen func(i int) Job) error {
	if count == 0 {
		return nil
	}
	const chunk = 1000
	chunkJobs := func(c int) []Job {
		lo, hi := c*chunk, min((c+1)*chunk, count)
		js := make([]Job, 0, hi-lo)
		for i := lo; i < hi; i++ {
			js = append(js, gen(i))
		}
		return js
	}
	err := sys.EnqueueBatch(ctx, chunkJobs(0))
	useBatch := err == nil
	if err != nil && !errors.Is(err, errNoBatch) {
		return fmt.Errorf("bulk load: %w", err)
	}
	nChunks := (count + chunk - 1) / chunk
	var next atomic.Int64
	if useBatch {
		next.Store(1)
	}
	workers := 4
	if !useBatch {
		workers = 32
	}
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c := int(next.Add(1) - 1)
				if c >= nChunks {
					return
				}
				js := chunkJobs(c)
				if useBatch {
					err = sys.EnqueueBatch(ctx, js)
				} else {
					for _, j := range js {
						if err = sys.Enqueue(ctx, j); err != nil {
							break
						}
					}
				}
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("bulk load: %w", firstErr)
	}
	return ctx.Err()
}

// measureBatch times n jobs scheduled an hour ahead through EnqueueBatch
// (batchSize per call, producers goroutines). It returns nil if the system
// has no batch API.
func measureBatch(ctx context.Context, sys System, prefix string, n, batchSize, producers int) (*float64, error) {
	base := time.Now().Add(time.Hour)
	jobs := makeJobs(prefix, n)
	for i := range jobs {
		jobs[i].ReadyAt = base.Add(time.Duration(i) * time.Millisecond)
	}
	nBatches := (n + batchSize - 1) / batchSize
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	start := time.Now()
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				b := int(next.Add(1) - 1)
				if b >= nBatches {
					return
				}
				if err := sys.EnqueueBatch(ctx, jobs[b*batchSize:min((b+1)*batchSize, n)]); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if errors.Is(firstErr, errNoBatch) {
		return nil, nil
	}
	if firstErr != nil {
		return nil, fmt.Errorf("batch enqueue: %w", firstErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rate := float64(n) / elapsed.Seconds()
	return &rate, nil
}

func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// runOne runs one system on one workload at one concurrency against a
// flushed Redis. prefix makes the run's job ids unique.
func runOne(ctx context.Context, admin *redisAdmin, cfg benchConfig, sysName string, w workloadSpec, conc, round int, prefix string, keepSamples bool) (res RunResult, err error) {
	res = RunResult{Round: round, System: sysName, Workload: w.Label(), Backlog: w.Backlog, Concurrency: conc}
	wallStart := time.Now()
	defer func() {
		res.WallSeconds = time.Since(wallStart).Seconds()
		if err != nil {
			res.Error = err.Error()
		}
	}()
	if err := admin.FlushAll(ctx); err != nil {
		return res, fmt.Errorf("flushall: %w", err)
	}
	runtime.GC()
	sys, err := registry[sysName](cfg.URL)
	if err != nil {
		return res, fmt.Errorf("new %s: %w", sysName, err)
	}
	defer sys.Close()
	started := false
	stop := func() error {
		if !started {
			return nil
		}
		started = false
		return sys.Stop()
	}
	defer stop()
	n := cfg.N
	jobs := makeJobs(prefix, n)
	r := newRecorder(prefix, n)
	startConsumers := func() error {
		if err := sys.Start(ctx, conc, r.handle); err != nil {
			return fmt.Errorf("start: %w", err)
		}
		started = true
		return nil
	}

	var (
		p           produceResult
		t0          time.Time // start of enqueueing
		windowStart time.Time // start of the drain window
		cpu0        float64
		rcpu0       float64
		alloc0      allocSnapshot // at the start of the drain window
		rcpuErr     error
		enqC0       redisCounters // before the burst's enqueue
		winC0       redisCounters // at the start of the drain window
		enqErr      error
		winErr      error
	)
	switch w.Kind {
	case "spread":
		// Ready times uniform over [t0+1s, t0+6s]; same draw for every
		// system of a round.
		rng := rand.New(rand.NewPCG(uint64(round), uint64(conc)))
		offsets := make([]time.Duration, n)
		for i := range offsets {
			offsets[i] = time.Second + time.Duration(rng.Int64N(int64(5*time.Second)))
		}
		if err := startConsumers(); err != nil {
			return res, err
		}
		cpu0 = processCPU()
		rcpu0, rcpuErr = admin.CPU(ctx)
		winC0, winErr = admin.Counters(ctx)
		alloc0 = readAllocs()
		t0 = time.Now()
		windowStart = t0
		for i := range jobs {
			jobs[i].ReadyAt = t0.Add(offsets[i])
		}
		p = produce(ctx, sys, jobs, cfg.Producers, nil)
	case "burst":
		enqRCPU0, enqRCPUErr := admin.CPU(ctx)
		enqC0, enqErr = admin.Counters(ctx)
		enqAlloc0 := readAllocs()
		t0 = time.Now()
		for i := range jobs {
			jobs[i].ReadyAt = t0
		}
		p = produce(ctx, sys, jobs, cfg.Producers, nil)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		alloc0 = readAllocs()
		res.Figures.EnqueueAllocsPerJob, res.Figures.EnqueueBytesPerJob = enqAlloc0.perJob(alloc0, p.ok)
		cpu0 = processCPU()
		rcpu0, rcpuErr = admin.CPU(ctx)
		winC0, winErr = admin.Counters(ctx)
		if enqErr == nil && winErr == nil {
			res.Figures.EnqueueRedis = deltaPerJob(enqC0, winC0, p.ok)
		}
		if enqRCPUErr == nil && rcpuErr == nil && p.ok > 0 {
			v := (rcpu0 - enqRCPU0) * 1e6 / float64(p.ok)
			res.Figures.EnqueueRedisCPUUsPerJob = &v
		}
		windowStart = time.Now()
		if err := startConsumers(); err != nil {
			return res, err
		}
	case "backlog":
		base := time.Now().Add(time.Hour)
		bp := prefix + "bl"
		used0, usedErr := admin.UsedMemory(ctx)
		err := bulkLoad(ctx, sys, w.Backlog, func(i int) Job {
			// Spread over the following hour so the set is not one score.
			off := time.Duration(uint64(i)*2654435761%3600000) * time.Millisecond
			return Job{ID: bp + strconv.Itoa(i), ReadyAt: base.Add(off), Payload: makePayload(i)}
		})
		if err != nil {
			return res, err
		}
		if used1, err := admin.UsedMemory(ctx); err == nil && usedErr == nil && w.Backlog > 0 {
			v := float64(used1-used0) / float64(w.Backlog)
			res.Figures.BacklogBytesPerJob = &v
		}
		if err := startConsumers(); err != nil {
			return res, err
		}
		runtime.GC()
		cpu0 = processCPU()
		rcpu0, rcpuErr = admin.CPU(ctx)
		winC0, winErr = admin.Counters(ctx)
		alloc0 = readAllocs()
		t0 = time.Now()
		windowStart = t0
		// A stream of jobs due at once: ready = the moment of the call.
		p = produce(ctx, sys, jobs, cfg.Producers, func(j *Job) { j.ReadyAt = time.Now() })
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if p.firstErr != nil {
		fmt.Fprintf(stderr, "  %s: %d enqueue errors, first: %v\n", sysName, p.errs, p.firstErr)
	}

	// Wait until every enqueued job was handled, or the last effective ready
	// time + lost-timeout has passed and handling has stalled.
	maxEff := windowStart
	for i := range jobs {
		if p.enqRet[i] == 0 {
			continue
		}
		eff := effectiveReady(jobs[i].ReadyAt, p.enqRet[i])
		if eff.After(maxEff) {
			maxEff = eff
		}
	}
	deadline := maxEff.Add(cfg.LostTimeout)
	if err := r.wait(ctx, int64(p.ok), deadline, deadline.Add(10*cfg.LostTimeout)); err != nil {
		return res, err
	}
	alloc1 := readAllocs()
	cpu1 := processCPU()
	rcpu1, rcpuErr1 := admin.CPU(ctx)
	winC1, winErr1 := admin.Counters(ctx)
	sleepCtx(ctx, cfg.Settle) // late duplicates
	if err := stop(); err != nil {
		return res, fmt.Errorf("stop: %w", err)
	}

	f := &res.Figures
	f.Enqueued = p.ok
	f.EnqueueErrors = p.errs
	f.EnqueueSeconds = p.elapsed.Seconds()
	if p.elapsed > 0 {
		f.EnqueuePerSec = float64(p.ok) / p.elapsed.Seconds()
	}
	f.Handled = int(r.distinct.Load())
	f.Deliveries = int(r.total.Load())
	f.Stray = int(r.stray.Load())
	if last := r.last.Load(); last > 0 {
		d := time.Unix(0, last).Sub(windowStart)
		f.DrainSeconds = d.Seconds()
		if d > 0 {
			f.DrainPerSec = float64(f.Handled) / d.Seconds()
		}
	}
	if f.Handled > 0 {
		f.CPUSecPer100k = (cpu1 - cpu0) * 100000 / float64(f.Handled)
		if rcpuErr == nil && rcpuErr1 == nil {
			v := (rcpu1 - rcpu0) * 100000 / float64(f.Handled)
			f.RedisCPUSecPer100k = &v
		}
		if winErr == nil && winErr1 == nil {
			f.WindowRedis = deltaPerJob(winC0, winC1, f.Handled)
		}
		f.WindowAllocsPerJob, f.WindowBytesPerJob = alloc0.perJob(alloc1, f.Handled)
	}

	lat := make([]float64, 0, n)
	afterReady := 0
	for i := range jobs {
		ready := jobs[i].ReadyAt
		first := r.first[i].Load()
		if p.enqRet[i] != 0 && p.enqRet[i] > ready.UnixNano() {
			afterReady++
		}
		if r.count[i].Load() > 1 {
			f.Duplicates++
		}
		if first == 0 {
			if !p.failed[i] {
				f.Lost++
			}
			continue
		}
		eff := effectiveReady(ready, p.enqRet[i])
		lat = append(lat, float64(first-eff.UnixNano())/1e6)
		if first < ready.UnixNano() {
			f.Early++
			if first < ready.Add(-time.Millisecond).UnixNano() {
				f.EarlyOver1ms++
			}
		}
	}
	if w.Kind == "spread" {
		f.EnqueuedAfterReady = &afterReady
	}
	sort.Float64s(lat)
	if len(lat) > 0 {
		p50, p99, mx := percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
		f.LatenessP50Ms, f.LatenessP99Ms, f.LatenessMaxMs = &p50, &p99, &mx
	}
	if w.Kind == "spread" {
		res.lateness = lat
	}
	if keepSamples {
		res.samples = make([]jobSample, n)
		for i := range jobs {
			s := jobSample{ID: jobs[i].ID, ReadyMs: msSince(t0, jobs[i].ReadyAt.UnixNano()), EnqMs: math.NaN(), HandledMs: math.NaN()}
			if p.enqRet[i] != 0 {
				s.EnqMs = msSince(t0, p.enqRet[i])
			}
			if first := r.first[i].Load(); first != 0 {
				s.HandledMs = msSince(t0, first)
			}
			res.samples[i] = s
		}
	}

	// Batch enqueue rate, consumers stopped, backlog (if any) still there.
	f.EnqueueBatchPerSec, err = measureBatch(ctx, sys, prefix+"x", n, cfg.BatchSize, cfg.Producers)
	if err != nil {
		return res, err
	}
	return res, nil
}

// effectiveReady is what lateness is measured against: the ready time, or
// the moment the job's Enqueue returned if that was later.
func effectiveReady(ready time.Time, enqRetNs int64) time.Time {
	if enq := time.Unix(0, enqRetNs); enqRetNs != 0 && enq.After(ready) {
		return enq
	}
	return ready
}

func msSince(t0 time.Time, ns int64) float64 {
	return float64(ns-t0.UnixNano()) / 1e6
}

// MemoryResult is one Redis memory measurement of one system.
type MemoryResult struct {
	Round       int     `json:"round"`
	System      string  `json:"system"`
	Jobs        int     `json:"jobs"`
	UsedBefore  int64   `json:"used_memory_before"`
	UsedAfter   int64   `json:"used_memory_after"`
	BytesPerJob float64 `json:"bytes_per_job"`
	Error       string  `json:"error,omitempty"`
}

// measureMemory reports used_memory growth per job for n jobs scheduled an
// hour ahead, loaded by the bulk path, with no consumers running.
func measureMemory(ctx context.Context, admin *redisAdmin, cfg benchConfig, sysName string, round int, prefix string) (m MemoryResult, err error) {
	m = MemoryResult{Round: round, System: sysName, Jobs: cfg.N}
	defer func() {
		if err != nil {
			m.Error = err.Error()
		}
	}()
	if err := admin.FlushAll(ctx); err != nil {
		return m, err
	}
	sys, err := registry[sysName](cfg.URL)
	if err != nil {
		return m, err
	}
	closed := false
	defer func() {
		if !closed {
			sys.Close()
		}
	}()
	sleepCtx(ctx, 50*time.Millisecond)
	if m.UsedBefore, err = admin.UsedMemory(ctx); err != nil {
		return m, err
	}
	base := time.Now().Add(time.Hour)
	err = bulkLoad(ctx, sys, cfg.N, func(i int) Job {
		return Job{ID: prefix + strconv.Itoa(i), ReadyAt: base.Add(time.Duration(i) * time.Millisecond), Payload: makePayload(i)}
	})
	if err != nil {
		return m, err
	}
	// Drop the system's connections so their buffers are not counted.
	closed = true
	sys.Close()
	sleepCtx(ctx, 100*time.Millisecond)
	if m.UsedAfter, err = admin.UsedMemory(ctx); err != nil {
		return m, err
	}
	m.BytesPerJob = float64(m.UsedAfter-m.UsedBefore) / float64(cfg.N)
	return m, nil
}
