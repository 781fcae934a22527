-- all is the driver of a call of several hits (and of any call of the sliding
-- log): decide every hit in order, then commit all of them or none.
--
-- KEYS[i] is the key of hit i. ARGV:
--   1 clock: "server" reads Redis TIME (microseconds); "caller" takes 2, 3
--   2, 3 the caller's instant: whole seconds and nanoseconds (0 <= n < 1e9)
--   4 "1" to commit when every hit is allowed, "0" to decide only
--   5 the TTL floor in ms (0 with the server clock)
--   then five per hit: algorithm, cost, p1, p2, p3, where p1, p2, p3 are
--   W, L, 0 for the windows and the log, T, B*T, B for the buckets and
--   GCRA, and T, the hit's MaxDelay (0 for none), B for the queue (all in
--   ns or units, exact integers below 2^53).
-- Reply: all-allowed flag, then five integers per hit: allowed, remaining,
-- retry-after ns, reset-after ns, delay ns. A hit that fails (a key of the
-- wrong type, say) makes the reply an error "ERR portero hit I: MESSAGE".
-- A later hit on a key sees the state an earlier allowed hit of the call
-- left (pend), as storetest.Reference defines.
local function decide_all(KEYS, ARGV)
  local commit = ARGV[4] == '1'
  local out = { 0 }
  local commits = {}
  local pend = {}
  local all = true
  for i = 1, #KEYS do
    local o = 5 + (i - 1) * 5
    local name = ARGV[o + 1]
    local f = ALG[name]
    if f == nil then
      error({ hit = i, msg = 'algorithm ' .. tostring(name) .. ' is not in this script' })
    end
    local key = KEYS[i]
    local p1, p2, p3, cost = param(ARGV[o + 3]), param(ARGV[o + 4]), ARGV[o + 5], num(ARGV[o + 2])
    local allowed, rem, retry, reset, delay
    if LOGS[name] then
      local d, ns, c = f(i, key, p1, p2, p3, cost, pend[key])
      allowed, rem, retry, reset, delay = d.allowed, d.rem, d.retry, d.reset, d.delay
      if allowed then
        pend[key] = ns
        commits[#commits + 1] = c
      end
    else
      local st = pend[key]
      local a, b, c
      if st then
        a, b, c = st[1], st[2], st[3]
      else
        local raw = rcall(i, 'GET', key)
        if raw then
          if #raw ~= STATE_LEN then
            error({ hit = i, msg = NOT_STATE })
          end
          a, b, c = struct.unpack('ddd', raw)
        end
      end
      local ttl
      allowed, rem, retry, reset, delay, ttl, a, b, c = f(p1, p2, p3, cost, a, b, c)
      if allowed then
        pend[key] = { a, b, c }
        commits[#commits + 1] = function() save(key, ttl, a, b, c) end
      end
    end
    if allowed then
      out[#out + 1] = 1
    else
      all = false
      out[#out + 1] = 0
    end
    if retry < 0 then retry = 0 end
    if reset < 0 then reset = 0 end
    if delay < 0 then delay = 0 end
    out[#out + 1] = rem
    out[#out + 1] = retry
    out[#out + 1] = reset
    out[#out + 1] = delay
  end
  if all then
    out[1] = 1
    if commit then
      for _, c in ipairs(commits) do c() end
    end
  end
  return out
end

local function all(KEYS, ARGV)
  begin(ARGV)
  local ok, res = pcall(decide_all, KEYS, ARGV)
  if ok then return res end
  if type(res) == 'table' and res.hit then
    return redis.error_reply('ERR portero hit ' .. res.hit .. ': ' .. tostring(res.msg))
  end
  return redis.error_reply('ERR portero script: ' .. tostring(res))
end
