-- kinformer.ngx.balancer.endpoints and .chash: the endpoint rules and the consistent-hash ring,
-- without nginx (the nginx side: spec/openresty_balancer_spec.lua).
local endpoints = require "kinformer.ngx.balancer.endpoints"
local chash = require "kinformer.ngx.balancer.chash"

local function ep(addr, ready, serving, terminating)
  local c = {}
  if ready ~= nil then c.ready = ready end
  if serving ~= nil then c.serving = serving end
  if terminating ~= nil then c.terminating = terminating end
  return { addresses = { addr }, conditions = c }
end

local function slice(family, ports, eps)
  return { addressType = family, ports = ports, endpoints = eps }
end

local HTTP = { { name = "http", port = 8080, protocol = "TCP" } }

local function ids(sel)
  local out = {}
  for i, p in ipairs(sel.peers) do out[i] = p.id end
  return table.concat(out, ",")
end

local function select(slices, port, family)
  return endpoints.select(endpoints.summarize(slices), port, family)
end

describe("balancer endpoints", function()
  it("takes ready endpoints; a missing ready condition counts as ready", function()
    local sel = select({ slice("IPv4", HTTP, {
      ep("10.0.0.2", true), ep("10.0.0.1"), ep("10.0.0.3", false), { addresses = { "10.0.0.4" } },
    }) }, "http")
    assert.equals("10.0.0.1:8080,10.0.0.2:8080,10.0.0.4:8080", ids(sel))
    assert.equals(4, sel.known)
    assert.equals(3, sel.ready)
    assert.is_false(sel.terminating)
  end)

  it("falls back to serving terminating endpoints only when none is ready (kube-proxy)", function()
    local eps = { ep("10.0.0.1", false, true, true), ep("10.0.0.2", false, false, true),
                  ep("10.0.0.3", false, true, false) }
    local sel = select({ slice("IPv4", HTTP, eps) }, "http")
    assert.equals("10.0.0.1:8080", ids(sel))
    assert.is_true(sel.terminating)
    eps[#eps + 1] = ep("10.0.0.9", true)
    sel = select({ slice("IPv4", HTTP, eps) }, "http")
    assert.equals("10.0.0.9:8080", ids(sel))
    assert.is_false(sel.terminating)
  end)

  it("picks the port by name, by number or the only one, slice by slice", function()
    local two = { { name = "http", port = 80 }, { name = "metrics", port = 9090 } }
    local slices = {
      slice("IPv4", two, { ep("10.0.0.1") }),
      slice("IPv4", { { name = "http", port = 8080 } }, { ep("10.0.0.2") }),
    }
    assert.equals("10.0.0.1:80,10.0.0.2:8080", ids(select(slices, "http")))
    assert.equals("10.0.0.1:9090", ids(select(slices, "metrics")))
    assert.equals("10.0.0.1:9090", ids(select(slices, 9090)))
    local sel = select(slices, "grpc")
    assert.equals("", ids(sel))
    assert.is_false(sel.port_found)
    -- no port given: only slices with one port qualify
    assert.equals("10.0.0.2:8080", ids(select(slices, nil)))
    -- an unnamed port is ""
    assert.equals("10.0.0.3:81", ids(select({ slice("IPv4", { { port = 81 } }, { ep("10.0.0.3") }) }, "")))
  end)

  it("keeps one peer per address and port across slices, the best state winning", function()
    local sel = select({
      slice("IPv4", HTTP, { ep("10.0.0.1", false), ep("10.0.0.2") }),
      slice("IPv4", HTTP, { ep("10.0.0.1", true), ep("10.0.0.2") }),
    }, "http")
    assert.equals("10.0.0.1:8080,10.0.0.2:8080", ids(sel))
    assert.equals(2, sel.known)
  end)

  it("handles dual stack: IPv4 first, IPv6 when IPv4 has no ready peer, or one family by choice", function()
    local v4 = slice("IPv4", HTTP, { ep("10.0.0.1") })
    local v6 = slice("IPv6", HTTP, { ep("fd00::1") })
    assert.equals("10.0.0.1:8080", ids(select({ v6, v4 }, "http")))
    assert.equals("[fd00::1]:8080", ids(select({ v6, v4 }, "http", "IPv6")))
    local sel = select({ v6, v4 }, "http", "IPv6")
    assert.equals("[fd00::1]", sel.peers[1].host)
    assert.equals(8080, sel.peers[1].port)
    local down4 = slice("IPv4", HTTP, { ep("10.0.0.1", false) })
    assert.equals("[fd00::1]:8080", ids(select({ down4, v6 }, "http")))
    assert.equals("", ids(select({ down4, v6 }, "http", "IPv4")))
  end)

  it("skips FQDN slices, endpoints without an address and non-TCP ports", function()
    local sel = select({
      slice("FQDN", HTTP, { ep("web.example.com") }),
      slice("IPv4", { { name = "http", port = 53, protocol = "UDP" } }, { ep("10.0.0.5") }),
      slice("IPv4", HTTP, { { addresses = {} }, { conditions = { ready = true } }, ep("10.0.0.1") }),
    }, "http")
    assert.equals("10.0.0.1:8080", ids(sel))
  end)

  it("names the Service of a slice from its label", function()
    assert.equals("shop/web", endpoints.service_of{ metadata = { namespace = "shop",
      labels = { ["kubernetes.io/service-name"] = "web" } } })
    assert.is_nil(endpoints.service_of{ metadata = { namespace = "shop" } })
    assert.is_nil(endpoints.service_of{ metadata = { labels = {
      ["kubernetes.io/service-name"] = "web" } } })
  end)
end)

-- FNV-1a, 32 bits: the ring only needs some well-mixed hash.
local function fnv(s)
  local h = 2166136261
  for i = 1, #s do
    h = ((h ~ s:byte(i)) * 16777619) & 0xffffffff
  end
  return h
end

describe("balancer consistent hashing", function()
  local function peers(n, skip)
    local out = {}
    for i = 1, n do
      if i ~= skip then out[#out + 1] = "10.0.0." .. i .. ":80" end
    end
    return out
  end

  local function owners(ids, keys)
    local ring = chash.ring(ids, fnv)
    local out = {}
    for _, k in ipairs(keys) do out[k] = ids[chash.lookup(ring, fnv(k))] end
    return out
  end

  local keys = {}
  for i = 1, 2000 do keys[i] = "user-" .. i end

  it("spreads keys over every peer", function()
    local count = {}
    for _, id in pairs(owners(peers(5), keys)) do count[id] = (count[id] or 0) + 1 end
    for _, id in ipairs(peers(5)) do
      assert.is_true((count[id] or 0) > 2000 / 5 * 0.6, id .. " got " .. tostring(count[id]))
    end
  end)

  it("moves only the keys of a peer that leaves", function()
    local before = owners(peers(5), keys)
    local after = owners(peers(5, 3), keys)
    local moved = 0
    for _, k in ipairs(keys) do
      if before[k] ~= "10.0.0.3:80" then
        assert.equals(before[k], after[k], k)
      else
        moved = moved + 1
        assert.are_not.equal("10.0.0.3:80", after[k])
      end
    end
    assert.is_true(moved > 0)
  end)

  it("does not depend on the order of the peers", function()
    local a = owners({ "a:1", "b:1", "c:1" }, keys)
    local b = owners({ "c:1", "a:1", "b:1" }, keys)
    for _, k in ipairs(keys) do assert.equals(a[k], b[k]) end
  end)

  it("wraps around the circle", function()
    local ring = chash.ring({ "a:1" }, fnv)
    assert.equals(1, chash.lookup(ring, 0))
    assert.equals(1, chash.lookup(ring, 0xffffffff))
    assert.is_nil(chash.lookup(chash.ring({}, fnv), 5))
  end)
end)

describe("balancer consistent hashing, many peers", function()
  it("keeps a ring near 16,000 points past 100 peers, 16 per peer at least", function()
    assert.equals(160, chash.points_for(100))
    assert.equals(80, chash.points_for(200))
    assert.equals(16, chash.points_for(5000))
    local ids = {}
    for i = 1, 400 do ids[i] = "10.1." .. (i // 250) .. "." .. (i % 250) .. ":80" end
    local ring = chash.ring(ids, function(s)
      local h = 2166136261
      for i = 1, #s do h = ((h ~ s:byte(i)) * 16777619) & 0xffffffff end
      return h
    end)
    assert.equals(400 * 40, ring.n)
  end)
end)
