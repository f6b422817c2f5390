// Command faultdashboard is the dashboard process of the hostile-payload
// test in internal/faulttest: the dashboard of one namespace served on a
// free loopback port, with its address space capped, so that a page that
// needs more memory than the cap ends the process ("fatal error: out of
// memory") instead of slowing the machine.
//
// It is configured by environment variables:
//
//	FAULTDASH_URL       Redis URL (required)
//	FAULTDASH_NS        broker namespace (required)
//	FAULTDASH_HEADROOM  MiB of address space the process may map beyond
//	                    what it has mapped once started (required; Linux)
//
// It prints "faultdashboard limit N" (the cap in bytes) and then
// "faultdashboard listening ADDR"; SIGTERM or SIGINT stop it gracefully
// (exit status 0).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/dashboard"
	"github.com/delayq/delayq/internal/dashserve"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "faultdashboard:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	url, ns := os.Getenv("FAULTDASH_URL"), os.Getenv("FAULTDASH_NS")
	headroom, err := strconv.Atoi(os.Getenv("FAULTDASH_HEADROOM"))
	if url == "" || ns == "" || err != nil || headroom <= 0 {
		return errors.New("FAULTDASH_URL, FAULTDASH_NS and FAULTDASH_HEADROOM (MiB, > 0) are required")
	}
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
	d, err := dashboard.New(b, dashboard.Options{})
	if err != nil {
		return err
	}
	limit, err := capAddressSpace(uint64(headroom) << 20)
	if err != nil {
		return err
	}
	fmt.Println("faultdashboard limit", limit)
	return dashserve.Serve(ctx, "127.0.0.1:0", d, dashserve.Options{Ready: func(a net.Addr) {
		fmt.Println("faultdashboard listening", a)
	}})
}
