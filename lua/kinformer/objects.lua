--- kinformer.objects: what a controller does to the objects it owns (controller-runtime's
-- controllerutil): owner references, and writes made only when they change something.
-- docs/objects.md.
--
-- Contract:
-- - Owner references. set_controller_reference(owner, obj) and set_owner_reference(owner, obj)
--   add to obj.metadata.ownerReferences the reference to owner, or refresh the one already
--   there: a reference names the same object when its API group (apiVersion without the
--   version), kind and name are owner's (controller-runtime's referSameObject), so an owner
--   deleted and created again under its name has its reference's uid refreshed. They read owner
--   (a cached, read-only object is fine) and change obj in place (a plain table: a cached
--   object raises). A refusal changes nothing: a namespaced owner of an object in another
--   namespace, or of an object without metadata.namespace (cluster-scoped), and (controller
--   reference) an object whose controller reference names another object.
-- - create_or_update(client, resource, obj, mutate [, opts]) reads the current object (opts.current,
--   else a GET) and runs mutate on obj (absent: then a POST) or on a mutable copy of the current
--   object (present: then a PUT with the resourceVersion it was read with, only when
--   objects.equal says the copy changed). apply_if_changed(client, resource, desired [, opts])
--   reads the current object the same way and sends desired as a server-side apply only when
--   objects.contains(current, desired) is false.
-- - Failures return nil, err: the REST call's error (kinformer.rest's table: code, reason,
--   message), mutate's own err, or for the refusals above a table with reason
--   ("AlreadyOwned", "InvalidOwner") and message, tostring(err) "reason: message". Wrong
--   arguments raise at the caller's line (kinformer.argcheck).
-- - Nothing here keeps state. REST calls block the calling Lua thread (kinformer.rest).
local cjson = require "cjson.safe"

local argcheck = require "kinformer.argcheck"
local core = require "kinformer.core"

local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local getmetatable, setmetatable, rawget = getmetatable, setmetatable, rawget
local format = string.format
local raise = argcheck.raise
local to_table = core.to_table
local all_pairs = core.pairs -- every member of a cached object too, on every runtime
local null = cjson.null

local _M = { _VERSION = core._VERSION }

local Error = {}
Error.__index = Error
Error.__tostring = function(e) return e.reason .. ": " .. e.message end
Error.__concat = function(a, b) return tostring(a) .. tostring(b) end

local function new_error(reason, message, fields)
  local e = fields or {}
  e.reason, e.message = reason, message
  return setmetatable(e, Error)
end

-- ---------------------------------------------------------------------------------------------
-- Comparisons

--- objects.equal(a, b) -> true when two decoded JSON values are the same: tables by content
-- (every key of either, at any depth), numbers by value (3 and 3.0 alike), JSON null and an
-- absent value alike. An empty table differs from an absent value (`emptyDir = {}` means
-- something), and {} and [] are alike (Lua cannot tell them apart).
local function equal(a, b)
  if a == null then a = nil end
  if b == null then b = nil end
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  for k, v in all_pairs(a) do
    if not equal(v, b[k]) then return false end
  end
  for k, v in all_pairs(b) do
    if a[k] == nil and v ~= null then return false end
  end
  return true
end
_M.equal = equal

local contains

-- Every desired reference has one in current with its uid that contains it.
local function owner_refs_contained(cur, des)
  if type(cur) ~= "table" then return false end
  for _, d in ipairs(des) do
    local uid, found = type(d) == "table" and d.uid or nil, nil
    if uid == nil then return false end
    for _, c in ipairs(cur) do
      if type(c) == "table" and c.uid == uid then found = c break end
    end
    if found == nil or not contains(found, d) then return false end
  end
  return true
end

-- cur contains des; at: "top" for the object itself, "metadata" for its metadata.
function contains(cur, des, at)
  if cur == null then cur = nil end
  if des == null then return cur == nil end
  if type(des) ~= "table" then return cur == des end
  if type(cur) ~= "table" then return false end
  if des[1] ~= nil then -- a list: the same length, element by element in order
    local n = #des
    if #cur ~= n then return false end
    for i = 1, n do
      if not contains(cur[i], des[i]) then return false end
    end
    return true
  end
  for k, v in pairs(des) do
    if at == "top" then
      if k ~= "apiVersion" and k ~= "kind" then
        if not contains(cur[k], v, k == "metadata" and "metadata" or nil) then return false end
      end
    elseif at == "metadata" and k == "ownerReferences" and v ~= null then
      if not owner_refs_contained(cur[k], v) then return false end
    elseif not contains(cur[k], v) then
      return false
    end
  end
  return true
