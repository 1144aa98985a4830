--- kinformer.config.util (internal): what the config modules share: reading small files, paths
-- relative to a kubeconfig, and names from a kubeconfig as error messages show them.
--
-- Contract: pure functions, any thread. shorten / q never let a control character or more than
-- 64 bytes of a kubeconfig name into a message (a name can be any YAML string, megabytes long
-- or spanning lines).
local core = require "kinformer.core"

local io_open = io.open
local type, tostring, pairs, ipairs = type, tostring, pairs, ipairs
local concat, sort = table.concat, table.sort
local byte = string.byte

local _M = {}

-- A file that is not a regular file (a FIFO would block the open until a writer comes; a device
-- can be endless) -> why not, else nil.
local function not_regular(path)
  local t, err = core.file_type(path)
  if t == nil then return err end
  if t ~= "file" then return ("%s: not a regular file (a %s)"):format(path, t) end
end
_M.not_regular = not_regular

--- util.read_file(path[, max]) -> data | nil, err
-- max: a size limit in bytes; nil for none. Only regular files are read.
function _M.read_file(path, max)
  local why = not_regular(path)
  if why then return nil, why end
  local f, err = io_open(path, "rb")
  if not f then return nil, err end
  local data = f:read(max and max + 1 or "*a")
  f:close()
  if max and data and #data > max then return nil, path .. ": larger than " .. max .. " bytes" end
  if not data then
    if max then return "" end -- read(n) gives nil for an empty file
    return nil, path .. ": cannot read"
  end
  return data
end

--- util.exists(path) -> whether path is a regular file that can be opened for reading
function _M.exists(path)
  if not_regular(path) then return false end
  local f = io_open(path, "rb")
  if f then f:close() return true end
  return false
end

--- util.dirname(path) -> its folder ("." for a bare name)
function _M.dirname(path)
  local d = path:match("^(.*)/[^/]*$")
  if d == nil then return "." end
  if d == "" then return "/" end
  return d
end

--- util.resolve(path, base): client-go's MakeAbs: a relative path is relative to the
-- kubeconfig's folder.
function _M.resolve(path, base)
  if path == nil or path == "" or path:sub(1, 1) == "/" or base == nil then return path end
  if base == "." then return path end
  return (base == "/" and "" or base) .. "/" .. path
end

function _M.trim(s)
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

function _M.sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  sort(out)
  return out
end

--- util.str_field(t, key, what) -> the string | nil (absent or "") | nil, err (another type)
function _M.str_field(t, key, what)
  local v = t[key]
  if v == nil or v == "" then return nil end
  if type(v) ~= "string" then
    return nil, ("%s: %s must be a string"):format(what, key)
  end
  return v
end

--- util.shorten(s) -> s with control characters escaped, at most 64 bytes.
function _M.shorten(s)
  s = tostring(s):gsub("%c", function(c) return ("\\x%02x"):format(byte(c)) end)
  if #s > 64 then
    -- cut before a UTF-8 lead byte, so that no character is cut in two
    local cut = 61
    while cut > 1 and byte(s, cut + 1) and byte(s, cut + 1) >= 0x80 and byte(s, cut + 1) < 0xC0 do
      cut = cut - 1
    end
    s = s:sub(1, cut) .. "..."
  end
  return s
end
local shorten = _M.shorten

--- util.q(s) -> the shortened name in double quotes
function _M.q(s) return '"' .. shorten(s) .. '"' end
local q = _M.q

--- util.quote_list(names) -> '"a", "b", and 3 more' | "none"
function _M.quote_list(names)
  local out = {}
  for i, n in ipairs(names) do
    if i > 10 then
      out[i] = ("and %d more"):format(#names - 10)
      break
    end
    out[i] = q(n)
  end
  return #out > 0 and concat(out, ", ") or "none"
end

return _M
