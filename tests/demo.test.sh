#!/bin/sh
# demo.test.sh: README's first command, `make demo`, in its quick form
# (demo/run.sh -q: network namespaces when root, else plain processes; a
# redis-server of its own on a free port): without the shim the machines
# oversell, with it exactly the stock is sold, and no seller under the shim
# says anything (a warning there is the demo going wrong: a first lock
# that waited a lease because the demo's FLUSHALL dropped the server's
# "lost no lock data" declaration, 29 s of a 0.1 s sale). Prints one
# closing line "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
passed=0 failed=0
[ -x build/stock ] && [ -f build/libdmutex.so ] || fail_setup "build/stock or build/libdmutex.so is missing: make all"
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
demo/run.sh -q >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok demo_exits_0; else bad demo_exits_0 "exit $rc: $(tail -n 5 "$out")"; fi
if grep -q "=> OVERSOLD by" "$out"; then ok without_the_shim_it_oversells; else
    bad without_the_shim_it_oversells "$(sed -n '/^1\./,/^2\./p' "$out")"; fi
if grep -q "=> CORRECT: exactly" "$out"; then ok with_the_shim_exactly_the_stock; else
    bad with_the_shim_exactly_the_stock "$(sed -n '/^2\./,$p' "$out")"; fi
said=$(sed -n '/^2\./,$p' "$out" | grep -A3 ' said:')
if [ -z "$said" ]; then ok sellers_under_the_shim_say_nothing; else
    bad sellers_under_the_shim_say_nothing "$said"; fi
# `make demo DEMO_BACKEND=etcd`: the lock in a 3-member etcd cluster whose
# leader is killed mid-sale.
demo/etcd.sh -n 1500 >"$out" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "=> CORRECT: exactly 1500 sold across the leader's loss" "$out" &&
   grep -q "^killed the etcd leader" "$out"; then ok etcd_demo_sells_exactly_the_stock_across_the_leaders_loss
else bad etcd_demo_sells_exactly_the_stock_across_the_leaders_loss "exit $rc: $(tail -n 8 "$out")"; fi
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
