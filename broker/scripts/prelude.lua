-- Shared by every script (prepended at load time).
--
-- ARGV[1] of every script is "now" in ms since the epoch: empty or "0" means
-- the Redis server's TIME, which is what production uses so that every worker
-- agrees on one clock; tests with a simulated clock pass an explicit value.
local function now_us()
  local explicit = tonumber(ARGV[1])
  if explicit and explicit > 0 then
    return explicit * 1000
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- now_us in whole ms, rounded down: a job is due once this reaches its
-- score.
local function ms_of(us)
  return math.floor(us / 1000)
end

local function now_ms()
  return ms_of(now_us())
end

-- The score of a job ready delay_us after now (both µs): whole ms, rounded
-- up, so that a job is never due before its delay has passed. A job ready
-- now is due at once (no claim can run before the script that stores it).
local function ready_after(now, delay_us)
  if delay_us <= 0 then
    return ms_of(now)
  end
  return math.ceil((now + delay_us) / 1000)
end

-- Checks the type of every key a script uses before its first write: Redis
-- keeps the writes a script made before a command failed, so a key of the
-- wrong type (written by another program) must stop the script before it
-- changes anything. spec lists key, type pairs ('string', 'hash', 'zset').
-- Returns an error reply naming the key, or nil.
local function expect(spec)
  for i = 1, #spec, 2 do
    local key, want = spec[i], spec[i + 1]
    local t = redis.call('TYPE', key)
    if type(t) == 'table' then
      t = t.ok or t['ok']
    end
    if t ~= 'none' and t ~= want then
      return redis.error_reply('WRONGTYPE delayq: key ' .. key .. ' holds a ' .. tostring(t) .. ', not a ' .. want .. '; nothing was changed')
    end
  end
  return nil
end

