-- fixed-window on the calendar: a quota of L per day, week or month in a
-- time zone. Lua cannot do time-zone arithmetic, so the Go side (see
-- calendar.go) passes with every call two consecutive periods [x0, x1) and
-- [x1, x2) (Unix seconds: calendar boundaries are whole seconds), the two
-- nearest its own clock, and the script counts in the one its instant falls
-- in, exactly at the boundaries. p1 = L, p2 = x0, p3 = (x1 - x0) +
-- (x2 - x1) * 2^22 (each period is shorter than 2^22 s, 48 days, so p3 is
-- exact). An instant outside [x0, x2) means Redis's clock and the caller's
-- differ by more than half a period: the call fails rather than count in a
-- period it cannot name.
--
-- State: a = end of the period counted (Unix seconds), b = count. A period
-- is known by its end; a clock that went back into an earlier period stays
-- in the stored one. Mirrors algorithm.CalendarWindow. The fifth result,
-- the delay of the other algorithms, is the time left in the period
-- (Decision.PeriodLeft).
ALG['fixed-window-calendar'] = function(limit, x0, spans, cost, se, sc)
  spans = param(spans) -- p3 comes as a string (see fixed_window.lua)
  local d1 = spans % 4194304
  local x1 = x0 + d1
  local x2 = x1 + (spans - d1) / 4194304
  if NOW_S < x0 or NOW_S >= x2 then
    error('portero: calendar quota: the instant ' .. string.format('%d', NOW_S) .. ' s is outside the periods [' ..
      string.format('%d', x0) .. ', ' .. string.format('%d', x2) .. ') computed by Portero: its clock and Redis\'s differ by more than half a period', 0)
  end
  local e = x2
  if NOW_S < x1 then e = x1 end
  if se == nil or se < e then se, sc = e, 0 end
  local toend = tsub(se, 0, NOW_S, NOW_N)
  local allowed = sc + cost <= limit
  if allowed then sc = sc + cost end
  local reset = 0
  if sc > 0 then reset = toend end
  if allowed then return true, limit - sc, 0, reset, toend, toend, se, sc, 0 end
  return false, limit - sc, toend, reset, toend, toend, se, sc, 0
end
