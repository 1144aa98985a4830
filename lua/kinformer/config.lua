--- kinformer.config: where a client's connection comes from, with client-go's rules
-- (k8s.io/client-go/tools/clientcmd). Pure Lua; reads kubeconfig files with lyaml (Debian:
-- lua-yaml), only when a kubeconfig is actually read.
--
--   local config = require "kinformer.config"
--   local o, err = config.load{ context = "prod" }
--   --> { server = "https://...", token_file = ..., ca_file = ..., ..., namespace = "default",
--         source = "kubeconfig /home/me/.kube/config", context = "prod" } | nil, err
--
-- Resolution order: explicit options (`server` given: nothing is read) > the `kubeconfig`
-- option > $KUBECONFIG (colon-separated, merged) > ~/.kube/config > in-cluster. The result holds
-- the options of kinformer.core.client plus `namespace`, `source` and `context`. See
-- docs/config.md. Secrets read from files never appear in an error message.
local io_open = io.open
local os_getenv = os.getenv
local type, pairs, ipairs, tostring, error = type, pairs, ipairs, tostring, error
local concat, sort = table.concat, table.sort
local floor = math.floor
local char, byte = string.char, string.byte

local _M = { _VERSION = "0.1" }

_M.DEFAULT_SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_M.EXEC_API_V1 = "client.authentication.k8s.io/v1"
_M.EXEC_API_V1BETA1 = "client.authentication.k8s.io/v1beta1"

-- Options that describe a connection completely (they need `server`).
local CONNECTION = {
  server = "string", token = "string", token_file = "string", username = "string",
  password = "string", ca_file = "string", ca_data = "string", client_cert_file = "string",
  client_cert_data = "string", client_key_file = "string", client_key_data = "string",
  tls_server_name = "string", proxy = "string", insecure_skip_tls_verify = "boolean",
  exec = "table",
}
-- Options that apply whatever the source.
local TUNING = { connect_timeout = "number", user_agent = "string" }
-- Options that choose the source.
local SELECT = { kubeconfig = "string|table", context = "string", namespace = "string",
                 in_cluster = "boolean", service_account_dir = "string" }

local EXEC_KEYS = { command = "string", args = "table", env = "table", api_version = "string",
                    install_hint = "string", provide_cluster_info = "boolean",
                    timeout = "number" }

---------------------------------------------------------------------------------------------
-- helpers

-- Raises "bad argument #1 to 'client' (...)" at the caller of the public function.
local function argerr(level, msg)
  error("bad argument #1 to 'client' (" .. msg .. ")", level + 1)
end

-- max: a size limit in bytes (a path can name /dev/zero); nil for none.
local function read_file(path, max)
  local f, err = io_open(path, "rb")
  if not f then return nil, err end
  local data = f:read(max and max + 1 or "*a")
  f:close()
  if max and data and #data > max then return nil, path .. ": larger than " .. max .. " bytes" end
  if not data then
    if max then return "" end -- read(n) gives nil for an empty file
    return nil, path .. ": cannot read"
  end
  return data
end

local function exists(path)
  local f = io_open(path, "rb")
  if f then f:close() return true end
  return false
end

local function dirname(path)
  local d = path:match("^(.*)/[^/]*$")
  if d == nil then return "." end
  if d == "" then return "/" end
  return d
end

-- client-go's MakeAbs: a relative path is relative to the kubeconfig's folder.
local function resolve(path, base)
  if path == nil or path == "" or path:sub(1, 1) == "/" or base == nil then return path end
  if base == "." then return path end
  return (base == "/" and "" or base) .. "/" .. path
end

local function trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  sort(out)
  return out
end

-- A name or value from a kubeconfig as an error shows it: control characters escaped, at most
-- 64 bytes (a name can be any YAML string, megabytes long or spanning lines).
local function shorten(s)
  s = tostring(s):gsub("%c", function(c) return ("\\x%02x"):format(byte(c)) end)
  if #s > 64 then
    -- cut before a UTF-8 lead byte, so that no character is cut in two
    local cut = 61
    while cut > 1 and byte(s, cut + 1) and byte(s, cut + 1) >= 0x80 and byte(s, cut + 1) < 0xC0 do
      cut = cut - 1
    end
    s = s:sub(1, cut) .. "..."
  end
  return s
