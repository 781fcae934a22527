-- token-bucket: lazy refill, credit = tokens*T in ns, a new key starts
-- full. State: a = credit, b, c = last update (s, ns). Mirrors
-- algorithm.TokenBucket.
ALG['token-bucket'] = function(t, tau, _, cost, credit, ls, ln)
  if credit == nil then
    credit, ls, ln = tau, NOW_S, NOW_N
  else
    -- Refill; a clock that went back refills nothing and moves nothing.
    local e = tsub(NOW_S, NOW_N, ls, ln)
    if e > 0 then
      if e >= tau - credit then credit = tau else credit = credit + e end
      ls, ln = NOW_S, NOW_N
    elseif credit > tau then
      credit = tau -- what "e >= tau - credit" does for e = 0
    end
  end
  local need = cost * t
  -- lag > 0 when the caller's clock is behind the bucket's: waits are
  -- measured from the caller's now.
  local lag = tsub(ls, ln, NOW_S, NOW_N)
  local allowed, retry = false, 0
  if credit >= need then
    credit = credit - need
    allowed = true
  else
    retry = need - credit + lag
  end
  local ttl = lag + (tau - credit)
  return allowed, quo(credit, t), retry, tau - credit + lag, 0, ttl, credit, ls, ln
end
