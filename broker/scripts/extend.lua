-- extend: push the lease deadline of held jobs to now + lease.
--
-- KEYS[1] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[2] -> ns:{q}:leases      HASH id -> fencing token
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> lease ms
-- ARGV[3+2i], ARGV[4+2i] -> id, token
--
-- Returns one integer per job: 1 extended, 0 lease lost. A lease that has
-- run out but was not reaped yet is still held, and is extended.
local now = now_ms()
local deadline = now + tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if holds(KEYS[2], id, token) then
    redis.call('ZADD', KEYS[1], 'XX', deadline, id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
