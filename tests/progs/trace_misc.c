/* trace_misc: what tests/trace.test.sh checks besides identification.
 *
 *   trace_misc fork         locks parent_lock, forks; the child locks
 *                           child_lock 3 times and exits 0; prints "forked"
 *   trace_misc wait FILE    locks wait_lock 5 times, prints "ready", then
 *                           waits (at most PROG_WAIT_MS) until FILE exists
 *   trace_misc cond         a condition wait on cond_lock: its re-acquisition
 *                           counts as a lock
 *   trace_misc forkloop MS  locks FORKLOOP_MUTEXES heap mutexes (so that a
 *                           report takes a while), then forks children that
 *                           exit(0) at once, one after another, for MS ms (a
 *                           report may be under way in another thread at a
 *                           fork); a child not gone
 *                           after CHILD_MS is "child hung" (exit 1); else
 *                           prints "forks N"
 *   trace_misc many N       initialises, locks and unlocks N heap mutexes
 *                           (more than the tracer's table holds); prints
 *                           "many N" */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>

#include "prog.h"

#define PROG_WAIT_MS 60000
#define CHILD_MS 10000
#define FORKLOOP_MUTEXES 4000

pthread_mutex_t parent_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t child_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int signalled;

static void *signaller(void *arg)
{
    (void)arg;
    usleep(20000);
    pthread_mutex_lock(&cond_lock);
    signalled = 1;
    pthread_cond_signal(&cond);
    pthread_mutex_unlock(&cond_lock);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "fork") == 0) {
        pthread_mutex_lock(&parent_lock);
        pthread_mutex_unlock(&parent_lock);
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            for (int i = 0; i < 3; i++) {
                pthread_mutex_lock(&child_lock);
                pthread_mutex_unlock(&child_lock);
            }
            exit(0);
        }
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
        say("forked");
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "wait") == 0) {
        for (int i = 0; i < 5; i++) {
            pthread_mutex_lock(&wait_lock);
            pthread_mutex_unlock(&wait_lock);
        }
        say("ready");
        long until = now_ms() + PROG_WAIT_MS;
        while (access(argv[2], F_OK) != 0 && now_ms() < until)
            usleep(PROG_POLL_US);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "cond") == 0) {
        pthread_t t;
        pthread_mutex_lock(&cond_lock);
        if (pthread_create(&t, NULL, signaller, NULL) != 0)
            return 1;
        while (!signalled)
            pthread_cond_wait(&cond, &cond_lock);
        pthread_mutex_unlock(&cond_lock);
        pthread_join(t, NULL);
        say("cond");
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "forkloop") == 0) {
        static pthread_mutex_t ms[FORKLOOP_MUTEXES];
        for (int i = 0; i < FORKLOOP_MUTEXES; i++) {
            pthread_mutex_init(&ms[i], NULL);
            pthread_mutex_lock(&ms[i]);
            pthread_mutex_unlock(&ms[i]);
        }
        long until = now_ms() + atol(argv[2]);
        int forks = 0;
        while (now_ms() < until) {
            pid_t pid = fork();
            if (pid < 0)
                return 1;
            if (pid == 0)
                exit(0);
            forks++;
            long give_up = now_ms() + CHILD_MS;
            int st;
            while (waitpid(pid, &st, WNOHANG) == 0) {
                if (now_ms() > give_up) {
                    say("child hung");
                    kill(pid, SIGKILL);
                    waitpid(pid, &st, 0);
                    return 1;
                }
                usleep(1000);
            }
        }
        say("forks %d", forks);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "many") == 0) {
        int n = atoi(argv[2]);
        pthread_mutex_t *ms = calloc((size_t)n, sizeof *ms);
        if (!ms)
            return 1;
        for (int i = 0; i < n; i++) {
            if (pthread_mutex_init(&ms[i], NULL) != 0 || pthread_mutex_lock(&ms[i]) != 0 ||
                pthread_mutex_unlock(&ms[i]) != 0)
                return 1;
        }
        say("many %d", n);
        return 0;
    }
    fprintf(stderr, "usage: trace_misc fork | wait FILE | cond | many N\n");
    return 2;
}
