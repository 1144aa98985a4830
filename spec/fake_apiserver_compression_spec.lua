-- The fake API server compresses as kube-apiserver does (tools/fake-apiserver/fakeapi/
-- compression.py): a list of 128 KiB or more, gzip, when the request accepts it; nothing else.
local cjson = require "cjson"
local fake = require "support.fake_apiserver"
local proc = require "support.proc"

local function sh(cmd)
  local p = assert(io.popen(cmd))
  local out = p:read("a")
  p:close()
  return out
end

describe("fake apiserver compression", function()
  local srv
  setup(function()
    -- 30 pods of about 9 KB: a list of about 270 KB; one pod alone is far below 128 KiB.
    srv = fake.start{ args = { "--pods", "30", "--namespaces", "1" }, quiet = true }
  end)
  teardown(function() if srv then srv:stop() end end)

  local function get(path, accept)
    local code, _, headers, raw = srv:request("GET", path, nil, { ["Accept-Encoding"] = accept })
    return code, headers["content-encoding"], raw
  end

  it("gzips a list of 128 KiB or more when asked, and only then", function()
    local code, enc, raw = get("/api/v1/pods", "gzip")
    assert.are.equal(200, code)
    assert.are.equal("gzip", enc)
    assert.are.equal("\31\139", raw:sub(1, 2)) -- the gzip magic
    local _, plain_enc, plain = get("/api/v1/pods", nil)
    assert.is_nil(plain_enc)
    assert.is_true(#raw * 5 < #plain, #raw .. " bytes compressed, " .. #plain .. " not")
    -- what curl decodes is the same list
    local decoded = cjson.decode(sh(("curl -s --compressed %s"):format(proc.quote(srv.url .. "/api/v1/pods"))))
    assert.are.equal(30, #decoded.items)
    assert.are.same(cjson.decode(plain).items[7].metadata, decoded.items[7].metadata)
  end)

  it("leaves small lists, single objects, refusals and watches alone", function()
    -- a page of 5 pods (45 KB) is under the threshold
    local _, enc = get("/api/v1/pods?limit=5", "gzip")
    assert.is_nil(enc)
    local name = srv:state("pods").items[1].metadata.name
    _, enc = get("/api/v1/namespaces/ns-0/pods/" .. name, "gzip")
    assert.is_nil(enc)
    _, enc = get("/api/v1/pods", "gzip;q=0, identity")
    assert.is_nil(enc)
    _, enc = get("/api/v1/pods", "br, deflate")
    assert.is_nil(enc)
    local out = sh(("curl -s -D - -o /dev/null -H 'Accept-Encoding: gzip' -m 1 %s"):format(
      proc.quote(srv.url .. "/api/v1/pods?watch=true&resourceVersion=0")))
    assert.truthy(out:find("200", 1, true), out)
    assert.falsy(out:lower():find("content-encoding", 1, true), out)
  end)
end)
