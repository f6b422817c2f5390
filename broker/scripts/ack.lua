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
local ids = {}
for i = 2, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
end
local current = hmget(KEYS[4], ids)
local out, held, seen = {}, {}, {}
for k = 1, #ids do
  local id = ids[k]
  if current[k] and current[k] == ARGV[2 * k + 1] and not seen[id] then
    seen[id] = true
    held[#held + 1] = id
    out[k] = 1
  else
    out[k] = 0
  end
end
if #held > 0 then
  call_chunked('ZREM', KEYS[1], held)
  call_chunked('HDEL', KEYS[2], held)
  call_chunked('HDEL', KEYS[3], held)
  call_chunked('HDEL', KEYS[4], held)
  history(KEYS[5], now_ms(), 'done', #held)
end
return out
