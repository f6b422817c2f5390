package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// RequireEnv names the environment variable that turns a missing
// PostgreSQL into a test failure instead of a skip.
const RequireEnv = "DELAYQ_REQUIRE_POSTGRES"

const (
	// readyTimeout bounds how long a started postgres may take to accept
	// connections.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds a fast shutdown before SIGKILL is sent.
	stopTimeout = 10 * time.Second
	// portAttempts is how many free ports are tried when postgres cannot bind.
	portAttempts = 5
	// logTailLines is how many lines of server output a failure message shows.
	logTailLines = 30
)

// Server is a PostgreSQL server started by this package. Its methods are
// safe for concurrent use.
type Server struct {
	bin   binaries
	dir   string // owns data/ and the Unix socket
	log   string // server output
	port  int
	cred  *syscall.Credential // nil unless running as root
	admin *sql.DB             // connected to the "postgres" database

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{} // closed once proc has been waited for
}

// binaries are the paths of initdb and postgres of one installation.
type binaries struct {
	initdb, postgres string
}

// Start starts a PostgreSQL server for the test, in a directory under
// t.TempDir(), and stops it at the test's cleanup. It skips the test when
// the binaries are missing, unless DELAYQ_REQUIRE_POSTGRES=1.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := lookBinaries(t)
	dir := filepath.Join(t.TempDir(), "pg")
	s, err := start(bin, dir)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(s.Stop) // runs before t.TempDir's removal, which was registered first
	return s
}

var (
	sharedMu  sync.Mutex
	shared    *Server
	sharedDir string
	sharedErr error // sticky: once starting failed, every caller fails alike
)

// Shared returns the test binary's shared server, starting it on first
// use. The package's TestMain must call [StopShared] after the tests ran.
// It skips the test when the binaries are missing, unless
// DELAYQ_REQUIRE_POSTGRES=1.
func Shared(t testing.TB) *Server {
	t.Helper()
	bin := lookBinaries(t)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		var dir string
		if dir, sharedErr = os.MkdirTemp("", "delayq-pgtest-"); sharedErr == nil {
			sharedDir = dir
			shared, sharedErr = start(bin, filepath.Join(dir, "pg"))
		}
	}
	if sharedErr != nil {
		t.Fatalf("pgtest: shared server: %v", sharedErr)
	}
	return shared
}

// StopShared stops the shared server, if one was started, and removes its
// directory. Call it from TestMain after m.Run.
func StopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.Stop()
	}
	if sharedDir != "" {
		_ = os.RemoveAll(sharedDir)
	}
	shared, sharedDir, sharedErr = nil, "", errors.New("shared server already stopped")
}

// New returns a connection pool to a fresh database on the shared server,
// closed and dropped at the test's cleanup.
func New(t testing.TB) *sql.DB {
	t.Helper()
	db, _ := Shared(t).NewDB(t)
	return db
}

// lookBinaries finds initdb and postgres, or skips or fails t.
func lookBinaries(t testing.TB) binaries {
	t.Helper()
	bin, err := findBinaries()
	if err == nil {
		return bin
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("pgtest: %v (%s=1 requires PostgreSQL)", err, RequireEnv)
	}
	t.Skipf("pgtest: %v; install Debian's postgresql package (apt-get install -y postgresql), or set %s=1 to fail instead of skipping", err, RequireEnv)
	return binaries{}
}

// findBinaries looks on PATH, then in /usr/lib/postgresql/*/bin, newest
// version first.
func findBinaries() (binaries, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if i := filepath.Join(filepath.Dir(p), "initdb"); isExecutable(i) {
			return binaries{initdb: i, postgres: p}, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	version := func(dir string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		b := binaries{initdb: filepath.Join(d, "initdb"), postgres: filepath.Join(d, "postgres")}
		if isExecutable(b.initdb) && isExecutable(b.postgres) {
			return b, nil
		}
	}
	return binaries{}, errors.New("PostgreSQL server binaries (initdb, postgres) are neither on PATH nor in /usr/lib/postgresql/*/bin")
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// start initdb's a cluster in dir (which must not exist yet) and starts
// postgres on a free loopback port.
func start(bin binaries, dir string) (*Server, error) {
	s := &Server{bin: bin, dir: dir, log: filepath.Join(dir, "postgres.log")}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		cred, err := postgresUser()
		if err != nil {
			return nil, err
		}
		s.cred = cred
		if err := traversable(filepath.Dir(dir)); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	initdb := s.command(bin.initdb, "-D", s.dataDir(), "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	if err := s.runToLog(initdb); err != nil {
		return nil, fmt.Errorf("initdb: %w\n--- last lines of its output ---\n%s", err, logTail(s.log, logTailLines))
	}
	var lastErr error
	for range portAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if lastErr = s.launch(port); lastErr == nil {
			return s, nil
		}
		if !errors.Is(lastErr, errExited) {
			break
		}
	}
	return nil, fmt.Errorf("start postgres: %w\n--- last lines of its output ---\n%s", lastErr, logTail(s.log, logTailLines))
}

// postgresUser returns the credentials of the "postgres" system user.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, postgres must run as the postgres system user (Debian's postgresql package creates it): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user postgres has uid %q, gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// traversable lets other users through dir and the directories above it
// up to the system's temporary directory (a test's temporary directories
// are 0700), adding only the search bit. Directories outside the temporary
// directory are left alone: initdb then fails and says why.
func traversable(dir string) error {
	top := filepath.Clean(os.TempDir())
	for dir = filepath.Clean(dir); dir == top || strings.HasPrefix(dir, top+string(filepath.Separator)); dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(dir, fi.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("make %s traversable for the postgres user: %w", dir, err)
			}
		}
		if dir == top {
			break
		}
	}
	return nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// command returns a command for one of the server's binaries, run as the
