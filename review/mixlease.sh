#!/bin/bash
# A (lease_ms 10000) holds a read lock; B (lease_ms 1000) takes and gives back one
# read lock meanwhile; C (lease_ms 10000) then write-locks: it should wait for A.
cd $(dirname $0); . ./env.sh
mkcfg long.cfg "lease_ms = 10000; on_lease_lost = \"warn\";"
mkcfg short.cfg "lease_ms = 1000;"
export SHMF=/dev/shm/rvw.ml.$$; rm -f $SHMF
DMUTEX_CONFIG=$PWD/long.cfg LD_PRELOAD=$SHIM ./rwa sloop 5 1 0 7000 > out.ml.A 2>&1 & A=$!
sleep 1
DMUTEX_CONFIG=$PWD/short.cfg LD_PRELOAD=$SHIM ./rwa rd1 > out.ml.B 2>&1; cat out.ml.B
echo "readers key ttl after B: $(redis-cli -p $R pttl 'dmutex:{rw}:readers') ms"
sleep 1.5
echo "readers after 1.5 s: $(redis-cli -p $R zrange 'dmutex:{rw}:readers' 0 -1 withscores | tr '\n' ' ')"
DMUTEX_CONFIG=$PWD/long.cfg LD_PRELOAD=$SHIM timeout 20 ./rwa sloop 1 0 1 100 > out.ml.C 2>&1
wait $A
echo "== A"; cat out.ml.A; echo "== C"; cat out.ml.C; rm -f $SHMF; rstop
