-- The reflector against the fake API server: docs/semantics.md, section 4, each scenario asserting the
-- exact requests it made and that the store it fed ends equal to the server's objects.
-- Ports of client-go's reflector tests are named after them.
local kinformer = require "kinformer"
local cjson = require "cjson"
local socket = require "socket"
local fake = require "support.fake_apiserver"

local function pod(ns, name, labels, node)
  return { apiVersion = "v1", kind = "Pod",
           metadata = { namespace = ns, name = name, labels = labels or { app = "web" } },
           spec = { nodeName = node or "node-1", containers = { { name = "c", image = "nginx" } } } }
end

-- A minimal informer: reflector -> fifo -> store, pumped by the test.
local function setup(srv, opts)
  local store = kinformer.store()
  local fifo = kinformer.delta_fifo{ known_objects = store, emit_replaced = true }
  local client = assert(kinformer.client{ server = srv.url })
  opts = opts or {}
  opts.resource = opts.resource or "pods"
  opts.fifo = fifo
  opts.backoff_initial = opts.backoff_initial or 0.05
  opts.backoff_max = opts.backoff_max or 0.2
  local h = { store = store, fifo = fifo, client = client }
  h.r = client:reflector(opts)
  -- Applies queued deltas to the store until cond() holds or `seconds` pass.
  function h.pump(seconds, cond)
    local deadline = socket.gettime() + seconds
    repeat
      local d = fifo:pop(nil, 0.02)
      while d do
        for _, x in ipairs(d) do
          if x.type == "Deleted" then store:delete(x.object) else store:add(x.object) end
        end
        d = fifo:pop(nil, 0)
      end
      if cond and cond() then return true end
    until socket.gettime() > deadline
    return cond == nil
  end
  return h
end

local function same_as_server(h, srv)
  return function() return fake.same_versions(fake.versions(h.store), srv:versions("pods")) end
end

