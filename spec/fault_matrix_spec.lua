-- The fault matrix: one informer against the fake API server per fault, each scenario
-- ending with the cache equal to the server's objects, every handler's history consistent
-- (spec/support/history.lua: no duplicate adds, every vanished object got on_delete, maybe as a
-- tombstone) and status() telling what happened. Scenarios stay small (a few dozen pods) and
-- use tight backoffs; the outages last OUTAGE seconds and the no-dispatch pause PAUSE seconds
-- (3 s and 10 s by default; KINFORMER_FAULT_OUTAGE / KINFORMER_FAULT_PAUSE override them).
local kinformer = require "kinformer"
local core = require "kinformer.core"
local socket = require "socket"
local cjson = require "cjson"
local fake = require "support.fake_apiserver"
local history = require "support.history"

local OUTAGE = tonumber(os.getenv("KINFORMER_FAULT_OUTAGE")) or 3
local PAUSE = tonumber(os.getenv("KINFORMER_FAULT_PAUSE")) or 10
local PODS = "^/api/v1/pods$"

-- ---- helpers ----

local function pod(ns, name, pad)
  local p = { apiVersion = "v1", kind = "Pod",
              metadata = { namespace = ns, name = name, labels = { app = "web" } },
              spec = { nodeName = "node-1", containers = { { name = "c", image = "nginx" } } },
              status = { phase = "Running" } }
  if pad then p.metadata.annotations = { pad = string.rep("x", pad) } end
  return p
end

local function now() return socket.gettime() end

local function rss_kib()
  local f = assert(io.open("/proc/self/status"))
  local text = f:read("a")
  f:close()
  return tonumber(text:match("VmRSS:%s*(%d+)"))
end

-- One scenario: a fresh server with `pods` pods in namespaces a, b, c, a client, an informer with
-- tight options and history-checking handlers.
local ctx

