/* lifeprog: the program tests/test_lifecycle.c runs. An ordinary pthread
 * program that knows nothing of dmutex: its global life_lock (and the
 * plugin's plug_lock) become cluster-wide only through the config the test
 * writes. Every critical section reports itself to the exclusion checker
 * (checkclient.h); lock index 0 is life_lock, 1 is plug_lock.
 *
 *   lifeprog life -S STATE -E EVENT -g GO [-G GO2] [-n] -s SOCK -k PREFIX
 *     Process A. Thread T brings life_lock to STATE, then main waits for GO
 *     and makes EVENT happen.
 *     STATE  held     T is inside its section, reporting to the checker
 *                     every few ms until it is told to leave or the process
 *                     ends ("inside")
 *            lock     T waits in pthread_mutex_lock ("locking", then
 *                     "lock returned RC MONO_MS")
 *            timed    T waits in pthread_mutex_timedlock, a minute away
 *            cond     T waits in pthread_cond_wait ("waiting")
 *            cached   T locked and unlocked (config cache = true): the
 *                     process keeps the hold, nobody inside ("cached")
 *     EVENT  exit, _exit, abort (from main), exec (main execs "lifeprog
 *            noop"), sigexit, sig_exit (a signal handler in T calls exit or
 *            _exit), cancel (main cancels T, joins it, and - when T's
 *            cleanup unlocks - locks and unlocks life_lock again:
 *            "relocked RC"), pthread_exit (T's own, from its section), fork
 *            (a child tries a timedlock of LIFE_CHILD_WAIT_MS and exits 0;
 *            the parent keeps its hold until GO2)
 *     -n     T's cleanup handler does not unlock (a thread that ends
 *            holding a normal mutex): it only reports leaving its section
 *   lifeprog hold [-g GO] [-p PLUGIN] -s SOCK -k PREFIX
 *     A contender: one section on life_lock (plug_lock of PLUGIN with -p),
 *     staying inside until GO exists (without -g: a moment).
 *     Prints "locking", "inside MONO_MS", "unlocked RC MONO_MS".
 *   lifeprog dlkeep -p PLUGIN -g GO ...
 *     dlopen PLUGIN twice, lock plug_lock, dlclose one handle while inside
 *     ("dlclosed RC"), stay inside until GO, unlock.
 *   lifeprog dlagain -p PLUGIN -g GO -G GO2 ...
 *     dlopen, one section, dlclose (unloaded: "unloaded"), dlopen again
 *     ("reloaded"), wait for GO, lock plug_lock again ("inside again"),
 *     stay inside until GO2, unlock.
 *   lifeprog once -g GO [-G GO2]
 *     main locks life_lock once: "lock RC"; waits for GO; unlocks if it
 *     had it ("unlock RC"), then waits for GO2 if given. For a process
 *     that cannot start threads.
 *   lifeprog noop
 *     the image exec'ed by EVENT exec: prints "exec'd" and exits 0.
 *
 * Every line is one write(2). Checker calls run with cancellation disabled
 * and the event signals blocked, so that a cancel or a signal handler
 * never finds the checker connection in the middle of a command. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkclient.h"
#include "prog.h"

#define LIFE_BEAT_US        5000        /* how often a section inside reports itself */
#define LIFE_SHORT_HOLD_US  10000       /* a contender's section without -g */
#define LIFE_CLEANUP_HOLD_US 50000      /* the cleanup handler's section */
#define LIFE_TIMED_WAIT_S   60          /* state "timed": far beyond any test */
#define LIFE_CHILD_WAIT_MS  1000        /* the fork child's timedlock */
#define LIFE_PEXIT_LINGER_US 300000     /* main after T ended holding, before exit */

pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t life_cv = PTHREAD_COND_INITIALIZER;

static const char *sock_path, *prefix = "chk", *gofile, *gofile2, *plugin;
static int no_cleanup_unlock;

/* ---- one section's reporting ---------------------------------------------
 * A section's checker calls are made with cancellation off and SIGUSR1/2
 * blocked (see the header comment). */

struct sect {
    redisContext *c;
    struct chk_keys k;
    char id[32];
    pthread_mutex_t *m;
    volatile int locked, inside;
};

static const char still_lua[] =
    "redis.call('sadd', KEYS[1], ARGV[1]) "
    "local n = redis.call('scard', KEYS[1]) "
    "if n > 1 then redis.call('incr', KEYS[2]) end "
    "return n";

static void quiet_begin(int *oldcancel, sigset_t *oldmask)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    sigaddset(&s, SIGUSR2);
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, oldcancel);
    pthread_sigmask(SIG_BLOCK, &s, oldmask);
}

static void quiet_end(int oldcancel, const sigset_t *oldmask)
{
    pthread_sigmask(SIG_SETMASK, oldmask, NULL);
    pthread_setcancelstate(oldcancel, NULL);
}

