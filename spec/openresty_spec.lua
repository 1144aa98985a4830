-- kinformer inside nginx: examples/openresty (routing by Host with kinformer.ngx.balancer over
-- EndpointSlices) end to end.
--
-- The fake API server (sample cluster plus the slices below), three tiny backends on
-- 127.0.0.2-4 (one port, one nginx) and the example's nginx with 2 workers, all on loopback in
-- temporary prefixes, all stopped at the end, pass or fail. Each `it` starts from the baseline
-- slices and the blocks run in order (one nginx per model). The models name the port three
-- ways (KINFORMER_PORT_NAME): shared not at all (the only port), worker by number, agent by name.
--
--   make test-openresty     (or: lua5.4 /usr/bin/busted --helper=spec/helper.lua spec/openresty_spec.lua)
--   KINFORMER_SPEC_VERBOSE=1 prints how long each change took to reach every worker;
--   KINFORMER_KEEP_NGINX=1 keeps the nginx prefixes (logs) for a look after a failure.
local fake = require "support.fake_apiserver"
local openresty = require "support.openresty"
local set_of, keys = openresty.set_of, openresty.keys
local cjson = require "cjson"
local socket = require "socket"

local now, sleep = socket.gettime, socket.sleep

local B2, B3, B4 = "127.0.0.2", "127.0.0.3", "127.0.0.4"
local SLICES = "/apis/discovery.k8s.io/v1/namespaces/demo/endpointslices/"

local available, why = openresty.available()
if not available then
  describe("examples/openresty", function() pending("skipped: " .. why) end)
  return
end

-- An EndpointSlice of service demo/<svc>: eps = { { addr, ready }, ... }
local function slice(name, svc, port, eps)
  local endpoints = {}
  for i, e in ipairs(eps) do
    endpoints[i] = { addresses = { e[1] }, conditions = { ready = e[2], serving = e[2],
                     terminating = false }, nodeName = "node-" .. i }
  end
  return {
    apiVersion = "discovery.k8s.io/v1", kind = "EndpointSlice",
    metadata = { name = name, namespace = "demo",
                 labels = { ["kubernetes.io/service-name"] = svc } },
    addressType = "IPv4",
    ports = { { name = "http", port = port, protocol = "TCP" } },
    endpoints = endpoints,
  }
end

-- Baseline: web has B2 ready and B3 not ready in web-a, B4 ready in web-b; "down" has only a
-- not-ready endpoint.
local function baseline(port)
  return {
    slice("web-a", "web", port, { { B2, true }, { B3, false } }),
    slice("web-b", "web", port, { { B4, true } }),
    slice("down-a", "down", port, { { B4, false } }),
  }
end



-- The answer of unavailable(): code, reason header, body.
local function reason_of(raw)
  return raw and raw:match("\r\nX%-Kinformer%-Reason: ([^\r]+)")
end

