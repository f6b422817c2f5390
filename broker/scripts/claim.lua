-- claim: lease up to n due jobs to the caller.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[4] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[5] -> ns:{q}:leases      HASH id -> fencing token of the live lease
-- KEYS[6] -> ns:{q}:seq         STRING  -> last fencing token handed out
-- KEYS[7] -> ns:{q}:hist:       prefix of the per-minute history (claimed,
--                               late_sum, late_max: lateness = now - ready)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> n, the most jobs to claim
-- ARGV[3] -> lease ms
--
-- Returns {now, next, jobs, orphans}: next is the earliest ready time left in
-- the scheduled set (-1 when empty); jobs is a flat list of
-- id, token, attempt, ready ms, envelope; orphans lists ids that were
-- scheduled without an envelope, now removed.
local now = now_ms()
local n, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local jobs, orphans = {}, {}
local late_sum, late_max = 0, 0
if n > 0 then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, n)
  for i = 1, #due, 2 do
    local id, ready = due[i], due[i + 1]
    redis.call('ZREM', KEYS[1], id)
    local body = redis.call('HGET', KEYS[3], id)
    if body then
      local token = redis.call('INCR', KEYS[6])
      redis.call('ZADD', KEYS[2], now + lease, id)
      redis.call('HSET', KEYS[5], id, token)
      local attempt = redis.call('HINCRBY', KEYS[4], id, 1)
      jobs[#jobs + 1] = id
      jobs[#jobs + 1] = token
      jobs[#jobs + 1] = attempt
      jobs[#jobs + 1] = tonumber(ready)
      jobs[#jobs + 1] = body
      local late = math.min(now - tonumber(ready), HISTORY_MAX_LATE)
      late_sum = late_sum + late
      late_max = math.max(late_max, late)
    else
      redis.call('HDEL', KEYS[4], id)
      orphans[#orphans + 1] = id
    end
  end
end
local hist = history(KEYS[7], now, 'claimed', #jobs / 5)
if hist then
  redis.pcall('HINCRBY', hist, 'late_sum', string.format('%d', late_sum))
  history_max(hist, 'late_max', late_max)
end
local next = -1
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then
  next = tonumber(first[2])
end
return {now, next, jobs, orphans}
