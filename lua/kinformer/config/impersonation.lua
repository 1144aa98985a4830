--- kinformer.config.impersonation (internal): impersonation settings (client-go's
-- ImpersonationConfig) from kinformer.client options or a kubeconfig user, in the form
-- kinformer.core.client takes them.
--
-- Contract: both readers return a table holding only the fields that were given, among
-- impersonate_user, impersonate_uid (strings), impersonate_groups (an array of strings) and
-- impersonate_extra (flattened to key, value, key, value... with the keys sorted, so headers go
-- out in a stable order). from_options raises an argument error of 'client' for a wrong shape;
-- from_kubeconfig returns nil, err instead (file content is data). Whether the combination makes
-- sense (a uid, groups or extra need a user; no control characters) is checked in C, once for
-- both sources (csrc/client.c).
local type, pairs, ipairs = type, pairs, ipairs
local sort = table.sort

local argcheck = require "kinformer.argcheck"

local _M = {}

local function string_list(v)
  if type(v) ~= "table" then return nil end
  local n = #v
  for k, x in pairs(v) do
    if type(k) ~= "number" or k < 1 or k > n or k % 1 ~= 0 or type(x) ~= "string" then
      return nil
    end
  end
  return v
end

-- map key -> string or array of strings (options) / array of strings (kubeconfig) -> flat pairs
local function flatten_extra(v, single_ok)
  if type(v) ~= "table" then return nil end
  local keys = {}
  for k, vals in pairs(v) do
    if type(k) ~= "string" then return nil end
    if not (single_ok and type(vals) == "string") and not string_list(vals) then return nil end
    keys[#keys + 1] = k
  end
  sort(keys)
  local flat = {}
  for _, k in ipairs(keys) do
    local vals = v[k]
    if type(vals) == "string" then vals = { vals } end
    for _, x in ipairs(vals) do
      flat[#flat + 1] = k
      flat[#flat + 1] = x
    end
  end
  return flat
end

--- impersonation.from_options(opts) -> fields (raises for a wrong shape)
-- opts.impersonate_groups: array of strings; opts.impersonate_extra: { key = value or
-- { value, ... } }. Types of user and uid were checked by kinformer.config.
function _M.from_options(opts)
  local out = { impersonate_user = opts.impersonate_user, impersonate_uid = opts.impersonate_uid }
  if opts.impersonate_groups ~= nil then
    out.impersonate_groups = string_list(opts.impersonate_groups)
    if not out.impersonate_groups then
      argcheck.raise(1, "client", "option 'impersonate_groups' must be an array of strings")
    end
  end
  if opts.impersonate_extra ~= nil then
    out.impersonate_extra = flatten_extra(opts.impersonate_extra, true)
    if not out.impersonate_extra then
      argcheck.raise(1, "client", "option 'impersonate_extra' must map names to a string or "
        .. "an array of strings")
    end
  end
  return out
end

--- impersonation.from_kubeconfig(user_entry, what) -> fields | nil, err
-- The user entry's as, as-uid, as-groups and as-user-extra (client-go's names); what names the
-- entry in messages ('user "u"').
function _M.from_kubeconfig(u, what)
  local out = {}
  for _, f in ipairs{ { "as", "impersonate_user" }, { "as-uid", "impersonate_uid" } } do
    local v = u[f[1]]
    if v ~= nil and type(v) ~= "string" then
      return nil, what .. ": " .. f[1] .. " must be a string"
    end
    if v ~= "" then out[f[2]] = v end
  end
  if u["as-groups"] ~= nil then
    out.impersonate_groups = string_list(u["as-groups"])
    if not out.impersonate_groups then
      return nil, what .. ": as-groups must be a list of strings"
    end
  end
  if u["as-user-extra"] ~= nil then
    out.impersonate_extra = flatten_extra(u["as-user-extra"], false)
    if not out.impersonate_extra then
      return nil, what .. ": as-user-extra must map names to lists of strings"
    end
  end
  return out
end

return _M
