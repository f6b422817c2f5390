package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/job"
)

// The fairness run (issue #37): key A floods N jobs due at once while key
// B enqueues one job every -fair-every for -fair-duration, drained by
// -procs worker processes of this binary (rateLimitWorker) of
// -proc-concurrency each. Three modes, interleaved each round:
//
//   - plain: the same jobs without keys, turns off: A's drain rate to
//     compare with, and B's lateness in ready order (behind the flood);
//   - alone: B's jobs only, with its key, turns on: B's lateness with no
//     flood;
//   - fair: A's flood and B's jobs with their keys, turns on
//     (Broker.SetKeyFairness).
//
// A job's lateness is its handler's start (in the worker process) minus
// the moment its Enqueue returned (in this one), on the machine's clock.
// B's producer starts once the workers have started a job (one of A's, or
// in mode alone a warm-up job without a key), so that no mode counts the
// workers' start-up against B.
type fairConfig struct {
	N, Procs, Concurrency int
	Every, Duration       time.Duration
	Timeout               time.Duration
}

// fairResult is the figures of one mode of one round.
type fairResult struct {
	Mode             string
	ARate            float64       // A's jobs / (its last start − its first), jobs/s
	BP50, BP99, BMax time.Duration // B's lateness
	B                int           // B's jobs handled
	Distinct, Total  int           // distinct ids handled, jobs enqueued
}

var fairModes = []string{"plain", "alone", "fair"}

