--- kinformer: Kubernetes informers (client-go tools/cache) for Lua.
-- This module is the public API; the C core lives in kinformer.core. See docs/api.md.
local core = require "kinformer.core"
local argcheck = require "kinformer.argcheck"

local io_stderr = io.stderr
local os_date = os.date
local type, tostring, pairs, ipairs, setmetatable = type, tostring, pairs, ipairs, setmetatable
local raise = argcheck.raise

local _M = {
  _VERSION = core._VERSION,
  REQUEUE = core.REQUEUE,          -- return it from a pop process function to requeue the item
  NAMESPACE_INDEX = "namespace",   -- the built-in index: metadata.namespace
}

--- kinformer.store{ indexers = { name = fn, ... }, namespace_index = true }
-- The thread-safe indexed store. fn(obj) returns a list of strings.
_M.store = core.store

--- kinformer.delta_fifo{ known_objects = store, emit_replaced = false, transform = fn }
_M.delta_fifo = core.delta_fifo

--- kinformer.key_of(obj) -> "ns/name" | "name" (tombstone: its key); nil, err without metadata.name
_M.key_of = core.key_of

--- kinformer.split_key(key) -> namespace, name ("" namespace for "name"); nil, err for 2+ slashes
_M.split_key = core.split_key

--- kinformer.tombstone(key, obj) -> a DeletedFinalStateUnknown { key = key, obj = obj }
_M.tombstone = core.tombstone

--- kinformer.is_tombstone(x) -> true for a DeletedFinalStateUnknown
_M.is_tombstone = core.is_tombstone

local discovery = require "kinformer.discovery"
local config = require "kinformer.config"
local flowcontrol = require "kinformer.flowcontrol"
local shorten = require("kinformer.config.util").shorten

local Client = {}
Client.__index = Client

--- kinformer.client([opts]) -> client | nil, err
-- A connection to one API server; its list/watch transfers run on one I/O thread of its own,
-- started by the first reflector that starts. Without `server`, the connection comes from
-- $KUBECONFIG, ~/.kube/config or the in-cluster service account (client-go's rules, see
-- docs/config.md): opts may then name `kubeconfig`, `context`, `namespace`, `in_cluster`.
-- With `server`, opts describe it all: token, token_file, username/password, exec, ca_file,
-- ca_data, client_cert_*, client_key_*, tls_server_name, proxy, insecure_skip_tls_verify.
-- Whatever the source: qps, burst, max_retries (REST calls), connect_timeout, user_agent,
-- impersonate_user, impersonate_uid, impersonate_groups, impersonate_extra.
-- Fields: client.server, client.namespace (the context's, or "default"), client.context,
-- client.source ("options", "kubeconfig PATHS", "in-cluster").
function _M.client(opts)
  local o, err = config.load(opts)
  if not o then return nil, err end
  local namespace, source, context = o.namespace, o.source, o.context
  o.namespace, o.source, o.context = nil, nil, nil
  local flow = flowcontrol.new(o) -- takes qps, burst, max_retries out of o (raises if bad)
  -- The core returns bad values as nil, err, "EINVAL" instead of raising: explicit options
  -- are the caller's arguments (raised at the caller's line), values from a file are data.
  local c, code
  c, err, code = core.client(o, true)
  if not c then
    if code == "EINVAL" and source == "options" then raise(1, "client", err) end
    if type(err) == "string" and source ~= "options" then
      err = source .. (context and (", context " .. shorten(context)) or "") .. ": " .. err
    end
    return nil, err, code
  end
  return setmetatable({ _core = c, _mapper = discovery.new(c), _flow = flow,
                        server = c:server(),
                        namespace = namespace, context = context, source = source }, Client)
end

