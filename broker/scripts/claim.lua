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
-- scheduled without an envelope, now removed. A job whose attempts counter
-- is not an integer comes with attempt -1: the caller reports it corrupt.
--
-- A fixed number of commands per call, whatever n: each step below is one
-- command over all claimed jobs (in chunks), O(log N) per job.
local now = now_ms()
local n, lease = tonumber(ARGV[2]), tonumber(ARGV[3])
local jobs, orphans = {}, {}
local late_sum, late_max = 0, 0
-- A fencing counter that is not an integer restarts at the server time in
-- microseconds: above every token handed out so far unless claims outran a
-- thousand a millisecond, so no token is handed out twice.
local seq = redis.call('GET', KEYS[6])
if seq and not is_int(seq) then
  redis.call('SET', KEYS[6], string.format('%d', now * 1000))
end
if n > 0 then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, n)
  if #due > 0 then
    local ids, readies = {}, {}
    for i = 1, #due, 2 do
      ids[#ids + 1] = due[i]
      readies[#readies + 1] = finite(due[i + 1], now)
    end
    call_chunked('ZREM', KEYS[1], ids)
    local bodies = hmget(KEYS[3], ids)
    local live, live_ready, live_body = {}, {}, {}
    for k = 1, #ids do
      if bodies[k] then
        live[#live + 1] = ids[k]
        live_ready[#live_ready + 1] = readies[k]
        live_body[#live_body + 1] = bodies[k]
      else
        orphans[#orphans + 1] = ids[k]
      end
    end
    if #orphans > 0 then
      call_chunked('HDEL', KEYS[4], orphans)
    end
    if #live > 0 then
      local first_token = redis.call('INCRBY', KEYS[6], #live) - #live + 1
      local spent = hmget(KEYS[4], live)
      local deadlines, tokens, attempts = {}, {}, {}
      local deadline = now + lease
      for k = 1, #live do
        local id, token = live[k], first_token + k - 1
        local attempt, stored
        if spent[k] and not is_int(spent[k]) then
          attempt, stored = -1, 1 -- reported corrupt by the caller
        else
          attempt = (tonumber(spent[k]) or 0) + 1
          stored = attempt
        end
        deadlines[#deadlines + 1] = deadline
        deadlines[#deadlines + 1] = id
        tokens[#tokens + 1] = id
        tokens[#tokens + 1] = token
        attempts[#attempts + 1] = id
        attempts[#attempts + 1] = stored
        jobs[#jobs + 1] = id
        jobs[#jobs + 1] = token
        jobs[#jobs + 1] = attempt
        jobs[#jobs + 1] = live_ready[k]
        jobs[#jobs + 1] = live_body[k]
        local late = math.min(now - live_ready[k], HISTORY_MAX_LATE)
        late_sum = late_sum + late
        late_max = math.max(late_max, late)
      end
      call_chunked('ZADD', KEYS[2], deadlines)
      call_chunked('HSET', KEYS[5], tokens)
      call_chunked('HSET', KEYS[4], attempts)
    end
  end
end
local hist = history(KEYS[7], now, 'claimed', #jobs / 5)
if hist then
  redis.pcall('HINCRBY', hist, 'late_sum', string.format('%d', late_sum))
  history_max(hist, 'late_max', late_max)
end
return {now, next_ready(KEYS[1], now), jobs, orphans}
