/* metricsprog: known lock workloads for the metrics tests
 * (tests/test_metrics.c), which map lock_a and lock_b by config. It knows
 * nothing of dmutex.
 *
 *   metricsprog work N M [SLEEP_MS]
 *       two threads, each: N lock/unlock of lock_a and M of lock_b,
 *       interleaved; then "done", sleep SLEEP_MS, return from main
 *   metricsprog fork N K GO
 *       N lock/unlock of lock_a, then a fork child does K of them and
 *       exit()s ("child done PID"); the parent waits for it, says
 *       "parent waits", waits until the file GO exists, returns from main
 *   metricsprog hold GO
 *       lock lock_a, "locked", wait until GO exists, unlock: "unlocked RC"
 *   metricsprog lock-once
 *       lock lock_a: "lock RC", unlock if it succeeded
 *   metricsprog exit-busy N
 *       a thread locks and unlocks lock_a without end; main calls exit(0)
 *       once it has done N of them ("exiting N") */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog.h"

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static long n_a, n_b;
static volatile long shared_a, shared_b;

static void *worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < n_a || i < n_b; i++) {
        if (i < n_a) {
            pthread_mutex_lock(&lock_a);
            shared_a++;
            pthread_mutex_unlock(&lock_a);
        }
        if (i < n_b) {
            pthread_mutex_lock(&lock_b);
            shared_b++;
            pthread_mutex_unlock(&lock_b);
        }
    }
    return NULL;
}

static int lock_n(long n)
{
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&lock_a);
        shared_a++;
        pthread_mutex_unlock(&lock_a);
    }
    return 0;
}

static void *busy(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&lock_a);
        shared_a++;
        pthread_mutex_unlock(&lock_a);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "lock-once") == 0) {
        int r = pthread_mutex_lock(&lock_a);
        say("lock %s", ename(r));
        if (r == 0)
            pthread_mutex_unlock(&lock_a);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "exit-busy") == 0) {
        long n = atol(argv[2]);
        pthread_t t;
        pthread_create(&t, NULL, busy, NULL);
        while (shared_a < n)
            usleep(PROG_POLL_US);
        say("exiting %ld", n);
        exit(0);
    }
    if (argc >= 4 && strcmp(argv[1], "work") == 0) {
        n_a = atol(argv[2]);
        n_b = atol(argv[3]);
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, worker, NULL);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        say("done %ld %ld", shared_a, shared_b);
        if (argc >= 5)
            usleep((useconds_t)atol(argv[4]) * 1000);
        return 0;
    }
    if (argc == 5 && strcmp(argv[1], "fork") == 0) {
        lock_n(atol(argv[2]));
        pid_t pid = fork();
        if (pid == 0) {
            lock_n(atol(argv[3]));
            say("child done %ld", (long)getpid());
            exit(0);
        }
        int st;
        waitpid(pid, &st, 0);
        say("parent waits");
        wait_file(argv[4]);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "hold") == 0) {
        pthread_mutex_lock(&lock_a);
        say("locked");
        wait_file(argv[2]);
        say("unlocked %s", ename(pthread_mutex_unlock(&lock_a)));
        return 0;
    }
    fprintf(stderr, "usage: metricsprog work N M [SLEEP_MS] | fork N K GO | hold GO | "
                    "lock-once | exit-busy N\n");
    return 2;
}
