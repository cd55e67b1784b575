/* trace_conds: condition variables and rwlocks for tests/trace.test.sh.
 * `dmutex trace` must name q_ready (a global cond), the conds of the
 * boxes box_new() makes (init_site: its pthread_cond_init call),
 * routes_rwlock (a global rwlock), an element of shard_locks (an array of
 * rwlocks: by index) and the rwlocks of table_new() (init_site: its
 * pthread_rwlock_init call); and the mutexes and conds blocks it prints,
 * as a config, must make a producer and a consumer in two processes wake
 * each other.
 *
 *   trace_conds local
 *       One process. A producer thread hands LOCAL_ITEMS items, one at a
 *       time, to a consumer thread: one signal of q_ready per item, one
 *       signal of the first box's not_full per item; a second box is made
 *       and broadcast once. Then ROUTE_READS read locks (rdlock, tryrdlock,
 *       timedrdlock) and ROUTE_WRITES write locks (wrlock, timedwrlock) of
 *       routes_rwlock, one write lock of shard_locks[SHARD], and
 *       TABLE_READS + TABLE_WRITES of each of two table_new() rwlocks.
 *       Prints "local done".
 *   trace_conds consume HOST PORT PREFIX N WAIT_MS
 *   trace_conds produce HOST PORT PREFIX N WAIT_MS
 *       The same queue between two processes (run them under dmutex with
 *       q_lock mapped and the conds listed), its items in the list
 *       PREFIX:q of a redis-server, at most one queued. The consumer,
 *       holding q_lock, prints "waiting" when it first finds nothing to
 *       take, and waits on q_ready. The producer pushes an item and
 *       signals q_ready; with an item queued it sets PREFIX:full, signals
 *       q_ready and waits on its box's not_full. The consumer takes items
 *       only once PREFIX:full is set (so the producer's wait on not_full
 *       happens), and signals not_full after each. So each side's waits
 *       are ended by the other process's signals. Every wait is a timed
 *       wait of WAIT_MS: a timeout prints "timeout ..." and exits 3.
 *       Prints "consumed N" (each item once: "dup ITEM" otherwise) or
 *       "produced N". */
#define _GNU_SOURCE
#include "prog.h"

#define LOCAL_ITEMS 20
#define ROUTE_READS 7
#define ROUTE_WRITES 3
#define TABLE_READS 2
#define TABLE_WRITES 1
#define NSHARDS 4
#define SHARD 2
#define QUEUE_CAP 1

pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t q_ready = PTHREAD_COND_INITIALIZER;
pthread_rwlock_t routes_rwlock = PTHREAD_RWLOCK_INITIALIZER;
pthread_rwlock_t shard_locks[NSHARDS] = {
    PTHREAD_RWLOCK_INITIALIZER, PTHREAD_RWLOCK_INITIALIZER,
    PTHREAD_RWLOCK_INITIALIZER, PTHREAD_RWLOCK_INITIALIZER,
};

/* A heap object with a condition variable of its own. */
struct box {
    pthread_cond_t not_full;
    int id;
};

/* A heap object with an rwlock of its own. */
struct table {
    pthread_rwlock_t rw;
    long rows;
};

/* Not inlined, and not a tail call of the init: init_site names the
 * function the init call's return address is in. */
__attribute__((noinline)) struct box *box_new(int id)
{
    struct box *b = calloc(1, sizeof *b);
    if (!b || pthread_cond_init(&b->not_full, NULL) != 0)
        exit(1);
    b->id = id;
    return b;
}

__attribute__((noinline)) struct table *table_new(void)
{
    struct table *t = calloc(1, sizeof *t);
    if (!t || pthread_rwlock_init(&t->rw, NULL) != 0)
        exit(1);
    return t;
}

static struct box *box;
static int queued;
static long wait_ms = 30000;

static void check(int rc, const char *what)
{
    if (rc != 0) {
        say("%s: %s", what, ename(rc));
        exit(1);
    }
}

/* One timed wait of wait_ms on c with q_lock held; exits 3 on a timeout. */
static void wait_on(pthread_cond_t *c, const char *what)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    int rc = pthread_cond_timedwait(c, &q_lock, &until);
    if (rc == ETIMEDOUT) {
        say("timeout on %s after %ld ms", what, wait_ms);
        exit(3);
    }
    check(rc, what);
}

/* ---- one process ------------------------------------------------------- */

