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
--
-- This module checks the options and applies the resolution order; the parts live in
-- kinformer.config.kubeconfig (files, merging, contexts), kinformer.config.incluster,
-- kinformer.config.exec (credential plugins), kinformer.config.yaml and kinformer.base64.
local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring

local argcheck = require "kinformer.argcheck"
local base64 = require "kinformer.base64"
local kubeconfig = require "kinformer.config.kubeconfig"
local incluster = require "kinformer.config.incluster"
local exec = require "kinformer.config.exec"
local impersonation = require "kinformer.config.impersonation"
local util = require "kinformer.config.util"

local raise = argcheck.raise

local _M = { _VERSION = "0.1" }

_M.DEFAULT_SERVICE_ACCOUNT_DIR = incluster.DEFAULT_SERVICE_ACCOUNT_DIR
_M.EXEC_API_V1 = exec.API_V1
_M.EXEC_API_V1BETA1 = exec.API_V1BETA1

--- config.base64_decode(s) -> bytes | nil; config.base64_encode(s) -> text (kinformer.base64).
_M.base64_decode = base64.decode
_M.base64_encode = base64.encode

--- config.load_file(path) -> { clusters = {name = c}, users = {...}, contexts = {...},
--   current_context = s, path = path } | nil, err   (relative paths resolved)
_M.load_file = kubeconfig.load_file

--- config.merge(list of loaded files) -> merged (client-go: the first file to set a map key or
-- a value wins, and an entry is never mixed from two files).
_M.merge = kubeconfig.merge

--- config.from_kubeconfig(merged, context_name) -> options | nil, err, empty
-- `empty` is true when no context is selected (no current-context and none asked for).
_M.from_kubeconfig = kubeconfig.from_kubeconfig

--- config.in_cluster(dir) -> options | nil, err   (client-go rest.InClusterConfig)
_M.in_cluster = incluster.load

-- Options that describe a connection completely (they need `server`).
local CONNECTION = {
  server = "string", token = "string", token_file = "string", username = "string",
  password = "string", ca_file = "string", ca_data = "string", client_cert_file = "string",
  client_cert_data = "string", client_key_file = "string", client_key_data = "string",
  tls_server_name = "string", proxy = "string", insecure_skip_tls_verify = "boolean",
  exec = "table",
}
-- Options that apply whatever the source (qps, burst and max_retries are the REST client's,
-- kinformer.flowcontrol).
local TUNING = { connect_timeout = "number", user_agent = "string", qps = "number",
                 burst = "number", max_retries = "number" }
-- Impersonation: with `server`, or over what a kubeconfig says, field by field (kubectl --as).
local IMPERSONATION = { impersonate_user = "string", impersonate_uid = "string",
                        impersonate_groups = "table", impersonate_extra = "table" }
-- Options that choose the source.
local SELECT = { kubeconfig = "string|table", context = "string", namespace = "string",
                 in_cluster = "boolean", service_account_dir = "string" }

local function check_types(opts)
  for k, v in pairs(opts) do
    local want = CONNECTION[k] or TUNING[k] or SELECT[k] or IMPERSONATION[k]
    if want == nil then
      raise(1, "client", "unknown option '" .. tostring(k) .. "'")
    end
    if not want:find(type(v), 1, true) then
      raise(1, "client", ("option '%s' must be a %s, got %s"):format(k, want:gsub("|", " or "),
                                                                    type(v)))
    end
  end
  if opts.connect_timeout ~= nil and not (opts.connect_timeout >= 0) then
    raise(1, "client", "option 'connect_timeout' must be >= 0")
  end
  if opts.insecure_skip_tls_verify and (opts.ca_file ~= nil or opts.ca_data ~= nil) then
    raise(1, "client", "option 'insecure_skip_tls_verify' cannot be combined with 'ca_file' or "
      .. "'ca_data' (client-go refuses it too: which one was meant?)")
  end
end

local function from_options(opts)
  if opts.kubeconfig ~= nil or opts.context ~= nil or opts.in_cluster ~= nil
     or opts.service_account_dir ~= nil then
    raise(1, "client", "option 'server' excludes 'kubeconfig', 'context', 'in_cluster' and "
      .. "'service_account_dir'")
  end
  local o = {}
  for k in pairs(CONNECTION) do o[k] = opts[k] end
  for k in pairs(TUNING) do o[k] = opts[k] end
  if opts.exec then o.exec = exec.from_option(opts.exec, o) end
  for k, v in pairs(impersonation.from_options(opts)) do o[k] = v end
  o.namespace = opts.namespace or "default"
  o.source = "options"
  return o
end

-- A kubeconfig (or, when none selects a context, the in-cluster configuration).
local function from_files(opts)
  local files, explicit = kubeconfig.files(opts)
  local loaded = {}
  for _, p in ipairs(files) do
    local cfg, lerr = kubeconfig.load_file(p)
    if not cfg then return nil, lerr end
    loaded[#loaded + 1] = cfg
  end
  local o, err, empty
  if #loaded > 0 then
    o, err, empty = kubeconfig.from_kubeconfig(kubeconfig.merge(loaded), opts.context)
  else
    empty = true
    err = "no configuration found: set KUBECONFIG, create ~/.kube/config, run inside a "
      .. "cluster, or give kinformer.client{ server = URL }"
    if opts.context then
      err = ('context %s not found: no kubeconfig file was found'):format(util.q(opts.context))
      empty = false
    end
  end
  -- client-go: an empty configuration falls back to in-cluster when that is possible. An
  -- explicit kubeconfig never does (it was asked for).
  if not o and empty and not explicit and opts.in_cluster ~= false
     and incluster.possible(opts.service_account_dir) then
    o, err = incluster.load(opts.service_account_dir)
  end
  return o, err
end

--- config.load(opts) -> options | nil, err
-- opts: those of kinformer.client (docs/config.md). Raises for misuse (unknown option, wrong
-- type, connection options without `server`) as an argument error of 'client'; returns nil, err
-- for a configuration that cannot be used (missing file, YAML error, unknown context, ...).
function _M.load(opts)
  if opts == nil then opts = {} end
  if type(opts) ~= "table" then raise(1, "client", "table expected, got " .. type(opts)) end
  check_types(opts)
  if opts.exec ~= nil and opts.server == nil then
    raise(1, "client", "option 'exec' needs 'server'")
  end
  if opts.server ~= nil then return from_options(opts) end
  for k in pairs(CONNECTION) do
    if opts[k] ~= nil then
      raise(1, "client", ("option '%s' needs 'server' (a kubeconfig or in-cluster configuration "
        .. "brings its own)"):format(k))
    end
  end
  local o, err
  if opts.in_cluster == true then
    o, err = incluster.load(opts.service_account_dir)
  else
    o, err = from_files(opts)
  end
  if not o then return nil, err end
  for k in pairs(TUNING) do o[k] = opts[k] end
  for k, v in pairs(impersonation.from_options(opts)) do o[k] = v end
  if opts.namespace then o.namespace = opts.namespace end
  return o
end

return _M
