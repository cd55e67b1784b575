#!/bin/sh
# trace.test.sh: `dmutex trace` finds the mutexes of programs it knows
# nothing about, and the config it prints makes them cluster-wide:
#   trace_books    stripped C++ (g++ -O2 -s), `std::mutex g_books;`: no
#                  symbol left, so an address entry with the build-id (weak)
#   trace_factory  heap mutexes from account_new(): init_site, both mutexes
#                  one row; stripped, the init call's address (weak)
#   trace_array    a mutex inside a global struct array: symbol + offset
# For each: the row is found and identified, -o JSON parses, and the
# printed `mutexes = ( ... );` block pasted into a config (with this test's
# own redis-server) makes the Redis counter exact with 3 processes of 2
# threads at once (the same run without dmutex is shown, not asserted: a
# race may not happen). An address entry of another build-id is refused.
#   trace_conds    a global cond, heap conds (init_site box_new), a global
#                  rwlock, an rwlock array element and heap rwlocks
#                  (init_site table_new): the conds and rwlocks blocks
#                  name each with its counts; the mutexes and conds blocks
#                  as a config make a producer and a consumer in two
#                  processes wake each other (without the conds block the
#                  consumer's wait times out); the three blocks pass
#                  dmutex check.
#   c11prog        C11 <threads.h>: a heap mtx_t (init_site box_new, its
#                  mtx_init call), a global mtx_t and cnd_t by their
#                  symbols, every call counted; the printed block makes
#                  the counter exact across PROCS processes.
#   trace_routes   a global rwlock of no lock-like name (g_routes): its
#                  rwlocks entry, pasted into a config, keeps two keys of
#                  a redis-server equal for readers in PROCS processes
#                  while each process's writer updates both (no torn read,
#                  both counts exact).
# Also: a forking program gives two reports (and two JSON files), SIGUSR1
# and -i report while the program runs, a condition wait's re-acquisition
# counts, a full table is reported (not a crash), usage errors exit 2.
# What broke before (each check failed then): a heap address reused by
# another init_site's mutex, two file-statics `lock` and two globals
# `g_twin` (one in a plugin) given one name, a dlclosed plugin's mutexes
# reported unknown, the report written into a file the program opened on
# fd 2, a reporter thread in a program that never locks (unshare(2) with
# CLONE_NEWUSER wants one thread) and none started inside a lock call (a
# program whose malloc locks hung), an empty report in the stderr of a
# helper the program reads through popen, -o into a missing directory
# said only at exit, a set-user-ID program run untraced. The same for
# conds and rwlocks: two file-statics `cond` and `rw` given one name, those
# never given to their init one row each, a cond wait failing at once
# counted as a wait, a reused heap address counted under the old init
# site, a dlclosed plugin's conds and rwlocks reported unknown.
# Prints one closing line "N passed, N failed".
#
#   sh tests/trace.test.sh            (DMUTEX=path overrides build/dmutex)
cd "$(dirname "$0")/.." || exit 1
DMUTEX=${DMUTEX:-build/dmutex}
T=$(mktemp -d /tmp/trace.test.XXXXXX) || exit 1
. tests/lib.sh
. tools/redis-tmp.sh
pids=""
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    redis_tmp_stop
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 141' PIPE

PR=build/tests/progs
NEED="$DMUTEX build/libdmutex.so build/libdmutex-trace.so $PR/trace_books $PR/trace_factory
      $PR/trace_factory_stripped $PR/trace_array $PR/trace_misc $PR/trace_conds
      $PR/libtracegone.so $PR/trace_malloc $PR/libtracegone2.so $PR/trace_early
      $PR/trace_routes $PR/c11prog"
make -s $NEED >"$T/make.log" 2>&1 || fail_setup "$(cat "$T/make.log")"
redis_tmp_start || fail_setup "no redis-server"
CLI="redis-cli -p $REDIS_TMP_PORT"
PROCS=3 THREADS=2 ITERS=30 HOLD_US=300

has() {
    if grep -qF -- "$1" "$2"; then ok "$3"; else bad "$3" "no line with: $1" "in:" "$(cat "$2")"; fi
}
# wait_for TEXT FILE: up to 30 s for a line with TEXT.
wait_for() {
    n=0
    while ! grep -qF -- "$1" "$2" && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    grep -qF -- "$1" "$2"
}
json_ok() {   # FILE NAME
    if python3 -m json.tool "$1" >/dev/null 2>"$T/json.err"; then ok "$2"
    else bad "$2" "$(cat "$T/json.err")" "$(cat "$1" 2>&1)"; fi
}

# count_run KEY CONFIG|- PROG: PROCS processes at once, each THREADS x
# ITERS counted sections; with CONFIG under dmutex run. Echoes the count.
count_run() {
    $CLI del "$1" >/dev/null
    cpids=""
    for i in $(seq "$PROCS"); do
        if [ "$2" = - ]; then
            "$3" 127.0.0.1 "$REDIS_TMP_PORT" "$1" "$THREADS" "$ITERS" "$HOLD_US" \
                >"$T/run.$i.out" 2>&1 &
        else
            "$DMUTEX" run -c "$2" -- "$3" 127.0.0.1 "$REDIS_TMP_PORT" "$1" "$THREADS" "$ITERS" \
                "$HOLD_US" >"$T/run.$i.out" 2>&1 &
        fi
        cpids="$cpids $!"
    done
    pids="$pids $cpids"
    for p in $cpids; do wait "$p"; done
    $CLI get "$1"
}

