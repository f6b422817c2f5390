package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// luabaseline is a minimal Lua-script queue: one script moves up to 100 due
// ids (millisecond scores) to a processing set and returns them with their
// bodies; ack is ZREM processing + HDEL body. No fencing, no attempts, no
// reaper for the processing set.
func init() { register("luabaseline", newLuaBaseline) }

const (
	lbDue        = "lb:due"
	lbProcessing = "lb:processing"
	lbBody       = "lb:body"
	lbFetchMax   = 100
	lbMaxSleep   = 100 * time.Millisecond
)

// lbClaim: KEYS due, processing, body; ARGV now_ms, limit.
// Returns {0, id1, body1, id2, body2, ...} when something was due, else
// {next_score} or {-1} when the due set is empty.
var lbClaim = redis.NewScript(`
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then
  local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #nxt == 0 then return {-1} end
  return {tonumber(nxt[2])}
end
redis.call('ZREM', KEYS[1], unpack(ids))
local args = {}
for _, id in ipairs(ids) do
  args[#args+1] = ARGV[1]
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

type luaBaseline struct {
	url    string
	prod   *redis.Client
	cons   *redis.Client
	cancel context.CancelFunc
	fetch  sync.WaitGroup
	work   sync.WaitGroup
	ch     chan lbItem
}

type lbItem struct {
	id   string
	body any
}

func newLuaBaseline(url string) (System, error) {
	c, err := newRedisClient(url, 32)
	if err != nil {
		return nil, err
	}
	return &luaBaseline{url: url, prod: c}, nil
}

func (l *luaBaseline) Name() string { return "luabaseline" }

func (l *luaBaseline) Enqueue(ctx context.Context, j Job) error {
	_, err := l.prod.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, lbBody, j.ID, j.Payload)
		p.ZAdd(ctx, lbDue, redis.Z{Score: float64(j.ReadyAt.UnixMilli()), Member: j.ID})
		return nil
	})
	return err
}

// EnqueueBatch pipelines one HSET and one ZADD for the whole batch.
func (l *luaBaseline) EnqueueBatch(ctx context.Context, js []Job) error {
	if len(js) == 0 {
		return nil
	}
	fields := make([]any, 0, 2*len(js))
	members := make([]redis.Z, 0, len(js))
	for _, j := range js {
		fields = append(fields, j.ID, j.Payload)
		members = append(members, redis.Z{Score: float64(j.ReadyAt.UnixMilli()), Member: j.ID})
	}
	_, err := l.prod.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, lbBody, fields...)
		p.ZAdd(ctx, lbDue, members...)
		return nil
	})
	return err
}

func (l *luaBaseline) Start(ctx context.Context, concurrency int, handle func(id string)) error {
	c, err := newRedisClient(l.url, concurrency+4)
	if err != nil {
		return err
	}
	if err := lbClaim.Load(ctx, c).Err(); err != nil {
		c.Close()
		return err
	}
	l.cons = c
	l.ch = make(chan lbItem, concurrency)
	var fctx context.Context
	fctx, l.cancel = context.WithCancel(context.Background())
	l.fetch.Add(1)
	go func() {
		defer l.fetch.Done()
		l.fetchLoop(fctx)
	}()
	for i := 0; i < concurrency; i++ {
		l.work.Add(1)
		go func() {
			defer l.work.Done()
			for it := range l.ch {
				handle(it.id)
				_, _ = l.cons.Pipelined(context.Background(), func(p redis.Pipeliner) error {
					p.ZRem(context.Background(), lbProcessing, it.id)
					p.HDel(context.Background(), lbBody, it.id)
					return nil
				})
			}
		}()
	}
	return nil
}

func (l *luaBaseline) fetchLoop(ctx context.Context) {
	keys := []string{lbDue, lbProcessing, lbBody}
	for ctx.Err() == nil {
		now := time.Now().UnixMilli()
		res, err := lbClaim.Run(ctx, l.cons, keys, now, lbFetchMax).Slice()
		if err != nil || len(res) == 0 {
			sleepCtx(ctx, lbMaxSleep)
			continue
		}
		next, _ := toInt64(res[0])
		if next != 0 || len(res) == 1 {
			// Nothing due: sleep until the next score, at most lbMaxSleep.
			d := lbMaxSleep
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
			l.ch <- lbItem{id: id, body: res[i+1]}
		}
	}
}

func toInt64(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	default:
		return 0, fmt.Errorf("unexpected %T", v)
	}
}

func (l *luaBaseline) Stop() error {
	if l.cancel == nil {
		return nil
	}
	l.cancel()
	l.fetch.Wait()
	close(l.ch)
	l.work.Wait()
	l.cancel = nil
	err := l.cons.Close()
	l.cons = nil
	return err
}

func (l *luaBaseline) Close() error { return l.prod.Close() }
