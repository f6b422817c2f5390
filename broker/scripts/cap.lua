-- cap: set or clear a concurrency cap of a queue (one shard of it) or of a
-- job type in it.
--
-- KEYS[1] -> ns:{q}:controls    HASH "c" / "c:<type>" -> "share/total"
-- KEYS[2] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[3] -> ns:{q}:held:       prefix of the per-type ZSETs id -> ready ms
--                               of due jobs held back by their type's cap
-- ARGV[1] -> now ms (unused)
-- ARGV[2] -> "*" for the queue, or the type name
-- ARGV[3] -> "share/total" (this shard's part of the cap, the whole cap),
--            "" to clear it
-- ARGV[4] -> wake channel
--
-- Returns how many held jobs went back to the schedule. A type's held jobs
-- go back whenever its cap changes (the next claims hold again what the new
-- cap leaves no room for), so that a cleared or raised cap frees them at
-- once; the queue's workers are woken. O(H) for the type's H held jobs.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'zset'})
if bad then
  return bad
end
local field, typ = 'c', nil
if ARGV[2] ~= '*' then
  typ = ARGV[2]
  field = 'c:' .. typ
  bad = expect({KEYS[3] .. typ, 'zset'})
  if bad then
    return bad
  end
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], field)
else
  redis.call('HSET', KEYS[1], field, ARGV[3])
end
local back = 0
if typ then
  back = release_held(KEYS[3] .. typ, KEYS[2])
end
redis.call('PUBLISH', ARGV[4], 'cap')
return back
