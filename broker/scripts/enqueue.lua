-- enqueue: store new jobs and schedule them.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[3] -> ns:{q}:unique      ZSET id -> remembered until ms (job.Unique);
--                               touched only by jobs flagged "u"
-- KEYS[4] -> ns:{q}:c:          prefix of the call records: KEYS[4] .. call
--                               id -> STRING, the call's first outcome,
--                               expiring after ARGV[3] ms
-- KEYS[5] -> ns:{q}:parked     ZSET id -> ready ms: due jobs of paused types
--                               (touched only by jobs flagged "r")
-- KEYS[6] -> ns:{q}:held:      prefix of the per-type ZSETs of due jobs held
--                               back by their type's concurrency cap
--                               (touched only by jobs flagged "r")
-- KEYS[7] -> ns:{q}:keyheld     ZSET key -> its jobs held by its cap or
--                               pause (touched only when a replace takes a
--                               job out of its key's held set)
-- KEYS[8] -> ns:{q}:parkedtypes HASH type -> its jobs in KEYS[5] (touched
--                               only when a replace takes a job out of
--                               KEYS[5], or a debounce gives a parked job
--                               an envelope of another type)
-- KEYS[9] -> ns:{q}:controls    HASH field "kf": fair turns between keys on
--                               (read only when a job has a key)
-- KEYS[10] -> ns:{q}:keyturn    ZSET key -> its place in the fair turns
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> wake channel
-- ARGV[3] -> resend window ms: how long an outcome is kept under its call
--            id (0: not kept)
-- ARGV[4] -> call id of the whole call (a batch Enqueue: its outcomes are
--            kept in one record), or "" when each job has its own
-- ARGV[5+6i .. 10+6i] -> id, envelope, at ms (0 = use delay), delay µs,
--                        flags: "" or letters of "u" (refused while the
--                        id is remembered in KEYS[3]) and "r" (replace a
--                        scheduled job with the id), or "d" alone
--                        (job.Debounce: the delay is the window), the
--                        job's own call
--                        id when ARGV[4] is "" (single Enqueues that
--                        share this script call, see combine.go)
--
-- Returns {now µs or 0, {one integer per job}}; a call of one job without
-- flags gets its integer alone, or {now µs, its ready time} when the script
-- read the server's time. The integer of a job: its ready time in ms when
-- this call stored it; -1 when a job with that id is pending (stored by
-- another call, or earlier in this one: the stored job is left unchanged,
-- however alike the envelopes); -3 when a job flagged "r" found the pending
-- job with its id held by a worker (nothing changed); -4 when a job flagged
-- "u" found its id remembered after its end. A job whose call id has a
-- record gets the integer recorded, and nothing changes for it: the call
-- was sent before (go-redis re-sent it after a lost reply, or the producer
-- resent it), and its first outcome stands, even if the job ran and ended
-- since. A job flagged "r" whose id is scheduled replaces the stored
-- envelope and ready time; so does one whose id is parked (its type
-- paused) or held (its type at its cap): those are scheduled too, for
-- every operation (Cancel, Reschedule, Job), and the replaced job goes
-- back to KEYS[1], where the claim parks or holds it again once it is due
-- while its type is still paused or capped. A job flagged "d" (debounce)
-- whose id is scheduled and not yet due replaces the stored envelope and
-- ready time (now + its delay, the window); one whose id is due (scheduled,
-- parked or held) replaces the envelope and keeps the ready time and
-- place, answering that ready time; one whose id a worker holds gets -3.
-- A job flagged "d" whose id an earlier job of the same call stored
-- (several single Enqueues of one key that share a script call, see
-- combine.go) acts on what that job left, as if it came after it: it is
-- no duplicate.
--
-- A fixed number of commands per call, whatever the number of jobs: the
-- earliest ready time is read once (so that at most one wake-up notice is
-- published per call, see wake_if_earliest), one HMGET finds the pending
-- ids, one HSET and one ZADD store the new jobs, and a call id of the whole
-- call is one GET and one SET; jobs with call ids of their own add one GET
-- and one SET each. A call of one job without flags, the common single
-- Enqueue, stores the job with HSETNX and its call record with SET NX GET:
-- ZRANGE, HSETNX, SET, ZADD, and TIME only for a delay from now or to
-- compare with an earliest job that is not due. Jobs flagged "u" add one
-- ZMSCORE and one trim of KEYS[3] per call.
--
-- Fair turns (Broker.SetKeyFairness): a job with a key stored due (its
-- ready time not after now) while the turns are on goes straight to its
-- key's held set (KEYS[6] .. '#' .. key, counted in KEYS[7]), its key
-- joining the turns (KEYS[10]) at the back, instead of to the schedule,
-- where a flood of another key's due jobs would stand before it until the
-- claims had moved them all. Jobs with a key cost one HGET of KEYS[9] per
-- call more (and TIME when the script did not read it), and those routed
-- so a ZADD, two ZINCRBY and one ZADD of the turns per key; jobs without
-- a key cost nothing more.
--
-- The reads come before any write and check the keys' types on the way (a
-- read of a key of the wrong type fails, and expect then names it), so the
-- script fails before it changes anything, as every script does, without a
-- TYPE per key and call. The single job's HSETNX is the one write before a
-- command that can fail (SET GET of a call record of the wrong type): the
-- job it stored is taken back then, and on a resend.

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
local W, FIRST = 6, 5
local window = tonumber(ARGV[3])

