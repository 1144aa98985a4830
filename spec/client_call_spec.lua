-- client:call (csrc/call.c, csrc/lua_call.c): REST requests that do not block the Lua thread,
-- run by the client's I/O thread, against the fake API server. Every verb with the results
-- client:request gives, Status answers, concurrency (stalled calls all in flight at once),
-- the completion fd with core.wait and calls_drain, cancel (at once; the server sees the client
-- go), the timeout and max_response_bytes, a 401 sent once more, Warning headers, calls on a
-- client with no informer and on one whose informer watches, coroutines waiting on calls, and
-- clients and calls collected with calls in flight.
local kinformer = require "kinformer"
local core = require "kinformer.core"
local cjson = require "cjson"
local fake = require "support.fake_apiserver"
local exec_plugin = require "support.exec_plugin"
local quote = require("support.proc").quote

local CM = "/api/v1/namespaces/default/configmaps"
local JSON = "application/json"

local function cm(name, data)
  return cjson.encode{ apiVersion = "v1", kind = "ConfigMap",
                       metadata = { name = name, namespace = "default" }, data = data or { a = "1" } }
end

-- Waits on the client's completion fd (draining it after each wake-up, as a loop does) until
-- every call given is done; raises after `seconds`.
local function await(client, calls, seconds)
  local fd = assert(client:calls_fd())
  local deadline = core.now() + (seconds or 10)
  while true do
    local pending = 0
    for _, k in ipairs(calls) do if not k:done() then pending = pending + 1 end end
    if pending == 0 then return end
    assert(core.now() < deadline, pending .. " calls still in flight")
    core.wait({ fd }, 0.5)
    client:calls_drain()
  end
end

-- Starts a call, waits for it and returns what call:result() returns.
local function call(client, ...)
  local k = assert(client:call(...))
  await(client, { k })
  return k:result()
end

