#!/bin/sh
# ls_json.test.sh: `dmutex ls --json` against a redis-server of its own (free
# port, tools/redis-tmp.sh) while a program under the shim holds one lock
# and has released another: the document parses and says what the server
# holds (state, holder, hold count, lease, token), a name from the server
# with quotes, a control byte and invalid UTF-8 is escaped, and an empty
# namespace is an empty list. Prints one closing line "N passed, N failed".
#
#   sh tests/ls_json.test.sh            (DMUTEX=path overrides build/dmutex)
cd "$(dirname "$0")/.." || exit 1
DMUTEX=${DMUTEX:-build/dmutex}
T=$(mktemp -d /tmp/ls.test.XXXXXX) || exit 1
. tests/lib.sh
. tools/redis-tmp.sh
holder=""
cleanup() {
    exec 3>&-
    [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
    redis_tmp_stop
    rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP; trap 'exit 141' PIPE


make -s "$DMUTEX" build/libdmutex.so >"$T/make.log" 2>&1 || fail_setup "$(cat "$T/make.log")"
cc -std=gnu11 -Wall -Wextra -Werror -pthread -Iinclude tests/install/apiprog.c -o "$T/apiprog" \
    >"$T/cc.log" 2>&1 || fail_setup "$(cat "$T/cc.log")"
redis_tmp_start || fail_setup "no redis-server"
redis_tmp_fresh lstest
URL=redis://127.0.0.1:$REDIS_TMP_PORT
printf 'namespace = "lstest";\nmutexes = ();\n' >"$T/app.cfg"

# The holder: takes and releases json.free, then holds json.held until its
# stdin (the fifo) closes.
mkfifo "$T/in"
LD_PRELOAD=$PWD/build/libdmutex.so DMUTEX_CONFIG=$T/app.cfg DMUTEX_REDIS=$URL \
    "$T/apiprog" json.held json.free <"$T/in" >"$T/out" 2>"$T/err" &
holder=$!
exec 3>"$T/in"
n=0
while ! grep -q '^held' "$T/out" && [ "$n" -lt 300 ] && kill -0 "$holder" 2>/dev/null; do
    sleep 0.1; n=$((n + 1))
done
grep -q '^held' "$T/out" || fail_setup "the holder did not take its lock: $(cat "$T/out" "$T/err")"
token=$(sed -n 's/^held //p' "$T/out")
# A name no shim would write, put there by something else on the server.
weird=$(printf 'q"\\\001\377')
redis-cli -p "$REDIS_TMP_PORT" SET "$("$DMUTEX" keys lstest "$weird" token)" 3 >/dev/null

if "$DMUTEX" ls -c "$T/app.cfg" -r "$URL" --json >"$T/json" 2>"$T/jerr"; then
    ok "dmutex ls --json succeeds"
else
    bad "dmutex ls --json succeeds" "$(cat "$T/jerr")"
fi
if python3 -m json.tool "$T/json" >/dev/null 2>"$T/perr"; then ok "its output is one JSON document"
else bad "its output is one JSON document" "$(cat "$T/perr")" "$(cat "$T/json")"; fi

# check.py NAME: asserts about the document, in Python.
check_json() {
    name=$1 code=$2
    if python3 -c "import json, sys
d = json.load(open(sys.argv[1]))
token = int(sys.argv[2]); port = sys.argv[3]
locks = {l['name']: l for l in d['locks']}
$code" "$T/json" "$token" "$REDIS_TMP_PORT" >"$T/py" 2>&1; then ok "$name"
    else bad "$name" "$(tail -n 3 "$T/py")" "$(cat "$T/json")"; fi
}
check_json "namespace, server and the three names" "
assert d['namespace'] == 'lstest', d['namespace']
assert d['redis'] == '127.0.0.1:' + port, d['redis']
assert sorted(locks) == sorted(['json.free', 'json.held', 'q\"\\\\\x01\ufffd']), sorted(locks)
assert [l['name'] for l in d['locks']] == sorted(locks)"
check_json "the held lock: holder, one hold, a lease, the holder's token" "
h = locks['json.held']
assert h['state'] == 'held', h
assert isinstance(h['holder'], str) and ':' in h['holder'], h
assert h['holds'] == 1, h
assert isinstance(h['lease_ms'], int) and 0 < h['lease_ms'] <= 30000, h
assert h['token'] == token, (h, token)
assert h['waiters'] == 0, h"
check_json "the released lock: free, no holder, no lease, a token" "
f = locks['json.free']
assert f['state'] == 'free', f
assert f['holder'] is None and f['holds'] is None and f['lease_ms'] is None, f
assert isinstance(f['token'], int) and f['token'] > 0, f"

"$DMUTEX" ls -r "$URL" -n lstest >"$T/table"
held_row=$(grep '^json.held ' "$T/table")
holder_id=$(python3 -c "import json,sys; print([l for l in json.load(open(sys.argv[1]))['locks'] if l['name']=='json.held'][0]['holder'])" "$T/json")
case "$holder_id:$held_row" in
    ?*:*" held "*" $holder_id x1 "*" $token "*) ok "the table shows the same holder and token" ;;
    *) bad "the table shows the same holder and token" "$held_row" "json holder: $holder_id" ;;
esac

if "$DMUTEX" ls -r "$URL" -n nothing.here --json >"$T/json" 2>"$T/jerr"; then
    check_json "an empty namespace is an empty list" "
assert d['namespace'] == 'nothing.here' and d['locks'] == [], d"
else
    bad "an empty namespace is an empty list" "$(cat "$T/jerr")"
fi

exec 3>&-
wait "$holder"
holder=""
if grep -qx done "$T/out"; then ok "the holder released and exited"
else bad "the holder released and exited" "$(cat "$T/out" "$T/err")"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
