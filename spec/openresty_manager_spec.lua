-- kinformer.manager inside nginx (Debian's nginx, LuaJIT): mgr:step() from a timer of one
-- worker, reconciles as tasks whose REST calls run on the client's I/O thread, so with
-- max_concurrent_reconciles = 4 four writes stalled by the server are in flight at once while
-- the worker keeps serving requests.
local fake = require "support.fake_apiserver"
local openresty = require "support.openresty"
local cjson = require "cjson"
local socket = require "socket"

local available, why = openresty.available()
if not available then
  describe("kinformer.manager in nginx", function() pending("skipped: " .. why) end)
  return
end

local PROBE = [[
local kinformer = require "kinformer"
local M = {}
local done, active, max_active, errors, ticks = 0, 0, 0, 0, 0
function M.init_worker()
  if ngx.worker.id() ~= 0 then return end
  kinformer.set_logger(function() end)
  local client = assert(kinformer.client{ server = os.getenv("KINFORMER_SERVER") })
  local mgr = kinformer.manager{ client = client }
  mgr:controller{ name = "cms", resource = "configmaps", namespace = "ngx",
    max_concurrent_reconciles = 4,
    reconcile = function(req, ctx)
      active = active + 1
      if active > max_active then max_active = active end
      local ok, err = ctx.client:patch("configmaps", req.key,
        { metadata = { annotations = { ["seen.example.com/by"] = "nginx" } } })
      active = active - 1
      if not ok then errors = errors + 1 return nil, err end
      done = done + 1
    end }
  local function loop(premature)
    if premature then return end
    while not ngx.worker.exiting() do
      local w = mgr:step()
      if not w then return end
      ticks = ticks + 1
      ngx.sleep(math.max(0.001, math.min(w, 0.01)))
    end
    mgr:stop()
  end
  assert(ngx.timer.at(0, loop))
end
function M.status()
  ngx.say(require("cjson").encode{ done = done, max_active = max_active, errors = errors,
                                   ticks = ticks, pid = ngx.worker.pid(), id = ngx.worker.id() })
end
return M
]]

describe("kinformer.manager in nginx", function()
  local srv, inst, dir

  setup(function()
    srv = fake.start{ quiet = true }
    local items = {}
    for i = 1, 8 do
      items[i] = { apiVersion = "v1", kind = "ConfigMap",
                   metadata = { namespace = "ngx", name = "c" .. i } }
    end
    srv:objects(items, "configmaps")
    srv:fault{ method = "PATCH", path = "/namespaces/ngx/configmaps/", times = -1,
               action = { type = "stall", seconds = 0.5 } }
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    local f = assert(io.open(dir .. "/mgr_probe.lua", "w"))
    f:write(PROBE)
    f:close()
    local port = openresty.free_port()
    inst = openresty.start{ name = "mgr_probe", env = { KINFORMER_SERVER = srv.url },
      conf = openresty.lua_conf{ workers = 1, dir = dir, port = port,
        env = { "KINFORMER_SERVER" }, http = [[
    init_worker_by_lua_block { require("mgr_probe").init_worker() }]],
        locations = [[
        location = /status { content_by_lua_block { require("mgr_probe").status() } }]] } }
    inst.port = port
  end)
  teardown(function()
    if inst then inst:stop() end
    if srv then srv:stop() end
    if dir then os.execute("rm -rf " .. dir) end
  end)

  it("runs 4 reconciles at once over stalled writes and keeps serving meanwhile", function()
    -- Objects written so far (a reconcile can run again for its own write's event, so the
    -- count of reconciles done says nothing of how many objects were written).
    local function patched()
      local paths, n = {}, 0
      for _, r in ipairs(srv:requests()) do
        if r.method == "PATCH" and r.path:find("/namespaces/ngx/configmaps/", 1, true)
           and not paths[r.path] then
          paths[r.path], n = true, n + 1
        end
      end
      return n
    end
    local st, served = nil, 0
    local deadline = socket.gettime() + 10
    repeat
      local code, body = openresty.get(inst.port, "localhost", "/status")
      if code == 200 then
        served = served + 1
        st = cjson.decode(body)
      end
      socket.sleep(0.05)
    until (st and st.done >= 8 and patched() == 8) or socket.gettime() > deadline
    assert.truthy(st, inst:log())
    assert.is_true(st.done >= 8, inst:log())
    assert.equals(4, st.max_active)
    assert.equals(0, st.errors)
    assert.is_true(served >= 10) -- the worker answered while the writes stalled
    assert.equals(8, patched()) -- every object written
  end)
end)
