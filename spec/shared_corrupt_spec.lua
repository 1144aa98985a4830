-- A shared segment whose words a stray write changed, read from Lua: every read method and poll
-- returns the data or nil, err, "ECORRUPT" (logged once, at error level), never crashes. Each
-- trial runs in a child Lua (a crash there fails the trial, not the spec): it fills a segment
-- kept in a memfd (core.shm_named), then writes garbage into the segment through the memfd's
-- /proc entry, as a stray write from another process would.
local proc = require "support.proc"

local CHILD = [=[
package.path = ROOT .. "/lua/?.lua;" .. ROOT .. "/lua/?/init.lua;" .. package.path
package.cpath = ROOT .. "/build/lua5.4/?.so;" .. package.cpath
local core = require "kinformer.core"
local kinformer = require "kinformer"
local logged = {}
kinformer.set_logger(function(level, msg) logged[#logged + 1] = level .. " " .. msg end)
math.randomseed(SEED)

local seg = core.shm_named("spec.corrupt", 1 << 20)
local store = kinformer.store{ indexers = { by_node = function(p) return { p.spec.nodeName } end } }
local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
local writer = core.processor(fifo, store)
assert(writer:mirror(seg, 1))
for i = 1, 200 do
  fifo:update{ apiVersion = "v1", kind = "Pod", spec = { nodeName = "n" .. (i % 7) },
    metadata = { namespace = "ns", name = "p" .. i, resourceVersion = tostring(i) } }
end
writer:dispatch(1000)
for i = 1, 50 do fifo:delete{ metadata = { namespace = "ns", name = "p" .. i } } end
writer:dispatch(1000)
local reader = seg:store(1)
reader:poll(100000, function() end)

-- The memfd behind the segment, through /proc: the same pages as the mapping.
local pid = io.open("/proc/self/stat"):read("l"):match("^(%d+)")
local ls = io.popen("ls -l /proc/" .. pid .. "/fd/")
local fdnum
for line in ls:lines() do
  fdnum = fdnum or line:match(" (%d+) %-> /memfd:kinformer:spec%.corrupt")
end
ls:close()
local f = assert(io.open("/proc/" .. pid .. "/fd/" .. assert(fdnum, "no memfd"), "r+b"))
local used = seg:stats().used
-- Words of the data area (past the header and reader table, 4 KiB in) set to stray values.
for _ = 1, WORDS do
  local at = 4096 + 8 * math.random(0, (used + 8192) // 8)
  local v = ({ string.pack("<I8", math.random(0, 1 << 40)), string.rep("\255", 8),
               string.pack("<I8", 8 * math.random(0, (1 << 20) // 8)), string.rep("\0", 8) })
            [math.random(1, 4)]
  f:seek("set", at)
  f:write(v)
end
f:close()

local corrupt, calls = 0, 0
local function check(ok, a, err, code)
  calls = calls + 1
  if not ok then error("a read raised: " .. tostring(a)) end
  if a == nil and code == "ECORRUPT" then corrupt = corrupt + 1 end
end
for i = 1, 200 do check(pcall(reader.get_by_key, reader, "ns/p" .. i)) end
for n = 0, 7 do check(pcall(reader.by_index, reader, "by_node", "n" .. n)) end
check(pcall(reader.list, reader))
check(pcall(reader.list_keys, reader))
check(pcall(reader.index_keys, reader, "by_node", "n1"))
check(pcall(reader.list_index_func_values, reader, "by_node"))
check(pcall(reader.len, reader))
check(pcall(reader.poll, reader, 100000, function() end))
local fresh = seg:store(1)
check(pcall(fresh.poll, fresh, 100000, function() end))
local lines = 0
for _, l in ipairs(logged) do if l:find("the shared memory is corrupt", 1, true) then lines = lines + 1 end end
io.write(("done %d %d %d\n"):format(calls, corrupt, lines))
]=]

describe("a corrupted shared segment", function()
  local function trial(seed, words)
    local script = ("ROOT = %q SEED = %d WORDS = %d\n"):format(KINFORMER_ROOT, seed, words) .. CHILD
    local p = io.popen("timeout -s KILL 30 lua5.4 -e " .. proc.quote(script) .. " 2>&1")
    local out = p:read("a")
    local ok, how, code = p:close()
    return out, ok, how, code
  end

  it("is read as data or ECORRUPT, never a crash, over many stray writes", function()
    local total_corrupt, trials = 0, 40
    for seed = 1, trials do
      local out, ok, how, code = trial(seed, 10 + 10 * (seed % 10))
      local calls, corrupt, lines = out:match("done (%d+) (%d+) (%d+)")
      assert(ok and calls, ("trial %d: the child ended %s %s:\n%s"):format(seed, tostring(how),
        tostring(code), out))
      corrupt, lines = tonumber(corrupt), tonumber(lines)
      total_corrupt = total_corrupt + corrupt
      -- every reader that met corruption said so once: at most one line per reader (two)
      assert.truthy(lines <= 2, out)
      if corrupt > 0 then assert.truthy(lines >= 1, out) end
    end
    assert.truthy(total_corrupt > 0, "no trial met the corruption")
  end)
end)
