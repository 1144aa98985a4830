-- The informer benchmark (bench/informer_bench.lua, `make bench-informer`) at a tiny size: it
-- completes, prints its three tables and the target verdicts, and stops its fake API server.
-- No timing is asserted (figures at this size mean nothing; see bench/README.md).

local proc = require "support.proc"
local quote, alive = proc.quote, proc.alive

describe("bench/informer_bench.lua (smoke size)", function()
  it("runs at 300 pods and prints its tables and verdicts", function()
    local lua = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
    local build = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
    local cmd = ("cd %s && LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/%s/?.so;;' "
      .. "timeout -k 5 120 %s bench/informer_bench.lua 300 300 1 2>&1; echo \"exit=$?\""):format(
      quote(KINFORMER_ROOT), build, lua)
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    local status = tonumber(out:match("exit=(%d+)%s*$"))
    assert.are.equal(0, status, out)

    assert.matches("informer benchmark: 300 pods, 300 MODIFIED events", out, 1, true)
    -- The sync table: the curl floor and (a)-(c), each stripped and kept.
    assert.matches("| sync of 300 pods: start() -> wait_for_sync()", out, 1, true)
    assert.matches("| floor: curl -s -o /dev/null", out, 1, true)
    for _, label in ipairs{ "(a) no handler", "(b) handler reads metadata.name",
                            "(c) handler reads spec + status" } do
      for _, strip in ipairs{ "stripped", "kept" } do
        local _, n = out:gsub("| " .. label:gsub("%p", "%%%0") .. " | " .. strip .. " |", "")
        assert.are.equal(2, n, label .. " / " .. strip .. " (sync and events rows)\n" .. out)
      end
    end
    -- The events table and the lookups table.
    assert.matches("| 300 MODIFIED events at 300 pods, released as one burst", out, 1, true)
    assert.matches("| floor: raw socket reader", out, 1, true)
    assert.matches("| store:get(key), warm | 200,", out, 1, true)
    assert.matches('| store:by_index("namespace", ns), warm', out, 1, true)
    -- A verdict for every target.
    assert.matches("\ntargets:\n", out, 1, true)
    local _, verdicts = out:gsub("\n  [mM][eI][tS]", "")
    assert.are.equal(9, verdicts, out)

    -- The fake API server it started is gone.
    local pid = out:match("fake API server: %S+ %(pid (%d+)")
    assert.truthy(pid, out)
    local deadline = os.time() + 5
    while alive(pid) and os.time() < deadline do os.execute("sleep 0.1") end
    assert.is_false(alive(pid))
  end)
end)