--- client:resolve(resource [, opts]) -> { group, version, resource, kind, namespaced,
--   namespace, path } | nil, err, code
-- How the client names a resource (docs/api.md, "Resource names"): kubectl's names ("pods",
-- "pod", "po", "Pod", "deploy.apps", "deployments.v1.apps", "widgets.example.com") through the
-- server's discovery, cached per client. opts: namespace, api_version. An unknown name returns
-- nil, "unknown resource ...: did you mean ...?", "ENOTFOUND"; a bad value raises.
local RESOLVE_OPTS = { namespace = true, api_version = true }
function Client:resolve(resource, opts)
  opts = argcheck.options(opts, RESOLVE_OPTS, "resolve", 2)
  local res, err, code = self._mapper:resolve{ resource = resource, namespace = opts.namespace,
                                               api_version = opts.api_version }
  if not res and code ~= "ENOTFOUND" then raise(1, "resolve", err) end
  return res, err, code
end

--- client:status() -> { requests, retries, retry_wait_seconds, throttled, throttle_wait_seconds,
--   qps, burst, max_retries, warnings, warnings_distinct, warnings_dropped }
-- The REST calls' counts (docs/rest.md) and the Warning headers of all its responses, list and
-- watch included. Logs the warnings not logged yet.
function Client:status()
  return self._flow:status(self._core:status())
end

--- client:reflector{ resource = "pods", namespace = "default", label_selector = ...,
--                    field_selector = ..., fifo = fifo, watch_list = false,
--                    strip_managed_fields = true, metadata_only = false, page_size = 500,
--                    gzip = false, ... } -> reflector | nil, err
-- The resource is named as for client:resolve (an unknown name: nil, err, "ENOTFOUND").
-- Lists and watches the resource into fifo (a kinformer.delta_fifo). Methods: start(), stop(),
-- status(), last_sync_resource_version(). See docs/reflector.md.
function Client:reflector(opts)
  if type(opts) ~= "table" then raise(1, "reflector", "table expected, got " .. type(opts)) end
  local res, err, code = self._mapper:resolve(opts)
  if not res then
    if code == "ENOTFOUND" then return nil, err, code end
    raise(1, "reflector", err)
  end
  local o = {}
  for k, v in pairs(opts) do
    if k ~= "resource" and k ~= "namespace" and k ~= "api_version" then o[k] = v end
  end
  o.path = res.path
  return argcheck.call(self._core.reflector, self._core, o)
end

-- client:get / list / create / update / update_status / patch / delete: blocking requests for
-- controllers (kinformer.rest; docs/api.md "REST client").
local rest = require "kinformer.rest"
for _, name in ipairs(rest.METHODS) do Client[name] = rest[name] end
_M.rest = rest -- kinformer.rest.status_changed

--- kinformer.is_api_error(x) -> true for an error returned by the REST calls (err.code,
-- err.reason, err.message).
_M.is_api_error = rest.is_error

local informer = require "kinformer.informer"

--- client:informer{ resource = "pods", api_version = ..., namespace = ..., label_selector = ...,
--                   field_selector = ..., resync = seconds, page_size = 500, watch_list = false,
--                   strip_managed_fields = true, metadata_only = false, gzip = false,
--                   transform = fn }
--   -> informer | nil, err
-- A shared index informer (docs/informer.md). Asking again for the same resource, namespace,
-- selectors and metadata_only returns the same informer (one watch), as controller-runtime's
-- cache does; metadata_only = true caches PartialObjectMetadata (apiVersion, kind, metadata).
-- Unknown options and wrong types raise on every call, shared or not; so does a call whose
-- strip_managed_fields or transform (present or absent) differs from the shared informer's.
function Client:informer(opts)
  return informer.for_client(self, opts)
end

--- kinformer.run({ informer, ... }, { timeout = seconds, done = fn }) -> reason
-- The blocking loop for scripts: dispatches the informers until done() returns true ("done"),
-- the timeout passes ("timeout"), every informer stopped ("stopped"), or SIGINT / SIGTERM
-- arrives ("SIGINT" / "SIGTERM"). done() is checked after each batch and at least every 100 ms.
_M.run = informer.run

