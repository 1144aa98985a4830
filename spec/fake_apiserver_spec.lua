-- The fake API server (tools/fake-apiserver) behaves like a real one where our specs rely on
-- it: CRUD, lists, resourceVersions, watches, selectors, auth, faults, the request log,
-- generated data, and kubectl against it.
local fake = require "support.fake_apiserver"
local cjson = require "cjson"
local socket = require "socket"

-- helpers ------------------------------------------------------------------------------

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Run a command; -> stdout, exit code.
local function run(cmd)
  local p = assert(io.popen(cmd, "r"))
  local out = p:read("a")
  local _, _, rc = p:close()
  return out, rc
end

-- curl a URL: -> {rc = curl exit code, code = HTTP status, time = seconds, body = bytes}
local function curl(url, extra, max_time)
  local tmp = os.tmpname()
  local w, rc = run(("curl -s --max-time %s %s -o %s -w '%%{http_code} %%{time_total}' %s 2>/dev/null")
    :format(max_time or 10, extra or "", tmp, quote(url)))
  local f = assert(io.open(tmp, "rb"))
  local body = f:read("a")
  f:close()
  os.remove(tmp)
  local code, t = w:match("(%d+) ([%d%.]+)")
  return { rc = rc, code = tonumber(code), time = tonumber(t), body = body }
end

-- Split a body into lines; the last element is a partial line when the body does not end
-- with "\n" (returned separately).
local function lines(body)
  local out, pos = {}, 1
  while true do
    local nl = body:find("\n", pos, true)
    if not nl then break end
    out[#out + 1] = body:sub(pos, nl - 1)
    pos = nl + 1
  end
  return out, pos <= #body and body:sub(pos) or nil
end

local function events(body)
  local out = {}
  for _, l in ipairs((lines(body))) do out[#out + 1] = cjson.decode(l) end
  return out
end

local function names(list)
  local out = {}
  for i, o in ipairs(list) do out[i] = o.metadata.name end
  table.sort(out)
  return out
end

local function types_and_names(evs)
  local out = {}
  for i, e in ipairs(evs) do out[i] = e.type .. " " .. (e.object.metadata.name or "") end
  return out
end

-- A watch over a raw socket with HTTP/1.0 (no chunk framing): read events one at a time.
local function open_watch(srv, path)
  local c = assert(socket.connect("127.0.0.1", srv.port))
  c:settimeout(5)
  assert(c:send("GET " .. path .. " HTTP/1.0\r\nHost: fake\r\n\r\n"))
  local status = assert(c:receive("*l"))
  local w = { code = tonumber(status:match("^HTTP/1%.%d (%d+)")), sock = c }
  repeat local l = c:receive("*l") until l == "" or l == nil
  function w:next(timeout)
    c:settimeout(timeout or 3)
    local l, err = c:receive("*l")
    if not l then return nil, err end
    return cjson.decode(l)
  end
  function w:close() c:close() end
  return w
end

local function wait_until(fn, timeout)
  local deadline = socket.gettime() + (timeout or 3)
  repeat
    local v = fn()
    if v then return v end
    socket.sleep(0.05)
  until socket.gettime() > deadline
  return fn()
end

local function configmap(name, data)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name }, data = data or { k = "v" } }
end

local function pod(name, labels, node)
  return { apiVersion = "v1", kind = "Pod",
           metadata = { name = name, labels = labels or cjson.empty_array },
           spec = { nodeName = node, containers = { { name = "c", image = "busybox" } } } }
end

local function create(srv, ns, resource, obj)
  local code, body = srv:request("POST", "/api/v1/namespaces/" .. ns .. "/" .. resource, obj)
  assert(code == 201, "create " .. resource .. " -> " .. tostring(code) .. " " .. cjson.encode(body))
  return body
end

-- the main server ------------------------------------------------------------------------

