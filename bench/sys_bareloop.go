package main

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// bareloop is the bare Lua loop of issue #38: enqueue = one script doing
// ZADD due + HSET body; claim = one script moving up to 100 due ids
// (millisecond scores) to a processing sorted set scored by a lease
// deadline and returning their bodies; ack = ZREM processing + HDEL body
// (one pipelined request). Ten claimers run independent claim loops, each
// on a connection of its own, and hand their ids to the Concurrency
// handler goroutines. No fencing, no attempts, no retries, no reaper for
// expired leases: the floor a delayed-job queue on one Redis can reach.
func init() { register("bareloop", newBareLoop) }

const (
	blDue        = "bl:due"
	blProcessing = "bl:processing"
	blBody       = "bl:body"
	blClaimers   = 10
	blClaimMax   = 100
	blLease      = 30 * time.Second
	blMaxSleep   = 100 * time.Millisecond
)

// blEnqueue: KEYS due, body; ARGV id1, score1, body1, id2, ... .
var blEnqueue = redis.NewScript(`
for i = 1, #ARGV, 3 do
  redis.call('ZADD', KEYS[1], ARGV[i+1], ARGV[i])
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i+2])
end
return #ARGV / 3
`)

// blClaim: KEYS due, processing, body; ARGV now_ms, limit, lease_ms.
// Returns {0, id1, body1, id2, body2, ...} when something was due, else
// {next_score} or {-1} when the due set is empty.
var blClaim = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then
  local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #nxt == 0 then return {-1} end
  return {tonumber(nxt[2])}
end
redis.call('ZREM', KEYS[1], unpack(ids))
local lease = tonumber(ARGV[1]) + tonumber(ARGV[3])
local args = {}
for _, id in ipairs(ids) do
  args[#args+1] = lease
  args[#args+1] = id
end
redis.call('ZADD', KEYS[2], unpack(args))
local bodies = redis.call('HMGET', KEYS[3], unpack(ids))
local out = {0}
for i, id in ipairs(ids) do
  out[#out+1] = id
  out[#out+1] = bodies[i]
end
return out
`)

type bareLoop struct {
	url    string
	prod   *redis.Client
	cons   *redis.Client
	cancel context.CancelFunc
	claim  sync.WaitGroup
	work   sync.WaitGroup
	ch     chan lbItem
}

func newBareLoop(url string) (System, error) {
	c, err := newRedisClient(url, 32)
	if err != nil {
		return nil, err
	}
	return &bareLoop{url: url, prod: c}, nil
}

func (b *bareLoop) Name() string { return "bareloop" }

func (b *bareLoop) Enqueue(ctx context.Context, j Job) error {
	return blEnqueue.Run(ctx, b.prod, []string{blDue, blBody}, j.ID, blScore(j.ReadyAt), j.Payload).Err()
}

// blScore is the ready time in milliseconds, rounded up, so that a claim at
// a millisecond now (rounded down) never starts a job early.
func blScore(t time.Time) int64 {
	return (t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
}

// EnqueueBatch is one call of the enqueue script with every job of js.
func (b *bareLoop) EnqueueBatch(ctx context.Context, js []Job) error {
	if len(js) == 0 {
		return nil
	}
	args := make([]any, 0, 3*len(js))
	for _, j := range js {
		args = append(args, j.ID, blScore(j.ReadyAt), j.Payload)
	}
	return blEnqueue.Run(ctx, b.prod, []string{blDue, blBody}, args...).Err()
}

func (b *bareLoop) Start(ctx context.Context, concurrency int, handle func(id string)) error {
	// One connection per claimer and per handler, and a few spare.
	c, err := newRedisClient(b.url, blClaimers+concurrency+4)
	if err != nil {
		return err
	}
	if err := blClaim.Load(ctx, c).Err(); err != nil {
		c.Close()
		return err
	}
	b.cons = c
	b.ch = make(chan lbItem, concurrency)
	var cctx context.Context
	cctx, b.cancel = context.WithCancel(context.Background())
	for i := 0; i < blClaimers; i++ {
		b.claim.Add(1)
		go func() {
			defer b.claim.Done()
			b.claimLoop(cctx)
		}()
	}
	for i := 0; i < concurrency; i++ {
		b.work.Add(1)
		go func() {
			defer b.work.Done()
			for it := range b.ch {
				handle(it.id)
				_, _ = b.cons.Pipelined(context.Background(), func(p redis.Pipeliner) error {
					p.ZRem(context.Background(), blProcessing, it.id)
					p.HDel(context.Background(), blBody, it.id)
					return nil
				})
			}
		}()
	}
	return nil
}

// claimLoop is one claimer: claim up to blClaimMax due ids, hand them to
// the handlers, repeat; when nothing is due, sleep until the next score,
// at most blMaxSleep.
func (b *bareLoop) claimLoop(ctx context.Context) {
	keys := []string{blDue, blProcessing, blBody}
	for ctx.Err() == nil {
		now := time.Now().UnixMilli()
		res, err := blClaim.Run(ctx, b.cons, keys, now, blClaimMax, blLease.Milliseconds()).Slice()
		if err != nil || len(res) == 0 {
			sleepCtx(ctx, blMaxSleep)
			continue
		}
		next, _ := toInt64(res[0])
		if next != 0 || len(res) == 1 {
			d := blMaxSleep
			if next > 0 {
				if until := time.Duration(next-now) * time.Millisecond; until < d {
					d = until
				}
			}
			sleepCtx(ctx, d)
			continue
		}
		for i := 1; i+1 < len(res); i += 2 {
			id, _ := res[i].(string)
			// Claimed ids are handed over even while stopping, so that a
			// claimed job is not dropped by the harness itself.
			b.ch <- lbItem{id: id, body: res[i+1]}
		}
	}
}

func (b *bareLoop) Stop() error {
	if b.cancel == nil {
		return nil
	}
	b.cancel()
	b.claim.Wait()
	close(b.ch)
	b.work.Wait()
	b.cancel = nil
	err := b.cons.Close()
	b.cons = nil
	return err
}

func (b *bareLoop) Close() error { return b.prod.Close() }
