--- kinformer.ngx.balancer: balancer_by_lua* over the endpoints of Kubernetes Services, from an
-- EndpointSlice informer run by kinformer.ngx in any of its models (docs/openresty.md).
--
--   init_worker_by_lua_block { require("kinformer.ngx.balancer").start{ model = "shared" } }
--   upstream web {
--       server 0.0.0.1;   # not used: the balancer picks the peer
--       balancer_by_lua_block { require("kinformer.ngx.balancer").balance("default/web:http") }
--       keepalive 64;
--   }
--   location / { proxy_pass http://web; error_page 500 = @unavailable; }
--   location @unavailable {
--       content_by_lua_block { require("kinformer.ngx.balancer").unavailable() }
--   }
--
-- Contract:
-- - A target "namespace/name:port" names a Service and one of its ports (the EndpointSlices'
--   port name, or number; "namespace/name" alone: its only port). Each worker keeps, per policy
--   and target, the peers the endpoint rules give (kinformer.ngx.balancer.endpoints), rebuilt on the
--   first request after the Service's slices changed (a version compare per request), never
--   per request otherwise. A request reads them and picks one: no decode, no copy, no shared
--   dict, no allocation on the way in the steady state (round robin, chash and sticky with the
--   cookie set; ewma reads the clock).
-- - A retry (proxy_next_upstream) goes to an endpoint the request did not try yet; the first try
--   allows one try per endpoint (set_more_tries). A failed try counts against its endpoint:
--   max_fails failures within fail_timeout seconds skip it for cool_down seconds in this worker
--   (passive health, as nginx's own max_fails, per worker); when every endpoint is skipped, all
--   are used. Skips and comebacks are logged once each.
-- - No peer: the balancer fails the request, which stock nginx answers 500; `error_page 500 =
--   @unavailable` with unavailable() gives the real answer (503 and X-Kinformer-Reason, or 404
--   for an empty target). A balancer cannot choose the status on stock nginx.
-- - Per-worker state only (Lua tables); status() and the metrics come from samples each worker
--   publishes to the status dict every status_interval.
local ngx = ngx
local kngx = require "kinformer.ngx"
local argcheck = require "kinformer.argcheck"
local services = require "kinformer.ngx.balancer.services"
local endpoints = require "kinformer.ngx.balancer.endpoints"
local chash = require "kinformer.ngx.balancer.chash"
local peers = require "kinformer.ngx.balancer.peers"
local nprocess = require "kinformer.ngx.process"
local bstatus = require "kinformer.ngx.balancer.status"
local balancer = require "ngx.balancer"
local base = require "resty.core.base"

local type, pairs, tostring, tonumber = type, pairs, tostring, tonumber
local string_match, string_format, string_gmatch = string.match, string.format, string.gmatch
local math_random, math_floor = math.random, math.floor
local get_last_failure, set_more_tries, set_current_peer =
  balancer.get_last_failure, balancer.set_more_tries, balancer.set_current_peer
local get_request = base.get_request
local ffi_cast = require("ffi").cast
local ngx_var, ngx_now, ngx_exit, ngx_ERROR = ngx.var, ngx.now, ngx.exit, ngx.ERROR
local worker_pid = ngx.worker.pid
local crc32, md5_bin = ngx.crc32_short, ngx.md5_bin
local string_byte = string.byte
local log = nprocess.log
local raise = argcheck.raise

local _M = {}

local S = {
  started = false,
  sync_wait = 1,            -- seconds a request may wait in unavailable() for the first sync
  logging = false,          -- log() has run: balance() counts requests in flight
  informer = "endpointslices",
}
_M._state = S

local eps, hold, release = peers.eps, peers.hold, peers.release
local is_down, record_failure = peers.is_down, peers.record_failure
local ewma_now, ewma_observe = peers.ewma_now, peers.ewma_observe
local H = peers.state -- health settings and the count of endpoints in cool-down

-- ---- policies ----

local ALGORITHMS = { round_robin = true, ewma = true, chash = true, sticky = true }

local policies = {}

local function hash_var(spec, fname)
  if spec == "remote_addr" or spec == "client" then return "remote_addr" end
  local kind, name = string_match(spec, "^(%a+):(.+)$")
  if kind == "header" then return "http_" .. name:lower():gsub("-", "_") end
  if kind == "cookie" then return "cookie_" .. name end
  if kind == "arg" then return "arg_" .. name end
  if kind == "var" then return name end
  raise(2, fname, "option 'hash_by' must be \"remote_addr\", \"header:NAME\", \"cookie:NAME\", " ..
    "\"arg:NAME\" or \"var:NAME\", got " .. tostring(spec))
end

local POLICY_OPTS = { algorithm = true, hash_by = true, cookie = true, cookie_path = true,
  cookie_max_age = true, cookie_secure = true, cookie_samesite = true, address_type = true }

local function new_policy(name, o)
  local fname = "policy"
  argcheck.options(o, POLICY_OPTS, fname)
  local algorithm = o.algorithm or "round_robin"
  if not ALGORITHMS[algorithm] then
    raise(3, fname, "option 'algorithm' must be \"round_robin\", \"ewma\", \"chash\" or \"sticky\"")
  end
  local p = { name = name, algorithm = algorithm, targets = {} }
  if o.address_type ~= nil and o.address_type ~= "IPv4" and o.address_type ~= "IPv6" then
    raise(3, fname, "option 'address_type' must be \"IPv4\" or \"IPv6\"")
  end
  p.family = o.address_type
  if algorithm == "chash" then
    if type(o.hash_by) ~= "string" then raise(3, fname, "chash needs option 'hash_by'") end
    p.hash_var = hash_var(o.hash_by, fname)
  elseif o.hash_by ~= nil then
    raise(3, fname, "option 'hash_by' is for algorithm \"chash\"")
  end
  if algorithm == "sticky" then
    local c = o.cookie or "kinformer_route"
    if type(c) ~= "string" or not string_match(c, "^[%w_%-%.]+$") then
      raise(3, fname, "option 'cookie' must be a cookie name")
    end
    p.cookie_var = "cookie_" .. c
    local attrs = "; Path=" .. (o.cookie_path or "/") .. "; HttpOnly"
    if o.cookie_max_age then attrs = attrs .. "; Max-Age=" .. math_floor(o.cookie_max_age) end
    if o.cookie_secure then attrs = attrs .. "; Secure" end
    if o.cookie_samesite then attrs = attrs .. "; SameSite=" .. o.cookie_samesite end
    p.cookie_name, p.cookie_attrs = c, attrs
  end
  return p
end

policies.round_robin = new_policy("round_robin", {})
policies.ewma = new_policy("ewma", { algorithm = "ewma" })
local DEFAULT = policies.round_robin

--- balancer.policy(name, { algorithm = "round_robin" | "ewma" | "chash" | "sticky",
--      hash_by = "remote_addr" | "header:NAME" | "cookie:NAME" | "arg:NAME" | "var:NAME",
--      cookie = "kinformer_route", cookie_path = "/", cookie_max_age, cookie_secure,
--      cookie_samesite, address_type = "IPv4" | "IPv6" })
-- Names a policy for balance(target, name). Define policies at module level or in
-- init_worker_by_lua*, the same in every worker. "round_robin" (the default) and "ewma" exist.
function _M.policy(name, o)
  if type(name) ~= "string" then raise(1, "policy", "name must be a string") end
  if type(o) ~= "table" then raise(1, "policy", "options must be a table") end
  policies[name] = new_policy(name, o)
  return true
end

-- ---- targets ----

local TARGETS_MAX = 10000 -- targets of all policies together, in one worker

-- "ns/name:port" -> service key, port spec (string, number or nil); nil when malformed.
local function parse_target(target)
  local svc, port = string_match(target, "^([%w%-%.]+/[%w%-%.]+):([%w%-%.]+)$")
  if not svc then
    svc = string_match(target, "^([%w%-%.]+/[%w%-%.]+)$")
    if not svc then return nil end
    return svc, nil
  end
  local num = tonumber(port)
  if num and string_match(port, "^%d+$") then return svc, num end
  return svc, port
end

-- Every target of every policy goes, and the Services they kept: targets can come from request
-- data (a variable), so their number is bounded.
local ntargets = 0
local function forget_targets()
  for _, p in pairs(policies) do
    for _, old in pairs(p.targets) do
      for i = 1, old.n do release(old.ep[i]) end
    end
    p.targets = {}
  end
  ntargets = 0
  services.forget()
end

local function new_target(p, target)
  if ntargets >= TARGETS_MAX then forget_targets() end
  local t = { target = target, policy = p, version = -1, n = 0, rr = 0,
              host = {}, port = {}, ep = {}, reason = nil }
  if type(target) ~= "string" or target == "" then
    t.reason = "no-route"
  else
    local svc, spec = parse_target(target)
    if not svc then
      t.reason = "bad-target"
      log("error", "balancer: target '", target, "' is not \"namespace/name[:port]\"")
    else
      t.svc, t.spec = services.get(svc), spec
    end
  end
  if type(target) == "string" then
    p.targets[target] = t
    ntargets = ntargets + 1
  end
  return t
end

-- The ring's points: md5 spreads them evenly (crc32 of such similar strings clusters them:
-- with 3 endpoints the smallest share of the circle was 0.21 in the worst of 300 port numbers,
-- against 0.27 with md5; 1/3 is even).
local function md5_32(s)
  local a, b, c, d = string_byte(md5_bin(s), 1, 4)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function rebuild(t)
  local svc = t.svc
  local p = t.policy
  t.version = svc.version
  local sel = svc.summary and endpoints.select(svc.summary, t.spec, p.family)
  local peers = sel and sel.peers or {}
  local n = #peers
  local host, port, ep = {}, {}, {}
  local ids = {}
  for i = 1, n do
    local pe = peers[i]
    host[i], port[i], ep[i], ids[i] = pe.host, pe.port, hold(pe.id), pe.id
  end
  for i = 1, t.n do release(t.ep[i]) end
  t.host, t.port, t.ep, t.n = host, port, ep, n
  t.known = sel and sel.known or 0
  t.ready = sel and sel.ready or 0
  t.terminating = sel and sel.terminating or false
  if n > 0 then
    t.reason = nil
  elseif not svc.summary then
    t.reason = "unknown-service"
  elseif not sel.port_found then
    t.reason = "unknown-port"
  else
    t.reason = "no-endpoints"
  end
  -- workers start apart: nginx does not seed math.random per worker (every worker draws the
  -- same numbers), so the pid moves each worker's offset
  if t.rr == 0 and n > 0 then t.rr = (math_random(n) - 1 + worker_pid()) % n end
  if p.algorithm == "chash" then t.ring = chash.ring(ids, md5_32) end
  if p.algorithm == "sticky" then
    local tokens, cookies = {}, {}
    for i = 1, n do
      local token = string_format("%08x", crc32(ids[i]))
      tokens[token] = i
      cookies[i] = p.cookie_name .. "=" .. token .. p.cookie_attrs
    end
    t.tokens, t.cookies = tokens, cookies
  end
end

-- ---- picking ----

-- The first usable endpoint from index i on (i itself included), skipping cooled-down ones and
-- those in `tried`; when every untried one is cooled down, the first untried. nil: none left.
local function usable_from(t, i, n, tried)
  local first_untried = nil
  for k = 0, n - 1 do
    local j = (i - 1 + k) % n + 1
    local e = t.ep[j]
    if not (tried and tried[e.id]) then
      if not is_down(e) then return j end
      first_untried = first_untried or j
    end
  end
  return first_untried
end

local function pick_round_robin(t, n)
  local i = t.rr % n + 1
  t.rr = i
  if H.ndown > 0 and is_down(t.ep[i]) then i = usable_from(t, i, n, nil) end
  return i
end

local function pick_ewma(t, n)
  if n == 1 then return 1 end
  local a = math_random(n)
  local b = math_random(n - 1)
  if b >= a then b = b + 1 end
  local ea, eb = t.ep[a], t.ep[b]
  if H.ndown > 0 then
    if is_down(ea) then return is_down(eb) and usable_from(t, a, n, nil) or b end
    if is_down(eb) then return a end
  end
  local now = ngx_now()
  local sa = (ewma_now(ea, now) + 1e-6) * (ea.inflight + 1)
  local sb = (ewma_now(eb, now) + 1e-6) * (eb.inflight + 1)
  return sb < sa and b or a
end

local function pick_chash(t, n)
  local key = ngx_var[t.policy.hash_var]
  if key == nil or key == "" then return pick_round_robin(t, n) end
  local ring = t.ring
  local pos = chash.position(ring, crc32(key))
  local i = ring.owner[pos]
  if H.ndown > 0 and is_down(t.ep[i]) then
    -- walk the circle to the next endpoint that is not cooled down
    local owner, m = ring.owner, ring.n
    for k = 1, m - 1 do
      local j = owner[(pos - 1 + k) % m + 1]
      if not is_down(t.ep[j]) then return j end
    end
  end
  return i
end

local function pick_sticky(t, n)
  local p = t.policy
  local token = ngx_var[p.cookie_var]
  local i = token and t.tokens[token]
  if i and not (H.ndown > 0 and is_down(t.ep[i])) then return i end
  i = pick_round_robin(t, n)
  ngx.header["Set-Cookie"] = t.cookies[i]
  return i
end

local PICK = { round_robin = pick_round_robin, ewma = pick_ewma, chash = pick_chash,
               sticky = pick_sticky }

-- A retry: the previous tries' endpoints are the addresses in $upstream_addr (the last one is
-- the try that just failed); the next pick is the first untried usable endpoint after it.
local function pick_retry(t, n, state)
  local addrs = ngx_var.upstream_addr or ""
  local tried, last = {}, nil
  for a in string_gmatch(addrs, "[^%s,]+") do
    if a ~= ":" then tried[a], last = true, a end
  end
  local e = last and eps[last]
  if e then
    if S.logging and e.inflight > 0 then e.inflight = e.inflight - 1 end
    if state == "failed" then record_failure(e) end
  end
  local from = 1
  if last then
    for i = 1, n do
      if t.ep[i].id == last then from = i + 1 break end
    end
  end
  local i = usable_from(t, (from - 1) % n + 1, n, tried)
  if i and t.policy.algorithm == "sticky" then ngx.header["Set-Cookie"] = t.cookies[i] end
  return i