static void sect_init(struct sect *s, pthread_mutex_t *m, int lock, int thread)
{
    s->c = chk_connect(sock_path);
    chk_keys_make(&s->k, prefix, lock);
    snprintf(s->id, sizeof s->id, "%d.%d", (int)getpid(), thread);
    s->m = m;
    s->locked = s->inside = 0;
}

static void sect_enter(struct sect *s)
{
    int oc;
    sigset_t om;
    quiet_begin(&oc, &om);
    chk_enter(s->c, &s->k, s->id);
    s->inside = 1;
    quiet_end(oc, &om);
}

/* Inside: say so again, and count an overlap if someone else is in. */
static void sect_beat(struct sect *s)
{
    int oc;
    sigset_t om;
    quiet_begin(&oc, &om);
    const char *keys[] = { s->k.inside, s->k.overlaps };
    const char *args[] = { s->id };
    chk_eval(s->c, still_lua, 2, keys, 1, args);
    quiet_end(oc, &om);
}

static void sect_leave(struct sect *s)
{
    int oc;
    sigset_t om;
    quiet_begin(&oc, &om);
    chk_fence(s->c, &s->k, 0);
    chk_leave(s->c, &s->k, s->id);
    s->inside = 0;
    quiet_end(oc, &om);
}

/* Stays inside for `us`, reporting; a cancellation point. */
static void sect_stay(struct sect *s, long us)
{
    for (long done = 0; done < us; done += LIFE_BEAT_US) {
        sect_beat(s);
        usleep(LIFE_BEAT_US);
    }
}

static void sect_unlock(struct sect *s, const char *what)
{
    int rc = pthread_mutex_unlock(s->m);
    s->locked = 0;
    if (rc != 0)
        chk_count_unlock_error(s->c, &s->k);
    say("%s %s %lld", what, ename(rc), now_ms());
}

/* Locks s->m, entering the section, and says "WHAT <now>"; 1 (said why)
 * when the lock failed. */
static int sect_lock(struct sect *s, const char *what)
{
    int rc = pthread_mutex_lock(s->m);
    if (rc != 0) {
        say("lock %s", ename(rc));
        return 1;
    }
    s->locked = 1;
    sect_enter(s);
    say("%s %lld", what, now_ms());
    return 0;
}

/* Stays inside until `until` exists (NULL: not at all), reporting. */
static void sect_stay_until(struct sect *s, const char *until)
{
    while (until && access(until, F_OK) != 0) {
        sect_beat(s);
        usleep(LIFE_BEAT_US);
    }
}

/* ---- process A ------------------------------------------------------------ */

enum state { ST_HELD, ST_LOCK, ST_TIMED, ST_COND, ST_CACHED };
enum event { EV_EXIT, EV__EXIT, EV_ABORT, EV_EXEC, EV_SIGEXIT, EV_SIG_EXIT, EV_CANCEL,
             EV_PEXIT, EV_FORK };

static const char *const state_names[] = { "held", "lock", "timed", "cond", "cached", NULL };
static const char *const event_names[] = { "exit", "_exit", "abort", "exec", "sigexit",
                                           "sig_exit", "cancel", "pthread_exit", "fork", NULL };

static struct sect tsect;               /* T's */
static enum state state;
static atomic_int stop_t, pexit_t;
static char self_path[4096];

static int pick(const char *const *names, const char *s)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

/* The event signals run in T: leave the section (T is never inside a
 * checker call when they arrive), then end the process. */
static void on_exit_signal(int sig)
{
    if (tsect.inside) {
        chk_leave(tsect.c, &tsect.k, tsect.id);
        tsect.inside = 0;
    }
    say("handler %s", sig == SIGUSR1 ? "exit" : "_exit");
    if (sig == SIGUSR1)
        exit(0);
    _exit(0);
}

static void t_cleanup(void *arg)
{
    struct sect *s = arg;
    if (!s->locked) {
        say("cleanup without the mutex");
        return;
    }
    if (no_cleanup_unlock) {
        if (s->inside)
            sect_leave(s);
        say("cleanup keeps the mutex locked");
        return;
    }
    /* After a cancelled condition wait the mutex is held again: the
     * handler's section must exclude like any other. */
    if (!s->inside)
        sect_enter(s);
    say("cleanup inside %lld", now_ms());
    int oc;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &oc);
    for (long done = 0; done < LIFE_CLEANUP_HOLD_US; done += LIFE_BEAT_US) {
        sect_beat(s);
        usleep(LIFE_BEAT_US);
    }
    sect_leave(s);
    sect_unlock(s, "cleanup unlocked");
    pthread_setcancelstate(oc, NULL);
}

