#!/bin/sh
# ls_json.test.sh: `dmutex ls --json` against a redis-server of its own (free
# port, tools/redis-tmp.sh) while a program under the shim holds one lock
# and has released another: the document parses and says what the server
# holds (state, holder, hold count, lease, token), a name from the server
# with quotes, a control byte and invalid UTF-8 is escaped, and an empty
# namespace is an empty list. Prints one closing line "N passed, N failed".
#
#   sh tests/ls_json.test.sh            (DMUTEX=path overrides build/dmutex)
cd "$(dirname "$0")/.." || exit 1
DMUTEX=${DMUTEX:-build/dmutex}
T=$(mktemp -d /tmp/ls.test.XXXXXX) || exit 1
. tests/lib.sh
. tools/redis-tmp.sh
holder="" waiter=""
cleanup() {
    exec 3>&- 4>&-
    [ -n "$holder" ] && kill -CONT "$holder" 2>/dev/null && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
    [ -n "$waiter" ] && kill "$waiter" 2>/dev/null && wait "$waiter" 2>/dev/null
    redis_tmp_stop
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 141' PIPE


make -s "$DMUTEX" build/libdmutex.so >"$T/make.log" 2>&1 || fail_setup "$(cat "$T/make.log")"
cc -std=gnu11 -Wall -Wextra -Werror -pthread -Iinclude tests/install/apiprog.c -o "$T/apiprog" \
    >"$T/cc.log" 2>&1 || fail_setup "$(cat "$T/cc.log")"
redis_tmp_start || fail_setup "no redis-server"
redis_tmp_fresh lstest
URL=redis://127.0.0.1:$REDIS_TMP_PORT
# A short renewal interval: a stopped holder shows as not renewing after
# 1 s + DM_WHO_ALIVE_SLACK_MS (1.5 s), with 7 s of its lease left.
printf 'namespace = "lstest";\nlease_ms = 10000;\nrenew_ms = 1000;\non_lease_lost = "warn";\nmutexes = ();\n' >"$T/app.cfg"

# The holder: takes and releases json.free, then holds json.held until its
# stdin (the fifo) closes.
mkfifo "$T/in"
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/app.cfg DMUTEX_REDIS=$URL DMUTEX_LOG=info \
    "$T/apiprog" json.held json.free <"$T/in" >"$T/out" 2>"$T/err" &
holder=$!
exec 3>"$T/in"
n=0
while ! grep -q '^held' "$T/out" && [ "$n" -lt 300 ] && kill -0 "$holder" 2>/dev/null; do
    sleep 0.1; n=$((n + 1))
done
grep -q '^held' "$T/out" || fail_setup "the holder did not take its lock: $(cat "$T/out" "$T/err")"
token=$(sed -n 's/^held //p' "$T/out")
# A name no shim would write, put there by something else on the server.
weird=$(printf 'q"\\\001\377')
redis-cli -p "$REDIS_TMP_PORT" SET "$("$DMUTEX" keys lstest "$weird" token)" 3 >/dev/null

if "$DMUTEX" ls -c "$T/app.cfg" -r "$URL" --json >"$T/json" 2>"$T/jerr"; then
    ok "dmutex ls --json succeeds"
else
    bad "dmutex ls --json succeeds" "$(cat "$T/jerr")"
fi
if python3 -m json.tool "$T/json" >/dev/null 2>"$T/perr"; then ok "its output is one JSON document"
else bad "its output is one JSON document" "$(cat "$T/perr")" "$(cat "$T/json")"; fi

# check.py NAME: asserts about the document, in Python.
check_json() {
    name=$1 code=$2
    if python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
token = int(sys.argv[2]); port = sys.argv[3]
locks = {l['name']: l for l in d['locks']}
$code" "$T/json" "$token" "$REDIS_TMP_PORT" "$holder" >"$T/py" 2>&1; then ok "$name"
    else bad "$name" "$(tail -n 3 "$T/py")" "$(cat "$T/json")"; fi
}
check_json "namespace, server and the three names" "
assert d['namespace'] == 'lstest', d['namespace']
assert d['redis'] == '127.0.0.1:' + port, d['redis']
assert sorted(locks) == sorted(['json.free', 'json.held', 'q\"\\\\\x01\ufffd']), sorted(locks)
assert [l['name'] for l in d['locks']] == sorted(locks)"
check_json "the held lock: holder, one hold, a lease, the holder's token" "
h = locks['json.held']
assert h['state'] == 'held', h
assert isinstance(h['holder'], str) and ':' in h['holder'], h
assert h['holds'] == 1, h
assert isinstance(h['lease_ms'], int) and 0 < h['lease_ms'] <= 30000, h
assert h['token'] == token, (h, token)
assert h['waiters'] == 0, h"
check_json "the released lock: free, no holder, no lease, a token" "
f = locks['json.free']
assert f['state'] == 'free', f
assert f['holder'] is None and f['holds'] is None and f['lease_ms'] is None, f
assert isinstance(f['token'], int) and f['token'] > 0, f"

"$DMUTEX" ls -r "$URL" -n lstest >"$T/table"
held_row=$(grep '^json.held ' "$T/table")
holder_id=$(python3 -c "import json,sys; print([l for l in json.load(open(sys.argv[1]))['locks'] if l['name']=='json.held'][0]['holder'])" "$T/json")
host=$(hostname)
case "$holder_id:$held_row" in
    ?*:*" held "*" $host:$holder apiprog (apiprog) x1 "*" yes "*" $token "*) ok "the table shows the holder as host:pid program (thread), alive, and its token" ;;
    *) bad "the table shows the holder as host:pid program (thread), alive, and its token" "$held_row" "json holder: $holder_id" ;;