end

-- ---- the request path ----

local reasons = {}   -- request -> the reason no peer was picked (read by unavailable())
local nreasons = 0

-- The request's address, as a number: get_request() hands out a new cdata every time.
local function request_id()
  local r = get_request()
  return r and tonumber(ffi_cast("uintptr_t", r))
end

local function fail(t)
  if nreasons >= 1000 then reasons, nreasons = {}, 0 end
  local r = request_id()
  if r then
    reasons[r] = t
    nreasons = nreasons + 1
  end
  return ngx_exit(ngx_ERROR)
end

--- balancer.balance(target [, policy]) in balancer_by_lua*: sets the request's peer to an
-- endpoint of the target's Service ("namespace/name:port"), by the policy's algorithm (a name
-- given to policy(); default "round_robin"). No endpoint: fails the request (see unavailable()).
function _M.balance(target, pname)
  local p = DEFAULT
  if pname ~= nil then
    p = policies[pname]
    if p == nil then raise(1, "balance", "no policy named " .. tostring(pname)) end
  end
  local t = p.targets[target]
  if t == nil then t = new_target(p, target) end
  local svc = t.svc
  if svc and t.version ~= svc.version then rebuild(t) end
  local n = t.n
  if n == 0 then return fail(t) end
  local state = get_last_failure()
  local i
  if state == nil then
    if n > 1 then set_more_tries(n - 1) end
    i = PICK[p.algorithm](t, n)
  else
    i = pick_retry(t, n, state)
    if i == nil then return fail(t) end
  end
  local e = t.ep[i]
  e.requests = e.requests + 1
  if S.logging then e.inflight = e.inflight + 1 end
  local ok, err = set_current_peer(t.host[i], t.port[i])
  if not ok then
    log("error", "balancer: cannot use endpoint ", e.id, ": ", err)
    return ngx_exit(ngx_ERROR)
  end