describe("client:call", function()
  local srv, client

  setup(function()
    srv = fake.start{ quiet = true }
    client = assert(core.client{ server = srv.url })
  end)

  teardown(function() srv:stop() end)

  before_each(function()
    srv:clear_faults()
    srv:clear_requests()
  end)

  it("sends every verb with its body and gives client:request's results", function()
    local status, body, retry_after, ctype = call(client, "POST", CM, cm("verbs"), JSON)
    assert.equal(201, status)
    assert.is_nil(retry_after)
    assert.equal(JSON, ctype)
    local created = cjson.decode(body)
    assert.equal("verbs", created.metadata.name)

    -- GET: the very bytes client:request gets
    local cs, cb, cr, cc = call(client, "GET", CM .. "/verbs")
    local rs, rb, rr, rc = client:request("GET", CM .. "/verbs")
    assert.same({ 200, rb, rr, rc }, { cs, cb, cr, cc })

    created.data.a = "put"
    status, body = call(client, "PUT", CM .. "/verbs", cjson.encode(created), JSON)
    assert.equal(200, status)
    assert.equal("put", cjson.decode(body).data.a)

    status, body = call(client, "PATCH", CM .. "/verbs", '{"data":{"b":"patched"}}',
                        "application/merge-patch+json")
    assert.equal(200, status)
    assert.same({ a = "put", b = "patched" }, cjson.decode(body).data)

    status = call(client, "DELETE", CM .. "/verbs", '{"propagationPolicy":"Background"}', JSON)
    assert.equal(200, status)
    assert.equal(404, (client:request("GET", CM .. "/verbs")))

    local methods = {}
    for _, q in ipairs(srv:requests()) do
      if q.path:find("/configmaps") then methods[#methods + 1] = q.method end
    end
    assert.same({ "POST", "GET", "GET", "PUT", "PATCH", "DELETE", "GET" }, methods)
  end)

  it("gives 404 and 409 Status answers as results, not errors", function()
    local status, body = call(client, "GET", CM .. "/missing")
    assert.equal(404, status)
    assert.equal("NotFound", cjson.decode(body).reason)
    assert.equal(201, (call(client, "POST", CM, cm("twice"), JSON)))
    status, body = call(client, "POST", CM, cm("twice"), JSON)
    assert.equal(409, status)
    assert.equal("AlreadyExists", cjson.decode(body).reason)
    -- the same as request's, again and again
    local k = assert(client:call("GET", CM .. "/missing"))
    await(client, { k })
    local first = { k:result() }
    assert.same(first, { k:result() })
    assert.equal(404, first[1])
  end)

  it("gives Retry-After as a number", function()
    srv:fault{ path = "/configmaps/busy$", action = { status = 429, retry_after = 3 } }
    local status, _, retry_after = call(client, "GET", CM .. "/busy")
    assert.equal(429, status)
    assert.equal(3, retry_after)
  end)

  it("runs 20 calls at once: all in flight after the start, done in far less than 20 s", function()
    srv:fault{ path = "/configmaps/slow-[0-9]+$", times = -1, action = { type = "stall", seconds = 1 } }
    local t0 = core.now()
    local calls = {}
    for i = 1, 20 do calls[i] = assert(client:call("GET", CM .. "/slow-" .. i)) end
    for i = 1, 20 do
      assert.is_false(calls[i]:done())
      assert.is_false(calls[i]:result())
    end
    await(client, calls, 15)
    local took = core.now() - t0
    assert.is_true(took >= 1, "the stall held them: " .. took)
    assert.is_true(took < 8, "20 stalls of 1 s one after the other take 20 s: " .. took)
    for i = 1, 20 do assert.equal(404, (calls[i]:result())) end
    assert.equal(20, #srv:requests_to("GET", "/slow%-%d+$"))
  end)

  it("makes the fd readable when a call ends; calls_drain makes it unreadable", function()
    local fd = assert(client:calls_fd())
    assert.equal(fd, client:calls_fd())
    client:calls_drain()
    assert.equal("timeout", core.wait({ fd }, 0))
    srv:fault{ path = "/configmaps/late$", action = { type = "stall", seconds = 0.5 } }
    local k = assert(client:call("GET", CM .. "/late"))
    assert.equal("timeout", core.wait({ fd }, 0.2)) -- stalled: nothing ended yet
    assert.is_false(k:done())
    assert.equal("ready", core.wait({ fd }, 5))
    assert.is_true(k:done())
    assert.equal(404, (k:result()))
    assert.equal("ready", core.wait({ fd }, 0)) -- until drained
    assert.equal(1, client:calls_drain())
    assert.equal("timeout", core.wait({ fd }, 0))
    assert.equal(0, client:calls_drain())
  end)

  it("cancels at once: ECANCELED, no wake-up, and the server sees the client go", function()
    local fd = assert(client:calls_fd())
    client:calls_drain()
    srv:fault{ method = "POST", path = "/configmaps$", action = { type = "stall", seconds = 1 } }
    local k = assert(client:call("POST", CM, cm("cancelled"), JSON))
    core.sleep(0.3) -- at the server, stalled
    assert.is_false(k:done())
    k:cancel()
    assert.is_true(k:done())
    local res, err, code = k:result()
    assert.is_nil(res)
    assert.equal("cancelled", err)
    assert.equal("ECANCELED", code)
    k:cancel() -- again: nothing new
    assert.same({ nil, "cancelled", "ECANCELED" }, { k:result() })
    -- past the stall: the server dropped the request when the client went, so the object the
    -- POST would have made was never made; nothing woke the fd
    assert.equal("timeout", core.wait({ fd }, 1.2))
    assert.equal(404, (client:request("GET", CM .. "/cancelled")))
    assert.equal(1, #srv:requests_to("POST", "/configmaps$"))
  end)

  it("keeps the result of a call that ended before its cancel", function()
    local k = assert(client:call("GET", CM .. "/missing"))
    await(client, { k })
    k:cancel()
    assert.equal(404, (k:result()))
  end)

  it("ends a call after its timeout with request's EIO error", function()
    srv:fault{ path = "/configmaps/stuck$", times = 2, action = { type = "stall", seconds = 2 } }
    local t0 = core.now()
    local res, err, code = call(client, "GET", CM .. "/stuck", nil, nil, 0.3)
    assert.is_true(core.now() - t0 < 1.5)
    assert.is_nil(res)
    assert.equal("EIO", code)
    assert.matches("^Timeout was reached", err)
    local _, rerr, rcode = client:request("GET", CM .. "/stuck", nil, nil, 0.3)
    assert.equal("EIO", rcode)
    assert.equal(err:match("^[^:]*"), rerr:match("^[^:]*"))
  end)

  it("refuses a response over max_response_bytes with ETOOBIG", function()
    assert.equal(201, (call(client, "POST", CM, cm("big", { v = ("x"):rep(5000) }), JSON)))
    local res, err, code = call(client, "GET", CM .. "/big", nil, nil, nil, 1000)
    assert.is_nil(res)
    assert.equal("ETOOBIG", code)
    assert.equal("response larger than max_response_bytes (1000)", err)
    assert.equal(200, (call(client, "GET", CM .. "/big", nil, nil, nil, 100000)))
  end)

  it("sends the Accept it is given", function()
    local accept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    local status, body, _, ctype = call(client, "GET", "/apis", nil, nil, nil, nil, accept)
    assert.equal(200, status)
    assert.equal(accept, ctype)
    assert.equal("APIGroupDiscoveryList", cjson.decode(body).kind)
  end)

  it("logs a Warning text when its result is read", function()
    local lines = {}
    kinformer.set_logger(function(level, msg) lines[#lines + 1] = level .. " " .. msg end, "debug")
    finally(function()
      kinformer.set_logger(nil, "warn")
      srv:control("DELETE", "/_fake/warnings")
    end)
    srv:control("POST", "/_fake/warnings", { method = "POST", path = "/configmaps$",
                                             text = "call warning 7f3a" })
    assert.equal(201, (call(client, "POST", CM, cm("warned"), JSON)))
    assert.equal(201, (call(client, "POST", CM, cm("warned-again"), JSON)))
    local warned = {}
    for _, l in ipairs(lines) do
      if l:find("API server warning", 1, true) then warned[#warned + 1] = l end
    end
    assert.same({ "warn API server warning: call warning 7f3a" }, warned) -- once per text
  end)

  it("raises on the arguments client:request refuses", function()
    local unpack = table.unpack or unpack
    local function raises(pattern, ...)
      local n, args = select("#", ...), { ... }
      local ok, err = pcall(function() client:call(unpack(args, 1, n)) end) -- not a tail call
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    raises("path must start with '/'", "GET", "api/v1")
    raises("bad argument #4 to 'call'", "POST", CM, "{}")
    raises("timeout must be >= 0", "GET", CM, nil, nil, -1)
    raises("max_response_bytes must be >= 1", "GET", CM, nil, nil, nil, 0)
    raises("kinformer: bad request", "BREW", CM)
    raises("bad argument #1 to 'call'", nil, CM)
  end)

  it("lets coroutines wait for their calls on one loop", function()
    srv:fault{ path = "/configmaps/co-[0-9]+$", times = -1, action = { type = "stall", seconds = 0.3 } }
    -- A reconcile: starts a call, yields until it is done, then reads it.
    local function reconcile(i)
      local k = assert(client:call("GET", CM .. "/co-" .. i))
      while not k:done() do coroutine.yield(k) end
      return (k:result())
    end
    local waiting, results = {}, {}
    for i = 1, 5 do
      local co = coroutine.create(reconcile)
      local _, k = assert(coroutine.resume(co, i))
      waiting[co] = { k = k, i = i }
    end
    local fd = assert(client:calls_fd())
    local deadline = core.now() + 10
    while next(waiting) and core.now() < deadline do
      core.wait({ fd }, 1)
      client:calls_drain()
      for co, w in pairs(waiting) do
        if w.k:done() then
          local _, status = assert(coroutine.resume(co))
          assert.equal("dead", coroutine.status(co))
          results[w.i] = status
          waiting[co] = nil
        end
      end
    end
    assert.same({ 404, 404, 404, 404, 404 }, results)
  end)
end)

describe("client:call on its own client", function()
  local srv

  setup(function() srv = fake.start{ quiet = true } end)
  teardown(function() srv:stop() end)

  it("works on a client that never started an informer", function()
    local c = assert(core.client{ server = srv.url })
    local status, body = call(c, "GET", "/api/v1/namespaces")
    assert.equal(200, status)
    assert.equal("NamespaceList", cjson.decode(body).kind)
  end)

  it("runs beside the informers watching on the same client", function()
    local kc = assert(kinformer.client{ server = srv.url })
    local inf = assert(kc:informer{ resource = "configmaps", namespace = "default" })
    finally(function() inf:stop() end)
    inf:start()
    assert(inf:wait_for_sync(10))
    local c = kc._core
    local k = assert(c:call("POST", CM, cm("watched"), JSON))
    await(c, { k })
    assert.equal(201, (k:result()))
    local deadline = core.now() + 10
    while not inf:store():get_by_key("default/watched") and core.now() < deadline do
      core.wait({ inf:fd() }, 0.2)
      inf:dispatch()
    end
    assert.truthy(inf:store():get_by_key("default/watched"))
    assert.equal(200, (call(c, "GET", CM .. "/watched")))
  end)

  it("sends a 401 once more with the exec plugin's refreshed token", function()
    local OLD, NEW = "call-exec-old-2d41", "call-exec-new-a7c9"
    local s = fake.start{ quiet = true, args = { "--token", OLD } }
    local plugin = exec_plugin.new(OLD)
    finally(function()
      s:stop()
      plugin:remove()
    end)
    local c = assert(core.client{ server = s.url, exec = plugin.exec })
    assert.equal(200, (call(c, "GET", CM)))
    s:control("POST", "/_fake/auth", { tokens = { NEW } })
    plugin:issue(NEW) -- the plugin's cached credential is now stale
    s:clear_requests()
    assert.equal(200, (call(c, "GET", CM)))
    local q = s:requests_to("GET", "/configmaps$")
    assert.equal(2, #q) -- the 401 with the cached token, then the new one
    assert.equal("none", q[1].auth)
    assert.equal("bearer", q[2].auth)
  end)

  it("outlives its client userdata, and collecting both in flight crashes nothing", function()
    srv:fault{ path = "/configmaps/held-[0-9]+$", times = -1, action = { type = "stall", seconds = 0.5 } }
    finally(function() srv:clear_faults() end)
    local calls = {}
    do
      local c = assert(core.client{ server = srv.url })
      for i = 1, 3 do calls[i] = assert(c:call("GET", CM .. "/held-" .. i)) end
    end
    collectgarbage()
    collectgarbage() -- the client userdata is gone; the calls hold the C client
    local deadline = core.now() + 10
    while not (calls[1]:done() and calls[2]:done() and calls[3]:done()) do
      assert(core.now() < deadline)
      core.sleep(0.05)
    end
    for i = 1, 3 do assert.equal(404, (calls[i]:result())) end

    -- now collect a client and its calls while they are stalled at the server
    do
      local c = assert(core.client{ server = srv.url })
      for i = 1, 5 do calls[i] = assert(c:call("GET", CM .. "/held-" .. i)) end
      core.sleep(0.1)
      calls = {}
    end
    collectgarbage()
    collectgarbage()
    local c = assert(core.client{ server = srv.url })
    assert.equal(200, (call(c, "GET", CM)))
  end)

  it("lets a process exit with calls in flight", function()
    srv:fault{ path = "/configmaps/exit$", times = -1, action = { type = "stall", seconds = 5 } }
    finally(function() srv:clear_faults() end)
    local root = KINFORMER_ROOT
    local build = os.getenv("KINFORMER_BUILD")
    if build == nil or build == "" then build = _VERSION == "Lua 5.4" and "lua5.4" or "luajit" end
    local prog = ([[
      package.cpath = %q .. package.cpath
      local core = require "kinformer.core"
      local c = assert(core.client{ server = %q })
      local calls = {}
      for i = 1, 5 do calls[i] = assert(c:call("GET", %q)) end
      core.sleep(0.2)
      calls[1]:cancel()
      io.write("started ", tostring(calls[2]:done()))
    ]]):format(root .. "/build/" .. build .. "/?.so;", srv.url, CM .. "/exit")
    local lua = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
    local t0 = core.now()
    local p = assert(io.popen("timeout -s KILL 30 " .. lua .. " -e " .. quote(prog) .. " 2>&1"))
    local out = p:read("a")
    local ok, _, rc = p:close()
    assert.equal("started false", out)
    assert.truthy(ok)
    assert.is_true(rc == nil or rc == 0)
    assert.is_true(core.now() - t0 < 4, "it waited for the stalled calls")
  end)
end)
