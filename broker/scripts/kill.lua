-- kill: move a job to the dead-letter store.
--
-- KEYS[1] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[3] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[4] -> ns:{q}:leases      HASH id -> fencing token
-- KEYS[5] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[6] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- KEYS[7] -> ns:{q}:hist:       prefix of the per-minute history (dead)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
-- ARGV[3] -> token
-- ARGV[4] -> dead record
-- ARGV[5] -> "1" when the reaper calls: the lease must have expired
-- ARGV[6] -> cap on dead records (< 0: none)
-- ARGV[7] -> max age of dead records in ms (<= 0: none)
--
-- Returns the died-at time in ms, -1 when the lease is lost, -2 when the
-- reaper found the lease live again. Nothing changes unless it returns >= 0.
local now = now_ms()
local id, token = ARGV[2], ARGV[3]
local state = lease_state(KEYS[4], KEYS[1], id, token, ARGV[5] == '1', now)
if state < 0 then
  return state
end
redis.call('ZREM', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
redis.call('HDEL', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
redis.call('HSET', KEYS[5], id, ARGV[4])
redis.call('ZADD', KEYS[6], now, id)
trim_dead(KEYS[5], KEYS[6], tonumber(ARGV[6]), tonumber(ARGV[7]), now)
history(KEYS[7], now, 'dead', 1)
return now
