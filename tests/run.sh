#!/bin/sh
# Runs every test program under build/tests (cmocka groups) and every
# tests/*.test.sh script, DM_TEST_JOBS groups at a time, then prints one
# closing line: "N passed, N failed". A program that dies without
# cmocka's summary counts as one failure.
#
#   tests/run.sh                  everything
#   tests/run.sh config cluster   only groups whose name contains a word
#   DM_TEST_JOBS=1 tests/run.sh   one group at a time, in name order (debugging)
#
# DM_TEST_JOBS (default 2, for the 2-core machines we run on) is how many
# groups run at once. The groups mostly wait (leases, servers starting,
# elections), so two at a time take about half as long. Each starts its
# own servers on free ports, keeps its files in a temp directory of its
# own and names its namespaces, links, cgroups and sockets by its pid:
# none sees another's (docs/testing.md, "Two groups at a time").
#
# SCHEDULE below says how much CPU each group wants, as a class, and how
# long it runs. What may run beside what:
#   heavy   keeps a CPU busy, or goes past one in bursts (the fault suite's
#           stress, Redis Cluster, the soak, builds, the fuzzer): beside
#           light groups only, so that nothing that needs the CPU waits for
#           it and it waits for nothing
#   light   a tenth of a CPU or less (waits on leases, parsers): beside any
#   normal  the rest: beside normal and light groups
# Heavy groups start first, longest first (each beside the light ones as
# they come), then the rest, longest first. A group not in the table is
# normal and starts before all. Give a new group its line from
# build/tests/times.txt, "NAME WALL CPU EXIT" of each group's last run
# (seconds; CPU / WALL above 0.5, or bursts past a CPU: heavy; 0.1 or
# below: light).
#
# Each group runs in a session of its own (setsid) with its output in a
# file. When it ends, run.sh prints "ok   NAME (N tests, Ss)", or, if it
# failed, its whole output between "---- NAME: FAILED" and "---- end of
# NAME". Ctrl-C (or TERM, HUP) stops every running group: SIGTERM to its
# process group (the harness and the scripts' traps stop their servers
# and remove their namespaces), then SIGKILL to whatever is left in its
# session after STOP_GRACE_S.
cd "$(dirname "$0")/.." || exit 1
FILTER="$*"
JOBS=${DM_TEST_JOBS:-2}
case $JOBS in ''|*[!0-9]*|0) echo "tests/run.sh: DM_TEST_JOBS=$JOBS is not a number of groups" >&2; exit 2 ;; esac
STOP_GRACE_S=15      # a stopped group's time to clean up before SIGKILL

# group class seconds: measured on the 2-core VM, two at a time (wall;
# the CPU figures behind the classes are in docs/decisions.md)
SCHEDULE="
test_faults        heavy  137
soak               heavy   89
test_rcluster      heavy   67
test_shim          heavy   63
deb                heavy   62
test_etcd          heavy   85
fuzz_config        heavy   21
install            heavy    7
test_lifecycle     light  134
test_sentinel      light   82
test_conds         light   45
test_replies       light   45
test_rwlocks       light   42
test_cluster       light   27
test_stack         light   17
test_redis         light   13
nowait             light    4
test_acl           light    3
test_c11           light    2
internal_locks     light    2
ls_json            light   30
module_graph       light    1
scan               light    1
soak_checker       light    1
test_symbols       light    1
test_symbols_nopie light    1
usage              light    1
acl_commands       light    0
config_reference   light    0
test_config        light    0
test_keys          light    0
test_policy        light    0
test_registry      light    0
test_tls           normal  87
test_interop       normal  34
test_posix         normal  65
test_metrics       normal  22
test_etcd_tls      normal  16
trace              normal  11
demo               normal   6
etcd_release       normal   5
admin              normal   3
"

want() {   # group name: run it? (every group when no words were given)
    [ -z "$FILTER" ] && return 0
    for w in $FILTER; do case "$1" in *"$w"*) return 0 ;; esac; done
    return 1
}

