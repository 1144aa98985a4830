-- The shared model inside nginx (Debian's nginx, 4 workers): one process watches pods and
-- mirrors them into shared memory, every worker reads the store and runs the handlers. Under
-- the fake server's churn, every worker's store and the table its handlers keep must end equal
-- to the server's pods: plainly, after the writer was killed with SIGKILL mid-churn (nginx
-- respawns it, it takes the store over and relists), after a reload and after a binary
-- upgrade, both mid-churn. Then with a privileged agent as the writer (3 workers, the process
-- type faked for worker 0), killed mid-churn too.
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
                        role = require("kinformer.ngx.process").role(),
                        status = st and st:status() or cjson.null })
end
return M
]]

-- The same probe in an nginx whose worker 0 says it is the privileged agent: OpenResty's nginx
-- patch that makes that process cannot be had here (Debian's nginx), so ngx.process is wrapped
-- before kinformer.ngx loads; the rest (the agent mirrors and serves no handler, the workers
-- read) runs as it would.
local AGENT_PROBE = [[
local real = require "ngx.process"
package.loaded["ngx.process"] = setmetatable({
  enable_privileged_agent = function() return true end,
  type = function()
    local t = real.type()
    if t == "worker" and ngx.worker.id() == 0 then return "privileged agent" end
    return t
  end,
}, { __index = real })
]] .. PROBE

-- Starts nginx with `workers` workers on a probe module written to dir (name: its file).
local function start_nginx(srv, dir, name, probe, workers)
  local f = assert(io.open(dir .. "/" .. name .. ".lua", "w"))
  f:write(probe)
  f:close()
  local port = openresty.free_port()
  local inst = openresty.start{ name = name, env = { KINFORMER_SERVER = srv.url },
    conf = openresty.lua_conf{ workers = workers, dir = dir, port = port,
      env = { "KINFORMER_SERVER" }, http = ([[
    lua_shared_dict kinformer 1m;
    init_by_lua_block { require("%s").init() }
    init_worker_by_lua_block { require("%s").init_worker() }]]):format(name, name),
      locations = ([[
        location = /dump { content_by_lua_block { require("%s").dump() } }]]):format(name) } }
  inst.port = port
  inst.workers = workers
  return inst
end

-- One dump of each worker of inst (requests until every pid answered).
local function dumps(inst)
  local seen, n, deadline = {}, 0, now() + 5
  repeat
    local code, body = openresty.get(inst.port, "localhost", "/dump")
    if code == 200 then
      local d = cjson.decode(body)
      if not seen[d.pid] then seen[d.pid], n = d, n + 1 end
    end
  until n == inst.workers or now() > deadline
  assert.equals(inst.workers, n, "not every worker answered")
  return seen
end

-- Waits until every reading worker's store and handled table equal the server's pods.
local function converge(srv, inst, timeout, what)
  local deadline = now() + (timeout or 10)
  local want, last
  repeat
    want = srv:versions("pods")
    local all = true
    last = dumps(inst)
    for _, d in pairs(last) do
      assert.equals(0, d.bad_index)
      if d.role ~= "agent" and not (d.synced and fake.same_versions(want, d.store) and
                                    fake.same_versions(want, d.handled)) then
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

-- The live process that runs the informer (its client's I/O and scanner threads: 3 in all).
local function writer_pid(inst)
  for _, c in ipairs(inst:children()) do
    if not c.shutting_down and openresty.threads(c.pid) == 3 then return c.pid end
  end
end

describe("kinformer.ngx shared model", function()
  local srv, dir -- one API server and probe folder for both nginx instances

  setup(function()
    srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
  end)

  teardown(function()
    if srv then srv:stop() end
    if dir then os.execute("rm -rf " .. dir) end
  end)

  describe(WORKERS .. " workers", function()
    local inst

    setup(function()
      inst = start_nginx(srv, dir, "shared_probe", PROBE, WORKERS)
      converge(srv, inst, 10, "the first sync")
    end)

    teardown(function()
      srv:churn(0)
      if inst then inst:stop() end
    end)

    it("every worker's store and handlers follow the server under churn", function()
      srv:churn(300)
      sleep(2)
      srv:churn(0)
      local d = converge(srv, inst, 10, "after churn")
      local _, one = next(d)
      assert.is_true(one.status.events > 0)
      assert.equals(0, one.status.segment.alloc_failures)
    end)

    it("survives SIGKILL of the writer mid-churn: a respawned writer takes over", function()
      local victim = writer_pid(inst)
      assert.is_not_nil(victim, "no process runs the informer")
      srv:churn(300)
      sleep(0.7)
      assert(os.execute("kill -9 " .. victim))
      sleep(1.5)
      srv:churn(0)
      converge(srv, inst, 15, "after the writer was killed")
      local st = cjson.decode((select(2, openresty.get(inst.port, "localhost", "/dump"))))
      assert.is_true(st.status.segment.takeovers >= 1)
      assert.is_not.equals(victim, writer_pid(inst))
    end)

    it("serves through a reload mid-churn; the new workers converge on a new segment", function()
      srv:churn(300)
      sleep(0.5)
      inst:reload()
      sleep(1)
      srv:churn(0)
      converge(srv, inst, 15, "after the reload")
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
      sleep(1) -- both generations serve the same segment (the new master inherited it)
      dumps(inst)
      assert(os.execute("kill -QUIT " .. old))
      deadline = now() + 10
      while os.execute("kill -0 " .. old .. " 2>/dev/null") and now() < deadline do sleep(0.05) end
      inst.pid = new
      srv:churn(0)
      converge(srv, inst, 15, "after the binary upgrade")
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

  describe("a privileged agent as the writer (process type faked), 3 workers", function()
    local inst

    setup(function()
      inst = start_nginx(srv, dir, "agent_probe", AGENT_PROBE, 3)
    end)

    teardown(function()
      srv:churn(0)
      if inst then inst:stop() end
    end)

    it("the agent mirrors, the workers read and follow, also after the agent was killed", function()
      local d = converge(srv, inst, 10, "the first sync")
      local agent
      for pid, one in pairs(d) do
        if one.role == "agent" then
          agent = pid
          assert.is_nil(next(one.store)) -- it reads nothing and runs no handler
          assert.is_nil(next(one.handled))
        end
      end
      assert.is_not_nil(agent, "no process took the agent's role")
      assert.equals(agent, writer_pid(inst))
      srv:churn(300)
      sleep(0.7)
      assert(os.execute("kill -9 " .. agent))
      sleep(1.5)
      srv:churn(0)
      d = converge(srv, inst, 15, "after the agent was killed")
      local _, worker = next(d)
      if worker.role == "agent" then _, worker = next(d, _) end
      assert.is_true(worker.status.segment.takeovers >= 1)
      assert.is_not.equals(agent, writer_pid(inst))
      local log = inst:log()
      assert.is_nil(log:match("[^\n]*%[error%][^\n]*"))
      assert.matches("started 1 informer%(s%) in agent %(model shared", log)
    end)
  end)
end)