end

--- objects.contains(current, desired) -> true when current holds everything desired says:
-- maps as subsets (each of desired's keys, at any depth, with a contained value; fields only
-- current has are ignored), lists by length and element by element in order (each element
-- contained in the one at its index), scalars equal (3 and 3.0 alike), a JSON null in desired
-- matches an absent or null value; metadata.ownerReferences as a set by uid (each desired
-- reference contained in current's reference with its uid, whatever the order and the other
-- owners); apiVersion and kind are not compared (they name the schema). current may be a cached
-- object (read in place, not copied).
function _M.contains(current, desired)
  if type(desired) ~= "table" then raise(2, "contains", "table expected, got " .. type(desired)) end
  return contains(current, desired, "top")
end

-- ---------------------------------------------------------------------------------------------
-- Owner references

-- "apps/v1" -> "apps", "v1" -> "" ; nil for an apiVersion that is not group/version
local function group_of(api_version)
  if type(api_version) ~= "string" then return nil end
  local g = api_version:match("^([^/]*)/[^/]*$")
  if g then return g end
  if api_version:find("/", 1, true) then return nil end
  return ""
end

local function same_object(ref, owner_ref)
  local g = group_of(ref.apiVersion)
  return g ~= nil and g == group_of(owner_ref.apiVersion) and ref.kind == owner_ref.kind
    and ref.name == owner_ref.name
end

local function is_cached(t)
  local mt = getmetatable(t)
  if type(mt) ~= "table" then return false end
  local name = rawget(mt, "__name")
  return name == "kinformer.object" or name == "kinformer.metadata"
end

local function nonempty(v) return type(v) == "string" and v ~= "" end

local function ns_of(md)
  local ns = md.namespace
  return type(ns) == "string" and ns or ""
end

-- Checks owner and obj; -> the reference to owner (controller or not), obj's metadata
local function owner_ref(fname, owner, obj, controller)
  if type(owner) ~= "table" then raise(1, fname, "owner object expected, got " .. type(owner)) end
  local omd = owner.metadata
  if not nonempty(owner.apiVersion) or not nonempty(owner.kind) then
    raise(1, fname, "owner has no apiVersion and kind")
  end
  if type(omd) ~= "table" or not nonempty(omd.name) or not nonempty(omd.uid) then
    raise(1, fname, "owner has no metadata.name and metadata.uid (an object read from the API "
      .. "server has them)")
  end
  if type(obj) ~= "table" then raise(2, fname, "object table expected, got " .. type(obj)) end
  if is_cached(obj) then
    raise(2, fname, "the object is read-only (from a cache): change a copy, kinformer.to_table(obj)")
  end
  local md = obj.metadata
  if type(md) ~= "table" then raise(2, fname, "object has no metadata") end
  local ref = { apiVersion = owner.apiVersion, kind = owner.kind, name = omd.name, uid = omd.uid }
  if controller then
    ref.controller, ref.blockOwnerDeletion = true, true
  end
  return ref, md, ns_of(omd)
end

-- controller-runtime's validateOwner: nil, or the refusal
local function owner_scope_error(owner_ns, md)
  if owner_ns == "" then return nil end
  local ns = ns_of(md)
  if ns == "" then
    return new_error("InvalidOwner", format("cluster-scoped resource must not have a "
      .. "namespace-scoped owner, owner's namespace %s (a namespaced object needs its "
      .. "metadata.namespace set)", owner_ns))
  end
  if ns ~= owner_ns then
    return new_error("InvalidOwner", format("cross-namespace owner references are disallowed, "
      .. "owner's namespace %s, obj's namespace %s", owner_ns, ns))
  end
  return nil
end

local function refs_of(md)
  local refs = md.ownerReferences
  if type(refs) ~= "table" then return nil end
  return refs
end

-- Replaces the reference to the same object, or appends ref.
local function upsert(md, ref)
  local refs = refs_of(md)
  if refs == nil then
    md.ownerReferences = { ref }
    return
  end
  for i, r in ipairs(refs) do
    if type(r) == "table" and same_object(r, ref) then
      refs[i] = ref
      return
    end
  end
  refs[#refs + 1] = ref
end

local function first_controller(md)
  local refs = refs_of(md)
  if refs == nil then return nil end
  for _, r in ipairs(refs) do
    if type(r) == "table" and r.controller == true then return r end
  end
  return nil
end

--- objects.controller_of(obj) -> obj's controller ownerReference (the first with
-- controller = true), or nil. obj may be a cached object.
function _M.controller_of(obj)
  if type(obj) ~= "table" then raise(1, "controller_of", "object table expected, got " .. type(obj)) end
  local md = obj.metadata
  if type(md) ~= "table" then return nil end
  return first_controller(md)
