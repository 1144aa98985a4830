-- examples/controller.lua end to end: replicas run as separate processes (as a user would run
-- them: from /tmp, no LUA_PATH) against the fake API server, with short leader-election
-- durations (lease 3 s, renew deadline 2 s, retry period 0.5 s). What they write is read back
-- from the server (its objects and its request log, where basic-auth users tell the replicas
-- apart) and from their logfmt output.
local fake = require "support.fake_apiserver"
local proc = require "support.proc"
local socket = require "socket"
local cjson = require "cjson"

local quote, alive = proc.quote, proc.alive

local ROOT
do
  local p = assert(io.popen("cd " .. quote(KINFORMER_ROOT) .. " && pwd"))
  ROOT = p:read("l")
  p:close()
end

local LEASE, RENEW, RETRY = 3, 2, 0.5
local CLEAN_ENV = "env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 -u KUBECONFIG "
  .. "-u KINFORMER_SERVER -u POD_NAME"

-- ---- replicas ----

local Replica = {}
Replica.__index = Replica
local running = {} -- pid -> replica, killed when the Lua state closes (a crashed spec)

-- A basic-auth kubeconfig: the server's request log then names the replica behind each request.
local function kubeconfig(srv, user, password)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(([[
apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: "%s"}
contexts:
- name: fake
  context: {cluster: fake, user: %s, namespace: default}
current-context: fake
users:
- name: %s
  user: {username: %s, password: %s}
]]):format(srv.url, user, user, user, password))
  f:close()
  return path
end

-- start_replica(srv, identity[, { user =, password =, lua = }]) -> replica, its output in a
-- file. With a user it authenticates from a kubeconfig, else through KINFORMER_SERVER; lua is
-- the interpreter (default lua5.4). --seconds 60 is a safety net: every spec stops its
-- replicas long before.
local function start_replica(srv, identity, opts)
  opts = opts or {}
  local r = setmetatable({ identity = identity, log = os.tmpname() }, Replica)
  local env
  if opts.user then
    r.kubeconfig = kubeconfig(srv, opts.user, opts.password)
    env = "KUBECONFIG=" .. quote(r.kubeconfig)
  else
    env = "KINFORMER_SERVER=" .. quote(srv.url)
  end
  -- The shell prints its pid and exec's the example: the pid is the example's, and it is our
  -- child, so close() reaps it and returns its exit status.
  r.proc = assert(io.popen(("echo $$; cd /tmp && exec %s %s %s %s --identity %s "
    .. "--lease-duration %s --renew-deadline %s --retry-period %s --seconds 60 >%s 2>&1")
    :format(CLEAN_ENV, env, opts.lua or "lua5.4", quote(ROOT .. "/examples/controller.lua"),
            quote(identity), LEASE,
            RENEW, RETRY, quote(r.log)), "r"))
  r.pid = assert(tonumber(r.proc:read("l")))
  running[r.pid] = r
  return r
end

