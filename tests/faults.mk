# The fault-injection suite (tests/test_faults.c, built by tests.mk like
# every test group) and the sanitizer run.
#
#   make test-faults   the suite alone, with the long stress run (a minute of
#                      16 processes x 4 threads); measured numbers are kept in
#                      build/faults-report.txt. `make test` runs the same group
#                      with a 10 s stress run. One scenario, while working on
#                      it: DM_FAULTS_FILTER='*cut_off*' build/tests/test_faults
#                      (a cmocka glob on the test names).
#   make test-asan     the shim, its core and the tests built with
#                      -fsanitize=address into build/asan (build/ is left
#                      alone), then the integration groups run against that
#                      shim (see tests/asan-run.sh for how it is preloaded).
#                      -O1 makes GCC's format-truncation analysis see other
#                      paths than -O2 does: those stay warnings here. A
#                      test that cannot hold under ASan (DM_TEST_PRELOAD
#                      set) says why where it skips or measures nothing:
#                      fork children that go on (gcc 12's runtime does not
#                      hold its allocator's locks across fork), heap and
#                      RSS figures (ASan's allocator).

FAULTS_STRESS_MS ?= 60000
ASAN_B     := $(B)/asan
ASAN_FLAGS := -fsanitize=address -fno-omit-frame-pointer
# The groups that run real processes against a real server.
ASAN_GROUPS ?= cluster shim faults posix conds rwlocks c11

PROG_LIBS_faultworker = $(shell pkg-config --libs hiredis)

.PHONY: test-faults test-asan
test-faults:
	@tools/deps.sh
	@$(MAKE) --no-print-directory all $(B)/tests/test_faults \
	    $(B)/tests/progs/faultworker $(B)/tests/progs/faultserver
	@DM_FAULTS_STRESS_MS=$(FAULTS_STRESS_MS) $(B)/tests/test_faults 2>&1 | \
	    tee $(B)/faults-report.txt; \
	    echo "measured numbers: $(B)/faults-report.txt (grep measured)"; \
	    grep -q '^\[  PASSED  \]' $(B)/faults-report.txt && \
	    ! grep -q '^\[  FAILED  \]' $(B)/faults-report.txt

test-asan:
	@tools/deps.sh
	@$(MAKE) --no-print-directory B=$(ASAN_B) CFLAGS="-O1 -g $(ASAN_FLAGS)" \
	    DM_WARN="$(DM_WARN) -Wno-error=format-truncation" \
	    SHIM_LIBS="$(SHIM_LIBS) $(ASAN_FLAGS)" all test-build
	@tests/asan-run.sh $(ASAN_B) $(ASAN_GROUPS)
