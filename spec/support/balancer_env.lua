-- The world of spec/openresty_balancer_spec.lua: backends that log every request, the nginx of
-- kinformer.ngx.balancer in a given model, a keep-alive HTTP client (one connection per nginx
-- worker), wrk, and EndpointSlice builders.
--
--   local env = require "support.balancer_env"
--   local be = env.backends{ P = { addrs }, Q = { addrs }, slow = "127.0.0.5", reset = "127.0.0.6" }
--   local lb = env.balancer{ model = "shared", api = srv.url, workers = 4 }
--   local conns = env.worker_conns(lb.port, 4)     -- { [pid] = conn }
--   local answers = conns[pid]:pipeline{ { host = "web" }, ... }
--
-- Every backend answers "<its address>:<its port>\n" and writes "$msec" per request to its own
-- access log (be:log_times(id, from_offset)). The slow backend answers after 50 ms, the reset
-- one closes the connection without an answer (nginx's `return 444`): the balancer's try fails.
local openresty = require "support.openresty"
local socket = require "socket"

local _M = {}

local preamble, TEMP_PATHS = openresty.preamble, openresty.TEMP_PATHS

--- env.slice(name, svc, port, eps, port_name) -> an EndpointSlice of Service demo/<svc>;
-- eps = { { address, ready, serving (default: ready), terminating (default false) }, ... }
function _M.slice(name, svc, port, eps, port_name)
  local endpoints = {}
  for i, e in ipairs(eps) do
    local serving = e[3]
    if serving == nil then serving = e[2] end
    endpoints[i] = { addresses = { e[1] }, conditions = { ready = e[2], serving = serving,
                     terminating = e[4] or false } }
  end
  return {
    apiVersion = "discovery.k8s.io/v1", kind = "EndpointSlice",
    metadata = { name = name, namespace = "demo",
                 labels = { ["kubernetes.io/service-name"] = svc } },
    addressType = "IPv4",
    ports = { { name = port_name or "http", port = port, protocol = "TCP" } },
    endpoints = endpoints,
  }
end

local read_file = openresty.read_file

--- env.ports(addrs) -> two different ports free on every address
function _M.ports(addrs)
  local p = openresty.free_port(addrs)
  for _ = 1, 20 do
    local q = openresty.free_port(addrs)
    if q ~= p then return p, q end
  end
  error("no second free port")
end

--- env.backends{ servers = { { addr, port, kind = "fast" | "slow" | "reset" }, ... } } -> instance
-- with :log_path(id), :log_size(id), :log_times(id, offset) -> { msec, ... }
function _M.backends(o)
  local servers = {}
  for _, s in ipairs(o.servers) do
    local addr, port, kind = s[1], s[2], s.kind or "fast"
    local body
    if kind == "slow" then
      body = 'content_by_lua_block { ngx.sleep(0.05) ngx.say(ngx.var.server_addr, ":", ngx.var.server_port) }'
    elseif kind == "reset" then
      body = "return 444;"
    else
      body = 'return 200 "$server_addr:$server_port\\n";'
    end
    servers[#servers + 1] = ("    server { listen %s:%d reuseport; access_log logs/%s_%d.log ms; " ..
      "location / { %s } }"):format(addr, port, addr, port, body)
  end
  local conf = preamble(2) .. "http {\n" .. TEMP_PATHS ..
    "    keepalive_requests 100000;\n    log_format ms '$msec';\n" ..
    table.concat(servers, "\n") .. "\n}\n"
  local b = openresty.start{ conf = conf, name = "backends" }
  function b:log_path(id)
    return self.prefix .. "/logs/" .. id:gsub(":", "_") .. ".log"
  end
  function b:log_size(id)
    local s = read_file(self:log_path(id))
    return s and #s or 0
  end
  -- The times ($msec) of the requests logged from byte offset on.
  function b:log_times(id, offset)
    local s = read_file(self:log_path(id)) or ""
    local out = {}
    for line in s:sub((offset or 0) + 1):gmatch("[^\n]+") do out[#out + 1] = tonumber(line) end
    return out
  end
  return b
end

--- env.balancer{ model =, api = url, workers = 4, interval = 0.05, max_fails =, fail_timeout =,
-- cool_down = } -> instance (with .port): nginx running kinformer.ngx.balancer. Requests: the
-- target is the X-Target header, else "demo/<Host>:http"; the policy the X-Policy header
-- (policies "ch": chash on X-Key, "st": sticky with cookie "route"). Every answer carries
-- X-Worker: <pid>. /status and /metrics: kngx.status() (JSON) and kngx.metrics(); /whoami: the pid.
function _M.balancer(o)
  local port = openresty.free_port()
  local init = o.model == "shared"
    and 'init_by_lua_block { require("kinformer.ngx").shared_memory("16m") }' or ""
  local conf = openresty.lua_conf{ workers = o.workers or 4, dir = "/nonexistent", port = port,
    http = ([[
    lua_shared_dict kinformer 1m;
    lua_shared_dict kinformer_endpoints 4m;
    %s
    init_worker_by_lua_block {
        local b = require "kinformer.ngx.balancer"
        assert(b.policy("ch", { algorithm = "chash", hash_by = "header:X-Key" }))
        assert(b.policy("st", { algorithm = "sticky", cookie = "route" }))
        assert(b.start{ model = "%s", client = { server = "%s" }, interval = %s,
                        max_fails = %d, fail_timeout = %s, cool_down = %s })
    }
    upstream kb {
        server 0.0.0.1;
        balancer_by_lua_block {
            local p = ngx.var.http_x_policy
            if p == "" then p = nil end
            require("kinformer.ngx.balancer").balance(ngx.var.http_x_target or
              ("demo/" .. ngx.var.host .. ":http"), p)
        }
        keepalive 64;
    }
]]):format(init, o.model, o.api, tostring(o.interval or 0.05), o.max_fails or 1,
           tostring(o.fail_timeout or 10), tostring(o.cool_down or 10)),
    locations = [[
        add_header X-Worker $pid always;
        keepalive_requests 100000;
        location / {
            proxy_pass http://kb;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_connect_timeout 2s;
            error_page 500 = @unavailable;
            log_by_lua_block { require("kinformer.ngx.balancer").log() }
        }
        location @unavailable {
            content_by_lua_block { require("kinformer.ngx.balancer").unavailable() }
        }
        location = /status {
            default_type application/json;
            content_by_lua_block { ngx.say(require("cjson").encode(require("kinformer.ngx").status())) }
        }
        location = /metrics {
            content_by_lua_block { ngx.print(require("kinformer.ngx").metrics()) }
        }
        location = /whoami { return 200 "$pid"; }
]] }
  local inst = openresty.start{ conf = conf, name = "balancer-" .. o.model }
  inst.port = port
  return inst
end

-- ---- a keep-alive HTTP/1.1 client (pipelining) ----

local Conn = {}
Conn.__index = Conn

--- env.connect(port) -> conn | nil, err
function _M.connect(port)
  local c = socket.tcp()
  c:settimeout(10)
  local ok, err = c:connect("127.0.0.1", port)
  if not ok then return nil, err end
  c:setoption("tcp-nodelay", true)
  return setmetatable({ sock = c }, Conn)
end

local function read_response(c)
  local line, err = c:receive("*l")
  if not line then error("connection lost: " .. tostring(err)) end
  local code = tonumber(line:match("^HTTP/%d%.%d (%d+)"))
  local headers, cookies = {}, {}
  while true do
    local h = assert(c:receive("*l"))
    if h == "" then break end
    local k, v = h:match("^([^:]+):%s*(.-)%s*$")
    k = k:lower()
    if k == "set-cookie" then cookies[#cookies + 1] = v end
    headers[k] = v
  end
  local body
  if headers["content-length"] then
    body = assert(c:receive(tonumber(headers["content-length"])))
  elseif (headers["transfer-encoding"] or ""):lower() == "chunked" then
    local parts = {}
    while true do
      local size = tonumber(assert(c:receive("*l")):match("^%x+"), 16)
      if size == 0 then
        repeat local l = assert(c:receive("*l")) until l == ""
        break
      end
      parts[#parts + 1] = assert(c:receive(size))
      assert(c:receive("*l"))
    end
    body = table.concat(parts)
  else
    error("response without a length: " .. line)
  end
  return { code = code, headers = headers, cookies = cookies, body = body,
           text = code == 200 and body:gsub("%s+$", "") or (tostring(code) .. " " .. body) }
end

--- conn:pipeline{ { host =, path = "/", headers = { name = value } }, ... } -> { response, ... }
-- response: { code, headers (lower-case names), cookies = { set-cookie values }, body,
-- text = the trimmed body of a 200, else "<code> <body>" }
function Conn:pipeline(reqs)
  local out = {}
  for i, r in ipairs(reqs) do
    local h = { ("GET %s HTTP/1.1\r\nHost: %s\r\n"):format(r.path or "/", r.host or "localhost") }
    for k, v in pairs(r.headers or {}) do h[#h + 1] = k .. ": " .. v .. "\r\n" end
    h[#h + 1] = "\r\n"
    out[i] = table.concat(h)
  end
  assert(self.sock:send(table.concat(out)))
  local res = {}
  for i = 1, #reqs do res[i] = read_response(self.sock) end
  return res
end

function Conn:get(host, headers, path)
  return self:pipeline{ { host = host, headers = headers, path = path } }[1]
end

function Conn:close() self.sock:close() end

--- env.worker_conns(port, n, timeout) -> { [pid] = conn, ... }, one keep-alive connection to each
-- of the n workers (new connections until each worker took one: reuseport spreads them).
function _M.worker_conns(port, n, timeout)
  local conns, count = {}, 0
  local deadline = socket.gettime() + (timeout or 10)
  while count < n do
    assert(socket.gettime() < deadline, "no connection reached every worker (" .. count .. ")")
    local c = assert(_M.connect(port))
    local pid = c:get("localhost", nil, "/whoami").body
    if conns[pid] then c:close() else conns[pid], count = c, count + 1 end
  end
  return conns
end

--- env.each_worker_once(port, n, req, timeout) -> { [pid] = response }: req on new connections
-- (Connection: close) until each of the n workers answered once. For answers after which nginx
-- closes the connection anyway (an error_page for a 500 turns keep-alive off).
function _M.each_worker_once(port, n, req, timeout)
  local out, count = {}, 0
  local deadline = socket.gettime() + (timeout or 10)
  local headers = { Connection = "close" }
  for k, v in pairs(req.headers or {}) do headers[k] = v end
  while count < n do
    assert(socket.gettime() < deadline, "requests did not reach every worker (" .. count .. ")")
    local c = assert(_M.connect(port))
    local r = c:pipeline{ { host = req.host, path = req.path, headers = headers } }[1]
    c:close()
    local pid = r.headers["x-worker"]
    if not out[pid] then out[pid], count = r, count + 1 end
  end
  return out
end

--- env.close_all(conns)
function _M.close_all(conns)
  for _, c in pairs(conns or {}) do pcall(Conn.close, c) end
end

-- ---- wrk ----

-- A wrk script that counts the answers other than 200 by status and X-Kinformer-Reason, and
-- prints them at the end as lines "answered <status> <reason or -> <count>".
local COUNT_SCRIPT = [[
local threads = {}
function setup(thread) threads[#threads + 1] = thread end
function init() counts = {} end
function response(status, headers)
  if status ~= 200 then
    local k = status .. " " .. (headers["X-Kinformer-Reason"] or "-")
    counts[k] = (counts[k] or 0) + 1
  end
end
function done()
  local all = {}
  for _, t in ipairs(threads) do
    for k, n in pairs(t:get("counts") or {}) do all[k] = (all[k] or 0) + n end
  end
  for k, n in pairs(all) do io.write("answered ", k, " ", n, "\n") end
end
]]

--- env.wrk_start{ port, host, headers = {}, seconds, connections = 16, threads = 2,
-- count = false } -> handle (wrk runs in the background); env.wrk_result(handle) -> { requests,
-- non2xx, errors, socket_errors = { connect, read, write, timeout }, text, answers =
-- { ["<status> <reason or ->"] = n } (with count: the
-- answers other than 200; slower: wrk parses every answer in Lua) }
function _M.wrk_start(o)
  local hs = { "-H 'Host: " .. o.host .. "'" }
  for k, v in pairs(o.headers or {}) do hs[#hs + 1] = "-H '" .. k .. ": " .. v .. "'" end
  local script = ""
  if o.count then
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(COUNT_SCRIPT)
    f:close()
    script = "-s " .. path
  end
  local cmd = ("wrk -t%d -c%d -d%ds --timeout 5s %s %s http://127.0.0.1:%d/ 2>&1")
    :format(o.threads or 2, o.connections or 16, o.seconds, script, table.concat(hs, " "), o.port)
  if o.count then cmd = "(" .. cmd .. "; rm -f " .. script:sub(4) .. ")" end
  return assert(io.popen(cmd, "r"))
end

function _M.wrk_result(p)
  local text = p:read("a")
  p:close()
  local requests = tonumber(text:match("(%d+) requests in"))
  local non2xx = tonumber(text:match("Non%-2xx or 3xx responses: (%d+)")) or 0
  local errors = 0
  local socket_errors = { connect = 0, read = 0, write = 0, timeout = 0 }
  local c, r, w, t = text:match("Socket errors: connect (%d+), read (%d+), write (%d+), timeout (%d+)")
  if c then
    errors = tonumber(c) + tonumber(r) + tonumber(w) + tonumber(t)
    socket_errors = { connect = tonumber(c), read = tonumber(r), write = tonumber(w), timeout = tonumber(t) }
  end
  local answers = {}
  for k, n in text:gmatch("answered (%d+ %S+) (%d+)") do answers[k] = tonumber(n) end
  return { requests = requests, non2xx = non2xx, errors = errors, socket_errors = socket_errors,
           text = text, answers = answers }
end

return _M
