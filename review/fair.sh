#!/bin/bash
# writer fairness: 3 writer processes (1 thread each, hold 20 ms, gap 0) for 8 s + 1 reader process
cd $(dirname $0); . ./env.sh; mkcfg c6.cfg 'lease_ms = 2000;'
export SHMF=/dev/shm/rvw.fair.$$; rm -f $SHMF
for i in 1 2 3; do WGAP=0 DMUTEX_CONFIG=$PWD/c6.cfg LD_PRELOAD=$SHIM timeout 60 ./rwa wloop 8 1 20 > out.fair.$i 2>&1 & done
DMUTEX_CONFIG=$PWD/c6.cfg LD_PRELOAD=$SHIM timeout 60 ./rwa rloop 8 2 5 > out.fair.r 2>&1 &
wait; cat out.fair.*; redis-cli -p $R info commandstats | grep -i evalsha; rm -f $SHMF; rstop
