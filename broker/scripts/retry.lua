-- retry: put a failed job back in the schedule with its new envelope.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[4] -> ns:{q}:leases      HASH id -> fencing token
-- KEYS[5] -> ns:{q}:hist:       prefix of the per-minute history (failed)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
-- ARGV[3] -> token
-- ARGV[4] -> delay ms
-- ARGV[5] -> envelope (with the last error)
-- ARGV[6] -> "1" when the reaper calls: the lease must have expired
-- ARGV[7] -> wake channel
--
-- Returns the new ready time in ms, -1 when the lease is lost, -2 when the
-- reaper found the lease live again. Nothing changes unless it returns >= 0.
local now = now_ms()
local id, token = ARGV[2], ARGV[3]
local state = lease_state(KEYS[4], KEYS[2], id, token, ARGV[6] == '1', now)
if state < 0 then
  return state
end
local ready = now + tonumber(ARGV[4])
redis.call('ZREM', KEYS[2], id)
redis.call('HDEL', KEYS[4], id)
redis.call('HSET', KEYS[3], id, ARGV[5])
wake_if_earliest(KEYS[1], ARGV[7], ready, now)
redis.call('ZADD', KEYS[1], ready, id)
history(KEYS[5], now, 'failed', 1)
return ready
