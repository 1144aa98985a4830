# The C sources of kinformer.core, one a line: the only list of them. The Makefile builds the
# module, the C tests, the fuzzers and the benches from it; spec/rockspec_spec.lua checks that the
# rockspec's kinformer.core sources are the same files.

# The Lua-free core: one file per concept.
CORE_SRC += csrc/kinf.c
CORE_SRC += csrc/object.c
CORE_SRC += csrc/grow_ahead.c
CORE_SRC += csrc/map.c
CORE_SRC += csrc/ring.c
CORE_SRC += csrc/store.c
CORE_SRC += csrc/store_read.c
CORE_SRC += csrc/store_select.c
CORE_SRC += csrc/index.c
CORE_SRC += csrc/delta_fifo.c
CORE_SRC += csrc/jsonscan.c
CORE_SRC += csrc/jsonspan.c
CORE_SRC += csrc/labelselector.c
CORE_SRC += csrc/labelmatch.c
CORE_SRC += csrc/informer.c
CORE_SRC += csrc/pipe.c
CORE_SRC += csrc/client.c
CORE_SRC += csrc/client_transport.c
CORE_SRC += csrc/request.c
CORE_SRC += csrc/call.c
CORE_SRC += csrc/reflector.c
CORE_SRC += csrc/reflector_list.c
CORE_SRC += csrc/reflector_watch.c
CORE_SRC += csrc/reflector_report.c
CORE_SRC += csrc/backoff.c
CORE_SRC += csrc/query.c
CORE_SRC += csrc/credentials.c
CORE_SRC += csrc/exec_credential.c csrc/exec_credential_json.c
CORE_SRC += csrc/warning.c
CORE_SRC += csrc/impersonate.c
CORE_SRC += csrc/shm.c
CORE_SRC += csrc/shm_map.c
CORE_SRC += csrc/shm_log.c
CORE_SRC += csrc/shm_store.c
CORE_SRC += csrc/shm_index.c
CORE_SRC += csrc/shm_recover.c

# The binding: the only files that include lua.h.
BIND_SRC += csrc/lua_core.c
BIND_SRC += csrc/lua_object.c
BIND_SRC += csrc/lua_lazy.c
BIND_SRC += csrc/lua_guard.c
BIND_SRC += csrc/lua_decode.c
BIND_SRC += csrc/lua_encode.c
BIND_SRC += csrc/lua_store.c
BIND_SRC += csrc/lua_store_index.c
BIND_SRC += csrc/lua_store_query.c
BIND_SRC += csrc/lua_results.c
BIND_SRC += csrc/lua_fifo.c
BIND_SRC += csrc/lua_client.c
BIND_SRC += csrc/lua_call.c
BIND_SRC += csrc/lua_ring.c
BIND_SRC += csrc/lua_informer.c
BIND_SRC += csrc/lua_shared.c
BIND_SRC += csrc/lua_shared_reader.c
BIND_SRC += csrc/lua_shared_poll.c
BIND_SRC += csrc/lua_mirror.c
BIND_SRC += csrc/lua_shm_named.c
