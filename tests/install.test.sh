#!/bin/sh
# install.test.sh: `make install DESTDIR=... PREFIX=/usr` stages every file
# with its mode and links; the library carries its soname; each man page
# renders without a warning and covers what it must (every command and
# option of the usage texts, every config key `dmutex config-keys` prints,
# the API and every variable the shim reads); pkg-config at the staged tree
# gives flags a user's program compiles and links with; the installed
# dmutex and library report the version of include/dmutex.h; `make
# uninstall` removes exactly what install wrote. Prints one closing line
# "N passed, N failed".
#
#   sh tests/install.test.sh
cd "$(dirname "$0")/.." || exit 1
T=$(mktemp -d /tmp/install.test.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
. tests/lib.sh

check() {   # name, command...: ok when the command succeeds
    name=$1; shift
    if "$@" >"$T/check.out" 2>&1; then ok "$name"; else bad "$name" "$(cat "$T/check.out")"; fi
}

for tool in man groff readelf pkg-config cc; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "install.test.sh: $tool is needed (tools/deps.sh installs it)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

part() { sed -n "s/^#define DMUTEX_VERSION_$1 \([0-9][0-9]*\)$/\1/p" include/dmutex.h; }
MAJOR=$(part MAJOR) V="$(part MAJOR).$(part MINOR).$(part PATCH)"
S=$T/stage
U=$S/usr
# The generated files (tools/install.mk's INST_B) of each PREFIX go here,
# not to build/install/: they name the paths, and tests/usage.test.sh
# reads build/install's (the defaults') while this group runs beside it.
IB=$T/generated
# Files of others, there before: uninstall must leave them.
mkdir -p "$U/bin" "$U/lib" "$U/share/doc/other"
echo other >"$U/bin/other"
echo other >"$U/lib/libother.so.1"
echo other >"$U/share/doc/other/README"

if ! make -s install INST_B="$IB" DESTDIR="$S" PREFIX=/usr >"$T/make.log" 2>&1; then
    cat "$T/make.log"
    echo "0 passed, 1 failed"
    exit 1
fi

# ---- the files, their modes and links ------------------------------------
# mode-or-link path, for every file install writes.
cat >"$T/expected" <<LIST
-rwxr-xr-x usr/bin/dmutex
-rw-r--r-- usr/lib/libdmutex.so.$V
-> libdmutex.so.$V usr/lib/libdmutex.so.$MAJOR
-> libdmutex.so.$MAJOR usr/lib/libdmutex.so
-rw-r--r-- usr/lib/libdmutex-trace.so
-rw-r--r-- usr/include/dmutex.h
-rw-r--r-- usr/lib/pkgconfig/dmutex.pc
-rw-r--r-- usr/share/man/man1/dmutex.1
-rw-r--r-- usr/share/man/man3/libdmutex.3
-rw-r--r-- usr/share/man/man5/dmutex.conf.5
-rw-r--r-- usr/share/doc/dmutex/README.md
-rw-r--r-- usr/share/doc/dmutex/semantics.md
-rw-r--r-- usr/share/doc/dmutex/failures.md
-rw-r--r-- usr/share/doc/dmutex/examples/example.cfg
-rw-r--r-- usr/share/doc/dmutex/examples/demo.cfg
-rw-r--r-- usr/share/doc/dmutex/examples/dmutex-preload.conf
-rw-r--r-- usr/share/bash-completion/completions/dmutex
LIST
while read -r mode a b; do
    if [ "$mode" = "->" ]; then
        f=$b
        if [ -L "$S/$f" ] && [ "$(readlink "$S/$f")" = "$a" ]; then ok "$f links to $a"
        else bad "$f links to $a" "$(ls -l "$S/$f" 2>&1)"; fi
    else
        f=$a
        got=$(stat -c %A "$S/$f" 2>&1)
        if [ -f "$S/$f" ] && [ ! -L "$S/$f" ] && [ "$got" = "$mode" ]; then ok "$f is $mode"
        else bad "$f is $mode" "$got"; fi
    fi
    echo "$f" >>"$T/expected.paths"
done <"$T/expected"
(cd "$S" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort) >"$T/found"
printf '%s\n' usr/bin/other usr/lib/libother.so.1 usr/share/doc/other/README >>"$T/expected.paths"
sort "$T/expected.paths" >"$T/expected.sorted"
if diff "$T/expected.sorted" "$T/found" >"$T/diff"; then ok "install writes nothing else"
else bad "install writes nothing else" "$(cat "$T/diff")"; fi

soname=$(readelf -d "$U/lib/libdmutex.so.$V" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
if [ "$soname" = "libdmutex.so.$MAJOR" ]; then ok "the library's soname is libdmutex.so.$MAJOR"
else bad "the library's soname is libdmutex.so.$MAJOR" "readelf -d: '$soname'"; fi

if grep -qxF "Environment=LD_PRELOAD=/usr/lib/libdmutex.so.$MAJOR" \
        "$U/share/doc/dmutex/examples/dmutex-preload.conf" &&
   grep -qxF "[Service]" "$U/share/doc/dmutex/examples/dmutex-preload.conf"; then
    ok "the systemd drop-in preloads the installed soname"
else
    bad "the systemd drop-in preloads the installed soname" \
        "$(cat "$U/share/doc/dmutex/examples/dmutex-preload.conf")"
fi

# ---- man pages -------------------------------------------------------------
for p in man1/dmutex.1 man5/dmutex.conf.5 man3/libdmutex.3; do
    f=$U/share/man/$p
    MANWIDTH=80 man -l --warnings "$f" >"$T/rendered" 2>"$T/warn"
    rc=$?
    groff -man -ww -z "$f" >>"$T/warn" 2>&1
    if [ "$rc" -eq 0 ] && [ ! -s "$T/warn" ] && [ "$(wc -l <"$T/rendered")" -gt 20 ]; then
        ok "man -l $p renders without warnings"
    else
        bad "man -l $p renders without warnings" "exit $rc, $(wc -l <"$T/rendered") lines" \
            "$(head -n 10 "$T/warn")"
    fi
    if grep -q '@[A-Z_][A-Z_]*@' "$f"; then bad "$p has no placeholder left" "$(grep -n '@[A-Z_]*@' "$f")"
    else ok "$p has no placeholder left"; fi
done

# dmutex(1): every command `dmutex help` lists has its section, with every
# option of its -h text; --version too.
D1=$U/share/man/man1/dmutex.1
"$U/bin/dmutex" help | awk '/^commands:/ { on = 1; next } on && /^$/ { exit }
    on && /^  [a-z]/ { if ($1 != "help") print $1 }' >"$T/commands"
if [ "$(wc -l <"$T/commands")" -ge 3 ]; then ok "dmutex help lists the commands"
else bad "dmutex help lists the commands" "$(cat "$T/commands")"; fi
while read -r cmd; do
    missing=""
    grep -qxF ".SS $cmd" "$D1" || missing="$missing section"
    "$U/bin/dmutex" "$cmd" -h | grep -oE '^ +(-[A-Za-z], )?--?[A-Za-z][A-Za-z-]*' |
        sed 's/^ *//' >"$T/opts"
    [ -s "$T/opts" ] || missing="$missing (no options found in its -h)"
    while read -r o; do
        grep -qF "$(printf '%s' "$o" | sed 's/-/\\-/g')" "$D1" || missing="$missing $o"
    done <"$T/opts"
    if [ -z "$missing" ]; then ok "dmutex(1) has dmutex $cmd and its $(wc -l <"$T/opts") options"
    else bad "dmutex(1) has dmutex $cmd and its options" "missing:$missing"; fi
done <"$T/commands"
if grep -qF '\fBdmutex \-\-version\fR' "$D1"; then ok "dmutex(1) has dmutex --version"
else bad "dmutex(1) has dmutex --version"; fi

# dmutex.conf(5): every key of the code's table, as an entry; made from the
# table, not from REFERENCE.md (a reference with its tables emptied gives
# the same keys).
D5=$U/share/man/man5/dmutex.conf.5
keys_missing() {   # page: the keys of `dmutex config-keys` it has no entry for
    for g in top redis mutex; do
        "$U/bin/dmutex" config-keys "$g" | sed -n 's/^| `\([^`]*\)` |.*/\1/p'
    done | while read -r k; do
        # the tag line of a .TP entry: \fBKEY\fR (\% keeps it whole)
        awk -v k="\\\\fB$k\\\\fR" '{ t = $0; gsub(/\\%/, "", t) }
            prev == ".TP" && t == k { f = 1 } { prev = $0 } END { exit !f }' "$1" ||
            printf ' %s' "$k"
    done
}
n=$(for g in top redis mutex; do "$U/bin/dmutex" config-keys "$g"; done | grep -c '^| `')
m=$(keys_missing "$D5")
if [ "$n" -ge 20 ] && [ -z "$m" ]; then ok "dmutex.conf(5) has an entry for each of the $n keys"
else bad "dmutex.conf(5) has an entry for each of the $n keys" "missing:$m"; fi
awk '/^<!-- config-keys /{ print; skip = 1; next } /^<!-- end config-keys -->/{ skip = 0 }
    !skip' config/REFERENCE.md >"$T/ref-without-tables.md"
tools/mkman.sh man/dmutex.conf.5.in build/dmutex "$T/ref-without-tables.md" VERSION=$V \
    DOCDIR=/usr/share/doc/dmutex LIBDIR=/usr/lib SONAME=libdmutex.so.$MAJOR >"$T/from-code.5" 2>&1
m=$(keys_missing "$T/from-code.5")
if [ -z "$m" ] && ! grep -q '^| ' "$T/from-code.5"; then
    ok "dmutex.conf(5) takes its key tables from the code"
else
    bad "dmutex.conf(5) takes its key tables from the code" "missing:$m"
fi
MANWIDTH=80 man -l "$D5" 2>/dev/null | grep -nE '(^|[ (])(config|docs)/[a-z]' >"$T/repo-paths"
if [ ! -s "$T/repo-paths" ]; then ok "dmutex.conf(5) names installed paths, not the repository's"
else bad "dmutex.conf(5) names installed paths, not the repository's" "$(cat "$T/repo-paths")"; fi

# libdmutex(3): the API of dmutex.h, every variable the shim reads, 78.
D3=$U/share/man/man3/libdmutex.3
missing=""
for w in dmutex_name dmutex_token dmutex_rwlock_token DMUTEX_VERSION LD_PRELOAD 78 password_env \
        $( (grep -ohE '(secure_)?getenv\("[A-Za-z_]+"\)' shim/*.c shim/redis/*.c shim/etcd/*.c | sed 's/.*("\(.*\)")/\1/';
            grep -ohE '"DMUTEX_[A-Z_]+"' shim/*.c shim/redis/*.c shim/etcd/*.c | tr -d '"') | sort -u); do
    grep -qF "$w" "$D3" || missing="$missing $w"
done
if [ -z "$missing" ]; then ok "libdmutex(3) has the API, exit status 78 and every variable the shim reads"
else bad "libdmutex(3) has the API, exit status 78 and every variable the shim reads" "missing:$missing"; fi

# ---- bash completion: commands and options from the installed command ------
if command -v bash >/dev/null 2>&1; then
    comp() {   # words...: what completing the last word offers
        bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _dmutex
            echo "${COMPREPLY[*]}"' - "$U/share/bash-completion/completions/dmutex" "$@"
    }
    c1=$(comp "$U/bin/dmutex" "") c2=$(comp "$U/bin/dmutex" ls --j) c3=$(comp "$U/bin/dmutex" run -l d)
    missing=""
    for w in $(cat "$T/commands") help --version; do
        case " $c1 " in *" $w "*) ;; *) missing="$missing $w" ;; esac
    done
    if [ -z "$missing" ] && [ "$c2" = "--json" ] && [ "$c3" = "debug" ]; then
        ok "bash completion offers the commands and each one's options"
    else
        bad "bash completion offers the commands and each one's options" "'$c1'" "'$c2'" "'$c3'"
    fi
fi

# ---- pkg-config and a user's program ---------------------------------------
export PKG_CONFIG_SYSROOT_DIR="$S" PKG_CONFIG_LIBDIR="$U/lib/pkgconfig"
flags=$(pkg-config --cflags --libs dmutex 2>&1)
if [ $? -eq 0 ] && [ "$(pkg-config --modversion dmutex)" = "$V" ] &&
   printf '%s\n' "$flags" | grep -qF -- "-I$U/include"; then
    ok "pkg-config --cflags --libs dmutex at the staged tree"
else
    bad "pkg-config --cflags --libs dmutex at the staged tree" "$flags"
fi
preload=$(pkg-config --variable=preload dmutex)
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR
if [ "$preload" = "$U/lib/libdmutex.so.$MAJOR" ] && [ -e "$preload" ]; then
    ok "pkg-config --variable=preload dmutex is the installed soname"
else
    bad "pkg-config --variable=preload dmutex is the installed soname" "'$preload'"
fi
# shellcheck disable=SC2086  # flags are words
if cc -std=gnu11 -Wall -Wextra -Werror -pthread tests/install/apiprog.c -o "$T/apiprog" $flags \
        >"$T/cc.log" 2>&1 &&
   [ "$("$T/apiprog")" = "version $V absent" ]; then
    ok "a program of dmutex.h compiles and links with those flags, and runs without the shim"
else
    bad "a program of dmutex.h compiles and links with those flags, and runs without the shim" \
        "$(cat "$T/cc.log")"
fi

printf 'mutexes = ();\n' >"$T/app.cfg"
out=$(LD_PRELOAD=$U/lib/libdmutex.so.$MAJOR DMUTEX_CONFIG=$T/app.cfg DMUTEX_LOG=info \
      "$T/apiprog" 2>"$T/err")
if [ "$out" = "version $V present" ] && grep -qF "libdmutex $V: " "$T/err" &&
   [ "$(grep -c "libdmutex $V" "$T/err")" -eq 1 ]; then
    ok "preloaded, the installed library gives the API and logs its version once at info"
else
    bad "preloaded, the installed library gives the API and logs its version once at info" \
        "stdout: $out" "stderr: $(cat "$T/err")"
fi
if [ "$("$U/bin/dmutex" --version)" = "dmutex $V" ]; then ok "dmutex --version prints $V"
else bad "dmutex --version prints $V" "$("$U/bin/dmutex" --version 2>&1)"; fi
out=$(env -u DMUTEX_LIB "$U/bin/dmutex" run -c "$T/app.cfg" -- "$T/apiprog" 2>&1)
if [ "$out" = "version $V present" ]; then ok "installed dmutex run preloads the installed library"
else bad "installed dmutex run preloads the installed library" "$out"; fi
out=$(env -u DMUTEX_LIB -u LD_PRELOAD "$U/bin/dmutex" run -c "$T/app.cfg" -- "$T/apiprog" --preload 2>&1)
if [ "$out" = "$U/bin/../lib/libdmutex.so.$MAJOR" ]; then
    ok "dmutex run preloads the soname link (an upgrade's children find the new file)"
else
    bad "dmutex run preloads the soname link (an upgrade's children find the new file)" "$out"
fi
out=$(env -u DMUTEX_TRACE_LIB "$U/bin/dmutex" trace -- "$T/apiprog" 2>&1 >/dev/null)
if echo "$out" | grep -q "^dmutex trace: pid [0-9]* (apiprog), exit report"; then
    ok "installed dmutex trace preloads the installed trace library"
else
    bad "installed dmutex trace preloads the installed trace library" "$out"
fi

# ---- uninstall --------------------------------------------------------------
make -s uninstall DESTDIR="$S" PREFIX=/usr >"$T/make.log" 2>&1 ||
    bad "make uninstall succeeds" "$(cat "$T/make.log")"
(cd "$S" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort) >"$T/left"
printf '%s\n' usr/bin/other usr/lib/libother.so.1 usr/share/doc/other/README | sort >"$T/others"
if diff "$T/others" "$T/left" >"$T/diff"; then ok "uninstall removes every dmutex file and nothing else"
else bad "uninstall removes every dmutex file and nothing else" "$(cat "$T/diff")"; fi
if [ ! -e "$U/share/doc/dmutex" ]; then ok "uninstall removes dmutex's own doc directory"
else bad "uninstall removes dmutex's own doc directory" "$(ls -R "$U/share/doc/dmutex")"; fi

# The default prefix is /usr/local.
make -s install INST_B="$IB" DESTDIR="$T/local" >"$T/make.log" 2>&1
if [ -x "$T/local/usr/local/bin/dmutex" ] && [ -L "$T/local/usr/local/lib/libdmutex.so.$MAJOR" ] &&
   make -s uninstall DESTDIR="$T/local" >>"$T/make.log" 2>&1 &&
   [ -z "$(find "$T/local" \( -type f -o -type l \))" ]; then
    ok "PREFIX defaults to /usr/local"
else
    bad "PREFIX defaults to /usr/local" "$(cat "$T/make.log")" "$(find "$T/local")"
fi

# A LIBDIR of its own (Debian's multiarch one): the installed dmutex run
# still finds the shim there.
make -s install INST_B="$IB" DESTDIR="$T/multi" PREFIX=/usr LIBDIR=/usr/lib/x86_64-linux-gnu >"$T/make.log" 2>&1
out=$(env -u DMUTEX_LIB "$T/multi/usr/bin/dmutex" run -c "$T/app.cfg" -- "$T/apiprog" 2>&1)
if [ "$out" = "version $V present" ] &&
   [ -L "$T/multi/usr/lib/x86_64-linux-gnu/libdmutex.so.$MAJOR" ] &&
   grep -qxF 'libdir=/usr/lib/x86_64-linux-gnu' "$T/multi/usr/lib/x86_64-linux-gnu/pkgconfig/dmutex.pc" &&
   make -s uninstall DESTDIR="$T/multi" PREFIX=/usr LIBDIR=/usr/lib/x86_64-linux-gnu >>"$T/make.log" 2>&1 &&
   [ -z "$(find "$T/multi" \( -type f -o -type l \))" ]; then
    ok "with LIBDIR=/usr/lib/x86_64-linux-gnu dmutex run finds the shim there"
else
    bad "with LIBDIR=/usr/lib/x86_64-linux-gnu dmutex run finds the shim there" "$out" \
        "$(cat "$T/make.log")" "$(find "$T/multi")"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
