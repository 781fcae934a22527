-- Portero's Redis scripts. store/redisstore assembles each script from this
-- prelude, one file per algorithm and driver.lua; inputs come only through
-- KEYS and ARGV (see driver.lua).
--
-- Lua numbers are IEEE doubles: integers are exact only below 2^53, and a
-- Unix time in nanoseconds (~1.7e18) is not. So an instant is kept as two
-- exact numbers, whole seconds s and nanoseconds n (0 <= n < 1e9), and every
-- quantity the algorithms compute (a difference of instants, a credit, a
-- window length, a count) stays below 2^53 and is exact. This is what lets
-- the scripts agree with package algorithm to the nanosecond.

local E9 = 1000000000
-- Differences of instants are saturated at +-SAT (about 104 days); every
-- window and bucket is limited to 2^52 ns by the Go side, below SAT.
local SAT = 9000000000000000

local ALG = {}

-- divmod returns floor(a/b) and a - b*floor(a/b) exactly, for integers with
-- |a| + b < 2^53 and b > 0: the float quotient can be one off, which the
-- remainder reveals.
local function divmod(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1; r = r + b
  elseif r >= b then
    q = q + 1; r = r - b
  end
  return q, r
end

-- quo is Go's integer division a/b for b > 0: truncated toward zero.
local function quo(a, b)
  if a >= 0 then
    local q = divmod(a, b)
    return q
  end
  local q = divmod(-a, b)
  return -q
end

-- tsub returns (as,an) - (bs,bn) in ns, saturated at +-SAT.
local function tsub(as, an, bs, bn)
  local ds = as - bs
  if ds > 9000000 then return SAT end
  if ds < -9000000 then return -SAT end
  local d = ds * E9 + (an - bn)
  if d > SAT then return SAT end
  if d < -SAT then return -SAT end
  return d
end

-- tadd returns the instant d ns after (s, n), for |d| < 2^53 - 1e9.
local function tadd(s, n, d)
  local q, r = divmod(n + d, E9)
  return s + q, r
end

-- tdiv returns k = floor(t/w) and t - k*w for t = s*1e9 + n and an integer
-- 0 < w <= 2^52, exactly, for instants before the year 2116 (s < 4.6e9) and
-- k < 2^53 (w of a microsecond or more).
local tdiv
tdiv = function(s, n, w)
  if s < 0 then
    -- floor(t/w) = -ceil(-t/w)
    local ms, mn = -s, -n
    if mn < 0 then ms = ms - 1; mn = mn + E9 end
    local k, r = tdiv(ms, mn, w)
    if r == 0 then return -k, 0 end
    return -k - 1, w - r
  end
  -- t = q1*w*1e9 + (r1*1e9 + n) with r1 < w: divide the second part by w.
  local q1, r1 = divmod(s, w)
  local q2, r2
  if r1 < 9000000 then
    q2, r2 = divmod(r1 * E9 + n, w)
  else
    -- r1*1e9 + n = (r1*1953125 + nh)*512 + nl, since 1e9 = 1953125*512:
    -- divide the first factor, then long division over the 9 bits of nl.
    local nh, nl = divmod(n, 512)
    local q, rem = divmod(r1 * 1953125 + nh, w)
    for i = 8, 0, -1 do
      local bit = math.floor(nl / 2 ^ i) % 2
      rem = rem * 2 + bit
      q = q * 2
      if rem >= w then rem = rem - w; q = q + 1 end
    end
    q2, r2 = q, rem
  end
  return q1 * E9 + q2, r2
end

-- fmt formats an integral number exactly (tostring would round to 14 digits).
local function fmt(x)
  return string.format('%.0f', x)
end

-- rcall is redis.pcall that turns an error reply into a Lua error naming
-- the hit, which the driver reports (WRONGTYPE, for example).
local function rcall(hit, ...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    error({ hit = hit, msg = r.err })
  end
  return r
end

-- The instant of this call, (NOW_S, NOW_N), and the TTL floor in ms; set
-- by the driver before any algorithm runs.
local NOW_S, NOW_N, MIN_TTL = 0, 0, 0

-- expire sets key to expire ttl ns from now (rounded up to a millisecond,
-- so that a key never disappears before its state equals no state), or at
-- least MIN_TTL ms from now.
local function expire(key, ttl)
  local ms = math.ceil(ttl / 1000000)
  if ms < MIN_TTL then ms = MIN_TTL end
  if ms <= 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, ms)
  end
end

local function nonneg(x)
  if x < 0 then return 0 end
  return x
end

-- decision builds the table the driver returns for one hit.
local function decision(allowed, remaining, retry, reset, delay)
  return { allowed = allowed, rem = remaining, retry = nonneg(retry), reset = nonneg(reset), delay = nonneg(delay or 0) }
end

-- readhash returns the fields of a hash key as numbers, or nil when the key
-- does not exist.
local function readhash(hit, key, ...)
  local v = rcall(hit, 'HMGET', key, ...)
  if v[1] == false or v[1] == nil then return nil end
  local out = {}
  for i = 1, #v do out[i] = tonumber(v[i]) end
  return out
end
