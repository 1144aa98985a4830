--- kinformer.metrics: a metrics registry (counters, gauges, histograms with labels, and
-- collectors read at scrape time) and its Prometheus text exposition (format 0.0.4).
-- docs/metrics.md.
--
-- Contract:
-- - A registry holds metric families by name. reg:counter / gauge / histogram define one (the
--   name, the help text, the label names; a histogram its bucket bounds) and return it; defining
--   the same name again with the same type, labels and buckets returns the same object, anything
--   else raises. Names and label names are checked as Prometheus does; a histogram may not have
--   a label `le`.
-- - inc / set / observe take a table of every label (values are tostring'ed; a missing or an
--   unknown label raises) or nil for a metric without labels. A metric without labels shows a
--   0 sample from its definition; a labelled one shows the label sets it has seen.
-- - Collectors run at every reg:text(), in the order added: fn(emit) calls
--   emit(name, type, help, labels, value) for counter, gauge or untyped samples read from status()
--   tables. One that raises is logged (core.log) and skipped: the others still show. Samples of
--   one name from several collectors (or a collector and a defined metric of the same type and
--   labels) form one family; a second sample of the same label set, or of a name defined with
--   another type, is dropped.
-- - reg:text() is the whole exposition: one HELP and one TYPE line per family that has samples,
--   families sorted by name and samples by their label values (stable output), label values and
--   help escaped, histograms as cumulative _bucket{le=...} lines ending with le="+Inf", then
--   _sum and _count. Numbers print in their shortest exact form, integers without a point.
--
-- Threads: none; one Lua state. Everything is plain Lua (no kinformer.core needed but for the
-- collectors' error log), so the OpenResty status metrics (kinformer.ngx.metrics) share the
-- formatting helpers below.
local type, tostring, tonumber, pairs, ipairs, pcall, setmetatable, next =
  type, tostring, tonumber, pairs, ipairs, pcall, setmetatable, next
local string_format, string_gsub, string_find, table_concat, table_sort, math_huge, math_floor =
  string.format, string.gsub, string.find, table.concat, table.sort, math.huge, math.floor

local math_type = math.type -- nil on LuaJIT
local argcheck = require "kinformer.argcheck"
local errtext = require "kinformer.errtext"
local raise = argcheck.raise

local _M = {}

-- Prometheus's client_golang DefBuckets.
_M.DEFAULT_BUCKETS = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 }

-- ---- the text format ----

local LABEL_ESCAPES = { ["\\"] = "\\\\", ['"'] = '\\"', ["\n"] = "\\n" }
local HELP_ESCAPES = { ["\\"] = "\\\\", ["\n"] = "\\n" }

--- metrics.escape_label_value(v) -> tostring(v) with \ " and newline escaped
function _M.escape_label_value(v)
  return (string_gsub(tostring(v), '[\\"\n]', LABEL_ESCAPES))
end
local escape_label_value = _M.escape_label_value

--- metrics.format_value(v) -> the sample value as Prometheus reads it: integers without a
-- point, others in their shortest exact form, +Inf, -Inf, NaN; true is 1, false and nil 0.
function _M.format_value(v)
  if v == true then return "1" end
  if v == false or v == nil then return "0" end
  if v ~= v then return "NaN" end
  if v == math_huge then return "+Inf" end
  if v == -math_huge then return "-Inf" end
  if math_type and math_type(v) == "integer" then return string_format("%d", v) end
  if v == math_floor(v) and v < 2^53 and v > -2^53 then return string_format("%d", v) end
  local s = string_format("%.15g", v)
  if tonumber(s) ~= v then s = string_format("%.17g", v) end
  return s
end
local format_value = _M.format_value

