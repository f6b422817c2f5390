-- batch_fired: mark a batch's callback enqueued; start the batch's
-- retention once nothing is left to fire.
--
-- KEYS[1] -> ns:batch:{b}:meta     HASH the batch's counters and callbacks
-- KEYS[2] -> ns:batch:{b}:members  HASH "<queue>\n<id>" -> state
-- KEYS[3] -> ns:batch:{b}:next     HASH member -> its next jobs
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> "s" success, "c" complete, "" none (only check retention)
--
-- Returns 1, or 0 when the batch does not exist. Once the batch is sealed
-- and complete and every callback it has is marked fired, its keys expire
-- after its keep time; the expiry is set again when a redriven member
-- succeeds later and fires the success callback.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'hash'})
if bad then
  return bad
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if ARGV[2] == 's' then
  redis.call('HSET', KEYS[1], 'sf', 1)
elseif ARGV[2] == 'c' then
  redis.call('HSET', KEYS[1], 'cf', 1)
end
local f = redis.call('HMGET', KEYS[1], 'total', 'succeeded', 'dead', 'sealed', 'sq', 'sf', 'cq', 'cf', 'keep', 'gone')
local total, succ, dead = tonumber(f[1]) or 0, tonumber(f[2]) or 0, tonumber(f[3]) or 0
local complete = f[4] == '1' and succ + dead + (tonumber(f[10]) or 0) == total
local sdone = (not f[5]) or f[5] == '' or f[6] == '1' or succ < total
local cdone = (not f[7]) or f[7] == '' or f[8] == '1'
if complete and sdone and cdone then
  local keep = tonumber(f[9]) or 0
  if keep > 0 then
    redis.call('HSET', KEYS[1], 'expires', now_ms() + keep)
    redis.call('PEXPIRE', KEYS[1], keep)
    redis.call('PEXPIRE', KEYS[2], keep)
    redis.call('PEXPIRE', KEYS[3], keep)
  end
end
return 1
