# kinformer build. `make` builds kinformer.core for Lua 5.4 (and LuaJIT 2.1 when its headers are
# installed); `make test` installs missing Debian packages, builds, runs the C tests under
# sanitizers, the busted specs, and the core specs again against the module built with
# AddressSanitizer and UBSan (mk/asan-spec.mk) and under valgrind (mk/valgrind.mk). The C sources are listed once, in mk/sources.mk; the other
# fragments in mk/*.mk add tests and targets of their own.

SHELL    := /bin/bash
CC       ?= cc
CFLAGS   ?= -O2 -g
WARN      = -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter
DEFS      = -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE
BUILD     = build
LUA       = lua5.4
BUSTED    = $(LUA) /usr/bin/busted

LUA54_CFLAGS  := $(shell pkg-config --cflags lua5.4 2>/dev/null)
LUAJIT_CFLAGS := $(shell pkg-config --cflags luajit 2>/dev/null)
CURL_LIBS     := $(shell pkg-config --libs libcurl 2>/dev/null || echo -lcurl)
LIBS           = -lpthread $(CURL_LIBS)

.PHONY: all lua54 luajit deps test test-c test-spec check-sanitize clean
all: lua54 $(if $(LUAJIT_CFLAGS),luajit)

include mk/sources.mk

# C tests: csrc/test/test_NAME.c for each NAME, and jsonscan_scalar (mk/jsonscan.mk: the same test
# against the scanner built without SSE2).
CTESTS = $(patsubst csrc/test/test_%.c,%,$(wildcard csrc/test/test_*.c)) jsonscan_scalar

# Objects. A build variant V compiles csrc/NAME.c once, with the command COMPILE_V, into
# $(BUILD)/V/obj/NAME.o, and -MMD -MP records the headers it read in NAME.d (included at the
# end), so a changed header rebuilds exactly the files that include it. Programs link their
# variant's core archive, $(BUILD)/V/libkinf.a, which brings in only the objects they use.
# What links a list of objects also depends on mk/sources.mk, so dropping a file relinks it.
objects = $(patsubst csrc/%.c,$(BUILD)/$1/obj/%.o,$2)
# What a link reads from its prerequisites (a program's NAME.d adds the headers of its main file).
inputs = $(filter %.c %.o %.a,$^)

define compile_rule
$(BUILD)/$1/obj/%.o: csrc/%.c
	@mkdir -p $$(@D)
	$$(COMPILE_$1) -MMD -MP -c -o $$@ $$<
endef

define core_archive
$(BUILD)/$1/libkinf.a: $(call objects,$1,$(CORE_SRC)) mk/sources.mk
	@rm -f $$@
	$$(AR) rcs $$@ $$(inputs)
endef

# The module: the core is compiled once for both Lua builds (it never includes lua.h), the binding
# once per Lua against that Lua's headers.
COMPILE_so     = $(CC) $(WARN) $(DEFS) $(CFLAGS) -fPIC
COMPILE_lua5.4 = $(COMPILE_so) $(LUA54_CFLAGS)
COMPILE_luajit = $(COMPILE_so) $(LUAJIT_CFLAGS)
$(foreach v,so lua5.4 luajit,$(eval $(call compile_rule,$v)))
LINK_so = $(CC) $(CFLAGS) -shared -o $@ $(inputs) $(LIBS)

lua54: $(BUILD)/lua5.4/kinformer/core.so
luajit: $(BUILD)/luajit/kinformer/core.so

$(BUILD)/lua5.4/kinformer/core.so: $(call objects,so,$(CORE_SRC)) $(call objects,lua5.4,$(BIND_SRC)) mk/sources.mk
	@mkdir -p $(@D)
	$(LINK_so)
$(BUILD)/luajit/kinformer/core.so: $(call objects,so,$(CORE_SRC)) $(call objects,luajit,$(BIND_SRC)) mk/sources.mk
	@mkdir -p $(@D)
	$(LINK_so)

# Debian packages the project needs; installed only when one is missing.
DEB_PKGS = build-essential pkg-config lua5.4 liblua5.4-dev libcurl4-openssl-dev lua-cjson \
           lua-busted luarocks lua-yaml lua-socket luajit2 libluajit2-5.1-dev nginx \
           libnginx-mod-http-lua lua-resty-core python3 valgrind clang libclang-rt-14-dev \
           openssl curl wrk prometheus
