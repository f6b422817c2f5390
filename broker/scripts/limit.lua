-- limit: set or clear a rate limit of a queue (one shard of it) or of a job
-- type in it.
--
-- KEYS[1] -> ns:{q}:controls    HASH "r" / "r:<type>" -> "count/per ms/burst/shards"
-- KEYS[2] -> ns:{q}:rate        HASH "*" / "<type>" -> GCRA theoretical arrival time ms
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> "*" for the queue, or the type name
-- ARGV[3] -> the limit, "" to clear it
--
-- Returns 1. Clearing a limit also drops its bucket's state; setting one
-- keeps it (a changed rate starts from the bucket's current time).
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash'})
if bad then
  return bad
end
local field = 'r'
if ARGV[2] ~= '*' then
  field = 'r:' .. ARGV[2]
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], field)
  redis.call('HDEL', KEYS[2], ARGV[2])
else
  redis.call('HSET', KEYS[1], field, ARGV[3])
end
return 1
