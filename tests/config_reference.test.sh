#!/bin/sh
# config_reference.test.sh: the key tables of config/REFERENCE.md are the
# ones the loader's own key table prints (`dmutex config-keys GROUP`, from
# shim/config_keys.c). A key added, renamed, re-bounded or given another
# default in the code and not in the reference (or the other way round)
# fails here with the diff; the fix is to paste the command's output
# between the markers. Prints one closing line "N passed, N failed".
#
#   sh tests/config_reference.test.sh   (DMUTEX=path overrides build/dmutex,
#                                        REFERENCE=path the file checked)
cd "$(dirname "$0")/.." || exit 1
DMUTEX=${DMUTEX:-build/dmutex}
REFERENCE=${REFERENCE:-config/REFERENCE.md}
T=$(mktemp -d /tmp/config_reference.test.XXXXXX) || exit 1
trap 'rm -rf "$T"' EXIT
. tests/lib.sh


if ! make -s "$DMUTEX" >"$T/make.log" 2>&1 && [ ! -x "$DMUTEX" ]; then
    cat "$T/make.log"
    echo "0 passed, 1 failed"
    exit 1
fi

for g in top redis mutex tls metrics etcd; do
    name="reference_${g}_keys_match_the_key_table"
    # The lines between "<!-- config-keys GROUP: ..." and "<!-- end config-keys -->".
    awk -v g="$g" '
        index($0, "<!-- config-keys " g ":") == 1 { on = 1; n++; next }
        on && index($0, "<!-- end config-keys -->") == 1 { on = 0; next }
        on { print }
        END { if (n != 1 || on) exit 1 }' "$REFERENCE" >"$T/doc.$g"
    if [ $? -ne 0 ]; then
        bad "$name" "$REFERENCE has no single closed <!-- config-keys $g: --> block"
        continue
    fi
    if ! "$DMUTEX" config-keys "$g" >"$T/table.$g" 2>"$T/err.$g"; then
        bad "$name" "$DMUTEX config-keys $g failed: $(cat "$T/err.$g")"
        continue
    fi
    if diff -u "$T/doc.$g" "$T/table.$g" >"$T/diff.$g"; then
        ok "$name"
    else
        bad "$name" "$REFERENCE differs from \`dmutex config-keys $g\` (- file, + table):"
        sed 's/^/     /' "$T/diff.$g" | head -n 40
    fi
done

# The command refuses what it does not know, so a typo in this script
# cannot turn into an empty table compared with an empty block.
if "$DMUTEX" config-keys nosuchgroup >/dev/null 2>&1; then
    bad "config_keys_refuses_an_unknown_group" "exit status 0"
else
    ok "config_keys_refuses_an_unknown_group"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
