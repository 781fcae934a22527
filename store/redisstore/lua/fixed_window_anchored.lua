-- fixed-window-anchored: a window of W starts at the first request of an
-- absent or expired key (the INCR + EXPIRE form). State: a, b = start (s,
-- ns), c = count. Mirrors algorithm.AnchoredWindow.
ALG['fixed-window-anchored'] = function(w, limit, _, cost, ss, sn, sc)
  if ss == nil or tsub(NOW_S, NOW_N, ss, sn) >= w then ss, sn, sc = NOW_S, NOW_N, 0 end
  local toend = w - tsub(NOW_S, NOW_N, ss, sn)
  local allowed = sc + cost <= limit
  if allowed then sc = sc + cost end
  local reset = 0
  if sc > 0 then reset = toend end
  if allowed then return true, limit - sc, 0, reset, 0, toend, ss, sn, sc end
  return false, limit - sc, toend, reset, 0, toend, ss, sn, sc
end
