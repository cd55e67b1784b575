#!/bin/bash
# timed cond waits (deadline TO ms, local mutex) while the server sleeps (DEBUG SLEEP) or is down
cd $(dirname $0); . ./env.sh; mkcfg c4.cfg "${EXTRA}"
export SHMF=/dev/shm/rvw.tw.$$; rm -f $SHMF
[ "$HOW" = stopfirst ] && kill -STOP $(cat $RDIR/r.pid)
DMUTEX_CONFIG=$PWD/c4.cfg LD_PRELOAD=$SHIM timeout 60 ./cva tw ${TO:-200} ${CNT:-40} ${CK:-r} > out.tw 2>&1 & P=$!
sleep 1
case $HOW in
 sleep) redis-cli -p $R debug sleep ${SECS:-5} >/dev/null;;
 pause) redis-cli -p $R client pause $((${SECS:-5}*1000)) all >/dev/null;;
 stopfirst) sleep ${SECS:-5}; kill -CONT $(cat $RDIR/r.pid);;
 stop) kill -STOP $(cat $RDIR/r.pid); sleep ${SECS:-5}; kill -CONT $(cat $RDIR/r.pid);;
esac
wait $P; echo "rc $?"; grep -v "^$" out.tw | tail -n 12; rm -f $SHMF; rstop
