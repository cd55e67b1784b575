/* counter: the exclusion checker used by the integration tests. T threads
 * each do N critical sections under the global `counter_lock`; each
 * section reads a counter from Redis, waits a little, and writes it back
 * plus one: a lost update shows as a final count below the expected one.
 * The program knows nothing of dmutex.
 *
 *   counter HOST PORT KEY THREADS ITERATIONS [HOLD_US]
 * Exits 0 when every section ran; prints "done N". */
#define _GNU_SOURCE
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "prog.h"

pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t other_lock = PTHREAD_MUTEX_INITIALIZER;    /* never mapped */

static const char *host, *key;
static int port, iters, hold_us;

static void *worker(void *arg)
{
    (void)arg;
    redisContext *c = prog_connect(host, port);
    for (int i = 0; i < iters; i++) {
        if (pthread_mutex_lock(&counter_lock) != 0) {
            fprintf(stderr, "counter: lock failed\n");
            exit(1);
        }
        prog_count_once(c, key, hold_us);
        pthread_mutex_unlock(&counter_lock);
        pthread_mutex_lock(&other_lock);
        pthread_mutex_unlock(&other_lock);
    }
    redisFree(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: counter HOST PORT KEY THREADS ITERATIONS [HOLD_US]\n");
        return 2;
    }
    host = argv[1];
    port = atoi(argv[2]);
    key = argv[3];
    int threads = atoi(argv[4]);
    iters = atoi(argv[5]);
    hold_us = argc > 6 ? atoi(argv[6]) : 0;
    prog_run_threads(threads, worker, NULL);
    printf("done %d\n", threads * iters);
    return 0;
}
