#!/bin/sh
# demo/run.sh: the dmutex demo, run by `make demo` (see demo/README.md).
#
# Starts a private redis-server, makes M simulated machines (network
# namespaces on a private bridge when root, else plain processes), seeds a
# stock and runs build/stock on every machine at once: first as it is, where
# each machine's stock_lock only excludes its own threads and the machines
# together oversell; then with libdmutex.so preloaded, which maps stock_lock
# to one Redis lock, and exactly the stock must be sold; then (unless -q)
# with the shim in each of its modes, fair (the default), notices and cache, on a larger
# stock, and prints sales per second for each.
#
# Exit status: 0 every shim run sold exactly the stock, 1 one did not or
# something failed, 2 bad usage. Leaves nothing behind, also on Ctrl-C.
#
# Environment: DEMO_CONFIG (default config/demo.cfg: part 2 and the default
# mode of part 3), DEMO_TIMEOUT_S (a run taking longer is stopped, default
# 120), DMUTEX_LOG (default warn).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
# shellcheck source=tools/redis-tmp.sh
. "$ROOT/tools/redis-tmp.sh"

DEMO_MACHINES_MAX=50
DEMO_THREADS_MAX=1024
DEMO_SUBNET_PREFIX=10.213        # machines live in 10.213.X.0/24, X free
DEMO_REACH_WAIT_TENTHS=50        # how long a namespace may take to reach redis
DEMO_GATE_WAIT_TENTHS=300        # how long sellers may take to start and connect
DEMO_RATE_STOCK=3000             # items per mode in part 3: about 1 s per mode here

usage() {
    cat <<EOF
usage: demo/run.sh [-q] [-m MACHINES] [-t THREADS] [-n STOCK] [-N STOCK]
       (make demo DEMO_ARGS="...")

Runs build/stock on MACHINES simulated machines at once, each with THREADS
threads selling from one stock of STOCK items kept in a private Redis:
1. without dmutex (the machines oversell), 2. with build/libdmutex.so
preloaded (exactly STOCK items must be sold), 3. with the shim in each mode,
fair (the default), notices and cache, selling the -N stock each time, and a table of
sales per second.

  -m N   machines (default 2; network namespaces when root, else processes)
  -t N   threads per machine (default 8)
  -n N   items in stock in parts 1 and 2 (default 1000)
  -N N   items in stock for each mode in part 3 (default $DEMO_RATE_STOCK)
  -q     quick: skip part 3
  -h     this text
EOF
}

is_count() {   # value min max
    case $1 in ''|*[!0-9]*) return 1 ;; esac
    [ ${#1} -le 9 ] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]
}

machines=2 threads=8 stock=1000 rate_stock=$DEMO_RATE_STOCK quick=0
while getopts :m:t:n:N:qh opt; do
    case $opt in
    m) machines=$OPTARG ;;
    t) threads=$OPTARG ;;
    n) stock=$OPTARG ;;
    N) rate_stock=$OPTARG ;;
    q) quick=1 ;;
    h) usage; exit 0 ;;
    :) echo "demo: option -$OPTARG needs a value (see demo/run.sh -h)" >&2; exit 2 ;;
    *) echo "demo: unknown option -$OPTARG (see demo/run.sh -h)" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -gt 0 ]; then
    echo "demo: unexpected argument \"$1\" (see demo/run.sh -h)" >&2; exit 2
fi
is_count "$machines" 1 "$DEMO_MACHINES_MAX" ||
    { echo "demo: -m wants 1 to $DEMO_MACHINES_MAX machines, not \"$machines\"" >&2; exit 2; }
is_count "$threads" 1 "$DEMO_THREADS_MAX" ||
    { echo "demo: -t wants 1 to $DEMO_THREADS_MAX threads, not \"$threads\"" >&2; exit 2; }
is_count "$stock" 1 999999999 ||
    { echo "demo: -n wants a stock of at least 1 item, not \"$stock\"" >&2; exit 2; }
is_count "$rate_stock" 1 999999999 ||
    { echo "demo: -N wants a stock of at least 1 item, not \"$rate_stock\"" >&2; exit 2; }

config=${DEMO_CONFIG:-$ROOT/config/demo.cfg}
config_notices=$ROOT/config/demo-notices.cfg  # the same with fair = false
config_cache=$ROOT/config/demo-cache.cfg    # the same with cache = true
timeout_s=${DEMO_TIMEOUT_S:-120}
for f in "$ROOT/build/stock" "$ROOT/build/libdmutex.so"; do
    [ -f "$f" ] || { echo "demo: $f is missing: run make first" >&2; exit 1; }
