--- kinformer.ngx.balancer.endpoints (internal): the endpoints of a Service, from its EndpointSlices, as
-- the balancer uses them. Pure Lua: no nginx, no kinformer.core (specs run it on Lua 5.4).
--
-- Contract:
-- - summarize(slices) turns the slices of one Service (discovery.k8s.io/v1 objects or plain
--   tables) into a small plain table that owns nothing of them: { { family, ports = { { name,
--   port } }, eps = { { address, ready, serving, terminating } } }, ... }, one entry per slice
--   with an IPv4 or IPv6 addressType (FQDN slices are not routable by address and are skipped),
--   its ports and its endpoints that have an address. Conditions follow the API: a missing
--   `ready` or `serving` counts as true, a missing `terminating` as false. It is what the agent
--   model publishes to the workers, so it must stay JSON-able.
-- - select(summary, port, family) -> peers: the endpoints to send traffic to, by kube-proxy's
--   rules: the slices' port named `port` (a string; "" for an unnamed port), numbered `port` (a
--   number), or the only port when `port` is nil; the ready endpoints; when there is none, the
--   endpoints that are serving and terminating (kube-proxy's fallback for terminating
--   endpoints); one peer per address and port however many slices list it (the best state
--   wins). `family` "IPv4" or "IPv6" takes only that family; nil takes the ready peers of IPv4,
--   else of IPv6, and when neither family has a ready one, the serving and terminating peers of
--   IPv4, else of IPv6. Peers are sorted by
--   id ("ip:port", "[ip]:port"), so every worker gets the same order.
local type, ipairs, pairs, tostring = type, ipairs, pairs, tostring
local math_type, math_floor = math.type, math.floor
local table_sort = table.sort

local _M = {}

local SERVICE_LABEL = "kubernetes.io/service-name"
_M.SERVICE_LABEL = SERVICE_LABEL

local function is_integer(v)
  if type(v) ~= "number" then return false end
  if math_type and math_type(v) == "integer" then return true end
  return v == math_floor(v)
end

--- endpoints.service_of(slice) -> "namespace/name" of the Service the slice belongs to, or nil.
function _M.service_of(slice)
  local md = slice.metadata
  if type(md) ~= "table" then return nil end
  local labels = md.labels
  local svc = type(labels) == "table" and labels[SERVICE_LABEL]
  local ns = md.namespace
  if type(svc) ~= "string" or svc == "" or type(ns) ~= "string" then return nil end
  return ns .. "/" .. svc
end

local function condition(c, name, default)
  if type(c) ~= "table" then return default end
  local v = c[name]
  if v == nil then return default end
  return v == true
end

--- endpoints.summarize(slices) -> summary (see the contract)
function _M.summarize(slices)
  local out = {}
  for _, s in ipairs(slices) do
    local family = s.addressType
    if family == "IPv4" or family == "IPv6" then
      local ports = {}
      if type(s.ports) == "table" then
        for _, p in ipairs(s.ports) do
          if type(p) == "table" and is_integer(p.port) and p.port > 0 and p.port < 65536
             and (p.protocol == nil or p.protocol == "TCP") then
            ports[#ports + 1] = { name = type(p.name) == "string" and p.name or "", port = p.port }
          end
        end
      end
      local eps = {}
      if type(s.endpoints) == "table" then
        for _, ep in ipairs(s.endpoints) do
          local addrs = type(ep) == "table" and ep.addresses
          local addr = type(addrs) == "table" and addrs[1]
          if type(addr) == "string" and addr ~= "" then
            local c = ep.conditions
            eps[#eps + 1] = {
              address = addr,
              ready = condition(c, "ready", true),
              serving = condition(c, "serving", true),
              terminating = condition(c, "terminating", false),
            }
          end
        end
      end
      out[#out + 1] = { family = family, ports = ports, eps = eps }
    end
  end
  return out
end

-- The slice's port for the spec: a name, a number or nil (the only port); nil when none.
local function slice_port(ports, spec)
  if spec == nil then
    if #ports == 1 then return ports[1].port end
    return nil
  end
  for _, p in ipairs(ports) do
    if p.name == spec or p.port == spec then return p.port end
  end
  return nil
end

-- Rank of an endpoint's state: 2 ready, 1 serving and terminating, 0 neither.
local function rank(ep)
  if ep.ready then return 2 end
  if ep.serving and ep.terminating then return 1 end
  return 0
end

-- Peers of one family: id ("ip:port", "[ip]:port") -> best rank; and whether the port exists.
local function collect(summary, spec, family)
  local best, found = {}, false
  for _, s in ipairs(summary) do
    if s.family == family then
      local port = slice_port(s.ports, spec)
      if port then
        found = true
        for _, ep in ipairs(s.eps) do
          local host = family == "IPv6" and "[" .. ep.address .. "]" or ep.address
          local id = host .. ":" .. tostring(port)
          local r = rank(ep)
          local b = best[id]
          if b == nil or r > b.rank then
            best[id] = { id = id, host = host, port = port, rank = r }
          end
        end
      end
    end
  end
  return best, found
end

local function pick_rank(best, r)
  local out = {}
  for _, p in pairs(best) do
    if p.rank == r then out[#out + 1] = p end
  end
  table_sort(out, function(a, b) return a.id < b.id end)
  return out
end

local FAMILIES = { "IPv4", "IPv6" }

--- endpoints.select(summary, port, family) -> { peers = { { id, host, port }, ... },
--    terminating = bool (the fallback is in use), known = endpoints listed for the port,
--    ready = ready ones among them, port_found = bool }
function _M.select(summary, spec, family)
  local known, ready, port_found = 0, 0, false
  local chosen, terminating = nil, false
  local fallback = nil
  for _, fam in ipairs(FAMILIES) do
    if family == nil or family == fam then
      local best, found = collect(summary, spec, fam)
      port_found = port_found or found
      local r = pick_rank(best, 2)
      for _ in pairs(best) do known = known + 1 end
      ready = ready + #r
      if chosen == nil and #r > 0 then chosen = r end
      if fallback == nil then
        local t = pick_rank(best, 1)
        if #t > 0 then fallback = t end
      end
    end
  end
  if chosen == nil and fallback ~= nil then chosen, terminating = fallback, true end
  return { peers = chosen or {}, terminating = terminating, known = known, ready = ready,
           port_found = port_found }
end

return _M
