/* nowaitprog: what a process does right after an unlock whose release was
 * written without waiting (on_lease_lost = "abort"), for
 * tests/nowait.test.sh. An ordinary pthread program; its mutex `nowait_lock`
 * is mapped by the test's config.
 *
 *   nowaitprog hold DIR NEXT   lock; "held"; wait for DIR/go; unlock;
 *                              "unlocked"; then NEXT:
 *       _exit, _Exit           ends at once that way
 *       signal                 raises SIGUSR1, whose handler calls _exit
 *       execv, execl, execvp   replaces itself with `nowaitprog sleep DIR`
 *       idle                   waits for DIR/end, then returns from main
 *       fork                   forks; the child waits for DIR/end, then
 *                              _exits; the parent waits for it (idle)
 *       vfork                  vforks; the child execs `nowaitprog sleep
 *                              DIR` (its memory is the parent's until
 *                              then); the parent waits for it (idle)
 *   nowaitprog sleep DIR       "image"; waits for DIR/end (an exec'd image
 *                              that never touches the mutex)
 *   nowaitprog probe MS        timed lock with an MS deadline:
 *                              "probe RC after N ms", then unlock */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "prog.h"

pthread_mutex_t nowait_lock = PTHREAD_MUTEX_INITIALIZER;

static void exit_handler(int sig)
{
    (void)sig;
    _exit(0);
}

static void path(char *buf, size_t len, const char *dir, const char *file)
{
    snprintf(buf, len, "%s/%s", dir, file);
}

int main(int argc, char **argv)
{
    char f[4096];
    if (argc == 3 && strcmp(argv[1], "probe") == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ms = atol(argv[2]);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        long long t0 = now_ms();
        int rc = pthread_mutex_timedlock(&nowait_lock, &ts);
        say("probe %s after %lld ms", ename(rc), now_ms() - t0);
        if (rc == 0)
            pthread_mutex_unlock(&nowait_lock);
        return rc == 0 ? 0 : 1;
    }
    if (argc == 3 && strcmp(argv[1], "sleep") == 0) {
        say("image");
        path(f, sizeof f, argv[2], "end");
        wait_file(f);
        return 0;
    }
    if (argc != 4 || strcmp(argv[1], "hold") != 0) {
        say("usage: nowaitprog hold DIR NEXT | sleep DIR | probe MS");
        return 2;
    }
    const char *dir = argv[2], *next = argv[3];
    say("lock %s", ename(pthread_mutex_lock(&nowait_lock)));
    say("held");
    path(f, sizeof f, dir, "go");
    wait_file(f);
    int rc = pthread_mutex_unlock(&nowait_lock);
    say("unlocked %s", ename(rc));
    if (strcmp(next, "_exit") == 0)
        _exit(0);
    if (strcmp(next, "_Exit") == 0)
        _Exit(0);
    if (strcmp(next, "signal") == 0) {
        signal(SIGUSR1, exit_handler);
        raise(SIGUSR1);
    }
    char *const args[] = { argv[0], "sleep", (char *)dir, NULL };
    if (strcmp(next, "execv") == 0)
        execv("/proc/self/exe", args);
    else if (strcmp(next, "execl") == 0)
        execl("/proc/self/exe", argv[0], "sleep", dir, (char *)NULL);
    else if (strcmp(next, "execvp") == 0)
        execvp(argv[0], args);
    if (strncmp(next, "exec", 4) == 0) {
        say("%s failed: %s", next, strerror(errno));
        return 1;
    }
    if (strcmp(next, "vfork") == 0) {
        pid_t p = vfork();
        if (p == 0) {
            execv("/proc/self/exe", args);
            _exit(127);
        }
        int st;
        waitpid(p, &st, 0);
        return 0;
    }
    path(f, sizeof f, dir, "end");
    if (strcmp(next, "fork") == 0) {
        pid_t p = fork();
        if (p == 0) {
            wait_file(f);
            _exit(0);
        }
        int st;
        waitpid(p, &st, 0);
        return 0;
    }
    wait_file(f);
    return 0;
}
