-- Concurrency leases (store/redisstore/lease.go), one operation per call,
-- atomic, and the same decisions as package algorithm's Leases.
--
-- KEYS[1] is a sorted set of lease ids scored by their expiry in
-- microseconds since the Unix epoch (exact in a double until the year 2255).
-- A lease has expired when its expiry is at or before now. The key itself
-- expires with its last lease, so a crashed holder leaves nothing behind.
--
-- ARGV:
--   1 op: acquire | renew | release
--   2 clock: server (Redis TIME) | caller (3 and 4)
--   3, 4 the caller's instant: whole seconds and microseconds
--   5 the lease id
--   6 max: the most leases held at once (acquire)
--   7 the lease's lifetime in microseconds (acquire, renew)
--   8 the key's TTL floor in ms: 0 with the server clock; with the caller's,
--     whose instants need not follow Redis's clock, a floor in real time
--
-- Replies:
--   acquire: {1, free slots left, 0} or {0, 0, µs until the earliest expiry}
--   renew:   1, or 0 when the lease has expired or is gone (it is dropped,
--            not taken back)
--   release: the number of leases removed, 0 or 1

local k, op, id = KEYS[1], ARGV[1], ARGV[5]
if op == 'release' then
  return redis.call('ZREM', k, id)
end

local now
if ARGV[2] == 'server' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[3]) * 1000000 + tonumber(ARGV[4])
end
local ttl = tonumber(ARGV[7])

-- Scores are written with %.0f: Lua's own number formatting keeps 14
-- digits, and an expiry has 16.
local function num(x) return string.format('%.0f', x) end

-- keep makes the key live until its last lease expires (at least the floor).
local function keep()
  local last = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
  local ms = math.ceil((tonumber(last[2]) - now) / 1000)
  redis.call('PEXPIRE', k, math.max(ms, tonumber(ARGV[8]), 1))
end

if op == 'renew' then
  local s = redis.call('ZSCORE', k, id)
  if not s then return 0 end
  s = tonumber(s)
  if s <= now then
    redis.call('ZREM', k, id)
    return 0
  end
  if now + ttl > s then
    redis.call('ZADD', k, num(now + ttl), id)
  end
  keep()
  return 1
end

-- acquire
redis.call('ZREMRANGEBYSCORE', k, '-inf', num(now))
local n = redis.call('ZCARD', k)
local max = tonumber(ARGV[6])
if n >= max then
  local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  return {0, 0, tonumber(first[2]) - now}
end
redis.call('ZADD', k, num(now + ttl), id)
keep()
return {1, max - n - 1, 0}