end

local function key_text(md)
  local ns = ns_of(md)
  local name = nonempty(md.name) and md.name or "(unnamed)"
  return ns ~= "" and ns .. "/" .. name or name
end

--- objects.set_controller_reference(owner, obj) -> obj | nil, err
-- Sets in obj.metadata.ownerReferences the controller reference to owner: { apiVersion, kind,
-- name, uid, controller = true, blockOwnerDeletion = true }, replacing a reference to the same
-- object (group, kind, name). Refuses, changing nothing: err.reason "AlreadyOwned" when obj's
-- controller reference names another object (err.owner is that reference); "InvalidOwner"
-- when owner is namespaced and obj is in another namespace or has no namespace.
function _M.set_controller_reference(owner, obj)
  local ref, md, owner_ns = owner_ref("set_controller_reference", owner, obj, true)
  local err = owner_scope_error(owner_ns, md)
  if err then return nil, err end
  local existing = first_controller(md)
  if existing and not same_object(existing, ref) then
    return nil, new_error("AlreadyOwned", format("%s is already owned by another controller: "
      .. "%s %s %s (uid %s)", key_text(md), tostring(existing.kind), tostring(existing.apiVersion),
      tostring(existing.name), tostring(existing.uid)), { owner = existing })
  end
  upsert(md, ref)
  return obj
end

--- objects.set_owner_reference(owner, obj) -> obj | nil, err
-- Sets in obj.metadata.ownerReferences a reference to owner { apiVersion, kind, name, uid }
-- (not a controller), replacing a reference to the same object (group, kind, name). Refuses a
-- namespaced owner as set_controller_reference does ("InvalidOwner").
function _M.set_owner_reference(owner, obj)
  local ref, md, owner_ns = owner_ref("set_owner_reference", owner, obj, false)
  local err = owner_scope_error(owner_ns, md)
  if err then return nil, err end
  upsert(md, ref)
  return obj
end

-- ---------------------------------------------------------------------------------------------
-- Writes that happen only when they change something

local function check_client(fname, client)
  if type(client) ~= "table" or type(client.get) ~= "function" then
    raise(1, fname, "kinformer client expected, got " .. type(client))
  end
end

local function check_named(fname, n, obj)
  if type(obj) ~= "table" then raise(n, fname, "object table expected, got " .. type(obj)) end
  local md = obj.metadata
  if type(md) ~= "table" or not nonempty(md.name) then
    raise(n, fname, "object has no metadata.name")
  end
  local ns = md.namespace
  if ns ~= nil and type(ns) ~= "string" then
    raise(n, fname, "metadata.namespace must be a string")
  end
  return md.name, (ns ~= "" and ns or nil)
end

-- The REST options passed on to the calls.
local function rest_opts(opts, names)
  local o = {}
  for _, k in ipairs(names) do o[k] = opts[k] end
  return o
end

-- The current object: opts.current(namespace, name), else a GET (404: nil). -> obj or false
-- when absent | nil, err
local function read_current(fname, client, resource, ns, name, opts)
  if opts.current then
    local cur, err = opts.current(ns, name)
    if cur == nil and err ~= nil then return nil, err end
    if cur ~= nil and type(cur) ~= "table" then
      argcheck.fail(format("%s: opts.current returned a %s (an object or nil expected)", fname,
                           type(cur)))
    end
    return cur or false
  end
  local cur, err = client:get(resource, ns and ns .. "/" .. name or name,
                              { timeout = opts.timeout })
  if cur then return cur end
  if type(err) == "table" and err.code == 404 then return false end
  return nil, err
end

local function name_ns(md)
  if type(md) ~= "table" then return nil, nil end
  local ns = md.namespace
  return md.name, (ns ~= "" and ns or nil)
end

-- Runs mutate(target, current) -> true | nil, err; raises when mutate renamed the object.
local function run_mutate(mutate, target, current)
  local name, ns = name_ns(target.metadata)
  local ok, err = mutate(target, current)
  if ok == nil and err ~= nil then return nil, err end
  local name2, ns2 = name_ns(target.metadata)
  if name2 ~= name or ns2 ~= ns then
    argcheck.fail("create_or_update: mutate may not change the object's metadata.name or "
      .. "metadata.namespace")
  end
  return true
