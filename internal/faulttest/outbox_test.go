//go:build linux

package faulttest_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/pgtest"
	"github.com/delayq/delayq/internal/redistest"
	"github.com/delayq/delayq/job"
	"github.com/delayq/delayq/outbox"
)

// outboxArgs are the arguments of the outbox suite's jobs.
type outboxArgs struct {
	N int `json:"n"`
}

// relayProc is one faultrelay process.
type relayProc struct {
	name string
	cmd  *exec.Cmd
	out  string
	done chan struct{}
}

func startRelayProc(t *testing.T, bin, dsn, url, ns, name string) *relayProc {
	t.Helper()
	outPath := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "FAULTRELAY_DSN="+dsn, "FAULTRELAY_URL="+url, "FAULTRELAY_NS="+ns, "FAULTRELAY_NAME="+name)
	cmd.Stdout, cmd.Stderr = f, f
	// The kernel kills the relay if the test binary dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &relayProc{name: name, cmd: cmd, out: outPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL, 0) })
	return p
}

// signal sends sig and waits up to timeout (forever if 0) for the exit,
// sending SIGKILL after it.
func (p *relayProc) signal(sig syscall.Signal, timeout time.Duration) {
	if sig == syscall.SIGTERM {
		// A SIGTERM before the command handles it would kill it (a relay
		// restarted just now may still be starting).
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if out, _ := os.ReadFile(p.out); strings.Contains(string(out), "faultrelay started") {
				break
			}
			select {
			case <-p.done:
				deadline = time.Time{}
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	_ = p.cmd.Process.Signal(sig)
	if timeout == 0 {
		<-p.done
		return
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// buildCommand builds one of the suite's commands into the test's
// directory.
func buildCommand(t *testing.T, name string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(goBin, "build", "-o", out, "github.com/delayq/delayq/internal/faulttest/cmd/"+name)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, b)
	}
	return out
}

var relayStatsRE = regexp.MustCompile(`faultrelay (\S+) stats enqueued=(\d+) duplicates=(\d+) errors=(\d+)`)

// TestOutboxRelayFaults enqueues 10,000 jobs through a PostgreSQL outbox
// in 1,000 transactions of 10, a tenth of them rolled back, while two
// faultrelay processes move them to Redis: one is killed with SIGKILL every
// 2 seconds and started again, and Redis is stopped for 10 seconds in the
// middle. Afterwards every job of a committed transaction is in Redis
// exactly once, no job of a rolled-back one is anywhere, and the outbox is
// empty.
func TestOutboxRelayFaults(t *testing.T) {
	skipSlow(t)
	bin := buildCommand(t, "faultrelay")
	srv := startServer(t, "--appendonly", "yes", "--appendfsync", "always")
	const ns, queue = "outbox", "orders"
	s := newSuite(t, srv, ns, queue)
	pg := pgtest.Start(t)
	db, dsn := pg.NewDB(t)
	ob, err := outbox.New(db, outbox.Postgres(), outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(s.ctx); err != nil {
		t.Fatal(err)
	}
	typ := job.New[outboxArgs]("fault.outbox", job.Queue(queue))

	url := "redis://" + srv.Addr() + "/0"
	stable := startRelayProc(t, bin, dsn, url, ns, "stable")
	started := 1
	victim := startRelayProc(t, bin, dsn, url, ns, "victim1")

	// Two producers, 500 transactions of 10 jobs each, over about 30 s.
	const txs, perTx = 1000, 10
	var mu sync.Mutex
	committed, rolledBack := map[string]bool{}, map[string]bool{}
	var produceErr error
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < txs; i += 2 {
				ids, err := produce(s.ctx, db, ob, typ, i, perTx, i%10 == 3)
				mu.Lock()
				switch {
				case err != nil && produceErr == nil:
					produceErr = err
				case i%10 == 3:
					for _, id := range ids {
						rolledBack[id] = true
					}
				default:
					for _, id := range ids {
						committed[id] = true
					}
				}
				mu.Unlock()
				if err != nil {
					return
				}
				time.Sleep(time.Duration(50+rand.IntN(20)) * time.Millisecond)
			}
		}()
	}
	produced := make(chan struct{})
	go func() { wg.Wait(); close(produced) }()

	// Kill the victim every 2 s; stop Redis for 10 s from the 8th second.
	start := time.Now()
	kills := 0
	redisStopped, redisBack := false, false
	var outage time.Duration
	deadline := start.Add(100 * time.Second)
	emptied := func() bool {
		select {
		case <-produced:
		default:
			return false
		}
		l, err := ob.Lag(s.ctx)
		return err == nil && l.Pending == 0
	}
	for !emptied() && time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		victim.signal(syscall.SIGKILL, 0)
		kills++
		started++
		victim = startRelayProc(t, bin, dsn, url, ns, "victim"+strconv.Itoa(started))
		switch el := time.Since(start); {
		case !redisStopped && el >= 8*time.Second:
			srv.Stop()
			redisStopped = true
			outage = el
		case redisStopped && !redisBack && el-outage >= 10*time.Second:
			srv.Restart(t)
			redisBack = true
			outage = time.Since(start) - outage
		}
	}
	if !redisBack {
		t.Fatalf("the run ended before Redis was restarted (%v)", time.Since(start))
	}
	<-produced
	if produceErr != nil {
		t.Fatalf("producer: %v", produceErr)
	}
	// Both relays drain what is left, then stop gracefully.
	redistest.WaitFor(t, 30*time.Second, "outbox drained", func() bool {
		l, err := ob.Lag(s.ctx)
		return err == nil && l.Pending == 0
	})
	var dups, enqueued int
	for _, p := range []*relayProc{stable, victim} {
		p.signal(syscall.SIGTERM, 10*time.Second)
		out, _ := os.ReadFile(p.out)
		m := relayStatsRE.FindSubmatch(out)
		if p.cmd.ProcessState.ExitCode() != 0 || m == nil {
			t.Errorf("relay %s exited with %d:\n%s", p.name, p.cmd.ProcessState.ExitCode(), out)
			continue
		}
		e, _ := strconv.Atoi(string(m[2]))
		d, _ := strconv.Atoi(string(m[3]))
		enqueued, dups = enqueued+e, dups+d
	}

	// The outbox is empty: no pending row, no failed row.
	var rows int
	if err := db.QueryRowContext(s.ctx, "SELECT COUNT(*) FROM delayq_outbox").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("%d rows left in the outbox", rows)
	}
	// Redis holds every committed job once and no rolled-back one.
	jobsKey, schedKey := ns+":{"+queue+"}:jobs", ns+":{"+queue+"}:scheduled"
	ids, err := s.rdb.HKeys(s.ctx, jobsKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	scheduled, err := s.rdb.ZCard(s.ctx, schedKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	inRedis := map[string]bool{}
	var strays []string
	for _, id := range ids {
		inRedis[id] = true
		if !committed[id] {
			strays = append(strays, id)
		}
	}
	var missing []string
	for id := range committed {
		if !inRedis[id] {
			missing = append(missing, id)
		}
	}
	if len(committed) != txs*perTx*9/10 || len(rolledBack) != txs*perTx/10 {
		t.Errorf("committed %d and rolled back %d jobs, want %d and %d", len(committed), len(rolledBack), txs*perTx*9/10, txs*perTx/10)
	}
	if len(missing) > 0 {
		t.Errorf("%d committed jobs are not in Redis, e.g. %v", len(missing), missing[:min(10, len(missing))])
	}
	if len(strays) > 0 {
		t.Errorf("%d jobs in Redis were not committed (rolled back: %v), e.g. %v", len(strays), rolledBack[strays[0]], strays[:min(10, len(strays))])
	}
	if len(ids) != len(committed) || scheduled != int64(len(committed)) {
		t.Errorf("Redis holds %d envelopes and %d scheduled entries, want %d of each", len(ids), scheduled, len(committed))
	}
	// Each body is the job its id names.
	for _, id := range ids[:min(len(ids), 200)] {
		body, err := s.rdb.HGet(s.ctx, jobsKey, id).Result()
		if err != nil {
			t.Fatal(err)
		}
		env, err := job.Decode([]byte(body))
		n, _ := strconv.Atoi(strings.TrimPrefix(id, "ob"))
		if err != nil || env.Type != "fault.outbox" || string(env.Payload) != fmt.Sprintf(`{"n":%d}`, n) {
			t.Errorf("job %s holds %q (%v)", id, body, err)
		}
	}

	// Clean up: cancel the jobs, so the leak checks see an empty queue.
	for _, id := range ids {
		if _, err := s.b.Cancel(s.ctx, queue, id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	// A relay that stops gracefully removes its status; one killed with
	// SIGKILL stays listed (Stale once its intervals pass) for an
	// operator to see, so at most one entry per kill is left.
	relays, err := outbox.Relays(s.ctx, s.rdb, s.ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(relays) > kills {
		t.Errorf("%d relays listed after the run, want at most the %d killed ones: %+v", len(relays), kills, relays)
	}
	dead := s.finish(t, []string{queue}, keyspace.OutboxRelaysKey(s.ns))
	summary(t, "jobs committed", len(committed), "rolled back", len(rolledBack), "relay kills", kills,
		"redis outage", outage.Round(100*time.Millisecond), "in redis", len(ids), "missing", len(missing), "strays", len(strays),
		"outbox rows left", rows, "dead", dead,
		"replays", fmt.Sprintf("%d duplicates seen by the two relays that stopped gracefully (%d enqueued by them): rows a killed relay had stored in Redis but not yet deleted", dups, enqueued),
		"took", time.Since(start).Round(time.Second))
}

// produce writes one transaction of n jobs (ids ob<tx*n+j>) and commits
// it, or rolls it back when rollback is set. It returns the ids.
func produce(ctx context.Context, db *sql.DB, ob *outbox.Outbox, typ *job.Type[outboxArgs], tx, n int, rollback bool) ([]string, error) {
	sqlTx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sqlTx.Rollback() }()
	ids := make([]string, 0, n)
	for j := range n {
		k := tx*n + j
		env, err := outbox.EnqueueTyped(ctx, ob, sqlTx, typ, outboxArgs{N: k}, job.ID(fmt.Sprintf("ob%05d", k)), job.In(time.Hour))
		if err != nil {
			return nil, err
		}
		ids = append(ids, env.ID)
	}
	if rollback {
		return ids, sqlTx.Rollback()
	}
	return ids, sqlTx.Commit()
}
