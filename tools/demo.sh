#!/usr/bin/env bash
# tools/demo.sh: what `make demo` runs (after installing packages and building).
#
# Starts the fake API server (tools/fake-apiserver) with a sample cluster and a churn generator,
# and runs examples/pod-watcher.lua against it for DEMO_SECONDS (default 20); Ctrl-C stops it
# sooner. The server is stopped on every way out (end, Ctrl-C, SIGTERM, error); it also exits by
# itself if this script is killed (--exit-with-parent).
#
# With KUBECONFIG set, no server is started: the watcher uses kinformer.client()'s default
# configuration (that cluster) instead.
#
# Environment: DEMO_SECONDS (20), DEMO_CHURN (writes/s, 5), DEMO_EVERY (summary period, 5),
# LUA (lua5.4; luajit works too).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${DEMO_SECONDS:-20}
churn=${DEMO_CHURN:-5}
every=${DEMO_EVERY:-5}
lua=${LUA:-lua5.4}
watcher=("$lua" "$root/examples/pod-watcher.lua" --seconds "$seconds" --every "$every")

if [ -n "${KUBECONFIG:-}" ]; then
    echo "demo: KUBECONFIG is set: watching that cluster for $seconds s (Ctrl-C stops)"
    unset KINFORMER_SERVER
    exec "${watcher[@]}"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kinformer-demo.XXXXXX")
server_pid=

cleanup() {
    if [ -n "$server_pid" ]; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        echo "demo: fake API server (pid $server_pid) stopped"
    fi
    rm -rf "$tmp"
}
watcher_pid=

# Ctrl-C reaches the watcher from the terminal too (same process group): give it a moment to print
# its last summary. A signal sent to this script alone is passed on to the watcher as SIGTERM.
stop_watcher() {
    [ -n "$watcher_pid" ] || return 0
    local grace=$1
    for _ in $(seq $((grace * 10))); do
        kill -0 "$watcher_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -TERM "$watcher_pid" 2>/dev/null || true
    wait "$watcher_pid" 2>/dev/null && rc=0 || rc=$?
    watcher_pid=
}
# Ctrl-C is the documented way to end the demo early: the exit status is then the watcher's.
rc=130
trap cleanup EXIT
trap 'stop_watcher 3; exit "$rc"' INT
trap 'stop_watcher 0; exit 143' TERM
trap 'stop_watcher 0; exit 129' HUP

: >"$tmp/url"
python3 "$root/tools/fake-apiserver/server.py" --sample-cluster --churn "$churn" \
    --exit-with-parent >"$tmp/url" 2>"$tmp/server.log" &
server_pid=$!

# The server prints its URL as the first line of stdout once it listens.
url=
for _ in $(seq 100); do
    url=$(head -n 1 "$tmp/url" 2>/dev/null || true)
    [ -n "$url" ] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "demo: the fake API server did not start:" >&2
        cat "$tmp/server.log" >&2
        exit 1
    fi
    sleep 0.1
done
if [ -z "$url" ]; then
    echo "demo: the fake API server printed no URL within 10 s" >&2
    exit 1
fi

echo "demo: fake API server (pid $server_pid) at $url: sample cluster, $churn writes/s of churn"
echo "demo: examples/pod-watcher.lua for $seconds s (Ctrl-C stops)"
# In the background so that `wait` (unlike a foreground command) lets the traps above run at once.
KINFORMER_SERVER=$url "${watcher[@]}" &
watcher_pid=$!
wait "$watcher_pid" && rc=0 || rc=$?
watcher_pid=
exit "$rc"
