#!/bin/sh
# usage.test.sh: the dmutex command's flags and server URLs say one thing
# everywhere (issue 30):
#   flags   across every command `dmutex help` lists, a short option has
#           one long name (one meaning): -n is the namespace in ls, top,
#           unlock, fresh and acl (top's iteration count is -N), -d is
#           top's delay (fresh's declaration is spelled --durable); top -n
#           takes a namespace, and a bare number there is refused with the
#           fix (-N), not read as one or the other silently
#   URLs    `dmutex help`, every command's -h that takes -r, and the man
#           pages list every scheme the URL parser takes (DM_URL_LIST in
#           shim/config.h: the one list), and every such command takes
#           each one (redis-cluster:// included); a bad scheme's message
#           lists them all
# Prints one closing line "N passed, N failed".
#
#   sh tests/usage.test.sh            (DMUTEX=path overrides build/dmutex)
cd "$(dirname "$0")/.." || exit 1
DMUTEX=${DMUTEX:-build/dmutex}
T=$(mktemp -d /tmp/usage.test.XXXXXX) || exit 1
. tests/lib.sh
. tools/redis-tmp.sh
cleanup() {
    redis_tmp_stop
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 141' PIPE

MAN="build/install/dmutex.1 build/install/libdmutex.3"
make -s "$DMUTEX" build/libdmutex.so $MAN >"$T/make.log" 2>&1 || fail_setup "$(cat "$T/make.log")"
redis_tmp_start || fail_setup "no redis-server"
redis_tmp_fresh usagetest
URL=redis://127.0.0.1:$REDIS_TMP_PORT

# Every scheme the parser takes (shim/config_url.c); a new one goes here
# and in DM_URL_LIST, and this test then holds every text to it.
SCHEMES="redis:// rediss:// unix:// redis-sentinel:// rediss-sentinel:// redis-cluster:// etcd:// etcds://"
COMMANDS=$("$DMUTEX" help | awk '/^commands:/ { on = 1; next } on && /^$/ { exit }
    on && /^  [a-z]/ { if ($1 != "help") print $1 }')
[ -n "$COMMANDS" ] || fail_setup "dmutex help lists no commands"

# ---- flags -----------------------------------------------------------------
# Each "-x, --long" of every command's -h: "x long command", one a line.
for c in $COMMANDS; do
    "$DMUTEX" "$c" -h >"$T/$c.h" 2>&1 || bad "$c -h exits 0" "$(cat "$T/$c.h")"
    sed -n "s/^ *-\([a-zA-Z]\), --\([a-z-]*\).*/\1 \2 $c/p" "$T/$c.h"
done >"$T/flags"
[ -s "$T/flags" ] || fail_setup "no -x, --long option found in any -h text"
two=$(awk '{ if (($1 in long) && long[$1] != $2) print "-" $1 ": --" long[$1] " (" cmd[$1] ") and --" $2 " (" $3 ")";
             long[$1] = $2; cmd[$1] = $3 }' "$T/flags")
if [ -z "$two" ]; then ok "flags: each short option means one thing in every command"
else bad "flags: each short option means one thing in every command" "$two"; fi
for c in ls top unlock fresh acl; do
    if grep -q "^n namespace $c$" "$T/flags"; then ok "flags: $c -n is --namespace"
    else bad "flags: $c -n is --namespace" "$(cat "$T/$c.h")"; fi
done
if grep -qx "N iterations top" "$T/flags"; then ok "flags: top -N is --iterations"
else bad "flags: top -N is --iterations" "$(cat "$T/top.h")"; fi
# The man page is made from the same texts: the same options.
for o in "-N, --iterations" "-n, --namespace"; do
    if sed 's/\\-/-/g; s/\\f[BIR]//g' build/install/dmutex.1 | grep -qF -- "$o"; then
        ok "man dmutex: top's $o"
    else bad "man dmutex: top's $o"; fi
done

"$DMUTEX" top -r "$URL" -n usagetest -N 1 >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "namespace usagetest at 127.0.0.1:$REDIS_TMP_PORT" "$T/out" &&
   [ "$(grep -c '^dmutex top - ' "$T/out")" -eq 1 ]; then
    ok "top -n NS -N 1: that namespace, one snapshot"
else bad "top -n NS -N 1: that namespace, one snapshot" "exit $rc" "$(cat "$T/out" "$T/err")"; fi
"$DMUTEX" top -r "$URL" --namespace usagetest --iterations 1 >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "namespace usagetest at" "$T/out"; then
    ok "top --namespace NS --iterations 1: the long spellings still work"
else bad "top --namespace NS --iterations 1: the long spellings still work" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
"$DMUTEX" top -r "$URL" -n 2 >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 2 ] && [ ! -s "$T/out" ] &&
   grep -qF "dmutex top: -n 2: -n is the namespace, as in every command; for 2 refreshes write -N 2" "$T/err" &&
   grep -qF -- "--namespace 2" "$T/err"; then
    ok "top -n NUMBER: refused with the fix (-N), not taken silently for a namespace"
else bad "top -n NUMBER: refused with the fix (-N), not taken silently for a namespace" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
"$DMUTEX" top -r "$URL" --namespace 2 -N 1 >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "namespace 2 at" "$T/out"; then
    ok "top --namespace 2: a namespace that is a number, spelled out"
else bad "top --namespace 2: a namespace that is a number, spelled out" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
"$DMUTEX" fresh -r "$URL" -n usagetest --durable >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -qF "appendonly" "$T/err"; then
    ok "fresh --durable: checked (this server writes no AOF: refused)"
else bad "fresh --durable: checked (this server writes no AOF: refused)" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi
"$DMUTEX" fresh -r "$URL" -n usagetest -d >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 1 ] && grep -qF "appendonly" "$T/err"; then
    ok "fresh -d: the old spelling of --durable still works (fresh has no other -d)"
