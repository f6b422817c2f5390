-- keyfair: turn fair turns between keys on or off in a queue (one shard
-- of it).
--
-- KEYS[1] -> ns:{q}:controls    HASH "kf" -> "1" while the turns are on
-- KEYS[2] -> ns:{q}:keyturn     ZSET key -> its place in the turns
-- KEYS[3] -> ns:{q}:keyheld     ZSET key -> its held jobs
-- KEYS[4] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[5] -> ns:{q}:held:       prefix of the held sets: a key's is
--                               KEYS[5] .. '#' .. key
-- ARGV[1] -> now ms (unused)
-- ARGV[2] -> "1" on, "0" off
-- ARGV[3] -> wake channel
--
-- Returns how many held jobs went back to the schedule: turned off, the
-- keys waiting for a turn send their held jobs back (O(K + H) for the K
-- keys holding H jobs; the next claims hold again what a key's cap, rate
-- or pause still holds) and the turns are dropped. Turned on, nothing
-- moves: the next claims move due jobs with a key to their held sets. The
-- queue's workers are woken either way.
local spec = {KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'zset', KEYS[4], 'zset'}
local bad = expect(spec)
if bad then
  return bad
end
local back = 0
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'kf', '1')
else
  redis.call('HDEL', KEYS[1], 'kf')
  local keys = {}
  for _, k in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    if k ~= '#' then
      keys[#keys + 1] = k
      spec[#spec + 1] = KEYS[5] .. '#' .. k
      spec[#spec + 1] = 'zset'
    end
  end
  bad = expect(spec)
  if bad then
    return bad
  end
  for _, k in ipairs(keys) do
    local moved = release_held(KEYS[5] .. '#' .. k, KEYS[4])
    held_add(KEYS[3], k, -moved)
    back = back + moved
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -1)
end
redis.call('PUBLISH', ARGV[3], 'fair')
return back
