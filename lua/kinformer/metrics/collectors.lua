--- kinformer.metrics.collectors (internal; exported by kinformer.metrics): the standard metrics
-- of work queues, informers, REST clients and leader electors, under controller-runtime's names
-- where it has one (docs/metrics.md lists them all).
--
-- Contract:
-- - Gauges and counters are read from the object's status() at scrape time (a collector); the
--   histograms (work queue latency and work duration, REST request latency) are observed as
--   things happen, through the hooks the work queue (queue:set_metrics) and the REST client
--   (kinformer.rest.observe) offer. Collecting the same object twice into one registry adds
--   nothing twice: the second call returns at once.
-- - INFORMER_METRICS is the one list of informer metric names, shared with the OpenResty status
--   metrics (kinformer.ngx.metrics).
local argcheck = require "kinformer.argcheck"

local type, tostring, ipairs, pairs, setmetatable = type, tostring, ipairs, pairs, setmetatable
local string_format, table_sort = string.format, table.sort
local raise = argcheck.raise

local _M = {}

-- name, type, help, field of informer:status() or function(st, age) -> value | nil
_M.INFORMER_METRICS = {
  { "kinformer_informer_synced", "gauge", "1 once the informer's initial list is in its cache",
    "synced" },
  { "kinformer_informer_resource_version_age_seconds", "gauge",
    "Seconds since the informer's resourceVersion last advanced",
    function(st, age) return st.resource_version_age and st.resource_version_age + age end },
  { "kinformer_informer_last_event_age_seconds", "gauge", "Seconds since the last watch event",
    function(st, age) return st.last_event_age and st.last_event_age + age end },
  { "kinformer_informer_objects", "gauge", "Objects in the informer's cache", "objects" },
  { "kinformer_informer_queue_length", "gauge", "Keys waiting in the informer's DeltaFIFO",
    "queue_length" },
  { "kinformer_informer_queued_bytes", "gauge",
    "Bytes of the records waiting in the informer's DeltaFIFO", "queued_bytes" },
  { "kinformer_informer_lists_total", "counter", "Lists (initial and relists)", "lists" },
  { "kinformer_informer_relists_total", "counter", "Relists after a failure", "relists" },
  { "kinformer_informer_watches_total", "counter", "Watch requests", "watches" },
  { "kinformer_informer_watch_restarts_total", "counter", "Watches resumed from the last rv",
    "watch_restarts" },
  { "kinformer_informer_watch_events_total", "counter", "Watch events received",
    "watch_events" },
  { "kinformer_informer_errors_total", "counter", "List and watch failures", "errors" },
  { "kinformer_informer_notifications_total", "counter",
    "Notifications produced (adds + updates + deletes)",
    function(st) return (st.adds or 0) + (st.updates or 0) + (st.deletes or 0) end },
  { "kinformer_informer_handler_errors_total", "counter", "Handler functions that raised",
    "handler_errors" },
  { "kinformer_informer_received_bytes_total", "counter", "Bytes received from the API server",
    "bytes" },
}

--- collectors.informer_value(m, st, age) -> the value of INFORMER_METRICS entry m for status st
-- (age: seconds the status sample is old), or nil when it has none
function _M.informer_value(m, st, age)
  local f = m[4]
  if type(f) == "function" then return f(st, age or 0) end
  return st[f]
end
local informer_value = _M.informer_value

-- Which objects a registry collects already (weak keys: a collected object may go away).
local function first_time(reg, kind, obj)
  local seen = reg._collected
  if not seen then
    seen = setmetatable({}, { __mode = "k" })
    reg._collected = seen
  end
  local key = seen[obj]
  if key and key[kind] then return false end
  seen[obj] = key or {}
  seen[obj][kind] = true
  return true
end

local function check_registry(reg, fname)
  if type(reg) ~= "table" or type(reg.collector) ~= "function" then
    raise(1, fname, "metrics registry expected")
  end
end

-- ---- work queues ----

-- client-go / controller-runtime: prometheus.ExponentialBuckets(10e-9, 10, 12)
local QUEUE_BUCKETS = { 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100, 1000 }
_M.QUEUE_BUCKETS = QUEUE_BUCKETS

-- workqueue_depth has a label priority, as controller-runtime's (pkg/metrics/workqueue.go):
-- a series per priority that has been seen, kept (at 0) once seen; "0" from the start. Past
-- MAX_PRIORITY_LABELS priorities, the depth of the priorities seen later is summed under
-- priority="exceeded_cardinality_limit", so a caller using many priorities cannot make a
-- series per priority.
local DEPTH_HELP = "Current depth of workqueue by workqueue and priority"
local MAX_PRIORITY_LABELS = 25
local OVER_LIMIT = "exceeded_cardinality_limit"

