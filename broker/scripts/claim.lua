-- claim: lease up to n due jobs to the caller.
--
-- KEYS[1] -> ns:{q}:scheduled   ZSET id -> ready ms
-- KEYS[2] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[3] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[4] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[5] -> ns:{q}:leases      HASH id -> fencing token of the live lease
-- KEYS[6] -> ns:{q}:seq         STRING  -> last fencing token handed out
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> n, the most jobs to claim
-- ARGV[3] -> lease ms
--
-- Returns {now, next, jobs, orphans}: next is the earliest ready time left in
-- the scheduled set (-1 when empty); jobs is a flat list of
-- id, token, attempt, ready ms, envelope; orphans lists ids that were
-- scheduled without an envelope, now removed. A job whose attempts counter
-- is not an integer comes with attempt -1: the caller reports it corrupt.
local now = now_ms()
local n, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local jobs, orphans = {}, {}
-- A fencing counter that is not an integer restarts at the server time in
-- microseconds: above every token handed out so far unless claims outran a
-- thousand a millisecond, so no token is handed out twice.
local seq = redis.call('GET', KEYS[6])
if seq and not is_int(seq) then
  redis.call('SET', KEYS[6], string.format('%d', now * 1000))
end
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
      local attempt
      local spent = redis.call('HGET', KEYS[4], id)
      if spent and not is_int(spent) then
        redis.call('HSET', KEYS[4], id, 1)
        attempt = -1
      else
        attempt = redis.call('HINCRBY', KEYS[4], id, 1)
      end
      jobs[#jobs + 1] = id
      jobs[#jobs + 1] = token
      jobs[#jobs + 1] = attempt
      jobs[#jobs + 1] = finite(ready, now)
      jobs[#jobs + 1] = body
    else
      redis.call('HDEL', KEYS[4], id)
      orphans[#orphans + 1] = id
    end
  end
end
return {now, next_ready(KEYS[1], now), jobs, orphans}
