/* bench.h: what the benchmark programs (bench/cycle.c, rtt.c,
 * passthrough.c) share. Static inline, one copy per program; nothing here
 * knows of dmutex, and a program that does not connect to Redis does not
 * link hiredis (an unused static inline function leaves no reference). */
#ifndef DM_BENCH_H
#define DM_BENCH_H

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* A connection to host:port, or program `prog` says why and exits 1. */
static inline redisContext *connect_or_die(const char *prog, const char *host, int port)
{
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) {
        fprintf(stderr, "%s: connect %s:%d: %s\n", prog, host, port,
                c ? c->errstr : "out of memory");
        exit(1);
    }
    return c;
}

/* qsort order of long longs. */
static inline int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

#endif
