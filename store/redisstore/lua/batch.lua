-- batch is the driver of a batch of independent one-hit calls, which the store
-- coalesces when callers queue up behind calls in flight (never the sliding
-- log). Each hit is decided exactly as one.lua decides it, in order, so a
-- later hit on a key sees what an earlier one wrote; a refusal of one hit
-- does not touch the others (not all-or-nothing).
--
-- KEYS[i] is the key of hit i. ARGV 1-5 as for one.lua (ARGV 2, 3 unused:
-- with the caller's clock each hit brings its own instant), then seven per
-- hit: seconds, nanoseconds, algorithm, cost, p1, p2, p3.
-- Reply: five integers per hit: status (1 allowed, 0 refused, -1 failed: the
-- store runs that hit again alone for its error), remaining, retry-after,
-- reset-after, delay.
local function batch(KEYS, ARGV)
  begin(ARGV)
  local caller = ARGV[1] ~= 'server'
  local out = {}
  local n = 0
  for i = 1, #KEYS do
    local o = 5 + (i - 1) * 7
    local key = KEYS[i]
    if caller then NOW_S, NOW_N = tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]) end
    local f = ALG[ARGV[o + 3]]
    local raw = false
    if f then raw = redis.pcall('GET', key) end
    if f == nil or (type(raw) == 'table' and raw.err) or (raw and #raw ~= STATE_LEN) then
      out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = -1, 0, 0, 0, 0
    else
      local a, b, c
      if raw then a, b, c = struct.unpack('ddd', raw) end
      local allowed, rem, retry, reset, delay, ttl, na, nb, nc = f(param(ARGV[o + 5]), param(ARGV[o + 6]), ARGV[o + 7], num(ARGV[o + 4]), a, b, c)
      if retry < 0 then retry = 0 end
      if reset < 0 then reset = 0 end
      if allowed then
        save(key, ttl, na, nb, nc)
        out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = 1, rem, 0, reset, delay
      else
        out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = 0, rem, retry, reset, 0
      end
    end
    n = n + 5
  end
  return out
end
