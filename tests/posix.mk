# test_posix runs programs that the generic rule of tests/tests.mk cannot
# build: psx_host, made of two files with a file-static of one name, linked
# with libpsxlib.so and loading the plugin libpsxplug.so with dlopen, both
# found through the host's RUNPATH ($ORIGIN, $ORIGIN/plugins); and psx_cxx,
# a C++ program with std::mutex globals. tests/posix/pp.h is shared with
# tests/progs/posixprog.c.

PSX_D     := $(B)/tests/posix
PSX_CFLAGS = -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread
PSX_BINS  := $(PSX_D)/psx_host $(PSX_D)/libpsxlib.so $(PSX_D)/plugins/libpsxplug.so \
             $(PSX_D)/psx_cxx

test-build: $(PSX_BINS)

$(B)/tests/progs/posixprog: tests/posix/pp.h tests/progs/prog.h tests/progs/clock.h

$(PSX_D) $(PSX_D)/plugins:
	mkdir -p $@

$(PSX_D)/libpsxlib.so: tests/posix/psxlib.c | $(PSX_D)
	$(CC) $(PSX_CFLAGS) -fPIC -shared $< -o $@

$(PSX_D)/plugins/libpsxplug.so: tests/posix/psxplug.c | $(PSX_D)/plugins
	$(CC) $(PSX_CFLAGS) -fPIC -shared $< -o $@

$(PSX_D)/psx_host: tests/posix/psx_host.c tests/posix/twin_a.c tests/posix/twin_b.c \
		tests/posix/pp.h tests/progs/prog.h tests/progs/clock.h $(PSX_D)/libpsxlib.so | $(PSX_D)
	$(CC) $(PSX_CFLAGS) $(filter %.c,$^) -o $@ -L$(PSX_D) -lpsxlib \
	    -Wl,--enable-new-dtags,-rpath,'$$ORIGIN:$$ORIGIN/plugins' \
	    $(shell pkg-config --libs hiredis) -ldl

$(PSX_D)/psx_cxx: tests/posix/psx_cxx.cc | $(PSX_D)
	$(CXX) -std=c++17 -O1 -g -Wall -Wextra -Werror -pthread $< -o $@ \
	    $(shell pkg-config --libs hiredis)
