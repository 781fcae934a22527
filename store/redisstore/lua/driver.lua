-- The driver: decide every hit in order, then commit all of them or none.
--
-- KEYS[i] is the key of hit i. ARGV:
--   1 clock: "server" reads Redis TIME (microseconds); "caller" takes 2, 3
--   2, 3 the caller's instant: whole seconds and nanoseconds (0 <= n < 1e9)
--   4 "1" to commit when every hit is allowed, "0" to decide only
--   5 the TTL floor in ms (0 with the server clock)
--   then five per hit: algorithm, cost, p1, p2, p3, where p1, p2, p3 are
--   W, L, 0 for the windows and the log, and T, B*T, B for the buckets,
--   GCRA and the queue (all in ns or units, exact integers below 2^53).
-- Reply: all-allowed flag, then five integers per hit: allowed, remaining,
-- retry-after ns, reset-after ns, delay ns. A hit that fails (a key of the
-- wrong type, say) makes the reply an error "ERR portero hit I: MESSAGE".
local function main()
  if ARGV[1] == 'server' then
    local t = redis.call('TIME')
    NOW_S, NOW_N = tonumber(t[1]), tonumber(t[2]) * 1000
  else
    NOW_S, NOW_N = tonumber(ARGV[2]), tonumber(ARGV[3])
  end
  local commit = ARGV[4] == '1'
  MIN_TTL = tonumber(ARGV[5])
  local out = { 0 }
  local commits = {}
  local pend = {}
  local all = true
  for i = 1, #KEYS do
    local b = 5 + (i - 1) * 5
    local f = ALG[ARGV[b + 1]]
    if f == nil then
      error({ hit = i, msg = 'algorithm ' .. tostring(ARGV[b + 1]) .. ' is not in this script' })
    end
    local key = KEYS[i]
    local d, ns, c = f(i, key, tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 2]), pend[key])
    if d.allowed then
      pend[key] = ns
      commits[#commits + 1] = c
      out[#out + 1] = 1
    else
      all = false
      out[#out + 1] = 0
    end
    out[#out + 1] = d.rem
    out[#out + 1] = d.retry
    out[#out + 1] = d.reset
    out[#out + 1] = d.delay
  end
  if all then
    out[1] = 1
    if commit then
      for _, c in ipairs(commits) do c() end
    end
  end
  return out
end

local ok, res = pcall(main)
if ok then return res end
if type(res) == 'table' and res.hit then
  return redis.error_reply('ERR portero hit ' .. res.hit .. ': ' .. tostring(res.msg))
end
return redis.error_reply('ERR portero script: ' .. tostring(res))