esac
if grep -qF "    holder $holder_id: lease renewed " "$T/table"; then ok "the line below names its owner id and its last renewal"
else bad "the line below names its owner id and its last renewal" "$(cat "$T/table")"; fi
check_json "json: who, since, alive, the renewal interval" "
h = locks['json.held']
import os, time
assert h['who'] == '%s:%s apiprog (apiprog)' % (os.uname().nodename, sys.argv[4]), h
assert h['alive'] is True and h['renew_ms'] == 1000, h
assert 0 <= h['renewed_ms_ago'] <= 10000, h
assert time.time() * 1000 - 120000 < h['since_ms'] <= time.time() * 1000 + 1000, h
assert h['waiting'] == [], h"

# ls_poll PYTHON-CONDITION: reads ls --json until the condition on `locks`
# holds (10 s at most: records are written by the renewal thread, soon
# after a lock call, not by it); 0 when it did.
ls_poll() {
    i=0
    while [ "$i" -lt 100 ]; do
        "$DMUTEX" ls -r "$URL" -n lstest --json >"$T/json" 2>/dev/null &&
            python3 -c "import json, sys
locks = {l['name']: l for l in json.load(open(sys.argv[1]))['locks']}
sys.exit(0 if ($1) else 1)" "$T/json" "$holder" "$waiter" 2>/dev/null && return 0
        sleep 0.1; i=$((i + 1))
    done
    return 1
}

# A second process waits for json.held: listed under it, as who, since when.
mkfifo "$T/win"
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/app.cfg DMUTEX_REDIS=$URL \
    "$T/apiprog" json.held json.free2 <"$T/win" >"$T/wout" 2>"$T/werr" 3>&- &
waiter=$!
exec 4>"$T/win"
if ls_poll "[w['who'] for w in locks['json.held']['waiting']] == ['%s:%s apiprog (apiprog)' % (__import__('os').uname().nodename, sys.argv[3])]"; then
    ok "a waiting process is listed under the lock as host:pid program (thread)"
else bad "a waiting process is listed under the lock as host:pid program (thread)" "$(cat "$T/json")" "$(cat "$T/werr")"; fi
check_json "json: the waiter's owner id and since" "
w = locks['json.held']['waiting'][0]
import time
assert w['owner'].count(':') == 1 and len(w['owner'].split(':')[0]) == 32, w
assert time.time() * 1000 - 60000 < w['since_ms'] <= time.time() * 1000 + 1000, w"
"$DMUTEX" ls -r "$URL" -n lstest >"$T/table"
if grep -qE "^    waiting $host:$waiter apiprog \(apiprog\) for [0-9]+s \([0-9a-f]{32}:1\)$" "$T/table"; then
    ok "the table lists the waiter below the lock"
else bad "the table lists the waiter below the lock" "$(cat "$T/table")"; fi

# The holder stopped: its lease is not renewed; ls, top and unlock say so
# while the lease still runs.
kill -STOP "$holder"
if ls_poll "locks['json.held']['alive'] is False and locks['json.held']['lease_ms'] > 0"; then
    ok "a stopped holder shows as not renewing (alive false) while its lease runs"
else bad "a stopped holder shows as not renewing (alive false) while its lease runs" "$(cat "$T/json")"; fi
"$DMUTEX" ls -r "$URL" -n lstest >"$T/table"
if grep -E '^json.held ' "$T/table" | grep -qF " apiprog (apiprog) x1 " &&
   grep -E '^json.held ' "$T/table" | grep -qE ' NO +[0-9]+ '; then ok "the table says NO under ALIVE"
