/* rwprog: read-write lock scenarios for tests/test_rwlocks.c, which maps
 * routes_lock and the rwlocks made by rw_new() (an init_site) by config;
 * plain_rw stays unmapped. It knows nothing of dmutex: an ordinary
 * program whose shared state lives in a data redis-server (HOST PORT),
 * under keys PREFIX:*.
 *
 *   rwprog MODE HOST PORT PREFIX [ARGS...]   (extra trailing words ignored)
 *
 * Modes:
 *   mix WRITES READERS READS HOLD_US
 *                     one writer thread: WRITES times, under the write lock,
 *                     PREFIX:a and PREFIX:b both + 1 (GET, SET a, sleep
 *                     HOLD_US, SET b); READERS threads: READS times, under
 *                     the read lock, GET a, sleep HOLD_US, GET b: a
 *                     difference is a torn read. Readers note themselves in
 *                     the hash PREFIX:in (pid -> readers inside) and note the
 *                     number of processes inside and of readers inside in
 *                     all (the counter PREFIX:inside), and a writer that
 *                     finds anyone inside counts it. Prints "torn N
 *                     inwrite N maxprocs N maxreaders N maxinside N"
 *   stream MS N HOLD_US  N threads take the read lock back to back for MS
 *                     (each holds HOLD_US): "reading" once all hold it
 *                     once, "stopped" at the end
 *   write1            wrlock: "waited MS", unlock
 *   hold rd|wr FILE   take it, "held", wait for FILE, unlock: "unlocked RC"
 *   try rd|wr         tryrdlock or trywrlock: "rc RC" (unlocks a success)
 *   timed rd|wr MS realtime|monotonic
 *                     timedrdlock/timedwrlock (realtime) or clockrdlock/
 *                     clockwrlock: "rc RC elapsed MS"
 *   glibc             recursion and self-deadlock on routes_lock: one line
 *                     per step, the same with the shim or without
 *   fork              the child write-locks and holds until PREFIX:go; the
 *                     parent's trywrlock/tryrdlock meanwhile: "parent RC RC",
 *                     after the child is gone "parent after RC"; "child
 *                     STATUS"
 *   plain N           N rdlock/wrlock cycles of plain_rw (unmapped): "done"
 *   share N           N threads hold the read lock at once (a barrier inside),
 *                     then unlock: "shared N"
 *   forkrd            the parent read-locks and forks; the child unlocks (the
 *                     parent's share, glibc's answer), tries to write-lock
 *                     and to read-lock: "child unlock RC trywr RC tryrd RC";
 *                     once the parent unlocked, its wrlock: "child wr RC";
 *                     the parent: "parent unlock RC", "child STATUS"
 *   exitrd            rdlock, "held", exit without unlocking
 *   ended rd|wr       a thread takes the lock and returns holding it ("thread
 *                     RC"); main joins it ("thread gone") and returns
 *   token             dmutex_rwlock_token (weak: "no api" without the shim)
 *                     before any lock, in a write hold, after its unlock, in
 *                     a second write hold, in a read hold, and of the
 *                     unmapped plain_rw held: "tokens T T T T T T"
 *   cancel rd|wr FILE a thread blocks in rdlock/wrlock (another process holds
 *                     the write lock until FILE exists) and is cancelled
 *                     there; then FILE is made. The thread gets the lock
 *                     (not a cancellation point: "thread RC"), unlocks and
 *                     is cancelled at its next cancellation point:
 *                     "cancelled 1"; then "after RC" (trywrlock here)
 *   heap              rw_new(), write-lock, unlock, destroy: "heap RC RC RC"
 *   heaprd            rw_new(), read-lock, destroy (while read-held), unlock,
 *                     destroy: "heaprd RC RC RC RC"
 *   stopjoin FILE     rdlock ("held RC"); 8 threads spin until FILE exists
 *                     (the test stops the process past its lease
 *                     meanwhile), then tryrdlock: "joined N of 8" got in;
 *                     then the first unlock: "unlocked RC" */
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

uint64_t dmutex_rwlock_token(pthread_rwlock_t *l);
#pragma weak dmutex_rwlock_token

pthread_rwlock_t routes_lock = PTHREAD_RWLOCK_INITIALIZER;
pthread_rwlock_t plain_rw = PTHREAD_RWLOCK_INITIALIZER;

struct rw_obj {
    pthread_rwlock_t lock;
    int id;
};

