-- docs/semantics.md, section 1: keys (MetaNamespaceKeyFunc, DeletionHandlingMetaNamespaceKeyFunc,
-- SplitMetaNamespaceKey) and DeletedFinalStateUnknown tombstones, as docs/api.md exposes them.
local kinformer = require "kinformer"

local function obj(name, namespace)
  return { metadata = { name = name, namespace = namespace } }
end

describe("keys", function()
  describe("key_of", function()
    it("is namespace/name for a namespaced object", function()
      assert.equal("default/web-1", kinformer.key_of(obj("web-1", "default")))
    end)

    it("is name alone for a cluster-scoped object (no namespace or an empty one)", function()
      assert.equal("node-a", kinformer.key_of(obj("node-a")))
      assert.equal("node-a", kinformer.key_of(obj("node-a", "")))
    end)

    it("is the tombstone's key, not the key of the object it carries", function()
      local t = kinformer.tombstone("ns/old-name", obj("other", "elsewhere"))
      assert.equal("ns/old-name", kinformer.key_of(t))
      assert.equal("gone", kinformer.key_of(kinformer.tombstone("gone")))
    end)

    it("follows the current content of a user table that was edited", function()
      local o = obj("a", "ns1")
      assert.equal("ns1/a", kinformer.key_of(o))
      o.metadata.namespace = "ns2"
      assert.equal("ns2/a", kinformer.key_of(o))
    end)

    it("of a table kinformer returned is the key of its record", function()
      local store = kinformer.store()
      assert.is_true(store:add(obj("x", "ns")))
      assert.equal("ns/x", kinformer.key_of(store:get_by_key("ns/x")))
      store:close()
    end)

    it("returns nil, err, \"ENOKEY\" for an object without metadata", function()
      local key, err, code = kinformer.key_of({ kind = "Pod" })
      assert.is_nil(key)
      assert.is_string(err)
      assert.equal("ENOKEY", code)
    end)

    it("returns nil, err, \"ENOKEY\" when the name is missing or empty", function()
      for _, o in ipairs({ { metadata = {} }, { metadata = { namespace = "ns" } },
                           { metadata = { name = "" } } }) do
        local key, err, code = kinformer.key_of(o)
        assert.is_nil(key)
        assert.is_string(err)
        assert.equal("ENOKEY", code)
      end
    end)

    it("returns nil, err, \"ENOKEY\" when metadata fields are not strings", function()
      for _, o in ipairs({ { metadata = { name = 42 } },
                           { metadata = { name = "a", namespace = {} } } }) do
        local key, err, code = kinformer.key_of(o)
        assert.is_nil(key)
        assert.is_string(err)
        assert.equal("ENOKEY", code)
      end
    end)

    it("raises naming the argument for a value that is not a table", function()
      for _, bad in ipairs({ 42, "ns/name", true }) do
        local ok, err = pcall(kinformer.key_of, bad)
        assert.is_false(ok)
        assert.matches("bad argument #1 to 'key_of'", err, 1, true)
      end
      local ok, err = pcall(kinformer.key_of)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'key_of'", err, 1, true)
    end)
  end)

  describe("split_key", function()
    it("splits namespace/name", function()
      local ns, name = kinformer.split_key("default/web-1")
      assert.equal("default", ns)
      assert.equal("web-1", name)
    end)

    it("gives an empty namespace for a bare name", function()
      local ns, name = kinformer.split_key("node-a")
      assert.equal("", ns)
      assert.equal("node-a", name)
    end)

    it("keeps empty parts around a single slash, as SplitMetaNamespaceKey does", function()
      local ns, name = kinformer.split_key("/b")
      assert.equal("", ns)
      assert.equal("b", name)
      ns, name = kinformer.split_key("a/")
      assert.equal("a", ns)
      assert.equal("", name)
    end)

    it("returns nil, err for a key with two or more slashes", function()
      for _, key in ipairs({ "a/b/c", "a//b", "//", "a/b/c/d" }) do
        local ns, err, code = kinformer.split_key(key)
        assert.is_nil(ns)
        assert.is_string(err)
        assert.equal("ENOKEY", code)
      end
    end)

    it("inverts key_of", function()
      for _, o in ipairs({ obj("a", "ns"), obj("b") }) do
        local ns, name = kinformer.split_key(kinformer.key_of(o))
        assert.equal(o.metadata.namespace or "", ns)
        assert.equal(o.metadata.name, name)
      end
    end)

    it("raises for a value that is not a string", function()
      assert.has_error(function() kinformer.split_key({}) end)
      assert.has_error(function() kinformer.split_key(nil) end)
    end)
  end)

  describe("tombstones", function()
    it("carry key and obj and are recognised by is_tombstone", function()
      local inner = obj("p", "ns")
      local t = kinformer.tombstone("ns/p", inner)
      assert.is_true(kinformer.is_tombstone(t))
      assert.equal("ns/p", t.key)
      assert.equal(inner, t.obj)
    end)

    it("may carry no object", function()
      local t = kinformer.tombstone("ns/p")
      assert.is_true(kinformer.is_tombstone(t))
      assert.is_nil(t.obj)
    end)

    it("are not confused with look-alike tables or other values", function()
      assert.is_false(kinformer.is_tombstone({ key = "ns/p", obj = obj("p", "ns") }))
      assert.is_false(kinformer.is_tombstone(obj("p", "ns")))
      assert.is_false(kinformer.is_tombstone(nil))
      assert.is_false(kinformer.is_tombstone("ns/p"))
    end)

    it("raise naming the argument for a bad key or object", function()
      local ok, err = pcall(kinformer.tombstone, {})
      assert.is_false(ok)
      assert.matches("#1", err, 1, true)
      ok, err = pcall(kinformer.tombstone, "ns/p", "not an object")
      assert.is_false(ok)
      assert.matches("bad argument #2 to 'tombstone'", err, 1, true)
    end)

    it("to_table copies one; an object that cannot be encoded raises at the caller's line", function()
      local copy = kinformer.to_table(kinformer.tombstone("ns/p", obj("p", "ns")))
      assert.same({ key = "ns/p", obj = obj("p", "ns") }, copy)
      assert.is_false(kinformer.is_tombstone(copy))
      local t = kinformer.tombstone("ns/p", { metadata = { name = "p" }, f = print })
      local line = debug.getinfo(1, "l").currentline
      local ok, err = pcall(function() kinformer.to_table(t) end)
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'to_table'", err, 1, true)
      assert.matches("keys_spec.lua:" .. line + 1 .. ":", err, 1, true)
    end)

    it("round-trip through a fifo with their key and last known object", function()
      local fifo = kinformer.delta_fifo()
      assert.is_true(fifo:add(obj("p", "ns")))
      assert.is_true(fifo:delete(kinformer.tombstone("ns/p", { metadata = { name = "p",
        namespace = "ns" }, v = 7 })))
      local deltas = fifo:pop()
      assert.equal(2, #deltas)
      local t = deltas[2].object
      assert.equal("Deleted", deltas[2].type)
      assert.is_true(kinformer.is_tombstone(t))
      assert.equal("ns/p", t.key)
      assert.equal(7, t.obj.v)
      assert.equal("ns/p", kinformer.key_of(t))
    end)
  end)
end)
