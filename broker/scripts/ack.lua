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
-- Returns one integer per job: 1 acked, 0 lease lost (nothing changed). An
-- id listed twice is acked once.
--
-- Five commands per call, whatever the number of jobs: one HMGET checks
-- every lease, then one command per key removes the held ones.
local out, list = held(KEYS[4], 2)
if #list > 0 then
  call_chunked('ZREM', KEYS[1], list)
  call_chunked('HDEL', KEYS[2], list)
  call_chunked('HDEL', KEYS[3], list)
  call_chunked('HDEL', KEYS[4], list)
  history(KEYS[5], now_ms(), 'done', #list)
end
return out
