-- claim: lease up to n due jobs to the caller.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[4] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[5] -> ns:{q}:leases      HASH id -> fencing token of the live lease
-- KEYS[6] -> ns:{q}:seq         STRING  -> last fencing token handed out
-- KEYS[7] -> ns:{q}:hist:       prefix of the per-minute history (claimed,
--                               late_sum, late_max: lateness = now - ready)
-- KEYS[8] -> ns:{q}:w:<worker>  HASH lane -> the worker's last call there
--                               (field "claim": the claim, for a replay)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> n, the most jobs to claim
-- ARGV[3] -> lease ms
-- ARGV[4] -> claim id, chosen by the worker: a call with the id of the
--            worker's last claim here replays it
-- ARGV[5] -> the user's queue name (for the dead records of expired jobs)
-- ARGV[6] -> cap on dead records (< 0: none)
-- ARGV[7] -> max age of dead records in ms (<= 0: none)
-- ARGV[8] -> ahead: how many of the n may wait in the worker for a free
--            goroutine (prefetch); "" or absent = 0
-- ARGV[9] -> how long the worker's record KEYS[8] lives, ms (twice its
--            lease: see settle.lua's ARGV[4]); "" or absent = the lease
-- KEYS[9] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[10] -> ns:{q}:dead:index ZSET id -> died-at ms
-- KEYS[11] -> ns:{q}:unique     ZSET id -> remembered until ms
-- KEYS[12] -> ns:{q}:counts     HASH counter -> n
--             (KEYS[9] to KEYS[12] are touched only when a due job has
--             expired)
-- KEYS[13] -> ns:{q}:controls     HASH "*" -> the queue is paused,
--                               "t:<type>" -> the type is paused
-- KEYS[14] -> ns:{q}:parked     ZSET id -> ready ms: due jobs of paused
--                               types (touched only when a type is paused)
-- KEYS[15] -> ns:{q}:rate       HASH "*" / "<type>" -> GCRA theoretical
--                               arrival time ms (touched only when a rate
--                               limit is set)
-- KEYS[16] -> ns:{q}:running    HASH id -> type ("*": counted by the queue's
--                               cap only): jobs leased under a concurrency
--                               cap (touched only when a cap is set)
-- KEYS[17] -> ns:{q}:held:      prefix of the per-type ZSETs id -> ready ms
--                               of due jobs set aside because their type was
--                               at its cap or out of rate-limit tokens
-- KEYS[18] -> ns:{q}:batched    HASH id -> "<batch id>\n<ending>": a batch
--                               member's ending (touched only when a due
--                               job has expired)
-- KEYS[19] -> ns:{q}:window:    prefix of the ZSETs token -> claim ms: the
--                               logs of strict rate limits ("*" the queue's,
--                               else the type's; touched only when one is set)
-- KEYS[20] -> ns:{q}:dead:trimmed LIST of trimmed dead records kept for the
--                               workers' hook (trim_dead; touched only when a
--                               due job has expired and ARGV[10] > 0)
-- ARGV[10] -> how many trimmed records KEYS[20] may hold (0 or absent:
--            none kept). Trims here count in KEYS[12] but claim no
--            warning: a worker's settle does.
-- KEYS[21] -> ns:{q}:keyrun     HASH key -> jobs of the key leased under
--                               its cap (touched only when key caps are set)
-- KEYS[22] -> ns:{q}:keycaps    HASH key -> "share/total": the keys' own caps
-- KEYS[23] -> ns:{q}:keyheld    ZSET key -> how many jobs its cap or pause
--                               holds in KEYS[17] .. '#' .. key, and '#' ->
--                               their total
-- KEYS[24] -> ns:{q}:keypaused  HASH key -> paused at ms: the paused keys
--                               (touched only while field "kp" of KEYS[13]
--                               says some key is paused)
-- KEYS[25] -> ns:{q}:parkedtypes HASH type -> its jobs in KEYS[14]
--                               (touched only when a job is parked: one
--                               HINCRBY per type parking, parked_add)
-- KEYS[26] -> ns:{q}:keyrates   HASH key -> a key's own rate limit, as
--                               the "r" fields of KEYS[13]
-- KEYS[27] -> ns:{q}:keywait    ZSET key -> ms of its next token: the keys
--                               holding jobs for want of one
-- KEYS[28] -> ns:{q}:keytat:    prefix of the STRINGs key -> GCRA
--                               theoretical arrival time of a key's rate,
--                               each expiring when it is reached
--             (KEYS[26] to KEYS[28] are touched only while field "kr" of
--             KEYS[13] says some key has a rate limit)
-- KEYS[29] -> ns:{q}:keyturn    ZSET key -> its place in the turns: the
--                               keys whose due jobs wait in their held set
--                               for a turn, and '#' for the jobs without a
--                               key (touched only while field "kf" of
--                               KEYS[13] is set)
-- KEYS[30] -> ns:{q}:keyweights HASH key -> its weight in the fair turns
--                               (touched only while fields "kf" and "kw"
--                               of KEYS[13] are both set)
--
-- Expiry (job.ExpireAt): a due job whose envelope ends in ,"x":"<ms>"} (or
-- "<ms>d"}) with <ms> <= now is not leased: it goes to the dead letters with
-- reason "expired", or, with the "d" mark, is deleted and counted in
-- KEYS[12] field expired_dropped. Either way it ends through end_job (the
-- prelude): a batch member's ending ('d', or 'x' when dropped) is recorded
-- in KEYS[18] for its batch, and its uniqueness remembered when it asks
-- for endings without success too. Reading the mark costs a string match per claimed job,
-- no Redis command; an expired job costs a few commands more.
--
-- Pause (Broker.Pause, PauseType): one HGETALL of KEYS[13] per call. A
-- paused queue claims nothing and reports next -1 (its workers sleep until
-- the resume's wake-up notice); a due job of a paused type is moved to
-- KEYS[14] instead of being leased, and comes back when the type is
-- resumed.
--
-- Types: while some type of the queue is paused, capped or rate-limited,
-- each due job's type is read from the header of its body (type_of in the
-- prelude: a string match at the start, never a decode of the payload).
-- A body without the header (stored before it) is decoded whole; one
-- whose type cannot be read that way either is leased but reported in
-- the reply's unreadable list, and the worker dead-letters it as corrupt
-- without running it: no payload can slip a job past the type's checks.
--
-- Rate limits (Broker.SetRateLimit): fields "r" (the queue) and "r:<type>"
-- of KEYS[13] hold "count/per ms/burst/shards"; each shard gets count per
-- (per x shards). GCRA: a bucket's theoretical arrival time tat (KEYS[15])
-- lets a job start when tat - now <= tau (tau = T x (burst - 1), T = the
-- interval between tokens), and moves tat on by T. A strict window
-- (".../s/<share>/<slack ms>") is a log instead (KEYS[19]..bucket, token
-- -> claim ms, expiring a window after its last entry): a job may start
-- while fewer than share entries are younger than per + slack. The
-- queue's limit caps n before anything is read. A type's tokens go first
-- to its jobs held for want of one (KEYS[17]..type, ZPOPMIN: earliest
-- ready time first, as many as it has tokens and room under its cap); a
-- due job of a limited type met without a token is held there with its
-- ready time, so it keeps its place and stays due (stats.lua counts it),
-- blocks neither the other types' jobs nor a worker, and spends no
-- attempt. Each such job costs one ZADD and one ZPOPMIN entry, O(log N).
-- next then says when the next token comes (or now, if the type has
-- tokens left and n ran out), so no worker spins. With no limit set none
-- of this runs.
--
-- Concurrency caps (Broker.SetConcurrency): fields "c" (the queue) and
-- "c:<type>" of KEYS[13] hold "share/total", share being this shard's part
-- of the cap. A job runs under the queue's cap while its lease is live: the
-- queue's room is share - ZCOUNT(KEYS[2], now, +inf), so a crashed
-- worker's jobs stop counting when their lease runs out. A type's running
-- jobs are those of KEYS[16] whose lease in KEYS[2] is live (one HGETALL
-- and one ZMSCORE, O(running capped jobs)); the claim leasing a job of a
-- capped type records it there, and every operation that ends the lease
-- removes it (settle.lua) and wakes the queue's workers. A due job of a
-- type at its cap is moved to KEYS[17]..type (no attempt spent, no head of
-- line blocked); a claim that finds room for the type moves that many back
-- to the schedule at their ready times, before it looks for due jobs. A
-- queue at its cap claims nothing and reports, as next, the earliest live
-- lease deadline (when a crashed worker's slot comes back) if jobs are due.
--
-- Per-key caps (Broker.SetKeyConcurrency): field "k" of KEYS[13] holds
-- the default cap of every key, "share/total", or "-" when only some keys
-- have their own (KEYS[22], key -> "share/total"). While it is there,
-- each due job's key is read from its header (key_of in the prelude, a
-- string match); for the distinct keys of the due jobs one HMGET of
-- KEYS[22] and one of KEYS[21] read their caps and running counts. A job
-- whose key is at its cap is moved to KEYS[17] .. '#' .. key with its
-- ready time (no attempt spent; counted in KEYS[23], held_add in the
-- prelude: two ZINCRBY per key holding); one that
-- starts is recorded in KEYS[16] as "<type or *>\n<key>" and counted in
-- KEYS[21] (one HSET of the new counts). The key's check comes after the
-- type's: a job held by its type takes no slot of its key, and a job held
-- by its key gives back the type's slot or token it was given. The
-- settle that ends a counted lease (settle.lua: the one place every lease
-- ends, the reaper's included) lowers the count and moves as many of the
-- key's held jobs back to the schedule (key_release in the prelude). Jobs
-- without a key, and every job while no key cap is set, cost nothing here.
--
-- Per-key rate limits (Broker.SetKeyRateLimit): field "kr" of KEYS[13]
-- holds the default of every key, as a type's "r:<type>", or "-" when
-- only some keys have their own (KEYS[26]). Keys are read as for key
-- caps; for the distinct keys of the due jobs one HMGET of KEYS[26] reads
-- their limits, and each limited key's bucket is read (GCRA: one GET of
-- KEYS[28] .. key; strict: its log KEYS[19] .. '#' .. key, trimmed and
-- counted). A job of a key without a token is held as one at its cap
-- (KEYS[17] .. '#' .. key, with its ready time, counted in KEYS[23]) and
-- the key is put in KEYS[27] with the time of its next token. Each claim
-- first takes up to KEY_WAKES keys whose time has come from KEYS[27] and
-- moves as many of each key's held jobs back to the schedule as the key
-- has tokens (and the claim room), earliest ready first, so they are
-- claimed in this call ahead of later jobs; a key still holding jobs goes
-- back into KEYS[27] at its next token. next is at most the earliest time
-- in KEYS[27], so a worker sleeps until a key has a token. The key's rate
-- is checked after its pause and cap: a job held by either spends no
-- token. Jobs without a key, and every job while no key rate is set,
-- cost nothing here.
--
-- Fair turns between keys (Broker.SetKeyFairness): while field "kf" of
-- KEYS[13] is set, a claim first reads up to FAIR_SCAN due jobs of the
-- schedule in ready order and moves those with a key to their key's held
-- set (KEYS[17] .. '#' .. key, with their ready times, counted in
-- KEYS[23]), the key joining the turns (KEYS[29]) at the back; the jobs
-- without a key stay in the schedule and take their turns as one key,
-- '#'. Then the claim's room is dealt out in turns, front first: each key
-- gets an equal share (at least one job), popped earliest first from its
-- held set, a key with fewer jobs giving its rest to the others in
-- further rounds; the keys served go to the back, those left empty leave.
-- The jobs so chosen go through every check below as scanned ones would
-- (type pause, caps and limits, the key's pause, cap and rate, expiry); a
-- key whose job is held by its own controls leaves the turns (the slot,
-- token or resume that sends its jobs back to the schedule brings it
-- back). So one key's backlog delays another key's due job by at most
-- one turn of the keys ahead of it. Cost: one ZRANGEBYSCORE, one HMGET
-- of the scanned bodies and, per key moved, one ZADD and two ZINCRBY;
-- per key served one ZPOPMIN per round; one ZADD and one ZREM of the
-- turns. Weights (Broker.SetKeyWeight): while field "kw" of KEYS[13] is
-- set too, one HMGET of KEYS[30] reads the weights of the keys dealt to
-- (1 for a key not there), and each round gives each key its weight
-- times the room over the sum of their weights (at least its weight),
-- bounded by the room left; a turn the room cut short goes on in the next
-- claim (field '#turn' of KEYS[30], read by the same HMGET, written by
-- one HSET or HDEL); with "kw" unset nothing more is read.
--
-- Paused keys (Broker.PauseKey): field "kp" of KEYS[13] is there while
-- some key is paused (KEYS[24]). Then keys are read as for key caps, and
-- one HMGET of KEYS[24] for the distinct keys of the due jobs finds the
-- paused ones: a due job of a paused key is held as one of a key at its
-- cap (in KEYS[17] .. '#' .. key, no attempt spent, taking no slot of its
-- type nor of its key) until ResumeKey sends the key's held jobs back.
--
-- Prefetch: a shard with a concurrency cap of the queue or of a type, or a
-- rate limit (of the queue, of any type or of keys) leases at most
-- n - ahead, so that every lease it hands out is a job that starts at
-- once: a lease counted against such a cap is a running job, and a token
-- is spent by a start. The reply's controlled flag tells the worker so. A
-- key cap does not stop the prefetch: a job claimed ahead holds its key's
-- slot while it waits in the worker, so its key stays within its cap, and
-- the other keys' jobs are not held back by it (a queue's cap counts every
-- lease against one n, which prefetched jobs would take from the running).
--
-- Returns {now µs, next, jobs, orphans, paused, controlled, unreadable}:
-- next is the earliest ready time left in the scheduled set (-1 when
-- empty); jobs is a flat list of id, token, attempt, ready ms, envelope;
-- orphans lists ids that were scheduled without an envelope, now removed;
-- unreadable lists the ids among jobs whose type could not be read while a
-- type control was set (see Types). A job whose attempts counter is not an
-- integer comes with attempt -1: the caller reports it corrupt.
--
-- A replay (the reply of the first call was lost, and the worker or its
-- client sent it again) claims nothing new: it returns the jobs of the
-- first call that are still held under its tokens, with their attempts
-- unchanged, and those of them it reported unreadable reported so again.
-- The record (written only when a claim takes jobs: id, token, ready ms and
-- "u" unreadable or "-" per job) lives for ARGV[9] ms.
--
-- A fixed number of commands per call, whatever n: each step below is one
-- command over all claimed jobs (in chunks), O(log N) per job.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash',
  KEYS[5], 'hash', KEYS[6], 'string', KEYS[8], 'hash'})
