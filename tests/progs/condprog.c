/* condprog: condition variable scenarios for tests/test_conds.c, which
 * maps q_lock and lists not_empty, not_full and mono_cond by config
 * (local_cond stays unlisted). It knows nothing of dmutex but the weak
 * dmutex_token: it is an ordinary producer/consumer program whose shared
 * state lives in a data redis-server (HOST PORT), under keys PREFIX:*.
 *
 *   condprog MODE HOST PORT PREFIX [ARGS...]   (extra trailing words ignored)
 *
 * Every wait is a pthread_cond_timedwait of WAIT_MS (default 30 s): a
 * timeout prints "timeout ..." and the program exits 3, so a wake-up that
 * only a poll or a timeout would bring fails the test.
 *
 * Modes:
 *   produce N CAP US     N items onto the list PREFIX:q, at most CAP long
 *                        (waits on not_full), signal not_empty per item;
 *                        between items, work outside the lock for a random
 *                        0..2*US microseconds (so the queue runs both full
 *                        and empty, and both conds are waited on)
 *   consume TOTAL US     pop items until TOTAL were taken by all consumers
 *                        (waits on not_empty), SADD each to PREFIX:seen
 *                        ("dup ITEM" if it was there), signal not_full;
 *                        the one taking the last broadcasts not_empty
 *   waitgo               INCR PREFIX:waiting, wait on not_empty until
 *                        PREFIX:go is set: "woken MS" (CLOCK_REALTIME)
 *   waitgo-local         the same on local_cond (unlisted)
 *   waitgo-plain         the same on not_empty with plain_lock (unmapped)
 *   go N MODE            when PREFIX:waiting reaches N, SET PREFIX:go and
 *                        MODE (signal | broadcast | signal-local) under
 *                        q_lock: "sent MS" (CLOCK_REALTIME)
 *   timeout MS CLOCK     one timed wait of MS with no signal: timedwait on
 *                        not_empty (CLOCK realtime), on mono_cond (CLOCK
 *                        monotonic: a CLOCK_MONOTONIC condattr), or
 *                        clockwait on not_empty (CLOCK clockwait), or
 *                        timedwait on not_empty with plain_lock (CLOCK
 *                        plain: an unmapped mutex, no lock round trip):
 *                        "rc RC elapsed MS token T" (T: dmutex_token after)
 *   cancel               a thread waits on not_empty untimed and is
 *                        cancelled: its cleanup handler says "cleanup
 *                        token T unlock RC"; then main locks again:
 *                        "relocked RC"
 *   spurious             wait on not_empty (never signalled) until one
 *                        wait returns 0: "wake RC MS"
 *   fork-waitgo          one timed wait on not_empty (subscribed), then
 *                        fork: the child does waitgo; "child STATUS"
 *   heap-waitgo FILE     waitgo on the cond of a struct chan from
 *                        chan_new() (an init_site), then destroys it:
 *                        "destroyed RC", and waits for FILE before exit
 *   go N heap            as go, broadcasting a chan_new() cond of its own
 *   signal-after FILE    signals not_full (nobody waits: its PUBLISH makes
 *                        the pooled connection), says "first", waits for
 *                        FILE, then SETs PREFIX:go and signals not_empty,
 *                        neither under a mutex: "sent MS"
 *   heap-destroy N       N times: a thread waits on a new chan_new() cond
 *                        with plain_lock until told to stop; main takes
 *                        plain_lock once the thread let it go in its wait,
 *                        tells it, broadcasts, unlocks, and at once
 *                        destroys and frees the cond (POSIX allows it once
 *                        every waiter is woken): "destroyed RC" each, then
 *                        "joined N"
 *   eperm                a timed wait (2 s) on not_empty with each of
 *                        ec_lock (error-checking), rc_lock (recursive),
 *                        rb_lock (robust), all mapped, and ec_plain
 *                        (error-checking, unmapped), none of them held:
 *                        "eperm NAME RC"
 *   robust [local]       A: a thread locks rb_lock and ends; main locks it
 *                        (EOWNERDEAD), waits 300 ms on not_empty without
 *                        making it consistent: "A lock RC", "A wait RC",
 *                        "A relock RC", "A token T" (0: the shim holds
 *                        nothing of it). B: main locks rb2_lock and waits
 *                        1.5 s on not_empty; meanwhile a thread locks it
 *                        and ends: "B wait RC", "B consistent RC", "B
 *                        unlock RC" (local: the waits are on local_cond,
 *                        unlisted)
 *   down-loop N MS       N times: plain_lock, a timed wait of MS on
 *                        not_empty, unlock, signal not_empty; a helper
 *                        thread locks plain_lock as soon as the waiter has
 *                        entered its wait: "iter I held MS signal MS"
 *                        (held: from entering the wait to the helper
 *                        getting the mutex; signal: the call's time)
 *
 * Latency: a signaller SETs PREFIX:sig "<pid>:<us>" (CLOCK_REALTIME) just
 * before it signals; a waiter that returns to a value another process set
 * since it began waiting prints "lat US". */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog.h"

