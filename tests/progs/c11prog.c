/* c11prog: a C11 <threads.h> program for tests/test_c11.c, which maps
 * c11_lock (mtx_plain), rec_lock (mtx_plain | mtx_recursive) and the
 * mtx_t box_new() initialises (an init_site), and lists the cnd_t ready and
 * the one box_new() initialises, by config. It locks with mtx_* and waits
 * with cnd_* only, never a pthread call, and knows nothing of dmutex but
 * the weak dmutex_token (a glibc mtx_t is a pthread_mutex_t). Its shared
 * state lives in a data redis-server (HOST PORT), under keys PREFIX:*.
 *
 *   c11prog MODE HOST PORT PREFIX [ARGS...]   (extra trailing words ignored)
 *
 * C11 results are printed by name: thrd_success, thrd_busy, thrd_timedout,
 * thrd_error, thrd_nomem. Every wait that a test expects to be woken is a
 * cnd_timedwait of WAIT_MS (30 s): a timeout prints "timeout" and the
 * program exits 3, so a wake-up that never crossed processes fails the
 * test.
 *
 * Modes:
 *   count T N US      T threads each do N sections under c11_lock: GET
 *                     PREFIX:n, sleep US microseconds, SET it plus one (an
 *                     overlap loses an update): "done T*N"; a lock or
 *                     unlock that is not thrd_success: "lock RC", exit 1
 *   count-rec T N US  the same under rec_lock, locked twice per section
 *   count-heap T N US the same under the mtx_t of one box_new() box
 *   waitgo [heap]     under c11_lock: INCR PREFIX:waiting, then wait on
 *                     ready (heap: on the cnd_t of a box_new() box, with
 *                     its mtx_t) until PREFIX:go is set: "woken RC"
 *   go N MODE [heap]  when PREFIX:waiting reaches N: under c11_lock (heap:
 *                     a box's mtx_t) SET PREFIX:go and MODE (signal |
 *                     broadcast) ready (heap: a box's cnd_t): "sent RC"
 *   hold FILE         locks c11_lock, and rec_lock twice, SETs PREFIX:held,
 *                     waits for FILE, unlocks all: "held", then "unlocked RC"
 *   try MS            waits for PREFIX:held, then: mtx_trylock and an
 *                     MS-millisecond mtx_timedlock of c11_lock and of
 *                     rec_lock: "plain trylock RC", "plain timedlock RC",
 *                     "rec trylock RC", "rec timedlock RC"
 *   timedwait MS      locks c11_lock, one MS-millisecond cnd_timedwait on
 *                     ready nobody signals: "timedwait RC token T" (T:
 *                     dmutex_token of c11_lock after it; 0 without the
 *                     shim or without a cluster hold), unlocks
 *   once              mtx_lock and mtx_unlock of c11_lock: "lock RC unlock RC"
 *   destroy           locks a box_new() box's mtx_t, destroys it, has main
 *                     (no init_site) mtx_init it again and locks it: "heap
 *                     token T1 after destroy T2" (dmutex_token in each hold) */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "prog.h"

uint64_t dmutex_token(void *m);
#pragma weak dmutex_token

mtx_t c11_lock, rec_lock;
cnd_t ready;

#define WAIT_MS 30000

/* A heap object with its own C11 mutex and condition variable, both made
 * by box_new (an init_site of the test's config, for mutexes and conds). */
struct box {
    mtx_t lock;
    cnd_t cond;
};

static const char *host, *prefix;
static int port;
static int iters, hold_us;
static mtx_t *count_lock;
static int count_twice;

static const char *thrd_name(int rc)
{
    switch (rc) {
    case thrd_success:
        return "thrd_success";
    case thrd_busy:
        return "thrd_busy";
    case thrd_timedout:
        return "thrd_timedout";
    case thrd_error:
        return "thrd_error";
    case thrd_nomem:
        return "thrd_nomem";
    default:
        return "?";
    }
}

/* Not inlined, and not ending in a tail call of cnd_init: both inits'
 * return addresses must be inside this function. */
__attribute__((noinline)) struct box *box_new(void)
{
    struct box *b = calloc(1, sizeof *b);
    if (!b || mtx_init(&b->lock, mtx_plain) != thrd_success || cnd_init(&b->cond) != thrd_success)
        exit(1);
    return b;
}

static char *key(const char *what)
{
    static __thread char k[8][128];
    static __thread unsigned next;
    char *s = k[next++ % 8];
    snprintf(s, sizeof k[0], "%s:%s", prefix, what);
    return s;
}

static long long get_int(redisContext *c, const char *k)
{
    redisReply *r = redisCommand(c, "GET %s", k);
    long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return v;
}

static void must(int rc, const char *what)
{
    if (rc != thrd_success) {
        say("%s %s", what, thrd_name(rc));
        exit(1);
    }
}

static void *count_worker(void *arg)
{
    (void)arg;
    redisContext *c = prog_connect(host, port);
    for (int i = 0; i < iters; i++) {
        must(mtx_lock(count_lock), "lock");
        if (count_twice)
            must(mtx_lock(count_lock), "lock again");
        prog_count_once(c, key("n"), hold_us);
        if (count_twice)
            must(mtx_unlock(count_lock), "unlock inner");
        must(mtx_unlock(count_lock), "unlock");
    }
    redisFree(c);
    return NULL;
}

