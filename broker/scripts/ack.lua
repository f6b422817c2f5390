-- ack: finish jobs whose handlers succeeded.
--
-- KEYS[1] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[3] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[4] -> ns:{q}:leases      HASH id -> fencing token
-- KEYS[5] -> ns:{q}:hist:       prefix of the per-minute history (done)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2+2i], ARGV[3+2i] -> id, token
--
-- Returns one integer per job: 1 acked, 0 lease lost (nothing changed).
local out, done = {}, 0
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if holds(KEYS[4], id, token) then
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    out[#out + 1] = 1
    done = done + 1
  else
    out[#out + 1] = 0
  end
end
if done > 0 then
  history(KEYS[5], now_ms(), 'done', done)
end
return out
