#!/bin/sh
# scan.test.sh: `dmutex scan` on the programs of tests/symdata (built by
# tests/symbols.mk): with debug info every mutex is listed for sure, with
# its member offset or array index; without it, lock-named 40-byte objects
# are guesses; a stripped file shows only exported symbols. Condition
# variables and rwlocks (sym_sync.c, sym_sync_cxx.cc) are listed the same
# way and printed as conds = ( ... ); and rwlocks = ( ... ); blocks; C11
# mtx_t and cnd_t too, and locks of kinds the shim does not interpose
# (GLib's, a spin lock) are left out with a note. The
# config it prints must load with the shim's config module and resolve,
# with the shim's symbols module, to the very variables (sym_resolve
# checks mutexes, conds and rwlocks; dmutex check resolves them in the
# running program).
# Prints one closing line "N passed, N failed".
#
#   sh tests/scan.test.sh            (DMUTEX=path overrides build/dmutex)
cd "$(dirname "$0")/.." || exit 1
D=build/tests/symdata
DMUTEX=${DMUTEX:-build/dmutex}
T=$(mktemp -d /tmp/scan.test.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
. tests/lib.sh


# Builds what the tests read (a no-op after `make test-build`). When the
# build fails but an earlier one left every file, test those and say so.
NEED="$DMUTEX $D/sym_prog $D/sym_prog_nodebug $D/sym_prog_stripped $D/sym_resolve
      $D/sym_resolve_nodebug $D/libsymlib.so $D/sym_cxx.o build/tests/progs/c11prog
      build/tests/progs/glibprog"
if ! make -s $NEED >"$T/make.log" 2>&1; then
    for f in $NEED; do
        if [ ! -e "$f" ]; then
            cat "$T/make.log"
            echo "0 passed, 1 failed"
            exit 1
        fi
    done
    echo "note: make failed; testing the files an earlier build left:"
    sed 's/^/    /' "$T/make.log" | head -n 5
fi

# scan EXPECTED_RC ARGS...: runs dmutex scan, stdout in $T/out, stderr in $T/err.
scan() {
    want=$1; shift
    "$DMUTEX" scan "$@" >"$T/out" 2>"$T/err"
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        bad "dmutex scan $* exits $want" "it exited $rc; stderr:" "$(cat "$T/err")"
        return 1
    fi
    return 0
}

# has TEXT FILE NAME: the file has a line containing TEXT (fixed string).
has() {
    if grep -qF -- "$1" "$2"; then ok "$3"; else bad "$3" "no line with: $1" "in:" "$(cat "$2")"; fi
}
lacks() {
    if grep -qF -- "$1" "$2"; then bad "$3" "unexpected line with: $1"; else ok "$3"; fi
}

# block LIST: the entries of the LIST = ( ... ); block of $T/out, in $T/LIST.
block() {
    sed -n "/^$1 = (/,/^);/p" "$T/out" >"$T/$1"
}

# resolves PROG PATTERN NAME: the config scan just printed ($T/out), loaded
# and resolved by tests/symdata's PROG, gives output matching PATTERN.
resolves() {
    cp "$T/out" "$T/$1.cfg"
    if $D/$1 "$T/$1.cfg" >"$T/res" 2>&1 && grep -q "$2" "$T/res"; then
        ok "$3"
    else
        bad "$3" "$(cat "$T/$1.cfg")" "$(cat "$T/res")"
    fi
}

# row_re FIELD...: a regular expression for a table row of these cells.
row_re() {
    re="^"
    for cell in "$@"; do
        esc=$(printf '%s' "$cell" | sed 's/[][\.*^$+?(){}|/]/\\&/g')
        re="$re$esc +"
    done
    printf '%s\n' "${re% +}\$"
}

# row NAME FIELD...: stdout has a table row of exactly these cells; norow: has not.
row() {
    name=$1; shift
    if grep -qE -- "$(row_re "$@")" "$T/out"; then ok "$name"
    else bad "$name" "no row: $*" "in:" "$(cat "$T/out")"; fi
}
norow() {
    name=$1; shift
    if grep -qE -- "$(row_re "$@")" "$T/out"; then bad "$name" "unexpected row: $*"
    else ok "$name"; fi
}

# ---- with debug info ----------------------------------------------------
if scan 0 $D/sym_prog $D/libsymlib.so; then
    row "global pthread_mutex_t is sure" \
        sym_global_lock sym_global_lock 0 40 sym_prog - pthread_mutex_t dwarf
    row "static in sym_a.c names its file" \
        cache_lock sym_a.c:cache_lock 0 40 sym_prog sym_a.c pthread_mutex_t dwarf
    row "same static in sym_b.c is its own row" \
        cache_lock sym_b.c:cache_lock 0 40 sym_prog sym_b.c pthread_mutex_t dwarf
    row "struct member mutex has its offset" \
        sym_inventory.lock sym_inventory 8 64 sym_prog - pthread_mutex_t dwarf
    row "array element mutex has index times size" \
        "sym_slots[2]" sym_slots 80 160 sym_prog - pthread_mutex_t dwarf
    row "function-scope static by its source name" \
        fn_lock sym_a.c:fn_lock 0 40 sym_prog sym_a.c pthread_mutex_t dwarf
    row "C++ std::mutex global" \
        sym_cxx_global_lock sym_cxx_global_lock 0 40 sym_prog - std::mutex dwarf
    row "C++ std::recursive_mutex global" \
        sym_cxx_recursive sym_cxx_recursive 0 40 sym_prog - std::recursive_mutex dwarf
    row "C++ namespaced mutex by its mangled symbol" \
        app::ns_lock _ZN3app7ns_lockE 0 40 sym_prog - std::mutex dwarf
    row "library global" \
        symlib_lock symlib_lock 0 40 libsymlib.so - pthread_mutex_t dwarf
    row "library static" \
        symlib_static_lock symlib.c:symlib_static_lock 0 40 libsymlib.so symlib.c pthread_mutex_t dwarf
    has '  { symbol = "sym_global_lock"; },' "$T/out" "config entry for a global"
    has '  { symbol = "sym_a.c:cache_lock"; name = "sym_a_cache_lock"; },' "$T/out" \
        "config entry for a static, named uniquely"
    has '  { symbol = "sym_b.c:cache_lock"; name = "sym_b_cache_lock"; },' "$T/out" \
        "config entry for the other static"
    has '  { symbol = "sym_slots"; offset = 80; name = "sym_slots_2"; },' "$T/out" \
        "config entry for an array element"
    has '  { symbol = "sym_inventory"; offset = 8; name = "sym_inventory.lock"; },' "$T/out" \
        "config entry for a struct member"
    has '  { symbol = "symlib_lock"; object = "libsymlib.so"; }' "$T/out" \
        "config entry for a library global carries the object"
    norow "program's copy of a library global is left to the library" \
        symlib_copied_lock symlib_copied_lock 0 40 sym_prog - "?" guess
    row "the library lists its copy-relocated global" \
        symlib_copied_lock symlib_copied_lock 0 40 libsymlib.so - pthread_mutex_t dwarf
    row "pthread_cond_t global" \
        sym_ready_cond sym_ready_cond 0 48 sym_prog - pthread_cond_t dwarf
    row "struct member cond beside its mutex has its offset" \
        sym_queue.not_empty sym_queue 40 144 sym_prog - pthread_cond_t dwarf
    row "the struct's mutex is still a mutex" \
        sym_queue.lock sym_queue 0 144 sym_prog - pthread_mutex_t dwarf
    row "array element cond has index times sizeof(pthread_cond_t)" \
        "sym_wake_cond[2]" sym_wake_cond 96 144 sym_prog - pthread_cond_t dwarf
    row "file-static cond names its file" \
        sym_static_cv sym_sync.c:sym_static_cv 0 48 sym_prog sym_sync.c pthread_cond_t dwarf
    row "C++ std::condition_variable global" \
        sym_cxx_cv sym_cxx_cv 0 48 sym_prog - std::condition_variable dwarf
    row "pthread_rwlock_t global" \
        sym_routes_rwlock sym_routes_rwlock 0 56 sym_prog - pthread_rwlock_t dwarf
    row "C++ std::shared_mutex global" \
        sym_cxx_shared_mutex sym_cxx_shared_mutex 0 56 sym_prog - std::shared_mutex dwarf
    block mutexes; block conds; block rwlocks
    has '  { symbol = "sym_queue"; offset = 40; name = "sym_queue.not_empty"; },' "$T/conds" \
        "conds block: a struct member cond, by offset"
    has '  { symbol = "sym_wake_cond"; offset = 96; name = "sym_wake_cond_2"; }' "$T/conds" \
        "conds block: an array element cond"
    has '  { symbol = "sym_cxx_cv"; },' "$T/conds" "conds block: a std::condition_variable"
    has '  { symbol = "sym_queue"; name = "sym_queue.lock"; },' "$T/mutexes" \
        "mutexes block: the mutex of the struct with conds"
    lacks 'sym_ready_cond' "$T/mutexes" "no cond in the mutexes block"
    lacks 'sym_routes_rwlock' "$T/mutexes" "no rwlock in the mutexes block"
    has '  { symbol = "sym_routes_rwlock"; },' "$T/rwlocks" "rwlocks block: a pthread_rwlock_t"
    has '  { symbol = "sym_table_lock"; }' "$T/rwlocks" "rwlocks block: the last entry has no comma"
    has '  { symbol = "sym_cxx_shared_mutex"; },' "$T/rwlocks" "rwlocks block: a std::shared_mutex"
    lacks 'cond' "$T/rwlocks" "no cond in the rwlocks block"
    lacks 'sym_small_lock' "$T/out" "a 4-byte int named like a lock is no mutex"
    lacks 'sym_tls_lock' "$T/out" "a thread-local mutex cannot be mapped and is not listed"
fi

if scan 0 $D/sym_prog; then
    has "holds a copy of the library global symlib_copied_lock" "$T/err" \
        "copy relocation without its library scanned is pointed out"
fi

# ---- config output --------------------------------------------------------
if scan 0 --config $D/sym_prog; then
    if [ "$(head -n 1 "$T/out")" = "mutexes = (" ] && [ "$(tail -n 1 "$T/out")" = ");" ] &&
       ! grep -q '^MUTEX' "$T/out"; then
        ok "--config prints only the config blocks"
    else
        bad "--config prints only the config blocks" "$(cat "$T/out")"
    fi
    if [ "$(grep -c -e '^mutexes = ($' -e '^conds = ($' -e '^rwlocks = ($' "$T/out")" = 3 ]; then
        ok "--config prints the mutexes, conds and rwlocks blocks"
    else
        bad "--config prints the mutexes, conds and rwlocks blocks" "$(cat "$T/out")"
    fi
    # The three blocks pasted into a config: the shim's own start
    # (dmutex check) resolves every entry in the running program.
    { echo 'redis = { host = "127.0.0.1"; port = 1; };'
      cat "$T/out"; } >"$T/check.cfg"
    if "$DMUTEX" check -c "$T/check.cfg" -- $D/sym_prog >"$T/check.out" 2>&1 &&
       grep -q ", 8 conds (0 init_site functions), 3 rwlocks (0 init_site functions)" \
           "$T/check.out"; then
        ok "dmutex check maps every printed mutex, cond and rwlock of the program"
    else
        bad "dmutex check maps every printed mutex, cond and rwlock of the program" \
            "$(cat "$T/check.cfg")" "$(cat "$T/check.out")"
    fi
fi

if scan 0 --config $D/sym_resolve $D/libsymlib.so; then
    resolves sym_resolve "CHECKED 17$" \
        "every entry loads and resolves to its variable in the running program"
    resolves sym_resolve "CONDS RESOLVED 8 of 8, CHECKED 8$" \
        "every cond entry loads and resolves to its variable in the running program"
    resolves sym_resolve "RWLOCKS RESOLVED 3 of 3, CHECKED 3$" \
        "every rwlock entry loads and resolves to its variable in the running program"
fi

# ---- without debug info ---------------------------------------------------
if scan 0 $D/sym_prog_nodebug; then
    row "without debug info a lock-named 40-byte global is a guess" \
        sym_global_lock sym_global_lock 0 40 sym_prog_nodebug - "?" guess
    has '  { symbol = "sym_global_lock"; }' "$T/out" "a guess still gets an entry"
    has '# guess: no debug info' "$T/out" "a guess says so in the config"
    has '  # { symbol = "cache_lock"; }   # ambiguous' "$T/out" \
        "statics of one name without file names are commented out as ambiguous"
    has "has no debug info" "$T/err" "missing debug info is pointed out"
    lacks 'sym_slots' "$T/out" "an array not named like a lock is left to --all"
    row "without debug info a cond-named 48-byte global is a cond guess" \
        sym_ready_cond sym_ready_cond 0 48 sym_prog_nodebug - "? (cond)" guess
    row "without debug info a cond-named array is one guess per pthread_cond_t" \
        "sym_wake_cond[1]" sym_wake_cond 48 144 sym_prog_nodebug - "? (cond)" guess
    row "without debug info an rwlock-named 56-byte global is an rwlock guess" \
        sym_routes_rwlock sym_routes_rwlock 0 56 sym_prog_nodebug - "? (rwlock)" guess
    row "without debug info a lock-named 56-byte global is an rwlock guess" \
        sym_table_lock sym_table_lock 0 56 sym_prog_nodebug - "? (rwlock)" guess
    block conds; block rwlocks
    has '  { symbol = "sym_ready_cond"; },   # guess: no debug info; size (pthread_cond_t) and name' \
        "$T/conds" "a cond guess gets a conds entry and says so"
    has '  { symbol = "sym_table_lock"; }   # guess: no debug info; size (pthread_rwlock_t) and name' \
        "$T/rwlocks" "an rwlock guess gets an rwlocks entry and says so"
fi

if scan 0 --all $D/sym_prog_nodebug; then
    row "--all lists a 40-byte multiple without a lock-like name, once" \
        sym_slots sym_slots 0 160 sym_prog_nodebug - "? (array?)" weak
    has '  # { symbol = "sym_slots"; }' "$T/out" "weak entries are commented out"
    row "--all still lists the guesses" \
        sym_global_lock sym_global_lock 0 40 sym_prog_nodebug - "?" guess
fi

if scan 0 --config $D/sym_resolve_nodebug; then
    resolves sym_resolve_nodebug "^RESOLVED" \
        "every guessed entry resolves in the program stripped of debug info"
    resolves sym_resolve_nodebug "^CONDS RESOLVED 6 of 6, CHECKED 5$" \
        "every guessed cond entry resolves in the program stripped of debug info"
    resolves sym_resolve_nodebug "^RWLOCKS RESOLVED 3 of 3, CHECKED 3$" \
        "every guessed rwlock entry resolves in the program stripped of debug info"
fi

if scan 0 $D/sym_prog_stripped; then
    has "is stripped (no .symtab)" "$T/err" "a stripped file is pointed out"
    has "no mutex variables found" "$T/err" "nothing exported, nothing found, still success"
fi

# ---- C11, and locks of kinds the shim does not interpose ------------------
# A C11 mtx_t and cnd_t are a pthread_mutex_t and a pthread_cond_t, and the
# shim interposes mtx_* and cnd_*: listed (before, not found at all). GLib's
# GMutex, GRecMutex, GCond, the deprecated GStaticMutex and a spin lock are
# not listed, with a note each; a GStaticMutex's unused pthread_mutex_t
# member is no mutex (before, it was listed as a sure one, at offset 8, and
# that entry would have been mapped and never locked).
P=build/tests/progs
if scan 0 $P/c11prog; then
    row "C11 mtx_t global" c11_lock c11_lock 0 40 c11prog - mtx_t dwarf
    row "C11 mtx_t global, recursive" rec_lock rec_lock 0 40 c11prog - mtx_t dwarf
    row "C11 cnd_t global" ready ready 0 48 c11prog - cnd_t dwarf
    block conds
    has '  { symbol = "ready"; }' "$T/conds" "conds block: a cnd_t"
fi
if scan 0 $P/glibprog; then
    row "a pthread_mutex_t beside GLib's locks is listed" \
        plain_lock plain_lock 0 40 glibprog - pthread_mutex_t dwarf
    row "and an mtx_t" c11_lock c11_lock 0 40 glibprog - mtx_t dwarf
    for v in cache_lock tree_lock cache_cond legacy_lock registry stats_lock; do
        lacks "$v" "$T/out" "$v (a lock of another kind, or holding one) is not listed"
    done
    has "note: cache_lock in glibprog is a GMutex, not listed: GLib locks it with a futex of its own" \
        "$T/err" "a GMutex is pointed out, with why"
    has "note: tree_lock in glibprog is a GRecMutex, not listed" "$T/err" \
        "a GRecMutex is pointed out"
    has "note: cache_cond in glibprog is a GCond, not listed" "$T/err" "a GCond is pointed out"
    has "note: legacy_lock in glibprog is a GStaticMutex, not listed" "$T/err" \
        "a GStaticMutex is pointed out"
    has "note: registry.lock in glibprog is a GStaticMutex, not listed" "$T/err" \
        "a GStaticMutex struct member is pointed out by its member path"
    has "note: stats_lock in glibprog is a pthread_spinlock_t, not listed" "$T/err" \
        "a spin lock is pointed out"
fi

# ---- errors and usage -----------------------------------------------------
if scan 1 /bin/nope; then
    has "dmutex scan: /bin/nope: No such file or directory" "$T/err" "missing file named with its cause"
fi
if scan 1 /etc/passwd; then
    has "dmutex scan: /etc/passwd: not an ELF file" "$T/err" "non-ELF file named with its cause"
fi
if scan 1 $D; then
    has "dmutex scan: $D: Is a directory" "$T/err" "directory refused"
fi
if scan 1 $D/sym_cxx.o; then
    has "an object file, not a program or shared library" "$T/err" "object file refused"
fi
if scan 1 $D/sym_prog /bin/nope; then
    lacks "MUTEX" "$T/out" "a bad library fails before any output"
fi
if scan 2; then
    has "dmutex scan: no PROGRAM given" "$T/err" "no program is a usage error"
fi
if scan 2 --bogus $D/sym_prog; then
    has "unknown option '--bogus'" "$T/err" "unknown option is a usage error"
fi
if scan 0 --help; then
    has "Usage: dmutex scan [--all] [--config] PROGRAM [LIBRARY...]" "$T/out" "--help prints usage"
    has "Exit status" "$T/out" "--help documents the exit status"
fi
if scan 0 -h; then
    has "Usage: dmutex scan" "$T/out" "-h prints usage"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
