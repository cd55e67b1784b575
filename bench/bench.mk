# The benchmark (issues 5 and 11): `make bench` measures dmutex against its
# peers on a private redis-server and writes bench/results.md,
# bench/throughput.png and README.md's Performance section (bench/README.md
# says what each figure is). BENCH_QUICK=1 for a short run.
#
# The programs are ordinary pthread programs: no shim headers or objects
# (bench/bench.h is their own); dmutex is applied to them with LD_PRELOAD
# and a config, as a user would.

BENCH_BINS := $(B)/bench/cycle $(B)/bench/rtt $(B)/bench/passthrough $(B)/bench/many \
              $(B)/bench/rwcycle $(B)/bench/condwake $(B)/bench/bare.so

.PHONY: bench-build bench-names
bench-build: $(BENCH_BINS) $(B)/bench/names

# Issue 14 (memory per name): lock+unlock cost and RSS with 10 to 100,000
# live names, and RSS over names made and destroyed (bench/names.sh). The
# live figure for 10 and 100,000 names is also part of `make bench`.
bench-names:
	@$(MAKE) --no-print-directory all $(B)/bench/names
	@bench/names.sh

# names uses the public API header, include/dmutex.h, as a user program would.
$(B)/bench/names: bench/names.c bench/bench.h include/dmutex.h | $(B)/bench
	$(CC) -std=gnu11 $(DM_WARN) -pthread $(CFLAGS) -Iinclude $(shell pkg-config --cflags hiredis) \
	    $< -o $@ $(shell pkg-config --libs hiredis)

bench:
	@tools/deps.sh bench
	@$(MAKE) --no-print-directory all bench-build
	@bench/run.sh

$(B)/bench/cycle $(B)/bench/rtt $(B)/bench/rwcycle: $(B)/bench/%: bench/%.c bench/bench.h | $(B)/bench
	$(CC) -std=gnu11 $(DM_WARN) -pthread $(CFLAGS) $(shell pkg-config --cflags hiredis) \
	    $< -o $@ $(shell pkg-config --libs hiredis)

$(B)/bench/%: bench/%.c bench/bench.h | $(B)/bench
	$(CC) -std=gnu11 $(DM_WARN) -pthread $(CFLAGS) $< -o $@

# bare.so: an interposer that checks nothing (bench/bare.c), the floor the
# unmapped pair is set against.
$(B)/bench/bare.so: bench/bare.c | $(B)/bench
	$(CC) -std=gnu11 $(DM_WARN) -fPIC -shared -fvisibility=hidden $(CFLAGS) $< -o $@ -ldl

$(B)/bench:
	mkdir -p $@
