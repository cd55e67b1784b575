/* prog.h: what the test programs (tests/progs/, tests/posix/) share.
 * Ordinary program code, static inline, one copy per program: nothing here
 * knows of dmutex, and a program that does not use the Redis helpers does
 * not link hiredis (an unused static inline function leaves no reference).
 *
 * Every output line is one write(2), so that the lines of processes and
 * threads sharing an output file keep the order of events; the tests read
 * those lines. */
#ifndef DM_TEST_PROG_H
#define DM_TEST_PROG_H

#ifndef _GNU_SOURCE
#error "define _GNU_SOURCE before the first #include (prog.h uses strerrorname_np)"
#endif

#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"     /* clock_ms, now_ms, deadline_in */

#define PROG_POLL_US 2000       /* how often a waiting program looks again */

/* One line to stdout, newline added, one write(2). write(2) is a
 * cancellation point: a pending cancel must land where a test expects it
 * (in a section's sleeps), not in a report, so it runs with cancellation
 * off. */
static inline void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
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
    int oc;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &oc);
    ssize_t w = write(STDOUT_FILENO, buf, (size_t)n);
    (void)w;
    pthread_setcancelstate(oc, NULL);
}

/* "0", or the errno's name ("EBUSY"). A number without a name is written
 * into one of PROG_ENAME_SLOTS thread-local buffers, reused round robin,
 * so that one say() may show that many results. */
#define PROG_ENAME_SLOTS 4
static inline const char *ename(int rc)
{
    static __thread char num[PROG_ENAME_SLOTS][16];
    static __thread unsigned next;
    if (rc == 0)
        return "0";
    const char *s = strerrorname_np(rc);
    if (s)
        return s;
    char *buf = num[next++ % PROG_ENAME_SLOTS];
    snprintf(buf, sizeof num[0], "%d", rc);
    return buf;
}

static inline void *prog_unlock_main(void *m)
{
    return (void *)(long)pthread_mutex_unlock(m);
}

/* pthread_mutex_unlock(m) called by another thread than its owner (an
 * ownership check's subject): its result. */
static inline int prog_unlock_elsewhere(pthread_mutex_t *m)
{
    pthread_t t;
    void *res = (void *)(long)EAGAIN;
    if (pthread_create(&t, NULL, prog_unlock_main, m) == 0)
        pthread_join(t, &res);
    return (int)(long)res;
}

#define PROG_MAX_THREADS 64

/* Runs fn(arg) on `n` threads at once (at most PROG_MAX_THREADS) and waits
 * for them all; returns how many ran. A thread that cannot start ends the
 * program: it says so and exits 1 (a test must not count on it). */
static inline int prog_run_threads(int n, void *(*fn)(void *), void *arg)
{
    pthread_t t[PROG_MAX_THREADS];
    if (n > PROG_MAX_THREADS)
        n = PROG_MAX_THREADS;
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], NULL, fn, arg) != 0) {
            say("pthread_create failed");
            exit(1);
        }
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    return n;
}

/* Waits until `path` exists (a test's go signal); NULL: no wait. */
static inline void wait_file(const char *path)
{
    while (path && access(path, F_OK) != 0)
        usleep(PROG_POLL_US);
}

/* A connection to the Redis server at host:port, or the program says why
 * and exits 1. */
static inline redisContext *prog_connect(const char *host, int port)
{
    redisContext *c = redisConnect(host, port);
    if (!c || c->err) {
        say("connect %s:%d: %s", host, port, c ? c->errstr : "out of memory");
        exit(1);
    }
    return c;
}

/* One counted section of the exclusion checks that count: read the
 * counter `key`, sleep `hold_us`, write it back plus one (GET, SET: not
 * atomic, so two overlapping sections lose an update). Returns the value
 * read. The caller holds the lock under test. */
static inline long prog_count_once(redisContext *c, const char *key, int hold_us)
{
    redisReply *r = redisCommand(c, "GET %s", key);
    long v = r && r->type == REDIS_REPLY_STRING ? atol(r->str) : 0;
    freeReplyObject(r);
    if (hold_us)
        usleep((useconds_t)hold_us);
    freeReplyObject(redisCommand(c, "SET %s %ld", key, v + 1));
    return v;
}

#endif
