-- The shared index informer (docs/semantics.md, section 5) against the fake API server. Ports of client-go's
-- shared_informer_test.go are named after the originals; the rest covers the Lua API contract
-- (handlers that raise, read-only lazily decoded objects, run/dispatch/fd, wait_for_sync errors)
-- and an end-to-end check that, after churn, relists and watch drops, the store equals the
-- server and every handler saw a consistent history.
local kinformer = require "kinformer"
local clock = require "kinformer.clock"
local core = require "kinformer.core"
local socket = require "socket"
local fake = require "support.fake_apiserver"
local history = require "support.history"

local function pod(ns, name, node, labels)
  return { apiVersion = "v1", kind = "Pod",
           metadata = { namespace = ns, name = name, labels = labels or { app = "web" } },
           spec = { nodeName = node or "node-1", containers = { { name = "c", image = "nginx" } } },
           status = { phase = "Running" } }
end

local function create(srv, ns, name, node)
  local code, body = srv:request("POST", "/api/v1/namespaces/" .. ns .. "/pods", pod(ns, name, node))
  assert(code == 201, "create " .. name .. ": " .. tostring(code))
  return body
end

local function delete(srv, ns, name)
  local code = srv:request("DELETE", "/api/v1/namespaces/" .. ns .. "/pods/" .. name)
  assert(code == 200, "delete " .. name .. ": " .. tostring(code))
end

local function patch(srv, ns, name, labels)
  local code = srv:request("PATCH", "/api/v1/namespaces/" .. ns .. "/pods/" .. name,
    { metadata = { labels = labels } }, { ["Content-Type"] = "application/merge-patch+json" })
  assert(code == 200, "patch " .. name .. ": " .. tostring(code))
end

local pump = require "support.pump"

