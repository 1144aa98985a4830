-- Growth and the honest floor: kinformer against pre-rendered list pages served with sendfile
-- (bench/list_replay.py), so the figures are the client's, not the Python fake server's.
--
--   make bench-scale                                   (10k and 100k ConfigMaps, 50 informers,
--                                                       the list floor at 100k pods)
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' lua5.4 \
--     bench/scale_bench.lua [--sizes=10000,100000,1000000] [--informers=50] [--idle=10]
--                           [--floor-pods=100000] [--runs=3] [--parts=growth,idle,floor]
--                           [--events=100000] [--dir=build/bench/scale]
--
-- growth: for each size N, the fake server generates N ConfigMaps (about 1.1 KB of JSON, 0.8 KB
--   without managedFields); the list is recorded in pages of 500 and the server stopped (its RSS
--   per object is printed); the replay serves it. One informer (managedFields stripped, the
--   default) syncs it in a fresh process: time to synced, CPU per thread (/proc), peak RSS
--   against the JSON kept, microseconds per object. The floor is curl of the same pages.
-- idle: one client, one informer of ConfigMaps plus informers-1 of other resources (empty lists
--   from the replay, watches that stay open and silent): after all synced, the CPU of each
--   thread over `idle` seconds.
-- floor: the same for N realistic pods (about 9 KB each): time to synced and client CPU per GB
--   against curl of all the pages.
-- Every kinformer figure is the fastest of `runs` fresh processes (CPU: of that process).
local socket = require "socket"
local gettime, sleep = socket.gettime, socket.sleep

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

local function self_pid()
  local f = assert(io.open("/proc/self/stat"))
  local pid = f:read("l"):match("^(%d+)")
  f:close()
  return pid
end

local TICK = tonumber(sh("getconf CLK_TCK")) or 100

