# soak.mk - a long run of an informer against the fake API server with churn and random faults
# (tools/soak.lua): `make soak SOAK_SECONDS=600`.
SOAK_SECONDS ?= 600
SOAK_PODS ?= 2000
SOAK_WATCH_LIST ?=
.PHONY: soak
soak: all
	$(LUA) tools/soak.lua $(SOAK_SECONDS) $(SOAK_PODS) $(if $(SOAK_WATCH_LIST),watchlist)

# The shared cache's memory under a longer churn at the documented size (tools/shared_soak.lua):
# `make soak-shared SOAK_SHARED_ROUNDS=50`.
SOAK_SHARED_OBJECTS ?= 2000
SOAK_SHARED_ROUNDS ?= 50
.PHONY: soak-shared
soak-shared: lua54
	LUA_PATH='lua/?.lua;lua/?/init.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;' $(LUA) tools/shared_soak.lua $(SOAK_SHARED_OBJECTS) $(SOAK_SHARED_ROUNDS)

# The writer killed at a random step many more times than the default suite does
# (csrc/test/test_shm_crash.c): `make soak-crash SOAK_CRASH_TRIALS=20000`.
SOAK_CRASH_TRIALS ?= 20000
.PHONY: soak-crash
soak-crash: $(BUILD)/asan/test_shm_crash
	KINF_CRASH_TRIALS=$(SOAK_CRASH_TRIALS) $(BUILD)/asan/test_shm_crash

# Stray writes into a populated shared segment many more times than the default suite does
# (csrc/test/test_shm_corrupt.c): `make soak-corrupt SOAK_CORRUPT_TRIALS=20000`.
SOAK_CORRUPT_TRIALS ?= 20000
.PHONY: soak-corrupt
soak-corrupt: $(BUILD)/asan/test_shm_corrupt
	KINF_CORRUPT_TRIALS=$(SOAK_CORRUPT_TRIALS) $(BUILD)/asan/test_shm_corrupt