# Every group to run, in name order (cmocka programs, then scripts), as
# KIND.NAME (KIND c: build/tests/NAME; s: tests/NAME.test.sh).
groups=""
for t in build/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    want "$n" && groups="$groups c.$n"
done
for s in tests/*.test.sh; do
    [ -f "$s" ] || continue
    n=$(basename "$s" .test.sh)
    want "$n" && groups="$groups s.$n"
done

# The queue, KIND.NAME:CLASS in the order the groups start: name order for
# one at a time; else new groups, then heavy ones and then the rest, each
# longest first.
queue=""
if [ "$JOBS" -eq 1 ]; then
    for g in $groups; do queue="$queue $g:normal"; done
else
    order=$(printf '%s\n' "$SCHEDULE" | awk 'NF == 3 { print ($2 == "heavy" ? 0 : 1), $3, $1, $2 }' |
            sort -k1,1n -k2,2nr | awk '{ print $3 ":" $4 }')
    for g in $groups; do
        case "
$order" in *"
${g#?.}:"*) ;; *) queue="$queue $g:normal" ;; esac
    done
    for e in $order; do
        for g in $groups; do
            [ "${g#?.}" = "${e%:*}" ] && queue="$queue $g:${e#*:}"
        done
    done
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/dmutex-run.XXXXXX") || exit 1
mkfifo "$tmp/done" || exit 1
exec 3<>"$tmp/done"     # a group's wrapper writes its KIND.NAME here when it ends
times_file=build/tests/times.txt
mkdir -p build/tests && : >"$times_file.new"

passed=0 failed=0 failed_names=""
running=""              # KIND.NAME:CLASS:PID of each group running now
nrun=0 nheavy=0 nnormal=0

# KIND.NAME: starts the group in a session of its own. Its wrapper, the
# session's leader (its pid is the session's and the process group's),
# writes the exit status, the seconds and the CPU time to $tmp/KIND.NAME.*,
# then the key on fd 3.
start() {
    case $1 in c.*) set -- "$1" "build/tests/${1#c.}" ;; *) set -- "$1" sh "tests/${1#s.}.test.sh" ;; esac
    setsid sh -c '
        t=$1 key=$2; shift 2
        exec >"$t/$key.out" 2>&1    # the shell'"'"'s own words too ("Segmentation fault")
        s=$(date +%s)
        "$@" 3>&-
        rc=$?
        echo "$rc $(( $(date +%s) - s ))" >"$t/$key.rc"
        times >"$t/$key.cpu"
        echo "$key" >&3' sh "$tmp" "$@" </dev/null &
    started_pid=$!
}

may_start() {   # class: may a group of it start beside those running?
    case $1 in
        heavy) [ "$nheavy" -eq 0 ] && [ "$nnormal" -eq 0 ] ;;
        normal) [ "$nheavy" -eq 0 ] ;;
        *) return 0 ;;
    esac
}

count() {   # class +1|-1: the groups running now, by class
    case $1 in
        heavy) nheavy=$((nheavy + $2)) ;;
        normal) nnormal=$((nnormal + $2)) ;;
    esac
    nrun=$((nrun + $2))
}

# Takes the first group in the queue that may start now out of it, into
# picked. A heavy group that must wait lets only light ones pass it, or it
# would wait until no normal group is left.
pick() {
    picked="" rest="" light_only=""
    for q in $queue; do
        c=${q##*:}
        if [ -z "$picked" ] && { [ -z "$light_only" ] || [ "$c" = light ]; } && may_start "$c"; then
            picked=$q
            continue
        fi
        rest="$rest $q"
        [ -z "$picked" ] && [ "$c" = heavy ] && light_only=1
    done
    queue=$rest
    [ -n "$picked" ]
}

# KIND.NAME: the ended group's counts and its line (or its whole output).
finish() {
    name=${1#?.} out="$tmp/$1.out"
    read -r rc secs <"$tmp/$1.rc"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out" | awk '{s+=$1} END {print s+0}')
    # Scripts report with the plain line.
    sp=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\1/p' "$out" | tail -n 1)
    sf=$(sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed.*/\2/p' "$out" | tail -n 1)
    [ -n "$sp" ] && p=$((p + sp)) && f=$((f + sf))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -ne 0 ]; then
        failed_names="$failed_names $name"
        echo "---- $name: FAILED (exit $rc, ${secs}s) ----"
        cat "$out"
        echo "---- end of $name ----"
    else
        echo "ok   $name ($p tests, ${secs}s)"
    fi
    # user + system seconds of the group and of every process it waited for
    cpu=$(sed -n 2p "$tmp/$1.cpu" | tr 'ms' '  ' | awk '{ printf "%d", $1 * 60 + $2 + $3 * 60 + $4 }')
    echo "$name $secs ${cpu:-?} $rc" >>"$times_file.new"
    rm -f "$out" "$tmp/$1.rc" "$tmp/$1.cpu"
}

# Ctrl-C, TERM, HUP: stops every running group, as the header says.
stop_all() {
    trap '' INT TERM HUP
    pids="" names=""
    for r in $running; do pids="$pids ${r##*:}"; n=${r%%:*}; names="$names ${n#?.}"; done
    echo "tests/run.sh: interrupted; stopping$names" >&2
    for p in $pids; do kill -TERM "-$p" 2>/dev/null; done
    # what still runs in the groups' sessions (an exited wrapper is a
    # zombie until the wait below)
    left() { ps -e -o pid= -o sid= -o stat= | awk -v s="$pids " 'index(s, " " $2 " ") && $3 !~ /^Z/ { print $1 }'; }
    i=0
    while [ -n "$(left)" ] && [ $i -lt $((STOP_GRACE_S * 10)) ]; do sleep 0.1; i=$((i + 1)); done
    l=$(left)
    [ -n "$l" ] && echo "tests/run.sh: killing what is left:" $l >&2 && kill -KILL $l 2>/dev/null
    wait
    rm -rf "$tmp" "$times_file.new" "$times_file.all"
    exit "$1"
}
trap 'stop_all 130' INT
trap 'stop_all 143' TERM
trap 'stop_all 129' HUP
trap 'rm -rf "$tmp"' EXIT

while :; do
    while [ "$nrun" -lt "$JOBS" ] && pick; do
        start "${picked%:*}"
        running="$running $picked:$started_pid"
        count "${picked##*:}" 1
    done
    [ "$nrun" -gt 0 ] || break
    read -r key <&3 || continue
    still="" ended=""
    for r in $running; do
        case $r in "$key":*) ended=$r ;; *) still="$still $r" ;; esac
    done
    [ -n "$ended" ] || continue
    running=$still
    wait "${ended##*:}" 2>/dev/null
    c=${ended%:*}
    count "${c##*:}" -1
    finish "$key"
done

# the groups of this run, then the others' lines of the runs before
[ -f "$times_file" ] && awk 'NR == FNR { ran[$1] = 1; print; next } !ran[$1]' \
    "$times_file.new" "$times_file" >"$times_file.all" && mv "$times_file.all" "$times_file.new"
mv "$times_file.new" "$times_file"
[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
