# make install / make uninstall: the library as a system library would be.
#
#   make install [PREFIX=/usr/local] [DESTDIR=/stage] [LIBDIR=... BINDIR=... PKGLIBDIR=...]
#   make uninstall (the same variables): removes exactly INSTALL_FILES
#
# The library is installed as libdmutex.so.X.Y.Z with its soname link
# (libdmutex.so.X, the one to preload) and the dev link libdmutex.so;
# build/libdmutex.so keeps its plain name for the tests and the demo.
# `dmutex trace`'s recording library goes to PKGLIBDIR as libdmutex-trace.so
# (preloaded by path from dmutex, never linked: no soname, no version):
# beside the shim by default; the Debian packages give it a directory of
# its own (LIBDIR/dmutex: a file without a soname stays out of the
# linker's path).
# The installed dmutex is build/install/dmutex: build/dmutex with the paths
# from BINDIR to LIBDIR and PKGLIBDIR compiled in, where `dmutex run` finds
# the shim and `dmutex trace` its library (relative, so a staged or moved
# tree works too).
# The man pages are made by tools/mkman.sh from the usage texts of
# build/dmutex, config/REFERENCE.md and the key table of the code;
# tests/install.test.sh stages an install and checks every file.

PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
LIBDIR      ?= $(PREFIX)/lib
PKGLIBDIR   ?= $(LIBDIR)
INCLUDEDIR  ?= $(PREFIX)/include
DATAROOTDIR ?= $(PREFIX)/share
MANDIR      ?= $(DATAROOTDIR)/man
DOCDIR      ?= $(DATAROOTDIR)/doc/dmutex
BASHCOMPDIR ?= $(DATAROOTDIR)/bash-completion/completions
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

INST_B     := $(B)/install
INST_MAN   := $(INST_B)/dmutex.1 $(INST_B)/dmutex.conf.5 $(INST_B)/libdmutex.3
INST_GEN   := $(INST_MAN) $(INST_B)/dmutex.pc $(INST_B)/dmutex-preload.conf $(INST_B)/dmutex
INST_DOCS  := README.md docs/semantics.md docs/failures.md
INST_EXAMPLES := config/example.cfg config/demo.cfg
DM_LIBFILE := libdmutex.so.$(DM_VERSION)

# Every path install writes (without DESTDIR), files and links: what
# uninstall removes.
INSTALL_FILES := $(BINDIR)/dmutex \
    $(LIBDIR)/$(DM_LIBFILE) $(LIBDIR)/$(DM_SONAME) $(LIBDIR)/libdmutex.so \
    $(PKGLIBDIR)/libdmutex-trace.so \
    $(INCLUDEDIR)/dmutex.h $(PKGCONFIGDIR)/dmutex.pc \
    $(MANDIR)/man1/dmutex.1 $(MANDIR)/man5/dmutex.conf.5 $(MANDIR)/man3/libdmutex.3 \
    $(addprefix $(DOCDIR)/,$(notdir $(INST_DOCS))) \
    $(addprefix $(DOCDIR)/examples/,$(notdir $(INST_EXAMPLES)) dmutex-preload.conf) \
    $(BASHCOMPDIR)/dmutex
# The directories that are dmutex's own: uninstall removes them when empty.
INSTALL_OWN_DIRS := $(DOCDIR)/examples $(DOCDIR) $(filter-out $(LIBDIR),$(PKGLIBDIR))

.PHONY: install uninstall install-files FORCE

# The generated files name the install paths: remade when one changes.
INST_VARS = VERSION=$(DM_VERSION) PREFIX=$(PREFIX) BINDIR=$(BINDIR) LIBDIR=$(LIBDIR) \
    PKGLIBDIR=$(PKGLIBDIR) \
    INCLUDEDIR=$(INCLUDEDIR) DOCDIR=$(DOCDIR) SONAME=$(DM_SONAME)
