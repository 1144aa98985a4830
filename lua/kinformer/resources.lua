--- kinformer.resources: resource names -> API paths, without discovery.
-- resolve{ resource = "pods" | "deployments.apps" | "endpointslices.discovery.k8s.io"
--          | "widgets.v1.example.com" | { group = g, version = v, resource = r, namespaced = b },
--          api_version = "apps/v1" (optional), namespace = "ns" (optional) }
--   -> { group, version, resource, namespaced, path } | nil, err
local type, tostring = type, tostring

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

local function known_in_group(resource, group)
  local k = KNOWN[resource]
  if k and k[1] == group then return k end
end

--- Splits "deployments.apps" / "widgets.v1.example.com" like kubectl's resource.version.group.
local function parse_name(name)
  local resource, rest = name:match("^([^.]+)%.(.+)$")
  if not resource then return name, nil, nil end
  local version, group = rest:match("^(v%d+[a-z0-9]*)%.(.+)$")
  if version then return resource, group, version end
  return resource, rest, nil
end

function _M.resolve(opts)
  local spec, group, version, resource, namespaced = opts.resource
  if type(spec) == "table" then
    group, version, resource = spec.group or "", spec.version, spec.resource
    namespaced = spec.namespaced
    if type(resource) ~= "string" or type(version) ~= "string" or type(group) ~= "string" then
      return nil, "resource table needs string fields group, version and resource"
    end
  elseif type(spec) == "string" and spec ~= "" then
    resource, group, version = parse_name(spec)
  else
    return nil, "resource must be a name like \"pods\" or a table { group, version, resource }"
  end
  if opts.api_version ~= nil then
    if type(opts.api_version) ~= "string" then return nil, "api_version must be a string" end
    local g, v = opts.api_version:match("^([^/]+)/([^/]+)$")
    if not g then g, v = "", opts.api_version end
    if group and group ~= g then
      return nil, ("api_version %s does not match the group of %s"):format(opts.api_version, tostring(spec))
    end
    group, version = g, v
  end
  local k = known_in_group(resource, group or "")
  if k == nil and group == nil then k = KNOWN[resource] end
  if k then
    group = group or k[1]
    version = version or k[2]
    if namespaced == nil then namespaced = k[3] end
  end
  if not version then
    return nil, ("unknown resource %q: give api_version = \"group/version\" or "
      .. "resource = { group = ..., version = ..., resource = ... }"):format(tostring(spec))
  end
  group = group or ""
  if namespaced == nil then namespaced = true end
  local ns = opts.namespace
  if ns ~= nil and (type(ns) ~= "string" or ns:find("/", 1, true)) then
    return nil, "namespace must be a string without '/'"
  end
  if ns == "" then ns = nil end
  if ns and not namespaced then
    return nil, ("%s is cluster-scoped: it takes no namespace"):format(resource)
  end
  local path = (group == "" and "/api/" .. version or "/apis/" .. group .. "/" .. version)
    .. (ns and "/namespaces/" .. ns or "") .. "/" .. resource
  return { group = group, version = version, resource = resource, namespaced = namespaced,
           namespace = ns, path = path }
end

return _M
