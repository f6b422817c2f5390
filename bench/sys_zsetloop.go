package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// zsetloop is the loop that blog posts teach: a sorted set scored with unix
// seconds, N goroutines polling ZRANGEBYSCORE ... LIMIT 0 1 and racing on
// ZREM, the payload in a hash, a 1 s sleep when nothing is due.
func init() { register("zsetloop", newZsetLoop) }

const (
	zsetloopKey     = "zsetloop:due"
	zsetloopPayload = "zsetloop:payload"
	zsetloopIdle    = time.Second
)

type zsetLoop struct {
	url    string
	prod   *redis.Client // enqueue side
	cons   *redis.Client // consumer side, made by Start
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newZsetLoop(url string) (System, error) {
	c, err := newRedisClient(url, 32)
	if err != nil {
		return nil, err
	}
	return &zsetLoop{url: url, prod: c}, nil
}

func (z *zsetLoop) Name() string { return "zsetloop" }

func (z *zsetLoop) Enqueue(ctx context.Context, j Job) error {
	_, err := z.prod.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, zsetloopPayload, j.ID, j.Payload)
		p.ZAdd(ctx, zsetloopKey, redis.Z{Score: float64(j.ReadyAt.Unix()), Member: j.ID})
		return nil
	})
	return err
}

// EnqueueBatch pipelines one HSET and one ZADD for the whole batch.
func (z *zsetLoop) EnqueueBatch(ctx context.Context, js []Job) error {
	if len(js) == 0 {
		return nil
	}
	fields := make([]any, 0, 2*len(js))
	members := make([]redis.Z, 0, len(js))
	for _, j := range js {
		fields = append(fields, j.ID, j.Payload)
		members = append(members, redis.Z{Score: float64(j.ReadyAt.Unix()), Member: j.ID})
	}
	_, err := z.prod.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, zsetloopPayload, fields...)
		p.ZAdd(ctx, zsetloopKey, members...)
		return nil
	})
	return err
}

func (z *zsetLoop) Start(ctx context.Context, concurrency int, handle func(id string)) error {
	c, err := newRedisClient(z.url, concurrency+4)
	if err != nil {
		return err
	}
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return err
	}
	z.cons = c
	ctx, z.cancel = context.WithCancel(context.Background())
	for i := 0; i < concurrency; i++ {
		z.wg.Add(1)
		go func() {
			defer z.wg.Done()
			z.worker(ctx, handle)
		}()
	}
	return nil
}

func (z *zsetLoop) worker(ctx context.Context, handle func(id string)) {
	// A job whose ZREM this worker won is finished even while stopping.
	after := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		now := strconv.FormatInt(time.Now().Unix(), 10)
		ids, err := z.cons.ZRangeByScore(ctx, zsetloopKey, &redis.ZRangeBy{Min: "-inf", Max: now, Offset: 0, Count: 1}).Result()
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		if len(ids) == 0 {
			sleepCtx(ctx, zsetloopIdle)
			continue
		}
		id := ids[0]
		n, err := z.cons.ZRem(ctx, zsetloopKey, id).Result()
		if err != nil || n != 1 {
			continue // someone else got it
		}
		_, _ = z.cons.HGet(after, zsetloopPayload, id).Bytes()
		handle(id)
		z.cons.HDel(after, zsetloopPayload, id)
	}
}

func (z *zsetLoop) Stop() error {
	if z.cancel != nil {
		z.cancel()
		z.wg.Wait()
		z.cancel = nil
	}
	if z.cons != nil {
		err := z.cons.Close()
		z.cons = nil
		return err
	}
	return nil
}

func (z *zsetLoop) Close() error { return z.prod.Close() }