# trace_case PROG EXPECT_ROW CERTAINTY MUTEXES: traces PROG, checks its row
# (MUTEXES mutexes of THREADS x ITERS locks each) and JSON, then the printed
# block as a config.
trace_case() {
    prog=$1 row=$2 certainty=$3 nmutex=$4
    name=$(basename "$prog")
    "$DMUTEX" trace -o "$T/$name.json" -- "$prog" 127.0.0.1 "$REDIS_TMP_PORT" "tr.$name" \
        "$THREADS" "$ITERS" "$HOLD_US" >"$T/$name.out" 2>"$T/$name.err"
    rc=$?
    if [ "$rc" -eq 0 ]; then ok "$name: runs under dmutex trace (exit 0)"
    else bad "$name: runs under dmutex trace" "exit $rc" "$(cat "$T/$name.err")"; fi
    has "$row" "$T/$name.err" "$name: identified as: $row"
    # The program's mutex is the top row, with its certainty and all its locks.
    top=$(awk '$1 == "1" { print $2, $3; exit }' "$T/$name.err")
    locks=$((nmutex * THREADS * ITERS))
    if [ "$top" = "$certainty $locks" ]; then ok "$name: top row is $certainty with $locks locks"
    else bad "$name: top row is $certainty with $locks locks" "got: $top" "$(cat "$T/$name.err")"; fi
    json_ok "$T/$name.json" "$name: -o writes JSON that parses"
    if grep -qF "\"certainty\": \"$certainty\"" "$T/$name.json"; then
        ok "$name: JSON has the row's certainty"
    else bad "$name: JSON has the row's certainty" "$(cat "$T/$name.json")"; fi

    { echo "redis = { host = \"127.0.0.1\"; port = $REDIS_TMP_PORT; };"
      sed -n '/^mutexes = (/,/^);/p' "$T/$name.err"; } >"$T/$name.cfg"
    if "$DMUTEX" check -c "$T/$name.cfg" -- "$prog" >"$T/$name.check" 2>&1; then
        ok "$name: the printed block passes dmutex check"
    else bad "$name: the printed block passes dmutex check" "$(cat "$T/$name.cfg")" \
        "$(cat "$T/$name.check")"; fi
    want=$((PROCS * THREADS * ITERS))
    plain=$(count_run "plain.$name" - "$prog")
    echo "     (without dmutex, $PROCS processes counted $plain of $want)"
    got=$(count_run "dm.$name" "$T/$name.cfg" "$prog")
    if [ "$got" = "$want" ]; then ok "$name: with the printed config the counter is exact ($want)"
    else bad "$name: with the printed config the counter is exact" "got $got, want $want" \
        "$(cat "$T/$name.cfg")" "$(cat "$T"/run.*.out)"; fi
}

# ---- the three programs ---------------------------------------------------
trace_case "$PR/trace_books" "(no symbol covers it)" address 1
has "build_id = \"" "$T/trace_books.err" "trace_books: the address entry carries the build-id"
has "# address (weak: address of this build only)" "$T/trace_books.err" \
    "trace_books: the entry is marked weak"
has "weak: address of this build only" "$T/trace_books.check" \
    "trace_books: dmutex check marks the address entry weak"

# Another build: the address names something else there, so it is refused.
sed 's/build_id = "[0-9a-f]*"/build_id = "00112233"/' "$T/trace_books.cfg" >"$T/other.cfg"
"$DMUTEX" check -c "$T/other.cfg" -- "$PR/trace_books" >"$T/other.out" 2>&1
rc=$?
if [ "$rc" -eq 78 ]; then ok "another build-id: dmutex check exits 78"
else bad "another build-id: dmutex check exits 78" "exit $rc" "$(cat "$T/other.out")"; fi
has "the entry is for build-id 00112233, but the loaded trace_books is build-id" "$T/other.out" \
    "another build-id: the error names both build-ids"

trace_case "$PR/trace_factory" "heap, pthread_mutex_init in account_new" init_site 2
has '{ init_site = "account_new"; name = "account_new"; }' "$T/trace_factory.err" \
    "trace_factory: the entry is init_site account_new"
if grep -qE "	init_site account_new	0x[0-9a-f]+ \(trace_factory\+0x[0-9a-f]+\), [0-9]+ bytes	dmutex$" \
       "$T/trace_factory.check" &&
   grep -qF "0 mutexes would be mapped (1 init_site function)," "$T/trace_factory.check"; then
    ok "trace_factory: dmutex check gives the function's size and counts 1 init_site function"
else bad "trace_factory: dmutex check gives the function's size and counts 1 init_site function" \
    "$(cat "$T/trace_factory.check")"; fi
has "[2 mutexes]" "$T/trace_factory.err" "trace_factory: both accounts are one row"

trace_case "$PR/trace_factory_stripped" "heap, pthread_mutex_init called from trace_factory_stripped+" \
    address 2
has "{ init_site_address = 0x" "$T/trace_factory_stripped.err" \
    "trace_factory_stripped: the entry is the init call's address, with the build-id"
has "weak: address of this build only" "$T/trace_factory_stripped.check" \
    "trace_factory_stripped: dmutex check marks the init_site_address entry weak"
# An address entry names one call, not a function: no size, and counted
# as what it is.
if grep -qE "	init_site_address 0x[0-9a-f]+ \(weak: address of this build only\)	0x[0-9a-f]+ \(trace_factory_stripped\+0x[0-9a-f]+\), the return address of one pthread_mutex_init or mtx_init call	dmutex$" \
       "$T/trace_factory_stripped.check" &&
   grep -qF "0 mutexes would be mapped (0 init_site functions, 1 init_site_address call)," \
       "$T/trace_factory_stripped.check"; then
    ok "trace_factory_stripped: dmutex check names the call (no size) and counts 1 init_site_address call"
else bad "trace_factory_stripped: dmutex check names the call (no size) and counts 1 init_site_address call" \
    "$(cat "$T/trace_factory_stripped.check")"; fi

trace_case "$PR/trace_array" "g_slots+120 in trace_array (.symtab)" symbol 1
has '{ symbol = "g_slots"; offset = 120; name = "g_slots.at120"; }' "$T/trace_array.err" \
    "trace_array: the entry is g_slots with the mutex's offset"

# ---- condition variables and rwlocks ------------------------------------------
TC=$PR/trace_conds
"$DMUTEX" trace -o "$T/tc.json" -- "$TC" local >"$T/tc.out" 2>"$T/tc.err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qx "local done" "$T/tc.out"; then ok "trace_conds: runs under dmutex trace"
else bad "trace_conds: runs under dmutex trace" "exit $rc" "$(cat "$T/tc.out" "$T/tc.err")"; fi
sed -n '/^conds = (/,/^);/p' "$T/tc.err" >"$T/tc.conds"
sed -n '/^rwlocks = (/,/^);/p' "$T/tc.err" >"$T/tc.rwlocks"
has '{ symbol = "q_ready"; name = "q_ready"; }' "$T/tc.conds" "conds: a global cond by its symbol"
has '{ init_site = "box_new"; name = "box_new"; }' "$T/tc.conds" \
    "conds: heap conds by their pthread_cond_init call site"
has '{ symbol = "routes_rwlock"; name = "routes_rwlock"; }' "$T/tc.rwlocks" \
    "rwlocks: a global rwlock by its symbol"
has '{ symbol = "shard_locks"; index = 2; name = "shard_locks.2"; }' "$T/tc.rwlocks" \
    "rwlocks: an element of an rwlock array by its index (sizeof(pthread_rwlock_t))"
has '{ init_site = "table_new"; name = "table_new"; }' "$T/tc.rwlocks" \
    "rwlocks: heap rwlocks by their pthread_rwlock_init call site"