end

--- balancer.log() in log_by_lua*: feeds the request's outcome back: its response time (ewma),
-- the requests in flight (ewma), and a last try that got no response (passive health; a try
-- that a retry followed is counted by the retry). Optional for the other algorithms.
function _M.log()
  S.logging = true
  local addr = ngx_var.upstream_addr
  if addr == nil then return end
  local e = eps[addr]
  if e == nil then
    -- several tries ("a, b") or an address that is no endpoint of ours
    local last = string_match(addr, "([^%s,:][^%s,]*)$")
    e = last and eps[last]
    if e == nil then return end
  end
  if e.inflight > 0 then e.inflight = e.inflight - 1 end
  local ht = ngx_var.upstream_header_time
  local rtt = tonumber(ht)
  if rtt == nil and ht then rtt = tonumber(string_match(ht, "([%d.]+)$")) end
  if rtt == nil then
    -- no response header from the last try: a failure when nginx gave up on it (502, 504),
    -- not when the client went away first (499)
    local us = ngx_var.upstream_status
    local last = us and string_match(us, "(%d+)$")
    if last == "502" or last == "504" then record_failure(e) end
    return
  end
  ewma_observe(e, rtt)
end

local REASON_TEXT = {
  ["no-route"] = "no Service for this request",
  ["bad-target"] = "the balancer's target is not \"namespace/name[:port]\"",
  ["not-synced"] = "the EndpointSlice cache has not synced yet",
  ["unknown-service"] = "the Service has no EndpointSlice",
  ["unknown-port"] = "the Service's EndpointSlices have no such port",
  ["no-endpoints"] = "the Service has no ready endpoint",
  ["all-tried"] = "every endpoint was tried",
}

