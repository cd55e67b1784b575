#!/bin/sh
# admin.test.sh: the operator's commands against a redis-server of its own
# (free port, tools/redis-tmp.sh):
#   check   resolves a config against a program and its libraries without
#           running main: each entry printed (a library's symbol found, a
#           plugin's deferred), a missing symbol exits 78 with the very
#           FILE:LINE line a real start prints, every error at once; dmutex
#           run stops on it before main; an entry naming a lock of a kind
#           the shim does not interpose (GLib's GMutex, GCond, a spin lock:
#           by size; a GStaticMutex: by debug info) or a cnd_t in mutexes
#           is refused with 78 and the cause and the fix, by check, run
#           and the real start (where the size tells), never mapped
#   unlock  refuses a live holder and a killed one whose lease lives;
#           --force hands the lock to the waiting process with a bigger
#           token, the old holder logs its lost lease, its release and
#           renewal answer lost, the server logs who did it; the process
#           handed the lock, and the next locker of one forced free, log
#           that the previous hold was forced (not that its lease expired)
#   top     with a workload locking in a loop, a nonzero rate for its lock
#           and 0/s for an idle one
# Prints one closing line "N passed, N failed".
#
#   sh tests/admin.test.sh            (DMUTEX=path overrides build/dmutex)
cd "$(dirname "$0")/.." || exit 1
DMUTEX=${DMUTEX:-build/dmutex}
T=$(mktemp -d /tmp/admin.test.XXXXXX) || exit 1
. tests/lib.sh
. tools/redis-tmp.sh
pids=""
cleanup() {
    exec 3>&- 4>&-
    for p in $pids; do kill -9 "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    redis_tmp_stop
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 141' PIPE

# has TEXT FILE NAME: the file has a line containing TEXT (fixed string).
# key NS NAME KIND...: lock NAME's keys as shim/redis/keys.c builds them.
key() { "$DMUTEX" keys "$@"; }
has() {
    if grep -qF -- "$1" "$2"; then ok "$3"; else bad "$3" "no line with: $1" "in:" "$(cat "$2")"; fi
}
# wait_for TEXT FILE: up to 30 s for a line with TEXT.
wait_for() {
    n=0
    while ! grep -qF -- "$1" "$2" && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    grep -qF -- "$1" "$2"
}

P=build/tests/posix
NEED="$DMUTEX build/libdmutex.so $P/psx_host $P/libpsxlib.so $P/plugins/libpsxplug.so
      build/tests/progs/lockprog build/tests/progs/counter build/tests/progs/posixprog
      build/tests/progs/glibprog build/tests/progs/c11prog"
make -s $NEED >"$T/make.log" 2>&1 || fail_setup "$(cat "$T/make.log")"
cc -std=gnu11 -Wall -Wextra -Werror -pthread -Iinclude tests/install/apiprog.c -o "$T/apiprog" \
    >"$T/cc.log" 2>&1 || fail_setup "$(cat "$T/cc.log")"
redis_tmp_start || fail_setup "no redis-server"
# the namespaces of this script, declared new too (redis-tmp declares dmutex)
redis_tmp_fresh admintest
redis_tmp_fresh toptest
URL=redis://127.0.0.1:$REDIS_TMP_PORT
CLI="redis-cli -p $REDIS_TMP_PORT"

# ---- check ---------------------------------------------------------------
cat >"$T/good.cfg" <<'CFG'
mutexes = (
  { symbol = "lib_lock"; object = "libpsxlib.so"; name = "c.lib"; },
  { symbol = "twin_a.c:cache_lock"; name = "c.exe"; protocol = "setnx"; },
  { symbol = "plug_lock"; object = "libpsxplug.so"; name = "c.plug"; }
);
CFG
"$DMUTEX" check -c "$T/good.cfg" -- "$P/psx_host" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ]; then ok "check: a good config exits 0"
else bad "check: a good config exits 0" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
if grep -qE "^c\.lib	libpsxlib\.so	lib_lock	0x[0-9a-f]+ \(libpsxlib\.so\+0x[0-9a-f]+\)	dmutex$" "$T/out"; then
    ok "check: the library's symbol is found, with its address and offset"
