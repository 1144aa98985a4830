-- Input a careless caller or a broken API server gives: names that are not one path segment
-- (never a request to another path), TLS options that contradict each other, NaN seconds, a
-- list that never ends or is not a list, map functions returning keys that name no primary, two
-- writers of one shared store, a Lease with fields of the wrong type, a reconcile returning a
-- number that is no delay.
local kinformer = require "kinformer"
local core = require "kinformer.core"
local fake = require "support.fake_apiserver"

local function requests(srv, method)
  local out = {}
  for _, q in ipairs(srv:requests()) do
    if method == nil or q.method == method then out[#out + 1] = q.path end
  end
  return out
end

local function cm(ns, name)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { namespace = ns, name = name },
           data = { a = "1" } }
end

describe("hostile input", function()
  local srv, client

  setup(function()
    srv = fake.start{ quiet = true }
    client = assert(kinformer.client{ server = srv.url })
    assert(client:create("namespaces", { apiVersion = "v1", kind = "Namespace",
                                         metadata = { name = "prod" } }))
    assert(client:create("configmaps", cm("prod", "x")))
  end)
  teardown(function()
    kinformer.set_logger(nil, "warn")
    srv:stop()
  end)
  before_each(function()
    srv:clear_faults()
    srv:clear_requests()
  end)

  describe("names in URL paths", function()
    local function refused(fn, pattern)
      local ok, err = pcall(fn)
      assert.is_false(ok)
      assert.truthy(tostring(err):find(pattern), tostring(err))
    end

    it("refuses a key or namespace that would send the request to another path", function()
      refused(function() client:delete("configmaps", "prod#/x") end, "namespace \"prod#\"")
      refused(function() client:patch("configmaps", "x", { data = {} }, { namespace = "prod?" }) end,
              "namespace \"prod%?\"")
      refused(function() client:delete("configmaps", "x", { namespace = "prod\0" }) end,
              "namespace")
      refused(function() client:delete("configmaps", "prod/..") end, "may not be \"%.%.\"")
      refused(function() client:get("configmaps", "prod/..") end, "may not be \"%.%.\"")
      refused(function() client:get("configmaps", "prod/.") end, "may not be \"%.\"")
      refused(function() client:delete("configmaps", "prod/x\0y") end, "may not contain")
      refused(function() client:get("configmaps", "prod/a%2Fb") end, "may not contain \"%%\"")
      local obj = cm("prod", "..")
      refused(function() client:update("configmaps", obj) end, "bad argument #2 to 'update'")
      obj.metadata.name = "x"
      obj.metadata.namespace = "PROD"
      refused(function() client:update("configmaps", obj) end, "not a namespace name")
      assert.same({}, requests(srv))
      -- the namespace and its object are still there
      assert(client:get("namespaces", "prod"))
      assert(client:get("configmaps", "prod/x"))
    end)

    it("escapes what a name may contain, so the request names that object", function()
      local res, err = client:get("configmaps", "prod/a b#c?d")
      assert.is_nil(res)
      assert.equal(404, err.code)
      -- the server's log shows the path decoded: the whole name arrived as one segment
      assert.same({ "/api/v1/namespaces/prod/configmaps/a b#c?d" }, requests(srv, "GET"))
    end)

    it("refuses an informer whose namespace is not a namespace name", function()
      for _, ns in ipairs{ "..", "shop#", "a/b", "Shop", ("a"):rep(64) } do
        local ok, err = pcall(client.informer, client, { resource = "configmaps", namespace = ns })
        assert.is_false(ok)
        assert.truthy(err:find("bad argument #1 to 'informer' (namespace", 1, true), err)
      end
      local ok, err = pcall(client.informer, client, { resource = { group = "", version = "v1",
                                                                    resource = "../namespaces" } })
      assert.is_false(ok)
      assert.truthy(err:find("may not contain \"/\""), err)
      assert.same({}, requests(srv))
    end)
  end)

  it("refuses ca_file together with insecure_skip_tls_verify", function()
    local ok, err = pcall(kinformer.client, { server = srv.url, ca_file = "/etc/ssl/x.pem",
                                               insecure_skip_tls_verify = true })
    assert.is_false(ok)
    assert.truthy(err:find("cannot be combined"), err)
    ok = pcall(kinformer.client, { server = srv.url, ca_data = "x", insecure_skip_tls_verify = true })
    assert.is_false(ok)
  end)

  it("refuses NaN where it takes seconds", function()
    local nan = 0 / 0
    local fifo = kinformer.delta_fifo{}
    assert.has_error(function() fifo:pop(nil, nan) end)
    local inf = assert(client:informer{ resource = "configmaps", namespace = "prod" })
    assert.has_error(function() inf:wait_for_sync(nan) end)
    assert.has_error(function() kinformer.run({ inf }, { timeout = nan }) end)
    assert.has_error(function() inf:dispatch(nan) end)
    assert.has_error(function() client:get("configmaps", "prod/x", { timeout = nan }) end)
    local mgr = kinformer.manager{ client = client }
    assert.has_error(function() mgr:wait_for_sync(nan) end)
    assert.has_error(function() mgr:run{ timeout = nan } end)
    -- core.wait takes NaN as "do not wait"
    local t0 = core.now()
    assert.equal("timeout", core.wait({}, nan))
    assert.truthy(core.now() - t0 < 0.5)
    inf:stop()
  end)

  describe("client:list", function()
    local function page(token, items)
      return { kind = "ConfigMapList", apiVersion = "v1",
               metadata = { resourceVersion = "1", continue = token }, items = items or {} }
    end

    it("refuses a continue token the server handed out before", function()
      srv:fault{ path = "/configmaps$", times = -1, action = { type = "respond",
                 body = page("same", { cm("prod", "x") }) } }
      local t0 = core.now()
      local res, err = client:list("configmaps", { namespace = "prod", timeout = 5 })
      assert.is_nil(res)
      assert.truthy(err.message:find("continue token it had returned before"), err.message)
      assert.truthy(core.now() - t0 < 2)
      assert.equal(2, #requests(srv, "GET"))
    end)

    it("bounds the whole call, every page, by its timeout", function()
      local rules = {}
      for i = 1, 20 do
        rules[i] = { path = "/configmaps$", action = { type = "respond", seconds = 0.25,
                     body = page("t" .. i, { cm("prod", "x" .. i) }) } }
      end
      srv:fault(rules)
      local t0 = core.now()
      local res, err = client:list("configmaps", { namespace = "prod", timeout = 1 })
      local took = core.now() - t0
      assert.is_nil(res)
      -- the deadline passes between pages (Timeout) or inside the last one (the transport's)
      assert.truthy(err.reason == "Timeout" or err.message:find("timed out"), tostring(err))
      assert.truthy(took < 2, took)
      assert.truthy(#requests(srv, "GET") <= 6)
    end)

    it("refuses a continue option that is not a string", function()
      assert.has_error(function() client:list("configmaps", { continue = {} }) end,
        "bad argument #2 to 'list' (option 'continue' must be a string, got table)")
      assert.same({}, requests(srv))
    end)

    it("reads items: null as no items, and refuses bodies that are not lists", function()
      srv:fault{ path = "/configmaps$", action = { type = "respond",
                 body = '{"kind":"ConfigMapList","metadata":{"resourceVersion":"5"},"items":null}' } }
      local list = assert(client:list("configmaps", { namespace = "prod" }))
      assert.same({}, list.items)
      local bad = {
        ['{"kind":"ConfigMapList","metadata":{},"items":{"a":{"metadata":{"name":"a"}}}}'] =
          "items is an object",
        ['{"kind":"ConfigMapList","metadata":{},"items":{}}'] = "items is an object",
        ['{"kind":"ConfigMapList","metadata":{},"items":"x"}'] = "items is a string",
        ['[{"metadata":{"name":"a"}}]'] = "a JSON array",
        ['{"kind":"Namespace","metadata":{"name":"prod"}}'] = "a Namespace without items",
        ['{}'] = "no items",
        ['"x"'] = "a JSON string",
      }
      for body, why in pairs(bad) do
        for _, limit in ipairs{ false, 10 } do
          srv:fault{ path = "/configmaps$", action = { type = "respond", body = body } }
          local res, err = client:list("configmaps", { namespace = "prod", limit = limit or nil })
          assert.is_nil(res, body)
          assert.equal("InvalidResponse", err.reason)
          assert.truthy(err.message:find(why, 1, true), body .. ": " .. err.message)
        end
      end
    end)
  end)

  it("drops keys a watches map returns that name no primary, logs once and counts them",
    function()
    local logs = {}
    kinformer.set_logger(function(level, msg) logs[#logs + 1] = level .. " " .. msg end)
    assert(client:create("secrets", { apiVersion = "v1", kind = "Secret",
                                      metadata = { namespace = "prod", name = "s1" } }))
    local mgr = kinformer.manager{ client = client }
    local keys = {}
    local c = mgr:controller{ name = "map-keys", resource = "configmaps", namespace = "prod",
      reconcile = function(req) keys[#keys + 1] = req.key end,
      watches = { { resource = "secrets", namespace = "prod", map = function()
        return { "a/b/c", {}, { namespace = 5, name = {} }, "Bad NS/x", "..", "prod",
                 { namespace = "prod", name = "x" }, "prod/x" }
      end } } }
    local deadline = core.now() + 10
    while core.now() < deadline and c:status().source_errors < 6 do
      local w = assert(mgr:step())
      core.wait(mgr:fds(), math.min(w, 0.02))
    end
    for _ = 1, 20 do mgr:step(); core.wait(mgr:fds(), 0.01) end
    mgr:stop()
    kinformer.set_logger(nil, "warn")
    assert.equal(6, c:status().source_errors)
    for _, k in ipairs(keys) do assert.equal("prod/x", k) end
    assert.truthy(#keys >= 1)
    local lines = 0
    for _, l in ipairs(logs) do
      if l:find("invalid key", 1, true) then lines = lines + 1 end
    end
    assert.equal(1, lines)
  end)

  it("refuses a second informer mirroring into a slot another one mirrors", function()
    local seg = core.shm(1 << 20)
    local function processor()
      local store = kinformer.store{}
      return core.processor(kinformer.delta_fifo{ known_objects = store }, store)
    end
    local a, b = processor(), processor()
    assert(a:mirror(seg, 1))
    local ok, err, code = b:mirror(seg, 1)
    assert.is_nil(ok)
    assert.equal("EBUSY", code)
    assert.truthy(err:find("already mirrors into slot 1"), err)
    assert(b:mirror(seg, 2))
    a:close()
    local c = processor()
    assert(c:mirror(seg, 1))
    b:close()
    c:close()
  end)

  it("stops leading when a Lease's holderIdentity is not a string, without raising", function()
    local le = kinformer.leader_election{ client = client, namespace = "default",
      lease_name = "odd", identity = "me", lease_duration = 15, renew_deadline = 10,
      retry_period = 2 }
    le:tick()
    assert.is_true(le:is_leader())
    local lease = assert(client:get("leases", "default/odd"))
    lease.spec.holderIdentity = { evil = true }
    srv:fault{ method = "GET", path = "/leases/odd$", times = -1,
               action = { type = "respond", body = lease } }
    le.next_at = 0 -- due now
    assert.has_no_error(function() le:tick() end)
    assert.is_false(le:is_leader())
    assert.truthy(le:status().leader:find("holderIdentity of type table", 1, true))
    le:stop()
  end)

  it("names a reconcile's result that is no delay", function()
    assert(client:create("configmaps", cm("prod", "delay")))
    for _, r in ipairs{ -5, 0 / 0, math.huge } do
      local mgr = kinformer.manager{ client = client }
      kinformer.set_logger(function() end)
      local c = mgr:controller{ name = "delay", resource = "configmaps", namespace = "prod",
        reconcile = function() return r end }
      local deadline = core.now() + 10
      while core.now() < deadline and c:status().errors == 0 do
        local w = assert(mgr:step())
        core.wait(mgr:fds(), math.min(w, 0.02))
      end
      mgr:stop()
      local e = c:status().last_error
      assert.truthy(e and e:find("a requeue delay must be a finite number of seconds >= 0", 1,
                                 true), tostring(e))
    end
    kinformer.set_logger(nil, "warn")
  end)
end)
