/* lockprog: one pthread mutex scenario per run, for the shim's integration
 * tests (tests/test_shim.c), which map its globals by config. It knows
 * nothing of dmutex: it is what an ordinary program does with its mutexes.
 *
 *   lockprog MODE [ARG]
 *
 * Prints "main" as the first thing main does (a test of a config error
 * checks that main never ran), then one line per step. Every line is one
 * write(2), so the order in a shared output file is the order of events.
 * Results are errno names ("0", "EBUSY", ...); times are milliseconds on
 * CLOCK_MONOTONIC.
 *
 * Modes (held_lock unless said):
 *   hold FILE        lock, "locked RC", wait until FILE exists, unlock, "unlocked RC"
 *   hold-exit FILE   lock, "locked RC", wait until FILE exists, return from main holding it
 *   hold-forever     lock, "locked RC", sleep until killed
 *   handover FILE MS lock, "locked RC", wait until FILE exists, unlock (when
 *                    another process waits, it hands the lock over), then at
 *                    once a trylock, "handover-try RC MS", and a timedlock with
 *                    a deadline MS from then, "handover-timed RC MS" (MS: how
 *                    long each call took)
 *   handover-lock FILE lock, "locked RC", wait until FILE exists, unlock,
 *                    then at once lock again: "relocked RC MS", unlock
 *   handover-sibling FILE MS  as handover-lock, while another thread,
 *                    SIBLING_DELAY_MS after the unlock, trylocks sib_lock
 *                    (mapped to held_lock's name by the test), "sibling-try
 *                    RC MS", and timedlocks it with a deadline MS away,
 *                    "sibling-timed RC MS"
 *   handover-fork FILE FILE2  the handover, "handed", wait until FILE2 exists,
 *                    fork; the child locks: "child-locked RC MS", unlocks
 *   handover-cancel FILE  the handover, then another thread locks (waiting
 *                    out the grace); main cancels it CANCEL_AFTER_MS in: the
 *                    thread's lock returns ("thread-locked RC"), it unlocks,
 *                    and is cancelled at pthread_testcancel; main joins it,
 *                    "cancelled YES|NO", then locks: "relocked RC MS"
 *   lock             lock, "locked RC MS" (MS: how long lock took), unlock
 *   trylock          trylock, "trylock RC MS", unlock if it succeeded
 *   timedlock MS     timedlock with a deadline MS from now, "timedlock RC MS"
 *   recursive N FILE rec_lock (recursive): 1 + N nested locks, N unlocks,
 *                    "outer", wait until FILE exists, the last unlock,
 *                    "recursive RC" (the first non-zero result, or 0)
 *   errcheck OP      err_lock (error-checking): lock, then OP (relock: lock
 *                    again; foreign: unlock from another thread), then unlock:
 *                    "errcheck OP LOCK-RC OP-RC UNLOCK-RC"
 *   destroy-held T   held_lock (T = normal) or robust_lock (T = robust): lock,
 *                    destroy, unlock, destroy: "destroy-held T DESTROY UNLOCK DESTROY"
 *   unmapped N       plain_lock only: N lock/unlock, trylock, timedlock:
 *                    "unmapped RC"
 *   churn FILE       SIGPIPE at its default disposition (death), then lock and
 *                    unlock held_lock until FILE exists: "churn N FAILED FIRST"
 *                    (cycles, lock calls that did not return 0, the first such
 *                    result)
 *   churn-hold FILE  as churn, each critical section CHURN_HOLD_US long (a
 *                    section longer than a batch goes on after, batch_hold_us)
 *   churn-idle FILE  as churn, then sleeps until killed (a process that stops
 *                    locking but lives on): "churn N FAILED FIRST", "idle"
 *   churn-_exit FILE as churn, then one more lock and unlock, and _exit(0) at once
 *   churn-exec FILE  the same, then execl("/bin/true") at once
 *   churn-stop FILE  the same, then stops itself (SIGSTOP) at once; once
 *                    continued: "continued"
 *   storm-hold FILE  as hold, under a storm of signals: SIGALRM every
 *                    STORM_US (setitimer), its handler installed without
 *                    SA_RESTART (as a program's profiler or timer may be),
 *                    from before the lock to after the unlock: "locked RC",
 *                    "unlocked RC", then "signals N" (how many arrived) */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog.h"

pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t rec_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
pthread_mutex_t err_lock = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
pthread_mutex_t plain_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t robust_lock;        /* made robust by main */
pthread_mutex_t sib_lock = PTHREAD_MUTEX_INITIALIZER;   /* handover-sibling */

#define STORM_US 200                /* storm-hold: a SIGALRM this often */
#define CHURN_HOLD_US 3000          /* churn-hold: each critical section */
#define SIBLING_DELAY_MS 200        /* handover-sibling: the other thread's calls */
#define CANCEL_AFTER_MS 200         /* handover-cancel: the cancel, after the thread starts */
static long sibling_ms;

/* The handover modes' start: lock held_lock, "locked RC", wait until FILE
 * exists, unlock (a handover when another process waits). */
static void hold_until(const char *file)
{
    int rc = pthread_mutex_lock(&held_lock);
    say("locked %s", ename(rc));
    wait_file(file);
    pthread_mutex_unlock(&held_lock);
}

/* handover-sibling's other thread. */
static void *sibling(void *unused)
{
    (void)unused;
    struct timespec d = { 0, SIBLING_DELAY_MS * 1000000L };
    nanosleep(&d, NULL);
    long long t = now_ms();
    int rc = pthread_mutex_trylock(&sib_lock);
    say("sibling-try %s %lld", ename(rc), now_ms() - t);
    if (rc == 0)
        pthread_mutex_unlock(&sib_lock);
    t = now_ms();
    struct timespec dl = deadline_in(CLOCK_REALTIME, sibling_ms);
    rc = pthread_mutex_timedlock(&sib_lock, &dl);
    say("sibling-timed %s %lld", ename(rc), now_ms() - t);
    if (rc == 0)
        pthread_mutex_unlock(&sib_lock);
    return NULL;
}

/* handover-cancel's thread: pthread_mutex_lock is no cancellation point
 * (POSIX), so a cancel that comes while it waits is acted on later. */
static void *cancelled_locker(void *unused)
{
    (void)unused;
    int rc = pthread_mutex_lock(&held_lock);
    say("thread-locked %s", ename(rc));
    if (rc == 0)
        pthread_mutex_unlock(&held_lock);
    pthread_testcancel();
    say("not cancelled");
    return NULL;
}

static volatile sig_atomic_t storm_signals;

static void on_storm(int sig)
{
    (void)sig;
    storm_signals++;
}

/* storm-hold: SIGALRM every STORM_US from now on (on = 1), or no more. */
static void storm(int on)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_storm;       /* sa_flags 0: no SA_RESTART */
    sigemptyset(&sa.sa_mask);
    if (on)
        sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { { 0, on ? STORM_US : 0 }, { 0, on ? STORM_US : 0 } };
    setitimer(ITIMER_REAL, &it, NULL);
}

static int usage(void)
{
    fprintf(stderr, "usage: lockprog hold FILE | hold-exit FILE | hold-forever | handover FILE MS |"
                    " handover-lock FILE | handover-sibling FILE MS |"
                    " handover-fork FILE FILE2 | handover-cancel FILE |"
                    " lock | trylock |"
                    " timedlock MS | recursive N FILE | errcheck relock|foreign |"
                    " destroy-held normal|robust | unmapped N | churn FILE | churn-hold FILE | churn-idle FILE | churn-_exit FILE | churn-exec FILE | churn-stop FILE | storm-hold FILE\n");
    return 2;
}

