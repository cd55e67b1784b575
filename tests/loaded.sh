#!/bin/sh
# make test-loaded: every group, as make test runs them, beside a CPU hog
# (stress-ng, one busy worker per CPU unless DM_LOAD_CPUS says otherwise),
# the way a CI machine shared with a build runs them. The hog is stopped
# by its pid however the run ends. Arguments go to tests/run.sh.
set -u
cpus=${DM_LOAD_CPUS:-$(nproc)}
stress-ng --cpu "$cpus" --timeout 0 --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null' EXIT INT TERM
echo "test-loaded: stress-ng --cpu $cpus (pid $hog) beside the tests"
tests/run.sh "$@"
