--- kinformer.config.exec (internal): exec credential plugins (client-go's exec authenticator
-- configuration): the core's `exec` table, from a client's explicit `exec` option or from a
-- kubeconfig user's `exec` entry.
--
-- Contract: the result is { command, args, env (list of "NAME=value", ending with
-- KUBERNETES_EXEC_INFO), api_version, install_hint[, timeout] }. The plugin never runs here
-- (kinformer.core runs it). An explicit option that is wrong raises (an argument error of
-- 'client'); a kubeconfig entry that is wrong is data: nil, err. Messages never hold values a
-- plugin would receive as secrets.
local argcheck = require "kinformer.argcheck"
local base64 = require "kinformer.base64"
local util = require "kinformer.config.util"

local type, pairs, ipairs, tostring, pcall = type, pairs, ipairs, tostring, pcall
local raise, q, sorted_keys = argcheck.raise, util.q, util.sorted_keys

local _M = {}

_M.API_V1 = "client.authentication.k8s.io/v1"
_M.API_V1BETA1 = "client.authentication.k8s.io/v1beta1"
local API_V1, API_V1BETA1 = _M.API_V1, _M.API_V1BETA1

local EXEC_KEYS = { command = "string", args = "table", env = "table", api_version = "string",
                    install_hint = "string", provide_cluster_info = "boolean",
                    timeout = "number" }

local MAX_CA_FILE = 4 * 1024 * 1024

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

-- The Cluster object of KUBERNETES_EXEC_INFO (provideClusterInfo). Public data only.
local function cluster_info(o, extension)
  local ca = o.ca_data
  if ca == nil and o.ca_file then ca = util.read_file(o.ca_file, MAX_CA_FILE) end
  return {
    server = o.server,
    ["tls-server-name"] = o.tls_server_name,
    ["insecure-skip-tls-verify"] = o.insecure_skip_tls_verify or nil,
    ["certificate-authority-data"] = ca and base64.encode(ca) or nil,
    ["proxy-url"] = o.proxy,
    config = extension,
  }
end

-- Whether v has more than `budget` nodes counting a shared table once per reference, i.e. as
-- JSON would spell it out: YAML aliases let a few lines stand for a huge or infinite tree.
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

local function bad_env()
  raise(1, "client", "exec option 'env' must map names to strings or list {name =, value =}")
end

--- exec.from_option(x, o) -> the core's exec table for kinformer.client's `exec` option x, with
-- the connection options o (for provide_cluster_info). Raises for a wrong option.
function _M.from_option(x, o)
  for k, v in pairs(x) do
    local want = EXEC_KEYS[k]
    if want == nil then raise(1, "client", "unknown exec option '" .. tostring(k) .. "'") end
    if type(v) ~= want then
      raise(1, "client", ("exec option '%s' must be a %s, got %s"):format(k, want, type(v)))
    end
  end
  if x.command == nil or x.command == "" then
    raise(1, "client", "exec option 'command' is required")
  end
  local api = x.api_version or API_V1
  if api ~= API_V1 and api ~= API_V1BETA1 then
    raise(1, "client", "exec option 'api_version' must be " .. API_V1 .. " or " .. API_V1BETA1)
  end
  local args = {}
  for i, a in ipairs(x.args or {}) do
    if type(a) ~= "string" then raise(1, "client", "exec option 'args' must hold strings") end
    args[i] = a
  end
  local env = {}
  if x.env then
    if #x.env > 0 then -- kubeconfig style: { {name =, value =}, ... }
      for _, e in ipairs(x.env) do
        if type(e) ~= "table" or type(e.name) ~= "string" or type(e.value) ~= "string" then
          bad_env()
        end
        env[#env + 1] = e.name .. "=" .. e.value
      end
    else
      for _, k in ipairs(sorted_keys(x.env)) do
        if type(k) ~= "string" or type(x.env[k]) ~= "string" then bad_env() end
        env[#env + 1] = k .. "=" .. x.env[k]
      end
    end
  end
  local info = assert(exec_info(api, x.provide_cluster_info and cluster_info(o) or nil))
  env[#env + 1] = "KUBERNETES_EXEC_INFO=" .. info
  return { command = x.command, args = args, env = env, api_version = api,
           install_hint = x.install_hint, timeout = x.timeout }
end

--- exec.from_kubeconfig(x, what, o, cluster_ext) -> the core's exec table | nil, err
-- x: a kubeconfig user's exec entry; what: "user \"name\"" for messages; o: the connection
-- options so far; cluster_ext: the cluster's exec extension (provideClusterInfo).
function _M.from_kubeconfig(x, what, o, cluster_ext)
  if type(x) ~= "table" then return nil, what .. ": exec must be a mapping" end
  local command, e = util.str_field(x, "command", what .. ": exec")
  if e then return nil, e end
  if not command then return nil, what .. ": exec has no command" end
  local api = x.apiVersion
  if api ~= API_V1 and api ~= API_V1BETA1 then
    return nil, ('%s: exec apiVersion %s is not supported (use %s or %s)'):format(
      what, type(api) == "string" and q(api) or "(none: " .. type(api) .. ")", API_V1,
      API_V1BETA1)
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

return _M
