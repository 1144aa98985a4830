-- The REST client (lua/kinformer/rest.lua over csrc/request.c) against the fake API server:
-- every verb, patch types, Status errors (409, 404, AlreadyExists, 429 with Retry-After, 500),
-- transport failures, the response size limit, pagination, keys as names, 401 with a rotated
-- token file, and argument errors.
local kinformer = require "kinformer"
local cjson = require "cjson"
local fake = require "support.fake_apiserver"
local exec_plugin = require "support.exec_plugin"

local function cm(name, ns, data)
  return { apiVersion = "v1", kind = "ConfigMap",
           metadata = { name = name, namespace = ns }, data = data or { a = "1" } }
end

describe("REST client", function()
  local srv, client

  setup(function()
    srv = fake.start{ quiet = true }
    client = assert(kinformer.client{ server = srv.url })
  end)

  teardown(function() srv:stop() end)

  before_each(function()
    srv:clear_faults()
    srv:clear_requests()
  end)

  it("creates, gets, updates and deletes, the server's state following each call", function()
    local created = assert(client:create("configmaps", cm("one", "default", { a = "1" })))
    assert.equal("one", created.metadata.name)
    assert.equal("default", created.metadata.namespace)
    assert.truthy(created.metadata.resourceVersion)
    assert.truthy(created.metadata.uid)

    local got = assert(client:get("configmaps", "default/one"))
    assert.equal(created.metadata.uid, got.metadata.uid)
    assert.equal("1", got.data.a)

    got.data.a = "2" -- a plain mutable table
    local updated = assert(client:update("configmaps", got))
    assert.equal("2", updated.data.a)
    assert.is_not.equal(got.metadata.resourceVersion, updated.metadata.resourceVersion)
    local st = srv:state("configmaps", "default")
    local found
    for _, o in ipairs(st.items) do if o.metadata.name == "one" then found = o end end
    assert.equal("2", found.data.a)

    local answer = assert(client:delete("configmaps", "one", { namespace = "default" }))
    assert.is_table(answer)
    local _, err = client:get("configmaps", "default/one")
    assert.equal(404, err.code)
    assert.equal("NotFound", err.reason)
    assert.truthy(tostring(err):find("^404 NotFound: "))
  end)

  it("answers a stale resourceVersion with a 409 Conflict error carrying the Status", function()
    local obj = assert(client:create("configmaps", cm("stale", "default")))
    local fresh = kinformer.to_table(obj)
    fresh.data.a = "fresh"
    assert(client:update("configmaps", fresh))
    obj.data.a = "stale write"
    local res, err = client:update("configmaps", obj)
    assert.is_nil(res)
    assert.is_true(kinformer.is_api_error(err))
    assert.equal(409, err.code)
    assert.equal("Conflict", err.reason)
    assert.equal("Status", err.status.kind)
    assert.truthy(err.message:find("modified", 1, true))
    assert.equal("PUT", err.method)
    assert.equal("/api/v1/namespaces/default/configmaps/stale", err.path)
    assert.truthy(("x: " .. err):find("^x: 409 Conflict: "))
    -- The server kept the fresh write.
    assert.equal("fresh", assert(client:get("configmaps", "default/stale")).data.a)
  end)

  it("reports AlreadyExists for a second create", function()
    assert(client:create("configmaps", cm("twice", "default")))
    local res, err = client:create("configmaps", cm("twice", "default"))
    assert.is_nil(res)
    assert.equal(409, err.code)
    assert.equal("AlreadyExists", err.reason)
  end)

  it("patches with merge, JSON patch and server-side apply", function()
    assert(client:create("configmaps", cm("p", "default", { a = "1", b = "2" })))
    local merged = assert(client:patch("configmaps", "default/p", { data = { b = "3", c = "4" } }))
    assert.same({ a = "1", b = "3", c = "4" }, merged.data)

    local jp = assert(client:patch("configmaps", "p",
      '[{"op":"remove","path":"/data/a"},{"op":"add","path":"/data/d","value":"5"}]',
      { type = "json", namespace = "default" }))
    assert.same({ b = "3", c = "4", d = "5" }, jp.data)

    local applied = assert(client:patch("configmaps", "default/p",
      { apiVersion = "v1", kind = "ConfigMap", metadata = { name = "p", namespace = "default" },
        data = { e = "6" } }, { type = "apply", field_manager = "kinformer-spec", force = true }))
    assert.equal("6", applied.data.e)
    local q = srv:requests_to("PATCH", "/configmaps/p$")
    assert.equal(3, #q)
    assert.equal("kinformer-spec", q[3].query.fieldManager)
    assert.equal("true", q[3].query.force)
    assert.is_nil(q[1].query.force)

    -- Server-side apply creates what does not exist.
    local made = assert(client:patch("configmaps", "default/applied",
      { apiVersion = "v1", kind = "ConfigMap", metadata = { name = "applied" }, data = { x = "y" } },
      { type = "apply", field_manager = "kinformer-spec" }))
    assert.equal("y", made.data.x)
  end)

  it("writes the status subresource with update_status, leaving the spec alone", function()
    local pod = assert(client:create("pods", {
      apiVersion = "v1", kind = "Pod", metadata = { name = "p1", namespace = "default" },
      spec = { containers = { { name = "c", image = "busybox" } } } }))
    pod.status = { phase = "Running" }
    pod.spec.nodeName = "ignored-by-status-write"
    local written = assert(client:update_status("pods", pod))
    assert.equal("Running", written.status.phase)
    assert.is_nil(written.spec.nodeName)
    assert.equal(1, #srv:requests_to("PUT", "^/api/v1/namespaces/default/pods/p1/status$"))
    -- A plain update does not change the status.
    local cur = assert(client:get("pods", "default/p1"))
    cur.status = { phase = "Failed" }
    local upd = assert(client:update("pods", cur))
    assert.equal("Running", upd.status.phase)
  end)

  it("lists every page when no limit is given, one page with a limit", function()
    local items = {}
    for i = 1, 1203 do items[i] = cm(("bulk-%04d"):format(i), "paged", { i = tostring(i) }) end
    srv:objects(items, "configmaps")
    srv:clear_requests()
    local list = assert(client:list("configmaps", { namespace = "paged" }))
    assert.equal(1203, #list.items)
    assert.equal("bulk-0001", list.items[1].metadata.name)
    assert.equal("bulk-1203", list.items[1203].metadata.name)
    assert.is_nil(list.metadata.continue)
    assert.truthy(list.metadata.resourceVersion)
    local q = srv:requests_to("GET", "^/api/v1/namespaces/paged/configmaps$")
    assert.equal(3, #q)
    assert.equal("500", q[1].query.limit)
    assert.is_nil(q[1].query.continue)
    assert.truthy(q[2].query.continue)

    local page = assert(client:list("configmaps", { namespace = "paged", limit = 10 }))
    assert.equal(10, #page.items)
    assert.truthy(page.metadata.continue)
    local page2 = assert(client:list("configmaps", { namespace = "paged", limit = 10,
                                                     continue = page.metadata.continue }))
    assert.equal("bulk-0011", page2.items[1].metadata.name)

    local sel = assert(client:list("configmaps", { field_selector = "metadata.name=bulk-0007" }))
    assert.equal(1, #sel.items)
    assert.equal("paged", sel.items[1].metadata.namespace)
  end)

  it("handles cluster-scoped resources and refuses a namespace for them", function()
    local ns = assert(client:create("namespaces", { apiVersion = "v1", kind = "Namespace",
                                                    metadata = { name = "rest-ns" } }))
    assert.equal("rest-ns", ns.metadata.name)
    assert(client:get("namespaces", "rest-ns"))
    assert.has_error(function() client:get("namespaces", "x/rest-ns") end,
                     "bad argument #2 to 'get' (namespaces is cluster-scoped: no namespace)")
  end)

  it("returns 500, 429 and 403 Status errors with Retry-After", function()
    -- (a Retry-After of at most 10 s is waited for and retried: spec/restclient_spec.lua)
    srv:fault{ path = "/configmaps/x$", action = { status = 429, retry_after = 60 } }
    local res, err = client:get("configmaps", "default/x")
    assert.is_nil(res)
    assert.equal(429, err.code)
    assert.equal("TooManyRequests", err.reason)
    assert.equal(60, err.retry_after)
    assert.equal(0, err.retries)

    srv:fault{ path = "/configmaps/x$", action = { status = 500, message = "etcd is sad" } }
    res, err = client:get("configmaps", "default/x")
    assert.equal(500, err.code)
    assert.equal("InternalError", err.reason)
    assert.truthy(err.message:find("etcd is sad", 1, true))
    assert.is_nil(err.retry_after)

    srv:fault{ method = "POST", path = "/configmaps$", action = { status = 403 } }
    res, err = client:create("configmaps", cm("forbidden", "default"))
    assert.equal(403, err.code)
    assert.equal("Forbidden", err.reason)
    local _, gone = client:get("configmaps", "default/forbidden")
    assert.equal(404, gone.code) -- nothing was written
  end)

  it("fails with a Transport error when the connection drops, and recovers", function()
    -- Twice: the client's connection is kept from the earlier calls, and libcurl sends a
    -- request once more on a new connection when a reused one drops before any answer.
    srv:fault{ path = "/configmaps/drop$", action = "reset", times = 2 }
    local res, err = client:get("configmaps", "default/drop")
    assert.is_nil(res)
    assert.equal(0, err.code)
    assert.equal("Transport", err.reason)
    assert.truthy(err.message:find("GET /api/v1/namespaces/default/configmaps/drop", 1, true))
    local _, after = client:get("configmaps", "default/drop")
    assert.equal(404, after.code) -- the next request goes through
  end)

  it("refuses a response over max_response_bytes", function()
    assert(client:create("configmaps", cm("big", "default", { blob = ("x"):rep(5000) })))
    local res, err = client:get("configmaps", "default/big", { max_response_bytes = 1000 })
    assert.is_nil(res)
    assert.equal("ResponseTooLarge", err.reason)
    assert.truthy(err.message:find("larger than max_response_bytes (1000)", 1, true))
    assert(client:get("configmaps", "default/big", { max_response_bytes = 100000 }))
  end)

  it("passes dry_run, field_manager, delete options and selectors as the API expects", function()
    assert(client:create("configmaps", cm("opts", "default")))
    srv:clear_requests()
    local dry = assert(client:create("configmaps", cm("dry", "default"),
                                     { dry_run = true, field_manager = "me" }))
    assert.equal("dry", dry.metadata.name)
    assert.is_nil(dry.metadata.resourceVersion) -- the server stored nothing
    assert(client:delete("configmaps", "default/opts", { propagation_policy = "Foreground" }))
    client:list("pods", { label_selector = "app in (a,b),tier!=x" })
    local post = srv:requests_to("POST", "/configmaps$")[1]
    assert.equal("All", post.query.dryRun)
    assert.equal("me", post.query.fieldManager)
    local _, gerr = client:get("configmaps", "default/dry")
    assert.equal(404, gerr.code)
    assert.equal(1, #srv:requests_to("DELETE", "/configmaps/opts$"))
    local list = srv:requests_to("GET", "^/api/v1/pods$")[1]
    assert.equal("app in (a,b),tier!=x", list.query.labelSelector)
  end)

  it("writes the status subresource with every patch type, and applies server-side", function()
    local dep = { apiVersion = "apps/v1", kind = "Deployment",
                  metadata = { name = "st", namespace = "default" },
                  spec = { replicas = 1, selector = { matchLabels = { app = "st" } } } }
    assert(client:create("deployments", dep))
    for _, t in ipairs{ "merge", "strategic", "apply" } do
      local res = assert(client:patch_status("deployments", "default/st",
        { apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "st" },
          status = { observedGeneration = 1, replicas = #t } },
        -- the apply takes .status.replicas from the earlier patches' manager ("kinformer",
        -- from the User-Agent): without force that is a 409 conflict, as on kube-apiserver
        { type = t, field_manager = t == "apply" and "rest-spec" or nil, force = t == "apply" }))
      assert.equal(#t, res.status.replicas)
      assert.equal(1, res.metadata.generation)
    end
    local cur = assert(client:get("deployments", "default/st"))
    local res = assert(client:patch_status("deployments", "default/st",
      { { op = "test", path = "/metadata/resourceVersion", value = cur.metadata.resourceVersion },
        { op = "replace", path = "/status/replicas", value = 9 } }, { type = "json" }))
    assert.equal(9, res.status.replicas)
    local q = srv:requests_to("PATCH", "/deployments/st/status$")
    assert.equal(4, #q)
    assert.equal("rest-spec", q[3].query.fieldManager)

    srv:clear_requests()
    local applied = assert(client:apply("configmaps", cm("applied", "default", { k = "v1" }),
                                        { field_manager = "rest-spec" }))
    assert.equal("v1", applied.data.k) -- created
    applied = assert(client:apply("configmaps", cm("applied", "default", { k = "v2" }),
                                  { field_manager = "rest-spec", force = true }))
    assert.equal("v2", applied.data.k)
    q = srv:requests_to("PATCH", "/namespaces/default/configmaps/applied$")
    assert.equal(2, #q)
    assert.equal("rest-spec", q[1].query.fieldManager)
    assert.is_nil(q[1].query.force)
    assert.equal("true", q[2].query.force)
  end)

  it("reads and writes the scale subresource", function()
    assert(client:create("deployments", {
      apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "sc", namespace = "default" },
      spec = { replicas = 2, selector = { matchLabels = { app = "sc" } } } }))
    local s = assert(client:get_scale("deployments", "default/sc"))
    assert.equal("Scale", s.kind)
    assert.equal(2, s.spec.replicas)
    assert.equal("app=sc", s.status.selector)
    s.spec.replicas = 3
    s = assert(client:update_scale("deployments", s))
    assert.equal(3, s.spec.replicas)
    s = assert(client:patch_scale("deployments", "sc", { spec = { replicas = 4 } },
                                  { namespace = "default" }))
    assert.equal(4, s.spec.replicas)
    assert.equal(4, assert(client:get("deployments", "default/sc")).spec.replicas)
    assert.equal(1, #srv:requests_to("GET", "/deployments/sc/scale$"))
    assert.equal(1, #srv:requests_to("PUT", "/deployments/sc/scale$"))
    assert.equal(1, #srv:requests_to("PATCH", "/deployments/sc/scale$"))
    local none, err = client:get_scale("configmaps", "default/x")
    assert.is_nil(none)
    assert.equal(404, err.code)
  end)

  it("tells a changed status and writes only that", function()
    local changed = kinformer.rest.status_changed
    assert.is_false(changed(nil, nil))
    assert.is_false(changed({}, nil))
    assert.is_false(changed({ a = 1, b = { "x", { c = true } } }, { b = { "x", { c = true } }, a = 1 }))
    assert.is_false(changed({ a = 1, gone = cjson.null }, { a = 1 }))
    assert.is_false(changed({ a = 1, empty = {} }, { a = 1 }))
    assert.is_true(changed({ a = 1 }, { a = 2 }))
    assert.is_true(changed({ a = 1 }, { a = 1, b = 0 }))
    assert.is_true(changed({ l = { 1, 2 } }, { l = { 2, 1 } }))
    assert.is_true(changed({ l = { 1, 2 } }, { l = { 1 } }))
    assert.is_true(changed(nil, { a = 1 }))

    local dep = assert(client:create("deployments", {
      apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "sic", namespace = "default" },
      spec = { replicas = 1 } }))
    local new_status = { observedGeneration = 1, conditions = { { type = "Ready", status = "True" } } }
    srv:clear_requests()
    local res, wrote = client:update_status_if_changed("deployments", dep, new_status)
    assert.is_true(wrote)
    assert.same(new_status, res.status)
    assert.equal(1, #srv:requests_to("PUT", "/deployments/sic/status$"))
    srv:clear_requests()
    local same_obj, wrote2 = client:update_status_if_changed("deployments", res,
      { conditions = { { status = "True", type = "Ready" } }, observedGeneration = 1 })
    assert.equal(res, same_obj)
    assert.is_false(wrote2)
    assert.equal(0, #srv:requests())
    -- The write carries the object's resourceVersion: a stale copy gets 409.
    local none, err = client:update_status_if_changed("deployments", dep, { observedGeneration = 2 })
    assert.is_nil(none)
    assert.equal(409, err.code)
    assert.is_nil(dep.status) -- the caller's object is not changed
  end)

  it("compares and writes the status of an informer's cached (read-only) object", function()
    assert(client:create("deployments", {
      apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "cached", namespace = "default" },
      spec = { replicas = 1 } }))
    assert(client:patch_status("deployments", "default/cached",
                               { status = { replicas = 1, conditions = { { type = "Available", status = "True" } } } }))
    local inf = assert(client:informer{ resource = "deployments", namespace = "default" })
    finally(function() inf:stop() end)
    assert(inf:start())
    assert(inf:wait_for_sync(5))
    local cached = assert(inf:store():get("default/cached"))
    srv:clear_requests()
    local same_obj, wrote = client:update_status_if_changed("deployments", cached,
      { conditions = { { status = "True", type = "Available" } }, replicas = 1 })
    assert.is_false(wrote)
    assert.equal(cached, same_obj)
    -- No write (the informer's own watch request may come meanwhile: only writes count).
    local writes = 0
    for _, r in ipairs(srv:requests()) do if r.method ~= "GET" then writes = writes + 1 end end
    assert.equal(0, writes)
    local res, wrote2 = client:update_status_if_changed("deployments", cached, { replicas = 2 })
    assert.is_true(wrote2)
    assert.same({ replicas = 2 }, res.status)
    assert.equal(1, cached.status.replicas) -- the cache's copy is untouched
  end)

  it("names the caller's line in argument errors", function()
    local line = debug.getinfo(1, "l").currentline
    local ok, err = pcall(function() client:get("configmaps", "a", { colour = 1 }) end)
    assert.is_false(ok)
    assert.matches("^[^:]*rest_spec%.lua:" .. (line + 1)
      .. ": bad argument #3 to 'get' %(unknown option 'colour'%)$", err)
  end)

  it("raises for wrong arguments", function()
    assert.has_error(function() client:get("configmaps") end,
                     "bad argument #2 to 'get' (name or \"namespace/name\" key expected, got nil)")
    -- A resource the server does not know is a failure (spec/discovery_spec.lua), not a raise.
    local none, err = client:get("nosuchthings", "a")
    assert.is_nil(none)
    assert.equal("UnknownResource", err.reason)
    assert.has_error(function() client:create("configmaps", "x") end,
                     "bad argument #2 to 'create' (object table expected, got string)")
    assert.has_error(function() client:update("configmaps", { metadata = {} }) end,
                     "bad argument #2 to 'update' (object has no metadata.name)")
    assert.has_error(function() client:patch("configmaps", "a", {}, { type = "apply" }) end,
                     "bad argument #4 to 'patch' (server-side apply needs field_manager)")
    assert.has_error(function() client:patch("configmaps", "a", {}, { type = "yaml" }) end,
                     "bad argument #4 to 'patch' (type must be merge, json, strategic or apply)")
    assert.has_error(function() client:get("configmaps", "a", { nope = 1 }) end,
                     "bad argument #3 to 'get' (unknown option 'nope')")
    assert.has_error(function() client:get("configmaps", "a/b/c") end,
                     "bad argument #2 to 'get' (malformed key \"a/b/c\")")
    assert.has_error(function() client:patch_status("configmaps", "a", {}, { type = "yaml" }) end,
                     "bad argument #4 to 'patch_status' (type must be merge, json, strategic or apply)")
    assert.has_error(function() client:patch_scale("deployments", "a", 5) end,
                     "bad argument #3 to 'patch_scale' (patch table or JSON string expected, got number)")
    assert.has_error(function() client:apply("configmaps", cm("a", "default")) end,
                     "bad argument #3 to 'apply' (server-side apply needs field_manager)")
    assert.has_error(function() client:apply("configmaps", { metadata = { name = "a" } },
                                             { field_manager = "m" }) end,
                     "bad argument #2 to 'apply' (server-side apply needs the object's apiVersion and kind)")
    assert.has_error(function() client:get_scale("deployments", nil) end,
                     "bad argument #2 to 'get_scale' (name or \"namespace/name\" key expected, got nil)")
    assert.has_error(function() client:update_status_if_changed("deployments", cm("a"), "ok") end,
                     "bad argument #3 to 'update_status_if_changed' (status table expected, got string)")
    local line = debug.getinfo(1, "l").currentline
    local ok, err = pcall(function() client:apply("configmaps", cm("a", "default"), { force = true }) end)
    assert.is_false(ok)
    assert.matches("rest_spec%.lua:" .. (line + 1) .. ": bad argument #3 to 'apply'", err)
  end)
end)

describe("REST client authentication", function()
  it("sends a rotated token file's new token; a 401 is an error without the token", function()
    local OLD, NEW = "rest-old-token-3b9f1d", "rest-new-token-8c2e4a"
    local srv = fake.start{ quiet = true, args = { "--token", OLD } }
    local path = os.tmpname()
    finally(function()
      srv:stop()
      os.remove(path)
    end)
    local f = assert(io.open(path, "w"))
    f:write(OLD)
    f:close()
    local client = assert(kinformer.client{ server = srv.url, token_file = path })
    assert(client:create("configmaps", cm("auth", "default")))

    srv:control("POST", "/_fake/auth", { tokens = { NEW } })
    f = assert(io.open(path, "w"))
    f:write(NEW .. "\n")
    f:close()
    srv:clear_requests()
    assert.equal("auth", assert(client:get("configmaps", "default/auth")).metadata.name)
    local q = srv:requests_to("GET", "/configmaps/auth$")
    assert.equal(1, #q) -- the changed file was re-read before sending
    assert.equal("bearer", q[1].auth)

    -- Revoked for good: the 401 comes back as an error, without the token in it.
    srv:control("POST", "/_fake/auth", { tokens = { "someone-else" } })
    local res, err = client:get("configmaps", "default/auth")
    assert.is_nil(res)
    assert.equal(401, err.code)
    assert.equal("Unauthorized", err.reason)
    local text = tostring(err) .. " " .. err.path .. " " .. err.message
    assert.is_nil(text:find(NEW, 1, true))
    assert.is_nil(text:find(OLD, 1, true))
  end)

  it("re-runs an exec plugin after a 401 and retries the request once", function()
    local OLD, NEW = "rest-exec-old-51c0", "rest-exec-new-9e7d"
    local srv = fake.start{ quiet = true, args = { "--token", OLD } }
    local plugin = exec_plugin.new(OLD)
    finally(function()
      srv:stop()
      plugin:remove()
    end)
    local client = assert(kinformer.client{ server = srv.url, exec = plugin.exec })
    assert(client:create("configmaps", cm("exec-auth", "default")))
    srv:control("POST", "/_fake/auth", { tokens = { NEW } })
    plugin:issue(NEW) -- the plugin's cached credential (no expiry) is now stale
    srv:clear_requests()
    assert(client:get("configmaps", "default/exec-auth"))
    local q = srv:requests_to("GET", "/configmaps/exec%-auth$")
    assert.equal(2, #q) -- the 401 with the cached token, then the retry with the new one
    assert.equal("none", q[1].auth)
    assert.equal("bearer", q[2].auth)
  end)

  it("gives a Transport error when nothing listens", function()
    local srv = fake.start{ quiet = true }
    local url = srv.url
    srv:stop()
    local client = assert(kinformer.client{ server = url, token = "transport-secret-77" })
    local res, err = client:get("configmaps", "default/x", { timeout = 2 })
    assert.is_nil(res)
    assert.equal("Transport", err.reason)
    assert.is_nil(tostring(err):find("transport-secret-77", 1, true))
  end)
end)
