# Fuzzing the config parser with libFuzzer (clang; Debian's libclang-rt-14-dev
# holds the libFuzzer runtime, see tools/deps.sh).
#
#   make fuzz                 build and fuzz for FUZZ_SECONDS (default 180)
#   make fuzz-short           the same for 20 seconds (tests/fuzz_config.test.sh)
#
# The config module (shim/config*.c) is compiled into the fuzzer itself with
# coverage and ASan+UBSan; any UB aborts. Leaks inside libconfig itself are suppressed by
# tests/fuzz/lsan.supp (one known libconfig 1.5 bug). The corpus grows in build/fuzz/corpus across runs, seeded
# from config/*.cfg and tests/fuzz/seeds/; crashes land in build/fuzz/crashes/
# (replay one with: LSAN_OPTIONS=suppressions=tests/fuzz/lsan.supp
# build/fuzz/fuzz_config build/fuzz/crashes/crash-...).

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 180
FUZZ_DIR     := $(B)/fuzz
FUZZ_CFLAGS   = -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                -Ishim $(shell pkg-config --cflags libconfig)
FUZZ_ARGS     = -dict=tests/fuzz/config.dict -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
                -artifact_prefix=$(FUZZ_DIR)/crashes/ -print_final_stats=1

.PHONY: fuzz fuzz-short fuzz-build
fuzz-build:
	@tools/deps.sh
	@$(MAKE) --no-print-directory $(FUZZ_DIR)/fuzz_config

CONFIG_SRCS := $(sort $(wildcard shim/config*.c))

$(FUZZ_DIR)/fuzz_config: tests/fuzz/fuzz_config.c $(CONFIG_SRCS) $(wildcard shim/config*.h)
	@mkdir -p $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_CFLAGS) tests/fuzz/fuzz_config.c $(CONFIG_SRCS) -o $@ \
	    $(shell pkg-config --libs libconfig)

# $(1): seconds to run.
define dm_fuzz_run
	@mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/seed $(FUZZ_DIR)/crashes
	@cp config/*.cfg tests/fuzz/seeds/* $(FUZZ_DIR)/seed/
	LSAN_OPTIONS=suppressions=tests/fuzz/lsan.supp:print_suppressions=0 \
	    $(FUZZ_DIR)/fuzz_config $(FUZZ_ARGS) -max_total_time=$(1) $(FUZZ_DIR)/corpus $(FUZZ_DIR)/seed
endef

fuzz: fuzz-build
	$(call dm_fuzz_run,$(FUZZ_SECONDS))

fuzz-short: fuzz-build
	$(call dm_fuzz_run,20)
