package broker

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/keyspace"
	"github.com/delayq/delayq/internal/protocol"
)

// wakeups subscribes to the wake-up notices of queues: a queue's name is
// sent on the returned channel when a job becomes its earliest one while
// nothing else there is due. Notices are hints (a slow reader misses some);
// callers still sleep no longer than until the next ready time they know
// of. stop unsubscribes and closes the channel.
func (b *Broker) wakeups(ctx context.Context, queues []string) (notices <-chan string, stop func()) {
	byChannel, channels := channelsOf(b.ns, queues, keyspace.WakeChannel)
	ps := b.rdb.Subscribe(ctx, channels...)
	// Wait (briefly) until the server confirms the subscriptions, so that a
	// job enqueued right after this returns is not missed. If Redis is
	// unreachable now, go on: go-redis subscribes again when it reconnects.
	var early []string // notices that arrived among the confirmations
	confirm, cancel := context.WithTimeout(ctx, 2*time.Second)
	for confirmed := 0; confirmed < len(channels); {
		msg, err := ps.ReceiveTimeout(confirm, 2*time.Second)
		if err != nil {
			break
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			confirmed++
		case *redis.Message:
			early = append(early, byChannel[m.Channel])
		}
	}
	cancel()
	out := make(chan string, len(queues)+len(early))
	for _, q := range early {
		out <- q
	}
	return out, forward(ps, out, func(m *redis.Message) (string, bool) { return byChannel[m.Channel], true }, true)
}

// cancels subscribes to the cancel notices of queues ("<id>\n<token>" on
// each queue's cancel channel). Notices are hints: a worker's heartbeat
// finds the same request in the cancels hash. stop unsubscribes and
// closes the channel.
func (b *Broker) cancels(ctx context.Context, queues []string) (<-chan protocol.CancelNotice, func()) {
	byChannel, channels := channelsOf(b.ns, queues, keyspace.CancelChannel)
	ps := b.rdb.Subscribe(ctx, channels...)
	out := make(chan protocol.CancelNotice, 64)
	return out, forward(ps, out, func(m *redis.Message) (protocol.CancelNotice, bool) {
		id, tok, found := strings.Cut(m.Payload, "\n")
		token, err := strconv.ParseInt(tok, 10, 64)
		return protocol.CancelNotice{Queue: byChannel[m.Channel], ID: id, Token: token}, found && err == nil
	}, false)
}

// channelsOf names the channels of queues (channel gives one), with the
// queue of each.
func channelsOf(ns string, queues []string, channel func(ns, queue string) string) (byChannel map[string]string, channels []string) {
	byChannel = make(map[string]string, len(queues))
	channels = make([]string, 0, len(queues))
	for _, q := range queues {
		c := channel(ns, q)
		byChannel[c] = q
		channels = append(channels, c)
	}
	return byChannel, channels
}

// forward copies the messages of ps, read by conv (false: skip it), to
// out until stop is called; then out is closed. With lossy, a message
// that finds out full is dropped (a notice already pending is as good);
// otherwise forward waits for the reader. stop unsubscribes, once.
func forward[T any](ps *redis.PubSub, out chan<- T, conv func(*redis.Message) (T, bool), lossy bool) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(out)
		in := ps.Channel()
		for {
			var m *redis.Message
			var ok bool
			select {
			case m, ok = <-in:
				if !ok {
					return
				}
			case <-done:
				return
			}
			v, keep := conv(m)
			if !keep {
				continue
			}
			if lossy {
				select {
				case out <- v:
				default:
				}
				continue
			}
			select {
			case out <- v:
			case <-done:
				return
			}
		}
	}()
	return unsubscriber(done, ps)
}

// unsubscriber returns the stop of a subscription: it ends the forwarding
// goroutine (done) and closes ps, once.
func unsubscriber(done chan struct{}, ps *redis.PubSub) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			_ = ps.Close()
		})
	}
}
