-- enqueue: store new jobs and schedule them.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> wake channel
-- ARGV[3+4i .. 6+4i] -> id, envelope, at ms (0 = use delay), delay ms
--
-- Returns one integer per job: its ready time in ms, or -1 when a job with
-- that id is still pending, or comes earlier in this call (the stored one is
-- left unchanged).
--
-- A fixed number of commands per call, whatever the number of jobs: one
-- HMGET finds the pending ids, one HSET and one ZADD store the new jobs, and
-- the earliest ready time is read once, so that at most one wake-up notice
-- is published per call (see wake_if_earliest).
local now = now_ms()
local ids = {}
for i = 3, #ARGV, 4 do
  ids[#ids + 1] = ARGV[i]
end
local pending = hmget(KEYS[2], ids)
local out, fields, members, seen = {}, {}, {}, {}
local soonest = nil
for k = 1, #ids do
  local i = 3 + 4 * (k - 1)
  local id = ids[k]
  if pending[k] or seen[id] then
    out[k] = -1
  else
    seen[id] = true
    local ready = tonumber(ARGV[i + 2])
    if ready <= 0 then
      ready = now + tonumber(ARGV[i + 3])
    end
    if soonest == nil or ready < soonest then
      soonest = ready
    end
    fields[#fields + 1] = id
    fields[#fields + 1] = ARGV[i + 1]
    members[#members + 1] = ready
    members[#members + 1] = id
    out[k] = ready
  end
end
if soonest ~= nil then
  wake_if_earliest(KEYS[1], ARGV[2], soonest, now)
  call_chunked('HSET', KEYS[2], fields)
  call_chunked('ZADD', KEYS[1], members)
end
return out
