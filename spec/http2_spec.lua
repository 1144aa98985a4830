-- HTTP/2 against a real server: Debian's nginx (TLS, `http2`) in front of the fake API server
-- (HTTP/1.1 upstream, proxy_buffering off), informers and REST calls through it. nginx's access
-- log tells which TCP connection ($connection) carried each request (spec/support/h2proxy.lua).
-- One nginx (two server blocks: the default stream limit and a limit of 2) and one fake server
-- for the whole file.
local kinformer = require "kinformer"
local socket = require "socket"
local fake = require "support.fake_apiserver"
local certs = require "support.certs"
local h2proxy = require "support.h2proxy"

local DEFAULT, LIMITED = 1, 2 -- the proxy's server blocks: 128 streams, 2 streams

local srv, proxy, tls

local function wait_for(seconds, cond, infs)
  local deadline = socket.gettime() + seconds
  repeat
    for _, inf in ipairs(infs or {}) do inf:dispatch(100000) end
    if cond() then return true end
    socket.sleep(0.02)
  until socket.gettime() > deadline
  return cond()
end

-- Informers on resources, started together, then synced.
local function informers(client, resources, extra)
  local infs = {}
  for i, res in ipairs(resources) do
    local opts = { resource = res, backoff_initial = 0.1, backoff_max = 0.5 }
    for k, v in pairs(extra or {}) do opts[k] = v end
    infs[i] = assert(client:informer(opts))
  end
  for _, inf in ipairs(infs) do assert(inf:start()) end
  for _, inf in ipairs(infs) do assert(inf:wait_for_sync(10)) end
  return infs
end

-- Whether an informer's cache holds what the server holds (keys and resourceVersions).
local function matches(inf)
  local st = srv:control("GET", "/_fake/state?brief=1&resource=" .. inf.resource)
  local have, n = {}, 0
  for _, o in ipairs(inf:store():list()) do
    have[kinformer.key_of(o)] = o.metadata.resourceVersion
    n = n + 1
  end
  for k, rv in pairs(st.objects) do
    if have[k] ~= rv then return false end
    n = n - 1
  end
  return n == 0
end

local function all_match(infs)
  return function()
    for _, inf in ipairs(infs) do
      if not matches(inf) then return false end
    end
    return true
  end
end