done
configs=$config
[ $quick = 1 ] || configs="$config $config_notices $config_cache"
for f in $configs; do
    [ -f "$f" ] || { echo "demo: $f is missing" >&2; exit 1; }
done
for c in redis-server redis-cli timeout awk; do
    command -v "$c" >/dev/null 2>&1 ||
        { echo "demo: $c is missing: run tools/deps.sh as root" >&2; exit 1; }
done

# ---- clean-up: everything this script creates is named here -------------

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dmutex-demo.XXXXXX") || exit 1
seller_pids=""      # running sellers (pids of `timeout`, which forwards TERM)
netns_made=""       # namespaces created
veths_made=""       # host ends of veth pairs created
bridge=""           # the bridge, once created

teardown_machines() {
    for ns in $netns_made; do
        # Anything still inside is ours: the namespace is private to this run.
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        ip netns delete "$ns" 2>/dev/null
    done
    # Deleting a namespace deletes its veth end and with it the pair; these
    # are for pairs made but not yet moved when something failed.
    for v in $veths_made; do ip link delete "$v" 2>/dev/null; done
    [ -n "$bridge" ] && ip link delete "$bridge" 2>/dev/null
    netns_made="" veths_made="" bridge=""
}

# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
    for p in $seller_pids; do kill -TERM "$p" 2>/dev/null; done
    for p in $seller_pids; do wait "$p" 2>/dev/null; done
    seller_pids=""
    teardown_machines
    redis_tmp_stop
    rm -rf "$tmp"
}
trap cleanup EXIT
# The INT message goes to the stderr we started with: the trap may fire
# inside a command whose stderr is redirected to a file.
exec 8>&2
trap 'echo >&8; echo "demo: interrupted; cleaning up" >&8; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 131' QUIT
trap 'exit 141' PIPE     # demo/run.sh | head must clean up too

# ---- machines -------------------------------------------------------------

ns_name() { echo "dmutex-demo-$$-m$1"; }

# A /24 in DEMO_SUBNET_PREFIX that no address or route on this host uses, so
# that two runs (or anything else) never clash. Starts at a place given by
# the pid.
pick_subnet() {
    used=$(ip -o -4 addr show 2>/dev/null; ip -4 route show table all 2>/dev/null)
    x=$(( $$ % 254 + 1 )) n=0
    while [ $n -lt 254 ]; do
        if ! printf '%s\n' "$used" | grep -q "[^0-9]$DEMO_SUBNET_PREFIX\.$x\.\|^$DEMO_SUBNET_PREFIX\.$x\."; then
            echo "$DEMO_SUBNET_PREFIX.$x"; return 0
        fi
        x=$(( x % 254 + 1 )) n=$((n + 1))
    done
    return 1
}

# Bridge with .1 in the root namespace; machine i is namespace m<i> with a
# veth to the bridge, address .(i+1), loopback up, and no route anywhere
# else. Output of failing ip commands goes to $tmp/ip.err.
make_machines() {
    # Two runs starting together must not pick the same subnet: choosing and
    # taking it is one step under a lock.
    if command -v flock >/dev/null 2>&1 &&
            { command exec 9>"${DEMO_LOCK:-/run/lock/dmutex-demo.lock}"; } 2>/dev/null; then
        flock 9
    fi
    net=$(pick_subnet) || { exec 9>&-; return 1; }
    bridge=dmbr$$
    ip link add "$bridge" type bridge 2>"$tmp/ip.err" || { exec 9>&-; bridge=""; return 1; }
    ip addr add "$net.1/24" dev "$bridge" 2>"$tmp/ip.err" &&
        ip link set "$bridge" up 2>"$tmp/ip.err"
    rc=$?
    exec 9>&-
    [ $rc -eq 0 ] || return 1
    i=1
    while [ $i -le "$machines" ]; do
        ns=$(ns_name $i) host=dm$$h$i peer=dm$$n$i
        ip netns add "$ns" 2>"$tmp/ip.err" || return 1
        netns_made="$netns_made $ns"
        ip link add "$host" type veth peer name "$peer" 2>"$tmp/ip.err" || return 1
        veths_made="$veths_made $host"
        { ip link set "$peer" netns "$ns" &&
          ip link set "$host" master "$bridge" up &&
          ip -n "$ns" link set "$peer" name eth0 &&
          ip -n "$ns" addr add "$net.$((i + 1))/24" dev eth0 &&
          ip -n "$ns" link set eth0 up &&
          ip -n "$ns" link set lo up; } 2>"$tmp/ip.err" || return 1
        i=$((i + 1))
    done
    return 0
}

