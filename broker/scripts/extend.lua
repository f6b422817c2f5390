-- extend: push the lease deadline of held jobs to now + lease.
--
-- KEYS[1] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[2] -> ns:{q}:leases      HASH id -> fencing token
-- KEYS[3] -> ns:{q}:cancels     HASH id -> token of a running job asked to stop
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> lease ms
-- ARGV[3+2i], ARGV[4+2i] -> id, token
--
-- Returns one integer per job: 1 extended, 0 lease lost (an id listed twice
-- counts once), 2 extended but asked to stop (Broker.CancelJob marked its
-- lease: the heartbeat is the net for a missed cancel notice). A lease that
-- has run out but was not reaped yet is still held, and is extended. A
-- fixed number of commands per call.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash'})
if bad then
  return bad
end
local deadline = now_ms() + tonumber(ARGV[2])
local out, list = held(KEYS[2], 3)
local members = {}
for _, id in ipairs(list) do
  members[#members + 1] = deadline
  members[#members + 1] = id
end
if #members > 0 then
  call_chunked('ZADD', KEYS[1], members, 'XX')
  local ids = {}
  for i = 3, #ARGV, 2 do
    ids[#ids + 1] = ARGV[i]
  end
  local marks = hmget(KEYS[3], ids)
  for k = 1, #ids do
    if out[k] == 1 and marks[k] and marks[k] == ARGV[2 + 2 * k] then
      out[k] = 2
    end
  end
end
return out
