-- batch_end: count the endings of batch members, and say which callbacks
-- are due; or seal the batch.
--
-- KEYS[1] -> ns:batch:{b}:meta     HASH the batch's counters and callbacks
-- KEYS[2] -> ns:batch:{b}:members  HASH "<queue>\n<id>" -> state (see
--                                  batch_add.lua)
-- KEYS[3] -> ns:batch:{b}:next     HASH member -> its next jobs counted
--                                  in the batch
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> "1": seal the batch (no more members)
-- ARGV[3+2i], ARGV[4+2i] -> a member "<queue>\n<id>" and its ending: s
--                           (succeeded), d (dead) or x (gone: cancelled
--                           before it ran, or expired and dropped); see
--                           end_job in the prelude
--
-- Idempotent: an ending is counted when it changes the member's state (p
-- to s, d or x; d or x to s after a redrive or a new add; d to x), so the
-- same ending moved twice (a worker and a sweep, or a move repeated after
-- a crash) counts once. A member the batch does not know counts nothing.
-- A member out of the batch (o: a next job taken back out) records its
-- ending (os, od, ox) and counts nothing, unless its parent is redriven
-- and counts it again (batch_add.lua).
--
-- Chains: a member that ends without success (d, x) takes its next jobs
-- (KEYS[3]) that are still pending back out of the batch (o, Total - 1):
-- they were counted before the member's ack, which never came, so they
-- will never be enqueued by it (or, after a lost reply, were enqueued and
-- their endings are recorded without being counted). Their own next jobs
-- follow, recursively.
--
-- Returns {total, succeeded, dead, sealed, success queue, success body,
-- complete queue, complete body, success ready, complete ready, gone}: a
-- callback's queue and body are "" unless it is due: the batch is sealed,
-- every member succeeded (success) or ended (complete), and the callback
-- is not yet marked fired (batch_fired). A due callback's ready is
-- "<ready ms>\n<expiry ms or 0>": its ready time counted from when it
-- became due (recorded once, in "sdue"/"cdue": the batch's completion), by
-- its delay, or its own at time, and its expiry the same distance after
-- its ready time as when it was declared. The caller enqueues due
-- callbacks under ids derived from the batch id, refused as duplicates
-- when repeated, then marks them fired. {-1} when the batch does not
-- exist. A complete batch with nothing left to fire starts its retention
-- (its keys expire after its keep time).
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'hash'})
if bad then
  return bad
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'sealed', 1)
end
local ds, dd, dx, dt = 0, 0, 0, 0
local COUNT = {s = 0, d = 0, x = 0}
local function count(state, by)
  if state == 's' then ds = ds + by elseif state == 'd' then dd = dd + by elseif state == 'x' then dx = dx + by end
end
-- Next jobs of member m still pending go out, and theirs after them.
local function take_out(m, depth)
  local links = redis.call('HGET', KEYS[3], m)
  if not links or depth > 100 then
    return
  end
  for child in string.gmatch(links, '[^\t]+') do
    if redis.call('HGET', KEYS[2], child) == 'p' then
      redis.call('HSET', KEYS[2], child, 'o')
      dt = dt - 1
      take_out(child, depth + 1)
    end
  end
end
for i = 3, #ARGV, 2 do
  local m, ending = ARGV[i], ARGV[i + 1]
  local was = redis.call('HGET', KEYS[2], m)
  if COUNT[ending] and was then
    if was == 'p' or ((was == 'd' or was == 'x') and ending == 's') or (was == 'd' and ending == 'x') then
      redis.call('HSET', KEYS[2], m, ending)
      count(ending, 1)
      if was ~= 'p' then
        count(was, -1)
      end
      if ending ~= 's' then
        take_out(m, 0)
      end
    elseif string.sub(was, 1, 1) == 'o' and (#was == 1 or ending == 's') then
      redis.call('HSET', KEYS[2], m, 'o' .. ending)
    end
  end
end
if ds ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'succeeded', ds)
end
if dd ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'dead', dd)
end
if dx ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'gone', dx)
end
if dt ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'total', dt)
end
local f = redis.call('HMGET', KEYS[1], 'total', 'succeeded', 'dead', 'sealed', 'sq', 'sb', 'sf', 'cq', 'cb', 'cf', 'gone',
  'sr', 'cr', 'sdue', 'cdue')
local total, succ, dead, gone = tonumber(f[1]) or 0, tonumber(f[2]) or 0, tonumber(f[3]) or 0, tonumber(f[11]) or 0
local sealed = f[4] == '1'
local sq, sb, cq, cb, sready, cready = '', '', '', '', '', ''
-- The batch's completion, recorded once (BatchStatus.CompletedAt).
if sealed and succ + dead + gone == total and not redis.call('HGET', KEYS[1], 'done') then
  redis.call('HSET', KEYS[1], 'done', now_ms())
end
-- A due callback's ready time and expiry, from spec "<at ms>,<delay ms>,
-- <expiry window ms>" (batch_create) and due, when it became due.
local function ready_of(spec, due)
  local at, delay, window = string.match(spec or '', '^(%d+),(%d+),(%d+)$')
  local ready = tonumber(at) or 0
  if ready <= 0 then
    ready = due + (tonumber(delay) or 0)
  end
  local expiry = 0
  if (tonumber(window) or 0) > 0 then
    expiry = ready + tonumber(window)
  end
  return string.format('%d\n%d', ready, expiry)
end
local function due_at(field, was)
  local t = tonumber(was)
  if not t then
    t = now_ms()
    redis.call('HSET', KEYS[1], field, t)
  end
  return t
end
if sealed and succ == total and f[5] and f[5] ~= '' and f[7] ~= '1' then
  sq, sb = f[5], f[6] or ''
  sready = ready_of(f[12], due_at('sdue', f[14]))
end
if sealed and succ + dead + gone == total and f[8] and f[8] ~= '' and f[10] ~= '1' then
  cq, cb = f[8], f[9] or ''
  cready = ready_of(f[13], due_at('cdue', f[15]))
end
-- Complete with nothing left to fire (no callbacks, or all fired): the
-- batch's retention starts here, once (batch_fired starts it otherwise).
if sealed and succ + dead + gone == total and sq == '' and cq == '' and not redis.call('HGET', KEYS[1], 'expires') then
  local keep = tonumber(redis.call('HGET', KEYS[1], 'keep') or '0') or 0
  if keep > 0 and (f[5] == '' or f[7] == '1' or succ < total) and (f[8] == '' or f[10] == '1') then
    redis.call('HSET', KEYS[1], 'expires', now_ms() + keep)
    redis.call('PEXPIRE', KEYS[1], keep)
    redis.call('PEXPIRE', KEYS[2], keep)
    redis.call('PEXPIRE', KEYS[3], keep)
  end
end
return {total, succ, dead, sealed and 1 or 0, sq, sb, cq, cb, sready, cready, gone}
