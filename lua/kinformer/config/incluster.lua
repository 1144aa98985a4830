--- kinformer.config.incluster (internal): the in-cluster configuration (client-go
-- rest.InClusterConfig): the API server from KUBERNETES_SERVICE_HOST / _PORT, the service
-- account's token file and CA, the namespace from POD_NAMESPACE or the service account.
--
-- Contract: load(dir) -> options | nil, err; it reads the namespace file and checks the token
-- file can be opened, and never reads the token itself (the core re-reads the file when it
-- rotates). possible(dir) says whether load could work, for the fallback of an empty
-- kubeconfig. dir defaults to DEFAULT_SERVICE_ACCOUNT_DIR.
local io_open = io.open
local os_getenv = os.getenv

local util = require "kinformer.config.util"

local _M = {}

_M.DEFAULT_SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

-- "host:port" for a URL, brackets around IPv6 literals (Go's net.JoinHostPort).
local function join_host_port(host, port)
  if host:find(":", 1, true) then host = "[" .. host .. "]" end
  return host .. ":" .. port
end

--- incluster.load(dir) -> options | nil, err
function _M.load(dir)
  dir = dir or _M.DEFAULT_SERVICE_ACCOUNT_DIR
  local host, port = os_getenv("KUBERNETES_SERVICE_HOST"), os_getenv("KUBERNETES_SERVICE_PORT")
  if host == nil or host == "" or port == nil or port == "" then
    return nil, "in-cluster configuration: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
      .. "must be defined"
  end
  local token_file = dir .. "/token"
  local why = util.not_regular(token_file)
  if why then return nil, "in-cluster configuration: token file " .. why end
  local f, err = io_open(token_file, "rb")
  if not f then return nil, "in-cluster configuration: token file " .. err end
  f:close()
  local o = { server = "https://" .. join_host_port(host, port), token_file = token_file,
              source = "in-cluster" }
  -- Without ca.crt client-go goes on with the system's CAs; so do we.
  if util.exists(dir .. "/ca.crt") then o.ca_file = dir .. "/ca.crt" end
  local ns = os_getenv("POD_NAMESPACE")
  if ns == nil or ns == "" then
    local text = util.read_file(dir .. "/namespace")
    ns = text and util.trim(text) or ""
  end
  o.namespace = ns ~= "" and ns or "default"
  return o
end

--- incluster.possible(dir) -> whether the environment and the token file are there
function _M.possible(dir)
  local host, port = os_getenv("KUBERNETES_SERVICE_HOST"), os_getenv("KUBERNETES_SERVICE_PORT")
  return host ~= nil and host ~= "" and port ~= nil and port ~= ""
    and util.exists((dir or _M.DEFAULT_SERVICE_ACCOUNT_DIR) .. "/token")
end

return _M
