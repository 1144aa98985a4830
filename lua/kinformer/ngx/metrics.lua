--- kinformer.ngx.metrics (internal): kngx.metrics(): a status (kngx.status()) as Prometheus
-- text format 0.0.4.
--
-- Contract: text(status) is a pure function of its argument: one HELP/TYPE header per metric
-- that has a sample, label values escaped, numbers as integers when whole. Metric names and
-- labels are part of the documented interface (docs/openresty.md): change them only on purpose.
local type, pairs, ipairs, tostring = type, pairs, ipairs, tostring
local string_format, string_gsub, table_concat, table_sort, math_floor =
  string.format, string.gsub, table.concat, table.sort, math.floor

local _M = {}

local function label_value(v)
  return (string_gsub(tostring(v), '[\\"\n]', { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }))
end

local function num(v)
  if v == true then return "1" end
  if v == false or v == nil then return "0" end
  if v == math_floor(v) and v < 1e15 and v > -1e15 then return string_format("%d", v) end
  return string_format("%.6g", v)
end

-- name, type, help, field (of an informer's status) or function(st, age) -> value | nil
local INFORMER_METRICS = {
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

local PROCESS_METRICS = {
  { "kinformer_process_status_age_seconds", "gauge", "Age of the process's status sample", "age" },
  { "kinformer_process_dispatched_total", "counter", "Items dispatched by the nginx timer",
    "items" },
  { "kinformer_process_dispatch_errors_total", "counter",
    "Dispatch and after_dispatch failures", "dispatch_errors" },
  { "kinformer_process_max_dispatch_seconds", "gauge", "Longest dispatch tick so far",
    "max_dispatch_seconds" },
}

local VIEW_METRICS = {
  { "kinformer_view_keys", "gauge", "Keys a view holds (set by the informer process)", "keys" },
  { "kinformer_view_errors_total", "counter", "Values a view could not publish", "errors" },
  { "kinformer_view_free_bytes", "gauge", "Free space of the view's lua_shared_dict (agent model)",
    "free_space" },
}

local function header(out, m)
  out[#out + 1] = "# HELP " .. m[1] .. " " .. m[3]
  out[#out + 1] = "# TYPE " .. m[1] .. " " .. m[2]
end

-- One metric family over every process's named members (views or informers), in name order:
-- value(member, process) gives the sample (nil: none), labels(name, member, process) its labels.
-- The HELP / TYPE lines come only when a sample does.
local function per_member(out, m, procs, field, value, labels)
  local head = false
  for _, p in ipairs(procs) do
    local members = type(p[field]) == "table" and p[field] or {}
    local names = {}
    for name in pairs(members) do names[#names + 1] = name end
    table_sort(names)
    for _, name in ipairs(names) do
      local v = value(members[name], p)
      if v ~= nil then
        if not head then
          header(out, m)
          head = true
        end
        out[#out + 1] = string_format("%s{%s} %s", m[1], labels(name, members[name], p), num(v))
      end
    end
  end
end

--- metrics.text(status) -> text
function _M.text(status)
  local out = {}
  local procs = status.processes
  for _, m in ipairs(PROCESS_METRICS) do
    header(out, m)
    for _, p in ipairs(procs) do
      out[#out + 1] = string_format('%s{process="%s",pid="%s",model="%s"} %s', m[1],
        label_value(p.process), label_value(p.pid), label_value(p.model), num(p[m[4]]))
    end
  end
  for _, m in ipairs(VIEW_METRICS) do
    per_member(out, m, procs, "views",
      function(view) return view[m[4]] end,
      function(name, _, p)
        return string_format('view="%s",process="%s"', label_value(name), label_value(p.process))
      end)
  end
  for _, m in ipairs(INFORMER_METRICS) do
    local f = m[4]
    per_member(out, m, procs, "informers",
      function(st, p)
        if type(f) == "function" then return f(st, p.age or 0) end
        return st[f]
      end,
      function(name, st, p)
        return string_format('informer="%s",resource="%s",namespace="%s",process="%s"',
          label_value(name), label_value(st.resource or ""),
          label_value(type(st.namespace) == "string" and st.namespace or ""),
          label_value(p.process))
      end)
  end
  out[#out + 1] = ""
  return table_concat(out, "\n")
end

return _M
