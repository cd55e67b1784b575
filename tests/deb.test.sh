#!/bin/sh
# deb.test.sh: `make deb` builds libdmutex0, dmutex and libdmutex-dev with
# dpkg-buildpackage into build/deb/, leaving the tree as it was, and
# lintian reports no error; the packages install with dpkg -i (into this
# machine's root: the test needs root, and removes them), a program run by
# the installed dmutex has the installed shim preloaded and holds a lock
# that the installed `dmutex ls` shows, against a redis-server of the
# test's own (free port); a program built with the installed header and
# pkg-config file links; dpkg --purge then leaves no file of theirs on
# disk (each one dpkg -L listed). Prints one closing line "N passed, N
# failed".
#
# Why the real root and not dpkg --root: the shim is preloaded by the
# loader, which finds its dependencies (hiredis, libconfig, libelf) in the
# running system; a fresh root would need a whole system in it (or a
# chroot) to run anything. The packages are refused if already installed,
# and purged at the end, even when a check fails.
#
#   sh tests/deb.test.sh
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
PKGS="libdmutex-dev dmutex libdmutex0"
if ! command -v dpkg-buildpackage >/dev/null 2>&1 || ! command -v dh >/dev/null 2>&1; then
    echo "deb: skipped: dpkg-buildpackage or debhelper is missing (tools/deps.sh installs them)"
    echo "0 passed, 0 failed, 1 skipped"
    exit 0
fi
[ "$(id -u)" = 0 ] || fail_setup "deb: dpkg -i needs root"
for p in $PKGS; do
    if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "installed"; then
        fail_setup "deb: $p is installed already: this test installs and removes it (dpkg --purge $PKGS first)"
    fi
done
T=$(mktemp -d /tmp/deb.test.XXXXXX) || exit 1
. tools/redis-tmp.sh
holder=""
installed=0
cleanup() {
    exec 3>&-
    [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
    [ "$installed" = 1 ] && dpkg --purge $PKGS >/dev/null 2>&1
    redis_tmp_stop
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 141' PIPE

# ---- make deb ---------------------------------------------------------------
git status --porcelain --ignored >"$T/before" 2>/dev/null
if nice -n 10 make -s deb >"$T/deb.log" 2>&1; then ok "make deb: built, lintian reports no error"
else fail_setup "make deb failed: $(tail -n 30 "$T/deb.log")"; fi
git status --porcelain --ignored >"$T/after" 2>/dev/null
if cmp -s "$T/before" "$T/after"; then ok "make deb: the tree is as it was (outputs under build/ only)"
else bad "make deb: the tree is as it was (outputs under build/ only)" \
    "$(diff "$T/before" "$T/after")"; fi
part() { sed -n "s/^#define DMUTEX_VERSION_$1 \([0-9][0-9]*\)$/\1/p" include/dmutex.h; }
V="$(part MAJOR).$(part MINOR).$(part PATCH)"
ARCH=$(dpkg --print-architecture)
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
debs=""
for p in libdmutex0 dmutex libdmutex-dev; do
    f=build/deb/${p}_${V}_$ARCH.deb
    if [ -f "$f" ]; then debs="$debs $f"; else bad "make deb: $f" "$(ls build/deb)"; fi
done
[ -f "build/deb/dmutex_${V}_$ARCH.changes" ] && ok "make deb: the .changes is in build/deb" ||
    bad "make deb: the .changes is in build/deb" "$(ls build/deb)"
if grep -q '^E: ' build/deb/lintian.txt; then bad "lintian: no error" "$(cat build/deb/lintian.txt)"
else ok "lintian: no error"; fi
# What dpkg-shlibdeps found: the libraries the shim and dmutex link.
dep=$(dpkg-deb -f "build/deb/libdmutex0_${V}_$ARCH.deb" Depends)
case "$dep" in *libc6*libhiredis*) ok "libdmutex0 depends on what it links ($dep)" ;;
    *) bad "libdmutex0 depends on what it links" "$dep" ;; esac
dep=$(dpkg-deb -f "build/deb/dmutex_${V}_$ARCH.deb" Depends)
case "$dep" in "libdmutex0 (= $V), "*libdw*) ok "dmutex depends on the shim of its version and what it links" ;;
    *) bad "dmutex depends on the shim of its version and what it links" "$dep" ;; esac

# ---- installed ----------------------------------------------------------------
if dpkg -i $debs >"$T/dpkg.log" 2>&1; then ok "dpkg -i: the three packages install"; installed=1
else installed=1; fail_setup "dpkg -i failed: $(cat "$T/dpkg.log")"; fi
for p in $PKGS; do dpkg -L "$p"; done | sort -u >"$T/files"
SHIM=/usr/lib/$MA/libdmutex.so.0
for f in /usr/bin/dmutex "$SHIM" "/usr/lib/$MA/dmutex/libdmutex-trace.so" /usr/include/dmutex.h \
         "/usr/lib/$MA/pkgconfig/dmutex.pc" /usr/share/man/man1/dmutex.1.gz; do
    if grep -qxF "$f" "$T/files" && [ -e "$f" ]; then ok "installed: $f"
    else bad "installed: $f" "$(cat "$T/files")"; fi
