-- A sharded kinformer.manager (kinformer.manager{ sharding = ... }): the API-bound controller
-- of bench/manager_writes_bench.lua run by 1, 2 and 4 replica processes of one sharding group,
-- and the time a dead replica's keys take to move, against the fake API server on loopback.
--
--   make bench-manager-shards
--   LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;./?.lua;;' LUA_CPATH='build/lua5.4/?.so;;' \
--     lua5.4 bench/manager_shards_bench.lua [--objects=10000] [--stalls=0.005,0.02]
--       [--replicas=1,2,4] [--concurrency=4] [--lease=15,10,2,2] [--runs=3]
--       [--failover-lease=3,2,0.5,1] [--failover-objects=1000,10000] [--failover-runs=3]
--       [--only=scaling|failover] [--quiet]
--
-- The setup, each run with a fresh server and fresh replica processes: server.py with a user
-- and token per replica (--user-token rI=t-rI) and a fault rule that stalls every PATCH
-- --stalls seconds. The replicas (bench/support/shard_replica.lua) share the group "bench" on
-- shard Leases in the namespace "bench", each with one controller over the ConfigMaps of
-- "bench": bench/support/writer.lua's write-only-what-changed controller (one merge PATCH of an
-- annotation per reconcile, none when the object carries the value already), with
-- max_concurrent_reconciles = --concurrency and no client-side throttle (qps = -1).
-- Once every replica is ready (its acknowledgement published, and every member acknowledged
-- the ring of all the replicas), the script creates the --objects ConfigMaps in "bench" in one
-- POST /_fake/objects: the ones server.py --configmaps made in ns-0 (about 1.1 KB of JSON
-- each), moved to "bench". So no key is written before the group works and every run does the
-- same writes.
--
-- Measured:
--   scaling: reconciles/s from that POST until the last primary's first write returned (the
--     replicas print each write with its time), for each stall and replica count; the server's
--     and the replicas' CPU over the same window (/proc/PID/stat), the writes each replica
--     made, and each replica's peak RSS (VmHWM; every replica caches every ConfigMap). After
--     each run every ConfigMap must carry its data-bytes value.
--   failover: 3 replicas with --failover-lease (duration, renew deadline, retry period,
--     margin), the first of --stalls, --failover-objects ConfigMaps; once they were written, SIGKILL of one replica and at once a
--     POST /_fake/modify touching every ConfigMap (the controller then writes each object's new
--     touched-at value). From the kill: until both others report a ring of 2 members (status
--     polled every 0.1 s), until the first and the last of the dead replica's keys were written
--     by the others, and until the others rewrote their own keys. After each run every
--     ConfigMap must carry its touched-at value. With many objects the last write measures
--     the backlog the touch made (two replicas rewrite them all), not the handover.
-- Figures are medians of the runs, with min-max.
local root = (arg[0]:match("^(.*)/bench/[^/]*$")) or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root .. "/spec/?.lua;"
  .. root .. "/?.lua;" .. package.path
package.cpath = root .. "/build/lua5.4/?.so;" .. package.cpath
_G.KINFORMER_ROOT = root

local cjson = require "cjson"
local socket = require "socket"
local core = require "kinformer.core"
local fake = require "support.fake_apiserver"
local replica = require "support.replica"
local measure = require "bench.support.measure"
local writer = require "bench.support.writer"

local proc_cpu, peak_rss_mb, spread, median = measure.proc_cpu, measure.peak_rss_mb,
  measure.spread, measure.median
local int, f1, f2 = measure.int, measure.f1, measure.f2
local now, sleep = socket.gettime, socket.sleep

local NS = "bench"
local SOURCE_NS = "ns-0" -- where server.py --configmaps puts them
local MAX_REPLICAS = 4

local OPT = { objects = "10000", stalls = "0.005,0.02", replicas = "1,2,4", concurrency = "4",
              lease = "15,10,2,2", runs = "3", ["failover-lease"] = "3,2,0.5,1",
              ["failover-runs"] = "3", ["failover-objects"] = "1000,10000", only = "" }