--- balancer.unavailable() in content_by_lua* of the error_page location for 500: while this
-- process's cache has not synced, waits for it (sync_wait) and sends the request through its
-- location again; otherwise answers why the balancer picked no peer: 503 (with X-Kinformer-Reason, Retry-After: 1 and a line of text)
-- when the target's Service has no usable endpoint, is unknown, or the cache has not synced;
-- 404 when the target was empty (e.g. a Host that a map sends nowhere); 500 otherwise.
-- A request that found this process's cache not synced yet (a new worker's first list, after a
-- start or a reload, in the worker model; a new segment or agent) waits for it, up to sync_wait
-- seconds after the request began, and goes through its location again when the target has a
-- peer then: true when it did (ngx.exec does not return).
local function wait_synced(t)
  if S.sync_wait <= 0 or not t.svc or kngx.synced() then return false end
  local deadline = ngx.req.start_time() + S.sync_wait
  repeat
    ngx.sleep(0.01)
  until kngx.synced() or ngx_now() >= deadline
  if not kngx.synced() then return false end
  if t.version ~= t.svc.version then rebuild(t) end
  if t.n == 0 then return false end
  -- error_page served this location once already: a second failure would not reach it, hence
  -- the check of the peers above
  return ngx.exec(ngx_var.uri, ngx_var.args)