# Every machine must answer a PING to redis at the bridge address.
machines_reach_redis() {
    i=1
    while [ $i -le "$machines" ]; do
        n=0
        until ip netns exec "$(ns_name $i)" redis-cli -h "$net.1" -p "$REDIS_TMP_PORT" ping \
                >"$tmp/reach.out" 2>&1 && grep -q PONG "$tmp/reach.out"; do
            n=$((n + 1))
            [ $n -ge "$DEMO_REACH_WAIT_TENTHS" ] && return 1
            sleep 0.1
        done
        i=$((i + 1))
    done
    return 0
}

mode=processes
why=""
if [ "$(id -u)" != 0 ]; then
    why="not root"
elif ! command -v ip >/dev/null 2>&1; then
    why="no ip command (iproute2)"
elif ! make_machines; then
    why="network namespaces unavailable ($(head -n 1 "$tmp/ip.err" 2>/dev/null))"
    teardown_machines
else
    mode=netns
fi

if [ $mode = netns ]; then
    redis_tmp_start 127.0.0.1 "$net.1" || exit 1
    if ! machines_reach_redis; then
        why="the namespaces could not reach redis at $net.1: $(head -n 1 "$tmp/reach.out")"
        teardown_machines
        mode=processes
    fi
else
    redis_tmp_start 127.0.0.1 || exit 1
fi
port=$REDIS_TMP_PORT
rcli() { redis-cli -p "$port" "$@"; }

addr_of() {   # machine index -> its address; where it finds redis
    if [ $mode = netns ]; then echo "$net.$(( $1 + 1 ))"; else echo 127.0.0.1; fi
}
redis_addr() { if [ $mode = netns ]; then echo "$net.1"; else echo 127.0.0.1; fi; }

if [ $quick = 1 ]; then
    echo "dmutex demo: $machines machines x $threads threads selling $stock items"
else
    echo "dmutex demo: $machines machines x $threads threads selling $stock items," \
         "then $rate_stock in each mode"
fi
if [ $mode = netns ]; then
    echo "machines: network namespaces $(ns_name 1 | sed 's/m1$//')m1..m$machines on bridge $bridge," \
         "$net.0/24; redis at $(redis_addr):$port"
else
    echo "machines: plain processes on 127.0.0.1 ($why); redis at 127.0.0.1:$port"
fi

# ---- one run --------------------------------------------------------------

now() { date +%s.%N; }

# spawn INDEX SHIM(0|1) [CONFIG]: starts machine INDEX's seller in the
# background; with the shim, CONFIG (default $config) says what it maps.
spawn() {
    i=$1
    if [ "$2" = 1 ]; then
        set -- LD_PRELOAD="$ROOT/build/libdmutex.so" DMUTEX_CONFIG="${3:-$config}" \
               DMUTEX_REDIS="redis://$(redis_addr):$port" DMUTEX_LOG="${DMUTEX_LOG:-warn}"
    else
        set -- -u LD_PRELOAD -u DMUTEX_CONFIG -u DMUTEX_REDIS
    fi
    set -- env "$@" "$ROOT/build/stock" -h "$(redis_addr)" -p "$port" -t "$threads" \
        -s "machine$i" -g demo:go
    if [ $mode = netns ]; then set -- ip netns exec "$(ns_name "$i")" "$@"; fi
    timeout -k 5 "$timeout_s" "$@" >"$tmp/out.$i" 2>"$tmp/err.$i" &
    seller_pids="$seller_pids $!"
}

