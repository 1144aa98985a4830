-- OpenResty routing benchmark. Part 1: what a request costs: nginx CPU per request (and
-- requests/s, p99) of kinformer.ngx.balancer (in each model, round robin; ewma with its log
-- phase) and of examples/openresty (routing by Host), against a static `upstream` block of the
-- same three backends and against the floor of any Lua balancer (bench/openresty_floor.lua);
-- then the Lua memory a request allocates, per algorithm. Part 2: what each model costs with a
-- bigger cluster: watches on the API server, memory, sync time, CPU per watch event, and how
-- long a readiness change takes to reach every worker.
--
--   make bench-openresty
--   LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' lua5.4 bench/openresty_bench.lua \
--     [seconds per run = 5] [rounds = 7] [services = 2000] [events = 20000]
--
-- Everything runs on loopback on this machine (wrk, nginx, backends, the fake API server share
-- the cores), so the runs alternate: each round runs every configuration once, in a rotating
-- order, and the tables give medians; "vs static" is the median of the per-round ratios.
local socket = require "socket"
local cjson = require "cjson"
_G.KINFORMER_ROOT = _G.KINFORMER_ROOT or "."
local fake = require "support.fake_apiserver"
local openresty = require "support.openresty"

local SECONDS = tonumber(arg[1]) or 5
local ROUNDS = tonumber(arg[2]) or 7
local SERVICES = tonumber(arg[3]) or 2000
local EVENTS = tonumber(arg[4]) or 20000
local CONNECTIONS = tonumber(os.getenv("WRK_CONNECTIONS")) or 32
local now, sleep = socket.gettime, socket.sleep
math.randomseed(os.time())

local B = { "127.0.0.2", "127.0.0.3", "127.0.0.4" }

local function sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  return out
end

local function median(t)
  local c = {}
  for i, v in ipairs(t) do c[i] = v end
  table.sort(c)
  local n = #c
  if n == 0 then return nil end
  if n % 2 == 1 then return c[(n + 1) / 2] end
  return (c[n / 2] + c[n / 2 + 1]) / 2
end

