#!/bin/sh
# etcd_release: a release whose answer is lost, while etcd ran it, is not
# taken for a lost hold when it is retried later from the queue (found by
# the soak's etcd mode, seed 25: a leader that stepped down as it applied a
# release; the queued retry found the key gone and the marker moved on to
# the next holder, and the process aborted "lost while held" although its
# section was over and nobody else had entered during it).
#
# One etcd member on free ports, and tests/progs/etcdproxy.py in front of
# it: process A (lockprog churn-idle, through the proxy) locks and unlocks
# until the proxy has passed one release to etcd and thrown its answer
# away; the proxy then refuses A's calls (the release's immediate retry
# fails too, so it is queued). B (lockprog lock, straight to etcd) takes
# the lock and gives it back. Then the proxy lets A through again: A's
# queued release must settle as done, not abort A.
#
# Then the same within one call (seed 1 of the 120 s run: a member killed
# under a release): A2's endpoints are a second proxy, then etcd itself;
# the proxy passes A2's release to etcd and keeps the connection
# unanswered while B takes and gives back the lock; A2's call gives up on
# that member and sends the release to the next, which finds the key gone
# and the marker moved on: that must be the release done, not a hold lost.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
ETCD=$(command -v etcd) || { echo "etcd_release: skipped: etcd is not installed"; echo "0 passed, 0 failed, 1 skipped"; exit 0; }
command -v python3 >/dev/null 2>&1 || fail_setup "etcd_release: python3 is missing (tools/deps.sh)"
command -v curl >/dev/null 2>&1 || fail_setup "etcd_release: curl is missing (tools/deps.sh)"
B=${B:-build}   # the build under test
for f in $B/libdmutex.so $B/tests/progs/lockprog; do
    [ -e "$f" ] || fail_setup "etcd_release: $f is missing: make all test-build"
