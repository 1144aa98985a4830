-- Run by spec/tls_spec.lua in a child interpreter: connects to a fake API server in every way
-- it can fail and succeed, and prints everything a user could see (errors, every status field,
-- every log line at debug level, the client's fields). The spec greps this output for secrets.
--   lua5.4 secret_probe.lua '<json: url, ca, other_ca, cert, key, key_data, token, password,
--                             token_file, plugin_ok, plugin_fail, root, build>'
local cjson = require "cjson"
local p = cjson.decode(arg[1])
package.path = p.root .. "/lua/?.lua;" .. p.root .. "/lua/?/init.lua;" .. package.path
package.cpath = p.root .. "/build/" .. p.build .. "/?.so;" .. package.cpath
local kinformer = require "kinformer"
local socket = require "socket"

kinformer.set_logger(function(level, msg) io.stderr:write("log ", level, ": ", msg, "\n") end, "debug")

local function dump(t, prefix)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local v = t[k]
    if type(v) == "table" then dump(v, prefix .. k .. ".") else print(prefix .. k .. "=" .. tostring(v)) end
  end
end

local function run(name, opts, want_listed)
  print("== " .. name)
  local client, err = kinformer.client(opts)
  if not client then
    print("client error: " .. tostring(err))
    return
  end
  dump(client, "client.")
  local fifo = kinformer.delta_fifo{ known_objects = kinformer.store() }
  local r = assert(client:reflector{ resource = "pods", namespace = "shop", fifo = fifo,
                                     backoff_initial = 0.05, backoff_max = 0.1 })
  assert(r:start())
  local deadline = socket.gettime() + 3
  repeat
    socket.sleep(0.02)
    local st = r:status()
  until (want_listed and st.listed) or (not want_listed and st.errors >= 2) or socket.gettime() > deadline
  dump(r:status(), "status.")
  r:stop()
end

local key_data = p.key_data
-- failing runs
run("wrong token", { server = p.url, ca_file = p.ca, token = "not-" .. p.token }, false)
run("wrong password", { server = p.url, ca_file = p.ca, username = "alice", password = "x" .. p.password }, false)
run("wrong CA", { server = p.url, ca_file = p.other_ca, token = p.token }, false)
run("key that is no key", { server = p.url, ca_file = p.ca, client_cert_file = p.cert,
                            client_key_data = "garbage " .. key_data:sub(40, 80) }, false)
run("missing key file", { server = p.url, ca_file = p.ca, client_cert_file = p.cert,
                          client_key_file = p.key .. ".missing" }, false)
run("proxy with a password, unreachable", { server = p.url, ca_file = p.ca, token = p.token,
                                           proxy = "http://bob:" .. p.password .. "@127.0.0.1:1" }, false)
run("failing exec plugin", { server = p.url, ca_file = p.ca, exec = { command = p.plugin_fail,
    env = { SECRET_OUT = p.token } } }, false)
-- succeeding runs
run("token", { server = p.url, ca_file = p.ca, token = p.token }, true)
run("token file", { server = p.url, ca_file = p.ca, token_file = p.token_file }, true)
run("basic", { server = p.url, ca_file = p.ca, username = "alice", password = p.password }, true)
run("client certificate", { server = p.url, ca_data = io.open(p.ca):read("a"),
                            client_cert_file = p.cert, client_key_data = key_data }, true)
run("exec plugin", { server = p.url, ca_file = p.ca, exec = { command = p.plugin_ok,
    env = { SECRET_OUT = p.token } } }, true)
print("== done")