// runFairness does one mode of the fairness run against url (FLUSHALLed
// first through admin).
func runFairness(ctx context.Context, url string, admin *redisAdmin, c fairConfig, mode string) (fairResult, error) {
	if err := admin.FlushAll(ctx); err != nil {
		return fairResult{}, err
	}
	rdb, err := newRedisClient(url, 8)
	if err != nil {
		return fairResult{}, err
	}
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Namespace: rlNamespace})
	if err != nil {
		return fairResult{}, err
	}
	keyed := mode != "plain"
	if err := b.SetKeyFairness(ctx, rlJob.Queue(), keyed); err != nil {
		return fairResult{}, err
	}
	flood := 0
	if mode != "alone" {
		flood = c.N
	}
	for i := 0; i < flood; i += 1000 {
		var envs []*job.Envelope
		for k := i; k < min(i+1000, flood); k++ {
			opts := []job.Option{job.ID(fmt.Sprintf("a%07d", k))}
			if keyed {
				opts = append(opts, job.Key("A"))
			}
			env, err := rlJob.Envelope(json.RawMessage(`{}`), opts...)
			if err != nil {
				return fairResult{}, err
			}
			envs = append(envs, env)
		}
		if err := b.Enqueue(ctx, envs...); err != nil {
			return fairResult{}, err
		}
	}
	if flood == 0 {
		if _, err := rlJob.Enqueue(ctx, b, json.RawMessage(`{}`), job.ID("warmup")); err != nil {
			return fairResult{}, err
		}
	}
	bN := int(c.Duration / c.Every)
	total := flood + bN
	if flood == 0 {
		total++
	}
	done := make(chan rlCompletion, total)
	stop, err := startWorkerProcs(url, c.Procs, c.Concurrency, done)
	if err != nil {
		return fairResult{}, err
	}
	var got []rlCompletion
	select {
	case x := <-done:
		got = append(got, x)
	case <-time.After(c.Timeout):
		stop()
		return fairResult{}, fmt.Errorf("fairness run %s: no job started within %v", mode, c.Timeout)
	}
	// B's producer: one job every c.Every, each's Enqueue return time kept.
	var mu sync.Mutex
	enqueued := map[string]time.Time{}
	var perr error
	var producer sync.WaitGroup
	producer.Add(1)
	go func() {
		defer producer.Done()
		tick := time.NewTicker(c.Every)
		defer tick.Stop()
		for i := range bN {
			id := fmt.Sprintf("b%05d", i)
			opts := []job.Option{job.ID(id)}
			if keyed {
				opts = append(opts, job.Key("B"))
			}
			if _, err := rlJob.Enqueue(ctx, b, json.RawMessage(`{}`), opts...); err != nil {
				mu.Lock()
				perr = err
				mu.Unlock()
				return
			}
			mu.Lock()
			enqueued[id] = time.Now()
			mu.Unlock()
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	deadline := time.After(c.Timeout)
wait:
	for len(got) < total {
		select {
		case x := <-done:
			got = append(got, x)
		case <-deadline:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	producer.Wait()
	stop()
	if perr != nil {
		return fairResult{}, perr
	}
	if len(got) < total {
		return fairResult{}, fmt.Errorf("fairness run %s: %d of %d jobs handled within %v", mode, len(got), total, c.Timeout)
	}
	r := fairResult{Mode: mode, Total: total}
	ids := map[string]bool{}
	var aFirst, aLast time.Time
	var late []time.Duration
	aN := 0
	for _, x := range got {
		ids[x.id] = true
		if x.id == "warmup" {
			continue
		}
		if strings.HasPrefix(x.id, "a") {
			aN++
			if aFirst.IsZero() || x.at.Before(aFirst) {
				aFirst = x.at
			}
			if x.at.After(aLast) {
				aLast = x.at
			}
			continue
		}
		mu.Lock()
		at, ok := enqueued[x.id]
		mu.Unlock()
		if !ok {
			return fairResult{}, fmt.Errorf("fairness run %s: job %s handled but never enqueued", mode, x.id)
		}
		late = append(late, x.at.Sub(at))
	}
	r.Distinct, r.B = len(ids), len(late)
	if aN > 1 {
		r.ARate = float64(aN-1) / aLast.Sub(aFirst).Seconds()
	}
	slices.Sort(late)
	r.BP50, r.BP99, r.BMax = late[len(late)/2], late[len(late)*99/100], late[len(late)-1]
	return r, nil
}

// printFairness prints one mode's figures.
func printFairness(out io.Writer, r fairResult) {
	a := "-"
	if r.ARate > 0 {
		a = fmt.Sprintf("%.0f/s", r.ARate)
	}
	fmt.Fprintf(out, "  %-5s A drain %s; B lateness p50 %v, p99 %v, max %v over %d jobs; distinct %d of %d\n",
		r.Mode, a, r.BP50.Round(100*time.Microsecond), r.BP99.Round(100*time.Microsecond), r.BMax.Round(100*time.Microsecond), r.B, r.Distinct, r.Total)
}

// printFairnessMedians prints the medians over the rounds and the issue's
// two ratios.
func printFairnessMedians(out io.Writer, c fairConfig, res map[string][]fairResult) {
	med := func(v []float64) (float64, string) {
		slices.Sort(v)
		return v[len(v)/2], fmt.Sprintf("%.2f [%.2f–%.2f]", v[len(v)/2], v[0], v[len(v)-1])
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintf(out, "fairness: A floods %d jobs due at once, B enqueues one every %v for %v; %d worker processes × concurrency %d; medians [min–max] over %d rounds, interleaved:\n",
		c.N, c.Every, c.Duration, c.Procs, c.Concurrency, len(res["fair"]))
	var aRate, bP99 = map[string]float64{}, map[string]float64{}
	for _, m := range fairModes {
		var rate, p50, p99, mx []float64
		for _, r := range res[m] {
			rate = append(rate, r.ARate)
			p50 = append(p50, ms(r.BP50))
			p99 = append(p99, ms(r.BP99))
			mx = append(mx, ms(r.BMax))
		}
		var s1, s2, s3, s4 string
		aRate[m], s1 = med(rate)
		_, s2 = med(p50)
		bP99[m], s3 = med(p99)
		_, s4 = med(mx)
		fmt.Fprintf(out, "  %-5s A drain/s %s; B lateness ms p50 %s, p99 %s, max %s\n", m, s1, s2, s3, s4)
	}
	fmt.Fprintf(out, "  B's p99 with the flood / alone: %.2f× (target ≤ 2×, and ≤ 50 ms: %.1f ms); A's drain fair / without keys: %.2f× (target ≥ 0.8×)\n",
		bP99["fair"]/bP99["alone"], bP99["fair"], aRate["fair"]/aRate["plain"])
}