-- CPU seconds per thread of process pid: lua (the main thread), io (the client's I/O thread,
-- the first one it creates) and scan (the pipe's consumer threads, created after it). From
-- /proc/PID/task/TID/schedstat (nanoseconds on the CPU), else utime + stime of .../stat (ticks).
local function task_cpu(pid, tid)
  local f = io.open(("/proc/%s/task/%d/schedstat"):format(pid, tid))
  if f then
    local ns = tonumber((f:read("l") or ""):match("^(%d+)"))
    f:close()
    if ns then return ns / 1e9 end
  end
  f = io.open(("/proc/%s/task/%d/stat"):format(pid, tid))
  if not f then return 0 end
  local rest = f:read("l"):match("%) (.*)")
  f:close()
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  return (tonumber(fields[12]) + tonumber(fields[13])) / TICK
end

-- CPU seconds process pid spent in the kernel (stime of /proc/PID/stat, in ticks): page faults,
-- socket reads, wake-ups.
local function kernel_cpu(pid)
  local f = io.open(("/proc/%s/stat"):format(pid))
  if not f then return 0 end
  local rest = f:read("l"):match("%) (.*)")
  f:close()
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  return tonumber(fields[13]) / TICK
end

local function thread_cpu(pid)
  local tids = {}
  for tid in sh("ls /proc/" .. pid .. "/task"):gmatch("%d+") do tids[#tids + 1] = tonumber(tid) end
  table.sort(tids)
  local r, others = { lua = 0, io = 0, scan = 0, threads = #tids }, 0
  for _, tid in ipairs(tids) do
    local t = task_cpu(pid, tid)
    if tostring(tid) == tostring(pid) then r.lua = r.lua + t
    else
      others = others + 1
      if others == 1 then r.io = r.io + t else r.scan = r.scan + t end
    end
  end
  return r
end

local function rss_kb(pid, field)
  local f = io.open("/proc/" .. pid .. "/status")
  if not f then return 0 end
  local s = f:read("a")
  f:close()
  return tonumber(s:match(field .. ":%s+(%d+)")) or 0
end

-- ---------------------------------------------------------------------------------------------
-- Child: one measurement, one line of key=value.
--   --child sync <url> <resource> [events] [held|free]  one informer: time to synced, CPU, RSS,
--                                        JSON kept; then events/s of the replay's recorded burst,
--                                        with every object's table handed out first (held: the
--                                        JSON kept is counted through get) or none (free: it is
--                                        counted after the burst)
--   --child idle <url> <informers> <s>   informers on one client, then the CPU of `s` idle seconds
if arg[1] == "--child" then
  local kinformer = require "kinformer"
  local mode, url = arg[2], arg[3]
  local pid = self_pid()
  local client = assert(kinformer.client{ server = url })
  local out = {}
  if mode == "sync" then
    local inf = assert(client:informer{ resource = { group = "", version = "v1",
      resource = arg[4], namespaced = true } })
    out.rss0_mb = rss_kb(pid, "VmRSS") / 1024
    local c0, k0, s0 = thread_cpu(pid), os.clock(), kernel_cpu(pid)
    local t0 = gettime()
    assert(inf:start())
    assert(inf:wait_for_sync(3600))
    out.sync_s = gettime() - t0
    out.cpu = os.clock() - k0
    out.cpu_kernel = kernel_cpu(pid) - s0
    local c1 = thread_cpu(pid)
    out.cpu_lua, out.cpu_io, out.cpu_scan = c1.lua - c0.lua, c1.io - c0.io, c1.scan - c0.scan
    out.threads = c1.threads
    out.rss_mb = rss_kb(pid, "VmHWM") / 1024
    local store = inf:store()
    out.objects = store:len()
    local function count_kept()
      local kept, encode = 0, kinformer.encode
      for _, key in ipairs(store:list_keys()) do kept = kept + #encode(store:get(key)) end
      out.kept_mb = kept / 1048576
    end
    local held = arg[6] ~= "free"
    if held then count_kept() end
    -- The recorded burst of MODIFIED events, released once the watch is open; the clock stops
    -- when the store has taken them all (no handler).
    local events = tonumber(arg[5]) or 0
    if events > 0 then
      while inf:status().phase ~= "watching" do sleep(0.002) end
      local base = inf:status().updates
      local k1, e0 = os.clock(), thread_cpu(pid)
      local t1 = gettime()
      os.execute(("curl -s -o /dev/null -X POST %s/_fake/release"):format(url))
      local reason = kinformer.run({ inf }, { timeout = 600,
        done = function() return inf:status().updates - base >= events end })
      out.events_s = gettime() - t1
      assert(reason == "done", "events: kinformer.run returned " .. tostring(reason))
      out.ev_cpu = os.clock() - k1
      local e1 = thread_cpu(pid)
      out.ev_lua, out.ev_io, out.ev_scan = e1.lua - e0.lua, e1.io - e0.io, e1.scan - e0.scan
      out.events = inf:status().updates - base
    end
    if not held then count_kept() end
    inf:stop()
  elseif mode == "idle" then
    local n, secs = tonumber(arg[4]), tonumber(arg[5])
    local infs = { assert(client:informer{ resource = { group = "", version = "v1",
      resource = "configmaps", namespaced = true } }) }
    for i = 2, n do
      infs[i] = assert(client:informer{ resource = { group = "bench.example.com", version = "v1",
        resource = ("things%02d"):format(i), namespaced = i % 2 == 0 } })
    end
    local t0 = gettime()
    for _, inf in ipairs(infs) do assert(inf:start()) end
    for _, inf in ipairs(infs) do assert(inf:wait_for_sync(3600)) end
    out.sync_s = gettime() - t0
    -- Wait until every watch is open, then measure silence.
    for _, inf in ipairs(infs) do
      while inf:status().phase ~= "watching" do sleep(0.01) end
    end
    local c0 = thread_cpu(pid)
    local t1 = gettime()
    kinformer.run(infs, { timeout = secs })
    local dt = gettime() - t1
    local c1 = thread_cpu(pid)
    out.idle_s = dt
    out.cpu_lua, out.cpu_io, out.cpu_scan = c1.lua - c0.lua, c1.io - c0.io, c1.scan - c0.scan
    out.threads = c1.threads
    out.rss_mb = rss_kb(pid, "VmRSS") / 1024
    for _, inf in ipairs(infs) do inf:stop() end
  end
  local parts = {}
  for k, v in pairs(out) do parts[#parts + 1] = k .. "=" .. tostring(v) end
  table.sort(parts)
  io.write(table.concat(parts, " "), "\n")
  os.exit(0)
end

-- ---------------------------------------------------------------------------------------------
-- Parent.
local opts = { sizes = "10000,100000", informers = "50", idle = "10", ["floor-pods"] = "100000",
               runs = "1", parts = "growth,idle,floor", dir = "build/bench/scale",
               events = "100000" }
for _, a in ipairs(arg) do
  local k, v = a:match("^%-%-([%w-]+)=(.*)$")
  if not k or not opts[k] then error("unknown argument " .. a) end
  opts[k] = v
end
local RUNS = math.max(1, tonumber(opts.runs))
local lua = arg[-1] or "lua5.4"
local self_path = arg[0]
local parts = {}
for p in opts.parts:gmatch("[^,]+") do parts[p] = true end

local function loadavg()
  local f = io.open("/proc/loadavg")
  local l = f and f:read("l") or "?"
  if f then f:close() end
  return l:match("^(%S+ %S+ %S+)") or l
end

-- A server process started with `sh -c 'echo $$; exec ...'`: its pid and first output line.
local started = {}
local function start(cmd)
  local p = assert(io.popen("exec sh -c 'echo $$; exec " .. cmd .. "'"))
  local pid = p:read("l")
  started[#started + 1] = pid
  local line = p:read("l")
  return { proc = p, pid = pid, line = line }
end
local function stop(s)
  os.execute("kill " .. s.pid .. " 2>/dev/null")
  s.proc:close()
end

-- The fake server with `gen` (e.g. "--configmaps 100000"), its list recorded into dir.
local function record(gen, path, dir, events)
  events = events or 0
  os.execute("rm -rf " .. dir .. " && mkdir -p " .. dir)
  local t0 = gettime()
  local srv = start(("python3 tools/fake-apiserver/server.py --port 0 %s --history %d "
    .. "--exit-with-parent 2>/dev/null"):format(gen, events + 1000))
  assert(srv.line and srv.line:match("^http"), "fake server did not start")
  local gen_s = gettime() - t0
  local rss = rss_kb(srv.pid, "VmRSS")
  local msg = sh(("python3 bench/list_replay.py record %s %s 500 %s %d"):format(srv.line, path, dir,
    events))
  stop(srv)
  -- Write the pages back now: a 1 GB writeback running while the replay sends them slows the
  -- replay (and the curl floor) down; afterwards they are clean pages of the page cache.
  os.execute("sync")
  local f = assert(io.open(dir .. "/index.json"))
  local idx = f:read("a")
  f:close()
  return { server_rss_kb = rss, gen_s = gen_s, bytes = tonumber(idx:match('"bytes": (%d+)')),
           pages = tonumber(idx:match('"pages": (%d+)')), msg = msg }
end

local function run_child(...)
  local cmd = table.concat({ lua, self_path, "--child", ... }, " ")
  local line = sh(cmd)
  local r = {}
  for k, v in line:gmatch("(%S+)=(%S+)") do r[k] = tonumber(v) or v end
  if not (r.sync_s) then error(("child failed: %s\n%s"):format(cmd, line)) end
  return r
end
-- The fastest of RUNS children by field `by` (sync_s, or ev_cpu for a burst).
local function best_child(by, ...)
  local best
  for _ = 1, RUNS do
    local r = run_child(...)
    if not best or (r[by] or math.huge) < (best[by] or math.huge) then best = r end
  end
  return best
end

-- curl of every page (one process, one keep-alive connection): fastest of RUNS; its CPU.
local function curl_floor(dir, url)
  local cfg = dir .. "/curl.cfg"
  os.execute(("python3 bench/list_replay.py urls %s %s > %s"):format(dir, url, cfg))
  local best
  for _ = 1, RUNS do
    local t0 = gettime()
    local out = sh(("/usr/bin/time -f '%%U %%S' curl -s -K %s 2>&1"):format(cfg))
    local s = gettime() - t0
    local u, sy = out:match("([%d.]+) ([%d.]+)%s*$")
    if not best or s < best.s then
      best = { s = s, cpu = tonumber(u) + tonumber(sy), kernel = tonumber(sy) }
    end
  end
  return best
end

local function f3(x) return ("%.3f"):format(x) end
local function f2(x) return ("%.2f"):format(x) end
local function int(x)
  local s = ("%.0f"):format(x)
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

print(("# kinformer scale bench, %s, load average %s, runs %d"):format(os.date("!%Y-%m-%d %H:%M UTC"),
  loadavg(), RUNS))

-- The fake server's RSS with no generated objects, subtracted from its RSS per object.
local function server_base_kb()
  local srv = start("python3 tools/fake-apiserver/server.py --port 0 --exit-with-parent 2>/dev/null")
  local kb = rss_kb(srv.pid, "VmRSS")
  stop(srv)
  return kb
end

local idle_dir -- a recorded ConfigMap list the idle part may reuse

if parts.growth then
  local base_kb = server_base_kb()
  local rows = {}
  for n in opts.sizes:gmatch("%d+") do
    n = tonumber(n)
    local ev = math.min(n, tonumber(opts.events))
    local dir = ("%s/cm-%d"):format(opts.dir, n)
    local rec = record("--configmaps " .. n, "/api/v1/configmaps", dir, ev)
    local rep = start("python3 bench/list_replay.py serve " .. dir)
    local fl = curl_floor(dir, rep.line)
    local r = best_child("sync_s", "sync", rep.line, "configmaps", ev, "held")
    local free = ev > 0 and best_child("ev_cpu", "sync", rep.line, "configmaps", ev, "free") or nil
    stop(rep)
    assert(r.objects == n, ("synced %s objects of %d"):format(r.objects, n))
    assert(r.events == ev, ("%s events of %d"):format(r.events, ev))
    rows[#rows + 1] = { n = n, ev = ev, rec = rec, fl = fl, r = r, free = free }
    if not idle_dir and n <= 100000 then idle_dir = dir else os.execute("rm -rf " .. dir) end
  end
  print("\n## One informer, N ConfigMaps (replay of pages of 500; managedFields stripped)\n")
  print("| objects | list MB | fake server RSS per object | curl s | synced s | x curl | CPU s: Lua / I/O / scanner (all) | us per object: wall / client CPU (in the kernel) | objects/s | peak RSS MB (before start) | JSON kept MB | RSS / JSON (growth / JSON) |")
  print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  for _, x in ipairs(rows) do
    local n, rec, fl, r = x.n, x.rec, x.fl, x.r
    print(("| %s | %.0f | %.2f KB | %s | %s | %s | %s / %s / %s (%s) | %.2f / %.2f (%.2f) | %s | %.0f (%.0f) | %.0f | %s (%s) |"):format(
      int(n), rec.bytes / 1e6, (rec.server_rss_kb - base_kb) * 1.024 / n, f3(fl.s),
      f3(r.sync_s), f2(r.sync_s / fl.s), f2(r.cpu_lua), f2(r.cpu_io), f2(r.cpu_scan), f2(r.cpu),
      r.sync_s / n * 1e6, r.cpu / n * 1e6, r.cpu_kernel / n * 1e6, int(n / r.sync_s), r.rss_mb, r.rss0_mb, r.kept_mb,
      f2(r.rss_mb / r.kept_mb), f2((r.rss_mb - r.rss0_mb) / r.kept_mb)))
  end
  print("\n| objects | tables handed out before the burst | MODIFIED events (one burst, replayed) | s | events/s | CPU s: Lua / I/O / scanner | client CPU us per event |")
  print("|---:|---|---:|---:|---:|---:|---:|")
  for _, x in ipairs(rows) do
    for _, v in ipairs{ { "none", x.free }, { "every object's", x.r } } do
      local r = v[2]
      if r and r.events_s then
        print(("| %s | %s | %s | %s | %s | %s / %s / %s | %.2f |"):format(int(x.n), v[1], int(x.ev),
          f3(r.events_s), int(x.ev / r.events_s), f2(r.ev_lua), f2(r.ev_io), f2(r.ev_scan),
          r.ev_cpu / x.ev * 1e6))
      end
    end
  end
  io.stdout:flush()
end

if parts.idle then
  local n, secs = tonumber(opts.informers), tonumber(opts.idle)
  local dir = idle_dir
  if not dir then
    dir = opts.dir .. "/idle"
    record("--configmaps 1000", "/api/v1/configmaps", dir)
  end
  local rep = start("python3 bench/list_replay.py serve " .. dir)
  local r = run_child("idle", rep.line, n, secs)
  stop(rep)
  os.execute("rm -rf " .. dir)
  print(("\n## %d informers on one client, idle watches\n"):format(n))
  print("| informers | threads | synced s | idle s | CPU ms per idle s: Lua / I/O / scanner | RSS MB |")
  print("|---:|---:|---:|---:|---:|---:|")
  print(("| %d | %d | %s | %s | %.3f / %.3f / %.3f | %.0f |"):format(n, r.threads, f3(r.sync_s),
    f2(r.idle_s), r.cpu_lua / r.idle_s * 1000, r.cpu_io / r.idle_s * 1000,
    r.cpu_scan / r.idle_s * 1000, r.rss_mb))
  io.stdout:flush()
end

if parts.floor then
  local n = tonumber(opts["floor-pods"])
  local dir = ("%s/pods-%d"):format(opts.dir, n)
  local rec = record("--pods " .. n, "/api/v1/pods", dir)
  local rep = start("python3 bench/list_replay.py serve " .. dir)
  local fl = curl_floor(dir, rep.line)
  local r = best_child("sync_s", "sync", rep.line, "pods")
  stop(rep)
  local gb = rec.bytes / 1e9
  local cpu = r.cpu_lua + r.cpu_io + r.cpu_scan
  print(("\n## The list against a replay server: %s pods, %d pages of 500, %.0f MB\n"):format(
    int(n), rec.pages, rec.bytes / 1e6))
  print("| | s | x curl | CPU s: Lua / I/O / scanner | CPU s | CPU s per GB (in the kernel) | peak RSS MB |")
  print("|---|---:|---:|---:|---:|---:|---:|")
  print(("| floor: curl of every page (one connection) | %s | 1.00 | - | %s | %s (%s) | - |"):format(
    f3(fl.s), f2(fl.cpu), f2(fl.cpu / gb), f2(fl.kernel / gb)))
  print(("| kinformer informer, time to synced (stripped) | %s | %s | %s / %s / %s | %s | %s (%s) | %.0f |"):format(
    f3(r.sync_s), f2(r.sync_s / fl.s), f2(r.cpu_lua), f2(r.cpu_io), f2(r.cpu_scan), f2(cpu),
    f2(cpu / gb), f2(r.cpu_kernel / gb), r.rss_mb))
  os.execute("rm -rf " .. dir)
end
if idle_dir then os.execute("rm -rf " .. idle_dir) end
print(("\nload average after: %s"):format(loadavg()))
print(("servers started and stopped: %s"):format(table.concat(started, " ")))
