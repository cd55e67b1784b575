# source: starts a private redis-server on a free port; R=port, RDIR=dir; rstop stops it
RDIR=$(mktemp -d /tmp/rvw.XXXXXX)
R=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
redis-server --port $R --bind 127.0.0.1 --save '' --appendonly no --dir $RDIR --daemonize yes --pidfile $RDIR/r.pid --logfile $RDIR/r.log
for i in $(seq 50); do redis-cli -p $R ping >/dev/null 2>&1 && break; sleep 0.1; done
rstop() { kill $(cat $RDIR/r.pid) 2>/dev/null; }
SHIM=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/libdmutex.so
mkcfg() { # mkcfg FILE EXTRA...
  f=$1; shift; printf 'programs = ( "rwa", "cva", "posix", "cpos" );\nredis = { host = "127.0.0.1"; port = %s; };\n%s\nrwlocks = ( { symbol = "rw"; } );\nmutexes = ( { symbol = "cm"; } );\nconds = ( { symbol = "cv"; } );\n' $R "$*" > $f; }
