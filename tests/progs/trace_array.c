/* trace_array: a mutex inside a global array of structs, for
 * tests/trace.test.sh: `dmutex trace` must name it as g_slots with its
 * offset, and the printed config must make the counter exact across
 * processes.
 *
 *   trace_array HOST PORT KEY THREADS ITERATIONS [HOLD_US]
 * T threads each do N counted sections under g_slots[2].lock; prints
 * "done N". */
#define _GNU_SOURCE
#include "prog.h"

struct slot {
    long id;
    pthread_mutex_t lock;
    long uses;
};

struct slot g_slots[4] = {
    { 0, PTHREAD_MUTEX_INITIALIZER, 0 }, { 1, PTHREAD_MUTEX_INITIALIZER, 0 },
    { 2, PTHREAD_MUTEX_INITIALIZER, 0 }, { 3, PTHREAD_MUTEX_INITIALIZER, 0 },
};
static const char *host, *key;
static int port, iters, hold_us;

static void *worker(void *arg)
{
    (void)arg;
    redisContext *c = prog_connect(host, port);
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&g_slots[2].lock);
        prog_count_once(c, key, hold_us);
        g_slots[2].uses++;
        pthread_mutex_unlock(&g_slots[2].lock);
    }
    redisFree(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: trace_array HOST PORT KEY THREADS ITERATIONS [HOLD_US]\n");
        return 2;
    }
    host = argv[1];
    port = atoi(argv[2]);
    key = argv[3];
    int nthreads = atoi(argv[4]);
    iters = atoi(argv[5]);
    hold_us = argc > 6 ? atoi(argv[6]) : 0;
    int ran = prog_run_threads(nthreads, worker, NULL);
    say("done %d", ran * iters);
    return 0;
}
