-- Shared informer benchmark against the fake API server on loopback, next to the
-- floors measured in the same run (`curl -s -o /dev/null` of the same list, a raw socket reader
-- of the same watch burst).
--
--   make bench-informer                      (100k pods, 100k MODIFIED events)
--   make bench-informer BENCH_PODS=2000      (smoke size: a few seconds)
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--     lua5.4 bench/informer_bench.lua [pods] [events] [repeat]
--
-- repeat (make: BENCH_REPEAT, default 1): fresh processes per measurement, the fastest reported
-- (the machine may be shared: the load average is printed before and after).
--
-- Scenarios (each with and without strip_managed_fields):
--   (a) no handler                      the cache only: nothing is decoded in Lua
--   (b) a handler reading obj.metadata.name
--   (c) a handler reading spec and status (spec.nodeName, status.phase, #spec.containers)
-- Measured: start() -> wait_for_sync() and peak RSS (VmHWM); MODIFIED events/s until the
-- handler (for (a): the store) has seen the whole burst; store:get / by_index calls/s from Lua
-- on a warm cache. Every kinformer measurement runs in a fresh process (peak RSS is per
-- process). The parent prints markdown tables and whether each target (bench/README.md) is met.
local socket = require "socket"
local gettime, sleep = socket.gettime, socket.sleep

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

local function peak_rss_mb()
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmHWM:%s+(%d+)")
    if kb then return tonumber(kb) / 1024 end
  end
end

local HANDLERS = {
  none = nil,
  name = function(count)
    return {
      on_add = function(obj) local _ = obj.metadata.name; count() end,
      on_update = function(_, new) local _ = new.metadata.name; count() end,
    }
  end,
  fields = function(count)
    local function read(obj)
      local spec, status = obj.spec, obj.status
      local _ = spec.nodeName, status.phase, #spec.containers
    end
    return {
      on_add = function(obj) read(obj); count() end,
      on_update = function(_, new) read(new); count() end,
    }
  end,
}

-- ---------------------------------------------------------------------------------------------
-- Child mode: one measurement, printing one line of key=value pairs.
--   --child sync|phases|events|lookup <handler> <strip> <url> <n> [watchlist]
-- (watchlist: the initial state through a WatchList stream; bench/peers_bench.lua uses it)
if arg[1] == "--child" then
  local kinformer = require "kinformer"
  local mode, hname, strip, url, n = arg[2], arg[3], arg[4] == "strip", arg[5], tonumber(arg[6])
  local client = assert(kinformer.client{ server = url })
  local inf = assert(client:informer{ resource = "pods", strip_managed_fields = strip,
                                      watch_list = arg[7] == "watchlist" })
  local seen = 0
  local function count() seen = seen + 1 end
  if HANDLERS[hname] then inf:add_handler(HANDLERS[hname](count)) end
  local out = {}
  local pid
  do
    local f = assert(io.open("/proc/self/stat"))
    pid = f:read("l"):match("^(%d+)")
    f:close()
  end

  -- Profiling (bench/README.md): with BENCH_CALLGRIND=1 under
  -- `valgrind --tool=callgrind --instr-atstart=no`, only the measured phase is collected:
  -- the sync (mode sync), the burst (mode events) or the warm gets (mode lookup). Likewise with
  -- BENCH_PERF_CTL=ctl-fifo,ack-fifo under `perf record -D -1 --control fifo:ctl-fifo,ack-fifo`
  -- (bench/peers_bench.lua profiles missed targets so).
  local callgrind = os.getenv("BENCH_CALLGRIND")
  local perf_ctl, perf_ack = (os.getenv("BENCH_PERF_CTL") or ""):match("^([^,]+),([^,]+)$")
  local function collect(on)
    if callgrind then
      os.execute(("callgrind_control -i %s %s >/dev/null"):format(on and "on" or "off", pid))
    end
    if perf_ctl then
      local c, a = assert(io.open(perf_ctl, "w")), assert(io.open(perf_ack, "r"))
      c:write(on and "enable\n" or "disable\n")
      c:close()
      a:read("l")
      a:close()
    end
  end

  -- CPU seconds of this process's threads (utime + stime from /proc): the Lua thread (the
  -- main thread) and the others (the client's I/O thread), which contention with other
  -- processes changes much less than wall-clock time.
  local tick = tonumber(sh("getconf CLK_TCK")) or 100
  local function cpu()
    local main, other = 0, 0
    for tid in sh("ls /proc/" .. pid .. "/task"):gmatch("%d+") do
      local f = io.open("/proc/" .. pid .. "/task/" .. tid .. "/stat")
      if f then
        local rest = f:read("l"):match("%) (.*)")
        f:close()
        local fields = {}
        for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
        local t = (tonumber(fields[12]) + tonumber(fields[13])) / tick
        if tid == pid then main = main + t else other = other + t end
      end
    end
    return main, other
  end

  local c0_lua, c0_io = cpu()
  if mode == "sync" then collect(true) end
  local t0 = gettime()
  assert(inf:start())
  if mode == "phases" then
    -- Where the sync time goes: the informer receives the list as one Replace when the list
    -- is complete, so the first dispatched item marks the end of the list.
    while not inf:has_synced() do
      local k = inf:dispatch(1000)
      if k > 0 and not out.list_s then out.list_s = gettime() - t0 end
      if k == 0 then sleep(0.001) end
    end
  else
    assert(inf:wait_for_sync(600))
  end
  out.sync_s = gettime() - t0
  if mode == "sync" then collect(false) end
  do
    local l, o = cpu()
    out.sync_cpu_lua, out.sync_cpu_io = l - c0_lua, o - c0_io
  end
  out.objects = inf:store():len()
  out.seen_add = seen

  if mode == "sync" then
    out.rss_mb = peak_rss_mb()
    -- The JSON bytes the cache keeps (after stripping); counted after reading the peak RSS.
    local kept, encode = 0, kinformer.encode
    local store = inf:store()
    for _, key in ipairs(store:list_keys()) do kept = kept + #encode(store:get(key)) end
    out.kept_bytes = kept
  elseif mode == "events" then
    -- Wait until the watch is open, then let the server prepare n MODIFIED events and publish
    -- them as one burst: the measurement is of delivery and processing, not of Python
    -- generating events. The clock stops when the handler (for (a): the store) saw them all.
    while inf:status().phase ~= "watching" do sleep(0.002) end
    sh(("curl -s -o /dev/null -X POST -H 'Content-Type: application/json' "
      .. "-d '{\"resource\":\"pods\",\"count\":%d,\"hold\":true}' %s/_fake/modify"):format(n, url))
    local base_updates, base_seen = inf:status().updates, seen
    local done
    if HANDLERS[hname] then
      done = function() return seen - base_seen >= n end
    else
      done = function() return inf:status().updates - base_updates >= n end
    end
    local e0_lua, e0_io = cpu()
    collect(true)
    local t1 = gettime()
    os.execute(("curl -s -o /dev/null -X POST %s/_fake/release >/dev/null 2>&1 &"):format(url))
    local reason = kinformer.run({ inf }, { timeout = 600, done = done })
    out.events_s = gettime() - t1
    collect(false)
    local l, o = cpu()
    out.events_cpu_lua, out.events_cpu_io = l - e0_lua, o - e0_io
    assert(reason == "done", "events: kinformer.run returned " .. tostring(reason))
    out.events = HANDLERS[hname] and (seen - base_seen) or (inf:status().updates - base_updates)
    out.rss_mb = peak_rss_mb()
  elseif mode == "lookup" then
    local store = inf:store()
    local keys = store:list_keys()
    local nk = #keys
    -- First get of each key: creates the (lazy, still undecoded) table and pins it.
    local t = gettime()
    for i = 1, nk do store:get(keys[i]) end
    out.get_cold_s, out.get_cold_n = gettime() - t, nk
    -- First read of obj.metadata.name on each: decodes the metadata member only.
    t = gettime()
    for i = 1, nk do local _ = store:get(keys[i]).metadata.name end
    out.meta_s, out.meta_n = gettime() - t, nk
    -- Warm gets: the same tables, no decoding.
    local total = math.max(nk * 10, 200000)
    local rounds = math.ceil(total / nk)
    local get = store.get
    collect(true)
    local c = os.clock()
    t = gettime()
    for _ = 1, rounds do
      for i = 1, nk do get(store, keys[i]) end
    end
    out.get_s, out.get_n, out.get_cpu = gettime() - t, rounds * nk, os.clock() - c
    collect(false)
    -- Warm by_index("namespace", ns), cycling over the namespaces, for about `budget` s.
    local nss = store:list_index_func_values("namespace")
    table.sort(nss)
    for _, ns in ipairs(nss) do store:by_index("namespace", ns) end -- warm
    local budget = nk >= 20000 and 1.0 or 0.2
    local calls, objs = 0, 0
    c = os.clock()
    t = gettime()
    repeat
      for _, ns in ipairs(nss) do
        objs = objs + #store:by_index("namespace", ns)
        calls = calls + 1
      end
    until gettime() - t >= budget
    out.idx_s, out.idx_n, out.idx_objs, out.namespaces = gettime() - t, calls, objs, #nss
    out.idx_cpu = os.clock() - c
    -- The same for index_keys(ns), list() and list_keys(), each for about `budget` s.
    local function calls_per_s(fn)
      fn()
      local n, t0 = 0, gettime()
      repeat
        for _ = 1, 16 do fn(); n = n + 1 end
      until gettime() - t0 >= budget
      return n / (gettime() - t0)
    end
    local k = 0
    out.keys_rate = calls_per_s(function() k = k % #nss + 1; return store:index_keys("namespace", nss[k]) end)
    out.list_rate = calls_per_s(function() return store:list() end)
    out.list_keys_rate = calls_per_s(function() return store:list_keys() end)
    out.rss_mb = peak_rss_mb()
  end
  out.handler_errors = inf:status().handler_errors
  inf:stop()
  local parts = {}
  for k, v in pairs(out) do parts[#parts + 1] = k .. "=" .. tostring(v) end
  table.sort(parts)
  io.write(table.concat(parts, " "), "\n")
  os.exit(0)
end

-- ---------------------------------------------------------------------------------------------
-- Parent: the fake server, the floors, one child per measurement, the tables.
local PODS = tonumber(arg[1]) or 100000
local EVENTS = tonumber(arg[2]) or PODS
local REPEAT = math.max(1, tonumber(arg[3]) or 1)
local self_path = arg[0]
local lua = arg[-1] or "lua5.4"

local function loadavg()
  local f = io.open("/proc/loadavg")
  local l = f and f:read("l") or "?"
  if f then f:close() end
  return l:match("^(%S+ %S+ %S+)") or l
end

local function machine()
  local cpu = sh("sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1"):gsub("%s+$", "")
  local cores = sh("nproc"):gsub("%s+$", "")
  local mem = tonumber(sh("sed -n 's/^MemTotal: *\\([0-9]*\\).*/\\1/p' /proc/meminfo")) or 0
  local luav = sh(lua .. " -v 2>&1"):match("^(%S+ %S+)") or lua
  return ("%s cores (%s), %.0f GB RAM, %s"):format(cores, cpu ~= "" and cpu or "?",
    mem / 1048576, luav)
end

local srv_proc = assert(io.popen(("sh -c 'echo $$; exec python3 tools/fake-apiserver/server.py "
  .. "--port 0 --pods %d --history %d --exit-with-parent 2>/dev/null'"):format(PODS, EVENTS + 1000)))
local srv_pid = srv_proc:read("l")
local url = srv_proc:read("l")

local function stop_server()
  if srv_pid then
    os.execute("kill " .. srv_pid .. " 2>/dev/null")
    srv_proc:close()
    srv_pid = nil
  end
end

local function run_child(mode, hname, strip, n)
  local cmd = ("%s %s --child %s %s %s %s %d"):format(lua, self_path, mode, hname,
    strip and "strip" or "keep", url, n or 0)
  local line = sh(cmd)
  local r = {}
  for k, v in line:gmatch("(%S+)=(%S+)") do r[k] = tonumber(v) or v end
  if not r.sync_s then error(("child failed: %s\n%s"):format(cmd, line)) end
  if (r.handler_errors or 0) > 0 then error(("handler errors in %s %s"):format(mode, hname)) end
  return r
end

-- REPEAT fresh processes per measurement; the fastest (by the measured time) is reported.
local function child(mode, hname, strip, n)
  local timekey = ({ sync = "sync_s", phases = "sync_s", events = "events_s",
                     lookup = "get_s" })[mode]
  local best
  for _ = 1, REPEAT do
    local r = run_child(mode, hname, strip, n)
    if not best or r[timekey] < best[timekey] then best = r end
  end
  return best
end

local LABEL = { none = "(a) no handler", name = "(b) handler reads metadata.name",
                fields = "(c) handler reads spec + status" }
local ORDER = { "none", "name", "fields" }
local function strip_label(strip) return strip and "stripped" or "kept" end
local function fmt_int(x)
  local s = ("%.0f"):format(x)
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

-- The watch floor: a raw socket reader that only counts event lines (Python, like the server).
-- Its clock starts at the first byte after the response headers, i.e. when the burst starts.
local FLOOR_READER = [[
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
path, count = sys.argv[2], int(sys.argv[3])
s = socket.create_connection((host, int(port)))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.sendall(("GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" % (path, sys.argv[1])).encode())
buf = bytearray(16 << 20)
view = memoryview(buf)
head = b""
while b"\r\n\r\n" not in head:
    n = s.recv_into(view)
    if n == 0:
        sys.exit(1)
    head += bytes(buf[:n])
rest = head.split(b"\r\n\r\n", 1)[1]
lines, total = rest.count(b"\n"), len(rest)
t0 = time.monotonic() if total else None
while lines < count:
    n = s.recv_into(view)
    if n == 0:
        break
    if t0 is None:
        t0 = time.monotonic()
    total += n
    lines += buf.count(b"\n", 0, n)
dt = time.monotonic() - t0
s.close()
print("events=%d bytes=%d s=%.6f" % (lines, total, dt))
]]

local verdicts = {}
local function verdict(ok, text)
  verdicts[#verdicts + 1] = (ok and "met:    " or "MISSED: ") .. text
end

local function main()
  assert(url and url:match("^http://127%.0%.0%.1:%d+$"), "fake server did not start")
  print(("informer benchmark: %d pods, %d MODIFIED events, fake API server on loopback, %s"):format(
    PODS, EVENTS, os.date("!%Y-%m-%d")))
  print("machine: " .. machine())
  print(("fake API server: %s (pid %s, stopped at the end)"):format(url, srv_pid))
  print(("best of %d fresh process(es) per measurement; load average before: %s"):format(REPEAT,
    loadavg()))
  print()

  -- The floor: the same list in one response, fastest of two.
  local ct, cbytes = math.huge, 0
  for _ = 1, 2 do
    local c = sh(("curl -s -o /dev/null -w '%%{time_total} %%{size_download}' '%s/api/v1/pods'"):format(url))
    local t, b = c:match("(%S+) (%S+)")
    if tonumber(t) < ct then ct, cbytes = tonumber(t), tonumber(b) end
  end

  print(("| sync of %s pods: start() -> wait_for_sync() | managedFields | s | x curl | pods/s "
    .. "| CPU s: Lua / I/O thread | peak RSS MB | JSON kept MB | RSS / JSON |"):format(fmt_int(PODS)))
  print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
  print(("| floor: curl -s -o /dev/null (one response, %.0f MB) | kept | %.3f | 1.00 | %s | - | - | - | - |"):format(
    cbytes / 1e6, ct, fmt_int(PODS / ct)))
  local sync = {}
  for _, strip in ipairs{ true, false } do
    for _, h in ipairs(ORDER) do
      local r = child("sync", h, strip)
      assert(r.objects == PODS, "sync: " .. tostring(r.objects) .. " objects stored")
      sync[h .. tostring(strip)] = r
      local kept = r.kept_bytes / 1e6
      print(("| %s | %s | %.3f | %.2f | %s | %.2f / %.2f | %.0f | %.0f | %.2f |"):format(LABEL[h],
        strip_label(strip), r.sync_s, r.sync_s / ct, fmt_int(PODS / r.sync_s), r.sync_cpu_lua,
        r.sync_cpu_io, r.rss_mb, kept, r.rss_mb / kept))
    end
  end
  local split = {}
  for _, strip in ipairs{ true, false } do
    local r = child("phases", "none", strip)
    split[#split + 1] = ("%s: list complete after %.3f s, store filled %.3f s later"):format(
      strip_label(strip), r.list_s, r.sync_s - r.list_s)
  end
  print()
  print("(a) split (one more run each, a dispatch loop instead of wait_for_sync): "
    .. table.concat(split, "; "))
  io.stdout:flush()

  -- Events: the floor reads the same burst with a raw socket (HTTP/1.0, no chunk framing),
  -- counting lines, from the first event byte to the last event.
  local head = sh(("curl -s %s/_fake/info"):format(url)):match('"resourceVersion": *"(%d+)"')
  sh(("curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d "
    .. "'{\"resource\":\"pods\",\"count\":%d,\"hold\":true}' %s/_fake/modify"):format(EVENTS, url))
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write(FLOOR_READER)
  f:close()
  local fp = io.popen(("python3 %s %s '/api/v1/pods?watch=true&resourceVersion=%s' %d"):format(
    script, url:match("//([^/]+)"), head, EVENTS))
  sleep(0.5)
  sh(("curl -s -o /dev/null -X POST %s/_fake/release"):format(url))
  local fl = {}
  for k, v in fp:read("a"):gmatch("(%S+)=(%S+)") do fl[k] = tonumber(v) end
  fp:close()
  os.remove(script)
  if not fl.s then error("the watch floor reader failed") end
  print()
  print(("| %s MODIFIED events at %s pods, released as one burst | managedFields | s | events/s "
    .. "| CPU s: Lua / I/O thread | Lua thread alone: events/s | peak RSS MB |"):format(
    fmt_int(EVENTS), fmt_int(PODS)))
  print("|---|---|---:|---:|---:|---:|---:|")
  print(("| floor: raw socket reader, first event byte to last (%.0f MB) | kept | %.3f | %s | - | - | - |"):format(
    fl.bytes / 1e6, fl.s, fmt_int(fl.events / fl.s)))
  local ev = {}
  for _, strip in ipairs{ true, false } do
    for _, h in ipairs(ORDER) do
      local r = child("events", h, strip, EVENTS)
      assert(r.events >= EVENTS, "events: only " .. tostring(r.events) .. " seen")
      ev[h .. tostring(strip)] = r
      print(("| %s | %s | %.3f | %s | %.2f / %.2f | %s | %.0f |"):format(LABEL[h],
        strip_label(strip), r.events_s, fmt_int(EVENTS / r.events_s), r.events_cpu_lua,
        r.events_cpu_io, r.events_cpu_lua > 0 and fmt_int(EVENTS / r.events_cpu_lua) or "-",
        r.rss_mb))
    end
  end
  io.stdout:flush()

  local lk = child("lookup", "none", true)
  print()
  print(("| lookups from Lua, %s objects (stripped) | calls | s | calls/s | calls per CPU s "
    .. "| objects/s |"):format(fmt_int(PODS)))
  print("|---|---:|---:|---:|---:|---:|")
  print(("| store:get(key), first get of each (Lua 5.4: an undecoded lazy table) | %s | %.3f | %s | | |"):format(
    fmt_int(lk.get_cold_n), lk.get_cold_s, fmt_int(lk.get_cold_n / lk.get_cold_s)))
  print(("| store:get(key).metadata.name, first read (decodes metadata) | %s | %.3f | %s | | |"):format(
    fmt_int(lk.meta_n), lk.meta_s, fmt_int(lk.meta_n / lk.meta_s)))
  local get_rate = lk.get_n / lk.get_s
  print(("| store:get(key), warm | %s | %.3f | %s | %s | |"):format(fmt_int(lk.get_n), lk.get_s,
    fmt_int(get_rate), lk.get_cpu > 0 and fmt_int(lk.get_n / lk.get_cpu) or "-"))
  print(("| store:by_index(\"namespace\", ns), warm, %d namespaces of ~%s | %s | %.3f | %s | %s | %s |"):format(
    lk.namespaces, fmt_int(PODS / lk.namespaces), fmt_int(lk.idx_n), lk.idx_s,
    fmt_int(lk.idx_n / lk.idx_s), lk.idx_cpu > 0 and fmt_int(lk.idx_n / lk.idx_cpu) or "-",
    fmt_int(lk.idx_objs / lk.idx_s)))

  -- Targets, for the default (stripped) and for managedFields kept.
  for _, strip in ipairs{ true, false } do
    local a = sync["none" .. tostring(strip)]
    local what = " (managedFields " .. strip_label(strip) .. ")"
    verdict(a.sync_s <= 2 * ct, ("(a) sync within 2x the curl floor: %.2fx%s"):format(a.sync_s / ct, what))
    local ratio = a.rss_mb / (a.kept_bytes / 1e6)
    verdict(ratio <= 1.3, ("(a) peak RSS <= 1.3x the JSON kept: %.2fx%s"):format(ratio, what))
    local b = EVENTS / ev["name" .. tostring(strip)].events_s
    verdict(b >= 50000, ("(b) >= 50,000 events/s: %s%s"):format(fmt_int(b), what))
    local c = EVENTS / ev["fields" .. tostring(strip)].events_s
    verdict(c >= 20000, ("(c) >= 20,000 events/s: %s%s"):format(fmt_int(c), what))
  end
  verdict(get_rate >= 2e6, ("store:get >= 2,000,000 calls/s (warm): %s"):format(fmt_int(get_rate)))
  print()
  print("load average after: " .. loadavg())
  print("targets:")
  for _, v in ipairs(verdicts) do print("  " .. v) end
end

local ok, err = xpcall(main, debug.traceback)
stop_server()
if not ok then
  io.stderr:write("informer benchmark failed: ", tostring(err), "\n")
  os.exit(1)
end
