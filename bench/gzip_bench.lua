-- Lists with and without gzip (the reflector's `gzip` option), on loopback and over simulated
-- slower links. Each link is a network namespace made by this script (root needed): the fake
-- API server and the measuring client both run inside it, talking over its own loopback (MTU
-- 1500, as a network's), rate-limited with `tc qdisc ... tbf` (a token bucket; no latency is
-- added: netem is not in every kernel, and the reflector pipelines its pages anyway).
-- "loopback" is a namespace left unshaped. The namespaces are deleted at the end, also on
-- failure.
--
--   make bench-gzip                 (10k pods)
--   LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--     lua5.4 bench/gzip_bench.lua [pods] [runs]
--
-- Each measurement runs in a fresh process: a reflector lists every pod (pages of 500, the
-- default) and the time to `listed` is taken. The server's CPU is its /proc counters over the
-- measurement (compressing is the API server's cost). Median of `runs` runs (default 3).
local gettime = require("socket").gettime
local sleep = require("socket").sleep

local function sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  return out
end

-- Child mode: one list, printing "seconds decoded-bytes client-cpu".
if arg[1] == "--child" then
  local kinformer = require "kinformer"
  local gzip, url = arg[2] == "gzip", arg[3]
  local fifo = kinformer.delta_fifo()
  local client = assert(kinformer.client{ server = url })
  local r = client:reflector{ resource = "pods", fifo = fifo, gzip = gzip }
  local t0, c0 = gettime(), os.clock()
  assert(r:start())
  while not r:status().listed do sleep(0.002) end
  local dt, cpu = gettime() - t0, os.clock() - c0
  io.write(("%.3f %d %.3f\n"):format(dt, r:status().bytes, cpu))
  r:stop()
  os.exit(0)
end

local PODS = tonumber(arg[1]) or 10000
local RUNS = tonumber(arg[2]) or 3
local self, lua = arg[0], "lua5.4"
local TICK = tonumber(sh("getconf CLK_TCK")) or 100
local LINKS = {
  { name = "loopback" },
  { name = "1 Gbit/s", tbf = "rate 1gbit burst 1mb latency 100ms" },
  { name = "100 Mbit/s", tbf = "rate 100mbit burst 256kb latency 100ms" },
  { name = "20 Mbit/s", tbf = "rate 20mbit burst 64kb latency 100ms" },
}
local made = {}

local function cleanup()
  for ns in pairs(made) do sh("ip netns delete " .. ns .. " 2>/dev/null") end
end

local function server_cpu(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return 0 end
  local rest = f:read("l"):match("%) (.*)")
  f:close()
  local fields = {}
  for w in rest:gmatch("%S+") do fields[#fields + 1] = w end
  return (tonumber(fields[12]) + tonumber(fields[13])) / TICK
end

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

local function run()
  print(("gzip benchmark: lists of %d pods (pages of 500), fake API server and client in one "
    .. "network namespace, %s; median of %d runs"):format(PODS, os.date("!%Y-%m-%d"), RUNS))
  print()
  print("| link | gzip | list s | client CPU s | server CPU s | bytes on the wire (one page of 500) |")
  print("|---|---|---:|---:|---:|---:|")
  for i, link in ipairs(LINKS) do
    local ns = ("kinf-gzip-%d-%d"):format(i, math.random(1e6))
    assert(os.execute("ip netns add " .. ns), "ip netns add failed (root needed)")
    made[ns] = true
    local exec = "ip netns exec " .. ns .. " "
    assert(os.execute(exec .. "ip link set lo mtu 1500 up"))
    if link.tbf then
      assert(os.execute(exec .. "tc qdisc add dev lo root tbf " .. link.tbf), "tc qdisc tbf failed")
    end
    local p = io.popen(("sh -c 'echo $$; exec %s python3 tools/fake-apiserver/server.py --port 0 "
      .. "--pods %d --exit-with-parent 2>/dev/null'"):format(exec, PODS))
    local pid = p:read("l")
    local url = p:read("l")
    assert(url and url:match("^http://"), "fake server did not start")
    for _, gz in ipairs{ "plain", "gzip" } do
      local wire = sh(("%s curl -s -o /dev/null %s -w '%%{size_download}' '%s/api/v1/pods?limit=500'")
        :format(exec, gz == "gzip" and "-H 'Accept-Encoding: gzip'" or "", url))
      local ts, cs, ss = {}, {}, {}
      for _ = 1, RUNS do
        local s0 = server_cpu(pid)
        local line = sh(("%s %s %s --child %s %s"):format(exec, lua, self, gz, url))
        local dt, _, cpu = line:match("(%S+) (%S+) (%S+)")
        assert(dt, "child failed: " .. line)
        ts[#ts + 1], cs[#cs + 1], ss[#ss + 1] = tonumber(dt), tonumber(cpu), server_cpu(pid) - s0
      end
      print(("| %s | %s | %.2f | %.2f | %.2f | %.2f MB |"):format(link.name, gz == "gzip" and "on" or "off",
        median(ts), median(cs), median(ss), tonumber(wire) / 1e6))
    end
    sh("kill " .. pid)
    p:close()
    sh("ip netns delete " .. ns)
    made[ns] = nil
  end
end

math.randomseed(os.time())
local ok, err = pcall(run)
cleanup()
if not ok then error(err, 0) end
