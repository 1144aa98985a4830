--- kinformer.testing: a test kit for controller authors (busted specs, or any Lua test).
--
-- Contract: testing.server{...} starts the fake Kubernetes API server (Python 3, shipped with
-- the rock) as a child process on 127.0.0.1 and a free port, waits until it serves, and returns
-- an env: its URL, a ready kinformer.client, and helpers that read and write the server's
-- state through its control endpoints (not recorded in the request log) or, for env:delete,
-- through the API. The server runs with --exit-with-parent: it dies with the Lua process even
-- when a spec crashes; env:stop() is idempotent, runs from __gc and __close, and every env still
-- running when the Lua state closes is stopped. testing.run_until drives a kinformer.manager
-- step by step; testing.fake_clock replaces kinformer.clock's now and sleep until restored.
-- Wrong arguments raise at the caller's line; failures of the server raise too (a test kit's
-- failure is the test's failure), with the server's answer in the message.
-- Everything runs on the calling thread; no function here is for production code.
local type, pairs, ipairs, tostring, pcall, setmetatable, next =
  type, pairs, ipairs, tostring, pcall, setmetatable, next
local concat, format = table.concat, string.format
local pack = table.pack or function(...) return { n = select("#", ...), ... } end -- LuaJIT
local unpack = table.unpack or unpack

local cjson = require "cjson"
local core = require "kinformer.core"
local clock = require "kinformer.clock"
local argcheck = require "kinformer.argcheck"

local _M = { _VERSION = "0.1" }

