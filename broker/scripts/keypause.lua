-- keypause: pause or resume one key of a queue (one shard of it).
--
-- KEYS[1] -> ns:{q}:controls    HASH "kp" -> "1" while some key is paused
--                               (the claim checks keys only then, or while
--                               a key cap is set)
-- KEYS[2] -> ns:{q}:keypaused   HASH key -> paused at ms
-- KEYS[3] -> ns:{q}:keyheld     ZSET key -> its jobs held by its cap or pause
-- KEYS[4] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[5] -> ns:{q}:held:       prefix of the held sets: a key's is
--                               KEYS[5] .. '#' .. key
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> the key
-- ARGV[3] -> "1" pause, "0" resume
-- ARGV[4] -> wake channel
--
-- A paused key's due jobs are held by the claim in the key's held set, as
-- those of a key at its cap (claim.lua, Per-key caps). Pausing is O(1) and
-- idempotent. Resuming sends the key's held jobs back to the schedule with
-- their ready times (O(H log N) for its H held jobs: the next claims hold
-- again those its cap leaves no room for), and wakes the queue's workers.
-- Returns how many went back (0 for a pause, or a key that was not
-- paused: nothing moves then).
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'zset', KEYS[4], 'zset', KEYS[5] .. '#' .. ARGV[2], 'zset'})
if bad then
  return bad
end
local now = now_ms()
local key = ARGV[2]
if ARGV[3] == '1' then
  redis.call('HSETNX', KEYS[2], key, string.format('%d', now))
  redis.call('HSET', KEYS[1], 'kp', '1')
  return 0
end
if redis.call('HDEL', KEYS[2], key) == 0 then
  return 0
end
if redis.call('HLEN', KEYS[2]) == 0 then
  redis.call('HDEL', KEYS[1], 'kp')
end
local back = release_held(KEYS[5] .. '#' .. key, KEYS[4])
held_add(KEYS[3], key, -back)
redis.call('PUBLISH', ARGV[4], now)
return back
