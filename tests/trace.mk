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
