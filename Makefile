# dmutex: make (all), make test, make demo, make bench, make fuzz.
#
# Package flags are taken from pkg-config when a recipe runs, not when this
# file is read, so that `make test` and `make demo` can install missing
# packages first (tools/deps.sh) on a fresh machine.

CC       ?= cc
CXX      ?= c++
CFLAGS   ?= -O2 -g
B        := build
DM_WARN  := -Wall -Wextra -Werror
DM_CFLAGS = -std=c11 -D_GNU_SOURCE $(DM_WARN) -pthread $(CFLAGS) \
            $(shell pkg-config --cflags hiredis libconfig libelf libssl)
SHIM_LIBS = $(shell pkg-config --libs hiredis libconfig libelf) -ldl -pthread
CMOCKA_LIBS = $(shell pkg-config --libs cmocka)

# The version is written once, in include/dmutex.h (DMUTEX_VERSION_*).
dm_version_part = $(shell sed -n 's/^\#define DMUTEX_VERSION_$(1) \([0-9][0-9]*\)$$/\1/p' include/dmutex.h)
DM_MAJOR   := $(call dm_version_part,MAJOR)
DM_VERSION := $(DM_MAJOR).$(call dm_version_part,MINOR).$(call dm_version_part,PATCH)
DM_SONAME  := libdmutex.so.$(DM_MAJOR)

# shim/redis/ is the Redis store (docs/design.md, "The store interface"):
# only its files see its headers (-Ishim/redis) and hiredis's.
SHIM_SRCS := $(wildcard shim/*.c shim/redis/*.c shim/etcd/*.c)
LUA_SRCS  := $(sort $(wildcard shim/redis/lua/*.lua))
SHIM_OBJS := $(patsubst shim/%.c,$(B)/shim/%.o,$(SHIM_SRCS)) $(B)/shim/redis/lua_scripts.o
# Everything but the exported entry points (preload) and the process's
# start-up (startup: a constructor that would configure whatever links it):
# what tests and tools link against to drive config, symbols, cluster and
# friends without LD_PRELOAD. Every object in it links without those two
# (tests/tests.mk builds build/tests/core_links to keep it so).
CORE_OBJS := $(filter-out $(B)/shim/preload.o $(B)/shim/startup.o,$(SHIM_OBJS))

.PHONY: all deps test demo bench fuzz clean
all: $(B)/libdmutex.so $(B)/libdmcore.a $(B)/libdmutex-trace.so

deps:
	@tools/deps.sh

# Each object's header dependencies are what the compiler saw (-MMD -MP,
# read back at the end of this file); a changed Makefile (its flags, an
# object built before it wrote .d files) rebuilds them all.
DM_DEPFLAGS = -MMD -MP

$(B)/shim/%.o: shim/%.c Makefile | $(B)/shim
	$(CC) $(DM_CFLAGS) $(DM_DEPFLAGS) -fPIC -fvisibility=hidden -ftls-model=initial-exec -Ishim -Iinclude -I$(B)/shim -c $< -o $@

$(B)/shim/redis/%.o: shim/redis/%.c Makefile | $(B)/shim/redis
	$(CC) $(DM_CFLAGS) $(DM_DEPFLAGS) -fPIC -fvisibility=hidden -ftls-model=initial-exec -Ishim/redis -Ishim -Iinclude -I$(B)/shim -c $< -o $@

# shim/etcd/ is the etcd store: the same rule for its headers.
$(B)/shim/etcd/%.o: shim/etcd/%.c Makefile | $(B)/shim/etcd
	$(CC) $(DM_CFLAGS) $(DM_DEPFLAGS) -fPIC -fvisibility=hidden -ftls-model=initial-exec -Ishim/etcd -Ishim -Iinclude -I$(B)/shim -c $< -o $@

$(B)/shim/redis/lua_scripts.c: $(LUA_SRCS) tools/embed-lua.sh | $(B)/shim/redis
	tools/embed-lua.sh $(LUA_SRCS) > $@

$(B)/shim/redis/lua_scripts.o: $(B)/shim/redis/lua_scripts.c
	$(CC) $(DM_CFLAGS) -fPIC -fvisibility=hidden -Ishim/redis -Ishim -c $< -o $@

# build/libdmutex.so keeps its plain name (tests, the demo and LD_PRELOAD
# lines use it); `make install` gives it the versioned file name its soname
# and dev link point to (tools/install.mk).
$(B)/libdmutex.so: $(SHIM_OBJS)
	$(CC) -shared -Wl,-z,now -Wl,-z,nodelete -Wl,-soname,$(DM_SONAME) -o $@ $^ $(SHIM_LIBS)

$(B)/libdmcore.a: $(CORE_OBJS)
	rm -f $@ && ar rcs $@ $^

# `dmutex trace`'s recording library: preloaded instead of the shim, so
# libdmutex.so's passthrough path stays as it is. It links the core for
# real (glibc's functions), symbols (identification) and config's name rules.
# Built from objects like the shim's, so that tests/internal_locks.test.sh
# can read what each calls.
TRACE_SRCS := $(wildcard shim/trace/*.c)
TRACE_OBJS := $(patsubst shim/trace/%.c,$(B)/shim/trace/%.o,$(TRACE_SRCS))
$(B)/shim/trace/%.o: shim/trace/%.c Makefile | $(B)/shim/trace
	$(CC) $(DM_CFLAGS) $(DM_DEPFLAGS) -fPIC -fvisibility=hidden -ftls-model=initial-exec -Ishim -Ishim/trace \
	    -Iinclude -c $< -o $@
$(B)/libdmutex-trace.so: $(TRACE_OBJS) $(B)/libdmcore.a
	$(CC) -shared -Wl,-z,now -o $@ $(TRACE_OBJS) $(B)/libdmcore.a $(SHIM_LIBS)

$(B)/shim $(B)/shim/trace $(B)/shim/redis $(B)/shim/etcd:
	mkdir -p $@

clean:
	rm -rf $(B)

# Each part of the tree brings its own rules.
include $(wildcard tools/*.mk demo/*.mk tests/*.mk bench/*.mk)

-include $(wildcard $(B)/shim/*.d $(B)/shim/redis/*.d $(B)/shim/etcd/*.d $(B)/shim/trace/*.d $(B)/tests/*.d)
