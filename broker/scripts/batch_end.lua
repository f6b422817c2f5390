-- batch_end: count the endings of batch members, and say which callbacks
-- are due; or seal the batch.
--
-- KEYS[1] -> ns:batch:{b}:meta     HASH the batch's counters and callbacks
-- KEYS[2] -> ns:batch:{b}:members  HASH "<queue>\n<id>" -> p, s or d
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> "1": seal the batch (no more members)
-- ARGV[3+2i], ARGV[4+2i] -> a member "<queue>\n<id>" and its ending, s
--                           (succeeded) or d (dead)
--
-- Idempotent: an ending is counted when it changes the member's state (p
-- to s or d, d to s after a redrive), so the same ending moved twice (a
-- worker and a sweep, or a move repeated after a crash) counts once. A
-- member the batch does not know counts nothing.
--
-- Returns {total, succeeded, dead, sealed, success queue, success body,
-- complete queue, complete body}: a callback's queue and body are "" unless
-- it is due: the batch is sealed, every member succeeded (success) or
-- ended (complete), and the callback is not yet marked fired
-- (batch_fired). The caller enqueues due callbacks under ids derived from
-- the batch id, refused as duplicates when repeated, then marks them
-- fired. {-1} when the batch does not exist. A complete batch with nothing
-- left to fire starts its retention (its keys expire after its keep time).
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash'})
if bad then
  return bad
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'sealed', 1)
end
local ds, dd = 0, 0
for i = 3, #ARGV, 2 do
  local m, ending = ARGV[i], ARGV[i + 1]
  local was = redis.call('HGET', KEYS[2], m)
  if was == 'p' and (ending == 's' or ending == 'd') then
    redis.call('HSET', KEYS[2], m, ending)
    if ending == 's' then ds = ds + 1 else dd = dd + 1 end
  elseif was == 'd' and ending == 's' then
    redis.call('HSET', KEYS[2], m, 's')
    ds, dd = ds + 1, dd - 1
  end
end
if ds ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'succeeded', ds)
end
if dd ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'dead', dd)
end
local f = redis.call('HMGET', KEYS[1], 'total', 'succeeded', 'dead', 'sealed', 'sq', 'sb', 'sf', 'cq', 'cb', 'cf')
local total, succ, dead = tonumber(f[1]) or 0, tonumber(f[2]) or 0, tonumber(f[3]) or 0
local sealed = f[4] == '1'
local sq, sb, cq, cb = '', '', '', ''
if sealed and succ == total and f[5] and f[5] ~= '' and f[7] ~= '1' then
  sq, sb = f[5], f[6] or ''
end
if sealed and succ + dead == total and f[8] and f[8] ~= '' and f[10] ~= '1' then
  cq, cb = f[8], f[9] or ''
end
-- Complete with nothing left to fire (no callbacks, or all fired): the
-- batch's retention starts here, once (batch_fired starts it otherwise).
if sealed and succ + dead == total and sq == '' and cq == '' and not redis.call('HGET', KEYS[1], 'expires') then
  local keep = tonumber(redis.call('HGET', KEYS[1], 'keep') or '0') or 0
  if keep > 0 and (f[5] == '' or f[7] == '1' or succ < total) and (f[8] == '' or f[10] == '1') then
    redis.call('HSET', KEYS[1], 'expires', now_ms() + keep)
    redis.call('PEXPIRE', KEYS[1], keep)
    redis.call('PEXPIRE', KEYS[2], keep)
  end
end
return {total, succ, dead, sealed and 1 or 0, sq, sb, cq, cb}
