# lib.sh: what every shell test group shares, sourced after `cd` to the
# repo's root. A group counts its checks in `passed` and `failed` (set
# here to 0) and ends with "N passed, M failed", the line tests/run.sh reads.
passed=0 failed=0
ok()  { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failed=$((failed + 1)); echo "FAIL $1"; shift; for l in "$@"; do echo "     $l"; done; }
# fail_setup WHY: the group cannot go on (a build, a server that did not
# start): WHY, the checks so far and this one as a failure.
fail_setup() { echo "$1"; echo "$passed passed, $((failed + 1)) failed"; exit 1; }
