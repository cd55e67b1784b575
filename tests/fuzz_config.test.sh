#!/bin/sh
# Builds the config fuzzer and runs it for about 20 seconds (make fuzz-short).
# A crash, leak, sanitizer report or broken contract fails it; the input
# that did it is kept in build/fuzz/crashes/. Closing line as tests/run.sh
# expects: "1 passed, 0 failed" or "0 passed, 1 failed".
cd "$(dirname "$0")/.." || exit 1
if make --no-print-directory fuzz-short; then
    echo "1 passed, 0 failed"
else
    echo "fuzz_config: failed; inputs that broke it:" $(ls build/fuzz/crashes 2>/dev/null)
    echo "0 passed, 1 failed"
    exit 1
fi
