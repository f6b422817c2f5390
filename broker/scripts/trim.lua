-- trim: apply the dead-letter retention rules now.
--
-- KEYS[1] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[2] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- KEYS[3] -> ns:{q}:counts      HASH counter -> n: the trims (trim_dead)
-- KEYS[4] -> ns:{q}:dead:trimmed LIST (trim_dead; none kept here)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> cap on dead records (< 0: none)
-- ARGV[3] -> max age in ms (<= 0: none)
--
-- Returns how many records were dropped; they are counted as trims like
-- those of a death (an operator's trim claims no warning, and keeps
-- nothing for a hook: its caller is told the number).
local bad = expect({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash'})
if bad then
  return bad
end
local dropped = trim_dead(KEYS[1], KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]), now_ms(), KEYS[3], KEYS[4], 0, 0)
return dropped