uint64_t dmutex_token(pthread_mutex_t *m);
#pragma weak dmutex_token

pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t plain_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
pthread_cond_t mono_cond;
pthread_cond_t local_cond = PTHREAD_COND_INITIALIZER;
pthread_mutex_t ec_lock, rc_lock, rb_lock, rb2_lock, ec_plain;    /* types set in main */

#define WAIT_MS_DEFAULT 30000
#define SUBSCRIBE_WAIT_MS 300   /* fork-waitgo's first wait, nobody signals it */

/* A heap object with its own condition variable, made by chan_new (an
 * init_site of the test's config). */
struct chan {
    pthread_cond_t cond;
    int id;
};

static redisContext *rc;
static const char *data_host;
static int data_port;
static const char *prefix;
static long wait_ms = WAIT_MS_DEFAULT;

/* Not inlined, and not ending in a tail call of pthread_cond_init: the
 * init's return address must be inside this function. */
__attribute__((noinline)) struct chan *chan_new(int id)
{
    struct chan *ch = calloc(1, sizeof *ch);
    if (!ch || pthread_cond_init(&ch->cond, NULL) != 0)
        exit(1);
    ch->id = id;
    return ch;
}

static long long cmd_int(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static long long cmd_int(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(rc, fmt, ap);
    va_end(ap);
    if (!r) {
        say("redis: %s", rc->errstr);
        exit(1);
    }
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer
                : r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return v;
}

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* PREFIX:sig as "<pid>:<us>" (0 0 when unset). */
static void last_signal(long *pid, long long *us)
{
    redisReply *r = redisCommand(rc, "GET %s:sig", prefix);
    *pid = 0;
    *us = 0;
    if (r && r->type == REDIS_REPLY_STRING)
        sscanf(r->str, "%ld:%lld", pid, us);
    freeReplyObject(r);
}

static void mark_signal(void)
{
    freeReplyObject(redisCommand(rc, "SET %s:sig %ld:%lld", prefix, (long)getpid(), now_us()));
}

/* One timed wait on c with q_lock held; prints a latency when another
 * process's signal came since it began. Exits 3 on a timeout. */
static long waits;

static void wait_once_on(pthread_cond_t *c, pthread_mutex_t *m, const char *what);

static void wait_once(pthread_cond_t *c, const char *what)
{
    wait_once_on(c, &q_lock, what);
}

static void wait_once_on(pthread_cond_t *c, pthread_mutex_t *m, const char *what)
{
    waits++;
    long pid0;
    long long us0;
    last_signal(&pid0, &us0);
    struct timespec dl = deadline_in(CLOCK_REALTIME, wait_ms);
    int r = pthread_cond_timedwait(c, m, &dl);
    if (r == ETIMEDOUT) {
        say("timeout %s after %ld ms", what, wait_ms);
        exit(3);
    }
    if (r != 0) {
        say("wait %s: %s", what, ename(r));
        exit(1);
    }
    long pid;
    long long us;
    last_signal(&pid, &us);
    if (us != us0 && pid != (long)getpid())
        say("lat %lld", now_us() - us);
}

/* Work outside the lock: 0..2*us microseconds. */
static void work(long us)
{
    if (us > 0)
        usleep((useconds_t)(rand() % (2 * us + 1)));
}

static void produce(int n, int cap, long us)
{
    for (int i = 0; i < n; i++) {
        work(us);
        pthread_mutex_lock(&q_lock);
        while (cmd_int("LLEN %s:q", prefix) >= cap)
            wait_once(&not_full, "not_full");
        freeReplyObject(redisCommand(rc, "RPUSH %s:q %ld:%d", prefix, (long)getpid(), i));
        mark_signal();
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&q_lock);
    }
    say("produced %d waits %ld", n, waits);
}

