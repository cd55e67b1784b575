/* bench.h: what the benchmark programs (bench/cycle.c, rtt.c, condwake.c,
 * passthrough.c, many.c, names.c) share: the clock, sleeping, sorting and
 * a connection. Static inline, one copy per program; nothing here
 * knows of dmutex, and a program that does not connect to Redis does not
 * link hiredis (an unused static inline function leaves no reference). */
#ifndef DM_BENCH_H
#define DM_BENCH_H

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Nanoseconds on `clk` (CLOCK_MONOTONIC, or a CPU-time clock). */
static inline long long clock_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline long long now_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

/* Sleeps `ms` in full (a signal does not cut it short). */
static inline void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0)
        ;
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

/* qsort order of doubles. */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