-- Fair turns: fair_on reads once whether they are on; fair_route stores
-- the jobs (a flat list ready, id, body) that go to their keys' held sets
-- and returns the rest (ready, id) for the schedule. A job routed that
-- was in the schedule (a replace) leaves it.
local fair_value
local function fair_on()
  if fair_value == nil then
    fair_value = false
    if KEYS[9] then
      local v = redis.pcall('HGET', KEYS[9], 'kf')
      if type(v) == 'table' and v.err then
        error(expect({KEYS[9], 'hash'}) or v)
      end
      fair_value = v == '1'
    end
  end
  return fair_value
end
-- fair_check fails the script, before any write, when a key the jobs of
-- body would be routed to is of the wrong type.
local function fair_check(bodies)
  local spec, seen = {KEYS[7], 'zset', KEYS[10], 'zset'}, {}
  for _, body in ipairs(bodies) do
    local key = key_of(body)
    if key and not seen[key] then
      seen[key] = true
      spec[#spec + 1] = KEYS[6] .. '#' .. key
      spec[#spec + 1] = 'zset'
    end
  end
  local bad = expect(spec)
  if bad then
    error(bad)
  end
end
local function fair_route(list)
  local rest, groups, order, gone = {}, {}, {}, {}
  local now_ms = nil
  for j = 1, #list, 3 do
    local ready, id, body = list[j], list[j + 1], list[j + 2]
    local key = key_of(body)
    if key and fair_on() then
      now_ms = now_ms or ms_of(now())
    end
    if key and now_ms and ready <= now_ms then
      key_group(groups, order, key, ready, id)
      gone[#gone + 1] = id
    else
      rest[#rest + 1] = ready
      rest[#rest + 1] = id
    end
  end
  if #order == 0 then
    return rest
  end
  call_chunked('ZREM', KEYS[1], gone)
  key_hold(KEYS[6], KEYS[7], groups, order)
  turn_join(KEYS[10], order)
  return rest
end

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

-- One job without flags: HSETNX stores it unless its id is pending, then
-- SET NX GET records the outcome under the call id, or finds the outcome
-- of an earlier send of the call: that one stands, and a job this send
-- stored is taken back.
if #ARGV == FIRST - 1 + W and ARGV[FIRST + 4] == '' and ARGV[4] == '' then
  local id, cid = ARGV[FIRST], ARGV[FIRST + 5]
  if key_of(ARGV[FIRST + 1]) and fair_on() then
    fair_check({ARGV[FIRST + 1]}) -- before the first write, as every check
  end
  local added = redis.pcall('HSETNX', KEYS[2], id, ARGV[FIRST + 1])
  if type(added) == 'table' and added.err then
    return expect({KEYS[2], 'hash'}) or added
  end
  local ready = -1
  if added == 1 then
    ready = ready_of(FIRST)
  end
  if window > 0 then
    local before = redis.pcall('SET', KEYS[4] .. cid, ready, 'NX', 'PX', window, 'GET')
    if type(before) == 'table' or before then
      if added == 1 then
        redis.call('HDEL', KEYS[2], id)
      end
      if type(before) == 'table' then
        return expect({KEYS[4] .. cid, 'string'}) or before
      end
      return tonumber(before)
    end
  end
  if added == 0 then
    return -1
  end
  wake(ready)
  if fair_value then
    if #fair_route({ready, id, ARGV[FIRST + 1]}) > 0 then
      redis.call('ZADD', KEYS[1], ready, id)
    end
  else
    redis.call('ZADD', KEYS[1], ready, id)
  end
  if now_value ~= nil then
    return {now_value, ready}
  end
  return ready
end

local ids, uniq = {}, {}
for i = FIRST, #ARGV, W do
  ids[#ids + 1] = ARGV[i]
  if ARGV[i + 4] ~= '' and string.find(ARGV[i + 4], 'u', 1, true) then
    uniq[#uniq + 1] = #ids
  end
end
-- The call records: a call (or a job) whose call id has one was sent
-- before, and gets that send's outcome.
local out, replayed = {}, {}
local whole = ARGV[4]
if whole ~= '' then
  local before = recorded(KEYS[4] .. whole, window)
  if type(before) == 'table' then
    return before
  elseif before then
    for part in string.gmatch(before, '[^,]+') do
      out[#out + 1] = tonumber(part)
    end
    return {0, out}
  end
elseif window > 0 then
  for k = 1, #ids do
    local cid = ARGV[FIRST + W * (k - 1) + 5]
    local before = redis.pcall('GET', KEYS[4] .. cid)
    if type(before) == 'table' and before.err then
      return expect({KEYS[4] .. cid, 'string'}) or before
    end
    if before then
      out[k] = tonumber(before)
      replayed[k] = true
    end
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
-- The type from a body's header, nil when it has none (as type_of in the
-- prelude reads it, which this script does not load: its common path never
-- needs it).
local function body_type(body)
  local t = body and string.match(body, '^{"t":"([%w%._:/%-]+)"[,}]')
  if not t and body then
    local ok, env = pcall(cjson.decode, body)
    if ok and type(env) == 'table' and type(env.t) == 'string' then
      t = env.t
    end
  end
  return t
end
-- Takes a job parked by its type's pause, or held by its type's cap, out
-- of there (for a replace, which schedules it anew); false when it is in
-- neither (a worker holds it).
local function set_aside(id, body)
  -- A ZSCORE (its error names the key's wrong type) rather than a ZREM, so
  -- that KEYS[8] is checked before the first write, at no extra command
  -- for a job that is not parked.
  local parked = redis.pcall('ZSCORE', KEYS[5], id)
  if type(parked) == 'table' and parked.err then
    error(expect({KEYS[5], 'zset'}) or parked)
  end
  local t = body_type(body)
  if parked then
    local bad = expect({KEYS[8], 'hash'})
    if bad then
      error(bad)
    end
    redis.call('ZREM', KEYS[5], id)
    parked_add(KEYS[8], t, -1)
    return true
  end
  local bad
  if t then
    bad = expect({KEYS[6] .. t, 'zset'})
    if bad then
      error(bad)
    end
    if redis.call('ZREM', KEYS[6] .. t, id) == 1 then
      return true
    end
  end
  -- Held by its key's cap (key_of in the prelude: the key follows the
  -- type and the optional uniqueness fields in the header).
  local key = body and string.match(body, '^{"t":"[%w%._:/%-]+",[^p]-"k":"([%w%._:/@%+=%-]+)"')
  if key then
    bad = expect({KEYS[6] .. '#' .. key, 'zset', KEYS[7], 'zset'})
    if bad then
      error(bad)
    end
    if redis.call('ZREM', KEYS[6] .. '#' .. key, id) == 1 then
      held_add(KEYS[7], key, -1)
      return true
    end
  end
  return false
end
-- seen: the ids met so far in this call; written: for an id this call
-- stores, true when it goes to the schedule with a new ready time, or the
-- ready time it keeps (a debounced due job), so that a debounced job later
-- in the call with the id acts on what the call leaves (the later field
-- and member of HSET and ZADD win).
-- parked_as: for a parked id a debounce kept, the type it is counted
-- under in KEYS[8].
local fields, members, seen, written, parked_as = {}, {}, {}, {}, {}
local member_body = {} -- the envelope of each member, for fair turns
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
  member_body[#members / 2] = ARGV[i + 1]
  out[k] = ready
  written[ids[k]] = true
end
-- Gives the pending job id the envelope of job k and keeps its ready time
-- at: a debounced enqueue that found it due.
local function keep(k, i, at)
  fields[#fields + 1] = ids[k]
  fields[#fields + 1] = ARGV[i + 1]
  out[k] = at
  written[ids[k]] = at
  local was = parked_as[ids[k]]
  if was ~= nil then
    -- A parked job given an envelope of another type: its count moves to
    -- that type, the one whose resume sends it back (pause.lua).
    local t = body_type(ARGV[i + 1])
    if t ~= was then
      local bad = expect({KEYS[8], 'hash'})
      if bad then
        error(bad)
      end
      if was then
        parked_add(KEYS[8], was, -1)
      end
      parked_add(KEYS[8], t, 1)
      parked_as[ids[k]] = t or false
    end
  end
end
-- A debounced enqueue (flag "d") of job k that found its id pending: in
-- its window (scheduled, not yet due) the job gets the new envelope and
-- ready time; due (scheduled, or set aside by a pause or a cap, its
-- type's or its key's) it gets
-- the envelope and keeps its ready time and place; held by a worker it is
-- left alone (-3).
local function debounce(k, i, id, body)
  local at = tonumber(redis.call('ZSCORE', KEYS[1], id))
  if at and at > ms_of(now()) then
    store(k, i)
    return
  end
  if not at then
    local bad = expect({KEYS[5], 'zset'})
    if bad then
      error(bad)
    end
    at = tonumber(redis.call('ZSCORE', KEYS[5], id))
    if at then
      -- Parked: counted under the type of the envelope it keeps.
      parked_as[id] = body_type(body) or false
    end
  end
  if not at then
    local t = body_type(body)
    if t then
      local bad = expect({KEYS[6] .. t, 'zset'})
      if bad then
        error(bad)
      end
      at = tonumber(redis.call('ZSCORE', KEYS[6] .. t, id))
    end
  end
  if not at then
    -- Held by its key's cap or pause (the key as set_aside reads it).
    local key = body and string.match(body, '^{"t":"[%w%._:/%-]+",[^p]-"k":"([%w%._:/@%+=%-]+)"')
    if key then
      local bad = expect({KEYS[6] .. '#' .. key, 'zset'})
      if bad then
        error(bad)
      end
      at = tonumber(redis.call('ZSCORE', KEYS[6] .. '#' .. key, id))
    end
  end
  if at then
    keep(k, i, at)
  else
    out[k] = -3
  end
end
for k = 1, #ids do
  local i = FIRST + W * (k - 1)
  local id = ids[k]
  if replayed[k] then
    -- Answered from its call record: nothing changes.
  elseif seen[id] and ARGV[i + 4] == 'd' and written[id] == true then
    -- Debounced after a job with the id stored earlier in this call.
    store(k, i)
  elseif seen[id] and ARGV[i + 4] == 'd' and written[id] then
    keep(k, i, written[id])
  elseif seen[id] and ARGV[i + 4] == 'd' and pending[k] then
    debounce(k, i, id, pending[k])
  elseif seen[id] then
    out[k] = -1
  elseif pending[k] then
    seen[id] = true
    local replace = ARGV[i + 4] ~= '' and string.find(ARGV[i + 4], 'r', 1, true)
    if ARGV[i + 4] == 'd' then
      debounce(k, i, id, pending[k])
    elseif replace and redis.call('ZSCORE', KEYS[1], id) then
      store(k, i)
    elseif replace and set_aside(id, pending[k]) then
      store(k, i)
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
if #members > 0 and KEYS[9] then
  -- Fair turns: the last member of an id decides where it goes (a
  -- debounce in this call may have moved it); checked, then routed,
  -- before the writes below.
  local last, keyed = {}, false
  for j = 2, #members, 2 do
    last[members[j]] = j
    keyed = keyed or key_of(member_body[j / 2]) ~= nil
  end
  if keyed and fair_on() then
    local list, bodies = {}, {}
    for j = 2, #members, 2 do
      if last[members[j]] == j then
        list[#list + 1] = members[j - 1]
        list[#list + 1] = members[j]
        list[#list + 1] = member_body[j / 2]
        bodies[#bodies + 1] = member_body[j / 2]
      end
    end
    fair_check(bodies)
    members = fair_route(list)
  end
end
if #uniq > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ms_of(now()))
end
if soonest ~= nil then
  wake(soonest)
end
if #fields > 0 then
  call_chunked('HSET', KEYS[2], fields)
end
if #members > 0 then
  call_chunked('ZADD', KEYS[1], members)
end
if whole ~= '' then
  local codes = {}
  for k = 1, #out do
    codes[k] = string.format('%d', out[k])
  end
  record(KEYS[4] .. whole, window, table.concat(codes, ','))
elseif window > 0 then
  for k = 1, #ids do
    if not replayed[k] then
      local cid = ARGV[FIRST + W * (k - 1) + 5]
      redis.call('SET', KEYS[4] .. cid, out[k], 'PX', window)
    end
  end
end
return {now_value or 0, out}
