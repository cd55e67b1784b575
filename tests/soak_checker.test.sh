#!/bin/sh
# soak_checker: the soak's checker (build/tests/soak/soakcheck) on made-up
# logs with an overlap, token regression, repeated token, rejection,
# abort, hang, crash or starvation, and on the same logs with the fault that
# explains each: it must report every one and class it as docs/testing.md
# ("The soak") says. A checker that cannot fail is worthless.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
CHECK=${SOAK_CHECK:-build/tests/soak/soakcheck}
[ -x "$CHECK" ] || fail_setup "soak_checker: $CHECK is missing: make test-build"
T=$(mktemp -d "${TMPDIR:-/tmp}/dmutex-soakcheck.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

MS=1000000
# run NAME [KEY=VALUE...]: a new run directory $D with its config line
# (lease 2000 ms, renew 666, margin 200; DOWN, LOST, FAIR, RUN_S override).
run() {
    D=$T/$1
    mkdir -p "$D"
    echo "0 config mode=$1 seed=1 run_s=${RUN_S:-10} lease_ms=2000 renew_ms=666 margin_ms=200" \
         "on_redis_down=${DOWN:-block} sentinel=0 machines=3 procs=1 threads=1 t0=0" \
         "end=$(( ${RUN_S:-10} * 1000 * MS )) faults=all on_lease_lost=${LOST:-abort} fair=${FAIR:-1}" \
         >"$D/nemesis.log"
}
ns() { echo $(( $1 * MS )); }
# proc PID HOST: a worker that started at 0
proc() {
    echo "0 spawn $1 $2 $D/w-$1.log" >>"$D/nemesis.log"
    echo "1 start $1 $2" >>"$D/w-$1.log"
}
# sec PID LOCK TOKEN WANT_MS ENTER_MS [EXIT_MS]: a critical section (no
# EXIT_MS: the process is still inside); its fenced write accepted
sec() {
    w=$D/w-$1.log
    echo "$(ns "$4") want $1 0 $2 lock" >>"$w"
    echo "$(ns "$5") enter $1 0 $2 $3" >>"$w"
    [ $# -ge 6 ] || return 0
    echo "$(ns "$6") exit $1 0 $2 $3" >>"$w"
    echo "$(( $(ns "$6") + 1000 )) unlocked $1 0 $2 0" >>"$w"
    echo "$(( $(ns "$6") - 1000 )) ok $2 $3 0 $1 0 $(( $(ns "$6") - 2000 ))" >>"$D/fence.log"
}
# fault ID KIND BEGIN_MS END_MS ATTRS...
fault() {
    id=$1 kind=$2 b=$3 e=$4
    shift 4
    echo "$(ns "$b") fault $id begin $kind $*" >>"$D/nemesis.log"
    echo "$(ns "$e") fault $id end $kind" >>"$D/nemesis.log"
}
died() { echo "$(ns "$2") died $1 $3 $4" >>"$D/nemesis.log"; }
done_() { echo "$(ns 9999) done $1" >>"$D/w-$1.log"; }

# expect NAME RC PATTERN...: the checker's exit status and its report
expect() {
    name=$1 want=$2
    shift 2
    "$CHECK" "$D" >"$D/out" 2>&1
    rc=$?
    if [ "$rc" != "$want" ]; then
        bad "$name: exit $rc, not $want" "$(cat "$D/out")"
        return
    fi
    for p in "$@"; do
        if ! grep -q -- "$p" "$D/out"; then
            bad "$name: no \"$p\" in the report" "$(cat "$D/out")"
            return
        fi
    done
    ok "$name"
}

run clean
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 200; sec 102 soak_a 6 150 210 300; sec 101 soak_a 7 310 320 400
done_ 101; done_ 102; died 101 9999 exit 0; died 102 9999 exit 0
expect "clean run: no finding" 0 "verdict: PASS" "overlaps: 0 documented" "sections: 3" "ran to the end"

run overlap
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 300; sec 102 soak_a 6 150 200 400
expect "an overlap no fault explains is a defect" 1 "DEFECT: overlap on soak_a: pid 101" \
    "overlaps_defect=1" "verdict: FAIL"

run overlap_other_locks
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 300; sec 102 soak_b 6 150 200 400
expect "sections of two locks never overlap" 0 "overlaps_defect=0"

run overlap_stop
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 1800; sec 102 soak_a 6 150 1500 1900
fault 1 stop-holder 120 1620 target=101 host=m1 dur=1500 state=inside
echo "$(ns 1750) rej soak_a 5 6 101 0 $(ns 1749)" >>"$D/fence.log"
expect "an overlap after a stop past lease - renew is documented" 0 \
    "overlaps: 1 documented (stop 1" "1 rejected (1 documented" "overlaps_defect=0"

run overlap_claim_stop
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 1400; sec 102 soak_a 6 150 900 1500
fault 1 stop-handover 115 1115 target=101 host=m1 dur=1000 state=handed-over
expect "an overlap after a handover and a stop shorter than the lease is a defect" 1 \
    "DEFECT: overlap on soak_a: pid 101" "overlaps_defect=1"

run overlap_waiter_stopped
proc 101 m1; proc 102 m2
sec 102 soak_a 6 100 110 200
sec 101 soak_a 5 50 1100 1200
sec 102 soak_a 7 1000 1010 1150
fault 1 stop-waiter 60 1060 target=101 host=m1 dur=1000 state=waiting
expect "a waiter handed the lock while stopped, shorter than the lease, is a defect" 1 \
    "DEFECT: overlap on soak_a" "overlaps_defect=1"

LOST=warn; run eperm_claim; LOST=
proc 101 m1
echo "$(ns 100) want 101 0 soak_a lock" >>"$D/w-101.log"
echo "$(ns 110) enter 101 0 soak_a 5" >>"$D/w-101.log"
echo "$(ns 1200) exit 101 0 soak_a 5" >>"$D/w-101.log"
echo "$(ns 1210) unlocked 101 0 soak_a 1" >>"$D/w-101.log"
fault 1 stop-handover 112 1012 target=101 host=m1 dur=900 state=handed-over
expect "warn mode: EPERM after a stop shorter than the lease right after a handover is a defect" 1 \
    "DEFECT: unlock of soak_a by pid 101" "defects=1"

LOST=warn; run eperm_alone; LOST=
proc 101 m1
echo "$(ns 100) want 101 0 soak_a lock" >>"$D/w-101.log"
echo "$(ns 110) enter 101 0 soak_a 5" >>"$D/w-101.log"
echo "$(ns 1200) exit 101 0 soak_a 5" >>"$D/w-101.log"
echo "$(ns 1210) unlocked 101 0 soak_a 1" >>"$D/w-101.log"
expect "warn mode: EPERM with no fault around is a defect" 1 "DEFECT: unlock of soak_a by pid 101"

run overlap_short_stop
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 101 1400; sec 102 soak_a 6 150 900 1500
fault 1 stop-holder 300 1300 target=101 host=m1 dur=1000 state=inside
expect "an overlap after a stop shorter than lease - renew is a defect" 1 \
    "DEFECT: overlap" "shorter than lease - renew" "overlaps_defect=1"

run overlap_died
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110; died 101 500 signal 9
fault 1 kill-holder 500 500 target=101 host=m1 state=inside
sec 102 soak_a 6 150 700 800
expect "a section whose process was killed ends at the death" 0 "overlaps_defect=0" \
    "killed by the nemesis 1"

run regression
proc 101 m1; proc 102 m2
sec 101 soak_a 9 100 110 200; sec 102 soak_a 4 250 300 400
expect "a token below one of a section that ended before is a defect" 1 \
    "DEFECT: token regression on soak_a: pid 102" "token_defects=1"

run repeat
proc 101 m1; proc 102 m2
sec 101 soak_a 9 100 110 200; sec 102 soak_a 9 250 300 400
expect "another process's token again is a defect" 1 "DEFECT: repeated token on soak_a"

run same_process_token
proc 101 m1
sec 101 soak_a 9 100 110 200; sec 101 soak_a 9 250 300 400
expect "one process's sections may share a token (a cached hold, a batch)" 0 "token_defects=0"

run abort_outside
proc 101 m1
sec 101 soak_a 5 100 110 200; died 101 900 signal 6
fault 1 redis-stop 300 800 node=0 dur=500 stall=all
expect "an abort after the section is unexpected" 1 "DEFECT: unexpected abort of pid 101" \
    "outside its section" "redis-stop#1" "aborts_unexpected=1"

run abort_inside_stop
proc 101 m1
sec 101 soak_a 5 100 110; died 101 2000 signal 6
fault 1 stop-holder 200 1700 target=101 host=m1 dur=1500 state=inside
expect "an abort inside after a stop past the lease is expected" 0 "aborts_expected=1" \
    "aborts: 1 expected"

run abort_inside_cut
proc 101 m1
sec 101 soak_a 5 100 110; died 101 2000 signal 6
fault 1 partition 200 1900 host=m1 dur=1700 cut=m1
expect "an abort inside while its machine is cut off is expected" 0 "aborts_expected=1"

run abort_inside_short_stall
proc 101 m1
sec 101 soak_a 5 100 110; died 101 900 signal 6
fault 1 pause 200 500 node=0 dur=300 how=ALL stall=all
expect "an abort inside after a short stall is a defect" 1 \
    "DEFECT: abort of pid 101 (m1) at +0.900s inside its section" "pause#1"

run abort_release_after_stall
proc 101 m1
sec 101 soak_a 5 100 110 200; died 101 1300 signal 6
fault 1 sleep 190 1100 node=0 dur=900 stall=all
echo "dmutex[101]: error: lock soak_a (owner x:1, fencing token 5): the hold was lost while held: at unlock the server no longer had it, before its lease could have run out (deleted, evicted, or lost by a restart or failover); another process may have entered; aborting (on_lease_lost = \"abort\")" >"$D/w-101.err"
expect "an abort for a release answered 'not held' after a short stall is unexpected" 1 \
    "DEFECT: unexpected abort of pid 101" "its release answered 'not held' after sleep" \
    "aborts_unexpected=1"

run abort_release_in_unlock
proc 101 m1
echo "$(ns 100) want 101 0 soak_a lock" >>"$D/w-101.log"
echo "$(ns 110) enter 101 0 soak_a 5" >>"$D/w-101.log"
echo "$(ns 200) exit 101 0 soak_a 5" >>"$D/w-101.log"
died 101 900 signal 6
fault 1 restart-aof 201 700 node=0 down=100 cut=all
echo "dmutex[101]: error: lock soak_a (owner x:1, fencing token 5): the hold was lost while held: at unlock the server no longer had it, before its lease could have run out (deleted, evicted, or lost by a restart or failover); another process may have entered; aborting (on_lease_lost = \"abort\")" >"$D/w-101.err"
expect "an abort in the unlock, its release judged lost after a restart with its data, is a defect" 1 \
    "DEFECT: abort of pid 101 (m1) at +0.900s inside its section" "in its unlock" \
    "aborts_unexpected=1"

run abort_claim
proc 101 m1
sec 101 soak_a 5 100 110; died 101 800 signal 6
echo "dmutex[101]: error: lost the lease of lock soak_a (owner x:1, fencing token 5): no renewal succeeded in time (redis unreachable or stuck); last renewal succeeded 618 ms ago (lease 2000 ms); lost leases in this process: 1; aborting before another process can enter" >"$D/w-101.err"
expect "an abort inside a hold renewed 618 ms before, no fault around, is a defect" 1 \
    "DEFECT: abort of pid 101 (m1) at +0.800s inside its section" "last renewal 618 ms before"

run abort_in_unlock
proc 101 m1
echo "$(ns 100) want 101 0 soak_a lock" >>"$D/w-101.log"
echo "$(ns 110) enter 101 0 soak_a 5" >>"$D/w-101.log"
echo "$(ns 1800) exit 101 0 soak_a 5" >>"$D/w-101.log"
died 101 1801 signal 6
fault 1 stop-holder 200 1700 target=101 host=m1 dur=1500 state=inside
expect "an abort between exit and the unlock's return is inside" 0 "aborts_expected=1"

DOWN=local; run local; DOWN=
proc 101 m1; proc 102 m2
sec 101 soak_a 7 100 110 400
sec 102 soak_a 0 160 170 300
echo "$(ns 299) rej soak_a 0 7 102 0 $(ns 298)" >>"$D/fence.log"
fault 1 partition 150 900 host=m2 dur=750 cut=m2
expect "on_redis_down = local: an overlap while cut off is documented" 0 \
    "overlaps: 1 documented (stop 0, local 1" "1 sections without a token" "1 rejected (1 documented"

run tokenless
proc 101 m1
sec 101 soak_a 0 100 110 200
expect "a section without a token outside local mode is a defect" 1 "DEFECT: section without a token"

LOST=warn; run warn; LOST=
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 2600; sec 102 soak_a 6 150 2100 2700
fault 1 partition 200 2500 host=m1 dur=2300 cut=m1
expect "on_lease_lost = warn: an overlap after the holder was cut off is documented" 0 \
    "warn 1)"

run restart_loss
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 800; sec 102 soak_a 1700000000000 350 400 900
fault 1 restart-noaof 150 300 node=0 down=20 cut=all loss=1
expect "an overlap after a restart without persistence is a defect (no grant for a lease)" 1 \
    "DEFECT: overlap on soak_a" "lost the data" "overlaps_defect=1"

run restart_loss_abort
proc 101 m1
sec 101 soak_a 5 100 110; died 101 1900 signal 6
fault 1 restart-noaof 150 300 node=0 down=20 cut=all loss=1
expect "an abort inside after a restart that lost the data is expected" 0 "aborts_expected=1"

run expired_after_unlock
proc 101 m1
sec 101 soak_a 5 100 110 200
fault 1 sleep 190 2600 node=0 dur=2410 stall=all
echo "dmutex[101]: warning: lock soak_a (owner x:1, fencing token 5): the hold expired after unlock: its release reached the server late (a stall, a pause or a restart) and found the lease over" >"$D/w-101.err"
done_ 101; died 101 9999 exit 0
expect "a release found expired after its unlock is counted, no defect" 0 \
    "expired after the unlock (warned, not aborted): 1" "expired_after_unlock=1"

run rejection
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 200; sec 102 soak_a 6 250 300 400
echo "$(ns 399) rej soak_a 6 9 102 0 $(ns 398)" >>"$D/fence.log"
expect "a rejection in no overlap is a defect" 1 "DEFECT: the fence rejected pid 102"

RUN_S=60; run starved
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 200
sec 102 soak_a 6 300 25000 25100
expect "a 25 s wait with no fault is starvation" 1 "DEFECT: starvation: pid 102" "starved=1"

FAIR=0; run starved_notices; FAIR=
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 200
sec 102 soak_a 6 300 25000 25100
expect "the same wait is no defect where the mode is not fair" 0 "starved=0" "not fair"

run wait_explained; RUN_S=
proc 101 m1; proc 102 m2
sec 102 soak_a 6 300 25000 25100
fault 1 partition 200 20000 host=m2 dur=19800 cut=m2
expect "a wait a fault explains is no starvation" 0 "starved=0"

run hang
proc 101 m1
sec 101 soak_a 5 100 110 200
echo "$(ns 9000) hang 101" >>"$D/nemesis.log"
expect "a worker still running after the end is a defect" 1 "DEFECT: pid 101 (m1) still ran"

run crash
proc 101 m1
sec 101 soak_a 5 100 110 200; died 101 300 signal 11
expect "a worker killed by SIGSEGV is a defect" 1 "DEFECT: pid 101 (m1) ended at +0.300s with signal 11"

run pid_reused
echo "0 spawn 101 m1 $D/w00-m1.log" >>"$D/nemesis.log"
printf '1 start 101 m1\n%s want 101 0 soak_a lock\n%s enter 101 0 soak_a 5\n' "$(ns 100)" "$(ns 110)" >"$D/w00-m1.log"
fault 1 kill-holder 300 300 target=101 host=m1 state=inside
died 101 301 signal 9
echo "$(ns 400) spawn 101 m2 $D/w01-m2.log" >>"$D/nemesis.log"
printf '%s start 101 m2\n' "$(ns 401)" >"$D/w01-m2.log"
w=$D/w01-m2.log
echo "$(ns 500) want 101 0 soak_a lock" >>"$w"; echo "$(ns 510) enter 101 0 soak_a 6" >>"$w"
echo "$(ns 520) exit 101 0 soak_a 6" >>"$w"; echo "$(ns 521) unlocked 101 0 soak_a 0" >>"$w"
died 101 900 exit 0
expect "a pid given out again is another process" 0 "processes: 2" "killed by the nemesis 1" \
    "PID + 10000000"

run glibc_abort
proc 101 m1
sec 101 soak_a 5 100 110 200; died 101 300 signal 6
echo "free(): double free detected in tcache 2" >"$D/w-101.err"
expect "an abort with glibc's words is a crash, not a lost lease" 1 \
    "DEFECT: crash: pid 101 (m1) aborted at +0.300s saying \"free(): double free" "crashes 1"

run foreign_kill
proc 101 m1
sec 101 soak_a 5 100 110 200; died 101 300 signal 9
expect "a SIGKILL the nemesis did not send is a defect" 1 "not by the nemesis"

run lock_error
proc 101 m1
echo "$(ns 100) want 101 0 soak_a lock" >>"$D/w-101.log"
echo "$(ns 200) fail 101 0 soak_a 11" >>"$D/w-101.log"
expect "EAGAIN from a lock under on_redis_down = block is a defect" 1 "which this mode never returns"

DOWN=error; run lock_error_mode; DOWN=
proc 101 m1
echo "$(ns 100) want 101 0 soak_a lock" >>"$D/w-101.log"
echo "$(ns 200) fail 101 0 soak_a 11" >>"$D/w-101.log"
expect "EAGAIN under on_redis_down = error is no defect" 0 "EAGAIN 1"

run torn_record
proc 101 m1
sec 101 soak_a 5 100 110 200
printf '%s want 101 0 so' "$(ns 300)" >>"$D/w-101.log"
expect "a record cut short by a kill is skipped" 0 "sections: 1"

# etcd: the nemesis marks stall=all only on a fault of the leader, of a
# member while another is out (the majority lost) or of the whole cluster
run etcd_abort_follower_stop
proc 101 m1
sec 101 soak_a 5 100 110; died 101 2000 signal 6
fault 1 member-stop 200 1700 member=2 leader=0 dur=1500
expect "etcd: an abort inside while a follower is stopped is a defect" 1 \
    "DEFECT: abort of pid 101 (m1) at +2.000s inside its section" "member-stop#1"

run etcd_abort_leader_stop
proc 101 m1
sec 101 soak_a 5 100 110; died 101 2000 signal 6
fault 1 member-stop 200 1700 member=0 leader=1 dur=1500 stall=all
expect "etcd: an abort inside while the leader is stopped past lease - margin - renew is expected" 0 \
    "aborts_expected=1"

run etcd_overlap_cluster_restart
proc 101 m1; proc 102 m2
sec 101 soak_a 5 100 110 1500; sec 102 soak_a 6 150 900 1600
fault 1 cluster-restart 300 800 down=200 cut=all stall=all
expect "etcd: an overlap after a restart of the whole cluster is a defect (it keeps its data)" 1 \
    "DEFECT: overlap on soak_a: pid 101" "cluster-restart#1"

run etcd_abort_back_to_back
proc 101 m1
sec 101 soak_a 5 100 1900; died 101 1905 signal 6
fault 1 member-stop 300 1050 member=1 leader=1 dur=750 stall=all
fault 2 stop-waiter 1000 1380 target=101 host=m1 dur=380 state=waiting
expect "an abort after a leader's stall and its own stop back to back (1080 ms) is expected" 0 \
    "aborts_expected=1"

run etcd_abort_apart
proc 101 m1
sec 101 soak_a 5 100 1900; died 101 1905 signal 6
fault 1 member-stop 300 1050 member=1 leader=1 dur=750 stall=all
fault 2 stop-waiter 1400 1780 target=101 host=m1 dur=380 state=waiting
expect "the same two faults 350 ms apart explain no abort" 1 \
    "DEFECT: abort of pid 101 (m1) at +1.905s inside its section"

# a hold granted while its thread is still in the lock call (etcd: the
# process lease's age counts, so a grant right after an outage can be lost
# at once): no section names its token
run abort_in_lock_call
proc 101 m1
echo "$(ns 100) want 101 0 soak_a lock" >>"$D/w-101.log"
died 101 1900 signal 6
fault 1 cluster-restart 300 1600 down=200 cut=all stall=all
echo "dmutex[101]: error: lost the lease of lock soak_a (owner x:1, fencing token 9) while held: no renewal succeeded in time; last renewal succeeded 1850 ms ago (lease 2000 ms); lost leases in this process: 1; aborting before another process can enter (on_lease_lost = \"abort\")" >"$D/w-101.err"
expect "an abort for a hold granted in the lock call, after a long stall, is expected" 0 \
    "aborts_expected=1"

run abort_in_lock_call_no_fault
proc 101 m1
echo "$(ns 100) want 101 0 soak_a lock" >>"$D/w-101.log"
died 101 1900 signal 6
echo "dmutex[101]: error: lost the lease of lock soak_a (owner x:1, fencing token 9) while held: no renewal succeeded in time; last renewal succeeded 1850 ms ago (lease 2000 ms); lost leases in this process: 1; aborting before another process can enter (on_lease_lost = \"abort\")" >"$D/w-101.err"
expect "the same abort with no fault around is a defect" 1 \
    "DEFECT: abort of pid 101 (m1) at +1.900s for a hold of soak_a granted to its lock call"

mkdir -p "$T/empty"
"$CHECK" "$T/empty" >"$T/empty/out" 2>&1
[ $? = 2 ] && ok "a directory without a nemesis log is an error (exit 2)" ||
    bad "a directory without a nemesis log is an error (exit 2)" "$(cat "$T/empty/out")"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