done

redis_tmp_start || fail_setup "no redis-server"
redis_tmp_fresh debtest
URL=redis://127.0.0.1:$REDIS_TMP_PORT
printf 'namespace = "debtest";\nmutexes = ();\n' >"$T/app.cfg"
# A user's program, built against the installed header and pkg-config file.
if cc -std=gnu11 -Wall -Wextra -Werror -pthread $(pkg-config --cflags dmutex) \
      tests/install/apiprog.c -o "$T/apiprog" $(pkg-config --libs dmutex) >"$T/cc.log" 2>&1; then
    ok "libdmutex-dev: a program builds with pkg-config --cflags --libs dmutex"
else fail_setup "cannot build apiprog with the installed dmutex.h: $(cat "$T/cc.log")"; fi
pre=$(pkg-config --variable=preload dmutex)
if [ "$pre" = "$SHIM" ]; then ok "pkg-config --variable=preload dmutex: $SHIM"
else bad "pkg-config --variable=preload dmutex: $SHIM" "got $pre"; fi
got=$(env -u DMUTEX_LIB /usr/bin/dmutex run -c "$T/app.cfg" -r "$URL" -- "$T/apiprog" --preload 2>&1)
if [ "$(realpath -ms "$got")" = "$SHIM" ]; then ok "installed dmutex run preloads the installed shim ($SHIM)"
else bad "installed dmutex run preloads the installed shim ($SHIM)" "$got"; fi

got=$(env -u DMUTEX_TRACE_LIB /usr/bin/dmutex trace -- "$T/apiprog" 2>&1 >/dev/null)
if echo "$got" | grep -q "^dmutex trace: pid [0-9]* (apiprog), exit report"; then
    ok "installed dmutex trace preloads the installed trace library"
else bad "installed dmutex trace preloads the installed trace library" "$got"; fi

mkfifo "$T/in"
env -u DMUTEX_LIB /usr/bin/dmutex run -c "$T/app.cfg" -r "$URL" -- "$T/apiprog" deb.held deb.free \
    <"$T/in" >"$T/out" 2>"$T/err" &
holder=$!
exec 3>"$T/in"
n=0
while ! grep -q '^held ' "$T/out" && [ "$n" -lt 200 ]; do sleep 0.1; n=$((n + 1)); done
if grep -q '^held [0-9]' "$T/out"; then ok "a program under the installed shim holds a lock"
else bad "a program under the installed shim holds a lock" "$(cat "$T/out" "$T/err")"; fi
if grep -qF "$(readlink -f "$SHIM")" "/proc/$holder/maps" 2>/dev/null; then
    ok "the holder has the installed library mapped"
else bad "the holder has the installed library mapped" "$(grep dmutex "/proc/$holder/maps" 2>&1)"; fi
/usr/bin/dmutex ls -r "$URL" -n debtest >"$T/ls" 2>&1
if grep -qE '^deb\.held +held ' "$T/ls" && grep -qE '^deb\.free +free ' "$T/ls"; then
    ok "installed dmutex ls: the held lock held, the released one free"
else bad "installed dmutex ls: the held lock held, the released one free" "$(cat "$T/ls")"; fi
exec 3>&-
wait "$holder"
holder=""
if grep -qx done "$T/out"; then ok "the program released and ended"
else bad "the program released and ended" "$(cat "$T/out" "$T/err")"; fi
man -l /usr/share/man/man1/dmutex.1.gz >/dev/null 2>"$T/man.err" && [ ! -s "$T/man.err" ] &&
    ok "man dmutex renders" || bad "man dmutex renders" "$(cat "$T/man.err")"

# ---- removed -----------------------------------------------------------------
if dpkg --purge $PKGS >"$T/purge.log" 2>&1; then ok "dpkg --purge: the three packages go"; installed=0
else bad "dpkg --purge: the three packages go" "$(cat "$T/purge.log")"; fi
left=""
while read -r f; do
    [ -d "$f" ] && [ ! -L "$f" ] && continue    # shared directories (/usr/lib/...) stay
    [ -e "$f" ] || [ -L "$f" ] && left="$left $f"
done <"$T/files"
for d in "/usr/lib/$MA/dmutex" /usr/share/doc/dmutex /usr/share/doc/libdmutex0 \
         /usr/share/doc/libdmutex-dev; do
    [ -e "$d" ] && left="$left $d"
done
if [ -z "$left" ]; then ok "removed: no file of the packages is left ($(wc -l <"$T/files") paths checked)"
else bad "removed: no file of the packages is left" "$left"; fi
if dpkg-query -W $PKGS >/dev/null 2>&1; then bad "dpkg knows none of them any more" "$(dpkg-query -W $PKGS 2>&1)"
else ok "dpkg knows none of them any more"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
