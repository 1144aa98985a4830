-- kinformer.core.client(opts [, from_config]): a bad option value raises at the caller's line
-- when opts are the caller's arguments, and is returned as nil, message, "EINVAL" when they
-- come from a kubeconfig (from_config): there they are data, not arguments. A wrong opts type
-- or an unknown option name is the calling code's mistake and raises either way.
local core = require "kinformer.core"

local BAD_VALUES = {
  { server = "https://127.0.0.1:1", token = 42 },
  { server = "ftp://example" },
  { token = "no server" },
  { server = "https://127.0.0.1:1", connect_timeout = -1 },
  { server = "https://127.0.0.1:1", insecure_skip_tls_verify = "yes" },
  { server = "https://127.0.0.1:1", exec = { args = { "no command" } } },
  { server = "https://127.0.0.1:1", exec = { command = "x", env = { 1 } } },
}

describe("core.client", function()
  it("as arguments: a bad value raises naming argument #1 at the caller's line", function()
    for _, opts in ipairs(BAD_VALUES) do
      local line = debug.getinfo(1, "l").currentline
      local ok, err = pcall(function() core.client(opts) end) -- a statement: no tail call
      assert.is_false(ok)
      assert.matches("bad argument #1 to 'client'", err, 1, true)
      assert.matches("client_core_spec.lua:" .. line + 1 .. ":", err, 1, true)
    end
  end)

  it("from a config: a bad value returns nil, message, \"EINVAL\"", function()
    for _, opts in ipairs(BAD_VALUES) do
      local c, err, code = core.client(opts, true)
      assert.is_nil(c)
      assert.is_string(err)
      assert.equal("EINVAL", code)
    end
  end)

  it("from a config: a wrong opts type or an unknown option still raises", function()
    assert.has_error(function() core.client("https://127.0.0.1:1", true) end)
    assert.has_error(function() core.client(nil, true) end)
    local ok, err = pcall(core.client, { server = "https://127.0.0.1:1", bogus = 1 }, true)
    assert.is_false(ok)
    assert.matches("bad argument #1 to 'client'", err, 1, true)
    assert.has_error(function()
      core.client({ server = "https://127.0.0.1:1", exec = { command = "x", bogus = 1 } }, true)
    end)
  end)

  it("good options make a client either way", function()
    for _, from_config in ipairs({ false, true }) do
      local c = core.client({ server = "https://127.0.0.1:1", token = "t" }, from_config)
      assert.equal("https://127.0.0.1:1", c:server())
    end
  end)
end)