# counts ROW_TEXT COLUMNS NAME: the row with ROW_TEXT has these counts
# (columns 3 to 5: waits signals broadcasts, or reads writes contended).
counts() {
    got=$(grep -F -- "$1" "$T/tc.err" | awk '{ print $3, $4, $5 }')
    if [ "$got" = "$2" ]; then ok "$3"; else bad "$3" "got '$got', want '$2'" "$(cat "$T/tc.err")"; fi
}
n_ready=$(grep -F "q_ready in trace_conds" "$T/tc.err" | awk '{ print $4 }')
if [ "$n_ready" = 20 ]; then ok "conds: every signal of q_ready counted (20)"
else bad "conds: every signal of q_ready counted (20)" "got '$n_ready'" "$(cat "$T/tc.err")"; fi
has "heap, pthread_cond_init in box_new" "$T/tc.err" "conds: the heap row names the init call"
n_box=$(grep -F "pthread_cond_init in box_new" "$T/tc.err" | awk '{ print $4, $5 }')
if [ "$n_box" = "20 1" ] && grep -qF "[2 conds]" "$T/tc.err"; then
    ok "conds: both boxes are one row, 20 signals and 1 broadcast"
else bad "conds: both boxes are one row, 20 signals and 1 broadcast" "got '$n_box'" \
    "$(cat "$T/tc.err")"; fi
counts "routes_rwlock in trace_conds" "7 3 0" \
    "rwlocks: rdlock, tryrdlock, timedrdlock, wrlock and timedwrlock all counted (7 reads, 3 writes)"
counts "pthread_rwlock_init in table_new" "4 2 0" "rwlocks: both tables are one row (4 reads, 2 writes)"
json_ok "$T/tc.json" "trace_conds: -o writes JSON that parses"
if python3 - "$T/tc.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
conds = {r["name"]: r for r in d["conds"]["rows"]}
rw = {r["name"]: r for r in d["rwlocks"]["rows"]}
assert conds["q_ready"]["signals"] == 20 and conds["box_new"]["objects"] == 2, conds
assert rw["routes_rwlock"]["reads"] == 7 and rw["routes_rwlock"]["writes"] == 3, rw
assert "conds = (" in d["conds"]["config"] and "rwlocks = (" in d["rwlocks"]["config"]
PY
then ok "trace_conds: the JSON has the conds and rwlocks rows and blocks"
else bad "trace_conds: the JSON has the conds and rwlocks rows and blocks" "$(cat "$T/tc.json")"; fi

{ echo "redis = { host = \"127.0.0.1\"; port = $REDIS_TMP_PORT; };"
  sed -n '/^mutexes = (/,/^);/p' "$T/tc.err"; } >"$T/tc-mutexes.cfg"
{ cat "$T/tc-mutexes.cfg"; cat "$T/tc.conds"; } >"$T/tc.cfg"
if "$DMUTEX" check -c "$T/tc.cfg" -- "$TC" >"$T/tc.check" 2>&1; then
    ok "trace_conds: the printed mutexes and conds blocks pass dmutex check"
else bad "trace_conds: the printed mutexes and conds blocks pass dmutex check" \
    "$(cat "$T/tc.cfg")" "$(cat "$T/tc.check")"; fi
{ cat "$T/tc.cfg"; cat "$T/tc.rwlocks"; } >"$T/tc-all.cfg"
if "$DMUTEX" check -c "$T/tc-all.cfg" -- "$TC" >"$T/tc-all.check" 2>&1 &&
   grep -qF ", 2 rwlocks (1 init_site function)," "$T/tc-all.check"; then
    ok "trace_conds: with the rwlocks block too, dmutex check maps both rwlocks and the init_site"
else bad "trace_conds: with the rwlocks block too, dmutex check maps both rwlocks and the init_site" \
    "$(cat "$T/tc-all.cfg")" "$(cat "$T/tc-all.check")"; fi

# cross_run CONFIG N WAIT_MS TAG: a consumer, then (once it waits) a
# producer of N items under dmutex run with CONFIG; outputs in
# $T/TAG.consume and $T/TAG.produce, exit statuses in crc and prc.
cross_run() {
    $CLI del "tc.$4:q" "tc.$4:full" "tc.$4:seen" >/dev/null
    "$DMUTEX" run -c "$1" -- "$TC" consume 127.0.0.1 "$REDIS_TMP_PORT" "tc.$4" "$2" "$3" \
        >"$T/$4.consume" 2>&1 &
    cpid=$!
    pids="$pids $cpid"
    wait_for waiting "$T/$4.consume"
    "$DMUTEX" run -c "$1" -- "$TC" produce 127.0.0.1 "$REDIS_TMP_PORT" "tc.$4" "$2" "$3" \
        >"$T/$4.produce" 2>&1 &
    ppid=$!
    pids="$pids $ppid"
    wait "$cpid"; crc=$?
    wait "$ppid"; prc=$?
}
cross_run "$T/tc.cfg" 10 60000 cross
if [ "$crc" -eq 0 ] && [ "$prc" -eq 0 ] && grep -qx "consumed 10" "$T/cross.consume" &&
   ! grep -q "^dup" "$T/cross.consume" && grep -qx "produced 10" "$T/cross.produce"; then
    ok "with the printed conds, a producer and a consumer in two processes wake each other (10 items)"
else bad "with the printed conds, a producer and a consumer in two processes wake each other" \
    "consumer exit $crc, producer exit $prc" "$(cat "$T/tc.cfg")" "$(cat "$T/cross.consume")" \
    "$(cat "$T/cross.produce")"; fi
cross_run "$T/tc-mutexes.cfg" 3 2000 local
if [ "$crc" -eq 3 ] && grep -q "^timeout on q_ready" "$T/local.consume"; then
    ok "without the conds block the consumer's wait is never ended by the other process"
else bad "without the conds block the consumer's wait is never ended by the other process" \
    "consumer exit $crc" "$(cat "$T/local.consume")"; fi

# ---- C11 <threads.h>: mtx_t and cnd_t -----------------------------------------
# glibc's mtx_* and cnd_* never call the exported pthread functions, so the
# trace library records them as the pthread calls they are (before, a C11
# program's report had no row of them, and its config nothing to map).
C11=$PR/c11prog
"$DMUTEX" trace -- "$C11" count-heap 127.0.0.1 "$REDIS_TMP_PORT" tr.c11h "$THREADS" "$ITERS" \
    "$HOLD_US" >"$T/c11h.out" 2>"$T/c11h.err"
has "heap, mtx_init in box_new" "$T/c11h.err" "c11: a heap mtx_t is named by its mtx_init call"
has '{ init_site = "box_new"; name = "box_new"; }' "$T/c11h.err" \
    "c11: the heap mtx_t's entry is init_site box_new"
top=$(awk '$1 == "1" { print $2, $3; exit }' "$T/c11h.err")
if [ "$top" = "init_site $((THREADS * ITERS))" ]; then
    ok "c11: every mtx_lock of the heap mtx_t counted ($((THREADS * ITERS)))"