else bad "check: the library's symbol is found, with its address and offset" "$(cat "$T/out")"; fi
if grep -qE "^c\.exe	-	twin_a\.c:cache_lock	0x[0-9a-f]+ \(psx_host\+0x[0-9a-f]+\)	setnx$" "$T/out"; then
    ok "check: the executable's file-static is found, and its protocol printed (setnx)"
else bad "check: the executable's file-static is found, and its protocol printed (setnx)" "$(cat "$T/out")"; fi
has "c.plug	libpsxplug.so	plug_lock	not loaded at start" "$T/out" \
    "check: a plugin's entry is reported as mapped when dlopen loads it"
has "2 mutexes would be mapped" "$T/out" "check: the summary counts the mapped entries"
cat >"$T/heap.cfg" <<'CFG'
mutexes = (
  { init_site = "account_new"; name = "c.heap"; },
  { symbol = "no_such_mutex"; required = false; }
);
CFG
"$DMUTEX" check -c "$T/heap.cfg" build/tests/progs/posixprog >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qE "^c\.heap	-	init_site account_new	0x[0-9a-f]+ \(posixprog\+0x[0-9a-f]+\), [0-9]+ bytes	dmutex$" "$T/out"; then
    ok "check: an init_site function is found, with its range"
else bad "check: an init_site function is found, with its range" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
has "no_such_mutex	-	no_such_mutex	not found: skipped (required = false)" "$T/out" \
    "check: an optional entry that is missing is shown as skipped"

# A missing symbol: the same line a real start prints, and 78.
cat >"$T/bad.cfg" <<'CFG'
mutexes = (
  { symbol = "held_lock"; name = "c.held"; },
  { symbol = "no_such_mutex"; name = "c.missing"; },
  { symbol = "nor_this_one"; }
);
CFG
"$DMUTEX" check -c "$T/bad.cfg" build/tests/progs/lockprog lock >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 78 ]; then ok "check: a missing symbol exits 78"
else bad "check: a missing symbol exits 78" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/bad.cfg build/tests/progs/lockprog lock \
    >"$T/rout" 2>"$T/rerr"
rrc=$?
real=$(sed -n 's/^dmutex\[[0-9]*\]: error: //p' "$T/rerr" | head -n 1)
case "$real" in
    "$T/bad.cfg:3: "*) ;;
    *) bad "the real start fails at $T/bad.cfg:3" "exit $rrc" "$(cat "$T/rerr")" ;;
esac
if [ -n "$real" ] && sed 's/^dmutex\[[0-9]*\]: error: //' "$T/err" | grep -qxF -- "$real"; then
    ok "check: the error is the real start's FILE:LINE line"
else bad "check: the error is the real start's FILE:LINE line" "real: $real" "check:" "$(cat "$T/err")"; fi
has "$T/bad.cfg:4: symbol nor_this_one not found" "$T/err" \
    "check: every error is reported, not only the first"
if grep -q '^main' "$T/out"; then bad "check: main never ran" "$(cat "$T/out")"
else ok "check: main never ran"; fi
# A program the loader would not preload the shim into is not started.
cp build/tests/progs/lockprog "$T/suid" && chmod u+s "$T/suid"
"$DMUTEX" check -c "$T/bad.cfg" "$T/suid" lock >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 1 ] && ! grep -q '^main' "$T/out" && grep -qF "set-user-ID" "$T/err"; then
    ok "check: a set-user-ID program is refused, not run"
else bad "check: a set-user-ID program is refused, not run" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
"$DMUTEX" run -c "$T/bad.cfg" -r "$URL" build/tests/progs/lockprog lock >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 78 ] && ! grep -q '^main' "$T/out" && grep -qF "$T/bad.cfg:4:" "$T/err"; then
    ok "run: checks first: 78, every error, main never ran"