# Sellers connect, then block on BLPOP demo:go. Once all are there (or one
# has already quit, or it takes too long), one push starts them together:
# namespace and process start-up take longer than selling a small stock, so
# without this the first machine could sell everything alone.
open_gate() {
    n=0
    while [ $n -lt "$DEMO_GATE_WAIT_TENTHS" ]; do
        blocked=$(rcli info clients | tr -d '\r' | sed -n 's/^blocked_clients://p')
        [ "${blocked:-0}" -ge "$machines" ] && break
        for p in $seller_pids; do kill -0 "$p" 2>/dev/null || break 2; done
        sleep 0.1
        n=$((n + 1))
    done
    t0=$(now)
    # shellcheck disable=SC2046  # one word per seller, on purpose
    rcli rpush demo:go $(seq "$machines" | sed 's/.*/go/') >/dev/null
}

# seed N: a clean Redis with a stock of N items. FLUSHALL also drops
# dmutex:intact, the declaration that this new server lost no lock data
# (redis_tmp_fresh): made again, or the first run's lock would wait a lease
# after the server's start, as after a restart that may have lost a hold.
seed() {
    if ! rcli flushall >/dev/null || ! rcli set demo:stock "$1" >/dev/null; then
        echo "demo: cannot seed the stock in redis at 127.0.0.1:$port" >&2
        return 1
    fi
    redis_tmp_fresh dmutex
}

# sellers_said: under a table, what each seller that failed or wrote to
# stderr said (its errors, the shim's warnings); then forgets their output.
sellers_said() {
    i=1
    while [ $i -le "$machines" ]; do
        if [ -s "$tmp/err.$i" ] || [ -f "$tmp/rc.$i" ]; then
            rc=$(cat "$tmp/rc.$i" 2>/dev/null || echo 0)
            case $rc in
            0) echo "   machine$i said:" ;;
            124|137) echo "   machine$i was stopped after ${timeout_s} s (DEMO_TIMEOUT_S); it said:" ;;
            *) echo "   machine$i failed (exit $rc):" ;;
            esac
            head -n 10 "$tmp/err.$i" | sed 's/^/     /'
        fi
        i=$((i + 1))
    done
    rm -f "$tmp"/out.* "$tmp"/err.* "$tmp"/rc.*
}

# wait_sellers: waits for every seller; sets failed (how many did not exit 0,
# each one's status in $tmp/rc.INDEX) and t1 (when the last one was done).
wait_sellers() {
    failed=0 i=1
    for p in $seller_pids; do
        wait "$p"
        rc=$?
        [ $rc -ne 0 ] && failed=$((failed + 1)) && echo "$rc" >"$tmp/rc.$i"
        i=$((i + 1))
    done
    seller_pids=""
    t1=$(now)
}

# run NUMBER SHIM(0|1) TITLE: seeds, runs every machine at once, prints the
# table and verdict. Returns 0 when every seller finished and, with the
# shim, exactly the stock was sold.
run() {
    number=$1 shim=$2 title=$3
    seed "$stock" || return 1

    echo
    echo "$number. $title"
    i=1
    while [ $i -le "$machines" ]; do spawn $i "$shim"; i=$((i + 1)); done
    open_gate
    wait_sellers

    printf '   %-10s %-14s %7s %9s %9s\n' machine address sales time sales/s
    sold=0 i=1
    while [ $i -le "$machines" ]; do
        # "seller machine1: 8 threads, 512 sales in 0.066 s, 7758 sales/s"
        line=$(grep '^seller ' "$tmp/out.$i")
        if [ -n "$line" ]; then
            # shellcheck disable=SC2086  # split the line into fields
            set -- $line
            sales=$5 secs=$8 rate=${10}
            printf '   %-10s %-14s %7d %7.2f s %9d\n' "machine$i" "$(addr_of $i)" \
                "$sales" "$secs" "$rate"
            sold=$((sold + sales))
        else
            printf '   %-10s %-14s %7s\n' "machine$i" "$(addr_of $i)" "-"
        fi
        i=$((i + 1))
    done
    left=$(rcli get demo:stock)
    over=$((sold > stock ? sold - stock : 0))
    elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
    echo "   stock $stock   sold $sold   oversold $over   left $left   elapsed $elapsed s"
    sellers_said

    if [ $failed -ne 0 ]; then
        echo "   => FAILED: $failed of $machines sellers did not finish"
        return 1
    fi
    if [ "$shim" = 0 ]; then
        if [ $over -gt 0 ]; then
            echo "   => OVERSOLD by $over: each stock_lock only excludes its own machine's threads"
        elif [ "$machines" -eq 1 ]; then
            echo "   => no oversell: one machine's stock_lock excludes all its threads (try -m 2)"
        else
            echo "   => no oversell this time: the race did not show up (try more -m or -t)"
        fi
        return 0
    fi
    if [ "$sold" -eq "$stock" ] && [ "$left" = 0 ]; then
        echo "   => CORRECT: exactly $stock sold; stock_lock excluded every thread on every machine"
        return 0
    fi
    echo "   => WRONG: $sold sold of $stock (oversold $over, left $left) with the shim"
    return 1
}

