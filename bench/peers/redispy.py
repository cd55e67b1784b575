"""The peers' benchmark worker for Python: the same steps as bench/cycle.c
`run`, with redis-py's Lock (Debian's python3-redis).

    python3 redispy.py PORT KEY HOLD_US default|1ms

Warm-up cycles for 0.3 s, then "ready"; waits for "go DEADLINE_NS" on stdin
(CLOCK_MONOTONIC, as time.monotonic_ns), then repeats lock; INCR KEY; sleep
HOLD_US; unlock until the deadline. Prints {"acq": [[t0, t1, t2, t3], ...],
"fail": 0, "censored": []} and waits for end of file on stdin.

Retry settings: "default" keeps redis-py's (sleep = 0.1 s between attempts,
blocking without a timeout); "1ms" sleeps 1 ms. The lease (timeout) is 30 s,
as dmutex's default lease_ms.
"""
import json
import sys
import time

import redis

LEASE_S = 30
WARMUP_NS = 300_000_000


def main():
    port, key, hold_us, retry = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    r = redis.Redis(host="127.0.0.1", port=int(port))
    kwargs = {"timeout": LEASE_S}
    if retry == "1ms":
        kwargs["sleep"] = 0.001
    lock = r.lock(key + ":lock", **kwargs)
    hold = hold_us / 1e6
    now = time.monotonic_ns

    warm_end = now() + WARMUP_NS   # connection, scripts
    while True:
        lock.acquire()
        r.incr(key)
        lock.release()
        if now() >= warm_end:
            break
    print("ready", flush=True)
    go = sys.stdin.readline().split()
    if len(go) != 2 or go[0] != "go":
        sys.exit("redispy.py: expected \"go DEADLINE_NS\"")
    deadline = int(go[1])
    acq = []
    while now() < deadline:
        t0 = now()
        lock.acquire()
        t1 = now()
        r.incr(key)
        if hold:
            time.sleep(hold)
        t2 = now()
        lock.release()
        acq.append((t0, t1, t2, now()))
    print(json.dumps({"fail": 0, "censored": [], "acq": acq}), flush=True)
    for _ in sys.stdin:
        pass


if __name__ == "__main__":
    main()
