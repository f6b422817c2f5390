-- batch_add: count members into an open batch, or take back members whose
-- enqueue was refused.
--
-- KEYS[1] -> ns:batch:{b}:meta     HASH the batch's counters and callbacks
-- KEYS[2] -> ns:batch:{b}:members  HASH "<queue>\n<id>" -> its state: p
--                                  pending, s succeeded, d dead, x gone
--                                  (ended without success or dead record),
--                                  o out (a next job taken back out, its
--                                  parent having ended without success),
--                                  os, od, ox (out, and ended since)
-- KEYS[3] -> ns:batch:{b}:next     HASH member -> "\t<member>\t<member>\t"
--                                  its next jobs counted here
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
-- (a stale worker's chain; nothing changed). "<" links the next jobs to
-- their member in KEYS[3] (batch_end takes them back out when the member
-- ends without success), and counts again a next job taken out before (o:
-- the member was redriven, and succeeded this time; os, od and ox count
-- with the ending they had meanwhile). The next jobs of a member that is
-- out itself are added out (o), not counted.
-- "-" removes members still pending ("p") and returns {1, removed...};
-- members that already ended stay. Total follows either way.
local bad = expect({KEYS[1], 'hash', KEYS[2], 'hash', KEYS[3], 'hash'})
if bad then
  return bad
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
local out, n = {1}, 0
local ds, dd, dx = 0, 0, 0
local mode = string.sub(ARGV[2], 1, 1)
local from, parent
if mode == '<' then
  parent = string.sub(ARGV[2], 2)
  from = redis.call('HGET', KEYS[2], parent)
  if not from or from == 's' then
    return {-3}
  end
end
if mode == '+' then
  if redis.call('HGET', KEYS[1], 'sealed') == '1' then
    return {-2}
  end
  for i = 3, #ARGV do
    local added = redis.call('HSETNX', KEYS[2], ARGV[i], 'p')
    out[#out + 1] = added
    n = n + added
  end
elseif mode == '<' then
  local outside = string.sub(from, 1, 1) == 'o'
  local links = redis.call('HGET', KEYS[3], parent) or '\t'
  local again = {os = 's', od = 'd', ox = 'x'}
  for i = 3, #ARGV do
    local m = ARGV[i]
    local was = redis.call('HGET', KEYS[2], m)
    local added = 0
    if not was then
      redis.call('HSET', KEYS[2], m, outside and 'o' or 'p')
      if not outside then
        added = 1
      end
    elseif not outside and was == 'o' then
      redis.call('HSET', KEYS[2], m, 'p')
      added = 1
    elseif not outside and again[was] then
      local e = again[was]
      redis.call('HSET', KEYS[2], m, e)
      added = 1
      if e == 's' then ds = ds + 1 elseif e == 'd' then dd = dd + 1 else dx = dx + 1 end
    end
    out[#out + 1] = added
    n = n + added
    if not string.find(links, '\t' .. m .. '\t', 1, true) then
      links = links .. m .. '\t'
    end
  end
  redis.call('HSET', KEYS[3], parent, links)
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    -- A batch in its retention (a redriven member's chain): the links go
    -- with it.
    redis.call('PEXPIRE', KEYS[3], ttl)
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
if ds ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'succeeded', ds)
end
if dd ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'dead', dd)
end
if dx ~= 0 then
  redis.call('HINCRBY', KEYS[1], 'gone', dx)
end
return out
