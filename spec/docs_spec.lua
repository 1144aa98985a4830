-- What the docs show must be what kinformer prints. docs/informer.md gives the error of
-- wait_for_sync for an informer whose credentials may not list its resource; this spec reads
-- that example out of the doc, plays the denial with the fake API server (the 403 Status
-- kube-apiserver's RBAC sends, with its own wording) and checks that the error kinformer
-- returns is the documented line, character for character, so the two cannot drift apart.
local kinformer = require "kinformer"
local fake = require "support.fake_apiserver"

-- kube-apiserver's answer to a service account without "list secrets" (RBAC's wording).
local FORBIDDEN = { code = 403, reason = "Forbidden", message = 'secrets is forbidden: User ' ..
  '"system:serviceaccount:shop:app" cannot list resource "secrets" in API group "" at the cluster scope' }

local root = rawget(_G, "KINFORMER_ROOT") or "."

local function read(path)
  local f = assert(io.open(root .. "/" .. path, "r"))
  local s = f:read("a")
  f:close()
  return s
end

-- The documented example: "informer NAME not synced after Ns: list PATH: CODE MESSAGE".
local function documented_error()
  for line in read("docs/informer.md"):gmatch("[^\n]+") do
    local name, secs, last_error = line:match("^%s*informer (%S+) not synced after (%d+)s: (list .*)$")
    if name then
      local path = last_error:match("^list (%S+): ")
      assert(path, "docs/informer.md: the example's last_error is not 'list PATH: ...': " .. last_error)
      return { line = line:match("^%s*(.-)%s*$"), name = name, seconds = tonumber(secs),
               last_error = last_error, path = path }
    end
  end
  error("docs/informer.md has no 'informer ... not synced after Ns: list ...' example")
end

describe("docs/informer.md", function()
  it("shows the error wait_for_sync returns when the list is forbidden", function()
    local doc = documented_error()
    assert.equals("secrets", doc.name)
    assert.equals("/api/v1/" .. doc.name, doc.path)
    assert.is_true(doc.seconds <= 2, "the example's timeout is what this spec waits")

    local srv = fake.start{ quiet = true }
    local inf
    finally(function()
      if inf then inf:stop() end
      srv:stop()
    end)
    srv:fault{ path = "^" .. doc.path .. "$", watch = false, times = -1,
               action = { status = FORBIDDEN.code, reason = FORBIDDEN.reason,
                          message = FORBIDDEN.message } }
    local client = assert(kinformer.client{ server = srv.url })
    inf = assert(client:informer{ resource = doc.name, backoff_initial = 0.05, backoff_max = 0.2 })
    assert(inf:start())

    local ok, err = inf:wait_for_sync(doc.seconds)
    assert.is_nil(ok)
    assert.equals(doc.line, err)
    local st = inf:status()
    assert.equals(doc.last_error, st.last_error)
    assert.equals(FORBIDDEN.code, st.last_error_code)
    assert.equals(FORBIDDEN.reason, st.last_error_reason)
    assert.is_false(st.synced)
  end)
end)
