# The dmutex command (build/dmutex): every tools/*.c linked with the core.
CLI_SRCS := $(sort $(wildcard tools/*.c))
all: $(B)/dmutex

# $(1): extra flags (tools/install.mk builds the installed one with its paths).
dm_cli_link = $(CC) $(DM_CFLAGS) -Ishim -Itools -Iinclude $(1) $(shell pkg-config --cflags libdw) \
    $(CLI_SRCS) -o $@ $(B)/libdmcore.a $(SHIM_LIBS) $(shell pkg-config --libs libdw libcrypto)

$(B)/dmutex: $(CLI_SRCS) $(wildcard tools/*.h) include/dmutex.h $(B)/libdmcore.a
	$(call dm_cli_link,)
