-- Builds offline from a checkout: luarocks --lua-version=5.4 make --local rockspec/kinformer-scm-1.rockspec
-- (run from the repository root). Runtime dependencies: lua-cjson (Debian: lua-cjson) and, to
-- read kubeconfig files, lyaml (Debian: lua-yaml); they are not declared below so that an
-- offline build with Debian-installed packages works.
rockspec_format = "3.0"
package = "kinformer"
version = "scm-1"
source = {
  url = "git+https://example.invalid/kinformer.git",
}
description = {
  summary = "Kubernetes informers (client-go tools/cache) for Lua 5.4 and OpenResty",
  detailed = [[
A C core implements the reflector (list + watch with libcurl), the DeltaFIFO and the
thread-safe indexed store; Lua scripts register on_add/on_update/on_delete handlers and index
functions. Requires lua-cjson at run time.
]],
  license = "Apache-2.0",
}
dependencies = {
  "lua >= 5.1",
}
build = {
  type = "builtin",
  modules = {
    ["kinformer"] = "lua/kinformer/init.lua",
    ["kinformer.resources"] = "lua/kinformer/resources.lua",
    ["kinformer.config"] = "lua/kinformer/config.lua",
    ["kinformer.informer"] = "lua/kinformer/informer.lua",
    ["kinformer.workqueue"] = "lua/kinformer/workqueue.lua",
    ["kinformer.rest"] = "lua/kinformer/rest.lua",
    ["kinformer.leaderelection"] = "lua/kinformer/leaderelection.lua",
    ["kinformer.ngx"] = "lua/kinformer/ngx.lua",
    ["kinformer.core"] = {
      sources = {
        "csrc/kinf.c", "csrc/object.c", "csrc/map.c", "csrc/store.c", "csrc/delta_fifo.c",
        "csrc/jsonscan.c", "csrc/client.c", "csrc/client_transport.c", "csrc/request.c",
        "csrc/reflector.c", "csrc/reflector_list.c", "csrc/reflector_watch.c",
        "csrc/reflector_report.c", "csrc/backoff.c", "csrc/query.c", "csrc/jsonspan.c",
        "csrc/informer.c", "csrc/pipe.c",
        "csrc/credentials.c",
        "csrc/lua_core.c", "csrc/lua_decode.c", "csrc/lua_store.c", "csrc/lua_fifo.c", "csrc/lua_client.c",
        "csrc/lua_informer.c",
      },
      defines = { "_POSIX_C_SOURCE=200809L", "_DEFAULT_SOURCE" },
      incdirs = { "csrc" },
      libraries = { "pthread", "curl" },
    },
  },
}