// postgres user when running as root, with output appended to the log.
func (s *Server) command(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	cmd.SysProcAttr = sysProcAttr(s.cred)
	return cmd
}

// openLog opens the server's log for appending.
func (s *Server) openLog() (*os.File, error) {
	return os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
}

func (s *Server) runToLog(cmd *exec.Cmd) error {
	logf, err := s.openLog()
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	return cmd.Run()
}

// errExited reports that postgres exited before it accepted connections,
// most often because another process took the port between probe and bind.
var errExited = errors.New("postgres exited before accepting connections")

// launch starts postgres on port and waits until it accepts connections.
func (s *Server) launch(port int) error {
	cmd := s.command(s.bin.postgres, "-D", s.dataDir(), "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+s.dir,
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
	)
	logf, err := s.openLog()
	if err != nil {
		return err
	}
	// An *os.File needs no copying goroutine, so nothing is left behind for goleak.
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Start()
	logf.Close() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("start %s: %w", s.bin.postgres, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.proc, s.done, s.port = cmd, done, port
	s.mu.Unlock()

	admin, err := sql.Open("pgx", s.DSN("postgres"))
	if err != nil {
		s.Stop()
		return err
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			admin.Close()
			return errExited
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = admin.PingContext(ctx)
		cancel()
		if err == nil {
			s.mu.Lock()
			s.admin = admin
			s.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) {
			admin.Close()
			s.Stop()
			return fmt.Errorf("postgres on port %d did not accept connections within %v: %v", port, readyTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// DSN returns a URL for database db on the server, as user postgres, for
// the pgx driver (or any libpq-style client).
func (s *Server) DSN(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port())),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// NewDB creates a database for the test and returns a pool connected to
// it (driver "pgx") and its DSN. At the test's cleanup the pool is closed
// and the database dropped.
func (s *Server) NewDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	name := dbName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin := s.adminDB()
	if admin == nil {
		t.Fatal("pgtest: NewDB on a stopped server")
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	dsn := s.DSN(name)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("pgtest: open %s: %v", dsn, err)
	}
	t.Cleanup(func() {
		_ = db.Close()
		admin := s.adminDB()
		if admin == nil {
			return // stopped: the database went with the server
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return db, dsn
}

// adminDB returns the pool connected to the "postgres" database, or nil
// once the server was stopped.
func (s *Server) adminDB() *sql.DB {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admin
}

// dbName makes a database name from a test name: lower-case letters,
// digits and underscores, with a random suffix, at most 63 bytes.
func dbName(test string) string {
	var b strings.Builder
	b.WriteString("t_")
	for _, r := range strings.ToLower(test) {
		if b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	b.WriteByte('_')
	b.WriteString(hex.EncodeToString(suffix[:]))
	return b.String()
}

// Stop shuts the server down (fast shutdown: open sessions are ended) and
// waits for it, sending SIGKILL after 10 seconds. It does nothing if the
// server is down.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admin != nil {
		_ = s.admin.Close()
		s.admin = nil
	}
	if s.proc == nil {
		return
	}
	_ = s.proc.Process.Signal(syscall.SIGINT)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.done:
	case <-timer.C:
		_ = s.proc.Process.Kill()
		<-s.done
	}
	s.proc = nil
}

// freePort asks the kernel for a free loopback port and releases it.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, err
	}
	return port, nil
}

// logTail returns the last n lines of the file at path, or a note why it
// could not be read.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no output: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