static void consume(long total, long us)
{
    long mine = 0;
    for (;;) {
        work(us);
        pthread_mutex_lock(&q_lock);
        while (cmd_int("LLEN %s:q", prefix) == 0 && cmd_int("GET %s:taken", prefix) < total)
            wait_once(&not_empty, "not_empty");
        if (cmd_int("GET %s:taken", prefix) >= total) {
            pthread_mutex_unlock(&q_lock);
            break;
        }
        redisReply *r = redisCommand(rc, "LPOP %s:q", prefix);
        if (!r || r->type != REDIS_REPLY_STRING) {
            say("pop failed");
            exit(1);
        }
        if (cmd_int("SADD %s:seen %s", prefix, r->str) != 1)
            say("dup %s", r->str);
        freeReplyObject(r);
        mine++;
        mark_signal();
        if (cmd_int("INCR %s:taken", prefix) >= total)
            pthread_cond_broadcast(&not_empty);     /* the other consumers can stop */
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&q_lock);
    }
    say("consumed %ld waits %ld", mine, waits);
}

static void waitgo(pthread_cond_t *c, pthread_mutex_t *m)
{
    pthread_mutex_lock(m);
    cmd_int("INCR %s:waiting", prefix);
    say("waiting");
    while (cmd_int("GET %s:go", prefix) == 0)
        wait_once_on(c, m, "go");
    pthread_mutex_unlock(m);
    say("woken %lld", clock_ms(CLOCK_REALTIME));
}

static void go(long n, const char *mode)
{
    struct chan *ch = strcmp(mode, "heap") == 0 ? chan_new(0) : NULL;
    for (;;) {
        pthread_mutex_lock(&q_lock);
        if (cmd_int("GET %s:waiting", prefix) >= n)
            break;
        pthread_mutex_unlock(&q_lock);
        usleep(PROG_POLL_US);
    }
    cmd_int("SET %s:go 1", prefix);
    mark_signal();
    long long t = clock_ms(CLOCK_REALTIME);
    if (strcmp(mode, "broadcast") == 0)
        pthread_cond_broadcast(&not_empty);
    else if (strcmp(mode, "signal-local") == 0)
        pthread_cond_signal(&local_cond);
    else if (ch)
        pthread_cond_broadcast(&ch->cond);
    else
        pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&q_lock);
    say("sent %lld", t);
}

