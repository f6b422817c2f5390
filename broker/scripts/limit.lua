-- limit: set or clear a rate limit of a queue (one shard of it) or of a job
-- type in it.
--
-- KEYS[1] -> ns:{q}:controls    HASH "r" / "r:<type>" -> "count/per ms/burst/shards"
--                               (a strict window: ".../s/<share>/<slack ms>")
-- KEYS[2] -> ns:{q}:rate        HASH "*" / "<type>" -> GCRA theoretical arrival
--                               time ms
-- KEYS[3] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[4] -> ns:{q}:held:       prefix of the per-type ZSETs id -> ready ms
--                               of due jobs held back by their type's cap
--                               or rate limit
-- KEYS[5] -> ns:{q}:window:     prefix of the ZSETs token -> claim ms: the
--                               logs of strict windows ("*" or the type)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> "*" for the queue, or the type name
-- ARGV[3] -> the limit, "" to clear it
-- ARGV[4] -> wake channel
--
-- Returns how many held jobs went back to the schedule. A change takes
-- effect at once for the jobs already waiting:
-- - a GCRA bucket's theoretical arrival time is brought down to at most
--   now + tau + T of the new limit (as if its last job had just started
--   under it), so a raised limit does not wait for the old limit's next
--   token; a lowered one goes on from where the bucket is;
-- - the bucket of the other kind (GCRA or window log) is dropped;
-- - a cleared type limit moves the type's held jobs back to the schedule
--   with their ready times (the next claims hold again those its cap, if
--   any, leaves no room for): O(H) for its H held jobs, once. Set or
--   changed, they stay held, first in line for the type's tokens;
-- - the queue's workers are woken, so that they claim under the new limit
--   now rather than at the wake-up time the old one gave them.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'zset'})
if bad then
  return bad
end
local name = ARGV[2]
local field = 'r'
if name ~= '*' then
  field = 'r:' .. name
  bad = expect({KEYS[4] .. name, 'zset'})
  if bad then
    return bad
  end
end
bad = expect({KEYS[5] .. name, 'zset'})
if bad then
  return bad
end
local back = 0
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], field)
  redis.call('HDEL', KEYS[2], name)
  redis.call('ZREMRANGEBYRANK', KEYS[5] .. name, 0, -1)
  if name ~= '*' then
    back = release_held(KEYS[4] .. name, KEYS[3])
  end
else
  local count, per, burst, shards, rest = string.match(ARGV[3], '^(%d+)/(%d+)/(%d+)/(%d+)(.*)$')
  count, per, burst, shards = tonumber(count), tonumber(per), tonumber(burst), tonumber(shards)
  if not count or count < 1 or per < 1 or shards < 1 then
    return redis.error_reply('ERR delayq: bad rate limit ' .. ARGV[3])
  end
  redis.call('HSET', KEYS[1], field, ARGV[3])
  if rest ~= '' then
    redis.call('HDEL', KEYS[2], name)
  else
    redis.call('ZREMRANGEBYRANK', KEYS[5] .. name, 0, -1)
    local now = now_ms()
    local T = per * shards / count
    local top = now + T * (math.max(burst, 1) - 1) + T
    local tat = tonumber(redis.call('HGET', KEYS[2], name))
    if tat and tat > top then
      redis.call('HSET', KEYS[2], name, string.format('%.3f', top))
    end
  end
end
redis.call('PUBLISH', ARGV[4], 'limit')
return back
