-- Where a client's connection comes from (lua/kinformer/config.lua): explicit options,
-- kubeconfig files (fields, relative paths, client-go's merge rules, errors), $KUBECONFIG,
-- ~/.kube/config and in-cluster configuration. No server here: spec/tls_spec.lua connects.
local kinformer = require "kinformer"
local config = require "kinformer.config"
local cjson = require "cjson"

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local function b64(s) return config.base64_encode(s) end

local CA = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"

-- Runs a Lua snippet in a fresh interpreter with exactly the given environment (plus PATH),
-- so $KUBECONFIG, $HOME and the in-cluster variables are under the spec's control. The snippet
-- sees `config` and `kinformer`; what it returns is JSON-encoded back.
local LUA = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
-- Runs snippet in a child Lua with exactly env; a child still running after `timeout` seconds
-- (default 60) is killed, so a hang fails the spec instead of stopping it.
local function run_with_env(env, snippet, timeout)
  local root = KINFORMER_ROOT
  local build = _VERSION == "Lua 5.4" and "lua5.4" or "luajit"
  local prog = ([[
    package.path = %q .. package.path
    package.cpath = %q .. package.cpath
    local config = require "kinformer.config"
    local kinformer = require "kinformer"
    local cjson = require "cjson"
    local ok, a, b = pcall(function() %s end)
    io.write(cjson.encode({ ok = ok, a = a == nil and cjson.null or a, b = b == nil and cjson.null or b }))
  ]]):format(root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;", root .. "/build/" .. build .. "/?.so;", snippet)
  local words = { "timeout", "-s", "KILL", tostring(timeout or 60), "env", "-i",
                  "PATH=" .. os.getenv("PATH") }
  for k, v in pairs(env) do words[#words + 1] = quote(k .. "=" .. v) end
  words[#words + 1] = LUA
  words[#words + 1] = "-e"
  words[#words + 1] = quote(prog)
  local p = io.popen(table.concat(words, " ") .. " 2>&1")
  local out = p:read("a")
  p:close()
  local ok, res = pcall(cjson.decode, out)
  assert(ok, "child said: " .. out)
  return res
end

describe("kinformer.config", function()
  local dir

  before_each(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir " .. quote(dir)))
  end)
  after_each(function()
    os.execute("rm -rf " .. quote(dir))
  end)

  describe("explicit options", function()
    it("are taken as they are, with the default namespace", function()
      local o = assert(config.load{ server = "https://10.0.0.1:6443", token = "t0ken-xyz",
                                    ca_file = "/ca.pem", connect_timeout = 3 })
      assert.same({ server = "https://10.0.0.1:6443", token = "t0ken-xyz", ca_file = "/ca.pem",
                    connect_timeout = 3, namespace = "default", source = "options" }, o)
      o = assert(config.load{ server = "http://127.0.0.1:8001", namespace = "shop" })
      assert.equal("shop", o.namespace)
    end)

    it("turn an exec option into argv, env and KUBERNETES_EXEC_INFO", function()
      local o = assert(config.load{ server = "https://k:6443", ca_data = CA, exec = {
        command = "get-token", args = { "--cluster", "c1" }, env = { B = "2", A = "1" },
        provide_cluster_info = true, install_hint = "apt install get-token" } })
      assert.equal("get-token", o.exec.command)
      assert.same({ "--cluster", "c1" }, o.exec.args)
      assert.equal(config.EXEC_API_V1, o.exec.api_version)
      assert.equal("apt install get-token", o.exec.install_hint)
      assert.same({ "A=1", "B=2" }, { o.exec.env[1], o.exec.env[2] })
      local info = cjson.decode(o.exec.env[3]:match("^KUBERNETES_EXEC_INFO=(.*)$"))
      assert.same({ apiVersion = config.EXEC_API_V1, kind = "ExecCredential",
                    spec = { interactive = false, cluster = {
                      server = "https://k:6443", ["certificate-authority-data"] = b64(CA) } } }, info)
    end)

    it("raise for misuse, naming the option", function()
      local function err(opts)
        local ok, e = pcall(kinformer.client, opts)
        assert.is_false(ok)
        return e
      end
      assert.matches("unknown option 'tokn'", err{ server = "http://x", tokn = "a" })
      assert.matches("option 'token' must be a string, got number", err{ server = "http://x", token = 1 })
      assert.matches("option 'token' needs 'server'", err{ token = "abc" })
      assert.matches("option 'exec' needs 'server'", err{ exec = { command = "x" } })
      assert.matches("option 'server' excludes 'kubeconfig'", err{ server = "http://x", kubeconfig = "/k" })
      assert.matches("exec option 'command' is required", err{ server = "http://x", exec = {} })
      assert.matches("unknown exec option 'cmd'", err{ server = "http://x", exec = { cmd = "a" } })
      assert.matches("exec option 'api_version' must be", err{ server = "http://x",
        exec = { command = "a", api_version = "client.authentication.k8s.io/v1alpha1" } })
      assert.matches("table expected, got string", err("https://x"))
      assert.matches("server must be an http:// or https:// URL", err{ server = "ftp://x" })
      assert.matches("only one of token, token_file, username/password and exec",
                     err{ server = "http://x", token = "abcd", username = "u" })
      -- the error points at the caller's line
      assert.matches("config_spec.lua:%d+:", select(2, pcall(function() kinformer.client{ nope = 1 } end)))
    end)
  end)

  describe("a kubeconfig", function()
    it("gives the current context's cluster, user and namespace, paths relative to its folder", function()
      local kc = write(dir .. "/config", ([[
apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster:
    server: https://dev.example:6443
    certificate-authority: certs/ca.pem
    tls-server-name: kubernetes.default.svc
    proxy-url: http://proxy.example:3128
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: shop}
- name: other
  context: {cluster: dev-cluster, user: dev-user}
users:
- name: dev-user
  user:
    client-certificate: certs/client.pem
    client-key: /abs/client.key
    tokenFile: token
preferences: {}
]]))
      local o = assert(config.load{ kubeconfig = kc })
      assert.same({
        server = "https://dev.example:6443", ca_file = dir .. "/certs/ca.pem",
        tls_server_name = "kubernetes.default.svc", proxy = "http://proxy.example:3128",
        client_cert_file = dir .. "/certs/client.pem", client_key_file = "/abs/client.key",
        token_file = dir .. "/token", namespace = "shop", context = "dev",
        source = "kubeconfig " .. kc,
      }, o)
      o = assert(config.load{ kubeconfig = kc, context = "other", namespace = "ops" })
      assert.equal("ops", o.namespace) -- the option wins over the context's
      o = assert(config.load{ kubeconfig = kc, context = "other" })
      assert.equal("default", o.namespace)
    end)

    it("decodes *-data fields, which win over files; a token wins over tokenFile and exec", function()
      local kc = write(dir .. "/config", ([[
current-context: c
clusters:
- name: k
  cluster: {server: "10.1.2.3:6443", certificate-authority: /nope.pem, certificate-authority-data: %s}
contexts:
- {name: c, context: {cluster: k, user: u}}
users:
- name: u
  user:
    client-certificate: /nope.crt
    client-certificate-data: %s
    client-key-data: %s
    token: "0x1f"
    tokenFile: /nope.token
    exec: {apiVersion: client.authentication.k8s.io/v1, command: never-run}
]]):format(b64(CA), b64("CERT"), b64("KEY\n")))
      local o = assert(config.load{ kubeconfig = kc })
      assert.equal("https://10.1.2.3:6443", o.server) -- no scheme: https
      assert.equal(CA, o.ca_data)
      assert.is_nil(o.ca_file)
      assert.equal("CERT", o.client_cert_data)
      assert.is_nil(o.client_cert_file)
      assert.equal("KEY\n", o.client_key_data)
      assert.equal("0x1f", o.token) -- a string, not the number 31
      assert.is_nil(o.token_file)
      assert.is_nil(o.exec)
    end)

    it("passes exec plugins on with env, KUBERNETES_EXEC_INFO and a command resolved like client-go", function()
      local kc = write(dir .. "/config", [[
current-context: c
clusters:
- name: k
  cluster:
    server: https://k.example
    insecure-skip-tls-verify: true
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: {audience: kinformer}
contexts:
- {name: c, context: {cluster: k, user: u}}
- {name: d, context: {cluster: k, user: v}}
users:
- name: u
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: ./bin/get-token
      args: [token, --verbose, true]
      env: [{name: REGION, value: eu-1}, {name: EMPTY}]
      installHint: see the wiki
      provideClusterInfo: true
      interactiveMode: IfAvailable
- name: v
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws, interactiveMode: Never}
]])
      local o = assert(config.load{ kubeconfig = kc })
      assert.is_true(o.insecure_skip_tls_verify)
      local x = o.exec
      assert.equal(dir .. "/./bin/get-token", x.command)
      assert.same({ "token", "--verbose", "true" }, x.args)
      assert.equal("see the wiki", x.install_hint)
      assert.equal(config.EXEC_API_V1BETA1, x.api_version)
      assert.same({ "REGION=eu-1", "EMPTY=" }, { x.env[1], x.env[2] })
      local info = cjson.decode(x.env[3]:match("^KUBERNETES_EXEC_INFO=(.*)$"))
      assert.same({ apiVersion = config.EXEC_API_V1BETA1, kind = "ExecCredential", spec = {
        interactive = false, cluster = { server = "https://k.example", ["insecure-skip-tls-verify"] = true,
                                         config = { audience = "kinformer" } } } }, info)
      o = assert(config.load{ kubeconfig = kc, context = "d" })
      assert.equal("aws", o.exec.command) -- no slash: looked up in PATH
      assert.equal(1, #o.exec.env)
    end)

    it("reports what is wrong, clearly and without secrets", function()
      local function load_text(text, opts)
        local kc = write(dir .. "/config", text)
        if type(opts) ~= "table" then opts = {} end -- (a gsub count lands here too)
        opts.kubeconfig = kc
        local o, err = config.load(opts)
        assert.is_nil(o)
        assert.is_string(err)
        assert.is_nil(err:find("s3cr3t", 1, true), err)
        return (err:gsub(dir, "DIR"))
      end
      local base = [[
current-context: c
clusters: [{name: k, cluster: {server: "https://k"}}]
users: [{name: u, user: {token: s3cr3t}}]
contexts: [{name: c, context: {cluster: k, user: u}}, {name: nok, context: {cluster: gone, user: u}},
           {name: nou, context: {cluster: k, user: gone}}, {name: nocl, context: {user: u}}]
]]
      assert.equal('context "x" not found in kubeconfig DIR/config (contexts: "c", "noc'
        .. 'l", "nok", "nou")', load_text(base, { context = "x" }))
      assert.equal('context "nok" refers to cluster "gone", which is not defined in kubeconfig DIR/config',
                   load_text(base, { context = "nok" }))
      assert.equal('context "nou" refers to user "gone", which is not defined in kubeconfig DIR/config',
                   load_text(base, { context = "nou" }))
      assert.equal('kubeconfig DIR/config: context "nocl" has no cluster', load_text(base, { context = "nocl" }))
      assert.equal("kubeconfig DIR/config: YAML syntax error at line 3, column 7: mapping values "
        .. "are not allowed in this context", load_text("clusters:\n- name: a\n   bad: s3cr3t\nusers: []\n"))
      assert.equal("kubeconfig DIR/config: YAML syntax error at line 2, column 1: found character "
        .. "that cannot start any token", load_text("users: []\n\ttoken: s3cr3t\n"))
      assert.equal("kubeconfig DIR/config: YAML syntax error at line 4, column 6: did not find "
        .. "expected ',' or '}'", load_text("contexts:\n- name: x\n  context: {cluster: k, user: u\nusers: []\n"))
      assert.equal("kubeconfig DIR/config: not a kubeconfig (the top level must be a mapping)",
                   load_text("- s3cr3t\n"))
      assert.equal('kubeconfig DIR/config: duplicate user name "u"',
                   load_text("users: [{name: u, user: {}}, {name: u, user: {token: s3cr3t}}]\n"))
      assert.equal("kubeconfig DIR/config: clusters[1] has no name", load_text("clusters: [{cluster: {}}]\n"))
      assert.equal('kubeconfig DIR/config: user "u": client-key-data is not valid base64', load_text(base:gsub("token: s3cr3t",
        "client-certificate-data: " .. b64("c") .. ", client-key-data: s3cr3t!!")))
      assert.equal('kubeconfig DIR/config: user "u": client-certificate without client-key', load_text(base:gsub("token: s3cr3t",
        "client-certificate: /c.pem")))
      assert.equal('kubeconfig DIR/config: user "u": username/password and a bearer token cannot both be set',
                   load_text(base:gsub("token: s3cr3t", "token: s3cr3t, username: a, password: s3cr3t")))
      assert.equal('kubeconfig DIR/config: user "u": auth-provider "oidc" is not supported (use an exec credential plugin)',
                   load_text(base:gsub("token: s3cr3t", "auth-provider: {name: oidc, config: {id-token: s3cr3t}}")))
      assert.equal('kubeconfig DIR/config: user "u": as-groups must be a list of strings', load_text(base:gsub("token: s3cr3t",
        "token: s3cr3t, as: admin, as-groups: admins")))
      assert.equal('kubeconfig DIR/config: user "u": as-user-extra must map names to lists of strings',
                   load_text(base:gsub("token: s3cr3t", "token: s3cr3t, as: admin, as-user-extra: {scopes: view}")))
      assert.equal('kubeconfig DIR/config, context c: impersonating a uid, groups or extra needs impersonate_user',
                   (select(2, kinformer.client{ kubeconfig = write(dir .. "/config", base:gsub("token: s3cr3t",
                     "token: s3cr3t, as-groups: [admins]")) }):gsub(dir, "DIR")))
      assert.equal('kubeconfig DIR/config: user "u": exec interactiveMode Always is not supported (kinformer runs plugins '
        .. 'without a terminal)', load_text(base:gsub("token: s3cr3t",
        "exec: {apiVersion: client.authentication.k8s.io/v1, command: x, interactiveMode: Always}")))
      assert.equal('kubeconfig DIR/config: user "u": exec apiVersion "client.authentication.k8s.io/v1alpha1" is not supported '
        .. '(use client.authentication.k8s.io/v1 or client.authentication.k8s.io/v1beta1)',
        load_text(base:gsub("token: s3cr3t", "exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: x}")))
      assert.equal('kubeconfig DIR/config: cluster "k" has no server', load_text(base:gsub('server: "https://k"', 'server: ""')))
      assert.equal('kubeconfig DIR/config: cluster "k": insecure-skip-tls-verify cannot be combined with a certificate '
        .. 'authority (client-go refuses it too)', load_text(base:gsub('server: "https://k"',
        'server: "https://k", insecure-skip-tls-verify: true, certificate-authority: /ca')))
      assert.equal('kubeconfig DIR/config: user "u": token must be a string', load_text(base:gsub("token: s3cr3t", "token: yes")))
      local o, err = config.load{ kubeconfig = dir .. "/missing" }
      assert.is_nil(o)
      assert.equal("kubeconfig " .. dir .. "/missing: No such file or directory", err)
      write(dir .. "/empty", "")
      o, err = config.load{ kubeconfig = dir .. "/empty" }
      assert.is_nil(o)
      assert.equal("kubeconfig " .. dir .. "/empty has no current-context (contexts: none); pass "
        .. "context = NAME", err)
    end)

    -- Found by spec/config_mutation_spec.lua: an alias cycle raised "stack overflow", an alias
    -- bomb ran for minutes, a long or multi-line name made a huge error.
    it("survives YAML aliases, long names and bytes YAML forbids", function()
      local function load_text(text, opts)
        local kc = write(dir .. "/config", text)
        opts = opts or {}
        opts.kubeconfig = kc
        local o, err = config.load(opts)
        return o, err and (err:gsub(dir, "DIR"))
      end
      local base = [[
current-context: c
clusters:
- name: k
  cluster:
    server: https://k
    extensions: [{name: client.authentication.k8s.io/exec, extension: EXT}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: x, provideClusterInfo: true}}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
]]
      -- a cycle: each table is visited once, and the plugin cannot be given it as JSON
      local o, err = load_text("cyc: &a [1, *a]\n" .. base:gsub("EXT", "*a"))
      assert.is_nil(o)
      assert.matches('^kubeconfig DIR/config: user "u": exec provideClusterInfo: the cluster\'s exec '
        .. 'extension is too large %(over 10000 values, counting each use of an alias%)$', err)
      -- a bomb: 4^30 values in 31 lines
      local bomb = "b0: &b0 [x, x]\n"
      for i = 1, 30 do bomb = bomb .. ("b%d: &b%d [*b%d, *b%d, *b%d, *b%d]\n"):format(i, i, i - 1, i - 1, i - 1, i - 1) end
      o, err = load_text(bomb .. base:gsub("EXT", "*b30"))
      assert.is_nil(o)
      assert.matches("too large", err)
      o = assert(load_text(bomb .. base:gsub("EXT", "*b3"))) -- 4^3 * 2 values: fine
      assert.matches('"config":%[%[%[%["x","x"%]', o.exec.env[1])
      -- an unused bomb costs nothing
      assert(load_text(bomb .. base:gsub("EXT", "{}")))
      -- names: escaped and cut at 64 bytes
      o, err = load_text(base, { context = "a\nb" .. ("\u{4e2d}"):rep(40) })
      assert.is_nil(o)
      assert.equal('context "a\\x0ab' .. ("\u{4e2d}"):rep(18) .. '..." not found in kubeconfig DIR/config (contexts: "c")', err)
      -- bytes libyaml refuses without saying where: found
      o, err = load_text("current-context: c\nclusters: []\nusers: [\1]\n")
      assert.equal("kubeconfig DIR/config: YAML syntax error at line 3, byte 9: control characters are not allowed", err)
      o, err = load_text("current-context: c\n# \xc3\xa9 \xc3(\n")
      assert.equal("kubeconfig DIR/config: YAML syntax error at line 2, byte 6: invalid trailing UTF-8 octet", err)
    end)

    it("values the core refuses: from a kubeconfig an error value, as options a raise", function()
      local kc = write(dir .. "/config", [[
current-context: c
clusters: [{name: k, cluster: {server: "http://k", tls-server-name: x}}]
contexts: [{name: c, context: {cluster: k}}]
]])
      local c, err, code = kinformer.client{ kubeconfig = kc }
      assert.is_nil(c)
      assert.equal("kubeconfig " .. kc .. ", context c: tls_server_name needs an https:// server",
        err)
      assert.equal("EINVAL", code)
      local line = debug.getinfo(1, "l").currentline
      local ok, e = pcall(function() kinformer.client{ server = "http://k", tls_server_name = "x" } end)
      assert.is_false(ok)
      assert.matches("^[^:]*config_spec%.lua:" .. (line + 1) .. ": bad argument #1 to 'client' "
        .. "%(tls_server_name needs an https:// server%)$", e)
      line = debug.getinfo(1, "l").currentline
      ok, e = pcall(function() config.load{ kubeconfig = {} } end)
      assert.matches("^[^:]*config_spec%.lua:" .. (line + 1) .. ": bad argument #1 to 'client' "
        .. "%(option 'kubeconfig' must not be empty%)$", e)
      line = debug.getinfo(1, "l").currentline
      ok, e = pcall(function() kinformer.client{ server = "https://k", exec = { args = {} } } end)
      assert.matches("^[^:]*config_spec%.lua:" .. (line + 1) .. ": bad argument #1 to 'client' "
        .. "%(exec option 'command' is required%)$", e)
    end)

    it("errors of the core come back as values naming the kubeconfig, never raised", function()
      local kc = write(dir .. "/config", ([[
current-context: c
clusters: [{name: k, cluster: {server: "https://k", certificate-authority: ca.pem}}]
users: [{name: u, user: {client-certificate: c.pem, client-key: k.pem}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
]]))
      write(dir .. "/ca.pem", CA)
      write(dir .. "/c.pem", CA)
      local c, err = kinformer.client{ kubeconfig = kc }
      assert.is_nil(c)
      assert.equal("kubeconfig " .. kc .. ", context c: client key file " .. dir
        .. "/k.pem: No such file or directory", err)
      write(dir .. "/k.pem", "not a key")
      c, err = kinformer.client{ kubeconfig = kc }
      assert.is_nil(c)
      assert.equal("kubeconfig " .. kc .. ", context c: client key file " .. dir
        .. "/k.pem: no PEM private key in it", err)
      assert(os.execute("mkdir " .. quote(dir .. "/ca2.pem")))
      write(kc, (io.open(kc):read("a"):gsub("ca.pem", "ca2.pem")))
      c, err = kinformer.client{ kubeconfig = kc }
      assert.is_nil(c)
      assert.matches("CA file " .. dir:gsub("%p", "%%%0") .. "/ca2.pem: Is a directory", err)
    end)
  end)

  describe("impersonation", function()
    local kubeconfig_text = [[
current-context: c
clusters: [{name: k, cluster: {server: "http://127.0.0.1:1"}}]
users:
- name: u
  user:
    token: s3cr3t
    as: jane
    as-uid: "1234"
    as-groups: [devs, "system:authenticated"]
    as-user-extra: {scopes: [view, edit], "example.com/team": [blue]}
contexts: [{name: c, context: {cluster: k, user: u}}]
]]

    it("reads as, as-uid, as-groups and as-user-extra from the kubeconfig user", function()
      local o = assert(config.load{ kubeconfig = write(dir .. "/config", kubeconfig_text) })
      assert.equal("jane", o.impersonate_user)
      assert.equal("1234", o.impersonate_uid)
      assert.same({ "devs", "system:authenticated" }, o.impersonate_groups)
      -- flattened to key, value pairs, keys sorted
      assert.same({ "example.com/team", "blue", "scopes", "view", "scopes", "edit" }, o.impersonate_extra)
      assert(kinformer.client{ kubeconfig = dir .. "/config" })
    end)

    it("lets options override the kubeconfig field by field, as kubectl --as does", function()
      local o = assert(config.load{ kubeconfig = write(dir .. "/config", kubeconfig_text),
                                    impersonate_user = "joe", impersonate_extra = { reason = "audit" } })
      assert.equal("joe", o.impersonate_user)
      assert.same({ "devs", "system:authenticated" }, o.impersonate_groups) -- kept
      assert.same({ "reason", "audit" }, o.impersonate_extra)
    end)

    it("takes the same options with a server, and refuses bad ones at the caller's line", function()
      local o = assert(config.load{ server = "http://127.0.0.1:1", impersonate_user = "jane",
                                    impersonate_groups = { "a" }, impersonate_extra = { k = { "1", "2" } } })
      assert.same({ "k", "1", "k", "2" }, o.impersonate_extra)
      assert.has_error(function() kinformer.client{ server = "http://127.0.0.1:1", impersonate_groups = { "g" } } end,
        "bad argument #1 to 'client' (impersonating a uid, groups or extra needs impersonate_user)")
      assert.has_error(function() kinformer.client{ server = "http://127.0.0.1:1", impersonate_user = "a\r\nX-Evil: 1" } end,
        "bad argument #1 to 'client' (impersonate_user must not contain control characters)")
      assert.has_error(function() kinformer.client{ server = "http://127.0.0.1:1", impersonate_user = "a",
                                                    impersonate_groups = "g" } end,
        "bad argument #1 to 'client' (option 'impersonate_groups' must be a table, got string)")
      assert.has_error(function() kinformer.client{ server = "http://127.0.0.1:1", impersonate_user = "a",
                                                    impersonate_groups = { "g", 2 } } end,
        "bad argument #1 to 'client' (option 'impersonate_groups' must be an array of strings)")
      assert.has_error(function() kinformer.client{ server = "http://127.0.0.1:1", impersonate_user = "a",
                                                    impersonate_groups = { "" } } end,
        "bad argument #1 to 'client' (impersonate_groups: group 1 is empty or holds a control character)")
      assert.has_error(function() kinformer.client{ server = "http://127.0.0.1:1", impersonate_user = "a",
                                                    impersonate_extra = { k = { 1 } } } end,
        "bad argument #1 to 'client' (option 'impersonate_extra' must map names to a string or an array of strings)")
    end)
  end)

  describe("several kubeconfig files (client-go's merge rules)", function()
    local a, b
    before_each(function()
      a = write(dir .. "/a", [[
current-context: red
clusters: [{name: shared, cluster: {server: "https://from-a", certificate-authority: ca-a.pem}}]
users: [{name: red-user, user: {token: token-from-a}}]
contexts: [{name: red, context: {cluster: shared, user: red-user, namespace: a-ns}}]
]])
      b = write(dir .. "/b", [[
current-context: blue
clusters:
- {name: shared, cluster: {server: "https://from-b", insecure-skip-tls-verify: true}}
- {name: only-b, cluster: {server: "https://only-b", certificate-authority: ca-b.pem}}
users:
- {name: red-user, user: {token: token-from-b, client-certificate: b.crt, client-key: b.key}}
- {name: blue-user, user: {tokenFile: blue.token}}
contexts:
- {name: red, context: {cluster: only-b, user: blue-user}}
- {name: blue, context: {cluster: only-b, user: red-user}}
]])
    end)

    it("take each named entry whole from the first file that has it, current-context too", function()
      local o = assert(config.load{ kubeconfig = { a, b } })
      assert.same({ server = "https://from-a", ca_file = dir .. "/ca-a.pem", token = "token-from-a",
                    namespace = "a-ns", context = "red", source = "kubeconfig " .. a .. ":" .. b }, o)
      -- a context only the second file defines, using a user the first file wins
      o = assert(config.load{ kubeconfig = { a, b }, context = "blue" })
      assert.same({ server = "https://only-b", ca_file = dir .. "/ca-b.pem", token = "token-from-a",
                    namespace = "default", context = "blue", source = "kubeconfig " .. a .. ":" .. b }, o)
      -- the other order: b wins everything it defines; paths stay relative to their own file
      o = assert(config.load{ kubeconfig = { b, a } })
      assert.equal("blue", o.context)
      assert.equal("token-from-b", o.token) -- red-user from b
      o = assert(config.load{ kubeconfig = { b, a }, context = "red" })
      assert.same({ "https://only-b", dir .. "/blue.token" }, { o.server, o.token_file })
    end)

    it("come from $KUBECONFIG (missing files skipped, duplicates once), else ~/.kube/config", function()
      local res = run_with_env({ KUBECONFIG = dir .. "/missing::" .. b .. ":" .. a .. ":" .. b,
                                 HOME = dir }, [[
        local o, err = config.load()
        return o and (o.source .. " " .. o.context .. " " .. o.server) or err ]])
      assert.is_true(res.ok)
      assert.equal("kubeconfig " .. b .. ":" .. a .. " blue https://only-b", res.a)

      assert(os.execute("mkdir " .. quote(dir .. "/.kube")))
      write(dir .. "/.kube/config", io.open(a):read("a"))
      write(dir .. "/.kube/ca-a.pem", CA) -- kinformer.client checks the files it is given
      res = run_with_env({ HOME = dir }, [[
        local c, err = kinformer.client()
        return c and (c.source .. " " .. c.context .. " " .. c.namespace .. " " .. c.server) or err ]])
      assert.equal("kubeconfig " .. dir .. "/.kube/config red a-ns https://from-a", res.a)
      -- KUBECONFIG set (even to files that do not exist) means ~/.kube/config is not read
      res = run_with_env({ HOME = dir, KUBECONFIG = dir .. "/none" }, [[ return config.load() ]])
      assert.matches("^no configuration found", res.b)
    end)
  end)

  describe("in-cluster configuration", function()
    local sa
    before_each(function()
      sa = dir .. "/sa"
      assert(os.execute("mkdir " .. quote(sa)))
      write(sa .. "/token", "in-cluster-token\n")
      write(sa .. "/ca.crt", CA)
      write(sa .. "/namespace", "team-a\n")
    end)

    it("comes from the service-account folder and KUBERNETES_SERVICE_HOST/PORT", function()
      local env = { HOME = dir, KUBERNETES_SERVICE_HOST = "10.96.0.1", KUBERNETES_SERVICE_PORT = "443" }
      local snippet = ("return config.load{ service_account_dir = %q }"):format(sa)
      local res = run_with_env(env, snippet)
      assert.same({ server = "https://10.96.0.1:443", token_file = sa .. "/token", ca_file = sa .. "/ca.crt",
                    namespace = "team-a", source = "in-cluster" }, res.a)
      -- POD_NAMESPACE wins over the file; IPv6 hosts get brackets
      env.POD_NAMESPACE = "from-env"
      env.KUBERNETES_SERVICE_HOST = "fd00::1"
      res = run_with_env(env, snippet)
      assert.same({ "https://[fd00::1]:443", "from-env" }, { res.a.server, res.a.namespace })
      -- a kubeconfig comes first; in_cluster = true skips it
      assert(os.execute("mkdir " .. quote(dir .. "/.kube")))
      write(dir .. "/.kube/config", "current-context: c\nclusters: [{name: k, cluster: {server: 'https://kc'}}]\n"
        .. "contexts: [{name: c, context: {cluster: k}}]\n")
      res = run_with_env(env, snippet)
      assert.equal("https://kc", res.a.server)
      res = run_with_env(env, ("return config.load{ in_cluster = true, service_account_dir = %q }"):format(sa))
      assert.equal("in-cluster", res.a.source)
      -- a kubeconfig with no context selected is "empty": in-cluster is used instead
      write(dir .. "/.kube/config", "clusters: [{name: k, cluster: {server: 'https://kc'}}]\n")
      res = run_with_env(env, snippet)
      assert.equal("in-cluster", res.a.source)
      -- ... unless in_cluster = false
      res = run_with_env(env, ("return config.load{ in_cluster = false, service_account_dir = %q }"):format(sa))
      assert.matches("has no current%-context", res.b)
    end)

    it("refuses files that are not regular files instead of blocking on them", function()
      local env = { HOME = dir, KUBERNETES_SERVICE_HOST = "h", KUBERNETES_SERVICE_PORT = "1",
                    KUBECONFIG = dir .. "/kc-fifo" }
      assert(os.execute("mkfifo " .. quote(dir .. "/kc-fifo")))
      local res = run_with_env(env, "return config.load{}", 10)
      assert.matches("^no configuration found", res.b) -- passed over, like a missing file
      env.KUBECONFIG = nil
      os.remove(sa .. "/namespace")
      assert(os.execute("mkfifo " .. quote(sa .. "/namespace")))
      res = run_with_env(env, ("return config.load{ in_cluster = true, service_account_dir = %q }")
        :format(sa), 10)
      assert.equal("default", res.a.namespace) -- as when the file is missing
      os.remove(sa .. "/token")
      assert(os.execute("mkfifo " .. quote(sa .. "/token")))
      res = run_with_env(env, ("return config.load{ in_cluster = true, service_account_dir = %q }")
        :format(sa), 10)
      assert.equal("in-cluster configuration: token file " .. sa .. "/token: not a regular file "
        .. "(a fifo)", res.b)
    end)

    it("says what is missing", function()
      local res = run_with_env({ HOME = dir }, ("return config.load{ in_cluster = true, service_account_dir = %q }"):format(sa))
      assert.equal("in-cluster configuration: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined", res.b)
      os.remove(sa .. "/token")
      res = run_with_env({ HOME = dir, KUBERNETES_SERVICE_HOST = "h", KUBERNETES_SERVICE_PORT = "1" },
        ("return config.load{ in_cluster = true, service_account_dir = %q }"):format(sa))
      assert.equal("in-cluster configuration: token file " .. sa .. "/token: No such file or directory", res.b)
      -- no token: not possible, so no fall-back either
      res = run_with_env({ HOME = dir, KUBERNETES_SERVICE_HOST = "h", KUBERNETES_SERVICE_PORT = "1" },
        ("return config.load{ service_account_dir = %q }"):format(sa))
      assert.matches("^no configuration found", res.b)
    end)
  end)

  it("base64 round-trips and rejects garbage", function()
    for _, s in ipairs({ "", "a", "ab", "abc", "abcd", "\0\255\128binary\n" }) do
      assert.equal(s, config.base64_decode(config.base64_encode(s)))
    end
    assert.equal("abc", config.base64_decode("YW\nJj"))
    assert.equal("ab", config.base64_decode("YWI")) -- padding optional
    assert.is_nil(config.base64_decode("YW*j"))
    assert.is_nil(config.base64_decode("Y"))
    assert.is_nil(config.base64_decode("YQ=a"))
  end)
end)