else bad "run: checks first: 78, every error, main never ran" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
printf 'mutexes = ({ symbol = "held_lock"; name = "c.run"; });\n' >"$T/run.cfg"
"$DMUTEX" run -c "$T/run.cfg" -r "$URL" build/tests/progs/lockprog lock >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q '^main' "$T/out" && grep -q '^locked 0' "$T/out"; then
    ok "run: a good config runs the program once, under the shim"
else bad "run: a good config runs the program once, under the shim" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
if [ "$(grep -c '^main' "$T/out")" -eq 1 ]; then ok "run: main ran exactly once"
else bad "run: main ran exactly once" "$(cat "$T/out")"; fi

# ---- locks of kinds the shim does not interpose ------------------------------
# tests/progs/glibprog: GLib's GMutex and GCond (declared with GLib's own
# layouts), a spin lock, the deprecated GStaticMutex (48 bytes: a mutex
# fits, only debug info tells it is none), beside a pthread_mutex_t and an
# mtx_t. An entry naming a lock the shim cannot honour is refused with 78
# and a message naming the cause and the fix, by check, by run and by the
# real start where the size tells; never "would be mapped".
G=build/tests/progs/glibprog
cat >"$T/glib.cfg" <<'CFG'
mutexes = ( { symbol = "cache_lock"; }, { symbol = "stats_lock"; } );
conds = ( { symbol = "cache_cond"; } );
CFG
"$DMUTEX" check -c "$T/glib.cfg" -- "$G" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 78 ] && ! grep -q "would be mapped" "$T/out"; then
    ok "check: GLib's GMutex, GCond and a spin lock: 78, nothing would be mapped"
else bad "check: GLib's GMutex, GCond and a spin lock: 78, nothing would be mapped" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
has "$T/glib.cfg:1: cache_lock in glibprog is 8 bytes: a pthread_mutex_t (40 bytes) at offset 0 does not fit in it, so it is no pthread_mutex_t, mtx_t or std::mutex. A lock of another kind (GLib's GMutex, 8 bytes, a futex of GLib's own" \
    "$T/err" "check: a GMutex entry: the cause named"
has "Lock the data with a pthread_mutex_t, mtx_t or std::mutex and map that one" "$T/err" \
    "check: a GMutex entry: the fix named"
has "$T/glib.cfg:1: stats_lock in glibprog is 4 bytes" "$T/err" "check: a spin lock entry refused"
has "$T/glib.cfg:2: cache_cond in glibprog is 16 bytes: a pthread_cond_t (48 bytes) at offset 0 does not fit in it, so it is no pthread_cond_t, cnd_t or std::condition_variable" \
    "$T/err" "check: a GCond entry refused, with the cause"
has "3 errors: the program would not start" "$T/err" "check: every refused entry counted"
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/glib.cfg "$G" >"$T/rout" 2>"$T/rerr"
rrc=$?
if [ "$rrc" -eq 78 ] && ! grep -q "main ran" "$T/rout" &&
   grep -qF "$T/glib.cfg:1: cache_lock in glibprog is 8 bytes" "$T/rerr"; then
    ok "the real start with a GMutex entry: 78 before main, the same error"
else bad "the real start with a GMutex entry: 78 before main, the same error" "exit $rrc" \
    "$(cat "$T/rout" "$T/rerr")"; fi
cat >"$T/static.cfg" <<'CFG'
mutexes = (
  { symbol = "plain_lock"; },
  { symbol = "legacy_lock"; offset = 8; name = "legacy"; },
  { symbol = "registry"; offset = 16; name = "registry"; },
  { symbol = "c11_lock"; }
);
CFG
"$DMUTEX" check -c "$T/static.cfg" -- "$G" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 78 ] && ! grep -q "would be mapped" "$T/out"; then
    ok "check: GStaticMutex entries (a mutex would fit): 78 from the debug info"
