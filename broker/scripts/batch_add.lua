-- batch_add: count members into an open batch, or take back members whose
-- enqueue was refused.
--
-- KEYS[1] -> ns:batch:{b}:meta     HASH the batch's counters and callbacks
-- KEYS[2] -> ns:batch:{b}:members  HASH "<queue>\n<id>" -> p, s or d
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> "+" add, "-" take back, or "<" .. "<queue>\n<id>" of a
--            member: add that member's next jobs (job.Then), sealed or
--            not
-- ARGV[3..] -> members, "<queue>\n<id>"
--
-- "+" returns {1, new...}: per member 1 when it was added by this call, 0
-- when it was a member already (a repeated call counts it once); -1 when
-- the batch does not exist, -2 when it is sealed (nothing changed). "<"
-- returns the same, but adds to a sealed batch too: the member whose next
-- jobs they are has not succeeded yet, so the batch cannot have, and the
-- chain extends it; -3 when that member succeeded already or is no member
-- (a stale worker's chain; nothing changed).
-- "-" removes members still pending ("p") and returns {1, removed...};
-- members that already ended stay. Total follows either way.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash'})
if bad then
  return bad
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local out, n = {1}, 0
local mode = string.sub(ARGV[2], 1, 1)
if mode == '<' then
  local from = redis.call('HGET', KEYS[2], string.sub(ARGV[2], 2))
  if not from or from == 's' then
    return {-3}
  end
end
if mode == '+' or mode == '<' then
  if mode == '+' and redis.call('HGET', KEYS[1], 'sealed') == '1' then
    return {-2}
  end
  for i = 3, #ARGV do
    local added = redis.call('HSETNX', KEYS[2], ARGV[i], 'p')
    out[#out + 1] = added
    n = n + added
  end
else
  for i = 3, #ARGV do
    local gone = 0
    if redis.call('HGET', KEYS[2], ARGV[i]) == 'p' then
      gone = redis.call('HDEL', KEYS[2], ARGV[i])
    end
    out[#out + 1] = gone
    n = n - gone
  end
end
if n ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'total', n)
end
return out
