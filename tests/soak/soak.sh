#!/bin/sh
# tests/soak/soak.sh: the randomized soak, run by `make soak` (docs/testing.md,
# "The soak"). Makes 3 machines (network namespaces on a private bridge), a
# server namespace and, for the etcd modes, one namespace per etcd member,
# then for each mode writes the mode's config, runs the nemesis
# (tests/soak/nemesis.c: the store, the fenced resource, the workers and the
# faults, from the seed) and the checker (tests/soak/check.c) over what they
# logged, and ends with a table of every mode.
#
#   tests/soak/soak.sh [-s SECONDS] [-S SEED] [-m MODES] [-F FAULTS] [-M MS] [-o DIR]
#
#   -s  length of the whole soak (default 1800), shared by the modes
#   -S  the seed (default 1)
#   -m  all (default) or a comma list of: fair cache notices batch0 error
#       local warn sentinel etcd etcd-cache (the last two: a 3-member etcd
#       cluster, defaults / cache = true)
#   -F  the faults (default all), a comma list of names; -NAME takes one out
#       (the names: tests/soak/nemesis.c, fnames[])
#   -M  no server stall (pause, sleep, redis-stop, replica-stall, member-stop)
#       longer than this many ms (default: up to 1.5 leases)
#   -o  where the logs and reports go (default build/soak; emptied first)
#
# SOAK_PRELOAD replaces build/libdmutex.so as the workers' LD_PRELOAD (a
# colon list: an AddressSanitizer build needs its runtime first; the
# nemesis passes ASAN_OPTIONS on).
#
# Exit status: 0 no mode had a defect, 1 one had (or something failed), 2 bad
# usage. Needs root (ip netns; iptables for the etcd modes). Leaves no
# namespace, link, rule or process behind, also on Ctrl-C; the logs stay in
# the output directory.
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
B=$ROOT/build
ALL_MODES="fair cache notices batch0 error local warn sentinel etcd etcd-cache"
SOAK_MODE_MIN_S=20               # no mode runs shorter than this
SOAK_SUBNET_PREFIX=10.214        # machines live in 10.214.X.0/24, X free
SOAK_MACHINES=3
SOAK_MEMBERS=3                   # etcd members, one namespace each

total_s=1800 seed=1 modes=all faults=all out=$B/soak stall_max=0
while getopts :s:S:m:F:M:o:h opt; do
    case $opt in
    s) total_s=$OPTARG ;;
    S) seed=$OPTARG ;;
    m) modes=$OPTARG ;;
    F) faults=$OPTARG ;;
    M) stall_max=$OPTARG ;;
    o) out=$OPTARG ;;
    h) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak: bad option (see tests/soak/soak.sh -h)" >&2; exit 2 ;;
    esac
done
case $total_s in ''|*[!0-9]*) echo "soak: -s wants seconds" >&2; exit 2 ;; esac
case $seed in ''|*[!0-9]*) echo "soak: -S wants a number" >&2; exit 2 ;; esac
[ "$modes" = all ] && modes=$ALL_MODES
modes=$(echo "$modes" | tr ',' ' ')
nmodes=0
for m in $modes; do
    case " $ALL_MODES " in *" $m "*) ;; *) echo "soak: unknown mode $m (modes: $ALL_MODES)" >&2; exit 2 ;; esac
    nmodes=$((nmodes + 1))
done
per_mode=$((total_s / nmodes))
[ $per_mode -ge $SOAK_MODE_MIN_S ] || per_mode=$SOAK_MODE_MIN_S

[ "$(id -u)" = 0 ] || { echo "soak: needs root (network namespaces)" >&2; exit 1; }
for f in libdmutex.so tests/soak/soakworker tests/soak/soakfence tests/soak/soaknemesis \
         tests/soak/soakcheck; do
    [ -x "$B/$f" ] || [ -f "$B/$f" ] || { echo "soak: $B/$f is missing: make test-build" >&2; exit 1; }
done
need="ip"
case " $modes " in *" etcd"*) need="$need etcd iptables" ;; esac
for m in $modes; do case $m in etcd*) ;; *) need="$need redis-server redis-cli"; break ;; esac; done
for c in $need; do
    command -v $c >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v $c >/dev/null 2>&1 ||
        { echo "soak: $c is missing (tools/deps.sh)" >&2; exit 1; }
done

# ---- clean-up: everything made here is named here -------------------------