local QUEUE_GAUGES = {
  { "workqueue_adds_total", "counter", "Total number of adds handled by workqueue", "adds" },
  { "workqueue_retries_total", "counter", "Total number of retries handled by workqueue",
    "retries" },
  { "workqueue_unfinished_work_seconds", "gauge",
    "How many seconds of work has been done that is in progress and hasn't been observed by "
    .. "work_duration. Large values indicate stuck threads.", "unfinished_work_seconds" },
  { "workqueue_longest_running_processor_seconds", "gauge",
    "How many seconds has the longest running processor for workqueue been running.",
    "longest_running_processor_seconds" },
}

--- collect_workqueue(reg, name, queue): workqueue_* metrics with labels name and controller
-- (both `name`, as controller-runtime labels a controller's queue); workqueue_depth also has
-- the label priority (above)
function _M.collect_workqueue(reg, name, queue)
  local F = "collect_workqueue"
  check_registry(reg, F)
  if type(name) ~= "string" or name == "" then raise(2, F, "queue name expected") end
  if type(queue) ~= "table" or type(queue.status) ~= "function"
      or type(queue.set_metrics) ~= "function" then
    raise(3, F, "work queue expected")
  end
  if not first_time(reg, "workqueue", queue) then return end
  local labels = { name = name, controller = name }
  local queue_h = reg:histogram("workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    { "controller", "name" }, QUEUE_BUCKETS)
  local work_h = reg:histogram("workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    { "controller", "name" }, QUEUE_BUCKETS)
  queue_h:init(labels) -- shows (with zeros) from the start
  work_h:init(labels)
  queue:set_metrics{
    queue_latency = function(s) queue_h:observe(labels, s) end,
    work_duration = function(s) work_h:observe(labels, s) end,
  }
  local function depth_labels(prio)
    return { name = name, controller = name, priority = prio }
  end
  local shown, n_shown = { [0] = depth_labels("0") }, 1 -- priority -> its depth labels
  local over -- the labels of the sum past the limit, once there was one
  reg:collector(function(emit)
    local st = queue:status()
    local by_prio = st.depth_by_priority or { [0] = st.depth }
    local fresh = {}
    for p in pairs(by_prio) do
      if not shown[p] then fresh[#fresh + 1] = p end
    end
    table_sort(fresh, function(a, b) return a > b end)
    local past = 0
    for _, p in ipairs(fresh) do
      if n_shown < MAX_PRIORITY_LABELS then
        shown[p] = depth_labels(string_format("%d", p))
        n_shown = n_shown + 1
      else
        past = past + by_prio[p]
        over = over or depth_labels(OVER_LIMIT)
      end
    end
    for p, l in pairs(shown) do emit("workqueue_depth", "gauge", DEPTH_HELP, l, by_prio[p] or 0) end
    if over then emit("workqueue_depth", "gauge", DEPTH_HELP, over, past) end
    for _, m in ipairs(QUEUE_GAUGES) do emit(m[1], m[2], m[3], labels, st[m[4]] or 0) end
  end)
end

-- ---- informers ----

--- collect_informer(reg, informer [, name]): kinformer_informer_* with labels informer (name,
-- default "resource" or "namespace/resource"), resource, namespace
function _M.collect_informer(reg, informer, name)
  local F = "collect_informer"
  check_registry(reg, F)
  if type(informer) ~= "table" or type(informer.status) ~= "function" then
    raise(2, F, "informer expected")
  end
  if name ~= nil and type(name) ~= "string" then raise(3, F, "name must be a string") end
  if not first_time(reg, "informer", informer) then return end
  reg:collector(function(emit)
    local st = informer:status()
    local ns = type(st.namespace) == "string" and st.namespace or ""
    local labels = { informer = name or (ns ~= "" and ns .. "/" or "") .. tostring(st.resource),
                     resource = tostring(st.resource), namespace = ns }
    for _, m in ipairs(_M.INFORMER_METRICS) do
      local v = informer_value(m, st, 0)
      if v ~= nil then emit(m[1], m[2], m[3], labels, v) end
    end
  end)
end

-- ---- REST clients ----

-- client-go's (k8s.io/component-base) rest_client_request_duration_seconds buckets
local REST_BUCKETS = { 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60 }
_M.REST_BUCKETS = REST_BUCKETS

local CLIENT_COUNTERS = {
  { "kinformer_rest_client_throttled_total", "counter",
    "REST requests that waited for a token of the client's rate limiter", "throttled" },
  { "kinformer_rest_client_throttle_wait_seconds_total", "counter",
    "Seconds REST requests waited for the client's rate limiter", "throttle_wait_seconds" },
  { "kinformer_rest_client_retries_total", "counter",
    "REST requests sent again after a Retry-After", "retries" },
  { "kinformer_rest_client_retry_wait_seconds_total", "counter",
    "Seconds waited before retries", "retry_wait_seconds" },
  { "kinformer_rest_client_warnings_total", "counter",
    "Warning headers received (REST calls, lists and watches)", "warnings" },
}

local function host_of(server)
  if type(server) ~= "string" then return "" end
  return server:match("^%a[%w+.-]*://([^/?#]+)") or server
end

--- collect_client(reg, client): rest_client_requests_total{code,method,host} and
-- rest_client_request_duration_seconds{verb,host} for every HTTP request of the client's REST
-- calls (retries included), and the kinformer_rest_client_* counts of client:status()
function _M.collect_client(reg, client)
  local F = "collect_client"
  check_registry(reg, F)
  if type(client) ~= "table" or type(client.status) ~= "function" then
    raise(2, F, "client expected")
  end
  if not first_time(reg, "client", client) then return end
  local host = host_of(client.server)
  local requests = reg:counter("rest_client_requests_total",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    { "code", "method", "host" })
  local duration = reg:histogram("rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, and host.", { "verb", "host" },
    REST_BUCKETS)
  require("kinformer.rest").observe(client, function(method, code, seconds)
    requests:inc({ code = code > 0 and tostring(code) or "<error>", method = method,
                   host = host })
    duration:observe({ verb = method, host = host }, seconds)
  end)
  reg:collector(function(emit)
    local st = client:status()
    for _, m in ipairs(CLIENT_COUNTERS) do
      emit(m[1], m[2], m[3], { host = host }, st[m[4]] or 0)
    end
  end)
end

-- ---- leader election ----

--- collect_leader(reg, elector): leader_election_master_status{name} (1 while leading) and
-- kinformer_leader_election_attempts_total / _failures_total / _leaderships_total{name}
function _M.collect_leader(reg, elector)
  local F = "collect_leader"
  check_registry(reg, F)
  if type(elector) ~= "table" or type(elector.status) ~= "function" then
    raise(2, F, "leader elector expected")
  end
  if not first_time(reg, "leader", elector) then return end
  reg:collector(function(emit)
    local st = elector:status()
    local labels = { name = tostring(elector.name or st.lease) }
    emit("leader_election_master_status", "gauge",
      "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
      .. "1 indicates master. 'name' is the string used to identify the lease.",
      labels, st.is_leader and 1 or 0)
    emit("kinformer_leader_election_attempts_total", "counter",
      "Attempts to acquire or renew the lease", labels, st.attempts or 0)
    emit("kinformer_leader_election_failures_total", "counter",
      "Attempts to acquire or renew the lease that failed", labels, st.failures or 0)
    emit("kinformer_leader_election_leaderships_total", "counter",
      "Times this process became the leader", labels, st.leaderships or 0)
  end)
end

--- collectors.collect_sharding(reg, manager): a sharded manager's ring, its share and its
-- handovers, read from mgr:status().sharding at each scrape.
function _M.collect_sharding(reg, mgr)
  local F = "collect_sharding"
  check_registry(reg, F)
  if type(mgr) ~= "table" or type(mgr._shard_status) ~= "function" then
    raise(2, F, "sharded manager expected")
  end
  if not first_time(reg, "sharding", mgr) then return end
  reg:collector(function(emit)
    local st = mgr:_shard_status()
    local labels = { group = st.group }
    emit("kinformer_shard_members", "gauge", "Live members of the shard group as this replica " ..
      "sees them", labels, st.members)
    emit("kinformer_shard_ring_generation", "gauge", "Changes of the member ring this replica " ..
      "saw since it started", labels, st.generation)
    emit("kinformer_shard_handovers_total", "counter", "Rings this replica acknowledged (each " ..
      "after it stopped the keys the ring took away)", labels, st.handovers)
    emit("kinformer_shard_keys_owned", "gauge", "Primaries the current ring gives this replica",
      labels, st.keys_owned)
    emit("kinformer_shard_keys", "gauge", "Primaries in this replica's caches", labels, st.keys)
  end)
end

return _M
