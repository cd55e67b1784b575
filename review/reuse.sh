#!/bin/bash
# an init_site rwlock freed without destroy; its memory made an rwlock again by an
# unlisted function: it must not be cluster-wide (script calls counted after the marker)
cd $(dirname $0); . ./env.sh
printf 'programs = ( "heap" );\nredis = { host = "127.0.0.1"; port = %s; };\nrwlocks = ( { init_site = "rw_new"; name = "tables"; } );\n' $R > r.cfg
DMUTEX_CONFIG=$PWD/r.cfg LD_PRELOAD=$SHIM ./heap reuse > out.reuse 2>&1 & P=$!
for i in $(seq 50); do grep -q marker out.reuse 2>/dev/null && break; sleep 0.1; done
a=$(redis-cli -p $R info commandstats | grep -o 'cmdstat_evalsha:calls=[0-9]*')
wait $P
b=$(redis-cli -p $R info commandstats | grep -o 'cmdstat_evalsha:calls=[0-9]*')
cat out.reuse; echo "script calls before the reused lock's use: $a, after: $b"; rstop