/* Not inlined, and not ending in a tail call of pthread_rwlock_init: the
 * init's return address must be inside this function. */
__attribute__((noinline)) struct rw_obj *rw_new(int id)
{
    struct rw_obj *o = calloc(1, sizeof *o);
    if (!o || pthread_rwlock_init(&o->lock, NULL) != 0)
        exit(1);
    o->id = id;
    return o;
}

static const char *data_host;
static int data_port;
static const char *prefix;

static long long cmd_int(redisContext *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static long long cmd_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r) {
        say("redis: %s", c->errstr);
        exit(1);
    }
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer
                : r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return v;
}

/* stopjoin's joiners: run the moment the process is continued (they
 * spin, never sleep), racing the lease watchdog's deadline thread. */
static int stopjoin_in;
static void *stopjoin_thread(void *arg)
{
    while (access(arg, F_OK) != 0)
        ;
    if (pthread_rwlock_tryrdlock(&routes_lock) == 0) {
        __atomic_add_fetch(&stopjoin_in, 1, __ATOMIC_RELAXED);
        pthread_rwlock_unlock(&routes_lock);
    }
    return NULL;
}

static int lock_mode(const char *m, int try)
{
    int w = strcmp(m, "wr") == 0;
    if (try)
        return w ? pthread_rwlock_trywrlock(&routes_lock) : pthread_rwlock_tryrdlock(&routes_lock);
    return w ? pthread_rwlock_wrlock(&routes_lock) : pthread_rwlock_rdlock(&routes_lock);
}

/* ---- mix ---------------------------------------------------------------- */

static long m_writes, m_reads, m_hold_us;
static long torn, inwrite, maxprocs, maxreaders, maxinside;
static pthread_mutex_t stats_mu = PTHREAD_MUTEX_INITIALIZER;

/* Leaves PREFIX:in (KEYS[1]): the pid's count down, the field gone at 0;
 * and PREFIX:inside (KEYS[2]), the readers inside in all. */
static const char leave_lua[] =
    "redis.call('decr', KEYS[2]) "
    "if redis.call('hincrby', KEYS[1], ARGV[1], -1) <= 0 then "
    "redis.call('hdel', KEYS[1], ARGV[1]) end return 0";

static void *mix_writer(void *arg)
{
    (void)arg;
    redisContext *c = prog_connect(data_host, data_port);
    for (long i = 0; i < m_writes; i++) {
        pthread_rwlock_wrlock(&routes_lock);
        if (cmd_int(c, "HLEN %s:in", prefix) != 0)
            __atomic_add_fetch(&inwrite, 1, __ATOMIC_RELAXED);
        long long a = cmd_int(c, "GET %s:a", prefix);
        freeReplyObject(redisCommand(c, "SET %s:a %lld", prefix, a + 1));
        usleep((useconds_t)m_hold_us);
        long long b = cmd_int(c, "GET %s:b", prefix);
        freeReplyObject(redisCommand(c, "SET %s:b %lld", prefix, b + 1));
        pthread_rwlock_unlock(&routes_lock);
        usleep((useconds_t)(m_hold_us * 4));   /* room for the readers */
    }
    redisFree(c);
    return NULL;
}

static void *mix_reader(void *arg)
{
    (void)arg;
    redisContext *c = prog_connect(data_host, data_port);
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    for (long i = 0; i < m_reads; i++) {
        pthread_rwlock_rdlock(&routes_lock);
        long long mine = cmd_int(c, "HINCRBY %s:in %s 1", prefix, pid);
        long long procs = cmd_int(c, "HLEN %s:in", prefix);
        long long inside = cmd_int(c, "INCR %s:inside", prefix);
        long long a = cmd_int(c, "GET %s:a", prefix);
        usleep((useconds_t)m_hold_us);
        long long b = cmd_int(c, "GET %s:b", prefix);
        freeReplyObject(redisCommand(c, "EVAL %s 2 %s:in %s:inside %s", leave_lua, prefix, prefix,
                                     pid));
        pthread_rwlock_unlock(&routes_lock);
        pthread_mutex_lock(&stats_mu);
        if (a != b)
            torn++;
        if (procs > maxprocs)
            maxprocs = procs;
        if (mine > maxreaders)
            maxreaders = mine;
        if (inside > maxinside)
            maxinside = inside;
        pthread_mutex_unlock(&stats_mu);
        usleep((useconds_t)(rand() % (m_hold_us + 1)));
    }
    redisFree(c);
    return NULL;
}