deps:
	@missing=$$(for p in $(DEB_PKGS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | \
	    grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "installing:" $$missing; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@command -v kubectl >/dev/null || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kubernetes-client; }

# The whole suite. Output is kept in $(BUILD)/test-*.log and summed up in one closing line (the
# re-runs of the core specs under ASan+UBSan, mk/asan-spec.mk, and under valgrind, mk/valgrind.mk,
# must be clean; each reports one line and is not counted twice). Those two re-runs are
# independent (their own build, their own servers on free ports) and run side by side.
test: deps
	@mkdir -p $(BUILD)
	@$(MAKE) --no-print-directory all
	@set -o pipefail 2>/dev/null; rc=0; \
	$(MAKE) --no-print-directory check-sanitize 2>&1 | tee $(BUILD)/test-c.log || rc=1; \
	$(MAKE) --no-print-directory test-spec 2>&1 | tee $(BUILD)/test-spec.log || rc=1; \
	( $(MAKE) --no-print-directory check-spec-asan > $(BUILD)/test-spec-asan.log 2>&1; \
	  echo $$? > $(BUILD)/test-spec-asan.rc ) & \
	( $(MAKE) --no-print-directory check-valgrind > $(BUILD)/test-valgrind.log 2>&1; \
	  echo $$? > $(BUILD)/test-valgrind.rc ) & \
	wait; \
	if [ "$$(cat $(BUILD)/test-spec-asan.rc)" = 0 ]; then \
	    echo "asan+ubsan: the core specs ran clean ($$(grep -o '[0-9]* successes\?' \
	        $(BUILD)/test-spec-asan.log | tail -1); $(BUILD)/test-spec-asan.log)"; \
	else rc=1; grep -m1 -A40 'ERROR: AddressSanitizer\|runtime error:' $(BUILD)/test-spec-asan.log \
	    || tail -40 $(BUILD)/test-spec-asan.log; echo "asan+ubsan: FAILED"; fi; \
	if [ "$$(cat $(BUILD)/test-valgrind.rc)" = 0 ]; then \
	    echo "valgrind: the core specs ran clean ($(BUILD)/test-valgrind.log)"; \
	else rc=1; tail -40 $(BUILD)/test-valgrind.log; echo "valgrind: FAILED"; fi; \
	tools/test-summary.sh $(BUILD)/test-c.log $(BUILD)/test-spec.log; exit $$rc

# C unit tests: $(BUILD)/asan/test_NAME (AddressSanitizer+UBSan) and $(BUILD)/tsan/test_NAME
# (ThreadSanitizer, clang) for each NAME in CTESTS, each linked with the core built under the same
# sanitizer. Each prints "N passed, N failed".
SAN_CC    = clang
ASAN_FLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
TSAN_FLAGS = -O1 -g -fsanitize=thread
COMPILE_asan = $(SAN_CC) $(WARN) $(DEFS) -Icsrc $(ASAN_FLAGS)
COMPILE_tsan = $(SAN_CC) $(WARN) $(DEFS) -Icsrc $(TSAN_FLAGS)
$(foreach v,asan tsan,$(eval $(call compile_rule,$v))$(eval $(call core_archive,$v)))
ASAN_BINS = $(CTESTS:%=$(BUILD)/asan/test_%)
TSAN_BINS = $(CTESTS:%=$(BUILD)/tsan/test_%)

$(BUILD)/asan/test_%: csrc/test/test_%.c $(BUILD)/asan/libkinf.a
	$(COMPILE_asan) -MMD -MP -o $@ $(inputs) $(LIBS)
$(BUILD)/tsan/test_%: csrc/test/test_%.c $(BUILD)/tsan/libkinf.a
	$(COMPILE_tsan) -MMD -MP -o $@ $(inputs) $(LIBS)

check-sanitize: $(ASAN_BINS) $(TSAN_BINS)
	@set -e; for t in $(ASAN_BINS); do echo "== $$t (asan+ubsan)"; \
	    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 $$t; done
	@set -e; for t in $(TSAN_BINS); do echo "== $$t (tsan)"; TSAN_OPTIONS=halt_on_error=1 $$t; done

test-c: check-sanitize

# Specs run under Lua 5.4; SPEC=spec/x_spec.lua runs one file.
SPEC ?= spec
test-spec: all
	$(BUSTED) --helper=spec/helper.lua -o utfTerminal $(SPEC)
	$(if $(and $(LUAJIT_CFLAGS),$(filter spec,$(SPEC))),busted --lua=luajit --helper=spec/helper.lua -o utfTerminal $(SPEC_LUAJIT))

# The specs that also run on LuaJIT (the OpenResty build) in `make test`.
SPEC_LUAJIT = spec/keys_spec.lua spec/decode_spec.lua spec/encode_spec.lua spec/store_spec.lua \
              spec/store_list_spec.lua spec/delta_fifo_spec.lua \
              spec/informer_spec.lua spec/workqueue_spec.lua spec/config_spec.lua spec/tls_spec.lua \
              spec/rest_spec.lua spec/leaderelection_spec.lua spec/discovery_spec.lua \
              spec/metadata_spec.lua spec/shared_spec.lua spec/error_text_spec.lua \
              spec/reentrancy_spec.lua spec/handler_reentrancy_spec.lua spec/client_call_spec.lua \
              spec/manager_concurrency_spec.lua spec/object_rule_spec.lua

# The demo: the fake API server (sample cluster, churn) watched by examples/pod-watcher.lua for
# DEMO_SECONDS; Ctrl-C stops it sooner. With KUBECONFIG set it watches that cluster (tools/demo.sh).
DEMO_SECONDS ?= 20
demo: deps
	@$(MAKE) --no-print-directory -s all
	@DEMO_SECONDS='$(DEMO_SECONDS)' LUA='$(LUA)' tools/demo.sh
.PHONY: demo

clean:
	rm -rf $(BUILD)

# Baseline benchmarks of the core (results table: bench/README.md). bench/NAME_bench.c is linked
# with the core built as a plain optimised program (no PIC, no sanitizer).
COMPILE_bench = $(CC) $(WARN) $(DEFS) -O2 -g -Icsrc
$(eval $(call compile_rule,bench))
$(eval $(call core_archive,bench))
$(BUILD)/bench/%_bench: bench/%_bench.c $(BUILD)/bench/libkinf.a
	$(COMPILE_bench) -MMD -MP -o $@ $(inputs) $(LIBS)

BENCH_N ?= 100000
bench-core: lua54 $(BUILD)/bench/fifo_bench
	$(BUILD)/bench/fifo_bench 1000000
	$(BUILD)/bench/fifo_bench 1000000 1000
	LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) bench/store_bench.lua $(BENCH_N)
