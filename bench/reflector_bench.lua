-- Reflector throughput against the fake API server on loopback, next to the floor measured in
-- the same run: `curl -s -o /dev/null` of the same list, and a raw socket reader of the same
-- watch stream (tools/fake-apiserver/watch_rate.py). The watch is measured twice: from the
-- Python fake server (whose delivery rate is close to the target) and from a replay of the
-- same burst recorded to a file and sent with sendfile (bench/stream_replay.py), so the
-- figure is kinformer's rather than the server's.
--
--   make bench-reflector            (100k pods, 200k events)
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--     lua5.4 bench/reflector_bench.lua [pods] [events]
--
-- Each kinformer measurement runs in a fresh process (peak RSS is per process).
local gettime = require("socket").gettime
local sleep = require("socket").sleep

local function sh(cmd)
  local p = io.popen(cmd)
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

-- Child mode: one kinformer measurement against URL, printing one result line.
if arg[1] == "--child" then
  local kinformer = require "kinformer"
  local mode, url, n = arg[2], arg[3], tonumber(arg[4])
  local fifo = kinformer.delta_fifo()
  local client = assert(kinformer.client{ server = url })
  local opts = { resource = "pods", fifo = fifo, strip_managed_fields = mode ~= "list-keep" }
  if mode == "list-onepage" then opts.page_size = 1000000 end
  local r = client:reflector(opts)
  local t0, c0 = gettime(), os.clock() -- os.clock: CPU time of every thread of the process
  assert(r:start())
  while not r:status().listed do sleep(0.002) end
  local dt, cpu = gettime() - t0, os.clock() - c0
  local st = r:status()
  if mode:match("^list") then
    io.write(string.format("%s %.3f %d %.1f %.3f\n", mode, dt, st.bytes, peak_rss_mb(), cpu))
  else -- watch: n MODIFIED events after the sync
    while st.phase ~= "watching" do sleep(0.002) st = r:status() end
    -- The server prepares the n MODIFIED events first and publishes them as one burst, so the
    -- measurement is of delivery, not of Python generating events.
    sh(string.format("curl -s -o /dev/null -X POST -H 'Content-Type: application/json' "
      .. "-d '{\"resource\":\"pods\",\"count\":%d,\"hold\":true}' %s/_fake/modify", n, url))
    local t1 = gettime()
    sh(string.format("curl -s -o /dev/null -X POST %s/_fake/release &", url))
    while r:status().events < n do sleep(0.002) end
    local dt2 = gettime() - t1
    io.write(string.format("watch %.3f %d %.1f\n", dt2, r:status().events, peak_rss_mb()))
  end
  r:stop()
  os.exit(0)
end

local PODS = tonumber(arg[1]) or 100000
local EVENTS = tonumber(arg[2]) or 200000
local self = arg[0]
local lua = "lua5.4"

local p = io.popen(("sh -c 'echo $$; exec python3 tools/fake-apiserver/server.py --port 0 --pods %d "
  .. "--history %d --exit-with-parent 2>/dev/null'"):format(PODS, EVENTS + 1000))
local pid = p:read("l")
local url = p:read("l")
assert(url and url:match("^http://"), "fake server did not start")
local TICK = tonumber(sh("getconf CLK_TCK")) or 100

-- CPU seconds (user + system) the fake server has used so far, from /proc.
local function server_cpu()
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return 0 end
  local rest = f:read("l"):match("%) (.*)")
  f:close()
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  return (tonumber(fields[12]) + tonumber(fields[13])) / TICK
end