static void mix(long writes, int readers, long reads, long hold_us)
{
    m_writes = writes;
    m_reads = reads;
    m_hold_us = hold_us;
    pthread_t w;
    if (pthread_create(&w, NULL, mix_writer, NULL) != 0)
        exit(1);
    prog_run_threads(readers, mix_reader, NULL);
    pthread_join(w, NULL);
    say("torn %ld inwrite %ld maxprocs %ld maxreaders %ld maxinside %ld", torn, inwrite, maxprocs,
        maxreaders, maxinside);
}

/* ---- stream --------------------------------------------------------------- */

static long s_end_ms, s_hold_us;
static int s_started;

static void *stream_reader(void *arg)
{
    int n = (int)(long)arg;
    while (now_ms() < s_end_ms) {
        pthread_rwlock_rdlock(&routes_lock);
        if (__atomic_add_fetch(&s_started, 1, __ATOMIC_RELAXED) == n)
            say("reading");
        usleep((useconds_t)s_hold_us);
        pthread_rwlock_unlock(&routes_lock);
    }
    return NULL;
}

/* ---- the rest ------------------------------------------------------------- */

/* A writer-preferring rwlock (the kind, glibc's own rule): once a writer
 * waits, a new reader is refused. routes_lock is made so by init. */
static void *kind_writer(void *arg)
{
    (void)arg;
    pthread_rwlock_wrlock(&routes_lock);
    pthread_rwlock_unlock(&routes_lock);
    return NULL;
}

static void kind_rules(void)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    say("init writer-preferring %s", ename(pthread_rwlock_init(&routes_lock, &a)));
    pthread_rwlockattr_destroy(&a);
    say("rd %s", ename(pthread_rwlock_rdlock(&routes_lock)));
    pthread_t w;
    if (pthread_create(&w, NULL, kind_writer, NULL) != 0)
        exit(1);
    /* Until the writer waits (in glibc), a try of another thread reads. */
    int r = 0;
    for (long long end = now_ms() + 10000; now_ms() < end; usleep(PROG_POLL_US)) {
        if ((r = pthread_rwlock_tryrdlock(&routes_lock)) != 0)
            break;
        pthread_rwlock_unlock(&routes_lock);
    }
    say("tryrd with a writer waiting %s", ename(r));
    say("unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
    pthread_join(w, NULL);
    say("writer done");
}

/* glibc's reader count has 2^28 - 1 places (__readers counts in units of
 * 8: PTHREAD_RWLOCK_READER_SHIFT): one more reader is EAGAIN. Counting
 * that far takes minutes, so the count is set one short of it (a read
 * phase with that many readers), as glibc's own struct has it. */
