--- kinformer.rbac: the RBAC rules a kinformer.manager's controllers need, and their manifests
-- (a ClusterRole / Roles bound to a ServiceAccount). docs/controller.md, "RBAC".
--
-- Contract:
-- - rules(mgr) reads what the manager has been told (its informers, its controllers' options,
--   leader election or sharding, the `rbac` rules declared on the manager and on controllers);
--   it makes no request and changes nothing. It sees only what was declared: a call a
--   reconcile makes on its own (client:update_status, a get of a resource no informer caches)
--   must be declared with an `rbac` option.
-- - What each thing implies:
--     every informer the manager runs (controllers' primary, owns and watches sources,
--       mgr:informer{...}): get, list, watch on its resource (get: a reconcile reads an object
--       from the server when its cache is older than the manager's own write);
--     a primary with a finalizer: get, update, patch (the finalizer is added by update and
--       removed by a JSON patch);
--     owns: get, create, update, patch, delete of the owned resource;
--     the Event recorder: create, patch of core events;
--     leader election / sharding: get, create, update of coordination.k8s.io leases (sharding
--       also lists and watches its group's Leases through an informer of the manager).
--   Rules are scoped to the namespace of the informer (or controller) they come from; nil
--   means every namespace. Events are scoped to the namespaces of the primaries (every
--   namespace when a primary is cluster-wide); Leases to the namespace of the Lease.
-- - Rules with the same namespace, apiGroups and resources merge (the union of their verbs).
--   The output is sorted: the same manager gives the same bytes.
-- - Manifests: one ClusterRole + ClusterRoleBinding for the rules without a namespace, and one
--   Role + RoleBinding per namespace for the others; all bind the ServiceAccount given.
-- - The command (bin/kinformer-rbac) loads a controller script with KINFORMER_RBAC set: when this
--   module is loaded with that variable set (lua5.4 -l kinformer.rbac), it replaces the
--   manager's start, wait_for_sync, step and run with a function that prints the manager's
--   manifests and exits (rbac.capture). Nothing else reads the variable.
local argcheck = require "kinformer.argcheck"

local type, tostring, pairs, ipairs, next = type, tostring, pairs, ipairs, next
local sort, concat = table.sort, table.concat
local string_format = string.format
local raise = argcheck.raise

local _M = { _VERSION = "0.1" }

local RULE_KEYS = { apiGroups = true, resources = true, verbs = true, namespace = true }

local function string_list(v, what, fname)
  if type(v) ~= "table" or next(v) == nil then
    raise(1, fname, what .. " must be a non-empty list of strings")
  end
  local out = {}
  for i, s in ipairs(v) do
    if type(s) ~= "string" then raise(1, fname, string_format("%s[%d] must be a string", what, i)) end
    out[i] = s
  end
  if #out == 0 then raise(1, fname, what .. " must be a non-empty list of strings") end
  return out
end

--- rbac.check(list, fname) -> a copy of list | nil for nil: checks an `rbac` option (a list
-- of { apiGroups = { ... }, resources = { ... }, verbs = { ... } [, namespace = "ns"] });
-- raises at the caller's caller naming fname for a bad one.
function _M.check(list, fname)
  if list == nil then return nil end
  if type(list) ~= "table" then raise(1, fname, "option 'rbac' must be a list of rules") end
  local out = {}
  for i, r in ipairs(list) do
    local what = string_format("rbac[%d]", i)
    if type(r) ~= "table" then raise(1, fname, what .. " must be a table") end
    for k in pairs(r) do
      if not RULE_KEYS[k] then
        raise(1, fname, string_format("%s: unknown field '%s'", what, tostring(k)))
      end
    end
    if r.namespace ~= nil and (type(r.namespace) ~= "string" or r.namespace == "") then
      raise(1, fname, what .. ".namespace must be a non-empty string")
    end
    out[i] = { apiGroups = string_list(r.apiGroups, what .. ".apiGroups", fname),
               resources = string_list(r.resources, what .. ".resources", fname),
               verbs = string_list(r.verbs, what .. ".verbs", fname), namespace = r.namespace }
  end
  return out
end

-- ---- collecting and merging ----

local function sorted_unique(list)
  local seen, out = {}, {}
  for _, s in ipairs(list) do
    if not seen[s] then seen[s] = true out[#out + 1] = s end
  end
  sort(out)
  return out
end

local function collector()
  local by_key, list = {}, {}
  return function(ns, groups, resources, verbs)
    if ns == nil and groups == nil then return list end -- the end: the rules collected
    groups, resources = sorted_unique(groups), sorted_unique(resources)
    local key = (ns or "") .. "\0" .. concat(groups, ",") .. "\0" .. concat(resources, ",")
    local r = by_key[key]
    if not r then
      r = { namespace = ns, apiGroups = groups, resources = resources, verbs = {} }
      by_key[key] = r
      list[#list + 1] = r
    end
    for _, v in ipairs(verbs) do r.verbs[#r.verbs + 1] = v end
  end
end

local function rule_less(a, b)
  local an, bn = a.namespace or "", b.namespace or ""
  if an ~= bn then return an < bn end
  local ag, bg = concat(a.apiGroups, ","), concat(b.apiGroups, ",")
  if ag ~= bg then return ag < bg end
  return concat(a.resources, ",") < concat(b.resources, ",")
end

local READ = { "get", "list", "watch" }
local FINALIZER = { "get", "update", "patch" }
local OWNS = { "get", "create", "update", "patch", "delete" }
local EVENTS = { "create", "patch" }
local LEASES = { "get", "create", "update" }

--- rbac.rules(mgr) -> { { apiGroups = { g }, resources = { r }, verbs = { ... },
--   namespace = "ns" | nil }, ... }: sorted by namespace (cluster-wide first), apiGroups,
-- resources; verbs sorted.
function _M.rules(mgr)
  local add = collector()
  for _, inf in ipairs(mgr._informers) do
    add(inf.namespace, { inf.group or "" }, { inf.resource }, READ)
  end
  local event_ns, cluster_events = {}, false
  for _, name in ipairs(mgr._order) do
    local c = mgr.controllers[name]
    local pinf = c.primary
    if pinf.namespace then event_ns[pinf.namespace] = true else cluster_events = true end
    if c.finalizer then add(pinf.namespace, { pinf.group or "" }, { pinf.resource }, FINALIZER) end
    for _, s in ipairs(c.sources) do
      if s.kind == "owns" then
        add(s.informer.namespace, { s.informer.group or "" }, { s.informer.resource }, OWNS)
      end
    end
    for _, r in ipairs(c.rbac or {}) do
      add(r.namespace or c.namespace, r.apiGroups, r.resources, r.verbs)
    end
  end
  if cluster_events then
    add(nil, { "" }, { "events" }, EVENTS)
  else
    for ns in pairs(event_ns) do add(ns, { "" }, { "events" }, EVENTS) end
  end
  local elector = mgr._elector
  if elector then
    add(elector.namespace, { "coordination.k8s.io" }, { "leases" }, LEASES)
  end
  for _, r in ipairs(mgr._rbac or {}) do add(r.namespace, r.apiGroups, r.resources, r.verbs) end
  local list = add()
  for _, r in ipairs(list) do r.verbs = sorted_unique(r.verbs) end
  sort(list, rule_less)
  return list
end

-- ---- manifests ----

local function manifests(rules, o)
  local cluster, by_ns, nss = {}, {}, {}
  for _, r in ipairs(rules) do
    local plain = { apiGroups = r.apiGroups, resources = r.resources, verbs = r.verbs }
    if r.namespace then
      if not by_ns[r.namespace] then by_ns[r.namespace] = {} nss[#nss + 1] = r.namespace end
      local l = by_ns[r.namespace]
      l[#l + 1] = plain
    else
      cluster[#cluster + 1] = plain
    end
  end
  sort(nss)
  local subject = { { kind = "ServiceAccount", name = o.service_account, namespace = o.namespace } }
  local out = {}
  if #cluster > 0 then
    out[#out + 1] = { apiVersion = "rbac.authorization.k8s.io/v1", kind = "ClusterRole",
                      metadata = { name = o.name }, rules = cluster }
    out[#out + 1] = { apiVersion = "rbac.authorization.k8s.io/v1", kind = "ClusterRoleBinding",
      metadata = { name = o.name },
      roleRef = { apiGroup = "rbac.authorization.k8s.io", kind = "ClusterRole", name = o.name },
      subjects = subject }
  end
  for _, ns in ipairs(nss) do
    out[#out + 1] = { apiVersion = "rbac.authorization.k8s.io/v1", kind = "Role",
                      metadata = { name = o.name, namespace = ns }, rules = by_ns[ns] }
    out[#out + 1] = { apiVersion = "rbac.authorization.k8s.io/v1", kind = "RoleBinding",
      metadata = { name = o.name, namespace = ns },
      roleRef = { apiGroup = "rbac.authorization.k8s.io", kind = "Role", name = o.name },
      subjects = subject }
  end
  return out
end

-- Keys in the order kubectl and people write them; others after, sorted.
local ORDER = { apiVersion = 1, kind = 2, metadata = 3, name = 4, namespace = 5, rules = 6,
  apiGroups = 7, resources = 8, verbs = 9, roleRef = 10, subjects = 12, apiGroup = 1.5 }

local function keys_of(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  sort(ks, function(a, b)
    local x, y = ORDER[a] or 100, ORDER[b] or 100
    if x ~= y then return x < y end
    return a < b
  end)
  return ks
end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' then return '\\"' elseif c == "\\" then return "\\\\" end
    return string_format("\\u%04x", c:byte())
  end) .. '"'
end

local function is_list(t) return t[1] ~= nil or next(t) == nil end

local function json(v, indent)
  if type(v) == "string" then return json_string(v) end
  local pad, inner = indent, indent .. "  "
  local parts = {}
  if is_list(v) then
    for i, x in ipairs(v) do parts[i] = inner .. json(x, inner) end
    if #parts == 0 then return "[]" end
    return "[\n" .. concat(parts, ",\n") .. "\n" .. pad .. "]"
  end
  for _, k in ipairs(keys_of(v)) do parts[#parts + 1] = inner .. json_string(k) .. ": " .. json(v[k], inner) end
  return "{\n" .. concat(parts, ",\n") .. "\n" .. pad .. "}"
end

local YAML_WORDS = { ["true"] = true, ["false"] = true, yes = true, no = true, on = true,
  off = true, null = true, y = true, n = true }

local function yaml_scalar(s)
  if s:match("^[%a][%w%-%./]*$") and not YAML_WORDS[s:lower()] then return s end
  return json_string(s)
end

-- A map's lines at indent; first line prefixed by lead (a list item's "- ").
local function yaml_map(t, indent, out, lead)
  for i, k in ipairs(keys_of(t)) do
    local v = t[k]
    local prefix = (i == 1 and lead or indent) .. k .. ":"
    if type(v) == "string" then
      out[#out + 1] = prefix .. " " .. yaml_scalar(v)
    elseif is_list(v) then
      out[#out + 1] = prefix
      for _, x in ipairs(v) do
        if type(x) == "string" then
          out[#out + 1] = indent .. "- " .. yaml_scalar(x)
        else
          yaml_map(x, indent .. "  ", out, indent .. "- ")
        end
      end
    else
      out[#out + 1] = prefix
      yaml_map(v, indent .. "  ", out, indent .. "  ")
    end
  end
end

--- rbac.render(objects, "yaml" | "json") -> text: YAML documents separated by "---", or a JSON
-- v1 List; keys in a fixed order.
function _M.render(objs, format)
  if format == "json" then
    return json({ apiVersion = "v1", kind = "List", items = objs }, "") .. "\n"
  end
  local out = {}
  for i, o in ipairs(objs) do
    if i > 1 then out[#out + 1] = "---" end
    yaml_map(o, "", out, "")
  end
  return concat(out, "\n") .. "\n"
end

local FORMATS = { yaml = true, json = true, table = true }
local OPTS = { name = true, service_account = true, namespace = true, format = true }

--- mgr:rbac([opts]) -> rules (rbac.rules) without opts.format; with it the manifests binding
-- them to a ServiceAccount: format "yaml" (a string of documents), "json" (a string, a v1
-- List) or "table" (a list of objects). opts: name (of the roles and bindings, default
-- "kinformer-controller"), service_account (default: name), namespace (the ServiceAccount's,
-- default "default").
function _M.for_manager(mgr, opts)
  local F = "rbac"
  opts = argcheck.options(opts, OPTS, F)
  local name = argcheck.string(opts, "name", F) or "kinformer-controller"
  local sa = argcheck.string(opts, "service_account", F) or name
  local ns = argcheck.string(opts, "namespace", F) or "default"
  local format = opts.format
  if format ~= nil and not FORMATS[format] then
    raise(1, F, "option 'format' must be \"yaml\", \"json\" or \"table\"")
  end
  local rules = _M.rules(mgr)
  if format == nil then return rules end
  local objs = manifests(rules, { name = name, service_account = sa, namespace = ns })
  if format == "table" then return objs end
  return _M.render(objs, format)
end

--- rbac.capture{ format =, name =, service_account =, namespace =, output = io.stdout }: from
-- now on a manager's start, wait_for_sync, step and run write mgr:rbac(opts) to output and
-- exit the process with status 0 instead of running (the command's mode: a controller script
-- runs up to the point where its manager would start, and prints what it needs).
function _M.capture(opts)
  opts = opts or {}
  local Manager = require("kinformer.manager").Manager
  local out = opts.output or io.stdout
  local ro = { format = opts.format or "yaml", name = opts.name,
               service_account = opts.service_account, namespace = opts.namespace }
  local function print_and_exit(self)
    local text = _M.for_manager(self, ro)
    out:write(text)
    out:flush()
    os.exit(0)
  end
  Manager.start, Manager.wait_for_sync = print_and_exit, print_and_exit
  Manager.step, Manager.run = print_and_exit, print_and_exit
  -- Offline (the built-in table, or a "plural.version.group" name) a resource has no kind, which
  -- a controller needs only to match ownerReferences: clients made from now on name it "-".
  local discovery = require "kinformer.discovery"
  local new = discovery.new
  discovery.new = function(...)
    local m = new(...)
    local resolve = m.resolve
    m.resolve = function(self, o)
      local res, err, code = resolve(self, o)
      if res and res.kind == nil then res.kind = "-" end
      return res, err, code
    end
    return m
  end
end

-- KINFORMER_RBAC=yaml|json (set by bin/kinformer-rbac, with KINFORMER_RBAC_NAME,
-- KINFORMER_RBAC_SERVICE_ACCOUNT, KINFORMER_RBAC_NAMESPACE): capture from the start.
local mode = os.getenv("KINFORMER_RBAC")
if mode and mode ~= "" then
  package.loaded["kinformer.rbac"] = _M -- kinformer.manager requires this module
  local function env(n) local v = os.getenv(n) return v ~= "" and v or nil end
  _M.capture{ format = mode, name = env("KINFORMER_RBAC_NAME"),
              service_account = env("KINFORMER_RBAC_SERVICE_ACCOUNT"),
              namespace = env("KINFORMER_RBAC_NAMESPACE") }
end

return _M
