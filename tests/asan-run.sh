#!/bin/sh
# tests/asan-run.sh ASAN_BUILD GROUP...: runs test groups against the
# AddressSanitizer build that `make test-asan` put in ASAN_BUILD (default
# build/asan), leaving build/ alone. Not a *.test.sh: run.sh does not pick
# it up.
#
# The tests name their binaries by paths under build/ (the harness's
# TH_BUILD), so they run from a staging root, ASAN_BUILD/root, whose
# entries link to the repository's and whose build/ is ASAN_BUILD.
#
# The shim is linked with -fsanitize=address. The ASan runtime must come
# first in the library list, or libc's malloc is the one everybody calls
# and neither heap errors nor leaks are seen: the harness (th_spawn) puts
# DM_TEST_PRELOAD before the shim in every child's LD_PRELOAD, and
# test_faults does the same for the children it starts itself. Each test group is itself
# instrumented and checked for leaks at exit. A child with a memory error or
# a leak exits non-zero with the report in its output, which fails the test
# that ran it. tests/asan.supp lists what LeakSanitizer cannot see is still
# reachable.
cd "$(dirname "$0")/.." || exit 1
repo=$PWD
b=${1:-build/asan}
[ $# -gt 0 ] && shift
[ -f "$b/libdmutex.so" ] || { echo "asan-run: no $b/libdmutex.so (make test-asan)" >&2; exit 1; }
root=$b/root
rm -rf "$root"
mkdir -p "$root" || exit 1
for e in "$repo"/* "$repo"/.[!.]*; do
    n=$(basename "$e")
    case $n in build|.git) continue ;; esac
    [ -e "$e" ] && ln -s "$e" "$root/$n"
done
ln -s "$(cd "$b" && pwd)" "$root/build"

DM_TEST_PRELOAD=$(ldd "$b/libdmutex.so" | awk '/libasan/ { print $3; exit }')
[ -n "$DM_TEST_PRELOAD" ] || { echo "asan-run: $b/libdmutex.so is not linked with ASan" >&2; exit 1; }
ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1:abort_on_error=0:halt_on_error=1
LSAN_OPTIONS=suppressions=$repo/tests/asan.supp:print_suppressions=0
export DM_TEST_PRELOAD ASAN_OPTIONS LSAN_OPTIONS
cd "$root" || exit 1
echo "asan-run: $(pwd -P), groups: ${*:-all}"
# run.sh cds to "$(dirname "$0")/..", which the shell resolves logically:
# back to this root, not to the repository.
sh tests/run.sh "$@"
