/* rwcycle: the read-write lock figure's worker (bench/driver.py,
 * fig_rwlock), an ordinary pthread program that knows nothing of dmutex.
 * It locks the global `bench_rw`; the benchmark makes it a cluster-wide
 * rwlock with LD_PRELOAD and a config listing it in `rwlocks`.
 *
 *   rwcycle read HOST PORT KEY HOLD_US START_NS END_NS
 *       rdlock; GET KEY; sleep HOLD_US; unlock, again and again until
 *       END_NS (CLOCK_MONOTONIC), counting the sections that began at or
 *       after START_NS (the others are the warm-up)
 *   rwcycle write HOST PORT KEY HOLD_US START_NS END_NS
 *       wrlock; INCR KEY; sleep HOLD_US; unlock; sleep GAP_MS (a writer
 *       that writes now and then, not one that queues all the time)
 *
 * Prints {"n": sections counted, "ns": END_NS - START_NS}. */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define GAP_MS 10       /* the writer's pause between two writes */

pthread_rwlock_t bench_rw = PTHREAD_RWLOCK_INITIALIZER;

int main(int argc, char **argv)
{
    if (argc != 8 || (strcmp(argv[1], "read") != 0 && strcmp(argv[1], "write") != 0)) {
        fprintf(stderr, "usage: rwcycle read|write HOST PORT KEY HOLD_US START_NS END_NS\n");
        return 2;
    }
    int write = strcmp(argv[1], "write") == 0;
    redisContext *c = connect_or_die("rwcycle", argv[2], atoi(argv[3]));
    const char *key = argv[4];
    long hold_us = atol(argv[5]);
    long long start = atoll(argv[6]), end = atoll(argv[7]);
    long long n = 0;
    for (long long t; (t = now_ns()) < end;) {
        if ((write ? pthread_rwlock_wrlock(&bench_rw) : pthread_rwlock_rdlock(&bench_rw)) != 0) {
            fprintf(stderr, "rwcycle: lock failed\n");
            return 1;
        }
        redisReply *r = write ? redisCommand(c, "INCR %s", key) : redisCommand(c, "GET %s", key);
        if (!r) {
            fprintf(stderr, "rwcycle: %s\n", c->errstr);
            return 1;
        }
        freeReplyObject(r);
        if (hold_us)
            usleep((useconds_t)hold_us);
        pthread_rwlock_unlock(&bench_rw);
        if (t >= start)
            n++;
        if (write)
            sleep_ms(GAP_MS);
    }
    printf("{\"n\": %lld, \"ns\": %lld}\n", n, end - start);
    redisFree(c);
    return 0;
}
