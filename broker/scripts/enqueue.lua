-- enqueue: store new jobs and schedule them.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[3] -> ns:{q}:unique      ZSET id -> remembered until ms (job.Unique);
--                               touched only by jobs flagged "u"
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> wake channel
-- ARGV[3+5i .. 7+5i] -> id, envelope, at ms (0 = use delay), delay µs,
--                       flags: "" or letters of "u" (refused while the id
--                       is remembered in KEYS[3]) and "r" (replace a
--                       scheduled job with the id)
--
-- Returns {now µs, {one integer per job}}; when a call of one job without
-- flags stores it, {now µs, its ready time}, or just its ready time if the
-- script did not read the server's time. The integer of a job: its ready
-- time in ms; -1 when a job with that id is pending with another envelope,
-- or comes earlier in this call (the stored one is left unchanged); -2 when
-- the very envelope is stored already and no longer scheduled (a worker has
-- it): a resent call whose first run stored it; -3 when a job flagged "r"
-- found the pending job with its id held by a worker (nothing changed); -4
-- when a job flagged "u" found its id remembered after its end. A job whose
-- very envelope is scheduled already gets its stored ready time, so a call
-- resent after a lost reply succeeds without storing twice. A job flagged
-- "r" whose id is scheduled replaces the stored envelope and ready time.
--
-- A fixed number of commands per call, whatever the number of jobs: the
-- earliest ready time is read once (so that at most one wake-up notice is
-- published per call, see wake_if_earliest), one HMGET finds the pending
-- ids, one HSET and one ZADD store the new jobs. A call of one job without
-- flags, the common single Enqueue, stores it with HSETNX instead of HMGET
-- and HSET: ZRANGE, HSETNX, ZADD, and TIME only for a delay from now or to
-- compare with an earliest job that is not due. Jobs flagged "u" add one
-- ZMSCORE and one trim of KEYS[3] per call.
--
-- The two reads come before any write and check the keys' types on the
-- way (a read of a key of the wrong type fails, and expect then names it),
-- so the script fails before it changes anything, as every script does,
-- without a TYPE per key and call.

-- The earliest scheduled job: read first, before any write, so that a
-- scheduled key of the wrong type stops the script at the door.
local first = redis.pcall('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first.err then
  return expect({KEYS[1], 'zset'}) or first
end
-- The server's time, read once and only when needed: a job with a ready
-- time of its own and no earlier job to compare with needs none.
local now_value
local function now()
  if now_value == nil then
    now_value = now_us()
  end
  return now_value
end
local W = 5

-- Publish the wake-up notice for the earliest new ready time, as
-- wake_if_earliest does, from the first member read above.
local function wake(soonest)
  local channel = ARGV[2]
  if channel == nil or channel == '' then
    return
  end
  if first[2] == nil or (soonest < tonumber(first[2]) and tonumber(first[2]) > ms_of(now())) then
    redis.call('PUBLISH', channel, soonest)
  end
end

local function ready_of(i)
  local ready = tonumber(ARGV[i + 2])
  if ready <= 0 then
    ready = ready_after(now(), tonumber(ARGV[i + 3]))
  end
  return ready
end

-- One job without flags: HSETNX stores it unless its id is pending.
if #ARGV == 2 + W and ARGV[7] == '' then
  local id, body = ARGV[3], ARGV[4]
  local added = redis.pcall('HSETNX', KEYS[2], id, body)
  if type(added) == 'table' and added.err then
    return expect({KEYS[2], 'hash'}) or added
  end
  if added == 0 then
    if redis.call('HGET', KEYS[2], id) == body then
      return {now(), {tonumber(redis.call('ZSCORE', KEYS[1], id)) or -2}}
    end
    return {now(), {-1}}
  end
  local ready = ready_of(3)
  wake(ready)
  redis.call('ZADD', KEYS[1], ready, id)
  if now_value ~= nil then
    return {now_value, ready}
  end
  return ready
end

local ids, uniq = {}, {}
for i = 3, #ARGV, W do
  ids[#ids + 1] = ARGV[i]
  if ARGV[i + 4] ~= '' and string.find(ARGV[i + 4], 'u', 1, true) then
    uniq[#uniq + 1] = #ids
  end
end
local pending = {}
for i = 1, #ids, CHUNK do
  local part = redis.pcall('HMGET', KEYS[2], unpack(ids, i, math.min(i + CHUNK - 1, #ids)))
  if part.err then
    return expect({KEYS[2], 'hash'}) or part
  end
  for j = 1, #part do
    pending[#pending + 1] = part[j]
  end
end
local remembered = {}
if #uniq > 0 then
  local bad = expect({KEYS[3], 'zset'})
  if bad then
    return bad
  end
  local asked = {}
  for _, k in ipairs(uniq) do
    asked[#asked + 1] = ids[k]
  end
  local until_ms = {}
  for i = 1, #asked, CHUNK do
    local part = redis.call('ZMSCORE', KEYS[3], unpack(asked, i, math.min(i + CHUNK - 1, #asked)))
    for j = 1, #part do
      until_ms[#until_ms + 1] = part[j]
    end
  end
  for j, k in ipairs(uniq) do
    local u = tonumber(until_ms[j])
    if u and u > ms_of(now()) then
      remembered[k] = true
    end
  end
end
local out, fields, members, seen = {}, {}, {}, {}
local soonest = nil
local function store(k, i)
  local ready = ready_of(i)
  if soonest == nil or ready < soonest then
    soonest = ready
  end
  fields[#fields + 1] = ids[k]
  fields[#fields + 1] = ARGV[i + 1]
  members[#members + 1] = ready
  members[#members + 1] = ids[k]
  out[k] = ready
end
for k = 1, #ids do
  local i = 3 + W * (k - 1)
  local id = ids[k]
  if seen[id] then
    out[k] = -1
  elseif pending[k] then
    seen[id] = true
    local replace = ARGV[i + 4] ~= '' and string.find(ARGV[i + 4], 'r', 1, true)
    if replace and redis.call('ZSCORE', KEYS[1], id) then
      store(k, i)
    elseif pending[k] == ARGV[i + 1] then
      out[k] = tonumber(redis.call('ZSCORE', KEYS[1], id)) or -2
    elseif replace then
      out[k] = -3
    else
      out[k] = -1
    end
  elseif remembered[k] then
    seen[id] = true
    out[k] = -4
  else
    seen[id] = true
    store(k, i)
  end
end
if #uniq > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ms_of(now()))
end
if soonest ~= nil then
  wake(soonest)
  call_chunked('HSET', KEYS[2], fields)
  call_chunked('ZADD', KEYS[1], members)
end
return {now(), out}
