# tests/trace.test.sh: the programs `dmutex trace` is tried on. trace_books
# is C++, built as a user's release build would be: -O2, stripped (-s), so
# no symbol names its std::mutex.
test-build: $(B)/tests/progs/trace_books $(B)/libdmutex-trace.so

$(B)/tests/progs/trace_books: tests/progs/trace_books.cc | $(B)/tests/progs
	$(CXX) -std=c++17 -O2 -s -Wall -Wextra -Werror -pthread $< -o $@ $(shell pkg-config --libs hiredis)

PROG_LIBS_trace_factory = $(shell pkg-config --libs hiredis)
PROG_LIBS_trace_array = $(shell pkg-config --libs hiredis)

# The factory stripped: no function name left for its init call, so the
# config names the call by its address (init_site_address, weak).
test-build: $(B)/tests/progs/trace_factory_stripped
$(B)/tests/progs/trace_factory_stripped: tests/progs/trace_factory.c $(PROG_HEADERS) | $(B)/tests/progs
	$(CC) -std=gnu11 -O2 -s -Wall -Wextra -Werror -pthread $< -o $@ $(shell pkg-config --libs hiredis)

# Conds and rwlocks: trace_conds talks to a redis-server in its two-process modes.
PROG_LIBS_trace_conds = $(shell pkg-config --libs hiredis)
PROG_LIBS_trace_routes = $(shell pkg-config --libs hiredis)

# trace_misc has a second file (a file-static mutex named as one of its
# own) and a plugin it dlopens and dlcloses, both under tests/progs/trace/
# (not programs of their own).
PROG_LIBS_trace_misc = tests/progs/trace/statics_other.c -ldl
$(B)/tests/progs/trace_misc: tests/progs/trace/statics_other.c
test-build: $(B)/tests/progs/libtracegone.so
$(B)/tests/progs/libtracegone.so: tests/progs/trace/libtracegone.c | $(B)/tests/progs
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread -fPIC -shared $< -o $@
test-build: $(B)/tests/progs/libtracegone2.so
$(B)/tests/progs/libtracegone2.so: tests/progs/trace/libtracegone.c | $(B)/tests/progs
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread -fPIC -shared -DTRACEGONE_REBUILT $< -o $@

# trace_early: a program whose library's constructor locks before the
# tracer's constructor runs (tests/progs/trace/).
test-build: $(B)/tests/progs/trace_early
$(B)/tests/progs/libtraceearly.so: tests/progs/trace/libtraceearly.c | $(B)/tests/progs
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread -fPIC -shared $< -o $@
$(B)/tests/progs/trace_early: tests/progs/trace/early_main.c $(B)/tests/progs/libtraceearly.so
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror $< -o $@ -Wl,--no-as-needed \
	    -L$(B)/tests/progs -ltraceearly -Wl,-rpath,'$$ORIGIN'
