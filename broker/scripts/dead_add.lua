-- dead_add: put a job that was never stored as pending straight into the
-- dead letters (a batch callback the broker refuses when it is due), then
-- trim the store to its cap and max age.
--
-- KEYS[1] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[2] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- KEYS[3] -> ns:{q}:hist:       prefix of the per-minute history (dead)
-- KEYS[4] -> ns:{q}:counts      HASH counter -> n: the trims (trim_dead)
-- KEYS[5] -> ns:{q}:dead:trimmed LIST (trim_dead; none kept here)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
-- ARGV[3] -> dead record
-- ARGV[4] -> cap on dead records (< 0: none)
-- ARGV[5] -> max age of dead records in ms (<= 0: none)
--
-- Returns the died-at ms. A record with the id already there is replaced
-- (the same callback refused again: one record).
local bad = expect({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[4], 'hash'})
if bad then
  return bad
end
local now = now_ms()
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[2], now, ARGV[2])
trim_dead(KEYS[1], KEYS[2], tonumber(ARGV[4]), tonumber(ARGV[5]), now, KEYS[4], KEYS[5], 0, 0)
history(KEYS[3], now, 'dead', 1)
return now