--- metrics.header(out, name, type, help): appends the family's HELP and TYPE lines to out
function _M.header(out, name, mtype, help)
  out[#out + 1] = "# HELP " .. name .. " " .. string_gsub(help, "[\\\n]", HELP_ESCAPES)
  out[#out + 1] = "# TYPE " .. name .. " " .. mtype
end
local header = _M.header

--- metrics.valid_name(s) -> true for a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)
function _M.valid_name(s)
  return type(s) == "string" and string_find(s, "^[%a_:][%w_:]*$") ~= nil
end
local valid_name = _M.valid_name

local function valid_label_name(s)
  return type(s) == "string" and string_find(s, "^[%a_][%w_]*$") ~= nil
    and s:sub(1, 2) ~= "__"
end

-- '{a="x",b="y"}' (or "" without labels) for names[i] = values[i], then extra ('le="1"').
local function label_text(names, values, extra)
  local n = #names
  if n == 0 and not extra then return "" end
  local parts = {}
  for i = 1, n do parts[i] = names[i] .. '="' .. escape_label_value(values[i]) .. '"' end
  if extra then parts[n + 1] = extra end
  return "{" .. table_concat(parts, ",") .. "}"
end

-- ---- metric families ----

local TYPES = { counter = true, gauge = true, histogram = true, untyped = true }

local Family = {}
Family.__index = Family

-- The label values of a call, in the family's order, and their key; raises at the user's line.
local function label_values(self, labels, fname)
  local names = self.label_names
  if labels == nil then
    if #names > 0 then raise(1, fname, self.name .. " needs labels " .. table_concat(names, ", ")) end
    return {}, ""
  end
  if type(labels) ~= "table" then raise(1, fname, "labels table or nil expected, got " .. type(labels)) end
  local values = {}
  for i, name in ipairs(names) do
    local v = labels[name]
    if v == nil then raise(1, fname, self.name .. ": label '" .. name .. "' missing") end
    values[i] = tostring(v)
  end
  for k in pairs(labels) do
    if not self.label_set[k] then
      raise(1, fname, self.name .. ": unknown label '" .. tostring(k) .. "'")
    end
  end
  return values, table_concat(values, "\0")
end

local function child(self, labels, fname)
  local values, key = label_values(self, labels, fname)
  local c = self.children[key]
  if c then return c end
  c = { values = values, value = 0 }
  if self.type == "histogram" then
    local counts = {}
    for i = 1, #self.buckets + 1 do counts[i] = 0 end
    c.counts, c.sum, c.count = counts, 0, 0
  end
  self.children[key] = c
  return c
end

local function check_number(v, fname, what)
  if type(v) ~= "number" then raise(2, fname, what .. " expected, got " .. type(v)) end
end

--- counter:inc([labels [, n]]) (n >= 0, default 1); gauge:inc([labels [, n]]) (any n)
function Family:inc(labels, n)
  if self.type == "histogram" then raise(1, "inc", self.name .. " is a histogram: observe") end
  if n == nil then n = 1 else check_number(n, "inc", "number") end
  if self.type == "counter" and not (n >= 0) then
    raise(2, "inc", self.name .. " is a counter: it only goes up")
  end
  local c = child(self, labels, "inc")
  c.value = c.value + n
end

--- gauge:dec([labels [, n]])
function Family:dec(labels, n)
  if self.type ~= "gauge" then raise(1, "dec", self.name .. " is not a gauge") end
  if n == nil then n = 1 else check_number(n, "dec", "number") end
  local c = child(self, labels, "dec")
  c.value = c.value - n
end

--- gauge:set(labels, v) (labels nil without labels)
function Family:set(labels, v)
  if self.type ~= "gauge" then raise(1, "set", self.name .. " is not a gauge") end
  if v == true then v = 1 elseif v == false then v = 0 end
  check_number(v, "set", "number")
  child(self, labels, "set").value = v
end

--- histogram:observe(labels, v)
function Family:observe(labels, v)
  if self.type ~= "histogram" then raise(1, "observe", self.name .. " is not a histogram") end
  check_number(v, "observe", "number")
  local c = child(self, labels, "observe")
  local buckets, i = self.buckets, 1
  while buckets[i] and v > buckets[i] do i = i + 1 end
  c.counts[i] = c.counts[i] + 1
  c.sum = c.sum + v
  c.count = c.count + 1
end

--- metric:init([labels]): that label set shows from now on, with zeros until it is used
function Family:init(labels)
  child(self, labels, "init")
end

--- metric:remove(labels) -> true if that label set had a sample (it shows no more)
function Family:remove(labels)
  local _, key = label_values(self, labels, "remove")
  local had = self.children[key] ~= nil
  self.children[key] = nil
  return had
end

--- metric:get([labels]) -> the value (counter, gauge), or count, sum (histogram); 0 if unseen
function Family:get(labels)
  local _, key = label_values(self, labels, "get")
  local c = self.children[key]
  if self.type == "histogram" then
    if not c then return 0, 0 end
    return c.count, c.sum
  end
  return c and c.value or 0
end

-- ---- the registry ----

local Registry = {}
Registry.__index = Registry

--- metrics.registry() -> an empty registry
function _M.registry()
  return setmetatable({ _families = {}, _collectors = {} }, Registry)
end

local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function define(self, mtype, fname, name, help, label_names, buckets)
  if not valid_name(name) then raise(1, fname, "invalid metric name " .. tostring(name)) end
  if type(help) ~= "string" or help == "" then raise(2, fname, "help text expected") end
  label_names = label_names or {}
  if type(label_names) ~= "table" then raise(3, fname, "list of label names expected") end
  local names, set = {}, {}
  for i, l in ipairs(label_names) do
    if not valid_label_name(l) then raise(3, fname, "invalid label name " .. tostring(l)) end
    if set[l] then raise(3, fname, "label " .. l .. " twice") end
    if mtype == "histogram" and l == "le" then raise(3, fname, "a histogram cannot have label le") end
    names[i], set[l] = l, true
  end
  local bounds
  if mtype == "histogram" then
    buckets = buckets or _M.DEFAULT_BUCKETS
    if type(buckets) ~= "table" then raise(4, fname, "list of bucket bounds expected") end
    bounds = {}
    for i, b in ipairs(buckets) do
      if type(b) ~= "number" or b ~= b or (i > 1 and not (b > buckets[i - 1])) then
        raise(4, fname, "bucket bounds must be increasing numbers")
      end
      if b ~= math_huge then bounds[#bounds + 1] = b end -- +Inf is always there
    end
  end
  local f = self._families[name]
  if f then
    if f.type ~= mtype or not same_list(f.label_names, names)
        or (bounds and not same_list(f.buckets, bounds)) then
      raise(1, fname, name .. " is already defined as a " .. f.type .. " with labels {"
        .. table_concat(f.label_names, ",") .. "}")
    end
    return f
  end
  f = setmetatable({ name = name, type = mtype, help = help, label_names = names,
                     label_set = set, buckets = bounds, children = {} }, Family)
  if #names == 0 then child(f, nil, fname) end
  self._families[name] = f
  return f
end

--- reg:counter(name, help [, label_names]) -> counter (inc)
function Registry:counter(name, help, label_names)
  return define(self, "counter", "counter", name, help, label_names)
end

--- reg:gauge(name, help [, label_names]) -> gauge (set, inc, dec)
function Registry:gauge(name, help, label_names)
  return define(self, "gauge", "gauge", name, help, label_names)
end

--- reg:histogram(name, help [, label_names [, buckets]]) -> histogram (observe)
-- buckets: increasing upper bounds (default metrics.DEFAULT_BUCKETS); +Inf is added.
function Registry:histogram(name, help, label_names, buckets)
  return define(self, "histogram", "histogram", name, help, label_names, buckets)
end

--- reg:collector(fn) -> fn: fn(emit) runs at each text(); emit(name, type, help, labels, value)
-- with type "counter", "gauge" or "untyped" and labels a table (or nil).
function Registry:collector(fn)
  if type(fn) ~= "function" then raise(1, "collector", "function expected, got " .. type(fn)) end
  local list = self._collectors
  list[#list + 1] = fn
  return fn
end

--- reg:remove_collector(fn) -> true if fn was a collector of reg
function Registry:remove_collector(fn)
  local list = self._collectors
  for i = 1, #list do
    if list[i] == fn then
      table.remove(list, i)
      return true
    end
  end
  return false
end

--- reg:family(name) -> the metric defined under name, or nil
function Registry:family(name)
  return self._families[name]
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table_sort(keys)
  return keys
end

-- The lines of one defined family's samples, sorted by label values; seen[name{labels}] = true
-- for each counter or gauge sample.
local function family_lines(f, lines, seen)
  local names = f.label_names
  for _, key in ipairs(sorted_keys(f.children)) do
    local c = f.children[key]
    if f.type == "histogram" then
      local cum, bounds = 0, f.buckets
      for i = 1, #bounds + 1 do
        cum = cum + c.counts[i]
        local le = 'le="' .. (bounds[i] and format_value(bounds[i]) or "+Inf") .. '"'
        lines[#lines + 1] = f.name .. "_bucket" .. label_text(names, c.values, le) .. " "
          .. format_value(cum)
      end
      local lt = label_text(names, c.values)
      lines[#lines + 1] = f.name .. "_sum" .. lt .. " " .. format_value(c.sum)
      lines[#lines + 1] = f.name .. "_count" .. lt .. " " .. format_value(c.count)
    else
      local series = f.name .. label_text(names, c.values)
      seen[series] = true
      lines[#lines + 1] = series .. " " .. format_value(c.value)
    end
  end
end

local function log_collector_error(err)
  local ok, core = pcall(require, "kinformer.core")
  local msg = "metrics: a collector failed: " .. errtext(err)
  if ok and core.log then core.log("error", msg) else io.stderr:write(msg, "\n") end
end

-- Runs the collectors: name -> { type, help, lines = { [label text] = line } }.
local function collect(self)
  local got = {}
  local function emit(name, mtype, help, labels, value)
    if not valid_name(name) then error("invalid metric name " .. tostring(name), 2) end
    if mtype ~= "counter" and mtype ~= "gauge" and mtype ~= "untyped" then
      error(name .. ": type counter, gauge or untyped expected", 2)
    end
    local g = got[name]
    if not g then
      g = { type = mtype, help = tostring(help or name), lines = {} }
      got[name] = g
    elseif g.type ~= mtype then
      return
    end
    local lt = ""
    if labels ~= nil and next(labels) ~= nil then
      local lnames = sorted_keys(labels)
      local values = {}
      for i, l in ipairs(lnames) do
        if not valid_label_name(l) then error(name .. ": invalid label name " .. tostring(l), 2) end
        values[i] = labels[l]
      end
      lt = label_text(lnames, values)
    end
    if g.lines[lt] == nil then g.lines[lt] = name .. lt .. " " .. format_value(value) end
  end
  for _, fn in ipairs(self._collectors) do
    local ok, err = pcall(fn, emit)
    if not ok then log_collector_error(err) end
  end
  return got
end

--- reg:text() -> the Prometheus text exposition (format 0.0.4) of every metric and collector
function Registry:text()
  local got = collect(self)
  local names = {}
  for name in pairs(self._families) do names[#names + 1] = name end
  for name in pairs(got) do
    if not self._families[name] then names[#names + 1] = name end
  end
  table_sort(names)
  local out = {}
  for _, name in ipairs(names) do
    local f, g = self._families[name], got[name]
    local lines, seen = {}, {}
    if f then family_lines(f, lines, seen) end
    if g and (not f or f.type == g.type) then
      for _, lt in ipairs(sorted_keys(g.lines)) do
        local line = g.lines[lt]
        if not seen[name .. lt] then lines[#lines + 1] = line end
      end
    end
    if #lines > 0 then
      header(out, name, f and f.type or g.type, f and f.help or g.help)
      for _, l in ipairs(lines) do out[#out + 1] = l end
    end
  end
  out[#out + 1] = ""
  return table_concat(out, "\n")
end

--- metrics.server{ address = "127.0.0.1:8080", registry = reg, healthz = fn, readyz = fn }
-- -> server | nil, err: /metrics, /healthz, /readyz on the Lua thread (kinformer.httpserver).
function _M.server(opts)
  return require("kinformer.httpserver").new(opts)
end

-- The standard collectors (kinformer.metrics.collectors): collect_workqueue(reg, name, queue),
-- collect_informer(reg, informer [, name]), collect_client(reg, client),
-- collect_leader(reg, elector), collect_sharding(reg, manager).
for _, name in ipairs{ "collect_workqueue", "collect_informer", "collect_client",
                       "collect_leader", "collect_sharding" } do
  _M[name] = function(...)
    return require("kinformer.metrics.collectors")[name](...)
  end
end

return _M
