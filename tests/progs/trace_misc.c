/* trace_misc: what tests/trace.test.sh checks besides identification.
 *
 *   trace_misc fork         locks parent_lock, forks; the child locks
 *                           child_lock 3 times and exits 0; prints "forked"
 *   trace_misc forkidle     locks parent_lock, forks; the child locks nothing
 *                           and exits 0: prints "child PID", then "forked"
 *   trace_misc wait FILE    locks wait_lock 5 times, prints "ready", then
 *                           waits until FILE exists (prog.h wait_file)
 *   trace_misc rwwait FILE  as wait, with the rwlock wait_rwlock (read and
 *                           write 5 times each) and no mutex at all
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
 *                           "many N"
 *   trace_misc reuse        one heap address: a mutex made by reuse_a()
 *                           locked once and destroyed, then one made there
 *                           by reuse_b() locked 5 times; the same with a
 *                           cond (reuse_cond_a/_b: signalled once, then 5
 *                           times) and an rwlock (reuse_rw_a/_b: read-locked
 *                           once, then 5 times); prints "reuse"
 *   trace_misc statics      locks this file's static `lock` twice and
 *                           statics_other.c's (trace/) 3 times, the global
 *                           g_twin once; signals this file's static `cond`
 *                           twice and statics_other.c's 3 times; read-locks
 *                           this file's static `rw` twice and write-locks
 *                           statics_other.c's 3 times; prints "statics"
 *   trace_misc dlclose LIB [ROUNDS]
 *                           locks g_twin once and read-locks the global
 *                           rw_twin once, then ROUNDS times (default 1)
 *                           dlopens LIB (libtracegone.so), runs its
 *                           gone_work() and dlcloses it; prints "unloaded"
 *   trace_misc dlswap LIB NEW
 *                           like dlclose LIB, then renames NEW over LIB (the
 *                           plugin rebuilt) and does it again; prints
 *                           "swapped"
 *   trace_misc stderr FILE  locks wait_lock, closes stderr and creates FILE
 *                           (on fd 2), writes "DATA" to it; prints "stderr fd N"
 *   trace_misc threads      locks nothing; prints "threads N", the number
 *                           of threads the process has
 *   trace_misc waiterr      a condition wait on ec_lock (error-checking,
 *                           not held: EPERM), and a timed wait on cond_lock
 *                           (held) with a bad deadline (EINVAL): neither
 *                           releases nor retakes its mutex; prints
 *                           "waiterr EPERM EINVAL" (the errors' names)
 *   trace_misc uninit N     locks N heap mutexes never given to
 *                           pthread_mutex_init (zeroed memory, as a C++
 *                           std::mutex member is), signals N heap conds
 *                           never given to pthread_cond_init and read-locks
 *                           N such rwlocks; prints "uninit N"
 *   trace_misc hold MS      holds hold_lock for MS ms (a sleep); prints
 *                           "held NS", the hold as this program timed it
 *                           (CLOCK_MONOTONIC, just inside lock and unlock)
 *   trace_misc forkquiet    locks nothing, forks a child that locks nothing
 *                           and exits 0; prints "forkquiet"
 *   trace_misc popen [MODE] reads, through popen, what `trace_misc MODE`
 *                           (default threads) writes on stdout and stderr (a
 *                           helper that locks nothing and ends by exit());
 *                           prints "captured [TEXT]", newlines as '|' */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>

#include "prog.h"

#define CHILD_MS 10000
#define FORKLOOP_MUTEXES 4000

pthread_mutex_t parent_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t child_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_rwlock_t wait_rwlock = PTHREAD_RWLOCK_INITIALIZER;
pthread_mutex_t g_twin = PTHREAD_MUTEX_INITIALIZER;     /* libtracegone.so has its own */
pthread_mutex_t ec_lock;                                 /* waiterr: error-checking */
pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* so has statics_other.c */
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;   /* so has statics_other.c */
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;  /* so has statics_other.c */
pthread_rwlock_t rw_twin = PTHREAD_RWLOCK_INITIALIZER;    /* libtracegone.so has its own */
static int signalled;

