--- kinformer.discovery (internal): resource names -> API paths from the server's discovery, as
-- client-go's RESTMapper and kubectl resolve them. One mapper per client (client._mapper).
--
-- Contract:
-- - mapper:resolve(opts) takes kinformer.resources' options ({ resource, api_version,
--   namespace }) and returns { group, version, resource, kind, namespaced, namespace, path },
--   or nil, err, code: "ENOTFOUND" for a name that neither discovery nor (discovery unreachable)
--   the built-in table knows, the message listing near matches; "EINVAL" for a bad value.
-- - Names, as kubectl takes them, case-insensitive: the plural, the singular, a short name or
--   the kind ("pods", "pod", "po", "Pod"), each optionally followed by ".group" or
--   ".version.group" ("deploy.apps", "deployments.v1.apps"). Without a version the name takes
--   its group's preferred version (the first of the group's versions, in the server's order of
--   preference, that serves it); a name served by several groups takes the first group in
--   discovery order (the core group first). Full names win over short names; a short name's
--   group may be given by a prefix ("hpa.autoscal"), as kubectl allows.
-- - Requests: the first name that needs discovery fetches it with blocking requests on the
--   calling thread (the client's REST path, csrc/request.h): GET /api and GET /apis asking for
--   aggregated discovery (apidiscovery.k8s.io v2, then v2beta1) and, where the server answers
--   with the legacy documents instead (the response's Content-Type tells), one GET per group
--   version. The result is cached on the client. A name the cache does not know refreshes it
--   once (a CRD installed after start), at most once per MIN_REFRESH seconds; a failed refresh
--   keeps the cache. A group version that fails alone is left out (client-go's partial
--   discovery). No request at all for a { group, version, resource } table, nor for
--   api_version with a resource the built-in table knows in that group.
-- - Unreachable: while discovery cannot be fetched (no answer, or an error status for /api or
--   /apis) and nothing is cached, names resolve from the built-in table (kinformer.resources),
--   said once per client in a "warn" log line; discovery is tried again at most every
--   MIN_REFRESH seconds.
-- Threads: the Lua thread that owns the client. Time: kinformer.clock, read at each use.
local cjson = require "cjson.safe"
local core = require "kinformer.core"
local resources = require "kinformer.resources"
local clock = require "kinformer.clock"

local type, ipairs, tostring, setmetatable = type, ipairs, tostring, setmetatable
local lower, format, concat, sort = string.lower, string.format, table.concat, table.sort
local math_min, math_huge, math_floor = math.min, math.huge, math.floor
local log = core.log

local _M = {
  MIN_REFRESH = 5, -- seconds: refreshes for unknown names, retries while unreachable
  TIMEOUT = 10,    -- seconds per discovery request
}

local ACCEPT = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
  .. "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
  .. "application/json"
local MAX_SUGGESTIONS = 5

local Mapper = {}
Mapper.__index = Mapper

--- discovery.new(core_client) -> mapper (no request until a name needs one)
function _M.new(core_client)
  return setmetatable({ _core = core_client, _index = nil, _refreshed_at = -math_huge,
                        _failed_at = -math_huge, _why = nil, _warned = false }, Mapper)
end

-- ---- the index --------------------------------------------------------------------------------

local function str(x) return type(x) == "string" and x ~= "" and x or nil end
local function arr(x) return type(x) == "table" and x or {} end

local function new_index() return { entries = {}, names = {}, short = {}, kinds = {} } end

local function push(map, key, e)
  local l = map[key]
  if not l then
    l = {}
    map[key] = l
  end
  l[#l + 1] = e
end

-- One served resource, appended in priority order (discovery order, preferred version first).
local function add(idx, group, version, resource, singular, kind, namespaced, short_names)
  if not resource or resource:find("/", 1, true) then return end -- subresources
  local e = { group = group, version = version, resource = resource, kind = kind,
              namespaced = namespaced, words = {} }
  idx.entries[#idx.entries + 1] = e
  local w = e.words
  w[1] = lower(resource)
  push(idx.names, w[1], e)
  singular = singular or (kind and lower(kind))
  if singular and lower(singular) ~= w[1] then
    w[#w + 1] = lower(singular)
    push(idx.names, w[#w], e)
  end
  for _, s in ipairs(short_names) do
    if str(s) then
      w[#w + 1] = lower(s)
      push(idx.short, w[#w], e)
    end
  end
  if kind then push(idx.kinds, lower(kind), e) end
end

-- APIGroupDiscoveryList (apidiscovery.k8s.io v2 / v2beta1): groups, their versions in order of
-- preference, each with its resources.
local function add_aggregated(idx, doc)
  for _, g in ipairs(arr(doc.items)) do
    local group = type(g) == "table" and type(g.metadata) == "table" and str(g.metadata.name) or ""
    for _, v in ipairs(type(g) == "table" and arr(g.versions) or {}) do
      local version = type(v) == "table" and str(v.version)
      for _, r in ipairs(version and arr(v.resources) or {}) do
        if type(r) == "table" then
          local kind = type(r.responseKind) == "table" and str(r.responseKind.kind) or nil
          add(idx, group, version, str(r.resource), str(r.singularResource), kind,
              r.scope ~= "Cluster", arr(r.shortNames))
        end
      end
    end
  end
end

-- APIResourceList of one group version.
local function add_list(idx, group, version, doc)
  for _, r in ipairs(arr(doc.resources)) do
    if type(r) == "table" then
      add(idx, group, version, str(r.name), str(r.singularName), str(r.kind),
          r.namespaced == true, arr(r.shortNames))
    end
  end
end

-- GET path (accept: the Accept header, nil for plain JSON) -> decoded document, is_aggregated
-- | nil, err
local function get(c, path, accept)
  local status, body, _, ctype = c:request("GET", path, nil, nil, _M.TIMEOUT, nil, accept)
  if status == nil then return nil, format("GET %s: %s", path, tostring(body)) end
  if status ~= 200 then
    local st = cjson.decode(body)
    local msg = type(st) == "table" and str(st.message)
    return nil, format("GET %s: HTTP %d%s", path, status, msg and (" " .. msg) or "")
  end
  local doc = cjson.decode(body)
  if type(doc) ~= "table" then
    return nil, format("GET %s: the answer is not a JSON object", path)
  end
  return doc, type(ctype) == "string" and ctype:find("as=APIGroupDiscoveryList", 1, true) ~= nil
end

-- A legacy group version's APIResourceList into idx; a failure leaves it out.
local function add_group_version(c, idx, group, version)
  local doc, err = get(c, group == "" and "/api/" .. version or "/apis/" .. group .. "/" .. version)
  if doc then
    add_list(idx, group, version, doc)
  else
    log("debug", "discovery: " .. err .. " (left out)")
  end
end

-- The whole discovery -> index | nil, err
local function fetch(c)
  local idx = new_index()
  local api, agg = get(c, "/api", ACCEPT)
  if not api then return nil, agg end
  if agg then
    add_aggregated(idx, api)
  else -- APIVersions
    for _, v in ipairs(arr(api.versions)) do
      if str(v) then add_group_version(c, idx, "", v) end
    end
  end
  local apis
  apis, agg = get(c, "/apis", ACCEPT)
  if not apis then return nil, agg end
  if agg then
    add_aggregated(idx, apis)
    return idx
  end
  for _, g in ipairs(arr(apis.groups)) do -- APIGroupList: the preferred version first
    local group = type(g) == "table" and str(g.name)
    if group then
      local pref = type(g.preferredVersion) == "table" and str(g.preferredVersion.version)
      if pref then add_group_version(c, idx, group, pref) end
      for _, v in ipairs(arr(g.versions)) do
        local version = type(v) == "table" and str(v.version)
        if version and version ~= pref then add_group_version(c, idx, group, version) end
      end
    end
  end
  return idx
end

-- ---- lookups ----------------------------------------------------------------------------------

-- The first entry of list (priority order) in group (or a group starting with it, for prefix)
-- and version; nil group or version: any.
local function pick(list, group, version, prefix)
  if not list then return nil end
  for _, e in ipairs(list) do
    if (version == nil or e.version == version) and (group == nil or e.group == group
        or (prefix and e.group:sub(1, #group) == group)) then
      return e
    end
  end
end

-- kubectl's readings of a name -> { { word, group | nil, version | nil }, ... }, the most specific
-- first ("a.b.c": resource a, version b, group c; then resource a, group b.c). g0, v0: the
-- api_version's group and version; readings that contradict it are dropped.
local function readings(name, g0, v0)
  name = lower(name)
  local word, rest = name:match("^([^.]+)%.(.+)$")
  if not word then return { { name, g0, v0 } } end
  local out = {}
  local v, g = rest:match("^([^.]+)%.(.+)$")
  if v and (g0 == nil or (g == g0 and v == v0)) then out[#out + 1] = { word, g, v } end
  if g0 == nil or rest == g0 then out[#out + 1] = { word, rest, v0 } end
  return out
end

local function find(idx, forms)
  for _, f in ipairs(forms) do
    local word, g, v = f[1], f[2], f[3]
    local e = pick(idx.names[word], g, v) or pick(idx.short[word], g, v)
      or (g and pick(idx.short[word], g, v, true)) or pick(idx.kinds[word], g, v)
    if e then return e end
  end
end

-- Edit distance with transpositions (optimal string alignment), for near matches.
local function distance(a, b)
  local la, lb = #a, #b
  local prev2, prev, cur = {}, {}, {}
  for j = 0, lb do prev[j] = j end
  for i = 1, la do
    cur[0] = i
    local ca = a:byte(i)
    for j = 1, lb do
      local cb = b:byte(j)
      local d = math_min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca == cb and 0 or 1))
      if i > 1 and j > 1 and ca == b:byte(j - 1) and a:byte(i - 1) == cb then
        d = math_min(d, prev2[j - 2] + 1)
      end
      cur[j] = d
    end
    prev2, prev, cur = prev, cur, prev2
  end
  return prev[lb]
end

-- Names near `name` -> { "deployments.apps", ... }: entries one of whose words (plural,
-- singular, short names) is within a small edit distance of the name's first part, or starts
-- with it; closest first, then in priority order.
local function near(idx, name)
  local word = lower(name):match("^[^.]*")
  local limit = math_min(3, math.max(1, math_floor(#word / 4)))
  local scored, seen = {}, {}
  for i, e in ipairs(idx.entries) do
    local q = e.group == "" and e.resource or (e.resource .. "." .. e.group)
    if not seen[q] then
      local best = math_huge
      for _, w in ipairs(e.words) do
        local d = distance(word, w)
        if #word >= 3 and w:sub(1, #word) == word then d = math_min(d, 1) end
        if d < best then best = d end
      end
      if best <= limit then
        seen[q] = true
        scored[#scored + 1] = { q = q, d = best, i = i }
      end
    end
  end
  sort(scored, function(x, y) if x.d ~= y.d then return x.d < y.d end return x.i < y.i end)
  local out = {}
  for k = 1, math_min(#scored, MAX_SUGGESTIONS) do out[k] = scored[k].q end
  return out
end

local function unknown(name, api_version, matches)
  local s = format("unknown resource %q%s", name, api_version and (" in " .. api_version) or "")
  if #matches > 0 then return s .. ": did you mean " .. concat(matches, ", ") .. "?" end
  return s .. ": the server has no resource, short name or kind of that name"
end

local offline_index -- the built-in table as an index, for near matches when offline
local function offline()
  if not offline_index then
    offline_index = new_index()
    local names = resources.names()
    sort(names)
    for _, q in ipairs(names) do
      local r, g = q:match("^([^.]+)%.?(.*)$")
      add(offline_index, g, resources.builtin(r, g), r, nil, nil, true, {})
    end
  end
  return offline_index
end

-- ---- the mapper -------------------------------------------------------------------------------

-- Fetches discovery now -> index | nil, err (the cache is kept on failure).
function Mapper:_fetch()
  local idx, err = fetch(self._core)
  if idx then
    self._index = idx
    return idx
  end
  self._failed_at, self._why = clock.now(), err
  return nil, err
end

-- The cached index, fetched when there is none (not within MIN_REFRESH of a failure).
function Mapper:_cache()
  if self._index then return self._index end
  if clock.now() - self._failed_at < _M.MIN_REFRESH then return nil, self._why end
  return self:_fetch()
end

-- Whether an unknown name may refresh the cache now (then counts as the refresh).
function Mapper:_may_refresh()
  local now = clock.now()
  if now - self._refreshed_at < _M.MIN_REFRESH then return false end
  self._refreshed_at = now
  return true
end

function Mapper:_offline(opts, why)
  if not self._warned then
    self._warned = true
    log("warn", "discovery unavailable (" .. why .. "): resource names resolve from the "
      .. "built-in table")
  end
  local res, err, code = resources.resolve(opts)
  if not res and code == "ENOTFOUND" then
    local matches = near(offline(), opts.resource)
    err = err .. (#matches > 0 and ("; did you mean " .. concat(matches, ", ") .. "?") or "")
      .. " (discovery unavailable: " .. why .. ")"
  end
  return res, err, code
end

--- mapper:resolve{ resource = name | table, api_version = ..., namespace = ... }
-- -> { group, version, resource, kind, namespaced, namespace, path } | nil, err, code
function Mapper:resolve(opts)
  local name = opts.resource
  if type(name) ~= "string" or name == "" then return resources.resolve(opts) end
  local g0, v0
  if opts.api_version ~= nil then
    g0, v0 = resources.api_version(opts.api_version)
    if not g0 then return nil, v0, "EINVAL" end
    if resources.builtin(name, g0) then return resources.resolve(opts) end
  end
  local forms = readings(name, g0, v0)
  if #forms == 0 then
    return nil, format("api_version %s does not match the group of %s", opts.api_version, name),
      "EINVAL"
  end
  local idx, why = self:_cache()
  if not idx then return self:_offline(opts, why) end
  local e = find(idx, forms)
  if not e and self:_may_refresh() then
    local fresh = self:_fetch()
    if fresh then
      idx = fresh
      e = find(idx, forms)
    end
  end
  if not e then return nil, unknown(name, opts.api_version, near(idx, name)), "ENOTFOUND" end
  return resources.build(e, opts.namespace)
end

return _M
