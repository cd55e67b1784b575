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
#   trace_routes   a global rwlock of no lock-like name (g_routes): its
#                  rwlocks entry, pasted into a config, keeps two keys of
#                  a redis-server equal for readers in PROCS processes
#                  while each process's writer updates both (no torn read,
#                  both counts exact).
# Also: a forking program gives two reports (and two JSON files), SIGUSR1
# and -i report while the program runs, a condition wait's re-acquisition
# counts, a full table is reported (not a crash), usage errors exit 2.
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
      $PR/trace_routes"
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
has "[2 mutexes]" "$T/trace_factory.err" "trace_factory: both accounts are one row"

trace_case "$PR/trace_factory_stripped" "heap, pthread_mutex_init called from trace_factory_stripped+" \
    address 2
has "{ init_site_address = 0x" "$T/trace_factory_stripped.err" \
    "trace_factory_stripped: the entry is the init call's address, with the build-id"
has "weak: address of this build only" "$T/trace_factory_stripped.check" \
    "trace_factory_stripped: dmutex check marks the init_site_address entry weak"

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
   grep -qF ", 2 rwlocks (1 init_site functions)," "$T/tc-all.check"; then
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

# A fork while the reporter thread writes a report: the child must not
# inherit the report's lock held (its exit report would wait forever).
"$DMUTEX" trace -i 1 -- "$PR/trace_misc" forkloop 3000 >"$T/fl.out" 2>"$T/fl.err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^forks" "$T/fl.out" && grep -q "interval report" "$T/fl.err"; then
    ok "fork during interval reports: every child exits ($(cat "$T/fl.out"))"
else bad "fork during interval reports: every child exits" "exit $rc" "$(cat "$T/fl.out")" \
    "$(grep -c "exit report" "$T/fl.err") exit reports"; fi

# ---- SIGUSR1 and -i: reports while the program runs -----------------------
"$DMUTEX" trace -- "$PR/trace_misc" wait "$T/go" >"$T/sig.out" 2>"$T/sig.err" &
sig=$!
pids="$pids $sig"
if wait_for ready "$T/sig.out"; then
    kill -USR1 "$sig"
    if wait_for "signal report" "$T/sig.err" && kill -0 "$sig" 2>/dev/null; then
        ok "SIGUSR1: a report while the program runs"
    else bad "SIGUSR1: a report while the program runs" "$(cat "$T/sig.err")"; fi
    has "wait_lock" "$T/sig.err" "SIGUSR1: the report has the mutex locked so far"
else
    bad "SIGUSR1: the program got ready" "$(cat "$T/sig.out" "$T/sig.err")"
fi
touch "$T/go"
wait "$sig"
has "exit report" "$T/sig.err" "SIGUSR1: the exit report still comes"

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

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
