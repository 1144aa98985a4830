-- Mutation test of the kubeconfig loader (lua/kinformer/config.lua): thousands of corrupted
-- kubeconfig files, made from valid ones by seeded random mutations (bytes, truncation, lines,
-- types, huge values, bad base64, dangling references, alias bombs, bad YAML). For each one,
-- config.load and kinformer.client must either give a usable configuration or `nil, err` where
-- err is one line (no control characters, at most 1 KiB besides the path) that names the file;
-- never raise, never run for more than a few seconds, never put a secret of the file (token,
-- password, key data) into err.
--
-- MUTATIONS=N (default 3000) sets the number of cases, MUTATION_SEED=S the seed (default: a
-- fixed one, so that `make test` is repeatable). A failing case is written to
-- build/config-mutation-failure.yaml and the message says how to replay it.
local config = require "kinformer.config"
local kinformer = require "kinformer"

local MUTATIONS = tonumber(os.getenv("MUTATIONS") or "") or 3000
local SEED = tonumber(os.getenv("MUTATION_SEED") or "") or 20240611
local CASE_SECONDS = 5 -- a case that runs longer is a hang
local TIMEOUT = "MUTATION-CASE-TIMEOUT"

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

-- Secrets of the base files: none may ever appear in an error.
local TOKEN = "tok-S3CRET-7d1f0c9a"
local TOKEN2 = "tok-OTHER-S3CRET-55aa"
local PASSWORD = "pw-S3CRET-c0ffee"
local KEY = "-----BEGIN PRIVATE KEY-----\nKEY-S3CRET-BYTES-0123456789\n-----END PRIVATE KEY-----\n"
local CERT = "-----BEGIN CERTIFICATE-----\nCERT-public-bytes\n-----END CERTIFICATE-----\n"
local CA = "-----BEGIN CERTIFICATE-----\nCA-public-bytes\n-----END CERTIFICATE-----\n"
local KEY_B64 = config.base64_encode(KEY)
local SECRETS = { TOKEN, TOKEN2, PASSWORD, KEY, KEY_B64, "KEY-S3CRET-BYTES", "S3CRET" }
-- Keys whose values are secrets.
local SECRET_KEYS = { "token", "password", "client%-key%-data" }

local BASES = {
  token = ([[
apiVersion: v1
kind: Config
current-context: prod
clusters:
- name: prod-cluster
  cluster:
    server: https://203.0.113.10:6443
    certificate-authority-data: %s
contexts:
- name: prod
  context:
    cluster: prod-cluster
    user: prod-user
    namespace: shop
users:
- name: prod-user
  user:
    token: %s
]]):format(config.base64_encode(CA), TOKEN),

  client_cert = ([[
apiVersion: v1
kind: Config
current-context: kind
clusters:
- cluster:
    server: "https://127.0.0.1:40123"
    insecure-skip-tls-verify: true
    tls-server-name: kubernetes
    proxy-url: http://proxy.example:3128
  name: kind-kind
contexts:
- context: {cluster: kind-kind, user: kind-kind}
  name: kind
preferences: {}
users:
- name: kind-kind
  user:
    client-certificate-data: %s
    client-key-data: %s
]]):format(config.base64_encode(CERT), KEY_B64),

  exec = [[
apiVersion: v1
kind: Config
current-context: eks
clusters:
- name: eks-cluster
  cluster:
    server: https://ABCDEF.gr7.eu-west-1.eks.amazonaws.com
    certificate-authority: ca.pem
    extensions:
    - name: client.authentication.k8s.io/exec
      extension:
        audience: kinformer
        list: [a, b, c]
contexts:
- name: eks
  context: {cluster: eks-cluster, user: eks-user, namespace: web}
users:
- name: eks-user
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: ./bin/get-token
      args: [eks, get-token, --cluster-name, prod, true]
      env:
      - name: AWS_PROFILE
        value: prod
      - name: EMPTY
      installHint: install aws-cli
      provideClusterInfo: true
      interactiveMode: IfAvailable
]],

  multi = ([[
apiVersion: v1
kind: Config
current-context: a
clusters:
- name: ca
  cluster: {server: "https://a.example", certificate-authority: ca.pem}
- name: cb
  cluster:
    server: http://b.example:8080/prefix
- name: cc
  cluster:
    server: c.example:6443
    certificate-authority-data: %s
contexts:
- {name: a, context: {cluster: ca, user: ua, namespace: ns-a}}
- {name: b, context: {cluster: cb, user: ub}}
- {name: c, context: {cluster: cc, user: uc, namespace: ""}}
- {name: d, context: {cluster: cb}}
users:
- name: ua
  user: {tokenFile: token}
- name: ub
  user: {username: admin, password: %s}
- name: uc
  user:
    token: %s
    tokenFile: /nope/token
]]):format(config.base64_encode(CA), PASSWORD, TOKEN2),
}
local BASE_NAMES = { "token", "client_cert", "exec", "multi" }
local CONTEXTS = { nil, "a", "b", "c", "d", "nope" } -- the context option, for "multi"

