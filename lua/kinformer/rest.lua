--- kinformer.rest: writes and reads against the API server, for controllers.
-- client:get / list / create / update / update_status / patch / delete, the status and scale
-- subresources (patch_status, get_scale, update_scale, patch_scale, update_status_if_changed),
-- server-side apply (apply); installed on the client by kinformer.client (_M.METHODS); docs/rest.md.
--
-- Contract:
-- - Every call is one blocking HTTP request from the calling Lua thread (csrc/request.h), with
--   the client's configuration and credentials; informers' watches go on meanwhile on the
--   client's I/O thread. Not for an nginx request handler: use an informer's store there.
--   Inside a task (kinformer.task: a manager's reconciles, elector and recorder) each request
--   is a call on the client's I/O thread instead (core_client:call) and only the task waits,
--   as it does for the throttle and Retry-After; the task's guard is asked right before each
--   request is sent (a refusal: err.reason "Fenced", nothing sent), its on_write hook told of
--   each successful write.
-- - Success returns the decoded response (a plain, mutable Lua table; kinformer's decoder: JSON
--   integers are Lua 5.4 integers, null is cjson.null, docs/api.md).
--   Failure returns nil, err where err is a table: err.code (HTTP status; 0 when no response
--   came), err.reason (the Status reason, e.g. "Conflict", "NotFound", "AlreadyExists";
--   "Transport", "ResponseTooLarge" or "InvalidResponse" without a Status), err.message,
--   err.status (the decoded Status, when the server sent one), err.retry_after (seconds, from
--   Retry-After), err.method, err.path and err.retries. tostring(err) is "409 Conflict: <message>".
-- - Every HTTP request of a call, retries included, first takes a token from the client's
--   throttle (qps / burst, kinformer.flowcontrol). A 429, or a 5xx with Retry-After, is sent
--   again after the server's delay (client-go's rule, any verb), at most max_retries times,
--   only for a delay up to flowcontrol.MAX_RETRY_WAIT and only while the call's timeout (which
--   bounds the whole call, as client-go's request timeout does) leaves time for the delay and
--   the request; a 401 with a refreshable credential is
--   sent once more (in C). err.retries says how many retries were made. Wrong arguments raise.
--   Controllers retry the rest through their work queue (add_rate_limited, or add_after with
--   err.retry_after).
-- - Names: get/update/patch/delete take a name or an object key "namespace/name" (what the
--   work queue hands out). A namespaced resource's namespace comes from the key, else
--   opts.namespace, else (create/update) the object's metadata.namespace, else the client's
--   namespace (the kubeconfig context's, "default"). list without a namespace lists all.
-- - Resources are named as for client:resolve (kinformer.discovery: the server's discovery,
--   cached per client). An unknown name returns nil, err with err.reason "UnknownResource"
--   (code 0) and a message listing near matches.
local cjson = require "cjson.safe"

local resources = require "kinformer.resources"
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"
local clock = require "kinformer.clock"
local task = require "kinformer.task"
local raise = argcheck.raise

local DEFAULT_TIMEOUT = 30 -- seconds for a whole call, retries included (csrc/request.h's too)

local type, tostring, ipairs, pairs, next = type, tostring, ipairs, pairs, next
local setmetatable, getmetatable = setmetatable, getmetatable
local concat = table.concat
local encode = core.encode

local _M = {}

local PATCH_TYPES = {
  merge = "application/merge-patch+json",
  json = "application/json-patch+json",
  strategic = "application/strategic-merge-patch+json",
  apply = "application/apply-patch+yaml", -- JSON is YAML: the body is sent as JSON
}

local REASONS = {
  [400] = "BadRequest", [401] = "Unauthorized", [403] = "Forbidden", [404] = "NotFound",
  [405] = "MethodNotAllowed", [406] = "NotAcceptable", [409] = "Conflict", [410] = "Expired",
  [413] = "RequestEntityTooLarge", [415] = "UnsupportedMediaType", [422] = "Invalid",
  [429] = "TooManyRequests", [500] = "InternalError", [503] = "ServiceUnavailable",
  [504] = "Timeout",
}

local Error = {}
Error.__index = Error
Error.__tostring = function(e)
  if e.code and e.code > 0 then return ("%d %s: %s"):format(e.code, e.reason, e.message) end
  return ("%s: %s"):format(e.reason, e.message)
end
Error.__concat = function(a, b) return tostring(a) .. tostring(b) end

--- kinformer.rest.is_error(x) -> true for an error value of this module
function _M.is_error(x) return getmetatable(x) == Error end

local function new_error(t) return setmetatable(t, Error) end

local function status_error(code, body, retry_after, method, path)
  local st = core.decode(body)
  if type(st) == "table" and st.kind == "Status" then
    return new_error{ code = code, reason = type(st.reason) == "string" and st.reason ~= ""
                        and st.reason or REASONS[code] or "Unknown",
                      message = type(st.message) == "string" and st.message or "",
                      status = st, retry_after = retry_after, method = method, path = path }
  end
  local msg = body:gsub("%s+", " "):sub(1, 200)
  return new_error{ code = code, reason = REASONS[code] or "Unknown",
                    message = msg ~= "" and msg or ("HTTP " .. code), retry_after = retry_after,
                    method = method, path = path }
end

local KNOWN_OPTS = {
  namespace = true, api_version = true, timeout = true, max_response_bytes = true,
  dry_run = true, field_manager = true, force = true, type = true,
  label_selector = true, field_selector = true, limit = true, continue = true,
  resource_version = true, propagation_policy = true, grace_period_seconds = true,
  preconditions = true, subresource = true,
}

local function check_opts(fname, n, opts)
  if opts == nil then return {} end
  if type(opts) ~= "table" then raise(n, fname, "options table expected, got " .. type(opts)) end
  argcheck.options(opts, KNOWN_OPTS, fname, n)
  local t = opts.timeout
  if t ~= nil and not (type(t) == "number" and t >= 0) then
    raise(n, fname, "option 'timeout' must be a number >= 0")
  end
  return opts
end

local escape = resources.escape_segment

local function query(params)
  if #params == 0 then return "" end
  return "?" .. concat(params, "&")
end

local function add_param(params, name, value)
  if value ~= nil then params[#params + 1] = name .. "=" .. escape(tostring(value)) end
end

-- -> res (the client's resolve) for resource + namespace | nil, err for an unknown resource;
-- raises on a bad resource or namespace.
local function resolve(self, fname, resource, namespace, api_version)
  local res, err, code = self._mapper:resolve{ resource = resource, namespace = namespace,
                                               api_version = api_version }
  if res then return res end
  if code == "ENOTFOUND" then
    return nil, new_error{ code = 0, reason = "UnknownResource", message = err }
  end
  raise(1, fname, err)
end

-- res for a resolved resource in namespace ns; raises on a bad namespace.
local function in_namespace(fname, probe, ns)
  local res, err = resources.build(probe, ns)
  if not res then raise(1, fname, err) end
  return res
end

-- A name or "namespace/name" key -> namespace (or nil), name.
local function split_name(fname, n, name)
  if type(name) ~= "string" or name == "" then
    raise(n, fname, "name or \"namespace/name\" key expected, got " .. type(name))
  end
  local ns, nm = name:match("^([^/]*)/([^/]+)$")
  if not ns then
    if name:find("/", 1, true) then raise(n, fname, ("malformed key %q"):format(name)) end
    nm = name
  end
  if ns == "" then ns = nil end
  return ns, nm
end

-- The path of one object (and subresource) of a resource | nil, err for an unknown resource.
-- Raises for a name that is not one path segment (the object's name is argument #2 of every
-- call that names an object).
local function object_path(self, fname, resource, ns, name, opts, sub)
  local why = resources.path_segment_error(name)
  if why then raise(2, fname, ("name %q %s"):format(name, why)) end
  local probe, err = resolve(self, fname, resource, nil, opts.api_version)
  if not probe then return nil, err end
  if probe.namespaced then
    ns = ns or opts.namespace or self.namespace or "default"
  elseif ns and ns ~= "" then
    raise(2, fname, probe.resource .. " is cluster-scoped: no namespace")
  else
    ns = nil
  end
  local res = in_namespace(fname, probe, ns)
  return res.path .. "/" .. escape(name) .. (sub and "/" .. sub or "")
end

local function decode_ok(body, method, path)
  if body == "" then return {} end
  local v, derr = core.decode(body)
  if v == nil then
    return nil, new_error{ code = 0, reason = "InvalidResponse", method = method, path = path,
                           message = ("%s %s: response is not JSON (%s)"):format(method, path,
                                                                                 tostring(derr)) }
  end
  return v
end

-- One call: throttled, retried after a Retry-After (kinformer.flowcontrol) -> decoded body, nil,
-- the body's text | nil, err
local function call_with_body(self, method, path, body, ctype, opts)
  local core_client, flow = self._core, self._flow
  local budget = opts.timeout
  if budget == nil or budget <= 0 then budget = DEFAULT_TIMEOUT end
  local t0 = clock.now()
  local retries, timeout = 0, budget
  while true do
    flow:throttle(method, path)
    local t = task.current()
    if t then -- asked right before sending (a throttle wait may have changed the answer)
      local ok, why = t:may_send(method, path)
      if not ok then
        return nil, new_error{ code = 0, reason = "Fenced", method = method, path = path,
                               retries = retries,
                               message = ("%s %s: not sent: %s"):format(method, path, why) }
      end
    end
    local t1 = clock.now()
    local status, resp, retry_after
    if t then -- the I/O thread sends it; the task waits, the thread goes on
      local c, cerr, ccode = core_client:call(method, path, body, ctype, timeout,
                                              opts.max_response_bytes)
      if c then
        status, resp, retry_after = t:await(c)
      else
        status, resp, retry_after = nil, cerr, ccode
      end
      if status == nil and retry_after == "ECANCELED" then -- the task is being cancelled
        return nil, new_error{ code = 0, reason = "Fenced", method = method, path = path,
                               retries = retries, message = ("%s %s: cancelled"):format(method, path) }
      end
    else
      status, resp, retry_after = core_client:request(method, path, body, ctype, timeout,
                                                      opts.max_response_bytes)
    end
    local obs = self._observer -- _M.observe: kinformer.metrics's request counts and latency
    if obs then obs(method, status or 0, clock.now() - t1) end
    if status == nil then
      local code = retry_after
      return nil, new_error{ code = 0, method = method, path = path, retries = retries,
                             reason = code == "ETOOBIG" and "ResponseTooLarge" or "Transport",
                             message = ("%s %s: %s"):format(method, path, resp) }
    end
    if status >= 200 and status < 300 then
      local v, err = decode_ok(resp, method, path)
      if t and v and method ~= "GET" and t.on_write then t.on_write(method, path, v) end
      return v, err, resp
    end
    local left = budget - (clock.now() - t0)
    local wait = flow:retry_wait(status, retry_after, retries, left)
    if wait == nil then
      local err = status_error(status, resp, retry_after, method, path)
      err.retries = retries
      return nil, err
    end
    retries = retries + 1
    flow:before_retry(wait, status, method, path, retries)
    timeout = left - wait -- the retry gets what is left of the call's timeout
  end
end

-- call_with_body without the body's text.
local function call(self, method, path, body, ctype, opts)
  local v, err = call_with_body(self, method, path, body, ctype, opts)
  return v, err
end

--- kinformer.rest.observe(client, fn | nil): fn(method, code, seconds) after every HTTP request
-- of client's REST calls, retries included (code 0: no response). One observer per client.
function _M.observe(client, fn)
  client._observer = fn
end

local function write_params(opts, params)
  params = params or {}
  if opts.dry_run then params[#params + 1] = "dryRun=All" end
  add_param(params, "fieldManager", opts.field_manager)
  return params
end

local function check_object(fname, n, obj)
  if type(obj) ~= "table" then raise(n, fname, "object table expected, got " .. type(obj)) end
  local md = obj.metadata
  if type(md) ~= "table" then raise(n, fname, "object has no metadata") end
  return md
end

local function body_of(fname, obj)
  local json, err = encode(obj)
  if not json then raise(2, fname, "cannot encode the object: " .. tostring(err)) end
  return json
end

--- client:get(resource, name_or_key [, opts]) -> object | nil, err
function _M.get(self, resource, name, opts)
  opts = check_opts("get", 3, opts)
  local ns, nm = split_name("get", 2, name)
  local path, err = object_path(self, "get", resource, ns, nm, opts)
  if not path then return nil, err end
  local params = {}
  add_param(params, "resourceVersion", opts.resource_version)
  return call(self, "GET", path .. query(params), nil, nil, opts)
end

-- A list response's items as an array, or nil, err for a body that is not a list: no items, or
-- items that are not an array. "items": null is an empty list, as client-go reads it.
local function list_items(page, path, body)
  local function bad(what)
    return nil, new_error{ code = 0, reason = "InvalidResponse", method = "GET", path = path,
                           message = ("GET %s: the response is not a list (%s)"):format(path, what) }
  end
  if type(page) ~= "table" then return bad("a JSON " .. type(page)) end
  if page[1] ~= nil then return bad("a JSON array") end
  local items = page.items
  if items == nil then
    return bad(type(page.kind) == "string" and ("a " .. page.kind .. " without items")
               or "no items")
  end
  if items == cjson.null then return {} end
  if type(items) ~= "table" then return bad("items is a " .. type(items)) end
  local k = next(items)
  -- lua-cjson decodes {} and [] alike: an empty object is told apart in the text
  if (k ~= nil and type(k) ~= "number") or (k == nil and body:find('"items"%s*:%s*{')) then
    return bad("items is an object")
  end
  return items
end

local function page_token(page, path)
  local md = page.metadata
  if md == nil or md == cjson.null then return nil end
  if type(md) ~= "table" then return nil, "metadata is a " .. type(md) end
  local token = md.continue
  if token == nil or token == cjson.null or token == "" then return nil end
  if type(token) ~= "string" then return nil, "metadata.continue is a " .. type(token) end
  return token
end

local function check_string_opt(fname, opts, name)
  local v = opts[name]
  if v ~= nil and type(v) ~= "string" then
    raise(2, fname, ("option '%s' must be a string, got %s"):format(name, type(v)))
  end
end

--- client:list(resource [, opts]) -> list | nil, err
-- opts: namespace (nil: all namespaces), label_selector, field_selector, limit, continue,
-- resource_version. Without `limit`, follows continue tokens and returns every item in one
-- list (pages of 500); with `limit`, returns that page and its metadata.continue. `timeout`
-- bounds the whole call, every page included; a server that hands out the same continue token
-- twice is an error (it would never end).
function _M.list(self, resource, opts)
  opts = check_opts("list", 2, opts)
  for _, name in ipairs{ "label_selector", "field_selector", "resource_version", "continue" } do
    check_string_opt("list", opts, name)
  end
  local res, rerr = resolve(self, "list", resource, opts.namespace, opts.api_version)
  if not res then return nil, rerr end
  local base = {}
  add_param(base, "labelSelector", opts.label_selector)
  add_param(base, "fieldSelector", opts.field_selector)
  add_param(base, "resourceVersion", opts.resource_version)
  if opts.limit ~= nil then
    if type(opts.limit) ~= "number" or not (opts.limit >= 1) then
      raise(2, "list", "limit must be a number >= 1")
    end
    local params = {}
    for i = 1, #base do params[i] = base[i] end
    add_param(params, "limit", math.floor(opts.limit))
    add_param(params, "continue", opts.continue)
    local path = res.path .. query(params)
    local page, err, body = call_with_body(self, "GET", path, nil, nil, opts)
    if not page then return nil, err end
    local items, ierr = list_items(page, path, body)
    if not items then return nil, ierr end
    page.items = items
    return page
  end
  local budget = opts.timeout
  if budget == nil or budget <= 0 then budget = DEFAULT_TIMEOUT end
  local deadline = clock.now() + budget
  local page_opts = {}
  for k, v in pairs(opts) do page_opts[k] = v end
  local items, first, token, seen = {}, nil, opts.continue, {}
  repeat
    local params = {}
    for i = 1, #base do params[i] = base[i] end
    add_param(params, "limit", 500)
    add_param(params, "continue", token)
    local path = res.path .. query(params)
    local left = deadline - clock.now()
    if first and left <= 0 then
      return nil, new_error{ code = 0, reason = "Timeout", method = "GET", path = path,
        message = ("GET %s: the list did not end within its timeout of %g s (%d items so far)")
          :format(path, budget, #items) }
    end
    page_opts.timeout = left
    local page, err, body = call_with_body(self, "GET", path, nil, nil, page_opts)
    if not page then return nil, err end
    local page_items, ierr = list_items(page, path, body)
    if not page_items then return nil, ierr end
    first = first or page
    for _, it in ipairs(page_items) do items[#items + 1] = it end
    local terr
    token, terr = page_token(page, path)
    if terr then
      return nil, new_error{ code = 0, reason = "InvalidResponse", method = "GET", path = path,
                             message = ("GET %s: %s"):format(path, terr) }
    end
    if token then
      if seen[token] then
        return nil, new_error{ code = 0, reason = "InvalidResponse", method = "GET", path = path,
          message = ("GET %s: the server returned a continue token it had returned before "
            .. "(the list would never end)"):format(path) }
      end
      seen[token] = true
    end
  until token == nil
  first.items = items
  if type(first.metadata) == "table" then first.metadata.continue = nil end
  return first
end

local function ns_of(md) return type(md.namespace) == "string" and md.namespace ~= "" and md.namespace or nil end

--- client:create(resource, obj [, opts]) -> created object | nil, err
function _M.create(self, resource, obj, opts)
  opts = check_opts("create", 3, opts)
  local md = check_object("create", 2, obj)
  local probe, err = resolve(self, "create", resource, nil, opts.api_version)
  if not probe then return nil, err end
  local ns
  if probe.namespaced then ns = opts.namespace or ns_of(md) or self.namespace or "default" end
  local res = in_namespace("create", probe, ns)
  return call(self, "POST", res.path .. query(write_params(opts)), body_of("create", obj),
              "application/json", opts)
end

local function put(self, fname, resource, obj, opts, sub)
  opts = check_opts(fname, 3, opts)
  local md = check_object(fname, 2, obj)
  if type(md.name) ~= "string" or md.name == "" then raise(2, fname, "object has no metadata.name") end
  local path, err = object_path(self, fname, resource, opts.namespace or ns_of(md), md.name, opts,
                                sub)
  if not path then return nil, err end
  return call(self, "PUT", path .. query(write_params(opts)), body_of(fname, obj),
              "application/json", opts)
end

--- client:update(resource, obj [, opts]) -> updated object | nil, err
-- Sends obj as is: with its metadata.resourceVersion, a stale copy gets 409 Conflict.
function _M.update(self, resource, obj, opts) return put(self, "update", resource, obj, opts) end

--- client:update_status(resource, obj [, opts]) -> updated object | nil, err (the /status
-- subresource: only the status is written)
function _M.update_status(self, resource, obj, opts)
  return put(self, "update_status", resource, obj, opts, "status")
end

local function patch_body(fname, patch)
  if type(patch) == "string" then return patch end
  if type(patch) == "table" then return body_of(fname, patch) end
  raise(3, fname, "patch table or JSON string expected, got " .. type(patch))
end

-- opts.type -> content type; raises on a bad type or an apply without field_manager
local function patch_type(fname, opts)
  local ptype = opts.type or "merge"
  local ctype = PATCH_TYPES[ptype]
  if not ctype then raise(4, fname, "type must be merge, json, strategic or apply") end
  if ptype == "apply" and (type(opts.field_manager) ~= "string" or opts.field_manager == "") then
    raise(4, fname, "server-side apply needs field_manager")
  end
  return ptype, ctype
end

local function do_patch(self, fname, resource, name, patch, opts, sub)
  opts = check_opts(fname, 4, opts)
  local ns, nm = split_name(fname, 2, name)
  local ptype, ctype = patch_type(fname, opts)
  local body = patch_body(fname, patch)
  local params = write_params(opts)
  if ptype == "apply" and opts.force then params[#params + 1] = "force=true" end
  local path, err = object_path(self, fname, resource, ns, nm, opts, sub)
  if not path then return nil, err end
  return call(self, "PATCH", path .. query(params), body, ctype, opts)
end

--- client:patch(resource, name_or_key, patch [, opts]) -> patched object | nil, err
-- opts.type: "merge" (default; RFC 7386), "json" (RFC 6902, patch is a list of operations),
-- "strategic", or "apply" (server-side apply: opts.field_manager required, opts.force to take
-- fields owned by other managers). patch: a table (encoded as JSON) or a JSON string.
function _M.patch(self, resource, name, patch, opts)
  return do_patch(self, "patch", resource, name, patch, opts)
end

--- client:patch_status(resource, name_or_key, patch [, opts]) -> patched object | nil, err
-- As patch, on the /status subresource (only the status is written).
function _M.patch_status(self, resource, name, patch, opts)
  return do_patch(self, "patch_status", resource, name, patch, opts, "status")
end

--- client:apply(resource, obj [, opts]) -> the object | nil, err
-- Server-side apply of obj (apiVersion, kind, metadata.name required): PATCH with
-- application/apply-patch+yaml, opts.field_manager required, opts.force takes conflicting
-- fields; creates the object when it does not exist. opts.subresource = "status" applies the
-- status.
function _M.apply(self, resource, obj, opts)
  opts = check_opts("apply", 3, opts)
  local md = check_object("apply", 2, obj)
  if type(md.name) ~= "string" or md.name == "" then raise(2, "apply", "object has no metadata.name") end
  if type(obj.apiVersion) ~= "string" or type(obj.kind) ~= "string" then
    raise(2, "apply", "server-side apply needs the object's apiVersion and kind")
  end
  if type(opts.field_manager) ~= "string" or opts.field_manager == "" then
    raise(3, "apply", "server-side apply needs field_manager")
  end
  local sub = opts.subresource
  if sub ~= nil and sub ~= "status" then raise(3, "apply", "subresource must be \"status\"") end
  local params = write_params(opts)
  if opts.force then params[#params + 1] = "force=true" end
  local path, err = object_path(self, "apply", resource, opts.namespace or ns_of(md), md.name,
                                opts, sub)
  if not path then return nil, err end
  return call(self, "PATCH", path .. query(params), body_of("apply", obj), PATCH_TYPES.apply, opts)
end

--- client:get_scale(resource, name_or_key [, opts]) -> autoscaling/v1 Scale | nil, err
function _M.get_scale(self, resource, name, opts)
  opts = check_opts("get_scale", 3, opts)
  local ns, nm = split_name("get_scale", 2, name)
  local path, err = object_path(self, "get_scale", resource, ns, nm, opts, "scale")
  if not path then return nil, err end
  return call(self, "GET", path, nil, nil, opts)
end

--- client:update_scale(resource, scale [, opts]) -> the Scale written | nil, err
-- scale: an autoscaling/v1 Scale (as get_scale returns it, spec.replicas changed); its
-- metadata.resourceVersion, when present, makes a stale write a 409 Conflict.
function _M.update_scale(self, resource, scale, opts)
  return put(self, "update_scale", resource, scale, opts, "scale")
end

--- client:patch_scale(resource, name_or_key, patch [, opts]) -> the Scale | nil, err
-- A patch of the Scale (e.g. { spec = { replicas = 3 } }), opts.type as for patch.
function _M.patch_scale(self, resource, name, patch, opts)
  return do_patch(self, "patch_scale", resource, name, patch, opts, "scale")
end

local null = cjson.null

-- nil for what compares as absent: JSON null, a table with nothing present in it
local function present(v)
  if v == null then return nil end
  if type(v) == "table" then
    for _, x in pairs(v) do
      if present(x) ~= nil then return v end
    end
    return nil
  end
  return v
end

-- deep equality of decoded JSON values; JSON null, an empty table and absent are the same
local function same(a, b)
  a, b = present(a), present(b)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  local n = 0
  for k, v in pairs(a) do
    if present(v) ~= nil then
      if not same(v, b[k]) then return false end
      n = n + 1
    end
  end
  for _, v in pairs(b) do
    if present(v) ~= nil then n = n - 1 end
  end
  return n == 0
end

--- kinformer.rest.status_changed(old, new) -> true when two status values differ (deep
-- compare of decoded JSON: tables by content; JSON null, an empty table and absent are alike).
function _M.status_changed(old, new) return not same(old, new) end

--- client:update_status_if_changed(resource, obj, new_status [, opts]) -> object, written |
-- nil, err
-- Writes new_status to obj's /status (PUT with obj's resourceVersion: a stale obj gets 409)
-- only when it differs from obj.status; otherwise returns obj unchanged and false, with no
-- request. obj may be a cache object (it is copied, never changed).
function _M.update_status_if_changed(self, resource, obj, new_status, opts)
  check_object("update_status_if_changed", 2, obj)
  if new_status ~= nil and type(new_status) ~= "table" then
    raise(3, "update_status_if_changed", "status table expected, got " .. type(new_status))
  end
  check_opts("update_status_if_changed", 4, opts)
  if not _M.status_changed(obj.status, new_status) then return obj, false end
  local copy = core.to_table(obj)
  copy.status = new_status
  local res, err = put(self, "update_status_if_changed", resource, copy, opts, "status")
  if not res then return nil, err end
  return res, true
end

-- The calls installed as client methods (kinformer.client).
_M.METHODS = { "get", "list", "create", "update", "update_status", "patch", "delete",
               "patch_status", "apply", "get_scale", "update_scale", "patch_scale",
               "update_status_if_changed" }

--- client:delete(resource, name_or_key [, opts]) -> the server's answer (the object being
-- deleted, or a Status) | nil, err
-- opts: propagation_policy ("Foreground", "Background", "Orphan"), grace_period_seconds,
-- preconditions = { uid = ..., resourceVersion = ... }, dry_run.
function _M.delete(self, resource, name, opts)
  opts = check_opts("delete", 3, opts)
  local ns, nm = split_name("delete", 2, name)
  local path, err = object_path(self, "delete", resource, ns, nm, opts)
  if not path then return nil, err end
  local body
  if opts.propagation_policy or opts.grace_period_seconds or opts.preconditions then
    local eerr
    body, eerr = encode{ kind = "DeleteOptions", apiVersion = "v1",
                         propagationPolicy = opts.propagation_policy,
                         gracePeriodSeconds = opts.grace_period_seconds,
                         preconditions = opts.preconditions }
    if not body then raise(3, "delete", "cannot encode the options: " .. eerr) end
  end
  local params = {}
  if opts.dry_run then params[1] = "dryRun=All" end
  return call(self, "DELETE", path .. query(params), body, body and "application/json", opts)
end

return _M