else bad "the table says NO under ALIVE" "$(cat "$T/table")"; fi
"$DMUTEX" top -r "$URL" -n lstest -N 1 >"$T/top"
if grep -E '^json.held ' "$T/top" | grep -qF "$host:$holder apiprog (apiprog) x1" &&
   grep -E '^json.held ' "$T/top" | grep -qE ' NO +[0-9]+ '; then ok "top shows the holder and NO under ALIVE"
else bad "top shows the holder and NO under ALIVE" "$(cat "$T/top")"; fi
"$DMUTEX" unlock -c "$T/app.cfg" -r "$URL" -n lstest json.held >"$T/uout" 2>"$T/uerr"
if grep -qF "held by $host:$holder apiprog (apiprog) (owner $holder_id)" "$T/uerr" &&
   grep -qF "NOT renewing: stopped, cut off from the server, or dead" "$T/uerr"; then
    ok "unlock without --force names the stopped holder and says it does not renew"
else bad "unlock without --force names the stopped holder and says it does not renew" "$(cat "$T/uerr")"; fi
kill -CONT "$holder"
if ls_poll "locks['json.held']['alive'] is True"; then ok "resumed, it renews again (alive true)"
else bad "resumed, it renews again (alive true)" "$(cat "$T/json")"; fi
key=$(redis-cli -p "$REDIS_TMP_PORT" --scan --pattern 'lstest:who:*' | head -n 1)
pttl=$(redis-cli -p "$REDIS_TMP_PORT" PTTL "$key")
if [ -n "$key" ] && [ "$pttl" -gt 0 ] && [ "$pttl" -le 10000 ]; then
    ok "a process's record expires with its lease (PTTL $pttl ms of 10000)"
else bad "a process's record expires with its lease" "key '$key' pttl '$pttl'"; fi

if "$DMUTEX" ls -r "$URL" -n nothing.here --json >"$T/json" 2>"$T/jerr"; then
    check_json "an empty namespace is an empty list" "
assert d['namespace'] == 'nothing.here' and d['locks'] == [], d"
else
    bad "an empty namespace is an empty list" "$(cat "$T/jerr")"
fi

exec 3>&-
wait "$holder"
holder=""
if grep -qx done "$T/out"; then ok "the holder released and exited"
else bad "the holder released and exited" "$(cat "$T/out" "$T/err")"; fi
# DMUTEX_LOG=info: the start line and the exit summary name the process as
# the tools show it, with the id its owner ids start with.
pid_of_id=${holder_id%%:*}
if grep -qF "; this process is $host:" "$T/err" &&
   grep -qE "this process is $host:[0-9]+ apiprog, process id $pid_of_id\$" "$T/err"; then
    ok "DMUTEX_LOG=info: the start line names the process and its id"
else bad "DMUTEX_LOG=info: the start line names the process and its id" "$(cat "$T/err")"; fi
if grep -qE "exit: $host:[0-9]+ apiprog, process id $pid_of_id \(owner ids $pid_of_id:<thread>\)" "$T/err"; then
    ok "the exit summary names the process and its id"
else bad "the exit summary names the process and its id" "$(cat "$T/err")"; fi
n=0
while ! grep -q '^held' "$T/wout" && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
exec 4>&-
wait "$waiter"
waiter=""
if grep -qx done "$T/wout"; then ok "the waiter got the lock, released it and exited"
else bad "the waiter got the lock, released it and exited" "$(cat "$T/wout" "$T/werr")"; fi
left=$(redis-cli -p "$REDIS_TMP_PORT" --scan --pattern 'lstest:who:*')
if [ -z "$left" ]; then ok "both processes' records are gone with them"
else bad "both processes' records are gone with them" "$left"; fi

# A named thread's hold shows that thread's name; a fork child's hold is
# its own process's (a new process id), shown with the child's pid.
mkfifo "$T/tin"
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/app.cfg DMUTEX_REDIS=$URL \
    build/tests/progs/whoprog who.a who.b <"$T/tin" >"$T/tout" 2>"$T/terr" &
holder=$!
exec 3>"$T/tin"
n=0
while ! grep -q '^child .* held B' "$T/tout" && [ "$n" -lt 300 ] && kill -0 "$holder" 2>/dev/null; do
    sleep 0.1; n=$((n + 1))