done
T=$(mktemp -d "${TMPDIR:-/tmp}/dmutex-etcdrel.XXXXXX") || exit 1
pids=""
cleanup() {
    for p in $pids; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_file PATH MS: 0 once PATH exists, 1 after MS
wait_file() {
    n=0
    while [ ! -e "$1" ]; do
        [ $n -ge "$2" ] && return 1
        sleep 0.05; n=$((n + 50))
    done
}
# wait_text FILE TEXT MS
wait_text() {
    n=0
    while ! grep -q -- "$2" "$1" 2>/dev/null; do
        [ $n -ge "$3" ] && return 1
        sleep 0.05; n=$((n + 50))
    done
}

set -- $(python3 -c 'import socket
s = [socket.socket() for _ in range(4)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cport=$1 pport=$2 proxy=$3 proxy2=$4
"$ETCD" --name t --data-dir "$T/data" --listen-client-urls "http://127.0.0.1:$cport" \
    --advertise-client-urls "http://127.0.0.1:$cport" --listen-peer-urls "http://127.0.0.1:$pport" \
    --initial-advertise-peer-urls "http://127.0.0.1:$pport" --initial-cluster "t=http://127.0.0.1:$pport" \
    --heartbeat-interval 50 --election-timeout 500 --logger zap >"$T/etcd.log" 2>&1 &
pids="$pids $!"
mkdir "$T/ctl" "$T/ctl2"
python3 tests/progs/etcdproxy.py "$proxy" "$cport" "$T/ctl" 2>"$T/proxy.err" &
pids="$pids $!"
python3 tests/progs/etcdproxy.py "$proxy2" "$cport" "$T/ctl2" 2>"$T/proxy2.err" &
pids="$pids $!"
n=0
until curl -s -m 1 "http://127.0.0.1:$cport/v3/maintenance/status" -d '{}' | grep -q '"leader"'; do
    [ $n -ge 100 ] && fail_setup "etcd_release: etcd did not start (see $T/etcd.log)"
    sleep 0.1; n=$((n + 1))
done
wait_file "$T/ctl/ready" 5000 && wait_file "$T/ctl2/ready" 5000 ||
    fail_setup "etcd_release: a proxy did not start: $(cat "$T/proxy.err" "$T/proxy2.err")"

cfg() {     # cfg NAME COMMAND_TIMEOUT_MS ENDPOINT...
    name=$1 ms=$2 eps=""
    shift 2
    for p in "$@"; do eps="$eps${eps:+, }\"http://127.0.0.1:$p\""; done
    cat >"$T/$name.cfg" <<EOF
lease_ms = 5000;
etcd = { endpoints = ( $eps ); connect_timeout_ms = 500; command_timeout_ms = $ms; };
mutexes = ( { symbol = "held_lock"; } );
EOF
}
cfg a 500 "$proxy"
cfg a2 4000 "$proxy2" "$cport"
cfg b 500 "$cport"
run() {     # run NAME CFG ARGS...: lockprog under the shim, in the background
    name=$1 c=$2
    shift 2
    env LD_PRELOAD="$(cd "$B" && pwd)/libdmutex.so" DMUTEX_CONFIG="$T/$c.cfg" DMUTEX_LOG=info \
        "$B/tests/progs/lockprog" "$@" >"$T/$name.out" 2>"$T/$name.err" &
    last=$!
    pids="$pids $last"
}

run a a churn-idle "$T/ctl/dropped"
wait_text "$T/a.out" main 5000 || fail_setup "etcd_release: A did not start: $(cat "$T/a.err")"
sleep 0.3
touch "$T/ctl/arm"
if ! wait_file "$T/ctl/dropped" 5000 || ! wait_text "$T/a.out" idle 5000; then
    bad "A's release answer was lost, A went idle" "$(cat "$T/a.out" "$T/a.err" "$T/proxy.err")"
else
    ok "A's release answer was lost, A went idle ($(grep '^churn' "$T/a.out"))"
    grep -q "the store's thread retries it" "$T/a.err" &&
        ok "A's release was queued (its immediate retry failed too)" ||
        bad "A's release was queued (its immediate retry failed too)" "$(cat "$T/a.err")"
    apid=$last
    run b b lock
    if wait_text "$T/b.out" "^locked 0" 5000; then
        ok "B took the lock A's lost answer had given back"
    else
        bad "B took the lock A's lost answer had given back" "$(cat "$T/b.out" "$T/b.err")"
    fi
    touch "$T/ctl/open"
    wait_text "$T/a.err" "the release queued while etcd was out of reach is done\|lost while held" 8000
    if grep -q "lost while held" "$T/a.err" || ! kill -0 "$apid" 2>/dev/null; then
        bad "A's queued release, retried, is done, not a hold lost (A lives)" "$(cat "$T/a.err")"
    elif grep -q "the release queued while etcd was out of reach is done" "$T/a.err"; then
        ok "A's queued release, retried, is done, not a hold lost (A lives)"
    else
        bad "A's queued release, retried, is done, not a hold lost (A lives)" \
            "no word of the retry in 8 s:" "$(cat "$T/a.err")"
    fi
fi

run a2 a2 churn-idle "$T/ctl2/dropped"
a2pid=$last
wait_text "$T/a2.out" main 5000 || fail_setup "etcd_release: A2 did not start: $(cat "$T/a2.err")"
sleep 0.3
touch "$T/ctl2/hold" "$T/ctl2/arm"
if ! wait_file "$T/ctl2/dropped" 5000; then
    bad "A2's release ran, its answer held back" "$(cat "$T/a2.out" "$T/a2.err" "$T/proxy2.err")"
else
    run b2 b lock
    if wait_text "$T/b2.out" "^locked 0" 5000 && ! grep -q idle "$T/a2.out"; then
        ok "B took the lock while A2's release waited for its answer"
    else
        bad "B took the lock while A2's release waited for its answer" \
            "$(cat "$T/b2.out" "$T/b2.err" "$T/a2.out")"
    fi
    wait_text "$T/a2.out" idle 8000
    sleep 0.5
    if grep -q "lost while held" "$T/a2.err" || ! kill -0 "$a2pid" 2>/dev/null; then
        bad "A2's release, answered by the next member, is done, not a hold lost (A2 lives)" \
            "$(cat "$T/a2.err")"
    elif grep -q idle "$T/a2.out"; then
        ok "A2's release, answered by the next member, is done, not a hold lost (A2 lives)"
    else
        bad "A2's release, answered by the next member, is done, not a hold lost (A2 lives)" \
            "A2's unlock did not return in 8 s:" "$(cat "$T/a2.out" "$T/a2.err")"
    fi
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
