package pgtest_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.StopShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			println("pgtest: goroutines leaked:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

// Each test database is its own: a table made in one is not in another.
func TestNewDBIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.New(t), pgtest.New(t)
	if _, err := a.ExecContext(ctx, "CREATE TABLE only_here (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ExecContext(ctx, "SELECT * FROM only_here"); err == nil || !strings.Contains(err.Error(), "only_here") {
		t.Fatalf("the table made in one test database is visible in another: %v", err)
	}
	var name string
	if err := a.QueryRowContext(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, "t_testnewdbisolated_") {
		t.Errorf("database name %q does not name the test", name)
	}
}

// A server of its own listens on loopback only, keeps its data and socket
// in the test's directory, runs with fsync off, and is gone after Stop.
func TestStartStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.Start(t)
	db, dsn := s.NewDB(t)
	if !strings.Contains(dsn, "@127.0.0.1:") {
		t.Errorf("DSN %q is not on 127.0.0.1", dsn)
	}
	for setting, want := range map[string]string{"listen_addresses": "127.0.0.1", "fsync": "off"} {
		var got string
		if err := db.QueryRowContext(ctx, "SHOW "+setting).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", setting, got, want)
		}
	}
	var dir string
	if err := db.QueryRowContext(ctx, "SHOW unix_socket_directories").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(s.Port()))); err != nil {
		t.Errorf("no socket in %s: %v", dir, err)
	}
	db.Close()
	s.Stop()
	other, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.PingContext(ctx); err == nil {
		t.Error("the server still answers after Stop")
	}
}
