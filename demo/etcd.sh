#!/bin/sh
# demo/etcd.sh: `make demo DEMO_BACKEND=etcd` (see demo/README.md).
#
# The sale of demo/run.sh with stock_lock kept by etcd: a 3-member etcd
# cluster on free loopback ports (fast heartbeat and election), the shim
# pointed at it (DMUTEX_ETCD), and the etcd leader SIGKILLed once a
# quarter of the stock is sold. The others elect a new leader, the
# sellers' calls move to them, and exactly the stock must still be sold.
# The stock itself is kept on a separate redis-server that nothing kills.
# The sellers are plain processes on this machine (demo/run.sh shows the
# network-namespace machines).
#
# Exit status: 0 exactly the stock was sold, 1 it was not or something
# failed, 2 bad usage. Leaves nothing behind, also on Ctrl-C.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
# shellcheck source=tools/redis-tmp.sh
. "$ROOT/tools/redis-tmp.sh"

DEMO_READY_WAIT_TENTHS=300       # members starting and electing a leader
DEMO_GATE_WAIT_TENTHS=300

machines=2 threads=8 stock=3000
while getopts :m:t:n:N:qh opt; do
    case $opt in
    m) machines=$OPTARG ;;
    t) threads=$OPTARG ;;
    n) stock=$OPTARG ;;
    N|q) ;;                      # demo/run.sh's part 3 has no etcd variant
    h) echo "usage: demo/etcd.sh [-m SELLERS] [-t THREADS] [-n STOCK]"; exit 0 ;;
    *) echo "demo: unknown option -$OPTARG (see demo/etcd.sh -h)" >&2; exit 2 ;;
    esac
done
for v in "$machines" "$threads" "$stock"; do
    case $v in ''|*[!0-9]*|0) echo "demo: -m, -t and -n want positive numbers" >&2; exit 2 ;; esac
done
for f in "$ROOT/build/stock" "$ROOT/build/libdmutex.so"; do
    [ -f "$f" ] || { echo "demo: $f is missing: run make first" >&2; exit 1; }
