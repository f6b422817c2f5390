package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/broker"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/protocol"
	"github.com/delayq/delayq/internal/testkit"
	"github.com/delayq/delayq/job"
)

// email is the payload of the demo's "email.send" jobs.
type email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// XSSSubject is the subject of one dead demo job: the pages must show it as
// text.
const xssSubject = `<script>alert(1)</script>`

// demo is what seedDemo left in Redis.
type demo struct {
	Scheduled, Processing, Dead int
	DeadIDs                     []string // of queue "emails", oldest first
	XSSID                       string   // the dead job whose subject is xssSubject
}

// deadErrors are the final errors of the demo's dead jobs, one per job.
var deadErrors = []string{
	"smtp: 550 5.1.1 <nobody@example.net>: mailbox unavailable",
	"smtp: dial tcp 192.0.2.25:25: i/o timeout (retry budget spent)",
	"template \"welcome\": executing at <.User.Name>: nil pointer evaluating *User.Name",
	"panic: assignment to entry in nil map\n\ngoroutine 812 [running]:\nexample.com/mailer.(*Sender).Send(0xc000214000, {0x1a2b3c0, 0xc0001e6000})\n\t/src/mailer/send.go:88 +0x2f4\nexample.com/mailer.Handle({0x1a2b3c0, 0xc0001e6000}, 0xc0003b2000)\n\t/src/mailer/handle.go:31 +0x91\ngithub.com/delayq/delayq/worker.(*Worker).call(...)\n\t/src/worker/worker.go:301 +0x8c",
	"smtp: 552 5.3.4 message size exceeds fixed limit",
}

// seedDemo fills a namespace with an hour of history and a current state:
// queues "emails", "webhooks" and "reports" handle jobs minute by minute
// through the broker's scripts on a simulated clock over the last hour
// (some late, some retried, ten of "emails" dead), then 50 jobs are
// scheduled ahead and 5 are leased to a worker that never finishes them.
func seedDemo(t testing.TB, rdb redis.UniversalClient, ns string) demo {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	clk := clock.NewSimulated(now.Truncate(time.Minute).Add(-60 * time.Minute))
	past, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	protocol.UseClock(past, clk.Now)
	b, err := broker.New(rdb, broker.Options{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	var out demo
	seq := 0
	enqueue := func(br *broker.Broker, queue, typ string, payload string, delay time.Duration) string {
		seq++
		id := fmt.Sprintf("%s-%05d", queue[:1], seq)
		env := &job.Envelope{ID: id, Queue: queue, Type: typ, Payload: []byte(payload), MaxRetries: 5, Delay: delay, CreatedAt: clk.Now()}
		if br == b {
			env.CreatedAt = time.Time{}
		}
		if err := br.Enqueue(ctx, env); err != nil {
			t.Fatal(err)
		}
		return id
	}
	deadAt := map[int]bool{5: true, 12: true, 19: true, 26: true, 33: true, 37: true, 38: true, 39: true, 47: true, 55: true}
	queues := []struct {
		name, typ string
		base      int
	}{{"emails", "email.send", 14}, {"webhooks", "webhook.deliver", 9}, {"reports", "report.build", 3}}

	for minute := range 60 {
		start := clk.Now()
		// A slow stretch between minutes 34 and 41: jobs wait seconds.
		late := time.Duration(20+(minute*37)%60) * time.Millisecond
		if minute >= 34 && minute <= 41 {
			late = time.Duration(1500+(minute-34)*700) * time.Millisecond
		}
		for qi, q := range queues {
			n := q.base + (minute*(qi+3))%7
			if q.name == "emails" && minute >= 30 && minute <= 40 {
				n += 18 // a campaign
			}
			for i := range n {
				payload := fmt.Sprintf(`{"to":"user%d@example.com","subject":"Order %d shipped"}`, seq+i, 1000+seq+i)
				enqueue(past, q.name, q.typ, payload, time.Second)
			}
			clk.Advance(time.Second + late)
			res, err := testkit.Drive(past).Claim(ctx, q.name, n, time.Minute)
			if err != nil || len(res.Jobs) != n {
				t.Fatalf("minute %d, %s: claimed %d of %d: %v", minute, q.name, len(res.Jobs), n, err)
			}
			var acks []protocol.Lease
			var retried []string
			for i, c := range res.Jobs {
				switch {
				case q.name == "emails" && i == 0 && deadAt[minute]:
					body := c.Body
					if len(out.DeadIDs) == 6 {
						env := *c.Envelope
						env.Payload = []byte(`{"to":"mallory@example.com","subject":"` + xssSubject + `"}`)
						if body, err = env.MarshalBinary(); err != nil {
							t.Fatal(err)
						}
						out.XSSID = c.ID
					}
					rec := &job.DeadRecord{Type: q.typ, Body: body, Error: deadErrors[len(out.DeadIDs)%len(deadErrors)], Attempts: 6}
					if _, err := testkit.Drive(past).Kill(ctx, c.Lease, rec); err != nil {
						t.Fatal(err)
					}
					out.DeadIDs = append(out.DeadIDs, c.ID)
				case i%11 == 3:
					env := *c.Envelope
					env.LastError = "http 503: upstream unavailable"
					if _, err := testkit.Drive(past).Retry(ctx, c.Lease, 2900*time.Millisecond, &env); err != nil {
						t.Fatal(err)
					}
					retried = append(retried, c.ID)
				default:
					acks = append(acks, c.Lease)
				}
			}
			// Retried jobs succeed on their second attempt, a few seconds on.
			clk.Advance(3 * time.Second)
			if len(retried) > 0 {
				res, err := testkit.Drive(past).Claim(ctx, q.name, len(retried), time.Minute)
				if err != nil || len(res.Jobs) != len(retried) {
					t.Fatalf("minute %d, %s: re-claimed %d of %d: %v", minute, q.name, len(res.Jobs), len(retried), err)
				}
				for _, c := range res.Jobs {
					acks = append(acks, c.Lease)
				}
			}
			if err := testkit.Drive(past).Ack(ctx, acks...); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Minute - clk.Now().Sub(start))
	}
	out.Dead = len(out.DeadIDs)

	// The present: 50 scheduled ahead, 5 leased for an hour.
	for i := range 30 {
		enqueue(b, "emails", "email.send", fmt.Sprintf(`{"to":"user%d@example.com","subject":"Your invoice #%d"}`, i, 5000+i), time.Duration(5+i*4)*time.Minute)
	}
	for i := range 20 {
		enqueue(b, "webhooks", "webhook.deliver", fmt.Sprintf(`{"url":"https://hooks.example.com/%d","event":"order.paid"}`, i), time.Duration(2+i*7)*time.Minute)
	}
	out.Scheduled = 50
	for i := range 5 {
		enqueue(b, "emails", "email.send", fmt.Sprintf(`{"to":"vip%d@example.com","subject":"Welcome"}`, i), 0)
	}
	res, err := testkit.Drive(b).Claim(ctx, "emails", 5, time.Hour)
	if err != nil || len(res.Jobs) != 5 {
		t.Fatalf("claimed %d of 5 processing jobs: %v", len(res.Jobs), err)
	}
	out.Processing = 5
	return out
}