-- One child measurement; fields[] is its output line, plus .server_cpu: the server's CPU
-- seconds during it.
local function child(mode, n)
  local s0 = server_cpu()
  local line = sh(("%s %s --child %s %s %d"):format(lua, self, mode, url, n or 0))
  local fields = {}
  for w in line:gmatch("%S+") do fields[#fields + 1] = w end
  fields.server_cpu = server_cpu() - s0
  return fields
end

print(("reflector benchmark: %d pods, %d watch events, fake API server on loopback, %s"):format(
  PODS, EVENTS, os.date("!%Y-%m-%d")))
-- curl's own CPU time through bash's `time` (TIMEFORMAT: user and system seconds, on stderr).
local s0 = server_cpu()
local curl = sh(("bash -c \"TIMEFORMAT='%%U %%S'; time curl -s -o /dev/null -w '%%{time_total} %%{size_download} ' '%s/api/v1/pods'\" 2>&1"):format(url))
local ct, cbytes, cu, cs = curl:match("(%S+) (%S+)%s+(%S+) (%S+)")
local curl_server = server_cpu() - s0
ct, cbytes = tonumber(ct), tonumber(cbytes)
-- CPU columns: on this 2-core machine the client and the server share the cores, so a list
-- cannot take less wall time than (client CPU + server CPU) / 2 (the last column).
print("| list of " .. PODS .. " pods | s | objects/s | MB/s | peak RSS MB | client CPU s | server CPU s | (client + server) / 2 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
print(("| curl -s -o /dev/null (one response, %.0f MB) | %.3f | %.0f | %.0f | - | %.2f | %.2f | %.2f |"):format(
  cbytes / 1e6, ct, PODS / ct, cbytes / 1e6 / ct, cu + cs, curl_server, (cu + cs + curl_server) / 2))
for _, mode in ipairs{ "list-onepage", "list", "list-keep" } do
  local f = child(mode)
  local dt, bytes, rss, cpu = tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5])
  local label = ({ ["list-onepage"] = "kinformer, one page, managedFields stripped",
                   list = "kinformer, pages of 500 (default), stripped",
                   ["list-keep"] = "kinformer, pages of 500, managedFields kept" })[mode]
  print(("| %s | %.3f | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |"):format(label, dt, PODS / dt,
    bytes / 1e6 / dt, rss, cpu, f.server_cpu, (cpu + f.server_cpu) / 2))
end

-- Watch: the floor reads the same kind of stream with a raw socket (timed from the first event
-- byte, as the events are held back until the release).
local function floor_read(base, rv)
  local fp = io.popen(("python3 tools/fake-apiserver/watch_rate.py %s '/api/v1/pods?watch=true&resourceVersion=%s' %d"):format(base, rv, EVENTS))
  sleep(0.5)
  sh(("curl -s -o /dev/null -X POST %s/_fake/release"):format(base))
  local out = fp:read("a")
  fp:close()
  return (out:gsub("\n", " "))
end
local head = sh(("curl -s %s/_fake/info"):format(url)):match('"resourceVersion": *"(%d+)"')
sh(("curl -s -o /dev/null -X POST -H 'Content-Type: application/json' -d '{\"resource\":\"pods\",\"count\":%d,\"hold\":true}' %s/_fake/modify"):format(EVENTS, url))
local floor = floor_read(url, head)
-- The same burst, recorded from the server's history for the replay below.
local rec = os.tmpname()
sh(("python3 bench/stream_replay.py record %s '/api/v1/pods?watch=true&resourceVersion=%s' %d %s"):format(url, head, EVENTS, rec))
print()
print("| " .. EVENTS .. " MODIFIED events, prepared, then released as a burst | s | events/s | peak RSS MB |")
print("|---|---:|---:|---:|")
print("| Python fake server, raw socket reader (watch_rate.py): " .. floor .. " | | | |")
local f = child("watch", EVENTS)
print(("| Python fake server -> kinformer reflector -> DeltaFIFO | %.3f | %.0f | %.0f |"):format(
  tonumber(f[2]), EVENTS / tonumber(f[2]), tonumber(f[4])))
os.execute("kill " .. pid)
p:close()

local rp = io.popen(("sh -c 'echo $$; exec python3 bench/stream_replay.py serve %s %s 2>/dev/null'"):format(rec, head))
local rpid = rp:read("l")
local rurl = rp:read("l")
assert(rurl and rurl:match("^http://"), "replay server did not start")
url = rurl
print("| replay (sendfile of the recorded burst), raw socket reader: " .. floor_read(rurl, head) .. " | | | |")
f = child("watch", EVENTS)
print(("| replay -> kinformer reflector -> DeltaFIFO (empty list first) | %.3f | %.0f | %.0f |"):format(
  tonumber(f[2]), EVENTS / tonumber(f[2]), tonumber(f[4])))
os.execute("kill " .. rpid)
rp:close()
os.remove(rec)