done
command -v etcd >/dev/null 2>&1 || { echo "demo: etcd is missing (tools/deps.sh installs etcd-server)" >&2; exit 1; }
command -v curl >/dev/null 2>&1 || { echo "demo: curl is missing (tools/deps.sh installs it)" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dmutex-demo-etcd.XXXXXX") || exit 1
member_pids="" seller_pids=""
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
    for p in $seller_pids $member_pids; do kill -KILL "$p" 2>/dev/null; done
    for p in $seller_pids $member_pids; do wait "$p" 2>/dev/null; done
    seller_pids="" member_pids=""
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

wait_for() {
    n=0 max=$1
    shift
    until "$@" >/dev/null 2>&1; do
        n=$((n + 1))
        [ $n -ge "$max" ] && return 1
        sleep 0.1
    done
}

# status PORT: the member's status (JSON), or nothing.
status() { curl -s -m 1 "http://127.0.0.1:$1/v3/maintenance/status" -d '{}'; }
# leader_port: the client port of the member that leads now, or nothing.
leader_port() {
    for i in 1 2 3; do
        eval "cp=\$cport$i"
        s=$(status "$cp")
        me=$(printf '%s' "$s" | sed -n 's/.*"member_id":"\([0-9]*\)".*/\1/p')
        ld=$(printf '%s' "$s" | sed -n 's/.*"leader":"\([0-9]*\)".*/\1/p')
        [ -n "$me" ] && [ "$me" = "$ld" ] && { echo "$i $cp"; return 0; }
    done
    return 1
}

# ---- the servers ------------------------------------------------------------

redis_tmp_start 127.0.0.1 || exit 1         # the stock's own server, never killed
data=$REDIS_TMP_PORT
# all_up: every member answers for itself (a member that lost its port to
# another process between free_port and its bind has exited).
all_up() {
    for i in 1 2 3; do
        eval "cp=\$cport$i"
        status "$cp" | grep -q '"member_id"' || return 1
    done
    leader_port >/dev/null
}
# A port found free can be taken by another program before etcd binds it
# (tests run beside the demo): then that member exits, and a cluster of
# two would not survive the leader's kill. Up to three tries, new ports
# each time.
try=1
while :; do
    cluster="" endpoints="" member_pids=""
    for i in 1 2 3; do
        eval "cport$i=$(free_port) pport$i=$(free_port)"
        eval "cluster=\"\$cluster\${cluster:+,}m$i=http://127.0.0.1:\$pport$i\""
        eval "endpoints=\"\$endpoints\${endpoints:+,}127.0.0.1:\$cport$i\""
    done
    rm -rf "$tmp/m1" "$tmp/m2" "$tmp/m3"
    for i in 1 2 3; do
        eval "cp=\$cport$i pp=\$pport$i"
        etcd --name "m$i" --data-dir "$tmp/m$i" \
            --listen-client-urls "http://127.0.0.1:$cp" --advertise-client-urls "http://127.0.0.1:$cp" \
            --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
            --initial-cluster "$cluster" --initial-cluster-token dmutex-demo --initial-cluster-state new \
            --heartbeat-interval 50 --election-timeout 500 --logger zap --log-outputs "$tmp/m$i.log" \
            >/dev/null 2>&1 &
        eval "pid$i=$!"
        member_pids="$member_pids $!"
    done
    wait_for "$DEMO_READY_WAIT_TENTHS" all_up && break
    # shellcheck disable=SC2086  # one word per pid
    kill $member_pids 2>/dev/null
    # shellcheck disable=SC2086
    wait $member_pids 2>/dev/null
    if [ "$try" -ge 3 ]; then
        echo "demo: the 3 etcd members did not all come up with a leader in 3 tries (logs in" \
             "$tmp/m*.log: $(grep -ho '"error":"[^"]*"' "$tmp"/m*.log | sort -u | head -n 3 | tr '\n' ' '))" >&2
        exit 1
    fi
    try=$((try + 1))
done

cat >"$tmp/demo.cfg" <<EOF
# config/demo.cfg with the lock in etcd; DMUTEX_ETCD names the members.
lease_ms = 10000;
mutexes = ( { symbol = "stock_lock"; } );
EOF

echo "dmutex demo, etcd: $machines sellers x $threads threads selling $stock items"
echo "lock store: a 3-member etcd cluster ($endpoints), Raft: a grant is on a majority"
echo "stock: a separate redis-server at 127.0.0.1:$data"

# ---- the sale ---------------------------------------------------------------

redis-cli -p "$data" set demo:stock "$stock" >/dev/null
i=1
while [ "$i" -le "$machines" ]; do
    env LD_PRELOAD="$ROOT/build/libdmutex.so" DMUTEX_CONFIG="$tmp/demo.cfg" \
        DMUTEX_ETCD="$endpoints" DMUTEX_LOG="${DMUTEX_LOG:-warn}" \
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
set -- $(leader_port)
killed=$1
left_at_kill=$(redis-cli -p "$data" get demo:stock)
eval "kill -KILL \$pid$killed"
tk=$(date +%s.%N)
echo
echo "killed the etcd leader m$killed (SIGKILL) with $left_at_kill of $stock items left"
if wait_for 300 leader_port; then
    set -- $(leader_port)
    echo "m$1 leads after $(awk -v a="$tk" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
else
    # Sellers would wait for a leader for ever (on_store_down = "block"):
    # say what the members say, stop them, and fail.
    echo "no new leader within 30 s; the members say:"
    for i in 1 2 3; do
        eval "cp=\$cport$i"
        echo "   m$i (client port $cp): $(status "$cp" | head -c 300)"
        [ -f "$tmp/m$i.log" ] && tail -n 3 "$tmp/m$i.log" | cut -c1-300 | sed 's/^/      /'
    done
    # shellcheck disable=SC2086  # one word per pid
    kill $seller_pids 2>/dev/null
    echo "   => FAILED: the etcd cluster did not elect a leader (not a lock result)"
    exit 1
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
    echo "   => CORRECT: exactly $stock sold across the leader's loss"
    exit 0
fi
echo "   => WRONG: $sold sold of $stock (left $left, $failed sellers failed)"
exit 1