describe("fake apiserver", function()
  local srv

  setup(function()
    srv = fake.start{ args = { "--bookmark-interval", "0.3", "--continue-ttl", "2",
                               "--resource", "example.com/v1/widgets/Widget",
                               "--resource", "example.com/v1/gadgets/Gadget/cluster" } }
  end)

  teardown(function()
    if srv then srv:stop() end
  end)

  describe("CRUD", function()
    it("creates, gets, updates with conflicts, patches and deletes", function()
      local created = create(srv, "crud", "configmaps", configmap("one", { a = "1" }))
      assert.equal("ConfigMap", created.kind)
      assert.equal("v1", created.apiVersion)
      assert.truthy(created.metadata.uid:match("^%x+%-%x+%-%x+%-%x+%-%x+$"))
      assert.truthy(created.metadata.creationTimestamp:match("^%d+%-%d+%-%d+T%d+:%d+:%d+Z$"))
      local rv1 = tonumber(created.metadata.resourceVersion)
      assert.equal(srv:resource_version(), rv1)

      local code, got = srv:request("GET", "/api/v1/namespaces/crud/configmaps/one")
      assert.equal(200, code)
      assert.same(created, got)

      code, got = srv:request("POST", "/api/v1/namespaces/crud/configmaps", configmap("one"))
      assert.equal(409, code)
      assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
                    message = 'configmaps "one" already exists', reason = "AlreadyExists",
                    details = { name = "one", kind = "configmaps" }, code = 409 }, got)

      -- PUT with the current resourceVersion succeeds and bumps it
      local upd = configmap("one", { a = "2" })
      upd.metadata.resourceVersion = tostring(rv1)
      code, got = srv:request("PUT", "/api/v1/namespaces/crud/configmaps/one", upd)
      assert.equal(200, code)
      assert.equal("2", got.data.a)
      assert.equal(rv1 + 1, tonumber(got.metadata.resourceVersion))
      assert.equal(created.metadata.uid, got.metadata.uid)

      -- the same PUT again is now stale
      code, got = srv:request("PUT", "/api/v1/namespaces/crud/configmaps/one", upd)
      assert.equal(409, code)
      assert.equal("Conflict", got.reason)
      assert.equal('Operation cannot be fulfilled on configmaps "one": the object has been modified; '
                   .. "please apply your changes to the latest version and try again", got.message)

      code, got = srv:request("PATCH", "/api/v1/namespaces/crud/configmaps/one",
                              { metadata = { labels = { x = "y" } }, data = { b = "3" } },
                              { ["Content-Type"] = "application/merge-patch+json" })
      assert.equal(200, code)
      assert.same({ a = "2", b = "3" }, got.data)
      assert.same({ x = "y" }, got.metadata.labels)
      assert.equal(rv1 + 2, tonumber(got.metadata.resourceVersion))

      code, got = srv:request("PATCH", "/api/v1/namespaces/crud/configmaps/one",
                              { { op = "remove", path = "/data/a" } },
                              { ["Content-Type"] = "application/json-patch+json" })
      assert.equal(200, code)
      assert.same({ b = "3" }, got.data)

      code, got = srv:request("DELETE", "/api/v1/namespaces/crud/configmaps/one")
      assert.equal(200, code)
      assert.equal("one", got.metadata.name)
      assert.equal(rv1 + 4, tonumber(got.metadata.resourceVersion))

      code, got = srv:request("GET", "/api/v1/namespaces/crud/configmaps/one")
      assert.equal(404, code)
      assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
                    message = 'configmaps "one" not found', reason = "NotFound",
                    details = { name = "one", kind = "configmaps" }, code = 404 }, got)
    end)

    it("answers dryRun=All as the write would, and stores nothing", function()
      local head = srv:resource_version()
      local code, got = srv:request("POST", "/api/v1/namespaces/dry/configmaps?dryRun=All",
                                    configmap("one", { a = "1" }))
      assert.equal(201, code)
      assert.equal("one", got.metadata.name)
      assert.truthy(got.metadata.uid and got.metadata.creationTimestamp)
      assert.is_nil(got.metadata.resourceVersion) -- never stored: no resourceVersion
      assert.equal(404, (srv:request("GET", "/api/v1/namespaces/dry/configmaps/one")))
      assert.equal(head, srv:resource_version())

      local created = create(srv, "dry", "configmaps", configmap("one", { a = "1" }))
      head = srv:resource_version()
      local path = "/api/v1/namespaces/dry/configmaps/one"
      local upd = configmap("one", { a = "2" })
      code, got = srv:request("PUT", path .. "?dryRun=All", upd)
      assert.equal(200, code)
      assert.same({ a = "2" }, got.data)
      assert.equal(created.metadata.resourceVersion, got.metadata.resourceVersion)
      code, got = srv:request("PATCH", path .. "?dryRun=All", { data = { b = "3" } },
                              { ["Content-Type"] = "application/merge-patch+json" })
      assert.equal(200, code)
      assert.same({ a = "1", b = "3" }, got.data)
      -- Checks still apply: a stale resourceVersion is a conflict, dry or not.
      upd.metadata.resourceVersion = "1"
      assert.equal(409, (srv:request("PUT", path .. "?dryRun=All", upd)))
      code, got = srv:request("DELETE", path .. "?dryRun=All")
      assert.equal(200, code)
      assert.equal("one", got.metadata.name)
      code, got = srv:request("DELETE", "/api/v1/namespaces/dry/configmaps?dryRun=All")
      assert.equal(200, code)
      assert.equal(1, #got.items)
      code, got = srv:request("GET", path)
      assert.equal(200, code)
      assert.same(created, got)
      assert.equal(head, srv:resource_version()) -- no write, so no event either

      code, got = srv:request("POST", "/api/v1/namespaces/dry/configmaps?dryRun=Some",
                              configmap("two"))
      assert.equal(422, code)
      assert.equal("Invalid", got.reason)
      assert.equal('CreateOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["Some"]: '
                   .. 'supported values: "All"', got.message)
      assert.equal(404, (srv:request("GET", "/api/v1/namespaces/dry/configmaps/two")))
    end)

    it("serves group, cluster-scoped and custom resources on their paths", function()
      local code, dep = srv:request("POST", "/apis/apps/v1/namespaces/crud/deployments",
        { apiVersion = "apps/v1", kind = "Deployment", metadata = { name = "web" },
          spec = { replicas = 2 } })
      assert.equal(201, code)
      assert.equal(1, dep.metadata.generation)
      local _, list = srv:request("GET", "/apis/apps/v1/deployments")
      assert.equal("DeploymentList", list.kind)
      assert.equal("apps/v1", list.apiVersion)
      assert.same({ "web" }, names(list.items))
      assert.is_nil(list.items[1].kind) -- list items carry no kind, like the real server

      code = srv:request("POST", "/apis/example.com/v1/namespaces/crud/widgets",
        { apiVersion = "example.com/v1", kind = "Widget", metadata = { name = "w1" }, spec = { size = 3 } })
      assert.equal(201, code)
      code = srv:request("POST", "/apis/example.com/v1/gadgets",
        { apiVersion = "example.com/v1", kind = "Gadget", metadata = { name = "g1" } })
      assert.equal(201, code)
      local _, g = srv:request("GET", "/apis/example.com/v1/gadgets/g1")
      assert.is_nil(g.metadata.namespace)
      assert.equal(404, (srv:request("GET", "/apis/example.com/v1/namespaces/crud/gadgets/g1")))
      local _, w = srv:request("GET", "/apis/example.com/v1/namespaces/other/widgets")
      assert.same({}, w.items)
      _, w = srv:request("GET", "/apis/example.com/v1/widgets")
      assert.same({ "w1" }, names(w.items))

      local _, disc = srv:request("GET", "/apis/example.com/v1")
      local kinds = {}
      for _, r in ipairs(disc.resources) do kinds[r.name] = r.namespaced end
      assert.same({ widgets = true, gadgets = false }, kinds)
      local _, core = srv:request("GET", "/api/v1")
      local pods
      for _, r in ipairs(core.resources) do if r.name == "pods" then pods = r end end
      assert.same({ "po" }, pods.shortNames)
      assert.is_true(pods.namespaced)
    end)
  end)

  describe("lists", function()
    setup(function()
      local objs = {}
      for i = 1, 25 do
        objs[i] = { apiVersion = "v1", kind = "ConfigMap",
                    metadata = { name = ("cm-%02d"):format(i), namespace = "page" } }
      end
      srv:objects(objs)
    end)

    it("paginates with limit and continue from the first page's snapshot", function()
      local code, p1 = srv:request("GET", "/api/v1/namespaces/page/configmaps?limit=10")
      assert.equal(200, code)
      assert.equal(10, #p1.items)
      assert.equal(15, p1.metadata.remainingItemCount)
      assert.truthy(p1.metadata.continue)
      local snap = p1.metadata.resourceVersion
      -- changes after the first page must not show up in the next ones
      create(srv, "page", "configmaps", configmap("cm-99"))
      srv:request("DELETE", "/api/v1/namespaces/page/configmaps/cm-15")
      local _, p2 = srv:request("GET", "/api/v1/namespaces/page/configmaps?limit=10&continue=" .. p1.metadata.continue)
      assert.equal(snap, p2.metadata.resourceVersion)
      assert.equal(5, p2.metadata.remainingItemCount)
      local _, p3 = srv:request("GET", "/api/v1/namespaces/page/configmaps?limit=10&continue=" .. p2.metadata.continue)
      assert.is_nil(p3.metadata.continue)
      local all = {}
      for _, p in ipairs({ p1, p2, p3 }) do
        for _, it_ in ipairs(p.items) do all[#all + 1] = it_.metadata.name end
      end
      local want = {}
      for i = 1, 25 do want[i] = ("cm-%02d"):format(i) end
      assert.same(want, all)
      -- a fresh list sees the changes
      local _, now = srv:request("GET", "/api/v1/namespaces/page/configmaps")
      assert.equal(25, #now.items)
      assert.equal("cm-99", now.items[25].metadata.name)
    end)

    it("answers an expired continue token with 410 Expired", function()
      local _, p1 = srv:request("GET", "/api/v1/namespaces/page/configmaps?limit=5")
      socket.sleep(2.2) -- --continue-ttl 2
      local code, st = srv:request("GET", "/api/v1/namespaces/page/configmaps?limit=5&continue=" .. p1.metadata.continue)
      assert.equal(410, code)
      assert.equal("Expired", st.reason)
      assert.equal(410, st.code)
      assert.truthy(st.message:match("continue parameter is too old"))
      -- continuing with a resourceVersion is a 400, like the real server
      code = srv:request("GET", "/api/v1/namespaces/page/configmaps?limit=5&resourceVersion=3&continue=" .. p1.metadata.continue)
      assert.equal(400, code)
    end)

    it("applies the resourceVersion rules", function()
      local head = srv:resource_version()
      local code, st = srv:request("GET", "/api/v1/namespaces/page/configmaps?resourceVersion=" .. (head + 100))
      assert.equal(504, code)
      assert.equal("Timeout", st.reason)
      assert.same({ { reason = "ResourceVersionTooLarge", message = "Too large resource version" } }, st.details.causes)

      -- NotOlderThan / unset serve the latest state; "0" and "" too
      for _, q in ipairs({ "resourceVersion=1", "resourceVersion=0", "",
                           "resourceVersion=1&resourceVersionMatch=NotOlderThan" }) do
        local _, l = srv:request("GET", "/api/v1/namespaces/page/configmaps?" .. q)
        assert.equal(tostring(head), l.metadata.resourceVersion)
      end

      -- Exact reads the past: an object deleted since is still there
      local before = srv:resource_version()
      srv:request("DELETE", "/api/v1/namespaces/page/configmaps/cm-99")
      local _, old = srv:request("GET", "/api/v1/namespaces/page/configmaps?resourceVersionMatch=Exact&resourceVersion=" .. before)
      assert.equal(tostring(before), old.metadata.resourceVersion)
      assert.equal("cm-99", old.items[#old.items].metadata.name)
      -- ... and so does a paginated list at a resourceVersion (the legacy Exact rule)
      local _, pg = srv:request("GET", "/api/v1/namespaces/page/configmaps?limit=100&resourceVersion=" .. before)
      assert.equal("cm-99", pg.items[#pg.items].metadata.name)

      -- after a compaction the past is gone: 410 Expired
      srv:compact()
      code, st = srv:request("GET", "/api/v1/namespaces/page/configmaps?resourceVersionMatch=Exact&resourceVersion=" .. before)
      assert.equal(410, code)
      assert.equal("Expired", st.reason)

      code, st = srv:request("GET", "/api/v1/namespaces/page/configmaps?resourceVersionMatch=Exact&resourceVersion=0")
      assert.equal(422, code)
      assert.equal("Invalid", st.reason)
    end)
  end)

  describe("watch", function()
    it("replays exactly the events after a resourceVersion", function()
      create(srv, "w1", "configmaps", configmap("before"))
      local from = srv:resource_version()
      create(srv, "w1", "configmaps", configmap("a"))
      srv:request("PATCH", "/api/v1/namespaces/w1/configmaps/a", { data = { k = "2" } },
                  { ["Content-Type"] = "application/merge-patch+json" })
      create(srv, "w1", "configmaps", configmap("b"))
      create(srv, "other", "configmaps", configmap("elsewhere"))
      srv:request("DELETE", "/api/v1/namespaces/w1/configmaps/a")
      local r = curl(srv.url .. "/api/v1/namespaces/w1/configmaps?watch=true&timeoutSeconds=1&resourceVersion=" .. from)
      assert.equal(0, r.rc)
      assert.equal(200, r.code)
      local evs = events(r.body)
      assert.same({ "ADDED a", "MODIFIED a", "ADDED b", "DELETED a" }, types_and_names(evs))
      local rvs = {}
      for i, e in ipairs(evs) do
        assert.equal("ConfigMap", e.object.kind) -- watch objects carry kind/apiVersion
        rvs[i] = tonumber(e.object.metadata.resourceVersion)
      end
      assert.same({ from + 1, from + 2, from + 3, from + 5 }, rvs)
      assert.equal("2", evs[4].object.data.k) -- DELETED carries the last state

      -- without a resourceVersion: the current objects as ADDED
      r = curl(srv.url .. "/api/v1/namespaces/w1/configmaps?watch=1&timeoutSeconds=1")
      assert.same({ "ADDED b", "ADDED before" }, types_and_names(events(r.body)))
    end)

    it("answers a too old resourceVersion with an ERROR 410 event", function()
      local from = srv:resource_version()
      create(srv, "w2", "configmaps", configmap("x"))
      srv:compact()
      local t0 = socket.gettime()
      local r = curl(srv.url .. "/api/v1/namespaces/w2/configmaps?watch=1&timeoutSeconds=5&resourceVersion=" .. from)
      assert.is_true(socket.gettime() - t0 < 2) -- the stream ends right after the error
      assert.equal(200, r.code)
      local evs = events(r.body)
      assert.equal(1, #evs)
      assert.equal("ERROR", evs[1].type)
      assert.equal("Status", evs[1].object.kind)
      assert.equal(410, evs[1].object.code)
      assert.equal("Expired", evs[1].object.reason)
      assert.equal(("too old resource version: %d (%d)"):format(from, from + 1), evs[1].object.message)
    end)

    it("sends bookmarks only when allowed", function()
      local head = srv:resource_version()
      local r = curl(srv.url .. "/api/v1/namespaces/w3/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion=" .. head)
      local evs = events(r.body)
      assert.is_true(#evs >= 2, "bookmarks every 0.3 s in a 1 s watch, got " .. #evs)
      for _, e in ipairs(evs) do
        assert.equal("BOOKMARK", e.type)
        assert.same({ kind = "ConfigMap", apiVersion = "v1", metadata = { resourceVersion = tostring(head) } }, e.object)
      end
      r = curl(srv.url .. "/api/v1/namespaces/w3/configmaps?watch=1&timeoutSeconds=1&resourceVersion=" .. head)
      assert.equal("", r.body)
    end)

    it("ends the stream cleanly after timeoutSeconds", function()
      local t0 = socket.gettime()
      local r = curl(srv.url .. "/api/v1/namespaces/w4/configmaps?watch=1&timeoutSeconds=1&resourceVersion=" .. srv:resource_version(), "", 5)
      local dt = socket.gettime() - t0
      assert.equal(0, r.rc) -- curl saw a complete chunked body
      assert.is_true(dt >= 0.9 and dt < 2, "took " .. dt)
    end)

    it("streams WatchList initial events, the end bookmark, then live events", function()
      create(srv, "wl", "configmaps", configmap("c1"))
      create(srv, "wl", "configmaps", configmap("c2"))
      local head = srv:resource_version()
      local w = open_watch(srv, "/api/v1/namespaces/wl/configmaps?watch=1&sendInitialEvents=true"
                                .. "&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
      finally(function() w:close() end)
      assert.equal(200, w.code)
      local e1, e2, bm = w:next(), w:next(), w:next()
      assert.same({ "ADDED c1", "ADDED c2" }, types_and_names({ e1, e2 }))
      assert.equal("BOOKMARK", bm.type)
      assert.same({ resourceVersion = tostring(head), annotations = { ["k8s.io/initial-events-end"] = "true" } },
                  bm.object.metadata)
      create(srv, "wl", "configmaps", configmap("c3"))
      local live = w:next()
      while live.type == "BOOKMARK" do live = w:next() end
      assert.same({ "ADDED c3" }, types_and_names({ live }))
      assert.equal(tostring(head + 1), live.object.metadata.resourceVersion)

      -- like the real server, sendInitialEvents needs NotOlderThan and bookmarks
      local code, st = srv:request("GET", "/api/v1/namespaces/wl/configmaps?watch=1&sendInitialEvents=true")
      assert.equal(422, code)
      assert.equal("Invalid", st.reason)
      assert.truthy(st.message:match("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"))
      assert.truthy(st.message:match("sendInitialEvents requires setting allowWatchBookmarks to true"))
    end)

    it("counts open watches per resource", function()
      local w = open_watch(srv, "/api/v1/namespaces/wc/secrets?watch=1&resourceVersion=" .. srv:resource_version())
      local w2 = open_watch(srv, "/api/v1/secrets?watch=1&resourceVersion=" .. srv:resource_version())
      finally(function() w:close(); w2:close() end)
      assert.equal(2, wait_until(function() return srv:watches().secrets == 2 and 2 end))
      w:close()
      assert.is_true(wait_until(function() return srv:watches().secrets == 1 end, 3))
      w2:close()
      assert.is_true(wait_until(function() return srv:watches().secrets == nil end, 3))
    end)
  end)

  describe("selectors", function()
    setup(function()
      create(srv, "sel", "pods", pod("a", { app = "web", tier = "fe" }, "n1"))
      create(srv, "sel", "pods", pod("b", { app = "web", tier = "be" }, "n2"))
      create(srv, "sel", "pods", pod("c", { app = "db" }, "n1"))
      create(srv, "sel", "pods", pod("d", nil, "n2"))
    end)

    local function list(query)
      local code, l = srv:request("GET", "/api/v1/namespaces/sel/pods?" .. query)
      assert.equal(200, code, cjson.encode(l))
      return names(l.items)
    end
    local function esc(s) return (s:gsub("[^%w%-_.=!]", function(c) return ("%%%02X"):format(c:byte()) end)) end

    it("filters lists by label selector", function()
      assert.same({ "a", "b" }, list("labelSelector=" .. esc("app=web")))
      assert.same({ "b" }, list("labelSelector=" .. esc("app==web,tier!=fe")))
      assert.same({ "a", "b", "c" }, list("labelSelector=" .. esc("app in (web, db)")))
      assert.same({ "c", "d" }, list("labelSelector=" .. esc("app notin (web)")))
      assert.same({ "a", "b", "c" }, list("labelSelector=app"))
      assert.same({ "d" }, list("labelSelector=" .. esc("!app")))
      assert.same({ "c", "d" }, list("labelSelector=" .. esc("app!=web")))
      local code, st = srv:request("GET", "/api/v1/namespaces/sel/pods?labelSelector=" .. esc("app in ("))
      assert.equal(400, code)
      assert.equal("BadRequest", st.reason)
    end)

    it("filters lists by field selector", function()
      assert.same({ "a", "c" }, list("fieldSelector=spec.nodeName%3Dn1"))
      assert.same({ "b", "d" }, list("fieldSelector=spec.nodeName!%3Dn1"))
      assert.same({ "c" }, list("fieldSelector=metadata.name%3D%3Dc"))
      assert.same({ "a", "b", "c", "d" }, list("fieldSelector=status.phase%3DPending,metadata.namespace%3Dsel"))
      assert.same({ "c" }, list("fieldSelector=spec.nodeName%3Dn1&labelSelector=app%3Ddb"))
      local code, st = srv:request("GET", "/api/v1/namespaces/sel/pods?fieldSelector=spec.foo%3Dx")
      assert.equal(400, code)
      assert.equal("field label not supported: spec.foo", st.message)
    end)

    it("filters watches, turning selector exits and entries into DELETED and ADDED", function()
      local from = srv:resource_version()
      local function relabel(name, app)
        srv:request("PATCH", "/api/v1/namespaces/sel/pods/" .. name, { metadata = { labels = { app = app } } },
                    { ["Content-Type"] = "application/merge-patch+json" })
      end
      relabel("a", "gone")  -- leaves app=web
      relabel("c", "web")   -- enters
      relabel("b", "web")   -- no change: no event at all
      relabel("c", "web2")  -- leaves again
      local r = curl(srv.url .. "/api/v1/namespaces/sel/pods?watch=1&timeoutSeconds=1&labelSelector=app%3Dweb&resourceVersion=" .. from)
      local evs = events(r.body)
      assert.same({ "DELETED a", "ADDED c", "DELETED c" }, types_and_names(evs))
      assert.equal("web", evs[1].object.metadata.labels.app) -- the last state it matched
      assert.equal(tostring(from + 1), evs[1].object.metadata.resourceVersion)
    end)
  end)

  describe("faults", function()
    after_each(function() srv:clear_faults() end)
    local base = "/api/v1/namespaces/faults/configmaps"

    setup(function()
      for i = 1, 3 do create(srv, "faults", "configmaps", configmap("f" .. i)) end
    end)

    it("answers with an injected status, Retry-After, for the given number of times", function()
      srv:fault{ path = base .. "$", times = 2, action = { status = 429, retry_after = 7 } }
      local code, st, hdrs = srv:request("GET", base)
      assert.equal(429, code)
      assert.equal("TooManyRequests", st.reason)
      assert.equal("7", hdrs["retry-after"])
      assert.equal(7, st.details.retryAfterSeconds)
      assert.equal(429, (srv:request("GET", base)))
      assert.equal(200, (srv:request("GET", base)))

      for _, c in ipairs({ { 500, "InternalError" }, { 403, "Forbidden" }, { 410, "Expired" }, { 401, "Unauthorized" } }) do
        srv:fault{ path = base .. "$", action = { status = c[1] } }
        code, st = srv:request("GET", base)
        assert.equal(c[1], code)
        assert.equal(c[2], st.reason)
      end
      srv:fault{ path = base .. "$", action = { status = 503, reason = "ServiceUnavailable" } }
      code, _, hdrs = srv:request("GET", base)
      assert.equal(503, code)
      assert.truthy(hdrs["retry-after"])
    end)

    it("matches method, watch-ness and a query subset", function()
      srv:fault{ method = "GET", path = base .. "$", watch = false, query = { resourceVersion = "0" },
                 times = -1, action = { status = 500 } }
      assert.equal(200, (srv:request("GET", base)))
      assert.equal(200, (srv:request("GET", base .. "?resourceVersion=1")))
      assert.equal(500, (srv:request("GET", base .. "?resourceVersion=0&limit=500")))
      assert.equal(500, (srv:request("GET", base .. "?resourceVersion=0")))
      assert.equal(201, (srv:request("POST", base, configmap("f-post"))))
      local r = curl(srv.url .. base .. "?watch=1&resourceVersion=0&timeoutSeconds=1")
      assert.equal(200, r.code)
    end)

    it("drops a list in the middle of its body", function()
      srv:fault{ path = base .. "$", action = "drop" }
      local r = curl(srv.url .. base)
      assert.equal(18, r.rc) -- partial file
      assert.is_false(pcall(cjson.decode, r.body))
      assert.is_true(#r.body > 10)
    end)

    it("drops a watch after N events, or in the middle of a line", function()
      srv:fault{ path = base .. "$", watch = true, after_events = 2, action = "drop" }
      local r = curl(srv.url .. base .. "?watch=1")
      assert.equal(18, r.rc) -- the chunked stream never ended
      local ls, partial = lines(r.body)
      assert.equal(2, #ls)
      assert.is_nil(partial)

      srv:fault{ path = base .. "$", watch = true, after_events = 1, action = "drop_mid_line" }
      r = curl(srv.url .. base .. "?watch=1")
      assert.equal(18, r.rc)
      ls, partial = lines(r.body)
      assert.equal(1, #ls)
      assert.equal("ADDED", cjson.decode(ls[1]).type)
      assert.truthy(partial and #partial > 10)
      assert.is_false(pcall(cjson.decode, partial))
    end)

    it("stalls without sending a byte", function()
      srv:fault{ path = base .. "$", watch = true, action = { type = "stall", seconds = 3 } }
      local r = curl(srv.url .. base .. "?watch=1", "", 1)
      assert.equal(28, r.rc) -- curl timed out
      assert.equal(0, r.code) -- not even a status line
      assert.equal("", r.body)
    end)

    it("sends a malformed line and goes on", function()
      srv:fault{ path = base .. "$", watch = true, after_events = 1, action = "malformed_line" }
      local r = curl(srv.url .. base .. "?watch=1&timeoutSeconds=1")
      local ls = lines(r.body)
      assert.equal(5, #ls) -- 4 configmaps (f1..f3, f-post) and the bad line
      assert.is_true(pcall(cjson.decode, ls[1]))
      assert.is_false(pcall(cjson.decode, ls[2]))
      for i = 3, 5 do assert.equal("ADDED", cjson.decode(ls[i]).type) end
    end)

    it("sends an oversized object", function()
      srv:fault{ path = base .. "$", watch = true, action = { type = "oversized", bytes = 3000000 } }
      local r = curl(srv.url .. base .. "?watch=1&timeoutSeconds=1")
      local ls = lines(r.body)
      assert.is_true(#ls[1] >= 3000000 and #ls[1] < 3100000, "line of " .. #ls[1])
      local e = cjson.decode(ls[1])
      assert.equal("ADDED", e.type)
      assert.equal("Pod", e.object.kind)
      assert.equal("ADDED", cjson.decode(ls[2]).type) -- then the normal stream
    end)

    it("closes a watch at once, or with an ERROR event", function()
      srv:fault{ path = base .. "$", watch = true, action = "close_immediately" }
      local r = curl(srv.url .. base .. "?watch=1", "", 3)
      assert.equal(0, r.rc)
      assert.equal(200, r.code)
      assert.equal("", r.body)
      assert.is_true(r.time < 1)

      srv:fault{ path = base .. "$", watch = true, after_events = 1,
                 action = { type = "error_event", code = 500, reason = "InternalError", message = "boom" } }
      r = curl(srv.url .. base .. "?watch=1", "", 3)
      assert.equal(0, r.rc)
      local evs = events(r.body)
      assert.equal(2, #evs)
      assert.equal("ERROR", evs[2].type)
      assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
                    message = "boom", reason = "InternalError", code = 500 }, evs[2].object)
    end)

    it("resets the connection", function()
      srv:fault{ path = base .. "$", action = "reset" }
      local r = curl(srv.url .. base)
      assert.is_true(r.rc == 56 or r.rc == 52, "curl exit " .. tostring(r.rc))
      assert.equal(0, r.code)
    end)

    it("resets a watch in the middle of a line", function()
      srv:fault{ path = base .. "$", watch = true, after_events = 1, action = "reset_mid_line" }
      local r = curl(srv.url .. base .. "?watch=1")
      assert.is_true(r.rc == 56 or r.rc == 18, "curl exit " .. tostring(r.rc))
      local ls, partial = lines(r.body)
      assert.is_true(#ls <= 1)
      if partial then assert.is_false(pcall(cjson.decode, partial)) end
    end)

    it("sends a truncated chunk: its size line promises more than follows", function()
      srv:fault{ path = base .. "$", watch = true, after_events = 1, action = "truncated_chunk" }
      local r = curl(srv.url .. base .. "?watch=1", "--raw")
      assert.equal(18, r.rc)
      -- The raw body ends inside a chunk: the last size line announces more bytes than came.
      local size, rest = r.body:match("\r\n(%x+)\r\n([^\r]*)$")
      assert.is_truthy(size, r.body)
      assert.is_true(#rest < tonumber(size, 16) and #rest > 10)
    end)

    it("sends an event twice, or two events in the wrong order", function()
      -- A replay from before the oldest object: the namespace's events in rv order.
      local from = math.huge
      for _, v in pairs(srv:versions("configmaps", "faults")) do from = math.min(from, tonumber(v) - 1) end
      local url = srv.url .. base .. "?watch=1&resourceVersion=" .. from .. "&timeoutSeconds=1"
      srv:fault{ path = base .. "$", watch = true, after_events = 1, action = "duplicate_event" }
      local r = curl(url)
      local evs = events(r.body)
      assert.equal(5, #evs) -- four objects, the second twice
      assert.same(evs[2], evs[3])
      local rvs = {}
      for i, e in ipairs(evs) do rvs[i] = tonumber(e.object.metadata.resourceVersion) end
      assert.is_true(rvs[1] < rvs[2] and rvs[3] < rvs[4] and rvs[4] < rvs[5])

      srv:fault{ path = base .. "$", watch = true, after_events = 1, action = "out_of_order" }
      r = curl(url)
      evs = events(r.body)
      assert.equal(4, #evs)
      for i, e in ipairs(evs) do rvs[i] = tonumber(e.object.metadata.resourceVersion) end
      assert.is_true(rvs[1] < rvs[3] and rvs[3] < rvs[2] and rvs[2] < rvs[4]) -- 2nd and 3rd swapped
    end)
  end)

  describe("outages", function()
    local down_srv
    before_each(function()
      down_srv = fake.start{ args = { "--no-default-namespaces" }, quiet = true }
      for i = 1, 3 do create(down_srv, "o", "configmaps", configmap("c" .. i)) end
    end)
    after_each(function() down_srv:stop() end)
    local base = "/api/v1/namespaces/o/configmaps"

    it("restarts: refuses connections, cuts open ones, comes back on the same port", function()
      local w = open_watch(down_srv, base .. "?watch=1&resourceVersion=0")
      assert.equal("ADDED", w:next().type)
      local before = down_srv:versions("configmaps")
      local t0 = socket.gettime()
      assert.same(true, down_srv:restart{ seconds = 1 }.down == 1)
      local ok, err = w:next(0.8)
      while ok do ok, err = w:next(0.8) end -- the rest of the replay, then the cut
      assert.equal("closed", err)
      assert.is_nil((down_srv:request("GET", base))) -- refused
      assert.is_true(down_srv:wait_up(5))
      assert.is_true(socket.gettime() - t0 >= 1)
      assert.same(before, down_srv:versions("configmaps"))
      w:close()
    end)

    it("restarts with an older state (etcd restore): older rv, other objects, no history", function()
      local saved = down_srv:snapshot()
      local rv = down_srv:resource_version()
      assert.equal(tostring(rv), saved.resourceVersion)
      create(down_srv, "o", "configmaps", configmap("new"))
      assert(down_srv:request("DELETE", base .. "/c1") == 200)
      local r = down_srv:restart{ seconds = 0.2, restore = true }
      assert.equal(saved.resourceVersion, r.resourceVersion)
      assert.is_true(down_srv:wait_up(5))
      assert.same({ "o/c1", "o/c2", "o/c3" }, (function()
        local ks = {}
        for k in pairs(down_srv:versions("configmaps")) do ks[#ks + 1] = k end
        table.sort(ks)
        return ks
      end)())
      assert.equal(rv, down_srv:resource_version())
      -- A client's newer rv is "too large"; an older one is gone.
      local code, st = down_srv:request("GET", base .. "?resourceVersion=" .. (rv + 2))
      assert.equal(504, code)
      assert.equal("ResourceVersionTooLarge", st.details.causes[1].reason)
      assert.equal(410, (down_srv:request("GET", base .. "?resourceVersion=" .. (rv - 1) ..
                                                "&resourceVersionMatch=Exact")))
      -- Writes go on from the restored counter.
      assert.equal(tostring(rv + 1), create(down_srv, "o", "configmaps", configmap("after"))
        .metadata.resourceVersion)
    end)

    it("restarts as a fault, in the middle of a list", function()
      down_srv:fault{ path = base .. "$", watch = false, action = { type = "restart", seconds = 0.5 } }
      local r = curl(down_srv.url .. base)
      assert.equal(18, r.rc)
      assert.is_true(down_srv:wait_up(5))
      assert.equal(200, (down_srv:request("GET", base)))
      local code = down_srv:request("POST", "/_fake/restart", { restore = true, seconds = 0 })
      assert.equal(409, code) -- nothing saved to restore
    end)
  end)

  describe("request log", function()
    it("records method, path, query and Accept of API requests only", function()
      srv:clear_requests()
      srv:request("GET", "/api/v1/namespaces/log/configmaps?limit=500&resourceVersion=0")
      srv:request("POST", "/api/v1/namespaces/log/configmaps", configmap("l1"))
      curl(srv.url .. "/api/v1/namespaces/log/configmaps?watch=true&allowWatchBookmarks=true&timeoutSeconds=0&resourceVersion=5", "", 1)
      srv:info() -- control endpoints are not recorded
      local reqs = srv:requests()
      local t0 = socket.gettime()
      for _, r in ipairs(reqs) do
        assert.is_true(math.abs(r.time - t0) < 30)
        r.time = nil
      end
      assert.same({
        { method = "GET", path = "/api/v1/namespaces/log/configmaps", query = { limit = "500", resourceVersion = "0" } },
        { method = "POST", path = "/api/v1/namespaces/log/configmaps", query = {} },
        { method = "GET", path = "/api/v1/namespaces/log/configmaps", accept = "*/*",
          query = { watch = "true", allowWatchBookmarks = "true", timeoutSeconds = "0", resourceVersion = "5" } },
      }, reqs)
      srv:clear_requests()
      assert.same({}, srv:requests())
    end)
  end)

  describe("control endpoints", function()
    it("bulk-creates, touches objects and reports state", function()
      local rv0 = srv:resource_version()
      local res = srv:objects({ { metadata = { name = "b1", namespace = "bulk" } },
                                { metadata = { name = "b2", namespace = "bulk" } },
                                { metadata = { name = "b3", namespace = "bulk" } } }, "configmaps")
      assert.same({ created = 3, updated = 0, resourceVersion = tostring(rv0 + 3) }, res)
      local m = srv:modify("configmaps", 5, { namespace = "bulk" })
      assert.equal(5, m.modified)
      assert.equal(tostring(rv0 + 4), m.first_resourceVersion)
      assert.equal(tostring(rv0 + 8), m.last_resourceVersion)
      local r = curl(srv.url .. "/api/v1/namespaces/bulk/configmaps?watch=1&timeoutSeconds=1&resourceVersion=" .. (rv0 + 3))
      assert.same({ "MODIFIED b1", "MODIFIED b2", "MODIFIED b3", "MODIFIED b1", "MODIFIED b2" },
                  types_and_names(events(r.body)))
      local st = srv:state("configmaps", "bulk")
      assert.equal(tostring(rv0 + 8), st.resourceVersion)
      assert.same({ "b1", "b2", "b3" }, names(st.items))
      for _, o in ipairs(st.items) do
        assert.truthy(tonumber(o.metadata.annotations["fake.kinformer.io/touched-at"]))
      end
      assert.equal(tostring(rv0 + 7), st.items[1].metadata.resourceVersion)
    end)

    it("holds touches back and releases them as one burst", function()
      local rv0 = srv:resource_version()
      assert.same({ held = 4, resourceVersion = tostring(rv0) },
                  srv:modify("configmaps", 4, { namespace = "bulk", hold = true }))
      assert.equal(rv0, srv:resource_version()) -- nothing visible yet
      assert.equal(409, (srv:request("POST", "/_fake/modify", { resource = "configmaps", count = 1, hold = true })))
      local w = open_watch(srv, "/api/v1/namespaces/bulk/configmaps?watch=1&resourceVersion=" .. rv0)
      finally(function() w:close() end)
      assert.same({ released = 4, first_resourceVersion = tostring(rv0 + 1),
                    last_resourceVersion = tostring(rv0 + 4), resourceVersion = tostring(rv0 + 4) },
                  srv:release())
      local got = {}
      for i = 1, 4 do
        local e = w:next()
        got[i] = e.type .. " " .. e.object.metadata.name .. " " .. e.object.metadata.resourceVersion
      end
      assert.same({ "MODIFIED b1 " .. (rv0 + 1), "MODIFIED b2 " .. (rv0 + 2),
                    "MODIFIED b3 " .. (rv0 + 3), "MODIFIED b1 " .. (rv0 + 4) }, got)
      -- a write between hold and release voids the batch
      srv:modify("configmaps", 1, { namespace = "bulk", hold = true })
      create(srv, "bulk", "configmaps", configmap("b4"))
      local code, st = srv:request("POST", "/_fake/release")
      assert.equal(409, code)
      assert.truthy(st.message:match("writes happened since the batch was held"))
    end)
  end)
end)

-- other server modes ---------------------------------------------------------------------

describe("fake apiserver with TLS and --token", function()
  local srv, kubeconfig
  local dir = os.tmpname()

  local function openssl(args)
    local out, rc = run("cd " .. quote(dir) .. " && openssl " .. args .. " 2>&1")
    assert(rc == 0, out)
  end

  setup(function()
    os.remove(dir)
    assert(os.execute("mkdir " .. quote(dir)))
    local ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    openssl("req -x509 " .. ec .. " -keyout key.pem -out cert.pem -days 2 -subj /CN=127.0.0.1"
            .. " -addext subjectAltName=IP:127.0.0.1")
    openssl("req -x509 " .. ec .. " -keyout ca.key -out ca.pem -days 2 -subj /CN=fake-ca")
    openssl("req " .. ec .. " -keyout client.key -out client.csr -subj /CN=tester")
    openssl("x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2")
    srv = fake.start{ args = { "--token", "s3cret", "--sample-cluster", "--tls-cert", dir .. "/cert.pem",
                               "--tls-key", dir .. "/key.pem", "--client-ca", dir .. "/ca.pem" } }
  end)
  teardown(function()
    if srv then srv:stop() end
    run("rm -rf " .. quote(dir))
  end)

  it("rejects requests without the bearer token or a client certificate", function()
    assert.truthy(srv.url:match("^https://127%.0%.0%.1:%d+$"))
    local code, st = srv:request("GET", "/api/v1/pods")
    assert.equal(401, code)
    assert.same({ kind = "Status", apiVersion = "v1", metadata = {}, status = "Failure",
                  message = "Unauthorized", reason = "Unauthorized", code = 401 }, st)
    assert.equal(401, (srv:request("GET", "/api/v1/pods", nil, { Authorization = "Bearer wrong" })))
    local ok, l = srv:request("GET", "/api/v1/pods", nil, { Authorization = "Bearer s3cret" })
    assert.equal(200, ok)
    assert.equal(11, #l.items)
    assert.truthy(srv:info().resourceVersion) -- control endpoints need no token

    local cacert = "--cacert " .. quote(dir .. "/cert.pem")
    local r = curl(srv.url .. "/api/v1/namespaces/shop/pods", cacert)
    assert.equal(401, r.code)
    r = curl(srv.url .. "/api/v1/namespaces/shop/pods", cacert .. " --cert " .. quote(dir .. "/client.pem")
             .. " --key " .. quote(dir .. "/client.key"))
    assert.equal(200, r.code)
    assert.equal(7, #cjson.decode(r.body).items)
  end)

  it("works with kubectl and a kubeconfig token", function()
    kubeconfig = fake.kubeconfig(srv, { token = "s3cret", namespace = "shop", ca = dir .. "/cert.pem",
                                        path = dir .. "/good.yaml" })
    local env = "KUBECACHEDIR=" .. quote(dir .. "/cache") .. " "
    local out, rc = run(env .. "kubectl --kubeconfig " .. quote(kubeconfig) .. " get pods 2>&1")
    assert.equal(0, rc, out)
    assert.truthy(out:match("^NAME%s+READY%s+STATUS%s+RESTARTS%s+AGE\n"))
    assert.equal(8, #lines(out))
    local bad = fake.kubeconfig(srv, { token = "nope", ca = dir .. "/cert.pem", path = dir .. "/bad.yaml" })
    out, rc = run(env .. "kubectl --kubeconfig " .. quote(bad) .. " get pods 2>&1")
    assert.is_not.equal(0, rc)
    assert.truthy(out:match("logged in to the server"), out)
  end)
end)

describe("fake apiserver generated data", function()
  it("generates realistic 8-10 KB pods with managedFields", function()
    local srv = fake.start{ args = { "--pods", "30", "--namespaces", "3", "--pods-per-deployment", "10",
                                     "--fault", '{"path":"^/api/v1/namespaces/ns-2/pods$","action":{"status":503}}' } }
    finally(function() srv:stop() end)
    local st = srv:state("pods")
    assert.equal(30, #st.items)
    local seen_ns, nodes = {}, {}
    for i, p in ipairs(st.items) do
      seen_ns[p.metadata.namespace] = true
      nodes[p.spec.nodeName] = true
      if i <= 5 then
        local code, _, _, raw = srv:request("GET", ("/api/v1/namespaces/%s/pods/%s"):format(p.metadata.namespace, p.metadata.name))
        assert.equal(200, code)
        assert.is_true(#raw >= 8000 and #raw <= 10240, "pod JSON of " .. #raw .. " bytes")
      end
      assert.equal("ReplicaSet", p.metadata.ownerReferences[1].kind)
      assert.equal(p.metadata.labels["pod-template-hash"], p.metadata.ownerReferences[1].name:match("%-(%w+)$"))
      assert.equal(3, #p.metadata.managedFields)
      assert.equal("kube-controller-manager", p.metadata.managedFields[1].manager)
      assert.equal("kubelet", p.metadata.managedFields[3].manager)
      assert.truthy(p.spec.containers[1].readinessProbe)
      assert.truthy(p.spec.containers[1].resources.requests.cpu)
      assert.equal("Running", p.status.phase)
      assert.truthy(p.status.podIPs[1].ip:match("^10%.%d+%.%d+%.%d+$"))
    end
    assert.same({ ["ns-0"] = true, ["ns-1"] = true, ["ns-2"] = true }, seen_ns)
    local n = 0
    for _ in pairs(nodes) do n = n + 1 end
    assert.equal(30, n) -- spread over the nodes
    -- the --fault flag is active from the start
    assert.equal(503, (srv:request("GET", "/api/v1/namespaces/ns-2/pods")))
    assert.equal(200, (srv:request("GET", "/api/v1/namespaces/ns-2/pods")))
  end)

  it("builds a sample cluster whose endpointslices follow the pods under churn", function()
    local srv = fake.start{ args = { "--sample-cluster" } }
    finally(function() srv:stop() end)
    local function check()
      local pods, ready = {}, 0
      for _, p in ipairs(srv:state("pods").items) do
        local r = false
        for _, c in ipairs(p.status.conditions) do
          if c.type == "Ready" then r = c.status == "True" end
        end
        pods[p.metadata.namespace .. "/" .. p.metadata.name] = r
      end
      local svcs = {}
      for _, s in ipairs(srv:state("services").items) do svcs[s.metadata.namespace .. "/" .. s.metadata.name] = true end
      local slices = srv:state("endpointslices").items
      assert.equal(5, #slices)
      local unready = 0
      for _, s in ipairs(slices) do
        assert.is_true(svcs[s.metadata.namespace .. "/" .. s.metadata.labels["kubernetes.io/service-name"]])
        for _, e in ipairs(s.endpoints) do
          local key = s.metadata.namespace .. "/" .. e.targetRef.name
          assert.is_not_nil(pods[key], "endpoint for missing pod " .. key)
          assert.equal(pods[key], e.conditions.ready, key)
          if not e.conditions.ready then unready = unready + 1 end
          ready = ready + 1
        end
      end
      return unready, ready
    end
    local _, l = srv:request("GET", "/api/v1/namespaces")
    assert.same({ "default", "kube-node-lease", "kube-public", "kube-system", "monitoring", "payments", "shop" }, names(l.items))
    local unready = check()
    assert.equal(4, unready) -- the second pod of each serving Deployment starts not ready
    local rv0 = srv:resource_version()
    srv:churn(100)
    socket.sleep(1)
    srv:churn(0)
    socket.sleep(0.2) -- let a step in flight finish
    assert.is_true(srv:resource_version() - rv0 >= 25, "churn made " .. (srv:resource_version() - rv0) .. " writes")
    check()
  end)
end)

describe("fake apiserver with kubectl", function()
  local srv, kubeconfig
  local cache = os.tmpname()
  local function kubectl(args)
    return run("KUBECACHEDIR=" .. quote(cache .. ".d") .. " kubectl --kubeconfig " .. quote(kubeconfig)
               .. " " .. args .. " 2>&1")
  end

  setup(function()
    srv = fake.start{ args = { "--sample-cluster" } }
    kubeconfig = fake.kubeconfig(srv, { namespace = "shop" })
  end)
  teardown(function()
    if srv then srv:stop() end
    if kubeconfig then os.remove(kubeconfig) end
    os.remove(cache)
    run("rm -rf " .. quote(cache .. ".d"))
  end)

  it("gets pods as a table and as JSON", function()
    local out, rc = kubectl("get pods")
    assert.equal(0, rc, out)
    local ls = lines(out)
    assert.truthy(ls[1]:match("^NAME%s+READY%s+STATUS%s+RESTARTS%s+AGE$"), ls[1])
    assert.equal(8, #ls) -- header + 7 shop pods
    assert.truthy(out:match("\nfrontend%-%w+%-%w+%s+1/1%s+Running%s+0%s+%w+\n"))
    assert.truthy(out:match("\ncart%-%w+%-%w+%s+0/1%s+Running"))

    out, rc = kubectl("get pods -o json")
    assert.equal(0, rc, out)
    local l = cjson.decode(out)
    assert.equal("List", l.kind)
    assert.same(names(srv:state("pods", "shop").items), names(l.items))
    assert.equal("Pod", l.items[1].kind)
  end)

  it("creates and deletes with -f and by name", function()
    local file = os.tmpname()
    finally(function() os.remove(file) end)
    local f = assert(io.open(file, "w"))
    f:write("apiVersion: v1\nkind: Pod\nmetadata:\n  name: from-yaml\n  labels: {app: demo}\n"
            .. "spec:\n  containers:\n  - name: c\n    image: nginx\n")
    f:close()
    local out, rc = kubectl("create -f " .. quote(file))
    assert.equal(0, rc, out)
    assert.equal("pod/from-yaml created\n", out)
    local code, p = srv:request("GET", "/api/v1/namespaces/shop/pods/from-yaml")
    assert.equal(200, code)
    assert.equal("demo", p.metadata.labels.app)
    out, rc = kubectl("delete pod from-yaml --dry-run=server")
    assert.equal(0, rc, out)
    assert.equal('pod "from-yaml" deleted (server dry run)\n', out)
    assert.equal(200, (srv:request("GET", "/api/v1/namespaces/shop/pods/from-yaml")))
    out, rc = kubectl("delete pod from-yaml")
    assert.equal(0, rc, out)
    assert.equal('pod "from-yaml" deleted\n', out)
    assert.equal(404, (srv:request("GET", "/api/v1/namespaces/shop/pods/from-yaml")))
    out, rc = kubectl("create -f " .. quote(file) .. " --dry-run=server")
    assert.equal(0, rc, out)
    assert.equal("pod/from-yaml created (server dry run)\n", out)
    assert.equal(404, (srv:request("GET", "/api/v1/namespaces/shop/pods/from-yaml")))
  end)

  it("watches with get -w", function()
    local out_file, pid_file = os.tmpname(), os.tmpname()
    finally(function()
      local f = io.open(pid_file)
      local pid = f and tonumber(f:read("l"))
      if f then f:close() end
      if pid then os.execute("kill " .. pid .. " 2>/dev/null") end
      os.remove(out_file)
      os.remove(pid_file)
    end)
    srv:clear_requests()
    os.execute("sh -c " .. quote("echo $$ > " .. quote(pid_file) .. "; exec env KUBECACHEDIR="
               .. quote(cache .. ".d") .. " timeout 10 kubectl --kubeconfig " .. quote(kubeconfig)
               .. " get pods -n kw -w > " .. quote(out_file) .. " 2>&1") .. " &")
    local watching = wait_until(function()
      for _, r in ipairs(srv:requests()) do
        if r.path == "/api/v1/namespaces/kw/pods" and r.query.watch == "true" then return true end
      end
    end, 5)
    assert.is_true(watching, "kubectl never opened a watch")
    create(srv, "kw", "pods", pod("watched-pod"))
    local seen = wait_until(function()
      local f = io.open(out_file)
      local s = f and f:read("a") or ""
      if f then f:close() end
      return s:match("watched%-pod%s+0/1%s+Pending") and s
    end, 4)
    assert.truthy(seen, "kubectl -w did not print the new pod")
  end)
end)
