--- kinformer.resources (internal): resource names -> API paths without discovery: the offline
-- table of built-in Kubernetes resources, and the paths of a resolved resource.
--
-- Contract:
-- - Names resolve through the server's discovery (kinformer.discovery); this table is used only
--   where no request is wanted or possible: a `{ group, version, resource, namespaced }` table,
--   `api_version` with a resource this table knows in that group, and the fallback when the
--   server's discovery cannot be reached.
-- - resolve{ resource = "pods" | "deployments.apps" | "endpointslices.discovery.k8s.io"
--            | "widgets.v1.example.com" | { group = g, version = v, resource = r, namespaced = b },
--            api_version = "apps/v1" (optional), namespace = "ns" (optional) }
--   -> { group, version, resource, namespaced, namespace, path }
--   | nil, err, code: "ENOTFOUND" for a name this table does not know, "EINVAL" for a bad value.
-- - build(mapping, namespace) -> the same table for a resolved { group, version, resource,
--   namespaced [, kind] } | nil, err, "EINVAL" (a bad namespace, or one for a cluster-scoped
--   resource).
local type, tostring, pairs, ipairs = type, tostring, pairs, ipairs

local _M = {}

-- group, version, namespaced; "" is the core group.
local KNOWN = {
  pods = { "", "v1", true }, services = { "", "v1", true }, configmaps = { "", "v1", true },
  secrets = { "", "v1", true }, endpoints = { "", "v1", true }, events = { "", "v1", true },
  serviceaccounts = { "", "v1", true }, persistentvolumeclaims = { "", "v1", true },
  limitranges = { "", "v1", true }, resourcequotas = { "", "v1", true },
  replicationcontrollers = { "", "v1", true }, podtemplates = { "", "v1", true },
  namespaces = { "", "v1", false }, nodes = { "", "v1", false },
  persistentvolumes = { "", "v1", false },
  deployments = { "apps", "v1", true }, replicasets = { "apps", "v1", true },
  statefulsets = { "apps", "v1", true }, daemonsets = { "apps", "v1", true },
  controllerrevisions = { "apps", "v1", true },
  jobs = { "batch", "v1", true }, cronjobs = { "batch", "v1", true },
  ingresses = { "networking.k8s.io", "v1", true },
  networkpolicies = { "networking.k8s.io", "v1", true },
  ingressclasses = { "networking.k8s.io", "v1", false },
  endpointslices = { "discovery.k8s.io", "v1", true },
  leases = { "coordination.k8s.io", "v1", true },
  horizontalpodautoscalers = { "autoscaling", "v2", true },
  poddisruptionbudgets = { "policy", "v1", true },
  roles = { "rbac.authorization.k8s.io", "v1", true },
  rolebindings = { "rbac.authorization.k8s.io", "v1", true },
  clusterroles = { "rbac.authorization.k8s.io", "v1", false },
  clusterrolebindings = { "rbac.authorization.k8s.io", "v1", false },
  storageclasses = { "storage.k8s.io", "v1", false },
  customresourcedefinitions = { "apiextensions.k8s.io", "v1", false },
}

--- resources.builtin(resource, group) -> version, namespaced when the table knows the plural
-- resource in that group (any group when group is nil), else nil.
function _M.builtin(resource, group)
  local k = KNOWN[resource]
  if k and (group == nil or k[1] == group) then return k[2], k[3], k[1] end
end

--- resources.names() -> { "pods", "deployments.apps", ... }: the table's names (for near matches).
function _M.names()
  local out = {}
  for r, k in pairs(KNOWN) do out[#out + 1] = k[1] == "" and r or (r .. "." .. k[1]) end
  return out
end

--- Splits "deployments.apps" / "widgets.v1.example.com" like kubectl's resource.version.group.
local function parse_name(name)
  local resource, rest = name:match("^([^.]+)%.(.+)$")
  if not resource then return name, nil, nil end
  local version, group = rest:match("^(v%d+[a-z0-9]*)%.(.+)$")
  if version then return resource, group, version end
  return resource, rest, nil
end

--- resources.api_version(s) -> group, version ("" group for "v1") | nil, err
function _M.api_version(s)
  if type(s) ~= "string" or s == "" then return nil, "api_version must be a string" end
  local g, v = s:match("^([^/]+)/([^/]+)$")
  if g then return g, v end
  if s:find("/", 1, true) then return nil, "api_version must be \"group/version\" or \"v1\"" end
  return "", s
end

--- resources.path_segment_error(s) -> nil when s may be one segment of a URL path, else why not.
-- The rule of client-go's IsValidPathSegmentName: not "." or ".." (an HTTP client folds them,
-- so "prod/.." would name the namespace "prod"), no '/' or '%'; and no control character (a NUL
-- would end the path where C reads it). Everything else is percent-escaped by escape_segment.
function _M.path_segment_error(s)
  if type(s) ~= "string" then return "must be a string, got " .. type(s) end
  if s == "" then return "must not be empty" end
  if s == "." or s == ".." then return ("may not be %q"):format(s) end
  local bad = s:match("[/%%%c]")
  if bad then return ("may not contain %q"):format(bad) end
  return nil