-- The reflector's GETs on the pods collection, in order.
local function gets(srv, path)
  local out = {}
  for _, q in ipairs(srv:requests()) do
    if q.method == "GET" and q.path == (path or "/api/v1/pods") then out[#out + 1] = q.query end
  end
  return out
end

local function lists(srv) local o = {} for _, q in ipairs(gets(srv)) do if q.watch ~= "true" then o[#o + 1] = q end end return o end
local function watches(srv) local o = {} for _, q in ipairs(gets(srv)) do if q.watch == "true" then o[#o + 1] = q end end return o end

local function eventually(seconds, cond)
  local deadline = socket.gettime() + seconds
  repeat
    if cond() then return true end
    socket.sleep(0.02)
  until socket.gettime() > deadline
  return cond()
end

describe("reflector", function()
  local srv, h

  after_each(function()
    if h then h.r:stop() h = nil end
    if srv then srv:stop() srv = nil end
  end)

  it("TestReflectorListAndWatch: lists at rv 0 with limit 500, replaces, watches from the list's rv", function()
    srv = fake.start{ args = { "--pods", "3" } }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return h.fifo:has_synced() and #h.store == 3 end))
    local l = lists(srv)
    assert.equals(1, #l)
    assert.equals("0", l[1].resourceVersion)
    assert.equals("500", l[1].limit)
    assert.is_true(eventually(5, function() return #watches(srv) >= 1 end))
    local w = watches(srv)[1]
    assert.equals(h.r:last_sync_resource_version(), w.resourceVersion)
    assert.equals("true", w.allowWatchBookmarks)
    local t = tonumber(w.timeoutSeconds)
    assert.is_true(t >= 300 and t < 600, "timeoutSeconds " .. tostring(w.timeoutSeconds))
    -- live changes flow through the watch
    assert(srv:request("POST", "/api/v1/namespaces/default/pods", pod("default", "live-1")))
    assert.is_true(h.pump(5, function() return h.store:get_by_key("default/live-1") ~= nil end))
    local created = h.store:get_by_key("default/live-1")
    assert.equals("Pod", created.kind)
    assert(srv:request("DELETE", "/api/v1/namespaces/default/pods/live-1"))
    assert.is_true(h.pump(5, function() return h.store:get_by_key("default/live-1") == nil end))
    assert.is_true(h.pump(2, same_as_server(h, srv)))
    assert.equals(1, #lists(srv)) -- no relist on the way
    local st = h.r:status()
    assert.equals("watching", st.phase)
    assert.is_true(st.events >= 2)
  end)

  it("paginates a list with continue tokens and strips managedFields", function()
    srv = fake.start{ args = { "--pods", "1203" } }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(10, function() return h.fifo:has_synced() and #h.store == 1203 end))
    local l = lists(srv)
    assert.equals(3, #l)
    assert.is_nil(l[2].resourceVersion) -- continuation pages carry no rv
    assert.is_not_nil(l[2].continue)
    assert.equals("500", l[3].limit)
    local any = h.store:list()[1]
    assert.is_nil(any.metadata.managedFields)
    assert.equals("Pod", any.kind) -- list items look like watch objects
    assert.is_true(h.pump(2, same_as_server(h, srv)))
  end)

  it("keeps managedFields when strip_managed_fields = false", function()
    srv = fake.start{ args = { "--pods", "2" } }
    h = setup(srv, { strip_managed_fields = false })
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return #h.store == 2 end))
    assert.is_table(h.store:list()[1].metadata.managedFields)
  end)

  it("TestReflectorWatchTimeout: a watch the server ends is re-opened from the last rv, no relist", function()
    srv = fake.start{ args = { "--pods", "2" } }
    h = setup(srv, { watch_timeout = 1 })
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return h.fifo:has_synced() end))
    assert(srv:request("POST", "/api/v1/namespaces/default/pods", pod("default", "after")))
    assert.is_true(h.pump(8, function() return #watches(srv) >= 3 end))
    local w = watches(srv)
    assert.equals(1, #lists(srv))
    assert.is_true(tonumber(w[#w].resourceVersion) > tonumber(w[1].resourceVersion))
    assert.is_true(h.pump(2, same_as_server(h, srv)))
  end)

  it("410 on the watch: relists at the last rv (no limit), then watches again", function()
    srv = fake.start{ args = { "--pods", "2" } }
    srv:fault{ path = "^/api/v1/pods$", watch = true, action = "error_event", status = 410,
               reason = "Expired", times = 1 }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(8, function() return #lists(srv) >= 2 and #watches(srv) >= 2 end))
    local l = lists(srv)
    assert.equals("0", l[1].resourceVersion)
    assert.equals(h.r:status().relists >= 1, true)
    assert.is_not_equal("0", l[2].resourceVersion)
    assert.is_nil(l[2].limit) -- relists at a known rv are served unpaginated (watch cache)
    local st = h.r:status()
    assert.equals(410, st.last_error_code)
    assert.is_true(h.pump(2, same_as_server(h, srv)))
  end)

  it("TestReflectorFullListIfExpired-like: an expired list rv is retried at once with no rv", function()
    srv = fake.start{ args = { "--pods", "2" } }
    srv:fault{ path = "^/api/v1/pods$", watch = false, query = { resourceVersion = "0" },
               action = "status", status = 410, reason = "Expired", times = 1 }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return h.fifo:has_synced() end))
    local l = lists(srv)
    assert.equals(2, #l)
    assert.equals("0", l[1].resourceVersion)
    assert.is_nil(l[2].resourceVersion) -- consistent read
    assert.equals("500", l[2].limit)
  end)

  it("TestReflectorFullListIfTooLarge: 'too large resource version' is retried with no rv", function()
    srv = fake.start{ args = { "--pods", "2" } }
    srv:fault{ path = "^/api/v1/pods$", watch = false, query = { resourceVersion = "0" },
               action = "status", status = 504, reason = "Timeout",
               message = "Too large resource version", times = 1 }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return h.fifo:has_synced() end))
    local l = lists(srv)
    assert.equals(2, #l)
    assert.is_nil(l[2].resourceVersion)
  end)

  it("an expired continue token falls back to one full list at the original rv", function()
    srv = fake.start{ args = { "--pods", "700" } }
    -- Continuation pages are the only lists without a resourceVersion parameter (JSON null:
    -- "must be absent").
    srv:fault{ path = "^/api/v1/pods$", watch = false,
               query = { resourceVersion = require("cjson").null },
               action = "status", status = 410, reason = "Expired", times = 1 }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(8, function() return h.fifo:has_synced() and #h.store == 700 end))
    local l = lists(srv)
    assert.equals(3, #l)
    assert.is_not_nil(l[2].continue)
    assert.equals("0", l[3].resourceVersion) -- the first page's rv
    assert.is_nil(l[3].limit)
    assert.is_nil(l[3].continue)
  end)

  it("a continuation page that turns out bad after its metadata fails the list, however far the next page got", function()
    -- The reflector asks for page 3 as soon as page 2's transfer ends if it has already scanned
    -- page 2's continue token (pipelined pages); page 2's truncated body is only found bad at its
    -- end. Either way page 2's error is the one reported, page 3 (if asked for) is dropped and
    -- the relist starts over at rv 0.
    srv = fake.start{ args = { "--pods", "1203" } }
    srv:fault{ path = "^/api/v1/pods$", watch = false,
               query = { resourceVersion = require("cjson").null },
               action = "malformed_line", times = 1 }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(10, function() return h.fifo:has_synced() and #h.store == 1203 end))
    local l = lists(srv)
    assert.is_not_nil(l[2].continue)
    local restart = 3
    if l[3].continue then -- page 3 was asked for early, with page 2's token
      assert.is_nil(l[3].resourceVersion)
      restart = 4
    end
    assert.equals("0", l[restart].resourceVersion)
    assert.is_nil(l[restart].continue)
    assert.equals(restart + 2, #l) -- then three good pages
    local st = h.r:status()
    assert.equals(1, st.errors)
    assert.equals(200, st.last_error_code)
    assert.matches("bad response", st.last_error)
    assert.is_true(h.pump(2, same_as_server(h, srv)))
  end)

  it("TestReflectorBackoffOnTooManyRequests / NoRelistOnTooManyRequests: 429 on the watch re-watches after Retry-After", function()
    srv = fake.start{ args = { "--pods", "1" } }
    srv:fault{ path = "^/api/v1/pods$", watch = true, action = "status", status = 429,
               retry_after = 1, times = 1 }
    h = setup(srv)
    local t0 = socket.gettime()
    assert(h.r:start())
    assert.is_true(h.pump(6, function() return #watches(srv) >= 2 end))
    assert.is_true(socket.gettime() - t0 >= 0.9, "Retry-After honoured")
    assert.equals(1, #lists(srv))
    assert.equals(429, h.r:status().last_error_code)
  end)

  it("a dropped watch (also mid-line) resumes from the last rv without relisting", function()
    srv = fake.start{ args = { "--pods", "1" } }
    srv:fault{ path = "^/api/v1/pods$", watch = true, action = "drop_mid_line", after_events = 1,
               times = 1 }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return #watches(srv) >= 1 end))
    assert(srv:request("POST", "/api/v1/namespaces/default/pods", pod("default", "a")))
    assert(srv:request("POST", "/api/v1/namespaces/default/pods", pod("default", "b")))
    assert.is_true(h.pump(8, function() return #watches(srv) >= 2 and same_as_server(h, srv)() end))
    assert.equals(1, #lists(srv))
  end)

  it("a malformed watch line is reported, the watch restarts with a relist, the store stays right", function()
    srv = fake.start{ args = { "--pods", "2" } }
    srv:fault{ path = "^/api/v1/pods$", watch = true, action = "malformed_line", times = 1 }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return #watches(srv) >= 1 end))
    assert(srv:request("POST", "/api/v1/namespaces/default/pods", pod("default", "m")))
    assert.is_true(h.pump(8, function() return #lists(srv) >= 2 and same_as_server(h, srv)() end))
    local st = h.r:status()
    assert.is_true(st.errors >= 1)
  end)

  it("a stalled watch is reconnected by the idle detector", function()
    srv = fake.start{ args = { "--pods", "1" } }
    srv:fault{ path = "^/api/v1/pods$", watch = true, action = "stall", seconds = 30, times = 1 }
    h = setup(srv, { idle_timeout = 1 })
    assert(h.r:start())
    assert.is_true(h.pump(3, function() return #watches(srv) >= 2 end))
    assert.matches("no data", h.r:status().last_error)
  end)

  it("403 is reported with code and reason, and retried with backoff", function()
    srv = fake.start{ args = { "--pods", "1" } }
    srv:fault{ path = "^/api/v1/pods$", watch = false, action = "status", status = 403,
               reason = "Forbidden", message = "pods is forbidden: no", times = 2 }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(8, function() return h.fifo:has_synced() end))
    assert.equals(3, #lists(srv))
    local st = h.r:status()
    assert.equals(403, st.last_error_code)
    assert.equals("Forbidden", st.last_error_reason)
    assert.matches("pods is forbidden", st.last_error)
  end)

  it("a very short watch (closed at once, no event) is an error and leads to a relist", function()
    srv = fake.start{ args = { "--pods", "1" } }
    srv:fault{ path = "^/api/v1/pods$", watch = true, action = "close_immediately", times = 1 }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(8, function() return #lists(srv) >= 2 and #watches(srv) >= 2 end))
    assert.is_true(h.r:status().errors >= 1)
  end)

  it("passes label and field selectors and namespaces through", function()
    srv = fake.start{ args = { "--pods", "0" } }
    assert(srv:request("POST", "/api/v1/namespaces/a/pods", pod("a", "x", { app = "web" }, "n1")))
    assert(srv:request("POST", "/api/v1/namespaces/a/pods", pod("a", "y", { app = "db" }, "n1")))
    assert(srv:request("POST", "/api/v1/namespaces/b/pods", pod("b", "z", { app = "web" }, "n1")))
    h = setup(srv, { namespace = "a", label_selector = "app=web", field_selector = "spec.nodeName=n1" })
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return h.fifo:has_synced() end))
    assert.same({ "a/x" }, h.store:list_keys())
    local q = gets(srv, "/api/v1/namespaces/a/pods")[1]
    assert.equals("app=web", q.labelSelector)
    assert.equals("spec.nodeName=n1", q.fieldSelector)
  end)

  it("WatchList: streams the initial state, then keeps the same stream as the watch", function()
    srv = fake.start{ args = { "--pods", "5" } }
    h = setup(srv, { watch_list = true })
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return h.fifo:has_synced() and #h.store == 5 end))
    assert.equals("watching", h.r:status().phase) -- the stream goes on as the watch
    assert.equals(0, #lists(srv))
    local w = watches(srv)[1]
    assert.equals("true", w.sendInitialEvents)
    assert.equals("NotOlderThan", w.resourceVersionMatch)
    assert(srv:request("POST", "/api/v1/namespaces/default/pods", pod("default", "wl")))
    assert.is_true(h.pump(5, function() return h.store:get_by_key("default/wl") ~= nil end))
    assert.equals(1, #watches(srv))
  end)

  it("WatchList failing before its end bookmark falls back to the paginated list", function()
    srv = fake.start{ args = { "--pods", "3" } }
    srv:fault{ path = "^/api/v1/pods$", watch = true, query = { sendInitialEvents = "true" },
               action = "status", status = 500, times = -1 }
    h = setup(srv, { watch_list = true })
    assert(h.r:start())
    assert.is_true(h.pump(8, function() return h.fifo:has_synced() and #h.store == 3 end))
    assert.is_true(#lists(srv) >= 1)
  end)

  it("WatchList: a relist streams through WatchList again, from the last rv (as client-go)", function()
    srv = fake.start{ args = { "--pods", "3" } }
    -- The WatchList stream ends after 1-2 s (watch_timeout); the plain watch that follows gets
    -- an ERROR 410 at once: a relist.
    srv:fault{ path = "^/api/v1/pods$", watch = true, query = { sendInitialEvents = cjson.null },
               action = "error_event", status = 410, reason = "Expired", times = 1 }
    h = setup(srv, { watch_list = true, watch_timeout = 1 })
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return h.fifo:has_synced() and #h.store == 3 end))
    local synced_rv = h.r:last_sync_resource_version()
    assert(srv:request("POST", "/api/v1/namespaces/default/pods", pod("default", "late")))
    assert.is_true(h.pump(10, function()
      return #watches(srv) >= 3 and h.r:status().relists >= 1 and h.r:status().phase == "watching"
    end))
    local w = watches(srv)
    assert.is_nil(w[2].sendInitialEvents) -- the stream ended normally: a plain re-watch
    assert.equals("true", w[3].sendInitialEvents)
    assert.equals("NotOlderThan", w[3].resourceVersionMatch)
    assert.is_true(tonumber(w[3].resourceVersion) >= tonumber(synced_rv))
    assert.equals(0, #lists(srv)) -- no paginated list at all
    assert.equals(410, h.r:status().last_error_code)
    assert.is_true(h.pump(2, same_as_server(h, srv)))
  end)

  it("WatchList: after a fallback to the paginated list, the next relist tries WatchList again", function()
    srv = fake.start{ args = { "--pods", "3" } }
    -- The first WatchList fails (500): the paginated list; the plain watch after it gets an
    -- ERROR 410: a relist, which tries WatchList again.
    srv:fault{ path = "^/api/v1/pods$", watch = true, query = { sendInitialEvents = "true" },
               action = "status", status = 500, times = 1 }
    srv:fault{ path = "^/api/v1/pods$", watch = true, query = { sendInitialEvents = cjson.null },
               action = "error_event", status = 410, reason = "Expired", times = 1 }
    h = setup(srv, { watch_list = true })
    assert(h.r:start())
    assert.is_true(h.pump(8, function() return h.fifo:has_synced() and #h.store == 3 end))
    assert(srv:request("POST", "/api/v1/namespaces/default/pods", pod("default", "late")))
    assert.is_true(h.pump(8, function()
      local n = 0
      for _, q in ipairs(watches(srv)) do if q.sendInitialEvents == "true" then n = n + 1 end end
      return n >= 2 and h.r:status().phase == "watching"
    end))
    assert.equals(1, #lists(srv))
    assert.is_true(h.pump(2, same_as_server(h, srv)))
  end)

  it("stop() returns within 1 s and the reflector can start again", function()
    srv = fake.start{ args = { "--pods", "1" } }
    h = setup(srv)
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return #watches(srv) >= 1 end))
    local t0 = socket.gettime()
    h.r:stop()
    assert.is_true(socket.gettime() - t0 < 1.0)
    assert.equals("stopped", h.r:status().phase)
    assert(h.r:start())
    assert.is_true(h.pump(5, function() return #watches(srv) >= 2 end))
  end)

  it("connection refused is reported and retried", function()
    local client = assert(kinformer.client{ server = "http://127.0.0.1:1" })
    local fifo = kinformer.delta_fifo()
    local r = client:reflector{ resource = "pods", fifo = fifo, backoff_initial = 0.05 }
    assert(r:start())
    assert.is_true(eventually(5, function() return (r:status().errors or 0) >= 2 end))
    assert.matches("Couldn't connect", r:status().last_error)
    r:stop()
  end)

  it("max_object_bytes: an object over it is a clear error in status() and wait_for_sync; nothing "
     .. "is lost once it shrinks or the limit is raised", function()
    srv = fake.start{ args = { "--pods", "3", "--bookmark-interval", "0.2" }, quiet = true }
    local client = assert(kinformer.client{ server = srv.url })
    -- backoff: at least 0.5 s, so that each error stays in status() long enough to be seen
    local function informer(limit)
      return assert(client:informer{ resource = "pods", max_object_bytes = limit,
                                     backoff_initial = 0.5, backoff_max = 0.5 })
    end
    local function error_seen(inf, pattern)
      return eventually(5, function()
        inf:dispatch(1000)
        return (inf:status().last_error or ""):find(pattern) ~= nil
      end)
    end
    local function annotate(value) -- nil removes the annotation
      local code = srv:request("PATCH", "/api/v1/namespaces/default/pods/big",
        { metadata = { annotations = { blob = value or cjson.null } } },
        { ["Content-Type"] = "application/merge-patch+json" })
      assert.equal(200, code)
    end
    local function synced_with_server(inf)
      return eventually(5, function()
        inf:dispatch(1000)
        return fake.same_versions(fake.versions(inf:store()), srv:versions("pods"))
      end)
    end
    local blob = ("0123456789abcdef"):rep(2048) -- 32 KiB; the pods of --pods are ~9 KB
    assert.equal(201, (srv:request("POST", "/api/v1/namespaces/default/pods",
      { apiVersion = "v1", kind = "Pod", metadata = { name = "big", namespace = "default",
        annotations = { blob = blob } }, spec = { containers = { { name = "c", image = "x" } } } })))
    local inf = informer(16384)
    local inf2
    finally(function() inf:stop() if inf2 then inf2:stop() end end)
    assert(inf:start())

    -- The list cannot complete: wait_for_sync and status() say why.
    local ok, err = inf:wait_for_sync(1)
    assert.is_nil(ok)
    assert.matches("not synced after 1s: list /api/v1/pods: bad response: at byte %d+: list item is "
      .. "larger than max_object_bytes %(16384%)$", err)
    local st = inf:status()
    assert.is_false(st.synced)
    assert.matches("list item is larger than max_object_bytes (16384)", st.last_error, 1, true)
    assert.is_true(st.errors >= 1)
    assert.equal(0, st.objects)

    -- The object shrinks: the next relist (after the backoff) completes, with every object.
    annotate(nil)
    assert(inf:wait_for_sync(5))
    assert.is_true(synced_with_server(inf))
    assert.equal(4, #inf:store():list())

    -- It grows while watched: the watch says so, then relists that fail while it is too big.
    -- The cache keeps what it had (the small version): stale, nothing lost.
    local small_rv = inf:store():get_by_key("default/big").metadata.resourceVersion
    annotate(blob)
    assert.is_true(error_seen(inf, "^watch /api/v1/pods: bad event: at byte %d+: watch event is "
      .. "larger than max_object_bytes %(16384%)$"))
    assert.is_true(error_seen(inf, "^list /api/v1/pods: bad response: at byte %d+: list item is "
      .. "larger than max_object_bytes %(16384%)$"))
    assert.is_true(inf:status().synced)
    assert.equal(4, #inf:store():list())
    assert.equal(small_rv, inf:store():get_by_key("default/big").metadata.resourceVersion)
    inf:stop()

    -- The limit raised: a new informer has everything, the big object whole.
    inf2 = informer(65536)
    assert(inf2:start())
    assert(inf2:wait_for_sync(5))
    assert.is_true(synced_with_server(inf2))
    assert.equal(blob, inf2:store():get_by_key("default/big").metadata.annotations.blob)
  end)

  it("rejects bad options with an error naming them", function()
    local client = assert(kinformer.client{ server = "http://127.0.0.1:1" })
    local fifo = kinformer.delta_fifo()
    assert.has_error(function() client:reflector{ resource = "pods", fifo = fifo, bogus = 1 } end,
      "bad argument #1 to 'reflector' (unknown option 'bogus')")
    assert.has_error(function() client:reflector{ resource = "pods", fifo = {} } end)
    assert.has_error(function() client:reflector{ resource = "nodes", namespace = "x", fifo = fifo } end)
    assert.has_error(function() kinformer.client{ server = "ftp://x" } end)
  end)
end)
