-- A manager's leadership when the API server is slow: renewal goes on while a reconcile's call
-- stalls, a replica that lost its lease writes nothing more (its call in flight is cut), health
-- answers meanwhile, and SIGTERM during a stalled call exits within the documented bound with
-- the Lease released. Replicas are child processes (spec/support/fenced_child.lua), each with
-- its own user, so the server's request log says who wrote what and when.
local kinformer = require "kinformer"
local fake = require "support.fake_apiserver"
local replica = require "support.replica"
local http = require "socket.http"
local socket = require "socket"

local srv, client
local new_ns = require("support.drive").namespaces("fence-")
local children = {}

local function start(id, ns)
  local c = replica.start("spec/support/fenced_child.lua", { srv.url, id, "t-" .. id, ns })
  children[#children + 1] = c
  return c
end

-- GET http://ADDRESS/healthz of a child -> status code, seconds it took
local function healthz(c)
  local addr = c:output():match("metrics (%S+)")
  assert(addr, c:output())
  local t0 = socket.gettime()
  http.TIMEOUT = 2
  local _, code = http.request("http://" .. addr .. "/healthz")
  return code, socket.gettime() - t0
end

local function lease_holder(ns)
  local code, lease = srv:request("GET", "/apis/coordination.k8s.io/v1/namespaces/" .. ns
    .. "/leases/fence-spec", nil, { Authorization = "Bearer admin" })
  assert.equals(200, code)
  return lease.spec.holderIdentity
end

local WRITES = { POST = true, PUT = true, PATCH = true, DELETE = true }

-- The writes of the request log in ns, but the Lease's (how replicas compete for it).
local function writes(ns)
  local out = {}
  for _, r in ipairs(srv:requests()) do
    if WRITES[r.method] and r.path:find("/namespaces/" .. ns .. "/", 1, true)
        and not r.path:find("/leases/", 1, true) then
      out[#out + 1] = r
    end
  end
  return out
end

describe("kinformer.manager fencing", function()
  setup(function()
    srv = fake.start{ quiet = true, args = { "--token", "admin", "--user-token", "a=t-a",
                                             "--user-token", "b=t-b" } }
    client = assert(kinformer.client{ server = srv.url, token = "admin" })
  end)
  teardown(function() if srv then srv:stop() end end)
  after_each(function()
    for _, c in ipairs(children) do c:close() end
    children = {}
    srv:clear_faults()
    srv:control("POST", "/_fake/authz", { deny = {} })
  end)

  it("keeps renewing while a reconcile's PATCH stalls past the lease: no takeover, health " ..
     "answers", function()
    local ns = new_ns()
    assert(client:create("configmaps", { metadata = { name = "c1", namespace = ns } }))
    local a = start("a", ns)
    assert.truthy(a:wait_for("leading"), a:output())
    srv:fault{ method = "PATCH", path = "/configmaps/c1$", action = { type = "stall", seconds = 6 } }
    local b = start("b", ns)
    assert.truthy(b:wait_for("metrics"), b:output())
    socket.sleep(1)
    local code, took = healthz(a)
    assert.equals(200, code)
    assert.is_true(took < 1, "healthz took " .. took .. " s")
    socket.sleep(3.5) -- past lease_duration (3 s) since the stall began
    assert.equals("a", lease_holder(ns))
    assert.is_falsy(b:output():find("leading"), b:output())
    assert.is_falsy(a:output():find("stopped leading"), a:output())
    for _, r in ipairs(writes(ns)) do assert.are_not.equals("b", r.user) end
  end)

  it("a replica that lost its lease cancels its stalled write and writes nothing after the " ..
     "new leader's first write", function()
    local ns = new_ns()
    assert(client:create("configmaps", { metadata = { name = "c1", namespace = ns } }))
    local a = start("a", ns)
    assert.truthy(a:wait_for("leading"), a:output())
    socket.sleep(0.5)
    -- a's next PATCH stalls 20 s, and from now on a cannot renew its lease
    srv:fault{ method = "PATCH", path = "/configmaps/c1$", action = { type = "stall", seconds = 20 } }
    srv:control("POST", "/_fake/authz", { deny = { { user = "a", verb = "update",
                                                     resource = "leases" } } })
    local b = start("b", ns)
    socket.sleep(1)
    local code = healthz(a)
    assert.equals(200, code) -- while its write stalls
    assert.truthy(b:wait_for("leading", 10), b:output())
    assert.truthy(a:wait_for("stopped leading", 1), a:output())
    socket.sleep(1.5) -- b writes; a must not
    local first_b
    for _, r in ipairs(writes(ns)) do
      if r.user == "b" then
        first_b = first_b or r.time
      end
    end
    assert.truthy(first_b, "b wrote nothing")
    local a_writes = 0
    for _, r in ipairs(writes(ns)) do
      if r.user == "a" then
        a_writes = a_writes + 1
        assert.is_true(r.time < first_b, ("a wrote %s %s after b's first write"):format(
          r.method, r.path))
      end
    end
    assert.is_true(a_writes > 0)
    -- the stalled PATCH was cut, never applied: the object carries b's writes only
    local cm = assert(client:get("configmaps", ns .. "/c1"))
    assert.matches("^b%-", cm.metadata.annotations["fence.example.com/by"])
    assert.equals(0, a:signal("TERM"))
    assert.matches("reason SIGTERM", a:output())
  end)

  it("SIGTERM during a stalled call: the call is abandoned, the Lease released, the process " ..
     "gone within grace_period + 2 x max(1, retry_period)", function()
    local ns = new_ns()
    assert(client:create("configmaps", { metadata = { name = "c1", namespace = ns } }))
    local a = start("a", ns)
    assert.truthy(a:wait_for("leading"), a:output())
    srv:fault{ method = "PATCH", path = "/configmaps/c1$", times = -1,
               action = { type = "stall", seconds = 60 } }
    socket.sleep(1)
    assert.equals(200, (healthz(a)))
    local t0 = socket.gettime()
    assert.equals(0, a:signal("TERM"))
    local took = socket.gettime() - t0
    assert.is_true(took < 7, "exit took " .. took .. " s")
    assert.matches("reason SIGTERM", a:output())
    assert.equals("", lease_holder(ns))
  end)
end)