local function describe_model(model)
  describe("examples/openresty, model " .. model, function()
    local srv, backends, router, port, api_port, target
    local get = function(host, path) return openresty.get(router.port, host, path) end

    -- Which backends n requests to web.demo reach; every answer must be a 200 from a backend.
    local function hits(n)
      local seen = {}
      for _ = 1, n do
        local code, body = get("web.demo")
        assert.equals(200, code, "web.demo answered " .. tostring(code) .. ": " .. tostring(body))
        local b = body:gsub("%s+$", "")
        seen[b] = (seen[b] or 0) + 1
      end
      return seen
    end

    local function converge(want, timeout, t0)
      return openresty.converge{ port = router.port, host = "web.demo", want = want,
                                 workers = 2, timeout = timeout, t0 = t0 }
    end

    local function status()
      local code, body = get("localhost", "/kinformer/status")
      assert.equals(200, code, body)
      return cjson.decode(body)
    end

    -- Waits until pred(status) holds; returns the status.
    local function wait_status(pred, timeout, what)
      local deadline = now() + (timeout or 5)
      local st
      repeat
        st = status()
        if pred(st) then return st end
        sleep(0.05)
      until now() > deadline
      error("status never showed " .. what .. ": " .. cjson.encode(st))
    end

    local function informer_processes()
      return model == "worker" and 2 or 1
    end

    -- The processes of a status that run the informer (in the shared model the workers that
    -- only read publish their status too).
    local function inf_procs(st)
      local out = {}
      for _, p in ipairs(st.processes) do
        if p.informers.endpointslices then out[#out + 1] = p end
      end
      return out
    end

    -- pids: when given, every status must come from one of these processes (after a reload
    -- the old workers' last samples may linger up to 1 s). Shared model: the readers too.
    local function all_synced(st, pids)
      if #inf_procs(st) ~= informer_processes() then return false end
      if model == "shared" and #st.processes ~= 2 then return false end
      for _, p in ipairs(st.processes) do
        local inf = p.informers.endpointslices
        if not p.synced or (inf and not inf.synced) then return false end
        if pids and not pids[p.pid] then return false end
      end
      return true
    end

    local function watches()
      return srv:watches()["endpointslices.discovery.k8s.io"] or 0
    end

    local function reset()
      srv:objects(baseline(port))
      converge(set_of{ B2, B4 })
    end

    -- Writes, then waits until web.demo reaches exactly `want` in every worker (converge);
    -- that must begin within 1 s of the write.
    local function within_1s(want, write)
      local t0 = now()
      write()
      local took = converge(want, 3, t0)
      if os.getenv("KINFORMER_SPEC_VERBOSE") then io.stderr:write(("%s model: routing reached %s %.3f s after the write\n"):format(model, keys(want), took)) end
      assert.is_true(took < 1.0, ("routing reached %s only %.3f s after the change")
        :format(keys(want), took))
    end

    setup(function()
      api_port = openresty.free_port()
      srv = fake.start{ args = { "--sample-cluster", "--port", api_port }, quiet = true }
      port = openresty.free_port{ B2, B3, B4 }
      backends = openresty.backends{ port = port, addrs = { B2, B3, B4 } }
      srv:objects(baseline(port))
      local port_name = ({ shared = nil, worker = tostring(port), agent = "http" })[model]
      target = function(svc) return "demo/" .. svc .. (port_name and ":" .. port_name or "") end
      router = openresty.router{ port = openresty.free_port(), workers = 2, env = {
        KINFORMER_SERVER = srv.url, KINFORMER_MODEL = model, KINFORMER_BACKOFF_MAX = "1",
        KINFORMER_INTERVAL = "0.05", KINFORMER_PORT_NAME = port_name }, worker_header = true }
      wait_status(all_synced, 10, "every informer process synced")
    end)

    teardown(function()
      if router then router:stop() end
      if backends then backends:stop() end
      if srv then srv:stop() end
    end)

    it("resolves a built-in resource without discovery: no blocking request in a worker",
      function()
      for _, q in ipairs(srv:requests()) do
        assert.is_nil(q.path:match("^/apis?$") or q.path:match("^/apis/[^/]+/[^/]+$"),
          "a discovery request: " .. q.path)
      end
    end)

    it("sends requests only to ready endpoints, round-robin", function()
      reset()
      local seen = hits(40)
      assert.equals(B2 .. "," .. B4, keys(seen))
      assert.is_true(seen[B2] >= 10 and seen[B4] >= 10, "unbalanced: " .. cjson.encode(seen))
    end)

    it("answers 503 and the reason when no endpoint is ready, 404 for a Host without Service",
      function()
      local code, body, raw = get("down.demo")
      assert.equals(503, code)
      assert.equals("no-endpoints", reason_of(raw))
      assert.matches("\r\nRetry%-After: 1\r\n", raw)
      assert.equals("kinformer: the Service has no ready endpoint: " .. target("down") .. "\n", body)
      code, body, raw = get("ghost.demo.svc.cluster.local")
      assert.equals(503, code)
      assert.equals("unknown-service", reason_of(raw))
      assert.equals("kinformer: the Service has no EndpointSlice: " .. target("ghost") .. "\n", body)
      for _, host in ipairs{ "nohost", "web.demo.cluster.local", "web_1.demo", "a.b.c.d" } do
        code, body, raw = get(host)
        assert.equals(404, code, host)
        assert.equals("no-route", reason_of(raw), host)
        assert.equals("kinformer: no Service for this request\n", body)
      end
      -- the forms of the Host
      for _, host in ipairs{ "web.demo.svc", "web.demo.svc.cluster.local", "WEB.demo" } do
        code, body = get(host)
        assert.equals(200, code, host .. ": " .. tostring(body))
      end
    end)

    it("answers 503 not-synced before the first list", function()
      local dead = openresty.router{ port = openresty.free_port(), workers = 1, name = "unsynced",
        env = { KINFORMER_SERVER = "http://127.0.0.1:" .. openresty.free_port(),
                KINFORMER_MODEL = model, KINFORMER_BACKOFF_MAX = "1",
                KINFORMER_SHARED_SIZE = "8m" } }
      finally(function() dead:stop() end)
      local code, body, raw
      local deadline = now() + 5
      repeat
        code, body, raw = openresty.get(dead.port, "web.demo", "/")
        if code ~= 503 then sleep(0.05) end
      until code == 503 or now() > deadline
      assert.equals(503, code, tostring(body))
      assert.equals("not-synced", reason_of(raw))
      assert.equals("kinformer: the EndpointSlice cache has not synced yet: demo/web\n", body)
    end)

    it("stops sending to an endpoint marked not ready within 1 s", function()
      reset()
      within_1s(set_of{ B4 }, function()
        srv:objects{ slice("web-a", "web", port, { { B2, false }, { B3, false } }) }
      end)
      assert.equals(B4, keys(hits(10)))
    end)

    it("stops sending to a deleted endpoint within 1 s (endpoint removed, slice deleted)", function()
      reset()
      within_1s(set_of{ B3, B4 }, function()
        srv:objects{ slice("web-a", "web", port, { { B3, true } }) } -- B2 gone from the slice
      end)
      within_1s(set_of{ B3 }, function()
        local code = srv:request("DELETE", SLICES .. "web-b")
        assert.equals(200, code)
      end)
      assert.equals(B3, keys(hits(10)))
      srv:objects{ slice("web-a", "web", port, { { B3, false } }) }
      local deadline, code, body, raw = now() + 2, nil, nil, nil
      repeat
        code, body, raw = get("web.demo")
      until code == 503 or now() > deadline
      assert.equals(503, code)
      assert.equals("no-endpoints", reason_of(raw))
      assert.equals("kinformer: the Service has no ready endpoint: " .. target("web") .. "\n", body)
    end)

    it("sends to a new ready endpoint within 1 s", function()
      reset()
      within_1s(set_of{ B2, B3, B4 }, function()
        srv:objects{ slice("web-a", "web", port, { { B2, true }, { B3, true } }) }
      end)
      assert.equals(B2 .. "," .. B3 .. "," .. B4, keys(hits(30)))
      -- a new slice of the service counts as well (and its deletion)
      reset()
      within_1s(set_of{ B2, B3, B4 }, function()
        srv:objects{ slice("web-c", "web", port, { { B3, true } }) }
      end)
      within_1s(set_of{ B2, B4 }, function()
        assert.equals(200, (srv:request("DELETE", SLICES .. "web-c")))
      end)
    end)

    it("serves /kinformer/status and /metrics for every informer process", function()
      local st = status()
      assert.equals(model, st.model)
      assert.equals(informer_processes(), #inf_procs(st))
      for _, p in ipairs(inf_procs(st)) do
        local inf = p.informers.endpointslices
        assert.equals("endpointslices", inf.resource)
        assert.equals("watching", inf.phase)
        assert.is_true(inf.objects >= 8) -- the sample cluster's 5 and ours
        assert.equals(0, inf.handler_errors)
        assert.equals(0, p.dispatch_errors)
        -- the agent model's view: the Services the agent publishes, no failures
        if model == "agent" then
          assert.is_true(p.views["kinformer.endpoints"].keys >= 8)
          assert.equals(0, p.views["kinformer.endpoints"].errors)
        end
      end
      -- the balancer: every worker's targets and endpoints (samples at most 1 s old)
      reset()
      hits(20)
      local web = target("web")
      st = wait_status(function(s)
        local n = 0
        for _, p in ipairs(s.balancer.processes) do
          local t = p.targets[web]
          if t and t.peers == 2 then n = n + 1 end
        end
        return n == 2
      end, 3, "both workers' samples of " .. web)
      local requests = 0
      for _, p in ipairs(st.balancer.processes) do
        assert.matches("^worker%-%d$", p.process)
        local t = p.targets[web]
        assert.same({ target = web, policy = "round_robin", algorithm = "round_robin", known = 3,
                      ready = 2, peers = 2, skipped = 0, terminating = false }, t)
        assert.is_table(p.endpoints[B2 .. ":" .. port])
        assert.is_table(p.endpoints[B4 .. ":" .. port])
        for _, e in pairs(p.endpoints) do
          assert.equals(0, e.failures)
          requests = requests + e.requests
        end
      end
      assert.is_true(requests >= 20, "requests counted: " .. requests)
      -- The worker serving /metrics reads the other one's sample from the status dict, which
      -- may predate reset() by up to a status interval: poll until both samples are current.
      local code, text
      local deadline = now() + 3
      repeat
        code, text = get("localhost", "/metrics")
        assert.equals(200, code)
        local current = true
        for _, w in ipairs{ "worker-0", "worker-1" } do
          if not text:find(('kinformer_balancer_peers{target="%s",policy="round_robin",process="%s"} 2')
              :format(web, w), 1, true) then current = false end
        end
        if not current then sleep(0.1) end
      until current or now() > deadline
      if model == "agent" then
        assert.matches('kinformer_view_keys{view="kinformer.endpoints",process="', text, 1, true)
      end
      for _, w in ipairs{ "worker-0", "worker-1" } do
        assert.matches(('kinformer_balancer_peers{target="%s",policy="round_robin",process="%s"} 2')
          :format(web, w), text, 1, true)
        assert.matches(('kinformer_balancer_ready_endpoints{target="%s",policy="round_robin",' ..
          'process="%s"} 2'):format(web, w), text, 1, true)
      end
      assert.matches(('kinformer_balancer_requests_total{endpoint="127.0.0.2:%d",process="worker-')
        :format(port), text, 1, true)
      for _, name in ipairs{ "kinformer_balancer_endpoints", "kinformer_balancer_skipped_endpoints",
          "kinformer_balancer_failures_total", "kinformer_balancer_skips_total" } do
        assert.matches("# TYPE " .. name .. " ", text, 1, true)
      end
      for _, name in ipairs{ "kinformer_informer_synced", "kinformer_informer_relists_total",
          "kinformer_informer_watch_events_total", "kinformer_informer_queue_length",
          "kinformer_informer_resource_version_age_seconds" } do
        assert.matches("# TYPE " .. name .. " ", text, 1, true)
      end
      assert.matches('kinformer_informer_synced{informer="endpointslices",resource=' ..
        '"endpointslices",namespace="",process="worker-0"} 1', text, 1, true)
      -- every sample line is "name{labels} value"
      for line in text:gmatch("[^\n]+") do
        if line:sub(1, 1) ~= "#" then
          assert.matches('^[a-z_]+{[^}]*} %-?[%d.e+-]+$', line)
        end
      end
    end)

    it("keeps routing from the cache while the API server is away, and resyncs after", function()
      reset()
      srv:stop()
      -- nothing reachable: routing goes on from the cache
      assert.equals(B2 .. "," .. B4, keys(hits(30)))
      wait_status(function(st)
        for _, p in ipairs(inf_procs(st)) do
          if not p.informers.endpointslices.last_error then return false end
        end
        return #inf_procs(st) == informer_processes()
      end, 5, "the list/watch error in every process")
      assert.equals(B2 .. "," .. B4, keys(hits(10)))
      local lists = {}
      for _, p in ipairs(inf_procs(status())) do lists[p.pid] = p.informers.endpointslices.lists end
      -- back on the same port, with another state (its resourceVersions start lower: the
      -- informers' watch is refused as too new and they relist)
      srv = fake.start{ args = { "--port", api_port }, quiet = true }
      srv:objects{ slice("web-a", "web", port, { { B2, false }, { B3, true } }),
                   slice("web-b", "web", port, { { B4, true } }) }
      local took = converge(set_of{ B3, B4 }, 8)
      assert.is_true(took < 8)
      -- every process relisted, watches again, and dropped what the new server does not have
      -- (its sample cluster): 2 slices left. (Other processes' status is up to 1 s old.)
      wait_status(function(st)
        for _, p in ipairs(inf_procs(st)) do
          local inf = p.informers.endpointslices
          if inf.phase ~= "watching" or inf.lists <= (lists[p.pid] or 0) or inf.objects ~= 2 then
            return false
          end
        end
        return #inf_procs(st) == informer_processes()
      end, 6, "a relist, a watch and 2 objects in every process")
      assert.equals(informer_processes(), watches())
      srv:objects(baseline(port)) -- the baseline for the next blocks
      converge(set_of{ B2, B4 })
    end)

    it("leaks no thread and no watch across nginx -s reload", function()
      reset()
      assert.equals(1, openresty.threads(router.pid))
      for round = 1, 2 do
        local kids = router:reload()
        assert.equals(2, #kids)
        local pids = {}
        for _, k in ipairs(kids) do pids[k.pid] = true end
        local synced = wait_status(function(st) return all_synced(st, pids) end, 10,
          "every informer process synced after reload " .. round)
        -- every old watch closed, one per informer process open
        local deadline = now() + 3
        while watches() ~= informer_processes() and now() < deadline do sleep(0.05) end
        assert.equals(informer_processes(), watches())
        -- the master never runs an I/O thread; a process with informers has exactly its
        -- client's two (the I/O thread and the scanner thread)
        assert.equals(1, openresty.threads(router.pid))
        -- which new workers run informers: from the status that showed them all synced (a
        -- later one may still carry an old worker's last sample)
        local runs = {}
        for _, p in ipairs(inf_procs(synced)) do runs[p.pid] = true end
        for _, k in ipairs(kids) do
          local want = runs[k.pid] and 3 or 1
          local until_t = now() + 3
          while openresty.threads(k.pid) ~= want and now() < until_t do sleep(0.05) end
          assert.equals(want, openresty.threads(k.pid), k.title)
        end
        assert.equals(B2 .. "," .. B4, keys(hits(20)))
      end
      -- the informers stopped in the old workers before they exited
      local stops = select(2, router:log():gsub("informers stopped in [%w-]+ %(process exiting%)", ""))
      assert.equals(2 * informer_processes(), stops)
    end)

    it("crashed no worker and logged no error", function()
      local log = router:log()
      for _, bad in ipairs{ "%[emerg%]", "%[alert%]", "%[crit%]", "%[error%]",
                            "exited on signal", "core dumped" } do
        local line = log:match("[^\n]*" .. bad .. "[^\n]*")
        assert.is_nil(line, "error log: " .. tostring(line))
      end
      assert.matches("kinformer: informers synced in", log, 1, true)
      -- the API server's absence was logged, as a warning
      assert.matches("%[warn%][^\n]*kinformer: informer endpointslices", log)
    end)
  end)
end

describe_model("shared")
describe_model("worker")
describe_model("agent")

-- kinformer.ngx's argument errors name the line of the call that made the mistake (a module of
-- the application), not a line of kinformer.
describe("kinformer.ngx argument errors", function()
  local inst, dir

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. dir))
    local f = assert(io.open(dir .. "/argprobe.lua", "w"))
    f:write([[
local M = {}
function M.run()
  local kngx, out, ok, err = require "kinformer.ngx", {}
  ok, err = pcall(function() kngx.view{ name = "v", bogus = 1 } end)
  out[#out + 1] = tostring(err)
  ok, err = pcall(function() kngx.start{ informers = {} } end)
  out[#out + 1] = tostring(err)
  ok, err = pcall(function() kngx.enable_agent() end)
  out[#out + 1] = tostring(err)
  ngx.say(table.concat(out, "\n"))
end
-- Cached objects inside nginx: lazy, as on Lua 5.4; kinformer.pairs and views see them whole.
function M.objects()
  local kinformer, cjson = require "kinformer", require "cjson"
  local fifo = kinformer.delta_fifo{}
  assert(fifo:add{ apiVersion = "v1", kind = "Service", metadata = { name = "web", namespace = "demo" },
                   spec = { ports = { { port = 80 } } } })
  collectgarbage()
  collectgarbage()
  local svc = fifo:pop()[1].object
  local out = { tostring(rawget(svc, "spec")), tostring(svc.spec.ports[1].port) }
  local keys = {}
  for k in pairs(svc) do keys[#keys + 1] = k end
  out[#out + 1] = "pairs " .. #keys
  keys = {}
  for k in kinformer.pairs(svc) do keys[#keys + 1] = k end
  table.sort(keys)
  out[#out + 1] = "kinformer.pairs " .. table.concat(keys, ",")
  out[#out + 1] = tostring(pcall(function() svc.metadata.x = 1 end))
  assert(fifo:add{ apiVersion = "v1", kind = "Service", metadata = { name = "db", namespace = "demo" } })
  collectgarbage()
  collectgarbage()
  local db = fifo:pop()[1].object
  local _ = db.kind
  local v = require("kinformer.ngx").view{ name = "probe" }
  out[#out + 1] = cjson.encode(cjson.decode(v._encode{ db }))
  ngx.say(table.concat(out, "\n"))
end
return M
]])
    f:close()
    local port = openresty.free_port()
    inst = openresty.start{ name = "argprobe", conf = openresty.lua_conf{ dir = dir, port = port,
      locations = [[
        location = /probe { content_by_lua_block { require("argprobe").run() } }
        location = /objects { content_by_lua_block { require("argprobe").objects() } }]] } }
    inst.port = port
  end)

  teardown(function()
    if inst then inst:stop() end
    if dir then os.execute("rm -rf " .. dir) end
  end)

  it("names the application's line", function()
    local code, body = openresty.get(inst.port, "localhost", "/probe")
    assert.equals(200, code, body)
    local lines = {}
    for l in body:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.matches("argprobe%.lua:4: bad argument #1 to 'view' %(unknown option 'bogus'%)$", lines[1])
    assert.matches("argprobe%.lua:6: bad argument #1 to 'start' %(option 'informers' must be", lines[2])
    assert.matches("argprobe%.lua:8: kinformer.ngx.enable_agent%(%) must be called from init_by_lua",
      lines[3])
  end)

  it("hands out lazy objects: kinformer.pairs and the views' encoder see every member", function()
    local code, body = openresty.get(inst.port, "localhost", "/objects")
    assert.equals(200, code, body)
    local lines = {}
    for l in body:gmatch("[^\n]+") do lines[#lines + 1] = l end
    assert.equals("nil", lines[1]) -- nothing decoded before the first read
    assert.equals("80", lines[2])
    assert.equals("pairs 1", lines[3]) -- nginx's LuaJIT ignores __pairs: only what was read
    assert.equals("kinformer.pairs apiVersion,kind,metadata,spec", lines[4])
    assert.equals("false", lines[5]) -- metadata is read-only
    assert.same({ { apiVersion = "v1", kind = "Service", metadata = { name = "db", namespace = "demo" } } },
                cjson.decode(lines[6]))
  end)
end)
