-- keyweight: set the weight of one key in the fair turns of a queue (one
-- shard of it).
--
-- KEYS[1] -> ns:{q}:controls    HASH "kw" -> "1" while some key has a
--                               weight (the claim reads weights only then)
-- KEYS[2] -> ns:{q}:keyweights  HASH key -> its weight, 2 to 1000, and
--                               '#turn' -> the key whose turn a claim cut
--                               short and the jobs it took (claim.lua)
-- ARGV[1] -> now ms (unused)
-- ARGV[2] -> the key
-- ARGV[3] -> its weight, 1 to 1000: 1 removes the key's own weight
--
-- O(1) and idempotent: setting the weight a key has changes nothing. The
-- claims deal the turns by the new weights from the next claim on
-- (claim.lua, Fair turns between keys); nothing moves and no worker is
-- woken. Returns 1 when the key's weight changed, else 0.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash'})
if bad then
  return bad
end
local key, w = ARGV[2], tonumber(ARGV[3])
if not w or w < 1 or w > 1000 or w ~= math.floor(w) then
  return redis.error_reply('ERR delayq: key weight ' .. tostring(ARGV[3]) .. ' is not a whole number 1 to 1000; nothing was changed')
end
local changed = 0
if w == 1 then
  changed = redis.call('HDEL', KEYS[2], key)
  -- The last weight gone (a turn the claims keep, field '#turn', goes
  -- with it): the claims read no weights.
  local left = redis.call('HLEN', KEYS[2])
  if left == 0 or (left == 1 and redis.call('HEXISTS', KEYS[2], '#turn') == 1) then
    redis.call('DEL', KEYS[2])
    redis.call('HDEL', KEYS[1], 'kw')
  end
else
  local v = string.format('%d', w)
  if redis.call('HGET', KEYS[2], key) ~= v then
    redis.call('HSET', KEYS[2], key, v)
    changed = 1
  end
  redis.call('HSET', KEYS[1], 'kw', '1')
end
return changed
