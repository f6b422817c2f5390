-- reap: list jobs whose lease ran out, for the caller to retry or kill.
--
-- KEYS[1] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[3] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[4] -> ns:{q}:leases      HASH id -> fencing token
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> the most jobs to return
--
-- Returns {now, jobs, orphans}: jobs is a flat list of id, token, attempt,
-- deadline ms, envelope; nothing about them changes here (the caller retries
-- or kills each with its token, and those scripts check the lease is still
-- expired). orphans lists processing ids without envelope or lease, removed.
-- A fencing token that is not an integer fences its holder out: the job is
-- returned with token 0, which no claim hands out. An attempts counter that
-- is not an integer gives attempt -1: the caller reports the job corrupt.
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local jobs, orphans = {}, {}
for i = 1, #expired, 2 do
  local id = expired[i]
  local body = redis.call('HGET', KEYS[2], id)
  local token = redis.call('HGET', KEYS[4], id)
  if body and token then
    if not is_int(token) then
      token = '0'
      redis.call('HSET', KEYS[4], id, token)
    end
    local spent = redis.call('HGET', KEYS[3], id)
    local attempt = 0
    if spent and is_int(spent) then
      attempt = tonumber(spent)
    elseif spent then
      redis.call('HSET', KEYS[3], id, 1)
      attempt = -1
    end
    jobs[#jobs + 1] = id
    jobs[#jobs + 1] = tonumber(token)
    jobs[#jobs + 1] = attempt
    jobs[#jobs + 1] = finite(expired[i + 1], now)
    jobs[#jobs + 1] = body
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    orphans[#orphans + 1] = id
  end
end
return {now, jobs, orphans}
