/* metricsprog: known lock workloads for the metrics tests
 * (tests/test_metrics.c), which map lock_a and lock_b by config. It knows
 * nothing of dmutex but dmutex_name, declared weak (the names and
 * recreate workloads map heap mutexes with it).
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
 *       once it has done N of them ("exiting N")
 *   metricsprog names N
 *       N heap mutexes named h0 .. h(N-1) with dmutex_name, h0 locked and
 *       unlocked once: "named N", return from main
 *   metricsprog recreate K
 *       K times: a heap mutex named "R" with dmutex_name, locked and
 *       unlocked once, destroyed and freed (so is the name each time):
 *       "recreated K", return from main
 *   metricsprog churn N
 *       N heap mutexes named c0 .. c(N-1) with dmutex_name, one after the
 *       other: the even ones locked and unlocked once, each destroyed
 *       and freed: "churned N", return from main
 *   metricsprog turns SHMFILE a|b N
 *       two processes take turns on N heap mutexes named t0 .. t(N-1)
 *       (dmutex_name), in step through the file SHMFILE: a locks object
 *       i, holds it 1 ms, unlocks, destroys it; b waits for it (its grant
 *       comes after a wait: a batch), unlocks (the hold lingers) and
 *       destroys it 150 to 270 us later, about when the linger ends and
 *       notify's thread gives the hold back. "turns N", return from main
 *   metricsprog forkcond
 *       a heap condition variable made by cond_new (a config lists it by
 *       init_site), a thread waiting on it; then fork: the child destroys
 *       and frees the cond and returns from main ("child PID destroyed
 *       RC"); the parent waits for it, wakes its waiter, destroys the cond
 *       and returns from main ("forkcond done")
 *   metricsprog fork-until PATH GO
 *       wait until GO exists, lock and unlock lock_a once, then fork (a
 *       child that _exits at once) and wait for the child, again and
 *       again until PATH exists: "forked N", return from main
 *   metricsprog exec N K GO1 GO2
 *       N lock/unlock of lock_a, "parent locked", wait until GO1 exists,
 *       run this program as "work K 0" (fork and exec, the same
 *       environment) and wait for it: "child exited RC"; wait until GO2
 *       exists, return from main */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog.h"

int dmutex_name(pthread_mutex_t *m, const char *name) __attribute__((weak));

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

/* A heap mutex named `prefix` and i with dmutex_name; NULL (said) when
 * that fails. */
static pthread_mutex_t *named_new(const char *prefix, long i)
{
    pthread_mutex_t *m = malloc(sizeof *m);
    char name[32];
    snprintf(name, sizeof name, "%s%ld", prefix, i);
    if (!m) {
        say("%s: out of memory", name);
        return NULL;
    }
    pthread_mutex_init(m, NULL);
    int r = dmutex_name(m, name);
    if (r != 0) {
        say("dmutex_name %s: %s", name, ename(r));
        return NULL;
    }
    return m;
}

/* The "forkcond" mode (see the top). */
__attribute__((noinline)) pthread_cond_t *cond_new(void)
{
    pthread_cond_t *c = malloc(sizeof *c);
    if (c)
        pthread_cond_init(c, NULL);
    return c;
}

static pthread_mutex_t fc_mu = PTHREAD_MUTEX_INITIALIZER;     /* unmapped */
static pthread_cond_t *fc_cond;
static int fc_go, fc_waiting;

static void *fc_waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&fc_mu);
    fc_waiting = 1;
    while (!fc_go)
        pthread_cond_wait(fc_cond, &fc_mu);
    pthread_mutex_unlock(&fc_mu);
    return NULL;
}

static int forkcond(void)
{
    if (!(fc_cond = cond_new()))
        return 1;
    pthread_t t;
    if (pthread_create(&t, NULL, fc_waiter, NULL) != 0)
        return 1;
    for (int waiting = 0; !waiting; usleep(PROG_POLL_US)) {
        pthread_mutex_lock(&fc_mu);     /* the waiter let go of it: it waits */
        waiting = fc_waiting;
        pthread_mutex_unlock(&fc_mu);
    }
    pid_t pid = fork();
    if (pid == 0) {
        int r = pthread_cond_destroy(fc_cond);
        free(fc_cond);
        say("child %d destroyed %s", (int)getpid(), ename(r));
        return 0;
    }
    if (pid < 0) {
        say("fork: %s", ename(errno));
        return 1;
    }
    waitpid(pid, NULL, 0);
    pthread_mutex_lock(&fc_mu);
    fc_go = 1;
    pthread_cond_broadcast(fc_cond);
    pthread_mutex_unlock(&fc_mu);
    pthread_join(t, NULL);
    pthread_cond_destroy(fc_cond);
    free(fc_cond);
    say("forkcond done");
    return 0;
}

