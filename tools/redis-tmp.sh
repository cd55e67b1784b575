# tools/redis-tmp.sh: a private, throw-away redis-server for tests, the demo
# and benchmarks. POSIX sh; source it, do not run it:
#
#   . tools/redis-tmp.sh
#   trap 'redis_tmp_stop' EXIT          # the caller owns the clean-up...
#   trap 'exit 130' INT; trap 'exit 143' TERM   # ...and dash runs EXIT traps
#   trap 'exit 129' HUP; trap 'exit 141' PIPE   # on signals only this way
#                                       # (PIPE: `script | head` kills it so)
#   redis_tmp_start || exit 1           # or: redis_tmp_start 127.0.0.1 10.213.0.1
#   redis-cli -p "$REDIS_TMP_PORT" ping
#   redis_tmp_stop                      # idempotent; the trap may call it again
#
# redis_tmp_start [BIND_ADDR...]
#   Starts redis-server on a free TCP port, bound to the given addresses
#   (default 127.0.0.1), plus a unix socket, with no persistence, protected
#   mode off, and its dir and log in a new private temp dir. It never uses a
#   fixed port or the system service: it picks a random port that nothing
#   listens on, starts, and waits until the server it started (not another
#   one that won the port) answers a PING there; if the bind failed it
#   retries with another port. Returns 0 and exports:
#     REDIS_TMP_PORT  the TCP port
#     REDIS_TMP_PID   the server's pid (a child of the calling shell)
#     REDIS_TMP_DIR   its dir: redis.log, redis.sock
#     REDIS_TMP_SOCK  the unix socket path
#   On failure returns 1, says why on stderr (with the log's tail) and leaves
#   nothing behind. REDIS_TMP_PID and REDIS_TMP_DIR are set as soon as the
#   process and dir exist, so a trap firing mid-start still cleans up.
#   Extra server options may be passed in REDIS_TMP_OPTS (word-split), e.g.
#   REDIS_TMP_OPTS='--requirepass secret --maxclients 20000'.
#   Call it in the current shell, not in $(...), or the exports are lost.
#   The server is a child of the calling shell: a bare `wait` waits for it
#   too (forever), so wait for your own pids by number.
#   One server per shell at a time; to run several, save the four variables
#   after each start and restore them before each redis_tmp_stop.
#
#   The new server is declared to have lost no lock data (redis_tmp_fresh)
#   for namespace ${REDIS_TMP_FRESH_NS:-dmutex}: locks new to it are granted
#   at once, not a lease after its start.
#
# redis_tmp_fresh [NAMESPACE]
#   What `dmutex fresh` does, for the server started (default namespace
#   dmutex): its run_id in NAMESPACE:intact. Best effort (a server that
#   wants a password is left as it is).
#
# redis_tmp_stop
#   SIGTERM, waits up to 2 s, then SIGKILL; reaps the process and removes the
#   dir. Safe to call twice or when nothing was started.
#
# Helper names start with _redis_tmp and variables with _rt_ so that sourcing
# this file does not clobber the caller's own.

REDIS_TMP_STOP_WAIT_TENTHS=20    # SIGTERM grace period: 2 s
REDIS_TMP_READY_WAIT_TENTHS=100  # how long a start may take to answer: 10 s
REDIS_TMP_PORT_TRIES=20

# A random port in 20000..59999 (outside the usual ephemeral range
# 32768..60999 would be nicer but is too small; collisions are retried).
_redis_tmp_random_port() {
    _rt_r=$(od -An -N2 -tu2 /dev/urandom 2>/dev/null | tr -d ' ')
    [ -n "$_rt_r" ] || _rt_r=$$
    echo $((20000 + _rt_r % 40000))
}

# True when something already listens on TCP port $1 (any address). Without
# ss we cannot tell; the start itself then detects the clash.
_redis_tmp_port_busy() {
    command -v ss >/dev/null 2>&1 || return 1
    [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]
}

