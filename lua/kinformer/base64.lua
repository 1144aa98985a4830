--- kinformer.base64 (internal): standard base64 (RFC 4648, "+/" alphabet) for kubeconfig data.
--
-- Contract: decode ignores whitespace and takes padding as optional, returns nil for anything
-- else that is not base64; encode pads. Arithmetic only, so it runs on Lua 5.1/LuaJIT and 5.4
-- alike. Pure functions, any thread.
local concat = table.concat
local floor = math.floor
local char, byte = string.char, string.byte

local _M = {}

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64DEC = {}
for i = 1, 64 do B64DEC[byte(B64, i)] = i - 1 end

--- base64.decode(s) -> bytes | nil
function _M.decode(s)
  s = s:gsub("%s", "")
  local body, pad = s:match("^([^=]*)(=*)$")
  if body == nil or #pad > 2 or (#pad > 0 and (#body + #pad) % 4 ~= 0) or #body % 4 == 1 then
    return nil
  end
  local out, n = {}, 0
  for i = 1, #body, 4 do
    local a, b = B64DEC[byte(body, i)], B64DEC[byte(body, i + 1)]
    local c3, d4 = byte(body, i + 2), byte(body, i + 3)
    local c, d = c3 and B64DEC[c3], d4 and B64DEC[d4]
    if a == nil or b == nil or (c3 and c == nil) or (d4 and d == nil) then return nil end
    local v = a * 262144 + b * 4096 + (c or 0) * 64 + (d or 0)
    local x, y, z = floor(v / 65536), floor(v / 256) % 256, v % 256
    n = n + 1
    if d4 then out[n] = char(x, y, z) elseif c3 then out[n] = char(x, y) else out[n] = char(x) end
  end
  return concat(out)
end

--- base64.encode(s) -> text
function _M.encode(s)
  local out, n = {}, 0
  for i = 1, #s, 3 do
    local a, b, c = byte(s, i, i + 2)
    local v = a * 65536 + (b or 0) * 256 + (c or 0)
    local i1, i2 = floor(v / 262144) + 1, floor(v / 4096) % 64 + 1
    local i3, i4 = floor(v / 64) % 64 + 1, v % 64 + 1
    n = n + 1
    out[n] = B64:sub(i1, i1) .. B64:sub(i2, i2) .. (b and B64:sub(i3, i3) or "=")
      .. (c and B64:sub(i4, i4) or "=")
  end
  return concat(out)
end

return _M