# ---- part 3: the modes in numbers -----------------------------------------

base_rate=""     # sales/s of fair mode (the default), for the ratios

relative() {   # a path, relative to the source tree when inside it
    case $1 in "$ROOT"/*) echo "${1#"$ROOT"/}" ;; *) echo "$1" ;; esac
}

# measure MODE CONFIG: one run of every machine with the shim in that mode,
# selling $rate_stock items; prints one row of the table (and under it what
# a failing seller said). Returns 0 when every seller finished and exactly
# the stock was sold.
measure() {
    mname=$1 mconfig=$2
    seed "$rate_stock" || return 1
    i=1
    while [ $i -le "$machines" ]; do spawn $i 1 "$mconfig"; i=$((i + 1)); done
    open_gate
    wait_sellers

    # time: the longest seller's own selling time (from its common start
    # until its threads stopped), i.e. until the last machine was done;
    # without process start and exit, which are the same in every mode.
    sold=0 secs=0 i=1 missing=0
    while [ $i -le "$machines" ]; do
        line=$(grep '^seller ' "$tmp/out.$i")
        if [ -n "$line" ]; then
            # shellcheck disable=SC2086  # split the line into fields
            set -- $line
            sold=$((sold + $5))
            secs=$(awk -v a="$secs" -v b="$8" 'BEGIN { print (b > a ? b : a) }')
        else
            missing=$((missing + 1))
        fi
        i=$((i + 1))
    done
    left=$(rcli get demo:stock)
    over=$((sold > rate_stock ? sold - rate_stock : 0))
    ok=1
    { [ $failed -eq 0 ] && [ $missing -eq 0 ] && [ "$sold" -eq "$rate_stock" ] &&
      [ "$left" = 0 ]; } || ok=0
    rate=$(awk -v n="$sold" -v s="$secs" 'BEGIN { if (s > 0) printf "%.0f", n / s; else print 0 }')
    [ "$mname" = fair ] && [ $ok = 1 ] && base_rate=$rate
    ratio=$(awk -v r="$rate" -v b="${base_rate:-0}" \
        'BEGIN { if (b > 0) printf "%.2fx", r / b; else print "-" }')
    printf '   %-9s %6d %9d %7.2f s %9d %10s  %s\n' "$mname" "$sold" "$over" "$secs" "$rate" \
        "$ratio" "$(relative "$mconfig")"
    if [ $failed -ne 0 ]; then
        echo "   <= FAILED: $failed of $machines sellers did not finish"
    elif [ $ok = 0 ]; then
        echo "   <= WRONG: $sold sold of $rate_stock (oversold $over, left $left)"
    fi
    sellers_said
    [ $ok = 1 ]
}

modes() {
    echo
    echo "3. In numbers: the same sellers with dmutex in each mode, $rate_stock items each time"
    printf '   %-9s %6s %9s %9s %9s %10s  %s\n' mode sold oversold time sales/s "vs fair" \
        config
    bad=""
    measure fair "$config" || bad="$bad fair"
    measure notices "$config_notices" || bad="$bad notices"
    measure cache "$config_cache" || bad="$bad cache"
    echo "   fair:    (the default) the release hands the lock to the next machine in line, in one round trip; a machine that waited for it keeps selling for one 5 ms batch first"
    echo "   notices: (fair = false) waiters wake on a release notice and race to retry"
    echo "   cache:   a machine keeps the lock while it keeps selling, hands it over when asked"
    if [ -z "$bad" ]; then
        echo "   => CORRECT: exactly $rate_stock sold in every mode (rates vary with the load)"
        return 0
    fi
    echo "   => WRONG:$bad did not sell exactly $rate_stock: a dmutex bug, not a demo one"
    return 1
}

run 1 0 "Without dmutex: each machine's stock_lock is its own" || exit 1
run 2 1 "With dmutex: LD_PRELOAD=build/libdmutex.so makes stock_lock one Redis lock" || exit 1
[ $quick = 1 ] || modes || exit 1
exit 0
