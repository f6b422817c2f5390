-- batch_add: count members into an open batch, or take back members whose
-- enqueue was refused.
--
-- KEYS[1] -> ns:batch:{b}:meta     HASH the batch's counters and callbacks
-- KEYS[2] -> ns:batch:{b}:members  HASH "<queue>\n<id>" -> p, s or d
-- ARGV[1] -> now ms ("" = server TIME)
-- ARGV[2] -> "+" add, "-" take back
-- ARGV[3..] -> members, "<queue>\n<id>"
--
-- "+" returns {1, new...}: per member 1 when it was added by this call, 0
-- when it was a member already (a repeated call counts it once); -1 when
-- the batch does not exist, -2 when it is sealed (nothing changed).
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
if ARGV[2] == '+' then
  if redis.call('HGET', KEYS[1], 'sealed') == '1' then
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
