// Command faultrelay is the relay process of the outbox fault suite in
// internal/faulttest: an outbox relay from a PostgreSQL table to Redis,
// which the suite kills with SIGKILL and starts again.
//
// It is configured by environment variables:
//
//	FAULTRELAY_DSN    PostgreSQL URL of the database with the outbox (required)
//	FAULTRELAY_URL    Redis URL (required)
//	FAULTRELAY_NS     broker namespace (required)
//	FAULTRELAY_NAME   this relay's name in its output (required)
//	FAULTRELAY_BATCH  rows per batch (default 200)
//
// SIGTERM or SIGINT stop it gracefully; it then prints one line
// "faultrelay NAME stats enqueued=N duplicates=N errors=N" and exits 0.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/outbox"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "faultrelay:", err)
		os.Exit(1)
	}
}

// quiet drops go-redis's own log lines (failed dials while Redis is down).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func run() error {
	// First of all, so that a SIGTERM sent right after the start still
	// means a graceful shutdown.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Println("faultrelay started") // the test signals only after this line
	redis.SetLogger(quiet{})
	dsn, url, ns, name := os.Getenv("FAULTRELAY_DSN"), os.Getenv("FAULTRELAY_URL"), os.Getenv("FAULTRELAY_NS"), os.Getenv("FAULTRELAY_NAME")
	if dsn == "" || url == "" || ns == "" || name == "" {
		return errors.New("FAULTRELAY_DSN, FAULTRELAY_URL, FAULTRELAY_NS and FAULTRELAY_NAME are required")
	}
	batch := 200
	if v := os.Getenv("FAULTRELAY_BATCH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("FAULTRELAY_BATCH=%q: want a positive integer", v)
		}
		batch = n
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		return err
	}
	ob, err := outbox.New(db, outbox.Postgres(), outbox.Options{})
	if err != nil {
		return err
	}
	logger := zerolog.New(os.Stderr).Level(zerolog.ErrorLevel).With().Timestamp().Str("relay", name).Logger()
	r, err := outbox.NewRelay(ob, b, outbox.RelayOptions{
		BatchSize:    batch,
		PollInterval: 50 * time.Millisecond,
		BatchTimeout: 2 * time.Second,
		MinBackoff:   50 * time.Millisecond,
		MaxBackoff:   time.Second,
		Logger:       &logger,
	})
	if err != nil {
		return err
	}
	if err := r.Run(ctx); err != nil {
		return err
	}
	s := r.Stats()
	fmt.Printf("faultrelay %s stats enqueued=%d duplicates=%d errors=%d\n", name, s.Enqueued, s.Duplicates, s.Errors)
	return nil
}
