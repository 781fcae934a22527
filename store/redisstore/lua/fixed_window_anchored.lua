-- fixed-window-anchored: a window of W starts at the first request of an
-- absent or expired key (the INCR + EXPIRE form). State: a, b = start (s,
-- ns), c = count. Mirrors algorithm.AnchoredWindow.
ALG['fixed-window-anchored'] = function(w, limit, _, cost, ss, sn, sc)
  if ss == nil or tsub(NOW_S, NOW_N, ss, sn) >= w then ss, sn, sc = NOW_S, NOW_N, 0 end
  local toend = w - tsub(NOW_S, NOW_N, ss, sn)
  local reset = 0
  if sc + cost <= limit then
    sc = sc + cost
    return true, limit - sc, 0, toend, 0, toend, ss, sn, sc
  end
  if sc > 0 then reset = toend end
  return false, limit - sc, toend, reset, 0, toend, ss, sn, sc
end
