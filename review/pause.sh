#!/bin/bash
# 3 processes (3 readers + 1 writer each, hold HOLD ms) for SECS s; at 3 s the server
# is made unresponsive: HOW = sleep (DEBUG SLEEP D), pause (CLIENT PAUSE D ms), stop (SIGSTOP D s), restart
cd $(dirname $0); . ./env.sh; mkcfg c8.cfg "lease_ms = ${LEASE:-2000}; on_lease_lost = \"${POLICY:-abort}\"; ${EXTRA}"
export SHMF=/dev/shm/rvw.p.$$; rm -f $SHMF
ARGS=("3 0" "2 1" "0 2"); for i in 1 2 3; do DMUTEX_CONFIG=$PWD/c8.cfg LD_PRELOAD=$SHIM timeout 90 ./rwa sloop ${SECS:-15} ${ARGS[$((i-1))]} ${HOLD:-10} > out.p.$i 2>&1 & done
sleep 3
case $HOW in
 sleep) redis-cli -p $R debug sleep ${D:-3} >/dev/null;;
 pause) redis-cli -p $R client pause $((${D:-3}*1000)) ${PMODE:-all} >/dev/null;;
 stop) kill -STOP $(cat $RDIR/r.pid); sleep ${D:-3}; kill -CONT $(cat $RDIR/r.pid);;
 restart) redis-cli -p $R shutdown nosave >/dev/null 2>&1; sleep ${D:-3}; redis-server --port $R --bind 127.0.0.1 --save '' --appendonly no --dir $RDIR --daemonize yes --pidfile $RDIR/r.pid --logfile $RDIR/r.log;;
esac
wait
for i in 1 2 3; do grep -E "sloop|conflict|abort|lost the lease" out.p.$i | cut -c1-200 | sort | uniq -c | sort -rn | head -n 5; done; rm -f $SHMF; rstop
