#!/bin/sh
# demo/sentinel.sh: `make demo DEMO_REDIS=sentinel` (see demo/README.md).
#
# The sale of demo/run.sh with stock_lock behind Redis Sentinel: a lock
# primary, two replicas and three sentinels on free loopback ports, the
# shim pointed at the sentinels (redis-sentinel://...) with min_replicas =
# 1, and the primary SIGKILLed once a quarter of the stock is sold. The
# sentinels promote a replica, the sellers' locks follow it, and exactly the
# stock must still be sold. The stock itself is kept on a separate
# redis-server that nothing kills. The sellers are plain processes on this
# machine (demo/run.sh shows the network-namespace machines).
#
# Exit status: 0 exactly the stock was sold, 1 it was not or something
# failed, 2 bad usage. Leaves nothing behind, also on Ctrl-C.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
# shellcheck source=tools/redis-tmp.sh
. "$ROOT/tools/redis-tmp.sh"

DEMO_MASTER=demo
DEMO_DOWN_AFTER_MS=1000          # sentinel down-after-milliseconds: a quick failover
DEMO_READY_WAIT_TENTHS=300       # servers starting, replicas syncing, sentinels meeting
DEMO_GATE_WAIT_TENTHS=300

machines=2 threads=8 stock=3000
while getopts :m:t:n:N:qh opt; do
    case $opt in
    m) machines=$OPTARG ;;
    t) threads=$OPTARG ;;
    n) stock=$OPTARG ;;
    N|q) ;;                      # demo/run.sh's part 3 has no Sentinel variant
    h) echo "usage: demo/sentinel.sh [-m SELLERS] [-t THREADS] [-n STOCK]"; exit 0 ;;
    *) echo "demo: unknown option -$OPTARG (see demo/sentinel.sh -h)" >&2; exit 2 ;;
    esac
done
for v in "$machines" "$threads" "$stock"; do
    case $v in ''|*[!0-9]*|0) echo "demo: -m, -t and -n want positive numbers" >&2; exit 2 ;; esac
