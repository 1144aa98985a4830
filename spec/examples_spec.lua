-- Every example runs and prints what the docs say it prints; the watchers run against the fake
-- API server as subprocesses (from another directory, with no LUA_PATH: they find the checkout's
-- modules themselves), and `make demo` runs end to end.
local fake = require "support.fake_apiserver"
local proc = require "support.proc"
local socket = require "socket"

local function quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- The checkout's absolute path (KINFORMER_ROOT may be relative).
local ROOT
do
  local p = assert(io.popen("cd " .. quote(KINFORMER_ROOT) .. " && pwd"))
  ROOT = p:read("l")
  p:close()
end

-- The environment of a subprocess: no Lua paths, no cluster configuration of the developer's.
local CLEAN_ENV = "env -u LUA_PATH -u LUA_CPATH -u LUA_PATH_5_4 -u LUA_CPATH_5_4 "
  .. "-u KUBECONFIG -u KINFORMER_SERVER"

-- Runs a shell command (stderr merged into stdout), calling on_line(line) for each line as it
-- arrives; returns the lines and the exit status. on_line errors are raised after the command
-- ended (so no subprocess is left behind).
local function run_lines(cmd, on_line)
  local p = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"exit=$?\""))
  local lines, failure = {}, nil
  for line in p:lines() do
    lines[#lines + 1] = line
    if on_line and not failure then
      local ok, err = pcall(on_line, line)
      if not ok then failure = err end
    end
  end
  p:close()
  if failure then error(failure, 0) end
  local status = tonumber((table.remove(lines) or ""):match("^exit=(%d+)$"))
  return lines, status
end

-- An example run as a user would: `lua5.4 /path/to/examples/x.lua args`, from /tmp, bounded by
-- timeout(1) in case it hangs (opts.timeout replaces those timeout(1) options; opts.lua the Lua).
local function example(script, srv, args, opts)
  opts = opts or {}
  return ("cd /tmp && %s%s timeout %s %s %s %s"):format(CLEAN_ENV,
    srv and (" KINFORMER_SERVER=" .. quote(srv.url)) or "", opts.timeout or "-k 2 30",
    opts.lua or "lua5.4", quote(ROOT .. "/examples/" .. script), args or "")
end

local function is_ready(pod)
  for _, c in ipairs(pod.status and pod.status.conditions or {}) do
    if c.type == "Ready" then return c.status == "True" end
  end
  return false
end

local function new_pod(name, node)
  return { apiVersion = "v1", kind = "Pod", metadata = { name = name, labels = { app = "demo" } },
           spec = { nodeName = node, containers = { { name = "c", image = "busybox" } } } }
end

local function find(lines, pattern)
  for _, l in ipairs(lines) do
    if l:match(pattern) then return l end
  end
end

local function count(lines, pattern)
  local n = 0
  for _, l in ipairs(lines) do
    if l:match(pattern) then n = n + 1 end
  end
  return n
end

local function esc(s) return (s:gsub("%p", "%%%0")) end

-- pod-watcher's summaries: { { total =, namespaces =, rows = { ns = { pods =, ready = } } }, ... }
local function summaries(lines)
  local out = {}
  for _, l in ipairs(lines) do
    local total, nss = l:match("^%d%d:%d%d:%d%d  summary  (%d+) pods in (%d+) namespaces")
    if total then
      out[#out + 1] = { total = tonumber(total), namespaces = tonumber(nss), rows = {} }
    else
      local ns, pods, ready = l:match("^%d%d:%d%d:%d%d  summary  (%S+)%s+(%d+) pods%s+(%d+) ready")
      if ns then out[#out].rows[ns] = { pods = tonumber(pods), ready = tonumber(ready) } end
    end
  end
  return out
end

-- The server's pods the way pod-watcher's summary counts them.
local function server_summary(srv)
  local rows, total, nss = {}, 0, 0
  for _, pod in ipairs(srv:state("pods").items) do
    local ns = pod.metadata.namespace
    if not rows[ns] then
      rows[ns] = { pods = 0, ready = 0 }
      nss = nss + 1
    end
    rows[ns].pods = rows[ns].pods + 1
    if is_ready(pod) then rows[ns].ready = rows[ns].ready + 1 end
    total = total + 1
  end
  return { total = total, namespaces = nss, rows = rows }
end

describe("examples", function()
  it("store-basics.lua prints the README's output", function()
    local out = {}
    local lines, status = run_lines(("cd %s && LUA_PATH='lua/?.lua;lua/?/init.lua;;' "
      .. "LUA_CPATH='build/lua5.4/?.so;;' lua5.4 examples/store-basics.lua"):format(quote(ROOT)))
    assert.equals(0, status)
    for _, l in ipairs(lines) do out[#out + 1] = l end
    assert.equals("web/a web/b", out[1])
    assert.equals("1", out[2])
    assert.equals("n1", out[3])
    assert.equals("Replaced\tweb/a\tfalse", out[4])
    -- the two deletions come in the store's (unspecified) order
    local rest = { out[5], out[6] }
    table.sort(rest)
    assert.same({ "Deleted\tdb/c\ttrue", "Deleted\tweb/b\ttrue" }, rest)
  end)

  describe("pod-watcher.lua", function()
    it("prints adds, updates and deletes as they happen and summaries equal to the server",
      function()
      local srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
      finally(function() srv:stop() end)
      local initial = #srv:state("pods").items
      local relabelled = srv:state("pods", "payments").items[1].metadata.name
      local deleted = srv:state("pods", "monitoring").items[1].metadata.name

      -- Once synced, change the cluster: one create, one update, one delete.
      local lines, status = run_lines(example("pod-watcher.lua", srv, "--seconds 4 --every 1"),
        function(line)
          if line:match("^synced: ") then
            assert.equals(201, (srv:request("POST", "/api/v1/namespaces/shop/pods",
              new_pod("demo-new", "node-demo"))))
            assert.equals(200, (srv:request("PATCH", "/api/v1/namespaces/payments/pods/" ..
              relabelled, { metadata = { labels = { track = "canary" } } },
              { ["Content-Type"] = "application/merge-patch+json" })))
            assert.equals(200, (srv:request("DELETE", "/api/v1/namespaces/monitoring/pods/" ..
              deleted)))
          end
        end)
      local out = table.concat(lines, "\n")
      assert.equals(0, status, out)

      assert.equals("watching pods in all namespaces at " .. srv.url, lines[1])
      assert.equals(initial, count(lines, "^%d%d:%d%d:%d%d  added   .*%(initial list%)$"), out)
      assert.truthy(find(lines, "^synced: " .. initial .. " pods$"), out)
      -- one readable line per event: time, event, namespace/name, phase, node, readiness, change
      assert.truthy(find(lines,
        "^%d%d:%d%d:%d%d  added    shop/demo%-new%s+Pending%s+node%-demo%s+not%-ready$"), out)
      assert.truthy(find(lines, "^%d%d:%d%d:%d%d  updated  payments/" .. esc(relabelled)
        .. "%s+Running%s+node%-%d+%s+%S+%s+label track=canary$"), out)
      assert.truthy(find(lines, "^%d%d:%d%d:%d%d  deleted  monitoring/" .. esc(deleted)
        .. "%s+Running%s+node%-%d+%s+%S+$"), out)
      assert.truthy(lines[#lines]:match("^stopped %(timeout%): %d+ adds, %d+ updates, %d+ deletes"),
        out)

      -- The first summary (at sync) and the last (at exit, after the changes), from the cache's
      -- namespace index, match the server's pods at those moments.
      local sums = summaries(lines)
      assert.is_true(#sums >= 3, out) -- at sync, at least one periodic, at exit
      assert.same({ total = initial, namespaces = 3, rows = {
        monitoring = { pods = 1, ready = 1 }, payments = { pods = 3, ready = 2 },
        shop = { pods = 7, ready = 4 } } }, sums[1])
      local want = server_summary(srv)
      assert.same(want, sums[#sums])
      assert.equals(2, want.namespaces) -- monitoring lost its only pod
      assert.equals(8, want.rows.shop.pods)
    end)

    it("runs with a churning cluster and exits cleanly on SIGTERM", function()
      local srv = fake.start{ args = { "--sample-cluster", "--churn", "40" }, quiet = true }
      finally(function() srv:stop() end)
      -- No --seconds: it runs until the signal. --foreground: one SIGTERM, to the script only
      -- (without it timeout also signals its process group, and that second SIGTERM may land
      -- after kinformer.run has handed the signal back to its default action).
      local lines, status = run_lines(example("pod-watcher.lua", srv, "--every 1",
        { timeout = "--foreground --preserve-status -s TERM 3" }))
      local out = table.concat(lines, "\n")
      assert.equals(0, status, out)
      assert.truthy(lines[#lines]:match("^stopped %(SIGTERM%): %d+ adds, %d+ updates, %d+ deletes"),
        out)
      assert.is_true(count(lines, "^%d%d:%d%d:%d%d  updated ") > 0, out)
      assert.is_true(#summaries(lines) >= 2, out)
    end)

    it("shows a delete the watch missed as a tombstone at the relist", function()
      -- The first watch stalls; meanwhile a pod goes and the history is compacted, so the
      -- watch ends with 410 and the relist finds the pod gone.
      local srv = fake.start{ args = { "--sample-cluster", "--fault",
        '{"watch":true,"times":1,"action":{"type":"stall","seconds":2}}' }, quiet = true }
      finally(function() srv:stop() end)
      local victim = "monitoring/" .. srv:state("pods", "monitoring").items[1].metadata.name
      local lines, status = run_lines(example("pod-watcher.lua", srv, "--seconds 5 --every 10"),
        function(line)
          if line:match("^synced: ") then
            assert.equals(200, (srv:request("DELETE", "/api/v1/namespaces/" .. victim:gsub("/",
              "/pods/"))))
            srv:compact()
          end
        end)
      local out = table.concat(lines, "\n")
      assert.equals(0, status, out)
      assert.truthy(find(lines, "^%d%d:%d%d:%d%d  deleted  " .. esc(victim)
        .. "%s+Running%s+node%-%d+%s+%S+%s+%(noticed at relist%)$"), out)
      assert.truthy(find(lines, "%(unchanged: relist or resync%)$"), out)
      assert.same(server_summary(srv), summaries(lines)[#summaries(lines)])
    end)

    it("refuses unknown arguments", function()
      local lines, status = run_lines(example("pod-watcher.lua", nil, "--bogus"))
      assert.equals(2, status)
      assert.truthy(find(lines, "^pod%-watcher: unknown argument %-%-bogus$"))
    end)
  end)

  describe("index-by-node.lua", function()
    -- pod-watcher's tables: { { title =, nodes = { node = { pods =, ready =, keys = "a b" } } } }
    local function tables(lines)
      local out = {}
      for _, l in ipairs(lines) do
        local title = l:match("^%d%d:%d%d:%d%d  (.*)$")
        if title then
          out[#out + 1] = { title = title, nodes = {} }
        else
          local node, pods, ready, keys = l:match("^  (%S+)%s+(%d+) pods,%s+(%d+) ready: (.*)$")
          if node then
            out[#out].nodes[node] = { pods = tonumber(pods), ready = tonumber(ready), keys = keys }
          end
        end
      end
      return out
    end

    local function server_by_node(srv)
      local nodes = {}
      for _, pod in ipairs(srv:state("pods").items) do
        local n = pod.spec.nodeName
        if n then
          local e = nodes[n] or { pods = 0, ready = 0, list = {} }
          nodes[n] = e
          e.pods = e.pods + 1
          if is_ready(pod) then e.ready = e.ready + 1 end
          e.list[#e.list + 1] = pod.metadata.namespace .. "/" .. pod.metadata.name
        end
      end
      for _, e in pairs(nodes) do
        table.sort(e.list)
        e.keys = table.concat(e.list, " ")
        e.list = nil
      end
      return nodes
    end

    it("prints the pods per node from a Lua index and follows them as they move", function()
      local srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
      finally(function() srv:stop() end)
      local initial = server_by_node(srv)
      local gone = srv:state("pods", "payments").items[1]
      local gone_key = "payments/" .. gone.metadata.name

      local lines, status = run_lines(example("index-by-node.lua", srv, "--seconds 3 --every 1"),
        function(line)
          if line:match("^%d%d:%d%d:%d%d  synced: ") then
            for _, name in ipairs{ "demo-a", "demo-b" } do
              assert.equals(201, (srv:request("POST", "/api/v1/namespaces/shop/pods",
                new_pod(name, "node-demo"))))
            end
            assert.equals(200, (srv:request("DELETE", "/api/v1/namespaces/payments/pods/" ..
              gone.metadata.name)))
          end
        end)
      local out = table.concat(lines, "\n")
      assert.equals(0, status, out)
      assert.equals("stopped (timeout)", lines[#lines])

      local t = tables(lines)
      assert.is_true(#t >= 2, out)
      assert.equals("synced: 11 pods", t[1].title)
      assert.same(initial, t[1].nodes)
      -- the moves are named, and the last table is the server's layout
      local changes = {}
      for i = 2, #t do changes[#changes + 1] = t[i].title end
      changes = table.concat(changes, "\n")
      assert.matches("+shop/demo-a on node-demo", changes, 1, true)
      assert.matches("+shop/demo-b on node-demo", changes, 1, true)
      assert.matches("-" .. gone_key .. " from " .. gone.spec.nodeName, changes, 1, true)
      local final = t[#t].nodes
      assert.same(server_by_node(srv), final)
      assert.same({ pods = 2, ready = 0, keys = "shop/demo-a shop/demo-b" }, final["node-demo"])
      assert.is_nil(final[gone.spec.nodeName])
    end)

    it("runs under LuaJIT too", function()
      local missing = proc.luajit_missing(ROOT)
      if missing then
        pending(missing)
        return
      end
      local srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
      finally(function() srv:stop() end)
      local lines, status = run_lines(example("index-by-node.lua", srv, "--seconds 1",
        { lua = "luajit" }))
      local out = table.concat(lines, "\n")
      assert.equals(0, status, out)
      assert.matches("^%d%d:%d%d:%d%d  synced: 11 pods$", lines[1])
      assert.equals("stopped (timeout)", lines[#lines])
    end)
  end)

  describe("widget-operator.lua", function()
    -- A background run of the operator; its output in a file.
    local function start_operator(srv, dir)
      local out = os.tmpname()
      -- The shell's pid is the operator's (exec): signals reach it; --seconds is a safety net.
      local p = assert(io.popen(("echo $$; cd /tmp && exec %s KINFORMER_SERVER=%s lua5.4 %s "
        .. "--dir %s --seconds 60 >%s 2>&1"):format(CLEAN_ENV, quote(srv.url),
        quote(ROOT .. "/examples/widget-operator.lua"), quote(dir), quote(out))))
      return { p = p, pid = tonumber(p:read("l")), out = out }
    end
    local function output(op)
      local f = io.open(op.out)
      local s = f and f:read("a") or ""
      if f then f:close() end
      return s
    end
    local function wait_until(seconds, cond)
      local deadline = socket.gettime() + seconds
      while socket.gettime() < deadline do
        if cond() then return true end
        socket.sleep(0.05)
      end
      return cond()
    end
    local function get(srv, path)
      local code, body = srv:request("GET", path)
      return code == 200 and body or nil
    end

    it("owns a ConfigMap per Widget, writes status and events, cleans up in finalize",
      function()
      local srv = fake.start{ args = { "--widget-crd" }, quiet = true } -- status + scale
      local dir = os.tmpname()
      os.remove(dir)
      os.execute("mkdir -p " .. quote(dir))
      local op
      finally(function()
        if op and proc.alive(op.pid) then os.execute("kill -KILL " .. op.pid) end
        if op then op.p:close() os.remove(op.out) end
        os.execute("rm -rf " .. quote(dir))
        srv:stop()
      end)
      op = start_operator(srv, dir)
      local W = "/apis/example.com/v1/namespaces/default/widgets/"
      assert.equals(201, (srv:request("POST", "/apis/example.com/v1/namespaces/default/widgets",
        { apiVersion = "example.com/v1", kind = "Widget", metadata = { name = "w1" },
          spec = { message = "hello", replicas = 2 } })))
      local cm_path = "/api/v1/namespaces/default/configmaps/w1-config"
      assert.truthy(wait_until(10, function()
        local w = get(srv, W .. "w1")
        return get(srv, cm_path) and w and w.status and w.status.observedGeneration ~= nil
      end), output(op))
      local w, cm = get(srv, W .. "w1"), get(srv, cm_path)
      assert.same({ message = "hello", replicas = "2" }, cm.data)
      local ref = cm.metadata.ownerReferences[1]
      assert.same({ "example.com/v1", "Widget", "w1", w.metadata.uid, true },
        { ref.apiVersion, ref.kind, ref.name, ref.uid, ref.controller })
      assert.equals(w.metadata.generation, w.status.observedGeneration)
      assert.equals("Ready", w.status.conditions[1].type)
      assert.equals("True", w.status.conditions[1].status)
      assert.same({ "example.com/widget-file" }, w.metadata.finalizers)
      local f = assert(io.open(dir .. "/default_w1.widget"))
      assert.equals("hello", f:read("a"))
      f:close()
      assert.truthy(wait_until(5, function()
        for _, e in ipairs(srv:state("events", "default").items) do
          if e.reason == "ConfigMapCreated" and e.involvedObject.uid == w.metadata.uid then
            return true
          end
        end
      end), output(op))

      -- A spec change reaches the ConfigMap and the file; an edit of the ConfigMap is repaired.
      w.spec.message = "changed"
      assert.equals(200, (srv:request("PUT", W .. "w1", w)))
      assert.truthy(wait_until(10, function()
        local c = get(srv, cm_path)
        return c and c.data.message == "changed"
      end), output(op))
      cm = get(srv, cm_path)
      cm.data.message = "someone else"
      assert.equals(200, (srv:request("PUT", cm_path, cm)))
      assert.truthy(wait_until(10, function()
        local c = get(srv, cm_path)
        return c and c.data.message == "changed"
      end), output(op))

      -- Deleted: the server only sets deletionTimestamp while the finalizer remains; the file
      -- goes, then the finalizer, then the Widget and (garbage collection) its ConfigMap.
      assert.equals(200, (srv:request("DELETE", W .. "w1")))
      assert.truthy(wait_until(10, function()
        return not get(srv, W .. "w1") and not get(srv, cm_path)
      end), output(op))
      assert.is_nil(io.open(dir .. "/default_w1.widget"))
      assert.matches("finalized default/w1", output(op))

      os.execute("kill -TERM " .. op.pid)
      local _, _, code = op.p:close()
      op.p = { close = function() end }
      assert.equals(0, code)
      assert.matches("stopped SIGTERM", output(op))
    end)
  end)

  describe("make demo", function()
    local function alive(pid)
      local f = io.open("/proc/" .. pid .. "/cmdline")
      if not f then return false end
      local cmd = f:read("a") or ""
      f:close()
      return cmd:find("server.py", 1, true) ~= nil
    end

    it("starts the fake server, watches it for DEMO_SECONDS and stops the server", function()
      local t0 = socket.gettime()
      local lines, status = run_lines(("cd %s && %s timeout -k 5 60 make --no-print-directory "
        .. "demo DEMO_SECONDS=3"):format(quote(ROOT), CLEAN_ENV))
      local out = table.concat(lines, "\n")
      assert.equals(0, status, out)
      local pid, url = out:match("demo: fake API server %(pid (%d+)%) at (http://127%.0%.0%.1:%d+)")
      assert.truthy(pid, out)
      assert.truthy(find(lines, "^watching pods in all namespaces at " .. esc(url) .. "$"), out)
      assert.is_true(count(lines, "^%d%d:%d%d:%d%d  added   .*%(initial list%)$") >= 10, out)
      assert.is_true(count(lines, "^%d%d:%d%d:%d%d  summary  %d+ pods in 3 namespaces") >= 1, out)
      assert.truthy(find(lines, "^%d%d:%d%d:%d%d  summary  shop%s+%d+ pods"), out)
      assert.truthy(find(lines, "^stopped %(timeout%): %d+ adds, %d+ updates, %d+ deletes seen$"),
        out)
      assert.equals("demo: fake API server (pid " .. pid .. ") stopped", lines[#lines])
      -- nothing left behind: the server is gone and its port closed
      assert.is_false(alive(pid))
      local port = tonumber(url:match(":(%d+)$"))
      assert.is_nil((socket.connect("127.0.0.1", port)))
      local p = io.popen("pgrep -f 'tools/fake-apiserver/server.py' | grep -x " .. pid)
      assert.equals("", p:read("a"))
      p:close()
      assert.is_true(socket.gettime() - t0 < 30, "make demo took too long")
    end)

    it("watches the cluster of KUBECONFIG instead when it is set", function()
      local srv = fake.start{ args = { "--sample-cluster" }, quiet = true }
      local kubeconfig = fake.kubeconfig(srv)
      finally(function()
        srv:stop()
        os.remove(kubeconfig)
      end)
      local client, err = require("kinformer").client{ kubeconfig = kubeconfig }
      if not client and tostring(err):find("not implemented", 1, true) then
        pending("kinformer.client() does not read kubeconfig files yet")
        return
      end
      local lines, status = run_lines(("cd %s && %s KUBECONFIG=%s timeout -k 5 60 make "
        .. "--no-print-directory demo DEMO_SECONDS=1"):format(quote(ROOT), CLEAN_ENV,
        quote(kubeconfig)))
      local out = table.concat(lines, "\n")
      assert.equals(0, status, out)
      assert.truthy(find(lines, "^demo: KUBECONFIG is set"), out)
      assert.is_nil(find(lines, "^demo: fake API server"), out)
      assert.truthy(find(lines, "^watching pods in all namespaces at " .. esc(srv.url) .. "$"), out)
      assert.equals(11, count(lines, "^%d%d:%d%d:%d%d  added   .*%(initial list%)$"), out)
    end)
  end)
end)
