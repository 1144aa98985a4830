-- kinformer.objects: owner references (set, refresh, AlreadyOwned, controller-runtime's
-- namespace rules, argument errors), the two comparisons (equal, contains), and against the fake
-- API server create_or_update (creates, updates only on a change, 409 on a stale current) and
-- apply_if_changed (applies, then writes nothing while nothing changed), the request log
-- showing which requests each call made.
local kinformer = require "kinformer"
local objects = require "kinformer.objects"
local cjson = require "cjson"
local fake = require "support.fake_apiserver"

local THIS = "objects_spec%.lua:%d+: "

local function widget(ns, name, uid)
  return { apiVersion = "example.com/v1", kind = "Widget",
           metadata = { namespace = ns, name = name, uid = uid or (name .. "-uid") } }
end

local function cm(ns, name, data)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { namespace = ns, name = name },
           data = data }
end

-- obj as a cache hands it out: a lazily decoded, read-only record (its user table gone).
local function cached(obj)
  local fifo = kinformer.delta_fifo{}
  assert(fifo:add(kinformer.to_table(obj)))
  collectgarbage()
  collectgarbage()
  return fifo:pop()[1].object
end

describe("kinformer.objects owner references", function()
  it("sets the controller reference and returns the object it changed", function()
    local obj = cm("shop", "w1-config")
    local res, err = objects.set_controller_reference(widget("shop", "w1"), obj)
    assert.is_nil(err)
    assert.equal(obj, res)
    assert.same({ { apiVersion = "example.com/v1", kind = "Widget", name = "w1",
                    uid = "w1-uid", controller = true, blockOwnerDeletion = true } },
                obj.metadata.ownerReferences)
    assert.same(obj.metadata.ownerReferences[1], objects.controller_of(obj))
  end)

  it("refreshes the reference to the same object (group, kind, name), keeping other owners", function()
    local obj = cm("shop", "c")
    obj.metadata.ownerReferences = {
      { apiVersion = "v1", kind = "ConfigMap", name = "other", uid = "o-uid" },
      { apiVersion = "example.com/v1beta1", kind = "Widget", name = "w1", uid = "old-uid",
        controller = true },
    }
    -- the owner was deleted and created again: same name, new uid, a newer version
    assert(objects.set_controller_reference(widget("shop", "w1", "new-uid"), obj))
    assert.same({
      { apiVersion = "v1", kind = "ConfigMap", name = "other", uid = "o-uid" },
      { apiVersion = "example.com/v1", kind = "Widget", name = "w1", uid = "new-uid",
        controller = true, blockOwnerDeletion = true },
    }, obj.metadata.ownerReferences)
    -- a second call changes nothing
    assert(objects.set_controller_reference(widget("shop", "w1", "new-uid"), obj))
    assert.equal(2, #obj.metadata.ownerReferences)
  end)

  it("refuses an object controlled by another owner with AlreadyOwned, changing nothing", function()
    local obj = cm("shop", "c")
    assert(objects.set_controller_reference(widget("shop", "w1"), obj))
    local before = kinformer.to_table(obj)
    local res, err = objects.set_controller_reference(widget("shop", "w2"), obj)
    assert.is_nil(res)
    assert.equal("AlreadyOwned", err.reason)
    assert.equal("shop/c is already owned by another controller: Widget example.com/v1 w1 "
      .. "(uid w1-uid)", err.message)
    assert.equal("AlreadyOwned: " .. err.message, tostring(err))
    assert.equal("w1", err.owner.name)
    assert.is_true(objects.is_error(err))
    assert.same(before, obj)
    -- another kind of the same name is another object too
    local other = widget("shop", "w1")
    other.kind = "Gadget"
    assert.equal("AlreadyOwned", select(2, objects.set_controller_reference(other, obj)).reason)
    -- a non-controller reference is no obstacle
    local plain = cm("shop", "p")
    assert(objects.set_owner_reference(widget("shop", "w1"), plain))
    assert(objects.set_controller_reference(widget("shop", "w2"), plain))
    assert.equal(2, #plain.metadata.ownerReferences)
    assert.equal("w2", objects.controller_of(plain).name)
  end)

  it("follows controller-runtime's namespace rules", function()
    local res, err = objects.set_controller_reference(widget("shop", "w1"), cm("prod", "c"))
    assert.is_nil(res)
    assert.equal("InvalidOwner", err.reason)
    assert.equal("cross-namespace owner references are disallowed, owner's namespace shop, "
      .. "obj's namespace prod", err.message)

    local node_scoped = { apiVersion = "v1", kind = "PersistentVolume", metadata = { name = "pv" } }
    res, err = objects.set_owner_reference(widget("shop", "w1"), node_scoped)
    assert.is_nil(res)
    assert.equal("InvalidOwner", err.reason)
    assert.truthy(err.message:find("^cluster%-scoped resource must not have a namespace%-scoped "
      .. "owner, owner's namespace shop"))
    assert.is_nil(node_scoped.metadata.ownerReferences)

    -- a cluster-scoped owner may own objects anywhere
    local cluster_owner = { apiVersion = "example.com/v1", kind = "ClusterWidget",
                            metadata = { name = "cw", uid = "cw-uid" } }
    assert(objects.set_controller_reference(cluster_owner, cm("prod", "c")))
    assert(objects.set_controller_reference(cluster_owner, node_scoped))
  end)

  it("reads a cached owner and refuses a cached object", function()
    local owner = cached(widget("shop", "w1"))
    local obj = cm("shop", "c")
    assert(objects.set_controller_reference(owner, obj))
    assert.equal("w1-uid", obj.metadata.ownerReferences[1].uid)
    assert.equal("Widget", objects.controller_of(cached(obj)).kind)
    assert.has_error(function() objects.set_controller_reference(owner, cached(cm("shop", "x"))) end)
    local ok, msg = pcall(objects.set_controller_reference, owner, cached(cm("shop", "x")))
    assert.is_false(ok)
    assert.truthy(msg:find("read-only", 1, true))
  end)

  it("raises at the caller's line for an owner without uid, name, apiVersion or kind", function()
    local no_uid = widget("shop", "w1")
    no_uid.metadata.uid = nil
    local ok, msg = pcall(function() objects.set_controller_reference(no_uid, cm("shop", "c")) end)
    assert.is_false(ok)
    assert.truthy(msg:find(THIS .. "bad argument #1 to 'set_controller_reference' %(owner has no "
      .. "metadata.name and metadata.uid"), msg)
    local no_kind = widget("shop", "w1")
    no_kind.kind = nil
    ok, msg = pcall(function() objects.set_owner_reference(no_kind, cm("shop", "c")) end)
    assert.truthy(msg:find(THIS .. "bad argument #1 to 'set_owner_reference' %(owner has no "
      .. "apiVersion and kind%)"), msg)
    ok, msg = pcall(function() objects.set_controller_reference(widget("shop", "w"), "c") end)
    assert.truthy(msg:find(THIS .. "bad argument #2 to 'set_controller_reference' %(object table "
      .. "expected, got string%)"), msg)
    ok, msg = pcall(function() objects.set_controller_reference(widget("shop", "w"), {}) end)
    assert.truthy(msg:find("object has no metadata", 1, true), msg)
  end)

  it("sets a plain owner reference, without controller or blockOwnerDeletion", function()
    local obj = cm("shop", "c")
    assert(objects.set_owner_reference(widget("shop", "w1"), obj))
    assert.same({ { apiVersion = "example.com/v1", kind = "Widget", name = "w1", uid = "w1-uid" } },
                obj.metadata.ownerReferences)
    assert.is_nil(objects.controller_of(obj))
    assert.is_nil(objects.controller_of({ metadata = { ownerReferences = cjson.null } }))
  end)
end)

describe("kinformer.objects comparisons", function()
  it("equal: deep, 3 == 3.0, null as absent, an empty table not as absent", function()
    assert.is_true(objects.equal({ a = { b = { 1, 2, { c = 3 } } } }, { a = { b = { 1, 2, { c = 3.0 } } } }))
    assert.is_true(objects.equal({ a = 1, b = cjson.null }, { a = 1 }))
    assert.is_true(objects.equal({ a = 1 }, { a = 1, b = cjson.null }))
    assert.is_false(objects.equal({ a = 1, e = {} }, { a = 1 }))
    assert.is_false(objects.equal({ a = 1 }, { a = 1, extra = "x" }))
    assert.is_false(objects.equal({ l = { 1, 2 } }, { l = { 2, 1 } }))
    assert.is_false(objects.equal({ n = 3 }, { n = "3" }))
    assert.is_true(objects.equal(cached(cm("a", "b", { x = "1" })), cm("a", "b", { x = "1" })))
  end)

  it("contains: maps as subsets, lists by length and in order, null, numbers", function()
    local cur = { apiVersion = "v1", kind = "Service",
                  metadata = { name = "s", namespace = "a", labels = { app = "w", extra = "x" },
                               resourceVersion = "7" },
                  spec = { ports = { { port = 80, targetPort = 8080, protocol = "TCP" } },
                           selector = { app = "w" }, replicas = 3 } }
    assert.is_true(objects.contains(cur, { metadata = { name = "s", labels = { app = "w" } },
                                           spec = { ports = { { port = 80.0, targetPort = 8080 } },
                                                    replicas = 3.0 } }))
    -- a defaulted field inside a list element (protocol) does not count; a missing element does
    assert.is_false(objects.contains(cur, { spec = { ports = { { port = 80 }, { port = 443 } } } }))
    assert.is_false(objects.contains(cur, { spec = { ports = { { port = 81 } } } }))
    assert.is_false(objects.contains(cur, { metadata = { labels = { app = "v" } } }))
    assert.is_false(objects.contains(cur, { spec = { replicas = "3" } }))
    assert.is_false(objects.contains(cur, { spec = { missing = {} } }))
    assert.is_true(objects.contains(cur, { spec = { selector = {} } }))
    assert.is_true(objects.contains(cur, { spec = { gone = cjson.null } }))
    assert.is_false(objects.contains(cur, { spec = { replicas = cjson.null } }))
    -- apiVersion and kind name the schema: not compared
    assert.is_true(objects.contains(cur, { apiVersion = "v2", kind = "Other" }))
  end)

  it("contains: ownerReferences as a set by uid", function()
    local cur = { metadata = { name = "c", ownerReferences = {
      { apiVersion = "v1", kind = "ConfigMap", name = "x", uid = "x-uid" },
      { apiVersion = "example.com/v1", kind = "Widget", name = "w", uid = "w-uid",
        controller = true, blockOwnerDeletion = true } } } }
    local mine = { apiVersion = "example.com/v1", kind = "Widget", name = "w", uid = "w-uid",
                   controller = true, blockOwnerDeletion = true }
    assert.is_true(objects.contains(cur, { metadata = { ownerReferences = { mine } } }))
    local renamed = kinformer.to_table(mine)
    renamed.uid = "other-uid"
    assert.is_false(objects.contains(cur, { metadata = { ownerReferences = { renamed } } }))
    local not_controller = kinformer.to_table(mine)
    not_controller.controller = false
    assert.is_false(objects.contains(cur, { metadata = { ownerReferences = { not_controller } } }))
    assert.is_false(objects.contains({ metadata = {} }, { metadata = { ownerReferences = { mine } } }))
    -- a cached current is read in place
    assert.is_true(objects.contains(cached(kinformer.to_table(cur)),
      { metadata = { ownerReferences = { mine } } }))
  end)
end)

describe("kinformer.objects against the API server", function()
  local srv, client
  local ns_seq = 0
  local function new_ns()
    ns_seq = ns_seq + 1
    return "obj-" .. ns_seq
  end

  setup(function()
    srv = fake.start{ quiet = true }
    client = assert(kinformer.client{ server = srv.url })
    assert(client:get("namespaces", "default")) -- discovery made before the request logs count
  end)

  teardown(function() srv:stop() end)

  before_each(function()
    srv:clear_faults()
    srv:clear_requests()
  end)

  -- "METHOD path" of the API requests made since the last clear
  local function log()
    local out = {}
    for _, q in ipairs(srv:requests()) do out[#out + 1] = q.method .. " " .. q.path end
    srv:clear_requests()
    return out
  end

  local function set_data(data)
    return function(o)
      o.data = data
    end
  end

  it("create_or_update creates, then writes only when mutate changed something", function()
    local ns = new_ns()
    local path = "/api/v1/namespaces/" .. ns .. "/configmaps"
    local owner = assert(client:create("configmaps", cm(ns, "owner", { a = "1" })))
    srv:clear_requests()
    local function mutate(o, current)
      assert(objects.set_controller_reference(owner, o))
      o.data = { mode = "fast", n = "3" }
    end
    local res, op = objects.create_or_update(client, "configmaps", cm(ns, "c"), mutate)
    assert.equal("created", op)
    assert.equal("fast", res.data.mode)
    assert.equal(owner.metadata.uid, objects.controller_of(res).uid)
    assert.same({ "GET " .. path .. "/c", "POST " .. path }, log())

    res, op = objects.create_or_update(client, "configmaps", cm(ns, "c"), mutate)
    assert.equal("unchanged", op)
    assert.equal("fast", res.data.mode)
    assert.same({ "GET " .. path .. "/c" }, log()) -- no PUT

    local seen_current
    res, op = objects.create_or_update(client, "configmaps", cm(ns, "c"), function(o, current)
      seen_current = current
      mutate(o)
      o.data.mode = "slow"
    end)
    assert.equal("updated", op)
    assert.equal("slow", res.data.mode)
    assert.equal("fast", seen_current.data.mode) -- the object as read is left alone
    assert.same({ "GET " .. path .. "/c", "PUT " .. path .. "/c" }, log())
    assert.equal("slow", assert(client:get("configmaps", ns .. "/c")).data.mode)
  end)

  it("create_or_update reads opts.current instead of the API server, and a stale one gets 409", function()
    local ns = new_ns()
    local path = "/api/v1/namespaces/" .. ns .. "/configmaps"
    local cache = {}
    local function current(namespace, name) return cache[namespace .. "/" .. name] end

    local res, op = objects.create_or_update(client, "configmaps", cm(ns, "c"),
      set_data({ v = "1" }), { current = current })
    assert.equal("created", op)
    assert.same({ "POST " .. path }, log()) -- no GET
    cache[ns .. "/c"] = cached(res)

    res, op = objects.create_or_update(client, "configmaps", cm(ns, "c"), set_data({ v = "1" }),
      { current = current })
    assert.equal("unchanged", op)
    assert.equal(cache[ns .. "/c"], res)
    assert.same({}, log())

    -- someone else writes; the cache has not seen it yet
    local fresh = assert(client:get("configmaps", ns .. "/c"))
    fresh.data.v = "theirs"
    assert(client:update("configmaps", fresh))
    srv:clear_requests()
    res, op = objects.create_or_update(client, "configmaps", cm(ns, "c"), set_data({ v = "2" }),
      { current = current })
    assert.is_nil(res)
    assert.equal(409, op.code)
    assert.equal("Conflict", op.reason)
    assert.same({ "PUT " .. path .. "/c" }, log())
    assert.equal("theirs", assert(client:get("configmaps", ns .. "/c")).data.v)

    -- the cache lagging behind a create: AlreadyExists, for the caller's retry
    res, op = objects.create_or_update(client, "configmaps", cm(ns, "c"), set_data({ v = "2" }),
      { current = function() return nil end })
    assert.is_nil(res)
    assert.equal("AlreadyExists", op.reason)
  end)

  it("create_or_update of an object without namespace: the client's namespace", function()
    local obj = { metadata = { name = "no-namespace" } }
    local res, op = objects.create_or_update(client, "configmaps", obj, set_data({ v = "1" }))
    assert.equal("created", op)
    assert.equal("default", res.metadata.namespace)
    res, op = objects.create_or_update(client, "configmaps", { metadata = { name = "no-namespace" } },
      set_data({ v = "1" }))
    assert.equal("unchanged", op)
    assert.same({ "GET /api/v1/namespaces/default/configmaps/no-namespace",
                  "POST /api/v1/namespaces/default/configmaps",
                  "GET /api/v1/namespaces/default/configmaps/no-namespace" }, log())
  end)

  it("create_or_update returns mutate's error and the read's error, writing nothing", function()
    local ns = new_ns()
    local res, err = objects.create_or_update(client, "configmaps", cm(ns, "c"),
      function() return nil, "not now" end)
    assert.is_nil(res)
    assert.equal("not now", err)
    assert.same({ "GET /api/v1/namespaces/" .. ns .. "/configmaps/c" }, log())

    srv:fault{ method = "GET", path = "/configmaps/c$", action = { status = 500 } }
    res, err = objects.create_or_update(client, "configmaps", cm(ns, "c"), set_data({ v = "1" }))
    assert.is_nil(res)
    assert.equal(500, err.code)
    assert.equal(1, #log())

    local ok, msg = pcall(function()
      objects.create_or_update(client, "configmaps", cm(ns, "c"), function(o) o.metadata.name = "d" end)
    end)
    assert.is_false(ok)
    assert.truthy(msg:find(THIS .. "create_or_update: mutate may not change", 1), msg)
    ok, msg = pcall(function()
      objects.create_or_update(client, "configmaps", cached(cm(ns, "c")), set_data({}))
    end)
    assert.truthy(msg:find(THIS .. "bad argument #3 to 'create_or_update' %(the object is "
      .. "read%-only"), msg)
    ok, msg = pcall(function() objects.create_or_update(client, "configmaps", cm(ns, "c")) end)
    assert.truthy(msg:find(THIS .. "bad argument #4 to 'create_or_update' %(mutate function "
      .. "expected, got nil%)"), msg)
    ok, msg = pcall(function()
      objects.create_or_update(client, "configmaps", cm(ns, "c"), set_data({}), { currnet = 1 })
    end)
    assert.truthy(msg:find(THIS .. "bad argument #5 to 'create_or_update' %(unknown option "
      .. "'currnet'%)"), msg)
  end)

  it("apply_if_changed applies (creating), then writes nothing while the object contains desired", function()
    local ns = new_ns()
    local path = "/api/v1/namespaces/" .. ns .. "/services/web"
    local owner = assert(client:create("configmaps", cm(ns, "owner", { a = "1" })))
    local function desired(port)
      local svc = { apiVersion = "v1", kind = "Service",
                    metadata = { name = "web", namespace = ns, labels = { app = "web" } },
                    spec = { selector = { app = "web" }, ports = { { port = port, targetPort = 8080 } } } }
      return assert(objects.set_controller_reference(owner, svc))
    end
    local APPLY = { field_manager = "widget-operator" }
    srv:clear_requests()

    local res, op = objects.apply_if_changed(client, "services", desired(80), APPLY)
    assert.equal("applied", op)
    assert.equal(80, res.spec.ports[1].port)
    assert.equal(owner.metadata.uid, objects.controller_of(res).uid)
    assert.same({ "GET " .. path, "PATCH " .. path }, log())

    res, op = objects.apply_if_changed(client, "services", desired(80.0), APPLY)
    assert.equal("unchanged", op)
    assert.same({ "GET " .. path }, log())

    -- fields desired does not name (another manager's label, a defaulted protocol, another
    -- owner) do not count
    local other = assert(client:get("services", ns .. "/web"))
    other.metadata.labels.team = "b"
    other.spec.ports[1].protocol = "TCP"
    table.insert(other.metadata.ownerReferences, 1,
      { apiVersion = "v1", kind = "Secret", name = "s", uid = "s-uid" })
    assert(client:update("services", other))
    srv:clear_requests()
    res, op = objects.apply_if_changed(client, "services", desired(80), APPLY)
    assert.equal("unchanged", op)
    assert.equal("b", res.metadata.labels.team)
    assert.same({ "GET " .. path }, log())

    res, op = objects.apply_if_changed(client, "services", desired(81), APPLY)
    assert.equal("applied", op)
    assert.equal(81, res.spec.ports[1].port)
    local reqs = srv:requests()
    assert.equal(2, #reqs)
    assert.equal("PATCH", reqs[2].method)
    assert.equal("widget-operator", reqs[2].query.fieldManager)
    assert.is_nil(reqs[2].query.force)
    srv:clear_requests()

    -- opts.current from an informer's cache: no GET; force passed on
    local inf = assert(client:informer{ resource = "services", namespace = ns })
    finally(function() inf:stop() end)
    assert(inf:start())
    assert(inf:wait_for_sync(5))
    srv:clear_requests()
    local store = inf:store()
    local function current(namespace, name) return store:get_by_key(namespace .. "/" .. name) end
    local opts = { field_manager = "widget-operator", current = current, force = true }
    res, op = objects.apply_if_changed(client, "services", desired(81), opts)
    assert.equal("unchanged", op)
    assert.equal(store:get_by_key(ns .. "/web"), res)
    res, op = objects.apply_if_changed(client, "services", desired(82), opts)
    assert.equal("applied", op)
    reqs = {}
    for _, r in ipairs(srv:requests()) do
      if r.path == path then reqs[#reqs + 1] = r end -- not the informer's watch
    end
    assert.equal(1, #reqs)
    assert.equal("PATCH", reqs[1].method)
    assert.equal("true", reqs[1].query.force)
  end)

  it("apply_if_changed needs a field manager, apiVersion and kind, and returns the read's error", function()
    local ns = new_ns()
    local svc = { apiVersion = "v1", kind = "Service", metadata = { name = "x", namespace = ns } }
    local ok, msg = pcall(function() objects.apply_if_changed(client, "services", svc) end)
    assert.is_false(ok)
    assert.truthy(msg:find(THIS .. "bad argument #4 to 'apply_if_changed' %(option "
      .. "'field_manager' is required"), msg)
    ok, msg = pcall(function()
      objects.apply_if_changed(client, "services", { metadata = { name = "x" } }, { field_manager = "m" })
    end)
    assert.truthy(msg:find(THIS .. "bad argument #3 to 'apply_if_changed' %(server%-side apply "
      .. "needs the object's apiVersion and kind%)"), msg)
    ok, msg = pcall(function() objects.apply_if_changed(nil, "services", svc, { field_manager = "m" }) end)
    assert.truthy(msg:find(THIS .. "bad argument #1 to 'apply_if_changed' %(kinformer client "
      .. "expected, got nil%)"), msg)
    assert.same({}, log())

    srv:fault{ method = "GET", path = "/services/x$", action = { status = 403 } }
    local res, err = objects.apply_if_changed(client, "services", svc, { field_manager = "m" })
    assert.is_nil(res)
    assert.equal("Forbidden", err.reason)
    assert.equal(1, #log()) -- no PATCH
    res, err = objects.apply_if_changed(client, "services", svc, { field_manager = "m",
      current = function() return nil, "cache closed" end })
    assert.is_nil(res)
    assert.equal("cache closed", err)
  end)
end)