.PHONY: bench-core
# Reads of a 100k-object store on Lua 5.4 and on LuaJIT (no server): bench/lookups_bench.lua.
bench-lookups: all
	LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) bench/lookups_bench.lua $(BENCH_N)
	$(if $(LUAJIT_CFLAGS),LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/luajit/?.so;;' luajit bench/lookups_bench.lua $(BENCH_N))
.PHONY: bench-lookups
# The shared cache's writer as one index value grows to 100k objects: bench/shared_writes_bench.lua.
bench-shared-writes: lua54
	LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) bench/shared_writes_bench.lua
.PHONY: bench-shared-writes
bench-reflector: lua54
	LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) bench/reflector_bench.lua $(BENCH_PODS) $(BENCH_EVENTS)
BENCH_PODS ?= 100000
BENCH_EVENTS ?= 200000
.PHONY: bench-reflector
# Lists with and without gzip on loopback and shaped links (network namespaces: needs root).
bench-gzip: lua54
	LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) bench/gzip_bench.lua $(BENCH_GZIP_PODS)
BENCH_GZIP_PODS ?= 10000
.PHONY: bench-gzip
# Connections a client opens through nginx (TLS HTTP/2 and plain HTTP/1.1).
bench-connections: lua54
	LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) bench/connections_bench.lua
.PHONY: bench-connections

include $(filter-out mk/sources.mk,$(wildcard mk/*.mk))

-include $(wildcard $(BUILD)/*/obj/*.d $(BUILD)/*/*.d)
