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
    assert.matches("targets (issue 5):", out, 1, true)
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