done
child=$(sed -n 's/^child \([0-9]*\) held B/\1/p' "$T/tout")
waiter=$child      # ls_poll's argv[3]
if [ -n "$child" ] && ls_poll "locks['who.a']['who'] == '%s:%s whoprog (seller-3)' % (__import__('os').uname().nodename, sys.argv[2]) and locks['who.b']['who'] == '%s:%s whoprog (whoprog)' % (__import__('os').uname().nodename, sys.argv[3]) and locks['who.a']['holder'].split(':')[0] != locks['who.b']['holder'].split(':')[0]"; then
    ok "a named thread's hold shows its name; a fork child's shows the child, under its own id"
else bad "a named thread's hold shows its name; a fork child's shows the child, under its own id" \
    "$(cat "$T/json")" "$(cat "$T/tout" "$T/terr")"; fi
exec 3>&-
wait "$holder"
holder="" waiter=""
if grep -qx done "$T/tout" && grep -qx "child done" "$T/tout"; then ok "the thread and the child released and exited"
else bad "the thread and the child released and exited" "$(cat "$T/tout" "$T/terr")"; fi

# A hold released and taken again by the same thread: its SINCE is the new
# grant's, not the record's line of the old one.
mkfifo "$T/rin"
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/app.cfg DMUTEX_REDIS=$URL \
    build/tests/progs/whoprog regrant who.re <"$T/rin" >"$T/rout" 2>"$T/rerr" &
holder=$!
exec 3>"$T/rin"
n=0
while ! grep -q '^relocked' "$T/rout" && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
relocked=$(sed -n 's/^relocked //p' "$T/rout")
"$DMUTEX" ls -r "$URL" -n lstest --json >"$T/json"
if [ -n "$relocked" ] && python3 -c "import json, sys
l = [l for l in json.load(open(sys.argv[1]))['locks'] if l['name'] == 'who.re'][0]
assert l['since_ms'] is not None and l['since_ms'] >= int(sys.argv[2]) - 1000, (l, sys.argv[2])" \
    "$T/json" "$relocked" 2>"$T/py"; then ok "a hold taken again shows the new grant's since"
else bad "a hold taken again shows the new grant's since" "$(cat "$T/py")" "$(cat "$T/rout" "$T/rerr")"; fi

# A record under another process's key, claiming the holder's id, is not
# believed; nor does a long program name cut the record short, nor an
# escape sequence in a thread's name reach the terminal.
pid_re=$(python3 -c "import json,sys; print([l for l in json.load(open(sys.argv[1]))['locks'] if l['name']=='who.re'][0]['holder'].split(':')[0])" "$T/json")
redis-cli -p "$REDIS_TMP_PORT" SET 'lstest:who:{aaaa}' "$(printf 'dmutex-who 1\nid\t%s\nwho\tEVIL:1 forged\nlease\t10000\t1000\nthread\t1\t5\tforged\nwait\t9\t0\twho.re\n' "$pid_re")" >/dev/null
"$DMUTEX" ls -r "$URL" -n lstest >"$T/table"
if ! grep -q "EVIL\|forged" "$T/table" && grep -q "^who.re .* whoprog (whoprog) x1" "$T/table"; then
    ok "a record whose key names another process is not believed"
else bad "a record whose key names another process is not believed" "$(cat "$T/table")"; fi
redis-cli -p "$REDIS_TMP_PORT" DEL 'lstest:who:{aaaa}' >/dev/null
exec 3>&-
wait "$holder"
holder=""

mkfifo "$T/lin"
long=$(python3 -c "print('L' * 2000)")
WHO_THREAD_NAME=$(printf 'e\033[31mX') LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/app.cfg \
    DMUTEX_REDIS=$URL python3 -c "import os, sys; os.execv(sys.argv[1], [sys.argv[2], 'who.la', 'who.lb'])" \
    build/tests/progs/whoprog "$long" <"$T/lin" >"$T/lout" 2>"$T/lerr" &
holder=$!
exec 3>"$T/lin"
if ls_poll "locks['who.la']['alive'] is True and locks['who.la']['who'].startswith('%s:%s %s (e?[31mX)' % (__import__('os').uname().nodename, sys.argv[2], 'L' * 128)[:40]) and locks['who.la']['who'].endswith('(e?[31mX)')"; then
    ok "a 2000-byte program name is cut, the record whole, the thread's escape byte a '?'"