-- The job type an envelope names, read from its header: a body opens with
-- {"t":"<type>" (type names are letters, digits and ._-:/, which JSON writes
-- as they are), so no byte of the payload that follows can change or hide
-- it. A body without that header (stored before the header layout, with its
-- payload first, or written by another program) is decoded whole; nil when
-- that fails too (a payload cjson cannot decode: nested deeper than its
-- limit, an invalid escape), and the caller must not treat the job as one
-- of no type. job.headerType in Go reads the header by the same rule.
local function type_of(body)
  if not body then
    return nil
  end
  local t = string.match(body, '^{"t":"([%w%._:/%-]+)"[,}]')
  if t then
    return t
  end
  local ok, env = pcall(cjson.decode, body)
  if ok and type(env) == 'table' and type(env.t) == 'string' then
    return env.t
  end
  return nil
end

-- The flow-control key of an envelope (job.Key), read from its header
-- after "t" and the optional "u" and "ud": {"t":"<type>"[,"u":<ms>]
-- [,"ud":true],"k":"<key>" (keys are letters, digits and ._:/@+=-, which
-- JSON writes as they are, and never '#', so held .. '#' .. key names no
-- type's held set). nil for a body without one. job's encoder writes the
-- header in this order.
local function key_of(body)
  if not body then
    return nil
  end
  local _, pos = string.find(body, '^{"t":"[%w%._:/%-]+"')
  if not pos then
    return nil
  end
  local _, e = string.find(body, '^,"u":%d+', pos + 1)
  if e then
    pos = e
  end
  if string.sub(body, pos + 1, pos + 10) == ',"ud":true' then
    pos = pos + 10
  end
  return string.match(body, '^,"k":"([%w%._:/@%+=%-]+)"', pos + 1)
end

-- Publish score on channel when a job at score becomes the earliest of the
-- scheduled set and nothing there is due yet, so sleeping workers wake up
-- early. Call it before adding the member.
local function wake_if_earliest(scheduled, channel, score, now)
  if channel == nil or channel == '' then
    return
  end
  local first = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
  if first[2] == nil or (score < tonumber(first[2]) and tonumber(first[2]) > now) then
    redis.call('PUBLISH', channel, score)
  end
end

-- Whether v is an integer as Redis stores one (what INCR and HINCRBY
-- accept) that a Lua number holds exactly. Counters that are not were
-- written by another program; the scripts check before counting, because a
-- script that fails half-way keeps the writes it made before the error.
local function is_int(v)
  if type(v) ~= 'string' or #v > 17 or not (v == '0' or string.match(v, '^-?[1-9]%d*$')) then
    return false
  end
  local n = tonumber(v)
  return n > -9007199254740992 and n < 9007199254740992
end

-- A sorted-set score as a finite number: ZADD accepts +inf and -inf, which
-- would reach the caller as the smallest 64-bit integer. Both become
-- fallback.
local function finite(score, fallback)
  local n = tonumber(score)
  if n == nil or n ~= n or n == math.huge or n == -math.huge then
    return fallback
  end
  return n
end

-- The earliest ready time in the scheduled set, or -1 when it is empty or
-- holds only jobs that are never due (+inf). -inf counts as due now.
local function next_ready(scheduled, now)
  local first = redis.call('ZRANGE', scheduled, 0, 0, 'WITHSCORES')
  if first[2] == nil or tonumber(first[2]) == math.huge then
    return -1
  end
  return finite(first[2], now)
end

-- Redis's Lua unpack() takes a few thousand values at most, so commands with
-- many arguments are sent in chunks of this many (an even number, so that
-- score/member and field/value pairs stay together).
local CHUNK = 1000

-- Call cmd on key with the flat list args appended, in chunks; opt, when
-- given, goes before them (e.g. ZADD's 'XX').
local function call_chunked(cmd, key, args, opt)
  for i = 1, #args, CHUNK do
    if opt then
      redis.call(cmd, key, opt, unpack(args, i, math.min(i + CHUNK - 1, #args)))
    else
      redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
    end
  end
end

-- Moves every job of the held set key (one type's, held aside by a cap or
-- a rate limit) back to the schedule scheduled with its ready time, and
-- returns how many: a cleared cap or type limit releases what it held.
local function release_held(key, scheduled)
  local all = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  local members = {}
  for i = 1, #all, 2 do
    members[#members + 1] = all[i + 1]
    members[#members + 1] = all[i]
  end
  if #members == 0 then
    return 0
  end
  call_chunked('ZADD', scheduled, members)
  redis.call('ZREMRANGEBYRANK', key, 0, -1)
  return #members / 2
end

-- Keeps a hash of live leases, spent attempts, running capped jobs or
-- keys' running counts in Redis's hashtable encoding: one field that can
-- be no job id nor key ('{' is refused in both) with a value longer than
-- hash-max-listpack-value (64 bytes by default). A small hash is otherwise
-- a listpack, where every HSET, HGET and HDEL scans the list (O(n)), and a
-- claim or settle of a batch costs O(n^2); an emptied hash is deleted and
-- would start as a listpack again. One HSETNX per claim call, O(1) once
-- converted. Readers look fields up by job id or key; the few that read a
-- whole hash, or test whether one holds anything (holds_fields), pass over
-- the field. Redis configured with a larger hash-max-listpack-value keeps
-- its listpacks: correct, only slower.
local HASHTABLE_FIELD = '{encoding}'
local HASHTABLE_VALUE = 'keeps this hash in its hashtable encoding (O(1) per job); see docs/architecture.md'
local function keep_hashtable(key)
  redis.call('HSETNX', key, HASHTABLE_FIELD, HASHTABLE_VALUE)
end

-- Whether a hash that keep_hashtable may keep holds any other field: what
-- an EXISTS of it said before the field was there. O(1).
local function holds_fields(key)
  local n = redis.call('HLEN', key)
  return n > 1 or (n == 1 and redis.call('HEXISTS', key, HASHTABLE_FIELD) == 0)
end

-- read_chunked runs cmd, a read of key that answers one value per
-- argument (HMGET, ZMSCORE), for any number of arguments, CHUNK at a
-- time, and returns the values in the order of args.
local function read_chunked(cmd, key, args)
  local out = {}
  for i = 1, #args, CHUNK do
    local part = redis.call(cmd, key, unpack(args, i, math.min(i + CHUNK - 1, #args)))
    for j = 1, #part do
      out[#out + 1] = part[j]
    end
  end
  return out
end

-- HMGET of many fields, in chunks; missing fields are false.
local function hmget(key, fields)
  return read_chunked('HMGET', key, fields)
end

-- ZMSCORE of many members, in chunks; missing members are false.
local function zmscore(key, members)
  return read_chunked('ZMSCORE', key, members)
end

-- The score of the earliest member of a sorted set, or nil when it is empty.
local function earliest(zset)
  local first = redis.call('ZRANGE', zset, 0, 0, 'WITHSCORES')
  return tonumber(first[2])
end

-- A lease is held when leases[id] equals the token the claim handed out.
local function holds(leases, id, token)
  local current = redis.call('HGET', leases, id)
  return current and current == token
end

-- The leases of a batch: ARGV[first], ARGV[first + 1], ... are id, token
-- pairs. One HMGET checks them all. Returns out, aligned with the pairs (1
-- held, 0 lost; an id listed twice counts once), and the held ids.
local function held(leases, first)
  local ids = {}
  for i = first, #ARGV, 2 do
    ids[#ids + 1] = ARGV[i]
  end
  local current = hmget(leases, ids)
  local out, list, seen = {}, {}, {}
  for k = 1, #ids do
    local id = ids[k]
    if current[k] and current[k] == ARGV[first + 2 * k - 1] and not seen[id] then
      seen[id] = true
      list[#list + 1] = id
      out[k] = 1
    else
      out[k] = 0
    end
  end
  return out, list
end

-- Drop dead records beyond cap (oldest first) and older than now - max_age.
-- cap < 0 or max_age <= 0 disables that rule (cap 0 keeps none: a sharded
-- queue's small cap can leave some shards none).
--
-- Every record dropped is counted in the shard's counters (counts, a HASH):
-- dead_trimmed_cap and dead_trimmed_age, one HINCRBY per rule that dropped
-- any. With keep > 0 the dropped records are moved, oldest first, to the
-- shard's trimmed LIST (trimmed) as "<cap|age>\n<died ms>\n<trimmed
-- ms>\n<record>", for a worker to hand to its hook (worker.Config.
-- OnDeadTrimmed), as long as that list holds fewer than keep; those that do
-- not fit are counted in dead_trimmed_unarchived. With warn_every > 0, a
-- trim by the cap claims the queue's warning (dead_trim_warned, the ms of
-- the last one) when none was claimed in the last warn_every ms.
--
-- Returns dropped, dropped by the cap, dropped by age, kept, unarchived,
-- warn (1 when this call claimed the warning).
local function trim_dead(dead, index, cap, max_age, now, counts, trimmed, keep, warn_every)
  local by_age, by_cap = 0, 0
  local kept, unarchived = 0, 0
  local room = 0
  if keep > 0 then
    room = keep - redis.call('LLEN', trimmed)
  end
  -- Move the records of ids (died-at in scores, WITHSCORES order) to the
  -- trimmed list while there is room; count the rest unarchived.
  local function keep_them(flat, reason)
    if keep <= 0 then
      return
    end
    local n = #flat / 2
    local take = math.max(0, math.min(room, n))
    unarchived = unarchived + (n - take)
    if take == 0 then
      return
    end
    local ids = {}
    for j = 1, take do
      ids[j] = flat[2 * j - 1]
    end
    local recs = hmget(dead, ids)
    local entries = {}
    local stamp = string.format('%d', now)
    for j = 1, take do
      if recs[j] then
        entries[#entries + 1] = reason .. '\n' .. flat[2 * j] .. '\n' .. stamp .. '\n' .. recs[j]
      end
    end
    if #entries > 0 then
      call_chunked('RPUSH', trimmed, entries)
    end
    kept = kept + #entries
    room = room - take
  end
  if max_age > 0 then
    local old = redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. (now - max_age), 'WITHSCORES')
    keep_them(old, 'age')
    for j = 1, #old, 2 do
      redis.call('HDEL', dead, old[j])
      redis.call('ZREM', index, old[j])
    end
    by_age = #old / 2
  end
  if cap >= 0 then
    local excess = redis.call('ZCARD', index) - cap
    if excess > 0 then
      if keep > 0 then
        local ids = redis.call('ZRANGE', index, 0, excess - 1, 'WITHSCORES')
        keep_them(ids, 'cap')
        for j = 1, #ids, 2 do
          redis.call('HDEL', dead, ids[j])
        end
      else
        local ids = redis.call('ZRANGE', index, 0, excess - 1)
        call_chunked('HDEL', dead, ids)
      end
      redis.call('ZREMRANGEBYRANK', index, 0, excess - 1)
      by_cap = excess
    end
  end
  local warn = 0
  if by_age > 0 then
    redis.call('HINCRBY', counts, 'dead_trimmed_age', by_age)
  end
  if by_cap > 0 then
    redis.call('HINCRBY', counts, 'dead_trimmed_cap', by_cap)
    if warn_every > 0 then
      local last = redis.call('HGET', counts, 'dead_trim_warned')
      if not (last and is_int(last) and now - tonumber(last) < warn_every and tonumber(last) <= now) then
        redis.call('HSET', counts, 'dead_trim_warned', string.format('%d', now))
        warn = 1
      end
    end
  end
  if unarchived > 0 then
    redis.call('HINCRBY', counts, 'dead_trimmed_unarchived', unarchived)
  end
  return by_age + by_cap, by_cap, by_age, kept, unarchived, warn
end

-- Forget at most limit uniqueness entries whose window is over (score at
-- or before now): the lowest-scored members of unique (a ZSET id ->
-- remembered until ms), so a bounded ZRANGEBYSCORE finds them and one
-- ZREMRANGEBYRANK removes them. A live window (score after now) is never
-- touched. Returns how many were removed.
local function tidy_unique(unique, now, limit)
  local over = redis.call('ZRANGEBYSCORE', unique, '-inf', now, 'LIMIT', 0, limit)
  if #over > 0 then
    redis.call('ZREMRANGEBYRANK', unique, 0, #over - 1)
  end
  return #over
end

-- The per-minute history of a queue: prefix is ns:{q}:hist: (declared in
-- KEYS); the key of a minute is prefix .. (ms / 60000). It shares the queue's
-- hash tag, so it is in the slot of the declared keys. A key lives a day after
-- its last write. Writes are best effort (redis.pcall): a failure here never
-- fails the script after it moved jobs.
local HISTORY_TTL = 86400
-- Lateness counted per job is capped at 2^31 ms (24.8 days), so that the
-- per-minute sums stay far from int64 overflow.
local HISTORY_MAX_LATE = 2147483647

-- Add n to field of the history minute that holds now. Returns the key, or
-- nil when n is 0.
local function history(prefix, now, field, n)
  if n <= 0 then
    return nil
  end
  local key = prefix .. string.format('%d', math.floor(now / 60000))
  redis.pcall('HINCRBY', key, field, string.format('%d', n))
  redis.pcall('EXPIRE', key, HISTORY_TTL)
  return key
end

-- Raise field of the history key to v if it is lower or missing.
local function history_max(key, field, v)
  local current = redis.pcall('HGET', key, field)
  if current == false or (type(current) == 'string' and v > (tonumber(current) or -1)) then
    redis.pcall('HSET', key, field, string.format('%d', v))
  end
end

-- Call records (one answer per call; see broker/calls.go): key is a call's
-- record, the script's ns:{q}:c: prefix .. the call id; window is how long
-- a record lives, in ms (<= 0: none is kept). recorded returns the outcome
-- an earlier send of the call recorded (a string), false on the first
-- send, or an error reply (a table) when key holds another type; it is a
-- read, so a script calls it before its first write.
local function recorded(key, window)
  if window <= 0 then
    return false
  end
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    return expect({key, 'string'}) or v
  end
  return v
end

-- Keep outcome (a string or number) as the call's answer for window ms.
local function record(key, window, outcome)
  if window > 0 then
    redis.call('SET', key, outcome, 'PX', window)
  end
end

-- The ending of a job: the one step every script that ends a job takes
-- (settle's acks and kills, cancel's removal of a scheduled, parked or held
-- job, claim's expiry), so that every structure waiting for an ending
-- learns of it whatever the path. An ending is one of
--   's' succeeded (acked),
--   'd' dead (in the dead letters: retries spent, permanent, cancelled
--       while running, expired),
--   'x' gone without success and without a dead record (cancelled before it
--       ran, expired with job.DropExpired).
-- Recorded here, in the job's own shard:
--   - a batch member's ending in ns:{q}:batched (id -> "<batch>\n<ending>"),
--     which the broker then counts in the batch's own slot (Go:
--     Broker.endBatches, from the script's caller or the reaper's sweep);
--     the batch takes the next jobs of a member that did not succeed back
--     out (batch_end.lua);
--   - uniqueness memory, ns:{q}:unique (job.Unique): after 's', and after
--     'd' or 'x' when the job asks for endings without success too
--     (job.UniqueIncludeDead).
-- Usage: local e = endings(batched key, unique key, now ms); end_job(e, ...)
-- per job; flush_endings(e) once before the script returns. The keys'
-- types are checked by endings_check before the script's first write.
local function endings(batched, unique, now)
  return {batched = batched, unique = unique, now = now, b = {}, u = {}}
end

-- batch: the job's batch id ("" or nil for none); unique_ms: its uniqueness
-- window in ms (0: not unique); unique_dead: whether an ending without
-- success is remembered too. For 's' and a kill, callers that already
-- decided the window (settle: the worker sends it) pass it with
-- unique_dead true.
local function end_job(e, id, ending, batch, unique_ms, unique_dead)
  if batch and batch ~= '' then
    e.b[#e.b + 1] = id
    e.b[#e.b + 1] = batch .. '\n' .. ending
  end
  local u = tonumber(unique_ms) or 0
  if u > 0 and (ending == 's' or unique_dead) then
    e.u[#e.u + 1] = e.now + u
    e.u[#e.u + 1] = id
  end
end

-- The type check of the keys an ending may write: an error reply, or nil.
local function endings_check(e)
  return expect({e.batched, 'hash', e.unique, 'zset'})
end

local function flush_endings(e)
  if #e.b > 0 then
    call_chunked('HSET', e.batched, e.b)
  end
  if #e.u > 0 then
    local zset = e.unique
    redis.call('ZREMRANGEBYSCORE', zset, '-inf', e.now)
    call_chunked('ZADD', zset, e.u)
  end
end

-- What a stored envelope says of its ending: its batch id ("" for none),
-- its uniqueness window in ms (0 for none) and whether an ending without
-- success is remembered too. The window is read from the header
-- ({"t":"<type>","u":<ms>[,"ud":true]); the batch ("bt", a field after the
-- payload) from the body decoded, or, when cjson cannot decode it, from the
-- last "bt" field of the body (a batch records an ending only for its own
-- members, so a false match counts nothing).
local function ending_of(body)
  if not body then
    return '', 0, false
  end
  local u, ud = 0, false
  local um, rest = string.match(body, '^{"t":"[%w%._:/%-]+","u":(%d+)()')
  if um then
    u, ud = tonumber(um), string.sub(body, rest, rest + 9) == ',"ud":true'
  end
  local batch = ''
  if string.find(body, '"bt":"', 1, true) then
    local ok, env = pcall(cjson.decode, body)
    if ok and type(env) == 'table' then
      if type(env.bt) == 'string' then
        batch = env.bt
      end
      if not um and type(env.u) == 'number' then
        u, ud = env.u, env.ud == true
      end
    else
      for b in string.gmatch(body, ',"bt":"([%w%._:%-]+)"') do
        batch = b
      end
    end
  end
  return batch, u, ud
end

-- held_add counts delta more jobs held by the cap or pause of key member
-- in key (ns:{q}:keyheld: ZSET key -> its held jobs, and member '#',
-- which no key can be, -> the shard's total), dropping a count that
-- reaches 0. Every script that adds to or takes from a key's held set
-- calls it with what it moved. Two ZINCRBY (and a ZREM for a count that
-- ran out); nothing when delta is 0.
local function held_add(key, member, delta)
  if delta == 0 then
    return
  end
  if tonumber(redis.call('ZINCRBY', key, delta, member)) <= 0 then
    redis.call('ZREM', key, member)
  end
  if tonumber(redis.call('ZINCRBY', key, delta, '#')) <= 0 then
    redis.call('ZREM', key, '#')
  end
end

-- key_group adds the job id, ready at ready, to the jobs of its key in
-- groups (key -> a flat list ready, id, as ZADD takes it), noting a key
-- seen for the first time at the end of order.
local function key_group(groups, order, key, ready, id)
  local m = groups[key]
  if not m then
    m = {}
    groups[key] = m
    order[#order + 1] = key
  end
  m[#m + 1] = ready
  m[#m + 1] = id
end

-- key_hold adds the jobs of each key of order (groups, as key_group
-- builds it) to the key's held set (prefix .. '#' .. key) and counts what
-- each set gained in heldkeys (held_add). Every path that holds keyed
-- jobs goes through it: the enqueue and the claim under fair turns, and
-- the claim whose key controls hold a job. Per key a ZADD per CHUNK jobs
-- and held_add's two ZINCRBY.
local function key_hold(prefix, heldkeys, groups, order)
  for _, k in ipairs(order) do
    local m, added, zset = groups[k], 0, prefix .. '#' .. k
    for i = 1, #m, CHUNK do
      added = added + redis.call('ZADD', zset, unpack(m, i, math.min(i + CHUNK - 1, #m)))
    end
    held_add(heldkeys, k, added)
  end
end

-- turn_join puts the keys of order that are not in the fair turns (key,
-- ns:{q}:keyturn: ZSET key -> its place) at the back, in that order; a
-- key already there keeps its place. Returns the place after which keys
-- go to the back from now on. One ZRANGE, and one ZADD NX per CHUNK keys.
local function turn_join(key, order)
  local top = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) or 0
  if #order == 0 then
    return top
  end
  local joins = {}
  for i, k in ipairs(order) do
    joins[#joins + 1] = top + i
    joins[#joins + 1] = k
  end
  call_chunked('ZADD', key, joins, 'NX')
  return top + #order
end

-- parked_add counts delta more jobs of type t parked by its pause in key
-- (ns:{q}:parkedtypes: HASH type -> its jobs in ns:{q}:parked), dropping
-- a count that reaches 0. Every script that moves a job into or out of the
-- parked set calls it with what it moved (pause.lua's resume of a type
-- rewrites the hash whole instead, from the bodies it reads). One HINCRBY
-- (and an HDEL for a count that ran out); nothing when delta is 0 or the
-- type is unknown.
local function parked_add(key, t, delta)
  if delta == 0 or not t then
    return
  end
  if tonumber(redis.call('HINCRBY', key, t, delta)) <= 0 then
    redis.call('HDEL', key, t)
  end
end

-- Per-key caps (Broker.SetKeyConcurrency): the running jobs of keys ended
-- (keys lists one key per ended job). Their counts in run (HASH key -> n
-- running) go down, and as many held jobs of each key (held .. '#' ..
-- key, earliest ready time first) go back to scheduled with their ready
-- times, first in line for the next claim; heldkeys (ZSET key -> its
-- held jobs, see held_add) counts them out. Returns how many went back.
-- One HMGET and one ZMSCORE of heldkeys (which counts every key's held
-- jobs exactly, so a key it does not list holds none), then per distinct
-- key holding jobs one ZPOPMIN, one ZADD and held_add's two ZINCRBY; and
-- one HSET and HDEL.
local function key_release(run, held, heldkeys, scheduled, keys)
  local by, list = {}, {}
  for _, k in ipairs(keys) do
    if not by[k] then
      list[#list + 1] = k
      by[k] = 0
    end
    by[k] = by[k] + 1
  end
  if #list == 0 then
    return 0
  end
  local cur = hmget(run, list)
  local holding = zmscore(heldkeys, list)
  local set, gone, back = {}, {}, 0
  for j, k in ipairs(list) do
    local left = (tonumber(cur[j]) or 0) - by[k]
    if left > 0 then
      set[#set + 1] = k
      set[#set + 1] = string.format('%d', left)
    else
      gone[#gone + 1] = k
    end
    local got, zset = {}, held .. '#' .. k
    if holding[j] then
      got = redis.call('ZPOPMIN', zset, by[k])
    end
    if #got > 0 then
      local members = {}
      for i = 1, #got, 2 do
        members[#members + 1] = got[i + 1]
        members[#members + 1] = got[i]
      end
      call_chunked('ZADD', scheduled, members)
      back = back + #got / 2
    end
    held_add(heldkeys, k, -#got / 2)
  end
  if #set > 0 then
    call_chunked('HSET', run, set)
  end
  if #gone > 0 then
    call_chunked('HDEL', run, gone)
  end
  return back
end
