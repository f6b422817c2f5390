-- release: hand held jobs back without spending an attempt (shutdown).
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[4] -> ns:{q}:leases      HASH id -> fencing token
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> wake channel
-- ARGV[3+2i], ARGV[4+2i] -> id, token
--
-- Returns one integer per job: 1 released (ready now), 0 lease lost (an id
-- listed twice counts once).
local now = now_ms()
local out, list = held(KEYS[4], 3)
for _, id in ipairs(list) do
  redis.call('ZREM', KEYS[2], id)
  redis.call('HDEL', KEYS[4], id)
  local spent = redis.call('HGET', KEYS[3], id)
  if spent and is_int(spent) and tonumber(spent) > 1 then
    redis.call('HINCRBY', KEYS[3], id, -1)
  else
    redis.call('HDEL', KEYS[3], id)
  end
  wake_if_earliest(KEYS[1], ARGV[2], now, now)
  redis.call('ZADD', KEYS[1], now, id)
end
return out
