/* pp.h: what the helper programs of test_posix share (tests/progs/posixprog.c
 * and tests/posix/psx_host.c). Ordinary program code: nothing here knows of
 * dmutex. Every output line is one write(2), so that lines of processes
 * sharing an output file keep the order of events.
 *
 * The exclusion checker: THREADS threads each run ITERS critical sections
 * under a caller-given enter/leave pair; a section reads a counter from
 * Redis, sleeps HOLD_US, and writes it back plus one. A lost update (two
 * sections overlapping) shows as a short final count. */
#ifndef PP_H
#define PP_H

#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PP_POLL_US    10000
#define PP_MAX_THREADS 32

static inline void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(STDOUT_FILENO, buf, (size_t)n);
    (void)w;
}

/* "0", or the errno's name ("EBUSY"). Thread-local buffer for numbers. */
static inline const char *ename(int rc)
{
    static __thread char num[16];
    if (rc == 0)
        return "0";
    const char *s = strerrorname_np(rc);
    if (s)
        return s;
    snprintf(num, sizeof num, "%d", rc);
    return num;
}

static inline long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* An absolute time `ms` from now on `clk`. */
static inline struct timespec deadline_in(clockid_t clk, long ms)
{
    struct timespec t;
    clock_gettime(clk, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static inline void wait_file(const char *path)
{
    while (access(path, F_OK) != 0)
        usleep(PP_POLL_US);
}

static inline redisContext *pp_connect(int port)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        say("connect 127.0.0.1:%d: %s", port, c ? c->errstr : "out of memory");
        exit(1);
    }
    return c;
}

/* EXISTS of `key` (the tests pass the lock's Redis key): 1 while some
 * process holds the cluster lock. */
static inline long long pp_exists(redisContext *c, const char *key)
{
    redisReply *r = redisCommand(c, "EXISTS %s", key);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
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
    redisContext *c = pp_connect(k->port);
    for (int i = 0; i < k->iters; i++) {
        int rc = k->enter(k->arg);
        if (rc != 0) {
            say("enter failed: %s", ename(rc));
            exit(1);
        }
        redisReply *r = redisCommand(c, "GET %s", k->key);
        long v = r && r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
        freeReplyObject(r);
        if (k->hold_us)
            usleep((useconds_t)k->hold_us);
        r = redisCommand(c, "SET %s %ld", k->key, v + 1);
        freeReplyObject(r);
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
    pthread_t t[PP_MAX_THREADS];
    if (threads > PP_MAX_THREADS)
        threads = PP_MAX_THREADS;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, pp_worker, k) != 0) {
            say("pthread_create failed");
            exit(1);
        }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    say("done %d", threads * k->iters);
}

#endif
