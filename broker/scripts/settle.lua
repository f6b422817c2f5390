-- settle: record what became of held jobs: acknowledged, retried,
-- dead-lettered or released.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[4] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[5] -> ns:{q}:leases      HASH id -> fencing token
-- KEYS[6] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[7] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- KEYS[8] -> ns:{q}:hist:       prefix of the per-minute history (done,
--                               failed, dead)
-- KEYS[9] -> ns:{q}:w:<worker>  HASH lane -> the worker's last call there
-- KEYS[10] -> ns:{q}:unique     ZSET id -> remembered until ms (job.Unique);
--                               touched only by acks and kills with a
--                               window
-- KEYS[11] -> ns:{q}:cancels    HASH id -> token of a running job asked to
--                               stop; every operation that ends a lease
--                               clears the job's mark
-- KEYS[12] -> ns:{q}:running    HASH id -> type: jobs leased under a
--                               concurrency cap; every operation that ends
--                               a lease removes the job, and the queue's
--                               workers are woken (ARGV[5]) when one was
--                               there: a slot came free
-- KEYS[13] -> ns:{q}:batched   HASH id -> "<batch id>\n<s|d>": the ending
--                               of a batch member, written with its ack or
--                               kill, until the worker (or a sweep) has
--                               counted it in the batch's own keys
-- KEYS[14] -> ns:{q}:progress   HASH id -> the running job's last progress;
--                               every operation that ends a lease clears it
-- KEYS[15] -> ns:{q}:done:      prefix of the STRINGs of retained succeeded
--                               jobs: KEYS[15] .. id -> "<finished ms>\n<record>",
--                               expiring after the job's retention
-- KEYS[16] -> ns:{q}:counts     HASH counter -> n: the trims of the dead
--                               letters (trim_dead in the prelude)
-- KEYS[17] -> ns:{q}:dead:trimmed LIST of trimmed records kept for the
--                               workers' hook (trim_dead)
-- KEYS[18] -> ns:{q}:keyrun     HASH key -> running jobs of the key under
--                               its cap (Broker.SetKeyConcurrency)
-- KEYS[19] -> ns:{q}:keyheld    ZSET key -> its jobs held by its cap or pause
-- KEYS[20] -> ns:{q}:held:      prefix of the held sets: a key's is
--                               KEYS[20] .. '#' .. key
--                               (KEYS[18] to KEYS[20] are touched only when
--                               an ended job was counted by its key's cap:
--                               its KEYS[12] entry is "<type>\n<key>")
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> lane: the record field of this kind of call ("settle", "reap")
-- ARGV[3] -> call id, chosen by the worker: a call with the id of the
--            worker's last call in this lane replays it
-- ARGV[4] -> how long the record lives, ms (twice the worker's lease: a
--            worker sends a call again only within a lease of the first)
-- ARGV[5] -> wake channel
-- ARGV[6] -> cap on dead records (< 0: none)
-- ARGV[7] -> max age of dead records in ms (<= 0: none)
-- ARGV[8] -> how many trimmed records KEYS[17] may hold (0: none kept)
-- ARGV[9] -> ms between two warnings of trims by the cap (0: none claimed)
-- ARGV[10+9i .. 18+9i] -> one operation: kind, id, token, a, b, expired,
--   batch (the member's batch id, "" for a job in no batch), retain, next
--   kind "a" ack: the handler succeeded; the job is deleted; a > 0
--            remembers the id in KEYS[10] for a ms (job.Unique); retain
--            > 0 keeps record b in KEYS[15] .. id for retain ms
--            (job.Retain); next: the job's next jobs of this shard
--            (job.Then), four lines each: id, ready ms (0: use the
--            delay), delay µs, envelope; stored once the acks are done,
--            each unless its id is pending
--   kind "r" retry: back to the schedule, ready a µs after now, with
--            envelope b (which carries the last error)
--   kind "k" kill: to the dead-letter store with record b, then the store
--            is trimmed to its cap and max age; a > 0 as for ack
--   kind "l" release: back to the schedule at now, the attempt given back
--   kind "s" snooze: back to the schedule, ready a µs after now, with
--            envelope b (which carries the snooze count), the attempt
--            given back
--   expired "1": the reaper's call: the lease must also have run out
--   batch: an ack or kill of a batch member records its ending in KEYS[13]
--   (acks and kills end their jobs through end_job, in the prelude)
--
-- Returns {now µs, one integer per operation, trims}: ack and release 1; retry the
-- new ready time ms; kill the died-at ms; and for any of them -1 when the
-- lease is lost (nothing changed for that job; an id listed twice in one
-- call is lost the second time) or -2 when the reaper found the lease live
-- again. A replay (the reply of the first call was lost, and the worker or
-- its client sent it again) changes nothing and returns the first call's
-- results, so an outcome recorded once is reported as recorded. The record
-- lives for ARGV[4] ms. trims is {dropped by the cap, dropped by age,
-- kept in KEYS[17], not kept for want of room, 1 when this call claimed
-- the warning of a trim by the cap} (all 0 in a replay).
--
-- Acks cost a fixed number of commands per call, whatever their number:
-- one HMGET checks every lease, then one command per key removes the acked
-- jobs.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash',
  KEYS[5], 'hash', KEYS[6], 'hash', KEYS[7], 'zset', KEYS[9], 'hash'})
