# Tests: every tests/test_*.c is a cmocka program linked with the shared
# helpers (tests/harness.c, tests/checker.c) and the shim's core (no
# LD_PRELOAD needed to drive config, symbols, cluster).
# tests/progs/*.c are plain programs the tests run, some with the shim
# preloaded. Areas with special build needs add tests/<area>.mk.

TEST_SRCS  := $(sort $(wildcard tests/test_*.c))
TEST_BINS  := $(patsubst tests/%.c,$(B)/tests/%,$(TEST_SRCS))
PROG_SRCS  := $(sort $(wildcard tests/progs/*.c))
PROG_BINS  := $(patsubst tests/progs/%.c,$(B)/tests/progs/%,$(PROG_SRCS))
TEST_CFLAGS = $(DM_CFLAGS) -Ishim -Ishim/redis -Itests $(shell pkg-config --cflags cmocka)

.PHONY: test test-build test-loaded
test:
	@tools/deps.sh
	@$(MAKE) --no-print-directory all test-build
	@tests/run.sh

# The same run beside a CPU hog (docs/testing.md, "On a loaded machine").
test-loaded:
	@tools/deps.sh loaded
	@$(MAKE) --no-print-directory all test-build
	@tests/loaded.sh

test-build: $(TEST_BINS) $(PROG_BINS) $(TEST_EXTRA)

# The shared helpers every test links: the harness (servers, children,
# files) and the exclusion checker with the network "machines".
TEST_HELPERS := $(B)/tests/harness.o $(B)/tests/checker.o

# Both include shim headers (struct dm_grant travels inside struct
# th_hold): a changed layout rebuilds them, as it rebuilds the tests
# (-MMD -MP: the headers each one includes, read back by the Makefile).
$(B)/tests/harness.o: tests/harness.c Makefile | $(B)/tests/progs
	$(CC) $(TEST_CFLAGS) $(DM_DEPFLAGS) -c $< -o $@

$(B)/tests/checker.o: tests/checker.c Makefile | $(B)/tests/progs
	$(CC) $(TEST_CFLAGS) $(DM_DEPFLAGS) -c $< -o $@

$(B)/tests/test_%: tests/test_%.c $(TEST_HELPERS) $(B)/libdmcore.a Makefile | $(B)/tests/progs
	$(CC) $(TEST_CFLAGS) $(DM_DEPFLAGS) $< $(TEST_HELPERS) -o $@ $(B)/libdmcore.a $(SHIM_LIBS) $(CMOCKA_LIBS)

# Test programs are ordinary programs: no shim headers, no shim objects
# (tests/progs/prog.h, clock.h, checkclient.h and fdio.h are the test
# programs' own headers; clock.h is the harness's too, fdio.h test_sentinel's),
# except the fake server
# faultserver, which never runs under the shim.
PROG_HEADERS := tests/progs/prog.h tests/progs/clock.h tests/progs/checkclient.h tests/progs/fdio.h
$(B)/tests/progs/%: tests/progs/%.c $(PROG_HEADERS) | $(B)/tests/progs
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread $< -o $@ $(PROG_LIBS_$*)

$(B)/tests/progs:
	mkdir -p $@

# faultserver tells the scripts apart by their keys: the layout comes from
# the keys module (shim/redis/keys.c, no state, no I/O) in the core archive.
# Under `make test-asan` the archive is instrumented: link the runtime too.
PROG_LIBS_faultserver = -Ishim -Ishim/redis $(B)/libdmcore.a $(filter -fsanitize=%,$(SHIM_LIBS))
$(B)/tests/progs/faultserver: $(B)/libdmcore.a shim/redis/keys.h

PROG_LIBS_counter = $(shell pkg-config --libs hiredis)
PROG_LIBS_condprog = $(shell pkg-config --libs hiredis)
PROG_LIBS_rwprog = $(shell pkg-config --libs hiredis)
PROG_LIBS_posixprog = $(shell pkg-config --libs hiredis) -ldl
PROG_LIBS_c11prog = $(shell pkg-config --libs hiredis)
# staleprog places a mutex where the shim's next name record's own mutex
# goes (shim/mapped_impl.h), and its calloc is the shim's (-rdynamic).
PROG_LIBS_staleprog = -Ishim -Ishim/redis $(shell pkg-config --cflags hiredis libconfig) -rdynamic -ldl
$(B)/tests/progs/staleprog: shim/mapped_impl.h
# sslprog is a program with an OpenSSL of its own (test_tls).
PROG_LIBS_sslprog = $(shell pkg-config --libs libssl libcrypto)
# api_weak includes include/dmutex.h, the public header, as a user would.
PROG_LIBS_api_weak = -Iinclude $(shell pkg-config --libs hiredis)
PROG_LIBS_whoprog = -Iinclude

# test_lifecycle: lifeprog and the plugin it dlopens (not a program, so
# outside tests/progs/*.c).
PROG_LIBS_lifeprog = $(shell pkg-config --libs hiredis) -ldl
test-build: $(B)/tests/progs/liblifeplug.so

$(B)/tests/progs/liblifeplug.so: tests/progs/plugin/liblifeplug.c | $(B)/tests/progs
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread -fPIC -shared $< -o $@

# The core archive links on its own: every object in it, with nothing from
# the exported entry points (a module reaching up to preload would leave an
# undefined symbol here).
test-build: $(B)/tests/core_links

$(B)/tests/core_links: $(B)/libdmcore.a | $(B)/tests/progs
	printf 'int main(void) { return 0; }\n' > $@.c
	$(CC) $@.c -o $@ -Wl,--whole-archive $(B)/libdmcore.a -Wl,--no-whole-archive $(SHIM_LIBS)

# test_metrics checks the version the file reports against include/dmutex.h.
$(B)/tests/test_metrics: TEST_CFLAGS += -Iinclude
