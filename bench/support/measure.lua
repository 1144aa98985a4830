-- What the manager benchmarks share: CPU time and peak RSS of a process from /proc, key=value
-- result lines between a child and its parent, medians with their spread, and number formats.
--
--   package.path = root .. "/?.lua;" .. package.path
--   local measure = require "bench.support.measure"
--   local cpu = measure.proc_cpu(pid)            -- seconds of CPU (user + system), or nil
--   print(measure.cell(runs, "rate", measure.int)) -- "2,578 (2,551-2,585)"
--
-- Linux only (/proc). Nothing here starts or stops a process.
local io_open, tonumber, tostring, pairs, ipairs = io.open, tonumber, tostring, pairs, ipairs
local math_floor, math_huge, math_min, math_max = math.floor, math.huge, math.min, math.max
local table_sort, table_concat = table.sort, table.concat

local _M = { _VERSION = "0.1" }

local TICKS = 100 -- USER_HZ: /proc/PID/stat counts CPU time in 1/100 s on Linux

--- measure.proc_cpu(pid | "self") -> CPU seconds (user + system) of that process, or nil when
-- it is gone
function _M.proc_cpu(pid)
  local f = io_open("/proc/" .. pid .. "/stat")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  -- after "pid (comm) ": state is field 1, utime field 12, stime field 13
  local fields = {}
  for w in s:match("%) (.*)$"):gmatch("%S+") do fields[#fields + 1] = w end
  return (tonumber(fields[12]) + tonumber(fields[13])) / TICKS
end

--- measure.peak_rss_mb([pid = "self"]) -> the process's peak RSS (VmHWM) in MB, or nil
function _M.peak_rss_mb(pid)
  local f = io_open("/proc/" .. (pid or "self") .. "/status")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  local kb = s:match("VmHWM:%s+(%d+)")
  return kb and tonumber(kb) / 1024 or nil
end

--- measure.loadavg() -> "1-min 5-min 15-min" load averages, or "?"
function _M.loadavg()
  local f = io_open("/proc/loadavg")
  local s = f and f:read("l") or "?"
  if f then f:close() end
  return s:match("^(%S+ %S+ %S+)") or s
end

--- measure.emit(t): writes t as one line of sorted key=value pairs (a child's result)
function _M.emit(t)
  local parts = {}
  for k, v in pairs(t) do parts[#parts + 1] = k .. "=" .. tostring(v) end
  table_sort(parts)
  io.write(table_concat(parts, " "), "\n")
end

--- measure.parse(line) -> the table of a line measure.emit wrote (numbers as numbers)
function _M.parse(line)
  local r = {}
  for k, v in line:gmatch("([%w_]+)=(%S+)") do r[k] = tonumber(v) or v end
  return r
end

--- measure.sh(cmd) -> its standard output, its exit code (0 on success)
function _M.sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok and 0 or code
end

--- measure.median(xs) -> the median of a non-empty array of numbers (sorts xs)
function _M.median(xs)
  table_sort(xs)
  local m = #xs
  if m % 2 == 1 then return xs[(m + 1) / 2] end
  return (xs[m / 2] + xs[m / 2 + 1]) / 2
end

--- measure.spread(xs, fmt) -> "median (min-max)" of xs, each formatted by fmt; just the median
-- for one value
function _M.spread(xs, fmt)
  local lo, hi = math_huge, -math_huge
  for _, x in ipairs(xs) do lo, hi = math_min(lo, x), math_max(hi, x) end
  local m = _M.median(xs)
  if #xs == 1 then return fmt(m) end
  return ("%s (%s-%s)"):format(fmt(m), fmt(lo), fmt(hi))
end

--- measure.cell(runs, field, fmt[, scale]) -> measure.spread of runs[i][field], each passed
-- through scale(run, value) first when given
function _M.cell(runs, field, fmt, scale)
  local xs = {}
  for i, r in ipairs(runs) do xs[i] = scale and scale(r, r[field]) or r[field] end
  return _M.spread(xs, fmt)
end

--- measure.int(x) -> x rounded, with thousands separators: "10,000"
function _M.int(x)
  local s = ("%d"):format(math_floor(x + 0.5))
  return (s:reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^(-?),", "%1"))
end

--- measure.f1(x), measure.f2(x) -> x with one or two decimals
function _M.f1(x) return ("%.1f"):format(x) end
function _M.f2(x) return ("%.2f"):format(x) end

return _M
