--- kinformer.ngx.balancer.services (internal): the balancer's Services as one nginx process sees them:
-- for each Service a request asked for, the summary of its EndpointSlices
-- (kinformer.ngx.balancer.endpoints) and a version that moves when they change.
--
-- Contract:
-- - get(key) -> svc { key, version, summary } for "namespace/name". The first call of a key in a
--   process computes it (worker and shared models: from the EndpointSlice store this process
--   reads; agent model: from the dict the agent publishes to); later calls are a table lookup.
--   Only Services asked for are kept, in every model, so a worker pays for the Services it
--   routes to, not for the cluster.
-- - The slices' handlers (handlers()) mark the Services whose slices changed; after_dispatch()
--   recomputes the marked Services this process keeps (worker and shared models) or publishes
--   them (the agent), and bumps their versions. The agent model's workers call refresh() from a
--   timer: it reloads the Services whose published summary changed. A summary is replaced,
--   never modified, so a request holding one never sees it change under it.
-- - Nothing here runs on a request except get() of a Service the process did not know yet.
local kinformer = require "kinformer"
local endpoints = require "kinformer.ngx.balancer.endpoints"

local pairs, ipairs, next = pairs, ipairs, next

local _M = {}

local VERSION_KEY = "#version" -- in the agent model's dict: bumped after every publication
local PUBLISH_MAX = 200        -- Services a worker recomputes per after_dispatch call

local svcs = {}                -- key -> svc
local dirty = {}               -- keys whose slices changed (processes with the handlers)
local slice_service = {}       -- slice key -> its Service key (processes with the handlers)
local compute = nil            -- fn(key) -> summary | nil, from this process's store
local source = nil             -- fn(key) -> summary | nil: what requests of this process read
local publish_view = nil       -- the agent model's view
local publisher = false        -- this process publishes the view (the agent)
local publishes = 0            -- the agent: publications so far (the version it publishes)
local publisher_tag = ""       -- the agent: makes its versions differ from a previous agent's
local seen_version = nil       -- agent model's workers: the last #version refresh() saw

_M.svcs = svcs

--- services.configure{ store = fn() -> store | nil, view = view | nil, publisher = bool }
-- store: a function giving the slices' store this process reads (nil where it reads none);
-- view: the agent model's view, which every process reads and the agent (publisher = true)
-- publishes from its store.
function _M.configure(o)
  local store_of = o.store
  compute = function(key)
    local store = store_of and store_of()
    if not store then return nil end
    local slices = store:by_index("service", key)
    if #slices == 0 then return nil end
    local copies = {}
    -- Copies: reading the cached slices' endpoints would keep them decoded in the cache.
    for i, s in ipairs(slices) do copies[i] = kinformer.to_table(s) end
    return endpoints.summarize(copies)
  end
  publish_view, publisher = o.view, o.publisher and o.view ~= nil
  -- After a reload the workers may have seen the old agent's #version n: the new agent's n-th
  -- publication must not look the same to them.
  if publisher then publisher_tag = ngx.worker.pid() .. "@" .. ngx.now() .. "#" end
  if publish_view then
    source = function(key) return publish_view:get(key) end
  else
    source = compute
  end
end

--- services.index(slice) -> { "namespace/name" } | nil: the "service" index function.
function _M.index(slice)
  local svc = endpoints.service_of(slice)
  return svc and { svc } or nil
end

local function mark(key)
  if key then dirty[key] = true end
end

--- services.handlers() -> the EndpointSlice handlers (mark what changed).
function _M.handlers()
  return {
    on_add = function(slice)
      local svc = endpoints.service_of(slice)
      slice_service[kinformer.key_of(slice)] = svc
      mark(svc)
    end,
    on_update = function(_, slice)
      local key = kinformer.key_of(slice)
      local svc = endpoints.service_of(slice)
      mark(slice_service[key]) -- a changed label moves the slice to another Service
      slice_service[key] = svc
      mark(svc)
    end,
    on_delete = function(slice) -- may be a tombstone: key_of gives its key
      local key = kinformer.key_of(slice)
      mark(slice_service[key])
      slice_service[key] = nil
    end,
  }
end

local function load(svc)
  local summary = source and source(svc.key) or nil
  svc.summary = summary
  svc.version = svc.version + 1
end

--- services.get(key) -> svc
function _M.get(key)
  local svc = svcs[key]
  if svc then return svc end
  svc = { key = key, version = 0, summary = nil }
  load(svc)
  svcs[key] = svc
  return svc
end

--- services.forget(): drops every kept Service (they are computed again when asked for); the
-- caller drops what holds them (the balancer's targets, which it bounds).
function _M.forget()
  for k in pairs(svcs) do svcs[k] = nil end
end

--- services.after_dispatch() -> true when marked Services are left for the next call
function _M.after_dispatch()
  local n = 0
  local published = false
  for key in pairs(dirty) do
    -- The agent publishes all at once: the view's sweep after the first sync deletes what it
    -- has not published, and a Service left for later would read as gone meanwhile.
    if n == PUBLISH_MAX and not publisher then break end
    dirty[key] = nil
    if publisher then
      -- the agent: publish every Service (workers may ask for any)
      local summary = compute(key)
      if summary then publish_view:set(key, summary) else publish_view:delete(key) end
      published = true
    end
    local svc = svcs[key]
    if svc and not publish_view then load(svc) end
    n = n + 1
  end
  if published then
    publishes = publishes + 1
    publish_view:set(VERSION_KEY, publisher_tag .. publishes)
  end
  return next(dirty) ~= nil
end

--- services.refresh(): agent model's workers: reload the kept Services whose published summary
-- changed since the last call (one dict read when nothing did).
function _M.refresh()
  if not publish_view then return end
  local v = publish_view:get(VERSION_KEY)
  if v == seen_version then return end
  seen_version = v
  for key, svc in pairs(svcs) do
    local summary = publish_view:get(key)
    if summary ~= svc.summary then
      svc.summary = summary
      svc.version = svc.version + 1
    end
  end
end

return _M