else bad "check: GStaticMutex entries (a mutex would fit): 78 from the debug info" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
has "dmutex check: error: $T/static.cfg:3: legacy_lock+8 in glibprog is a GStaticMutex (debug info: legacy_lock), not a pthread_mutex_t, mtx_t or std::mutex: a deprecated GLib lock" \
    "$T/err" "check: a GStaticMutex's unused pthread_mutex_t: refused, the cause named"
has "$T/static.cfg:4: registry+16 in glibprog is a GStaticMutex (debug info: registry.lock)" \
    "$T/err" "check: a GStaticMutex struct member: refused by its member path"
has "Mapped, it would exclude nothing: lock the data with a pthread_mutex_t, mtx_t or std::mutex and map that one" \
    "$T/err" "check: a GStaticMutex entry: the fix named"
has "dmutex check: error: 2 errors: the program would not start" "$T/err" \
    "check: the debug info's errors counted"
"$DMUTEX" run -c "$T/static.cfg" -r "$URL" -- "$G" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 78 ] && ! grep -q "main ran" "$T/out" &&
   grep -qF "$T/static.cfg:3: legacy_lock+8 in glibprog is a GStaticMutex" "$T/err"; then
    ok "run: GStaticMutex entries: 78 before main, the same error"
else bad "run: GStaticMutex entries: 78 before main, the same error" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
printf 'mutexes = ( { symbol = "plain_lock"; }, { symbol = "c11_lock"; } );\n' >"$T/ok.cfg"
"$DMUTEX" check -c "$T/ok.cfg" -- "$G" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "2 mutexes would be mapped" "$T/out"; then
    ok "check: its pthread_mutex_t and mtx_t would be mapped"
else bad "check: its pthread_mutex_t and mtx_t would be mapped" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
"$DMUTEX" run -c "$T/ok.cfg" -r "$URL" -- "$G" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^locked" "$T/out"; then ok "run: they are, and the program runs"
else bad "run: they are, and the program runs" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
# A cond named as a mutex resolves as well as one (48 bytes): the debug
# info says it is a cnd_t, and which list it belongs to.
printf 'mutexes = ( { symbol = "ready"; } );\n' >"$T/kind.cfg"
"$DMUTEX" check -c "$T/kind.cfg" -- build/tests/progs/c11prog >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 78 ] &&
   grep -qF "$T/kind.cfg:1: ready in c11prog is a cnd_t (debug info: ready), not a pthread_mutex_t, mtx_t or std::mutex" "$T/err" &&
   grep -qF "List it in conds" "$T/err"; then
    ok "check: a cnd_t in mutexes: 78, the list it belongs to named"
else bad "check: a cnd_t in mutexes: 78, the list it belongs to named" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi

# A cond or rwlock entry past the end of its symbol: the message names the
# list's type and its size, never a mutex's.
printf 'conds = ( { symbol = "ready"; offset = 8; } );\nrwlocks = ( { symbol = "ready"; index = 1; name = "rw"; } );\n' \
    >"$T/fit.cfg"
"$DMUTEX" check -c "$T/fit.cfg" -- build/tests/progs/c11prog >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 78 ] && ! grep -qw mutex "$T/err" &&
   grep -qF "$T/fit.cfg:1: ready in c11prog is 48 bytes: a pthread_cond_t (48 bytes) at offset 8 does not fit in it" "$T/err" &&
   grep -qF "$T/fit.cfg:2: ready in c11prog is 48 bytes: a pthread_rwlock_t (56 bytes) at offset 56 does not fit in it" "$T/err"; then
    ok "check: a cond or rwlock entry that does not fit: its own type and size named, no mutex"
else bad "check: a cond or rwlock entry that does not fit: its own type and size named, no mutex" \
    "exit $rc" "$(cat "$T/out" "$T/err")"; fi

