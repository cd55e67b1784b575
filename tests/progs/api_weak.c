/* api_weak: how a program uses the explicit API of include/dmutex.h and still
 * runs without the shim. The two functions are declared weak: without
 * libdmutex.so preloaded they are NULL and the program uses its mutexes as
 * ordinary local ones; with it, dmutex_name makes a heap mutex cluster-wide
 * (no config entry needed for it) and dmutex_token gives the fencing token
 * of the current hold, to hand to a resource that checks it.
 *
 *   api_weak PORT KEY THREADS ITERS HOLD_US
 *
 * THREADS threads each run ITERS critical sections under the account's
 * mutex, incrementing a Redis counter non-atomically (GET, sleep, SET).
 * Prints "api absent" or "api name=RC" first, then for every section
 * "tok TOKEN COUNT" (COUNT: the value it read), then "done N" and
 * "after TOKEN" (dmutex_token once nothing is held; 0 with the shim).
 * Built with -Iinclude (tests/tests.mk), as a user would point at dmutex.h. */
#define _GNU_SOURCE
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmutex.h"
#include "prog.h"

#pragma weak dmutex_name
#pragma weak dmutex_token

struct account {
    long id;
    pthread_mutex_t lock;
};

static struct account *account;
static int port, iters, hold_us;
static const char *key;

static void *worker(void *arg)
{
    (void)arg;
    redisContext *c = prog_connect("127.0.0.1", port);
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&account->lock);
        uint64_t token = dmutex_token ? dmutex_token(&account->lock) : 0;
        long v = prog_count_once(c, key, hold_us);
        pthread_mutex_unlock(&account->lock);
        say("tok %" PRIu64 " %ld", token, v);
    }
    redisFree(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: api_weak PORT KEY THREADS ITERS HOLD_US\n");
        return 2;
    }
    port = atoi(argv[1]);
    key = argv[2];
    int threads = atoi(argv[3]);
    iters = atoi(argv[4]);
    hold_us = atoi(argv[5]);

    account = calloc(1, sizeof *account);
    pthread_mutex_init(&account->lock, NULL);
    if (dmutex_name)
        say("api name=%d", dmutex_name(&account->lock, "account"));
    else
        say("api absent");

    if (threads > 16)
        threads = 16;
    say("done %d", prog_run_threads(threads, worker, NULL) * iters);
    say("after %" PRIu64, dmutex_token ? dmutex_token(&account->lock) : 0);
    pthread_mutex_destroy(&account->lock);
    free(account);
    return 0;
}
