/* condwake: the wake-up latency of a condition variable between two
 * processes, for `make bench`. An ordinary pthread program: run it with
 * the shim preloaded and a config that maps bench_lock and lists
 * bench_cond, and the two processes only meet through them.
 *
 *   condwake N GAP_US
 *       Forks (before touching either object) a waiter B; the parent A
 *       signals. Each of WARMUP + N rounds: B, holding bench_lock, says it
 *       is about to wait and waits on bench_cond; A takes bench_lock (so B
 *       is inside its wait), sleeps GAP_US (B sleeps through it, as a
 *       waiter does through the critical section it waits for), takes the
 *       time, calls pthread_cond_signal and unlocks. B takes the time when
 *       pthread_cond_wait returns. Measured: signal called in A -> wait
 *       returned in B, so the notice's delivery, B's wake-up and B's
 *       re-acquisition of bench_lock from A (A unlocks right after the
 *       signal) are all in it; the first WARMUP rounds (subscription,
 *       first grants) are not counted.
 * Prints {"n": N, "p50_us": x, "p99_us": y, "mean_us": z, "max_us": w}.
 *
 * The times and the round numbers go through a shared anonymous mapping
 * (both processes read CLOCK_MONOTONIC, so their times compare); every
 * wait is bounded by WAIT_S, and a timeout fails the run (exit 3). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define WARMUP 5
#define WAIT_S 30
#define POLL_US 100

pthread_mutex_t bench_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t bench_cond = PTHREAD_COND_INITIALIZER;

/* Shared by A and B. */
struct shared {
    long waiting;           /* the round B is about to wait in (set under bench_lock) */
    long signalled;         /* the round A signalled (B's predicate) */
    long long sig_ns;       /* when A called pthread_cond_signal */
    long long d[];          /* B's latencies, ns */
};

static void sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static long load(long *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

static void store(long *p, long v)
{
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

static int waiter(struct shared *sh, int rounds)
{
    pthread_mutex_lock(&bench_lock);
    for (int i = 1; i <= rounds; i++) {
        store(&sh->waiting, i);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += WAIT_S;
        while (load(&sh->signalled) < i) {
            if (pthread_cond_timedwait(&bench_cond, &bench_lock, &until) != 0) {
                fprintf(stderr, "condwake: round %d: no wake-up in %d s\n", i, WAIT_S);
                _exit(3);
            }
        }
        long long t = now_ns();
        if (i > WARMUP)
            sh->d[i - WARMUP - 1] = t - __atomic_load_n(&sh->sig_ns, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&bench_lock);
    return 0;
}

static void signaller(struct shared *sh, int rounds, long gap_us)
{
    for (int i = 1; i <= rounds; i++) {
        long long until = now_ns() + WAIT_S * 1000000000LL;
        while (load(&sh->waiting) < i) {
            if (now_ns() > until) {
                fprintf(stderr, "condwake: round %d: the waiter never waited\n", i);
                exit(3);
            }
            sleep_us(POLL_US);
        }
        /* B set `waiting` holding bench_lock and lets go of it only in
         * its wait: once A has the lock, B waits. */
        pthread_mutex_lock(&bench_lock);
        sleep_us(gap_us);
        store(&sh->signalled, i);
        __atomic_store_n(&sh->sig_ns, now_ns(), __ATOMIC_SEQ_CST);
        pthread_cond_signal(&bench_cond);
        pthread_mutex_unlock(&bench_lock);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[1]) < 1) {
        fprintf(stderr, "usage: condwake N GAP_US\n");
        return 2;
    }
    int n = atoi(argv[1]), rounds = n + WARMUP;
    long gap = atol(argv[2]);
    struct shared *sh = mmap(NULL, sizeof *sh + (size_t)n * sizeof sh->d[0],
                             PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("condwake: mmap");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("condwake: fork");
        return 1;
    }
    if (pid == 0)
        _exit(waiter(sh, rounds));
    signaller(sh, rounds, gap);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "condwake: the waiter failed\n");
        return 3;
    }
    long long sum = 0;
    for (int i = 0; i < n; i++)
        sum += sh->d[i];
    qsort(sh->d, (size_t)n, sizeof sh->d[0], cmp_ll);
    printf("{\"n\": %d, \"p50_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f, \"max_us\": %.1f}\n",
           n, sh->d[n / 2] / 1e3, sh->d[(size_t)n * 99 / 100] / 1e3, (double)sum / n / 1e3,
           sh->d[n - 1] / 1e3);
    return 0;
}
