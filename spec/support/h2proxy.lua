-- Debian's nginx as a TLS HTTP/2 reverse proxy in front of an HTTP/1.1 upstream (the fake API
-- server), for specs and benchmarks: clients speak h2 to nginx, nginx HTTP/1.1 to the upstream.
--
--   local h2proxy = require "support.h2proxy"
--   local ok, why = h2proxy.available()
--   local p = h2proxy.start{ upstream = srv.url, certs = c,          -- support.certs
--                            servers = { { max_streams = 128 }, { max_streams = 2 },
--                                        { plain = true } } }     -- HTTP/1.1, no TLS
--   finally(function() p:stop() end)
--   p.urls[1], p.urls[2]          -- https://127.0.0.1:PORT, one per server block
--   p:requests()                  -- every request logged so far (across restarts), see below
--   p:restart(0.5)                -- stop nginx (every connection cut), start it again
--   p:freeze() / p:thaw()         -- SIGSTOP / SIGCONT the worker: connections go silent
--
-- One worker process. Watches stream through (proxy_buffering off, hour-long read timeouts).
-- The access log has one line per finished request: the worker's pid, nginx's connection
-- number ($connection: one per TCP connection), the request's number on it, the protocol
-- ("HTTP/2.0"), the status, whether TLS resumed a session, the server port, the response's
-- Content-Encoding, the body bytes sent and the request.
local socket = require "socket"
local openresty = require "support.openresty"

local _M = {}

local Proxy = {}
Proxy.__index = Proxy

local function read_file(path)
  local f = io.open(path, "r")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

--- h2proxy.available() -> true | false, reason
function _M.available()
  local p = io.popen("nginx -V 2>&1")
  local out = p:read("a")
  p:close()
  if not out:find("nginx version", 1, true) then return false, "nginx is not installed" end
  if not out:find("http_v2_module", 1, true) then return false, "nginx has no HTTP/2 module" end
  return true
end

-- One server block: TLS with HTTP/2, or (plain = true) HTTP/1.1 without TLS for comparisons.
local function server_block(s, certs)
  local listen = ("listen 127.0.0.1:%d;"):format(s.port)
  if not s.plain then
    listen = ("listen 127.0.0.1:%d ssl http2;\n        ssl_certificate %s;\n"
      .. "        ssl_certificate_key %s;\n        http2_max_concurrent_streams %d;")
      :format(s.port, certs.server, certs.server_key, s.max_streams or 128)
  end
  return ([[
    server {
        %s
        keepalive_timeout 600s;
        keepalive_requests 100000;
        location / {
            proxy_pass http://api;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 3600s;
            proxy_send_timeout 3600s;
        }
    }
]]):format(listen)
end

local function conf(o)
  local servers = {}
  for _, s in ipairs(o.servers) do servers[#servers + 1] = server_block(s, o.certs) end
  return ([[
worker_processes 1;
error_log logs/error.log notice;
pid logs/nginx.pid;
events { worker_connections 4096; }
http {
    log_format h2 '$pid $connection $connection_requests $server_protocol $status '
                  '$ssl_session_reused $server_port $sent_http_content_encoding '
                  '$body_bytes_sent "$request"';
    access_log logs/access.log h2;
    client_body_temp_path logs/client_body;
    proxy_temp_path logs/proxy;
    fastcgi_temp_path logs/fastcgi;
    uwsgi_temp_path logs/uwsgi;
    scgi_temp_path logs/scgi;
    upstream api {
        server %s;
        keepalive 32;
    }
%s}
]]):format(o.upstream:gsub("^https?://", ""), table.concat(servers))
end

--- h2proxy.start{ upstream = url, certs = c, servers = { { max_streams = n }, ... } } -> proxy
function _M.start(o)
  local self = setmetatable({ o = o, old_logs = {}, urls = {} }, Proxy)
  o.servers = o.servers or { {} }
  local used = {}
  for i, s in ipairs(o.servers) do
    while not s.port or used[s.port] do s.port = openresty.free_port() end
    used[s.port] = true
    self.urls[i] = (s.plain and "http" or "https") .. "://127.0.0.1:" .. s.port
  end
  self.conf = conf(o)
  self.inst = openresty.start{ conf = self.conf, name = "h2proxy" }
  return self
end

--- proxy:workers() -> pids of the worker processes
function Proxy:workers()
  local out = {}
  for _, c in ipairs(self.inst:children()) do out[#out + 1] = c.pid end
  return out
end

local function parse(text, into)
  for line in text:gmatch("[^\n]+") do
    local pid, conn, n, proto, status, reused, port, encoding, bytes, req =
      line:match('^(%d+) (%d+) (%d+) (%S+) (%d+) (%S+) (%d+) (%S+) (%d+) "(.*)"$')
    if pid then
      local method, path = req:match("^(%S+) (%S+)")
      into[#into + 1] = { pid = tonumber(pid), conn = tonumber(conn), conn_requests = tonumber(n),
                          proto = proto, status = tonumber(status), reused = reused == "r",
                          port = tonumber(port), method = method, path = path,
                          encoding = encoding ~= "-" and encoding or nil, bytes = tonumber(bytes),
                          watch = path ~= nil and path:find("watch=true", 1, true) ~= nil }
    end
  end
  return into
end

--- proxy:requests() -> { { pid, conn, conn_requests, proto, status, reused, port, encoding,
-- bytes, method, path, watch }, ... } in log order, from every run of nginx (restarts included)
function Proxy:requests()
  local out = {}
  for _, t in ipairs(self.old_logs) do parse(t, out) end
  return parse(read_file(self.inst.prefix .. "/logs/access.log") or "", out)
end

--- proxy:restart(seconds): stops nginx (its connections end), waits, starts it again on the
-- same ports. Connection numbers start over in the new run; its requests are told apart by pid.
function Proxy:restart(seconds)
  self.old_logs[#self.old_logs + 1] = read_file(self.inst.prefix .. "/logs/access.log") or ""
  self.inst:stop()
  socket.sleep(seconds or 0)
  self.inst = openresty.start{ conf = self.conf, name = "h2proxy" }
end

--- proxy:freeze(): SIGSTOP the workers: their connections stay open but carry nothing.
function Proxy:freeze()
  self.frozen = self:workers()
  for _, pid in ipairs(self.frozen) do os.execute("kill -STOP " .. pid) end
end

--- proxy:thaw(): SIGCONT what freeze stopped.
function Proxy:thaw()
  for _, pid in ipairs(self.frozen or {}) do os.execute("kill -CONT " .. pid) end
  self.frozen = nil
end

--- proxy:stop(): thaws, stops nginx, removes its directory. Idempotent.
function Proxy:stop()
  if self.frozen then self:thaw() end
  self.inst:stop()
end

return _M
