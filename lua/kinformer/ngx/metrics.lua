--- kinformer.ngx.metrics (internal): kngx.metrics(): a status (kngx.status()) as Prometheus
-- text format 0.0.4.
--
-- Contract: text(status) is a pure function of its argument: one HELP/TYPE header per metric
-- that has a sample, label values escaped, numbers as integers when whole. Metric names and
-- labels are part of the documented interface (docs/openresty.md): change them only on purpose.
local type, pairs, ipairs, tonumber = type, pairs, ipairs, tonumber
local string_format, table_concat, table_sort = string.format, table.concat, table.sort

-- The text format and the informer metric names are kinformer.metrics's (shared with the
-- metrics of scripts outside nginx).
local metrics = require "kinformer.metrics"
local collectors = require "kinformer.metrics.collectors"
local label_value, format_value = metrics.escape_label_value, metrics.format_value

local _M = {}

-- Renderers of what other parts put in a status (status.extras): fn(out, status) appends lines.
_M.extras = {}

-- Status samples are rounded to 6 significant digits (ages and durations of a status sample
-- that is itself some milliseconds old).
local function num(v)
  if type(v) == "number" and v == v and v ~= math.floor(v) then
    v = tonumber(string_format("%.6g", v))
  end
  return format_value(v)
end

-- name, type, help, field (of an informer's status) or function(st, age) -> value | nil
local INFORMER_METRICS = collectors.INFORMER_METRICS

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
  metrics.header(out, m[1], m[2], m[3])
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
    per_member(out, m, procs, "informers",
      function(st, p) return collectors.informer_value(m, st, p.age) end,
      function(name, st, p)
        return string_format('informer="%s",resource="%s",namespace="%s",process="%s"',
          label_value(name), label_value(st.resource or ""),
          label_value(type(st.namespace) == "string" and st.namespace or ""),
          label_value(p.process))
      end)
  end
  for _, render in ipairs(_M.extras) do render(out, status) end
  out[#out + 1] = ""
  return table_concat(out, "\n")
end

return _M