static void fork_waitgo(void)
{
    pthread_mutex_lock(&q_lock);
    struct timespec dl = deadline_in(CLOCK_REALTIME, SUBSCRIBE_WAIT_MS);
    int r = pthread_cond_timedwait(&not_empty, &q_lock, &dl);
    pthread_mutex_unlock(&q_lock);
    say("parent wait %s", ename(r));
    pid_t p = fork();
    if (p < 0)
        exit(1);
    if (p == 0) {
        /* A connection of its own: the copy of the parent's is only
         * closed here (redisFree sends nothing). */
        redisFree(rc);
        rc = prog_connect(data_host, data_port);
        waitgo(&not_empty, &q_lock);
        redisFree(rc);
        /* _exit: the child holds nothing, and the memory of the parent's
         * subscriber connection, which the shim leaves alone in a fork
         * child (its thread may have been inside hiredis), is not a leak
         * for make test-asan to report. */
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    say("child %d", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

static void heap_waitgo(const char *file)
{
    struct chan *ch = chan_new(1);
    waitgo(&ch->cond, &q_lock);
    say("destroyed %s", ename(pthread_cond_destroy(&ch->cond)));
    free(ch);
    wait_file(file);
}

static void timeout(long ms, const char *clk)
{
    pthread_mutex_t *m = strcmp(clk, "plain") == 0 ? &plain_lock : &q_lock;
    pthread_mutex_lock(m);
    long long t0 = now_ms();
    int r;
    if (m == &plain_lock) {
        struct timespec dl = deadline_in(CLOCK_REALTIME, ms);
        r = pthread_cond_timedwait(&not_empty, m, &dl);
    } else if (strcmp(clk, "monotonic") == 0) {
        struct timespec dl = deadline_in(CLOCK_MONOTONIC, ms);
        r = pthread_cond_timedwait(&mono_cond, &q_lock, &dl);
    } else if (strcmp(clk, "clockwait") == 0) {
        struct timespec dl = deadline_in(CLOCK_MONOTONIC, ms);
        r = pthread_cond_clockwait(&not_empty, &q_lock, CLOCK_MONOTONIC, &dl);
    } else {
        struct timespec dl = deadline_in(CLOCK_REALTIME, ms);
        r = pthread_cond_timedwait(&not_empty, &q_lock, &dl);
    }
    long long t = now_ms() - t0;
    unsigned long long tok = dmutex_token ? (unsigned long long)dmutex_token(m) : 0;
    pthread_mutex_unlock(m);
    say("rc %s elapsed %lld token %llu", ename(r), t, tok);
}

static void cancel_cleanup(void *arg)
{
    (void)arg;
    unsigned long long tok = dmutex_token ? (unsigned long long)dmutex_token(&q_lock) : 0;
    int r = pthread_mutex_unlock(&q_lock);
    say("cleanup token %llu unlock %s", tok, ename(r));
}

static void *cancel_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&q_lock);
    pthread_cleanup_push(cancel_cleanup, NULL);
    say("waiting");
    for (;;)
        pthread_cond_wait(&not_empty, &q_lock);
    pthread_cleanup_pop(1);
    return NULL;
}

static void cancel_scenario(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, cancel_main, NULL) != 0)
        exit(1);
    /* The thread gave q_lock back once it sleeps in the wait. */
    for (;;) {
        usleep(100 * 1000);
        if (pthread_mutex_trylock(&q_lock) == 0) {
            pthread_mutex_unlock(&q_lock);
            break;
        }
    }
    pthread_cancel(t);
    void *res;
    pthread_join(t, &res);
    say("joined %s", res == PTHREAD_CANCELED ? "cancelled" : "returned");
    int r = pthread_mutex_lock(&q_lock);
    say("relocked %s token %llu", ename(r),
        dmutex_token ? (unsigned long long)dmutex_token(&q_lock) : 0ULL);
    pthread_mutex_unlock(&q_lock);
}

static void spurious(void)
{
    pthread_mutex_lock(&q_lock);
    say("waiting");
    long long t0 = now_ms();
    struct timespec dl = deadline_in(CLOCK_REALTIME, wait_ms);
    int r = pthread_cond_timedwait(&not_empty, &q_lock, &dl);
    pthread_mutex_unlock(&q_lock);
    say("wake %s %lld", ename(r), now_ms() - t0);
}

static void signal_after(const char *file)
{
    pthread_cond_signal(&not_full);
    say("first");
    wait_file(file);
    cmd_int("SET %s:go 1", prefix);
    mark_signal();
    long long t = clock_ms(CLOCK_REALTIME);
    pthread_cond_signal(&not_empty);
    say("sent %lld", t);
}

struct hd {
    struct chan *ch;
    int ready, stop;            /* plain_lock */
};