else bad "fresh -d: the old spelling of --durable still works (fresh has no other -d)" "exit $rc" \
    "$(cat "$T/out" "$T/err")"; fi

# ---- URLs ------------------------------------------------------------------
"$DMUTEX" help >"$T/help"
for s in $SCHEMES; do
    miss=""
    grep -qF -- "  $s" "$T/help" || miss="$miss help"
    for c in $COMMANDS; do
        grep -q -- "-r, --redis" "$T/$c.h" || continue
        grep -qF -- "  $s" "$T/$c.h" || miss="$miss $c"
    done
    for m in $MAN; do
        sed 's/\\-/-/g; s/\\f[BIR]//g; s/\\&//g' "$m" | grep -qF -- "$s" || miss="$miss $(basename "$m")"
    done
    if [ -z "$miss" ]; then ok "URLs: $s listed by dmutex help, every -h with -r, both man pages"
    else bad "URLs: $s listed by dmutex help, every -h with -r, both man pages" "missing in:$miss"; fi
done
# The forms every text lists are the same lines (one list).
for c in $COMMANDS; do
    grep -q -- "-r, --redis" "$T/$c.h" || continue
    sed -n '/^A REDIS_URL /,/^$/p' "$T/$c.h" | grep -v '^$' >"$T/$c.urls"
    if [ -s "$T/$c.urls" ] &&
       sed -n '/^A REDIS_URL /,/^$/p' "$T/help" | grep -v '^$' | cmp -s - "$T/$c.urls"; then
        ok "URLs: $c -h lists the forms dmutex help lists"
    else bad "URLs: $c -h lists the forms dmutex help lists" "$(cat "$T/$c.urls")"; fi
done

# Every command with -r takes every scheme: a cluster URL is no usage
# error (a closed port: ls, top, unlock and fresh cannot connect, exit 1;
# check and run do not connect).
printf 'namespace = "usagetest";\nmutexes = ();\n' >"$T/empty.cfg"
CL=redis-cluster://127.0.0.1:1
for c in ls top unlock fresh check run; do
    want=1
    case $c in
        ls|fresh) "$DMUTEX" "$c" -r "$CL" >"$T/out" 2>"$T/err" ;;
        top) "$DMUTEX" top -r "$CL" -N 1 >"$T/out" 2>"$T/err" ;;
        unlock) "$DMUTEX" unlock -c "$T/empty.cfg" -r "$CL" u.x >"$T/out" 2>"$T/err" ;;
        *) want=0; "$DMUTEX" "$c" -c "$T/empty.cfg" -r "$CL" -- true >"$T/out" 2>"$T/err" ;;
    esac
    rc=$?
    if [ "$rc" -eq "$want" ] && ! grep -qi "url" "$T/err"; then ok "URLs: $c -r redis-cluster:// is taken"
    else bad "URLs: $c -r redis-cluster:// is taken" "exit $rc, want $want" "$(cat "$T/out" "$T/err")"; fi
done
"$DMUTEX" ls -r http://127.0.0.1 >"$T/out" 2>"$T/err"
rc=$?
if [ "$rc" -eq 2 ] && grep -qF "unknown scheme \"http\" (use one of $SCHEMES)" "$T/err"; then
    ok "URLs: an unknown scheme's message lists every scheme"
else bad "URLs: an unknown scheme's message lists every scheme" "exit $rc" "$(cat "$T/err")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
