-- Clients against the fake API server over HTTPS, with every way of authenticating: bearer token
-- (static, file, rotated), basic auth, client certificates (files, data, from an exec plugin),
-- exec plugins (expiry, re-run on 401, errors), a wrong CA, tls_server_name, in-cluster
-- configuration, and a grep of everything a user can see for the secrets involved.
-- Certificates are made at test time with `openssl` (spec/support/certs.lua).
local kinformer = require "kinformer"
local config = require "kinformer.config"
local cjson = require "cjson"
local socket = require "socket"
local fake = require "support.fake_apiserver"
local certs = require "support.certs"

local quote, sh = certs.quote, certs.sh
local LUA = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
local BUILD = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"

local TOKEN = "tls-spec-token-7f3a9c2e"
local PASSWORD = "tls-spec-pass-51d2b8"

local function write(path, text, mode)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  if mode then assert(os.execute("chmod " .. mode .. " " .. quote(path))) end
  return path
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

local function wait_for(seconds, cond)
  local deadline = socket.gettime() + seconds
  repeat
    if cond() then return true end
    socket.sleep(0.02)
  until socket.gettime() > deadline
  return cond()
end

-- A reflector on the client's namespace ("shop" in these kubeconfigs), fast backoff, short
-- watches (so that new requests, and so new credentials, happen every second or two).
local function start(client, extra)
  local store = kinformer.store()
  local fifo = kinformer.delta_fifo{ known_objects = store }
  local opts = { resource = "pods", namespace = client.namespace, fifo = fifo,
                 backoff_initial = 0.05, backoff_max = 0.2, watch_timeout = 1 }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local r = assert(client:reflector(opts))
  assert(r:start())
  return r, fifo
end

-- Starts a reflector and waits for its first list; returns the reflector's status and the number
-- of pods listed. The reflector is stopped.
local function list_pods(client, seconds)
  local r, fifo = start(client)
  wait_for(seconds or 3, function() local st = r:status() return st.listed or st.errors > 0 end)
  local st = r:status()
  r:stop()
  local n = 0
  while fifo:pop(nil, 0) do n = n + 1 end
  return st, n
end

-- A YAML double-quoted string (not cjson.encode: YAML 1.1 readers such as kubectl's reject
-- the "\/" it writes).
local function q(s) return '"' .. s:gsub('[\\"]', "\\%0") .. '"' end