else bad "c11: every mtx_lock of the heap mtx_t counted" "got: $top" "$(cat "$T/c11h.err")"; fi
"$DMUTEX" trace -- "$C11" timedwait 127.0.0.1 "$REDIS_TMP_PORT" tr.c11w 50 \
    >"$T/c11w.out" 2>"$T/c11w.err"
has "c11_lock in c11prog (.symtab) (std::mutex / pthread_mutex_t / mtx_t)" "$T/c11w.err" \
    "c11: a global mtx_t is named by its symbol"
n=$(grep -F "c11_lock in c11prog" "$T/c11w.err" | awk '{ print $3 }')
if [ "$n" = 2 ]; then ok "c11: mtx_lock and the cnd_timedwait's re-acquisition counted (2 locks)"
else bad "c11: mtx_lock and the cnd_timedwait's re-acquisition counted (2 locks)" "got '$n'" \
    "$(cat "$T/c11w.err")"; fi
has '{ symbol = "ready"; name = "ready"; }' "$T/c11w.err" "c11: a global cnd_t is in the conds block"
n=$(grep -F "ready in c11prog (.symtab) (std::condition_variable / pthread_cond_t / cnd_t)" \
    "$T/c11w.err" | awk '{ print $3 }')
if [ "$n" = 1 ]; then ok "c11: the cnd_timedwait counted (1 wait)"
else bad "c11: the cnd_timedwait counted (1 wait)" "got '$n'" "$(cat "$T/c11w.err")"; fi
{ echo "redis = { host = \"127.0.0.1\"; port = $REDIS_TMP_PORT; };"
  sed -n '/^mutexes = (/,/^);/p' "$T/c11h.err"; } >"$T/c11.cfg"
$CLI del dm.c11:n >/dev/null
cpids=""
for i in $(seq "$PROCS"); do
    "$DMUTEX" run -c "$T/c11.cfg" -- "$C11" count-heap 127.0.0.1 "$REDIS_TMP_PORT" dm.c11 \
        "$THREADS" "$ITERS" "$HOLD_US" >"$T/c11run.$i.out" 2>&1 &
    cpids="$cpids $!"
done
pids="$pids $cpids"
for p in $cpids; do wait "$p"; done
got=$($CLI get dm.c11:n) want=$((PROCS * THREADS * ITERS))
if [ "$got" = "$want" ]; then
    ok "c11: with the printed config the heap mtx_t's counter is exact across $PROCS processes ($want)"
else bad "c11: with the printed config the heap mtx_t's counter is exact" "got $got, want $want" \
    "$(cat "$T/c11.cfg")" "$(cat "$T"/c11run.*.out)"; fi

# ---- an rwlock of no lock-like name, end to end ----------------------------
TR=$PR/trace_routes
RW_WRITES=15 RW_READERS=3 RW_READS=15
"$DMUTEX" trace -- "$TR" 127.0.0.1 "$REDIS_TMP_PORT" tr.routes 3 2 3 "$HOLD_US" \
    >"$T/tr.out" 2>"$T/tr.err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qx "torn 0" "$T/tr.out"; then ok "trace_routes: runs under dmutex trace"
else bad "trace_routes: runs under dmutex trace" "exit $rc" "$(cat "$T/tr.out" "$T/tr.err")"; fi
sed -n '/^rwlocks = (/,/^);/p' "$T/tr.err" >"$T/tr.rwlocks"
has '{ symbol = "g_routes"; name = "g_routes"; }' "$T/tr.rwlocks" \
    "trace_routes: g_routes (no lock-like name) gets an rwlocks entry by its calls"
{ echo "redis = { host = \"127.0.0.1\"; port = $REDIS_TMP_PORT; };"
  cat "$T/tr.rwlocks"; } >"$T/tr.cfg"
# routes_run CONFIG|- PREFIX: PROCS processes at once, each a writer and
# RW_READERS readers; echoes PREFIX:a and PREFIX:b, outputs in $T/rw.N.out.
routes_run() {
    $CLI del "$2:a" "$2:b" >/dev/null
    cpids=""
    for i in $(seq "$PROCS"); do
        if [ "$1" = - ]; then
            "$TR" 127.0.0.1 "$REDIS_TMP_PORT" "$2" "$RW_WRITES" "$RW_READERS" "$RW_READS" \
                "$HOLD_US" >"$T/rw.$i.out" 2>&1 &
        else
            "$DMUTEX" run -c "$1" -- "$TR" 127.0.0.1 "$REDIS_TMP_PORT" "$2" "$RW_WRITES" \
                "$RW_READERS" "$RW_READS" "$HOLD_US" >"$T/rw.$i.out" 2>&1 &
        fi
        cpids="$cpids $!"
    done
    pids="$pids $cpids"
    for p in $cpids; do wait "$p"; done
    echo "$($CLI get "$2:a") $($CLI get "$2:b")"
}
want=$((PROCS * RW_WRITES))
plain=$(routes_run - tr.plain)
echo "     (without dmutex, $PROCS processes: a b = $plain of $want; torn reads:" \
    "$(cat "$T"/rw.*.out | awk '$1 == "torn" { s += $2 } END { print s + 0 }'))"
got=$(routes_run "$T/tr.cfg" tr.dm)
torn=$(cat "$T"/rw.*.out | awk '$1 == "torn" { n++; s += $2 } END { print n + 0, s + 0 }')
if [ "$got" = "$want $want" ] && [ "$torn" = "$PROCS 0" ]; then
    ok "trace_routes: with the printed rwlocks entry, $PROCS processes read no torn pair and write both keys exactly ($want)"
else bad "trace_routes: with the printed rwlocks entry, no torn read and both keys exact" \
    "a b = $got, want $want $want; processes done, torn reads: $torn" "$(cat "$T/tr.cfg")" \
    "$(cat "$T"/rw.*.out)"; fi

# ---- fork: a report per process -------------------------------------------
"$DMUTEX" trace -o "$T/fork.json" -- "$PR/trace_misc" fork >"$T/fork.out" 2>"$T/fork.err"
n=$(grep -c "^dmutex trace: pid [0-9]* (trace_misc), exit report" "$T/fork.err")
pids_seen=$(sed -n 's/^dmutex trace: pid \([0-9]*\) .*/\1/p' "$T/fork.err" | sort -u | wc -l)
if [ "$n" -eq 2 ] && [ "$pids_seen" -eq 2 ]; then ok "fork: two exit reports, two pids"
else bad "fork: two exit reports, two pids" "$(cat "$T/fork.err")"; fi
child=$(grep -B3 "child_lock" "$T/fork.err" | sed -n 's/^dmutex trace: pid \([0-9]*\) .*/\1/p')
if [ -n "$child" ] && [ -f "$T/fork.$child.json" ] && [ -f "$T/fork.json" ]; then
    ok "fork: the child writes FILE.<pid>.json, the program FILE"
    json_ok "$T/fork.$child.json" "fork: the child's JSON parses"
    if grep -q child_lock "$T/fork.$child.json" && ! grep -q parent_lock "$T/fork.$child.json"; then
        ok "fork: the child's report counts only the child's locks"
    else bad "fork: the child's report counts only the child's locks" "$(cat "$T/fork.$child.json")"; fi
