# The randomized soak (tests/soak/): a seeded nemesis over network-namespace
# machines, workers that log every critical section, a fenced resource and
# a checker written apart from tests/checker.c. docs/testing.md ("The soak").
#
#   make soak                         every mode, SOAK_S seconds in all
#   make soak SOAK_MODE=cache SOAK_S=300 SOAK_SEED=7
#
# The short fixed-seed run inside `make test` is tests/soak.test.sh.

SOAK_S    ?= 1800
SOAK_SEED ?= 1
SOAK_MODE ?= all
SOAK_BINS := $(B)/tests/soak/soakworker $(B)/tests/soak/soakfence \
             $(B)/tests/soak/soaknemesis $(B)/tests/soak/soakcheck

.PHONY: soak
test-build: $(SOAK_BINS)

soak:
	@tools/deps.sh
	@$(MAKE) --no-print-directory all $(SOAK_BINS)
	@tests/soak/soak.sh -s "$(SOAK_S)" -S "$(SOAK_SEED)" -m "$(SOAK_MODE)"

$(B)/tests/soak:
	mkdir -p $@

# The worker is an ordinary program (the shim comes with LD_PRELOAD); the
# public header is all it includes of dmutex.
$(B)/tests/soak/soakworker: tests/soak/worker.c include/dmutex.h | $(B)/tests/soak
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread -Iinclude $< -o $@

$(B)/tests/soak/soakfence: tests/soak/fence.c | $(B)/tests/soak
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror $< -o $@

$(B)/tests/soak/soaknemesis: tests/soak/nemesis.c | $(B)/tests/soak
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror $< -o $@ $(shell pkg-config --libs hiredis)

$(B)/tests/soak/soakcheck: tests/soak/check.c | $(B)/tests/soak
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror $< -o $@
