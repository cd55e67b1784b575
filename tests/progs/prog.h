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
