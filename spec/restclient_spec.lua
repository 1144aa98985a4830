-- The REST client's flow control and what every request carries, against the fake API server:
-- client-side throttling (qps / burst) on a fake clock and in real time, retries after a 429
-- or 5xx with Retry-After, Warning headers logged once per text and counted (REST calls and an
-- informer's list and watch), and impersonation headers sent on every request and enforced.
local kinformer = require "kinformer"
local clock = require "kinformer.clock"
local core = require "kinformer.core"
local fake = require "support.fake_apiserver"

local ADMIN, PLAIN = "admin-token-1", "plain-token-2"

local function cm(name, ns)
  return { apiVersion = "v1", kind = "ConfigMap", metadata = { name = name, namespace = ns },
           data = { a = "1" } }
end

-- Replaces kinformer.clock with a fake one for fn's duration: sleeps are recorded and move the
-- fake time on at once.
local function with_fake_clock(fn)
  local t, sleeps = 1000, {}
  clock.now = function() return t end
  clock.sleep = function(d)
    sleeps[#sleeps + 1] = d
    t = t + d
  end
  local ok, err = pcall(fn, sleeps)
  clock.now, clock.sleep = core.now, core.sleep
  if not ok then error(err, 0) end
end

-- Captures log lines for fn's duration.
local function with_log(fn)
  local lines = {}
  kinformer.set_logger(function(level, msg) lines[#lines + 1] = level .. " " .. msg end, "debug")
  local ok, err = pcall(fn, lines)
  kinformer.set_logger(nil, "warn")
  if not ok then error(err, 0) end
end

local function count(lines, pattern)
  local n = 0
  for _, l in ipairs(lines) do if l:find(pattern, 1, true) then n = n + 1 end end
  return n
end

describe("REST client flow control, warnings and impersonation", function()
  local srv

  setup(function()
    srv = fake.start{ quiet = true, args = {
      "--user-token", "admin=" .. ADMIN, "--user-token", "plain=" .. PLAIN,
      "--impersonator", "admin", "--deny", '{"user": "viewer", "verb": "create"}',
      "--resource", "example.com/v1beta1/widgets/Widget", "--deprecated", "example.com/v1beta1" } }
  end)

  teardown(function() srv:stop() end)

  before_each(function()
    srv:clear_faults()
    srv:clear_requests()
    srv:control("DELETE", "/_fake/warnings")
  end)

  local function client(opts)
    opts = opts or {}
    opts.server, opts.token = srv.url, opts.token or ADMIN
    return assert(kinformer.client(opts))
  end

  describe("throttling", function()
    it("has no client-side limit by default (controller-runtime's default since v0.21)", function()
      local st = client():status()
      assert.equal(-1, st.qps)
      assert.equal(0, st.burst)
      local c = client{ qps = 20 }
      assert.equal(30, c:status().burst) -- burst 1.5 x qps when only qps is set
      assert.equal(10, st.max_retries)
      assert.equal(0, st.requests)
    end)

    it("lets a burst through, then spaces requests 1/qps apart (fake clock)", function()
      with_fake_clock(function(sleeps)
        local c = client{ qps = 5, burst = 2 }
        for _ = 1, 6 do
          local _, err = c:get("configmaps", "default/none")
          assert.equal(404, err.code)
        end
        assert.equal(4, #sleeps) -- the first two took the burst
        for _, d in ipairs(sleeps) do assert.near(0.2, d, 1e-9) end
        local st = c:status()
        assert.equal(6, st.requests)
        assert.equal(4, st.throttled)
        assert.near(0.8, st.throttle_wait_seconds, 1e-9)
        assert.equal(6, #srv:requests_to("GET", "/configmaps/none$"))
      end)
    end)

    it("waits in real time, and not at all with a negative qps", function()
      local c = client{ qps = 50, burst = 1 }
      local t0 = kinformer.now()
      for _ = 1, 11 do c:get("configmaps", "default/none") end
      local took = kinformer.now() - t0
      assert.is_true(took >= 0.15, "10 waits of 20 ms took " .. took .. " s")
      local st = c:status()
      assert.equal(10, st.throttled)
      assert.is_true(st.throttle_wait_seconds >= 0.15)

      local free = client{ qps = -1 }
      for _ = 1, 40 do free:get("configmaps", "default/none") end
      assert.equal(0, free:status().throttled)
      assert.equal(40, free:status().requests)
    end)

    it("refuses bad values at the caller's line", function()
      assert.has_error(function() client{ burst = 1.5 } end,
                       "bad argument #1 to 'client' (option 'burst' must be a whole number >= 0)")
      assert.has_error(function() client{ qps = 0 / 0 } end,
                       "bad argument #1 to 'client' (option 'qps' must be a finite number)")
      assert.has_error(function() client{ max_retries = -1 } end,
                       "bad argument #1 to 'client' (option 'max_retries' must be a whole number >= 0)")
      assert.has_error(function() client{ qps = "fast" } end,
                       "bad argument #1 to 'client' (option 'qps' must be a number, got string)")
      local c = client()
      assert.has_error(function() c:get("configmaps", "default/x", { timeout = "5" }) end,
                       "bad argument #3 to 'get' (option 'timeout' must be a number >= 0)")
    end)
  end)

  describe("Retry-After", function()
    it("sends a GET again after the server's delay, through the throttle", function()
      with_fake_clock(function(sleeps)
        local c = client{ qps = 0.25, burst = 1 } -- a token every 4 s
        assert(c:create("configmaps", cm("r1", "default"))) -- takes the only token
        srv:clear_requests()
        srv:fault{ path = "/configmaps/r1$", times = 2, action = { status = 429, retry_after = 2 } }
        local got = assert(c:get("configmaps", "default/r1"))
        assert.equal("r1", got.metadata.name)
        -- throttle 4 s, Retry-After 2 s, throttle the rest of the 4 s (2), Retry-After, throttle
        assert.same({ 4, 2, 2, 2, 2 }, sleeps)
        assert.equal(3, #srv:requests_to("GET", "/configmaps/r1$")) -- two 429s, then the answer
        local st = c:status()
        assert.equal(2, st.retries)
        assert.equal(4, st.retry_wait_seconds)
        assert.equal(3, st.throttled)
        assert.equal(8, st.throttle_wait_seconds)
        assert.equal(4, st.requests) -- the create, then three GETs
      end)
    end)

    it("retries a write after a 503 with Retry-After, as client-go does for any verb", function()
      with_fake_clock(function(sleeps)
        local c = client()
        srv:fault{ method = "POST", path = "/configmaps$", action = { status = 503, retry_after = 1 } }
        local created = assert(c:create("configmaps", cm("r503", "default")))
        assert.equal("r503", created.metadata.name)
        assert.equal(1, #sleeps)
        assert.equal(2, #srv:requests_to("POST", "/configmaps$"))
      end)
    end)

    it("gives up after max_retries, and leaves long delays and plain errors to the caller", function()
      with_fake_clock(function(sleeps)
        local c = client{ max_retries = 2 }
        srv:fault{ path = "/configmaps/busy$", times = -1, action = { status = 429, retry_after = 1 } }
        local res, err = c:get("configmaps", "default/busy")
        assert.is_nil(res)
        assert.equal(429, err.code)
        assert.equal(2, err.retries)
        assert.equal(1, err.retry_after)
        assert.equal(3, #srv:requests_to("GET", "/configmaps/busy$"))
        srv:clear_faults()
        srv:clear_requests()

        srv:fault{ path = "/configmaps/later$", action = { status = 429, retry_after = 30 } }
        _, err = c:get("configmaps", "default/later")
        assert.equal(30, err.retry_after) -- above the 10 s cap: for the work queue
        assert.equal(0, err.retries)
        srv:fault{ path = "/configmaps/broken$", action = { status = 500 } }
        _, err = c:get("configmaps", "default/broken")
        assert.equal(500, err.code) -- no Retry-After: no retry
        assert.equal(1, #srv:requests_to("GET", "/configmaps/later$"))
        assert.equal(1, #srv:requests_to("GET", "/configmaps/broken$"))

        -- The call's timeout bounds its retries: 2 s leave room for one wait of 1 s.
        srv:fault{ path = "/configmaps/short$", times = -1, action = { status = 429, retry_after = 1 } }
        _, err = c:get("configmaps", "default/short", { timeout = 2 })
        assert.equal(429, err.code)
        assert.equal(1, err.retries)
        assert.equal(2, #srv:requests_to("GET", "/configmaps/short$"))
        srv:clear_faults()

        local never = client{ max_retries = 0 }
        srv:fault{ path = "/configmaps/once$", action = { status = 429, retry_after = 1 } }
        _, err = never:get("configmaps", "default/once")
        assert.equal(429, err.code)
        assert.same({ 1, 1, 1 }, sleeps) -- "busy" twice, "short" once; never any for "once"
      end)
    end)
  end)

  describe("Warning headers", function()
    local WIDGETS = { group = "example.com", version = "v1beta1", resource = "widgets", namespaced = true }

    it("logs each text once, at warn, and counts every one", function()
      with_log(function(lines)
        local c = client()
        assert(c:list(WIDGETS, { namespace = "default" }))
        assert(c:list(WIDGETS, { namespace = "default" }))
        local _, err = c:get(WIDGETS, "default/none")
        assert.equal(404, err.code)
        assert.equal(1, count(lines, "warn API server warning: example.com/v1beta1 Widget is deprecated"))
        local st = c:status()
        assert.equal(3, st.warnings)
        assert.equal(1, st.warnings_distinct)
        assert(c:list("configmaps", { namespace = "default" }))
        assert.equal(3, c:status().warnings) -- configmaps v1 is not deprecated

        srv:control("POST", "/_fake/warnings", { method = "POST", path = "/configmaps$",
                                                 text = 'admission: "big" data \\ noted' })
        assert(c:create("configmaps", cm("warned", "default")))
        assert(c:create("configmaps", cm("warned2", "default")))
        assert.equal(1, count(lines, 'warn API server warning: admission: "big" data \\ noted'))
        assert.equal(5, c:status().warnings)
        assert.equal(2, c:status().warnings_distinct)
      end)
    end)

    it("surfaces the warnings of an informer's list and watch", function()
      with_log(function(lines)
        local c = client()
        local inf = assert(c:informer{ resource = WIDGETS, namespace = "default" })
        inf:start()
        assert(inf:wait_for_sync(10))
        local deadline = kinformer.now() + 5
        while c:status().warnings < 2 and kinformer.now() < deadline do -- the list's, the watch's
          inf:dispatch(10) -- logs them on this thread
          core.sleep(0.02)
        end
        inf:stop()
        assert.is_true(c:status().warnings >= 2)
        assert.equal(2, #srv:requests_to("GET", "/widgets$")) -- one list, one watch
        assert.equal(1, count(lines, "API server warning: example.com/v1beta1 Widget is deprecated"))
      end)
    end)
  end)

  describe("impersonation", function()
    it("sends the Impersonate-* headers on REST calls, lists and watches", function()
      local c = client{ impersonate_user = "jane", impersonate_uid = "u-1",
                        impersonate_groups = { "devs", "ops" },
                        impersonate_extra = { scopes = { "view", "edit" }, ["example.com/Team %"] = "blue" } }
      assert(c:create("configmaps", cm("as-jane", "default")))
      local q = srv:requests_to("POST", "/configmaps$")[1]
      assert.equal("admin", q.user)
      assert.same({ user = "jane", uid = "u-1", groups = { "devs", "ops" },
                    extra = { scopes = { "view", "edit" }, ["example.com/team %"] = { "blue" } } },
                  q.impersonate)

      local inf = assert(c:informer{ resource = "configmaps", namespace = "default" })
      inf:start()
      assert(inf:wait_for_sync(10))
      local deadline = kinformer.now() + 5
      local watch
      repeat
        for _, r in ipairs(srv:requests_to("GET", "/configmaps$")) do
          if r.query.watch then watch = r end
        end
        if not watch then core.sleep(0.02) end
      until watch or kinformer.now() > deadline
      inf:stop()
      assert.is_table(watch, "the informer's watch reached the server")
      assert.equal("jane", watch.impersonate.user)
      for _, r in ipairs(srv:requests_to("GET", "/configmaps$")) do
        assert.equal("jane", r.impersonate and r.impersonate.user) -- the list too
      end
    end)

    it("is authorized as the impersonated user", function()
      local viewer = client{ impersonate_user = "viewer" }
      assert(viewer:get("namespaces", "default"))
      local res, err = viewer:create("configmaps", cm("by-viewer", "default"))
      assert.is_nil(res)
      assert.equal(403, err.code)
      assert.equal("Forbidden", err.reason)
      assert.equal('configmaps is forbidden: User "viewer" cannot create resource "configmaps" in '
        .. 'API group "" in the namespace "default"', err.message)
      assert(client():create("configmaps", cm("by-admin", "default"))) -- the token's own user may
    end)

    it("is refused with kube-apiserver's 403 to a user who may not impersonate", function()
      local c = client{ token = PLAIN, impersonate_user = "jane" }
      local _, err = c:get("configmaps", "default/x")
      assert.equal(403, err.code)
      assert.equal('users "jane" is forbidden: User "plain" cannot impersonate resource "users" in '
        .. 'API group "" at the cluster scope', err.message)
      local again = client{ token = PLAIN }
      local _, nf = again:get("configmaps", "default/x")
      assert.equal(404, nf.code) -- without impersonation the same token is fine

      -- POST /_fake/authz changes who may impersonate at run time.
      local admin_as_jane = client{ impersonate_user = "jane" }
      srv:control("POST", "/_fake/authz", { impersonators = {} })
      local ok, st = pcall(function()
        local _, e = admin_as_jane:get("configmaps", "default/x")
        return e
      end)
      srv:control("POST", "/_fake/authz", { impersonators = { "admin" } })
      assert(ok, st)
      assert.equal(403, st.code)
      assert.same({ impersonators = { "admin" }, deny = { { user = "viewer", verb = "create" } } },
                  srv:control("GET", "/_fake/authz"))
    end)

    it("comes from the kubeconfig's as fields", function()
      local kc = fake.kubeconfig(srv, { token = PLAIN })
      local f = assert(io.open(kc))
      local text = f:read("a")
      f:close()
      local n
      text, n = text:gsub(("user: {token: " .. PLAIN .. "}"):gsub("%p", "%%%0"), "user: {token: "
        .. ADMIN .. ", as: jane, as-groups: [devs], as-user-extra: {reason: [audit]}}")
      assert.equal(1, n)
      f = assert(io.open(kc, "w"))
      f:write(text)
      f:close()
      local c = assert(kinformer.client{ kubeconfig = kc })
      os.remove(kc)
      assert(c:list("configmaps", { namespace = "default" }))
      local q = srv:requests_to("GET", "/configmaps$")[1]
      assert.same({ user = "jane", groups = { "devs" }, extra = { reason = { "audit" } } }, q.impersonate)
    end)
  end)
end)
