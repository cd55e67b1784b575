/* stackprog: how much of a thread's stack a mapped call takes, for
 * tests/test_stack.c. The config maps stack_lock, lists stack_cond and
 * stack_rw; plain_lock stays unmapped.
 *
 *   stackprog KIB GO OP...
 *
 * Runs OP... in order on one thread whose stack is KIB KiB
 * (pthread_attr_setstacksize; 0: PTHREAD_STACK_MIN), as a program with
 * small thread stacks does. Before the first OP the thread fills its stack
 * below itself with a pattern; after the last it finds the lowest byte
 * that changed: "used U of S" (U bytes from the top of the stack block,
 * glibc's thread descriptor and static TLS included, S the block's size).
 * First the same on a thread that only locks and unlocks plain_lock:
 * "baseline B" (what any program's thread takes there). Each OP says its
 * result and what it took below the thread's entry ("lock 0 stack 7392",
 * "timed ETIMEDOUT stack 7400": the stack is filled again before each);
 * any result is accepted: the test
 * looks at the stack, and the program ends with 0 unless it crashed.
 *
 * OPs:
 *   lock unlock try timed      pthread_mutex_* on stack_lock (timed: 2 s)
 *   cond                       lock, a timed wait of 200 ms on stack_cond, unlock
 *   signal                     pthread_cond_signal and _broadcast on stack_cond
 *   condwake                   lock, wait on stack_cond until another thread
 *                              (default stack) locks, signals and unlocks
 *   rd wr rdtry wrtry rdtimed wrtimed rwun   pthread_rwlock_* on stack_rw
 *   wait:NAME                  says "waiting NAME", waits for the file GO-NAME
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prog.h"

#define FILL        0xa5
#define FILL_MARGIN 1024        /* bytes left unfilled below the filling frame */
#define TIMED_MS    2000
#define COND_MS     200
#define WAKE_MS     30000

pthread_mutex_t stack_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t plain_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t stack_cond = PTHREAD_COND_INITIALIZER;
pthread_rwlock_t stack_rw = PTHREAD_RWLOCK_INITIALIZER;

static const char *go;
static char **ops;
static int nops;
static volatile int waiting, woken;

struct span { unsigned char *low, *top; };

static struct span my_stack(void)
{
    pthread_attr_t a;
    void *addr;
    size_t size;
    struct span s = { NULL, NULL };
    if (pthread_getattr_np(pthread_self(), &a) != 0)
        return s;
    if (pthread_attr_getstack(&a, &addr, &size) == 0) {
        s.low = addr;
        s.top = s.low + size;
    }
    pthread_attr_destroy(&a);
    return s;
}

/* Fills from the stack's lowest byte to FILL_MARGIN below this frame. */
static __attribute__((noinline)) void fill(struct span s)
{
    volatile unsigned char here = 0;
    volatile unsigned char *p = s.low;
    while (p < &here - FILL_MARGIN)
        *p++ = FILL;
}

/* Bytes from the top of the stack block down to the lowest one touched. */
static size_t used(struct span s)
{
    const unsigned char *p = s.low;
    while (*p == FILL)
        p++;
    return (size_t)(s.top - p);
}

static void *waker(void *arg)
{
    (void)arg;
    while (!waiting)
        usleep(PROG_POLL_US);
    pthread_mutex_lock(&stack_lock);       /* once the waiter let it go in its wait */
    woken = 1;
    pthread_cond_signal(&stack_cond);
    pthread_mutex_unlock(&stack_lock);
    return NULL;
}

static void wait_go(const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s-%s", go, name);
    say("waiting %s", name);
    wait_file(p);
}

