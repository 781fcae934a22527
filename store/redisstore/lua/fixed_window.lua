-- fixed-window: clock-aligned windows [kW, (k+1)W); admit while count +
-- cost <= L. State: a = k (window index), b = count. Mirrors
-- algorithm.FixedWindow.
--
-- Every algorithm but the sliding log is a function of (p1, p2, p3, cost,
-- a, b, c), the rule's parameters, the cost and the state (a == nil for no
-- state); p1, p2 and the cost are numbers, p3 the string ARGV holds, since
-- only the leaky queue reads it and each tonumber is a strtod in Redis. It
-- returns allowed, remaining, retry-after, reset-after, delay
-- (ns; the drivers clamp them at 0), the TTL of the new state in ns and the
-- new state a, b, c. It reads the instant from NOW_S, NOW_N and touches no
-- key: the driver reads and writes.
ALG['fixed-window'] = function(w, limit, _, cost, sk, sc)
  local k, rem = tdiv(NOW_S, NOW_N, w)
  -- A clock that went back into an earlier window stays in the last one.
  if sk == nil or sk < k then sk, sc = k, 0 end
  local toend = (sk - k) * w + (w - rem)
  local allowed = sc + cost <= limit
  if allowed then sc = sc + cost end
  -- Nothing counted (a fresh window looked at with cost 0) is whole now.
  local reset = 0
  if sc > 0 then reset = toend end
  if allowed then return true, limit - sc, 0, reset, 0, toend, sk, sc, 0 end
  return false, limit - sc, toend, reset, 0, toend, sk, sc, 0
end