end
_M._shorten = shorten

local function q(s) return '"' .. shorten(s) .. '"' end

local function quote_list(names)
  local out = {}
  for i, n in ipairs(names) do
    if i > 10 then
      out[i] = ("and %d more"):format(#names - 10)
      break
    end
    out[i] = q(n)
  end
  return #out > 0 and concat(out, ", ") or "none"
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64DEC = {}
for i = 1, 64 do B64DEC[byte(B64, i)] = i - 1 end

--- config.base64_decode(s) -> bytes | nil (standard alphabet; whitespace ignored; padding
-- optional). Arithmetic only, so it runs on Lua 5.1/LuaJIT and 5.4 alike.
function _M.base64_decode(s)
  s = s:gsub("%s", "")
  local body, pad = s:match("^([^=]*)(=*)$")
  if body == nil or #pad > 2 or (#pad > 0 and (#body + #pad) % 4 ~= 0) or #body % 4 == 1 then
    return nil
  end
  local out, n = {}, 0
  for i = 1, #body, 4 do
    local a, b = B64DEC[byte(body, i)], B64DEC[byte(body, i + 1)]
    local c3, d4 = byte(body, i + 2), byte(body, i + 3)
    local c, d = c3 and B64DEC[c3], d4 and B64DEC[d4]
    if a == nil or b == nil or (c3 and c == nil) or (d4 and d == nil) then return nil end
    local v = a * 262144 + b * 4096 + (c or 0) * 64 + (d or 0)
    local x, y, z = floor(v / 65536), floor(v / 256) % 256, v % 256
    n = n + 1
    if d4 then out[n] = char(x, y, z) elseif c3 then out[n] = char(x, y) else out[n] = char(x) end
  end
  return concat(out)
end

function _M.base64_encode(s)
  local out, n = {}, 0
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local v = a * 65536 + (b or 0) * 256 + (c or 0)
    local i1, i2 = floor(v / 262144) + 1, floor(v / 4096) % 64 + 1
    local i3, i4 = floor(v / 64) % 64 + 1, v % 64 + 1
    n = n + 1
    out[n] = B64:sub(i1, i1) .. B64:sub(i2, i2) .. (b and B64:sub(i3, i3) or "=")
      .. (c and B64:sub(i4, i4) or "=")
  end
  return concat(out)
end

-- "host:port" for a URL, brackets around IPv6 literals (Go's net.JoinHostPort).
local function join_host_port(host, port)
  if host:find(":", 1, true) then host = "[" .. host .. "]" end
  return host .. ":" .. port
end

---------------------------------------------------------------------------------------------
-- exec plugins

-- The KUBERNETES_EXEC_INFO variable client-go gives a plugin: an ExecCredential with spec
-- (interactive false: kinformer never has a terminal for it; the cluster when asked for).
-- -> JSON | nil, err (the cluster's extension comes from a kubeconfig: it may be anything YAML
-- can say that JSON cannot, such as an array with holes where nulls were).
local function exec_info(api_version, cluster)
  local cjson = require "cjson"
  local spec = { interactive = false }
  if cluster then spec.cluster = cluster end
  local ok, json = pcall(cjson.encode, { apiVersion = api_version, kind = "ExecCredential",
                                         spec = spec })
  if not ok then return nil, tostring(json):gsub("^.-:%d+: ", "") end
  return json
end

local MAX_CA_FILE = 4 * 1024 * 1024

-- The Cluster object of KUBERNETES_EXEC_INFO (provideClusterInfo). Public data only.
local function cluster_info(o, extension)
  local ca = o.ca_data
  if ca == nil and o.ca_file then ca = read_file(o.ca_file, MAX_CA_FILE) end
  return {
    server = o.server,
    ["tls-server-name"] = o.tls_server_name,
    ["insecure-skip-tls-verify"] = o.insecure_skip_tls_verify or nil,
    ["certificate-authority-data"] = ca and _M.base64_encode(ca) or nil,
    ["proxy-url"] = o.proxy,
    config = extension,
  }
end

---------------------------------------------------------------------------------------------
-- explicit options

local function check_types(opts, level)
  for k, v in pairs(opts) do
    local want = CONNECTION[k] or TUNING[k] or SELECT[k]
    if want == nil then
      argerr(level + 1, "unknown option '" .. tostring(k) .. "'")
    end
    if not want:find(type(v), 1, true) then
      argerr(level + 1, ("option '%s' must be a %s, got %s"):format(k, want:gsub("|", " or "),
                                                                    type(v)))
    end
  end
  if opts.connect_timeout ~= nil and not (opts.connect_timeout >= 0) then
    argerr(level + 1, "option 'connect_timeout' must be >= 0")
  end
end

-- The core's exec table from an explicit `exec` option.
local function explicit_exec(x, o, level)
  for k, v in pairs(x) do
    local want = EXEC_KEYS[k]
    if want == nil then argerr(level + 1, "unknown exec option '" .. tostring(k) .. "'") end
    if type(v) ~= want then
      argerr(level + 1, ("exec option '%s' must be a %s, got %s"):format(k, want, type(v)))
    end
  end
  if x.command == nil or x.command == "" then
    argerr(level + 1, "exec option 'command' is required")
  end
  local api = x.api_version or _M.EXEC_API_V1
  if api ~= _M.EXEC_API_V1 and api ~= _M.EXEC_API_V1BETA1 then
    argerr(level + 1, "exec option 'api_version' must be " .. _M.EXEC_API_V1 .. " or "
      .. _M.EXEC_API_V1BETA1)
  end
  local args = {}
  for i, a in ipairs(x.args or {}) do
    if type(a) ~= "string" then argerr(level + 1, "exec option 'args' must hold strings") end
    args[i] = a
  end
  local env = {}
  if x.env then
    if #x.env > 0 then -- kubeconfig style: { {name =, value =}, ... }
      for _, e in ipairs(x.env) do
        if type(e) ~= "table" or type(e.name) ~= "string" or type(e.value) ~= "string" then
          argerr(level + 1, "exec option 'env' must map names to strings or list {name =, value =}")
        end
        env[#env + 1] = e.name .. "=" .. e.value
      end
    else
      for _, k in ipairs(sorted_keys(x.env)) do
        if type(k) ~= "string" or type(x.env[k]) ~= "string" then
          argerr(level + 1, "exec option 'env' must map names to strings or list {name =, value =}")
        end
        env[#env + 1] = k .. "=" .. x.env[k]
      end
    end
  end
  local info = assert(exec_info(api, x.provide_cluster_info and cluster_info(o) or nil))
  env[#env + 1] = "KUBERNETES_EXEC_INFO=" .. info
  return { command = x.command, args = args, env = env, api_version = api,
           install_hint = x.install_hint, timeout = x.timeout }
end

local function from_options(opts, level)
  if opts.kubeconfig ~= nil or opts.context ~= nil or opts.in_cluster ~= nil
     or opts.service_account_dir ~= nil then
    argerr(level + 1, "option 'server' excludes 'kubeconfig', 'context', 'in_cluster' and "
      .. "'service_account_dir'")
  end
  local o = {}
  for k in pairs(CONNECTION) do o[k] = opts[k] end
  for k in pairs(TUNING) do o[k] = opts[k] end
  if opts.exec then o.exec = explicit_exec(opts.exec, o, level + 1) end
  o.namespace = opts.namespace or "default"
  o.source = "options"
  return o
end

---------------------------------------------------------------------------------------------
-- kubeconfig files

local yaml, yaml_implicit

-- Plain scalars stay strings, except null and booleans: the few non-string kubeconfig fields
-- are booleans, and a token like 0x1f or 012 must not turn into a number.
local function load_yaml()
  if yaml then return yaml end
  local ok, lib = pcall(require, "lyaml")
  if not ok then
    return nil, "reading a kubeconfig needs lyaml (Debian: lua-yaml): " .. tostring(lib)
  end
  local implicit = require "lyaml.implicit"
  yaml = lib
  yaml_implicit = function(v)
    local n = implicit.null(v)
    if n ~= nil then return n end
    local b = implicit.bool(v)
    if b ~= nil then return b end
    return v
  end
  return yaml
end

-- The position of the first byte YAML does not allow (control characters other than tab, LF
-- and CR; invalid UTF-8), or nil.
local function first_bad_char(text)
  local ctl = text:find("[%z\1-\8\11\12\14-\31\127]")
  local i = 1
  while true do
    i = text:find("[\128-\255]", i)
    if i == nil or (ctl and i > ctl) then return ctl end
    local c, n = byte(text, i), 0
    if c >= 0xC2 and c <= 0xDF then n = 1
    elseif c >= 0xE0 and c <= 0xEF then n = 2
    elseif c >= 0xF0 and c <= 0xF4 then n = 3
    else return i end
    for k = 1, n do
      local d = byte(text, i + k)
      if d == nil or d < 0x80 or d > 0xBF then return i end
    end
    i = i + n + 1
  end
end

-- "at line L, column C: problem". lyaml.load reports the position of the last good event, so
-- the text is scanned again with the low-level parser, whose libyaml message has the real one.
local function yaml_error(text, lyaml_msg)
  local ok, low = pcall(require, "yaml")
  if ok and type(low.parser) == "function" then
    local okp, err = pcall(function()
      local next_event = low.parser(text)
      while true do
        local ev = next_event()
        if ev == nil or ev.type == "STREAM_END" then return end
      end
    end)
    if not okp then
      local what, line, col = tostring(err):match("^(.-) at document: %d+, line: (%d+), column: (%d+)")
      if what then return ("at line %s, column %s: %s"):format(line, col, what) end
    end
  end
  local line, col, what = tostring(lyaml_msg):match("(%d+):(%d+): (.*)$")
  if line == "0" and col == "0" then
    -- libyaml's reader (control character, bad UTF-8) gives no position: find the byte.
    local at = first_bad_char(text)
    if at then
      local before = text:sub(1, at - 1)
      local _, nl = before:gsub("\n", "")
      return ("at line %d, byte %d: %s"):format(nl + 1, at - (before:match(".*()\n") or 0), what)
    end
  end
  if line then return ("near line %s, column %s: %s"):format(line, col, what) end
  return ": " .. tostring(lyaml_msg)
end

-- lyaml's null sentinel becomes nil. Aliases make a document a graph whose tables are shared,
-- or even cyclic (`a: &x [*x]`): each table is visited once.
local function strip_nulls(v, seen)
  if v == yaml.null then return nil end
  if type(v) == "table" and not seen[v] then
    seen[v] = true
    for k, x in pairs(v) do v[k] = strip_nulls(x, seen) end
  end
  return v
end

-- Whether v has more than `budget` nodes counting a shared table once per reference, i.e. as
-- JSON would spell it out: aliases let a few lines stand for a huge or infinite tree.
local function too_big(v, budget)
  local stack, n = { v }, 1
  while n > 0 do
    local x = stack[n]
    stack[n] = nil
    n = n - 1
    budget = budget - 1
    if budget < 0 then return true end
    if type(x) == "table" then
      for k, y in pairs(x) do
        stack[n + 1], stack[n + 2] = k, y
        n = n + 2
      end
    end
  end
  return false
end

-- Named list (clusters, users, contexts) -> map name -> inner table, paths resolved.
local function named_map(doc, key, inner, path, resolve_paths)
  local list = doc[key]
  local map = {}
  if list == nil then return map end
  if type(list) ~= "table" then
    return nil, ("kubeconfig %s: %s must be a list"):format(path, key)
  end
  for i, e in ipairs(list) do
    if type(e) ~= "table" or type(e.name) ~= "string" or e.name == "" then
      return nil, ("kubeconfig %s: %s[%d] has no name"):format(path, key, i)
    end
    if map[e.name] then
      return nil, ("kubeconfig %s: duplicate %s name %s"):format(path, key:sub(1, -2), q(e.name))
    end
    local v = e[inner]
    if v == nil then v = {} end
    if type(v) ~= "table" then
      return nil, ("kubeconfig %s: %s %s: %s must be a mapping"):format(path, key:sub(1, -2),
                                                                      q(e.name), inner)
    end
    if resolve_paths then resolve_paths(v, dirname(path)) end
    map[e.name] = v
  end
  return map
end

local function resolve_cluster_paths(c, base)
  if type(c["certificate-authority"]) == "string" then
    c["certificate-authority"] = resolve(c["certificate-authority"], base)
  end
end

local function resolve_user_paths(u, base)
  for _, k in ipairs({ "client-certificate", "client-key", "tokenFile" }) do
    if type(u[k]) == "string" then u[k] = resolve(u[k], base) end
  end
  -- an exec command is resolved only when it names a path (has a slash), like client-go
  if type(u.exec) == "table" and type(u.exec.command) == "string"
     and u.exec.command:find("/", 1, true) then
    u.exec.command = resolve(u.exec.command, base)
  end
end

--- config.load_file(path) -> { clusters = {name = c}, users = {...}, contexts = {...},
--   current_context = s, path = path } | nil, err   (relative paths resolved)
function _M.load_file(path)
  local text, err = read_file(path)
  if not text then return nil, "kubeconfig " .. err end
  local lib, lerr = load_yaml()
  if not lib then return nil, lerr end
  local ok, doc = pcall(lib.load, text, { implicit_scalar = yaml_implicit })
  if not ok then
    return nil, ("kubeconfig %s: YAML syntax error %s"):format(path, yaml_error(text, doc))
  end
  doc = strip_nulls(doc, {})
  if doc == nil then doc = {} end
  if type(doc) ~= "table" or doc[1] ~= nil then
    return nil, ("kubeconfig %s: not a kubeconfig (the top level must be a mapping)"):format(path)
  end
  local cfg = { path = path }
  local e
  cfg.clusters, e = named_map(doc, "clusters", "cluster", path, resolve_cluster_paths)
  if not cfg.clusters then return nil, e end
  cfg.users, e = named_map(doc, "users", "user", path, resolve_user_paths)
  if not cfg.users then return nil, e end
  cfg.contexts, e = named_map(doc, "contexts", "context", path)
  if not cfg.contexts then return nil, e end
  local cc = doc["current-context"]
  if cc ~= nil and type(cc) ~= "string" then
    return nil, ("kubeconfig %s: current-context must be a string"):format(path)
  end
  cfg.current_context = cc ~= "" and cc or nil
  return cfg
end

--- config.merge(list of loaded files) -> merged (client-go: the first file to set a map key or
-- a value wins, and an entry is never mixed from two files).
function _M.merge(files)
  local m = { clusters = {}, users = {}, contexts = {}, paths = {} }
  for _, f in ipairs(files) do
    m.paths[#m.paths + 1] = f.path
    for _, kind in ipairs({ "clusters", "users", "contexts" }) do
      for name, v in pairs(f[kind]) do
        if m[kind][name] == nil then m[kind][name] = v end
      end
    end
    if m.current_context == nil then m.current_context = f.current_context end
  end
  return m
end

-- The files to read: explicit list (all must exist), $KUBECONFIG (missing ones skipped), or
-- ~/.kube/config (when it exists).
local function kubeconfig_files(opts, level)
  local k = opts.kubeconfig
  if k ~= nil then
    local list = type(k) == "string" and { k } or k
    if #list == 0 then argerr(level + 1, "option 'kubeconfig' must not be empty") end
    for i, p in ipairs(list) do
      if type(p) ~= "string" or p == "" then
        argerr(level + 1, "option 'kubeconfig' must be a path or an array of paths (item "
          .. i .. ")")
      end
    end
    return list, true
  end
  local env = os_getenv("KUBECONFIG")
  local out, seen = {}, {}
  if env ~= nil and env ~= "" then
    for p in (env .. ":"):gmatch("([^:]*):") do
      if p ~= "" and not seen[p] and exists(p) then
        seen[p] = true
        out[#out + 1] = p
      end
    end
    return out, false
  end
  local home = os_getenv("HOME")
  if home and home ~= "" and exists(home .. "/.kube/config") then
    out[1] = home .. "/.kube/config"
  end
  return out, false
end

local function str_field(t, key, what)
  local v = t[key]
  if v == nil or v == "" then return nil end
  if type(v) ~= "string" then
    return nil, ("%s: %s must be a string"):format(what, key)
  end
  return v
end

-- Fills o from a cluster entry.
local function apply_cluster(o, c, name)
  local what = "cluster " .. q(name)
  local e
  local server
  server, e = str_field(c, "server", what)
  if e then return nil, e end
  if not server then return nil, what .. " has no server" end
  if not server:find("://", 1, true) then server = "https://" .. server end
  if not server:match("^https?://") then
    return nil, what .. ": server must be an http:// or https:// URL"
  end
  o.server = server
  local ca_data
  ca_data, e = str_field(c, "certificate-authority-data", what)
  if e then return nil, e end
  if ca_data then
    o.ca_data = _M.base64_decode(ca_data)
    if not o.ca_data then return nil, what .. ": certificate-authority-data is not valid base64" end
  else
    o.ca_file, e = str_field(c, "certificate-authority", what)
    if e then return nil, e end
  end
  local insecure = c["insecure-skip-tls-verify"]
  if insecure ~= nil and type(insecure) ~= "boolean" then
    return nil, what .. ": insecure-skip-tls-verify must be true or false"
  end
  if insecure and (o.ca_data or o.ca_file) then
    return nil, what .. ": insecure-skip-tls-verify cannot be combined with a certificate "
      .. "authority (client-go refuses it too)"
  end
  o.insecure_skip_tls_verify = insecure or nil
  o.tls_server_name, e = str_field(c, "tls-server-name", what)
  if e then return nil, e end
  o.proxy, e = str_field(c, "proxy-url", what)
  if e then return nil, e end
  return o
end

local function kubeconfig_exec(x, what, o, cluster_ext)
  if type(x) ~= "table" then return nil, what .. ": exec must be a mapping" end
  local command, e = str_field(x, "command", what .. ": exec")
  if e then return nil, e end
  if not command then return nil, what .. ": exec has no command" end
  local api = x.apiVersion
  if api ~= _M.EXEC_API_V1 and api ~= _M.EXEC_API_V1BETA1 then
    return nil, ('%s: exec apiVersion %s is not supported (use %s or %s)'):format(
      what, type(api) == "string" and q(api) or "(none: " .. type(api) .. ")", _M.EXEC_API_V1,
      _M.EXEC_API_V1BETA1)
  end
  if x.interactiveMode == "Always" then
    return nil, what .. ": exec interactiveMode Always is not supported (kinformer runs "
      .. "plugins without a terminal)"
  end
  local args = {}
  if x.args ~= nil then
    if type(x.args) ~= "table" then return nil, what .. ": exec args must be a list" end
    for i, a in ipairs(x.args) do
      if type(a) == "boolean" then a = tostring(a) end
      if type(a) ~= "string" then return nil, what .. ": exec args[" .. i .. "] must be a string" end
      args[i] = a
    end
  end
  local env = {}
  if x.env ~= nil then
    if type(x.env) ~= "table" then return nil, what .. ": exec env must be a list" end
    for i, ev in ipairs(x.env) do
      if type(ev) ~= "table" or type(ev.name) ~= "string" or ev.name == "" then
        return nil, what .. ": exec env[" .. i .. "] has no name"
      end
      local v = ev.value
      if type(v) == "boolean" then v = tostring(v) end
      if v ~= nil and type(v) ~= "string" then
        return nil, what .. ": exec env[" .. i .. "] value must be a string"
      end
      env[#env + 1] = ev.name .. "=" .. (v or "")
    end
  end
  local cinfo
  if x.provideClusterInfo == true then
    if too_big(cluster_ext, 10000) then
      return nil, what .. ": exec provideClusterInfo: the cluster's exec extension is too large "
        .. "(over 10000 values, counting each use of an alias)"
    end
    cinfo = cluster_info(o, cluster_ext)
  end
  local info, ierr = exec_info(api, cinfo)
  if not info then
    return nil, what .. ": exec provideClusterInfo: the cluster's exec extension cannot be "
      .. "passed on as JSON (" .. ierr .. ")"
  end
  env[#env + 1] = "KUBERNETES_EXEC_INFO=" .. info
  local hint = type(x.installHint) == "string" and x.installHint ~= "" and x.installHint or nil
  return { command = command, args = args, env = env, api_version = api, install_hint = hint }
end

-- Fills o from a user entry (client-go precedence: token over tokenFile, a token over exec).
local function apply_user(o, u, name, cluster_ext)
  local what = "user " .. q(name)
  local e
  if u["auth-provider"] ~= nil then
    local ap = type(u["auth-provider"]) == "table" and u["auth-provider"].name
    return nil, ('%s: auth-provider %s is not supported (use an exec credential plugin)'):format(
      what, type(ap) == "string" and q(ap) or '"?"')
  end
  for _, k in ipairs({ "as", "as-uid", "as-groups", "as-user-extra" }) do
    if u[k] ~= nil then
      return nil, what .. ": impersonation (" .. k .. ") is not supported"
    end
  end
  local fields = {
    { "client-certificate-data", "client_cert_data", true },
    { "client-certificate", "client_cert_file" },
    { "client-key-data", "client_key_data", true },
    { "client-key", "client_key_file" },
    { "token", "token" }, { "tokenFile", "token_file" },
    { "username", "username" }, { "password", "password" },
  }
  for _, f in ipairs(fields) do
    local v
    v, e = str_field(u, f[1], what)
    if e then return nil, e end
    if v and f[3] then
      local d = _M.base64_decode(v)
      if not d then return nil, what .. ": " .. f[1] .. " is not valid base64" end
      v = d
    end
    o[f[2]] = v
  end
  if o.client_cert_data then o.client_cert_file = nil end -- data wins, as in client-go
  if o.client_key_data then o.client_key_file = nil end
  if (o.client_cert_data or o.client_cert_file) and not (o.client_key_data or o.client_key_file) then
    return nil, what .. ": client-certificate without client-key"
  end
  if (o.client_key_data or o.client_key_file) and not (o.client_cert_data or o.client_cert_file) then
    return nil, what .. ": client-key without client-certificate"
  end
  if o.token then o.token_file = nil end
  if (o.username or o.password) and (o.token or o.token_file) then
    return nil, what .. ": username/password and a bearer token cannot both be set"
  end
  if o.password and not o.username then
    return nil, what .. ": password without username"
  end
  if u.exec ~= nil and not (o.token or o.token_file or o.username) then
    o.exec, e = kubeconfig_exec(u.exec, what, o, cluster_ext)
    if not o.exec then return nil, e end
  end
  return o
end

-- The extension client-go hands to exec plugins with provideClusterInfo.
local function exec_extension(cluster)
  local ext = cluster.extensions
  if type(ext) ~= "table" then return nil end
  for _, e in ipairs(ext) do
    if type(e) == "table" and e.name == "client.authentication.k8s.io/exec" then
      return e.extension
    end
  end
end

--- config.from_kubeconfig(merged, context_name) -> options | nil, err, empty
-- `empty` is true when no context is selected (no current-context and none asked for).
function _M.from_kubeconfig(m, context_name)
  local files = concat(m.paths, ":")
  local name = context_name or m.current_context
  if name == nil then
    return nil, ("kubeconfig %s has no current-context (contexts: %s); pass context = NAME")
      :format(files, quote_list(sorted_keys(m.contexts))), true
  end
  local ctx = m.contexts[name]
  if ctx == nil then
    return nil, ('context %s not found in kubeconfig %s (contexts: %s)'):format(
      q(name), files, quote_list(sorted_keys(m.contexts)))
  end
  -- What is wrong with an entry: named after the files it came from (merged files: all).
  local function bad(msg) return nil, "kubeconfig " .. files .. ": " .. msg end
  local cname, uname = ctx.cluster, ctx.user
  if cname ~= nil and type(cname) ~= "string" then
    return bad(('context %s: cluster must be a string'):format(q(name)))
  end
  if cname == nil or cname == "" then
    return bad(('context %s has no cluster'):format(q(name)))
  end
  local cluster = m.clusters[cname]
  if cluster == nil then
    return nil, ('context %s refers to cluster %s, which is not defined in kubeconfig %s')
      :format(q(name), q(cname), files)
  end
  local o, err = apply_cluster({}, cluster, cname)
  if not o then return bad(err) end
  if uname ~= nil and uname ~= "" then
    if type(uname) ~= "string" then return bad(('context %s: user must be a string'):format(q(name))) end
    local user = m.users[uname]
    if user == nil then
      return nil, ('context %s refers to user %s, which is not defined in kubeconfig %s')
        :format(q(name), q(uname), files)
    end
    o, err = apply_user(o, user, uname, exec_extension(cluster))
    if not o then return bad(err) end
  end
  local ns = ctx.namespace
  if ns ~= nil and type(ns) ~= "string" then
    return bad(('context %s: namespace must be a string'):format(q(name)))
  end
  o.namespace = (ns ~= nil and ns ~= "") and ns or "default"
  o.context = name
  o.source = "kubeconfig " .. files
  return o
end

---------------------------------------------------------------------------------------------
-- in-cluster

--- config.in_cluster(dir) -> options | nil, err   (client-go rest.InClusterConfig)
function _M.in_cluster(dir)
  dir = dir or _M.DEFAULT_SERVICE_ACCOUNT_DIR
  local host, port = os_getenv("KUBERNETES_SERVICE_HOST"), os_getenv("KUBERNETES_SERVICE_PORT")
  if host == nil or host == "" or port == nil or port == "" then
    return nil, "in-cluster configuration: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
      .. "must be defined"
  end
  local token_file = dir .. "/token"
  local f, err = io_open(token_file, "rb")
  if not f then return nil, "in-cluster configuration: token file " .. err end
  f:close()
  local o = { server = "https://" .. join_host_port(host, port), token_file = token_file,
              source = "in-cluster" }
  -- Without ca.crt client-go goes on with the system's CAs; so do we.
  if exists(dir .. "/ca.crt") then o.ca_file = dir .. "/ca.crt" end
  local ns = os_getenv("POD_NAMESPACE")
  if ns == nil or ns == "" then
    local text = read_file(dir .. "/namespace")
    ns = text and trim(text) or ""
  end
  o.namespace = ns ~= "" and ns or "default"
  return o
end

local function in_cluster_possible(dir)
  local host, port = os_getenv("KUBERNETES_SERVICE_HOST"), os_getenv("KUBERNETES_SERVICE_PORT")
  return host ~= nil and host ~= "" and port ~= nil and port ~= ""
    and exists((dir or _M.DEFAULT_SERVICE_ACCOUNT_DIR) .. "/token")
end

---------------------------------------------------------------------------------------------
-- entry

-- level: of the public function's caller, counted from here.
function _M._load(opts, level)
  level = level or 2
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then
    error("bad argument #1 to 'client' (table expected, got " .. type(opts) .. ")", level)
  end
  check_types(opts, level)
  if opts.exec ~= nil and opts.server == nil then
    argerr(level, "option 'exec' needs 'server'")
  end
  if opts.server ~= nil then
    local o = from_options(opts, level) -- not a tail call: `level` counts this frame
    return o
  end
  for k in pairs(CONNECTION) do
    if opts[k] ~= nil then
      argerr(level, ("option '%s' needs 'server' (a kubeconfig or in-cluster configuration "
        .. "brings its own)"):format(k))
    end
  end

  local o, err
  if opts.in_cluster == true then
    o, err = _M.in_cluster(opts.service_account_dir)
  else
    local files, explicit = kubeconfig_files(opts, level)
    local loaded = {}
    for _, p in ipairs(files) do
      local cfg, lerr = _M.load_file(p)
      if not cfg then return nil, lerr end
      loaded[#loaded + 1] = cfg
    end
    local empty
    if #loaded > 0 then
      o, err, empty = _M.from_kubeconfig(_M.merge(loaded), opts.context)
    else
      empty = true
      err = "no configuration found: set KUBECONFIG, create ~/.kube/config, run inside a "
        .. "cluster, or give kinformer.client{ server = URL }"
      if opts.context then
        err = ('context %s not found: no kubeconfig file was found'):format(q(opts.context))
        empty = false
      end
    end
    -- client-go: an empty configuration falls back to in-cluster when that is possible. An
    -- explicit kubeconfig never does (it was asked for).
    if not o and empty and not explicit and opts.in_cluster ~= false
       and in_cluster_possible(opts.service_account_dir) then
      o, err = _M.in_cluster(opts.service_account_dir)
    end
  end
  if not o then return nil, err end
  for k in pairs(TUNING) do o[k] = opts[k] end
  if opts.namespace then o.namespace = opts.namespace end
  return o
end

--- config.load(opts) -> options | nil, err
-- opts: those of kinformer.client (docs/config.md). Raises for misuse (unknown option, wrong
-- type, connection options without `server`); returns nil, err for a configuration that cannot
-- be used (missing file, YAML error, unknown context, ...).
function _M.load(opts)
  local o, err = _M._load(opts, 3) -- not a tail call: `level` counts this frame
  return o, err
end

return _M
