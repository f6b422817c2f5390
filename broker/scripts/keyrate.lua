-- keyrate: set or clear a per-key rate limit of a queue (one shard of it):
-- the default of every key, or one key's own.
--
-- KEYS[1] -> ns:{q}:controls    HASH "kr" -> the default limit, as "r" (see
--                               limit.lua), or "-" when only some keys have
--                               their own
-- KEYS[2] -> ns:{q}:keyrates    HASH key -> a key's own limit
-- KEYS[3] -> ns:{q}:keyheld     ZSET key -> its jobs held by its cap, pause
--                               or rate
-- KEYS[4] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[5] -> ns:{q}:held:       prefix of the held sets: a key's is
--                               KEYS[5] .. '#' .. key
-- KEYS[6] -> ns:{q}:keywait     ZSET key -> ms of its next token
-- KEYS[7] -> ns:{q}:keytat:     prefix of a key's GCRA state (STRING)
-- KEYS[8] -> ns:{q}:window:     prefix of a key's strict log,
--                               KEYS[8] .. '#' .. key
-- ARGV[1] -> now ms (unused)
-- ARGV[2] -> "" for the default, or the key
-- ARGV[3] -> the limit as stored in "kr", "" to clear it
-- ARGV[4] -> wake channel
--
-- Returns how many held jobs went back to the schedule. A change takes
-- effect for the jobs already waiting at the next claim:
-- - set or changed: the keys waiting for a token (one key's, or every
--   key's for the default: O(K) for the K keys waiting) are due again in
--   KEYS[6], so the next claim reads their buckets under the new limit
--   (the claim brings a GCRA bucket within now + tau + T of the limit it
--   reads; a strict log is trimmed to the new window). Their held jobs
--   stay held, first in line for their key's tokens;
-- - cleared: the held jobs of the key (of every key holding jobs for the
--   default: O(K + H) for the K keys holding H jobs) go back to the
--   schedule, as keycap.lua's change does (the next claims hold again
--   what a cap or pause still holds), and a cleared key's own bucket is
--   dropped (the default's buckets expire by themselves);
-- - the queue's workers are woken.
local spec = {KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'zset', KEYS[6], 'zset'}
local key, value = ARGV[2], ARGV[3]
if value ~= '' then
  local count, per, _, shards = string.match(value, '^(%d+)/(%d+)/(%d+)/(%d+)')
  if not count or tonumber(count) < 1 or tonumber(per) < 1 or tonumber(shards) < 1 then
    return redis.error_reply('ERR delayq: bad rate limit ' .. value)
  end
end
local keys = {}
if key ~= '' then
  keys = {key}
  spec[#spec + 1] = KEYS[7] .. key
  spec[#spec + 1] = 'string'
  spec[#spec + 1] = KEYS[8] .. '#' .. key
  spec[#spec + 1] = 'zset'
elseif value == '' then
  local bad = expect(spec)
  if bad then
    return bad
  end
  for _, k in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    if k ~= '#' then
      keys[#keys + 1] = k
    end
  end
end
if value == '' then
  for _, k in ipairs(keys) do
    spec[#spec + 1] = KEYS[5] .. '#' .. k
    spec[#spec + 1] = 'zset'
  end
end
local bad = expect(spec)
if bad then
  return bad
end
if key == '' then
  if value == '' then
    redis.call('HDEL', KEYS[1], 'kr')
  else
    redis.call('HSET', KEYS[1], 'kr', value)
  end
else
  if value == '' then
    redis.call('HDEL', KEYS[2], key)
  else
    redis.call('HSET', KEYS[2], key, value)
  end
end
-- "kr" says whether the claim checks keys' rates at all: the default, or
-- "-" while some key has its own.
local default = redis.call('HGET', KEYS[1], 'kr')
if not default or default == '-' then
  if redis.call('HLEN', KEYS[2]) > 0 then
    redis.call('HSET', KEYS[1], 'kr', '-')
  else
    redis.call('HDEL', KEYS[1], 'kr')
  end
end
local now = now_ms()
local back = 0
if value == '' then
  for _, k in ipairs(keys) do
    local moved = release_held(KEYS[5] .. '#' .. k, KEYS[4])
    held_add(KEYS[3], k, -moved)
    back = back + moved
  end
  if key == '' then
    redis.call('ZREMRANGEBYRANK', KEYS[6], 0, -1)
  else
    redis.call('ZREM', KEYS[6], key)
    redis.call('DEL', KEYS[7] .. key)
    redis.call('DEL', KEYS[8] .. '#' .. key)
  end
else
  if key == '' then
    local waiting = redis.call('ZRANGE', KEYS[6], 0, -1)
    local due = {}
    for _, k in ipairs(waiting) do
      due[#due + 1] = now
      due[#due + 1] = k
    end
    if #due > 0 then
      call_chunked('ZADD', KEYS[6], due)
    end
  else
    redis.call('ZADD', KEYS[6], 'XX', now, key)
    -- A bucket of the other kind says nothing under this one.
    if string.find(value, '/s/', 1, true) then
      redis.call('DEL', KEYS[7] .. key)
    else
      redis.call('DEL', KEYS[8] .. '#' .. key)
    end
  end
end
redis.call('PUBLISH', ARGV[4], 'limit')
return back
