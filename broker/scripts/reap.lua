-- reap: list jobs whose lease ran out, for the caller to retry or kill.
--
-- KEYS[1] -> ns:{q}:processing  ZSET id -> lease deadline ms
-- KEYS[2] -> ns:{q}:jobs        HASH id -> envelope
-- KEYS[3] -> ns:{q}:attempts    HASH id -> attempts spent
-- KEYS[4] -> ns:{q}:leases      HASH id -> fencing token
-- KEYS[5] -> ns:{q}:cancels     HASH id -> token of a running job asked to stop
-- KEYS[6] -> ns:{q}:unique      ZSET id -> remembered until ms (job.Unique)
-- KEYS[7] -> ns:{q}:running     HASH id -> "<type>[\n<key>]": jobs leased
--                               under a concurrency cap
-- KEYS[8] -> ns:{q}:keyrun      HASH key -> running jobs of the key under its cap
-- KEYS[9] -> ns:{q}:keyheld     ZSET key -> its held jobs
-- KEYS[10] -> ns:{q}:held:      prefix of the held sets (a key's:
--                               KEYS[10] .. '#' .. key)
-- KEYS[11] -> ns:{q}:scheduled  ZSET id -> ready ms
--             (KEYS[7] to KEYS[11] are touched only for orphans counted by
--             a cap: no settle will end their lease, so the reap frees
--             their slot, and a key's held job comes back)
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> the most jobs to return
-- ARGV[3] -> the most uniqueness entries whose window is over to remove
--            (tidy_unique in the prelude; 0 or absent: none). Only an
--            enqueue with a window, and the ending of a job with one,
--            tidy KEYS[6] otherwise: the reaper's pass keeps an idle
--            queue's set from holding windows long over.
--
-- Returns {now, jobs, orphans, cancelled, entries tidied}: cancelled lists the ids among
-- jobs whose lease was asked to stop (Broker.CancelJob): the caller ends
-- them as cancelled rather than retrying them.
-- In jobs, jobs is a flat list of id, token, attempt,
-- deadline ms, envelope; nothing about them changes here (the caller retries
-- or kills each with its token, and those scripts check the lease is still
-- expired). orphans lists processing ids without an envelope, removed.
-- A fencing token that is not an integer fences its holder out: the job is
-- returned with token 0, which no claim hands out. An attempts counter that
-- is not an integer gives attempt -1, a job without a lease attempt -2: the
-- caller reports the job corrupt and dead-letters it.
local bad = expect({KEYS[1], 'zset', KEYS[2], 'hash', KEYS[3], 'hash', KEYS[4], 'hash', KEYS[5], 'hash', KEYS[6], 'zset'})
if bad then
  return bad
end
local now = now_ms()
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local jobs, orphans, cancelled = {}, {}, {}
for i = 1, #expired, 2 do
  local id = expired[i]
  local body = redis.call('HGET', KEYS[2], id)
  local token = redis.call('HGET', KEYS[4], id)
  if body then
    local attempt = 0
    local spent = redis.call('HGET', KEYS[3], id)
    if spent and is_int(spent) then
      attempt = tonumber(spent)
    elseif spent then
      redis.call('HSET', KEYS[3], id, 1)
      attempt = -1
    end
    if not token or token == '-1' then
      -- Held by nobody: the state is corrupt. The reaper gets the lease
      -- -1, which no claim hands out, to dead-letter the job with its
      -- body (every reaper that reads it sees the same).
      token = '-1'
      redis.call('HSET', KEYS[4], id, token)
      attempt = -2
    elseif not is_int(token) then
      token = '0'
      redis.call('HSET', KEYS[4], id, token)
    end
    local mark = redis.call('HGET', KEYS[5], id)
    if mark and mark == token then
      cancelled[#cancelled + 1] = id
    end
    jobs[#jobs + 1] = id
    jobs[#jobs + 1] = tonumber(token)
    jobs[#jobs + 1] = attempt
    jobs[#jobs + 1] = finite(expired[i + 1], now)
    jobs[#jobs + 1] = body
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    orphans[#orphans + 1] = id
  end
end
if #orphans > 0 and redis.call('EXISTS', KEYS[7]) == 1 then
  -- Best effort: keys of the wrong type (another program's) leave the
  -- slot taken rather than fail the reap.
  local ok, vals = pcall(hmget, KEYS[7], orphans)
  if ok then
    local keys, spec = {}, {KEYS[8], 'hash', KEYS[9], 'zset', KEYS[11], 'zset'}
    for k = 1, #orphans do
      local key = vals[k] and string.match(vals[k], '\n(.+)$')
      if key then
        keys[#keys + 1] = key
        spec[#spec + 1] = KEYS[10] .. '#' .. key
        spec[#spec + 1] = 'zset'
      end
    end
    call_chunked('HDEL', KEYS[7], orphans)
    if #keys > 0 and expect(spec) == nil then
      key_release(KEYS[8], KEYS[10], KEYS[9], KEYS[11], keys)
    end
  end
end
local tidied = 0
local tidy = tonumber(ARGV[3]) or 0
if tidy > 0 then
  tidied = tidy_unique(KEYS[6], now, tidy)
end
return {now, jobs, orphans, cancelled, tidied}