local function parse(line) -- a logfmt line -> { key = value }, values unquoted
  local t, i = {}, 1
  while i <= #line do
    local k, j = line:match("^([%w_]+)=()", i)
    if not k then break end
    if line:sub(j, j) == '"' then
      local v, e = {}, j + 1
      while e <= #line and line:sub(e, e) ~= '"' do
        if line:sub(e, e) == "\\" then e = e + 1 end
        v[#v + 1] = line:sub(e, e)
        e = e + 1
      end
      t[k], i = table.concat(v), e + 2
    else
      local v, e = line:match("^(%S*)()", j)
      t[k], i = v, e + 1
    end
  end
  return t
end

--- replica:events([event]) -> the parsed lines of its stdout (only those of one event)
function Replica:events(event)
  local out = {}
  local f = io.open(self.log)
  if not f then return out end
  for line in f:lines() do
    if line:match("^time=") then
      local e = parse(line)
      if not event or e.event == event then out[#out + 1] = e end
    end
  end
  f:close()
  return out
end

function Replica:output()
  local f = io.open(self.log)
  local s = f and f:read("a") or ""
  if f then f:close() end
  return s
end

-- Polls fn() every 50 ms until it returns a true value or timeout seconds passed.
local function wait_until(timeout, fn)
  local deadline = socket.gettime() + timeout
  while true do
    local v = fn()
    if v or socket.gettime() > deadline then return v end
    socket.sleep(0.05)
  end
end

--- replica:wait_for(event[, fields], timeout) -> the first such event (fields must match), or nil
function Replica:wait_for(event, fields, timeout)
  return wait_until(timeout or 10, function()
    for _, e in ipairs(self:events(event)) do
      local ok = true
      for k, v in pairs(fields or {}) do ok = ok and e[k] == v end
      if ok then return e end
    end
  end)
end

--- replica:signal(sig) -> exit status: sends sig, waits for the exit (at most 10 s, then KILL)
function Replica:signal(sig)
  if self.status then return self.status end
  os.execute("kill -" .. sig .. " " .. self.pid .. " 2>/dev/null")
  local deadline = socket.gettime() + 10
  while alive(self.pid) and socket.gettime() < deadline do socket.sleep(0.02) end
  if alive(self.pid) then os.execute("kill -KILL " .. self.pid .. " 2>/dev/null") end
  local _, how, code = self.proc:close()
  running[self.pid] = nil
  self.status = how == "exit" and code or -(code or 0) -- a signal death: minus its number
  return self.status
end

function Replica:cleanup()
  self:signal("KILL")
  os.remove(self.log)
  if self.kubeconfig then os.remove(self.kubeconfig) end
end

Replica._sentinel = proc.at_exit(function()
  for _, r in pairs(running) do pcall(Replica.cleanup, r) end
end)

-- ---- what the ConfigMaps should say, computed from the server's pods ----

local function is_ready(pod)
  for _, c in ipairs(pod.status and pod.status.conditions or {}) do
    if c.type == "Ready" then return c.status == "True" end
  end
  return false
end

-- { ns = { data = { app = { sorted ready pod names } }, status = "apps=A ready=R pods=P" } }
local function expected(srv)
  local want = {}
  for _, pod in ipairs(srv:state("pods").items) do
    local app = pod.metadata.labels and pod.metadata.labels.app
    if app then
      local w = want[pod.metadata.namespace] or { data = {}, pods = 0, ready = 0, apps = 0 }
      want[pod.metadata.namespace] = w
      if not w.data[app] then w.data[app], w.apps = {}, w.apps + 1 end
      w.pods = w.pods + 1
      if is_ready(pod) then
        table.insert(w.data[app], pod.metadata.name)
        w.ready = w.ready + 1
      end
    end
  end
  for _, w in pairs(want) do
    for _, list in pairs(w.data) do table.sort(list) end
    w.status = ("apps=%d ready=%d pods=%d"):format(w.apps, w.ready, w.pods)
    w.pods, w.ready, w.apps = nil, nil, nil
  end
  return want
end

-- The managed ConfigMaps on the server, in the same shape (data values decoded from JSON).
local function actual(srv)
  local have = {}
  for _, cm in ipairs(srv:state("configmaps").items) do
    local md = cm.metadata
    if md.name == "ready-pods" and (md.labels or {})["app.kubernetes.io/managed-by"]
        == "kinformer-ready-pods" then
      local data = {}
      for app, v in pairs(cm.data or {}) do data[app] = cjson.decode(v) end
      have[md.namespace] = { data = data, status = (md.annotations or {})["ready-pods.kinformer.io/status"] }
    end
  end
  return have
end

local function same(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

-- Waits (at most timeout s) until the ConfigMaps say what the pods say; asserts they do.
local function assert_converges(srv, timeout, msg)
  if not wait_until(timeout, function() return same(expected(srv), actual(srv)) end) then
    assert.same(expected(srv), actual(srv), msg)
  end
end

-- Writes to ConfigMaps in the server's request log: { { method, path, user, time } }
local function cm_writes(srv)
  local out = {}
  for _, r in ipairs(srv:requests()) do
    if r.path:find("/configmaps", 1, true) and r.method ~= "GET" then out[#out + 1] = r end
  end
  return out
end

-- Spec-side changes go through the control endpoint (no auth, not in the request log).
local function set_ready(srv, ns, name, ready)
  for _, pod in ipairs(srv:state("pods", ns).items) do
    if pod.metadata.name == name then
      local conds = {}
      for _, c in ipairs(pod.status.conditions or {}) do
        if c.type ~= "Ready" then conds[#conds + 1] = c end
      end
      conds[#conds + 1] = { type = "Ready", status = ready and "True" or "False" }
      pod.status.conditions = conds
      srv:objects({ pod }, "pods")
      return pod
    end
  end
  error("no pod " .. ns .. "/" .. name)
end

local function first_pod(srv, ns) return srv:state("pods", ns).items[1] end

local function new_pod(ns, name, app, ready)
  return { apiVersion = "v1", kind = "Pod",
           metadata = { namespace = ns, name = name, labels = { app = app } },
           spec = { containers = { { name = "c", image = "busybox" } } },
           status = { phase = "Running",
                      conditions = { { type = "Ready", status = ready and "True" or "False" } } } }
end

local function lease(srv)
  for _, l in ipairs(srv:state("leases", "default").items) do
    if l.metadata.name == "kinformer-ready-pods" then return l end
  end
end

-- A sample cluster and one replica "solo", leading, the ConfigMaps converged; both stopped when
-- the test ends (as is a replica the test puts in held.a instead).
local function start_solo()
  local srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
  local r = {}
  finally(function()
    if r.a then r.a:cleanup() end
    srv:stop()
  end)
  r.a = start_replica(srv, "solo")
  assert.truthy(r.a:wait_for("leading"), r.a:output())
  assert_converges(srv, 10, r.a:output())
  return srv, r.a, r
end

-- A sample cluster (each replica with its own basic-auth user) and two replicas: "a" leading,
-- "b" following it, the ConfigMaps converged. All three are stopped when the test ends.
local function start_two_replicas()
  local srv = fake.start{ args = { "--sample-cluster", "--basic-auth", "replica-a:pw-a",
    "--basic-auth", "replica-b:pw-b" }, quiet = true }
  local r = {}
  finally(function()
    if r.a then r.a:cleanup() end
    if r.b then r.b:cleanup() end
    srv:stop()
  end)
  r.a = start_replica(srv, "a", { user = "replica-a", password = "pw-a" })
  assert.truthy(r.a:wait_for("leading"), r.a:output())
  r.b = start_replica(srv, "b", { user = "replica-b", password = "pw-b" })
  assert.truthy(r.b:wait_for("leader", { leader = "a" }), r.b:output())
  assert_converges(srv, 10, r.a:output())
  return srv, r.a, r.b
end

describe("examples/controller.lua", function()
  it("converges after churn, repairs edits, writes nothing when nothing changed, exits on SIGTERM",
    function()
    local srv, a, held = start_solo()

    -- Churn (readiness flips, relabels, replacements), plus changes of our own: a new
    -- namespace with an app, the managed ConfigMap of shop edited and the one of payments deleted
    -- by someone else, and every pod of monitoring gone (its ConfigMap must go too).
    srv:churn(40)
    socket.sleep(2)
    srv:objects({ new_pod("extra", "web-1", "web", true), new_pod("extra", "web-2", "web", false),
                  new_pod("extra", "job-1", "batch", false) }, "pods")
    local shop = srv:state("configmaps", "shop").items[1]
    shop.data = { frontend = '["someone-else"]' }
    srv:objects({ shop }, "configmaps")
    assert.equals(200, (srv:request("DELETE", "/api/v1/namespaces/payments/configmaps/ready-pods")))
    socket.sleep(1)
    srv:churn(0)
    socket.sleep(0.1) -- a churn step under way ends
    for _, pod in ipairs(srv:state("pods", "monitoring").items) do
      assert.equals(200, (srv:request("DELETE", "/api/v1/namespaces/monitoring/pods/"
        .. pod.metadata.name)))
    end
    assert_converges(srv, 10, a:output())
    local want = expected(srv)
    assert.is_nil(want.monitoring)
    assert.same({ web = { "web-1" }, batch = {} }, want.extra.data)
    assert.is_true(#a:events("write") >= 5, a:output())
    local ops = {}
    for _, e in ipairs(a:events("write")) do ops[e.op .. " " .. e.namespace] = true end
    assert.truthy(ops["create extra"], a:output())
    assert.truthy(ops["delete monitoring"], a:output())
    assert.truthy(ops["create payments"], a:output()) -- recreated after the delete

    -- Converged: events that change nothing it publishes (a foreign annotation on a managed
    -- ConfigMap, a pod label other than app) make no write: reconciles compare with the cache.
    srv:clear_requests()
    shop = srv:state("configmaps", "shop").items[1]
    shop.metadata.annotations.note = "added by someone else"
    srv:objects({ shop }, "configmaps")
    local pod = first_pod(srv, "payments")
    pod.metadata.labels.track = "canary-" .. os.time()
    srv:objects({ pod }, "pods")
    socket.sleep(1.5)
    assert.same({}, cm_writes(srv))

    -- SIGTERM: exit 0, the lease released for a successor.
    assert.equals(0, a:signal("TERM"))
    local events = a:events()
    assert.equals("stopped", events[#events].event, a:output())
    assert.equals("SIGTERM", events[#events].reason)
    assert.equals("0", events[#events].dropped)
    assert.truthy(a:wait_for("released", nil, 0))
    assert.equals("", lease(srv).spec.holderIdentity)

    -- Restarted with nothing changed meanwhile: it leads at once (the lease was released) and
    -- finds nothing to write.
    srv:clear_requests()
    a:cleanup()
    a = start_replica(srv, "solo-2")
    held.a = a
    assert.truthy(a:wait_for("leading"), a:output())
    socket.sleep(1)
    assert.same({}, cm_writes(srv))
    assert.same({}, a:events("write"))
  end)

  it("runs as two replicas: only the leader writes; SIGTERM hands over at the next attempt",
    function()
    local srv, a, b = start_two_replicas()

    srv:churn(40)
    socket.sleep(2.5)
    srv:churn(0)
    assert_converges(srv, 10, a:output())
    local writes = cm_writes(srv)
    assert.is_true(#writes >= 4, "too few writes to tell")
    for _, w in ipairs(writes) do assert.equals("replica-a", w.user, w.method .. " " .. w.path) end
    assert.same({}, b:events("write"))
    assert.is_nil(b:events("leading")[1])

    -- a stops cleanly: it releases the lease, so b need not wait for it to expire.
    local t_stop = socket.gettime()
    assert.equals(0, a:signal("TERM"))
    assert.truthy(b:wait_for("leading", nil, LEASE + 2 * RETRY), b:output())
    assert.is_true(socket.gettime() - t_stop < LEASE,
      "b took over only after the lease would have expired: the lease was not released")
    srv:clear_requests()
    local pod = first_pod(srv, "shop")
    set_ready(srv, "shop", pod.metadata.name, not is_ready(pod))
    srv:objects({ new_pod("extra", "web-1", "web", true) }, "pods")
    assert_converges(srv, 10, b:output())
    writes = cm_writes(srv)
    assert.is_true(#writes >= 2)
    for _, w in ipairs(writes) do assert.equals("replica-b", w.user, w.method .. " " .. w.path) end

    assert.equals(0, b:signal("TERM"))
    local last = b:events()[#b:events()]
    assert.equals("stopped", last.event)
    -- while following, b queued work (the initial list, the churn) without reconciling it:
    -- the keys were waiting when it started leading
    assert.is_true(tonumber(b:events("leading")[1].queued) > 0, b:output())
  end)

  it("after kill -9 of the leader the other replica takes over once the lease expired", function()
    local srv, a, b = start_two_replicas()
    socket.sleep(RETRY * 2) -- b has seen a renew the lease at least once

    local t_kill = socket.gettime()
    a:signal("KILL")
    -- Work arrives while nobody leads: b (a follower) drops it, and must pick it up as leader.
    local pod = first_pod(srv, "payments")
    set_ready(srv, "payments", pod.metadata.name, not is_ready(pod))
    assert.truthy(b:wait_for("leading", nil, LEASE + 4 * RETRY + 2), b:output())
    local took = socket.gettime() - t_kill
    -- Bounds: a renewed at most retry_period before the kill, and b waits lease_duration from
    -- when it saw that renewal: not before lease - retry. b sees the renewal at its next attempt
    -- (retry_period + up to 20% jitter later) and tries again the moment that expires:
    -- lease + 1.2 * retry after the kill at worst. The margins (0.25 s below,
    -- 1 s above) cover the spec's 50 ms polling, process scheduling on a loaded machine and the
    -- requests' own time.
    assert.is_true(took >= LEASE - RETRY - 0.25, ("took over after %.2f s"):format(took))
    assert.is_true(took <= LEASE + 1.2 * RETRY + 1, ("took over after %.2f s"):format(took))
    assert.equals("b", lease(srv).spec.holderIdentity)
    assert.equals(1, lease(srv).spec.leaseTransitions)

    assert_converges(srv, 10, b:output())
    for _, w in ipairs(cm_writes(srv)) do
      assert.equals(w.time < t_kill and "replica-a" or "replica-b", w.user, w.method .. " " .. w.path)
    end
    local found
    for _, e in ipairs(b:events("write")) do found = found or e.namespace == "payments" end
    assert.truthy(found, b:output())
  end)

  it("retries a 409 Conflict through the queue", function()
    local srv, a = start_solo()

    srv:fault{ method = "PUT", path = "^/api/v1/namespaces/shop/configmaps/ready-pods$",
               action = { status = 409, message = "the object has been modified" } }
    srv:clear_requests()
    local pod = first_pod(srv, "shop")
    set_ready(srv, "shop", pod.metadata.name, not is_ready(pod))
    local conflict = a:wait_for("error", { namespace = "shop" })
    assert.truthy(conflict, a:output())
    assert.matches("^409 Conflict: ", conflict.error)
    assert.same({}, srv:control("GET", "/_fake/faults"))
    assert_converges(srv, 10, a:output())
    -- the same update twice: the conflict, then the retry that went through
    local puts = 0
    for _, w in ipairs(cm_writes(srv)) do
      if w.method == "PUT" and w.path == "/api/v1/namespaces/shop/configmaps/ready-pods" then
        puts = puts + 1
      end
    end
    assert.equals(2, puts)
    local writes = a:events("write")
    assert.equals("shop", writes[#writes].namespace)
    assert.equals("update", writes[#writes].op)
  end)

  it("loses no item through an outage of ConfigMap writes (retries with backoff)", function()
    local srv, a = start_solo()

    -- Every write fails for 3 s, each verb its own way; meanwhile one change per verb. Nothing
    -- else happens afterwards: only the queue's retries can bring the ConfigMaps up to date.
    srv:fault{
      { method = "PUT", path = "/configmaps/", times = -1, action = { status = 503 } },
      { method = "POST", path = "/configmaps$", times = -1, action = "reset" },
      { method = "DELETE", path = "/configmaps/", times = -1, action = { status = 500 } },
    }
    local pod = first_pod(srv, "shop")
    set_ready(srv, "shop", pod.metadata.name, not is_ready(pod))             -- update
    srv:objects({ new_pod("extra", "web-1", "web", true) }, "pods")            -- create
    for _, p in ipairs(srv:state("pods", "monitoring").items) do               -- delete
      assert.equals(200, (srv:request("DELETE", "/api/v1/namespaces/monitoring/pods/"
        .. p.metadata.name)))
    end
    socket.sleep(3)
    local failed = {}
    for _, e in ipairs(a:events("error")) do failed[e.namespace] = e.error end
    assert.matches("^503 ServiceUnavailable", failed.shop or "", 1, false, a:output())
    assert.matches("^Transport: ", failed.extra or "", 1, false, a:output())
    assert.matches("^500 InternalError", failed.monitoring or "", 1, false, a:output())
    srv:clear_faults()
    assert_converges(srv, 10, a:output())
    assert.is_nil(a:events("following")[1]) -- it kept leading: the retries did it
  end)

  it("a full outage longer than renew_deadline: steps down, leads again, rechecks everything",
    function()
    local srv, a = start_solo()

    -- Every request but the open watches fails (the Lease too): after renew_deadline the
    -- leader stops leading and drops its items. Changes made meanwhile are found when it leads
    -- again, because a new leader enqueues every namespace.
    srv:fault{ watch = false, times = -1, action = "reset" }
    local pod = first_pod(srv, "payments")
    set_ready(srv, "payments", pod.metadata.name, not is_ready(pod))
    assert.truthy(a:wait_for("following", nil, RENEW + 2 * RETRY + 2), a:output())
    srv:objects({ new_pod("extra", "web-1", "web", true) }, "pods")
    socket.sleep(0.5)
    srv:clear_faults()
    assert.truthy(wait_until(LEASE + 4 * RETRY, function() return #a:events("leading") >= 2 end),
      a:output())
    assert_converges(srv, 10, a:output())
  end)

  it("does not take the lease before its caches synced", function()
    -- The ConfigMaps list stalls for 2 s: a replica that led with half a cache would delete or
    -- rewrite ConfigMaps of namespaces it has not seen. The lease is free all along.
    local srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
    local a
    finally(function()
      if a then a:cleanup() end
      srv:stop()
    end)
    srv:fault{ method = "GET", path = "/configmaps$", watch = false,
               action = { type = "stall", seconds = 2 } }
    a = start_replica(srv, "slow-sync")
    -- Wait until the stalled list was asked for, then 1 s more (two retry periods).
    assert.truthy(wait_until(10, function()
      for _, q in ipairs(srv:requests()) do
        if q.path:match("/configmaps$") and q.query.watch == nil then return true end
      end
    end), a:output())
    socket.sleep(2 * RETRY)
    assert.is_nil(lease(srv), a:output())
    assert.is_nil(a:events("leading")[1], a:output())
    -- Once synced it leads, and the log says so in that order.
    assert.truthy(a:wait_for("leading"), a:output())
    local order = {}
    for i, e in ipairs(a:events()) do order[e.event] = order[e.event] or i end
    assert.truthy(order.started and order.started < order.leading, a:output())
    assert_converges(srv, 10, a:output())
  end)

  it("runs under LuaJIT too", function()
    local missing = proc.luajit_missing(ROOT)
    if missing then
      pending(missing)
      return
    end
    local srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
    local a
    finally(function()
      if a then a:cleanup() end
      srv:stop()
    end)
    a = start_replica(srv, "jit", { lua = "luajit" })
    assert.truthy(a:wait_for("leading"), a:output())
    assert_converges(srv, 10, a:output())
    assert.equals(0, a:signal("TERM"))
    assert.equals("SIGTERM", a:events("stopped")[1].reason, a:output())
  end)

  it("refuses unknown arguments", function()
    local p = io.popen(("cd /tmp && %s lua5.4 %s --bogus 1 2>&1; echo \"exit=$?\""):format(
      CLEAN_ENV, quote(ROOT .. "/examples/controller.lua")))
    local out = p:read("a")
    p:close()
    assert.matches("controller: unknown argument %-%-bogus", out)
    assert.matches("exit=2", out)
  end)
end)
