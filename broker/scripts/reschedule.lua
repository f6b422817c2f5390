-- reschedule: move a scheduled job to a new ready time.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:parked      ZSET id -> ready ms (jobs of paused types:
--                               they move there, and stay parked)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
-- ARGV[3] -> at ms (0 = use the delay)
-- ARGV[4] -> delay µs
-- ARGV[5] -> wake channel
--
-- Returns {now µs, code}: code is the new ready time in ms, -1 in progress
-- (nothing changed), 0 not found.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'zset'})
if bad then
  return bad
end
local now = now_us()
local id = ARGV[2]
if redis.call('ZSCORE', KEYS[1], id) then
  local ready = tonumber(ARGV[3])
  if ready <= 0 then
    ready = ready_after(now, tonumber(ARGV[4]))
  end
  wake_if_earliest(KEYS[1], ARGV[5], ready, ms_of(now))
  redis.call('ZADD', KEYS[1], 'XX', ready, id)
  return {now, ready}
end
if redis.call('ZSCORE', KEYS[3], id) then
  local ready = tonumber(ARGV[3])
  if ready <= 0 then
    ready = ready_after(now, tonumber(ARGV[4]))
  end
  redis.call('ZADD', KEYS[3], 'XX', ready, id)
  return {now, ready}
end
if redis.call('ZSCORE', KEYS[2], id) then
  return {now, -1}
end
return {now, 0}
