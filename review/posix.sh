#!/bin/bash
# single-process answers of rwlocks (posix) and listed conds (cpos), glibc vs the shim
cd $(dirname $0); . ./env.sh; mkcfg px.cfg
for p in posix cpos; do
  ./$p > out.$p.glibc 2>&1; DMUTEX_CONFIG=$PWD/px.cfg LD_PRELOAD=$SHIM ./$p > out.$p.shim 2>&1
  echo "## $p"; diff out.$p.glibc out.$p.shim && echo same
done; rstop