static void *heap_destroy_waiter(void *arg)
{
    struct hd *h = arg;
    pthread_mutex_lock(&plain_lock);
    h->ready = 1;
    while (!h->stop) {
        struct timespec dl = deadline_in(CLOCK_REALTIME, wait_ms);
        int r = pthread_cond_timedwait(&h->ch->cond, &plain_lock, &dl);
        if (r == ETIMEDOUT) {
            say("timeout heap-destroy after %ld ms", wait_ms);
            exit(3);
        }
    }
    pthread_mutex_unlock(&plain_lock);
    return NULL;
}

static void heap_destroy(int n)
{
    for (int i = 0; i < n; i++) {
        struct hd h = { chan_new(i), 0, 0 };
        pthread_t t;
        if (pthread_create(&t, NULL, heap_destroy_waiter, &h) != 0)
            exit(1);
        for (;;) {
            pthread_mutex_lock(&plain_lock);
            if (h.ready)
                break;          /* it let go of plain_lock: it is in its wait */
            pthread_mutex_unlock(&plain_lock);
            usleep(1000);
        }
        h.stop = 1;
        pthread_cond_broadcast(&h.ch->cond);
        pthread_mutex_unlock(&plain_lock);
        say("destroyed %s", ename(pthread_cond_destroy(&h.ch->cond)));
        memset(h.ch, 0xa5, sizeof *h.ch);
        free(h.ch);
        pthread_join(t, NULL);
    }
    say("joined %d", n);
}

static void eperm(void)
{
    struct { const char *name; pthread_mutex_t *m; } ms[] = {
        { "ec_lock", &ec_lock }, { "rc_lock", &rc_lock }, { "rb_lock", &rb_lock },
        { "ec_plain", &ec_plain },
    };
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        struct timespec dl = deadline_in(CLOCK_REALTIME, 2000);
        int r = pthread_cond_timedwait(&not_empty, ms[i].m, &dl);
        say("eperm %s %s", ms[i].name, ename(r));
        if (r == 0 || r == EOWNERDEAD)
            pthread_mutex_unlock(ms[i].m);
    }
}

static void *lock_and_end(void *m)
{
    pthread_mutex_lock(m);
    return NULL;                /* ends holding it */
}

static int b_waiting;           /* rb2_lock */

static void *lock_when_waiting_and_end(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&rb2_lock);      /* free only while main waits */
        if (b_waiting)
            return NULL;        /* ends holding it */
        pthread_mutex_unlock(&rb2_lock);
        usleep(1000);
    }
}

static void robust(pthread_cond_t *c)
{
    pthread_t t;
    if (pthread_create(&t, NULL, lock_and_end, &rb_lock) != 0)
        exit(1);
    pthread_join(t, NULL);
    say("A lock %s", ename(pthread_mutex_lock(&rb_lock)));
    struct timespec dl = deadline_in(CLOCK_REALTIME, 300);
    int r = pthread_cond_timedwait(c, &rb_lock, &dl);
    say("A wait %s", ename(r));
    if (r == 0 || r == ETIMEDOUT || r == EOWNERDEAD)
        pthread_mutex_unlock(&rb_lock);
    say("A relock %s", ename(pthread_mutex_lock(&rb_lock)));
    say("A token %llu", dmutex_token ? (unsigned long long)dmutex_token(&rb_lock) : 0ULL);

    pthread_mutex_lock(&rb2_lock);
    b_waiting = 1;
    if (pthread_create(&t, NULL, lock_when_waiting_and_end, NULL) != 0)
        exit(1);
    dl = deadline_in(CLOCK_REALTIME, 1500);
    r = pthread_cond_timedwait(c, &rb2_lock, &dl);
    b_waiting = 0;
    pthread_join(t, NULL);
    say("B wait %s", ename(r));
    say("B consistent %s", ename(pthread_mutex_consistent(&rb2_lock)));
    say("B unlock %s", ename(pthread_mutex_unlock(&rb2_lock)));
}

struct dl_state {
    long long entered;          /* plain_lock: when the waiter entered its wait; 0: not */
    long long held;             /* the last measure */
    int done;
};