/* The "turns" mode (see the top). */
#define TURNS_PEER_S 20         /* no turn of the peer for so long: it is gone */

/* Waits until *at reaches `want`; 0, or -1 (said) after TURNS_PEER_S. */
static int turn_wait(const long *at, long want, const char *peer)
{
    long long end = now_ms() + TURNS_PEER_S * 1000LL;
    while (__atomic_load_n(at, __ATOMIC_SEQ_CST) < want) {
        if (now_ms() > end) {
            say("turns: no turn from %s for %d s at %ld", peer, TURNS_PEER_S, want - 1);
            return -1;
        }
        usleep(50);
    }
    return 0;
}

static int turns(const char *shmfile, int b, long n)
{
    struct turns { long a_holds, b_done; } *sh;
    int fd = open(shmfile, O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ftruncate(fd, sizeof *sh) != 0 ||
        (sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        say("%s: %s", shmfile, ename(errno));
        return 1;
    }
    for (long i = 0; i < n; i++) {
        pthread_mutex_t *m = named_new("t", i);
        if (!m)
            return 1;
        if (!b) {
            pthread_mutex_lock(m);
            __atomic_store_n(&sh->a_holds, i + 1, __ATOMIC_SEQ_CST);
            usleep(1000);
            pthread_mutex_unlock(m);
        } else {
            if (turn_wait(&sh->a_holds, i + 1, "a") != 0)
                return 1;
            pthread_mutex_lock(m);
            pthread_mutex_unlock(m);
            usleep((useconds_t)(150 + (i * 7) % 120));
        }
        pthread_mutex_destroy(m);
        free(m);
        if (b)
            __atomic_store_n(&sh->b_done, i + 1, __ATOMIC_SEQ_CST);
        else if (turn_wait(&sh->b_done, i + 1, "b") != 0)
            return 1;
    }
    say("turns %ld", n);
    return 0;
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
    if (argc == 3 && strcmp(argv[1], "names") == 0 && dmutex_name) {
        long n = atol(argv[2]);
        for (long i = 0; i < n; i++) {
            pthread_mutex_t *m = named_new("h", i);
            if (!m)
                return 1;
            if (i == 0) {
                pthread_mutex_lock(m);
                pthread_mutex_unlock(m);
            }
        }
        say("named %ld", n);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "recreate") == 0 && dmutex_name) {
        long k = atol(argv[2]);
        for (long i = 0; i < k; i++) {
            pthread_mutex_t *m = malloc(sizeof *m);
            pthread_mutex_init(m, NULL);
            int r = dmutex_name(m, "R");
            if (r != 0) {
                say("dmutex_name R: %s", ename(r));
                return 1;
            }
            pthread_mutex_lock(m);
            pthread_mutex_unlock(m);
            pthread_mutex_destroy(m);
            free(m);
        }
        say("recreated %ld", k);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "churn") == 0 && dmutex_name) {
        long n = atol(argv[2]);
        for (long i = 0; i < n; i++) {
            pthread_mutex_t *m = named_new("c", i);
            if (!m)
                return 1;
            if (i % 2 == 0) {
                pthread_mutex_lock(m);
                pthread_mutex_unlock(m);
            }
            pthread_mutex_destroy(m);
            free(m);
        }
        say("churned %ld", n);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "forkcond") == 0)
        return forkcond();
    if (argc == 5 && strcmp(argv[1], "turns") == 0 && dmutex_name)
        return turns(argv[2], strcmp(argv[3], "b") == 0, atol(argv[4]));
    if (argc == 4 && strcmp(argv[1], "fork-until") == 0) {
        wait_file(argv[3]);
        lock_n(1);
        long forks = 0;
        while (access(argv[2], F_OK) != 0) {
            pid_t pid = fork();
            if (pid == 0)
                _exit(0);
            if (pid < 0) {
                say("fork: %s", ename(errno));
                return 1;
            }
            waitpid(pid, NULL, 0);
            forks++;
            usleep(PROG_POLL_US);
        }
        say("forked %ld", forks);
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "exec") == 0) {
        lock_n(atol(argv[2]));
        say("parent locked");
        wait_file(argv[4]);
        pid_t pid = fork();
        if (pid == 0) {
            char *args[] = { "/proc/self/exe", "work", argv[3], "0", NULL };
            execv(args[0], args);
            say("exec: %s", ename(errno));
            _exit(127);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        say("child exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        wait_file(argv[5]);
        return 0;
    }
    fprintf(stderr, "usage: metricsprog work N M [SLEEP_MS] | fork N K GO | hold GO | "
                    "lock-once | exit-busy N | names N | recreate K | churn N | turns SHMFILE a|b N | "
                    "forkcond | fork-until PATH GO | exec N K GO1 GO2\n");
    return 2;
}
