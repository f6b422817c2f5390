-- keycap: set or clear a per-key concurrency cap of a queue (one shard of
-- it): the default of every key, or one key's own.
--
-- KEYS[1] -> ns:{q}:controls    HASH "k" -> the default "share/total", or
--                               "-" when only some keys have their own
-- KEYS[2] -> ns:{q}:keycaps     HASH key -> "share/total": the keys' own caps
-- KEYS[3] -> ns:{q}:keyheld     ZSET key -> its jobs held by its cap or pause
-- KEYS[4] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[5] -> ns:{q}:held:       prefix of the held sets: a key's is
--                               KEYS[5] .. '#' .. key
-- ARGV[1] -> now ms (unused)
-- ARGV[2] -> "" for the default, or the key
-- ARGV[3] -> "share/total" (this shard's part of the cap, the whole cap),
--            "" to clear it
-- ARGV[4] -> wake channel
--
-- Returns how many held jobs went back to the schedule. A change releases
-- what the cap held (the next claims hold again what the new cap leaves no
-- room for): one key's held jobs for a key's cap, O(H) for its H held
-- jobs; every key's for the default, O(K + H) for the K keys holding H
-- jobs. The queue's workers are woken.
local spec = {KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'zset'}
local key = ARGV[2]
local keys = {}
if key ~= '' then
  keys = {key}
else
  local bad = expect(spec)
  if bad then
    return bad
  end
  keys = {}
  for _, k in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    if k ~= '#' then
      keys[#keys + 1] = k
    end
  end
end
for _, k in ipairs(keys) do
  spec[#spec + 1] = KEYS[5] .. '#' .. k
  spec[#spec + 1] = 'zset'
end
local bad = expect(spec)
if bad then
  return bad
end
if key == '' then
  if ARGV[3] == '' then
    redis.call('HDEL', KEYS[1], 'k')
  else
    redis.call('HSET', KEYS[1], 'k', ARGV[3])
  end
else
  if ARGV[3] == '' then
    redis.call('HDEL', KEYS[2], key)
  else
    redis.call('HSET', KEYS[2], key, ARGV[3])
  end
end
-- "k" says whether the claim checks keys at all: the default, or "-"
-- while some key has its own cap.
local default = redis.call('HGET', KEYS[1], 'k')
if not default or default == '-' then
  if redis.call('HLEN', KEYS[2]) > 0 then
    redis.call('HSET', KEYS[1], 'k', '-')
  else
    redis.call('HDEL', KEYS[1], 'k')
  end
end
local back = 0
for _, k in ipairs(keys) do
  local moved = release_held(KEYS[5] .. '#' .. k, KEYS[4])
  held_add(KEYS[3], k, -moved)
  back = back + moved
end
redis.call('PUBLISH', ARGV[4], 'cap')
return back
