#!/bin/bash
# A: 4 reader threads looping (hold 5 ms); B: a writer looping (hold 300 ms).
# A is SIGSTOPped for STOP seconds (> lease 1000 ms), then continued.
cd $(dirname $0); . ./env.sh; mkcfg c2.cfg "lease_ms = 1000; on_lease_lost = \"${POLICY:-warn}\";"
export SHMF=/dev/shm/rvw.stop.$$; rm -f $SHMF
DMUTEX_CONFIG=$PWD/c2.cfg LD_PRELOAD=$SHIM timeout 40 ./rwa rloop 12 4 ${RHOLD:-5} > out.stop.A 2>&1 & A=$!
DMUTEX_CONFIG=$PWD/c2.cfg LD_PRELOAD=$SHIM timeout 40 ./rwa wloop 12 1 300 > out.stop.B 2>&1 & B=$!
sleep 3; AP=$(pgrep -P $A); kill -STOP $AP; sleep ${STOP:-3}; kill -CONT $AP
wait $A; echo "A exit $?"; wait $B; echo "B exit $?"
grep -v "^$" out.stop.A | tail -15; echo ---; tail -8 out.stop.B; rm -f $SHMF; rstop