static void *t_main(void *arg)
{
    (void)arg;
    struct sect *s = &tsect;
    int rc;
    pthread_cleanup_push(t_cleanup, s);
    switch (state) {
    case ST_HELD:
        if (sect_lock(s, "inside") != 0)
            break;
        while (!atomic_load(&stop_t)) {
            if (atomic_load(&pexit_t)) {
                sect_leave(s);
                say("pthread_exit inside");
                pthread_exit(NULL);
            }
            sect_beat(s);
            usleep(LIFE_BEAT_US);
        }
        sect_leave(s);
        sect_unlock(s, "unlocked");
        break;
    case ST_LOCK:
    case ST_TIMED:
        say("locking");
        if (state == ST_LOCK) {
            rc = pthread_mutex_lock(s->m);
        } else {
            struct timespec dl = deadline_in(CLOCK_REALTIME, LIFE_TIMED_WAIT_S * 1000L);
            rc = pthread_mutex_timedlock(s->m, &dl);
        }
        s->locked = rc == 0;
        say("lock returned %s %lld", ename(rc), now_ms());
        if (rc != 0)
            break;
        sect_enter(s);
        sect_stay(s, LIFE_SHORT_HOLD_US);       /* a cancel lands here */
        sect_leave(s);
        sect_unlock(s, "unlocked");
        break;
    case ST_COND:
        rc = pthread_mutex_lock(s->m);
        s->locked = rc == 0;
        if (rc != 0) {
            say("lock %s", ename(rc));
            break;
        }
        say("waiting");
        while (!atomic_load(&stop_t))
            pthread_cond_wait(&life_cv, s->m);
        sect_enter(s);
        say("woke inside %lld", now_ms());
        sect_stay(s, LIFE_SHORT_HOLD_US);
        sect_leave(s);
        sect_unlock(s, "unlocked");
        break;
    case ST_CACHED:
        rc = pthread_mutex_lock(s->m);
        if (rc != 0) {
            say("lock %s", ename(rc));
            break;
        }
        s->locked = 1;
        sect_enter(s);
        sect_leave(s);
        sect_unlock(s, "unlocked");
        say("cached");
        while (!atomic_load(&stop_t))
            usleep(PROG_POLL_US);
        break;
    }
    pthread_cleanup_pop(0);
    return NULL;
}

/* What main does after T ended (cancel, pthread_exit): lock the mutex
 * again when T's cleanup unlocked it, else leave it locked, as glibc would. */
static int after_t(pthread_t t)
{
    pthread_join(t, NULL);
    say("joined %lld", now_ms());
    if (no_cleanup_unlock) {
        usleep(LIFE_PEXIT_LINGER_US);
        say("exiting %lld", now_ms());
        return 0;
    }
    struct sect s;
    sect_init(&s, &life_lock, 0, 2);
    int rc = pthread_mutex_lock(&life_lock);
    say("relocked %s %lld", ename(rc), now_ms());
    if (rc != 0)
        return 1;
    s.locked = 1;
    sect_enter(&s);
    sect_stay(&s, LIFE_SHORT_HOLD_US);
    sect_leave(&s);
    sect_unlock(&s, "reunlocked");
    return 0;
}