local raise, fail = argcheck.raise, argcheck.fail
local now, sleep = core.now, core.sleep -- real time, whatever kinformer.clock says

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function readable(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

local function alive(pid) -- exists and is not a zombie
  local f = io.open("/proc/" .. pid .. "/stat", "r")
  if not f then return false end
  local state = (f:read("a") or ""):match("%)%s+(%a)")
  f:close()
  return state ~= nil and state ~= "Z" and state ~= "X"
end

-- Where the server is: $KINFORMER_FAKE_APISERVER, next to this file when installed by the rock
-- (the rock copies tools/fake-apiserver into its own directory), or in the checkout.
local HERE = debug.getinfo(1, "S").source:match("^@(.*)/kinformer/testing%.lua$")

local function installed_server()
  local tree, ver = (HERE or ""):match("^(.*)/share/lua/([%d.]+)$")
  if not tree then return nil end
  local rocks = format("%s/lib/luarocks/rocks-%s/kinformer", tree, ver)
  local p = io.popen("ls -1 " .. quote(rocks) .. " 2>/dev/null")
  local out = p and p:read("a") or ""
  if p then p:close() end
  for version in out:gmatch("[^\n]+") do
    local path = rocks .. "/" .. version .. "/tools/fake-apiserver/server.py"
    if readable(path) then return path end
  end
end

--- testing.server_path() -> the path of server.py | nil, err
function _M.server_path()
  local candidates = { os.getenv("KINFORMER_FAKE_APISERVER"), installed_server() }
  local root = rawget(_G, "KINFORMER_ROOT") or os.getenv("KINFORMER_ROOT")
  if root then candidates[#candidates + 1] = root .. "/tools/fake-apiserver/server.py" end
  if HERE then candidates[#candidates + 1] = HERE .. "/../tools/fake-apiserver/server.py" end
  for i = 1, 4 do
    local c = candidates[i]
    if c and c ~= "" and readable(c) then return c end
  end
  return nil, "the fake API server (server.py) is neither installed with the rock nor in a "
    .. "checkout (set KINFORMER_FAKE_APISERVER to its path)"
end

-- YAML (lyaml, optional) or JSON text -> array of documents.
local function lyaml_null_to_json(v, seen, null)
  if v == null then return cjson.null end
  if type(v) == "table" and not seen[v] then
    seen[v] = true
    for k, x in pairs(v) do v[k] = lyaml_null_to_json(x, seen, null) end
  end
  return v
end

local function documents(text)
  if text:match("^%s*[%[{]") then
    local ok, v = pcall(cjson.decode, text)
    if not ok then return nil, "not JSON: " .. tostring(v) end
    if v[1] ~= nil or next(v) == nil then return v end
    return { v }
  end
  local ok, lyaml = pcall(require, "lyaml")
  if not ok then return nil, "YAML needs lyaml (Debian: lua-yaml); JSON works without it" end
  local okl, docs = pcall(lyaml.load, text, { all = true })
  if not okl then return nil, "not YAML: " .. tostring(docs) end
  local out = {}
  for _, d in ipairs(docs) do
    if type(d) == "table" then out[#out + 1] = lyaml_null_to_json(d, {}, lyaml.null) end
  end
  return out
end

-- objects(list, n, fname): tables, YAML / JSON strings (several documents each) or, with
-- files = true, paths of such files -> array of tables. Raises at the caller for bad input.
local function objects_of(list, n, fname, files)
  local out = {}
  for i, x in ipairs(list) do
    if type(x) == "string" then
      if files and not x:find("\n") and readable(x) then
        local f = io.open(x)
        x = f:read("a")
        f:close()
      end
      local docs, err = documents(x)
      if not docs then raise(n, fname, format("item %d: %s", i, err)) end
      for _, d in ipairs(docs) do out[#out + 1] = d end
    elseif type(x) == "table" then
      out[#out + 1] = x
    else
      raise(n, fname, format("item %d: a table or a YAML / JSON string expected, got %s", i,
        type(x)))
    end
  end
  return out
end

--------------------------------------------------------------------------------------------
-- The env

local Env = {}
Env.__index = Env

local running = setmetatable({}, { __mode = "k" }) -- env -> true, stopped at state close

-- One control call: method, path, body (table) -> decoded answer; raises unless 200.
local function control(self, method, path, body)
  if self.stopped then fail("kinformer.testing: the server was stopped") end
  local http, ltn12 = require "socket.http", require "ltn12"
  local out, headers, source = {}, {}, nil
  if body ~= nil then
    body = cjson.encode(body)
    headers["content-type"] = "application/json"
    headers["content-length"] = tostring(#body)
    source = ltn12.source.string(body)
  end
  local ok, code = http.request{ url = self.url .. path, method = method, headers = headers,
                                 source = source, sink = ltn12.sink.table(out) }
  local raw = concat(out)
  if not ok or code ~= 200 then
    fail(format("kinformer.testing: %s %s -> %s %s", method, path, tostring(code), raw))
  end
  return core.decode(raw)
end

-- "widgets.v1.example.com" (kinformer's name) -> "example.com/v1/widgets" (the control
-- endpoints' name); other names pass as they are.
local function control_resource(resource)
  local plural, version, group = resource:match("^([^./]+)%.(v%d+%w*)%.(.+)$")
  if plural then return group .. "/" .. version .. "/" .. plural end
  return resource
end

local function urlencode(s)
  return (tostring(s):gsub("[^%w%-_.~/]", function(c) return format("%%%02X", c:byte()) end))
end

-- resource's apiVersion and kind, from env.client's discovery (list items carry neither).
function Env:_type_of(resource)
  self._types = self._types or {}
  local t = self._types[resource]
  if t then return t end
  local g, v, plural = resource:match("^(.-)/?([^/]+)/([^/]+)$")
  local r = self.client:resolve(plural and (g ~= "" and plural .. "." .. v .. "." .. g or plural)
    or resource)
  t = r and r.kind and { apiVersion = (r.group ~= "" and r.group .. "/" or "") .. r.version,
                         kind = r.kind } or {}
  self._types[resource] = t
  return t
end

--- env:list(resource [, { namespace = ns }]) -> array of objects (plain tables, with apiVersion
-- and kind), in key order
function Env:list(resource, opts)
  if type(resource) ~= "string" then raise(1, "list", "resource name expected") end
  opts = argcheck.options(opts, { namespace = true }, "list", 2)
  local q = "/_fake/state?resource=" .. urlencode(control_resource(resource))
  if opts.namespace then q = q .. "&namespace=" .. urlencode(opts.namespace) end
  local items = control(self, "GET", q).items
  if #items > 0 then
    local t = self:_type_of(resource)
    for _, o in ipairs(items) do
      o.apiVersion, o.kind = o.apiVersion or t.apiVersion, o.kind or t.kind
    end
  end
  return items
end

--- env:get(resource, "ns/name" | "name") -> the object | nil ("name": a cluster-scoped object)
function Env:get(resource, key)
  if type(key) ~= "string" then raise(2, "get", "key expected (\"ns/name\" or \"name\")") end
  local ns, name = key:match("^([^/]+)/([^/]+)$")
  if not ns then name = key end
  for _, o in ipairs(self:list(resource, { namespace = ns })) do
    if o.metadata.name == name then return o end
  end
  return nil
end

-- The resource name of an object for the client: "Widget.v1.example.com", "ConfigMap".
local function resource_of(o)
  local api, kind = tostring(o.apiVersion or "v1"), tostring(o.kind)
  local group, version = api:match("^(.+)/(.+)$")
  return group and (kind .. "." .. version .. "." .. group) or kind
end

-- Create, or on AlreadyExists update over the current resourceVersion; then the status, when
-- the object has one the write did not keep (a status subresource ignores it) -> object | nil, err
local function create_or_update(client, o)
  local resource = resource_of(o)
  local res, err = client:create(resource, o)
  if not res then
    if err.reason ~= "AlreadyExists" then return nil, err end
    local md = o.metadata or {}
    local cur, gerr = client:get(resource, md.name, { namespace = md.namespace })
    if not cur then return nil, gerr end
    md.resourceVersion = cur.metadata.resourceVersion
    res, err = client:update(resource, o)
    if not res then return nil, err end
  end
  if o.status ~= nil and require("kinformer.rest").status_changed(res.status, o.status) then
    res.status = o.status
    return client:update_status(resource, res)
  end
  return res
end

--- env:apply(obj | yaml_or_json_string) -> the object as stored (the last one for a text of
-- several documents). Through the API as env.client: a create, or an update over the current
-- resourceVersion when the object exists, then a status update when its status is not what
-- obj says (they show in the request log).
function Env:apply(x)
  local list = objects_of({ x }, 1, "apply")
  if #list == 0 then raise(1, "apply", "no object in the text") end
  local res, err
  for _, o in ipairs(list) do
    res, err = create_or_update(self.client, o)
    if not res then fail("kinformer.testing: apply: " .. tostring(err)) end
  end
  return res
end

--- env:delete(resource, key [, opts]) -> the server's answer | nil, err (through the API, as
-- env.client:delete: finalizers and garbage collection apply; it shows in the request log)
function Env:delete(resource, key, opts)
  return argcheck.call(self.client.delete, self.client, resource, key, opts)
end

-- Kubernetes' verb and the resource named by a request-log entry.
local function describe_request(q)
  local segs = {}
  for s in q.path:gmatch("[^/]+") do segs[#segs + 1] = s end
  local skip = segs[1] == "api" and 2 or segs[1] == "apis" and 3 or nil
  local query = q.query or {}
  local watch = query.watch == "true" or query.watch == "1"
  local rest = {}
  if skip and #segs > skip then
    for i = skip + 1, #segs do rest[#rest + 1] = segs[i] end
    if rest[1] == "watch" then
      table.remove(rest, 1)
      watch = true
    end
    if rest[1] == "namespaces" and #rest >= 3 then
      q.namespace = rest[2]
      table.remove(rest, 1)
      table.remove(rest, 1)
    end
    q.resource, q.name, q.subresource = rest[1], rest[2], rest[3]
  end
  local m = q.method
  if m == "GET" or m == "HEAD" then
    q.verb = watch and "watch" or (q.resource and not q.name) and "list" or "get"
  elseif m == "POST" then q.verb = "create"
  elseif m == "PUT" then q.verb = "update"
  elseif m == "PATCH" then q.verb = "patch"
  elseif m == "DELETE" then q.verb = (q.resource and not q.name) and "deletecollection" or "delete"
  else q.verb = m:lower() end
  return q
end

--- env:requests{ verb =, path =, user =, resource =, namespace =, name = } -> the matching
-- entries of the server's request log, oldest first: { method, path, query, time, verb,
-- resource, namespace, name, subresource, user (with users configured) }. path is a Lua
-- pattern searched in the path; the other filters compare equal.
function Env:requests(filter)
  filter = argcheck.options(filter, { verb = true, path = true, user = true, resource = true,
                                      namespace = true, name = true }, "requests")
  local out = {}
  for _, q in ipairs(control(self, "GET", "/_fake/requests")) do
    describe_request(q)
    local ok = not filter.path or q.path:find(filter.path) ~= nil
    for _, f in ipairs{ "verb", "user", "resource", "namespace", "name" } do
      if filter[f] ~= nil and q[f] ~= filter[f] then ok = false end
    end
    if ok then out[#out + 1] = q end
  end
  return out
end

--- env:clear_requests(): empty the request log
function Env:clear_requests() control(self, "DELETE", "/_fake/requests") end

--- env:events(obj) -> the core v1 Events whose involvedObject is obj (by uid, else by kind and
-- name), oldest first
function Env:events(obj)
  if type(obj) ~= "table" or type(obj.metadata) ~= "table" then
    raise(1, "events", "an object with metadata expected")
  end
  local md, out = obj.metadata, {}
  for _, e in ipairs(self:list("events", { namespace = md.namespace })) do
    local io_ = e.involvedObject or {}
    if (md.uid and io_.uid == md.uid) or (not md.uid and io_.name == md.name
      and (obj.kind == nil or io_.kind == obj.kind)) then
      out[#out + 1] = e
    end
  end
  return out
end

--- env:fault(rule or { rule, ... }) (rules: docs/fake-apiserver.md, "Fault injection")
function Env:fault(rules)
  if type(rules) ~= "table" then raise(1, "fault", "a rule (table) expected") end
  control(self, "POST", "/_fake/faults", rules)
end

--- env:clear_faults()
function Env:clear_faults() control(self, "DELETE", "/_fake/faults") end

--- env:control(method, path [, body]) -> the decoded answer of any control endpoint
function Env:control(method, path, body) return control(self, method, path, body) end

--- env:client_for(user) -> a kinformer.client authenticated as that user of opts.users
function Env:client_for(user)
  local token = self._users[user]
  if not token then raise(1, "client_for", "unknown user '" .. tostring(user) .. "'") end
  self._clients[user] = self._clients[user] or assert(require("kinformer").client{
    server = self.url, token = token })
  return self._clients[user]
end

--- env:wait_for(fn [, timeout = 10]) -> fn's first truthy results; polls every 20 ms. A
-- raising fn counts as false; on timeout raises, with fn's last error.
local function wait_for(fn, timeout, what)
  if type(fn) ~= "function" then raise(1, what, "function expected") end
  if timeout ~= nil and (type(timeout) ~= "number" or timeout <= 0) then
    raise(2, what, "timeout must be a number > 0")
  end
  timeout = timeout or 10
  local deadline, last = now() + timeout, nil
  while true do
    local res = pack(pcall(fn))
    if res[1] and res[2] then return unpack(res, 2, res.n) end
    if not res[1] then last = res[2] end
    if now() >= deadline then
      fail(format("%s: the condition did not hold within %g s%s", what, timeout,
        last and (" (last error: " .. tostring(last) .. ")") or ""))
    end
    sleep(0.02)
  end
end
function Env:wait_for(fn, timeout) return wait_for(fn, timeout, "wait_for") end
_M.wait_for = function(fn, timeout) return wait_for(fn, timeout, "wait_for") end

--- env:stop(): SIGTERM, up to 5 s, then SIGKILL; reaps the process. Idempotent.
function Env:stop()
  if self.stopped then return end
  self.stopped = true
  running[self] = nil
  os.execute("kill -TERM " .. self.pid .. " 2>/dev/null")
  local deadline = now() + 5
  while alive(self.pid) and now() < deadline do sleep(0.01) end
  if alive(self.pid) then os.execute("kill -KILL " .. self.pid .. " 2>/dev/null") end
  pcall(self._proc.close, self._proc) -- reaps it (already closed when the state is closing)
end
Env.__gc = Env.stop
Env.__close = Env.stop

local OPTIONS = { crds = true, objects = true, faults = true, args = true, users = true,
                  python = true, verbose = true }

local function write_temp_json(v)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(cjson.encode(v))
  f:close()
  return path
end

local function token()
  local f = io.open("/dev/urandom", "rb")
  local bytes = f and f:read(12) or tostring(now())
  if f then f:close() end
  return (bytes:gsub(".", function(c) return format("%02x", c:byte()) end))
end

--- testing.server{ crds =, objects =, faults =, args =, users =, python =, verbose = } -> env
-- crds: CustomResourceDefinitions (tables, YAML / JSON text, or paths of such files);
-- objects: objects created through the API before env is returned (tables or text);
-- faults: fault rules active from the start; args: more server flags; users: { name = token }
-- (then every API request must authenticate; env.client is the user "testing-admin");
-- python: the interpreter (default "python3"); verbose: the server logs to stderr.
function _M.server(opts)
  opts = argcheck.options(opts, OPTIONS, "server")
  for _, name in ipairs{ "crds", "objects", "faults", "args", "users" } do
    if opts[name] ~= nil and type(opts[name]) ~= "table" then
      raise(1, "server", "option '" .. name .. "' must be a table")
    end
  end
  local crds = objects_of(opts.crds or {}, 1, "server", true)
  local objects = objects_of(opts.objects or {}, 1, "server", false)
  local path, perr = _M.server_path()
  if not path then fail("kinformer.testing.server: " .. perr) end
  local argv = { argcheck.string(opts, "python", "server") or "python3", path,
                 "--exit-with-parent" }
  local temps = {}
  for _, crd in ipairs(crds) do
    temps[#temps + 1] = write_temp_json(crd)
    argv[#argv + 1] = "--crd"
    argv[#argv + 1] = temps[#temps]
  end
  local users = {}
  if opts.users then
    for name, tok in pairs(opts.users) do
      if type(name) ~= "string" or type(tok) ~= "string" then
        raise(1, "server", "option 'users' maps names to tokens (strings)")
      end
      users[name] = tok
    end
    users["testing-admin"] = users["testing-admin"] or token()
    for name, tok in pairs(users) do
      argv[#argv + 1] = "--user-token"
      argv[#argv + 1] = name .. "=" .. tok
    end
  end
  if opts.verbose then argv[#argv + 1] = "--verbose" end
  for _, a in ipairs(opts.args or {}) do argv[#argv + 1] = tostring(a) end
  local words = {}
  for i, a in ipairs(argv) do words[i] = quote(a) end
  -- The shell prints its pid and exec's the server: same pid, and its parent is this process
  -- (what --exit-with-parent watches). The URL line comes once it listens.
  local proc = assert(io.popen("echo $$; exec " .. concat(words, " ")
    .. (opts.verbose and "" or " 2>/dev/null"), "r"))
  local pid = tonumber(proc:read("l"))
  local url = proc:read("l")
  for _, t in ipairs(temps) do os.remove(t) end
  if not pid or not url or not url:match("^https?://127%.0%.0%.1:%d+$") then
    proc:close()
    fail("kinformer.testing.server: the fake API server did not start (" .. concat(argv, " ")
      .. "); run with verbose = true to see why")
  end
  local env = setmetatable({ url = url, pid = pid, _proc = proc, _users = users,
                             _clients = {} }, Env)
  running[env] = true
  -- The objects go through the API (uid, generation, defaults as for any create), then the
  -- request log is emptied: it starts with what the test does.
  local ok, err = pcall(function()
    env.client = assert(require("kinformer").client{ server = url,
                                                     token = users["testing-admin"] })
    for _, o in ipairs(objects) do
      local res, cerr = create_or_update(env.client, o)
      if not res then error("creating the objects: " .. tostring(cerr), 0) end
    end
    if opts.faults and #opts.faults > 0 then control(env, "POST", "/_fake/faults", opts.faults) end
    control(env, "DELETE", "/_fake/requests")
  end)
  if not ok then
    env:stop()
    fail(tostring(err))
  end
  return env
end

--------------------------------------------------------------------------------------------
-- Driving a manager

local function manager_status(mgr)
  local ok, st = pcall(mgr.status, mgr)
  if not ok then return tostring(st) end
  local parts = { "synced=" .. tostring(st.synced), "leader=" .. tostring(st.leader) }
  local names = {}
  for name in pairs(st.controllers or {}) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local c = st.controllers[name]
    parts[#parts + 1] = format("%s{reconciles=%s errors=%s queued=%s last_error=%s}", name,
      tostring(c.reconciles), tostring(c.errors), tostring(c.queue and c.queue.depth),
      tostring(c.last_error))
  end
  return concat(parts, " ")
end

--- testing.run_until(mgr, fn [, timeout = 10]) -> fn's first truthy results: mgr:step() in a
-- loop, waiting on mgr:fds() (at most 20 ms at a time), until fn() is truthy; raises on
-- timeout with the manager's status, and when the manager stopped.
function _M.run_until(mgr, fn, timeout)
  if type(mgr) ~= "table" or type(mgr.step) ~= "function" then
    raise(1, "run_until", "a kinformer.manager expected")
  end
  if type(fn) ~= "function" then raise(2, "run_until", "function expected") end
  if timeout ~= nil and (type(timeout) ~= "number" or timeout <= 0) then
    raise(3, "run_until", "timeout must be a number > 0")
  end
  timeout = timeout or 10
  local deadline = now() + timeout
  while true do
    local res = pack(fn())
    if res[1] then return unpack(res, 1, res.n) end
    local w, err = mgr:step()
    if not w then fail("run_until: the manager stopped (" .. tostring(err) .. ")") end
    if now() >= deadline then
      fail(format("run_until: the condition did not hold within %g s; manager: %s", timeout,
        manager_status(mgr)))
    end
    core.wait(mgr:fds(), math.min(w, 0.02))
  end
end

--------------------------------------------------------------------------------------------
-- The fake clock

local Clock = {}
Clock.__index = Clock

--- clock:now() -> the fake time (seconds)
function Clock:now() return self.t end

--- clock:advance(seconds): move the fake time forward
function Clock:advance(s)
  if type(s) ~= "number" or s < 0 then raise(1, "advance", "seconds must be a number >= 0") end
  self.t = self.t + s
end

--- clock:restore(): kinformer.clock's real now and sleep again. Idempotent.
function Clock:restore()
  if self.restored then return end
  self.restored = true
  if clock.now == self._now then clock.now, clock.sleep = self._real_now, self._real_sleep end
end
Clock.__close = Clock.restore
Clock.__gc = Clock.restore

--- testing.fake_clock([start]) -> clock: installed into kinformer.clock at once (now returns
-- the fake time, sleep advances it without waiting) until clock:restore().
function _M.fake_clock(start)
  if start ~= nil and type(start) ~= "number" then raise(1, "fake_clock", "number expected") end
  local c = setmetatable({ t = start or 1000, _real_now = clock.now,
                           _real_sleep = clock.sleep }, Clock)
  c._now = function() return c.t end
  clock.now = c._now
  clock.sleep = function(s) c.t = c.t + (s > 0 and s or 0) end
  return c
end

-- Stop whatever is still running when the Lua state closes.
_M._sentinel = setmetatable({}, { __gc = function()
  for env in pairs(running) do pcall(Env.stop, env) end
end })

return _M
