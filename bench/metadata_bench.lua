-- Full versus metadata-only informers (metadata_only = true, docs/informer.md): the sync of the
-- same pods and the memory each cache costs, against the fake API server on loopback.
--
--   make bench-metadata                      (100k pods)
--   make bench-metadata BENCH_PODS=10000
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--     lua5.4 bench/metadata_bench.lua [pods] [repeat]
--
-- Per form (full objects, PartialObjectMetadata), managedFields stripped (the default):
--   (a) no handler, (b) a handler reading obj.metadata.name;
-- measured start() -> wait_for_sync(), the CPU of the Lua thread and of the client's threads,
-- peak RSS (VmHWM) and the JSON the cache keeps. Every measurement is a fresh process; repeat
-- (make: BENCH_REPEAT) runs each that many times and reports the fastest. Floors: curl of the
-- same list in one response, in each form (the server cuts an object's metadata once and keeps
-- it, so its first metadata list is slower: the floor and the runs come after a warm-up list).
local socket = require "socket"
local gettime = socket.gettime

local LIST_ACCEPT =
  "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"

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

-- ---------------------------------------------------------------------------------------------
-- Child: --child full|metadata none|name <url>; prints key=value pairs on one line.
if arg[1] == "--child" then
  local kinformer = require "kinformer"
  local form, hname, url = arg[2], arg[3], arg[4]
  local client = assert(kinformer.client{ server = url })
  local inf = assert(client:informer{ resource = "pods", metadata_only = form == "metadata" })
  local seen = 0
  if hname == "name" then
    inf:add_handler{ on_add = function(obj) local _ = obj.metadata.name; seen = seen + 1 end }
  end
  local pid
  do
    local f = assert(io.open("/proc/self/stat"))
    pid = f:read("l"):match("^(%d+)")
    f:close()
  end
  local tick = tonumber(sh("getconf CLK_TCK")) or 100
  local function cpu() -- utime + stime: the main (Lua) thread, the others (the client's)
    local main, other = 0, 0
    for tid in sh("ls /proc/" .. pid .. "/task"):gmatch("%d+") do
      local f = io.open("/proc/" .. pid .. "/task/" .. tid .. "/stat")
      if f then
        local fields = {}
        for w in f:read("l"):match("%) (.*)"):gmatch("%S+") do fields[#fields + 1] = w end
        f:close()
        local t = (tonumber(fields[12]) + tonumber(fields[13])) / tick
        if tid == pid then main = main + t else other = other + t end
      end
    end
    return main, other
  end
  local out = {}
  local l0, o0 = cpu()
  local t0 = gettime()
  assert(inf:start())
  assert(inf:wait_for_sync(600))
  out.sync_s = gettime() - t0
  local l1, o1 = cpu()
  out.cpu_lua, out.cpu_io = l1 - l0, o1 - o0
  out.rss_mb = peak_rss_mb()
  out.objects = inf:store():len()
  out.seen = seen
  local kept, encode, store = 0, kinformer.encode, inf:store()
  local kind
  for _, key in ipairs(store:list_keys()) do
    local obj = store:get(key)
    kept = kept + #encode(obj)
    kind = kind or obj.kind
  end
  out.kept_bytes, out.kind = kept, kind
  inf:stop()
  local parts = {}
  for k, v in pairs(out) do parts[#parts + 1] = k .. "=" .. tostring(v) end
  table.sort(parts)
  io.write(table.concat(parts, " "), "\n")
  os.exit(0)
end

-- ---------------------------------------------------------------------------------------------
-- Parent.
local PODS = tonumber(arg[1]) or 100000
local REPEAT = math.max(1, tonumber(arg[2]) or 1)
local lua = arg[-1] or "lua5.4"

local function loadavg()
  local f = io.open("/proc/loadavg")
  local l = f and f:read("l") or "?"
  if f then f:close() end
  return l:match("^(%S+ %S+ %S+)") or l
end

local function fmt_int(x)
  local s = ("%.0f"):format(x)
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", ""))
end

local srv_proc = assert(io.popen(("sh -c 'echo $$; exec python3 tools/fake-apiserver/server.py "
  .. "--port 0 --pods %d --exit-with-parent 2>/dev/null'"):format(PODS)))
local srv_pid = srv_proc:read("l")
local url = srv_proc:read("l")

local function stop_server()
  if srv_pid then
    os.execute("kill " .. srv_pid .. " 2>/dev/null")
    srv_proc:close()
    srv_pid = nil
  end
end

local function child(form, hname)
  local best
  for _ = 1, REPEAT do
    local cmd = ("%s %s --child %s %s %s"):format(lua, arg[0], form, hname, url)
    local line = sh(cmd)
    local r = {}
    for k, v in line:gmatch("(%S+)=(%S+)") do r[k] = tonumber(v) or v end
    if not r.sync_s then error(("child failed: %s\n%s"):format(cmd, line)) end
    assert(r.objects == PODS, ("%s: %s objects stored"):format(form, tostring(r.objects)))
    if not best or r.sync_s < best.sync_s then best = r end
  end
  return best
end

-- The fastest of two curls of the list in one response; -> seconds, bytes.
local function curl(accept)
  local best, bytes = math.huge, 0
  for _ = 1, 2 do
    local c = sh(("curl -s -o /dev/null %s -w '%%{time_total} %%{size_download}' '%s/api/v1/pods'")
      :format(accept and ("-H 'Accept: " .. accept .. "'") or "", url))
    local t, b = c:match("(%S+) (%S+)")
    if tonumber(t) < best then best, bytes = tonumber(t), tonumber(b) end
  end
  return best, bytes
end

local function main()
  assert(url and url:match("^http://127%.0%.0%.1:%d+$"), "fake server did not start")
  print(("metadata-only benchmark: %s pods, fake API server on loopback, %s"):format(
    fmt_int(PODS), os.date("!%Y-%m-%d")))
  print(("fake API server: %s (pid %s, stopped at the end)"):format(url, srv_pid))
  print(("best of %d fresh process(es) per row; load average before: %s"):format(REPEAT,
    loadavg()))
  local t = gettime()
  curl(LIST_ACCEPT) -- warms the server's cut metadata
  print(("server's first metadata list (cutting %s objects): %.3f s"):format(fmt_int(PODS),
    gettime() - t))
  print()
  local full_ct, full_b = curl(nil)
  local meta_ct, meta_b = curl(LIST_ACCEPT)
  print(("| sync of %s pods, managedFields stripped | s | x curl of its form | CPU s: Lua / client "
    .. "threads | peak RSS MB | JSON kept MB | RSS / JSON |"):format(fmt_int(PODS)))
  print("|---|---:|---:|---:|---:|---:|---:|")
  print(("| floor: curl, full list in one response (%.0f MB) | %.3f | 1.00 | - | - | - | - |"):format(
    full_b / 1e6, full_ct))
  print(("| floor: curl, metadata list in one response (%.0f MB) | %.3f | 1.00 | - | - | - | - |"):format(
    meta_b / 1e6, meta_ct))
  local rows = {}
  for _, h in ipairs{ "none", "name" } do
    for _, form in ipairs{ "full", "metadata" } do
      local r = child(form, h)
      rows[form .. h] = r
      local kept = r.kept_bytes / 1e6
      print(("| %s, %s | %.3f | %.2f | %.2f / %.2f | %.0f | %.1f | %.2f |"):format(
        form == "full" and "full objects" or "metadata_only",
        h == "none" and "(a) no handler" or "(b) handler reads metadata.name", r.sync_s,
        r.sync_s / (form == "full" and full_ct or meta_ct), r.cpu_lua, r.cpu_io, r.rss_mb, kept,
        r.rss_mb / kept))
      io.stdout:flush()
    end
  end
  local f, m = rows.fullnone, rows.metadatanone
  print()
  print(("metadata_only vs full, (a): sync %.2fx faster, peak RSS %.2fx smaller, JSON kept "
    .. "%.2fx smaller; cached kind: %s"):format(f.sync_s / m.sync_s, f.rss_mb / m.rss_mb,
    f.kept_bytes / m.kept_bytes, m.kind))
  print("load average after: " .. loadavg())
end

local ok, err = xpcall(main, debug.traceback)
stop_server()
if not ok then
  io.stderr:write("metadata benchmark failed: ", tostring(err), "\n")
  os.exit(1)
end
