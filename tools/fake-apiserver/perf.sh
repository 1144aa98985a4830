#!/bin/sh
# Measure the fake API server itself (docs/fake-apiserver.md, "Performance"):
# start-up with N pods, the curl floor of a full list, WatchList initial events, a live
# 200k-event stream, its replay from history, and a held-back burst released at once.
#   tools/fake-apiserver/perf.sh [PODS] [EVENTS]     (defaults 100000 200000)
set -eu
PODS=${1:-100000}
EVENTS=${2:-200000}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$(mktemp)
trap 'kill $PID 2>/dev/null; rm -f "$OUT"' EXIT INT TERM

now() { python3 -c 'import time; print(time.time())'; }
info_rv() { curl -s "$URL/_fake/info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["resourceVersion"])'; }

T0=$(now)
python3 "$HERE/server.py" --pods "$PODS" --history $((EVENTS + 50000)) > "$OUT" &
PID=$!
while [ ! -s "$OUT" ]; do sleep 0.05; done
URL=$(head -1 "$OUT")
echo "start-up with $PODS pods: $(python3 -c "print('%.2f s' % ($(now) - $T0))"), RSS $(($(ps -o rss= -p $PID) / 1024)) MB"

for i in 1 2 3; do
  curl -s -o /dev/null -w "full list: %{size_download} bytes in %{time_total} s\n" "$URL/api/v1/pods"
done
python3 "$HERE/watch_rate.py" "$URL" \
  "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true" \
  "$PODS" | sed 's/^/WatchList initial events: /'

RV=$(info_rv)
python3 "$HERE/watch_rate.py" "$URL" "/api/v1/pods?watch=1&resourceVersion=$RV" "$EVENTS" \
  | sed 's/^/live stream during \/_fake\/modify: /' &
WPID=$!
sleep 0.3
T1=$(now)
curl -s -o /dev/null -X POST "$URL/_fake/modify" -d "{\"resource\":\"pods\",\"count\":$EVENTS}"
echo "/_fake/modify of $EVENTS: $(python3 -c "print('%.2f s' % ($(now) - $T1))")"
wait $WPID
for i in 1 2 3; do
  python3 "$HERE/watch_rate.py" "$URL" "/api/v1/pods?watch=1&resourceVersion=$RV" "$EVENTS" \
    | sed 's/^/replay from history: /'
done

T1=$(now)
curl -s -o /dev/null -X POST "$URL/_fake/modify" -d "{\"resource\":\"pods\",\"count\":$EVENTS,\"hold\":true}"
echo "/_fake/modify of $EVENTS held back: $(python3 -c "print('%.2f s' % ($(now) - $T1))")"
RV=$(info_rv)
python3 "$HERE/watch_rate.py" "$URL" "/api/v1/pods?watch=1&resourceVersion=$RV" "$EVENTS" > "$OUT.burst" &
WPID=$!
sleep 0.5
T1=$(now)
curl -s -o /dev/null -X POST "$URL/_fake/release"
wait $WPID
python3 -c "print('burst after /_fake/release: %d events in %.3f s: %.0f events/s' % ($EVENTS, $(now) - $T1, $EVENTS / ($(now) - $T1)))"
rm -f "$OUT.burst"
