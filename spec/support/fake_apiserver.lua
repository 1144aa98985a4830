-- Start, drive and stop tools/fake-apiserver from busted specs.
--
--   local fake = require "support.fake_apiserver"
--   local srv = fake.start{ args = { "--pods", "10" } }
--   finally(function() srv:stop() end)
--   local code, body = srv:request("GET", "/api/v1/pods")
--
-- The server runs as a child of this Lua process (io.popen), started with
-- --exit-with-parent so it dies with us even if a spec crashes, and every server still
-- running when the Lua state closes is stopped. stop() is idempotent and waits for the exit.
local cjson = require "cjson"
local http = require "socket.http"
local ltn12 = require "ltn12"
local socket = require "socket"
local proc = require "support.proc"

local _M = { _VERSION = "0.1" }

local Server = {}
Server.__index = Server

local running = {} -- pid -> server, for the clean-up at exit

local quote, alive = proc.quote, proc.alive

--- fake.start{ args = {...}, root = path, log = file, quiet = bool } -> server
-- args are passed to server.py; root defaults to KINFORMER_ROOT (set by spec/helper.lua);
-- log appends the server's stderr to a file, quiet discards it (default: inherited).
-- Raises if the server does not come up.
function _M.start(opts)
  opts = opts or {}
  local root = opts.root or rawget(_G, "KINFORMER_ROOT") or "."
  local argv = { opts.python or "python3", root .. "/tools/fake-apiserver/server.py",
                 "--exit-with-parent" }
  for _, a in ipairs(opts.args or {}) do argv[#argv + 1] = tostring(a) end
  local words = {}
  for i, a in ipairs(argv) do words[i] = quote(a) end
  local redirect = ""
  if opts.log then
    redirect = " 2>>" .. quote(opts.log)
  elseif opts.quiet then
    redirect = " 2>/dev/null"
  end
  -- The shell prints its pid, then exec's the server in its place: same pid, and the
  -- server's parent is this Lua process (which --exit-with-parent watches).
  local proc = assert(io.popen("echo $$; exec " .. table.concat(words, " ") .. redirect, "r"))
  local pid = tonumber(proc:read("l"))
  local url = proc:read("l")
  if not pid or not url or not url:match("^https?://127%.0%.0%.1:%d+$") then
    proc:close()
    error("fake apiserver did not start (args: " .. table.concat(argv, " ", 3) .. ")", 2)
  end
  local srv = setmetatable({ url = url, pid = pid, port = tonumber(url:match(":(%d+)$")),
                             _proc = proc }, Server)
  running[pid] = srv
  return srv
end

--- srv:stop(): SIGTERM, wait up to 5 s, then SIGKILL; reaps the process. Idempotent.
function Server:stop()
  if self.stopped then return end
  self.stopped = true
  running[self.pid] = nil
  os.execute("kill -TERM " .. self.pid .. " 2>/dev/null")
  local deadline = socket.gettime() + 5
  while alive(self.pid) and socket.gettime() < deadline do socket.sleep(0.02) end
  if alive(self.pid) then os.execute("kill -KILL " .. self.pid .. " 2>/dev/null") end
  self._proc:close()
end

Server.__gc = Server.stop

--- srv:request(method, path, body, headers) -> code, decoded, headers, raw
-- body: a table (sent as JSON) or a string. decoded is the JSON-decoded response when it
-- decodes, else the raw text. On a transport error: nil, message.
function Server:request(method, path, body, headers)
  local hdrs = {}
  for k, v in pairs(headers or {}) do hdrs[k:lower()] = v end
  local source
  if body ~= nil then
    if type(body) ~= "string" then body = cjson.encode(body) end
    hdrs["content-type"] = hdrs["content-type"] or "application/json"
    hdrs["content-length"] = tostring(#body)
    source = ltn12.source.string(body)
  end
  local out = {}
  -- HTTPS (--tls-cert) goes through LuaSec; the test certificate is not verified.
  local client = http
  if self.url:match("^https:") then client = require "ssl.https" end
  local ok, code, rh = client.request{ url = self.url .. path, method = method, headers = hdrs,
                                       source = source, sink = ltn12.sink.table(out),
                                       verify = "none" }
  if not ok then return nil, code end
  local raw = table.concat(out)
  local okj, decoded = pcall(cjson.decode, raw)
  return code, okj and decoded or raw, rh, raw
end

--- srv:control(method, path, body) -> decoded body of a control call; raises unless 200.
function Server:control(method, path, body)
  local code, decoded, _, raw = self:request(method, path, body)
  if code ~= 200 then
    error(("%s %s -> %s %s"):format(method, path, tostring(code), tostring(raw)), 3)
  end
  return decoded
end

--- srv:requests() -> array of {method, path, query = {param = value}, time}
function Server:requests() return self:control("GET", "/_fake/requests") end

--- srv:requests_to(method, pattern) -> the logged requests with that method whose path
-- matches the Lua pattern, oldest first
function Server:requests_to(method, pattern)
  local out = {}
  for _, q in ipairs(self:requests()) do
    if q.method == method and q.path:find(pattern) then out[#out + 1] = q end
  end
  return out
end
function Server:clear_requests() return self:control("DELETE", "/_fake/requests") end

--- srv:fault(rule or {rule, ...}): add fault rules (format: docs/fake-apiserver.md)
function Server:fault(rules) return self:control("POST", "/_fake/faults", rules) end
function Server:clear_faults() return self:control("DELETE", "/_fake/faults") end

--- srv:state(resource, namespace) -> {resourceVersion = "N", items = {...}}
function Server:state(resource, namespace)
  local q = "/_fake/state?resource=" .. resource
  if namespace then q = q .. "&namespace=" .. namespace end
  return self:control("GET", q)
end

--- srv:objects(list[, resource]) bulk create-or-replace -> {created, updated, resourceVersion}
function Server:objects(list, resource)
  return self:control("POST", "/_fake/objects" .. (resource and "?resource=" .. resource or ""), list)
end

--- srv:modify(resource, count[, opts]) -> {modified, first_resourceVersion, ...}
-- opts: namespace, label_selector, rate (events/s, runs in the background), hold (prepare
-- the events without publishing them; srv:release() publishes them as one burst)
function Server:modify(resource, count, opts)
  local body = { resource = resource, count = count }
  for k, v in pairs(opts or {}) do body[k] = v end
  return self:control("POST", "/_fake/modify", body)
end

function Server:release() return self:control("POST", "/_fake/release") end

--- srv:snapshot() -> {resourceVersion, objects}: save the state for srv:restart{restore = true}
function Server:snapshot() return self:control("POST", "/_fake/snapshot") end

--- srv:restart{ seconds = 5, restore = false } -> {down, restore, resourceVersion}: the server
-- stops listening and cuts every connection for `seconds`, then comes back on the same port
-- (with restore: in the state srv:snapshot() saved, as after an etcd restore). Returns at once;
-- srv:wait_up() waits for the end of the outage.
function Server:restart(opts)
  opts = opts or {}
  return self:control("POST", "/_fake/restart", { seconds = opts.seconds or 5,
                                                   restore = opts.restore or false })
end

--- srv:wait_up(timeout) -> true once the server answers again (false after timeout seconds)
function Server:wait_up(timeout)
  local deadline = socket.gettime() + (timeout or 15)
  repeat
    if self:request("GET", "/_fake/info") == 200 then return true end
    socket.sleep(0.05)
  until socket.gettime() > deadline
  return false
end
function Server:compact() return self:control("POST", "/_fake/compact") end
function Server:watches() return self:control("GET", "/_fake/watches") end
function Server:info() return self:control("GET", "/_fake/info") end
function Server:churn(rate) return self:control("POST", "/_fake/churn", { rate = rate }) end

--- srv:versions(resource[, namespace]) -> { ["ns/name" or "name"] = resourceVersion, ... }
function Server:versions(resource, namespace)
  local m = {}
  for _, o in ipairs(self:state(resource, namespace).items) do
    local ns = o.metadata.namespace
    m[(ns and ns ~= "" and ns .. "/" or "") .. o.metadata.name] = o.metadata.resourceVersion
  end
  return m
end

--- fake.versions(store) -> the same map for a kinformer store (or anything with list()).
function _M.versions(store)
  local key_of = require("kinformer").key_of
  local m = {}
  for _, o in ipairs(store:list()) do m[key_of(o)] = o.metadata.resourceVersion end
  return m
end

--- fake.same_versions(a, b) -> whether two such maps are equal
function _M.same_versions(a, b)
  for k, v in pairs(a) do if b[k] ~= v then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end

--- srv:resource_version() -> the current resourceVersion as a number
function Server:resource_version() return tonumber(self:info().resourceVersion) end

--- fake.kubeconfig(srv, {token = T, namespace = NS, ca = FILE, insecure = bool, path = P})
-- -> path of a kubeconfig file for kubectl. Note: kubectl sends a token only over HTTPS, so a
-- --token server needs --tls-cert/--tls-key and ca = the certificate (or insecure = true).
function _M.kubeconfig(srv, opts)
  opts = opts or {}
  local path = opts.path or os.tmpname()
  local user = opts.token and ("{token: " .. opts.token .. "}") or "{}"
  local tls = ""
  if opts.ca then tls = ', certificate-authority: "' .. opts.ca .. '"' end
  if opts.insecure then tls = tls .. ", insecure-skip-tls-verify: true" end
  local f = assert(io.open(path, "w"))
  f:write(([[
apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: "%s"%s}
contexts:
- name: fake
  context: {cluster: fake, user: fake, namespace: %s}
current-context: fake
users:
- name: fake
  user: %s
]]):format(srv.url, tls, opts.namespace or "default", user))
  f:close()
  return path
end

-- Stop whatever is still running when the Lua state closes (a spec that forgot stop()).
_M._sentinel = proc.at_exit(function()
  for _, srv in pairs(running) do pcall(Server.stop, srv) end
end)

return _M
