--- kinformer.ngx.view (internal): views, what workers read (kngx.view, docs/openresty.md).
--
-- Contract: in the worker model a view is a Lua table of this process; in the agent model it
-- lives in a lua_shared_dict that it owns: values are encoded (default JSON) into the dict by the
-- process that runs the informers and decoded once per worker and change. get() never blocks
-- and never does I/O: one ngx.shared lookup at most. set_model() is called once by start();
-- until then (and in the worker model) views are plain tables.
local ngx = ngx
local argcheck = require "kinformer.argcheck"
local errtext = require "kinformer.errtext"
local nprocess = require "kinformer.ngx.process"

local json = require("cjson").new() -- our own instance: a user's cjson settings stay theirs
local json_decode = json.decode
local encode = require("kinformer.core").encode

local type, ipairs, pcall, setmetatable, error = type, ipairs, pcall, setmetatable, error

-- kinformer's encoder, not lua-cjson's: cached objects in a value are lazy (lua-cjson would see
-- only the members read so far) and numbers must come back exact. It takes tables: another
-- value is encoded as the one element of an array, brackets dropped.
local function json_encode(value)
  if value == nil then return "null" end
  local s, err = encode(type(value) == "table" and value or { value })
  if not s then error(err, 0) end
  if type(value) ~= "table" then s = s:sub(2, -2) end
  return s
end
local shared = ngx.shared
local S, log, raise = nprocess.state, nprocess.log, argcheck.raise

local _M = {}

local model -- "agent" once start() picked that model (read on the request path)
local views = {} -- every view of this process, in the order created
_M.all = views

--- view.set_model(m): start() picked model m ("worker" or "agent").
function _M.set_model(m)
  model = m
end

local View = {}
View.__index = View

--- view.new(opts) -> view (kngx.view's work).
function _M.new(opts)
  if type(opts) ~= "table" then raise(1, "view", "table expected, got " .. type(opts)) end
  argcheck.options(opts, { name = true, dict = true, encode = true, decode = true }, "view")
  if type(opts.name) ~= "string" then raise(1, "view", "option 'name' must be a string") end
  argcheck.string(opts, "dict", "view")
  argcheck.func(opts, "encode", "view")
  argcheck.func(opts, "decode", "view")
  local v = setmetatable({
    name = opts.name, dict_name = opts.dict or opts.name,
    _encode = opts.encode or json_encode, _decode = opts.decode or json_decode,
    _local = {},        -- worker model: the values
    _cache = {},        -- agent model, readers: key -> { raw, value }
    _published = {},    -- agent model, the agent: keys set since it started
    keys = 0,           -- keys set by this process (the one that runs the informers)
    errors = 0,
  }, View)
  views[#views + 1] = v
  return v
end

function View:_shm()
  local d = self._dict
  if d == nil then
    d = shared[self.dict_name]
    if d == nil then
      argcheck.fail("kinformer.ngx view '" .. self.name .. "': no lua_shared_dict "
        .. self.dict_name)
    end
    self._dict = d
  end
  return d
end

function View:set(key, value)
  if model ~= "agent" then
    local t = self._local
    if t[key] == nil then self.keys = self.keys + 1 end
    t[key] = value
    return true
  end
  local ok, s = pcall(self._encode, value)
  local err
  if ok and type(s) == "string" then
    ok, err = self:_shm():safe_set(key, s)
  else
    ok, err = false, "encode failed: " .. errtext(s)
  end
  if not ok then
    self.errors = self.errors + 1
    S.view_errors = S.view_errors + 1
    log("error", "view ", self.name, ": cannot publish ", key, ": ", err)
    return nil, err
  end
  if not self._published[key] then
    self._published[key] = true
    self.keys = self.keys + 1
  end
  return true
end

function View:delete(key)
  if model ~= "agent" then
    local t = self._local
    if t[key] ~= nil then
      t[key] = nil
      self.keys = self.keys - 1
    end
    return
  end
  self:_shm():delete(key)
  if self._published[key] then
    self._published[key] = nil
    self.keys = self.keys - 1
  end
end

function View:get(key)
  if model ~= "agent" then return self._local[key] end
  local raw = self:_shm():get(key)
  local cache = self._cache
  if raw == nil then
    cache[key] = nil
    return nil
  end
  local c = cache[key]
  if c and c[1] == raw then return c[2] end
  local ok, value = pcall(self._decode, raw)
  if not ok then
    log("error", "view ", self.name, ": cannot decode ", key, ": ", value)
    return nil
  end
  cache[key] = { raw, value }
  return value
end

-- The agent: drop what a previous agent published and this one did not (after the first sync).
function View:_sweep()
  local d = self:_shm()
  local n = 0
  for _, k in ipairs(d:get_keys(0)) do
    if not self._published[k] then
      d:delete(k)
      n = n + 1
    end
  end
  if n > 0 then log("info", "view ", self.name, ": removed ", n, " stale keys") end
end

return _M
