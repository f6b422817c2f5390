package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server child process on a loopback port.
type redisServer struct {
	URL  string
	cmd  *exec.Cmd
	dir  string
	once sync.Once
	done chan struct{}
}

// startRedisServer starts bin on a free 127.0.0.1 port in a temporary
// directory, without persistence, and waits until it answers PING.
func startRedisServer(bin string) (*redisServer, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (%v); install it or set REDIS_URL", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := tryStartRedis(path)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tryStartRedis(path string) (*redisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "delayq-bench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--loglevel", "warning",
		"--logfile", dir+"/redis.log",
	)
	// The server must not outlive the harness, even if it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &redisServer{URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port), cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()

	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(dir + "/redis.log")
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server exited at start: %s", strings.TrimSpace(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("redis-server on port %d did not answer: %v", port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop terminates the server and removes its directory; it is idempotent.
func (s *redisServer) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		os.RemoveAll(s.dir)
	})
}

// newRedisClient opens a go-redis client for url with the given pool size
// (0 keeps the go-redis default).
func newRedisClient(url string, poolSize int) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	if poolSize > 0 {
		opt.PoolSize = poolSize
	}
	return redis.NewClient(opt), nil
}

// redisAdmin is the harness's own connection: flushing and INFO.
type redisAdmin struct{ c *redis.Client }

// adminReadTimeout bounds one reply to the harness's own connection: a
// synchronous FLUSHALL of a backlog of millions of jobs takes Redis
// seconds to tens of seconds, past go-redis's default of 5 s.
const adminReadTimeout = 10 * time.Minute

func newRedisAdmin(url string) (*redisAdmin, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	opt.PoolSize = 2
	opt.ReadTimeout = adminReadTimeout
	c := redis.NewClient(opt)
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: %w", url, err)
	}
	return &redisAdmin{c: c}, nil
}

func (a *redisAdmin) Close() error { return a.c.Close() }

func (a *redisAdmin) FlushAll(ctx context.Context) error {
	return a.c.FlushAll(ctx).Err()
}

// infoField returns one numeric field of INFO section.
func (a *redisAdmin) infoField(ctx context.Context, section, field string) (float64, error) {
	s, err := a.c.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && k == field {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("INFO %s has no field %s", section, field)
}

// UsedMemory returns used_memory from INFO memory, in bytes.
func (a *redisAdmin) UsedMemory(ctx context.Context) (int64, error) {
	v, err := a.infoField(ctx, "memory", "used_memory")
	return int64(v), err
}

// CPU returns the server's used_cpu_user + used_cpu_sys, in seconds.
func (a *redisAdmin) CPU(ctx context.Context) (float64, error) {
	u, err := a.infoField(ctx, "cpu", "used_cpu_user")
	if err != nil {
		return 0, err
	}
	s, err := a.infoField(ctx, "cpu", "used_cpu_sys")
	return u + s, err
}

func (a *redisAdmin) Version(ctx context.Context) string {
	s, err := a.c.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

// redisCounters is a snapshot of the server's request and command counters:
// total_reads_processed of INFO stats (read events on client connections,
// about one per round trip of a request–reply client, one per pipeline) and
// the calls and µs of every command in INFO commandstats (commands a script
// runs are counted under their own names as well as in the EVALSHA).
type redisCounters struct {
	Reads    float64
	Commands map[string]cmdStat
}

type cmdStat struct {
	Calls float64 `json:"calls"`
	Usec  float64 `json:"usec"`
}

// Counters reads the request and command counters.
func (a *redisAdmin) Counters(ctx context.Context) (redisCounters, error) {
	reads, err := a.infoField(ctx, "stats", "total_reads_processed")
	if err != nil {
		return redisCounters{}, err
	}
	s, err := a.c.Info(ctx, "commandstats").Result()
	if err != nil {
		return redisCounters{}, err
	}
	rc := redisCounters{Reads: reads, Commands: map[string]cmdStat{}}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st.Calls = f
			case "usec":
				st.Usec = f
			}
		}
		rc.Commands[name] = st
	}
	return rc, nil
}

// redisDelta is what the systems asked of Redis between two snapshots, per
// job: the harness's own INFO requests (one read each) are taken out.
type redisDelta struct {
	RequestsPerJob float64            `json:"requests_per_job"`
	CommandsPerJob float64            `json:"commands_per_job"`
	ScriptsPerJob  float64            `json:"scripts_per_job"`
	Commands       map[string]cmdStat `json:"commands"` // totals over the phase
}

func deltaPerJob(before, after redisCounters, jobs int) *redisDelta {
	if jobs <= 0 {
		return nil
	}
	d := &redisDelta{Commands: map[string]cmdStat{}}
	var cmds, scripts float64
	for name, a := range after.Commands {
		b := before.Commands[name]
		st := cmdStat{Calls: a.Calls - b.Calls, Usec: a.Usec - b.Usec}
		if st.Calls == 0 {
			continue
		}
		d.Commands[name] = st
		if name == "info" {
			continue
		}
		cmds += st.Calls
		switch name {
		case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
			scripts += st.Calls
		}
	}
	reads := after.Reads - before.Reads - d.Commands["info"].Calls
	d.RequestsPerJob = max(reads, 0) / float64(jobs)
	d.CommandsPerJob = cmds / float64(jobs)
	d.ScriptsPerJob = scripts / float64(jobs)
	return d
}
