-- kinformer.manager benchmark against the fake API server on loopback.
--
--   make bench-manager                        (10k pods)
--   make bench-manager BENCH_MANAGER_PODS=1000
--   LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--     lua5.4 bench/manager_bench.lua [pods]
--
-- Measured (each in a fresh process, the fake server shared):
--   (1) reconciles/s: one controller over the pods with a no-op reconcile, from synced until
--       every pod was reconciled once (mgr:step() in a loop; no leader election);
--   (2) the manager's overhead per reconcile: (1)'s time per reconcile minus a loop that calls
--       the same no-op function with a request table for each key of the same cache;
--   (3) peak RSS (VmHWM) of a manager with three controllers over the pods (one shared
--       informer, three queues), after each reconciled every pod once, next to the RSS of the
--       informer alone.
local root = (arg[0]:match("^(.*)/bench/[^/]*$")) or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua;"
  .. package.path
package.cpath = root .. "/build/lua5.4/?.so;" .. package.cpath
_G.KINFORMER_ROOT = root

local kinformer = require "kinformer"
local core = require "kinformer.core"

local function peak_rss_mb()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmHWM:%s+(%d+)")
    if kb then return tonumber(kb) / 1024 end
  end
end

local function noop() end

-- A child run: mode "rate", "rss3" or "rss0" against url; prints one result line.
local function child(mode, url, pods)
  kinformer.set_logger(function() end)
  local client = assert(kinformer.client{ server = url, qps = 1000, burst = 1000 })
  if mode == "rss0" then
    local inf = assert(client:informer{ resource = "pods" })
    assert(inf:start())
    assert(inf:wait_for_sync(120))
    print(("rss0 %.1f"):format(peak_rss_mb()))
    return
  end
  local mgr = kinformer.manager{ client = client }
  local n = mode == "rss3" and 3 or 1
  local counts = {}
  for i = 1, n do
    counts[i] = 0
    mgr:controller{ name = "c" .. i, resource = "pods",
                    reconcile = function() counts[i] = counts[i] + 1 end }
  end
  assert(mgr:wait_for_sync(120))
  local t0 = core.now()
  local function all_done()
    for i = 1, n do if counts[i] < pods then return false end end
    return true
  end
  while not all_done() do
    local w = assert(mgr:step())
    if w > 0 then core.wait(mgr:fds(), math.min(w, 0.01)) end
  end
  local dt = core.now() - t0
  if mode == "rss3" then
    print(("rss3 %.1f"):format(peak_rss_mb()))
    return
  end
  -- the direct loop over the same keys
  local keys = client:informer{ resource = "pods" }:store():list_keys()
  local d0 = core.now()
  for _, key in ipairs(keys) do
    local ns, name = kinformer.split_key(key)
    noop({ key = key, namespace = ns, name = name }, nil)
  end
  local direct = core.now() - d0
  print(("rate %d %.6f %.6f"):format(pods, dt, direct))
  mgr:stop()
end

if arg[1] == "--child" then
  child(arg[2], arg[3], tonumber(arg[4]))
  return
end

local pods = tonumber(arg[1]) or 10000
local fake = require "support.fake_apiserver"
local srv = fake.start{ args = { "--pods", pods }, quiet = true }
local function run(mode)
  local p = assert(io.popen(("lua5.4 %s --child %s %s %d"):format(arg[0], mode, srv.url, pods)))
  local out = p:read("a")
  p:close()
  return out
end
local function loadavg()
  local f = io.open("/proc/loadavg")
  local s = f and f:read("l") or "?"
  if f then f:close() end
  return s:match("^(%S+ %S+ %S+)")
end
print("load average before: " .. loadavg())
local rate = run("rate")
local n, dt, direct = rate:match("rate (%d+) (%S+) (%S+)")
local rss0 = tonumber(run("rss0"):match("rss0 (%S+)"))
local rss3 = tonumber(run("rss3"):match("rss3 (%S+)"))
srv:stop()
if not n then error("the rate run failed: " .. rate) end
n, dt, direct = tonumber(n), tonumber(dt), tonumber(direct)
print(("\n%d pods (primaries)\n"):format(n))
print("| measure | value |")
print("|---|---:|")
print(("| reconciles/s (no-op reconcile, one controller) | %.0f |"):format(n / dt))
print(("| time per reconcile through the manager | %.2f us |"):format(dt / n * 1e6))
print(("| time per direct call of the same function | %.2f us |"):format(direct / n * 1e6))
print(("| manager overhead per reconcile | %.2f us |"):format((dt - direct) / n * 1e6))
print(("| peak RSS: the pods informer alone | %.1f MB |"):format(rss0 or -1))
print(("| peak RSS: manager, three controllers, every pod reconciled | %.1f MB |"):format(rss3 or -1))
print(("| of which the manager (three queues, handlers) | %.1f MB |"):format(
  (rss3 or 0) - (rss0 or 0)))
print("load average after: " .. loadavg())
