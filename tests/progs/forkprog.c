/* forkprog: fork while other threads create and destroy heap mutexes, for
 * test_shim's check that a fork child never inherits a lock of the shim
 * held by a thread that does not exist in the child. Knows nothing of
 * dmutex.
 *
 *   forkprog THREADS FORKS
 *
 * THREADS threads each loop: malloc a mutex, heap_mutex_new() it (the
 * test maps that init site), lock and unlock it now and then, destroy and
 * free it. Meanwhile main forks FORKS times; each child locks and unlocks
 * fork_lock (mapped by symbol) and exits 0. A child that has not exited
 * after CHILD_MS is reported ("child hung") and killed, and forkprog exits
 * 1; else it prints "forks FORKS ok". */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "prog.h"

#define CHILD_MS     15000      /* a child locks once: far longer means it hangs */
#define LOCK_EVERY   16         /* one in this many heap mutexes is locked too */
#define MAX_THREADS  16

pthread_mutex_t fork_lock = PTHREAD_MUTEX_INITIALIZER;
static int stop;
static volatile int sink;

__attribute__((noinline)) void heap_mutex_new(pthread_mutex_t *m)
{
    sink = pthread_mutex_init(m, NULL);     /* not a tail call: the caller is this function */
}

static void *churn(void *arg)
{
    (void)arg;
    for (unsigned long i = 0; !__atomic_load_n(&stop, __ATOMIC_RELAXED); i++) {
        pthread_mutex_t *m = malloc(sizeof *m);
        if (!m)
            continue;
        heap_mutex_new(m);
        if (i % LOCK_EVERY == 0) {
            pthread_mutex_lock(m);
            pthread_mutex_unlock(m);
        }
        pthread_mutex_destroy(m);
        free(m);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: forkprog THREADS FORKS\n");
        return 2;
    }
    int nthreads = atoi(argv[1]), forks = atoi(argv[2]);
    if (nthreads < 1 || nthreads > MAX_THREADS)
        return 2;
    pthread_t t[MAX_THREADS];
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&t[i], NULL, churn, NULL) != 0)
            return 1;
    int rc = 0;
    for (int i = 0; i < forks && rc == 0; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            rc = 1;
            break;
        }
        if (pid == 0) {
            int r = pthread_mutex_lock(&fork_lock);
            if (r == 0)
                r = pthread_mutex_unlock(&fork_lock);
            _exit(r == 0 ? 0 : 3);
        }
        long long start = now_ms();
        int st;
        pid_t w;
        while ((w = waitpid(pid, &st, WNOHANG)) == 0 && now_ms() - start < CHILD_MS)
            usleep(1000);
        if (w == 0) {
            printf("child hung: fork %d, pid %d, %d ms\n", i, (int)pid, CHILD_MS);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            rc = 1;
        } else if (w < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("child failed: fork %d, status 0x%x\n", i, w < 0 ? -1 : st);
            rc = 1;
        }
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    if (rc == 0)
        printf("forks %d ok\n", forks);
    fflush(stdout);
    return rc;
}
