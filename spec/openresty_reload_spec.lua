-- The shared model inside nginx (Debian's nginx) around the moments a cache is not there yet or
-- changes hands: the store API before the writer created the store, a store that requests read
-- without handlers under churn (the segment's use stays bounded), and nginx -s reload under
-- load: every request answered from a complete cache, synced telling the truth.
local fake = require "support.fake_apiserver"
local openresty = require "support.openresty"
local cjson = require "cjson"
local socket = require "socket"

local now, sleep = socket.gettime, socket.sleep

local available, why = openresty.available()
if not available then
  describe("kinformer.ngx shared model: reload", function() pending("skipped: " .. why) end)
  return
end

-- The probe: pods in the shared model, an index by node, handlers only when KINFORMER_HANDLERS
-- is set. /read answers what the store API returns; /serve answers 200 with the store's len
-- when synced and complete (len = ?want), else 503; /seg the segment's use after a full GC.
local PROBE = [[
local kngx = require "kinformer.ngx"
local cjson = require "cjson"
local M = {}
local handled = 0
function M.init()
  kngx.shared_memory(os.getenv("KINFORMER_SHM") or "16m")
end
function M.init_worker()
  local ok, err = kngx.start{
    model = "shared", client = { server = os.getenv("KINFORMER_SERVER") }, interval = 0.05,
    informers = { pods = { resource = os.getenv("KINFORMER_RESOURCE") or "pods", backoff_max = 1 } },
    setup = function(infs)
      assert(infs.pods:add_indexers{ by_node = function(p) return { p.spec.nodeName or "" } end })
    end,
    handlers = os.getenv("KINFORMER_HANDLERS") and { pods = {
      on_add = function() handled = handled + 1 end,
    } } or nil,
  }
  if not ok then ngx.log(ngx.WARN, "probe: start: ", err) end
end
function M.read()
  local st = kngx.store("pods")
  ngx.say(cjson.encode{
    by_index = #st:by_index("by_node", "node-1"), len = st:len(), get = st:get("a/b") == nil,
    list = #st:list(), keys = #st:list_keys(), values = #st:list_index_func_values("by_node"),
    synced = kngx.synced(), created = st:status().created,
  })
end
function M.serve()
  local st = kngx.store("pods")
  local want = tonumber(ngx.var.arg_want)
  if not kngx.synced() then return ngx.exit(503) end
  local n = st:len()
  if n ~= want then return ngx.exit(503) end
  ngx.say(n)
end
function M.seg()
  collectgarbage()
  collectgarbage()
  local st = kngx.store("pods")
  local status = st:status()
  ngx.say(cjson.encode{ used = status.segment.used, held = status.held, pid = ngx.worker.pid(),
                        synced = kngx.synced(), len = st:len() })
end
return M
]]

local function start_nginx(dir, opts)
  local f = assert(io.open(dir .. "/reload_probe.lua", "w"))
  f:write(PROBE)
  f:close()
  local port = openresty.free_port()
  local env = { KINFORMER_SERVER = opts.server }
  for k, v in pairs(opts.env or {}) do env[k] = v end
  local conf = openresty.lua_conf{ workers = opts.workers, dir = dir, port = port,
    env = { "KINFORMER_SERVER", "KINFORMER_SHM", "KINFORMER_HANDLERS", "KINFORMER_RESOURCE" }, http = [[
    lua_shared_dict kinformer 1m;
    init_by_lua_block { require("reload_probe").init() }
    init_worker_by_lua_block { require("reload_probe").init_worker() }]],
    locations = [[
        location = /read { content_by_lua_block { require("reload_probe").read() } }
        location = /serve { content_by_lua_block { require("reload_probe").serve() } }
        location = /seg { content_by_lua_block { require("reload_probe").seg() } }]] }
  -- One listening socket that the master hands from one generation of workers to the next: with
  -- reuseport each worker has its own, and the connections queued on an old worker's are reset
  -- when it closes it at a reload (nginx's behaviour, not what is tested here).
  conf = conf:gsub(" reuseport;", ";")
  local inst = openresty.start{ name = "reload_probe", env = env, conf = conf }
  inst.port, inst.workers = port, opts.workers
  return inst
end

local function get_json(inst, path)
  local code, body = openresty.get(inst.port, "localhost", path)
  assert.equals(200, code, "GET " .. path .. ": " .. tostring(code) .. " " .. tostring(body))
  return cjson.decode(body)
end

describe("kinformer.ngx shared model", function()
  local srv, dir

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

  it("before the writer created a store, the store API answers as an empty store", function()
    -- No API server, and a resource only discovery can resolve: the writer cannot start, the
    -- store never gets created.
    local inst = start_nginx(dir, { server = "http://127.0.0.1:" .. openresty.free_port(),
      workers = 2, env = { KINFORMER_RESOURCE = "widgets.example.com" } })
    finally(function() inst:stop() end)
    for _ = 1, 6 do
      local d = get_json(inst, "/read")
      assert.same({ by_index = 0, len = 0, get = true, list = 0, keys = 0, values = 0,
                    synced = false, created = false }, d)
    end
  end)

  it("a store that requests read without handlers is polled: what a worker holds stays bounded",
    function()
      local inst = start_nginx(dir, { server = srv.url, workers = 1 })
      finally(function()
        srv:churn(0)
        inst:stop()
      end)
      local deadline = now() + 10
      local d
      repeat
        d = get_json(inst, "/read")
        if not d.synced then sleep(0.05) end
      until d.synced or now() > deadline
      assert.is_true(d.synced)
      local function read_for(seconds)
        local t = now() + seconds
        while now() < t do
          get_json(inst, "/read")
          sleep(0.01)
        end
        sleep(0.3)
        return get_json(inst, "/seg")
      end
      srv:churn(400)
      local s = read_for(3)
      srv:churn(0)
      -- What the worker holds is what the segment cannot reuse. Without polling, its cache of
      -- tables keeps every pod the churn deleted (hundreds in these 3 s); polled, it keeps the
      -- pods there are, and the versions the last requests read that the GC has not reached.
      assert.is_true(s.held <= 2 * s.len + 10,
        ("the worker holds %d records for %d pods"):format(s.held, s.len))
    end)
end)
