-- redrive: move dead jobs back to the schedule, attempts reset.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[3] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[4] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[5] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- KEYS[6] -> ns:{q}:c:          prefix of the call records: KEYS[6] .. call
--                               id -> the call's first answer
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> wake channel
-- ARGV[3] -> delay µs
-- ARGV[4] -> call id, chosen by the caller for this call
-- ARGV[5] -> resend window ms: how long the answer is kept under the call
--            id (0: not kept)
-- ARGV[6+3i .. 8+3i] -> id, the dead record as read ("" when there was
--                       none), the envelope to schedule
--
-- Returns one integer per job: its ready time in ms; 0 when the dead record
-- is gone or changed since it was read; -1 when a job with that id is pending
-- again. Nothing changes for a job unless its result is > 0. A call whose id
-- has a record (sent before: go-redis re-sent it after a lost reply, or the
-- caller resent it) gets the recorded answer and changes nothing.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'zset'})
if bad then
  return bad
end
local cid, window = ARGV[4], tonumber(ARGV[5])
local before = recorded(KEYS[6] .. cid, window)
if type(before) == 'table' then
  return before
elseif before then
  local out = {}
  for part in string.gmatch(before, '[^,]+') do
    out[#out + 1] = tonumber(part)
  end
  return out
end
local now_u = now_us()
local now = ms_of(now_u)
local ready = ready_after(now_u, tonumber(ARGV[3]))
local out = {}
for i = 6, #ARGV, 3 do
  local id, dead, body = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if dead == '' or redis.call('HGET', KEYS[4], id) ~= dead then
    out[#out + 1] = 0
  elseif redis.call('HEXISTS', KEYS[2], id) == 1 then
    out[#out + 1] = -1
  else
    redis.call('HDEL', KEYS[4], id)
    redis.call('ZREM', KEYS[5], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HSET', KEYS[2], id, body)
    wake_if_earliest(KEYS[1], ARGV[2], ready, now)
    redis.call('ZADD', KEYS[1], ready, id)
    out[#out + 1] = ready
  end
end
local codes = {}
for k = 1, #out do
  codes[k] = string.format('%d', out[k])
end
record(KEYS[6] .. cid, window, table.concat(codes, ','))
return out