-- A handler recording every call as "add ns/name" / "update ns/name" / "delete ns/name".
local function recorder()
  local r = { events = {} }
  r.handler = {
    on_add = function(obj, initial)
      r.events[#r.events + 1] = "add " .. kinformer.key_of(obj) .. (initial and " initial" or "")
    end,
    on_update = function(old, new) r.events[#r.events + 1] = "update " .. kinformer.key_of(new) end,
    on_delete = function(obj) r.events[#r.events + 1] = "delete " .. kinformer.key_of(obj) end,
  }
  function r.count(prefix)
    local n = 0
    for _, e in ipairs(r.events) do if e:sub(1, #prefix) == prefix then n = n + 1 end end
    return n
  end
  function r.reset() r.events = {} end
  return r
end

local function server_state(srv) return srv:versions("pods") end
local store_state, same = fake.versions, fake.same_versions

local srv, client
local function fresh_server(args)
  if srv then srv:stop() end
  srv = fake.start{ args = args or { "--no-default-namespaces", "--bookmark-interval", "0.2" },
                    quiet = true }
  client = assert(kinformer.client{ server = srv.url })
end

local function new_informer(opts)
  opts = opts or {}
  opts.resource = opts.resource or "pods"
  opts.backoff_initial = opts.backoff_initial or 0.05
  opts.backoff_max = opts.backoff_max or 0.2
  return assert(client:informer(opts))
end

describe("shared informer", function()
  local informers = {}
  local function track(inf) informers[#informers + 1] = inf; return inf end

  before_each(function() fresh_server() end)
  after_each(function()
    for _, inf in ipairs(informers) do inf:stop() end
    informers = {}
    clock.now = core.now
    kinformer.set_logger(nil)
  end)
  teardown(function() if srv then srv:stop() end end)

  describe("client-go ports", function()
    it("TestListenerResyncPeriods: each handler resyncs on its own period", function()
      local t = 1000
      clock.now = function() return t end
      create(srv, "default", "pod1")
      create(srv, "default", "pod2")
      local inf = track(new_informer{ resync = 1 })
      local l1, l2, l3 = recorder(), recorder(), recorder()
      l1.handler.resync = 0
      l2.handler.resync = 2
      l3.handler.resync = 3
      inf:add_handler(l1.handler)
      inf:add_handler(l2.handler)
      inf:add_handler(l3.handler)
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      for _, l in ipairs{ l1, l2, l3 } do assert.same(2, l.count("add")) end
      l1.reset(); l2.reset(); l3.reset()

      t = t + 2 -- listener 2 is due
      assert.is_true(pump(inf, 5, function() return l2.count("update") == 2 end))
      pump(inf, 0.2, function() return false end)
      assert.same(0, #l1.events)
      assert.same(0, #l3.events)
      l2.reset()

      t = t + 1 -- listener 3 is due
      assert.is_true(pump(inf, 5, function() return l3.count("update") == 2 end))
      pump(inf, 0.2, function() return false end)
      assert.same(0, #l1.events)
      assert.same(0, #l2.events)
    end)

    it("TestResyncCheckPeriod: handler periods adjust the check period before start", function()
      local inf = track(new_informer{ resync = 12 * 3600 })
      local h1 = inf:add_handler{ resync = 0 }
      assert.same(12 * 3600, inf:resync_check_period())
      assert.same(0, h1:resync_period())
      local h2 = inf:add_handler{ resync = 60 }
      assert.same(60, inf:resync_check_period())
      assert.same(0, h1:resync_period())
      assert.same(60, h2:resync_period())
      local h3 = inf:add_handler{ resync = 55 }
      assert.same(55, inf:resync_check_period())
      assert.same(60, h2:resync_period())
      assert.same(55, h3:resync_period())
      local h4 = inf:add_handler{ resync = 5 }
      assert.same(5, inf:resync_check_period())
      assert.same(0, h1:resync_period())
      assert.same(60, h2:resync_period())
      assert.same(55, h3:resync_period())
      assert.same(5, h4:resync_period())
      -- Below 1 s is raised to 1 s; after start, below the check period is raised to it.
      local h5 = inf:add_handler{ resync = 0.1 }
      assert.same(1, h5:resync_period())
      assert(inf:start())
      local h6 = inf:add_handler{ resync = 0.5 }
      assert.same(1, inf:resync_check_period())
      assert.same(1, h6:resync_period())
    end)

    it("resync without a check period never happens (client-go: resync 0 informer)", function()
      local warned
      kinformer.set_logger(function(level, msg) if level == "warn" then warned = msg end end)
      local inf = track(new_informer{})
      local h = inf:add_handler{ resync = 30 }
      assert.same(0, h:resync_period())
      assert.matches("resync = 0", warned, 1, true)
      assert.same({ 0 }, inf:status().handler_resyncs)
    end)

    it("status lists each handler's effective resync and the check period", function()
      kinformer.set_logger(function() end) -- the raise after start is logged as a warning
      local inf = track(new_informer{ resync = 10 })
      inf:add_handler{}
      inf:add_handler{ resync = 0 }
      inf:add_handler{ resync = 30 }
      assert(inf:start())
      local late = inf:add_handler{ resync = 3 } -- after start: raised to the check period
      assert.same(10, late:resync_period())
      local st = inf:status()
      assert.same(10, st.resync_check_period)
      assert.same({ 10, 0, 30, 10 }, st.handler_resyncs)
    end)

    it("SharedInformerWatchDisruption: handlers catch up after a watch drop", function()
      for i = 1, 5 do create(srv, "default", "p" .. i) end
      local inf = track(new_informer{ resync = 1 })
      local plain, syncing = recorder(), recorder()
      plain.handler.resync = 0
      local live = { {}, {} }
      for i, r in ipairs{ plain, syncing } do
        local seen = live[i]
        inf:add_handler{
          resync = i == 1 and 0 or 1,
          on_add = function(o) seen[kinformer.key_of(o)] = o.metadata.resourceVersion end,
          on_update = function(_, o) seen[kinformer.key_of(o)] = o.metadata.resourceVersion end,
          on_delete = function(o) seen[kinformer.key_of(o)] = nil end,
        }
      end
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      -- The watch drops; while it is down objects change, and one is deleted.
      srv:fault{ path = "^/api/v1/pods$", watch = true, action = "drop", times = 1 }
      create(srv, "default", "p6")
      patch(srv, "default", "p1", { app = "changed" })
      delete(srv, "default", "p2")
      local want = server_state(srv)
      assert.is_true(pump(inf, 10, function()
        return same(live[1], want) and same(live[2], want) and same(store_state(inf:store()), want)
      end))
    end)

    it("ErrorHandling: a failing list is reported by wait_for_sync and status()", function()
      srv:fault{ path = "^/api/v1/pods$", watch = false, action = { status = 403,
        message = 'pods is forbidden: User "system:anonymous" cannot list resource "pods"' },
        times = -1 }
      local inf = track(new_informer{})
      assert(inf:start())
      local ok, err, code = inf:wait_for_sync(1)
      assert.is_nil(ok)
      assert.matches("not synced after 1s", err, 1, true)
      assert.equal("ETIMEDOUT", code)
      assert.matches("403", err, 1, true)
      assert.matches("pods is forbidden", err, 1, true)
      local st = inf:status()
      assert.is_false(st.synced)
      assert.same(403, st.last_error_code)
      assert.same("Forbidden", st.last_error_reason)
      srv:clear_faults()
      assert(inf:wait_for_sync(5))
      assert.is_true(inf:status().synced)
    end)

    it("Transformer: objects are transformed before the store and the handlers", function()
      create(srv, "default", "a")
      local inf = track(new_informer{ transform = function(obj)
        obj.metadata.annotations = { transformed = "yes" }
        obj.spec = nil
        return obj
      end })
      local seen = {}
      inf:add_handler{ on_add = function(o) seen[#seen + 1] = o end,
                       on_update = function(_, o) seen[#seen + 1] = o end }
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      create(srv, "default", "b")
      assert.is_true(pump(inf, 5, function() return #seen == 2 end))
      for _, o in ipairs(seen) do
        assert.same("yes", o.metadata.annotations.transformed)
        assert.is_nil(o.spec)
      end
      assert.is_nil(inf:store():get("default/a").spec)
    end)

    it("Transformer: a transform that raises drops that object, reports it, goes on", function()
      create(srv, "default", "good")
      create(srv, "default", "bad")
      local logged
      kinformer.set_logger(function(level, msg) if level == "error" then logged = msg end end)
      local inf = track(new_informer{ transform = function(obj)
        if obj.metadata.name == "bad" then error("cannot transform") end
        return obj
      end })
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      assert.is_not_nil(inf:store():get("default/good"))
      assert.is_nil(inf:store():get("default/bad"))
      assert.matches("cannot transform", logged, 1, true)
      assert.same(1, inf:status().processing_errors)
    end)

    it("RemoveHandler: a removed handler gets nothing more; removing is idempotent", function()
      local inf = track(new_informer{})
      local a, b = recorder(), recorder()
      local ra = inf:add_handler(a.handler)
      local rb = inf:add_handler(b.handler)
      assert.same(2, inf:status().handlers)
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      create(srv, "default", "x")
      assert.is_true(pump(inf, 5, function() return a.count("add") == 1 and b.count("add") == 1 end))
      assert.is_true(inf:remove_handler(ra))
      assert.is_true(inf:remove_handler(ra))
      assert.same(1, inf:status().handlers)
      assert.is_false(ra:has_synced())
      create(srv, "default", "y")
      assert.is_true(pump(inf, 5, function() return b.count("add") == 2 end))
      assert.same(1, a.count("add"))
      assert.is_true(rb:has_synced())
    end)

    it("MultipleRegistration: one handler registered twice gets every event twice", function()
      local inf = track(new_informer{})
      local r = recorder()
      local reg1 = inf:add_handler(r.handler)
      local reg2 = inf:add_handler(r.handler)
      assert.are_not.equal(reg1, reg2)
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      create(srv, "default", "x")
      assert.is_true(pump(inf, 5, function() return r.count("add") == 2 end))
      inf:remove_handler(reg1)
      create(srv, "default", "y")
      assert.is_true(pump(inf, 5, function() return r.count("add") == 3 end))
      pump(inf, 0.2, function() return false end)
      assert.same(3, r.count("add"))
    end)

    it("TestAddWhileActive: a late handler gets a replay of the cache, then live events", function()
      create(srv, "default", "a")
      create(srv, "default", "b")
      local inf = track(new_informer{})
      local first = recorder()
      inf:add_handler(first.handler)
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      local late = recorder()
      local reg = inf:add_handler(late.handler)
      assert.is_false(reg:has_synced())
      create(srv, "default", "c")
      assert.is_true(pump(inf, 5, function() return late.count("add") == 3 end))
      assert.is_true(reg:has_synced())
      -- The two cached objects came first, flagged initial; the live one after them.
      table.sort(late.events, function(x, y) return x < y end)
      assert.same({ "add default/a initial", "add default/b initial", "add default/c" }, late.events)
      assert.same(3, first.count("add"))
      assert.same(2, first.count("add default/a initial") + first.count("add default/b initial"))
    end)

    it("TestAddOnStoppedSharedInformer: adding a handler after stop fails", function()
      local inf = track(new_informer{})
      assert(inf:start())
      inf:stop()
      local reg, err, code = inf:add_handler{ on_add = function() end }
      assert.is_nil(reg)
      assert.matches("stopped", err)
      assert.equal("ECLOSED", code)
      assert.is_true(inf:is_stopped())
      local ok, serr, scode = inf:start()
      assert.is_nil(ok)
      assert.matches("stopped", serr)
      assert.equal("ECLOSED", scode)
    end)

    it("TestRemoveOnStoppedSharedInformer: removing after stop works", function()
      local inf = track(new_informer{})
      local reg = inf:add_handler{ on_add = function() end }
      assert(inf:start())
      inf:stop()
      assert.is_true(inf:remove_handler(reg))
      assert.same(0, inf:status().handlers)
    end)
  end)

  describe("API", function()
    it("shares one informer per resource, namespace and selectors", function()
      local a = track(new_informer{ resource = "pods", namespace = "default" })
      assert.equal(a, client:informer{ resource = "pods", namespace = "default" })
      assert.are_not.equal(a, track(new_informer{ resource = "pods" }))
      assert.are_not.equal(a, track(new_informer{ resource = "pods", namespace = "default",
                                                  label_selector = "app=web" }))
      assert.has_error(function()
        client:informer{ resource = "pods", namespace = "default", strip_managed_fields = false }
      end, "bad argument #1 to 'informer' (strip_managed_fields differs from the shared informer's)")
      a:stop()
      local b = track(new_informer{ resource = "pods", namespace = "default" })
      assert.are_not.equal(a, b)
    end)

    it("a shared informer's transform must match, absent or present", function()
      local function tf(obj) return obj end
      local plain = track(new_informer{ resource = "pods", namespace = "a" })
      assert.has_error(function()
        client:informer{ resource = "pods", namespace = "a", transform = tf }
      end, "bad argument #1 to 'informer' (transform differs from the shared informer's)")
      local shaped = track(new_informer{ resource = "pods", namespace = "b", transform = tf })
      -- A caller without a transform expects whole objects: it must not get transformed ones.
      assert.has_error(function()
        client:informer{ resource = "pods", namespace = "b" }
      end, "bad argument #1 to 'informer' (transform differs from the shared informer's)")
      assert.equal(shaped, client:informer{ resource = "pods", namespace = "b", transform = tf })
      assert.equal(plain, client:informer{ resource = "pods", namespace = "a" })
    end)

    it("checks the options of a call that finds a shared informer", function()
      local a = track(new_informer{ resource = "pods", namespace = "default" })
      assert.has_error(function()
        client:informer{ resource = "pods", namespace = "default", resync_period = 30 }
      end, "bad argument #1 to 'informer' (unknown option 'resync_period')")
      assert.has_error(function()
        client:informer{ resource = "pods", namespace = "default", resync = "30" }
      end, "bad argument #1 to 'informer' (option 'resync' must be a number of seconds >= 0)")
      assert.equal(a, client:informer{ resource = "pods", namespace = "default" })
    end)

    it("argument errors name the caller's line, not the library's", function()
      local line = debug.getinfo(1, "l").currentline
      local ok, err = pcall(function() client:informer{ resource = "pods", resync_period = 30 } end)
      assert.is_false(ok)
      assert.equal("spec/informer_spec.lua:" .. (line + 1) .. ": bad argument #1 to 'informer' "
        .. "(unknown option 'resync_period')", err:match("spec/informer_spec%.lua:.*"))
      assert.matches("^[^:]*informer_spec%.lua:%d+: ", err)
      local inf = track(new_informer{})
      line = debug.getinfo(1, "l").currentline
      ok, err = pcall(function() inf:add_handler{ on_add = 1 } end)
      assert.matches("informer_spec%.lua:" .. (line + 1) .. ": bad argument #1 to 'add_handler'", err)
      line = debug.getinfo(1, "l").currentline
      ok, err = pcall(function() kinformer.client{ server = srv.url, connect_timeout = -1 } end)
      assert.matches("informer_spec%.lua:" .. (line + 1) .. ": bad argument #1 to 'client'", err)
      line = debug.getinfo(1, "l").currentline
      ok, err = pcall(function() client:reflector{ resource = "pods", fifo = 1 } end)
      assert.matches("informer_spec%.lua:" .. (line + 1) .. ": bad argument #1 to 'reflector'", err)
      line = debug.getinfo(1, "l").currentline
      ok, err = pcall(function() inf:add_indexers{ by = 1 } end)
      assert.matches("informer_spec%.lua:" .. (line + 1) .. ": bad argument #1 to 'add_indexers'", err)
    end)

    it("rejects bad options by raising", function()
      assert.has_error(function() client:informer{ resource = "pods", bogus = 1 } end,
        "bad argument #1 to 'informer' (unknown option 'bogus')")
      assert.has_error(function() client:informer{ resource = "pods", resync = -1 } end)
      -- A name the server does not know is a failure, not a wrong argument (docs/api.md).
      local none, nerr, ncode = client:informer{ resource = "nosuchthings" }
      assert.is_nil(none)
      assert.equal("ENOTFOUND", ncode)
      assert.matches('unknown resource "nosuchthings"', nerr, 1, true)
      local inf = track(new_informer{})
      assert.has_error(function() inf:add_handler{ on_add = 1 } end)
      assert.has_error(function() inf:add_handler{ on_create = function() end } end)
      assert.has_error(function() inf:dispatch(0) end)
      assert.has_error(function() kinformer.run(inf, { timeout = -1 }) end)
    end)

    it("a handler that raises is logged and counted; other handlers go on", function()
      local logged = {}
      kinformer.set_logger(function(level, msg) logged[#logged + 1] = level .. ": " .. msg end)
      local inf = track(new_informer{})
      local bad = inf:add_handler{ on_add = function() error("boom") end }
      local good = recorder()
      inf:add_handler(good.handler)
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      create(srv, "default", "a")
      create(srv, "default", "b")
      assert.is_true(pump(inf, 5, function() return good.count("add") == 2 end))
      assert.same(2, bad:errors())
      local st = inf:status()
      assert.same(2, st.handler_errors)
      assert.matches("boom", st.last_handler_error, 1, true)
      assert.matches("error: informer pods: handler #1 on_add raised: .*boom", logged[1])
    end)

    it("Lua index functions before and after start; the built-in namespace index", function()
      create(srv, "a", "p1", "n1")
      create(srv, "a", "p2", "n2")
      create(srv, "b", "p3", "n1")
      local inf = track(new_informer{})
      assert(inf:add_indexers{ by_node = function(p) return { p.spec.nodeName } end })
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      local store = inf:store()
      assert.same({ "a/p1", "b/p3" }, store:index_keys("by_node", "n1"))
      assert.same({ "a/p1", "a/p2" }, store:index_keys("namespace", "a"))
      assert(inf:add_indexers{ by_app = function(p) return { p.metadata.labels.app } end })
      assert.same(3, #store:by_index("by_app", "web"))
      local ok, err, code = inf:add_indexers{ by_node = function() return {} end }
      assert.is_nil(ok)
      assert.matches("indexer conflict: by_node", err, 1, true)
      assert.equal("EEXIST", code)
      local vals = store:list_index_func_values("by_node")
      table.sort(vals)
      assert.same({ "n1", "n2" }, vals)
      delete(srv, "b", "p3")
      assert.is_true(pump(inf, 5, function() return #store:index_keys("by_node", "n1") == 1 end))
    end)

    it("the store is read-only and returns the same lazily decoded table until it changes", function()
      create(srv, "default", "a")
      local inf = track(new_informer{})
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      local store = inf:store()
      local a = store:get("default/a")
      assert.equal(a, store:get_by_key("default/a"))
      assert.equal(a, store:list()[1])
      assert.equal(a, store:by_index("namespace", "default")[1])
      assert.same("a", a.metadata.name)
      assert.same("nginx", a.spec.containers[1].image)
      assert.has_error(function() a.extra = 1 end)
      assert.has_error(function() store:add(pod("default", "z")) end)
      assert.has_error(function() store:delete("default/a") end)
      -- Plain pairs sees the members read so far where the runtime ignores __pairs (LuaJIT
      -- without 5.2 compat), every member where it honours it; kinformer.pairs sees every
      -- member on every runtime, and after it the table is complete. kinformer.encode gives
      -- the cached JSON; to_table a copy.
      local function keys_of(iter)
        local keys = {}
        for k in iter(a) do keys[#keys + 1] = k end
        table.sort(keys)
        return keys
      end
      local all = { "apiVersion", "kind", "metadata", "spec", "status" }
      local honours = false
      for _ in pairs(setmetatable({}, { __pairs = function() return next, { 1 }, nil end })) do
        honours = true
      end
      assert.same(honours and all or { "metadata", "spec" }, keys_of(pairs))
      assert.same(all, keys_of(kinformer.pairs))
      assert.same(all, keys_of(pairs))
      assert.same(all, keys_of(function(t) return next, t, nil end))
      local json = kinformer.encode(a)
      assert.matches('"name":"a"', json, 1, true)
      local copy = kinformer.to_table(a)
      copy.extra = 1
      copy.metadata.name = "changed"
      assert.same("a", a.metadata.name)
      -- managedFields were dropped (strip_managed_fields defaults to true).
      assert.is_nil(a.metadata.managedFields)
      patch(srv, "default", "a", { app = "v2" })
      assert.is_true(pump(inf, 5, function()
        return store:get("default/a").metadata.labels.app == "v2" end))
      assert.are_not.equal(a, store:get("default/a"))
    end)

    it("after an update of an object that was read, get hands out the table the index function " ..
       "and the handlers got; an object nobody read keeps none", function()
      create(srv, "default", "read")
      create(srv, "default", "unread")
      local seen = setmetatable({}, { __mode = "v" }) -- what the index function read, by name
      local handled = setmetatable({}, { __mode = "v" })
      local inf = track(new_informer{})
      assert(inf:add_indexers{ by_app = function(p)
        seen[p.metadata.name] = p
        return { p.metadata.labels.app }
      end })
      inf:add_handler{ on_update = function(_, new) handled[new.metadata.name] = new end }
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      local store = inf:store()
      assert.equal("web", store:get("default/read").metadata.labels.app)
      patch(srv, "default", "read", { app = "v2" })
      patch(srv, "default", "unread", { app = "v2" })
      assert.is_true(pump(inf, 5, function() return #store:index_keys("by_app", "v2") == 2 end))
      collectgarbage("collect")
      collectgarbage("collect")
      assert.is_table(seen.read)
      assert.is_nil(seen.unread) -- not kept: nobody had read it
      local got = store:get("default/read")
      assert.equal("v2", got.metadata.labels.app)
      assert.is_true(rawequal(seen.read, got))
      assert.is_true(rawequal(handled.read, got))
    end)

    it("metadata is lazy too: name and namespace from the record, the rest on first read", function()
      local note = 'say "hi" \\ caf\u{e9}'
      local code = srv:request("POST", "/api/v1/namespaces/default/pods", {
        apiVersion = "v1", kind = "Pod",
        metadata = { namespace = "default", name = "a", labels = { app = "web" }, generateName = note,
                     annotations = { note = note },
                     managedFields = { { manager = "kubectl", operation = "Apply",
                                         fieldsV1 = { ["f:metadata"] = { ["f:labels"] = {} } } } } },
        spec = { containers = { { name = "c", image = "nginx" } } } })
      assert.equal(201, code)
      local inf = track(new_informer{ strip_managed_fields = false })
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      local a = inf:store():get("default/a")
      local md = a.metadata
      assert.equal(md, a.metadata)
      assert.equal("a", md.name)
      assert.equal("default", md.namespace)
      assert.equal(note, md.annotations.note)
      assert.equal(note, md.generateName) -- a string with escapes in the JSON
      assert.equal("kubectl", md.managedFields[1].manager)
      assert.is_nil(md.deletionTimestamp)
      assert.has_error(function() md.extra = 1 end) -- read-only on every runtime
      -- Reading through the lazy tables gives what decoding the whole object gives.
      local function deep(t)
        if type(t) ~= "table" then return t end
        local c = {}
        for k, v in kinformer.pairs(t) do c[k] = deep(v) end
        return c
      end
      local whole = kinformer.to_table(a)
      assert.same(whole, deep(a))
      assert.same(whole.metadata, kinformer.to_table(md))
      assert.same(whole.metadata, require("cjson").decode(kinformer.encode(md)))
      local copy = kinformer.to_table(md)
      copy.name = "changed"
      assert.equal("a", md.name)
      -- Cluster-scoped: no namespace.
      local nsi = track(new_informer{ resource = "namespaces" })
      srv:request("POST", "/api/v1/namespaces", { apiVersion = "v1", kind = "Namespace",
                                                  metadata = { name = "team-a" } })
      assert(nsi:start())
      assert(nsi:wait_for_sync(5))
      local ns = nsi:store():get("team-a")
      assert.equal("team-a", ns.metadata.name)
      assert.is_nil(ns.metadata.namespace)
      assert.same(kinformer.to_table(ns), deep(ns))
    end)

    it("status() tells what happened", function()
      create(srv, "default", "a")
      local inf = track(new_informer{})
      local st = inf:status()
      assert.is_false(st.started)
      assert.same("", inf:last_sync_resource_version())
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      create(srv, "default", "b")
      delete(srv, "default", "a")
      assert.is_true(pump(inf, 5, function() return inf:status().deletes == 1 end))
      st = inf:status()
      assert.is_true(st.synced)
      assert.same("watching", st.phase)
      assert.same(2, st.adds)
      assert.same(1, st.deletes)
      assert.same(1, st.objects)
      assert.same(0, st.queue_length)
      assert.same(1, st.lists)
      assert.is_true(st.watch_events >= 2)
      assert.is_number(st.last_event_age)
      assert.equal(inf:last_sync_resource_version(), st.resource_version)
      assert.is_true(tonumber(st.resource_version) > 0)
    end)

    it("dispatch never blocks and fd() is readable while work is pending", function()
      local inf = track(new_informer{})
      assert.same(0, inf:dispatch()) -- not started: nothing to do
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      local t0 = socket.gettime()
      assert.same(0, inf:dispatch())
      assert.same("timeout", core.wait({ inf:fd() }, 0))
      assert.is_true(socket.gettime() - t0 < 0.05)
      for i = 1, 5 do create(srv, "default", "p" .. i) end
      assert.same("ready", core.wait({ inf:fd() }, 5))
      -- Level-triggered: after a partial dispatch the fd stays readable.
      local deadline = socket.gettime() + 5
      while inf:status().queue_length < 2 and socket.gettime() < deadline do socket.sleep(0.01) end
      assert.same(1, inf:dispatch(1))
      assert.same("ready", core.wait({ inf:fd() }, 0))
      assert.is_true(pump(inf, 5, function() return inf:store():len() == 5 end))
    end)

    it("run() returns on done, timeout, every informer stopped, and SIGTERM", function()
      local inf = track(new_informer{})
      local r = recorder()
      inf:add_handler(r.handler)
      assert(inf:start())
      create(srv, "default", "a")
      assert.same("done", kinformer.run({ inf }, { timeout = 10,
        done = function() return r.count("add") == 1 end }))
      local t0 = socket.gettime()
      assert.same("timeout", kinformer.run({ inf }, { timeout = 0.3 }))
      assert.is_true(socket.gettime() - t0 < 1)
      -- done() is polled at least every 100 ms even when nothing happens.
      local calls = 0
      kinformer.run({ inf }, { timeout = 0.5, done = function() calls = calls + 1 end })
      assert.is_true(calls >= 4)
      local pid = io.open("/proc/self/stat"):read("*l"):match("^(%d+)")
      local sent = false
      assert.same("SIGTERM", kinformer.run({ inf }, { timeout = 10, done = function()
        if not sent then sent = true; os.execute("kill -TERM " .. pid) end
      end }))
      local other = track(new_informer{ resource = "configmaps" })
      assert(other:start())
      assert.same("stopped", kinformer.run({ inf, other }, { timeout = 10, done = function()
        inf:stop(); other:stop()
      end }))
    end)
  end)

  describe("end to end", function()
    it("after churn, relists and watch drops the store equals the server and every handler " ..
       "saw a consistent history", function()
      fresh_server{ "--no-default-namespaces", "--bookmark-interval", "0.2", "--history", "200" }
      for i = 1, 30 do create(srv, "ns" .. (i % 3), "p" .. i, "n" .. (i % 4)) end
      -- Short watches (timeoutSeconds 1-2 s), so the faults below meet a fresh watch soon.
      local inf = track(new_informer{ resync = 1, watch_timeout = 1 })
      -- Two handlers, one resyncing: each must see a consistent history (support/history.lua).
      local histories = { history.new{ resync = 0, monotonic = true },
                          history.new{ resync = 1, monotonic = true } }
      for _, h in ipairs(histories) do inf:add_handler(h.handler) end
      assert(inf:start())
      assert(inf:wait_for_sync(5))
      -- Random writes, with the watch dropped, expired (410) and answered 500 along the way.
      math.randomseed(7)
      local n = 30
      for step = 1, 120 do
        local r = math.random()
        local i = math.random(1, n)
        local ns, name = "ns" .. (i % 3), "p" .. i
        if r < 0.3 then
          n = n + 1
          create(srv, "ns" .. (n % 3), "p" .. n, "n" .. (n % 4))
        elseif r < 0.8 then
          srv:request("PATCH", "/api/v1/namespaces/" .. ns .. "/pods/" .. name,
            { metadata = { labels = { step = tostring(step) } } },
            { ["Content-Type"] = "application/merge-patch+json" })
        else
          srv:request("DELETE", "/api/v1/namespaces/" .. ns .. "/pods/" .. name)
        end
        if step == 30 then
          srv:fault{ path = "^/api/v1/pods$", watch = true, action = "drop_mid_line", times = 1 }
        elseif step == 60 then
          srv:fault{ path = "^/api/v1/pods$", watch = true, action = { type = "error_event",
                     code = 410, reason = "Expired", message = "too old resource version" } }
        elseif step == 80 then
          srv:compact()
          srv:fault{ path = "^/api/v1/pods$", watch = true, action = "drop", times = 1 }
        elseif step == 100 then
          srv:fault{ path = "^/api/v1/pods$", watch = true, action = { status = 500 }, times = 2 }
        end
        if step % 30 == 0 or step == 100 then
          -- Let the fault hit: wait until the watch it targets ended.
          local restarts = inf:status().watch_restarts + inf:status().errors
          assert.is_true(pump(inf, 10, function()
            local st = inf:status()
            return st.watch_restarts + st.errors > restarts
          end))
        end
        if step % 10 == 0 then inf:dispatch(1000) end
      end
      local want = server_state(srv)
      local converged = pump(inf, 20, function()
        return same(store_state(inf:store()), want) and histories[1]:same(want)
          and histories[2]:same(want)
      end)
      if not converged then
        error("not converged: store: " .. history.diff(want, store_state(inf:store())) ..
              " | " .. require("cjson").encode(inf:status()))
      end
      for _, h in ipairs(histories) do assert(h:check(want)) end
      local st = inf:status()
      assert.is_true(st.watch_restarts >= 3)
      assert.is_true(st.relists >= 1)
    end)
  end)
end)