-- The peers benchmark (bench/peers_bench.lua, `make bench`) at its --smoke size: every kinformer
-- scenario runs and the results page, data files and chart are written. The client-node side
-- runs when bench/peers/client-node/node_modules exists (no npm or network here) and is skipped
-- with a printed note otherwise.
describe("bench/peers_bench.lua (--smoke)", function()
  it("runs every scenario at tiny sizes and writes the results page", function()
    local lua = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
    local build = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
    local dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. quote(dir)))
    finally(function() os.execute("rm -rf " .. quote(dir)) end)
    local cmd = ("cd %s && LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' LUA_CPATH='build/%s/?.so;;' "
      .. "timeout -k 5 240 %s bench/peers_bench.lua --smoke --out=%s/RESULTS.md --png=%s/results.png "
      .. "--data=%s 2>&1; echo \"exit=$?\""):format(quote(KINFORMER_ROOT), build, lua, dir, dir, dir)
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    assert.are.equal(0, tonumber(out:match("exit=(%d+)%s*$")), out)

    local f = assert(io.open(dir .. "/RESULTS.md"))
    local page = f:read("a")
    f:close()
    for _, section in ipairs{ "## Targets", "## S1: initial sync", "## S2: watch events",
                              "## S3: lookups", "## S4: relist after a 410", "## Closing note",
                              "## Commands" } do
      assert.matches(section, page, 1, true)
    end
    -- Every kinformer row carries a number; the floors too.
    for _, row in ipairs{ "| floor: `curl -s -o /dev/null`, one response | ",
                          "| floor: lua-cjson decode of the same objects (pages of 1000) | ",
                          "| kinformer, pages of 500, managedFields stripped (default) | ",
                          "| kinformer, pages of 500, managedFields kept | ",
                          "| kinformer, WatchList, managedFields stripped | ",
                          "| kinformer, WatchList, managedFields kept | ",
                          "| kinformer, no handler, stripped | ",
                          "| kinformer, Lua handler reads metadata.name, stripped | ",
                          "| kinformer, Lua handler reads metadata.name, kept | " } do
      assert.matches(row:gsub("%p", "%%%0") .. "%d", page)
    end
    assert.matches("| 200 | 200 | %d[%d.]* | %d", page)              -- latency, kinformer
    assert.matches("| `store:get%(key%)` | %d", page)
    assert.matches("| `store:list_keys%(%)` | %d", page)
    assert.matches("| by_index%(\"service\", svc%), %d+ services of 1%-10 pods | 1%-10 | %d", page)
    assert.matches("| kinformer | %d+ | %d+ | %d%.%d%d | ", page)      -- S4
    -- A profile, or the reason there is none.
    assert.truthy(page:match("## Where the time goes\n") or out:match("perf is not installed"), page)

    local have_node = io.open(KINFORMER_ROOT .. "/bench/peers/client-node/node_modules/"
      .. "@kubernetes/client-node/package.json")
    if have_node then
      have_node:close()
      assert.matches("| client%-node [%d.]+, one list %(its documented informer%), everything kept | %d", page)
      assert.matches("| client%-node [%d.]+, pages of 500 %(a list function following continue%), "
        .. "everything kept | %d", page)
      assert.matches("| client%-node, JS handler reads metadata.name | %d", page)
      assert.matches("| client%-node | %d+ | %d+ | %d%.%d%d | ", page)
      assert.matches("S1 300 pods, stripped: time to synced at least 10x faster than client-node", page, 1, true)
    else
      assert.matches("NOTE: bench/peers/client-node/node_modules is absent", out, 1, true)
      print("\nNOTE: client-node is not installed (bench/peers/client-node/node_modules): "
        .. "its side of the peers benchmark smoke was skipped; `make bench` installs it")
    end
    -- The data files of the chart; the chart itself where gnuplot is installed.
    for _, name in ipairs{ "s1_time.dat", "s1_rss.dat", "s2_rate.dat", "s2_latency.dat", "s3.dat", "s4.dat" } do
      local d = assert(io.open(dir .. "/" .. name), name)
      assert.matches('^"group" "', d:read("a"))
      d:close()
    end
    -- The fake API servers it started are gone.
    local pids = {}
    for pid in out:gmatch("fake API server with [^\n]- %(pid (%d+)%)") do pids[#pids + 1] = pid end
    assert.is_true(#pids >= 1, out)
    local deadline = os.time() + 5
    for _, pid in ipairs(pids) do
      while alive(pid) and os.time() < deadline do os.execute("sleep 0.1") end
      assert.is_false(alive(pid))
    end
    -- The page can be written again from the saved state, without measuring.
    os.remove(dir .. "/RESULTS.md")
    local p2 = assert(io.popen(("cd %s && LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/%s/?.so;;' "
      .. "%s bench/peers_bench.lua --page-only=%s 2>&1; echo \"exit=$?\""):format(quote(KINFORMER_ROOT),
      build, lua, dir)))
    local out2 = p2:read("a")
    p2:close()
    assert.are.equal(0, tonumber(out2:match("exit=(%d+)%s*$")), out2)
    f = assert(io.open(dir .. "/RESULTS.md"))
    assert.are.equal(page, f:read("a"))
    f:close()

    local gnuplot = io.popen("command -v gnuplot"):read("a") ~= ""
    if gnuplot then
      local png = assert(io.open(dir .. "/results.png", "rb"))
      assert.are.equal("\137PNG", png:read(4))
      png:close()
    else
      assert.matches("gnuplot is not installed", page, 1, true)
    end
  end)
end)

-- The scale benchmark (bench/scale_bench.lua, `make bench-scale`) at a tiny size: every part
-- runs against its replay server and prints its tables; the servers it started are gone.
describe("bench/scale_bench.lua (smoke size)", function()
  it("runs growth, idle informers and the list floor at tiny sizes", function()
    local dir = os.tmpname()
    os.remove(dir)
    local cmd = ("cd %s && LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/lua5.4/?.so;;' "
      .. "timeout -k 5 60 lua5.4 bench/scale_bench.lua --sizes=1000 --events=300 --informers=4 "
      .. "--idle=0.3 --floor-pods=600 --dir=%s 2>&1; echo \"exit=$?\""):format(
      quote(KINFORMER_ROOT), quote(dir))
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    os.execute("rm -rf " .. quote(dir))
    assert.are.equal(0, tonumber(out:match("exit=(%d+)%s*$")), out)
    assert.matches("\n| 1,000 | 1 | ", out, 1, true)              -- the growth row
    assert.matches("\n| 1,000 | none | 300 | ", out, 1, true)    -- its events rows: no table
    assert.matches("\n| 1,000 | every object's | 300 | ", out, 1, true) -- and every table held
    assert.matches("## 4 informers on one client, idle watches", out, 1, true)
    assert.matches("\n| 4 | ", out, 1, true)
    assert.matches("## The list against a replay server: 600 pods, 2 pages of 500", out, 1, true)
    assert.matches("| floor: curl of every page (one connection) |", out, 1, true)
    assert.matches("| kinformer informer, time to synced (stripped) |", out, 1, true)
    -- No server of the run is left (the fake servers and replays it started).
    local pids = out:match("servers started and stopped: ([%d ]+)")
    assert.truthy(pids, out)
    local n = 0
    for pid in pids:gmatch("%d+") do
      n = n + 1
      local deadline = os.time() + 5
      while alive(pid) and os.time() < deadline do os.execute("sleep 0.1") end
      assert.is_false(alive(pid), "server " .. pid .. " still running")
    end
    assert.are.equal(6, n, out) -- growth: empty, fake, replay; idle: a replay of its list; floor: both
  end)
end)

