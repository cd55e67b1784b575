#!/bin/sh
# nowait.test.sh: an unlock's release, written without waiting for its
# reply (on_lease_lost = "abort", the default), takes effect whatever the
# process does next, when the server could not run it as written: its
# script cache was flushed (the EVALSHA answered NOSCRIPT), or the server
# closed the connection before running it. After the holder unlocks and
# then _exits, execs, forks or idles, another process
# (tests/progs/nowaitprog.c probe) must get the lock long before the
# holder's lease (30 s) would have freed it: within PROBE_MS (10 s, generous
# on a loaded machine; a correct shim takes milliseconds). Against a
# redis-server of its own (free port, tools/redis-tmp.sh). Prints one
# closing line "N passed, N failed".
#
#   sh tests/nowait.test.sh            (SHIM=path overrides build/libdmutex.so)
cd "$(dirname "$0")/.." || exit 1
SHIM=${SHIM:-$PWD/build/libdmutex.so}
PROG=$PWD/build/tests/progs/nowaitprog
PROBE_MS=10000
T=$(mktemp -d /tmp/nowait.test.XXXXXX) || exit 1
. tests/lib.sh
. tools/redis-tmp.sh
holder=""
cleanup() {
    [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
    redis_tmp_stop
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 141' PIPE

make -s build/libdmutex.so build/tests/progs/nowaitprog >"$T/make.log" 2>&1 ||
    fail_setup "$(cat "$T/make.log")"
redis_tmp_start || fail_setup "no redis-server"
cli() { redis-cli -p "$REDIS_TMP_PORT" "$@"; }

# wait_line FILE TEXT: until FILE has a line starting with TEXT (30 s), or
# the holder is gone.
wait_line() {
    n=0
    while ! grep -q "^$2" "$1" 2>/dev/null && [ "$n" -lt 300 ]; do
        sleep 0.1; n=$((n + 1))
    done
    grep -q "^$2" "$1"
}

# case NAME HOW NEXT: the holder locks nowait.NAME; HOW happens to the
# server before its unlock (flush: SCRIPT FLUSH; kill: writes paused, so
# the release waits unrun in the connection, which is then killed); the
# holder unlocks and does NEXT (nowaitprog hold); a probe must get the lock.
run_case() {
    name=$1 how=$2 next=$3
    d=$T/$name
    mkdir -p "$d"
    printf 'lease_ms = 30000;\nprograms = [ "nowaitprog" ];\nmutexes = ( { symbol = "nowait_lock"; name = "nowait.%s"; } );\n' \
        "$name" >"$d/cfg"
    env LD_PRELOAD="$SHIM" DMUTEX_CONFIG="$d/cfg" DMUTEX_REDIS="redis://127.0.0.1:$REDIS_TMP_PORT" \
        PATH="$(dirname "$PROG"):$PATH" nowaitprog hold "$d" "$next" >"$d/out" 2>&1 &
    holder=$!
    if ! wait_line "$d/out" held; then
        bad "$name: the holder took the lock" "$(cat "$d/out")"; return
    fi
    case $how in
    flush) cli SCRIPT FLUSH >/dev/null ;;
    kill)  cli CLIENT PAUSE 60000 WRITE >/dev/null ;;
    esac
    touch "$d/go"
    if ! wait_line "$d/out" "unlocked 0"; then
        bad "$name: the holder unlocked" "$(cat "$d/out")"; cli CLIENT UNPAUSE >/dev/null; return
    fi
    if [ "$how" = kill ]; then
        # the release is in the server's socket or query buffer, not run
        cli CLIENT KILL TYPE normal >/dev/null
        cli CLIENT UNPAUSE >/dev/null
    fi
    case $next in exec*|vfork) wait_line "$d/out" image >/dev/null ;; esac
    env LD_PRELOAD="$SHIM" DMUTEX_CONFIG="$d/cfg" DMUTEX_REDIS="redis://127.0.0.1:$REDIS_TMP_PORT" \
        "$PROG" probe "$PROBE_MS" >"$d/probe" 2>&1
    if grep -q '^probe 0 ' "$d/probe"; then
        ok "$name: another process gets the lock after the holder's unlock ($(cat "$d/probe"))"
    else
        bad "$name: another process gets the lock after the holder's unlock" \
            "probe: $(cat "$d/probe")" "holder: $(cat "$d/out")" \
            "server: PTTL $(cli PTTL "dmutex:{nowait.$name}") ms"
    fi
    touch "$d/end"
    n=0
    while kill -0 "$holder" 2>/dev/null && [ "$n" -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    if kill -0 "$holder" 2>/dev/null; then
        bad "$name: the holder ends" "$(cat "$d/out")"
    elif grep -q -e 'dmutex.*error' -e 'Sanitizer' "$d/out"; then
        bad "$name: the holder logs no error" "$(cat "$d/out")"
    else
        ok "$name: the holder ends, no error logged"
    fi
    wait "$holder" 2>/dev/null
    holder=""
}

# The scripts flushed: the release written is answered NOSCRIPT.
run_case flush_exit flush _exit
run_case flush_Exit flush _Exit
run_case flush_signal_exit flush signal
run_case flush_execv flush execv
run_case flush_execl flush execl
run_case flush_execvp flush execvp
run_case flush_idle flush idle
run_case flush_fork flush fork
# A vfork child's exec reads nothing (the releases are the parent's, and
# so is its memory): no hang, and the parent's reader reads them.
run_case flush_vfork flush vfork
# The connection closed by the server with the release written, not run.
run_case kill_idle kill idle
run_case kill_exit kill _exit

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
