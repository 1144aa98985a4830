-- From the repository root:
--   luarocks --lua-version=5.4 make --local rockspec/kinformer-scm-1.rockspec
-- builds the C module against the system's libcurl and installs lua-cjson and lyaml from
-- luarocks.org when they are missing (lyaml builds against libyaml). Offline, with the Lua
-- packages from the system (Debian: lua-cjson, lua-yaml), add --deps-mode=none.
-- The C sources below are mk/sources.mk's list (spec/rockspec_spec.lua checks that they agree).
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
functions. Needs libcurl; reads kubeconfig files with lyaml.
]],
  license = "Apache-2.0",
}
dependencies = {
  "lua >= 5.1",
  "lua-cjson",
  "lyaml",
  "luasocket", -- kinformer.metrics's server only (Debian: lua-socket)
}
-- Only the library is checked: Debian and Ubuntu install curl/curl.h under
-- /usr/include/<multiarch>/, where LuaRocks looks for libraries but not for headers, and the
-- compiler finds it there anyway.
external_dependencies = {
  CURL = { library = "curl" },
}
build = {
  type = "builtin",
  modules = {
    ["kinformer"] = "lua/kinformer/init.lua",
    ["kinformer.resources"] = "lua/kinformer/resources.lua",
    ["kinformer.discovery"] = "lua/kinformer/discovery.lua",
    ["kinformer.config"] = "lua/kinformer/config.lua",
    ["kinformer.config.kubeconfig"] = "lua/kinformer/config/kubeconfig.lua",
    ["kinformer.config.incluster"] = "lua/kinformer/config/incluster.lua",
    ["kinformer.config.exec"] = "lua/kinformer/config/exec.lua",
    ["kinformer.config.yaml"] = "lua/kinformer/config/yaml.lua",
    ["kinformer.config.util"] = "lua/kinformer/config/util.lua",
    ["kinformer.config.impersonation"] = "lua/kinformer/config/impersonation.lua",
    ["kinformer.base64"] = "lua/kinformer/base64.lua",
    ["kinformer.informer"] = "lua/kinformer/informer.lua",
    ["kinformer.workqueue"] = "lua/kinformer/workqueue.lua",
    ["kinformer.workqueue.ratelimiter"] = "lua/kinformer/workqueue/ratelimiter.lua",
    ["kinformer.workqueue.heap"] = "lua/kinformer/workqueue/heap.lua",
    ["kinformer.workqueue.map"] = "lua/kinformer/workqueue/map.lua",
    ["kinformer.workqueue.ready"] = "lua/kinformer/workqueue/ready.lua",
    ["kinformer.argcheck"] = "lua/kinformer/argcheck.lua",
    ["kinformer.errtext"] = "lua/kinformer/errtext.lua",
    ["kinformer.clock"] = "lua/kinformer/clock.lua",
    ["kinformer.task"] = "lua/kinformer/task.lua",
    ["kinformer.sharding"] = "lua/kinformer/sharding.lua",
    ["kinformer.ryow"] = "lua/kinformer/ryow.lua",
    ["kinformer.rbac"] = "lua/kinformer/rbac.lua",
    ["kinformer.flowcontrol"] = "lua/kinformer/flowcontrol.lua",
    ["kinformer.rest"] = "lua/kinformer/rest.lua",
    ["kinformer.leaderelection"] = "lua/kinformer/leaderelection.lua",
    ["kinformer.manager"] = "lua/kinformer/manager.lua",
    ["kinformer.manager.schedule"] = "lua/kinformer/manager/schedule.lua",
    ["kinformer.manager.lifecycle"] = "lua/kinformer/manager/lifecycle.lua",
    ["kinformer.controller"] = "lua/kinformer/controller.lua",
    ["kinformer.context"] = "lua/kinformer/context.lua",
    ["kinformer.predicates"] = "lua/kinformer/predicates.lua",
    ["kinformer.events"] = "lua/kinformer/events.lua",
    ["kinformer.objects"] = "lua/kinformer/objects.lua",
    ["kinformer.ngx"] = "lua/kinformer/ngx.lua",
    ["kinformer.ngx.process"] = "lua/kinformer/ngx/process.lua",
    ["kinformer.ngx.view"] = "lua/kinformer/ngx/view.lua",
    ["kinformer.ngx.status"] = "lua/kinformer/ngx/status.lua",
    ["kinformer.ngx.shared"] = "lua/kinformer/ngx/shared.lua",
    ["kinformer.ngx.metrics"] = "lua/kinformer/ngx/metrics.lua",
    ["kinformer.ngx.balancer"] = "lua/kinformer/ngx/balancer.lua",
    ["kinformer.ngx.balancer.endpoints"] = "lua/kinformer/ngx/balancer/endpoints.lua",
    ["kinformer.ngx.balancer.chash"] = "lua/kinformer/ngx/balancer/chash.lua",
    ["kinformer.ngx.balancer.services"] = "lua/kinformer/ngx/balancer/services.lua",
    ["kinformer.ngx.balancer.status"] = "lua/kinformer/ngx/balancer/status.lua",
    ["kinformer.ngx.balancer.peers"] = "lua/kinformer/ngx/balancer/peers.lua",
    ["kinformer.metrics"] = "lua/kinformer/metrics.lua",
    ["kinformer.metrics.collectors"] = "lua/kinformer/metrics/collectors.lua",
    ["kinformer.httpserver"] = "lua/kinformer/httpserver.lua",
    ["kinformer.testing"] = "lua/kinformer/testing.lua",
    ["kinformer.core"] = {
      sources = {
        "csrc/kinf.c", "csrc/object.c", "csrc/grow_ahead.c", "csrc/map.c", "csrc/ring.c", "csrc/index.c", "csrc/store.c", "csrc/store_read.c", "csrc/store_select.c",
        "csrc/delta_fifo.c",
        "csrc/jsonscan.c", "csrc/client.c", "csrc/client_transport.c", "csrc/request.c", "csrc/call.c",
        "csrc/reflector.c", "csrc/reflector_list.c", "csrc/reflector_watch.c",
        "csrc/reflector_report.c", "csrc/backoff.c", "csrc/query.c", "csrc/jsonspan.c",
        "csrc/labelselector.c", "csrc/labelmatch.c", "csrc/informer.c", "csrc/pipe.c",
        "csrc/credentials.c", "csrc/exec_credential.c", "csrc/exec_credential_json.c",
        "csrc/warning.c",
        "csrc/impersonate.c", "csrc/shm.c", "csrc/shm_map.c", "csrc/shm_log.c",
        "csrc/shm_store.c", "csrc/shm_index.c", "csrc/shm_recover.c",
        "csrc/lua_core.c", "csrc/lua_object.c", "csrc/lua_lazy.c", "csrc/lua_guard.c", "csrc/lua_decode.c",
        "csrc/lua_encode.c",
        "csrc/lua_store.c", "csrc/lua_store_index.c", "csrc/lua_store_query.c", "csrc/lua_results.c",
        "csrc/lua_fifo.c", "csrc/lua_client.c", "csrc/lua_call.c", "csrc/lua_ring.c",
        "csrc/lua_informer.c", "csrc/lua_shared.c", "csrc/lua_shared_reader.c",
        "csrc/lua_shared_poll.c",
        "csrc/lua_mirror.c", "csrc/lua_shm_named.c",
      },
      defines = { "_POSIX_C_SOURCE=200809L", "_DEFAULT_SOURCE" },
      incdirs = { "csrc", "$(CURL_INCDIR)" },
      libdirs = { "$(CURL_LIBDIR)" },
      libraries = { "pthread", "curl" },
    },
  },
  -- kinformer.testing's fake API server (Python 3, standard library only): the whole directory
  -- goes into the rock's own directory (<tree>/lib/luarocks/rocks-<lua>/kinformer/<version>/),
  -- where kinformer.testing finds it, and a command that runs it into the tree's bin.
  copy_directories = { "tools/fake-apiserver" },
  install = {
    bin = { ["kinformer-rbac"] = "bin/kinformer-rbac",
            ["kinformer-fake-apiserver"] = "tools/fake-apiserver/kinformer-fake-apiserver" },
  },
}
