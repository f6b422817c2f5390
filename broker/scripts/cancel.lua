-- cancel: remove a job that is still scheduled.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[4] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[5] -> ns:{q}:parked      ZSET id -> ready ms (jobs of paused types)
-- ARGV[1] -> now ms (unused)
-- ARGV[2] -> id
--
-- Returns 1 cancelled, -1 in progress (nothing changed), 0 not found.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'zset'})
if bad then
  return bad
end
local id = ARGV[2]
if redis.call('ZREM', KEYS[1], id) == 1 or redis.call('ZREM', KEYS[5], id) == 1 then
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  return 1
end
if redis.call('ZSCORE', KEYS[2], id) then
  return -1
end
return 0
