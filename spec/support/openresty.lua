-- Run nginx instances (the OpenResty example, backends, a static upstream) for specs and benches.
--
--   local openresty = require "support.openresty"
--   local ok, why = openresty.available()
--   local port = openresty.free_port{ "127.0.0.2", "127.0.0.3" }
--   local be = openresty.backends{ port = port, addrs = { "127.0.0.2", "127.0.0.3" } }
--   local r = openresty.router{ port = openresty.free_port(), env = { KINFORMER_SERVER = url } }
--   finally(function() r:stop() be:stop() end)
--   local code, body = openresty.get(r.port, "web.demo", "/")
--
-- Each instance lives in a temporary prefix directory (logs, pid, temp paths) removed by stop();
-- nginx daemonizes, so every instance still running when the Lua state closes is stopped too.
-- The router's configuration is examples/openresty/nginx.conf itself, with its listen address,
-- worker count and checkout paths replaced.
local socket = require "socket"
local proc = require "support.proc"

local _M = {}

local Instance = {}
Instance.__index = Instance

local running = {} -- prefix -> instance

local quote = proc.quote

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok, _, code = p:close()
  return ok, out, code
end

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
_M.read_file = read_file -- (path) -> its content, or nil

local function write_file(path, s)
  local f = assert(io.open(path, "w"))
  f:write(s)
  f:close()
end

local function root()
  return rawget(_G, "KINFORMER_ROOT") or "."
end

local alive = proc.alive
_M.alive = alive

_M.LUA_MODULE = "/usr/lib/nginx/modules/ngx_http_lua_module.so"

--- openresty.available() -> true | false, reason
function _M.available()
  if not sh("command -v nginx >/dev/null") then return false, "nginx is not installed" end
  if not io.open(_M.LUA_MODULE) then return false, "libnginx-mod-http-lua is not installed" end
  if not io.open(root() .. "/build/luajit/kinformer/core.so") then
    return false, "build/luajit/kinformer/core.so is not built (libluajit2-5.1-dev missing?)"
  end
  return true
end

--- openresty.free_port([addrs]) -> a TCP port free on every address (default 127.0.0.1)
function _M.free_port(addrs)
  addrs = addrs or { "127.0.0.1" }
  for _ = 1, 50 do
    local s = assert(socket.bind(addrs[1], 0))
    local _, port = s:getsockname()
    s:close()
    local ok = true
    for i = 2, #addrs do
      local t = socket.bind(addrs[i], port)
      if t then t:close() else ok = false end
    end
    if ok then return tonumber(port) end
  end
  error("no free port on " .. table.concat(addrs, ", "))
end

-- Lines every configuration starts with.
function _M.preamble(workers)
  return ([[
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module %s;
worker_processes %d;
error_log logs/error.log notice;
pid logs/nginx.pid;
events { worker_connections 4096; }
]]):format(_M.LUA_MODULE, workers)
end

_M.TEMP_PATHS = [[
    access_log off;
    client_body_temp_path logs/client_body;
    proxy_temp_path logs/proxy;
    fastcgi_temp_path logs/fastcgi;
    uwsgi_temp_path logs/uwsgi;
    scgi_temp_path logs/scgi;
]]

--- openresty.lua_conf{ workers = 1, dir = D, port = P, env = { "NAME", ... }, http = text,
-- locations = text } -> the nginx.conf of an nginx that runs this checkout's kinformer (the
-- LuaJIT build) with the Lua modules of directory D, declares the env variables, adds `http`
-- inside the http block and serves `locations` on 127.0.0.1:P (reuseport).
function _M.lua_conf(o)
  local root = rawget(_G, "KINFORMER_ROOT") or "."
  local env = {}
  for _, name in ipairs(o.env or {}) do env[#env + 1] = "env " .. name .. ";\n" end
  return _M.preamble(o.workers or 1) .. table.concat(env) .. "http {\n" .. _M.TEMP_PATHS .. ([[
    lua_package_path "%s/?.lua;%s/lua/?.lua;%s/lua/?/init.lua;;";
    lua_package_cpath "%s/build/luajit/?.so;;";
%s
    server {
        listen 127.0.0.1:%d reuseport;
%s
    }
}
]]):format(o.dir, root, root, root, o.http or "", o.port, o.locations or "")
end