static void reader_limit(void)
{
    pthread_rwlock_init(&routes_lock, NULL);
    routes_lock.__data.__readers = ((1u << 28) - 1) << 3;
    say("rd past the reader limit %s", ename(pthread_rwlock_rdlock(&routes_lock)));
    say("tryrd past the reader limit %s", ename(pthread_rwlock_tryrdlock(&routes_lock)));
    routes_lock.__data.__readers = 0;
    say("rd after %s", ename(pthread_rwlock_rdlock(&routes_lock)));
    say("unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
}

static void glibc_rules(void)
{
    say("rd %s", ename(pthread_rwlock_rdlock(&routes_lock)));
    say("rd again %s", ename(pthread_rwlock_rdlock(&routes_lock)));
    say("tryrd again %s", ename(pthread_rwlock_tryrdlock(&routes_lock)));
    say("trywr by a reader %s", ename(pthread_rwlock_trywrlock(&routes_lock)));
    struct timespec t = deadline_in(CLOCK_REALTIME, 300);
    say("timedwr by a reader %s", ename(pthread_rwlock_timedwrlock(&routes_lock, &t)));
    for (int i = 0; i < 3; i++)
        say("unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
    say("wr %s", ename(pthread_rwlock_wrlock(&routes_lock)));
    say("wr again %s", ename(pthread_rwlock_wrlock(&routes_lock)));
    say("rd by the writer %s", ename(pthread_rwlock_rdlock(&routes_lock)));
    say("unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
    say("trywr after %s", ename(pthread_rwlock_trywrlock(&routes_lock)));
    say("unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
    /* The clock variants: CLOCK_MONOTONIC takes it, a clock glibc does not
     * wait on and a bad deadline are EINVAL, a writer's re-lock EDEADLK. */
    t = deadline_in(CLOCK_MONOTONIC, 5000);
    say("clockrd monotonic %s", ename(pthread_rwlock_clockrdlock(&routes_lock, CLOCK_MONOTONIC, &t)));
    say("unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
    say("clockwr monotonic %s", ename(pthread_rwlock_clockwrlock(&routes_lock, CLOCK_MONOTONIC, &t)));
    say("clockwr again %s", ename(pthread_rwlock_clockwrlock(&routes_lock, CLOCK_MONOTONIC, &t)));
    struct timespec rt = deadline_in(CLOCK_REALTIME, 300);
    say("timedwr again %s", ename(pthread_rwlock_timedwrlock(&routes_lock, &rt)));
    say("unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
    say("clockrd cputime %s",
        ename(pthread_rwlock_clockrdlock(&routes_lock, CLOCK_PROCESS_CPUTIME_ID, &t)));
    say("clockwr cputime %s",
        ename(pthread_rwlock_clockwrlock(&routes_lock, CLOCK_PROCESS_CPUTIME_ID, &t)));
    struct timespec bad = { t.tv_sec, -1 };
    say("clockrd bad nsec %s", ename(pthread_rwlock_clockrdlock(&routes_lock, CLOCK_MONOTONIC, &bad)));
    say("timedwr bad nsec %s", ename(pthread_rwlock_timedwrlock(&routes_lock, &bad)));
    /* A deadline already past on a free lock: glibc takes it (it tries
     * before it looks at the clock). */
    struct timespec past = deadline_in(CLOCK_REALTIME, -1000);
    say("timedrd past deadline %s", ename(pthread_rwlock_timedrdlock(&routes_lock, &past)));
    say("unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
    past = deadline_in(CLOCK_MONOTONIC, -1000);
    say("clockwr past deadline %s",
        ename(pthread_rwlock_clockwrlock(&routes_lock, CLOCK_MONOTONIC, &past)));
    say("unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
    kind_rules();
    reader_limit();
}

/* ---- share, cancel -------------------------------------------------------- */

static pthread_barrier_t share_bar;

static void *share_reader(void *arg)
{
    (void)arg;
    if (pthread_rwlock_rdlock(&routes_lock) != 0)
        exit(1);
    pthread_barrier_wait(&share_bar);           /* every reader inside at once */
    pthread_rwlock_unlock(&routes_lock);
    return NULL;
}

static int cancel_write;

static void *cancel_thread(void *arg)
{
    (void)arg;
    int r = cancel_write ? pthread_rwlock_wrlock(&routes_lock) : pthread_rwlock_rdlock(&routes_lock);
    say("thread %s", ename(r));
    if (r == 0)
        pthread_rwlock_unlock(&routes_lock);
    for (;;)
        pause();                                /* a cancellation point */
    return NULL;
}

static void cancel_scenario(const char *mode, const char *file)
{
    cancel_write = strcmp(mode, "wr") == 0;
    pthread_t t;
    if (pthread_create(&t, NULL, cancel_thread, NULL) != 0)
        exit(1);
    usleep(500 * 1000);                         /* the thread waits for the other process */
    pthread_cancel(t);
    FILE *f = fopen(file, "w");
    if (f)
        fclose(f);
    void *res;
    pthread_join(t, &res);
    say("cancelled %d", res == PTHREAD_CANCELED);
    int r = pthread_rwlock_trywrlock(&routes_lock);
    say("after %s", ename(r));
    if (r == 0)
        pthread_rwlock_unlock(&routes_lock);
}

static void token_scenario(void)
{
    if (!dmutex_rwlock_token) {
        say("no api");
        return;
    }
    unsigned long long t[6];
    t[0] = dmutex_rwlock_token(&routes_lock);
    pthread_rwlock_wrlock(&routes_lock);
    t[1] = dmutex_rwlock_token(&routes_lock);
    pthread_rwlock_unlock(&routes_lock);
    t[2] = dmutex_rwlock_token(&routes_lock);
    pthread_rwlock_wrlock(&routes_lock);
    t[3] = dmutex_rwlock_token(&routes_lock);
    pthread_rwlock_unlock(&routes_lock);
    pthread_rwlock_rdlock(&routes_lock);
    t[4] = dmutex_rwlock_token(&routes_lock);
    pthread_rwlock_unlock(&routes_lock);
    pthread_rwlock_wrlock(&plain_rw);
    t[5] = dmutex_rwlock_token(&plain_rw);
    pthread_rwlock_unlock(&plain_rw);
    say("tokens %llu %llu %llu %llu %llu %llu", t[0], t[1], t[2], t[3], t[4], t[5]);
}

static void forkrd_scenario(redisContext *c)
{
    if (pthread_rwlock_rdlock(&routes_lock) != 0)
        exit(1);
    pid_t p = fork();
    if (p == 0) {
        redisContext *cc = prog_connect(data_host, data_port);
        int u = pthread_rwlock_unlock(&routes_lock);
        int w = pthread_rwlock_trywrlock(&routes_lock);
        if (w == 0)
            pthread_rwlock_unlock(&routes_lock);
        int r = pthread_rwlock_tryrdlock(&routes_lock);
        if (r == 0)
            pthread_rwlock_unlock(&routes_lock);
        say("child unlock %s trywr %s tryrd %s", ename(u), ename(w), ename(r));
        freeReplyObject(redisCommand(cc, "SET %s:childtried 1", prefix));
        r = pthread_rwlock_wrlock(&routes_lock);
        say("child wr %s", ename(r));
        if (r == 0)
            pthread_rwlock_unlock(&routes_lock);
        _exit(0);
    }
    while (cmd_int(c, "EXISTS %s:childtried", prefix) == 0)
        usleep(PROG_POLL_US);
    say("parent unlock %s", ename(pthread_rwlock_unlock(&routes_lock)));
    int st;
    waitpid(p, &st, 0);
    say("child %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static void fork_scenario(redisContext *c)
{
    pid_t p = fork();
    if (p == 0) {
        redisContext *cc = prog_connect(data_host, data_port);
        int r = pthread_rwlock_wrlock(&routes_lock);
        freeReplyObject(redisCommand(cc, "SET %s:childheld 1", prefix));
        while (cmd_int(cc, "EXISTS %s:go", prefix) == 0)
            usleep(PROG_POLL_US);
        pthread_rwlock_unlock(&routes_lock);
        _exit(r);
    }
    while (cmd_int(c, "EXISTS %s:childheld", prefix) == 0)
        usleep(PROG_POLL_US);
    int w = pthread_rwlock_trywrlock(&routes_lock);
    int r = pthread_rwlock_tryrdlock(&routes_lock);
    say("parent %s %s", ename(w), ename(r));
    freeReplyObject(redisCommand(c, "SET %s:go 1", prefix));
    int st;
    waitpid(p, &st, 0);
    say("child %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    r = pthread_rwlock_wrlock(&routes_lock);
    say("parent after %s", ename(r));
    pthread_rwlock_unlock(&routes_lock);
}

static void *lock_and_return(void *arg)
{
    int write = strcmp(arg, "wr") == 0;
    say("thread %s", ename(write ? pthread_rwlock_wrlock(&routes_lock)
                                 : pthread_rwlock_rdlock(&routes_lock)));
    return NULL;        /* holding it */
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: rwprog MODE HOST PORT PREFIX [ARGS...]\n");
        return 2;
    }
    const char *mode = argv[1];
    data_host = argv[2];
    data_port = atoi(argv[3]);
    prefix = argv[4];
    redisContext *c = prog_connect(data_host, data_port);
    srand((unsigned)getpid());
    say("main");
    if (strcmp(mode, "mix") == 0 && argc > 8) {
        mix(atol(argv[5]), atoi(argv[6]), atol(argv[7]), atol(argv[8]));
    } else if (strcmp(mode, "stream") == 0 && argc > 7) {
        s_end_ms = now_ms() + atol(argv[5]);
        s_hold_us = atol(argv[7]);
        int n = atoi(argv[6]);
        prog_run_threads(n, stream_reader, (void *)(long)n);
        say("stopped");
    } else if (strcmp(mode, "write1") == 0) {
        long long t0 = now_ms();
        int r = pthread_rwlock_wrlock(&routes_lock);
        say("waited %lld rc %s", now_ms() - t0, ename(r));
        pthread_rwlock_unlock(&routes_lock);
    } else if (strcmp(mode, "hold") == 0 && argc > 6) {
        int r = lock_mode(argv[5], 0);
        say("held %s", ename(r));
        wait_file(argv[6]);
        say("unlocked %s", ename(pthread_rwlock_unlock(&routes_lock)));
    } else if (strcmp(mode, "try") == 0 && argc > 5) {
        int r = lock_mode(argv[5], 1);
        say("rc %s", ename(r));
        if (r == 0)
            pthread_rwlock_unlock(&routes_lock);
    } else if (strcmp(mode, "timed") == 0 && argc > 7) {
        int w = strcmp(argv[5], "wr") == 0, mono = strcmp(argv[7], "monotonic") == 0;
        clockid_t clk = mono ? CLOCK_MONOTONIC : CLOCK_REALTIME;
        struct timespec t = deadline_in(clk, atol(argv[6]));
        long long t0 = now_ms();
        int r = mono ? (w ? pthread_rwlock_clockwrlock(&routes_lock, clk, &t)
                          : pthread_rwlock_clockrdlock(&routes_lock, clk, &t))
                     : (w ? pthread_rwlock_timedwrlock(&routes_lock, &t)
                          : pthread_rwlock_timedrdlock(&routes_lock, &t));
        say("rc %s elapsed %lld", ename(r), now_ms() - t0);
        if (r == 0)
            pthread_rwlock_unlock(&routes_lock);
    } else if (strcmp(mode, "glibc") == 0) {
        glibc_rules();
    } else if (strcmp(mode, "fork") == 0) {
        fork_scenario(c);
    } else if (strcmp(mode, "token") == 0) {
        token_scenario();
    } else if (strcmp(mode, "forkrd") == 0) {
        forkrd_scenario(c);
    } else if (strcmp(mode, "share") == 0 && argc > 5) {
        int n = atoi(argv[5]);
        pthread_barrier_init(&share_bar, NULL, (unsigned)n);
        say("shared %d", prog_run_threads(n, share_reader, NULL));
    } else if (strcmp(mode, "exitrd") == 0) {
        say("held %s", ename(pthread_rwlock_rdlock(&routes_lock)));
        exit(0);
    } else if (strcmp(mode, "ended") == 0 && argc > 5) {
        pthread_t t;
        pthread_create(&t, NULL, lock_and_return, argv[5]);
        pthread_join(t, NULL);
        say("thread gone");
    } else if (strcmp(mode, "cancel") == 0 && argc > 6) {
        cancel_scenario(argv[5], argv[6]);
    } else if (strcmp(mode, "plain") == 0 && argc > 5) {
        for (long i = 0, n = atol(argv[5]); i < n; i++) {
            pthread_rwlock_rdlock(&plain_rw);
            pthread_rwlock_unlock(&plain_rw);
            pthread_rwlock_wrlock(&plain_rw);
            pthread_rwlock_unlock(&plain_rw);
        }
        say("done");
    } else if (strcmp(mode, "heap") == 0) {
        struct rw_obj *o = rw_new(1);
        int a = pthread_rwlock_wrlock(&o->lock);
        int b = pthread_rwlock_unlock(&o->lock);
        int d = pthread_rwlock_destroy(&o->lock);
        free(o);
        say("heap %s %s %s", ename(a), ename(b), ename(d));
    } else if (strcmp(mode, "stopjoin") == 0 && argc > 5) {
        say("held %s", ename(pthread_rwlock_rdlock(&routes_lock)));
        pthread_t t[8];
        for (int i = 0; i < 8; i++)
            pthread_create(&t[i], NULL, stopjoin_thread, argv[5]);
        for (int i = 0; i < 8; i++)
            pthread_join(t[i], NULL);
        say("joined %d of 8", stopjoin_in);
        say("unlocked %s", ename(pthread_rwlock_unlock(&routes_lock)));
    } else if (strcmp(mode, "heaprd") == 0) {
        struct rw_obj *o = rw_new(1);
        int a = pthread_rwlock_rdlock(&o->lock);
        int b = pthread_rwlock_destroy(&o->lock);
        int u = pthread_rwlock_unlock(&o->lock);
        int d = pthread_rwlock_destroy(&o->lock);
        free(o);
        say("heaprd %s %s %s %s", ename(a), ename(b), ename(u), ename(d));
    } else {
        fprintf(stderr, "rwprog: unknown mode or missing arguments: %s\n", mode);
        return 2;
    }
    redisFree(c);
    return 0;
}
