-- leaky-meter: the leaky bucket as a meter, level*T in ns draining at r.
-- State: a = level, b, c = last update (s, ns). Mirrors algorithm.LeakyMeter.
ALG['leaky-meter'] = function(t, tau, _, cost, level, ls, ln)
  if level == nil then
    level, ls, ln = 0, NOW_S, NOW_N
  else
    local e = tsub(NOW_S, NOW_N, ls, ln)
    if e > 0 then
      if e >= level then level = 0 else level = level - e end
      ls, ln = NOW_S, NOW_N
    elseif level <= 0 then
      level = 0 -- what "e >= level" does for e = 0
    end
  end
  local need = cost * t
  -- lag > 0 when the caller's clock is behind the meter's.
  local lag = tsub(ls, ln, NOW_S, NOW_N)
  local allowed, retry = false, 0
  if level <= tau - need then
    level = level + need
    allowed = true
  else
    retry = level - (tau - need) + lag
  end
  local ttl = lag + level
  return allowed, quo(tau - level, t), retry, level + lag, 0, ttl, level, ls, ln
end