else
    bad "fork: the child writes FILE.<pid>.json, the program FILE" "child pid '$child'" \
        "$(ls "$T")"
fi

if [ -n "$child" ] && grep -q "^dmutex trace: pid $child (trace_misc), exit report: .*; a fork child of [0-9]*: its counts start at the fork" "$T/fork.err" &&
   grep -q '"fork_child_of": ' "$T/fork.$child.json" && ! grep -q fork_child_of "$T/fork.json"; then
    ok "fork: the child's report and JSON say whose fork child it is, the program's do not"
else bad "fork: the child's report and JSON say whose fork child it is, the program's do not" \
    "$(cat "$T/fork.err")"; fi
# A fork child that locks nothing reports that, in one line and in its
# JSON: it was dropped silently, which read the same as a child the
# preload never reached.
"$DMUTEX" trace -o "$T/fi.json" -- "$PR/trace_misc" forkidle >"$T/fi.out" 2>"$T/fi.err"
fi_child=$(sed -n 's/^child \([0-9]*\)$/\1/p' "$T/fi.out")
fi_parent=$(sed -n 's/^dmutex trace: pid \([0-9]*\) (trace_misc), exit report: 1 mutexes.*/\1/p' "$T/fi.err")
has "dmutex trace: pid $fi_child (trace_misc), exit report: no mutex, rwlock or condition variable used since the fork (a fork child of $fi_parent)" \
    "$T/fi.err" "fork: a child that locks nothing says so in one line"
if [ -n "$fi_child" ] && [ -f "$T/fi.$fi_child.json" ] &&
   grep -q "\"fork_child_of\": $fi_parent," "$T/fi.$fi_child.json" &&
   grep -q '"mutexes_locked": 0,' "$T/fi.$fi_child.json"; then
    ok "fork: a child that locks nothing writes its JSON (0 mutexes, its parent)"
    json_ok "$T/fi.$fi_child.json" "fork: that JSON parses"
else bad "fork: a child that locks nothing writes its JSON (0 mutexes, its parent)" \
    "child '$fi_child'" "$(ls "$T")" "$(cat "$T/fi.err")"; fi

# A fork while the reporter thread writes a report: the child must not
# inherit the report's lock held (its exit report would wait forever).
"$DMUTEX" trace -i 1 -- "$PR/trace_misc" forkloop 3000 >"$T/fl.out" 2>"$T/fl.err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^forks" "$T/fl.out" && grep -q "interval report" "$T/fl.err"; then
    ok "fork during interval reports: every child exits ($(cat "$T/fl.out"))"
else bad "fork during interval reports: every child exits" "exit $rc" "$(cat "$T/fl.out")" \
    "$(grep -c "exit report" "$T/fl.err") exit reports"; fi

# ---- SIGUSR1 and -i: reports while the program runs -----------------------
# sigusr1 MODE TAG LOCKED WHAT: trace_misc MODE FILE under trace, SIGUSR1
# once it is ready; the report must come while it runs and name LOCKED.
sigusr1() {
    rm -f "$T/go"
    "$DMUTEX" trace -- "$PR/trace_misc" "$1" "$T/go" >"$T/$2.out" 2>"$T/$2.err" &
    sp=$!
    pids="$pids $sp"
    if wait_for ready "$T/$2.out"; then
        kill -USR1 "$sp"
        if wait_for "signal report" "$T/$2.err" && kill -0 "$sp" 2>/dev/null; then
            ok "SIGUSR1: a report while $4 runs"
        else bad "SIGUSR1: a report while $4 runs" "$(cat "$T/$2.err")"; fi
        has "$3" "$T/$2.err" "SIGUSR1: the report of $4 has $3 locked so far"
    else
        bad "SIGUSR1: $4 got ready" "$(cat "$T/$2.out" "$T/$2.err")"
    fi
    touch "$T/go"
    wait "$sp"
}
sigusr1 wait sig wait_lock "the program"
has "exit report" "$T/sig.err" "SIGUSR1: the exit report still comes"
# A program that locks rwlocks and never a mutex gets its reporter too.
sigusr1 rwwait rsig wait_rwlock "a program of rwlocks only"

rm -f "$T/go"
"$DMUTEX" trace -i 1 -- "$PR/trace_misc" wait "$T/go" >"$T/iv.out" 2>"$T/iv.err" &
iv=$!
pids="$pids $iv"
if wait_for "interval report" "$T/iv.err" && kill -0 "$iv" 2>/dev/null; then
    ok "-i 1: a report while the program runs"
else bad "-i 1: a report while the program runs" "$(cat "$T/iv.err")"; fi
touch "$T/go"
wait "$iv"

# ---- a condition wait, options --------------------------------------------
"$DMUTEX" trace --min-locks 1000 -- "$PR/trace_misc" cond >"$T/cond.out" 2>"$T/cond.err"
row=$(grep "cond_lock in trace_misc" "$T/cond.err")
locks=$(echo "$row" | awk '{ print $3 }')
threads=$(echo "$row" | awk '{ print $9 }')
if [ -n "$locks" ] && [ "$locks" -ge 3 ] && [ "$threads" = 2 ]; then
    ok "cond: the re-acquisition after a wait counts (>= 3 locks, 2 threads)"
else bad "cond: the re-acquisition after a wait counts" "$(cat "$T/cond.err")"; fi
has "(no mutex passed --top 10 / --min-locks 1000)" "$T/cond.err" \
    "--min-locks: rows with fewer locks get no entry"

# A wait that fails at once neither releases nor retakes its mutex: no
# lock counted for it.
"$DMUTEX" trace -- "$PR/trace_misc" waiterr >"$T/we.out" 2>"$T/we.err"
row() {   # IDENTIFICATION CERTAINTY LOCKS FILE LABEL
    got=$(awk -v f="$1" 'index($0, f) { print $2, $3; exit }' "$4")
    if [ "$got" = "$2 $3" ]; then ok "$5"
    else bad "$5" "got '$got'" "$(cat "$4")"; fi
}
if grep -qx "waiterr EPERM EINVAL" "$T/we.out"; then
    row "cond_lock in trace_misc" symbol 1 "$T/we.err" \
        "a timed wait with a bad deadline (EINVAL) is no re-acquisition"
    if grep -q "ec_lock" "$T/we.err"; then
        bad "a wait on an error-checking mutex not held (EPERM) is no acquisition" \
            "$(cat "$T/we.err")"
    else ok "a wait on an error-checking mutex not held (EPERM) is no acquisition"; fi
