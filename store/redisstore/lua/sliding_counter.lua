-- sliding-counter: estimate = prev*(1 - elapsed/W) + cur; admit when
-- estimate + (cost-1) < L. State: a = k (window index), b = prev, c = cur.
-- Decided in whole numbers as algorithm.SlidingCounter does, never in
-- floating point, so that an estimate of exactly L refuses: the rule holds
-- exactly when floor(estimate) + cost <= L, and floor(estimate) = cur +
-- prev - ceil(prev*elapsed/W) (sc_slid); the waits are closed forms of the
-- same integers (sc_muldiv).
--
-- Exactness: counts are below 2^32 (Go caps the limit and every charge)
-- and 0 <= elapsed < W <= 2^52, so prev*elapsed and n*W can pass 2^53,
-- where doubles stop being exact. Below 2^52 they are computed directly (a
-- product that rounds to less than 2^52 is less than 2^52, hence exact);
-- above it, sc_muldiv divides by the count instead, in pieces that stay
-- below 2^49, and sc_slid's float guess is checked against sc_muldiv.

local P52 = 4503599627370496 -- 2^52

-- sc_muldiv returns floor(n*w/p), exactly, for whole 0 <= n <= p <= 2^32
-- and 0 < w <= 2^52. With w = q*p + r, n*w/p = n*q + n*r/p, where n*q <=
-- w, and n*r < 2^64 is taken on n's two 16-bit halves: each product and
-- sum below is less than 2^49.
local function sc_muldiv(n, w, p)
  local nw = n * w
  if nw < P52 then return (divmod(nw, p)) end
  local q, r = divmod(w, p)
  local n1, n0 = divmod(n, 65536)
  local a1, b1 = divmod(n1 * r, p)
  local a2 = divmod(b1 * 65536 + n0 * r, p)
  return n * q + a1 * 65536 + a2
end

-- sc_slid returns ceil(p*e/w) for 0 <= p < 2^32 and 0 <= e < w: how many of
-- the previous window's p requests have slid out e ns into this one. It is
-- the largest n <= p whose first instant, sc_muldiv(n-1, w, p) + 1, is at
-- most e. Past 2^52, the float quotient (two roundings of at most 2^-53
-- each, of a quotient below 2^32: off by less than 2^-20) gives a ceiling
-- off by at most one, which those instants settle.
local function sc_slid(w, p, e)
  local pe = p * e
  if pe < P52 then
    local q, r = divmod(pe, w)
    if r > 0 then q = q + 1 end
    return q
  end
  local n = math.min(math.ceil(pe / w), p)
  if n > 0 and e <= sc_muldiv(n - 1, w, p) then return n - 1 end
  if n < p and e > sc_muldiv(n, w, p) then return n + 1 end
  return n
end

-- sc_retry returns the smallest whole-ns wait after which a request of
-- cost (at most L) passes, for a state that refuses it elapsed ns into its
-- window: in this window once enough of prev has slid out, or, when cur
-- alone is too many, in the next, where cur is the previous window's count
-- (at most W into it: a wait to the window after, where the estimate is 0).
local function sc_retry(w, limit, prev, cur, elapsed, cost)
  local room = limit - cost -- the most floor(estimate) that admits cost
  if cur <= room then
    return sc_muldiv(cur + prev - room - 1, w, prev) + 1 - elapsed
  end
  return w + sc_muldiv(cur - room - 1, w, cur) + 1 - elapsed
end

ALG['sliding-counter'] = function(w, limit, _, cost, ck, prev, cur)
  local k, rem = tdiv(NOW_S, NOW_N, w)
  local elapsed, lag = rem, 0
  if ck == nil then
    ck, prev, cur = k, 0, 0
  elseif k < ck then
    -- Time went back: stay at the start of the last window; waits are
    -- measured from the caller's now, lag earlier.
    elapsed, lag = 0, (ck - k) * w - rem
  elseif k == ck + 1 then
    ck, prev, cur = k, cur, 0
  elseif k > ck + 1 then
    ck, prev, cur = k, 0, 0
  end
  local est = cur + prev - sc_slid(w, prev, elapsed) -- floor(estimate)
  local allowed, retry, reset = false, 0, 0
  if est + cost <= limit then
    allowed = true
    cur = cur + cost
    est = est + cost
  else
    retry = sc_retry(w, limit, prev, cur, elapsed, cost) + lag
  end
  -- The whole limit is back when a request of cost L would pass (estimate
  -- < 1): sooner than an empty state. From then on a fraction of one
  -- request never changes a decision (costs are whole), so the state
  -- decides like no state and the key may go: the TTL is that wait.
  if est >= 1 then
    reset = sc_retry(w, limit, prev, cur, elapsed, limit) + lag
  end
  local remaining = limit - est
  if remaining < 0 then remaining = 0 end
  return allowed, remaining, retry, reset, 0, reset, ck, prev, cur
end
