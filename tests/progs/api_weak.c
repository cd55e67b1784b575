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
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dmutex.h"

#pragma weak dmutex_name
#pragma weak dmutex_token

struct account {
    long id;
    pthread_mutex_t lock;
};

static struct account *account;
static int port, iters, hold_us;
static const char *key;

static void line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void line(const char *fmt, ...)
{
    /* One write per line: processes share an output file. */
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0 && n < (int)sizeof buf) {
        ssize_t w = write(STDOUT_FILENO, buf, (size_t)n);
        (void)w;
    }
}

static void *worker(void *arg)
{
    (void)arg;
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        fprintf(stderr, "api_weak: cannot connect to redis\n");
        exit(1);
    }
    for (int i = 0; i < iters; i++) {
        pthread_mutex_lock(&account->lock);
        uint64_t token = dmutex_token ? dmutex_token(&account->lock) : 0;
        redisReply *r = redisCommand(c, "GET %s", key);
        long v = r && r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
        freeReplyObject(r);
        if (hold_us)
            usleep((useconds_t)hold_us);
        freeReplyObject(redisCommand(c, "SET %s %ld", key, v + 1));
        pthread_mutex_unlock(&account->lock);
        line("tok %" PRIu64 " %ld\n", token, v);
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
        line("api name=%d\n", dmutex_name(&account->lock, "account"));
    else
        line("api absent\n");

    pthread_t t[16];
    if (threads > 16)
        threads = 16;
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    line("done %d\n", threads * iters);
    line("after %" PRIu64 "\n", dmutex_token ? dmutex_token(&account->lock) : 0);
    pthread_mutex_destroy(&account->lock);
    free(account);
    return 0;
}