int main(int argc, char **argv)
{
    say("main");
    if (argc < 2)
        return usage();
    const char *mode = argv[1], *arg = argc > 2 ? argv[2] : NULL;
    long long t0 = now_ms();
    int rc;
    pthread_mutexattr_t ra;
    pthread_mutexattr_init(&ra);
    pthread_mutexattr_setrobust(&ra, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&robust_lock, &ra);
    pthread_mutexattr_destroy(&ra);

    if ((strcmp(mode, "hold") == 0 || strcmp(mode, "hold-exit") == 0) && arg) {
        rc = pthread_mutex_lock(&held_lock);
        say("locked %s", ename(rc));
        wait_file(arg);
        if (strcmp(mode, "hold-exit") == 0) {
            say("returning");
            return 0;
        }
        rc = pthread_mutex_unlock(&held_lock);
        say("unlocked %s", ename(rc));
        return 0;
    }
    if (strcmp(mode, "storm-hold") == 0 && arg) {
        storm(1);
        rc = pthread_mutex_lock(&held_lock);
        say("locked %s", ename(rc));
        wait_file(arg);
        rc = pthread_mutex_unlock(&held_lock);
        say("unlocked %s", ename(rc));
        storm(0);
        say("signals %ld", (long)storm_signals);
        return 0;
    }
    if (strcmp(mode, "handover") == 0 && argc > 3) {
        hold_until(arg);
        long long t = now_ms();
        rc = pthread_mutex_trylock(&held_lock);
        say("handover-try %s %lld", ename(rc), now_ms() - t);
        if (rc == 0)
            pthread_mutex_unlock(&held_lock);
        t = now_ms();
        struct timespec dl = deadline_in(CLOCK_REALTIME, atol(argv[3]));
        rc = pthread_mutex_timedlock(&held_lock, &dl);
        say("handover-timed %s %lld", ename(rc), now_ms() - t);
        if (rc == 0)
            pthread_mutex_unlock(&held_lock);
        return 0;
    }
    if (strcmp(mode, "handover-fork") == 0 && argc > 3) {
        hold_until(arg);
        say("handed");
        wait_file(argv[3]);
        pid_t child = fork();
        if (child == 0) {
            long long t = now_ms();
            rc = pthread_mutex_lock(&held_lock);
            say("child-locked %s %lld", ename(rc), now_ms() - t);
            if (rc == 0)
                pthread_mutex_unlock(&held_lock);
            _exit(0);
        }
        int st;
        return child > 0 && waitpid(child, &st, 0) == child && WIFEXITED(st) ? 0 : 1;
    }
    if (strcmp(mode, "handover-cancel") == 0 && arg) {
        hold_until(arg);
        pthread_t th;
        if (pthread_create(&th, NULL, cancelled_locker, NULL) != 0)
            return 1;
        struct timespec d = { 0, CANCEL_AFTER_MS * 1000000L };
        nanosleep(&d, NULL);
        pthread_cancel(th);
        void *res;
        pthread_join(th, &res);
        say("cancelled %s", res == PTHREAD_CANCELED ? "YES" : "NO");
        long long t = now_ms();
        rc = pthread_mutex_lock(&held_lock);
        say("relocked %s %lld", ename(rc), now_ms() - t);
        if (rc == 0)
            pthread_mutex_unlock(&held_lock);
        return 0;
    }
    int sib = strcmp(mode, "handover-sibling") == 0 && argc > 3;
    if ((strcmp(mode, "handover-lock") == 0 && arg) || sib) {
        if (sib)
            sibling_ms = atol(argv[3]);
        hold_until(arg);
        pthread_t th;
        if (sib && pthread_create(&th, NULL, sibling, NULL) != 0)
            return 1;
        long long t = now_ms();
        rc = pthread_mutex_lock(&held_lock);
        say("relocked %s %lld", ename(rc), now_ms() - t);
        if (rc == 0)
            pthread_mutex_unlock(&held_lock);
        if (sib)
            pthread_join(th, NULL);
        return 0;
    }
    if (strcmp(mode, "hold-forever") == 0) {
        rc = pthread_mutex_lock(&held_lock);
        say("locked %s", ename(rc));
        for (;;)
            pause();
    }
    /* One attempt on held_lock: what it returned and when, then let go. */
    int lock = strcmp(mode, "lock") == 0, try = strcmp(mode, "trylock") == 0;
    int timed = strcmp(mode, "timedlock") == 0 && arg;
    if (lock || try || timed) {
        struct timespec dl = deadline_in(CLOCK_REALTIME, timed ? atol(arg) : 0);
        rc = lock  ? pthread_mutex_lock(&held_lock)
           : try   ? pthread_mutex_trylock(&held_lock)
                   : pthread_mutex_timedlock(&held_lock, &dl);
        say("%s %s %lld", lock ? "locked" : mode, ename(rc), now_ms() - t0);
        if (rc == 0)
            pthread_mutex_unlock(&held_lock);
        return 0;
    }
    if (strcmp(mode, "recursive") == 0 && argc > 3) {
        int n = atoi(arg), first = 0;
        for (int i = 0; i <= n; i++)
            if ((rc = pthread_mutex_lock(&rec_lock)) != 0 && !first)
                first = rc;
        for (int i = 0; i < n; i++)
            if ((rc = pthread_mutex_unlock(&rec_lock)) != 0 && !first)
                first = rc;
        say("outer");
        wait_file(argv[3]);
        if ((rc = pthread_mutex_unlock(&rec_lock)) != 0 && !first)
            first = rc;
        say("recursive %s", ename(first));
        return 0;
    }
    if (strcmp(mode, "errcheck") == 0 && arg) {
        int lk = pthread_mutex_lock(&err_lock);
        int op = strcmp(arg, "relock") == 0 ? pthread_mutex_lock(&err_lock)
                                            : prog_unlock_elsewhere(&err_lock);
        int unl = pthread_mutex_unlock(&err_lock);
        say("errcheck %s %s %s %s", arg, ename(lk), ename(op), ename(unl));
        return 0;
    }
    if (strcmp(mode, "destroy-held") == 0 && arg) {
        /* glibc itself refuses to destroy a held normal mutex, but not a
         * held robust one. */
        pthread_mutex_t *m = strcmp(arg, "robust") == 0 ? &robust_lock : &held_lock;
        pthread_mutex_lock(m);
        int d1 = pthread_mutex_destroy(m);
        int u = pthread_mutex_unlock(m);
        int d2 = pthread_mutex_destroy(m);
        say("destroy-held %s %s %s %s", arg, ename(d1), ename(u), ename(d2));
        return 0;
    }
    if (strcmp(mode, "unmapped") == 0 && arg) {
        int n = atoi(arg), first = 0;
        for (int i = 0; i < n; i++) {
            if ((rc = pthread_mutex_lock(&plain_lock)) != 0 && !first)
                first = rc;
            pthread_mutex_unlock(&plain_lock);
        }
        if ((rc = pthread_mutex_trylock(&plain_lock)) != 0 && !first)
            first = rc;
        pthread_mutex_unlock(&plain_lock);
        struct timespec dl = deadline_in(CLOCK_REALTIME, 1000);
        if ((rc = pthread_mutex_timedlock(&plain_lock, &dl)) != 0 && !first)
            first = rc;
        pthread_mutex_unlock(&plain_lock);
        say("unmapped %s", ename(first));
        return 0;
    }
    if ((strcmp(mode, "churn") == 0 || strcmp(mode, "churn-hold") == 0 ||
         strcmp(mode, "churn-idle") == 0 ||
         strcmp(mode, "churn-_exit") == 0 || strcmp(mode, "churn-exec") == 0 ||
         strcmp(mode, "churn-stop") == 0) && arg) {
        /* A program that never heard of SIGPIPE: a write of the shim's to a
         * socket the server closed must not kill it. */
        signal(SIGPIPE, SIG_DFL);
        long n = 0, failed = 0;
        int first = 0, hold = strcmp(mode, "churn-hold") == 0;
        while (access(arg, F_OK) != 0) {
            if ((rc = pthread_mutex_lock(&held_lock)) == 0) {
                if (hold) {
                    struct timespec ts = { 0, CHURN_HOLD_US * 1000L };
                    nanosleep(&ts, NULL);
                }
                pthread_mutex_unlock(&held_lock);
            } else {
                failed++;
                if (!first)
                    first = rc;
            }
            n++;
        }
        say("churn %ld %ld %s", n, failed, ename(first));
        if (strcmp(mode, "churn-idle") == 0) {
            say("idle");
            for (;;)
                pause();
        }
        if (strcmp(mode, "churn-exec") == 0 || strcmp(mode, "churn-_exit") == 0 ||
            strcmp(mode, "churn-stop") == 0) {
            /* The last unlock of a contended batch keeps the hold a moment
             * for the next lock: the image ends right inside that moment. */
            pthread_mutex_lock(&held_lock);
            pthread_mutex_unlock(&held_lock);
            if (strcmp(mode, "churn-exec") == 0) {
                execl("/bin/true", "true", (char *)NULL);
                return 1;
            }
            if (strcmp(mode, "churn-stop") == 0) {
                raise(SIGSTOP);
                say("continued");
                return 0;
            }
            _exit(0);
        }
        return 0;
    }
    return usage();
}