for _, a in ipairs(arg) do
  local k, v = a:match("^%-%-([%w-]+)=(.*)$")
  if k and OPT[k] then OPT[k] = v
  elseif a == "--quiet" then OPT.quiet = true -- no progress lines on stderr
  else error("unknown argument " .. a .. " (see the header of " .. arg[0] .. ")") end
end
local function numbers(s)
  local out = {}
  for x in s:gmatch("[^,]+") do out[#out + 1] = assert(tonumber(x), "not a number: " .. x) end
  return out
end
local OBJECTS, CONC, RUNS = tonumber(OPT.objects), tonumber(OPT.concurrency), tonumber(OPT.runs)
local FAILOVER_RUNS = tonumber(OPT["failover-runs"])
local STALLS, REPLICAS = numbers(OPT.stalls), numbers(OPT.replicas)
local FAILOVER_OBJECTS = numbers(OPT["failover-objects"])
local LEASE, FAILOVER_LEASE = numbers(OPT.lease), numbers(OPT["failover-lease"])
for _, n in ipairs(REPLICAS) do
  assert(n >= 1 and n <= MAX_REPLICAS, "--replicas: 1 to " .. MAX_REPLICAS)
end

local function progress(fmt, ...)
  if not OPT.quiet then io.stderr:write(fmt:format(...), "\n") end
end

local function fault(stall)
  return ('{"method":"PATCH","action":{"type":"stall","seconds":%s},"times":-1}'):format(stall)
end

-- A fresh server: `objects` ConfigMaps in ns-0, a user per replica, every PATCH stalled.
local SERVERS = {}
local function start_server(stall, objects)
  local args = { "--configmaps", objects, "--namespaces", 1, "--token", "admin" }
  for i = 0, MAX_REPLICAS - 1 do
    args[#args + 1], args[#args + 2] = "--user-token", ("r%d=t-r%d"):format(i, i)
  end
  if stall > 0 then args[#args + 1], args[#args + 2] = "--fault", fault(stall) end
  local srv = fake.start{ args = args, quiet = true }
  SERVERS[#SERVERS + 1] = srv.pid
  return srv
end

-- The body of the POST /_fake/objects that creates the primaries: ns-0's ConfigMaps in NS.
local function primaries_body(srv, objects)
  local items = srv:state("configmaps", SOURCE_NS).items
  assert(#items == objects, "server.py made " .. #items .. " ConfigMaps")
  for _, cm in ipairs(items) do
    cm.metadata.namespace = NS
    cm.metadata.resourceVersion = nil
  end
  return cjson.encode(items)
end

-- Replica children and what they printed, read as it grows.
local function start_replicas(srv, n, mode, lease)
  local rs = {}
  for i = 0, n - 1 do
    local id = "r" .. i
    local c = replica.start("bench/support/shard_replica.lua", { srv.url, id, "t-" .. id, NS, n,
      mode, table.concat(lease, ","), CONC })
    rs[#rs + 1] = { id = id, child = c, pos = 0, rest = "" }
  end
  return rs
end

-- Calls on_line(r, line) for each whole line r printed since the last call.
local function read_new(rs, on_line)
  for _, r in ipairs(rs) do
    local f = io.open(r.child.out)
    if f then
      f:seek("set", r.pos)
      local s = f:read("a")
      f:close()
      r.pos = r.pos + #s
      s = r.rest .. s
      local last = 0
      for line, e in s:gmatch("([^\n]*)\n()") do
        on_line(r, line)
        last = e - 1
      end
      r.rest = s:sub(last + 1)
    end
  end
end

local function tails(rs)
  local out = {}
  for _, r in ipairs(rs) do
    local s = r.child:output()
    out[#out + 1] = r.id .. ": ..." .. s:sub(-600)
  end
  return table.concat(out, "\n")
end

local function stop_replicas(rs)
  for _, r in ipairs(rs) do
    if not r.child.closed then r.child:signal("TERM") end
    r.child:close()
  end
end

-- Waits until every replica printed "ready"; handles the other lines with on_line.
local function wait_ready(rs, on_line, seconds)
  local deadline, ready, n = now() + seconds, {}, 0
  while n < #rs do
    read_new(rs, function(r, line)
      if line:match("^ready ") then
        if not ready[r.id] then ready[r.id], n = true, n + 1 end
      elseif on_line then
        on_line(r, line)
      end
    end)
    if n == #rs then break end
    if now() > deadline then error("the replicas were not ready in time\n" .. tails(rs), 0) end
    sleep(0.05)
  end
end

-- Every ConfigMap of NS carries annotation = value(itself).
local function check_written(srv, objects, annotation, value)
  local n, items = 0, srv:state("configmaps", NS).items
  for _, cm in ipairs(items) do
    if cm.data == cjson.null then cm.data = nil end
    local ann = cm.metadata.annotations
    if type(ann) == "table" and ann[annotation] == value(cm) then n = n + 1 end
  end
  assert(n == objects and #items == objects, ("%d of %d ConfigMaps carry the value of %s")
    :format(n, objects, annotation))
end

local function cpu_of(srv, rs)
  local c = 0
  for _, r in ipairs(rs) do c = c + (proc_cpu(r.child.pid) or 0) end
  return proc_cpu(srv.pid), c
end

-- One scaling run: n replicas, every PATCH stalled `stall` s. -> result table
local function scaling_run(stall, n)
  local srv = start_server(stall, OBJECTS)
  local rs
  local ok, res = pcall(function()
    local body = primaries_body(srv, OBJECTS)
    rs = start_replicas(srv, n, "throughput", LEASE)
    wait_ready(rs, nil, 60)
    local first, distinct, last_t, writes, failures = {}, 0, 0, {}, 0
    local function on_line(r, line)
      local what, name, t = line:match("^([wf]) (%S+) (%S+)")
      if what == "w" then
        t = tonumber(t)
        writes[r.id] = (writes[r.id] or 0) + 1
        if not first[name] then first[name], distinct = t, distinct + 1 end
        if t > last_t then last_t = t end
      elseif what == "f" then
        failures = failures + 1
      end
    end
    local srv0, rep0 = cpu_of(srv, rs)
    local t0 = now()
    srv:control("POST", "/_fake/objects?resource=configmaps", body)
    local post = now() - t0
    local deadline = t0 + OBJECTS * stall / (n * CONC) * 3 + 60
    while distinct < OBJECTS do
      sleep(0.05)
      read_new(rs, on_line)
      if now() > deadline then
        error(("%d of %d primaries written in time\n%s"):format(distinct, OBJECTS, tails(rs)), 0)
      end
    end
    local t_seen = now()
    local srv1, rep1 = cpu_of(srv, rs)
    local rss, per = {}, {}
    for i, r in ipairs(rs) do
      rss[i] = peak_rss_mb(r.child.pid)
      per[i] = writes[r.id] or 0
    end
    check_written(srv, OBJECTS, writer.DATA_BYTES, writer.data_bytes)
    local dt, window = last_t - t0, t_seen - t0
    local total = 0
    for _, w in ipairs(per) do total = total + w end
    return { rate = OBJECTS / dt, seconds = dt, post = post, failures = failures,
             writes = total, per = per, rss = rss,
             server_cores = (srv1 - srv0) / window, replica_cores = (rep1 - rep0) / window,
             server_us = (srv1 - srv0) / total * 1e6, replica_us = (rep1 - rep0) / total * 1e6 }
  end)
  if rs then stop_replicas(rs) end
  srv:stop()
  if not ok then error(res, 0) end
  return res
end

-- One failover run: 3 replicas, one SIGKILLed. -> result table
local VICTIM = "r1"
local function failover_run(stall, objects)
  local srv = start_server(stall, objects)
  local rs
  local ok, res = pcall(function()
    local body = primaries_body(srv, objects)
    rs = start_replicas(srv, 3, "failover", FAILOVER_LEASE)
    local ring = core.ring{ "r0", "r1", "r2" }
    local first_by, distinct = {}, 0 -- name -> who wrote it first
    local victim_keys, n_victim = {}, 0
    -- after the kill: the keys rewritten by a survivor (with a touched-at value), and when
    local t_kill, rewritten, pending = nil, {}, objects
    local moved_first, moved_last, own_last, shrunk = math.huge, 0, 0, {}
    local function on_line(r, line)
      local what, a, b, c = line:match("^(%S+) (%S+) (%S+) ?(%S*)")
      if what == "w" then
        if not first_by[a] then first_by[a], distinct = r.id, distinct + 1 end
        local t = tonumber(b)
        if t_kill and t > t_kill and c ~= "0" and r.id ~= VICTIM and not rewritten[a] then
          rewritten[a], pending = true, pending - 1
          if victim_keys[a] then
            moved_first, moved_last = math.min(moved_first, t), math.max(moved_last, t)
          else
            own_last = math.max(own_last, t)
          end
        end
      elseif what == "members" and t_kill and tonumber(a) == 2 and tonumber(b) > t_kill then
        shrunk[r.id] = shrunk[r.id] or tonumber(b)
      end
    end
    wait_ready(rs, on_line, 60)
    srv:control("POST", "/_fake/objects?resource=configmaps", body)
    local deadline = now() + objects * stall / (3 * CONC) * 3 + 60
    while distinct < objects do
      sleep(0.05)
      read_new(rs, on_line)
      if now() > deadline then error("the primaries were not written in time\n" .. tails(rs), 0) end
    end
    for name, who in pairs(first_by) do
      if ring:owner(NS .. "/" .. name) == VICTIM then
        victim_keys[name], n_victim = true, n_victim + 1
        assert(who == VICTIM, name .. " first written by " .. who)
      end
    end
    sleep(1) -- the group at rest: Leases renewed, the writes' events delivered
    read_new(rs, on_line)
    local victim = rs[2]
    assert(victim.id == VICTIM)
    t_kill = now()
    victim.child:signal("KILL")
    srv:control("POST", "/_fake/modify", { resource = "configmaps", namespace = NS,
                                           count = objects })
    local t_touched = now() - t_kill
    -- until both others run a ring of 2 and every key carries its touched-at value, written by
    -- a survivor
    deadline = now() + FAILOVER_LEASE[1] + FAILOVER_LEASE[4] + objects * stall / CONC + 60
    repeat
      sleep(0.05)
      read_new(rs, on_line)
      if now() > deadline then
        error("the dead replica's keys did not move in time\n" .. tails(rs), 0)
      end
    until pending == 0 and shrunk.r0 and shrunk.r2
    check_written(srv, objects, writer.TOUCHED, writer.touched)
    return { victim_keys = n_victim, touched = t_touched,
             ring = math.max(shrunk.r0, shrunk.r2) - t_kill,
             first = moved_first - t_kill, last = moved_last - t_kill, own = own_last - t_kill }
  end)
  if rs then stop_replicas(rs) end
  srv:stop()
  if not ok then error(res, 0) end
  return res
end

io.stdout:setvbuf("line")
print("load average before: " .. measure.loadavg())
local scaling, failover = {}, {}
if OPT.only ~= "failover" then
  for _, stall in ipairs(STALLS) do
    for _, n in ipairs(REPLICAS) do
      local runs = {}
      for i = 1, RUNS do
        progress("  scaling: stall %g ms, %d replica%s, run %d of %d", stall * 1000, n,
          n == 1 and "" or "s", i, RUNS)
        runs[i] = scaling_run(stall, n)
      end
      scaling[#scaling + 1] = { stall = stall, n = n, runs = runs }
    end
  end
end
if OPT.only ~= "scaling" then
  for _, objects in ipairs(FAILOVER_OBJECTS) do
    local runs = {}
    for i = 1, FAILOVER_RUNS do
      progress("  failover: %d ConfigMaps, run %d of %d", objects, i, FAILOVER_RUNS)
      runs[i] = failover_run(STALLS[1], objects)
    end
    failover[#failover + 1] = { objects = objects, runs = runs }
  end
end

local function collect(runs, fn)
  local xs = {}
  for _, r in ipairs(runs) do
    for _, x in ipairs(fn(r)) do xs[#xs + 1] = x end
  end
  return xs
end
local function one(f) return function(r) return { r[f] } end end

if #scaling > 0 then
  print(("\n%s ConfigMaps (primaries) created in one POST once every replica was ready; every "
    .. "PATCH stalled by the server; %d concurrent reconciles per replica; client throttle off "
    .. "(`qps = -1`); shard Leases %s s (duration, renew deadline, retry period, margin); %d "
    .. "run%s each, median (min-max), a fresh server and fresh replicas per run\n"):format(
    int(OBJECTS), CONC, (OPT.lease:gsub(",", "/")),
    RUNS, RUNS == 1 and "" or "s"))
  print("| PATCH stall | replicas | ceiling: replicas x " .. CONC .. " / stall | reconciles/s "
    .. "| vs 1 replica | server CPU (cores) | replicas' CPU (cores, all) | server CPU per write "
    .. "(us) | replicas' CPU per write (us) | writes per replica | peak RSS per replica (MB) |")
  print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
  local base = {}
  for _, row in ipairs(scaling) do
    local rate = median(collect(row.runs, one("rate")))
    if row.n == 1 then base[row.stall] = rate end
    local vs = base[row.stall] and ("%.2fx"):format(rate / base[row.stall]) or "-"
    print(("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |"):format(
      row.stall > 0 and ("%g ms"):format(row.stall * 1000) or "none",
      row.n, row.stall > 0 and int(row.n * CONC / row.stall) or "-", spread(collect(row.runs, one("rate")), int), vs,
      spread(collect(row.runs, one("server_cores")), f2),
      spread(collect(row.runs, one("replica_cores")), f2),
      spread(collect(row.runs, one("server_us")), int),
      spread(collect(row.runs, one("replica_us")), int),
      spread(collect(row.runs, function(r) return r.per end), int),
      spread(collect(row.runs, function(r) return r.rss end), f1)))
  end
  local posts, failed = {}, 0
  for _, row in ipairs(scaling) do
    for _, r in ipairs(row.runs) do
      posts[#posts + 1] = r.post
      failed = failed + r.failures
    end
  end
  print(("\nThe POST that creates the primaries (inside the window): %s s. Writes per replica "
    .. "and peak RSS: median (min-max) over the replicas of all runs."):format(spread(posts, f2)))
  if failed > 0 then print(("%d writes failed in the measured windows"):format(failed)) end
end

if #failover > 0 then
  print(("\nA dead replica: 3 replicas, every PATCH stalled %g ms, %d concurrent reconciles per "
    .. "replica, shard Leases %s s (duration, renew deadline, retry period, margin); SIGKILL of "
    .. "one, then at once every ConfigMap touched (POST /_fake/modify); seconds from the kill, "
    .. "%d run%s each, median (min-max)\n"):format(STALLS[1] * 1000, CONC,
    (OPT["failover-lease"]:gsub(",", "/")), FAILOVER_RUNS, FAILOVER_RUNS == 1 and "" or "s"))
  print("| ConfigMaps | the dead replica's keys | touch of every ConfigMap returned | both others "
    .. "run a ring of 2 | first of its keys written by another | last of its keys written | the "
    .. "others' own keys rewritten | target: lease duration + 2 s |")
  print("|---:|---:|---:|---:|---:|---:|---:|---:|")
  for _, row in ipairs(failover) do
    local runs = row.runs
    print(("| %s | %s | %s | %s | %s | %s | %s | %g |"):format(int(row.objects),
      spread(collect(runs, one("victim_keys")), int), spread(collect(runs, one("touched")), f2),
      spread(collect(runs, one("ring")), f2), spread(collect(runs, one("first")), f2),
      spread(collect(runs, one("last")), f2), spread(collect(runs, one("own")), f2),
      FAILOVER_LEASE[1] + 2))
  end
end
print("\nload average after: " .. measure.loadavg())
print("fake API servers started and stopped: " .. table.concat(SERVERS, " "))
