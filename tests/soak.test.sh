#!/bin/sh
# soak: the short fixed-seed run of the randomized soak (tests/soak/soak.sh,
# docs/testing.md "The soak") inside `make test`: SOAK_TEST_S seconds in all
# (default 66: 22 s for each of fair, cache and local, plus about 3 s of
# set-up each), one check per mode, which passes when the checker found no
# defect. Its faults are every kind the protocol must survive today; the
# ones that still show issue 25's open defects are left out (and run by
# `make soak`): a stop right after a handover (25.1: the new holder is
# protected for renew_ms only), server stalls longer than 1200 ms and
# restarts without persistence (25.3). Findings the checker names as
# issue 25's known defects (25.1: a handed-over hold lost on its claim
# lease; 25.2: a release answered "not held" after a short stall, an abort
# outside the section) are printed but do not fail the group until the
# protocol fix lands; SOAK_TEST_STRICT=1 makes them fail it. Any other
# defect fails it. SOAK_TEST_FAULTS and SOAK_TEST_STALL_MAX_MS put the
# left-out faults back.
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
SOAK_TEST_S=${SOAK_TEST_S:-66}
SOAK_TEST_SEED=${SOAK_TEST_SEED:-25}
SOAK_TEST_MODES=${SOAK_TEST_MODES:-fair,cache,local}
SOAK_TEST_FAULTS=${SOAK_TEST_FAULTS:-all,-stop-handover,-restart-noaof,-primary-restart-noaof}
SOAK_TEST_STALL_MAX_MS=${SOAK_TEST_STALL_MAX_MS:-1200}
out=build/soak-test
tests/soak/soak.sh -s "$SOAK_TEST_S" -S "$SOAK_TEST_SEED" -m "$SOAK_TEST_MODES" \
    -F "$SOAK_TEST_FAULTS" -M "$SOAK_TEST_STALL_MAX_MS" -o "$out" >"$out.txt" 2>&1
rc=$?
for m in $(echo "$SOAK_TEST_MODES" | tr ',' ' '); do
    line=$(grep "^summary mode=$m " "$out/summary.txt" 2>/dev/null)
    if [ -z "$line" ]; then
        bad "soak, mode $m: no report" "$(tail -n 20 "$out.txt")"
    elif echo "$line" | grep -q ' defects=0 known=0$'; then
        ok "soak, mode $m: no defect ($(echo "$line" | sed 's/.* sections=\([0-9]*\).*/\1/') sections)"
    elif echo "$line" | grep -q ' defects=0 ' && [ -z "${SOAK_TEST_STRICT:-}" ]; then
        ok "soak, mode $m: no defect but issue 25's known ones ($(echo "$line" | sed 's/.* known=//') of them; SOAK_TEST_STRICT=1 fails on them)"
        grep 'KNOWN DEFECT' "$out/$m/report.txt" | cut -c1-300
    else
        bad "soak, mode $m: defects (logs under $out/$m)" "$(sed -n '/^findings:/,/^faults:/p' "$out/$m/report.txt")"
    fi
done
[ $rc -eq 0 ] || [ "$failed" -gt 0 ] || [ -z "${SOAK_TEST_STRICT:-}" ] || bad "soak: tests/soak/soak.sh exited $rc" "$(tail -n 20 "$out.txt")"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
