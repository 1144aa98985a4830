--- kinformer.argcheck (internal): argument checks for the pure-Lua modules.
--
-- Contract: a wrong argument raises "bad argument #n to 'fname' (msg)" positioned at the line
-- of the first caller outside kinformer's own Lua files, whichever library function found the
-- mistake and however deep it sits (client:informer -> informer -> here). A caller that is a C
-- function (pcall) gets no position, as error(msg, 2) would give it. Only the raising path walks
-- the stack: checks that pass cost what the inline test costs.
--
-- Option tables: options(opts, known, fname) refuses a non-table and any name `known` lacks;
-- number / func / string check one typed option and return its value or the default.
local type, error, tostring, pairs, pcall, format = type, error, tostring, pairs, pcall,
  string.format
local getinfo, floor = debug.getinfo, math.floor

local _M = {}

-- "@/.../kinformer/": every kinformer module (and its subfolders) starts with it.
local LIB = debug.getinfo(1, "S").source:match("^(@.*/)argcheck%.lua$") or "@kinformer/"
local LIB_LEN = #LIB

-- The level, counted from our caller's caller (the function that raises through us), of the
-- first frame outside the library.
local function outside_level()
  local level = 3 -- 1: here, 2: fail/raise, 3: the library function that found the mistake
  while true do
    local info = getinfo(level, "S")
    if info == nil then return 0 end
    if info.source:sub(1, LIB_LEN) ~= LIB then return level - 1 end
    level = level + 1
  end
end

--- argcheck.fail(msg): raises msg at the first caller outside kinformer.
function _M.fail(msg)
  local level = outside_level()
  error(msg, level > 0 and level or 0)
end

--- argcheck.raise(n, fname, msg): raises "bad argument #n to 'fname' (msg)" there.
function _M.raise(n, fname, msg)
  local level = outside_level()
  error(format("bad argument #%d to '%s' (%s)", n, fname, msg), level > 0 and level or 0)
end
local raise = _M.raise

-- Passes a call's results on, or re-raises its error at the first caller outside kinformer.
local function pass(ok, ...)
  if not ok then _M.fail((...)) end
  return ...
end

--- argcheck.call(fn, ...) -> fn(...)'s results; what fn raises (a C function's argument
-- errors carry no position) is raised again at the first caller outside kinformer.
function _M.call(fn, ...)
  return pass(pcall(fn, ...))
end

--- argcheck.options(opts, known, fname[, n]) -> opts ({} for nil)
-- known: name -> anything truthy. Raises for a non-table and for an unknown name.
function _M.options(opts, known, fname, n)
  n = n or 1
  if opts == nil then return {} end
  if type(opts) ~= "table" then raise(n, fname, "table expected, got " .. type(opts)) end
  for k in pairs(opts) do
    if not known[k] then raise(n, fname, "unknown option '" .. tostring(k) .. "'") end
  end
  return opts
end

--- argcheck.number(opts, name, fname, default, min[, strict[, integer]]) -> value
-- A number >= min (> min when strict; a whole number when integer); default when absent, and
-- required when default is nil.
function _M.number(opts, name, fname, default, min, strict, integer)
  local v = opts[name]
  if v == nil then
    if default == nil then raise(1, fname, "option '" .. name .. "' is required") end
    return default
  end
  local ok = type(v) == "number" and v == v and (strict and v > min or not strict and v >= min)
  if ok and integer then ok = v == floor(v) end
  if not ok then
    raise(1, fname, format("option '%s' must be %s %s %g", name,
      integer and "an integer" or "a number", strict and ">" or ">=", min))
  end
  return v
end

--- argcheck.func(opts, name, fname) -> the function or nil
function _M.func(opts, name, fname)
  local v = opts[name]
  if v ~= nil and type(v) ~= "function" then
    raise(1, fname, "option '" .. name .. "' must be a function")
  end
  return v
end

--- argcheck.string(opts, name, fname) -> the string or nil
function _M.string(opts, name, fname)
  local v = opts[name]
  if v ~= nil and type(v) ~= "string" then
    raise(1, fname, "option '" .. name .. "' must be a string")
  end
  return v
end

return _M
