#!/bin/bash
cd $(dirname $0); . ./env.sh
printf 'programs = ( "heap" );\nredis = { host = "127.0.0.1"; port = %s; };\nlease_ms = 2000;\nrwlocks = ( { init_site = "rw_new"; name = "tables"; } );\n' $R > c9.cfg
DMUTEX_CONFIG=$PWD/c9.cfg LD_PRELOAD=$SHIM ./heap destroy-held 12 > out.heap.a 2>&1 & A=$!
sleep 1
DMUTEX_CONFIG=$PWD/c9.cfg LD_PRELOAD=$SHIM ./heap wr 8 > out.heap.b 2>&1
cat out.heap.a out.heap.b; redis-cli -p $R zrange 'dmutex:{tables}:readers' 0 -1 withscores
kill $A; wait $A; rstop
