#!/bin/sh
# mkman.sh: a man page from its template in man/ (tools/install.mk).
#
#   tools/mkman.sh TEMPLATE DMUTEX REFERENCE [VAR=VALUE...] > PAGE
#
# Every @VAR@ in the template becomes VALUE (paths, the version). A line
# that is only one of these is replaced by text made at build time, so the
# page follows the code without being edited:
#   @SYNOPSIS@   one line per command: the first line of `DMUTEX CMD -h`
#   @COMMANDS@   a subsection per command with its `-h` text (usage2man.awk)
#   @REFERENCE@  REFERENCE (config/REFERENCE.md) from SYNOPSIS to before
#                FILES (md2man.awk), with its key tables from
#                `DMUTEX config-keys GROUP` for each GROUP REFERENCE.md has, not from the file
#   @URL_FORMS@  every form of a server URL, one a line (`DMUTEX url-forms`:
#                the parser's own list, DM_URL_LIST in shim/config.h)
# The commands are those that `DMUTEX help` lists under "commands:".
# Repository paths in the reference are rewritten to installed ones
# (config/X.cfg -> DOCDIR/examples/X.cfg, docs/X.md -> DOCDIR/X.md).
set -e
[ $# -ge 3 ] || { echo "usage: mkman.sh TEMPLATE DMUTEX REFERENCE [VAR=VALUE...]" >&2; exit 2; }
tmpl=$1 dmutex=$2 ref=$3
shift 3
here=$(dirname "$0")
T=$(mktemp -d "${TMPDIR:-/tmp}/mkman.XXXXXX")
trap 'rm -rf "$T"' EXIT

subst=""
docdir=""
for kv in "$@"; do
    k=${kv%%=*} v=${kv#*=}
    case "$v" in *'|'*) echo "mkman.sh: $k: a value with | is not supported" >&2; exit 2 ;; esac
    subst="$subst s|@$k@|$v|g;"
    [ "$k" = DOCDIR ] && docdir=$v
done

"$dmutex" help | awk '/^commands:/ { on = 1; next } on && /^$/ { exit }
    on && /^  [a-z]/ { if ($1 != "help") print $1 }' >"$T/commands"
[ -s "$T/commands" ] || { echo "mkman.sh: $dmutex help lists no commands" >&2; exit 1; }

: >"$T/synopsis"
: >"$T/commands.man"
while read -r cmd; do
    "$dmutex" "$cmd" -h >"$T/usage" || { echo "mkman.sh: $dmutex $cmd -h failed" >&2; exit 1; }
    u=$(head -n 1 "$T/usage" | sed 's/^[Uu]sage: //')
    case "$u" in "dmutex $cmd"*) ;; *)
        echo "mkman.sh: $dmutex $cmd -h does not start with 'usage: dmutex $cmd'" >&2; exit 1 ;;
    esac
    head -n 1 "$T/usage" | awk -f "$here/usage2man.awk" | sed -n '2p' >>"$T/synopsis"
    echo ".br" >>"$T/synopsis"
    printf '.SS %s\n' "$cmd" >>"$T/commands.man"
    awk -f "$here/usage2man.awk" "$T/usage" >>"$T/commands.man"
done <"$T/commands"

"$dmutex" url-forms | awk 'BEGIN { print ".nf" }
    { gsub(/\\/, "\\e"); gsub(/-/, "\\-"); print }
    END { print ".fi" }' >"$T/urls"
[ "$(wc -l <"$T/urls")" -gt 3 ] || { echo "mkman.sh: $dmutex url-forms lists no URL" >&2; exit 1; }

mkdir "$T/keys"
# Every group REFERENCE.md has a table for (top, redis, tls, mutex, ...).
for g in $(sed -n 's/^<!-- config-keys \([a-z]*\):.*/\1/p' "$ref"); do
    "$dmutex" config-keys "$g" >"$T/keys/$g"
done
awk -v keys="$T/keys" -v from=SYNOPSIS -v until=FILES -f "$here/md2man.awk" "$ref" |
    sed "s|config/\([a-z_-]*\.cfg\)|$docdir/examples/\1|g; s|docs/\([a-z_-]*\.md\)|$docdir/\1|g" \
    >"$T/reference"

sed "$subst" "$tmpl" | awk -v d="$T" '
    $0 == "@SYNOPSIS@" { f = d "/synopsis" }
    $0 == "@COMMANDS@" { f = d "/commands.man" }
    $0 == "@REFERENCE@" { f = d "/reference" }
    $0 == "@URL_FORMS@" { f = d "/urls" }
    f != "" { while ((getline l < f) > 0) print l; close(f); f = ""; next }
    { print }' >"$T/page"
if grep -n '@[A-Z_][A-Z_]*@' "$T/page" >&2; then
    echo "mkman.sh: $tmpl: placeholders left (above)" >&2
    exit 1
fi
cat "$T/page"
