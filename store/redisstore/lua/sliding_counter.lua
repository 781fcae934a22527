-- sliding-counter: estimate = prev*(1 - elapsed/W) + cur, computed with the
-- same IEEE double operations as algorithm.SlidingCounter; admit when
-- estimate + (cost-1) < L. State: a = k (window index), b = prev, c = cur.

local function sc_admits(est, cost, limit)
  return est + (cost - 1) < limit
end

-- sc_after reports whether a request of cost passes delta ns after an
-- instant elapsed ns into window k with counts prev, cur.
local function sc_after(w, limit, prev, cur, elapsed, delta, cost)
  local j, e = divmod(elapsed + delta, w)
  local p, c = prev, cur
  if j == 1 then
    p, c = cur, 0
  elseif j > 1 then
    p, c = 0, 0
  end
  return sc_admits(p * (1 - e / w) + c, cost, limit)
end

-- sc_retry returns the smallest whole-ns wait after which the request
-- passes. The estimate never grows with time, so that wait is unique: a
-- closed-form guess, then a bisection.
local function sc_retry(w, limit, prev, cur, elapsed, cost)
  local need = limit - cost + 1
  local guess
  if cur < need and prev > 0 then
    guess = w * (1 - (need - cur) / prev) - elapsed
  elseif cur > 0 then
    guess = w + w * (1 - need / cur) - elapsed
  else
    guess = 1
  end
  local hi = 2 * w - elapsed -- the estimate is 0 by then
  local delta = math.ceil(guess)
  if delta ~= delta or delta < 1 then delta = 1 end
  if delta > hi then delta = hi end
  local lo -- invariant: refused at lo, admitted at hi
  if sc_after(w, limit, prev, cur, elapsed, delta, cost) then
    if delta == 1 or not sc_after(w, limit, prev, cur, elapsed, delta - 1, cost) then return delta end
    lo, hi = 0, delta - 1
  else
    if sc_after(w, limit, prev, cur, elapsed, delta + 1, cost) then return delta + 1 end
    lo = delta + 1
  end
  while hi - lo > 1 do
    local mid = lo + math.floor((hi - lo) / 2)
    if sc_after(w, limit, prev, cur, elapsed, mid, cost) then hi = mid else lo = mid end
  end
  return hi
end

-- sc_reset is sc_retry(w, limit, prev, cur, elapsed, limit), the wait until
-- the whole limit is back, for cur >= 1 (always so after an admission),
-- without sc_retry's calls, which cost more than the rest of a decision:
-- the estimate stays at least cur in this window, so the limit comes back
-- in the next, at the first x (ns into it) where cur*(1 - x/w) + (limit-1)
-- < limit (prev is then cur, and cur 0), or at the start of the one after
-- (x = w). A guess, then a few steps of the same comparison; when rounding
-- moved the boundary further (a huge limit), sc_retry's bisection.
local function sc_reset(w, limit, prev, cur, elapsed)
  local l1 = limit - 1
  local x = math.ceil(w - w / cur)
  if x < 0 then x = 0 elseif x > w then x = w end
  for _ = 1, 4 do
    if x < w and not (cur * (1 - x / w) + l1 < limit) then
      x = x + 1
    elseif x > 0 and cur * (1 - (x - 1) / w) + l1 < limit then
      x = x - 1
    else
      return w - elapsed + x
    end
  end
  return sc_retry(w, limit, prev, cur, elapsed, limit)
end

-- sc_remaining counts the cost-1 requests that would still pass: those n
-- with est + (n-1) < limit (sc_admits, written out).
local function sc_remaining(est, limit)
  local room = limit - est
  if not (room > 0) then return 0 end
  local n = math.ceil(room)
  while n > 0 and not (est + (n - 1) < limit) do n = n - 1 end
  while est + n < limit do n = n + 1 end
  return n
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
  local est = prev * (1 - elapsed / w) + cur
  local allowed, retry, reset = false, 0, 0
  if sc_admits(est, cost, limit) then
    allowed = true
    cur = cur + cost
    est = est + cost
  else
    retry = sc_retry(w, limit, prev, cur, elapsed, cost) + lag
  end
  -- The whole limit is back when a request of cost L would pass
  -- (estimate < 1): sooner than the TTL, which waits for 0.
  if cur >= 1 then
    reset = sc_reset(w, limit, prev, cur, elapsed) + lag
  elseif not sc_admits(est, limit, limit) then
    reset = sc_retry(w, limit, prev, cur, elapsed, limit) + lag
  end
  -- The key may go once the estimate is below 1: a fraction of one
  -- request never changes a decision (costs are whole), so from then on
  -- the state decides like no state. That is when the whole limit is back.
  local ttl = reset
  return allowed, sc_remaining(est, limit), retry, reset, 0, ttl, ck, prev, cur
end