---------------------------------------------------------------------------------------------
-- mutations

local random = math.random

local function lines_of(text)
  local out = {}
  for l in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("([^\n]*)\n") do
    out[#out + 1] = l
  end
  return out
end

local function join(lines) return table.concat(lines, "\n") .. "\n" end

local function pick(t) return t[random(#t)] end

local TOKENS = { ":", ": ", "- ", "-", "{", "}", "[", "]", ",", "'", '"', "&a ", "*a", "&b ",
                 "*b", "!!str ", "!!binary ", "!!map ", "!!seq ", "!!int ", "!!float ", "!foo ",
                 "~", "null", "true", "false", "yes", "no", "0x1f", "012", "1e400", ".inf",
                 "\t", "\0", "\255", "\r", "#", "|", ">", "|-", "<<: *a", "? ", "---",
                 "...", "%YAML 1.1", "%TAG ! tag:x:", "\\", "\\u0000", "@", "`", "\xef\xbb\xbf",
                 "\xc3", "\xe2\x80\xa8" }

-- A value that replaces a scalar: another type, a huge or weird value.
local function weird_value()
  local k = random(14)
  if k == 1 then return "{a: b, c: [1, 2]}" end
  if k == 2 then return "[x, y, z]" end
  if k == 3 then return pick({ "42", "-1", "3.5", "0x10", "1e999", ".nan" }) end
  if k == 4 then return pick({ "true", "false", "yes", "off" }) end
  if k == 5 then return pick({ "~", "null", "''", '""' }) end
  if k == 6 then return string.rep("x", random(1, 200000)) end
  if k == 7 then return string.rep("[", 2000) .. string.rep("]", 2000) end
  if k == 8 then return "!!binary " .. string.rep("QUJD", random(1, 1000)) end
  if k == 9 then return pick({ "'unterminated", '"unterminated', "{a: ", "[a, ", "*undefined" }) end
  if k == 10 then return pick({ "!!!notbase64!!!", "QUJ", "QU=J", "====", "Q", "\255\254" }) end
  if k == 11 then return "/dev/null" end
  if k == 12 then return pick({ "ftp://x", "://", "https://", "http://[::1", "x y z" }) end
  if k == 13 then return "&a [*a]" end
  return '"\\u0000\\ud800 \\x41"'
end

local MUTATORS = {
  function(t) -- flip a byte to any value
    if #t == 0 then return t end
    local i = random(#t)
    return t:sub(1, i - 1) .. string.char(random(0, 255)) .. t:sub(i + 1)
  end,
  function(t) -- flip a bit
    if #t == 0 then return t end
    local i = random(#t)
    local b = t:byte(i)
    local bit = 2 ^ random(0, 7)
    b = (b % (2 * bit) >= bit) and b - bit or b + bit
    return t:sub(1, i - 1) .. string.char(math.floor(b)) .. t:sub(i + 1)
  end,
  function(t) return t:sub(1, random(0, #t)) end, -- truncate
  function(t) -- delete a byte range
    if #t == 0 then return t end
    local i = random(#t)
    return t:sub(1, i - 1) .. t:sub(i + random(1, 40))
  end,
  function(t) -- insert a YAML-ish token
    local i = random(#t + 1)
    return t:sub(1, i - 1) .. pick(TOKENS) .. t:sub(i)
  end,
  function(t) -- delete a line
    local l = lines_of(t)
    if #l == 0 then return t end
    table.remove(l, random(#l))
    return join(l)
  end,
  function(t) -- duplicate a line
    local l = lines_of(t)
    if #l == 0 then return t end
    local i = random(#l)
    table.insert(l, random(#l + 1), l[i])
    return join(l)
  end,
  function(t) -- swap two lines
    local l = lines_of(t)
    if #l < 2 then return t end
    local i, j = random(#l), random(#l)
    l[i], l[j] = l[j], l[i]
    return join(l)
  end,
  function(t) -- re-indent a line
    local l = lines_of(t)
    if #l == 0 then return t end
    local i = random(#l)
    if random(2) == 1 then l[i] = string.rep(" ", random(1, 4)) .. l[i]
    else l[i] = l[i]:gsub("^%s%s?", "") end
    return join(l)
  end,
  function(t) -- replace the value of a "key: value" line (another type, huge, bad base64 ...)
    local l = lines_of(t)
    local cands = {}
    for i, s in ipairs(l) do if s:find(":%s+%S") then cands[#cands + 1] = i end end
    if #cands == 0 then return t end
    local i = pick(cands)
    l[i] = l[i]:gsub(":%s+.*$", ": " .. weird_value(), 1)
    return join(l)
  end,
  function(t) -- turn a mapping key into a scalar or a list ("cluster:" -> "cluster: x")
    local l = lines_of(t)
    local cands = {}
    for i, s in ipairs(l) do if s:find(":%s*$") then cands[#cands + 1] = i end end
    if #cands == 0 then return t end
    local i = pick(cands)
    l[i] = l[i] .. " " .. pick({ "oops", "[]", "{}", "~", "[a]", "42", "true" })
    return join(l)
  end,
  function(t) -- a dangling reference: rename one name (a context's cluster/user, an entry)
    local names = {}
    for n in t:gmatch("name: ([%w%-]+)") do names[#names + 1] = n end
    for n in t:gmatch("cluster: ([%w%-]+)") do names[#names + 1] = n end
    for n in t:gmatch("user: ([%w%-]+)") do names[#names + 1] = n end
    if #names == 0 then return t end
    local n = pick(names)
    local count = 0
    return (t:gsub(n:gsub("%p", "%%%0"), function(m)
      count = count + 1
      if count == 1 or random(3) == 1 then return m .. "-gone" end
    end))
  end,
  function(t) -- drop or blank a whole section
    local sec = pick({ "clusters", "contexts", "users", "current%-context" })
    if random(2) == 1 then
      return (t:gsub("\n" .. sec .. ":[^\n]*", "\n" .. sec:gsub("%%", "") .. ": " .. weird_value(), 1))
    end
    return (t:gsub("\n" .. sec .. ":", "\nx-" .. sec:gsub("%%", "") .. ":", 1))
  end,
  function(t) -- an alias bomb or anchors in odd places
    local bomb = "x0: &a0 [q, q]\n"
    for i = 1, random(1, 40) do
      bomb = bomb .. ("x%d: &a%d [*a%d, *a%d, *a%d, *a%d]\n"):format(i, i, i - 1, i - 1, i - 1, i - 1)
    end
    if random(2) == 1 then return bomb .. t end
    return (t:gsub("extension:\n", "extension: *a" .. random(0, 40) .. "\n", 1))
  end,
  function(t) -- several documents, or a document that is not a mapping
    return pick({ t .. "---\n" .. t, "--- [1, 2]\n", "--- just text\n", "---\n" .. t, "" })
  end,
}

local function mutate(text)
  for _ = 1, random(1, 4) do
    text = MUTATORS[random(#MUTATORS)](text)
  end
  return text
end

---------------------------------------------------------------------------------------------
-- checks

local STR = { server = true, token = true, token_file = true, username = true, password = true,
              ca_file = true, ca_data = true, client_cert_file = true, client_cert_data = true,
              client_key_file = true, client_key_data = true, tls_server_name = true,
              proxy = true, namespace = true, source = true, context = true }

-- What a usable configuration looks like (what kinformer.core.client accepts as options).
local function check_config(o)
  if type(o) ~= "table" then return "not a table" end
  for k, v in pairs(o) do
    if STR[k] then
      if type(v) ~= "string" then return k .. " is a " .. type(v) end
    elseif k == "insecure_skip_tls_verify" then
      if v ~= true then return k .. " is " .. tostring(v) end
    elseif k == "exec" then
      if type(v) ~= "table" or type(v.command) ~= "string" or v.command == "" then
        return "exec without a command"
      end
      for _, f in ipairs({ "args", "env" }) do
        if type(v[f]) ~= "table" then return "exec." .. f .. " is not a list" end
        for i, a in pairs(v[f]) do
          if type(i) ~= "number" or type(a) ~= "string" then return "exec." .. f .. " holds a " .. type(a) end
        end
      end
    elseif k ~= "connect_timeout" and k ~= "user_agent" then
      return "unexpected field " .. tostring(k)
    end
  end
  if not (o.server or ""):match("^https?://") then return "server " .. tostring(o.server) end
  if o.namespace == nil or o.source == nil then return "no namespace or source" end
  return nil
end

-- The secrets that stay in secret places (a line "token: ...", "password: ...", ...): those
-- may never be in an error. A mutation that moved a secret elsewhere (into a name, say) made
-- it a name, which errors may quote.
local function guarded_secrets(text)
  local out = {}
  for _, s in ipairs(SECRETS) do
    local only_secret_lines, seen = true, false
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
      if line:find(s, 1, true) then
        seen = true
        local secret_line = false
        for _, k in ipairs(SECRET_KEYS) do
          if line:find("^[%s%-{,]*" .. k .. "%s*:") or line:find("[{,]%s*" .. k .. "%s*:") then
            secret_line = true
          end
        end
        if not secret_line then only_secret_lines = false end
      end
    end
    if not seen or only_secret_lines then out[#out + 1] = s end
  end
  return out
end

-- Runs f() with a time bound; returns pcall's results. A hook cannot stop C code, but every
-- loop of the loader is Lua (libyaml's parse of these small files is not the risk).
local function bounded(f)
  local deadline = os.clock() + CASE_SECONDS
  debug.sethook(function()
    if os.clock() > deadline then error(TIMEOUT, 0) end
  end, "", 1000)
  local res = table.pack(pcall(f))
  debug.sethook()
  return table.unpack(res, 1, res.n)
end

---------------------------------------------------------------------------------------------

describe("kubeconfig loader under mutation", function()
  local dir, failure_file

  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. quote(dir .. "/bin")))
    write(dir .. "/ca.pem", CA)
    write(dir .. "/token", TOKEN .. "\n")
    failure_file = (KINFORMER_ROOT or ".") .. "/build/config-mutation-failure.yaml"
  end)
  teardown(function()
    os.execute("rm -rf " .. quote(dir))
  end)

  it("loads every base kubeconfig", function()
    for _, name in ipairs(BASE_NAMES) do
      local path = write(dir .. "/config", BASES[name])
      local o, err = config.load{ kubeconfig = path }
      assert(o, name .. ": " .. tostring(err))
      assert.is_nil(check_config(o))
      local c, cerr = kinformer.client{ kubeconfig = path }
      assert(c, name .. ": " .. tostring(cerr))
    end
  end)

  it(("gives a usable configuration or a clear error for %d corrupted kubeconfigs (seed %d)")
     :format(MUTATIONS, SEED), function()
    math.randomseed(SEED)
    local path = dir .. "/config"
    local stats = { ok = 0, err = 0, client_ok = 0, client_err = 0 }
    local messages, slowest = {}, {}
    for case = 1, MUTATIONS do
      local started = os.clock()
      local base = BASE_NAMES[(case - 1) % #BASE_NAMES + 1]
      local text = mutate(BASES[base])
      local context = base == "multi" and CONTEXTS[random(#CONTEXTS)] or nil
      write(path, text)
      local function fail(why)
        write(failure_file, text)
        error(("case %d (base %s, context %s, MUTATION_SEED=%d): %s\n(file saved as %s)")
          :format(case, base, tostring(context), SEED, why, failure_file), 0)
      end
      local guarded = guarded_secrets(text)
      local function check_err(err, who)
        if type(err) ~= "string" or err == "" then
          fail(who .. " returned nil and a " .. type(err) .. " error")
        end
        if err:find(TIMEOUT, 1, true) then fail(who .. " ran for more than " .. CASE_SECONDS .. " s") end
        if not err:find(path, 1, true) then fail(who .. ": the error does not name the file: " .. err) end
        -- clear: one line of reasonable length, whatever names and values the file holds
        local rest = err:gsub(path:gsub("%p", "%%%0"), "")
        if #rest > 1024 then fail(who .. ": an error of " .. #err .. " bytes: " .. err:sub(1, 300)) end
        if rest:find("%c") then fail(who .. ": control characters in the error: " .. err) end
        for _, s in ipairs(guarded) do
          if err:find(s, 1, true) then fail(who .. ": a secret in the error: " .. err) end
        end
        messages[(err:gsub(path:gsub("%p", "%%%0"), "FILE"):sub(1, tonumber(os.getenv("MUTATION_MSGLEN") or "") or 60))] = true
      end

      local ok, o, err = bounded(function() return config.load{ kubeconfig = path, context = context } end)
      if not ok then
        if tostring(o):find(TIMEOUT, 1, true) then fail("config.load ran for more than " .. CASE_SECONDS .. " s") end
        fail("config.load raised: " .. tostring(o))
      end
      if o then
        local bad = check_config(o)
        if bad then fail("config.load gave an unusable configuration: " .. bad) end
        stats.ok = stats.ok + 1
      else
        check_err(err, "config.load")
        stats.err = stats.err + 1
      end
      -- The whole path: the core must take or refuse what the loader gave, never raise.
      local cok, c, cerr = bounded(function() return kinformer.client{ kubeconfig = path, context = context } end)
      if not cok then fail("kinformer.client raised: " .. tostring(c)) end
      if c then
        stats.client_ok = stats.client_ok + 1
      else
        check_err(cerr, "kinformer.client")
        stats.client_err = stats.client_err + 1
      end
      slowest[#slowest + 1] = { os.clock() - started, case, #text }
    end
    table.sort(slowest, function(a, b) return a[1] > b[1] end)
    local kinds = 0
    for _ in pairs(messages) do kinds = kinds + 1 end
    -- Every kind of outcome must have happened, or the mutations are too weak (or too strong).
    assert.is_true(stats.ok > MUTATIONS / 20, "few mutants load: " .. stats.ok)
    assert.is_true(stats.err > MUTATIONS / 4, "few mutants fail: " .. stats.err)
    assert.is_true(kinds > 30, "few kinds of error: " .. kinds)
    if os.getenv("MUTATION_VERBOSE") then
      io.stderr:write(("\n%d cases: config.load %d ok / %d err, kinformer.client %d ok / %d err, "
        .. "%d distinct error openings\n"):format(MUTATIONS, stats.ok, stats.err, stats.client_ok,
        stats.client_err, kinds))
      local list = {}
      for m in pairs(messages) do list[#list + 1] = m end
      table.sort(list)
      for _, m in ipairs(list) do io.stderr:write("  ", m, "\n") end
      for i = 1, math.min(5, #slowest) do
        io.stderr:write(("slow: case %d, %d bytes, %.3f s CPU\n"):format(slowest[i][2], slowest[i][3],
                                                                         slowest[i][1]))
      end
    end
  end)
end)