done
for f in "$ROOT/build/stock" "$ROOT/build/libdmutex.so"; do
    [ -f "$f" ] || { echo "demo: $f is missing: run make first" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dmutex-demo-sentinel.XXXXXX") || exit 1
server_pids="" seller_pids="" primary_pid=""
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
    for p in $seller_pids $server_pids; do kill -KILL "$p" 2>/dev/null; done
    for p in $seller_pids $server_pids; do wait "$p" 2>/dev/null; done
    seller_pids="" server_pids=""
    redis_tmp_stop
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

free_port() {
    while :; do
        p=$(_redis_tmp_random_port)
        _redis_tmp_port_busy "$p" || { echo "$p"; return; }
    done
}

# wait_for TENTHS COMMAND...: until COMMAND succeeds, at most TENTHS tenths.
wait_for() {
    n=0 max=$1
    shift
    until "$@" >/dev/null 2>&1; do
        n=$((n + 1))
        [ $n -ge "$max" ] && return 1
        sleep 0.1
    done
}
pong() { redis-cli -p "$1" ping | grep -q PONG; }
# up PORT PID: the server answers, or (1) it is gone (the port was taken
# between the check and its bind: the caller tries another) or too slow.
up() {
    n=0
    until pong "$1"; do
        kill -0 "$2" 2>/dev/null || return 1
        n=$((n + 1))
        [ $n -ge "$DEMO_READY_WAIT_TENTHS" ] && return 1
        sleep 0.1
    done
}

# node NAME ARGS...: a redis-server on a free port in $tmp/NAME; sets port.
node() {
    name=$1
    shift
    mkdir -p "$tmp/$name"
    for try in 1 2 3 4 5; do
        port=$(free_port)
        redis-server --port "$port" --bind 127.0.0.1 --dir "$tmp/$name" \
            --logfile "$tmp/$name/redis.log" --save '' --appendonly no --protected-mode no \
            --repl-diskless-sync-delay 0 "$@" >/dev/null 2>&1 &
        last_pid=$!
        server_pids="$server_pids $last_pid"
        up "$port" "$last_pid" && return 0
    done
    echo "demo: redis-server $name did not start (see $tmp/$name/redis.log)" >&2
    exit 1
}

sentinel() {
    name=$1 mport=$2
    mkdir -p "$tmp/$name"
    for try in 1 2 3 4 5; do
        port=$(free_port)
        cat >"$tmp/$name/sentinel.conf" <<EOF
port $port
bind 127.0.0.1
dir $tmp/$name
logfile $tmp/$name/redis.log
protected-mode no
sentinel monitor $DEMO_MASTER 127.0.0.1 $mport 2
sentinel down-after-milliseconds $DEMO_MASTER $DEMO_DOWN_AFTER_MS
sentinel failover-timeout $DEMO_MASTER 5000
EOF
        redis-server "$tmp/$name/sentinel.conf" --sentinel >/dev/null 2>&1 &
        server_pids="$server_pids $!"
        up "$port" "$!" && return 0
    done
    echo "demo: sentinel $name did not start (see $tmp/$name/redis.log)" >&2
    exit 1
}

replicas_online() { [ "$(redis-cli -p "$1" info replication | grep -c state=online)" -ge 2 ]; }
quorum_ok() { redis-cli -p "$1" sentinel ckquorum "$DEMO_MASTER" | grep -q '^OK'; }
primary_says() { redis-cli -p "$1" sentinel get-master-addr-by-name "$DEMO_MASTER" | tr '\n' ':'; }

# ---- the servers ------------------------------------------------------------

redis_tmp_start 127.0.0.1 || exit 1         # the stock's own server, never killed
data=$REDIS_TMP_PORT
node primary
pport=$port primary_pid=$last_pid
# A new server lost no lock data (`dmutex fresh`): the sellers need not wait
# a lease after its start before the first grant.
"$ROOT/build/dmutex" fresh -r "redis://127.0.0.1:$pport" >/dev/null ||
    { echo "demo: dmutex fresh failed on the primary" >&2; exit 1; }
node replica1 --replicaof 127.0.0.1 "$pport"
node replica2 --replicaof 127.0.0.1 "$pport"
wait_for "$DEMO_READY_WAIT_TENTHS" replicas_online "$pport" ||
    { echo "demo: the replicas did not sync with the primary" >&2; exit 1; }
sentinels="" sports=""
for s in 1 2 3; do
    sentinel "sentinel$s" "$pport"
    sentinels="$sentinels${sentinels:+,}127.0.0.1:$port"
    sports="$sports $port"
done
for p in $sports; do
    wait_for "$DEMO_READY_WAIT_TENTHS" quorum_ok "$p" ||
        { echo "demo: the sentinels did not find each other" >&2; exit 1; }
done
first_sentinel=${sports# }
first_sentinel=${first_sentinel%% *}
url="redis-sentinel://$sentinels/$DEMO_MASTER"

cat >"$tmp/demo.cfg" <<EOF
# config/demo.cfg with the lock behind Sentinel; DMUTEX_REDIS names the sentinels.
lease_ms = 10000;
min_replicas = 1;                # a grant counts once a replica has it
replica_timeout_ms = 500;
mutexes = ( { symbol = "stock_lock"; } );
EOF

echo "dmutex demo, Sentinel: $machines sellers x $threads threads selling $stock items"
echo "lock server: primary 127.0.0.1:$pport, 2 replicas, 3 sentinels ($url), min_replicas = 1"
echo "stock: a separate redis-server at 127.0.0.1:$data"

# ---- the sale ---------------------------------------------------------------

redis-cli -p "$data" set demo:stock "$stock" >/dev/null
i=1
while [ "$i" -le "$machines" ]; do
    env LD_PRELOAD="$ROOT/build/libdmutex.so" DMUTEX_CONFIG="$tmp/demo.cfg" \
        DMUTEX_REDIS="$url" DMUTEX_LOG="${DMUTEX_LOG:-warn}" \
        "$ROOT/build/stock" -h 127.0.0.1 -p "$data" -t "$threads" -s "machine$i" -g demo:go \
        >"$tmp/out.$i" 2>"$tmp/err.$i" &
    seller_pids="$seller_pids $!"
    i=$((i + 1))
done
blocked() { [ "$(redis-cli -p "$data" info clients | tr -d '\r' | sed -n 's/^blocked_clients://p')" -ge "$machines" ]; }
wait_for "$DEMO_GATE_WAIT_TENTHS" blocked || true
# shellcheck disable=SC2046  # one word per seller
redis-cli -p "$data" rpush demo:go $(seq "$machines" | sed 's/.*/go/') >/dev/null
t0=$(date +%s.%N)

quarter_sold() { [ "$(redis-cli -p "$data" get demo:stock)" -le $((stock - stock / 4)) ]; }
wait_for 600 quarter_sold || { echo "demo: the sale did not start" >&2; exit 1; }
before=$(primary_says "$first_sentinel")
left_at_kill=$(redis-cli -p "$data" get demo:stock)
kill -KILL "$primary_pid"
tk=$(date +%s.%N)
echo
echo "killed the lock primary (SIGKILL) with $left_at_kill of $stock items left"
moved() { [ "$(primary_says "$first_sentinel")" != "$before" ]; }
if wait_for 300 moved; then
    echo "the sentinels promoted $(primary_says "$first_sentinel" | sed 's/:$//') after" \
         "$(awk -v a="$tk" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
else
    echo "the sentinels did not promote a replica within 30 s"
fi

failed=0
for p in $seller_pids; do wait "$p" || failed=$((failed + 1)); done
seller_pids=""
t1=$(date +%s.%N)
sold=0 i=1
while [ "$i" -le "$machines" ]; do
    line=$(grep '^seller ' "$tmp/out.$i")
    # shellcheck disable=SC2086  # "seller machine1: 8 threads, 512 sales in ..."
    [ -n "$line" ] && set -- $line && sold=$((sold + $5)) && echo "   $line"
    [ -s "$tmp/err.$i" ] && sed 's/^/     /' "$tmp/err.$i" | head -n 5
    i=$((i + 1))
done
left=$(redis-cli -p "$data" get demo:stock)
echo "   stock $stock   sold $sold   left $left   elapsed" \
     "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"
if [ $failed -eq 0 ] && [ "$sold" -eq "$stock" ] && [ "$left" = 0 ]; then
    echo "   => CORRECT: exactly $stock sold across the failover"
    exit 0
fi
echo "   => WRONG: $sold sold of $stock (left $left, $failed sellers failed)"
exit 1