static int fork_event(pthread_t t)
{
    pid_t pid = fork();
    if (pid < 0) {
        say("fork %s", ename(errno));
        return 1;
    }
    if (pid == 0) {
        /* The child has T's mutex memory but not T, nor its cluster hold:
         * its own attempt must wait for the parent's hold. */
        say("child forked");
        struct timespec dl = deadline_in(CLOCK_REALTIME, LIFE_CHILD_WAIT_MS);
        int rc = pthread_mutex_timedlock(&life_lock, &dl);
        say("child timedlock %s", ename(rc));
        exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    say("child status %d", st);
    wait_file(gofile2);
    atomic_store(&stop_t, 1);
    pthread_join(t, NULL);
    say("parent done");
    return 0;
}

static int life(const char *st, const char *ev)
{
    int si = pick(state_names, st), ei = pick(event_names, ev);
    if (si < 0 || ei < 0 || !gofile)
        return 2;
    state = (enum state)si;
    enum event event = (enum event)ei;
    struct sigaction sa = { .sa_handler = on_exit_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    ssize_t n = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (n > 0)
        self_path[n] = 0;
    sect_init(&tsect, &life_lock, 0, 1);
    pthread_t t;
    int rc = pthread_create(&t, NULL, t_main, NULL);
    if (rc != 0) {
        say("pthread_create %s", ename(rc));
        return 1;
    }
    wait_file(gofile);
    say("event %s %lld", ev, now_ms());
    switch (event) {
    case EV_EXIT:
        exit(0);
    case EV__EXIT:
        _exit(0);
    case EV_ABORT:
        abort();
    case EV_EXEC: {
        char *argv[] = { "lifeprog", "noop", NULL };
        execv(self_path, argv);
        say("exec %s", ename(errno));
        return 1;
    }
    case EV_SIGEXIT:
    case EV_SIG_EXIT:
        pthread_kill(t, event == EV_SIGEXIT ? SIGUSR1 : SIGUSR2);
        for (;;)
            pause();
    case EV_CANCEL:
        pthread_cancel(t);
        return after_t(t);
    case EV_PEXIT:
        atomic_store(&pexit_t, 1);
        return after_t(t);
    case EV_FORK:
        return fork_event(t);
    }
    return 2;
}

/* ---- the other roles ------------------------------------------------------ */

static pthread_mutex_t *plugin_lock(void **handle)
{
    void *h = dlopen(plugin, RTLD_NOW);
    if (!h) {
        say("dlopen %s", dlerror());
        exit(1);
    }
    if (handle)
        *handle = h;
    return dlsym(h, "plug_lock");
}

static int hold(void)
{
    pthread_mutex_t *m = plugin ? plugin_lock(NULL) : &life_lock;
    struct sect s;
    sect_init(&s, m, plugin ? 1 : 0, 0);
    say("locking");
    if (sect_lock(&s, "inside") != 0)
        return 1;
    if (gofile)
        sect_stay_until(&s, gofile);
    else
        sect_stay(&s, LIFE_SHORT_HOLD_US);
    sect_leave(&s);
    sect_unlock(&s, "unlocked");
    return 0;
}

/* A section on m that stays until `until` exists. */
static int plug_section(struct sect *s, const char *what, const char *until)
{
    if (sect_lock(s, what) != 0)
        return 1;
    sect_stay_until(s, until);
    sect_leave(s);
    sect_unlock(s, "unlocked");
    return 0;
}

static int dlkeep(void)
{
    void *h1, *h2;
    pthread_mutex_t *m = plugin_lock(&h1);
    plugin_lock(&h2);
    struct sect s;
    sect_init(&s, m, 1, 0);
    if (sect_lock(&s, "inside") != 0)
        return 1;
    say("dlclosed %d", dlclose(h2));
    sect_stay_until(&s, gofile);
    sect_leave(&s);
    sect_unlock(&s, "unlocked");
    return 0;
}

static int dlagain(void)
{
    void *h;
    struct sect s;
    sect_init(&s, plugin_lock(&h), 1, 0);
    if (plug_section(&s, "inside", NULL) != 0)
        return 1;
    int rc = dlclose(h);
    /* Unloaded, unless something else holds it: then this test proves nothing. */
    void *probe = dlopen(plugin, RTLD_NOW | RTLD_NOLOAD);
    say("unloaded %d %s", rc, probe ? "still loaded" : "gone");
    if (probe)
        return 1;
    s.m = plugin_lock(&h);
    say("reloaded");
    wait_file(gofile);
    return plug_section(&s, "inside again", gofile2);
}

static int once(void)
{
    int rc = pthread_mutex_lock(&life_lock);
    say("lock %s", ename(rc));
    wait_file(gofile);
    if (rc == 0)
        say("unlock %s", ename(pthread_mutex_unlock(&life_lock)));
    if (gofile2)
        wait_file(gofile2);
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: lifeprog life|hold|dlkeep|dlagain|once|noop [-S STATE] [-E EVENT]"
                    " [-g FILE] [-G FILE] [-p PLUGIN] [-n] [-s SOCK] [-k PREFIX]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *mode = argv[1], *st = NULL, *ev = NULL;
    if (strcmp(mode, "noop") == 0) {
        say("exec'd %lld", now_ms());
        return 0;
    }
    optind = 2;
    int ch;
    while ((ch = getopt(argc, argv, "S:E:g:G:p:ns:k:")) != -1) {
        switch (ch) {
        case 'S': st = optarg; break;
        case 'E': ev = optarg; break;
        case 'g': gofile = optarg; break;
        case 'G': gofile2 = optarg; break;
        case 'p': plugin = optarg; break;
        case 'n': no_cleanup_unlock = 1; break;
        case 's': sock_path = optarg; break;
        case 'k': prefix = optarg; break;
        default: return usage();
        }
    }
    say("main %d", (int)getpid());
    if (strcmp(mode, "once") == 0)
        return once();
    if (!sock_path)
        return usage();
    if (strcmp(mode, "life") == 0)
        return st && ev ? life(st, ev) : usage();
    if (strcmp(mode, "hold") == 0)
        return hold();
    if (strcmp(mode, "dlkeep") == 0)
        return plugin && gofile ? dlkeep() : usage();
    if (strcmp(mode, "dlagain") == 0)
        return plugin && gofile && gofile2 ? dlagain() : usage();
    return usage();
}