static struct timespec in_ms(long ms)
{
    struct timespec t;
    timespec_get(&t, TIME_UTC);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: c11prog MODE HOST PORT PREFIX [ARGS...]\n");
        return 2;
    }
    const char *mode = argv[1];
    host = argv[2];
    port = atoi(argv[3]);
    prefix = argv[4];
    const char *a1 = argc > 5 ? argv[5] : "", *a2 = argc > 6 ? argv[6] : "";
    const char *a3 = argc > 7 ? argv[7] : "";
    must(mtx_init(&c11_lock, mtx_plain), "init");
    must(mtx_init(&rec_lock, mtx_plain | mtx_recursive), "init rec");
    must(cnd_init(&ready), "cnd_init");
    redisContext *c = prog_connect(host, port);

    if (strncmp(mode, "count", 5) == 0) {
        count_lock = strcmp(mode, "count-rec") == 0 ? &rec_lock
                   : strcmp(mode, "count-heap") == 0 ? &box_new()->lock : &c11_lock;
        count_twice = count_lock == &rec_lock;
        int threads = atoi(a1);
        iters = atoi(a2);
        hold_us = atoi(a3);
        prog_run_threads(threads, count_worker, NULL);
        say("done %d", threads * iters);
    } else if (strcmp(mode, "waitgo") == 0) {
        int heap = strcmp(a1, "heap") == 0;
        struct box *b = heap ? box_new() : NULL;
        mtx_t *m = heap ? &b->lock : &c11_lock;
        cnd_t *cv = heap ? &b->cond : &ready;
        must(mtx_lock(m), "lock");
        freeReplyObject(redisCommand(c, "INCR %s", key("waiting")));
        struct timespec until = in_ms(WAIT_MS);
        int rc = thrd_success;
        while (get_int(c, key("go")) == 0) {
            rc = cnd_timedwait(cv, m, &until);
            if (rc == thrd_timedout) {
                say("timeout");
                return 3;
            }
            if (rc != thrd_success)
                break;
        }
        say("woken %s", thrd_name(rc));
        must(mtx_unlock(m), "unlock");
    } else if (strcmp(mode, "go") == 0) {
        long long n = atoll(a1);
        int heap = strcmp(a3, "heap") == 0;
        struct box *b = heap ? box_new() : NULL;
        mtx_t *m = heap ? &b->lock : &c11_lock;
        cnd_t *cv = heap ? &b->cond : &ready;
        long long t0 = now_ms();
        while (get_int(c, key("waiting")) < n) {
            if (now_ms() - t0 > WAIT_MS) {
                say("timeout");
                return 3;
            }
            usleep(PROG_POLL_US);
        }
        must(mtx_lock(m), "lock");
        freeReplyObject(redisCommand(c, "SET %s 1", key("go")));
        int rc = strcmp(a2, "broadcast") == 0 ? cnd_broadcast(cv) : cnd_signal(cv);
        must(mtx_unlock(m), "unlock");
        say("sent %s", thrd_name(rc));
    } else if (strcmp(mode, "hold") == 0) {
        must(mtx_lock(&c11_lock), "lock");
        must(mtx_lock(&rec_lock), "rec lock");
        must(mtx_lock(&rec_lock), "rec lock again");
        freeReplyObject(redisCommand(c, "SET %s 1", key("held")));
        say("held");
        wait_file(a1);
        int r1 = mtx_unlock(&rec_lock), r2 = mtx_unlock(&rec_lock), r3 = mtx_unlock(&c11_lock);
        say("unlocked %s %s %s", thrd_name(r1), thrd_name(r2), thrd_name(r3));
    } else if (strcmp(mode, "try") == 0) {
        long ms = atol(a1);
        long long t0 = now_ms();
        while (get_int(c, key("held")) == 0) {
            if (now_ms() - t0 > WAIT_MS) {
                say("timeout");
                return 3;
            }
            usleep(PROG_POLL_US);
        }
        mtx_t *locks[2] = { &c11_lock, &rec_lock };
        for (int i = 0; i < 2; i++) {
            const char *p = i ? "rec " : "plain ";
            int rc = mtx_trylock(locks[i]);
            say("%strylock %s", p, thrd_name(rc));
            if (rc == thrd_success)
                mtx_unlock(locks[i]);
            struct timespec until = in_ms(ms);
            rc = mtx_timedlock(locks[i], &until);
            say("%stimedlock %s", p, thrd_name(rc));
            if (rc == thrd_success)
                mtx_unlock(locks[i]);
        }
    } else if (strcmp(mode, "timedwait") == 0) {
        must(mtx_lock(&c11_lock), "lock");
        struct timespec until = in_ms(atol(a1));
        int rc = cnd_timedwait(&ready, &c11_lock, &until);
        uint64_t tok = dmutex_token ? dmutex_token(&c11_lock) : 0;
        say("timedwait %s token %llu", thrd_name(rc), (unsigned long long)tok);
        must(mtx_unlock(&c11_lock), "unlock");
    } else if (strcmp(mode, "once") == 0) {
        int r1 = mtx_lock(&c11_lock);
        int r2 = r1 == thrd_success ? mtx_unlock(&c11_lock) : thrd_error;
        say("lock %s unlock %s", thrd_name(r1), thrd_name(r2));
    } else if (strcmp(mode, "destroy") == 0) {
        struct box *b = box_new();
        must(mtx_lock(&b->lock), "lock");
        uint64_t t1 = dmutex_token ? dmutex_token(&b->lock) : 0;
        must(mtx_unlock(&b->lock), "unlock");
        mtx_destroy(&b->lock);
        must(mtx_init(&b->lock, mtx_plain), "init again");     /* main: no init_site */
        must(mtx_lock(&b->lock), "relock");
        uint64_t t2 = dmutex_token ? dmutex_token(&b->lock) : 0;
        must(mtx_unlock(&b->lock), "unlock again");
        say("heap token %llu after destroy %llu", (unsigned long long)t1,
            (unsigned long long)t2);
    } else {
        fprintf(stderr, "c11prog: unknown mode %s\n", mode);
        return 2;
    }
    redisFree(c);
    return 0;
}