--- kinformer.workqueue{ ... } -> queue: client-go's rate-limited work queue (docs/workqueue.md);
-- also kinformer.workqueue.default_rate_limiter{ ... } and the other rate limiters.
_M.workqueue = require "kinformer.workqueue"

--- kinformer.leader_election{ client, lease_name, namespace, identity, lease_duration = 15,
--   renew_deadline = 10, retry_period = 2, on_started_leading, on_stopped_leading,
--   on_new_leader } -> elector with tick(), is_leader(), leader(), stop(), status()
-- (docs/leaderelection.md).
_M.leader_election = require("kinformer.leaderelection").new

--- kinformer.manager{ client, leader_election = { lease_name, namespace, ... },
--   metrics_address = "127.0.0.1:8080", grace_period = 5 } -> manager: controllers in a few
-- lines (mgr:controller{ ... }, mgr:run(), mgr:step()); docs/controller.md.
_M.manager = require("kinformer.manager").new

--- kinformer.predicates: event filters for controllers (generation_changed, labels_changed,
-- annotations_changed, any, all, negate, label_selector).
_M.predicates = require "kinformer.predicates"

--- kinformer.events.recorder{ client, component } -> an Event recorder (docs/controller.md).
_M.events = require "kinformer.events"

--- kinformer.catch_signals(on) -> whether they were caught before. While on, SIGINT and SIGTERM interrupt kinformer's waits
-- (queue:get returns nil, "SIGTERM") instead of killing the process; kinformer.run does this
-- for its own duration. A signal ignored at startup stays ignored.
function _M.catch_signals(on)
  if type(on) ~= "boolean" then
    raise(1, "catch_signals", "boolean expected, got " .. type(on))
  end
  return core.catch_signals(on)
end

--- kinformer.now() -> seconds on a monotonic clock (for timing in scripts; not wall time).
_M.now = core.now

--- kinformer.encode(obj) -> JSON: an object's JSON (the cached bytes for objects from kinformer).
_M.encode = core.encode

--- kinformer.to_table(obj) -> a fresh, fully decoded, mutable copy of an object.
_M.to_table = core.to_table

--- kinformer.pairs(t) -> next, t, nil: pairs that works the same on every runtime. For an object
-- from kinformer or its metadata it decodes the members not read yet first (then the table is
-- complete: pairs, next and rawget see every member); for other tables it is Lua 5.4's pairs
-- (a __pairs metamethod is honoured, also on LuaJIT).
_M.pairs = core.pairs

local LEVELS = { debug = 1, info = 2, warn = 3, error = 4 }
local threshold = LEVELS.warn -- quiet on success: only warnings and errors by default
local chosen = false -- set_logger was called

local function stderr_logger(level, msg)
  if (LEVELS[level] or LEVELS.error) >= threshold then
    io_stderr:write(os_date("!%Y-%m-%dT%H:%M:%SZ"), " kinformer [", level, "] ", msg, "\n")
  end
end

--- kinformer.set_logger(fn | nil [, level])
-- fn(level, message) receives every log line (levels: "debug", "info", "warn", "error").
-- nil restores the default logger, which writes lines at `level` (default "warn") and above
-- to stderr. Messages never contain credentials.
function _M.set_logger(fn, level)
  if fn ~= nil and type(fn) ~= "function" then
    raise(1, "set_logger", "function or nil expected, got " .. type(fn))
  end
  if level ~= nil then
    if not LEVELS[level] then
      raise(2, "set_logger", "unknown level '" .. tostring(level) .. "'")
    end
    threshold = LEVELS[level]
  end
  chosen = true
  core.set_logger(fn or stderr_logger)
end

-- The default logger's level for a kinformer.manager (log_level): taken only while the user
-- chose neither a logger nor a level.
core.default_log_level = function(level)
  if not chosen and LEVELS[level] then threshold = LEVELS[level] end
end

--- kinformer.log(level, message): log through the current logger.
_M.log = core.log

core.set_logger(stderr_logger)

return _M
