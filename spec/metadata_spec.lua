-- Metadata-only informers and reflectors (controller-runtime's metadata cache, client-go's
-- metadata informer): `metadata_only = true` lists and watches PartialObjectMetadata, the cache
-- holds apiVersion, kind and metadata only, and a metadata-only informer is not the full one.
-- One fake API server for the file; each test works in a namespace of its own.
local kinformer = require "kinformer"
local cjson = require "cjson"
local fake = require "support.fake_apiserver"

local LIST_ACCEPT =
  "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
local WATCH_ACCEPT =
  "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

local srv, client
local informers = {}

local function pod(ns, name, labels)
  return { apiVersion = "v1", kind = "Pod",
           metadata = { namespace = ns, name = name, labels = labels or { app = "web" },
                        annotations = { note = "kept" },
                        ownerReferences = { { apiVersion = "apps/v1", kind = "ReplicaSet",
                                              name = "rs-1", uid = "u-rs-1", controller = true } } },
           spec = { nodeName = "node-1", containers = { { name = "c", image = "nginx" } } },
           status = { phase = "Running" } }
end

local function create(ns, name, labels)
  local code, body = srv:request("POST", "/api/v1/namespaces/" .. ns .. "/pods", pod(ns, name, labels))
  assert(code == 201, "create " .. name .. ": " .. tostring(code))
  return body
end

