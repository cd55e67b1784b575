"""setnx_partner: redis-py's Lock (Debian's python3-redis) on lock NAME, as
a Python service beside a dmutex-mapped C program would take it: SET NAME
TOKEN NX PX, released with redis-py's compare-and-DEL. For test_interop.
Times are CLOCK_MONOTONIC ms (time.monotonic_ns), as interprog prints.

    python3 setnx_partner.py PORT NAME count KEY N HOLD_US
        N sections (timeout 10 s, retry every 2 ms): GET KEY, sleep
        HOLD_US, SET KEY +1 (the counter of tests/progs/counter.c); "done N"
    python3 setnx_partner.py PORT NAME hold TTL_MS [HOLD_MS]
        acquire with a TTL of TTL_MS, "held T"; then sleep until killed, or
        HOLD_MS and release: "releasing T" (before), "released T"
    python3 setnx_partner.py PORT NAME poll TTL_MS FOR_MS
        a non-blocking acquire every 2 ms for FOR_MS: "got T" (then
        release) or "never T"

Any redis error (WRONGTYPE...) is printed and ends it with status 1.
"""
import sys
import time

import redis


def mono_ms():
    return time.monotonic_ns() // 1_000_000


def main():
    port, name, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    r = redis.Redis(host="127.0.0.1", port=port)
    try:
        if mode == "count":
            key, n, hold_us = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
            lock = r.lock(name, timeout=10, sleep=0.002)
            for _ in range(n):
                lock.acquire()
                v = int(r.get(key) or 0)
                if hold_us:
                    time.sleep(hold_us / 1e6)
                r.set(key, v + 1)
                lock.release()
            print("done %d" % n, flush=True)
        elif mode == "hold":
            lock = r.lock(name, timeout=int(sys.argv[4]) / 1000, sleep=0.002)
            lock.acquire()
            print("held %d" % mono_ms(), flush=True)
            if len(sys.argv) > 5:
                time.sleep(int(sys.argv[5]) / 1000)
                print("releasing %d" % mono_ms(), flush=True)
                lock.release()
                print("released %d" % mono_ms(), flush=True)
            else:
                while True:
                    time.sleep(1)
        elif mode == "poll":
            lock = r.lock(name, timeout=int(sys.argv[4]) / 1000)
            end = mono_ms() + int(sys.argv[5])
            while mono_ms() < end:
                if lock.acquire(blocking=False):
                    print("got %d" % mono_ms(), flush=True)
                    lock.release()
                    return
                time.sleep(0.002)
            print("never %d" % mono_ms(), flush=True)
        else:
            sys.exit("setnx_partner.py: unknown mode " + mode)
    except redis.exceptions.RedisError as e:
        print("redis error: %s" % e, flush=True)
        sys.exit(1)


main()