void statics_other_work(int times);
pthread_mutex_t *reuse_a(void *at);
pthread_mutex_t *reuse_b(void *at);
pthread_cond_t *reuse_cond_a(void *at);
pthread_cond_t *reuse_cond_b(void *at);
pthread_rwlock_t *reuse_rw_a(void *at);
pthread_rwlock_t *reuse_rw_b(void *at);

static void lock_n(pthread_mutex_t *m, int n)
{
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(m);
        pthread_mutex_unlock(m);
    }
}

__attribute__((noinline)) pthread_mutex_t *reuse_a(void *at)
{
    pthread_mutex_init(at, NULL);
    return at;
}

__attribute__((noinline)) pthread_mutex_t *reuse_b(void *at)
{
    pthread_mutex_init(at, NULL);
    return at;
}

__attribute__((noinline)) pthread_cond_t *reuse_cond_a(void *at)
{
    pthread_cond_init(at, NULL);
    return at;
}

__attribute__((noinline)) pthread_cond_t *reuse_cond_b(void *at)
{
    pthread_cond_init(at, NULL);
    return at;
}

__attribute__((noinline)) pthread_rwlock_t *reuse_rw_a(void *at)
{
    pthread_rwlock_init(at, NULL);
    return at;
}

__attribute__((noinline)) pthread_rwlock_t *reuse_rw_b(void *at)
{
    pthread_rwlock_init(at, NULL);
    return at;
}

static void signal_n(pthread_cond_t *c, int n)
{
    for (int i = 0; i < n; i++)
        pthread_cond_signal(c);
}

