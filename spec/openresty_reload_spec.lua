-- The shared model inside nginx (Debian's nginx) around the moments a cache is not there yet or
-- changes hands: the store API before the writer created the store, a store that requests read
-- without handlers under churn (the segment's use stays bounded), and nginx -s reload under
-- load: every request answered from a complete cache, synced telling the truth.
local fake = require "support.fake_apiserver"
local openresty = require "support.openresty"
local load = require "support.serve_load"
local socket = require "socket"

local now, sleep = socket.gettime, socket.sleep
local wait_serving, hammer, show, failures = load.wait_serving, load.hammer, load.show, load.failures
local get_json = load.get_json

local available, why = openresty.available()
if not available then
  describe("kinformer.ngx shared model: reload", function() pending("skipped: " .. why) end)
  return
end

-- The probe: pods in the shared model, an index by node, handlers only when KINFORMER_HANDLERS
-- is set. /read answers what the store API returns; /serve answers 200 with the store's len
-- when synced and complete (len = ?want), 503 when not synced, 409 when synced but incomplete;
-- /seg the segment's use after a full GC.
local PROBE = [[
local kngx = require "kinformer.ngx"
local cjson = require "cjson"
local M = {}
local handled = 0
function M.init(size)
  kngx.shared_memory(size)
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
  if n ~= want then return ngx.exit(409) end -- synced, but not the whole cache
  ngx.say(n)
end
function M.seg()
  collectgarbage()
  collectgarbage()
  local st = kngx.store("pods")
  local status = st:status()
  ngx.say(cjson.encode{ used = status.segment.used, held = status.held, pid = ngx.worker.pid(),
                        size = status.segment.size,
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
    env = { "KINFORMER_SERVER", "KINFORMER_HANDLERS", "KINFORMER_RESOURCE" }, http = [[
    lua_shared_dict kinformer 1m;
    init_by_lua_block { require("reload_probe").init("16m") }
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

  describe("nginx -s reload", function()
    local inst, want

    setup(function()
      -- Every list of pods takes 2 s: the new writer after a reload cannot have the content
      -- before that.
      srv:fault{ path = "/pods$", watch = false, times = -1,
                 action = { type = "stall", seconds = 2 } }
      inst = start_nginx(dir, { server = srv.url, workers = 4 })
      want = #srv:state("pods").items
      wait_serving(inst, want, 10)
    end)

    teardown(function()
      srv:clear_faults()
      if inst then inst:stop() end
    end)

    it("under load, every request through 3 reloads is served from a complete cache", function()
      -- wrk, 8 connections (Connection: close), in the background, plus this loop's requests
      local wrk = load.wrk_start(inst, want, 9)
      local codes = {}
      hammer(inst, want, 0.5, codes)
      for _ = 1, 3 do
        local old = {}
        for _, c in ipairs(inst:children()) do old[c.pid] = true end
        inst:signal("reload")
        hammer(inst, want, 2.5, codes)
        for _, c in ipairs(inst:children()) do
          assert.is_nil(old[c.pid], "an old worker still runs 2.5 s after the reload")
        end
      end
      local w = load.wrk_result(wrk)
      local served = load.count(codes, function() return true end)
      if os.getenv("KINFORMER_RELOAD_FIGURES") then
        io.stderr:write(("wrk: %s requests, %d non-2xx; loop: %s\n"):format(tostring(w.total),
          w.non2xx, show(codes)))
      end
      assert.is_true(w.total and w.total > 1000, "wrk sent too few requests: " .. w.out)
      assert.is_true(served > 500, "too few requests: " .. show(codes))
      assert.equals(0, failures(codes), "failed requests: " .. show(codes))
      assert.equals(0, w.non2xx, "wrk: " .. w.out)
      -- the new writer took the segment over (no [error] or worse in the log)
      local log = inst:log()
      assert.matches("took the shared memory over", log)
      assert.is_nil(log:match("[^\n]*%[error%][^\n]*"))
      assert.is_nil(log:match("[^\n]*%[crit%][^\n]*"))
      assert.is_nil(log:match("[^\n]*%[alert%][^\n]*"))
    end)

    it("a reload with another size maps a new segment: synced is false until it is complete",
      function()
        local path = inst.prefix .. "/nginx.conf"
        local f = assert(io.open(path))
        local conf = f:read("a")
        f:close()
        f = assert(io.open(path, "w"))
        f:write((conf:gsub('init%("16m"%)', 'init("24m")')))
        f:close()
        inst:reload()
        -- the new workers have an empty segment; the new writer's list takes 2 s
        local d = get_json(inst, "/seg")
        assert.is_false(d.synced)
        local codes = hammer(inst, want, 0.3)
        assert.is_nil(codes[200], "served before the new segment was complete")
        wait_serving(inst, want, 10)
        hammer(inst, want, 0.3, codes)
        -- no worker said synced while its cache was not complete
        assert.is_nil(codes[409], show(codes))
        assert.equals(24 * 1024 * 1024, (get_json(inst, "/seg").size))
      end)
  end)
end)
