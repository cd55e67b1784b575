#!/bin/bash
# A: 4 reader threads looping (hold RHOLD ms), alone: it holds the read hold.
# A is SIGSTOPped, B's writer loop starts (hold 300 ms, gap WGAP), A resumes after STOP s.
cd $(dirname $0); . ./env.sh; mkcfg c2.cfg "lease_ms = 1000; on_lease_lost = \"${POLICY:-warn}\";"
export SHMF=/dev/shm/rvw.stop.$$; rm -f $SHMF
DMUTEX_CONFIG=$PWD/c2.cfg LD_PRELOAD=$SHIM ./rwa rloop 10 4 ${RHOLD:-50} > out.stop2.A 2>&1 & A=$!
sleep 1.5; kill -STOP $A
DMUTEX_CONFIG=$PWD/c2.cfg LD_PRELOAD=$SHIM ./rwa wloop 8 1 300 > out.stop2.B 2>&1 & B=$!
sleep ${STOP:-3}; kill -CONT $A
wait $A; echo "A exit $?"; wait $B; echo "B exit $?"
grep -v "^$" out.stop2.A | tail -15; echo ---; tail -8 out.stop2.B; rm -f $SHMF; rstop
