-- gcra: one timestamp, the theoretical arrival time. State: a, b = TAT (s,
-- ns). Mirrors algorithm.GCRA.
ALG['gcra'] = function(t, tau, _, cost, ts, tn)
  local level = 0
  if ts ~= nil then
    level = tsub(ts, tn, NOW_S, NOW_N)
  end
  if level <= 0 then ts, tn, level = NOW_S, NOW_N, 0 end
  local need = cost * t
  if level <= tau - need then
    ts, tn = tadd(ts, tn, need)
    level = level + need
    return true, quo(tau - level, t), 0, level, 0, level, ts, tn, 0
  end
  -- After a clock step back the level can exceed the bucket: nothing remains.
  local rem = 0
  if level < tau then rem = quo(tau - level, t) end
  return false, rem, level - (tau - need), level, 0, level, ts, tn, 0
end
