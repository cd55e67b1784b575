#!/bin/sh
# deb.sh: `make deb`. Builds the binary packages of debian/ with
# dpkg-buildpackage, then checks them with lintian.
#
#   tools/deb.sh          (from the top of the tree; make deb runs it)
#
# dpkg-buildpackage writes its packages beside the source tree and its
# build inside it, so it runs on a copy, build/deb/dmutex-VERSION/: the
# files of the tree as they are now (git's tracked and untracked ones, not
# ignored ones such as build/; without git, all but build/). The results
# stay in build/deb/: the .deb files, the .changes and .buildinfo,
# build.log (the whole build) and lintian.txt. Exit status: 0 when the
# packages were built and lintian reports no error (warnings are printed);
# 1 otherwise, saying why; 2 when a tool is missing (tools/deps.sh deb
# installs them).
set -e
cd "$(dirname "$0")/.."
D=build/deb

for t in dpkg-buildpackage dh fakeroot lintian; do
    if ! command -v "$t" >/dev/null 2>&1; then
        echo "make deb: $t is missing: install dpkg-dev, debhelper, fakeroot and lintian (tools/deps.sh deb)" >&2
        exit 2
    fi
done
part() { sed -n "s/^#define DMUTEX_VERSION_$1 \([0-9][0-9]*\)$/\1/p" include/dmutex.h; }
V="$(part MAJOR).$(part MINOR).$(part PATCH)"
CV=$(dpkg-parsechangelog -l debian/changelog -S Version)
if [ "$CV" != "$V" ]; then
    echo "make deb: debian/changelog's version is $CV, include/dmutex.h's $V: add a debian/changelog entry for $V (dch -v $V)" >&2
    exit 1
fi

rm -rf "$D"
mkdir -p "$D/dmutex-$V"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # (a file deleted but not yet committed is listed and skipped)
    git ls-files -z --cached --others --exclude-standard |
        tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$D/dmutex-$V" -xf -
else
    tar --exclude=./build --exclude=./.git -cf - . | tar -C "$D/dmutex-$V" -xf -
fi

echo "make deb: building in $D/dmutex-$V (log: $D/build.log)"
if ! (cd "$D/dmutex-$V" && dpkg-buildpackage -us -uc -b -j"${DEB_JOBS:-2}") >"$D/build.log" 2>&1; then
    tail -n 30 "$D/build.log" >&2
    echo "make deb: dpkg-buildpackage failed (the whole log: $D/build.log)" >&2
    exit 1
fi
rm -rf "$D/dmutex-$V"
changes=$(ls "$D"/dmutex_"$V"_*.changes)
lintian --info "$changes" >"$D/lintian.txt" 2>&1 || true
ls "$D"/*.deb
if grep -q '^E: ' "$D/lintian.txt"; then
    cat "$D/lintian.txt" >&2
    echo "make deb: lintian reports errors (above; also in $D/lintian.txt)" >&2
    exit 1
fi
if [ -s "$D/lintian.txt" ]; then
    echo "make deb: lintian, no errors ($D/lintian.txt):"
    cat "$D/lintian.txt"
fi
