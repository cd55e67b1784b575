/* passthrough: what the shim costs a mutex it does not map. THREADS
 * threads each do N lock+unlock pairs of their own unmapped mutex (one
 * cache line each, so the threads do not share one) inside bench_loop(),
 * which callgrind's --toggle-collect can isolate. The benchmark maps the
 * 100 elements of `mapped` (never locked here) so that the registry is not
 * empty: a lookup must really probe the table, not take the "nothing
 * mapped" exit.
 *
 *   passthrough THREADS N [rw]  prints {"threads": T, "n": N, "ns_per_pair": x}
 *   (x: wall time of the slowest thread / N); with "rw", the pairs are
 *   rdlock+unlock of an unlisted pthread_rwlock_t each, in bench_rw_loop(). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define MAX_THREADS 16
#define MAPPED 100

pthread_mutex_t mapped[MAPPED];

static struct {
    pthread_mutex_t m;
    pthread_rwlock_t rw;
} __attribute__((aligned(64))) plain[MAX_THREADS];
static int rw;

static long iterations;
static pthread_barrier_t start;

__attribute__((noinline)) void bench_loop(pthread_mutex_t *m, long n)
{
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(m);
        pthread_mutex_unlock(m);
    }
}

__attribute__((noinline)) void bench_rw_loop(pthread_rwlock_t *l, long n)
{
    for (long i = 0; i < n; i++) {
        pthread_rwlock_rdlock(l);
        pthread_rwlock_unlock(l);
    }
}

static void *worker(void *arg)
{
    long i = (long)(intptr_t)arg;
    pthread_barrier_wait(&start);
    long long t = now_ns();
    if (rw)
        bench_rw_loop(&plain[i].rw, iterations);
    else
        bench_loop(&plain[i].m, iterations);
    return (void *)(intptr_t)(now_ns() - t);
}

int main(int argc, char **argv)
{
    rw = argc == 4 && strcmp(argv[3], "rw") == 0;
    if ((argc != 3 && !rw) || atoi(argv[1]) < 1 || atoi(argv[1]) > MAX_THREADS ||
        atol(argv[2]) < 1) {
        fprintf(stderr, "usage: passthrough THREADS(1..%d) N [rw]\n", MAX_THREADS);
        return 2;
    }
    int threads = atoi(argv[1]);
    iterations = atol(argv[2]);
    for (int i = 0; i < threads; i++) {
        pthread_mutex_init(&plain[i].m, NULL);
        pthread_rwlock_init(&plain[i].rw, NULL);
    }
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    pthread_t t[MAX_THREADS];
    for (int i = 1; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    long long worst = (long long)(intptr_t)worker((void *)(intptr_t)0);
    for (int i = 1; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        if ((long long)(intptr_t)r > worst)
            worst = (long long)(intptr_t)r;
    }
    printf("{\"threads\": %d, \"n\": %ld, \"ns_per_pair\": %.2f}\n", threads, iterations,
           (double)worst / (double)iterations);
    return 0;
}