end

--- resources.escape_segment(s) -> s with every byte outside RFC 3986's unreserved set escaped.
function _M.escape_segment(s)
  return (s:gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end))
end

--- resources.namespace_error(ns) -> nil for a possible namespace name, else why not. A namespace
-- is a DNS-1123 label (what the API server accepts when it creates one): no other name can
-- exist, so any other is refused before a request is made.
function _M.namespace_error(ns)
  if type(ns) ~= "string" then return "must be a string, got " .. type(ns) end
  if #ns > 63 or not ns:match("^[a-z0-9]$") and not ns:match("^[a-z0-9][a-z0-9%-]*[a-z0-9]$") then
    return ("%q is not a namespace name (lowercase letters, digits and '-', at most 63, "
      .. "starting and ending alphanumeric)"):format(ns)
  end
  return nil
end

function _M.build(m, ns)
  if ns == "" then ns = nil end
  if ns ~= nil then
    local why = _M.namespace_error(ns)
    if why then return nil, "namespace " .. why, "EINVAL" end
  end
  if ns and not m.namespaced then
    return nil, ("%s is cluster-scoped: it takes no namespace"):format(m.resource), "EINVAL"
  end
  local group, version = m.group, m.version
  for _, f in ipairs{ "version", "resource" } do
    local why = _M.path_segment_error(m[f])
    if why then return nil, ("resource %s %s"):format(f, why), "EINVAL" end
  end
  if group ~= "" then
    local why = _M.path_segment_error(group)
    if why then return nil, "resource group " .. why, "EINVAL" end
  end
  local esc = _M.escape_segment
  local path = (group == "" and "/api/" .. esc(version) or "/apis/" .. esc(group) .. "/" .. esc(version))
    .. (ns and "/namespaces/" .. ns or "") .. "/" .. esc(m.resource)
  return { group = group, version = version, resource = m.resource, kind = m.kind,
           namespaced = m.namespaced, namespace = ns, path = path }
end

function _M.resolve(opts)
  local spec, group, version, resource, namespaced = opts.resource
  if type(spec) == "table" then
    group, version, resource = spec.group or "", spec.version, spec.resource
    namespaced = spec.namespaced
    if type(resource) ~= "string" or type(version) ~= "string" or type(group) ~= "string" then
      return nil, "resource table needs string fields group, version and resource", "EINVAL"
    end
  elseif type(spec) == "string" and spec ~= "" then
    resource, group, version = parse_name(spec)
  else
    return nil, "resource must be a name like \"pods\" or a table { group, version, resource }",
      "EINVAL"
  end
  if opts.api_version ~= nil then
    local g, v = _M.api_version(opts.api_version)
    if not g then return nil, v, "EINVAL" end
    if group and group ~= g then
      return nil, ("api_version %s does not match the group of %s"):format(opts.api_version,
        tostring(spec)), "EINVAL"
    end
    group, version = g, v
  end
  local kv, kns, kg = _M.builtin(resource, group)
  if kv then
    group = group or kg
    version = version or kv
    if namespaced == nil then namespaced = kns end
  end
  if not version then
    return nil, ("unknown resource %q: give api_version = \"group/version\" or "
      .. "resource = { group = ..., version = ..., resource = ... }"):format(tostring(spec)),
      "ENOTFOUND"
  end
  if namespaced == nil then namespaced = true end
  return _M.build({ group = group or "", version = version, resource = resource,
                    namespaced = namespaced }, opts.namespace)
end

return _M
