--- kinformer.config.kubeconfig (internal): kubeconfig files, client-go's clientcmd loader
-- and merge rules: which files to read, reading one, merging several, and turning a context into
-- kinformer.client options.
--
-- Contract: files(opts) raises for a wrong `kubeconfig` option (an argument of 'client'); every
-- other function returns nil, err for a file or entry that cannot be used (data, not arguments)
-- and never raises on any file content. Relative paths are resolved against the folder of the
-- file that holds them when it is read. Secrets read from files never appear in a message.
local os_getenv = os.getenv
local type, pairs, ipairs = type, pairs, ipairs
local concat = table.concat

local argcheck = require "kinformer.argcheck"
local base64 = require "kinformer.base64"
local yaml = require "kinformer.config.yaml"
local exec = require "kinformer.config.exec"
local impersonation = require "kinformer.config.impersonation"
local util = require "kinformer.config.util"

local q, quote_list, sorted_keys, str_field = util.q, util.quote_list, util.sorted_keys,
  util.str_field
local dirname, resolve, exists = util.dirname, util.resolve, util.exists

local _M = {}

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

--- kubeconfig.load_file(path) -> { clusters = {name = c}, users = {...}, contexts = {...},
--   current_context = s, path = path } | nil, err   (relative paths resolved)
function _M.load_file(path)
  local text, err = util.read_file(path)
  if not text then return nil, "kubeconfig " .. err end
  local doc, yerr, code = yaml.decode(text)
  if code == "ENOTFOUND" then return nil, yerr end
  if code then return nil, ("kubeconfig %s: YAML syntax error %s"):format(path, yerr) end
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

--- kubeconfig.merge(list of loaded files) -> merged (client-go: the first file to set a map key or
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

--- kubeconfig.files(opts) -> paths, explicit
-- The files to read: the `kubeconfig` option (all must exist; explicit = true), $KUBECONFIG
-- (missing ones skipped), or ~/.kube/config (when it exists).
function _M.files(opts)
  local k = opts.kubeconfig
  if k ~= nil then
    local list = type(k) == "string" and { k } or k
    if #list == 0 then argcheck.raise(1, "client", "option 'kubeconfig' must not be empty") end
    for i, p in ipairs(list) do
      if type(p) ~= "string" or p == "" then
        argcheck.raise(1, "client", "option 'kubeconfig' must be a path or an array of paths "
          .. "(item " .. i .. ")")
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
    o.ca_data = base64.decode(ca_data)
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

-- Fills o from a user entry (client-go precedence: token over tokenFile, a token over exec;
-- as, as-uid, as-groups, as-user-extra: impersonation).
local function apply_user(o, u, name, cluster_ext)
  local what = "user " .. q(name)
  local e
  if u["auth-provider"] ~= nil then
    local ap = type(u["auth-provider"]) == "table" and u["auth-provider"].name
    return nil, ('%s: auth-provider %s is not supported (use an exec credential plugin)'):format(
      what, type(ap) == "string" and q(ap) or '"?"')
  end
  local imp
  imp, e = impersonation.from_kubeconfig(u, what)
  if not imp then return nil, e end
  for k, v in pairs(imp) do o[k] = v end
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
      local d = base64.decode(v)
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
    o.exec, e = exec.from_kubeconfig(u.exec, what, o, cluster_ext)
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

--- kubeconfig.from_kubeconfig(merged, context_name) -> options | nil, err, empty
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

return _M
