/* trace_factory: heap mutexes made by a factory function, for
 * tests/trace.test.sh: `dmutex trace` must name them by the init_site
 * account_new, and the printed config must make the counter exact across
 * processes.
 *
 *   trace_factory HOST PORT KEY THREADS ITERATIONS [HOLD_US]
 * Makes two accounts; T threads each do N counted sections under the
 * first account's mutex (and lock the second one's too); prints "done N". */
#define _GNU_SOURCE
#include "prog.h"

struct account {
    pthread_mutex_t mu;
    long balance;
};

static struct account *accounts[2];
static const char *host, *key;
static int port, iters, hold_us;

/* Not inlined: init_site names the function the init call is made from. */
__attribute__((noinline)) struct account *account_new(void)
{
    struct account *a = calloc(1, sizeof *a);
    if (!a || pthread_mutex_init(&a->mu, NULL) != 0) {
        fprintf(stderr, "trace_factory: account_new failed\n");
        exit(1);
    }
    return a;
}

static void *worker(void *arg)
{
    (void)arg;
    redisContext *c = prog_connect(host, port);
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&accounts[0]->mu);
        prog_count_once(c, key, hold_us);
        accounts[0]->balance++;
        pthread_mutex_unlock(&accounts[0]->mu);
        pthread_mutex_lock(&accounts[1]->mu);
        accounts[1]->balance--;
        pthread_mutex_unlock(&accounts[1]->mu);
    }
    redisFree(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: trace_factory HOST PORT KEY THREADS ITERATIONS [HOLD_US]\n");
        return 2;
    }
    host = argv[1];
    port = atoi(argv[2]);
    key = argv[3];
    int nthreads = atoi(argv[4]);
    iters = atoi(argv[5]);
    hold_us = argc > 6 ? atoi(argv[6]) : 0;
    accounts[0] = account_new();
    accounts[1] = account_new();
    int ran = prog_run_threads(nthreads, worker, NULL);
    say("done %d", ran * iters);
    return 0;
}