local function informer(opts)
  opts.resource = opts.resource or "pods"
  opts.backoff_initial, opts.backoff_max = 0.05, 0.2
  local inf = assert(client:informer(opts))
  informers[#informers + 1] = inf
  return inf
end

local pump = require "support.pump"

-- An object as plain JSON data (its cached bytes decoded).
local function plain(obj) return cjson.decode(kinformer.encode(obj)) end

local function top_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return table.concat(keys, ",")
end

local function assert_partial(obj)
  local d = plain(obj)
  assert.same("apiVersion,kind,metadata", top_keys(d))
  assert.same("PartialObjectMetadata", d.kind)
  assert.same("meta.k8s.io/v1", d.apiVersion)
  return d
end

-- The GETs on a collection path: lists and watches, each with its Accept header.
local function gets(path)
  local lists, watches = {}, {}
  for _, q in ipairs(srv:requests()) do
    if q.method == "GET" and q.path == path then
      local t = q.query.watch == "true" and watches or lists
      t[#t + 1] = q.accept
    end
  end
  return lists, watches
end

describe("metadata_only", function()
setup(function()
  srv = fake.start{ args = { "--no-default-namespaces", "--bookmark-interval", "0.2" },
                    quiet = true }
  client = assert(kinformer.client{ server = srv.url })
end)
teardown(function() if srv then srv:stop() end end)

describe("informer", function()
  after_each(function()
    for _, inf in ipairs(informers) do inf:stop() end
    informers = {}
  end)

  it("syncs objects that hold only apiVersion, kind and metadata", function()
    local created = create("md-sync", "p1")
    create("md-sync", "p2")
    local inf = informer{ namespace = "md-sync", metadata_only = true }
    assert.is_true(inf.metadata_only)
    assert(inf:start())
    assert(inf:wait_for_sync(5))
    assert.same(2, inf:store():len())
    local d = assert_partial(inf:store():get_by_key("md-sync/p1"))
    local md = d.metadata
    assert.same("p1", md.name)
    assert.same("md-sync", md.namespace)
    assert.same({ app = "web" }, md.labels)
    assert.same("kept", md.annotations.note)
    assert.same("rs-1", md.ownerReferences[1].name)
    assert.same(created.metadata.resourceVersion, md.resourceVersion)
    assert.same(created.metadata.uid, md.uid)
    assert.is_nil(md.managedFields) -- strip_managed_fields applies as to whole objects
    -- handlers see the same form, and reading spec gives nil (there is none)
    local obj = inf:store():get_by_key("md-sync/p2")
    assert.is_nil(obj.spec)
    assert.same("PartialObjectMetadata", obj.kind)
  end)

  it("receives updates and deletes as PartialObjectMetadata", function()
    create("md-events", "p1")
    create("md-events", "p2")
    local inf = informer{ namespace = "md-events", metadata_only = true }
    local seen = {}
    inf:add_handler{
      on_update = function(_, new) seen[#seen + 1] = { "update", plain(new) } end,
      on_delete = function(obj) seen[#seen + 1] = { "delete", plain(obj) } end,
    }
    assert(inf:start())
    assert(inf:wait_for_sync(5))
    local code = srv:request("PATCH", "/api/v1/namespaces/md-events/pods/p1",
      { metadata = { labels = { app = "api" } } }, { ["Content-Type"] = "application/merge-patch+json" })
    assert.same(200, code)
    assert.same(200, (srv:request("DELETE", "/api/v1/namespaces/md-events/pods/p2")))
    create("md-events", "p3")
    assert.is_true(pump(inf, 5, function() return #seen == 2 and inf:store():len() == 2 end))
    assert.same("update", seen[1][1])
    assert.same("apiVersion,kind,metadata", top_keys(seen[1][2]))
    assert.same({ app = "api" }, seen[1][2].metadata.labels)
    assert.same("delete", seen[2][1])
    assert.same("p2", seen[2][2].metadata.name)
    assert.same("PartialObjectMetadata", seen[2][2].kind)
    assert_partial(inf:store():get_by_key("md-events/p3"))
    assert.same({ app = "api" }, inf:store():get_by_key("md-events/p1").metadata.labels)
  end)

  it("lists and watches with client-go's metadata Accept headers", function()
    create("md-accept", "p1")
    srv:clear_requests()
    local meta = informer{ namespace = "md-accept", metadata_only = true, page_size = 1 }
    create("md-accept", "p2")
    assert(meta:start())
    assert(meta:wait_for_sync(5))
    local full = informer{ namespace = "md-accept" }
    assert(full:start())
    assert(full:wait_for_sync(5))
    assert.is_true(pump(meta, 5, function()
      local _, watches = gets("/api/v1/namespaces/md-accept/pods")
      return #watches == 2
    end))
    local lists, watches = gets("/api/v1/namespaces/md-accept/pods")
    -- two pages of the metadata list, then the full list; a watch each
    assert.same({ LIST_ACCEPT, LIST_ACCEPT, "application/json" }, lists)
    table.sort(watches)
    assert.same({ "application/json", WATCH_ACCEPT }, watches)
  end)

  it("with watch_list gets its initial state as PartialObjectMetadata events", function()
    create("md-wl", "p1")
    srv:clear_requests()
    local inf = informer{ namespace = "md-wl", metadata_only = true, watch_list = true }
    assert(inf:start())
    assert(inf:wait_for_sync(5))
    assert_partial(inf:store():get_by_key("md-wl/p1"))
    local lists, watches = gets("/api/v1/namespaces/md-wl/pods")
    assert.same({}, lists)
    assert.same(WATCH_ACCEPT, watches[1])
  end)

  it("is a different informer from the full one of the same resource; the same one twice", function()
    create("md-share", "p1")
    local full = informer{ namespace = "md-share" }
    local meta = informer{ namespace = "md-share", metadata_only = true }
    assert.are_not.equal(full, meta)
    assert.is_false(full.metadata_only)
    assert.equal(meta, informer{ namespace = "md-share", metadata_only = true })
    assert.equal(full, informer{ namespace = "md-share", metadata_only = false })
    assert.equal(full, informer{ namespace = "md-share" })
    assert(full:start())
    assert(meta:start())
    assert(full:wait_for_sync(5))
    assert(meta:wait_for_sync(5))
    assert.same("node-1", full:store():get_by_key("md-share/p1").spec.nodeName)
    assert_partial(meta:store():get_by_key("md-share/p1"))
    -- both caches follow the server
    create("md-share", "p2")
    assert.is_true(pump(full, 5, function() return full:store():len() == 2 end))
    assert.is_true(pump(meta, 5, function() return meta:store():len() == 2 end))
    assert.same("Pod", full:store():get_by_key("md-share/p2").kind)
    assert_partial(meta:store():get_by_key("md-share/p2"))
    -- a stopped metadata-only informer is not shared any more; the full one still is
    meta:stop()
    local again = informer{ namespace = "md-share", metadata_only = true }
    assert.are_not.equal(meta, again)
    assert.equal(full, informer{ namespace = "md-share" })
  end)

  it("refuses a metadata_only that is not a boolean, shared or not", function()
    assert.has_error(function() client:informer{ resource = "pods", metadata_only = "yes" } end,
      "bad argument #1 to 'informer' (option 'metadata_only' must be a boolean, got string)")
    informer{ namespace = "md-bad", metadata_only = true }
    assert.has_error(function()
      client:informer{ resource = "pods", namespace = "md-bad", metadata_only = 1 }
    end, "bad argument #1 to 'informer' (option 'metadata_only' must be a boolean, got number)")
  end)
end)

describe("reflector", function()

  it("fills its FIFO with PartialObjectMetadata objects", function()
    create("md-refl", "p1")
    local fifo = kinformer.delta_fifo{ emit_replaced = true }
    local r = assert(client:reflector{ resource = "pods", namespace = "md-refl", fifo = fifo,
                                       metadata_only = true })
    finally(function() r:stop() end)
    assert(r:start())
    local deltas = fifo:pop(nil, 5)
    assert.is_table(deltas)
    assert.same("Replaced", deltas[1].type)
    assert_partial(deltas[1].object)
    assert.has_error(function()
      client:reflector{ resource = "pods", fifo = fifo, metadata_only = "yes" }
    end)
  end)
end)

describe("fake API server", function()

  it("serves a single object, lists and the 406 of the form that does not fit", function()
    create("md-get", "p1")
    local one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    local code, body, headers = srv:request("GET", "/api/v1/namespaces/md-get/pods/p1",
      nil, { Accept = WATCH_ACCEPT })
    assert.same(200, code)
    assert.same(one, headers["content-type"])
    assert.same("apiVersion,kind,metadata", top_keys(body))
    assert.same("PartialObjectMetadata", body.kind)
    code, body, headers = srv:request("GET", "/api/v1/namespaces/md-get/pods", nil,
      { Accept = LIST_ACCEPT })
    assert.same(200, code)
    assert.same("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
      headers["content-type"])
    assert.same("PartialObjectMetadataList", body.kind)
    assert.same("meta.k8s.io/v1", body.apiVersion)
    assert.is_string(body.metadata.resourceVersion)
    assert.same("PartialObjectMetadata", body.items[1].kind)
    assert.same("apiVersion,kind,metadata", top_keys(body.items[1]))
    code, body = srv:request("GET", "/api/v1/namespaces/md-get/pods", nil, { Accept = one })
    assert.same(406, code)
    assert.same("NotAcceptable", body.reason)
    code, body = srv:request("GET", "/api/v1/namespaces/md-get/pods/p1", nil,
      { Accept = LIST_ACCEPT })
    assert.same(406, code)
    assert.matches("not a list", body.message)
    -- plain JSON is unchanged
    code, body, headers = srv:request("GET", "/api/v1/namespaces/md-get/pods/p1")
    assert.same(200, code)
    assert.same("Pod", body.kind)
    assert.same("application/json", headers["content-type"])
  end)
end)

describe("bench/metadata_bench.lua (smoke size)", function()
  it("runs at 200 pods, prints both forms and stops its server", function()
    local proc = require "support.proc"
    local lua = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
    local cmd = ("cd %s && LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='build/%s/?.so;;' "
      .. "timeout -k 5 120 %s bench/metadata_bench.lua 200 1 2>&1; echo \"exit=$?\""):format(
      proc.quote(KINFORMER_ROOT), lua, lua)
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    assert.same(0, tonumber(out:match("exit=(%d+)%s*$")), out)
    for _, row in ipairs{ "| full objects, (a) no handler |", "| metadata_only, (a) no handler |",
                          "| full objects, (b) handler reads metadata.name |",
                          "| metadata_only, (b) handler reads metadata.name |",
                          "| floor: curl, metadata list in one response" } do
      assert.matches(row, out, 1, true)
    end
    assert.matches("cached kind: PartialObjectMetadata", out, 1, true)
    local pid = out:match("fake API server: %S+ %(pid (%d+)")
    assert.truthy(pid, out)
    local deadline = os.time() + 5
    while proc.alive(pid) and os.time() < deadline do os.execute("sleep 0.1") end
    assert.is_false(proc.alive(pid))
  end)
end)
end)