# True while pid $1 runs (a zombie, exited but not yet reaped, does not count).
_redis_tmp_alive() {
    kill -0 "$1" 2>/dev/null || return 1
    if [ -r "/proc/$1/stat" ]; then
        _rt_state=$(sed 's/^.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null)
        [ "$_rt_state" != Z ] || return 1
    fi
    return 0
}

_redis_tmp_kill() {   # pid: TERM, grace period, KILL, reap
    [ -n "$1" ] || return 0
    kill -TERM "$1" 2>/dev/null
    _rt_n=0
    while _redis_tmp_alive "$1" && [ "$_rt_n" -lt "$REDIS_TMP_STOP_WAIT_TENTHS" ]; do
        sleep 0.1
        _rt_n=$((_rt_n + 1))
    done
    _redis_tmp_alive "$1" && kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    return 0
}

redis_tmp_start() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        echo "redis-tmp: redis-server and redis-cli are needed (apt-get install redis-server redis-tools)" >&2
        return 1
    fi
    if [ -n "${REDIS_TMP_PID:-}" ] && _redis_tmp_alive "$REDIS_TMP_PID"; then
        echo "redis-tmp: a server is already running (pid $REDIS_TMP_PID); redis_tmp_stop it first" >&2
        return 1
    fi
    [ $# -gt 0 ] || set -- 127.0.0.1
    # Ask on 127.0.0.1 when it is bound, else on the first address.
    _rt_ask=$1
    for _rt_a in "$@"; do [ "$_rt_a" = 127.0.0.1 ] && _rt_ask=127.0.0.1; done

    REDIS_TMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/redis-tmp.XXXXXX") || {
        echo "redis-tmp: cannot create a temp dir" >&2; return 1; }
    export REDIS_TMP_DIR
    REDIS_TMP_SOCK=$REDIS_TMP_DIR/redis.sock
    export REDIS_TMP_SOCK

    _rt_try=0
    while [ "$_rt_try" -lt "$REDIS_TMP_PORT_TRIES" ]; do
        _rt_try=$((_rt_try + 1))
        _rt_port=$(_redis_tmp_random_port)
        _redis_tmp_port_busy "$_rt_port" && continue
        : >"$REDIS_TMP_DIR/redis.log"
        # shellcheck disable=SC2086,SC2094  # OPTS is split on purpose; the
        # server appends to its log, nothing here reads it meanwhile
        redis-server --port "$_rt_port" --bind "$@" \
            --unixsocket "$REDIS_TMP_SOCK" --unixsocketperm 700 \
            --dir "$REDIS_TMP_DIR" --logfile "$REDIS_TMP_DIR/redis.log" \
            --save "" --appendonly no --protected-mode no --daemonize no \
            ${REDIS_TMP_OPTS:-} </dev/null >>"$REDIS_TMP_DIR/redis.log" 2>&1 &
        REDIS_TMP_PID=$!
        export REDIS_TMP_PID

        _rt_n=0
        while [ "$_rt_n" -lt "$REDIS_TMP_READY_WAIT_TENTHS" ]; do
            _redis_tmp_alive "$REDIS_TMP_PID" || break
            # Redis listens on TCP before it makes the unix socket and exits
            # when a TCP bind fails: our socket plus our live pid prove the
            # port is ours, not another server's that won it. NOAUTH is an
            # answer too (REDIS_TMP_OPTS may set --requirepass).
            if [ -S "$REDIS_TMP_SOCK" ] &&
                    redis-cli -h "$_rt_ask" -p "$_rt_port" ping 2>&1 |
                    grep -q 'PONG\|NOAUTH' &&
                    _redis_tmp_alive "$REDIS_TMP_PID"; then
                REDIS_TMP_PORT=$_rt_port
                export REDIS_TMP_PORT
                redis_tmp_fresh "${REDIS_TMP_FRESH_NS:-dmutex}"
                return 0
            fi
            sleep 0.1
            _rt_n=$((_rt_n + 1))
        done

        _redis_tmp_kill "$REDIS_TMP_PID"
        REDIS_TMP_PID=''
        if grep -q "Address already in use" "$REDIS_TMP_DIR/redis.log"; then
            continue
        fi
        echo "redis-tmp: redis-server did not start on port $_rt_port (bind $*); its log ends with:" >&2
        tail -n 5 "$REDIS_TMP_DIR/redis.log" | sed 's/^/  /' >&2
        redis_tmp_stop
        return 1
    done
    echo "redis-tmp: no free port found after $REDIS_TMP_PORT_TRIES tries" >&2
    redis_tmp_stop
    return 1
}

redis_tmp_fresh() {
    redis-cli -s "$REDIS_TMP_SOCK" EVAL "local id = string.match(redis.call('info', 'server'), 'run_id:(%x+)') redis.call('set', KEYS[1], id) return id" 1 "${1:-dmutex}:intact" >/dev/null 2>&1 || :
}

redis_tmp_stop() {
    _redis_tmp_kill "${REDIS_TMP_PID:-}"
    if [ -n "${REDIS_TMP_DIR:-}" ]; then
        rm -rf "$REDIS_TMP_DIR"
    fi
    REDIS_TMP_PID='' REDIS_TMP_DIR='' REDIS_TMP_PORT='' REDIS_TMP_SOCK=''
    return 0
}