DM_LIB_REL = $(shell realpath -m --relative-to=$(BINDIR) $(LIBDIR))
DM_TRACE_REL = $(shell realpath -m --relative-to=$(BINDIR) $(PKGLIBDIR))
$(INST_B)/vars: FORCE
	@mkdir -p $(INST_B)
	@echo '$(INST_VARS)' | cmp -s - $@ || echo '$(INST_VARS)' > $@
FORCE:

$(INST_B)/dmutex: $(B)/dmutex $(INST_B)/vars
	$(call dm_cli_link,-DDM_LIBDIR_FROM_BINDIR='"$(DM_LIB_REL)"' \
	    -DDM_TRACEDIR_FROM_BINDIR='"$(DM_TRACE_REL)"')

$(INST_B)/dmutex.1 $(INST_B)/dmutex.conf.5 $(INST_B)/libdmutex.3: $(INST_B)/%: man/%.in \
		$(INST_B)/dmutex config/REFERENCE.md tools/mkman.sh tools/md2man.awk tools/usage2man.awk \
		$(INST_B)/vars
	tools/mkman.sh $< $(INST_B)/dmutex config/REFERENCE.md $(INST_VARS) > $@.tmp && mv $@.tmp $@

$(INST_B)/dmutex-preload.conf: config/dmutex-preload.conf.in $(INST_B)/vars
	sed 's|@LIBDIR@|$(LIBDIR)|g; s|@SONAME@|$(DM_SONAME)|g' $< > $@

$(INST_B)/dmutex.pc: $(INST_B)/vars
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' \
	    '# the file to preload: LD_PRELOAD=$$(pkg-config --variable=preload dmutex)' \
	    'preload=$${libdir}/$(DM_SONAME)' '' \
	    'Name: dmutex' \
	    'Description: cluster-wide pthread mutexes through Redis, by LD_PRELOAD; dmutex.h declares its API weak, so nothing is linked' \
	    'Version: $(DM_VERSION)' \
	    'Cflags: -I$${includedir}' \
	    'Libs:' > $@

install-files: all $(INST_GEN)

install: install-files
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGLIBDIR) $(DESTDIR)$(INCLUDEDIR) \
	    $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 \
	    $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(BASHCOMPDIR)
	install -m 755 $(INST_B)/dmutex $(DESTDIR)$(BINDIR)/dmutex
	install -m 644 $(B)/libdmutex.so $(DESTDIR)$(LIBDIR)/$(DM_LIBFILE)
	ln -sf $(DM_LIBFILE) $(DESTDIR)$(LIBDIR)/$(DM_SONAME)
	ln -sf $(DM_SONAME) $(DESTDIR)$(LIBDIR)/libdmutex.so
	install -m 644 $(B)/libdmutex-trace.so $(DESTDIR)$(PKGLIBDIR)/libdmutex-trace.so
	install -m 644 include/dmutex.h $(DESTDIR)$(INCLUDEDIR)/dmutex.h
	install -m 644 $(INST_B)/dmutex.pc $(DESTDIR)$(PKGCONFIGDIR)/dmutex.pc
	install -m 644 $(INST_B)/dmutex.1 $(DESTDIR)$(MANDIR)/man1/dmutex.1
	install -m 644 $(INST_B)/libdmutex.3 $(DESTDIR)$(MANDIR)/man3/libdmutex.3
	install -m 644 $(INST_B)/dmutex.conf.5 $(DESTDIR)$(MANDIR)/man5/dmutex.conf.5
	install -m 644 $(INST_DOCS) $(DESTDIR)$(DOCDIR)/
	install -m 644 $(INST_EXAMPLES) $(INST_B)/dmutex-preload.conf $(DESTDIR)$(DOCDIR)/examples/
	install -m 644 tools/dmutex.bash $(DESTDIR)$(BASHCOMPDIR)/dmutex

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALL_FILES))
	for d in $(addprefix $(DESTDIR),$(INSTALL_OWN_DIRS)); do \
	    if [ -d "$$d" ] && [ -z "$$(ls -A "$$d")" ]; then rmdir "$$d"; fi; done