end

local COU_OPTS = { current = true, field_manager = true, dry_run = true, timeout = true }
local WRITE_OPTS = { "field_manager", "dry_run", "timeout" }

--- objects.create_or_update(client, resource, obj, mutate [, opts]) -> object, op | nil, err
-- controller-runtime's CreateOrUpdate. obj names the object (metadata.name, metadata.namespace)
-- and may carry initial content. The current object is opts.current(namespace, name) (a
-- cached copy or nil; nil, err is a failure) when given, else a GET (404: absent).
-- - absent: mutate(obj, nil) runs on obj, which is created -> created object, "created";
-- - present: mutate(copy, current) runs on a mutable copy of the current object; when the copy
--   is no longer objects.equal to the object as read, it is updated (PUT with the
--   resourceVersion it was read with: a stale current gets 409 Conflict) -> updated object,
--   "updated"; otherwise no request is made -> current (as read), "unchanged".
-- mutate returning nil, err aborts (nil, err returned as is); mutate may not rename the object.
-- opts: current, field_manager, dry_run, timeout (REST options of the calls).
function _M.create_or_update(client, resource, obj, mutate, opts)
  check_client("create_or_update", client)
  local name, ns = check_named("create_or_update", 3, obj)
  if is_cached(obj) then
    raise(3, "create_or_update", "the object is read-only (from a cache): pass a table that "
      .. "names the object")
  end
  if type(mutate) ~= "function" then
    raise(4, "create_or_update", "mutate function expected, got " .. type(mutate))
  end
  opts = argcheck.options(opts, COU_OPTS, "create_or_update", 5)
  argcheck.func(opts, "current", "create_or_update")
  local wopts = rest_opts(opts, WRITE_OPTS)
  local current, err = read_current("create_or_update", client, resource, ns, name, opts)
  if current == nil then return nil, err end
  if current == false then
    local ok, merr = run_mutate(mutate, obj, nil)
    if not ok then return nil, merr end
    local created, cerr = client:create(resource, obj, wopts)
    if not created then return nil, cerr end
    return created, "created"
  end
  local before, copy = to_table(current), to_table(current)
  local ok, merr = run_mutate(mutate, copy, current)
  if not ok then return nil, merr end
  if equal(before, copy) then return current, "unchanged" end
  local updated, uerr = client:update(resource, copy, wopts)
  if not updated then return nil, uerr end
  return updated, "updated"
end

local APPLY_OPTS = { current = true, field_manager = true, force = true, dry_run = true,
                     timeout = true }
local APPLY_PASS = { "field_manager", "force", "dry_run", "timeout" }

--- objects.apply_if_changed(client, resource, desired [, opts]) -> object, op | nil, err
-- desired: the fields the caller manages (apiVersion, kind, metadata.name, [namespace], and
-- e.g. labels, spec.ports). The current object is read as create_or_update reads it; when it
-- exists and objects.contains(current, desired) -> current (as read), "unchanged", no request.
-- Otherwise desired is sent as a server-side apply (client:apply, which creates a missing
-- object) -> the object the server returns, "applied".
-- opts: field_manager (required), force, dry_run, timeout (passed on to client:apply), current.
function _M.apply_if_changed(client, resource, desired, opts)
  check_client("apply_if_changed", client)
  local name, ns = check_named("apply_if_changed", 3, desired)
  if not nonempty(desired.apiVersion) or not nonempty(desired.kind) then
    raise(3, "apply_if_changed", "server-side apply needs the object's apiVersion and kind")
  end
  opts = argcheck.options(opts, APPLY_OPTS, "apply_if_changed", 4)
  argcheck.func(opts, "current", "apply_if_changed")
  if not nonempty(opts.field_manager) then
    raise(4, "apply_if_changed", "option 'field_manager' is required (server-side apply)")
  end
  local current, err = read_current("apply_if_changed", client, resource, ns, name, opts)
  if current == nil then return nil, err end
  if current and contains(current, desired, "top") then return current, "unchanged" end
  local applied, aerr = client:apply(resource, desired, rest_opts(opts, APPLY_PASS))
  if not applied then return nil, aerr end
  return applied, "applied"
end

--- objects.is_error(x) -> true for a refusal of this module (err.reason, err.message).
function _M.is_error(x) return getmetatable(x) == Error end

return _M
