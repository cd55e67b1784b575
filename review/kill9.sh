#!/bin/bash
# kill -9 of a reader holder, then a writer elsewhere; kill -9 of a writer holder, then a reader
cd $(dirname $0); . ./env.sh; mkcfg c7.cfg 'lease_ms = 2000;'
export SHMF=/dev/shm/rvw.k9.$$; rm -f $SHMF
DMUTEX_CONFIG=$PWD/c7.cfg LD_PRELOAD=$SHIM ./rwa rloop 30 3 50 > out.k9.r 2>&1 & A=$!
sleep 1.5; kill -9 $A; wait $A 2>/dev/null
DMUTEX_CONFIG=$PWD/c7.cfg LD_PRELOAD=$SHIM timeout 20 ./rwa wr 100 > out.k9.w 2>&1; cat out.k9.w
DMUTEX_CONFIG=$PWD/c7.cfg LD_PRELOAD=$SHIM ./rwa wr 30000 > out.k9.w2 2>&1 & A=$!
sleep 1.5; kill -9 $A; wait $A 2>/dev/null; cat out.k9.w2
DMUTEX_CONFIG=$PWD/c7.cfg LD_PRELOAD=$SHIM timeout 20 ./rwa rloop 1 1 10 > out.k9.r2 2>&1; cat out.k9.r2
redis-cli -p $R keys '*'; rm -f $SHMF; rstop