local function scenario(opts)
  opts = opts or {}
  local args = { "--no-default-namespaces", "--bookmark-interval", "0.2" }
  for _, a in ipairs(opts.args or {}) do args[#args + 1] = a end
  local srv = fake.start{ args = args, quiet = true }
  ctx = { srv = srv, headers = opts.headers }
  local list = {}
  for i = 1, opts.pods or 24 do
    list[i] = pod(({ "a", "b", "c" })[i % 3 + 1], "p" .. i, opts.pad)
  end
  if #list > 0 then srv:objects(list, "pods") end
  ctx.client = assert(kinformer.client(opts.client and opts.client(srv) or { server = srv.url }))
  local iopts = { resource = "pods", backoff_initial = 0.05, backoff_max = 0.2 }
  for k, v in pairs(opts.informer or {}) do iopts[k] = v end
  ctx.inf = assert(ctx.client:informer(iopts))
  ctx.hs = {}
  for i, hopts in ipairs(opts.handlers or { { monotonic = true } }) do
    ctx.hs[i] = history.new(hopts)
    ctx.hs[i].reg = ctx.inf:add_handler(ctx.hs[i].handler)
  end
  for _, rule in ipairs(opts.faults or {}) do srv:fault(rule) end -- they meet the first requests
  assert(ctx.inf:start())
  assert(ctx.inf:wait_for_sync(10))
  return ctx
end

local function api(method, path, body, headers)
  local h = {}
  for k, v in pairs(ctx.headers or {}) do h[k] = v end
  for k, v in pairs(headers or {}) do h[k] = v end
  return ctx.srv:request(method, path, body, h)
end

local function create(ns, name, pad)
  local code = api("POST", "/api/v1/namespaces/" .. ns .. "/pods", pod(ns, name, pad))
  assert(code == 201, "create " .. ns .. "/" .. name .. ": " .. tostring(code))
end

local function patch(ns, name, value)
  local code = api("PATCH", "/api/v1/namespaces/" .. ns .. "/pods/" .. name,
    { metadata = { labels = { step = tostring(value) } } },
    { ["Content-Type"] = "application/merge-patch+json" })
  assert(code == 200, "patch " .. ns .. "/" .. name .. ": " .. tostring(code))
end

local function delete(ns, name)
  local code = api("DELETE", "/api/v1/namespaces/" .. ns .. "/pods/" .. name)
  assert(code == 200, "delete " .. ns .. "/" .. name .. ": " .. tostring(code))
end

-- n writes over the seeded pods: updates, creations and deletions, deterministic.
local function writes(n, seed)
  local rng = seed or 1
  local function rand(m) rng = (rng * 1103515245 + 12345) % 2147483648 return rng % m end
  ctx.next = ctx.next or 1000
  local state = ctx.srv:versions("pods")
  local keys = {}
  for k in pairs(state) do keys[#keys + 1] = k end
  table.sort(keys)
  for step = 1, n do
    local r = rand(10)
    if r < 3 or #keys == 0 then
      ctx.next = ctx.next + 1
      local ns = ({ "a", "b", "c" })[rand(3) + 1]
      create(ns, "n" .. ctx.next)
      keys[#keys + 1] = ns .. "/n" .. ctx.next
    else
      local i = rand(#keys) + 1
      local ns, name = keys[i]:match("^([^/]+)/(.+)$")
      if r < 8 then
        patch(ns, name, step)
      else
        delete(ns, name)
        table.remove(keys, i)
      end
    end
  end
end

-- Dispatches until cond() holds or seconds pass; returns whether it held.
local function pump(seconds, cond)
  local inf = ctx.inf
  local deadline = now() + seconds
  repeat
    inf:dispatch(1000)
    if cond() then return true end
    core.wait({ inf:fd() }, 0.02)
  until now() > deadline
  inf:dispatch(1000)
  return cond()
end

-- Waits (without dispatching) until cond(status) holds.
local function wait_status(seconds, cond)
  local deadline = now() + seconds
  repeat
    local st = ctx.inf:status()
    if cond(st) then return st end
    socket.sleep(0.02)
  until now() > deadline
  return nil
end

-- The end of every scenario: cache and handlers equal the server, histories consistent.
local function converge(seconds)
  local want = ctx.srv:versions("pods")
  local ok = pump(seconds or 15, function()
    if not fake.same_versions(fake.versions(ctx.inf:store()), want) then return false end
    for _, h in ipairs(ctx.hs) do if not h:same(want) then return false end end
    return true
  end)
  if not ok then
    error("not converged: cache: " .. history.diff(want, fake.versions(ctx.inf:store())) ..
          " | status: " .. cjson.encode(ctx.inf:status()), 2)
  end
  for i, h in ipairs(ctx.hs) do
    local good, why = h:check(want)
    assert(good, "handler " .. i .. ": " .. tostring(why))
  end
  local st = ctx.inf:status()
  assert.is_true(st.synced)
  assert.same(0, st.queue_length)
  assert.same(0, st.queued_deltas)
  assert.same(0, st.queued_bytes)
  return st, want
end

-- The informer's list and watch requests, in order: their query parameters plus is_watch,
-- time and auth (how the request authenticated, on servers with --token).
local function requests(path)
  local out = {}
  for _, q in ipairs(ctx.srv:requests()) do
    if q.method == "GET" and q.path == (path or "/api/v1/pods") then
      q.query.time = q.time
      q.query.is_watch = q.query.watch == "true"
      q.query.auth = q.auth
      out[#out + 1] = q.query
    end
  end
  return out
end

-- The request log and status, for failure messages.
local function explain()
  local out = {}
  for _, q in ipairs(requests()) do
    local t = q.time
    q.time = nil
    out[#out + 1] = ("%.3f %s"):format(t, cjson.encode(q))
  end
  return table.concat(out, "\n") .. "\n" .. cjson.encode(ctx.inf:status())
end

local function lists() local o = {} for _, q in ipairs(requests()) do if not q.is_watch then o[#o + 1] = q end end return o end
local function watches() local o = {} for _, q in ipairs(requests()) do if q.is_watch then o[#o + 1] = q end end return o end

-- Waits (without dispatching) until the server saw n watch requests; returns them.
local function wait_watches(n, seconds)
  local deadline = now() + seconds
  local ws = watches()
  while #ws < n and now() < deadline do
    socket.sleep(0.02)
    ws = watches()
  end
  return ws
end

-- A fault for the first watch: after `after` events an ERROR 410 ends it (the informer relists).
local function expiring_watch(after)
  return { { path = PODS, watch = true, after_events = after,
             action = { type = "error_event", code = 410, reason = "Expired",
                        message = "too old resource version: 1 (2)" } } }
end

-- With expiring_watch(): trigger() makes the events that end the watch; the relist that follows
-- is held back a second (a stall), meanwhile the first n objects (key order) are deleted. The
-- relist no longer has them and no DELETED event came: they reach the handlers as tombstones.
local function expire_then_delete(trigger, n)
  ctx.srv:fault{ path = PODS, watch = false, action = { type = "stall", seconds = 1 } }
  trigger()
  socket.sleep(0.3) -- the ERROR is out; the relist waits in the stall
  local keys = {}
  for k in pairs(ctx.srv:versions("pods")) do keys[#keys + 1] = k end
  table.sort(keys)
  for i = 1, n do
    local ns, name = keys[i]:match("^([^/]+)/(.+)$")
    delete(ns, name)
  end
  return { (table.unpack or unpack)(keys, 1, n) }
end

describe("fault matrix", function()
  after_each(function()
    if ctx then
      if ctx.inf then ctx.inf:stop() end
      ctx.srv:stop()
      ctx = nil
    end
    kinformer.set_logger(nil)
  end)

  it("watch connection reset mid-event: re-watch from the last rv, no relist", function()
    scenario{ faults = { { path = PODS, watch = true, after_events = 3, action = "reset_mid_line" } } }
    writes(12, 1)
    local st = converge()
    assert.same(1, st.lists)
    assert.same(0, st.relists)
    assert.is_true(st.watch_restarts >= 1)
    assert.matches("watch /api/v1/pods: connection lost", st.last_error, 1, true)
    assert.same(0, st.last_error_code)
    -- Every re-watch resumed from a resourceVersion the informer had seen.
    local ws = watches()
    assert.is_true(#ws >= 2)
    for i = 2, #ws do
      assert.is_true(tonumber(ws[i].resourceVersion) >= tonumber(ws[i - 1].resourceVersion))
    end
  end)

  it("a truncated chunk in a watch: re-watch from the last rv, no relist", function()
    scenario{ faults = { { path = PODS, watch = true, after_events = 2, action = "truncated_chunk" } } }
    writes(10, 2)
    local st = converge()
    assert.same(0, st.relists)
    assert.is_true(st.watch_restarts >= 1)
    assert.matches("connection lost", st.last_error, 1, true)
  end)

  it("server restart (down " .. OUTAGE .. " s) during a relist", function()
    scenario{ faults = expiring_watch(2) }
    -- The relist the 410 causes is cut half way by the server going down.
    ctx.srv:fault{ path = PODS, watch = false, action = { type = "restart", seconds = OUTAGE } }
    create("a", "x1")
    create("b", "x2")
    assert.is_true(wait_status(5, function(st) return st.errors >= 3 end) ~= nil)
    assert.is_true(ctx.srv:wait_up(OUTAGE + 10))
    writes(8, 3)
    local st = converge(OUTAGE + 10)
    assert.same(1, st.relists)
    assert.same(2, st.lists)
    assert.matches("Couldn't connect to server", st.last_error, 1, true)
    -- Connection refused again and again while it was down; each retry after a backoff.
    assert.is_true(st.errors >= 4)
    local ls = lists()
    assert.same(ls[2].resourceVersion, ls[#ls].resourceVersion) -- the same relist, retried
  end)

  it("server restart (down " .. OUTAGE .. " s) during a watch: re-watch, no relist", function()
    scenario{ faults = { { path = PODS, watch = true, after_events = 2,
                           action = { type = "restart", seconds = OUTAGE } } } }
    create("a", "y1")
    create("b", "y2")
    -- Cut (connection lost), then refused while it is down.
    local during = wait_status(5, function(st)
      return st.last_error and st.last_error:find("Couldn't connect to server", 1, true) end)
    assert.is_truthy(during)
    assert.same(0, during.last_error_code)
    assert.is_true(ctx.srv:wait_up(OUTAGE + 10))
    writes(8, 4)
    local st = converge(OUTAGE + 10)
    assert.same(1, st.lists, explain())
    assert.same(0, st.relists)
    assert.is_true(st.watch_restarts >= 2)
    assert.is_true(st.errors >= 3)
    -- Two watches reached the server: the one cut, and the one after it came back, resuming
    -- from the last event the first one delivered (refused connections never arrive).
    local ws = watches()
    assert.same(2, #ws)
    assert.same(tostring(tonumber(ws[1].resourceVersion) + 2), ws[2].resourceVersion)
  end)

  it("server restart into an older state (etcd restore): too large rv, consistent relist, tombstones", function()
    scenario{ handlers = { { monotonic = false } } }
    local saved = ctx.srv:snapshot()
    writes(12, 5)      -- after the backup: created, changed and deleted objects
    create("c", "born-after-backup")
    local seen = pump(5, function()
      return fake.same_versions(fake.versions(ctx.inf:store()), ctx.srv:versions("pods")) end)
    assert.is_true(seen)
    local last = tonumber(ctx.inf:last_sync_resource_version())
    assert.is_true(last > tonumber(saved.resourceVersion))
    ctx.srv:clear_requests()
    ctx.srv:restart{ seconds = OUTAGE, restore = true }
    assert.is_true(ctx.srv:wait_up(OUTAGE + 10))
    local st = converge(OUTAGE + 10)
    -- client-go: the watch at the newer rv fails ("too large"), the relist at it too, then a
    -- list with no resourceVersion (a consistent read) gives the restored state.
    local ls = lists()
    assert.is_true(#ls >= 2)
    assert.same(tostring(last), ls[1].resourceVersion)
    assert.is_nil(ls[#ls].resourceVersion)
    assert.same(1, st.relists)
    assert.same(504, st.last_error_code)
    assert.matches("Too large resource version", st.last_error, 1, true)
    assert.same(saved.resourceVersion, st.resource_version)
    assert.is_true(ctx.hs[1].tombstones >= 1) -- born-after-backup vanished without a DELETED event
    assert.is_nil(ctx.inf:store():get("c/born-after-backup"))
    -- Writes after the restore reuse resourceVersions the informer saw before: still right.
    writes(6, 6)
    converge()
  end)

  it("410 on a watch: relist at the last rv; what vanished meanwhile comes as tombstones", function()
    scenario{ faults = expiring_watch(3) }
    expire_then_delete(function() writes(3, 7) end, 2)
    local st = converge()
    assert.same(1, st.relists)
    assert.same(410, st.last_error_code)
    assert.same("Expired", st.last_error_reason)
    assert.matches("error event: 410 Expired: too old resource version", st.last_error, 1, true)
    assert.same(2, ctx.hs[1].tombstones)
    local ls = lists()
    assert.same(2, #ls)
    assert.is_nil(ls[2].limit) -- relists at a known rv are unpaginated
  end)

  it("410 on a list continuation: one full list at the first page's rv", function()
    -- Continuation pages are the only lists without a resourceVersion (null: "absent").
    scenario{ informer = { page_size = 10 },
              faults = { { path = PODS, watch = false, query = { resourceVersion = cjson.null },
                           action = { status = 410, reason = "Expired" } } } }
    writes(6, 8)
    local st = converge()
    local ls = lists()
    assert.same(3, #ls)
    assert.same("0", ls[1].resourceVersion)
    assert.same("10", ls[1].limit)
    assert.is_not_nil(ls[2].continue)
    assert.is_nil(ls[3].continue)
    assert.is_nil(ls[3].limit)
    assert.same("0", ls[3].resourceVersion) -- client-go's pager: the rv the first page asked for
    assert.same(1, st.lists)
    assert.same(410, st.last_error_code)
  end)

  it("429 with Retry-After on a list and on a watch: waits as asked, no relist for the watch", function()
    scenario{ faults = { { path = PODS, watch = false, action = { status = 429, retry_after = 1 } },
                         { path = PODS, watch = true, action = { status = 429, retry_after = 1 } } } }
    writes(6, 9)
    local st = converge()
    local ls, ws = lists(), watches()
    assert.same(2, #ls)
    assert.is_true(ls[2].time - ls[1].time >= 0.9, "list retried after the Retry-After")
    assert.is_true(#ws >= 2)
    assert.is_true(ws[2].time - ws[1].time >= 0.9, "watch retried after the Retry-After")
    assert.same(ws[1].resourceVersion, ws[2].resourceVersion)
    assert.same(0, st.relists)
    assert.same(429, st.last_error_code)
    assert.same("TooManyRequests", st.last_error_reason)
    assert.same(2, st.errors)
  end)

  it("500 bursts on lists and watches: retried with backoff, relisting after each failed watch", function()
    scenario{ faults = { { path = PODS, watch = false, times = 5, action = { status = 500 } },
                         { path = PODS, watch = true, times = 4, action = { status = 500 } } } }
    assert.is_truthy(wait_status(10, function(st) return st.errors >= 9 end))
    writes(8, 10)
    local st = converge()
    assert.same(9, st.errors)
    assert.same(500, st.last_error_code)
    assert.same("InternalError", st.last_error_reason)
    assert.same(4, st.relists) -- client-go: a watch that cannot be opened means a relist
    assert.same(5 + 5, #lists())
  end)

  it("a stalled watch (no bytes) is reconnected after idle_timeout, no relist", function()
    scenario{ informer = { idle_timeout = 1 },
              faults = { { path = PODS, watch = true, after_events = 1,
                           action = { type = "stall", seconds = 30 } } } }
    local t0 = now()
    create("a", "s1")    -- the watch's first event: the stall starts once it is sent
    -- idle_timeout is "seconds without a byte": the new watch comes 1 s after the last byte
    -- (plus a backoff of 0.05-0.1 s), not when an averaged speed check gets to it.
    local ws = wait_watches(2, 5)
    assert.same(2, #ws, explain())
    local waited = ws[2].time - t0
    assert.is_true(waited >= 1.0 and waited < 2.0, ("reconnected after %.2f s"):format(waited))
    writes(6, 11)        -- made while the watch is stalled: the new watch replays them
    local st = converge(10)
    assert.same(0, st.relists)
    assert.is_true(st.watch_restarts >= 1)
    assert.matches("no data for 1 s", st.last_error, 1, true)
  end)

  it("a watch that sends not even headers is reconnected after idle_timeout", function()
    scenario{ informer = { idle_timeout = 1 },
              faults = { { path = PODS, watch = true, times = 1,
                           action = { type = "stall", seconds = 30 } } } }
    local ws = wait_watches(2, 5)
    assert.same(2, #ws, explain())
    local waited = ws[2].time - ws[1].time
    assert.is_true(waited >= 1.0 and waited < 2.0, ("reconnected after %.2f s"):format(waited))
    writes(4, 13)
    local st = converge(10)
    assert.same(0, st.relists)
    assert.matches("no data for 1 s (not even headers)", st.last_error, 1, true)
  end)

  it("repeated 403s: one warn line, one info line on recovery, never the token", function()
    local lines = {}
    kinformer.set_logger(function(level, msg) lines[#lines + 1] = { level = level, msg = msg } end)
    scenario{ client = function(srv) return { server = srv.url, token = "spec-secret-token-7" } end,
              faults = { { path = PODS, watch = false, times = 4,
                           action = { status = 403, reason = "Forbidden",
                                      message = "pods is forbidden: User \"x\" cannot list pods" } } } }
    writes(3, 14)
    local st = converge()
    assert.same(4, st.errors)
    local warns, infos = {}, {}
    for _, l in ipairs(lines) do
      assert.is_nil(l.msg:find("spec-secret-token-7", 1, true))
      if l.level == "warn" then warns[#warns + 1] = l.msg end
      if l.level == "info" then infos[#infos + 1] = l.msg end
    end
    assert.same(1, #warns, cjson.encode(lines))
    assert.same('list /api/v1/pods: 403 pods is forbidden: User "x" cannot list pods', warns[1])
    assert.same({ "list /api/v1/pods: recovered after 4 failures" }, infos)
  end)

  it("a malformed line: reported, relist, the cache stays right", function()
    scenario{ faults = { { path = PODS, watch = true, after_events = 2, action = "malformed_line" } } }
    writes(8, 12)
    local st = converge()
    assert.same(1, st.relists)
    assert.matches("bad event", st.last_error, 1, true)
  end)

  it("a 20 MB object: listed and watched; over max_object_bytes it is reported until it goes", function()
    local MB20 = 20 * 1024 * 1024
    scenario{ faults = expiring_watch(2) }
    ctx.srv:objects({ pod("a", "huge", MB20) }, "pods") -- a 20 MB ADDED event
    patch("a", "huge", "changed")                      -- a 20 MB MODIFIED event, then a 410
    assert.is_truthy(wait_status(10, function(st) return st.relists == 1 end)) -- a 20 MB list
    writes(4, 13)
    converge()
    local got = ctx.inf:store():get("a/huge")
    assert.same(MB20, #got.metadata.annotations.pad)
    assert.same("changed", got.metadata.labels.step)
    -- A second informer, limited to 1 MiB objects, cannot list it and says why.
    local small_client = assert(kinformer.client{ server = ctx.srv.url })
    local small = assert(small_client:informer{ resource = "pods", max_object_bytes = 1024 * 1024,
                                                backoff_initial = 0.05, backoff_max = 0.2 })
    assert(small:start())
    local t = now() + 10
    while (small:status().errors or 0) < 1 and now() < t do socket.sleep(0.02) end
    local ok, err = small:wait_for_sync(0)
    assert.is_nil(ok)
    assert.matches("list item is larger than max_object_bytes (1048576)", err, 1, true)
    local sst = small:status()
    assert.is_true(sst.errors >= 1)
    assert.is_false(sst.synced)
    assert.matches("list /api/v1/pods: bad response: .* list item is larger than max_object_bytes",
      sst.last_error)
    delete("a", "huge")
    assert(small:wait_for_sync(10))
    assert.is_true(fake.same_versions(fake.versions(small:store()), ctx.srv:versions("pods")))
    small:stop()
    local st = converge()
    assert.is_true(st.bytes > 4 * MB20) -- added, modified, listed, deleted
  end)

  it("out-of-order resourceVersions on a watch: reported, relist, no stale object", function()
    scenario{ faults = { { path = PODS, watch = true, after_events = 1, action = "out_of_order" } } }
    patch("a", "p3", "first")
    patch("a", "p3", "second")   -- held back by the server and sent after "third"
    patch("a", "p3", "third")
    -- client-go would apply "second" after "third" and keep it: an older version for good.
    assert.is_truthy(wait_status(5, function(st) return st.relists >= 1 or st.watch_events >= 3 end))
    local st = converge()
    assert.same(1, st.relists)
    assert.matches("watch /api/v1/pods: bad event: MODIFIED event for a/p3 at resourceVersion " ..
      "%d+ is older than the previous event's %d+ %(out of order%)", st.last_error)
  end)

  it("a duplicate event on a watch: dropped and reported, no extra notification, no relist", function()
    scenario{ faults = { { path = PODS, watch = true, after_events = 1, action = "duplicate_event" } } }
    patch("a", "p3", "first")
    patch("b", "p4", "second")   -- sent twice
    patch("a", "p3", "third")
    assert.is_truthy(wait_status(5, function(st) return st.watch_events >= 3 end))
    local st = converge()
    assert.same(0, st.relists)
    assert.same(3, ctx.hs[1].updates) -- one per change
    assert.same(1, st.errors)
    assert.matches("watch /api/v1/pods: MODIFIED event for b/p4 at resourceVersion %d+ repeats " ..
      "the previous event: ignored", st.last_error)
  end)

  it("401, then a rotated token: reported, retried with backoff, the re-read token file works", function()
    local old, new = "old-token-0123456789", "rotated-token-abcdefghijklmnop"
    local file = os.tmpname()
    local function write_token(t)
      local f = assert(io.open(file, "w"))
      f:write(t)
      f:close()
    end
    write_token(old)
    finally(function() os.remove(file) end)
    scenario{ args = { "--token", old }, headers = { Authorization = "Bearer " .. old },
              client = function(srv) return { server = srv.url, token_file = file } end,
              informer = { watch_timeout = 1 } }
    -- The server now accepts only the new token; the informer still has the old one.
    ctx.srv:control("POST", "/_fake/auth", { tokens = { new } })
    ctx.headers = { Authorization = "Bearer " .. new }
    writes(4, 15)
    -- Its watch ends (timeoutSeconds 1-2 s); the next requests get 401 over and over.
    local st = wait_status(10, function(s) return s.errors >= 3 end)
    assert.is_truthy(st)
    assert.same(401, st.last_error_code)
    assert.same("Unauthorized", st.last_error_reason)
    assert.matches("401 Unauthorized", st.last_error, 1, true)
    writes(4, 16)
    write_token(new) -- the rotation reaches the file (kubelet-style)
    st = converge(10)
    assert.is_true(st.relists >= 1)
    -- The request log: 401s (no accepted credential) until the file changed, then bearer.
    local auths = {}
    for _, q in ipairs(requests()) do auths[#auths + 1] = q.auth end
    local s = table.concat(auths, " ")
    assert.matches("^bearer.- none .-bearer$", s)
    -- No token ever shows in status().
    local text = cjson.encode(st)
    assert.is_nil(text:find(old, 1, true))
    assert.is_nil(text:find(new, 1, true))
  end)

  it("a handler that raises on every call: counted and logged, the other handler and the cache go on", function()
    local logged = {}
    kinformer.set_logger(function(level, msg) if level == "error" then logged[#logged + 1] = msg end end)
    scenario{ handlers = { { monotonic = true }, { monotonic = true, raise = true } },
              faults = expiring_watch(3) }
    expire_then_delete(function() writes(3, 17) end, 2)
    assert.is_truthy(wait_status(5, function(st) return st.relists == 1 end))
    writes(6, 18)
    local st = converge()
    local good, bad = ctx.hs[1], ctx.hs[2]
    local calls = bad.adds + bad.updates + bad.deletes
    assert.is_true(calls > 24)
    assert.same(calls, st.handler_errors)
    assert.same(calls, bad.reg:errors())
    assert.same(0, good.reg:errors())
    assert.same(calls, #logged)
    assert.matches("informer pods: handler #2 on_%a+ raised: .*handler raises on ", st.last_handler_error)
    -- It was still told everything, in order: the tombstones of the relist too.
    assert.same(2, good.tombstones)
    assert.same(2, bad.tombstones)
    assert.same(good.events, bad.events)
    assert.same(1, st.relists)
  end)

  it("no dispatch for " .. PAUSE .. " s while events pile up: memory bounded by what the queue holds, " ..
     "reported in status()", function()
    -- About 36 MB of events whatever PAUSE is (the default pause is short to keep the suite quick).
    local RATE, KEYS = 400, 40
    local PAD = math.max(3000, math.floor(36e6 / (RATE * PAUSE)))
    scenario{ pods = KEYS, pad = PAD }
    local count = math.floor(RATE * PAUSE)
    collectgarbage()
    collectgarbage()
    local rss0 = rss_kib()
    local events0 = ctx.inf:status().watch_events
    ctx.srv:modify("pods", count, { rate = RATE }) -- MODIFIED events over the 40 pods, paced
    -- Nobody dispatches. status() shows the queue growing meanwhile.
    local samples = {}
    local t_end = now() + PAUSE
    repeat
      socket.sleep(math.min(1, PAUSE / 4))
      samples[#samples + 1] = ctx.inf:status().queued_bytes
    until now() >= t_end
    local st = wait_status(30, function(s) return s.watch_events >= events0 + count end)
    assert.is_truthy(st, "events still arriving: " .. explain())
    collectgarbage()
    collectgarbage()
    local grown = (rss_kib() - rss0) * 1024
    assert.is_true(samples[#samples] > samples[1])
    assert.same(KEYS, st.queue_length)
    assert.same(count, st.queued_deltas) -- client-go keeps every delta: nothing coalesced
    assert.is_true(st.queued_bytes > count * PAD)
    assert.is_true(st.queued_bytes < count * (PAD + 2048))
    -- What the process grew by is what the queue holds, plus fixed buffers (the client's
    -- receive queue is bounded at 4 MiB).
    local bound = st.queued_bytes * 1.25 + 16 * 1024 * 1024
    assert.is_true(grown <= bound, ("RSS grew %.1f MiB, the queue holds %.1f MiB"):format(
      grown / 1048576, st.queued_bytes / 1048576))
    -- Dispatching again delivers every change, in order, and empties the queue.
    local done = converge(60)
    assert.same(count, ctx.hs[1].updates)
    assert.same(count, done.updates)
  end)
end)