nemesis_pid="" netns_made="" veths_made="" bridge=""
cleanup() {
    if [ -n "$nemesis_pid" ]; then
        kill -TERM "$nemesis_pid" 2>/dev/null
        wait "$nemesis_pid" 2>/dev/null
        nemesis_pid=""
    fi
    for ns in $netns_made; do
        # anything still inside is this run's: the namespaces are private to it
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done
        ip netns delete "$ns" 2>/dev/null
    done
    for v in $veths_made; do ip link delete "$v" 2>/dev/null; done
    [ -n "$bridge" ] && ip link delete "$bridge" 2>/dev/null
    netns_made="" veths_made="" bridge=""
}
trap cleanup EXIT
exec 8>&2
trap 'echo "soak: interrupted; cleaning up" >&8; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'exit 141' PIPE

# ---- machines ---------------------------------------------------------------

pick_subnet() {
    used=$(ip -o -4 addr show 2>/dev/null; ip -4 route show table all 2>/dev/null)
    x=$(( $$ % 254 + 1 )) n=0
    while [ $n -lt 254 ]; do
        if ! printf '%s\n' "$used" | grep -q "[^0-9]$SOAK_SUBNET_PREFIX\.$x\.\|^$SOAK_SUBNET_PREFIX\.$x\."; then
            echo "$SOAK_SUBNET_PREFIX.$x"; return 0
        fi
        x=$(( x % 254 + 1 )) n=$((n + 1))
    done
    return 1
}

# addns NAME ADDR: a namespace with a veth on the bridge; prints the host end.
addns() {
    ns=dmsoak$$-$1 host=dmsk$$$1 peer=dmsk$$$1p
    ip netns add "$ns" || return 1
    netns_made="$netns_made $ns"
    ip link add "$host" type veth peer name "$peer" || return 1
    veths_made="$veths_made $host"
    ip link set "$peer" netns "$ns" && ip link set "$host" master "$bridge" up &&
        ip -n "$ns" link set "$peer" name eth0 && ip -n "$ns" addr add "$2/24" dev eth0 &&
        ip -n "$ns" link set eth0 up && ip -n "$ns" link set lo up
}

mkdir -p "$B"
# Choosing the /24 and taking it is one step under a lock of the machine's
# (a soak of another tree, or make test's, may start at the same moment).
if command -v flock >/dev/null 2>&1 && { exec 9>/run/lock/dmutex-soak-net.lock; } 2>/dev/null; then
    flock 9
fi
net=$(pick_subnet) || { echo "soak: no free /24 under $SOAK_SUBNET_PREFIX" >&2; exit 1; }
bridge=dmskbr$$
ip link add "$bridge" type bridge && ip addr add "$net.1/24" dev "$bridge" &&
    ip link set "$bridge" up || { echo "soak: cannot make the bridge" >&2; exit 1; }
exec 9>&-
srv_ip=$net.2
addns s "$srv_ip" >/dev/null || { echo "soak: cannot make the server namespace" >&2; exit 1; }
machines_arg=""
i=1
while [ $i -le $SOAK_MACHINES ]; do
    addns $i "$net.$((i + 2))" || { echo "soak: cannot make machine $i" >&2; exit 1; }
    machines_arg="$machines_arg${machines_arg:+,}dmsoak$$-$i:dmsk$$$i:m$i"
    i=$((i + 1))
done
# the etcd members (the etcd modes only): each in a namespace of its own, so
# that iptables there can cut one off from its peers
members_arg="" member_ips=""
case " $modes " in *" etcd"*)
    i=1
    while [ $i -le $SOAK_MEMBERS ]; do
        ip_=$net.$((SOAK_MACHINES + 2 + i))
        addns e$i "$ip_" || { echo "soak: cannot make etcd member $i's namespace" >&2; exit 1; }
        members_arg="$members_arg${members_arg:+,}dmsoak$$-e$i:$ip_"
        member_ips="$member_ips $ip_"
        i=$((i + 1))
    done ;;
esac

# ---- one mode ---------------------------------------------------------------