static void read_n(pthread_rwlock_t *l, int n)
{
    for (int i = 0; i < n; i++) {
        pthread_rwlock_rdlock(l);
        pthread_rwlock_unlock(l);
    }
}

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
    if (argc >= 2 && strcmp(argv[1], "forkidle") == 0) {
        pthread_mutex_lock(&parent_lock);
        pthread_mutex_unlock(&parent_lock);
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0)
            exit(0);
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
        say("child %d", (int)pid);
        say("forked");
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "wait") == 0) {
        for (int i = 0; i < 5; i++) {
            pthread_mutex_lock(&wait_lock);
            pthread_mutex_unlock(&wait_lock);
        }
        say("ready");
        wait_file(argv[2]);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "rwwait") == 0) {
        /* rwlocks only: no mutex of the program is ever unlocked */
        for (int i = 0; i < 5; i++) {
            pthread_rwlock_rdlock(&wait_rwlock);
            pthread_rwlock_unlock(&wait_rwlock);
            pthread_rwlock_wrlock(&wait_rwlock);
            pthread_rwlock_unlock(&wait_rwlock);
        }
        say("ready");
        wait_file(argv[2]);
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
    if (argc >= 2 && strcmp(argv[1], "reuse") == 0) {
        void *at = malloc(sizeof(pthread_mutex_t));
        if (!at)
            return 1;
        pthread_mutex_t *m = reuse_a(at);
        lock_n(m, 1);
        pthread_mutex_destroy(m);
        m = reuse_b(at);
        lock_n(m, 5);
        pthread_mutex_destroy(m);
        free(at);
        void *cat = malloc(sizeof(pthread_cond_t) > sizeof(pthread_rwlock_t)
                           ? sizeof(pthread_cond_t) : sizeof(pthread_rwlock_t));
        if (!cat)
            return 1;
        pthread_cond_t *c = reuse_cond_a(cat);
        signal_n(c, 1);
        pthread_cond_destroy(c);
        c = reuse_cond_b(cat);
        signal_n(c, 5);
        pthread_cond_destroy(c);
        pthread_rwlock_t *l = reuse_rw_a(cat);
        read_n(l, 1);
        pthread_rwlock_destroy(l);
        l = reuse_rw_b(cat);
        read_n(l, 5);
        pthread_rwlock_destroy(l);
        free(cat);
        say("reuse");
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "statics") == 0) {
        lock_n(&lock, 2);
        statics_other_work(3);
        lock_n(&g_twin, 1);
        signal_n(&cond, 2);
        read_n(&rw, 2);
        say("statics");
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "dlclose") == 0) {
        lock_n(&g_twin, 1);
        read_n(&rw_twin, 1);
        int rounds = argc >= 4 ? atoi(argv[3]) : 1;
        for (int i = 0; i < rounds; i++) {
            void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
            void (*work)(void) = h ? (void (*)(void))dlsym(h, "gone_work") : NULL;
            if (!work) {
                say("dlopen: %s", dlerror());
                return 1;
            }
            work();
            if (dlclose(h) != 0)
                return 1;
        }
        say("unloaded");
        return 0;
    }
    if (argc >= 4 && strcmp(argv[1], "dlswap") == 0) {
        for (int round = 0; round < 2; round++) {
            if (round == 1 && rename(argv[3], argv[2]) != 0)
                return 1;
            void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
            void (*work)(void) = h ? (void (*)(void))dlsym(h, "gone_work") : NULL;
            if (!work) {
                say("dlopen: %s", dlerror());
                return 1;
            }
            work();
            if (dlclose(h) != 0)
                return 1;
        }
        say("swapped");
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "stderr") == 0) {
        lock_n(&wait_lock, 1);
        close(STDERR_FILENO);
        int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, "DATA\n", 5) != 5)
            return 1;
        say("stderr fd %d", fd);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "threads") == 0) {
        DIR *d = opendir("/proc/self/task");
        if (!d)
            return 1;
        int n = 0;
        for (struct dirent *e; (e = readdir(d));)
            n += e->d_name[0] != '.';
        closedir(d);
        say("threads %d", n);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "waiterr") == 0) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
        pthread_mutex_init(&ec_lock, &a);
        int e1 = pthread_cond_wait(&cond, &ec_lock);
        struct timespec bad = { .tv_sec = 0, .tv_nsec = -1 };
        pthread_mutex_lock(&cond_lock);
        int e2 = pthread_cond_timedwait(&cond, &cond_lock, &bad);
        pthread_mutex_unlock(&cond_lock);
        say("waiterr %s %s", strerrorname_np(e1), strerrorname_np(e2));
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "uninit") == 0) {
        int n = atoi(argv[2]);
        pthread_mutex_t *ms = calloc((size_t)n, sizeof *ms);
        if (!ms)
            return 1;
        for (int i = 0; i < n; i++)
            lock_n(&ms[i], 1);
        pthread_cond_t *cs = calloc((size_t)n, sizeof *cs);
        pthread_rwlock_t *ls = calloc((size_t)n, sizeof *ls);
        if (!cs || !ls)
            return 1;
        for (int i = 0; i < n; i++) {
            signal_n(&cs[i], 1);
            read_n(&ls[i], 1);
        }
        say("uninit %d", n);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "hold") == 0) {
        struct timespec a, b;
        pthread_mutex_lock(&hold_lock);
        clock_gettime(CLOCK_MONOTONIC, &a);
        usleep((useconds_t)atoi(argv[2]) * 1000);
        clock_gettime(CLOCK_MONOTONIC, &b);
        pthread_mutex_unlock(&hold_lock);
        say("held %lld", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "forkquiet") == 0) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0)
            exit(0);
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
        say("forkquiet");
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "popen") == 0) {
        char self[PATH_MAX], cmd[PATH_MAX + 64];
        ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
        if (len <= 0)
            return 1;
        self[len] = 0;
        snprintf(cmd, sizeof cmd, "exec 2>&1; exec '%s' %s", self, argc >= 3 ? argv[2] : "threads");
        FILE *p = popen(cmd, "r");
        if (!p)
            return 1;
        char buf[4096];
        size_t n = fread(buf, 1, sizeof buf - 1, p);
        buf[n] = 0;
        for (size_t i = 0; i < n; i++)
            if (buf[i] == '\n')
                buf[i] = '|';
        if (pclose(p) != 0)
            return 1;
        say("captured [%s]", buf);
        return 0;
    }
    fprintf(stderr, "usage: trace_misc fork | wait FILE | cond | forkloop MS | many N | reuse | "
            "statics | dlclose LIB | stderr FILE | threads | popen\n");
    return 2;
}
