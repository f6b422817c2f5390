-- dead_delete: remove dead records.
--
-- KEYS[1] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[2] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- ARGV[1] -> now ms (unused)
-- ARGV[2..] -> ids
--
-- Returns one integer per id: 1 deleted, 0 not found.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'zset'})
if bad then
  return bad
end
local out = {}
for i = 2, #ARGV do
  redis.call('ZREM', KEYS[2], ARGV[i])
  out[#out + 1] = redis.call('HDEL', KEYS[1], ARGV[i])
end
return out