if bad then
  return bad
end
local now_u = now_us()
local now = ms_of(now_u)
local lane, cid = ARGV[2], ARGV[3]

local last = redis.call('HGET', KEYS[9], lane)
if last and string.sub(last, 1, #cid + 1) == cid .. '\n' then
  local out = {}
  for part in string.gmatch(string.sub(last, #cid + 2), '[^\n]+') do
    out[#out + 1] = tonumber(part)
  end
  return {now_u, out, {0, 0, 0, 0, 0}}
end

local FIRST, WIDTH = 10, 9
local KINDS = {a = true, r = true, k = true, l = true, s = true}
local ids = {}
local remembers, kills, batched = false, false, false
for i = FIRST, #ARGV, WIDTH do
  if not KINDS[ARGV[i]] then
    return redis.error_reply('ERR delayq: settle: unknown operation ' .. tostring(ARGV[i]) .. '; nothing was changed')
  end
  ids[#ids + 1] = ARGV[i + 1]
  if (ARGV[i] == 'a' or ARGV[i] == 'k') and ARGV[i + 6] ~= '' then
    batched = true
  end
  if (ARGV[i] == 'a' or ARGV[i] == 'k') and ARGV[i + 3] ~= '' then
    remembers = true
  end
  if ARGV[i] == 'k' then
    kills = true
  end
end
-- A running job asked to stop (Broker.CancelJob) whose lease ends here,
-- whatever the outcome, takes its mark in KEYS[11] along: a later lease of
-- the id has another token, so a mark left behind would only hold memory.
-- Likewise a job counted by a concurrency cap leaves KEYS[12], and a job's
-- progress report KEYS[14]. One EXISTS of the three keys per call finds
-- whether any is there.
local marked, capped, reported = kills, false, false
if redis.call('EXISTS', KEYS[11], KEYS[12], KEYS[14]) > 0 then
  marked = kills or redis.call('EXISTS', KEYS[11]) == 1
  capped = redis.call('EXISTS', KEYS[12]) == 1
  reported = redis.call('EXISTS', KEYS[14]) == 1
end
if reported then
  bad = expect({KEYS[14], 'hash'})
  if bad then
    return bad
  end
end
-- The keys of the jobs counted by their key's cap (see KEYS[18]): read
-- before any write, so that their keys' types are checked first.
local id_key, keyed = {}, false
if capped then
  bad = expect({KEYS[12], 'hash'})
  if bad then
    return bad
  end
  capped = holds_fields(KEYS[12]) -- it may hold its encoding field only
end
if capped then
  local vals = hmget(KEYS[12], ids)
  local spec = {KEYS[18], 'hash', KEYS[19], 'zset'}
  for k = 1, #ids do
    local key = vals[k] and string.match(vals[k], '\n(.+)$')
    if key then
      id_key[ids[k]] = key
      keyed = true
      spec[#spec + 1] = KEYS[20] .. '#' .. key
      spec[#spec + 1] = 'zset'
    end
  end
  if keyed then
    bad = expect(spec)
    if bad then
      return bad
    end
  end
end
if marked then
  bad = expect({KEYS[11], 'hash'})
  if bad then
    return bad
  end
end
if kills then
  -- A kill may trim the dead letters, which counts in KEYS[16] and may
  -- keep records in KEYS[17].
  bad = expect({KEYS[16], 'hash'})
  if not bad and tonumber(ARGV[8]) > 0 then
    bad = expect({KEYS[17], 'list'})
  end
  if bad then
    return bad
  end
end
local ends = endings(KEYS[13], KEYS[10], now)
if remembers or batched then
  bad = endings_check(ends)
  if bad then
    return bad
  end
end
-- The ending of an acked or killed job (end_job in the prelude): its
-- batch's ending and its uniqueness memory. The worker sends the window it
-- decided (job.Unique, and for a kill only with job.UniqueIncludeDead).
local function end_op(i, id, ending)
  end_job(ends, id, ending, ARGV[i + 6], ARGV[i + 3], true)
end
local current = hmget(KEYS[5], ids)
local out, acked, seen, ended, nexts = {}, {}, {}, {}, {}
local failed, died = 0, 0
for k = 1, #ids do
  local i = FIRST + WIDTH * (k - 1)
  local kind, id, token = ARGV[i], ids[k], ARGV[i + 2]
  local code = 0
  if seen[id] or not current[k] or current[k] ~= token then
    code = -1
  elseif ARGV[i + 5] == '1' then
    local deadline = tonumber(redis.call('ZSCORE', KEYS[2], id))
    if deadline and deadline >= now then
      code = -2
    end
  end
  seen[id] = true
  if code >= 0 then
    ended[#ended + 1] = id
  end
  if code < 0 then
    out[k] = code
  elseif kind == 'a' then
    acked[#acked + 1] = id
    out[k] = 1
    end_op(i, id, 's')
    local retain = tonumber(ARGV[i + 7])
    if retain and retain > 0 then
      redis.call('SET', KEYS[15] .. id, string.format('%d', now) .. '\n' .. ARGV[i + 4], 'PX', retain)
    end
    if ARGV[i + 8] ~= '' then
      nexts[#nexts + 1] = ARGV[i + 8]
    end
  elseif kind == 'r' then
    local ready = ready_after(now_u, tonumber(ARGV[i + 3]))
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('HSET', KEYS[3], id, ARGV[i + 4])
    if marked then
      redis.call('HDEL', KEYS[11], id)
    end
    wake_if_earliest(KEYS[1], ARGV[5], ready, now)
    redis.call('ZADD', KEYS[1], ready, id)
    failed = failed + 1
    out[k] = ready
  elseif kind == 'k' then
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('HDEL', KEYS[11], id)
    redis.call('HSET', KEYS[6], id, ARGV[i + 4])
    redis.call('ZADD', KEYS[7], now, id)
    died = died + 1
    out[k] = now
    end_op(i, id, 'd')
  else -- 'l': release, 's': snooze
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[5], id)
    if marked then
      redis.call('HDEL', KEYS[11], id)
    end
    local spent = redis.call('HGET', KEYS[4], id)
    if spent and is_int(spent) and tonumber(spent) > 1 then
      redis.call('HINCRBY', KEYS[4], id, -1)
    else
      redis.call('HDEL', KEYS[4], id)
    end
    local ready = now
    if kind == 's' then
      ready = ready_after(now_u, tonumber(ARGV[i + 3]))
      redis.call('HSET', KEYS[3], id, ARGV[i + 4])
      out[k] = ready
    else
      out[k] = 1
    end
    wake_if_earliest(KEYS[1], ARGV[5], ready, now)
    redis.call('ZADD', KEYS[1], ready, id)
  end
end
if #acked > 0 then
  call_chunked('ZREM', KEYS[2], acked)
  call_chunked('HDEL', KEYS[3], acked)
  call_chunked('HDEL', KEYS[4], acked)
  call_chunked('HDEL', KEYS[5], acked)
  if marked then
    call_chunked('HDEL', KEYS[11], acked)
  end
  history(KEYS[8], now, 'done', #acked)
end
if #nexts > 0 then
  -- The next jobs of the acked jobs (job.Then), after the acks deleted
  -- theirs: one HMGET finds the ids pending already (an earlier success of
  -- the parent enqueued them, or another job has the id), which are left
  -- as they are.
  local nid, nready, nbody = {}, {}, {}
  for _, blob in ipairs(nexts) do
    local l = {}
    for line in string.gmatch(blob, '([^\n]*)\n') do
      l[#l + 1] = line
    end
    for j = 1, #l - 3, 4 do
      local at = tonumber(l[j + 1])
      if not at or at <= 0 then
        at = ready_after(now_u, tonumber(l[j + 2]))
      end
      nid[#nid + 1], nready[#nready + 1], nbody[#nbody + 1] = l[j], at, l[j + 3]
    end
  end
  local pending = hmget(KEYS[3], nid)
  local stored = {}
  for j = 1, #nid do
    if not pending[j] and not stored[nid[j]] then
      stored[nid[j]] = true
      redis.call('HSET', KEYS[3], nid[j], nbody[j])
      wake_if_earliest(KEYS[1], ARGV[5], nready[j], now)
      redis.call('ZADD', KEYS[1], nready[j], nid[j])
    end
  end
end
local trims = {0, 0, 0, 0, 0}
if died > 0 then
  local _, by_cap, by_age, kept, unarchived, warn = trim_dead(KEYS[6], KEYS[7], tonumber(ARGV[6]), tonumber(ARGV[7]), now,
    KEYS[16], KEYS[17], tonumber(ARGV[8]), tonumber(ARGV[9]))
  trims = {by_cap, by_age, kept, unarchived, warn}
  history(KEYS[8], now, 'dead', died)
end
history(KEYS[8], now, 'failed', failed)
flush_endings(ends)
if reported and #ended > 0 then
  call_chunked('HDEL', KEYS[14], ended)
end
if capped and #ended > 0 then
  local freed = 0
  for i = 1, #ended, CHUNK do
    freed = freed + redis.call('HDEL', KEYS[12], unpack(ended, i, math.min(i + CHUNK - 1, #ended)))
  end
  if keyed then
    -- A key's slot came free: its count goes down and as many of its held
    -- jobs go back to the schedule (key_release in the prelude).
    local keys = {}
    for _, id in ipairs(ended) do
      if id_key[id] then
        keys[#keys + 1] = id_key[id]
      end
    end
    key_release(KEYS[18], KEYS[20], KEYS[19], KEYS[1], keys)
  end
  if freed > 0 then
    redis.call('PUBLISH', ARGV[5], 'slot')
  end
end
local record = {cid}
for k = 1, #out do
  record[k + 1] = string.format('%d', out[k])
end
redis.call('HSET', KEYS[9], lane, table.concat(record, '\n') .. '\n')
redis.call('PEXPIRE', KEYS[9], tonumber(ARGV[4]))
return {now_u, out, trims}