if bad then
  return bad
end
local now_u = now_us()
local now = ms_of(now_u)
local n, lease, cid = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local jobs, orphans, unreadable = {}, {}, {}

local last = redis.call('HGET', KEYS[8], 'claim')
if last and string.sub(last, 1, #cid + 1) == cid .. '\n' then
  local f = {}
  for part in string.gmatch(string.sub(last, #cid + 2), '[^\n]+') do
    f[#f + 1] = part
  end
  for i = 1, #f - 3, 4 do
    local id, token, ready, mark = f[i], f[i + 1], tonumber(f[i + 2]), f[i + 3]
    if holds(KEYS[5], id, token) then
      local body = redis.call('HGET', KEYS[3], id)
      local spent = redis.call('HGET', KEYS[4], id)
      if body and ready then
        local attempt = -1
        if spent and is_int(spent) then
          attempt = tonumber(spent)
        end
        jobs[#jobs + 1] = id
        jobs[#jobs + 1] = tonumber(token)
        jobs[#jobs + 1] = attempt
        jobs[#jobs + 1] = ready
        jobs[#jobs + 1] = body
        if mark == 'u' then
          unreadable[#unreadable + 1] = id
        end
      end
    end
  end
  return {now_u, next_ready(KEYS[1], now), jobs, orphans, 0, 0, unreadable}
end

-- s in base64 (RFC 4648, padded), for a dead record's "envb": a body that
-- cjson cannot decode may still not be JSON the record can hold as is.
local B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/'
local function base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = string.byte(s, i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local q = {math.floor(n / 262144), math.floor(n / 4096) % 64, math.floor(n / 64) % 64, n % 64}
    for j = 1, 4 do
      out[#out + 1] = string.sub(B64, q[j] + 1, q[j] + 1)
    end
    if not b then
      out[#out - 1], out[#out] = '=', '='
    elseif not c then
      out[#out] = '='
    end
  end
  return table.concat(out)
end

-- expire_jobs ends the jobs ids[k], k in which, found expired: dead
-- records with reason "expired", or deleted and counted when marked "d".
-- They are marked in ended, so that they are not leased.
local function expire_jobs(ids, bodies, which, now, ended)
  local gone, records, index = {}, {}, {}
  local ends = endings(KEYS[18], KEYS[11], now)
  local dropped = 0
  for _, k in ipairs(which) do
    gone[#gone + 1] = ids[k]
  end
  local spent = hmget(KEYS[4], gone)
  for j, k in ipairs(which) do
    local id, body = ids[k], bodies[k]
    local x, drop = string.match(string.sub(body, -32), ',"x":"(%d+)(d?)"}$')
    local batch, u, ud = ending_of(body)
    if drop == 'd' then
      dropped = dropped + 1
      end_job(ends, id, 'x', batch, u, ud)
    else
      end_job(ends, id, 'd', batch, u, ud)
      local ok, env = pcall(cjson.decode, body)
      if not ok or type(env) ~= 'table' then
        ok, env = false, nil
      end
      local typ, why = type_of(body) or '', 'expired: not started by its expiry at ' .. x .. ' ms (server time ' .. string.format('%d', now) .. ' ms)'
      if env and type(env.e) == 'string' and env.e ~= '' then
        why = why .. '; last error: ' .. env.e
      end
      local att = 0
      if spent[j] and is_int(spent[j]) then
        att = tonumber(spent[j])
      end
      local rec = '{"id":' .. cjson.encode(id) .. ',"q":' .. cjson.encode(ARGV[5]) .. ',"t":' .. cjson.encode(typ)
      if ok then
        rec = rec .. ',"env":' .. body
      else
        rec = rec .. ',"envb":"' .. base64(body) .. '"'
      end
      rec = rec .. ',"err":' .. cjson.encode(why) .. ',"att":' .. string.format('%d', att) .. ',"why":"expired"}'
      records[#records + 1] = id
      records[#records + 1] = rec
      index[#index + 1] = now
      index[#index + 1] = id
    end
    ended[k] = true
  end
  call_chunked('HDEL', KEYS[3], gone)
  call_chunked('HDEL', KEYS[4], gone)
  if #records > 0 then
    call_chunked('HSET', KEYS[9], records)
    call_chunked('ZADD', KEYS[10], index)
    trim_dead(KEYS[9], KEYS[10], tonumber(ARGV[6]), tonumber(ARGV[7]), now, KEYS[12], KEYS[20], tonumber(ARGV[10]) or 0, 0)
    history(KEYS[7], now, 'dead', #records / 2)
  end
  flush_endings(ends)
  if dropped > 0 then
    redis.call('HINCRBY', KEYS[12], 'expired_dropped', dropped)
  end
end

-- Pauses: the queue's ("*") and its types' ("t:<type>"). A key of the wrong
-- type fails here, before any write, and is named (a pcall: checking its
-- type first would cost every claim a command).
local pauses = redis.pcall('HGETALL', KEYS[13])
if pauses.err then
  return expect({KEYS[13], 'hash'}) or pauses
end
local paused_types, any_type = {}, false
local qrate, trates, any_rate = nil, {}, false
local qcap, tcaps, any_tcap = nil, {}, false
local kdefault, any_kcap, any_kpause = nil, false, false
local krdefault, any_krate = '', false
local any_fair, any_weight = false, false
local function parse_cap(v)
  local share = tonumber((string.match(v, '^(%d+)/%d+$')))
  if share and share >= 1 then
    return share
  end
  return nil
end
local function parse_rate(v, name)
  local count, per, burst, shards, rest = string.match(v, '^(%d+)/(%d+)/(%d+)/(%d+)(.*)$')
  count, per, burst, shards = tonumber(count), tonumber(per), tonumber(burst), tonumber(shards)
  if not count or count < 1 or per < 1 or shards < 1 then
    return nil
  end
  if rest ~= '' then
    local share, slack = string.match(rest, '^/s/(%d+)/(%d+)$')
    share, slack = tonumber(share), tonumber(slack)
    if not share or share < 1 then
      return nil
    end
    return {name = name, strict = true, share = share, window = per + slack, log = name}
  end
  local T = per * shards / count
  return {name = name, T = T, tau = T * (math.max(burst, 1) - 1)}
end
for i = 1, #pauses, 2 do
  local f = pauses[i]
  if f == '*' then
    return {now_u, -1, jobs, orphans, 1, 0, {}}
  elseif f == 'r' then
    qrate = parse_rate(pauses[i + 1], '*')
  elseif string.sub(f, 1, 2) == 'r:' then
    local t = string.sub(f, 3)
    trates[t] = parse_rate(pauses[i + 1], t)
    any_rate = any_rate or trates[t] ~= nil
  elseif f == 'c' then
    qcap = parse_cap(pauses[i + 1])
  elseif f == 'k' then
    any_kcap = true
    kdefault = parse_cap(pauses[i + 1])
  elseif f == 'kp' then
    any_kpause = true
  elseif f == 'kr' then
    any_krate = true
    krdefault = pauses[i + 1]
  elseif f == 'kf' then
    any_fair = true
  elseif f == 'kw' then
    any_weight = true
  elseif string.sub(f, 1, 2) == 'c:' then
    local cap = parse_cap(pauses[i + 1])
    if cap then
      tcaps[string.sub(f, 3)] = cap
      any_tcap = true
    end
  else
    paused_types[string.sub(f, 3)] = true
    any_type = true
  end
end
local controlled = 0
if qrate or any_rate or qcap or any_tcap or any_krate then
  controlled = 1
  n = math.max(n - (tonumber(ARGV[8]) or 0), 0)
end
if qrate or any_rate then
  local spec = {KEYS[15], 'hash'}
  for t, r in pairs(trates) do
    spec[#spec + 1] = KEYS[17] .. t
    spec[#spec + 1] = 'zset'
    if r.strict then
      local log = r.log
      spec[#spec + 1] = KEYS[19] .. log
      spec[#spec + 1] = 'zset'
    end
  end
  if qrate and qrate.strict then
    local log = qrate.log
    spec[#spec + 1] = KEYS[19] .. log
    spec[#spec + 1] = 'zset'
  end
  bad = expect(spec)
  if bad then
    return bad
  end
end
if qcap or any_tcap then
  local spec = {KEYS[16], 'hash'}
  for t in pairs(tcaps) do
    spec[#spec + 1] = KEYS[17] .. t
    spec[#spec + 1] = 'zset'
  end
  bad = expect(spec)
  if bad then
    return bad
  end
end
-- The queue's cap: how many may start now.
local q_capped = false
if qcap then
  local room = qcap - redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
  if room < 1 then
    room = 0
    q_capped = true
  end
  n = math.min(n, room)
end
-- The types' caps: how many of each run now (live leases in KEYS[16]),
-- and the earliest of those leases to run out. Entries whose job holds no
-- lease any more are dropped.
local trun, t_full, cap_deadline, stale, stale_keys = {}, false, nil, {}, {}
if any_tcap then
  local all = redis.call('HGETALL', KEYS[16])
  local run, rids = {}, {}
  for i = 1, #all, 2 do
    if all[i] ~= HASHTABLE_FIELD then
      rids[#rids + 1] = all[i]
      run[#run + 1] = all[i]
      run[#run + 1] = all[i + 1]
    end
  end
  for i = 1, #rids, CHUNK do
    local part = redis.call('ZMSCORE', KEYS[2], unpack(rids, i, math.min(i + CHUNK - 1, #rids)))
    for j = 1, #part do
      local k = i + j - 1
      local deadline = tonumber(part[j])
      if not deadline then
        stale[#stale + 1] = rids[k]
        stale_keys[#stale_keys + 1] = string.match(run[2 * k], '\n(.+)$')
      elseif deadline > now then
        local t = string.match(run[2 * k], '^[^\n]*')
        if tcaps[t] then
          trun[t] = (trun[t] or 0) + 1
          if not cap_deadline or deadline < cap_deadline then
            cap_deadline = deadline
          end
        end
      end
    end
  end
  for t, cap in pairs(tcaps) do
    if (trun[t] or 0) >= cap then
      t_full = true
    end
  end
end
if #stale_keys > 0 then
  bad = expect({KEYS[21], 'hash', KEYS[23], 'zset'})
  if bad then
    return bad
  end
end


-- Rate-limit buckets (see Rate limits above). bucket_load reads one: room
-- is how many may start now; taken counts the starts of this call.
local function bucket_load(r)
  local log = r.log
  if r.strict then
    redis.call('ZREMRANGEBYSCORE', KEYS[19] .. log, '-inf', now - r.window)
    r.used = redis.call('ZCARD', KEYS[19] .. log)
    r.room = math.max(r.share - r.used, 0)
  else
    local tat
    if r.tatkey then
      local key = r.key
      tat = redis.call('GET', KEYS[28] .. key)
    else
      tat = redis.call('HGET', KEYS[15], r.name)
    end
    r.tat = math.max(tonumber(tat) or now, now)
    if r.tatkey then
      -- Under one limit a bucket is never further ahead; a key's limit
      -- may have changed since (keyrate.lua cannot reach every bucket).
      r.tat = math.min(r.tat, now + r.tau + r.T)
    end
    r.room = math.max(math.floor((now + r.tau - r.tat) / r.T) + 1, 0)
  end
  r.taken, r.members = 0, {}
end
-- bucket_save records the starts of this call: members are their fencing
-- tokens (a strict window logs one entry per start).
local function bucket_save(r)
  local log = r.log
  r.taken = #r.members
  if r.taken == 0 then
    return
  end
  if r.strict then
    local z = {}
    for _, m in ipairs(r.members) do
      z[#z + 1] = now
      z[#z + 1] = m
    end
    call_chunked('ZADD', KEYS[19] .. log, z)
    redis.call('PEXPIRE', KEYS[19] .. log, r.window)
  elseif r.tatkey then
    -- Once reached, a theoretical arrival time says no more than none.
    local tat, key = r.tat + r.taken * r.T, r.key
    redis.call('SET', KEYS[28] .. key, string.format('%.3f', tat), 'PX', math.max(math.ceil(tat - now), 1))
  else
    redis.call('HSET', KEYS[15], r.name, string.format('%.3f', r.tat + r.taken * r.T))
  end
end
-- bucket_next is when a bucket without room (after bucket_save) lets the
-- next job start.
local function bucket_next(r)
  local log = r.log
  if r.strict then
    local e = redis.call('ZRANGE', KEYS[19] .. log, r.used + r.taken - r.share, r.used + r.taken - r.share, 'WITHSCORES')
    return math.ceil(finite(e[2], now) + r.window)
  end
  return math.ceil(r.tat + r.taken * r.T - r.tau)
end

-- The queue's limit: how many may start now.
local limited_until = nil
if qrate then
  bucket_load(qrate)
  if qrate.room < 1 then
    limited_until = bucket_next(qrate)
  end
  n = math.min(n, qrate.room)
end

-- The types' limits: jobs of a limited type held for want of a token
-- (KEYS[17]..type, with their ready times) start first, earliest first,
-- as many as the type has tokens (and room under its cap, if any).
local pops = {}
if any_rate then
  for _, r in pairs(trates) do
    bucket_load(r)
  end
  for t, r in pairs(trates) do
    local room = math.min(r.room, n - #pops / 2)
    if tcaps[t] then
      room = math.min(room, tcaps[t] - (trun[t] or 0))
    end
    if room > 0 and not paused_types[t] then
      local got = redis.call('ZPOPMIN', KEYS[17] .. t, room)
      for i = 1, #got do
        pops[#pops + 1] = got[i]
      end
      r.drained = #got / 2 < room
    end
  end
end

-- Keys' rate limits (see Per-key rate limits above): key_rate reads the
-- limit of key (its own spec, else the default) and its bucket, nil when
-- it has none; key_rate_spec lists the keys it reads for expect.
local function key_rate_of(key, own)
  local r = parse_rate(own or krdefault, '#' .. key)
  if r then
    r.key = key
    if not r.strict then
      r.tatkey = KEYS[28] .. key
    end
  end
  return r
end
local function key_rate_spec(spec, r)
  if r.strict then
    spec[#spec + 1] = KEYS[19] .. r.log
    spec[#spec + 1] = 'zset'
  else
    spec[#spec + 1] = r.tatkey
    spec[#spec + 1] = 'string'
  end
end
-- key_rates reads the limits of keys (all but those skip marks by
-- position) with one HMGET of KEYS[26], adds their buckets to spec for
-- expect and returns them by position.
local function key_rates(keys, spec, skip)
  local own, rs = hmget(KEYS[26], keys), {}
  for j, key in ipairs(keys) do
    if not skip[j] then
      rs[j] = key_rate_of(key, own[j])
      if rs[j] then
        key_rate_spec(spec, rs[j])
      end
    end
  end
  return rs
end
-- key_wait_at is when key r, after taken more starts than its bucket
-- shows now, has its next token.
local function key_wait_at(r, taken)
  if r.strict then
    local i = r.used + taken - r.share
    if i < 0 then
      return now + 1 -- it has tokens left (a claim ran out of room)
    elseif i >= r.used then
      return now + r.window
    end
    local log = r.log
    local e = redis.call('ZRANGE', KEYS[19] .. log, i, i, 'WITHSCORES')
    return math.max(math.ceil(finite(e[2], now) + r.window), now + 1)
  end
  return math.max(math.ceil(r.tat + taken * r.T - r.tau), now + 1)
end
-- How many keys whose next token has come one claim takes from KEYS[27]
-- (the rest: the next claim, at once).
local KEY_WAKES = 100
-- Keys whose next token has come: their held jobs go back to the
-- schedule, as many as they have tokens, within the claim's room.
if any_krate and n > 0 then
  bad = expect({KEYS[26], 'hash', KEYS[27], 'zset', KEYS[23], 'zset', KEYS[24], 'hash'})
  if bad then
    return bad
  end
  local woke = redis.call('ZRANGEBYSCORE', KEYS[27], '-inf', now, 'LIMIT', 0, KEY_WAKES)
  if #woke > 0 then
    local paused, spec = {}, {}
    if any_kpause then
      paused = hmget(KEYS[24], woke)
    end
    for _, key in ipairs(woke) do
      spec[#spec + 1] = KEYS[17] .. '#' .. key
      spec[#spec + 1] = 'zset'
    end
    local rs = key_rates(woke, spec, paused)
    bad = expect(spec)
    if bad then
      return bad
    end
    local budget, again, gone = n, {}, {}
    for j, key in ipairs(woke) do
      local r = rs[j]
      if r then
        bucket_load(r)
        local room = math.min(r.room, budget)
        local back = 0
        if room > 0 then
          local got = redis.call('ZPOPMIN', KEYS[17] .. '#' .. key, room)
          if #got > 0 then
            local members = {}
            for i = 1, #got, 2 do
              members[#members + 1] = got[i + 1]
              members[#members + 1] = got[i]
            end
            call_chunked('ZADD', KEYS[1], members)
            back = #got / 2
            held_add(KEYS[23], key, -back)
            budget = budget - back
          end
        end
        if back == room and redis.call('EXISTS', KEYS[17] .. '#' .. key) == 1 then
          again[#again + 1] = key_wait_at(r, room)
          again[#again + 1] = key
        else
          gone[#gone + 1] = key
        end
      else
        -- Paused (its resume sends its jobs back) or no longer limited
        -- (the change sent them back).
        gone[#gone + 1] = key
      end
    end
    if #again > 0 then
      call_chunked('ZADD', KEYS[27], again)
    end
    if #gone > 0 then
      call_chunked('ZREM', KEYS[27], gone)
    end
  end
end

-- Fair turns between keys (see above): the due jobs with a key move to
-- their held sets and the room is dealt out among the keys in turn.
-- fair_plain is the due jobs without a key chosen for this claim, in
-- place of the scan of the schedule below.
local FAIR_SCAN = 1000
local fair_plain = {}
if any_fair and n > #pops / 2 then
  local spec = {KEYS[29], 'zset', KEYS[23], 'zset'}
  if any_weight then
    spec[#spec + 1] = KEYS[30]
    spec[#spec + 1] = 'hash'
  end
  bad = expect(spec)
  if bad then
    return bad
  end
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, FAIR_SCAN)
  local plain, joining = {}, {}
  if #due > 0 then
    local ids = {}
    for i = 1, #due, 2 do
      ids[#ids + 1] = due[i]
    end
    local bodies = hmget(KEYS[3], ids)
    local groups, moved = {}, {}
    for j, id in ipairs(ids) do
      local key = key_of(bodies[j])
      if key then
        key_group(groups, joining, key, due[2 * j], id)
        moved[#moved + 1] = id
      else
        plain[#plain + 1] = id
        plain[#plain + 1] = due[2 * j]
      end
    end
    if #joining > 0 then
      local spec = {}
      for _, key in ipairs(joining) do
        spec[#spec + 1] = KEYS[17] .. '#' .. key
        spec[#spec + 1] = 'zset'
      end
      bad = expect(spec)
      if bad then
        return bad
      end
      call_chunked('ZREM', KEYS[1], moved)
      key_hold(KEYS[17], KEYS[23], groups, joining)
    end
  end
  if #plain > 0 then
    joining[#joining + 1] = '#'
  end
  local top = turn_join(KEYS[29], joining)
  -- Deal the room out in turns.
  local room = n - #pops / 2
  local active = redis.call('ZRANGE', KEYS[29], 0, room - 1)
  -- Weights: weight[key] for the keys of another weight than 1. A turn
  -- that a claim's room cut short goes on in the next claim: field
  -- TURN_FIELD of the weights (no key can be named so) holds the key
  -- whose turn it is, at the front, and the jobs it took in that turn
  -- (credit_key, credit), so that claims of a few jobs keep to the
  -- weights as larger ones do.
  local weight, credit_key, credit, turn_kept = {}, nil, 0, false
  local TURN_FIELD = '#turn'
  if any_weight and #active > 0 then
    local fields = {}
    for j, key in ipairs(active) do
      fields[j] = key
    end
    fields[#fields + 1] = TURN_FIELD
    local ws = hmget(KEYS[30], fields)
    for j, key in ipairs(active) do
      local w = tonumber(ws[j])
      if w and w >= 1 then
        weight[key] = math.floor(w)
      end
    end
    turn_kept = ws[#fields] and true or false
    local k, c = string.match(ws[#fields] or '', '^(.*)\n(%d+)$')
    if k and k == active[1] then
      credit_key, credit = k, tonumber(c)
    end
  end
  local served, gone, taken_by = {}, {}, {}
  local plain_next = 1
  local cut, cut_taken -- the key whose turn the room cut short, and its jobs in that turn
  local first_round = true
  while room > 0 and #active > 0 do
    local sum = #active
    if any_weight then
      sum = 0
      for _, key in ipairs(active) do
        sum = sum + (weight[key] or 1)
      end
    end
    local share = math.max(math.floor(room / sum), 1)
    local still = {}
    for _, key in ipairs(active) do
      if room < 1 then
        break
      end
      local quota = share * (weight[key] or 1)
      local before = 0 -- jobs the key took earlier in this turn
      if first_round and key == credit_key then
        before = math.min(credit, quota)
      end
      local take, got = math.min(quota - before, room), 0
      if key == '#' then
        while got < take and plain_next < #plain do
          fair_plain[#fair_plain + 1] = plain[plain_next]
          fair_plain[#fair_plain + 1] = plain[plain_next + 1]
          plain_next = plain_next + 2
          got = got + 1
        end
      else
        local popped = redis.call('ZPOPMIN', KEYS[17] .. '#' .. key, take)
        for i = 1, #popped do
          pops[#pops + 1] = popped[i]
        end
        got = #popped / 2
        taken_by[key] = (taken_by[key] or 0) + got
      end
      room = room - got
      if not served[key] then
        served[key] = true
        served[#served + 1] = key
      end
      if got < take then
        gone[key] = true
      else
        still[#still + 1] = key
        if room < 1 and any_weight and before + got < quota then
          cut, cut_taken = key, before + got
        end
      end
    end
    active = still
    first_round = false
  end
  local back, leave = {}, {}
  for _, key in ipairs(served) do
    if taken_by[key] then
      held_add(KEYS[23], key, -taken_by[key])
    end
    if gone[key] then
      leave[#leave + 1] = key
    elseif key ~= cut then
      top = top + 1
      back[#back + 1] = top
      back[#back + 1] = key
    end
  end
  -- The key whose turn was cut short keeps its place, before the keys
  -- that went to the back, and its turn goes on in the next claim.
  if cut then
    redis.call('HSET', KEYS[30], TURN_FIELD, cut .. '\n' .. string.format('%d', cut_taken))
  elseif turn_kept then
    redis.call('HDEL', KEYS[30], TURN_FIELD)
  end
  if #back > 0 then
    call_chunked('ZADD', KEYS[29], back)
  end
  if #leave > 0 then
    call_chunked('ZREM', KEYS[29], leave)
  end
end

-- A fencing counter that is not an integer restarts at the server time in
-- microseconds: above every token handed out so far unless claims outran a
-- thousand a millisecond, so no token is handed out twice.
local seq = redis.call('GET', KEYS[6])
if seq and not is_int(seq) then
  redis.call('SET', KEYS[6], string.format('%d', now * 1000))
end
local late_sum, late_max = 0, 0
local record = {cid}
local rate_held = 0
if n > 0 then
  local due = fair_plain
  if n > #pops / 2 and not any_fair then
    due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, n - #pops / 2)
  end
  local scanned = {}
  for i = 1, #due, 2 do
    scanned[#scanned + 1] = due[i]
  end
  for i = 1, #due do
    pops[#pops + 1] = due[i]
  end
  due = pops
  if #due > 0 then
    local ids, readies = {}, {}
    for i = 1, #due, 2 do
      ids[#ids + 1] = due[i]
      readies[#readies + 1] = finite(due[i + 1], now)
    end
    local bodies = hmget(KEYS[3], ids)
    local expired, ended = {}, {}
    for k = 1, #ids do
      local b = bodies[k]
      if b then
        local x = string.match(string.sub(b, -32), ',"x":"(%d+)d?"}$')
        if x and tonumber(x) <= now then
          expired[#expired + 1] = k
          ended[k] = true -- for the checks below; expire_jobs ends it
        end
      end
    end
    local park, hold, taken, rated, unread, aside = {}, {}, {}, {}, {}, {}
    local types = {} -- the type of each job read above, for its key's check
    if any_type or any_rate or any_tcap then
      for k = 1, #ids do
        local b = bodies[k]
        if b and not ended[k] then
          local t = type_of(b)
          types[k] = t
          if not t then
            unread[k] = true
          elseif paused_types[t] then
            park[#park + 1] = k
            aside[k] = true
          elseif t and tcaps[t] and (trun[t] or 0) >= tcaps[t] then
            hold[#hold + 1] = {k, t}
            aside[k] = true
            t_full = true
          elseif t and trates[t] then
            local r = trates[t]
            if r.room > 0 then
              r.room = r.room - 1
              rated[k] = r
              if tcaps[t] then
                trun[t] = (trun[t] or 0) + 1
                taken[k] = t
              end
            else
              -- No token: held with its ready time, first in line for
              -- the type's next token.
              hold[#hold + 1] = {k, t}
              aside[k] = true
              r.held = true
              rate_held = rate_held + 1
            end
          elseif t and tcaps[t] then
            trun[t] = (trun[t] or 0) + 1
            taken[k] = t
          end
        end
      end
      if #park > 0 then
        bad = expect({KEYS[14], 'zset', KEYS[25], 'hash'})
        if bad then
          return bad
        end
      end
    end
    -- Per-key caps and paused keys (see above): after the types' checks.
    local khold, kstart, kcount, kkeys, krated, krate = {}, {}, {}, {}, {}, {}
    if any_kcap or any_kpause or any_krate then
      local keyed, klist, kseen = {}, {}, {}
      for k = 1, #ids do
        if bodies[k] and not ended[k] and not aside[k] then
          local key = key_of(bodies[k])
          if key then
            keyed[k] = key
            if not kseen[key] then
              kseen[key] = true
              klist[#klist + 1] = key
            end
          end
        end
      end
      if #klist > 0 then
        local spec = {KEYS[21], 'hash', KEYS[22], 'hash', KEYS[23], 'zset'}
        if any_kpause then
          spec[#spec + 1] = KEYS[24]
          spec[#spec + 1] = 'hash'
        end
        if any_krate then
          spec[#spec + 1] = KEYS[26]
          spec[#spec + 1] = 'hash'
          spec[#spec + 1] = KEYS[27]
          spec[#spec + 1] = 'zset'
          for j, r in pairs(key_rates(klist, spec, {})) do
            krate[klist[j]] = r
          end
        end
        bad = expect(spec)
        if bad then
          return bad
        end
        for _, r in pairs(krate) do
          bucket_load(r)
        end
        local kcap, kpaused = {}, {}
        if any_kcap then
          local own, cur = hmget(KEYS[22], klist), hmget(KEYS[21], klist)
          for j, key in ipairs(klist) do
            kcap[key] = (own[j] and parse_cap(own[j])) or kdefault
            kcount[key] = tonumber(cur[j]) or 0
          end
        end
        if any_kpause then
          local p = hmget(KEYS[24], klist)
          for j, key in ipairs(klist) do
            kpaused[key] = p[j] and true
          end
        end
        local hspec = {}
        for k = 1, #ids do
          local key = keyed[k]
          local r = key and krate[key]
          if key and (kcap[key] or kpaused[key] or r) then
            local full = kcap[key] and kcount[key] >= kcap[key]
            if kpaused[key] or full or (r and r.room < 1) then
              if r and not kpaused[key] and not full then
                r.held = true -- waits for its key's next token
              end
              khold[#khold + 1] = k
              hspec[#hspec + 1] = KEYS[17] .. '#' .. key
              hspec[#hspec + 1] = 'zset'
              -- Give back what the type's checks gave it.
              if taken[k] then
                trun[taken[k]] = trun[taken[k]] - 1
                taken[k] = nil
              end
              if rated[k] then
                rated[k].room = rated[k].room + 1
                rated[k] = nil
              end
            else
              if r then
                r.room = r.room - 1
                krated[k] = r
              end
              if kcap[key] then
                kcount[key] = kcount[key] + 1
                kstart[k] = key
                if not kkeys[key] then
                  kkeys[key] = true
                  kkeys[#kkeys + 1] = key
                end
              end
            end
          end
        end
        bad = expect(hspec)
        if bad then
          return bad
        end
      end
    end
    if #expired > 0 then
      bad = expect({KEYS[9], 'hash', KEYS[10], 'zset', KEYS[11], 'zset', KEYS[12], 'hash', KEYS[18], 'hash', KEYS[20], 'list'})
      if bad then
        return bad
      end
    end
    if #stale > 0 then
      call_chunked('HDEL', KEYS[16], stale)
      stale = {}
    end
    if #stale_keys > 0 then
      key_release(KEYS[21], KEYS[17], KEYS[23], KEYS[1], stale_keys)
      stale_keys = {}
    end
    if #scanned > 0 then
      call_chunked('ZREM', KEYS[1], scanned)
    end
    if #expired > 0 then
      expire_jobs(ids, bodies, expired, now, ended)
    end
    if #park > 0 then
      local members, by_type, tlist = {}, {}, {}
      for _, k in ipairs(park) do
        members[#members + 1] = readies[k]
        members[#members + 1] = ids[k]
        ended[k] = true
        local t = types[k]
        if not by_type[t] then
          by_type[t] = 0
          tlist[#tlist + 1] = t
        end
        by_type[t] = by_type[t] + 1
      end
      call_chunked('ZADD', KEYS[14], members)
      for _, t in ipairs(tlist) do
        parked_add(KEYS[25], t, by_type[t])
      end
    end
    if #hold > 0 then
      local by_type = {}
      for _, h in ipairs(hold) do
        local members = by_type[h[2]] or {}
        members[#members + 1] = readies[h[1]]
        members[#members + 1] = ids[h[1]]
        by_type[h[2]] = members
        ended[h[1]] = true
      end
      for t, members in pairs(by_type) do
        call_chunked('ZADD', KEYS[17] .. t, members)
      end
    end
    if #khold > 0 then
      local groups, hkeys = {}, {}
      for _, k in ipairs(khold) do
        key_group(groups, hkeys, key_of(bodies[k]), readies[k], ids[k])
        ended[k] = true
      end
      key_hold(KEYS[17], KEYS[23], groups, hkeys)
      if any_fair then
        -- Held by its own controls: out of the turns until they send its
        -- jobs back.
        call_chunked('ZREM', KEYS[29], hkeys)
      end
    end
    local live, live_ready, live_body, live_unread, live_rated, live_krated, running = {}, {}, {}, {}, {}, {}, {}
    for k = 1, #ids do
      if ended[k] then
        -- expired, parked or held: ended above
      elseif bodies[k] then
        if kstart[k] then
          running[#running + 1] = ids[k]
          running[#running + 1] = (taken[k] or '*') .. '\n' .. kstart[k]
        elseif taken[k] or qcap then
          running[#running + 1] = ids[k]
          running[#running + 1] = taken[k] or '*'
        end
        live[#live + 1] = ids[k]
        live_ready[#live_ready + 1] = readies[k]
        live_body[#live_body + 1] = bodies[k]
        live_unread[#live] = unread[k]
        live_rated[#live] = rated[k]
        live_krated[#live] = krated[k]
      else
        orphans[#orphans + 1] = ids[k]
      end
    end
    if #orphans > 0 then
      call_chunked('HDEL', KEYS[4], orphans)
    end
    if #live > 0 then
      local first_token = redis.call('INCRBY', KEYS[6], #live) - #live + 1
      local spent = hmget(KEYS[4], live)
      local deadlines, tokens, attempts = {}, {}, {}
      local deadline = now + lease
      for k = 1, #live do
        local id, token = live[k], first_token + k - 1
        local attempt, stored
        if spent[k] and not is_int(spent[k]) then
          attempt, stored = -1, 1 -- reported corrupt by the caller
        else
          attempt = (tonumber(spent[k]) or 0) + 1
          stored = attempt
        end
        deadlines[#deadlines + 1] = deadline
        deadlines[#deadlines + 1] = id
        tokens[#tokens + 1] = id
        tokens[#tokens + 1] = token
        attempts[#attempts + 1] = id
        attempts[#attempts + 1] = stored
        jobs[#jobs + 1] = id
        jobs[#jobs + 1] = token
        jobs[#jobs + 1] = attempt
        jobs[#jobs + 1] = live_ready[k]
        jobs[#jobs + 1] = live_body[k]
        record[#record + 1] = id
        record[#record + 1] = string.format('%d', token)
        record[#record + 1] = string.format('%d', live_ready[k])
        if live_unread[k] then
          record[#record + 1] = 'u'
          unreadable[#unreadable + 1] = id
        else
          record[#record + 1] = '-'
        end
        if qrate then
          qrate.members[#qrate.members + 1] = token
        end
        if live_rated[k] then
          local m = live_rated[k].members
          m[#m + 1] = token
        end
        if live_krated[k] then
          local m = live_krated[k].members
          m[#m + 1] = token
        end
        local late = math.min(now - live_ready[k], HISTORY_MAX_LATE)
        late_sum = late_sum + late
        late_max = math.max(late_max, late)
      end
      call_chunked('ZADD', KEYS[2], deadlines)
      keep_hashtable(KEYS[5])
      keep_hashtable(KEYS[4])
      call_chunked('HSET', KEYS[5], tokens)
      call_chunked('HSET', KEYS[4], attempts)
      if #running > 0 then
        keep_hashtable(KEYS[16])
        call_chunked('HSET', KEYS[16], running)
      end
      if #kkeys > 0 then
        local counts = {}
        for _, key in ipairs(kkeys) do
          counts[#counts + 1] = key
          counts[#counts + 1] = string.format('%d', kcount[key])
        end
        keep_hashtable(KEYS[21])
        call_chunked('HSET', KEYS[21], counts)
      end
    end
    -- The keys' starts, and the keys that hold jobs until a token.
    local waits = {}
    for _, r in pairs(krate) do
      bucket_save(r)
      if r.held then
        waits[#waits + 1] = key_wait_at(r, r.taken)
        waits[#waits + 1] = r.key
      end
    end
    if #waits > 0 then
      call_chunked('ZADD', KEYS[27], waits)
    end
  end
end
if qrate then
  bucket_save(qrate)
end
for _, r in pairs(trates) do
  bucket_save(r)
end
if #stale > 0 then
  call_chunked('HDEL', KEYS[16], stale)
end
if #stale_keys > 0 then
  key_release(KEYS[21], KEYS[17], KEYS[23], KEYS[1], stale_keys)
end
-- Held jobs of a capped type with room left go back to the schedule, first
-- in line again with their ready times: the next claim takes them. (Those
-- of a rate-limited type are taken from the held set by the claim that
-- finds their tokens, above.)
for t, cap in pairs(tcaps) do
  local room = cap - (trun[t] or 0)
  if room > 0 and not trates[t] then
    local back = redis.call('ZPOPMIN', KEYS[17] .. t, room)
    if #back > 0 then
      local members = {}
      for i = 1, #back, 2 do
        members[#members + 1] = back[i + 1]
        members[#members + 1] = back[i]
      end
      call_chunked('ZADD', KEYS[1], members)
    end
  end
end
if #record > 1 then
  redis.call('HSET', KEYS[8], 'claim', table.concat(record, '\n') .. '\n')
  redis.call('PEXPIRE', KEYS[8], tonumber(ARGV[9]) or lease)
end
local hist = history(KEYS[7], now, 'claimed', #jobs / 5)
if hist then
  redis.pcall('HINCRBY', hist, 'late_sum', string.format('%d', late_sum))
  history_max(hist, 'late_max', late_max)
end
if rate_held > 0 then
  history(KEYS[7], now, 'rate_held', rate_held)
end
local next = next_ready(KEYS[1], now)
if qrate and next >= 0 and next <= now then
  -- Due jobs wait for the queue's next token.
  if limited_until then
    next = limited_until
  elseif qrate.room - qrate.taken < 1 then
    next = math.max(bucket_next(qrate), next)
  end
end
-- Jobs held for a type's token wait for it: at once when the type has
-- tokens left (the call ran out of n), else at its next token. A type
-- at its cap waits for a slot instead (below), a paused one for its
-- resume.
for t, r in pairs(trates) do
  if not paused_types[t] and not (tcaps[t] and (trun[t] or 0) >= tcaps[t]) then
    local at = now
    if r.room < 1 then
      at = bucket_next(r)
    end
    if (next < 0 or at < next) and (r.held or (not r.drained and redis.call('EXISTS', KEYS[17] .. t) == 1)) then
      next = at
    end
  end
end
-- Keys waiting for their turn: now.
if any_fair and (next < 0 or next > now) and redis.call('EXISTS', KEYS[29]) == 1 then
  next = now
end
-- Keys holding jobs wait for their next token.
if any_krate then
  local first = redis.call('ZRANGE', KEYS[27], 0, 0, 'WITHSCORES')
  local at = tonumber(first[2])
  if at and (next < 0 or at < next) then
    next = math.max(math.ceil(at), now)
  end
end
if q_capped and next >= 0 and next <= now then
  -- Due jobs wait for a slot: a settle wakes the workers, and a crashed
  -- worker's slot comes back when its lease runs out.
  local first = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  next = math.ceil(finite(first[2], now + lease))
elseif t_full and cap_deadline and (next < 0 or cap_deadline < next) then
  -- Held jobs wait for their type's slot.
  next = math.ceil(cap_deadline)
end
return {now_u, next, jobs, orphans, 0, controlled, unreadable}
