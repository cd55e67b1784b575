#!/bin/sh
# acl_commands.test.sh: every command the scripts call (redis.call and
# redis.pcall in shim/redis/lua/*.lua) and every command the shim's C code sends
# (shim/*.c, shim/redis/*.c)
# is in `dmutex acl --commands` (tools/acl.c), so the least-privilege user
# it prints is never refused one of them. Redis 7 checks a script's
# commands against the calling user's ACL. Prints "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
DMUTEX=${DMUTEX:-build/dmutex}
. tests/lib.sh

if ! make -s "$DMUTEX" >/dev/null 2>&1 && [ ! -x "$DMUTEX" ]; then
    echo "0 passed, 1 failed"
    exit 1
fi
listed=$("$DMUTEX" acl --commands) || { echo "0 passed, 1 failed"; exit 1; }

check() {   # test name, commands (lower case, one per line)
    missing=""
    for c in $2; do
        echo "$listed" | grep -qx "$c" || missing="$missing $c"
    done
    if [ -z "$missing" ]; then ok "$1"; else bad "$1" "not in tools/acl.c:$missing"; fi
}

# force.lua is `dmutex unlock --force`'s, an operator's command run with the
# operator's own user: the application's user needs none of its rights.
scripts=$(ls shim/redis/lua/*.lua | grep -v '/force\.lua$' | xargs grep -ohE "redis\.p?call\(['\"][A-Za-z]+['\"]" |
          sed -E "s/.*\(['\"]//; s/['\"]$//" | tr 'A-Z' 'a-z' | sort -u)
[ -n "$scripts" ] || bad scripts_commands_are_listed "found no redis.call in shim/redis/lua/*.lua"
check scripts_commands_are_listed "$scripts"

# A script that builds a command name at run time could not be checked.
dyn=$(grep -nE "redis\.p?call\([^'\"]" shim/redis/lua/*.lua)
if [ -z "$dyn" ]; then ok scripts_name_every_command_literally; else
    bad scripts_name_every_command_literally "$dyn"; fi

# The C side: every upper-case word that opens a string literal of the
# shim's C code ("PING", "SCRIPT LOAD %s", argv[0] of a command) is taken
# for a command, but for the words of error replies and prose listed here
# (and GNU, the owner of an ELF build-id note).
not_commands='GNU|ADDR|NOSCRIPT|NOPERM|OOM|TLS|TCP|ACL|LOADING|READONLY|MOVED|ASK|WRONGPASS|NOAUTH|ERR|MASTERDOWN|BUSY|TRYAGAIN|CLUSTERDOWN|WRONGTYPE'
# sentinel.c talks to the sentinels, which have users of their own
# (redis.sentinel_username), not to the data nodes this ACL is for;
# admin.c is the tools' (dmutex ls, unlock, fresh: an operator's user).
c_side=$(ls shim/*.c shim/redis/*.c | grep -vE '^shim/redis/(sentinel|admin)\.c$' | xargs grep -ohE '"[A-Z]{3,}( [A-Z]{3,})?["| %]' |
         sed -E 's/^"//; s/["| %]$//' | grep -vxE "$not_commands" |
         sed -E 's/^([A-Z]+) ([A-Z]+)$/\1|\2/' | tr 'A-Z' 'a-z' | sort -u)
check shim_commands_are_listed "$c_side"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
