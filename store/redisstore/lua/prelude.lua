-- Portero's Redis scripts. store/redisstore assembles them from this
-- prelude, one file per algorithm and the drivers, each a function of
-- (KEYS, ARGV): one.lua for a call of one hit (the common case: no loop, no
-- tables but its reply), driver.lua for several hits, all or none, and
-- batch.lua for a batch of one-hit calls. Where Redis has functions (7.0
-- and later) all of it is one library, loaded once, whose drivers are
-- called with FCALL: the helpers below are then made once, not at every
-- call as in a script run with EVALSHA, which is what older servers get.
-- Inputs come only through KEYS and ARGV (see the drivers).
--
-- Lua numbers are IEEE doubles: integers are exact only below 2^53, and a
-- Unix time in nanoseconds (~1.7e18) is not. So an instant is kept as two
-- exact numbers, whole seconds s and nanoseconds n (0 <= n < 1e9), and every
-- quantity the algorithms compute (a difference of instants, a credit, a
-- window length, a count) stays below 2^53 and is exact. This is what lets
-- the scripts agree with package algorithm to the nanosecond.
--
-- Cost matters: every line runs inside Redis's single thread for every
-- decision. The helpers avoid work the common case does not need (whole
-- second or sub-second windows divide without long division), and state is
-- written as three packed doubles with one SET ... PX (no number formatting,
-- no separate PEXPIRE).

local E9 = 1000000000
-- Differences of instants are saturated at +-SAT (about 104 days); every
-- window and bucket is limited to 2^52 ns by the Go side, below SAT.
local SAT = 9000000000000000

-- ALG maps an algorithm's name to its function (see fixed_window.lua);
-- LOGS marks the algorithms that keep their own kind of key (the sliding
-- log), which the multi-hit driver calls differently.
local ALG, LOGS = {}, {}

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
  n = n + d
  if n >= 0 and n < E9 then return s, n end
  local q, r = divmod(n, E9)
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
  -- The common windows divide or are divided by a second: no long division.
  if w % E9 == 0 then
    local q, r = divmod(s, w / E9)
    return q, r * E9 + n
  end
  if E9 % w == 0 then
    local q, r = divmod(n, w)
    return s * (E9 / w) + q, r
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

-- The instant of this call, (NOW_S, NOW_N), and the TTL floor in ms, set by
-- begin before any algorithm runs.
local NOW_S, NOW_N, MIN_TTL = 0, 0, 0

-- begin sets them from ARGV 1-3 and 5 (every driver's first five):
--   1 clock: "server" reads Redis TIME (microseconds); "caller" takes 2, 3
--   2, 3 the caller's instant: whole seconds and nanoseconds (0 <= n < 1e9)
--   5 the TTL floor in ms (0 with the server clock)
-- A string compare spares the common "0" a tonumber (a strtod in Redis).
local function begin(ARGV)
  if ARGV[1] == 'server' then
    local t = redis.call('TIME')
    NOW_S, NOW_N = tonumber(t[1]), tonumber(t[2]) * 1000
  else
    NOW_S, NOW_N = tonumber(ARGV[2]), tonumber(ARGV[3])
  end
  MIN_TTL = 0
  if ARGV[5] ~= '0' then MIN_TTL = tonumber(ARGV[5]) end
end

-- num is tonumber, without the strtod for the common cost "1".
local function num(s)
  if s == '1' then return 1 end
  return tonumber(s)
end

-- param is tonumber for a rule's parameters (p1, p2, p3), which repeat from
-- call to call: in the library, which lives from one call to the next, a
-- table lookup (Lua strings are interned) instead of a strtod. At most 1024
-- are kept, then the table starts afresh.
local PARAMS, NPARAMS = {}, 0
local function param(s)
  local v = PARAMS[s]
  if v == nil then
    v = tonumber(s)
    if NPARAMS >= 1024 then PARAMS, NPARAMS = {}, 0 end
    PARAMS[s], NPARAMS = v, NPARAMS + 1
  end
  return v
end

-- The state of every algorithm but the sliding log is three exact numbers
-- a, b, c, stored as a 24-byte string of packed doubles (struct.pack 'ddd')
-- with its expiry: one GET to read, one SET ... PX to write.
local STATE_LEN = 24
-- NOT_STATE is the error for a key that holds a string of another length.
local NOT_STATE = 'WRONGTYPE the key holds a string that is not Portero state'

-- read_state reads the state of key: nil, then a, b, c (nil for no
-- state); or the error reply for a string that is not Portero state.
-- (one.lua's one-hit path reads inline: its instructions are counted.)
local function read_state(key)
  local raw = redis.call('GET', key)
  if not raw then return nil end
  if #raw ~= STATE_LEN then
    return redis.error_reply('ERR portero hit 1: ' .. NOT_STATE)
  end
  return nil, struct.unpack('ddd', raw)
end

-- save writes the state of key, to expire ttl ns from now (rounded up to a
-- millisecond, so that a key never disappears before its state equals no
-- state), or at least MIN_TTL ms from now.
local function save(key, ttl, a, b, c)
  local ms = math.ceil(ttl / 1000000)
  if ms < MIN_TTL then ms = MIN_TTL end
  if ms <= 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, struct.pack('ddd', a, b, c), 'PX', ms)
  end
end

-- rcall is redis.pcall that turns an error reply into a Lua error naming
-- the hit, which the multi-hit driver reports (WRONGTYPE, for example).
local function rcall(hit, ...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    error({ hit = hit, msg = r.err })
  end
  return r
end