end

function _M.unavailable()
  local r = request_id()
  local t = r and reasons[r]
  if t then
    reasons[r] = nil
    nreasons = nreasons - 1
    if wait_synced(t) then return end
  end
  local status, reason, body
  if not t then
    status, reason = 500, "internal"
    body = "internal error (see the error log)"
  else
    reason = t.reason or "all-tried"
    if reason ~= "no-route" and reason ~= "bad-target" and not kngx.synced() then
      reason = "not-synced"
    end
    status = (reason == "no-route" and 404) or (reason == "bad-target" and 500) or 503
    body = REASON_TEXT[reason]
    if t.svc then body = body .. ": " .. t.target end
  end
  ngx.status = status
  ngx.header["Content-Type"] = "text/plain"
  ngx.header["X-Kinformer-Reason"] = reason
  if status == 503 then ngx.header["Retry-After"] = "1" end
  ngx.say("kinformer: ", body)
  return ngx.exit(status)
end

-- ---- start ----

local OWN_OPTS = { endpointslices = true, dict = true, max_fails = true, fail_timeout = true,
  cool_down = true, sync_wait = true }

local function copy(t)
  local c = {}
  for k, v in pairs(t or {}) do c[k] = v end
  return c
end

local function tick(premature)
  if premature then return end
  services.refresh()
  local t = ngx_now()
  if t >= S.next_status then
    S.next_status = t + S.status_interval
    bstatus.publish()
  end
end

