#!/bin/sh
# bench/names.sh: the cost of many mapped names (issue 14), what
# `make bench-names` runs once everything is built. Starts a private
# redis-server (tools/redis-tmp.sh), runs bench/names.c under the shim with a
# config that maps nothing by itself (the program names its heap mutexes with
# dmutex_name), prints its JSON lines and a summary against the targets.
#
#   bench/names.sh                       N = 10, 1000, 100000; churn 100000
#   NAMES_LIVE="10 1000" NAMES_CHURN=20000 bench/names.sh   a shorter run
#   NAMES_SHIM=/path/to/libdmutex.so bench/names.sh         another build
set -eu
cd "$(dirname "$0")/.."
shim=${NAMES_SHIM:-$PWD/build/libdmutex.so}
for f in "$shim" build/bench/names; do
    [ -f "$f" ] || { echo "bench: $f is missing: run make bench-names" >&2; exit 1; }
done
live=${NAMES_LIVE:-"10 1000 100000"}
churn=${NAMES_CHURN:-100000}

. tools/redis-tmp.sh
tmp=$(mktemp -d)
trap 'redis_tmp_stop; rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
redis_tmp_start || exit 1
printf 'lease_ms = 30000;\nmutexes = ();\n' > "$tmp/names.cfg"
run() {
    LD_PRELOAD=$shim DMUTEX_CONFIG="$tmp/names.cfg" \
        DMUTEX_REDIS="redis://127.0.0.1:$REDIS_TMP_PORT" build/bench/names "$REDIS_TMP_PORT" "$@"
}
# shellcheck disable=SC2086
run live $live | tee "$tmp/live.json"
run churn "$churn" | tee "$tmp/churn.json"
/usr/bin/python3 - "$tmp/live.json" "$tmp/churn.json" <<'PY'
import json, sys
live = [json.loads(l) for l in open(sys.argv[1])]
churn = [json.loads(l) for l in open(sys.argv[2])]
base = live[0]
print("\nnames: lock+unlock median: wall, in PINGs timed just before, and the thread's CPU;"
      " RSS per idle name")
print("  targets: pair at most x1.2 that with N=%d; RSS per name at most 1 KB (for N >= 1000:"
      " RSS moves in pages)" % base["names"])
for r in live:
    ratio = r["pair_per_ping"] / base["pair_per_ping"]
    cratio = r["pair_cpu_median_us"] / base["pair_cpu_median_us"]
    print("  N=%-7d pair %6.1f us = %5.2f PINGs (x%.2f%s), cpu %5.1f us (x%.2f%s)  map %6.2f s"
          "  RSS/name %5.0f B%s  kept after destroy %5.0f B/name"
          % (r["names"], r["pair_median_us"], r["pair_per_ping"], ratio,
             "" if ratio <= 1.2 else " MISSED", r["pair_cpu_median_us"], cratio,
             "" if cratio <= 1.2 else " MISSED", r["map_s"], r["rss_per_name_b"],
             "" if r["names"] < 1000 or r["rss_per_name_b"] <= 1024 else " MISSED",
             r["rss_kept_after_destroy_per_name_b"]))
last = churn[-1]
print("  churn: %d names made, locked and destroyed in %.1f s: RSS %d KB, %.1f B/name growth after the first tenth%s"
      % (last["names"], last["elapsed_s"], last["rss_kb"], last["growth_per_name_b"],
         "" if last["growth_per_name_b"] < 16 else " (not flat: names are not freed)"))
PY