# config MODE PORT: the mode's settings as nemesis options (LEASE RENEW
# MARGIN DOWN SENTINEL) on stdout; the config file written to $dir/soak.cfg.
write_config() {
    m=$1 port=$2
    lease=2000 down=block lost=abort entry="" top="" redis="host = \"$srv_ip\"; port = $port;"
    store=redis
    case $m in
    fair) ;;
    cache) entry="cache = true;" ;;
    notices) entry="fair = false;" ;;
    batch0) top="batch_ms = 0;" ;;
    error) down=error ;;
    local) down=local ;;
    warn) lost=warn ;;
    sentinel)
        lease=3000
        top="min_replicas = 2;"
        redis="sentinels = [\"$srv_ip:$((port + 10))\", \"$srv_ip:$((port + 11))\", \"$srv_ip:$((port + 12))\"]; master = \"soak\";"
        ;;
    etcd|etcd-cache)
        # the nemesis's member k listens for clients on port + 20 + k
        store=etcd redis="" k=0
        for a in $member_ips; do
            redis="$redis${redis:+, }\"http://$a:$((port + 20 + k))\""
            k=$((k + 1))
        done
        redis="endpoints = ( $redis );"
        [ "$m" = etcd-cache ] && entry="cache = true;"
        ;;
    esac
    cat >"$dir/soak.cfg" <<EOF
# make soak, mode $m (written by tests/soak/soak.sh)
lease_ms = $lease;
on_redis_down = "$down";
on_lease_lost = "$lost";
$top
$store = { $redis connect_timeout_ms = 500; command_timeout_ms = 500; };
mutexes = (
  { symbol = "soak_a"; $entry },
  { symbol = "soak_b"; $entry }
);
EOF
    fair=1
    [ "$m" = notices ] && fair=0
    # the shim's derived defaults: renew = lease / 3, margin = lease / 10
    echo "$lease $((lease / 3)) $((lease / 10)) $down $lost $fair"
}

rm -rf "$out"
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)     # the servers chdir to their own dirs
summary=$out/summary.txt
: >"$summary"
echo "soak: seed $seed, $per_mode s per mode: $modes; faults: $faults"
echo "soak: machines $net.3-$net.$((SOAK_MACHINES + 2)) (namespaces dmsoak$$-1..$SOAK_MACHINES), servers at $srv_ip${member_ips:+, etcd members at$member_ips}"
worst=0
for m in $modes; do
    dir=$out/$m
    mkdir -p "$dir"
    port=$(( 20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 30000 ))
    set -- $(write_config "$m" "$port")
    lease=$1 renew=$2 margin=$3 down=$4 lost=$5 fair=$6
    sflag=""
    [ "$m" = sentinel ] && sflag=-k
    case $m in etcd*) sflag="-E $members_arg" ;; esac
    echo "soak: mode $m ($per_mode s) ..."
    "$B/tests/soak/soaknemesis" -d "$dir" -n "$machines_arg" -S "dmsoak$$-s" -A "$srv_ip" \
        -P "$port" -w "$B/tests/soak/soakworker" -L "${SOAK_PRELOAD:-$B/libdmutex.so}" -C "$dir/soak.cfg" \
        -s "$seed" -T "$per_mode" -m "$m" -l "$lease" -r "$renew" -g "$margin" -D "$down" \
        -F "$faults" -X "on_lease_lost=$lost fair=$fair" -M "$stall_max" $sflag 2>"$dir/nemesis.err" &
    nemesis_pid=$!
    wait "$nemesis_pid"
    rc=$?
    nemesis_pid=""
    if [ $rc -ne 0 ]; then
        echo "soak: mode $m: the nemesis failed (exit $rc):" >&2
        sed 's/^/  /' "$dir/nemesis.err" >&2
        worst=1
        continue
    fi
    "$B/tests/soak/soakcheck" "$dir" >"$dir/report.txt" 2>&1
    rc=$?
    sed 's/^/  /' "$dir/report.txt"
    grep '^summary ' "$dir/report.txt" >>"$summary"
    [ $rc -ne 0 ] && worst=1
done

echo
echo "soak: every mode (seed $seed, $per_mode s each; reports under $out)"
awk '{
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "  %-10s sections %7s  overlaps documented %5s defect %4s  aborts expected %3s unexpected %3s  token defects %3s  rejections %5s  expired after unlock %4s  longest wait %6s ms  defects %s\n",
        v["mode"], v["sections"], v["overlaps_documented"], v["overlaps_defect"],
        v["aborts_expected"], v["aborts_unexpected"], v["token_defects"], v["rejections"], v["expired_after_unlock"], v["longest_wait_ms"], v["defects"]
}' "$summary"
exit $worst