-- The API-bound controller benchmark (bench/manager_writes_bench.lua, `make bench-manager`) at a
-- tiny size: kinformer at 1 and 4 concurrent reconciles (4 reads "not supported by this build"
-- where the manager lacks max_concurrent_reconciles) and, when bench/peers/k8s-operator is
-- installed, the Node operator; the servers it started are gone.
describe("bench/manager_writes_bench.lua (smoke size)", function()
  it("runs the writing controller at 20 ConfigMaps and prints its table", function()
    local have_node = io.open(KINFORMER_ROOT .. "/bench/peers/k8s-operator/node_modules/"
      .. "@dot-i/k8s-operator/package.json")
    if have_node then have_node:close() end
    local cmd = ("cd %s && LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' "
      .. "LUA_CPATH='build/lua5.4/?.so;;' timeout -k 5 60 lua5.4 bench/manager_writes_bench.lua "
      .. "--objects=20 --runs=1 --concurrency=1,4%s 2>&1; echo \"exit=$?\""):format(
      quote(KINFORMER_ROOT), have_node and " --peer" or "")
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    assert.are.equal(0, tonumber(out:match("exit=(%d+)%s*$")), out)
    assert.matches("20 ConfigMaps (primaries) in one namespace; every PATCH stalled 5 ms", out,
      1, true)
    local row = "\n| kinformer%.manager | off %(`qps = %-1`%) | "
    assert.matches(row .. "1 | %d", out)
    assert.truthy(out:match(row .. "4 | %d") or out:match(row .. "4 | not supported by this build"),
      out)
    if have_node then
      assert.matches("\n| @dot%-i/k8s%-operator [%d.]+ | none %(client%-node 0%.20 has none%) | 1 | %d",
        out)
    end
    local pids = out:match("fake API servers started and stopped: ([%d ]+)")
    assert.truthy(pids, out)
    local n = 0
    for pid in pids:gmatch("%d+") do
      n = n + 1
      local deadline = os.time() + 5
      while alive(pid) and os.time() < deadline do os.execute("sleep 0.1") end
      assert.is_false(alive(pid), "server " .. pid .. " still running")
    end
    assert.are.equal(have_node and 3 or 2, n, out)
  end)
end)

-- The controller test case benchmark (bench/testing_bench.lua) at two cases: it runs and prints
-- its figures (no timing asserted).
describe("bench/testing_bench.lua (smoke size)", function()
  it("runs two controller test cases and prints the time per case and its phases", function()
    local p = assert(io.popen(("cd %s && timeout -k 5 60 lua5.4 bench/testing_bench.lua 2 "
      .. "2>&1; echo \"exit=$?\""):format(quote(KINFORMER_ROOT))))
    local out = p:read("a")
    p:close()
    assert.are.equal(0, tonumber(out:match("exit=(%d+)%s*$")), out)
    assert.matches("kinformer%.testing: one controller test case, 2 cases: median [%d.]+ s "
      .. "%(min [%d.]+, max [%d.]+%)", out)
    assert.matches("phases %(medians%): server start with CRD and 3 objects [%d.]+ s", out)
    end)
  end)

-- The sharded manager's benchmark (bench/manager_shards_bench.lua, `make bench-manager-shards`)
-- at a tiny size: 1 and 2 replicas, one failover run; both tables, and the servers it started
-- are gone.
describe("bench/manager_shards_bench.lua (smoke size)", function()
  it("runs 1 and 2 replicas and a failover at 60 ConfigMaps and prints its tables", function()
    local cmd = ("cd %s && timeout -k 5 90 lua5.4 bench/manager_shards_bench.lua --objects=60 "
      .. "--stalls=0.005 --replicas=1,2 --runs=1 --failover-objects=60 --failover-runs=1 --quiet "
      .. "2>&1; echo \"exit=$?\""):format(quote(KINFORMER_ROOT))
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    assert.are.equal(0, tonumber(out:match("exit=(%d+)%s*$")), out)
    assert.matches("\n| 5 ms | 1 | 800 | [%d,]+ | 1%.00x |", out)
    assert.matches("\n| 5 ms | 2 | 1,600 | [%d,]+ | [%d.]+x |", out)
    -- the dead replica's keys, the ring of 2, its keys written (seconds), the target
    assert.matches("\n| 60 | %d+ | [%d.]+ | [%d.]+ | [%d.]+ | [%d.]+ | [%d.]+ | 5 |", out)
    local pids = out:match("fake API servers started and stopped: ([%d ]+)")
    assert.truthy(pids, out)
    local n = 0
    for pid in pids:gmatch("%d+") do
      n = n + 1
      local deadline = os.time() + 5
      while alive(pid) and os.time() < deadline do os.execute("sleep 0.1") end
      assert.is_false(alive(pid), "server " .. pid .. " still running")
    end
    assert.are.equal(3, n, out)
  end)
end)