else bad "a 2000-byte program name is cut, the record whole, the thread's escape byte a '?'" "$(cat "$T/json")"; fi
"$DMUTEX" ls -r "$URL" -n lstest >"$T/table"
if ! grep -q "$(printf '\033')" "$T/table"; then ok "no control byte reaches the table"
else bad "no control byte reaches the table" "$(cat -A "$T/table" | grep who.la)"; fi
exec 3>&-
wait "$holder"
holder=""

# A waiter stopped past its record's expiry is listed again once it runs:
# it still waits.
printf 'namespace = "lstest";\nlease_ms = 2000;\nrenew_ms = 666;\non_lease_lost = "warn";\nmutexes = ();\n' >"$T/short.cfg"
mkfifo "$T/s1in" "$T/s2in"
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/short.cfg DMUTEX_REDIS=$URL \
    "$T/apiprog" who.st who.sf1 <"$T/s1in" >"$T/s1out" 2>"$T/s1err" &
holder=$!
exec 3>"$T/s1in"
n=0
while ! grep -q '^held' "$T/s1out" && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/short.cfg DMUTEX_REDIS=$URL \
    "$T/apiprog" who.st who.sf2 <"$T/s2in" >"$T/s2out" 2>"$T/s2err" 3>&- &
waiter=$!
exec 4>"$T/s2in"
if ls_poll "len(locks['who.st']['waiting']) == 1"; then
    kill -STOP "$waiter"; sleep 3; kill -CONT "$waiter"
    if ls_poll "[w['who'] for w in locks['who.st']['waiting']] == ['%s:%s apiprog (apiprog)' % (__import__('os').uname().nodename, sys.argv[3])]"; then
        ok "a waiter whose record expired while it was stopped is listed again once it runs"
    else bad "a waiter whose record expired while it was stopped is listed again once it runs" "$(cat "$T/json")"; fi
else bad "a waiter whose record expired while it was stopped is listed again once it runs" "never listed" "$(cat "$T/json")"; fi
exec 3>&-
wait "$holder"
holder=""
n=0
while ! grep -q '^held' "$T/s2out" && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
exec 4>&-
wait "$waiter"
waiter=""

# A process whose record cannot be written (the server refuses writes:
# out of memory) and that then holds nothing sends nothing more: an idle
# process needs no record. And its exit's delete waits for no stalled
# server.
printf 'namespace = "lstest";\nlease_ms = 3000;\nrenew_ms = 500;\non_lease_lost = "warn";\nredis = { command_timeout_ms = 5000; };\nmutexes = ();\n' >"$T/idle.cfg"
mkfifo "$T/iin"
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/idle.cfg DMUTEX_REDIS=$URL \
    build/tests/progs/whoprog idle who.idle <"$T/iin" >"$T/iout" 2>"$T/ierr" &
holder=$!
exec 3>"$T/iin"
n=0
while ! grep -q '^held' "$T/iout" && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
CLI="redis-cli -p $REDIS_TMP_PORT"
$CLI CONFIG SET maxmemory-policy noeviction >/dev/null
$CLI CONFIG SET maxmemory 1 >/dev/null
sleep 1.5                                   # a refresh or two fail (renew_ms 500)
echo >&3                                    # the release (a script: not deny-oom)
n=0
while ! grep -q '^released' "$T/iout" && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
sleep 0.5
sets() { $CLI INFO commandstats | tr -d '\r' | sed -n 's/^cmdstat_set:calls=\([0-9]*\).*/\1/p'; }
before=$(sets); sleep 3; after=$(sets)
$CLI CONFIG SET maxmemory 0 >/dev/null
if [ $(( ${after:-0} - ${before:-0} )) -le 1 ]; then
    ok "an idle process whose record is refused stops writing it ($(( ${after:-0} - ${before:-0} )) SETs in 3 s)"
else bad "an idle process whose record is refused stops writing it" "$(( after - before )) SETs in 3 s"; fi
redis_pid=$($CLI INFO server | tr -d '\r' | sed -n 's/^process_id://p')
kill -STOP "$redis_pid"
t0=$(python3 -c 'import time; print(int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1000))')
exec 3>&-
wait "$holder"
holder=""
kill -CONT "$redis_pid"
t1=$(python3 -c 'import time; print(int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1000))')
# (command_timeout_ms is 5000: the delete's own bound is 200 ms, plus a
# write in flight's 200 ms)
if [ $((t1 - t0)) -lt 3000 ] && grep -q '^exiting' "$T/iout"; then
    ok "the exit does not wait a command timeout for a stalled server ($((t1 - t0)) ms)"
else bad "the exit does not wait a command timeout for a stalled server" "$((t1 - t0)) ms" "$(cat "$T/iout" "$T/ierr")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
