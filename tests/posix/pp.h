/* pp.h: what the helper programs of test_posix share (tests/progs/posixprog.c
 * and tests/posix/psx_host.c), over what every test program shares
 * (tests/progs/prog.h). Ordinary program code: nothing here knows of
 * dmutex.
 *
 * The exclusion checker: THREADS threads each run ITERS critical sections
 * under a caller-given enter/leave pair; a section reads a counter from
 * Redis, sleeps HOLD_US, and writes it back plus one. A lost update (two
 * sections overlapping) shows as a short final count. */
#ifndef PP_H
#define PP_H

#include "../progs/prog.h"

#define PP_MAX_THREADS 32

/* EXISTS of `key` (the tests pass the lock's Redis key): 1 while some
 * process holds the cluster lock. */
static inline long long pp_exists(redisContext *c, const char *key)
{
    redisReply *r = redisCommand(c, "EXISTS %s", key);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

/* EXISTS of `key` after an unlock: the shim writes the release and does
 * not wait for it (on_lease_lost = "abort"), so the server runs it a moment
 * after unlock returned. 0 as soon as the key is gone; 1 if it is still
 * there after PP_SETTLE_MS (the release never ran). */
#define PP_SETTLE_MS 10000
static inline long long pp_exists_settled(redisContext *c, const char *key)
{
    long long v = pp_exists(c, key);
    for (int i = 0; v == 1 && i < PP_SETTLE_MS; i++) {
        usleep(1000);
        v = pp_exists(c, key);
    }
    return v;
}

struct pp_counter {
    int port;
    const char *key;
    int iters, hold_us;
    int (*enter)(void *arg);        /* 0 or an errno */
    int (*leave)(void *arg);
    void *arg;
};

static inline void *pp_worker(void *p)
{
    const struct pp_counter *k = p;
    redisContext *c = prog_connect("127.0.0.1", k->port);
    for (int i = 0; i < k->iters; i++) {
        int rc = k->enter(k->arg);
        if (rc != 0) {
            say("enter failed: %s", ename(rc));
            exit(1);
        }
        prog_count_once(c, k->key, k->hold_us);
        if ((rc = k->leave(k->arg)) != 0) {
            say("leave failed: %s", ename(rc));
            exit(1);
        }
    }
    redisFree(c);
    return NULL;
}

/* Runs `threads` workers to the end; says "done N" (sections run). */
static inline void pp_run_counter(struct pp_counter *k, int threads)
{
    if (threads > PP_MAX_THREADS)
        threads = PP_MAX_THREADS;
    say("done %d", prog_run_threads(threads, pp_worker, k) * k->iters);
}

#endif
