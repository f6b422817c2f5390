package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Job is one delayed job as the harness sees it.
type Job struct {
	ID      string
	ReadyAt time.Time
	Payload []byte
}

// System is one delayed-job implementation under test. A fresh System is
// built by its Factory for every run, against a freshly flushed Redis.
type System interface {
	Name() string
	// Start starts consumers with the given concurrency; handle must be
	// called once per delivered job at handler start with the job's id.
	Start(ctx context.Context, concurrency int, handle func(id string)) error
	// Enqueue schedules one job with one call.
	Enqueue(ctx context.Context, j Job) error
	// EnqueueBatch schedules several jobs with the system's batch API, or
	// returns errNoBatch if the system has none.
	EnqueueBatch(ctx context.Context, js []Job) error
	// Stop stops the consumers started by Start and waits for them.
	Stop() error
	// Close releases the system's connections; Stop has been called first
	// if Start was.
	Close() error
}

// Factory builds a System connected to the Redis at redisURL
// (redis://host:port/db).
type Factory func(redisURL string) (System, error)

// errNoBatch is returned by EnqueueBatch of systems without a batch API.
var errNoBatch = errors.New("no batch enqueue API")

var registry = map[string]Factory{}

// optIn names the registered systems that run only when -systems names
// them: variants of a system with a non-default setting.
var optIn = map[string]bool{}

// register adds a system under name; each sys_*.go file calls it from init.
func register(name string, f Factory) {
	if _, dup := registry[name]; dup {
		panic("bench: system registered twice: " + name)
	}
	registry[name] = f
}

// knownSystems returns the registered names, sorted.
func knownSystems() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// defaultSystems returns the registered names that are not opt-in, sorted.
func defaultSystems() []string {
	var names []string
	for _, n := range knownSystems() {
		if !optIn[n] {
			names = append(names, n)
		}
	}
	return names
}

// lookupSystems resolves a comma-separated list of system names.
func lookupSystems(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, n := range splitList(list) {
		if _, ok := registry[n]; !ok {
			return nil, fmt.Errorf("unknown system %q (known: %s)", n, strings.Join(knownSystems(), ", "))
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no systems given (known: %s)", strings.Join(knownSystems(), ", "))
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// sleepCtx sleeps for d or until ctx is done; it reports whether ctx is
// still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