static void *down_helper(void *arg)
{
    struct dl_state *d = arg;
    for (;;) {
        pthread_mutex_lock(&plain_lock);
        if (d->done) {
            pthread_mutex_unlock(&plain_lock);
            return NULL;
        }
        if (d->entered) {
            d->held = now_ms() - d->entered;
            d->entered = 0;
        }
        pthread_mutex_unlock(&plain_lock);
        usleep(1000);
    }
}

static void down_loop(int n, long ms)
{
    struct dl_state d = { 0, 0, 0 };
    pthread_t t;
    if (pthread_create(&t, NULL, down_helper, &d) != 0)
        exit(1);
    for (int i = 1; i <= n; i++) {
        pthread_mutex_lock(&plain_lock);
        d.held = -1;
        d.entered = now_ms();
        struct timespec dl = deadline_in(CLOCK_REALTIME, ms);
        pthread_cond_timedwait(&not_empty, &plain_lock, &dl);
        long long held = d.held >= 0 ? d.held : now_ms() - d.entered;
        d.entered = 0;
        pthread_mutex_unlock(&plain_lock);
        long long t0 = now_ms();
        pthread_cond_signal(&not_empty);
        say("iter %d held %lld signal %lld", i, held, now_ms() - t0);
    }
    pthread_mutex_lock(&plain_lock);
    d.done = 1;
    pthread_mutex_unlock(&plain_lock);
    pthread_join(t, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: condprog MODE HOST PORT PREFIX [ARGS...]\n");
        return 2;
    }
    const char *mode = argv[1];
    prefix = argv[4];
    if (getenv("CONDPROG_WAIT_MS"))
        wait_ms = atol(getenv("CONDPROG_WAIT_MS"));
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&mono_cond, &ca);
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&ec_lock, &ma);
    pthread_mutex_init(&ec_plain, &ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&rc_lock, &ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_NORMAL);
    pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&rb_lock, &ma);
    pthread_mutex_init(&rb2_lock, &ma);
    data_host = argv[2];
    data_port = atoi(argv[3]);
    rc = prog_connect(data_host, data_port);
    say("main");
    srand((unsigned)getpid());
    if (strcmp(mode, "produce") == 0 && argc > 7)
        produce(atoi(argv[5]), atoi(argv[6]), atol(argv[7]));
    else if (strcmp(mode, "consume") == 0 && argc > 6)
        consume(atol(argv[5]), atol(argv[6]));
    else if (strcmp(mode, "waitgo") == 0)
        waitgo(&not_empty, &q_lock);
    else if (strcmp(mode, "waitgo-local") == 0)
        waitgo(&local_cond, &q_lock);
    else if (strcmp(mode, "waitgo-plain") == 0)
        waitgo(&not_empty, &plain_lock);
    else if (strcmp(mode, "go") == 0 && argc > 6)
        go(atol(argv[5]), argv[6]);
    else if (strcmp(mode, "timeout") == 0 && argc > 6)
        timeout(atol(argv[5]), argv[6]);
    else if (strcmp(mode, "cancel") == 0)
        cancel_scenario();
    else if (strcmp(mode, "spurious") == 0)
        spurious();
    else if (strcmp(mode, "fork-waitgo") == 0)
        fork_waitgo();
    else if (strcmp(mode, "heap-waitgo") == 0 && argc > 5)
        heap_waitgo(argv[5]);
    else if (strcmp(mode, "signal-after") == 0 && argc > 5)
        signal_after(argv[5]);
    else if (strcmp(mode, "heap-destroy") == 0 && argc > 5)
        heap_destroy(atoi(argv[5]));
    else if (strcmp(mode, "eperm") == 0)
        eperm();
    else if (strcmp(mode, "robust") == 0)
        robust(argc > 5 && strcmp(argv[5], "local") == 0 ? &local_cond : &not_empty);
    else if (strcmp(mode, "down-loop") == 0 && argc > 6)
        down_loop(atoi(argv[5]), atol(argv[6]));
    else {
        fprintf(stderr, "condprog: unknown mode or missing arguments: %s\n", mode);
        return 2;
    }
    redisFree(rc);
    return 0;
}
