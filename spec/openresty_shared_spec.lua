-- The shared model inside nginx (Debian's nginx, 4 workers): one process watches pods and
-- mirrors them into shared memory, every worker reads the store and runs the handlers. Under
-- the fake server's churn, every worker's store and the table its handlers keep must end equal
-- to the server's pods: plainly, after the writer was killed with SIGKILL mid-churn (nginx
-- respawns it, it takes the store over and relists), after a reload and after a binary
-- upgrade, both mid-churn.
local fake = require "support.fake_apiserver"
local openresty = require "support.openresty"
local cjson = require "cjson"
local socket = require "socket"

local now, sleep = socket.gettime, socket.sleep

local available, why = openresty.available()
if not available then
  describe("kinformer.ngx shared model", function() pending("skipped: " .. why) end)
  return
end

local WORKERS = 4

local PROBE = [[
local kngx = require "kinformer.ngx"
local kinformer = require "kinformer"
local cjson = require "cjson"
local M = {}
local handled, by_node_ok = {}, true
local function key(o) return kinformer.key_of(o) end
function M.init()
  kngx.enable_agent()
  kngx.shared_memory("32m")
end
function M.init_worker()
  assert(kngx.start{
    model = "shared", client = { server = os.getenv("KINFORMER_SERVER") }, interval = 0.05,
    informers = { pods = { resource = "pods", backoff_max = 1 } },
    setup = function(infs)
      assert(infs.pods:add_indexers{ by_node = function(p) return { p.spec.nodeName or "" } end })
    end,
    handlers = { pods = {
      on_add = function(o) handled[key(o)] = o.metadata.resourceVersion end,
      on_update = function(_, o) handled[key(o)] = o.metadata.resourceVersion end,
      on_delete = function(o) handled[key(o)] = nil end,
    } },
  })
end
function M.dump()
  local st, store, bad = kngx.store("pods"), {}, 0
  local list = st and st:list()
  for _, o in ipairs(list or {}) do store[key(o)] = o.metadata.resourceVersion end
  -- every pod listed under a node carries that node
  for _, node in ipairs(st and st:list_index_func_values("by_node") or {}) do
    for _, p in ipairs(st:by_index("by_node", node)) do
      if (p.spec.nodeName or "") ~= node then bad = bad + 1 end
    end
  end
  ngx.say(cjson.encode{ pid = ngx.worker.pid(), store = store, handled = handled,
                        synced = kngx.synced(), bad_index = bad,
                        status = st and st:status() or cjson.null })
end
return M
]]

describe("kinformer.ngx shared model, " .. WORKERS .. " workers", function()
  local srv, inst, dir

  -- One dump of each worker (requests until every pid answered).
  local function dumps()
    local seen, n, deadline = {}, 0, now() + 5
    repeat
      local code, body = openresty.get(inst.port, "localhost", "/dump")
      if code == 200 then
        local d = cjson.decode(body)
        if not seen[d.pid] then seen[d.pid], n = d, n + 1 end
      end
    until n == WORKERS or now() > deadline
    assert.equals(WORKERS, n, "not every worker answered")
    return seen
  end

  -- Waits until every worker's store and handled table equal the server's pods.
  local function converge(timeout, what)
    local deadline = now() + (timeout or 10)
    local want, last
    repeat
      want = srv:versions("pods")
      local all = true
      last = dumps()
      for _, d in pairs(last) do
        assert.equals(0, d.bad_index)
        if not (d.synced and fake.same_versions(want, d.store) and fake.same_versions(want, d.handled)) then
          all = false
        end
      end
      if all then return last end
      sleep(0.1)
    until now() > deadline
    local sample = select(2, next(last))
    error(what .. ": the workers never matched the server (" .. tostring(#srv:state("pods").items) ..
      " pods; a worker: synced " .. tostring(sample.synced) .. ", status " ..
      cjson.encode(sample.status) .. ")")
  end

  local function writer_pid()
    for _, c in ipairs(inst:children()) do
      if not c.shutting_down and openresty.threads(c.pid) == 3 then return c.pid end
    end
  end

  setup(function()
    srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    local f = assert(io.open(dir .. "/shared_probe.lua", "w"))
    f:write(PROBE)
    f:close()
    local port = openresty.free_port()
    inst = openresty.start{ name = "shared", env = { KINFORMER_SERVER = srv.url },
      conf = openresty.lua_conf{ workers = WORKERS, dir = dir, port = port,
        env = { "KINFORMER_SERVER" }, http = [[
    lua_shared_dict kinformer 1m;
    init_by_lua_block { require("shared_probe").init() }
    init_worker_by_lua_block { require("shared_probe").init_worker() }]],
        locations = [[
        location = /dump { content_by_lua_block { require("shared_probe").dump() } }]] } }
    inst.port = port
    converge(10, "the first sync")
  end)

  teardown(function()
    if srv then srv:churn(0) end
    if inst then inst:stop() end
    if srv then srv:stop() end
    if dir then os.execute("rm -rf " .. dir) end
  end)

  it("every worker's store and handlers follow the server under churn", function()
    srv:churn(300)
    sleep(2)
    srv:churn(0)
    local d = converge(10, "after churn")
    local _, one = next(d)
    assert.is_true(one.status.events > 0)
    assert.equals(0, one.status.segment.alloc_failures)
  end)

  it("survives SIGKILL of the writer mid-churn: a respawned writer takes over", function()
    local victim = writer_pid()
    assert.is_not_nil(victim, "no process runs the informer")
    srv:churn(300)
    sleep(0.7)
    assert(os.execute("kill -9 " .. victim))
    sleep(1.5)
    srv:churn(0)
    converge(15, "after the writer was killed")
    local st = cjson.decode((select(2, openresty.get(inst.port, "localhost", "/dump"))))
    assert.is_true(st.status.segment.takeovers >= 1)
    assert.is_not.equals(victim, writer_pid())
  end)

  it("serves through a reload mid-churn; the new workers converge on a new segment", function()
    srv:churn(300)
    sleep(0.5)
    inst:reload()
    sleep(1)
    srv:churn(0)
    converge(15, "after the reload")
  end)

  it("serves through a binary upgrade (USR2, then QUIT of the old master) mid-churn", function()
    local old, new = inst.pid, nil
    srv:churn(300)
    assert(os.execute("kill -USR2 " .. old))
    local deadline = now() + 10
    repeat
      sleep(0.05)
      local f = io.open(inst.prefix .. "/logs/nginx.pid")
      if f then
        new = tonumber(f:read("a"))
        f:close()
      end
    until (new and new ~= old) or now() > deadline
    assert.is_true(new ~= nil and new ~= old, "no new master after USR2")
    sleep(1) -- both generations serve: the new one from its own segment
    dumps()
    assert(os.execute("kill -QUIT " .. old))
    deadline = now() + 10
    while os.execute("kill -0 " .. old .. " 2>/dev/null") and now() < deadline do sleep(0.05) end
    inst.pid = new
    srv:churn(0)
    converge(15, "after the binary upgrade")
  end)

  it("logged no error and no crash but the one SIGKILL", function()
    local log = inst:log()
    for _, bad in ipairs{ "%[emerg%]", "%[alert%]", "%[crit%]", "%[error%]", "core dumped" } do
      local line = log:match("[^\n]*" .. bad .. "[^\n]*")
      -- the SIGKILL'ed worker is reported by the master at [alert]
      if line and not line:find("exited on signal 9", 1, true) then
        assert.is_nil(line, "error log: " .. line)
      end
    end
    assert.equals(1, select(2, log:gsub("exited on signal 9", "")))
  end)
end)
