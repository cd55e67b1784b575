#!/bin/sh
# bench/run.sh: what `make bench` runs once everything is built. Installs the
# peers' node packages (pinned in bench/package-lock.json) into
# bench/node_modules, starts a private redis-server on a free port
# (tools/redis-tmp.sh), runs every figure (bench/driver.py) and stops the
# server, also on failure or ^C.
#
#   bench/run.sh                 full run, about 7 minutes
#   BENCH_QUICK=1 bench/run.sh   short run (the same figures), about 4 minutes
set -eu
cd "$(dirname "$0")/.."

for f in build/libdmutex.so build/bench/cycle build/bench/passthrough build/bench/many \
         build/bench/rwcycle build/bench/condwake; do
    [ -x "$f" ] || [ -f "$f" ] || { echo "bench: $f is missing: run make bench" >&2; exit 1; }
done
# The names figure's program, and the command that says the default config.
for f in build/bench/names build/dmutex; do
    [ -x "$f" ] || { echo "bench: $f is missing: run make bench" >&2; exit 1; }
done
for c in node npm /usr/bin/python3 redis-server valgrind gnuplot; do
    command -v "$c" >/dev/null 2>&1 || { echo "bench: $c is missing: run tools/deps.sh bench" >&2; exit 1; }
done
/usr/bin/python3 -c 'import redis' 2>/dev/null ||
    { echo "bench: python3-redis is missing: run tools/deps.sh bench" >&2; exit 1; }

# The peers, at the versions the lock file pins; again only when it changed.
if [ ! -f bench/node_modules/.package-lock.json ] ||
        [ bench/package-lock.json -nt bench/node_modules/.package-lock.json ]; then
    echo "bench: installing the node peers (npm ci)" >&2
    npm ci --prefix bench --no-audit --no-fund --loglevel=error >&2
fi

. tools/redis-tmp.sh
trap 'redis_tmp_stop' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
redis_tmp_start || exit 1
echo "bench: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on port $REDIS_TMP_PORT" >&2
# Not exec: the EXIT trap must stop the server afterwards.
/usr/bin/python3 bench/driver.py
# The etcd store against etcd's own costs and its lock service, on a
# 3-member cluster of its own (bench/etcd-results.md).
if command -v etcd >/dev/null 2>&1; then
    REDIS_TMP_PORT=$REDIS_TMP_PORT /usr/bin/python3 bench/etcd.py >&2
else
    echo "bench: etcd is missing (tools/deps.sh installs etcd-server): no etcd figures" >&2
fi
