-- trim: apply the dead-letter retention rules now.
--
-- KEYS[1] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[2] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> cap on dead records (< 0: none)
-- ARGV[3] -> max age in ms (<= 0: none)
--
-- Returns how many records were dropped.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'zset'})
if bad then
  return bad
end
return trim_dead(KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms())
