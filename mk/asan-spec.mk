# asan-spec.mk - the Lua module built with AddressSanitizer and UBSan, and the core specs run
# against it, so a memory error of the binding (a use after free, an overflow, undefined
# behaviour) fails `make test` instead of passing by luck.
#
#   make check-spec-asan     builds $(BUILD)/asan-lua5.4/kinformer/core.so and runs ASAN_SPECS
#                            with lua5.4 (spec/helper.lua loads that build: KINFORMER_BUILD)
#
# The module is built by gcc, whose sanitizer runtimes are shared libraries: the interpreter is not
# instrumented, so the ASan runtime is preloaded into it (LD_PRELOAD; it must come first), and
# libubsan comes in as a dependency of core.so. Every report aborts the run (-fno-sanitize-recover,
# halt_on_error, abort_on_error), so busted cannot count a spec as passed after one.
# Child processes the specs start (the fake API server, sh) inherit LD_PRELOAD: the runtime only
# intercepts malloc there. Leaks are not checked: the shells leak at exit (bash's own blocks,
# which would need suppressing), leak checking adds about half a minute, and the valgrind run of
# the core specs (mk/valgrind.mk) checks kinformer's definite leaks. (A run with detect_leaks=1
# found no leak in lua5.4 itself.)

ASAN_SPEC_CC    = gcc
ASAN_SPEC_FLAGS = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
COMPILE_asan-so     = $(ASAN_SPEC_CC) $(WARN) $(DEFS) -fPIC $(ASAN_SPEC_FLAGS)
COMPILE_asan-lua5.4 = $(COMPILE_asan-so) $(LUA54_CFLAGS)
$(foreach v,asan-so asan-lua5.4,$(eval $(call compile_rule,$v)))

ASAN_MODULE = $(BUILD)/asan-lua5.4/kinformer/core.so
$(ASAN_MODULE): $(call objects,asan-so,$(CORE_SRC)) $(call objects,asan-lua5.4,$(BIND_SRC)) mk/sources.mk
	@mkdir -p $(@D)
	$(ASAN_SPEC_CC) $(ASAN_SPEC_FLAGS) -shared -o $@ $(inputs) $(LIBS)

# The specs that drive the binding and the core: objects, store, queue, informer, shared cache,
# re-entry, and the client, its calls and the reflector with their I/O thread against the fake
# API server. About 50 s on the 2-core machine (informer and reflector take most of it), plus
# 10 s to build the module. Left out: metadata_spec (2 min here, and one test failed without a
# sanitizer report), http2_spec (over 5 min: nginx inherits the preloaded runtime) and
# fault_matrix_spec (70 s); they mostly drive child processes, not more of the binding.
ASAN_SPECS = spec/keys_spec.lua spec/decode_spec.lua spec/store_spec.lua spec/store_list_spec.lua \
             spec/delta_fifo_spec.lua spec/informer_spec.lua spec/workqueue_spec.lua \
             spec/shared_spec.lua spec/reentrancy_spec.lua spec/client_core_spec.lua \
             spec/rest_spec.lua spec/reflector_spec.lua spec/encode_spec.lua \
             spec/error_text_spec.lua spec/handler_reentrancy_spec.lua spec/hostile_input_spec.lua \
             spec/shared_memory_spec.lua spec/client_call_spec.lua spec/manager_concurrency_spec.lua \
             spec/object_rule_spec.lua

ASAN_SPEC_ENV = LD_PRELOAD="$$($(ASAN_SPEC_CC) -print-file-name=libasan.so)" \
    ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 KINFORMER_BUILD=asan-lua5.4

.PHONY: check-spec-asan asan-module
asan-module: $(ASAN_MODULE)
check-spec-asan: $(ASAN_MODULE)
	$(ASAN_SPEC_ENV) $(BUSTED) --helper=spec/helper.lua -o utfTerminal $(ASAN_SPECS)
