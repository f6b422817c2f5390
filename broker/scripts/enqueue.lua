-- enqueue: store new jobs and schedule them.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> wake channel
-- ARGV[3+4i .. 6+4i] -> id, envelope, at ms (0 = use delay), delay µs
--
-- Returns {now µs, one integer per job}: the job's ready time in ms; -1 when
-- a job with that id is pending with another envelope, or comes earlier in
-- this call (the stored one is left unchanged); -2 when the very envelope is
-- stored already and no longer scheduled (a worker has it): a resent call
-- whose first run stored it. A job whose very envelope is scheduled already
-- gets its stored ready time, so a call resent after a lost reply succeeds
-- without storing twice.
--
-- A fixed number of commands per call, whatever the number of jobs: one
-- HMGET finds the pending ids, one HSET and one ZADD store the new jobs, and
-- the earliest ready time is read once, so that at most one wake-up notice
-- is published per call (see wake_if_earliest).
local bad = expect({KEYS[1], 'zset', KEYS[2], 'hash'})
if bad then
  return bad
end
local now = now_us()
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
  if seen[id] then
    out[k] = -1
  elseif pending[k] then
    seen[id] = true
    out[k] = -1
    if pending[k] == ARGV[i + 1] then
      out[k] = tonumber(redis.call('ZSCORE', KEYS[1], id)) or -2
    end
  else
    seen[id] = true
    local ready = tonumber(ARGV[i + 2])
    if ready <= 0 then
      ready = ready_after(now, tonumber(ARGV[i + 3]))
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
  wake_if_earliest(KEYS[1], ARGV[2], soonest, ms_of(now))
  call_chunked('HSET', KEYS[2], fields)
  call_chunked('ZADD', KEYS[1], members)
end
return {now, out}
