#!/bin/bash
# rwlock calls while the server is gone (port closed), per on_redis_down
cd $(dirname $0); . ./env.sh; rstop; sleep 0.3
for p in error local block; do
  mkcfg d.cfg "on_redis_down = \"$p\";"
  echo "## on_redis_down = $p"
  DMUTEX_CONFIG=$PWD/d.cfg LD_PRELOAD=$SHIM timeout 20 ./rwa down $([ $p != block ] && echo all) 2>&1 | grep -v "^dmutex.*error: lock rw" | cut -c1-160
done
