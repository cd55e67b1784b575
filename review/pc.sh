#!/bin/bash
# 2 consumer processes x N items, 1 producer of 2N items (signal), gap GAP ms;
# RESTART=1: redis restarted (same port) in the middle.
cd $(dirname $0); . ./env.sh; mkcfg c3.cfg "lease_ms = 2000; ${EXTRA}"
export SHMF=/dev/shm/rvw.pc.$$; rm -f $SHMF
N=${N:-100}
for i in 1 2; do DMUTEX_CONFIG=$PWD/c3.cfg LD_PRELOAD=$SHIM timeout ${TO:-60} ./cva consume $N $CTO > out.pc.c$i 2>&1 & done
sleep 1
DMUTEX_CONFIG=$PWD/c3.cfg LD_PRELOAD=$SHIM timeout ${TO:-60} ./cva produce $((2*N)) ${GAP:-10} $BC > out.pc.p 2>&1 & P=$!
if [ -n "$RESTART" ]; then sleep ${RESTART}; redis-cli -p $R shutdown nosave >/dev/null 2>&1; sleep ${DOWN:-1}; redis-server --port $R --bind 127.0.0.1 --save '' --appendonly no --dir $RDIR --daemonize yes --pidfile $RDIR/r.pid --logfile $RDIR/r.log; fi
wait
for f in out.pc.c1 out.pc.c2 out.pc.p; do echo "== $f"; tail -n 4 $f; done; rm -f $SHMF; rstop