else bad "waiterr: the waits fail as glibc says" "$(cat "$T/we.out" "$T/we.err")"; fi

# Times are in ns whatever the clock of the hot path (rdtsc where the TSC
# is invariant, calibrated): a 300 ms hold is reported as the program
# timed it, within 20% (what a preemption between the two readings could
# add on a loaded machine), not in ticks (3x on a 3 GHz CPU).
"$DMUTEX" trace -o "$T/hold.json" -- "$PR/trace_misc" hold 300 >"$T/hold.out" 2>"$T/hold.err"
held=$(sed -n 's/^held \([0-9]*\)$/\1/p' "$T/hold.out")
if python3 - "$T/hold.json" "$held" >"$T/hold.py" 2>&1 <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
got = [r["hold_max_ns"] for r in rows if "hold_lock" in r["identification"]][0]
want = int(sys.argv[2])
print("report", got, "program", want)
sys.exit(0 if abs(got - want) <= want / 5 else 1)
PY
then ok "a 300 ms hold is reported in ns ($(cat "$T/hold.py"))"
else bad "a 300 ms hold is reported in ns" "$(cat "$T/hold.py")" "$(cat "$T/hold.err")"; fi

# Mutexes no entry can name (never given to pthread_mutex_init, as a C++
# program's heap std::mutexes): one row, not one per address; so for conds
# and rwlocks never given to their init (one row of each kind: 3 in all).
"$DMUTEX" trace -- "$PR/trace_misc" uninit 3000 >"$T/un.out" 2>"$T/un.err"
rows=$(grep -c "^ *[0-9][0-9]*  unknown " "$T/un.err")
for kind in mutex:mutexes cond:conds rwlock:rwlocks; do
    if [ "$rows" = 3 ] &&
       grep -q "never initialised by pthread_${kind%:*}_init.*\[3000 ${kind#*:}\]" "$T/un.err"
    then ok "3000 ${kind#*:} never initialised by a call: one unknown row"
    else bad "3000 ${kind#*:} never initialised by a call: one unknown row" "$rows unknown rows" \
        "$(head -c 3000 "$T/un.err")"; fi
done

# More mutexes than the table holds: counted and said, not a crash.
"$DMUTEX" trace -- "$PR/trace_misc" many 40000 >"$T/many.out" 2>"$T/many.err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qx "many 40000" "$T/many.out"; then
    ok "a full table: the program runs to its end"
else bad "a full table: the program runs to its end" "exit $rc" "$(head -c 2000 "$T/many.err")"; fi
has "acquisitions not tracked (the table of" "$T/many.err" "a full table: the report says so"

"$DMUTEX" trace >"$T/u.out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "no PROGRAM given" "$T/u.out"; then ok "no PROGRAM: exit 2"
else bad "no PROGRAM: exit 2" "exit $rc" "$(cat "$T/u.out")"; fi
"$DMUTEX" trace -i 0 -- true >"$T/u.out" 2>&1
rc=$?
if [ "$rc" -eq 2 ]; then ok "-i 0: exit 2"; else bad "-i 0: exit 2" "exit $rc"; fi
"$DMUTEX" trace -- "$T/no-such-program" >"$T/u.out" 2>&1
rc=$?
if [ "$rc" -eq 127 ]; then ok "a missing PROGRAM: exit 127"
else bad "a missing PROGRAM: exit 127" "exit $rc" "$(cat "$T/u.out")"; fi