describe("client configuration end to end", function()
  local c, srv

  setup(function()
    c = certs.make()
    srv = fake.start{ quiet = true, args = {
      "--sample-cluster", "--tls-cert", c.server, "--tls-key", c.server_key, "--client-ca", c.ca,
      "--token", TOKEN, "--basic-auth", "alice:" .. PASSWORD } }
  end)
  teardown(function()
    if srv then srv:stop() end
    if c then c:remove() end
  end)

  local function auths_since(n)
    local out = {}
    for i, r in ipairs(srv:requests()) do
      if i > n then out[#out + 1] = r.auth .. (r.user ~= "" and (":" .. r.user) or "") end
    end
    return out
  end

  local function kubeconfig(name, cluster, user, extra_users)
    return write(c.dir .. "/" .. name, ([[
apiVersion: v1
kind: Config
current-context: test
clusters:
- name: fake
  cluster:
    server: %s
%s
contexts:
- name: test
  context: {cluster: fake, user: me, namespace: shop}
users:
- name: me
  user:
%s
%s]]):format(q(srv.url), cluster, user, extra_users or ""))
  end

  it("bearer token from a kubeconfig, CA file relative to its folder", function()
    local kc = kubeconfig("token.yaml", "    certificate-authority: ca.pem", "    token: " .. q(TOKEN))
    local client = assert(kinformer.client{ kubeconfig = kc })
    assert.equal("shop", client.namespace)
    assert.equal("test", client.context)
    assert.equal(srv.url, client.server)
    local n0 = #srv:requests()
    local st, n = list_pods(client)
    assert.is_true(st.listed, st.last_error)
    assert.equal(7, n)
    assert.equal("bearer", auths_since(n0)[1])
  end)

  it("client certificate and key as kubeconfig data, and kubectl accepts the same file", function()
    local b64 = config.base64_encode
    local kc = kubeconfig("cert.yaml", "    certificate-authority-data: " .. b64(c:read("ca.pem")),
      "    client-certificate-data: " .. b64(c:read("client.pem")) .. "\n"
      .. "    client-key-data: " .. b64(c:read("client.key")))
    local client = assert(kinformer.client{ kubeconfig = kc })
    local n0 = #srv:requests()
    local st, n = list_pods(client)
    assert.is_true(st.listed, st.last_error)
    assert.equal(7, n)
    assert.equal("x509:tester", auths_since(n0)[1])
    local ok, out = sh("KUBECACHEDIR=" .. quote(c.dir .. "/kcache") .. " kubectl --kubeconfig "
      .. quote(kc) .. " get pods -o name")
    assert.is_true(ok, out)
    local lines = select(2, out:gsub("\n", ""))
    assert.equal(7, lines)
  end)

  it("client certificate files and basic auth as explicit options", function()
    local n0 = #srv:requests()
    local st = list_pods(assert(kinformer.client{ server = srv.url, ca_file = c.ca,
      client_cert_file = c.client, client_key_file = c.client_key, namespace = "shop" }))
    assert.is_true(st.listed, st.last_error)
    st = list_pods(assert(kinformer.client{ server = srv.url, ca_file = c.ca, username = "alice",
                                            password = PASSWORD, namespace = "shop" }))
    assert.is_true(st.listed, st.last_error)
    local a = auths_since(n0)
    assert.equal("x509:tester", a[1])
    assert.equal("basic:alice", a[#a])
    -- a wrong password is a 401 like any other
    st = list_pods(assert(kinformer.client{ server = srv.url, ca_file = c.ca, username = "alice",
                                            password = "wrong", namespace = "shop" }))
    assert.is_false(st.listed)
    assert.equal(401, st.last_error_code)
  end)

  it("refuses a server whose certificate the CA did not sign, naming the host; insecure only by name", function()
    local st = list_pods(assert(kinformer.client{ server = srv.url, ca_file = c.other_ca, token = TOKEN,
                                                  namespace = "shop" }), 0.5)
    assert.is_false(st.listed)
    assert.equal(0, st.last_error_code)
    assert.matches("TLS certificate verification failed for 127%.0%.0%.1: SSL certificate problem", st.last_error)
    -- the system's CAs do not know the test CA either
    st = list_pods(assert(kinformer.client{ server = srv.url, token = TOKEN, namespace = "shop" }), 0.5)
    assert.is_false(st.listed)
    assert.matches("verification failed for 127%.0%.0%.1", st.last_error)
    st = list_pods(assert(kinformer.client{ server = srv.url, token = TOKEN, namespace = "shop",
                                            insecure_skip_tls_verify = true }))
    assert.is_true(st.listed, st.last_error)
  end)

  it("honours tls_server_name: the name verified and sent, while connecting to the URL's host", function()
    local named = fake.start{ quiet = true, args = { "--sample-cluster", "--tls-cert", c.named,
                                                     "--tls-key", c.named_key, "--token", TOKEN } }
    finally(function() named:stop() end)
    local st = list_pods(assert(kinformer.client{ server = named.url, ca_file = c.ca, token = TOKEN,
                                                  namespace = "shop" }), 0.5)
    assert.is_false(st.listed)
    assert.matches("verification failed for 127%.0%.0%.1: .*127%.0%.0%.1", st.last_error)
    st = list_pods(assert(kinformer.client{ server = named.url, ca_file = c.ca, token = TOKEN,
                                            namespace = "shop", tls_server_name = "kube.test" }))
    assert.is_true(st.listed, st.last_error)
    -- from a kubeconfig too
    local kc = write(c.dir .. "/named.yaml", ([[
current-context: t
clusters: [{name: k, cluster: {server: %s, certificate-authority: ca.pem, tls-server-name: kube.test}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: t, context: {cluster: k, user: u}}]
]]):format(q(named.url), q(TOKEN)))
    st = list_pods(assert(kinformer.client{ kubeconfig = kc, namespace = "shop" }))
    assert.is_true(st.listed, st.last_error)
  end)

  it("goes through a proxy-url proxy with its credentials, which no message shows", function()
    local log = c.dir .. "/proxy.log"
    local pw = "proxy-pass-93ab"
    local proc = assert(io.popen("exec python3 " .. quote(KINFORMER_ROOT .. "/spec/support/connect_proxy.py")
      .. " bob:" .. pw .. " > " .. quote(log), "w"))
    finally(function() proc:close() end) -- closes its stdin: it exits
    assert.is_true(wait_for(3, function() return (read(log) or ""):match("^%d+\n") ~= nil end))
    local port = read(log):match("^(%d+)")
    local function via(url, extra)
      local kc = write(c.dir .. "/proxy.yaml", ([[
current-context: t
clusters: [{name: k, cluster: {server: %s, certificate-authority: ca.pem, proxy-url: %s%s}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: t, context: {cluster: k, user: u, namespace: shop}}]
]]):format(q(srv.url), q(url), extra or "", q(TOKEN)))
      return list_pods(assert(kinformer.client{ kubeconfig = kc }))
    end
    local st = via("http://bob:" .. pw .. "@127.0.0.1:" .. port)
    assert.is_true(st.listed, st.last_error)
    assert.matches("CONNECT 127%.0%.0%.1:" .. srv.port, read(log))
    -- with tls-server-name the tunnel still goes to the configured host
    st = via("http://bob:" .. pw .. "@127.0.0.1:" .. port, ", tls-server-name: localhost")
    assert.is_true(st.listed, st.last_error)
    assert.is_nil(read(log):match("CONNECT localhost"))
    st = via("http://bob:wrong-" .. pw .. "@127.0.0.1:" .. port)
    assert.is_false(st.listed)
    assert.matches("407", st.last_error)
    assert.is_nil(st.last_error:find(pw, 1, true))
  end)

  describe("refreshed credentials", function()
    local n0
    before_each(function() n0 = #srv:requests() end)
    after_each(function() srv:control("POST", "/_fake/auth", { tokens = { TOKEN } }) end)

    it("re-reads a token file when it changes (rotation without a 401)", function()
      local file = write(c.dir .. "/token", "file-token-1\n")
      srv:control("POST", "/_fake/auth", { tokens = { "file-token-1" } })
      local client = assert(kinformer.client{ server = srv.url, ca_file = c.ca, token_file = file,
                                              namespace = "shop" })
      local r = start(client)
      finally(function() r:stop() end)
      assert.is_true(wait_for(3, function() return r:status().listed end), r:status().last_error)
      -- rotate: the file and the server change together, the reflector keeps its watch open
      write(file, "file-token-2-rotated\n")
      srv:control("POST", "/_fake/auth", { tokens = { "file-token-2-rotated" } })
      local n1 = #srv:requests()
      assert.is_true(wait_for(4, function() return #auths_since(n1) >= 1 end))
      local a = auths_since(n1)
      for _, x in ipairs(a) do assert.equal("bearer", x) end -- the new token from the start
      assert.equal(0, r:status().errors)
    end)

    local function plugin(name)
      -- Counts its runs in $STATE; token $PREFIX-N valid for $TTL seconds; keeps the
      -- KUBERNETES_EXEC_INFO it got.
      return write(c.dir .. "/" .. name, [[
#!/bin/sh
n=$(( $(cat "$STATE" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$STATE"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$STATE.info"
exp=$(date -u -d "@$(( $(date +%s) + TTL ))" +%Y-%m-%dT%H:%M:%SZ)
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s-%s","expirationTimestamp":"%s"}}\n' "$PREFIX" "$n" "$exp"
]], "700")
    end

    local function exec_kubeconfig(name, prefix, ttl)
      plugin("exec-token.sh")
      local state = c.dir .. "/" .. name .. ".state"
      os.remove(state)
      local kc = kubeconfig(name .. ".yaml", "    certificate-authority: ca.pem",
        "    exec:\n"
        .. "      apiVersion: client.authentication.k8s.io/v1\n"
        .. "      command: ./exec-token.sh\n"
        .. "      interactiveMode: Never\n"
        .. "      provideClusterInfo: true\n"
        .. "      env: [{name: STATE, value: " .. q(state) .. "}, {name: PREFIX, value: " .. prefix
        .. "}, {name: TTL, value: " .. q(tostring(ttl)) .. "}]")
      return kc, function() return tonumber(read(state) or "0") end, state
    end

    it("runs an exec plugin again when its token expires", function()
      local kc, runs, state = exec_kubeconfig("expiring", "exp", 1)
      local accepted = {}
      for i = 1, 30 do accepted[i] = "exp-" .. i end
      srv:control("POST", "/_fake/auth", { tokens = accepted })
      local client = assert(kinformer.client{ kubeconfig = kc })
      assert.equal(0, runs()) -- nothing runs before the first request
      local r = start(client)
      finally(function() r:stop() end)
      assert.is_true(wait_for(3, function() return r:status().listed end), r:status().last_error)
      assert.is_true(wait_for(5, function() return runs() >= 2 and r:status().watches >= 2 end))
      -- each new token came from expiry, not from a rejection
      for _, x in ipairs(auths_since(n0)) do assert.equal("bearer", x) end
      local info = cjson.decode(read(state .. ".info"))
      assert.same({ apiVersion = "client.authentication.k8s.io/v1", kind = "ExecCredential",
                    spec = { interactive = false, cluster = { server = srv.url,
                      ["certificate-authority-data"] = config.base64_encode(c:read("ca.pem")) } } }, info)
    end)

    it("runs an exec plugin again after a 401 and recovers", function()
      local kc, runs = exec_kubeconfig("revoked", "rev", 3600)
      srv:control("POST", "/_fake/auth", { tokens = { "rev-1" } })
      local client = assert(kinformer.client{ kubeconfig = kc })
      local r = start(client)
      finally(function() r:stop() end)
      assert.is_true(wait_for(3, function() return r:status().listed end), r:status().last_error)
      -- a new watch with the cached token: still one run
      assert.is_true(wait_for(3, function() return r:status().watches >= 2 end))
      assert.equal(1, runs())
      srv:control("POST", "/_fake/auth", { tokens = { "rev-2" } }) -- rev-1 revoked
      local n1 = #srv:requests()
      assert.is_true(wait_for(5, function()
        local a = auths_since(n1)
        return #a >= 2 and a[#a] == "bearer" and r:status().phase == "watching"
      end))
      local a = auths_since(n1)
      assert.equal("none", a[1]) -- the 401 ...
      assert.equal(2, runs())    -- ... made exactly one new run
      local st = r:status()
      assert.equal(401, st.last_error_code)
      assert.matches("401 Unauthorized", st.last_error)
      assert.is_true(st.lists >= 2) -- a watch error relists, client-go's rule
    end)

    it("uses a client certificate an exec plugin returns", function()
      write(c.dir .. "/exec-cert.py", ([[
#!/usr/bin/env python3
import json
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                  "status": {"clientCertificateData": open(%q).read(), "clientKeyData": open(%q).read()}}))
]]):format(c.client, c.client_key), "700")
      local client = assert(kinformer.client{ server = srv.url, ca_file = c.ca, namespace = "shop",
        exec = { command = c.dir .. "/exec-cert.py", api_version = config.EXEC_API_V1BETA1 } })
      local st = list_pods(client)
      assert.is_true(st.listed, st.last_error)
      assert.equal("x509:tester", auths_since(n0)[1])
    end)

    it("reports an exec plugin that is missing or fails, with its stderr minus secrets", function()
      local kc = kubeconfig("noexec.yaml", "    certificate-authority: ca.pem", [[
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: kinformer-spec-no-such-plugin
      installHint: ask the platform team]])
      local st = list_pods(assert(kinformer.client{ kubeconfig = kc }), 0.3)
      assert.is_false(st.listed)
      assert.matches('^exec plugin: executable "kinformer%-spec%-no%-such%-plugin" not found.*; ask the platform team$',
                     st.last_error)
      write(c.dir .. "/failing.sh", [[
#!/bin/sh
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$LEAK"
echo "cannot refresh: token $LEAK was revoked" >&2
exit 3
]], "700")
      local client = assert(kinformer.client{ server = srv.url, ca_file = c.ca, namespace = "shop",
        exec = { command = c.dir .. "/failing.sh", env = { LEAK = "leaked-token-0123" } } })
      st = list_pods(client, 0.3)
      assert.is_false(st.listed)
      assert.equal('exec plugin "' .. c.dir .. '/failing.sh" failed with exit code 3: cannot refresh: '
        .. 'token [redacted] was revoked', st.last_error)
    end)
  end)

  it("in-cluster configuration from a service-account folder", function()
    local sa = c.dir .. "/serviceaccount"
    assert(os.execute("mkdir -p " .. quote(sa)))
    write(sa .. "/token", TOKEN .. "\n")
    write(sa .. "/ca.crt", c:read("ca.pem"))
    write(sa .. "/namespace", "shop\n")
    local prog = ([[
      package.path = %q .. package.path
      package.cpath = %q .. package.cpath
      local kinformer = require "kinformer"
      local socket = require "socket"
      local client = assert(kinformer.client{ service_account_dir = %q })
      local fifo = kinformer.delta_fifo{ known_objects = kinformer.store() }
      local r = assert(client:reflector{ resource = "pods", namespace = client.namespace, fifo = fifo })
      assert(r:start())
      local deadline = socket.gettime() + 3
      while not r:status().listed and socket.gettime() < deadline do socket.sleep(0.02) end
      local n = 0
      while fifo:pop(nil, 0) do n = n + 1 end
      io.write(client.source, " ", client.namespace, " ", client.server, " ", n, " ", tostring(r:status().last_error))
      r:stop()
    ]]):format(KINFORMER_ROOT .. "/lua/?.lua;" .. KINFORMER_ROOT .. "/lua/?/init.lua;",
               KINFORMER_ROOT .. "/build/" .. BUILD .. "/?.so;", sa)
    local ok, out = sh("env -i PATH=" .. quote(os.getenv("PATH")) .. " HOME=" .. quote(c.dir)
      .. " KUBERNETES_SERVICE_HOST=127.0.0.1 KUBERNETES_SERVICE_PORT=" .. srv.port .. " "
      .. LUA .. " -e " .. quote(prog))
    assert.is_true(ok, out)
    assert.equal("in-cluster shop https://127.0.0.1:" .. srv.port .. " 7 nil", out)
  end)

  it("never shows a secret: all output of failing and succeeding runs, grepped", function()
    write(c.dir .. "/probe-token", TOKEN .. "\n")
    local plugin_ok = write(c.dir .. "/probe-ok.sh", [[
#!/bin/sh
echo "debug: using $SECRET_OUT" >&2
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$SECRET_OUT"
]], "700")
    local plugin_fail = write(c.dir .. "/probe-fail.sh", [[
#!/bin/sh
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$SECRET_OUT"
echo "error: token $SECRET_OUT rejected; Authorization: Bearer $SECRET_OUT" >&2
exit 1
]], "700")
    local args = cjson.encode{ url = srv.url, ca = c.ca, other_ca = c.other_ca, cert = c.client,
      key = c.client_key, key_data = c:read("client.key"), token = TOKEN, password = PASSWORD,
      token_file = c.dir .. "/probe-token", plugin_ok = plugin_ok, plugin_fail = plugin_fail,
      root = KINFORMER_ROOT, build = BUILD }
    local ok, out = sh(LUA .. " " .. quote(KINFORMER_ROOT .. "/spec/support/secret_probe.lua") .. " "
      .. quote(args))
    assert.is_true(ok, out)
    -- the runs happened, failing and succeeding as meant
    assert.matches("== done", out)
    assert.matches("401 Unauthorized", out)
    assert.matches("TLS certificate verification failed for 127%.0%.0%.1", out)
    assert.matches("client key data: no PEM private key in it", out)
    assert.matches("No such file or directory", out)
    assert.matches("Couldn't connect to server", out) -- the proxy
    assert.matches("failed with exit code 1: error: token %[redacted%] rejected; Authorization: Bearer %[redacted%]", out)
    local listed = select(2, out:gsub("status%.listed=true", ""))
    assert.equal(5, listed)
    -- and no secret anywhere
    local secrets = { TOKEN, PASSWORD }
    for line in c:read("client.key"):gmatch("[^\n]+") do
      if not line:match("^%-%-%-%-%-") then secrets[#secrets + 1] = line end
    end
    for _, s in ipairs(secrets) do
      assert.is_nil(out:find(s, 1, true), "secret found in the output: " .. s:sub(1, 6) .. "...")
    end
  end)
end)
