-- widget_controller.lua: the Widget controller of examples/widget-operator.lua, loadable on
-- its own (a spec drives it with kinformer.testing: spec/examples_kit_spec.lua).
--
--   local register = dofile("examples/widget_controller.lua")
--   register(mgr, { dir = "/tmp", namespace = nil, say = print })
--
-- register(mgr, opts) adds the "widgets" controller to the kinformer.manager mgr: opts.dir holds
-- the <namespace>_<name>.widget files, opts.namespace limits it to one namespace, opts.say(...)
-- receives one line per action. Returns the controller.
local kinformer = require "kinformer"

local WIDGETS = "widgets.v1.example.com"

return function(mgr, opts)
  local client = mgr.client
  local say = opts.say or function() end
  local function file_of(w) return ("%s/%s_%s.widget"):format(opts.dir, w.metadata.namespace,
    w.metadata.name) end

  -- The status this reconcile wants; written only when it differs from the Widget's (a status
  -- rewritten with the same content would wake every other watcher of Widgets).
  local function write_status(w, ready, reason, message)
    local gen = w.metadata.generation
    local old = ((w.status or {}).conditions or {})[1]
    local since = old and old.status == ready and old.lastTransitionTime
      or os.date("!%Y-%m-%dT%H:%M:%SZ")
    local res, written = client:update_status_if_changed(WIDGETS, w, {
      observedGeneration = gen,
      conditions = { { type = "Ready", status = ready, reason = reason, message = message,
                       observedGeneration = gen, lastTransitionTime = since } },
    })
    if written then say("status", kinformer.key_of(w), ready) end
    return res, written
  end

  local function reconcile(req, ctx)
    local w = ctx:get()
    if not w then return end -- deleted: the garbage collector removes its ConfigMap
    local spec = w.spec or {}
    local n = tonumber(spec.replicas) or 1 -- "replicas": 2 is the integer 2 on Lua 5.4 (docs/api.md)
    local message = tostring(spec.message or "")
    -- "2", not "2.0", also for a double (LuaJIT) or a float (JSON 2.0 or 2e0)
    local replicas = n == math.floor(n) and ("%d"):format(n) or tostring(n)
    -- The file outside the cluster (rewritten only when its content differs).
    local path = file_of(w)
    local f = io.open(path)
    local old = f and f:read("a")
    if f then f:close() end
    if old ~= message then
      f = assert(io.open(path, "w"))
      f:write(message)
      f:close()
    end
    -- The owned ConfigMap: created or updated only when it differs (read from the cache).
    local name = w.metadata.name .. "-config"
    local cm, op = ctx:create_or_update("configmaps", { apiVersion = "v1", kind = "ConfigMap",
      metadata = { name = name, namespace = req.namespace } }, function(obj)
        obj.data = { message = message, replicas = replicas }
        return ctx:set_controller_reference(obj) -- refuses a ConfigMap another controller owns
      end)
    if not cm then
      write_status(w, "False", "ConfigMapFailed", tostring(op))
      return nil, op -- a 409 is retried quietly with backoff
    end
    if op ~= "unchanged" then
      say("configmap " .. op, req.namespace .. "/" .. name)
      ctx:event(w, "Normal", op == "created" and "ConfigMapCreated" or "ConfigMapUpdated",
        op .. " ConfigMap " .. name)
    end
    local ok, serr = write_status(w, "True", "ConfigMapReady", "ConfigMap " .. name .. " is current")
    if not ok then return nil, serr end
    say("reconciled", req.key)
  end

  return mgr:controller{
    name = "widgets", resource = WIDGETS, namespace = opts.namespace,
    owns = { "configmaps" },
    -- spec changes (generation) on Widgets; any change of an owned ConfigMap repairs it
    predicates = { kinformer.predicates.generation_changed },
    finalizer = "example.com/widget-file",
    finalize = function(w, ctx)
      local ok, rerr = os.remove(file_of(w))
      if not ok and not tostring(rerr):find("No such file", 1, true) then return nil, rerr end
      ctx:event(w, "Normal", "FileRemoved", "removed " .. file_of(w))
      say("finalized", kinformer.key_of(w))
    end,
    reconcile = reconcile,
    -- client:update_status_if_changed writes the status subresource: a call the manager cannot
    -- see
    rbac = { { apiGroups = { "example.com" }, resources = { "widgets/status" },
               verbs = { "update", "patch" } } },
  }
end
