-- reschedule: move a scheduled job to a new ready time.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
-- ARGV[3] -> at ms (0 = use the delay)
-- ARGV[4] -> delay ms
-- ARGV[5] -> wake channel
--
-- Returns the new ready time in ms, -1 in progress (nothing changed), 0 not
-- found.
local now = now_ms()
local id = ARGV[2]
if redis.call('ZSCORE', KEYS[1], id) then
  local ready = tonumber(ARGV[3])
  if ready <= 0 then
    ready = now + tonumber(ARGV[4])
  end
  wake_if_earliest(KEYS[1], ARGV[5], ready, now)
  redis.call('ZADD', KEYS[1], 'XX', ready, id)
  return ready
end
if redis.call('ZSCORE', KEYS[2], id) then
  return -1
end
return 0
