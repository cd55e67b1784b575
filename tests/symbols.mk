# test_symbols needs more than one translation unit: two files with a
# file-static of the same name, a C++ TU (std::mutex), a library linked in
# and one to dlopen. It is built twice, as PIE (the generic name, so this
# rule replaces the generic one) and with -no-pie, where a library global
# named by the program lives in the program by copy relocation.
# build/tests/symdata/ also holds the programs tests/scan.test.sh reads.

SYM_D      := $(B)/tests/symdata
SYM_C      := tests/symdata/sym_a.c tests/symdata/sym_b.c
SYM_H      := tests/symdata/sym_data.h
SYM_LIBS   := $(SYM_D)/libsymlib.so $(SYM_D)/libsymdl.so $(SYM_D)/libsymnofile.so
SYM_LINK   = -L$(SYM_D) -lsymlib -Wl,-rpath,'$$ORIGIN/symdata' \
             $(B)/libdmcore.a $(SHIM_LIBS) $(CMOCKA_LIBS) -lstdc++
# Conds and rwlocks, for dmutex scan only (not in test_symbols).
SYM_SYNC   := tests/symdata/sym_sync.c $(SYM_D)/sym_sync_cxx.o
SYM_PROGS  := $(SYM_D)/sym_prog $(SYM_D)/sym_prog_nodebug $(SYM_D)/sym_prog_stripped \
              $(SYM_D)/sym_resolve $(SYM_D)/sym_resolve_nodebug

test-build: $(B)/tests/test_symbols_nopie $(SYM_PROGS)

# libsymdl.so without debug info, and so without STT_FILE names (strip -g).
$(SYM_D)/libsymnofile.so: $(SYM_D)/libsymdl.so
	strip --strip-debug -o $@ $<

$(SYM_D):
	mkdir -p $@

$(SYM_D)/lib%.so: tests/symdata/%.c | $(SYM_D)
	$(CC) -std=gnu11 -O1 -g -fPIC -shared -Wall -Wextra -Werror -pthread $< -o $@

$(SYM_D)/sym_cxx.o: tests/symdata/sym_cxx.cc | $(SYM_D)
	$(CXX) -std=c++17 -O1 -g -Wall -Wextra -Werror -c $< -o $@

$(SYM_D)/sym_sync_cxx.o: tests/symdata/sym_sync_cxx.cc | $(SYM_D)
	$(CXX) -std=c++17 -O1 -g -Wall -Wextra -Werror -c $< -o $@

$(SYM_D)/sym_cxx_nopie.o: tests/symdata/sym_cxx.cc | $(SYM_D)
	$(CXX) -std=c++17 -O1 -g -fno-pie -Wall -Wextra -Werror -c $< -o $@

$(B)/tests/test_symbols: tests/test_symbols.c $(SYM_C) $(SYM_H) $(SYM_D)/sym_cxx.o \
		$(SYM_LIBS) $(B)/tests/harness.o $(B)/libdmcore.a
	$(CC) $(TEST_CFLAGS) -Itests/symdata $< $(SYM_C) $(SYM_D)/sym_cxx.o $(B)/tests/harness.o \
	    -o $@ $(SYM_LINK)

$(B)/tests/test_symbols_nopie: tests/test_symbols.c $(SYM_C) $(SYM_H) \
		$(SYM_D)/sym_cxx_nopie.o $(SYM_LIBS) $(B)/tests/harness.o $(B)/libdmcore.a
	$(CC) $(TEST_CFLAGS) -Itests/symdata -fno-pie -no-pie $< $(SYM_C) \
	    $(SYM_D)/sym_cxx_nopie.o $(B)/tests/harness.o -o $@ $(SYM_LINK)

# For dmutex scan: the same variables in an ordinary program with debug
# info, the same without it (symbols kept), and one with .symtab gone too.
$(SYM_D)/sym_prog: tests/symdata/sym_main.c $(SYM_C) $(SYM_H) $(SYM_D)/sym_cxx.o \
		$(SYM_SYNC) tests/symdata/sym_sync.h $(SYM_D)/libsymlib.so
	$(CC) -std=gnu11 -O1 -g -Wall -Wextra -Werror -pthread -Itests/symdata $< $(SYM_C) \
	    $(SYM_D)/sym_cxx.o $(SYM_SYNC) -o $@ -L$(SYM_D) -lsymlib -Wl,-rpath,'$$ORIGIN' -lstdc++

$(SYM_D)/sym_prog_nodebug: $(SYM_D)/sym_prog
	strip --strip-debug -o $@ $<

$(SYM_D)/sym_prog_stripped: $(SYM_D)/sym_prog
	strip -o $@ $<

# For dmutex scan: does the config it writes for a program resolve, with the
# shim's own config and symbols modules, to that program's variables?
$(SYM_D)/sym_resolve: tests/symdata/sym_resolve.c $(SYM_C) $(SYM_H) $(SYM_D)/sym_cxx.o \
		$(SYM_SYNC) tests/symdata/sym_sync.h $(SYM_D)/libsymlib.so $(B)/libdmcore.a
	$(CC) $(DM_CFLAGS) -Ishim -Ishim/redis -Itests/symdata $< $(SYM_C) $(SYM_D)/sym_cxx.o $(SYM_SYNC) -o $@ \
	    -L$(SYM_D) -lsymlib -Wl,-rpath,'$$ORIGIN' $(B)/libdmcore.a $(SHIM_LIBS) -lstdc++

# The same with debug info and file names gone (strip -g): only guesses.
$(SYM_D)/sym_resolve_nodebug: $(SYM_D)/sym_resolve
	strip --strip-debug -o $@ $<
