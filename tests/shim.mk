# test_shim runs its programs with build/libdmutex.so preloaded: `make
# test-build` must build the shim itself too, not only libdmcore.a.
test-build: $(B)/libdmutex.so

# Plugins dlprog loads (tests/progs/plugins/X.c -> libX.so beside it).
DLP_D := $(B)/tests/progs/plugins
DLP_SOS := $(patsubst tests/progs/plugins/%.c,$(DLP_D)/lib%.so,$(wildcard tests/progs/plugins/*.c))
test-build: $(DLP_SOS)

$(DLP_D):
	mkdir -p $@

$(DLP_D)/lib%.so: tests/progs/plugins/%.c | $(DLP_D)
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread -fPIC -shared $< -o $@

PROG_LIBS_dlprog = -ldl
PROG_LIBS_secureprog = -ldl
