#!/bin/bash
# D1 for a mutex with cache = true: A locks/unlocks cm (hold 5 ms, gap GAP ms) and is
# SIGSTOPped past its lease; B locks cm and holds 2 s; A continues.
cd $(dirname $0); . ./env.sh
printf 'programs = ( "cva" );\nredis = { host = "127.0.0.1"; port = %s; };\nlease_ms = 1000;\non_lease_lost = "%s";\nmutexes = ( { symbol = "cm"; cache = true; } );\n' $R ${POLICY:-warn} > m.cfg
export SHMF=/dev/shm/rvw.m.$$; rm -f $SHMF
DMUTEX_CONFIG=$PWD/m.cfg LD_PRELOAD=$SHIM ./cva mloop 8 5 ${GAP:-20} > out.m.A 2>&1 & A=$!
sleep 1.5; kill -STOP $A
DMUTEX_CONFIG=$PWD/m.cfg LD_PRELOAD=$SHIM ./cva mloop 1 2000 0 > out.m.B 2>&1 & B=$!
sleep 2; kill -CONT $A
wait $A; wait $B
echo "== A"; grep -v "^$" out.m.A | head; echo "== B"; cat out.m.B; rm -f $SHMF; rstop
