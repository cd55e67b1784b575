#!/bin/bash
# reader-preference deadlock: process A (rwa dl) holds a read share in T1, T1 waits
# for a mutex that T2 holds while T2 rdlocks; process B's writer queues meanwhile.
cd $(dirname $0); . ./env.sh; mkcfg c1.cfg 'lease_ms = 2000;'
DMUTEX_CONFIG=$PWD/c1.cfg LD_PRELOAD=$SHIM timeout 20 ./rwa dl 2000 > out.dl.A 2>&1 & A=$!
sleep 1
DMUTEX_CONFIG=$PWD/c1.cfg LD_PRELOAD=$SHIM timeout 20 ./rwa wr 100 > out.dl.B 2>&1 & B=$!
wait $A; echo "A exit $?"; wait $B; echo "B exit $?"
cat out.dl.A out.dl.B; rstop
