#!/bin/sh
# Runs every test program under build/tests (cmocka groups) and every
# tests/*.test.sh script, then prints one closing line: "N passed, N failed".
# A program that dies without cmocka's summary counts as one failure.
#
#   tests/run.sh              everything
#   tests/run.sh config cluster   only groups whose name contains a word
cd "$(dirname "$0")/.." || exit 1
passed=0 failed=0 failed_names=""

want() {   # group name: run it? (every group when no words were given)
    [ -z "$FILTER" ] && return 0
    for w in $FILTER; do case "$1" in *"$w"*) return 0 ;; esac; done
    return 1
}
FILTER="$*"

run_one() {   # name, command...
    name=$1; shift
    out=$(mktemp)
    start=$(date +%s)
    "$@" >"$out" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
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
    rm -f "$out"
}

for t in build/tests/test_*; do
    [ -x "$t" ] || continue
    n=$(basename "$t")
    want "$n" || continue
    run_one "$n" "$t"
done
for s in tests/*.test.sh; do
    [ -f "$s" ] || continue
    n=$(basename "$s" .test.sh)
    want "$n" || continue
    run_one "$n" sh "$s"
done

[ -n "$failed_names" ] && echo "failed:$failed_names"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
