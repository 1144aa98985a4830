--- kinformer.errtext (internal): any error value as text, for logs and status.
--
-- Contract: errtext(v) -> a string, and never raises. A handler, reconcile or callback may raise
-- anything; turning that into text must not become a second error that escapes the loop which
-- caught the first (the other handlers would miss the event, a manager would skip its
-- shutdown). A string is itself; a number its tostring; a value whose metatable has __tostring
-- the string that returns (called protected); anything else, or a __tostring that raises or
-- returns something other than a string, "(error object of type T)": a plain table's address
-- would say nothing in a log.
local type, tostring, pcall, rawget = type, tostring, pcall, rawget
local getmetatable = debug.getmetatable

return function(v)
  local t = type(v)
  if t == "string" then return v end
  if t == "number" then return tostring(v) end
  local mt = getmetatable(v)
  if mt ~= nil and rawget(mt, "__tostring") ~= nil then
    local ok, s = pcall(tostring, v)
    if ok and type(s) == "string" then return s end
    return "(error object of type " .. t .. ": its __tostring failed)"
  end
  return "(error object of type " .. t .. ")"
end