-- CPU seconds (user + system) of an nginx instance's children (workers).
local function cpu_seconds(inst)
  local t = 0
  for _, c in ipairs(inst:children()) do
    local f = io.open("/proc/" .. c.pid .. "/stat")
    if f then
      local s = f:read("a")
      f:close()
      local fields = {}
      for w in s:gsub("^.-%) ", ""):gmatch("%S+") do fields[#fields + 1] = w end
      t = t + tonumber(fields[12]) + tonumber(fields[13]) -- utime, stime (fields 14, 15)
    end
  end
  return t / 100 -- clock ticks (USER_HZ 100 on Linux)
end

local function ms(v, unit)
  v = tonumber(v)
  if unit == "us" then return v / 1000 elseif unit == "s" then return v * 1000 end
  return v
end

local function wrk(port, seconds)
  local out = sh(("wrk -t1 -c%d -d%ds --latency -H 'Host: web.demo' http://127.0.0.1:%d/ 2>&1")
    :format(CONNECTIONS, seconds, port))
  local r = {
    requests = tonumber(out:match("(%d+) requests in")),
    rps = tonumber(out:match("Requests/sec:%s+([%d.]+)")),
    non2xx = tonumber(out:match("Non%-2xx or 3xx responses: (%d+)")) or 0,
    errors = out:match("Socket errors:[^\n]*"),
  }
  local v, u = out:match("\n%s+99%%%s+([%d.]+)(%a+)")
  r.p99 = v and ms(v, u)
  if not r.rps then error("wrk failed:\n" .. out) end
  return r
end

local function slice(name, svc, ns, port, eps)
  local endpoints = {}
  for i, e in ipairs(eps) do
    endpoints[i] = { addresses = { e[1] }, conditions = { ready = e[2], serving = e[2],
                     terminating = false }, nodeName = "node-" .. (i % 50) }
  end
  return {
    apiVersion = "discovery.k8s.io/v1", kind = "EndpointSlice",
    metadata = { name = name, namespace = ns, labels = {
      ["kubernetes.io/service-name"] = svc,
      ["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io" } },
    addressType = "IPv4",
    ports = { { name = "http", port = port, protocol = "TCP" } },
    endpoints = endpoints,
  }
end

local function status(port)
  local code, body = openresty.get(port, "localhost", "/kinformer/status")
  assert(code == 200, "status: " .. tostring(code) .. " " .. tostring(body))
  return cjson.decode(body)
end

-- Waits until every informer process (n of them) reports synced with `objects` objects.
local function wait_synced(port, n, objects, timeout)
  local deadline = now() + (timeout or 120)
  while now() < deadline do
    local st = status(port)
    local ok = #st.processes == n
    for _, p in ipairs(st.processes) do
      local inf = p.informers.endpointslices
      if not (inf.synced and inf.queue_length == 0 and (not objects or inf.objects >= objects)) then
        ok = false
      end
    end
    if ok then return st end
    sleep(0.05)
  end
  error("informers did not sync: " .. cjson.encode(status(port)))
end

if sh("command -v wrk") == "" then
  io.stderr:write("wrk is not installed (Debian package wrk; `make deps` installs it)\n")
  os.exit(1)
end
local ok, why = openresty.available()
if not ok then
  io.stderr:write(why, "\n")
  os.exit(1)
end

local srv = fake.start{ args = { "--sample-cluster", "--history", "200000" }, quiet = true }
local bport = openresty.free_port(B)
local backends = openresty.backends{ port = bport, addrs = B }
local ready = {}
for i, a in ipairs(B) do ready[i] = { a, true } end
srv:objects{ slice("web-a", "web", "demo", bport, ready) }
local peers = {}
for i, a in ipairs(B) do peers[i] = a .. ":" .. bport end

print(("# OpenResty routing benchmark: %d rounds of %d s per configuration, wrk -t1 -c%d, " ..
  "Host web.demo -> 3 ready backends (one nginx, 1 worker); nginx under test: 2 workers")
  :format(ROUNDS, SECONDS, CONNECTIONS))
print(("# %s, %s, %d cores"):format(sh("nginx -v 2>&1"):gsub("%s+$", ""),
  sh("wrk --version 2>&1 | head -1"):match("^(%S+ %S+)") or "wrk", tonumber(sh("nproc")) or 0))

-- ---- part 1: what a request costs ----

-- An nginx with 2 workers (1 for the allocation count) in front of the backends through
-- balancer_by_lua*: `balancer` is the Lua in the block, `start` the init_worker code, `log` a
-- log_by_lua* block or nil.
local function lua_nginx(o)
  local init = o.model == "shared" and
    'init_by_lua_block { require("kinformer.ngx").shared_memory("16m") }' or ""
  local http = ([[
    lua_shared_dict kinformer 1m;
    lua_shared_dict kinformer_endpoints 4m;
    %s
    init_worker_by_lua_block { %s }
    upstream u {
        server 0.0.0.1;
        balancer_by_lua_block { %s }
        keepalive 64;
    }
]]):format(init, o.start, o.balancer)
  local locations = ([[
        location / {
            proxy_pass http://u;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_connect_timeout 2s;
            error_page 500 = @unavailable;
            %s
        }
        location @unavailable {
            content_by_lua_block { require("kinformer.ngx.balancer").unavailable() }
        }
        location = /gc {
            content_by_lua_block { collectgarbage("stop") ngx.say(collectgarbage("count")) }
        }
]]):format(o.log and ("log_by_lua_block { " .. o.log .. " }") or "")
  local port = openresty.free_port()
  local inst = openresty.start{ name = o.name, conf = openresty.lua_conf{
    workers = o.workers or 2, dir = "bench", port = port, http = http, locations = locations } }
  inst.port = port
  return inst
end

local FLOOR_START = ('require("openresty_floor").init({ "%s" }, %d)'):format(table.concat(B, '", "'), bport)
local function kstart(model)
  return ('assert(require("kinformer.ngx.balancer").start{ model = "%s", client = { server = "%s" } })'
    .. ' require("kinformer.ngx.balancer").policy("chash", { algorithm = "chash", hash_by = "remote_addr" })'
    .. ' require("kinformer.ngx.balancer").policy("sticky", { algorithm = "sticky" })')
    :format(model, srv.url)
end
local BALANCE = 'require("kinformer.ngx.balancer").balance("demo/web:http")'

-- Every configuration answers 200 from each of the 3 backends (the balancers synced); `want`
-- backends only for chash on the client address (one client here).
local function check_spread(c, want)
  want = want or 3
  local deadline, seen, n = now() + 30, {}, 0
  while now() < deadline and n < want do
    local code, body = openresty.get(c.inst.port, "web.demo", "/")
    if code == 200 then
      local b = body:gsub("%s+$", "")
      if not seen[b] then seen[b], n = true, n + 1 end
    else
      sleep(0.05)
    end
  end
  assert(n == want, c.name .. ": answers from " .. n .. " backends only\n" .. c.inst:log())
end

-- Static upstream blocks chosen by Host with the example's map: what routing by Host costs
-- nginx without Lua (the example's reference).
local function static_by_host()
  local servers = {}
  for i, p in ipairs(peers) do servers[i] = "        server " .. p .. ";" end
  local port = openresty.free_port()
  local inst = openresty.start{ name = "static-by-host", conf = openresty.lua_conf{
    workers = 2, dir = "bench", port = port, http = ([[
    map $host $static_upstream {
        ~^(?<svc>[a-z0-9-]+)\.(?<ns>[a-z0-9-]+)(?:\.svc(?:\..*)?)?$  $ns.$svc;
        default "none";
    }
    upstream demo.web {
%s
        keepalive 64;
    }
]]):format(table.concat(servers, "\n")), locations = [[
        location / {
            proxy_pass http://$static_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_connect_timeout 2s;
        }
]] } }
  inst.port = port
  return inst
end

local static = openresty.static{ port = openresty.free_port(), backends = peers }
local configs = {
  { name = "static upstream block", inst = static },
  { name = "static upstream blocks by Host (a map)", inst = static_by_host() },
  { name = "Lua balancer floor (fixed peers)", inst = lua_nginx{ name = "floor",
      start = FLOOR_START, balancer = 'require("openresty_floor").balance()' } },
  { name = "kinformer.ngx.balancer, model shared", inst = lua_nginx{ name = "shared",
      model = "shared", start = kstart("shared"), balancer = BALANCE } },
  { name = "kinformer.ngx.balancer, model worker", inst = lua_nginx{ name = "worker",
      model = "worker", start = kstart("worker"), balancer = BALANCE } },
  { name = "kinformer.ngx.balancer, model agent", inst = lua_nginx{ name = "agent",
      model = "agent", start = kstart("agent"), balancer = BALANCE } },
  { name = "kinformer.ngx.balancer ewma + log(), model shared", inst = lua_nginx{
      name = "ewma", model = "shared", start = kstart("shared"),
      balancer = 'require("kinformer.ngx.balancer").balance("demo/web:http", "ewma")',
      log = 'require("kinformer.ngx.balancer").log()' } },
  { name = "examples/openresty (Host -> Service), model shared", ref = 2, inst = openresty.router{
      port = openresty.free_port(), env = { KINFORMER_SERVER = srv.url,
                                            KINFORMER_MODEL = "shared" } } },
}
for _, c in ipairs(configs) do
  check_spread(c)
  c.rps, c.p99, c.cpu, c.ratio, c.non2xx = {}, {}, {}, {}, 0
  wrk(c.inst.port, 1) -- warm-up: connections, JIT
end
for round = 1, ROUNDS do
  local cpu = {}
  for k = 0, #configs - 1 do
    local c = configs[(round + k - 1) % #configs + 1]
    local c0 = cpu_seconds(c.inst)
    local r = wrk(c.inst.port, SECONDS)
    local used = cpu_seconds(c.inst) - c0
    c.rps[#c.rps + 1], c.p99[#c.p99 + 1] = r.rps, r.p99
    cpu[c] = used / r.requests * 1e6
    c.cpu[#c.cpu + 1] = cpu[c]
    c.non2xx = c.non2xx + r.non2xx
  end
  for _, c in ipairs(configs) do c.ratio[#c.ratio + 1] = cpu[c] / cpu[configs[c.ref or 1]] end
  io.stderr:write(("round %d/%d, us per request: %s\n"):format(round, ROUNDS, table.concat((function()
    local t = {}
    for i, c in ipairs(configs) do t[i] = ("%.2f"):format(cpu[c]) end
    return t
  end)(), " / ")))
end
for _, c in ipairs(configs) do if c.inst ~= static then c.inst:stop() end end

-- "vs static": against the static upstream block, or for the example against the static blocks
-- chosen by the same map (routing by Host costs nginx the same with or without Lua).
print("\n| configuration | nginx CPU per request (median) | vs static (median of per-round ratios) | requests/s (median) | p99 latency (median) | non-2xx |")
print("|---|---:|---:|---:|---:|---:|")
for _, c in ipairs(configs) do
  print(("| %s | %.2f us | %.3fx%s | %.0f | %.2f ms | %d |"):format(c.name, median(c.cpu),
    median(c.ratio), c.ref and " (vs by Host)" or "", median(c.rps), median(c.p99), c.non2xx))
end
local all = {}
for _, c in ipairs(configs) do
  local t = {}
  for i, v in ipairs(c.cpu) do t[i] = ("%.2f"):format(v) end
  all[#all + 1] = "# " .. c.name .. ", us per request: " .. table.concat(t, " ")
end
print(table.concat(all, "\n"))
io.stdout:flush()

-- Lua memory allocated per request: one worker, its collector stopped (from a request:
-- init_worker_by_lua* ends with a full collection, which restarts it), the growth of
-- collectgarbage("count") over a wrk run, less what the /gc requests themselves allocate and
-- less what the worker's timers allocate in as much time without requests (status samples,
-- dispatch ticks).
print("\n| configuration (1 worker) | requests | Lua heap growth under load | idle growth, same time | bytes per request |")
print("|---|---:|---:|---:|---:|")
local function gcount(inst)
  local code, body = openresty.get(inst.port, "localhost", "/gc")
  assert(code == 200, body)
  return tonumber(body)
end
for _, g in ipairs{
  { "Lua balancer floor (fixed peers)", { start = FLOOR_START, balancer = 'require("openresty_floor").balance()' } },
  { "kinformer.ngx.balancer round_robin", { model = "shared", start = kstart("shared"), balancer = BALANCE } },
  { "kinformer.ngx.balancer chash (remote_addr)", { model = "shared", start = kstart("shared"),
      balancer = 'require("kinformer.ngx.balancer").balance("demo/web:http", "chash")' } },
  { "kinformer.ngx.balancer sticky (cookie sent)", { model = "shared", start = kstart("shared"),
      balancer = 'require("kinformer.ngx.balancer").balance("demo/web:http", "sticky")', cookie = true } },
  { "kinformer.ngx.balancer ewma + log()", { model = "shared", start = kstart("shared"),
      balancer = 'require("kinformer.ngx.balancer").balance("demo/web:http", "ewma")',
      log = 'require("kinformer.ngx.balancer").log()' } },
} do
  local o = g[2]
  o.name, o.workers = "gc", 1
  local inst = lua_nginx(o)
  local c = { name = g[1], inst = inst }
  check_spread(c, g[1]:find("chash") and 1 or 3)
  local extra = ""
  if o.cookie then
    local _, _, raw = openresty.get(inst.port, "web.demo", "/")
    local cookie = raw:match("\r\nSet%-Cookie: ([^;\r]+)")
    assert(cookie, "sticky: no cookie set")
    extra = " -H 'Cookie: " .. cookie .. "'"
  end
  gcount(inst)
  sh(("wrk -t1 -c%d -d1s -H 'Host: web.demo'%s http://127.0.0.1:%d/ 2>&1"):format(CONNECTIONS, extra, inst.port))
  local g0 = gcount(inst)
  local g1 = gcount(inst) -- what one /gc request allocates
  local t1 = now()
  local out = sh(("wrk -t1 -c%d -d%ds -H 'Host: web.demo'%s http://127.0.0.1:%d/ 2>&1")
    :format(CONNECTIONS, math.min(SECONDS, 3), extra, inst.port))
  local g2 = gcount(inst)
  local took = now() - t1
  sleep(took)
  local g3 = gcount(inst)
  local requests = tonumber(out:match("(%d+) requests in"))
  local per_get = g1 - g0
  local d, idle = (g2 - g1) - per_get, (g3 - g2) - per_get
  print(("| %s | %d | %.1f KB | %.1f KB | %.1f |"):format(g[1], requests, d, idle,
    (d - idle) * 1024 / requests))
  io.stdout:flush()
  inst:stop()
end

-- ---- part 2: what each model costs ----

-- SERVICES services in namespace "bench", one slice each with 10 endpoints (7 ready).
local t0 = now()
local batch = {}
for i = 1, SERVICES do
  local eps = {}
  for j = 1, 10 do eps[j] = { ("10.%d.%d.%d"):format(i // 250, i % 250, j), j <= 7 } end
  batch[#batch + 1] = slice(("svc-%d-abcde"):format(i), "svc-" .. i, "bench", 8080, eps)
  if #batch == 500 or i == SERVICES then
    srv:objects(batch)
    batch = {}
  end
end
local objects = SERVICES + 6 -- + web-a and the sample cluster's 5
local list_bytes = #select(4, srv:request("GET", "/apis/discovery.k8s.io/v1/endpointslices"))
print(("\n# part 2: %d Services, one EndpointSlice each (10 endpoints, 7 ready), %d slices, " ..
  "%.1f MB of list JSON (created in %.1f s); %d MODIFIED events for the CPU figure")
  :format(SERVICES, objects, list_bytes / 1e6, now() - t0, EVENTS))

local function rss_of(inst)
  local out = { master = openresty.rss_kb(inst.pid) }
  for _, c in ipairs(inst:children()) do out[#out + 1] = openresty.rss_kb(c.pid) end
  return out
end

local function watches()
  return srv:watches()["endpointslices.discovery.k8s.io"] or 0
end

local results = {}
for _, model in ipairs{ "worker", "agent" } do
  local res = { model = model }
  local nproc = model == "worker" and 2 or 1
  -- the same router watching an empty namespace: the memory baseline
  local base = openresty.router{ port = openresty.free_port(), env = {
    KINFORMER_SERVER = srv.url, KINFORMER_MODEL = model, KINFORMER_NAMESPACE = "empty" } }
  wait_synced(base.port, nproc)
  sleep(0.5)
  local base_rss = rss_of(base)
  base:stop()
  local t1 = now()
  local r = openresty.router{ port = openresty.free_port(), worker_header = true, env = {
    KINFORMER_SERVER = srv.url, KINFORMER_MODEL = model } }
  local st = wait_synced(r.port, nproc, objects)
  res.sync = now() - t1
  sleep(1.5) -- let the balancer's view (agent model) and RSS settle
  res.watches = watches()
  local rss = rss_of(r)
  res.rss = {}
  for i = 1, #rss do res.rss[i] = (rss[i] - base_rss[i]) / 1024 end
  st = status(r.port)
  for _, p in ipairs(st.processes) do
    local v = p.views and p.views["kinformer.endpoints"]
    if v and v.capacity then res.shm = (v.capacity - v.free_space) / 1e6 end
    res.keys = v and v.keys
  end
  -- CPU per watch event: EVENTS MODIFIED slices (annotation touched), all informer processes
  local before = {}
  for _, p in ipairs(st.processes) do before[p.pid] = p.informers.endpointslices.watch_events end
  local c0 = cpu_seconds(r)
  local t2 = now()
  srv:modify("endpointslices", EVENTS, { namespace = "bench" })
  local deadline = now() + 120
  while now() < deadline do
    local s = status(r.port)
    local done = #s.processes == nproc
    for _, p in ipairs(s.processes) do
      local inf = p.informers.endpointslices
      if inf.watch_events - (before[p.pid] or 0) < EVENTS or inf.queue_length > 0 then
        done = false
      end
    end
    if done then break end
    sleep(0.05)
  end
  res.events_s = now() - t2
  res.cpu_per_1k = (cpu_seconds(r) - c0) / EVENTS * 1000 * 1000 -- ms per 1000 events
  res.tick = 0 -- the longest dispatch tick (sync and burst included): what a request may wait
  for _, p in ipairs(status(r.port).processes) do
    res.tick = math.max(res.tick, p.max_dispatch_seconds or 0)
  end
  -- propagation: flip 127.0.0.3 in web-a, 10 times, until every worker routes accordingly
  -- (a random pause first: converge returns a fixed time after the last tick, which would
  -- otherwise phase-lock every write to the dispatch timer)
  local lat = {}
  for i = 1, 10 do
    sleep(math.random() * 0.3)
    local on = i % 2 == 1
    local t3 = now()
    srv:objects{ slice("web-a", "web", "demo", bport, { { B[1], true }, { B[2], on },
                                                      { B[3], true } }) }
    local want = on and { [B[1]] = true, [B[2]] = true, [B[3]] = true }
                     or { [B[1]] = true, [B[3]] = true }
    lat[i] = openresty.converge{ port = r.port, host = "web.demo", want = want, workers = 2,
                                 t0 = t3, timeout = 10 } * 1000
  end
  table.sort(lat)
  res.lat_median, res.lat_max = median(lat), lat[#lat]
  r:stop()
  results[#results + 1] = res
end

print("\n| model | watches on the API server | sync time (longest dispatch tick) | memory over baseline (RSS) | routes in shared memory | CPU per 1000 events (all workers) | readiness change -> every worker (median / max of 10) |")
print("|---|---:|---:|---|---:|---:|---:|")
for _, res in ipairs(results) do
  local mem = {}
  for i, v in ipairs(res.rss) do mem[i] = ("worker %d: %+.1f MB"):format(i - 1, v) end
  print(("| %s | %d | %.2f s (%.0f ms) | %s | %s | %.0f ms | %.0f / %.0f ms |"):format(res.model,
    res.watches, res.sync, res.tick * 1000, table.concat(mem, ", "),
    res.shm and ("%.2f MB (%d keys)"):format(res.shm, res.keys or 0) or "-",
    res.cpu_per_1k, res.lat_median, res.lat_max))
end

backends:stop()
srv:stop()
