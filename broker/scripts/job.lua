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
-- KEYS[9] -> ns:{q}:progress    HASH id -> progress of a running job
-- KEYS[10] -> ns:{q}:done:      prefix of the STRINGs of retained succeeded
--                               jobs
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> id
--
-- Returns {now, state, time ms, attempts, body, progress, ttl ms}: state is
-- 1 scheduled (time is the ready time), 2 processing (the lease deadline;
-- progress is its last report, "" for none), 3 dead (the died-at time; body
-- is the dead record), 4 succeeded and retained (body is the kept record,
-- "<finished ms>\n<record>"; ttl is how long it is still kept), 0 not found
-- (the other fields are 0 and ""). A pending job is reported even when a
-- dead or succeeded record of the same id is kept; of a dead and a
-- succeeded record, the later. Nothing changes.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'zset', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'hash', KEYS[6], 'zset', KEYS[7], 'zset', KEYS[9], 'hash', KEYS[10] .. ARGV[2], 'string'})
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
  local progress = ''
  if state == 2 then
    progress = redis.call('HGET', KEYS[9], id) or ''
  end
  return {now, state, tonumber(at), attempts, body, progress, 0}
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
-- Held by its type's cap or rate limit, or by its key's cap.
local body = redis.call('HGET', KEYS[3], id)
local t, key = type_of(body), key_of(body)
if t and expect({KEYS[8] .. t, 'zset'}) == nil then
  at = redis.call('ZSCORE', KEYS[8] .. t, id)
  if at then
    local r = pending(1, at)
    if r then
      return r
    end
  end
end
if key and expect({KEYS[8] .. '#' .. key, 'zset'}) == nil then
  at = redis.call('ZSCORE', KEYS[8] .. '#' .. key, id)
  if at then
    local r = pending(1, at)
    if r then
      return r
    end
  end
end
local record = redis.call('HGET', KEYS[5], id)
local died = tonumber(redis.call('ZSCORE', KEYS[6], id) or '0')
local done = redis.call('GET', KEYS[10] .. id)
if done then
  local finished = tonumber((string.match(done, '^(%d+)\n'))) or 0
  if not record or finished >= died then
    return {now, 4, finished, 0, done, '', redis.call('PTTL', KEYS[10] .. id)}
  end
end
if record then
  return {now, 3, died, 0, record, '', 0}
end
return {now, 0, 0, 0, '', '', 0}
