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
# The shim is linked with -fsanitize=address, so the ASan runtime comes in
# as a dependency of the preloaded libdmutex.so rather than first in the
# library list; verify_asan_link_order=0 lets it start that way, and as it
# is still loaded before libc it gets malloc and free. Children inherit
# ASAN_OPTIONS. A child with a memory error or a leak (LeakSanitizer runs
# at exit) exits non-zero with the report in its output, which fails the
# test that ran it. Each test group is itself instrumented.
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

ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=1:abort_on_error=0:halt_on_error=1
export ASAN_OPTIONS
if [ -f "$repo/tests/fuzz/lsan.supp" ]; then
    LSAN_OPTIONS=suppressions=$repo/tests/fuzz/lsan.supp
    export LSAN_OPTIONS
fi
cd "$root" || exit 1
echo "asan-run: $(pwd -P), groups: ${*:-all}"
# run.sh cds to "$(dirname "$0")/..", which the shell resolves logically:
# back to this root, not to the repository.
sh tests/run.sh "$@"
