-- batch_create: store a new open batch.
--
-- KEYS[1] -> ns:batch:{b}:meta     HASH the batch's counters and callbacks
-- KEYS[2] -> ns:batch:{b}:members  HASH "<queue>\n<id>" -> state
-- KEYS[3] -> ns:batch:{b}:next     HASH member -> its next jobs
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> success callback: queue ("" for none)
-- ARGV[3] -> success callback: envelope body
-- ARGV[4] -> complete callback: queue ("" for none)
-- ARGV[5] -> complete callback: envelope body
-- ARGV[6] -> how long the batch is kept once its callbacks fired, ms
-- ARGV[7] -> success callback's ready: "<at ms>,<delay ms>,<expiry window
--            ms>": at > 0 is its own ready time, else it is ready delay
--            after the batch completes; a window > 0 is its expiry after
--            its ready time (see batch_end)
-- ARGV[8] -> complete callback's ready, the same
--
-- Returns {1, created ms}, or {0, 0} when a batch with the id exists
-- (nothing changed).
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'hash'})
if bad then
  return bad
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, 0}
end
local now = now_ms()
redis.call('HSET', KEYS[1], 'created', now, 'total', 0, 'succeeded', 0, 'dead', 0, 'sealed', 0,
  'sq', ARGV[2], 'sb', ARGV[3], 'cq', ARGV[4], 'cb', ARGV[5], 'keep', ARGV[6], 'sr', ARGV[7] or '', 'cr', ARGV[8] or '', 'gone', 0)
return {1, now}