--- openresty.start{ conf = text, env = { NAME = value }, name = "router" } -> instance
-- Writes conf into a fresh prefix and starts nginx there. Raises when it does not come up.
function _M.start(opts)
  local ok, dir = sh("mktemp -d /tmp/kinformer-nginx.XXXXXX")
  dir = dir:gsub("%s+$", "")
  assert(ok and dir ~= "", "mktemp failed: " .. dir)
  os.execute("chmod 755 " .. quote(dir) .. " && mkdir -p " .. quote(dir .. "/logs"))
  write_file(dir .. "/nginx.conf", opts.conf)
  local envs = {}
  for k, v in pairs(opts.env or {}) do envs[#envs + 1] = k .. "=" .. quote(v) end
  local self = setmetatable({ prefix = dir, name = opts.name or "nginx", env = envs }, Instance)
  running[dir] = self
  -- By its full path: a binary upgrade (USR2) executes argv[0] again, without a PATH search.
  local _, nginx = sh("command -v nginx")
  local started, out = sh(table.concat(envs, " ") .. " " .. quote(nginx:gsub("%s+$", "")) .. " -p " .. quote(dir) ..
    " -c nginx.conf -e logs/error.log")
  local pid
  local deadline = socket.gettime() + 5
  while socket.gettime() < deadline do
    pid = tonumber(read_file(dir .. "/logs/nginx.pid") or "")
    if pid then break end
    socket.sleep(0.01)
  end
  if not started or not pid then
    local log = read_file(dir .. "/logs/error.log") or ""
    self:stop()
    error(self.name .. " did not start: " .. out .. log, 2)
  end
  self.pid = pid
  return self
end

--- instance:signal(sig): nginx -s quit|stop|reload|reopen
function Instance:signal(sig)
  local ok, out = sh(table.concat(self.env, " ") .. " nginx -p " .. quote(self.prefix) ..
    " -c nginx.conf -e logs/error.log -s " .. sig)
  assert(ok, "nginx -s " .. sig .. ": " .. out)
end

--- instance:reload(): nginx -s reload, then waits until the old workers are gone and the new
-- ones run (the number of children back to what it was, none shutting down). Raises otherwise.
function Instance:reload(timeout)
  local before = self:children()
  local old = {}
  for _, c in ipairs(before) do old[c.pid] = true end
  self:signal("reload")
  local deadline = socket.gettime() + (timeout or 10)
  while socket.gettime() < deadline do
    local now = self:children()
    local fresh = #now == #before
    for _, c in ipairs(now) do
      if old[c.pid] or c.shutting_down then fresh = false end
    end
    if fresh then return now end
    socket.sleep(0.05)
  end
  error(self.name .. ": old workers still running 10 s after the reload")
end

--- instance:children() -> { { pid =, title =, shutting_down = bool }, ... } of the master
function Instance:children()
  local out = {}
  local _, list = sh("ps -o pid= --ppid " .. self.pid)
  for pid in list:gmatch("%d+") do
    local cmd = (read_file("/proc/" .. pid .. "/cmdline") or ""):gsub("%z", " ")
    if alive(pid) then
      out[#out + 1] = { pid = tonumber(pid), title = cmd,
                        shutting_down = cmd:find("shutting down", 1, true) ~= nil }
    end
  end
  table.sort(out, function(a, b) return a.pid < b.pid end)
  return out
end

--- openresty.threads(pid) -> the number of threads of a process (0 when it is gone)
function _M.threads(pid)
  local _, out = sh("ls /proc/" .. pid .. "/task 2>/dev/null")
  local n = 0
  for _ in out:gmatch("%d+") do n = n + 1 end
  return n
end

--- openresty.rss_kb(pid) -> resident set size in KiB
function _M.rss_kb(pid)
  local s = read_file("/proc/" .. pid .. "/status") or ""
  return tonumber(s:match("VmRSS:%s+(%d+)"))
end

--- instance:log() -> the error log's content
function Instance:log()
  return read_file(self.prefix .. "/logs/error.log") or ""
end

--- instance:stop(): nginx -s stop, waits for the master (SIGKILL after 5 s), removes the prefix
-- unless KINFORMER_KEEP_NGINX is set. Idempotent.
function Instance:stop()
  if self.stopped then return end
  self.stopped = true
  running[self.prefix] = nil
  if self.pid and alive(self.pid) then
    local kids = self:children()
    os.execute("kill -TERM " .. self.pid .. " 2>/dev/null")
    local deadline = socket.gettime() + 5
    while alive(self.pid) and socket.gettime() < deadline do socket.sleep(0.02) end
    if alive(self.pid) then os.execute("kill -KILL " .. self.pid .. " 2>/dev/null") end
    for _, c in ipairs(kids) do
      if alive(c.pid) then os.execute("kill -KILL " .. c.pid .. " 2>/dev/null") end
    end
  end
  if os.getenv("KINFORMER_KEEP_NGINX") then
    io.stderr:write(self.name, " kept in ", self.prefix, "\n")
  else
    os.execute("rm -rf " .. quote(self.prefix))
  end
end

--- openresty.backends{ port = P, addrs = { "127.0.0.2", ... }, workers = 1 } -> instance
-- One tiny HTTP server per address, all on port P, each answering its own address.
function _M.backends(opts)
  local servers = {}
  for _, a in ipairs(opts.addrs) do
    servers[#servers + 1] = ("    server { listen %s:%d reuseport; location / { return 200 \"$server_addr\\n\"; } }")
      :format(a, opts.port)
  end
  local conf = _M.preamble(opts.workers or 1) .. "http {\n" .. _M.TEMP_PATHS .. "    keepalive_requests 100000;\n" ..
    table.concat(servers, "\n") .. "\n}\n"
  local b = _M.start{ conf = conf, name = "backends" }
  b.port, b.addrs = opts.port, opts.addrs
  return b
end

--- openresty.router{ port = P, workers = 2, env = {...}, worker_header = bool } -> instance
-- running the example (examples/openresty/nginx.conf and settings.lua) from this checkout.
-- worker_header: proxied answers carry "X-Worker: <pid of the nginx worker>" (specs).
function _M.router(opts)
  local r = root()
  local conf = assert(read_file(r .. "/examples/openresty/nginx.conf"))
  local n
  conf, n = conf:gsub("listen 127%.0%.0%.1:8080", "listen 127.0.0.1:" .. opts.port)
  assert(n == 1, "the example's listen line changed")
  conf, n = conf:gsub("\nworker_processes %d+;", "\nworker_processes " .. (opts.workers or 2) .. ";")
  assert(n == 1, "the example's worker_processes line changed")
  conf, n = conf:gsub("%$prefix/%?%.lua", r .. "/examples/openresty/?.lua")
  assert(n == 1, "the example's lua_package_path changed")
  conf = conf:gsub("%$prefix/%.%./%.%.", r)
  if opts.worker_header then
    conf, n = conf:gsub("(proxy_connect_timeout 2s;)", "%1\n            add_header X-Worker $pid;")
    assert(n == 1, "the example's proxy_connect_timeout line changed")
  end
  local inst = _M.start{ conf = conf, env = opts.env, name = opts.name or "router" }
  inst.port = opts.port
  return inst
end

--- openresty.static{ port = P, workers = 2, backends = { "127.0.0.2:P", ... } } -> instance
-- The same backends behind a plain upstream block (the benchmark's reference).
function _M.static(opts)
  local servers = {}
  for _, b in ipairs(opts.backends) do servers[#servers + 1] = "        server " .. b .. ";" end
  local conf = _M.preamble(opts.workers or 2) .. "http {\n" .. _M.TEMP_PATHS .. ([[
    upstream backends {
%s
        keepalive 64;
    }
    server {
        listen 127.0.0.1:%d reuseport;
        location / {
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_connect_timeout 2s;
        }
    }
}
]]):format(table.concat(servers, "\n"), opts.port)
  local inst = _M.start{ conf = conf, name = "static" }
  inst.port = opts.port
  return inst
end

--- openresty.get(port, host, path) -> code, body, raw response (a new connection per request;
-- nil, err on a transport error)
function _M.get(port, host, path)
  local c = socket.tcp()
  c:settimeout(5)
  local ok, err = c:connect("127.0.0.1", port)
  if not ok then return nil, err end
  c:send(("GET %s HTTP/1.0\r\nHost: %s\r\n\r\n"):format(path or "/", host or "localhost"))
  local data, rerr, partial = c:receive("*a")
  c:close()
  data = data or partial
  if not data or data == "" then return nil, rerr end
  local code = tonumber(data:match("^HTTP/%d%.%d (%d+)"))
  local body = data:match("\r\n\r\n(.*)$") or ""
  return code, body, data
end

--- openresty.set_of(list) -> { [v] = true } for each value of list
function _M.set_of(list)
  local s = {}
  for _, v in ipairs(list) do s[v] = true end
  return s
end

--- openresty.keys(set) -> its keys, sorted, joined with ","
function _M.keys(s)
  local out = {}
  for k in pairs(s) do out[#out + 1] = k end
  table.sort(out)
  return table.concat(out, ",")
end

--- openresty.converge{ port =, host =, want = { backend = true }, workers = 2, timeout = 5,
--                      t0 = now, min_quiet = 0.3 } -> seconds
-- For a router started with worker_header: polls host until each worker (told apart by
-- X-Worker) has answered only from `want` (backends: the answer bodies) for min_quiet seconds
-- (10 answers at least) and from every member of `want` since its last wrong answer. Returns
-- when the slowest worker got there (its last wrong answer or its first answer from a member),
-- in seconds after t0; raises after timeout. A worker that lags behind cannot hide: its wrong
-- answers show within min_quiet.
function _M.converge(o)
  local t0 = o.t0 or socket.gettime()
  local timeout, want, quiet = o.timeout or 5, o.want, o.min_quiet or 0.3
  local workers, nworkers = {}, 0
  local last, any_bad = nil, t0
  while socket.gettime() - t0 < timeout do
    local code, body, raw = _M.get(o.port, o.host, o.path)
    local t = socket.gettime()
    local pid = raw and raw:match("\r\nX%-Worker: (%d+)")
    local b = code == 200 and (body:gsub("%s+$", "")) or tostring(code) .. " " .. tostring(body)
    last = b
    if not pid then -- not proxied (an error page): from an unknown worker, so wrong for all
      any_bad = t
      for _, w in pairs(workers) do w.bad, w.seen, w.n = t, {}, 0 end
    else
      local w = workers[pid]
      if not w then
        w = { bad = any_bad, seen = {}, n = 0 }
        workers[pid] = w
        nworkers = nworkers + 1
      end
      if want[b] then
        w.n = w.n + 1
        w.seen[b] = w.seen[b] or t
      else
        w.bad, w.seen, w.n = t, {}, 0
      end
    end
    if nworkers == (o.workers or 2) then
      local done, took = true, 0
      for _, w in pairs(workers) do
        if t - w.bad < quiet or w.n < 10 then done = false end
        if w.bad > t0 then took = math.max(took, w.bad - t0) end
        for m in pairs(want) do
          if not w.seen[m] then done = false else took = math.max(took, w.seen[m] - t0) end
        end
      end
      if done then return took end
    end
  end
  error(("%s did not converge to %s in %g s in every worker; last answer %s")
    :format(o.host, _M.keys(want), timeout, tostring(last)), 2)
end

-- Stop whatever is still running when the Lua state closes.
_M._sentinel = proc.at_exit(function()
  for _, inst in pairs(running) do pcall(Instance.stop, inst) end
end)

return _M
