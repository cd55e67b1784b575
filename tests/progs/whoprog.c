/* whoprog: what `dmutex ls` shows of a holder's threads and of a fork
 * child (tests/ls_json.test.sh), under the shim:
 *
 *   whoprog A B   maps two mutexes under the lock names A and B (the
 *                 explicit API); a thread named "seller-3" takes A and
 *                 prints "thread held A"; then the process forks, and the
 *                 child takes B and prints "child PID held B"; both keep
 *                 their lock until stdin ends, then release it and print
 *                 "done" (the child "child done"). $WHO_THREAD_NAME names the
 *                 thread instead (any bytes).
 *   whoprog idle A
 *                 takes A and prints "held"; at a line on stdin releases it
 *                 and prints "released"; then idles until stdin ends and
 *                 exits (timing its exit: "exiting MS", CLOCK_MONOTONIC ms).
 *   whoprog regrant A
 *                 takes A, holds it 2.5 s, releases it, takes it again in
 *                 the same thread and prints "relocked MS" (CLOCK_REALTIME
 *                 ms), keeps it until stdin ends, releases it, "done". */
#define _GNU_SOURCE
#include <dmutex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#pragma weak dmutex_name

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t step = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t step_cv = PTHREAD_COND_INITIALIZER;
static int taken;

static void until_stdin_ends(void)
{
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
}

static void *seller(void *arg)
{
    (void)arg;
    const char *tn = getenv("WHO_THREAD_NAME");
    pthread_setname_np(pthread_self(), tn ? tn : "seller-3");
    pthread_mutex_lock(&a);
    printf("thread held A\n");
    fflush(stdout);
    pthread_mutex_lock(&step);
    taken = 1;
    pthread_cond_signal(&step_cv);
    pthread_mutex_unlock(&step);
    until_stdin_ends();
    pthread_mutex_unlock(&a);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "idle") == 0 && dmutex_name) {
        if (dmutex_name(&a, argv[2]))
            return 1;
        pthread_mutex_lock(&a);
        printf("held\n");
        fflush(stdout);
        char c;
        while (read(0, &c, 1) == 1 && c != '\n')
            ;
        pthread_mutex_unlock(&a);
        printf("released\n");
        fflush(stdout);
        until_stdin_ends();
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        printf("exiting %lld\n", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
        fflush(stdout);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "regrant") == 0 && dmutex_name) {
        if (dmutex_name(&a, argv[2]))
            return 1;
        pthread_mutex_lock(&a);
        usleep(2500000);
        pthread_mutex_unlock(&a);
        pthread_mutex_lock(&a);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        printf("relocked %lld\n", (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
        fflush(stdout);
        until_stdin_ends();
        pthread_mutex_unlock(&a);
        printf("done\n");
        return 0;
    }
    if (argc != 3 || !dmutex_name)
        return 2;
    if (dmutex_name(&a, argv[1]) || dmutex_name(&b, argv[2]))
        return 1;
    pthread_t t;
    if (pthread_create(&t, NULL, seller, NULL))
        return 1;
    pthread_mutex_lock(&step);
    while (!taken)
        pthread_cond_wait(&step_cv, &step);
    pthread_mutex_unlock(&step);
    pid_t c = fork();
    if (c < 0)
        return 1;
    if (c == 0) {
        pthread_mutex_lock(&b);
        printf("child %ld held B\n", (long)getpid());
        fflush(stdout);
        until_stdin_ends();
        pthread_mutex_unlock(&b);
        printf("child done\n");
        return 0;
    }
    pthread_join(t, NULL);
    int st;
    waitpid(c, &st, 0);
    printf("done\n");
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
