-- progress: store the progress a running job reported, if its lease holds.
--
-- KEYS[1] -> ns:{q}:leases    HASH id -> fencing token
-- KEYS[2] -> ns:{q}:progress  HASH id -> "<ms>\n<fraction>\n<message>"
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
-- ARGV[3] -> fencing token of the caller's lease
-- ARGV[4] -> "<fraction>\n<message>"
--
-- Returns the time stored (ms), or -1 when the lease is lost (nothing
-- changed). Whatever ends the lease (settle.lua) clears the report.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash'})
if bad then
  return bad
end
if redis.call('HGET', KEYS[1], ARGV[2]) ~= ARGV[3] then
  return -1
end
local now = now_ms()
redis.call('HSET', KEYS[2], ARGV[2], string.format('%d', now) .. '\n' .. ARGV[4])
return now