# ---- identification that holds: reuse, twins, unloaded objects ------------
# names_unique FILE LABEL: no two entries of FILE's block share a name.
names_unique() {
    dup=$(sed -n '/^mutexes = (/,/^);/p' "$1" | grep -o 'name = "[^"]*"' | sort | uniq -d)
    if [ -z "$dup" ]; then ok "$2: every entry has a name of its own"
    else bad "$2: every entry has a name of its own" "shared: $dup" "$(cat "$1")"; fi
}
"$DMUTEX" trace -- "$PR/trace_misc" reuse >"$T/reuse.out" 2>"$T/reuse.err"
for want in "reuse_b:5" "reuse_a:1"; do
    fn=${want%:*} n=${want#*:}
    got=$(awk -v f="in $fn " 'index($0, f) && $2 == "init_site" { print $3 }' "$T/reuse.err")
    if [ "$got" = "$n" ]; then ok "reuse: the mutex of $fn at a reused address has its $n locks"
    else bad "reuse: the mutex of $fn at a reused address has its $n locks" "got '$got'" \
        "$(cat "$T/reuse.err")"; fi
done

"$DMUTEX" trace -- "$PR/trace_misc" statics >"$T/st.out" 2>"$T/st.err"
has '{ symbol = "statics_other.c:lock"; name = "statics_other.c:lock"; }' "$T/st.err" \
    "statics: a file-static is named with its file"
has '{ symbol = "trace_misc.c:lock"; name = "trace_misc.c:lock"; }' "$T/st.err" \
    "statics: so is the other file's, of the same name"
names_unique "$T/st.err" "statics"
{ echo "redis = { host = \"127.0.0.1\"; port = $REDIS_TMP_PORT; };"
  sed -n '/^mutexes = (/,/^);/p' "$T/st.err"; } >"$T/st.cfg"
if "$DMUTEX" check -c "$T/st.cfg" -- "$PR/trace_misc" >"$T/st.check" 2>&1 &&
   grep -q "3 mutexes would be mapped" "$T/st.check"; then
    ok "statics: the printed block passes dmutex check, 3 mutexes"
else bad "statics: the printed block passes dmutex check, 3 mutexes" "$(cat "$T/st.check")"; fi

"$DMUTEX" trace -- "$PR/trace_misc" dlclose "$PWD/$PR/libtracegone.so" >"$T/gone.out" 2>"$T/gone.err"
row "plug_lock in libtracegone.so" symbol 7 "$T/gone.err" \
    "dlclose: a variable of the unloaded plugin keeps its symbol and locks"
row "pthread_mutex_init in gone_new (libtracegone.so" init_site 4 "$T/gone.err" \
    "dlclose: a heap mutex the plugin made keeps its init_site and locks"
has '{ symbol = "g_twin"; object = "libtracegone.so"; name = "g_twin@libtracegone.so"; }' \
    "$T/gone.err" "dlclose: two globals g_twin: the plugin's is named with its object"
has '{ symbol = "g_twin"; name = "g_twin@trace_misc"; }' "$T/gone.err" \
    "dlclose: and the program's with the program's"
names_unique "$T/gone.err" "dlclose"
# The plugin rebuilt and loaded again at the same place under the same
# name: its variables are named from the new file, not from the symbol
# table read for the old one (plug_lock and g_twin swap places).
cp "$PR/libtracegone.so" "$T/libswap.so" && cp "$PR/libtracegone2.so" "$T/libswap2.so"
"$DMUTEX" trace -- "$PR/trace_misc" dlswap "$T/libswap.so" "$T/libswap2.so" >"$T/sw.out" 2>"$T/sw.err"
row "plug_lock in libswap.so" symbol 14 "$T/sw.err" \
    "dlswap: the rebuilt plugin's plug_lock is plug_lock (7 + 7 locks)"
row "g_twin in libswap.so" symbol 4 "$T/sw.err" "dlswap: and its g_twin is g_twin (2 + 2)"

# The shim resolves init_site entries at start, so one in a library dlopen
# loads would stop the program: shown commented out, and the block passes.
has '  # { init_site = "gone_new"; object = "libtracegone.so"; name = "gone_new"; }  # not mappable: an init site in a library loaded by dlopen' \
    "$T/gone.err" "dlclose: the plugin's init_site entry is shown commented out"
{ echo "redis = { host = \"127.0.0.1\"; port = $REDIS_TMP_PORT; };"
  sed -n '/^mutexes = (/,/^);/p' "$T/gone.err"; } >"$T/gone.cfg"
if "$DMUTEX" check -c "$T/gone.cfg" -- "$PR/trace_misc" dlclose "$PWD/$PR/libtracegone.so" \
    >"$T/gone.check" 2>&1; then
    ok "dlclose: the printed block passes dmutex check"
else bad "dlclose: the printed block passes dmutex check" "$(cat "$T/gone.cfg")" \
    "$(cat "$T/gone.check")"; fi
# Loaded and unloaded 200 times: one row per mutex, its locks summed; a
# variable is one mutex, the heap mutexes of gone_new 200.
"$DMUTEX" trace -- "$PR/trace_misc" dlclose "$PWD/$PR/libtracegone.so" 200 >"$T/gone2.out" \
    2>"$T/gone2.err"
row "plug_lock in libtracegone.so (.symtab) (std::mutex / pthread_mutex_t / mtx_t)" symbol 1400 \
    "$T/gone2.err" "dlclose x200: the plugin's variable, one row, every lock"
has "pthread_mutex_init in gone_new (libtracegone.so+" "$T/gone2.err" \
    "dlclose x200: the heap row"
has ") [200 mutexes]" "$T/gone2.err" "dlclose x200: the heap row counts 200 mutexes"
if grep -q "plug_lock.*mutexes\]" "$T/gone2.err"; then
    bad "dlclose x200: the variable is one mutex" "$(cat "$T/gone2.err")"
else ok "dlclose x200: the variable is one mutex"; fi

# ---- conds and rwlocks: identified as mutexes are ----------------------------
# block LIST FILE: the `LIST = ( ... );` block of FILE.
block() { sed -n "/^$1 = (/,/^);/p" "$2"; }
# blocks_unique FILE LABEL: no two entries of one block share a name.
blocks_unique() {
    for l in mutexes conds rwlocks; do
        dup=$(block $l "$1" | grep -o 'name = "[^"]*"' | sort | uniq -d)
        if [ -z "$dup" ]; then ok "$2: every $l entry has a name of its own"
        else bad "$2: every $l entry has a name of its own" "shared: $dup" "$(cat "$1")"; fi
    done
}
# obj_row IDENTIFICATION CERTAINTY COLUMN COUNT FILE LABEL: the row whose
# identification has IDENTIFICATION has CERTAINTY and COUNT in COLUMN
# (3: waits / reads, 4: signals / writes).
obj_row() {
    got=$(awk -v f="$1" -v c="$3" 'index($0, f) { print $2, $c; exit }' "$5")
    if [ "$got" = "$2 $4" ]; then ok "$6"
    else bad "$6" "got '$got'" "$(cat "$5")"; fi
}

obj_row "trace_misc.c:cond in trace_misc" symbol 3 1 "$T/cond.err" \
    "cond: a file-static cond is named with its file, its wait counted"
if grep -q "cond in trace_misc" "$T/we.err"; then
    bad "waiterr: a cond wait that fails at once is not counted as a wait" "$(cat "$T/we.err")"
else ok "waiterr: a cond wait that fails at once is not counted as a wait"; fi

block conds "$T/st.err" >"$T/st.conds"
block rwlocks "$T/st.err" >"$T/st.rwlocks"
has '{ symbol = "statics_other.c:cond"; name = "statics_other.c:cond"; }' "$T/st.conds" \
    "statics: a file-static cond is named with its file"
has '{ symbol = "trace_misc.c:cond"; name = "trace_misc.c:cond"; }' "$T/st.conds" \
    "statics: so is the other file's cond, of the same name"
has '{ symbol = "statics_other.c:rw"; name = "statics_other.c:rw"; }' "$T/st.rwlocks" \
    "statics: a file-static rwlock is named with its file"
has '{ symbol = "trace_misc.c:rw"; name = "trace_misc.c:rw"; }' "$T/st.rwlocks" \
    "statics: so is the other file's rwlock, of the same name"
blocks_unique "$T/st.err" "statics"
{ cat "$T/st.cfg" "$T/st.conds"; } >"$T/st2.cfg"
if "$DMUTEX" check -c "$T/st2.cfg" -- "$PR/trace_misc" >"$T/st2.check" 2>&1 &&
   grep -q "3 mutexes would be mapped.*, 2 conds" "$T/st2.check"; then
    ok "statics: the printed mutexes and conds blocks pass dmutex check, 2 conds"
else bad "statics: the printed mutexes and conds blocks pass dmutex check, 2 conds" \
    "$(cat "$T/st2.check")"; fi

# A heap address used by a cond (an rwlock) of one init site, then by one
# of another: each keeps its own counts, as mutexes do.
for want in "pthread_cond_init in reuse_cond_b :4:5" "pthread_cond_init in reuse_cond_a :4:1" \
            "pthread_rwlock_init in reuse_rw_b :3:5" "pthread_rwlock_init in reuse_rw_a :3:1"; do
    id=${want%%:*} rest=${want#*:}
    obj_row "$id" init_site "${rest%:*}" "${rest#*:}" "$T/reuse.err" \
        "reuse: ${id% } (a reused heap address) has its own ${rest#*:} uses"
done

# A dlclosed plugin's conds and rwlocks keep their identities too; twins
# are named apart; the plugin's cond init site is commented out.
obj_row "plug_cond in libtracegone.so" symbol 4 3 "$T/gone.err" \
    "dlclose: a cond of the unloaded plugin keeps its symbol and signals"
obj_row "pthread_cond_init in gone_cond_new (libtracegone.so" init_site 4 2 "$T/gone.err" \
    "dlclose: a heap cond the plugin made keeps its init_site and signals"
block conds "$T/gone.err" >"$T/gone.conds"
block rwlocks "$T/gone.err" >"$T/gone.rwlocks"
has '  # { init_site = "gone_cond_new"; object = "libtracegone.so"; name = "gone_cond_new"; }  # not mappable: an init site in a library loaded by dlopen' \
    "$T/gone.conds" "dlclose: the plugin's cond init_site entry is shown commented out"
has '{ symbol = "rw_twin"; object = "libtracegone.so"; name = "rw_twin@libtracegone.so"; }' \
    "$T/gone.rwlocks" "dlclose: two global rwlocks rw_twin: the plugin's is named with its object"
has '{ symbol = "rw_twin"; name = "rw_twin@trace_misc"; }' "$T/gone.rwlocks" \
    "dlclose: and the program's with the program's"
blocks_unique "$T/gone.err" "dlclose"
{ cat "$T/gone.cfg" "$T/gone.conds"; } >"$T/gone2.cfg"
if "$DMUTEX" check -c "$T/gone2.cfg" -- "$PR/trace_misc" dlclose "$PWD/$PR/libtracegone.so" \
    >"$T/gone2.check" 2>&1; then
    ok "dlclose: the printed mutexes and conds blocks pass dmutex check"
else bad "dlclose: the printed mutexes and conds blocks pass dmutex check" \
    "$(cat "$T/gone2.cfg")" "$(cat "$T/gone2.check")"; fi
obj_row "plug_cond in libtracegone.so (.symtab)" symbol 4 600 "$T/gone2.err" \
    "dlclose x200: the plugin's cond, one row, every signal"
if grep -q "pthread_cond_init in gone_cond_new (libtracegone.so+.*) \[200 conds\]" "$T/gone2.err" &&
   ! grep -q "plug_cond.*conds\]" "$T/gone2.err"; then
    ok "dlclose x200: the heap cond row counts 200 conds, the variable one"
else bad "dlclose x200: the heap cond row counts 200 conds, the variable one" "$(cat "$T/gone2.err")"; fi

# ---- the program's own: fd 2, threads, its helpers' output ----------------
"$DMUTEX" trace -- "$PR/trace_misc" stderr "$T/data" >"$T/fd.out" 2>"$T/fd.err"
if grep -qx "stderr fd 2" "$T/fd.out" && [ "$(cat "$T/data")" = DATA ]; then
    ok "stderr closed, a file opened on fd 2: the report does not go into it"
else bad "stderr closed, a file opened on fd 2: the report does not go into it" \
    "$(cat "$T/fd.out")" "$(cat "$T/data")"; fi

"$DMUTEX" trace -- "$PR/trace_misc" threads >"$T/th.out" 2>"$T/th.err"
if grep -qx "threads 1" "$T/th.out"; then
    ok "a program that locks nothing keeps one thread (no reporter yet)"
else bad "a program that locks nothing keeps one thread (no reporter yet)" "$(cat "$T/th.out")"; fi

# A library constructor that locks before the tracer's constructor runs:
# still no thread until the program's own first lock.
"$DMUTEX" trace -- "$PR/trace_early" >"$T/early.out" 2>"$T/early.err"
if grep -qx "threads 1" "$T/early.out" && grep -q "early_lock in libtraceearly.so" "$T/early.err"
then ok "a lock before the tracer's constructor: counted, and no thread started for it"
else bad "a lock before the tracer's constructor: counted, and no thread started for it" \
    "$(cat "$T/early.out" "$T/early.err")"; fi

# A program whose malloc takes a mutex: its first lock is inside malloc,
# where the reporter thread must not be started (pthread_create would call
# that malloc again and wait for the mutex forever, every signal blocked).
"$DMUTEX" trace -- "$PR/trace_malloc" >"$T/ma.out" 2>"$T/ma.err" &
ma=$!
pids="$pids $ma"
if wait_for allocs "$T/ma.out" && wait_for "exit report" "$T/ma.err"; then
    ok "a program whose malloc locks a mutex runs to its end under trace"
else
    bad "a program whose malloc locks a mutex runs to its end under trace" \
        "no 'allocs' line in 30 s (hung)" "$(cat "$T/ma.out" "$T/ma.err")"
fi
kill -9 "$ma" 2>/dev/null
wait "$ma" 2>/dev/null

"$DMUTEX" trace -- "$PR/trace_misc" popen >"$T/po.out" 2>"$T/po.err"
if grep -qxF "captured [threads 1|]" "$T/po.out"; then
    ok "a helper that locks nothing adds no report to the output the program reads"
else bad "a helper that locks nothing adds no report to the output the program reads" \
    "$(cat "$T/po.out")"; fi
has "pid $(sed -n 's/^dmutex trace: pid \([0-9]*\) .*/\1/p' "$T/po.err" | head -n 1) (trace_misc), exit report" \
    "$T/po.err" "popen: the traced program itself still reports"
# Nor does a fork child of such a helper: only the traced program's own
# fork children say that they locked nothing.
"$DMUTEX" trace -- "$PR/trace_misc" popen forkquiet >"$T/pf.out" 2>"$T/pf.err"
if grep -qxF "captured [forkquiet|]" "$T/pf.out"; then
    ok "a fork child of a helper that locks nothing adds no report to the output the program reads"
else bad "a fork child of a helper that locks nothing adds no report to the output the program reads" \
    "$(cat "$T/pf.out")"; fi

# The library reads its environment as the shim does: not in a process
# with AT_SECURE, where the environment is the caller's, not the owner's.
if grep -n '[^_]getenv(' shim/trace/*.c >"$T/getenv.out"; then
    bad "shim/trace reads the environment with secure_getenv only" "$(cat "$T/getenv.out")"
else ok "shim/trace reads the environment with secure_getenv only"; fi

# ---- refused before the program runs -------------------------------------
"$DMUTEX" trace -o "$T/no-such-dir/x.json" -- echo ran >"$T/o.out" 2>&1
rc=$?
if [ "$rc" -eq 2 ] && grep -q "^dmutex trace: -o $T/no-such-dir/x.json: cannot write in" "$T/o.out" &&
   ! grep -q "^ran" "$T/o.out"; then
    ok "-o into a missing directory: exit 2 before the program runs"
else bad "-o into a missing directory: exit 2 before the program runs" "exit $rc" \
    "$(cat "$T/o.out")"; fi

cp "$PR/trace_misc" "$T/suid_prog" && chmod 4755 "$T/suid_prog"
"$DMUTEX" trace -- "$T/suid_prog" threads >"$T/suid.out" 2>&1
rc=$?
if [ "$rc" -eq 127 ] && grep -q "set-user-ID.*so it cannot be traced" "$T/suid.out" &&
   ! grep -q "^threads" "$T/suid.out"; then
    ok "a set-user-ID program (the loader would not preload): refused, exit 127"
else bad "a set-user-ID program: refused, exit 127" "exit $rc" "$(cat "$T/suid.out")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