# ---- unlock --------------------------------------------------------------
# Short lease: a forced holder hears of it within a renewal period (1 s).
cat >"$T/u.cfg" <<'CFG'
namespace = "admintest";
lease_ms = 3000;
on_lease_lost = "warn";
mutexes = ();
CFG
# start_api NAME HELD FREE: apiprog under the shim, stdin from fifo $T/NAME.in
# (its log at info: what it is told of the previous holder)
start_api() {
    mkfifo "$T/$1.in"
    LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/u.cfg DMUTEX_REDIS=$URL DMUTEX_LOG=info \
        "$T/apiprog" "$2" "$3" <"$T/$1.in" >"$T/$1.out" 2>"$T/$1.err" &
    last_pid=$!
    pids="$pids $last_pid"
}
start_api holder u.live u.free1
holder=$last_pid
exec 3>"$T/holder.in"
wait_for "held " "$T/holder.out" || fail_setup "the holder did not take u.live: $(cat "$T/holder.out" "$T/holder.err")"
tok1=$(sed -n 's/^held //p' "$T/holder.out")
owner1=$("$DMUTEX" ls -r "$URL" -n admintest --json | python3 -c "import json,sys
print([l for l in json.load(sys.stdin)['locks'] if l['name'] == 'u.live'][0]['holder'])")

"$DMUTEX" unlock -c "$T/u.cfg" -r "$URL" u.live >"$T/out" 2>"$T/err"
rc=$?
# The holder as host:pid program (thread), from its record, its owner id,
# and whether it renews.
if [ "$rc" -eq 1 ] &&
   grep -qF "held by $(hostname):$holder apiprog (apiprog) (owner $owner1), fencing token $tok1, its lease alive for" "$T/err" &&
   grep -qF "(it renews every 1.0 s): alive as far as the server can tell" "$T/err"; then
    ok "unlock: a live holder is refused (exit 1), naming holder, token, lease left and liveness"
else bad "unlock: a live holder is refused (exit 1), naming holder, token, lease left and liveness" \
    "exit $rc" "$(cat "$T/out" "$T/err")"; fi
if [ "$($CLI HEXISTS "$(key admintest u.live lock)" "$owner1")" = 1 ]; then ok "unlock: refused, the hold stays"
else bad "unlock: refused, the hold stays"; fi

start_api waiter u.live u.free2
waiter=$last_pid
exec 4>"$T/waiter.in"
Q=$(key admintest u.live queue)
n=0
while [ "$($CLI LLEN "$Q")" != 1 ] && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
[ "$($CLI LLEN "$Q")" = 1 ] || fail_setup "the waiter did not queue: $(cat "$T/waiter.err")"

"$DMUTEX" unlock -c "$T/u.cfg" -r "$URL" --force u.live >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "forced release of $owner1's hold (fencing token $tok1)" "$T/out" &&
    grep -qF "handed to the next waiter" "$T/out"; then
    ok "unlock --force: released, handed to the waiter"
else bad "unlock --force: released, handed to the waiter" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
if wait_for "held " "$T/waiter.out"; then ok "unlock --force: the waiting process got the lock"
else bad "unlock --force: the waiting process got the lock" "$(cat "$T/waiter.out" "$T/waiter.err")"; fi
tok2=$(sed -n 's/^held //p' "$T/waiter.out")
FORCED_LOG="lock u.live: the previous holder's hold was ended by \`dmutex unlock --force\`, not released"
if grep -qF "$FORCED_LOG" "$T/waiter.err" && ! grep -qF "lease expired" "$T/waiter.err"; then
    ok "unlock --force: the waiter handed the lock logs a forced release, not an expiry"
else bad "unlock --force: the waiter handed the lock logs a forced release, not an expiry" \
    "$(cat "$T/waiter.err")"; fi
if [ -n "$tok2" ] && [ "$tok2" -gt "$tok1" ]; then ok "unlock --force: the token grew ($tok1 -> $tok2)"
else bad "unlock --force: the token grew" "old $tok1 new $tok2"; fi
if wait_for "lost the lease of lock u.live" "$T/holder.err"; then
    ok "unlock --force: the live holder logs its lost lease (on_lease_lost = warn)"
else bad "unlock --force: the live holder logs its lost lease (on_lease_lost = warn)" "$(cat "$T/holder.err")"; fi
# The old hold, released or renewed by its owner now, answers lost (0).
K=$(key admintest u.live lock)
# release.lua's KEYS in the order the shim passes them (no name has a space)
# shellcheck disable=SC2046
rel=$($CLI --eval shim/redis/lua/release.lua $(key --release admintest u.live) , \
      "$owner1" "$tok1" "$(key admintest u.live released)" 3000 "$(key admintest u.live w)" 1000)
ren=$($CLI --eval shim/redis/lua/renew.lua "$K" , "$owner1" 3000)
if [ "$rel" = 0 ] && [ "$ren" = 0 ]; then ok "unlock --force: the old holder's release and renewal answer lost"
else bad "unlock --force: the old holder's release and renewal answer lost" "release $rel renew $ren"; fi
F=$(key admintest u.live forced)
if $CLI GET "$F" | grep -qF "$owner1 #$tok1 -> #"; then ok "unlock --force: :forced records who and whose hold"
else bad "unlock --force: :forced records who and whose hold" "$($CLI GET "$F")"; fi
if grep -qF "dmutex: forced release of $K by " "$REDIS_TMP_DIR/redis.log"; then
    ok "unlock --force: the server's log says who did it"
else bad "unlock --force: the server's log says who did it" "$(tail -n 5 "$REDIS_TMP_DIR/redis.log")"; fi
exec 3>&- 4>&-
wait "$holder"; wait "$waiter"

# A killed holder whose lease still runs: refused without --force.
printf 'namespace = "admintest";\nlease_ms = 60000;\nmutexes = ();\n' >"$T/u.cfg"
start_api dead u.dead u.free3
dead=$last_pid
exec 3>"$T/dead.in"
wait_for "held " "$T/dead.out" || fail_setup "the holder did not take u.dead: $(cat "$T/dead.err")"
tok3=$(sed -n 's/^held //p' "$T/dead.out")
kill -9 "$dead"; wait "$dead" 2>/dev/null
exec 3>&-
"$DMUTEX" unlock -c "$T/u.cfg" -r "$URL" u.dead >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -qF "fencing token $tok3, its lease alive" "$T/err"; then
    ok "unlock: a killed holder with its lease running is refused without --force"
else bad "unlock: a killed holder with its lease running is refused without --force" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
"$DMUTEX" unlock -c "$T/u.cfg" -r "$URL" -f u.dead >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "free, nobody was waiting" "$T/out"; then ok "unlock --force: a dead holder's lock is freed"
else bad "unlock --force: a dead holder's lock is freed" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
if "$DMUTEX" ls -r "$URL" -n admintest | grep -qE "^u\.dead +forced "; then ok "ls: the lock shows as forced"
else bad "ls: the lock shows as forced" "$("$DMUTEX" ls -r "$URL" -n admintest)"; fi
"$DMUTEX" unlock -c "$T/u.cfg" -r "$URL" u.dead >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "is not held (it was forced free)" "$T/out"; then ok "unlock: a lock not held is left alone (exit 0)"
else bad "unlock: a lock not held is left alone (exit 0)" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
# The next locker takes it as after an owner's death, with a bigger token.
start_api next u.dead u.free4
exec 3>"$T/next.in"
if wait_for "held " "$T/next.out" && [ "$(sed -n 's/^held //p' "$T/next.out")" -gt "$((tok3 + 1))" ]; then
    ok "unlock --force: the next locker gets it with a token past the forced one"
else bad "unlock --force: the next locker gets it with a token past the forced one" "$(cat "$T/next.out" "$T/next.err")"; fi
if grep -qF "lock u.dead: the previous holder's hold was ended by \`dmutex unlock --force\`, not released" \
       "$T/next.err" && ! grep -qF "lease expired" "$T/next.err"; then
    ok "unlock --force: the next locker logs a forced release, not an expiry"
else bad "unlock --force: the next locker logs a forced release, not an expiry" "$(cat "$T/next.err")"; fi
exec 3>&-

# ---- errors of the tools' own commands ------------------------------------
# A user without SCAN: ls and unlock say what the server refused, where, and
# how to find the rights a config needs (the NOPERM hint the shim gives).
$CLI ACL SETUSER admnoscan on '>pw' '~*' '&*' '+@all' '-scan' '-eval' >/dev/null
NOPERM_URL=redis://admnoscan:pw@127.0.0.1:$REDIS_TMP_PORT
"$DMUTEX" ls -c "$T/u.cfg" -r "$NOPERM_URL" >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -qF "redis at 127.0.0.1:$REDIS_TMP_PORT: SCAN: NOPERM" "$T/err" &&
    grep -qF "dmutex acl -c CONFIG" "$T/err"; then
    ok "ls: a refused SCAN names the server, the command and the rights hint"
else bad "ls: a refused SCAN names the server, the command and the rights hint" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
"$DMUTEX" unlock -c "$T/u.cfg" -r "$NOPERM_URL" u.any >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -qF "lock u.any: redis at 127.0.0.1:$REDIS_TMP_PORT: force.lua: NOPERM" "$T/err" &&
    grep -qF "dmutex acl -c CONFIG" "$T/err"; then
    ok "unlock: a refused script names the lock, the server, force.lua and the rights hint"
else bad "unlock: a refused script names the lock, the server, force.lua and the rights hint" \
    "exit $rc" "$(cat "$T/out" "$T/err")"; fi

# ---- top -----------------------------------------------------------------
printf 'namespace = "toptest";\nmutexes = ({ symbol = "counter_lock"; name = "top.busy"; });\n' >"$T/top.cfg"
$CLI SET "$(key toptest top.idle token)" 7 >/dev/null
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/top.cfg DMUTEX_REDIS=$URL \
    build/tests/progs/counter 127.0.0.1 "$REDIS_TMP_PORT" top.count 2 1000000 >"$T/counter.out" 2>&1 &
counter=$!
pids="$pids $counter"
n=0
while [ -z "$($CLI GET "$(key toptest top.busy token)")" ] && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
"$DMUTEX" top -c "$T/top.cfg" -r "$URL" -N 2 -d 0.5 >"$T/top" 2>"$T/err"
rc=$?
kill -9 "$counter"; wait "$counter" 2>/dev/null
if [ "$rc" -eq 0 ] && [ "$(grep -c '^dmutex top - ' "$T/top")" -eq 2 ]; then ok "top -N 2: two snapshots"
else bad "top -N 2: two snapshots" "exit $rc" "$(cat "$T/top" "$T/err")"; fi
busy=$(grep '^top\.busy ' "$T/top" | tail -n 1 | awk '{print $NF}')
if echo "$busy" | awk '/^[0-9.]+\/s$/ { exit !($0 + 0 > 0) } { exit 1 }'; then
    ok "top: the busy lock has a nonzero rate ($busy)"
else bad "top: the busy lock has a nonzero rate" "$(cat "$T/top")"; fi
idle=$(grep '^top\.idle ' "$T/top" | tail -n 1 | awk '{print $NF}')
if [ "$idle" = "0/s" ]; then ok "top: the idle lock shows 0/s"
else bad "top: the idle lock shows 0/s" "$(cat "$T/top")"; fi
first=$(grep '^top\.idle ' "$T/top" | head -n 1 | awk '{print $NF}')
if [ "$first" = "-" ]; then ok "top: no rate before a second read"
else bad "top: no rate before a second read" "$(cat "$T/top")"; fi

for c in check unlock top; do
    "$DMUTEX" "$c" -h >"$T/h" 2>&1
    if head -n 1 "$T/h" | grep -q "^usage: dmutex $c " && "$DMUTEX" help | grep -q "^  $c "; then
        ok "$c -h: usage text, listed under commands"
    else bad "$c -h: usage text, listed under commands" "$(head -n 2 "$T/h")"; fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
