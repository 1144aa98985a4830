--- kinformer.config.yaml (internal): a kubeconfig's YAML text -> Lua values, with lyaml (Debian:
-- lua-yaml), loaded on first use only.
--
-- Contract: decode(text) -> value | nil, err, code. Plain scalars stay strings, except null and
-- booleans: the few non-string kubeconfig fields are booleans, and a token like 0x1f or 012 must
-- not turn into a number. YAML nulls become nil. Aliases stay shared tables (possibly cyclic):
-- callers that walk a value must bound the walk. A syntax error is nil, "at line L, column C:
-- problem", "EPARSE" (libyaml's real position, not lyaml's last good event); without lyaml,
-- nil, err, "ENOTFOUND".
local type, pairs, pcall, tostring, require = type, pairs, pcall, tostring, require
local byte = string.byte

local _M = {}

local yaml, yaml_implicit

local function load_lib()
  if yaml then return yaml end
  local ok, lib = pcall(require, "lyaml")
  if not ok then
    return nil, "reading a kubeconfig needs lyaml (Debian: lua-yaml): " .. tostring(lib)
  end
  local implicit = require "lyaml.implicit"
  yaml = lib
  yaml_implicit = function(v)
    local n = implicit.null(v)
    if n ~= nil then return n end
    local b = implicit.bool(v)
    if b ~= nil then return b end
    return v
  end
  return yaml
end

-- The position of the first byte YAML does not allow (control characters other than tab, LF
-- and CR; invalid UTF-8), or nil.
local function first_bad_char(text)
  local ctl = text:find("[%z\1-\8\11\12\14-\31\127]")
  local i = 1
  while true do
    i = text:find("[\128-\255]", i)
    if i == nil or (ctl and i > ctl) then return ctl end
    local c, n = byte(text, i), 0
    if c >= 0xC2 and c <= 0xDF then n = 1
    elseif c >= 0xE0 and c <= 0xEF then n = 2
    elseif c >= 0xF0 and c <= 0xF4 then n = 3
    else return i end
    for k = 1, n do
      local d = byte(text, i + k)
      if d == nil or d < 0x80 or d > 0xBF then return i end
    end
    i = i + n + 1
  end
end

-- "at line L, column C: problem". lyaml.load reports the position of the last good event, so
-- the text is scanned again with the low-level parser, whose libyaml message has the real one.
local function syntax_error(text, lyaml_msg)
  local ok, low = pcall(require, "yaml")
  if ok and type(low.parser) == "function" then
    local okp, err = pcall(function()
      local next_event = low.parser(text)
      while true do
        local ev = next_event()
        if ev == nil or ev.type == "STREAM_END" then return end
      end
    end)
    if not okp then
      local what, line, col = tostring(err):match("^(.-) at document: %d+, line: (%d+), column: (%d+)")
      if what then return ("at line %s, column %s: %s"):format(line, col, what) end
    end
  end
  local line, col, what = tostring(lyaml_msg):match("(%d+):(%d+): (.*)$")
  if line == "0" and col == "0" then
    -- libyaml's reader (control character, bad UTF-8) gives no position: find the byte.
    local at = first_bad_char(text)
    if at then
      local before = text:sub(1, at - 1)
      local _, nl = before:gsub("\n", "")
      return ("at line %d, byte %d: %s"):format(nl + 1, at - (before:match(".*()\n") or 0), what)
    end
  end
  if line then return ("near line %s, column %s: %s"):format(line, col, what) end
  return ": " .. tostring(lyaml_msg)
end

-- lyaml's null sentinel becomes nil. Aliases make a document a graph whose tables are shared,
-- or even cyclic (`a: &x [*x]`): each table is visited once.
local function strip_nulls(v, seen)
  if v == yaml.null then return nil end
  if type(v) == "table" and not seen[v] then
    seen[v] = true
    for k, x in pairs(v) do v[k] = strip_nulls(x, seen) end
  end
  return v
end

--- yaml.decode(text) -> value (nil for an empty document) | nil, err, code
function _M.decode(text)
  local lib, lerr = load_lib()
  if not lib then return nil, lerr, "ENOTFOUND" end
  local ok, doc = pcall(lib.load, text, { implicit_scalar = yaml_implicit })
  if not ok then return nil, syntax_error(text, doc), "EPARSE" end
  return strip_nulls(doc, {})
end

return _M
