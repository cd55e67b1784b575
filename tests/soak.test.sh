#!/bin/sh
# soak: the short fixed-seed run of the randomized soak (tests/soak/soak.sh,
# docs/testing.md "The soak") inside `make test`: SOAK_TEST_S seconds in all
# (default 88: 22 s for each of fair, cache, local and etcd; etcd's set-up
# adds about 2.5 s), every fault, server stalls up to SOAK_TEST_STALL_MAX_MS
# (default 1200; longer ones run in `make soak`), one check per mode, which
# passes when the checker found no defect. SOAK_TEST_MODES, _SEED and
# _FAULTS choose others.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
if [ "$(id -u)" != 0 ]; then
    echo "soak: skipped: needs root for its network namespaces"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
for f in build/libdmutex.so build/tests/soak/soakworker build/tests/soak/soakfence \
         build/tests/soak/soaknemesis build/tests/soak/soakcheck; do
    [ -e "$f" ] || fail_setup "soak: $f is missing: make all test-build"
done
SOAK_TEST_S=${SOAK_TEST_S:-88}
SOAK_TEST_SEED=${SOAK_TEST_SEED:-25}
SOAK_TEST_MODES=${SOAK_TEST_MODES:-fair,cache,local,etcd}
SOAK_TEST_FAULTS=${SOAK_TEST_FAULTS:-all}
SOAK_TEST_STALL_MAX_MS=${SOAK_TEST_STALL_MAX_MS:-1200}
out=build/soak-test
tests/soak/soak.sh -s "$SOAK_TEST_S" -S "$SOAK_TEST_SEED" -m "$SOAK_TEST_MODES" \
    -F "$SOAK_TEST_FAULTS" -M "$SOAK_TEST_STALL_MAX_MS" -o "$out" >"$out.txt" 2>&1
rc=$?
for m in $(echo "$SOAK_TEST_MODES" | tr ',' ' '); do
    line=$(grep "^summary mode=$m " "$out/summary.txt" 2>/dev/null)
    if [ -z "$line" ]; then
        bad "soak, mode $m: no report" "$(tail -n 20 "$out.txt")"
    elif echo "$line" | grep -q ' defects=0$'; then
        ok "soak, mode $m: no defect ($(echo "$line" | sed 's/.* sections=\([0-9]*\).*/\1/') sections)"
    else
        bad "soak, mode $m: defects (logs under $out/$m)" "$(sed -n '/^findings:/,/^faults:/p' "$out/$m/report.txt")"
    fi
done
[ $rc -eq 0 ] || [ "$failed" -gt 0 ] || bad "soak: tests/soak/soak.sh exited $rc" "$(tail -n 20 "$out.txt")"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