--- balancer.start{ model =, client =, endpointslices = { namespace =, label_selector =, ... },
--                  dict = "kinformer_endpoints", max_fails = 1, fail_timeout = 10,
--                  cool_down = fail_timeout, sync_wait = 1, ...kngx.start's options }
-- -> true | nil, err
-- From init_worker_by_lua*, in every process, instead of kngx.start (it calls it): runs an
-- EndpointSlice informer named "endpointslices" (its options: `endpointslices`) next to the
-- caller's own `informers`, in the model given (kngx.start's `model`; the agent model also needs
-- `lua_shared_dict kinformer_endpoints`, or the one `dict` names). The caller's setup, handlers
-- and after_dispatch still run. max_fails failed tries of an endpoint within fail_timeout seconds
-- skip it for cool_down seconds (0 max_fails: never). sync_wait: seconds a request may wait in
-- unavailable() for this process's first sync (0: answer 503 not-synced at once).
function _M.start(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then raise(1, "start", "table expected, got " .. type(opts)) end
  if S.started then argcheck.fail("kinformer.ngx.balancer.start() was already called") end
  local max_fails = argcheck.number(opts, "max_fails", "start", 1, 0)
  local fail_timeout = argcheck.number(opts, "fail_timeout", "start", 10, 0.001)
  local cool_down = argcheck.number(opts, "cool_down", "start", fail_timeout, 0.001)
  local dict = argcheck.string(opts, "dict", "start") or "kinformer_endpoints"
  S.sync_wait = argcheck.number(opts, "sync_wait", "start", 1, 0)
  if opts.endpointslices ~= nil and type(opts.endpointslices) ~= "table" then
    raise(1, "start", "option 'endpointslices' must be a table of informer options")
  end
  local name = S.informer
  if type(opts.informers) == "table" and opts.informers[name] ~= nil then
    raise(1, "start", "option 'informers': the name '" .. name .. "' is the balancer's")
  end
  local kopts = {}
  for k, v in pairs(opts) do
    if not OWN_OPTS[k] then kopts[k] = v end
  end
  local model = kopts.model or "worker"
  local io = copy(opts.endpointslices)
  io.resource = io.resource or "endpointslices.discovery.k8s.io"
  kopts.informers = copy(opts.informers)
  kopts.informers[name] = io
  local handlers = services.handlers()
  local user_setup, user_after = opts.setup, opts.after_dispatch
  kopts.setup = function(informers, client)
    local inf = informers[name]
    assert(inf:add_indexers{ service = services.index })
    if model ~= "shared" then assert(inf:add_handler(handlers)) end
    if user_setup then user_setup(informers, client) end
  end
  if model == "shared" then
    kopts.handlers = copy(opts.handlers)
    kopts.handlers[name] = handlers
  end
  kopts.after_dispatch = function(n)
    local more = services.after_dispatch()
    if user_after and user_after(n) then more = true end
    return more
  end
  local view = model == "agent" and kngx.view{ name = "kinformer.endpoints", dict = dict } or nil
  S.started = true
  H.max_fails, H.fail_timeout, H.cool_down = math_floor(max_fails), fail_timeout, cool_down
  local ok, err = kngx.start(kopts)
  services.configure{ store = function() return kngx.store(name) end, view = view,
                      publisher = kngx.runs_informers() }
  if not ok then return nil, err end
  if nprocess.role() ~= "agent" then
    local ps = nprocess.state
    S.status_interval, S.next_status = ps.status_interval or 1, 0
    local interval = argcheck.number(opts, "interval", "start", 0.1, 0.001)
    local tok, terr = ngx.timer.every(interval, tick)
    if not tok then return nil, "cannot start the balancer's timer: " .. tostring(terr) end
  end
  return true
end

--- balancer.status() -> { processes = { { pid, process, time, targets = { [target] = { target,
-- policy, algorithm, known, ready, peers, skipped, terminating, reason } }, endpoints = { [id] =
-- { requests, failures, skips, skipped, ewma, inflight } } }, ... } }: every worker's sample
-- (this one's fresh, the others' at most a status interval old). kngx.status() has it as
-- `balancer`, and kngx.metrics() renders it.
function _M.status()
  return bstatus.collect()
end

bstatus.watch{ policies = policies, eps = eps, S = S }

return _M
