#!/bin/sh
# internal_locks.test.sh: the shim's own mutexes, conds and rwlocks, and its
# own _exit, go to glibc through real's table (real.h: dm_lock, dm_cv_wait,
# dm_rw_rdlock, ...), never through the symbols the shim exports. Only the
# interposers themselves (shim/preload.c, shim/trace/record.c) and the table
# (shim/real.c) may name an interposed function.
#
# A call to an exported symbol from inside the shim binds, at run time, to
# the shim's own wrapper: it re-enters preload, which looks the address up
# among the program's mapped mutexes. A program that frees a mapped heap
# mutex without destroying it leaves that address mapped; a record the
# shim allocates there later would take the cluster lock of a name nobody
# asked for (docs/design.md, "Layers").
#
# Checked on the built objects, not the sources: `nm -u` of every object
# lists the functions it calls, however the call is spelt (a macro, an
# inline function of a header). The interposed set is what libdmutex.so and
# libdmutex-trace.so export, less the shim's own API (dmutex_*).
# Prints "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh

make -s build/libdmutex.so build/libdmutex-trace.so >/dev/null 2>&1 ||
    fail_setup "cannot build build/libdmutex.so and build/libdmutex-trace.so"

exported=$(for so in build/libdmutex.so build/libdmutex-trace.so; do
               nm -D --defined-only "$so" | awk '$2 ~ /^[TW]$/ { print $3 }'
           done | grep -v '^dmutex_' | sort -u)
# The set must be the interposed one: a build that exported nothing would
# make every check below pass.
for f in pthread_mutex_lock pthread_cond_wait pthread_rwlock_wrlock mtx_lock cnd_wait _exit execve dlopen; do
    echo "$exported" | grep -qx "$f" || fail_setup "libdmutex.so does not export $f: is this the shim?"
done
ok interposed_set_is_the_exported_one
list=$(mktemp) || fail_setup "mktemp"
trap 'rm -f "$list"' EXIT
echo "$exported" > "$list"

# The objects of today's sources (a build directory may keep the objects of
# files since moved or removed).
objs=$(ls shim/*.c shim/redis/*.c shim/trace/*.c | sed 's|^|build/|; s|\.c$|.o|' |
       grep -vE '^build/shim/(preload|real|trace/record)\.o$')
for o in $objs; do [ -f "$o" ] || fail_setup "$o is not built"; done
[ -n "$objs" ] || fail_setup "no objects under build/shim"
[ -f build/shim/trace/report.o ] || fail_setup "no build/shim/trace/report.o: the trace library is not built from objects"
for o in $objs; do
    n=$(echo "$o" | sed 's|^build/shim/||; s|\.o$||; s|/|_|')
    calls=$(nm -u "$o" | awk '{ print $2 }' | sort -u | comm -12 - "$list")
    if [ -z "$calls" ]; then ok "${n}_calls_no_interposed_symbol"; else
        bad "${n}_calls_no_interposed_symbol" "$o calls $(echo $calls)" \
            "use real.h's dm_lock, dm_unlock, dm_cv_*, dm_rw_* or dm_real.* instead"
    fi
done

echo "$passed passed, $failed failed"