static void *local_producer(void *arg)
{
    (void)arg;
    for (int i = 0; i < LOCAL_ITEMS; i++) {
        check(pthread_mutex_lock(&q_lock), "lock");
        while (queued >= QUEUE_CAP)
            wait_on(&box->not_full, "not_full");
        queued++;
        check(pthread_cond_signal(&q_ready), "signal");
        check(pthread_mutex_unlock(&q_lock), "unlock");
    }
    return NULL;
}

static void *local_consumer(void *arg)
{
    (void)arg;
    for (int i = 0; i < LOCAL_ITEMS; i++) {
        check(pthread_mutex_lock(&q_lock), "lock");
        while (queued == 0)
            wait_on(&q_ready, "q_ready");
        queued--;
        check(pthread_cond_signal(&box->not_full), "signal");
        check(pthread_mutex_unlock(&q_lock), "unlock");
    }
    return NULL;
}

static void rw_cycle(pthread_rwlock_t *l, int reads, int writes)
{
    struct timespec far;
    clock_gettime(CLOCK_REALTIME, &far);
    far.tv_sec += 60;
    for (int i = 0; i < reads; i++) {
        int rc = i % 3 == 1 ? pthread_rwlock_tryrdlock(l)
               : i % 3 == 2 ? pthread_rwlock_timedrdlock(l, &far) : pthread_rwlock_rdlock(l);
        check(rc, "rdlock");
        check(pthread_rwlock_unlock(l), "rwlock unlock");
    }
    for (int i = 0; i < writes; i++) {
        int rc = i % 2 ? pthread_rwlock_timedwrlock(l, &far) : pthread_rwlock_wrlock(l);
        check(rc, "wrlock");
        check(pthread_rwlock_unlock(l), "rwlock unlock");
    }
}

static int local(void)
{
    box = box_new(1);
    pthread_t p, c;
    if (pthread_create(&c, NULL, local_consumer, NULL) != 0 ||
        pthread_create(&p, NULL, local_producer, NULL) != 0)
        return 1;
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    struct box *other = box_new(2);
    check(pthread_cond_broadcast(&other->not_full), "broadcast");

    rw_cycle(&routes_rwlock, ROUTE_READS, ROUTE_WRITES);
    rw_cycle(&shard_locks[SHARD], 0, 1);
    for (int i = 0; i < 2; i++)
        rw_cycle(&table_new()->rw, TABLE_READS, TABLE_WRITES);
    say("local done");
    return 0;
}

/* ---- two processes ----------------------------------------------------- */

static redisContext *rc;
static const char *prefix;

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
                : r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return v;
}

static int consume(long n)
{
    long got = 0;
    int said = 0;
    check(pthread_mutex_lock(&q_lock), "lock");
    while (got < n) {
        long long item = cmd_int("GET %s:full", prefix) == 1 ? cmd_int("LPOP %s:q", prefix) : -1;
        if (item >= 0) {
            if (cmd_int("SADD %s:seen %lld", prefix, item) != 1)
                say("dup %lld", item);
            got++;
            check(pthread_cond_signal(&box->not_full), "signal");
            continue;
        }
        if (!said++)
            say("waiting");
        wait_on(&q_ready, "q_ready");
    }
    check(pthread_mutex_unlock(&q_lock), "unlock");
    say("consumed %ld", got);
    return 0;
}

static int produce(long n)
{
    check(pthread_mutex_lock(&q_lock), "lock");
    for (long i = 0; i < n; i++) {
        while (cmd_int("LLEN %s:q", prefix) >= QUEUE_CAP) {
            cmd_int("SET %s:full 1", prefix);
            check(pthread_cond_signal(&q_ready), "signal");
            wait_on(&box->not_full, "not_full");
        }
        cmd_int("RPUSH %s:q %ld", prefix, i);
        check(pthread_cond_signal(&q_ready), "signal");
    }
    check(pthread_mutex_unlock(&q_lock), "unlock");
    say("produced %ld", n);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "local") == 0)
        return local();
    if (argc == 7 && (strcmp(argv[1], "consume") == 0 || strcmp(argv[1], "produce") == 0)) {
        rc = prog_connect(argv[2], atoi(argv[3]));
        prefix = argv[4];
        long n = atol(argv[5]);
        wait_ms = atol(argv[6]);
        box = box_new(0);
        return argv[1][0] == 'c' ? consume(n) : produce(n);
    }
    fprintf(stderr, "usage: trace_conds local | consume|produce HOST PORT PREFIX N WAIT_MS\n");
    return 2;
}
