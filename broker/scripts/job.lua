-- job: where one job is, read at one instant.
-- read-only
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[4] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[5] -> ns:{q}:dead        HASH id -> dead record
-- KEYS[6] -> ns:{q}:dead:index  ZSET id -> died-at ms
-- KEYS[7] -> ns:{q}:parked      ZSET id -> ready ms (jobs of paused types,
--                               reported as scheduled)
-- KEYS[8] -> ns:{q}:held:       prefix of the per-type ZSETs of jobs held
--                               back by their type's concurrency cap
--                               (reported as scheduled)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
--
-- Returns {now, state, time ms, attempts, body}: state is 1 scheduled (time
-- is the ready time), 2 processing (the lease deadline), 3 dead (the died-at
-- time; body is the dead record), 0 not found (the other fields are 0 and
-- ""). A pending job is reported even when a dead record of the same id is
-- kept. Nothing changes.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'hash', KEYS[6], 'zset', KEYS[7], 'zset'})
if bad then
  return bad
end
local now = now_ms()
local id = ARGV[2]
local function pending(state, at)
  local body = redis.call('HGET', KEYS[3], id)
  if not body then
    return nil
  end
  local attempts = tonumber(redis.call('HGET', KEYS[4], id) or '0')
  return {now, state, tonumber(at), attempts, body}
end
local at = redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[7], id)
if at then
  local r = pending(1, at)
  if r then
    return r
  end
end
at = redis.call('ZSCORE', KEYS[2], id)
if at then
  local r = pending(2, at)
  if r then
    return r
  end
end
local t = type_of(redis.call('HGET', KEYS[3], id))
if t and expect({KEYS[8] .. t, 'zset'}) == nil then
  at = redis.call('ZSCORE', KEYS[8] .. t, id)
  if at then
    local r = pending(1, at)
    if r then
      return r
    end
  end
end
local record = redis.call('HGET', KEYS[5], id)
if record then
  return {now, 3, tonumber(redis.call('ZSCORE', KEYS[6], id) or '0'), 0, record}
end
return {now, 0, 0, 0, ''}