static int op(const char *o)
{
    struct timespec d;
    int rc = 0;
    if (strcmp(o, "lock") == 0) {
        rc = pthread_mutex_lock(&stack_lock);
    } else if (strcmp(o, "unlock") == 0) {
        rc = pthread_mutex_unlock(&stack_lock);
    } else if (strcmp(o, "try") == 0) {
        rc = pthread_mutex_trylock(&stack_lock);
    } else if (strcmp(o, "timed") == 0) {
        d = deadline_in(CLOCK_REALTIME, TIMED_MS);
        rc = pthread_mutex_timedlock(&stack_lock, &d);
    } else if (strcmp(o, "cond") == 0) {
        rc = pthread_mutex_lock(&stack_lock);
        if (rc == 0) {
            d = deadline_in(CLOCK_REALTIME, COND_MS);
            rc = pthread_cond_timedwait(&stack_cond, &stack_lock, &d);
            pthread_mutex_unlock(&stack_lock);
        }
    } else if (strcmp(o, "signal") == 0) {
        rc = pthread_cond_signal(&stack_cond);
        if (rc == 0)
            rc = pthread_cond_broadcast(&stack_cond);
    } else if (strcmp(o, "condwake") == 0) {
        pthread_t t;
        rc = pthread_mutex_lock(&stack_lock);
        if (rc == 0 && (rc = pthread_create(&t, NULL, waker, NULL)) == 0) {
            d = deadline_in(CLOCK_REALTIME, WAKE_MS);
            waiting = 1;
            while (!woken && rc == 0)
                rc = pthread_cond_timedwait(&stack_cond, &stack_lock, &d);
            pthread_mutex_unlock(&stack_lock);
            pthread_join(t, NULL);
        }
    } else if (strcmp(o, "rd") == 0) {
        rc = pthread_rwlock_rdlock(&stack_rw);
    } else if (strcmp(o, "wr") == 0) {
        rc = pthread_rwlock_wrlock(&stack_rw);
    } else if (strcmp(o, "rdtry") == 0) {
        rc = pthread_rwlock_tryrdlock(&stack_rw);
    } else if (strcmp(o, "wrtry") == 0) {
        rc = pthread_rwlock_trywrlock(&stack_rw);
    } else if (strcmp(o, "rdtimed") == 0) {
        d = deadline_in(CLOCK_REALTIME, TIMED_MS);
        rc = pthread_rwlock_timedrdlock(&stack_rw, &d);
    } else if (strcmp(o, "wrtimed") == 0) {
        d = deadline_in(CLOCK_REALTIME, TIMED_MS);
        rc = pthread_rwlock_timedwrlock(&stack_rw, &d);
    } else if (strcmp(o, "rwun") == 0) {
        rc = pthread_rwlock_unlock(&stack_rw);
    } else if (strncmp(o, "wait:", 5) == 0) {
        wait_go(o + 5);
    } else {
        say("unknown op %s", o);
        exit(2);
    }
    return rc;
}

/* r[0] bytes used, r[1] the block's size, r[2] what was in use at the
 * thread's entry (descriptor, static TLS, glibc's start frames). */
static void *run_ops(void *arg)
{
    size_t *r = arg;
    struct span s = my_stack();
    if (!s.low)
        return (void *)1L;
    r[2] = (size_t)(s.top - (unsigned char *)__builtin_frame_address(0));
    r[0] = 0;
    for (int i = 0; i < nops; i++) {
        fill(s);
        int rc = op(ops[i]);
        size_t u = used(s);
        say("%s %s stack %zu", ops[i], ename(rc), u - r[2]);
        if (u > r[0])
            r[0] = u;
    }
    r[1] = (size_t)(s.top - s.low);
    return NULL;
}

static void *run_plain(void *arg)
{
    size_t *r = arg;
    struct span s = my_stack();
    if (!s.low)
        return (void *)1L;
    r[2] = (size_t)(s.top - (unsigned char *)__builtin_frame_address(0));
    fill(s);
    pthread_mutex_lock(&plain_lock);
    pthread_mutex_unlock(&plain_lock);
    r[0] = used(s);
    r[1] = (size_t)(s.top - s.low);
    return NULL;
}

/* Runs fn on a thread of `size` bytes of stack; its two results in r. */
static void on_small_stack(size_t size, void *(*fn)(void *), size_t *r)
{
    pthread_attr_t a;
    pthread_t t;
    void *res = NULL;
    pthread_attr_init(&a);
    int rc = pthread_attr_setstacksize(&a, size);
    if (rc == 0)
        rc = pthread_create(&t, &a, fn, r);
    if (rc != 0) {
        say("thread of %zu bytes: %s", size, ename(rc));
        exit(1);
    }
    pthread_join(t, &res);
    pthread_attr_destroy(&a);
    if (res) {
        say("pthread_getattr_np failed");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: stackprog KIB GO OP...\n");
        return 2;
    }
    long kib = atol(argv[1]);
    size_t size = kib > 0 ? (size_t)kib * 1024 : (size_t)PTHREAD_STACK_MIN;
    go = argv[2];
    ops = argv + 3;
    nops = argc - 3;
    size_t r[3];
    on_small_stack(size, run_plain, r);
    say("baseline %zu entry %zu", r[0], r[2]);
    on_small_stack(size, run_ops, r);
    say("used %zu of %zu entry %zu", r[0], r[1], r[2]);
    return 0;
}
