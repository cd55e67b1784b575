# make deb: the Debian packages libdmutex0, dmutex and libdmutex-dev
# (debian/), built with dpkg-buildpackage from a copy of the tree, into
# build/deb/ (tools/deb.sh says how); the tree itself stays as it was.
.PHONY: deb
deb:
	@tools/deb.sh
