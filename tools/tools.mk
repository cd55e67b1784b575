# The dmutex command (build/dmutex): every tools/*.c linked with the core.
CLI_SRCS := $(sort $(wildcard tools/*.c))
all: $(B)/dmutex

$(B)/dmutex: $(CLI_SRCS) $(wildcard tools/*.h) $(B)/libdmcore.a
	$(CC) $(DM_CFLAGS) -Ishim -Itools $(shell pkg-config --cflags libdw) $(CLI_SRCS) -o $@ \
	    $(B)/libdmcore.a $(SHIM_LIBS) $(shell pkg-config --libs libdw libcrypto)