-- Log lines from index `from` on, of server block `which`.
local function logged(from, which)
  local port = tonumber(proxy.urls[which]:match(":(%d+)$"))
  local out = {}
  for i, r in ipairs(proxy:requests()) do
    if i >= from and r.port == port then out[#out + 1] = r end
  end
  return out
end

-- Stops the informers and waits until nginx logged the watches they had open (it logs a request
-- when it ends); returns the lines of `which` since `from`.
local function stop_and_collect(infs, from, which)
  local before = #proxy:requests()
  for _, inf in ipairs(infs) do inf:stop() end
  local lines
  assert(wait_for(5, function()
    local open = {}
    for _, inf in ipairs(infs) do open[inf.path] = true end
    for _, r in ipairs(logged(before + 1, which)) do
      if r.watch then open[r.path:match("^[^?]*")] = nil end
    end
    return next(open) == nil
  end), "nginx did not log every watch")
  lines = logged(from, which)
  return lines
end

-- The client's discovery requests (resource names: /api, /apis, /api/v1, /apis/GROUP/VERSION)
-- are REST calls: they go over the REST calls' connection, not the informers'.
local function is_discovery(r)
  local path = r.path:match("^[^?]*")
  return path == "/api" or path == "/apis" or path == "/api/v1" or
         path:match("^/apis/[^/]+/[^/]+$") ~= nil
end

local function connections(lines, pred)
  local set, n = {}, 0
  for _, r in ipairs(lines) do
    if not pred or pred(r) then
      local key = r.pid .. "/" .. r.conn
      if not set[key] then
        set[key] = true
        n = n + 1
      end
    end
  end
  return n, set
end

describe("HTTP/2 through nginx", function()
  setup(function()
    assert(h2proxy.available())
    tls = certs.make()
    srv = fake.start{ args = { "--sample-cluster", "--pods", "200", "--bookmark-interval", "0.5" },
                      quiet = true }
    proxy = h2proxy.start{ upstream = srv.url, certs = tls,
                           servers = { { max_streams = 128 }, { max_streams = 2 } } }
  end)

  teardown(function()
    if proxy then proxy:stop() end
    if srv then srv:stop() end
    if tls then tls:remove() end
  end)

  local function client(which, extra)
    local opts = { server = proxy.urls[which], ca_file = tls.ca }
    for k, v in pairs(extra or {}) do opts[k] = v end
    return assert(kinformer.client(opts))
  end

  it("carries every list and watch of a client on one connection, REST calls on one more", function()
    local from = #proxy:requests() + 1
    local c = client(DEFAULT)
    local infs = informers(c, { "pods", "services", "deployments", "endpointslices", "nodes",
                                "namespaces" })
    for _ = 1, 5 do assert(c:get("namespaces", "default")) end
    local lines = stop_and_collect(infs, from, DEFAULT)
    local rest = function(r) return r.path == "/api/v1/namespaces/default" or is_discovery(r) end
    local informer = function(r) return not rest(r) end
    for _, r in ipairs(lines) do assert.are.equal("HTTP/2.0", r.proto) end
    local n_inf = connections(lines, informer)
    local n_rest = connections(lines, rest)
    local watches = 0
    for _, r in ipairs(lines) do if r.watch then watches = watches + 1 end end
    assert.are.equal(6, watches)
    assert.are.equal(1, n_inf, "lists and watches went over " .. n_inf .. " connections")
    assert.are.equal(1, n_rest, "5 REST calls went over " .. n_rest .. " connections")
  end)

  it("runs calls on the watches' connection; a cancelled call's stream ends at the server", function()
    local from = #proxy:requests() + 1
    local c = client(DEFAULT)
    local infs = informers(c, { "pods", "services" })
    local core_client = c._core
    local calls = {}
    for i = 1, 5 do calls[i] = assert(core_client:call("GET", "/api/v1/namespaces/default")) end
    assert(wait_for(10, function()
      core_client:calls_drain()
      for _, k in ipairs(calls) do if not k:done() then return false end end
      return true
    end))
    for _, k in ipairs(calls) do assert.are.equal(200, (k:result())) end
    -- A POST stalled at the server, cancelled: its stream is reset (the watches keep the
    -- connection), nginx drops the upstream request, and the object is never made.
    srv:fault{ method = "POST", path = "/configmaps$", action = { type = "stall", seconds = 1 } }
    local k = assert(core_client:call("POST", "/api/v1/namespaces/default/configmaps",
      '{"metadata":{"name":"h2-cancelled"}}', "application/json"))
    socket.sleep(0.3)
    k:cancel()
    assert.are.equal("ECANCELED", select(3, k:result()))
    socket.sleep(1.2)
    srv:clear_faults()
    assert.are.equal(404, (core_client:request("GET", "/api/v1/namespaces/default/configmaps/h2-cancelled")))
    local lines = stop_and_collect(infs, from, DEFAULT)
    local calls_and_watches = function(r)
      return r.watch or r.path == "/api/v1/namespaces/default" or r.method == "POST"
    end
    for _, r in ipairs(lines) do assert.are.equal("HTTP/2.0", r.proto) end
    local n = connections(lines, calls_and_watches)
    assert.are.equal(1, n, "watches and calls went over " .. n .. " connections")
    local posts = {}
    for _, r in ipairs(lines) do if r.method == "POST" then posts[#posts + 1] = r.status end end
    assert.are.same({ 499 }, posts) -- nginx: the client closed the request
  end)

  it("asks for gzip on lists only with gzip = true; the cache is the same", function()
    local from = #proxy:requests() + 1
    local c = client(DEFAULT)
    local plain = informers(c, { "pods" })
    local gz = informers(c, { "pods" }, { gzip = true, label_selector = "!no-such-label" })
    srv:modify("pods", 3)
    assert(wait_for(5, all_match({ plain[1], gz[1] }), { plain[1], gz[1] }))
    local lines = stop_and_collect({ plain[1], gz[1] }, from, DEFAULT)
    local lists = {}
    for _, r in ipairs(lines) do
      if r.watch then
        assert.is_nil(r.encoding, r.path) -- watches are never compressed
      elseif r.path:find("/api/v1/pods?", 1, true) == 1 then
        lists[r.path:find("labelSelector", 1, true) and "gzip" or "plain"] = r
      end
    end
    -- 200 pods of about 9 KB: one page of 1.8 MB, over kube-apiserver's 128 KiB threshold
    assert.are.equal("gzip", lists.gzip.encoding)
    assert.is_nil(lists.plain.encoding)
    assert.is_true(lists.gzip.bytes * 5 < lists.plain.bytes,
      ("%d bytes compressed, %d not"):format(lists.gzip.bytes, lists.plain.bytes))
    assert.are.equal(plain[1]:store():len(), gz[1]:store():len())
  end)

  it("keeps more watches than the server's stream limit live", function()
    local from = #proxy:requests() + 1
    local c = client(LIMITED)
    local infs = informers(c, { "pods", "services", "deployments", "endpointslices", "nodes" })
    for round = 1, 2 do
      for _, inf in ipairs(infs) do srv:modify(inf.resource, 2) end
      assert(wait_for(5, all_match(infs), infs), "round " .. round .. ": caches differ")
      for _, inf in ipairs(infs) do
        local st = inf:status()
        assert.are.equal("watching", st.phase, inf.resource)
        assert.are.equal(1, st.watches, inf.resource .. ": " .. tostring(st.last_error))
      end
      socket.sleep(0.5)
    end
    local lines = stop_and_collect(infs, from, LIMITED)
    local n = connections(lines, function(r) return r.watch end)
    assert.is_true(n >= 3, "5 watches with 2 streams a connection went over " .. n)
  end)

  it("brings every watch back after nginx restarts mid-churn, caches equal to the server", function()
    local c = client(DEFAULT)
    local infs = informers(c, { "pods", "services", "deployments", "endpointslices" })
    srv:modify("pods", 300, { rate = 150 })
    srv:modify("services", 60, { rate = 30 })
    socket.sleep(0.7)
    proxy:restart(0.3)
    srv:modify("deployments", 10)
    srv:modify("endpointslices", 10)
    socket.sleep(1.6) -- the background modifications end
    assert(wait_for(10, all_match(infs), infs), "caches differ from the server")
    for _, inf in ipairs(infs) do
      local st = inf:status()
      assert.is_true(st.watches >= 2, inf.resource .. " did not watch again")
      assert.are.equal("watching", st.phase, inf.resource)
      assert.are.equal(1, st.lists, inf.resource .. " relisted")
    end
    stop_and_collect(infs, 1, DEFAULT)
  end)

  it("detects a connection gone silent within the idle timeout and re-establishes every watch", function()
    local IDLE = 2
    local from = #proxy:requests() + 1
    local c = client(DEFAULT, { connect_timeout = 1 })
    local infs = informers(c, { "pods", "services", "deployments", "endpointslices" },
                           { idle_timeout = IDLE })
    -- The connection the lists went over (logged as they ended) also carries the watches.
    local n, first = connections(logged(from, DEFAULT),
                                 function(r) return not r.watch and not is_discovery(r) end)
    assert.are.equal(1, n)
    local errors = {}
    for i, inf in ipairs(infs) do errors[i] = inf:status().errors end
    local t0 = socket.gettime()
    proxy:freeze()
    local detected, ndetected = {}, 0
    assert(wait_for(IDLE + 3, function()
      for i, inf in ipairs(infs) do
        if not detected[i] and inf:status().errors > errors[i] then
          detected[i] = socket.gettime() - t0
          ndetected = ndetected + 1
        end
      end
      return ndetected == #infs
    end), "not every watch noticed the silence")
    for i, inf in ipairs(infs) do
      assert.is_true(detected[i] < IDLE + 1.0, ("%s noticed after %.1f s"):format(inf.resource,
                                                                             detected[i]))
    end
    socket.sleep(0.5)
    proxy:thaw()
    for _, inf in ipairs(infs) do srv:modify(inf.resource, 3) end
    assert(wait_for(10, all_match(infs), infs), "caches differ from the server after the thaw")
    for _, inf in ipairs(infs) do assert.are.equal("watching", inf:status().phase) end
    -- Every informer's last watch ran on a new connection, not on the silent one.
    local lines = stop_and_collect(infs, from, DEFAULT)
    local last = {}
    for _, r in ipairs(lines) do
      if r.watch then last[r.path:match("^[^?]*")] = r end
    end
    local shown = {}
    for _, r in ipairs(lines) do shown[#shown + 1] = ("%d/%d %s"):format(r.pid, r.conn, r.path) end
    for _, inf in ipairs(infs) do
      local r = last[inf.path]
      assert.is_nil(first[r.pid .. "/" .. r.conn], inf.resource .. " watches on the old connection:\n"
        .. table.concat(shown, "\n"))
    end
  end)
end)
