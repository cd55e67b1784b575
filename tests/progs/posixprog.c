/* posixprog: the pthread behaviours a real program relies on, one scenario
 * per run, for tests/test_posix.c, which maps its mutexes by config. It
 * knows nothing of dmutex: it is what an ordinary program does.
 *
 *   posixprog PORT KEY MODE MUTEX [ARGS...]
 *
 * PORT is the Redis port of the counter (and of the EXISTS checks); KEY is
 * the counter key, or for modes that report "exists=" the Redis key of the
 * lock, which they look at through their own connection. Results are
 * errno names ("0", "EBUSY"); times are milliseconds on CLOCK_MONOTONIC.
 *
 * MUTEX picks the mutex:
 *   norm rec err       globals set up by PTHREAD_MUTEX_INITIALIZER,
 *                      PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP and
 *                      PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP
 *   anorm arec aerr arobust
 *                      the global attr_lock, set up by pthread_mutex_init
 *                      with a mutexattr of that type (robust: a normal robust one)
 *   shop               shop.lock, a member of a global struct (offset 8)
 *   slot0 slot1 slot2  slots[0], slots[1], slots[2] of a global array
 *   heap               a heap mutex set up by account_new(); "heap2" modes use two
 *   other              other_lock, a second global (fork children use it)
 *   plain              plain_lock (the tests never map it)
 *
 * Modes:
 *   count M THREADS ITERS HOLD_US     the counter (recursive types nest each lock)
 *   fork-count M CHILDREN THREADS ITERS HOLD_US
 *                                     lock and unlock once, fork CHILDREN, then
 *                                     parent and children all run the counter
 *   exec-count M CHILDREN THREADS ITERS HOLD_US
 *                                     the same with children that exec this program
 *   atfork-count M CHILDREN THREADS ITERS HOLD_US
 *                                     with pthread_atfork handlers that lock M before
 *                                     fork and unlock it in parent and child, fork
 *                                     CHILDREN while the parent's threads run the
 *                                     counter; the children run it too
 *   recursive M DEPTH                 DEPTH nested locks; "recursive LOCK INNER OUTER UNLOCK":
 *                                     INNER/OUTER = EXISTS of KEY after the inner
 *                                     unlocks and after the outermost
 *   errcheck M relock|foreign|unheld  "errcheck OP LOCK OP-RC UNLOCK" ("-": not called)
 *   destroy M                         lock, destroy, unlock, destroy, init, lock, unlock
 *   hold M FILE                       lock, "locked RC", wait for FILE, "unlocking", unlock
 *   lock M                            "locked RC MS", unlock
 *   trylock M                         "trylock RC", unlock if taken
 *   robust-hold M                     lock, "locked RC", sleep until killed
 *   robust-lock M consistent|noconsistent
 *                                     lock (EOWNERDEAD expected) and recover, or not
 *   robust-thread-exit M              a thread locks M and returns holding it; then
 *                                     main locks (EOWNERDEAD expected), makes it
 *                                     consistent and unlocks
 *   cond M KIND FILE                  lock, wait on a condvar (KIND: wait, timedwait,
 *                                     clockwait) until a thread sees FILE and
 *                                     signals (without the mutex); "woke RC exists=E"
 *   cond-timeout M KIND MS            lock, timed wait of MS nobody signals:
 *                                     "timeout RC ELAPSED exists=E"
 *   cond-plain M                      condvars on plain_lock: "cond-plain W T C"
 *   fork-hold M FILE                  hold M; a child locks other and exits; another
 *                                     child sleeps; at FILE the parent unlocks
 *   fork-identity M MS                hold M; a child locks other, holds it MS, unlocks
 *   exit-hold M HOW FILE              hold M, at FILE end the process holding it:
 *                                     HOW = exit (exit(0)), return (from main), or
 *                                     thread (another thread holds it; main returns)
 *   ended-hold M HOW                  a thread locks M and ends holding it, then main
 *                                     returns: HOW = return (from its start routine,
 *                                     after a 1 ms pthread_cond_timedwait nobody
 *                                     signals: "thread timedwait RC"), pthread_exit, or
 *                                     inside (return, while a second thread holds
 *                                     rec_lock twice and stays inside: "inside RC RC");
 *                                     "thread gone" once joined
 *   shared-cond M                     a thread locks other, then M, and waits on a condvar
 *                                     with M; main locks M, signals, unlocks (config maps
 *                                     other and M under one name): "shared-cond LOCK WAIT"
 *   family-hammer MS                  thread i of 4 locks slots[i] (all mapped under one
 *                                     name) again and again for MS, 5 ms inside each, so
 *                                     that the process always has a thread inside some
 *                                     mutex of the name: "hammered N" (sections)
 *   heap-churn MS                     4 threads make heap mutexes with account_new() (all
 *                                     one name), lock, unlock, destroy and free them,
 *                                     for MS: "churned N"
 *   name-churn THREADS ITERS HOLD_US  each thread ITERS times: a heap mutex named with
 *                                     dmutex_name (found with dlsym) by a name of its own,
 *                                     locked for up to HOLD_US, unlocked, destroyed:
 *                                     "name-churn N" (N: dmutex_name failures)
 *   name-heap N                       N heap mutexes named with dmutex_name ("nh-<i>"),
 *                                     none locked: "name-heap B" (B: the bytes of heap
 *                                     the shim took per idle name, from mallinfo2)
 *   xunlock M ITERS                   thread A locks M (normal), thread B unlocks it (glibc
 *                                     allows it), ITERS times, while a third thread locks
 *                                     and unlocks M in a loop; then "xunlock exists=E"
 *                                     (E: EXISTS of KEY once nobody holds M)
 *   far-timedlock M                   timedlock with the deadline {LONG_MAX, 0}:
 *                                     "far RC MS", unlock if taken
 *   clocklock-bad M                   clocklock on CLOCK_PROCESS_CPUTIME_ID: "clocklock-bad RC"
 *   cond-robust M MS                  lock M (robust), timed condvar wait of MS nobody
 *                                     signals: "cond-robust RC"; consistent if EOWNERDEAD
 *   nested-once heap                  lock a, lock b, unlock b, unlock a: "nested R R R R"
 *   nested-count heap THREADS ITERS HOLD_US   the counter under a then b
 *   heap-reuse heap N                 lock an account, free it without destroy, make
 *                                     another mutex elsewhere in its memory and lock
 *                                     it N times: "reuse same=S" */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "../posix/pp.h"

pthread_mutex_t norm_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t rec_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
pthread_mutex_t err_lock = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
pthread_mutex_t attr_lock;
pthread_mutex_t other_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t plain_lock = PTHREAD_MUTEX_INITIALIZER;
struct shop {
    int id;
    pthread_mutex_t lock;
    long sold;
} shop = { 1, PTHREAD_MUTEX_INITIALIZER, 0 };
pthread_mutex_t slots[4] = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
                             PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER };
pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
_Static_assert(offsetof(struct shop, lock) == 8, "test_posix maps shop.lock at offset 8");

struct account {
    long balance;
    pthread_mutex_t lock;
};

/* The init_site of the tests. Not inlined, and the init is no tail call, so
 * pthread_mutex_init returns into this function. */
__attribute__((noinline)) struct account *account_new(void)
{
    struct account *a = calloc(1, sizeof *a);
    if (!a || pthread_mutex_init(&a->lock, NULL) != 0)
        abort();
    return a;
}

/* Another function that makes mutexes: never an init_site. */
__attribute__((noinline)) struct account *other_new(void)
{
    struct account *a = malloc(sizeof *a);
    if (!a || pthread_mutex_init(&a->lock, NULL) != 0)
        abort();
    a->balance = 0;
    return a;
}

static int port;
static const char *key, *self_path;
static pthread_mutex_t *m;
static int nest = 1;                /* locks per enter: 2 for recursive mutexes */
static int attr_type = -1, attr_robust;
static struct account *acct_a, *acct_b;

static int usage(void)
{
    fprintf(stderr, "usage: posixprog PORT KEY MODE MUTEX [ARGS...] (see the source)\n");
    return 2;
}

static int pick(const char *name)
{
    struct { const char *n; pthread_mutex_t *m; int type, robust, nest; } t[] = {
        { "norm", &norm_lock, -1, 0, 1 },
        { "rec", &rec_lock, -1, 0, 2 },
        { "err", &err_lock, -1, 0, 1 },
        { "anorm", &attr_lock, PTHREAD_MUTEX_NORMAL, 0, 1 },
        { "arec", &attr_lock, PTHREAD_MUTEX_RECURSIVE, 0, 2 },
        { "aerr", &attr_lock, PTHREAD_MUTEX_ERRORCHECK, 0, 1 },
        { "arobust", &attr_lock, PTHREAD_MUTEX_NORMAL, 1, 1 },
        { "shop", &shop.lock, -1, 0, 1 },
        { "slot0", &slots[0], -1, 0, 1 },
        { "slot1", &slots[1], -1, 0, 1 },
        { "slot2", &slots[2], -1, 0, 1 },
        { "other", &other_lock, -1, 0, 1 },
        { "plain", &plain_lock, -1, 0, 1 },
    };
    if (strcmp(name, "heap") == 0) {
        acct_a = account_new();
        acct_b = account_new();
        m = &acct_a->lock;
        return 0;
    }
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(name, t[i].n) == 0) {
            m = t[i].m;
            attr_type = t[i].type;
            attr_robust = t[i].robust;
            nest = t[i].nest;
            return 0;
        }
    return -1;
}

/* pthread_mutex_init of attr_lock with the picked type. */
static int init_attr_lock(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, attr_type);
    if (attr_robust)
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int r = pthread_mutex_init(&attr_lock, &a);
    pthread_mutexattr_destroy(&a);
    return r;
}

/* op (lock or unlock) on m `nest` times: 0, or the first error. */
static int each_level(int (*op)(pthread_mutex_t *))
{
    for (int i = 0; i < nest; i++) {
        int r = op(m);
        if (r != 0)
            return r;
    }
    return 0;
}

static int enter(void *arg)
{
    (void)arg;
    return each_level(pthread_mutex_lock);
}

static int leave(void *arg)
{
    (void)arg;
    return each_level(pthread_mutex_unlock);
}

static int enter_nested(void *arg)
{
    (void)arg;
    int r = pthread_mutex_lock(&acct_a->lock);
    return r ? r : pthread_mutex_lock(&acct_b->lock);
}

static int leave_nested(void *arg)
{
    (void)arg;
    int r = pthread_mutex_unlock(&acct_b->lock);
    return r ? r : pthread_mutex_unlock(&acct_a->lock);
}

static void run_count(char **args, int nested)
{
    struct pp_counter k = { port, key, atoi(args[1]), atoi(args[2]),
                            nested ? enter_nested : enter, nested ? leave_nested : leave, NULL };
    pp_run_counter(&k, atoi(args[0]));
}

static int wait_children(pid_t *kids, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st;
        if (waitpid(kids[i], &st, 0) != kids[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            say("child %d failed (status %d)", (int)kids[i], st);
            bad = 1;
        }
    }
    return bad;
}

/* args: CHILDREN THREADS ITERS HOLD_US */
static int fork_count(char **args, int do_exec, char *mutex_name)
{
    int children = atoi(args[0]);
    pid_t kids[16];
    if (children > 16)
        children = 16;
    /* The parent has used the mutex (connections, helper threads) before
     * it forks; no thread holds it at fork time. */
    int r = enter(NULL);
    if (r == 0)
        r = leave(NULL);
    if (r != 0) {
        say("warm-up failed: %s", ename(r));
        return 1;
    }
    for (int i = 0; i < children; i++) {
        kids[i] = fork();
        if (kids[i] < 0) {
            say("fork failed");
            return 1;
        }
        if (kids[i] == 0) {
            if (do_exec) {
                char portbuf[16];
                snprintf(portbuf, sizeof portbuf, "%d", port);
                char *argv[] = { (char *)self_path, portbuf, (char *)key, "count", mutex_name,
                                 args[1], args[2], args[3], NULL };
                execv("/proc/self/exe", argv);
                say("exec failed: %s", strerror(errno));
                _exit(127);
            }
            run_count(args + 1, 0);
            exit(0);
        }
    }
    run_count(args + 1, 0);
    int bad = wait_children(kids, children);
    if (!bad)
        say("children ok");
    return bad;
}

/* The usual way to fork safely while other threads use a mutex. */
static int atfork_failed;

static void atfork_prepare(void)
{
    if (pthread_mutex_lock(m) != 0)
        atfork_failed = 1;
}

static void atfork_parent(void)
{
    if (pthread_mutex_unlock(m) != 0)
        atfork_failed = 1;
}

static void atfork_child(void)
{
    if (pthread_mutex_unlock(m) != 0)
        atfork_failed = 1;
}

struct count_args {
    char **args;
};

static void *count_thread(void *p)
{
    run_count(((struct count_args *)p)->args, 0);
    return NULL;
}

/* args: CHILDREN THREADS ITERS HOLD_US */
static int atfork_count(char **args)
{
    int children = atoi(args[0]);
    pid_t kids[16];
    if (children > 16)
        children = 16;
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    struct count_args ca = { args + 1 };
    pthread_t t;
    pthread_create(&t, NULL, count_thread, &ca);
    for (int i = 0; i < children; i++) {
        usleep(20000);
        kids[i] = fork();
        if (kids[i] < 0) {
            say("fork failed");
            return 1;
        }
        if (kids[i] == 0) {
            if (atfork_failed) {
                say("child: atfork handler failed");
                exit(1);
            }
            run_count(args + 1, 0);
            exit(0);
        }
    }
    pthread_join(t, NULL);
    int bad = wait_children(kids, children) || atfork_failed;
    if (!bad)
        say("children ok");
    return bad;
}

static volatile int ready;
static const char *signal_file;

static void *signaller(void *arg)
{
    (void)arg;
    wait_file(signal_file);
    __atomic_store_n(&ready, 1, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast(&cv);
    return NULL;
}

static int cond_wait_kind(const char *kind, const struct timespec *rt, const struct timespec *mono)
{
    if (strcmp(kind, "wait") == 0)
        return pthread_cond_wait(&cv, m);
    if (strcmp(kind, "timedwait") == 0)
        return pthread_cond_timedwait(&cv, m, rt);
    if (strcmp(kind, "clockwait") == 0)
        return pthread_cond_clockwait(&cv, m, CLOCK_MONOTONIC, mono);
    if (strcmp(kind, "clockwait-rt") == 0)
        return pthread_cond_clockwait(&cv, m, CLOCK_REALTIME, rt);
    say("unknown wait kind %s", kind);
    exit(2);
}

static int mode_cond(const char *kind, const char *file)
{
    redisContext *c = prog_connect("127.0.0.1", port);
    signal_file = file;
    pthread_t t;
    int r = pthread_mutex_lock(m);
    if (r != 0) {
        say("lock %s", ename(r));
        return 1;
    }
    pthread_create(&t, NULL, signaller, NULL);
    struct timespec rt = deadline_in(CLOCK_REALTIME, 60000);
    struct timespec mono = deadline_in(CLOCK_MONOTONIC, 60000);
    say("waiting");
    while (!__atomic_load_n(&ready, __ATOMIC_SEQ_CST)) {
        r = cond_wait_kind(kind, &rt, &mono);
        if (r != 0)
            break;
    }
    say("woke %s exists=%lld", ename(r), pp_exists(c, key));
    r = pthread_mutex_unlock(m);
    say("unlocked %s", ename(r));
    pthread_join(t, NULL);
    redisFree(c);
    return 0;
}

static int mode_cond_timeout(const char *kind, long ms)
{
    redisContext *c = prog_connect("127.0.0.1", port);
    int r = pthread_mutex_lock(m);
    if (r != 0) {
        say("lock %s", ename(r));
        return 1;
    }
    long long t0 = now_ms();
    struct timespec rt = deadline_in(CLOCK_REALTIME, ms);
    struct timespec mono = deadline_in(CLOCK_MONOTONIC, ms);
    say("waiting");
    r = cond_wait_kind(kind, &rt, &mono);
    long long took = now_ms() - t0;
    say("timeout %s %lld exists=%lld", ename(r), took, pp_exists(c, key));
    r = pthread_mutex_unlock(m);
    say("unlocked %s", ename(r));
    redisFree(c);
    return 0;
}

static int plain_ready;
static pthread_cond_t cv2 = PTHREAD_COND_INITIALIZER;

static void *plain_signaller(void *arg)
{
    (void)arg;
    usleep(50000);
    pthread_mutex_lock(&plain_lock);
    plain_ready = 1;
    pthread_cond_signal(&cv2);
    pthread_mutex_unlock(&plain_lock);
    return NULL;
}

static int mode_cond_plain(void)
{
    pthread_t t;
    pthread_mutex_lock(&plain_lock);
    pthread_create(&t, NULL, plain_signaller, NULL);
    int w = 0;
    while (!plain_ready && w == 0)
        w = pthread_cond_wait(&cv2, &plain_lock);
    struct timespec rt = deadline_in(CLOCK_REALTIME, 100);
    int tw = pthread_cond_timedwait(&cv2, &plain_lock, &rt);
    struct timespec mono = deadline_in(CLOCK_MONOTONIC, 100);
    int cw = pthread_cond_clockwait(&cv2, &plain_lock, CLOCK_MONOTONIC, &mono);
    pthread_mutex_unlock(&plain_lock);
    pthread_join(t, NULL);
    say("cond-plain %s %s %s", ename(w), ename(tw), ename(cw));
    return 0;
}

static struct {
    pthread_mutex_t *m;
    int lock_rc, unlock_rc;
} waiter;

static void *robust_waiter(void *arg)
{
    (void)arg;
    waiter.lock_rc = pthread_mutex_lock(m);
    if (waiter.lock_rc == 0 || waiter.lock_rc == EOWNERDEAD)
        waiter.unlock_rc = pthread_mutex_unlock(m);
    return NULL;
}

static int mode_robust_lock(const char *how)
{
    int r = pthread_mutex_lock(m);
    say("lock %s", ename(r));
    if (strcmp(how, "consistent") == 0) {
        say("consistent %s", ename(pthread_mutex_consistent(m)));
        say("unlock %s", ename(pthread_mutex_unlock(m)));
        r = pthread_mutex_lock(m);
        say("relock %s", ename(r));
        if (r == 0)
            say("unlock %s", ename(pthread_mutex_unlock(m)));
        return 0;
    }
    /* Another thread queues for the mutex meanwhile: glibc gives it
     * ENOTRECOVERABLE too once the mutex is unlocked inconsistent. */
    pthread_t t;
    pthread_create(&t, NULL, robust_waiter, NULL);
    usleep(500000);
    say("unlock %s", ename(pthread_mutex_unlock(m)));
    pthread_join(t, NULL);
    say("waiter %s", ename(waiter.lock_rc));
    r = pthread_mutex_lock(m);
    say("relock %s", ename(r));
    if (r == 0)
        pthread_mutex_unlock(m);
    r = pthread_mutex_trylock(m);
    say("trylock %s", ename(r));
    if (r == 0)
        pthread_mutex_unlock(m);
    /* Destroy and init at the same address start clean. */
    say("destroy %s", ename(pthread_mutex_destroy(m)));
    say("init %s", ename(init_attr_lock()));
    r = pthread_mutex_lock(m);
    say("reinit-lock %s", ename(r));
    if (r == 0)
        say("reinit-unlock %s", ename(pthread_mutex_unlock(m)));
    return 0;
}

static void *lock_and_return(void *arg)
{
    (void)arg;
    say("thread locked %s", ename(pthread_mutex_lock(m)));
    return NULL;
}

static int mode_robust_thread_exit(void)
{
    pthread_t t;
    pthread_create(&t, NULL, lock_and_return, NULL);
    pthread_join(t, NULL);
    say("thread gone");
    struct timespec dl = deadline_in(CLOCK_REALTIME, 20000);
    int r = pthread_mutex_timedlock(m, &dl);
    say("lock %s", ename(r));
    if (r == EOWNERDEAD)
        say("consistent %s", ename(pthread_mutex_consistent(m)));
    if (r == 0 || r == EOWNERDEAD)
        say("unlock %s", ename(pthread_mutex_unlock(m)));
    return 0;
}

static int mode_errcheck(const char *op)
{
    if (strcmp(op, "unheld") == 0) {
        say("errcheck unheld - %s -", ename(pthread_mutex_unlock(m)));
        return 0;
    }
    int lk = pthread_mutex_lock(m);
    int rc = strcmp(op, "relock") == 0 ? pthread_mutex_lock(m) : prog_unlock_elsewhere(m);
    int unl = pthread_mutex_unlock(m);
    say("errcheck %s %s %s %s", op, ename(lk), ename(rc), ename(unl));
    return 0;
}

static int mode_destroy(void)
{
    int l1 = pthread_mutex_lock(m);
    int d1 = pthread_mutex_destroy(m);
    int u1 = pthread_mutex_unlock(m);
    int d2 = pthread_mutex_destroy(m);
    int in = attr_type >= 0 ? init_attr_lock() : pthread_mutex_init(m, NULL);
    int l2 = pthread_mutex_lock(m);
    int u2 = pthread_mutex_unlock(m);
    char s[7][32];
    int v[7] = { l1, d1, u1, d2, in, l2, u2 };
    for (int i = 0; i < 7; i++)
        snprintf(s[i], sizeof s[i], "%s", ename(v[i]));
    say("destroy %s %s %s %s %s %s %s", s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
    return 0;
}

static int mode_recursive(int depth)
{
    redisContext *c = prog_connect("127.0.0.1", port);
    int first = 0, r;
    for (int i = 0; i < depth; i++)
        if ((r = pthread_mutex_lock(m)) != 0 && !first)
            first = r;
    for (int i = 0; i < depth - 1; i++)
        if ((r = pthread_mutex_unlock(m)) != 0 && !first)
            first = r;
    long long inner = pp_exists(c, key);
    int last = pthread_mutex_unlock(m);
    long long outer = pp_exists_settled(c, key);
    say("recursive %s %lld %lld %s", ename(first), inner, outer, ename(last));
    redisFree(c);
    return 0;
}

static int mode_fork_hold(const char *file)
{
    say("parent-locked %s", ename(pthread_mutex_lock(m)));
    pid_t c1 = fork();
    if (c1 == 0) {
        /* A child that uses the shim for a mutex of its own, then exits
         * normally (the exit handlers run). */
        int r = pthread_mutex_lock(&other_lock);
        if (r == 0)
            r = pthread_mutex_unlock(&other_lock);
        say("child1 done %s", ename(r));
        exit(r == 0 ? 0 : 1);
    }
    int st = -1;
    waitpid(c1, &st, 0);
    say("child1 exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    pid_t parent = getpid();
    pid_t c2 = fork();
    if (c2 == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(0);
        for (;;)
            pause();
    }
    say("child2 %d", (int)c2);
    say("waiting");
    wait_file(file);
    say("parent-unlocked %s", ename(pthread_mutex_unlock(m)));
    kill(c2, SIGKILL);
    waitpid(c2, NULL, 0);
    return 0;
}

static int mode_fork_identity(long hold_ms)
{
    say("parent-locked %s", ename(pthread_mutex_lock(m)));
    pid_t c = fork();
    if (c == 0) {
        int r = pthread_mutex_lock(&other_lock);
        say("child-locked %s", ename(r));
        usleep((useconds_t)hold_ms * 1000);
        say("child-unlocked %s", ename(pthread_mutex_unlock(&other_lock)));
        exit(0);
    }
    int st = -1;
    waitpid(c, &st, 0);
    say("child exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    say("parent-unlocked %s", ename(pthread_mutex_unlock(m)));
    return 0;
}

static void *hold_forever(void *arg)
{
    (void)arg;
    say("locked %s", ename(pthread_mutex_lock(m)));
    for (;;)
        pause();
    return NULL;
}

static volatile int shared_ready;

static void *shared_waiter(void *arg)
{
    (void)arg;
    int r = pthread_mutex_lock(&other_lock);
    if (r == 0)
        r = pthread_mutex_lock(m);
    say("waiter locked %s", ename(r));
    int w = 0;
    while (r == 0 && w == 0 && !__atomic_load_n(&shared_ready, __ATOMIC_SEQ_CST))
        w = pthread_cond_wait(&cv, m);
    say("waiter woke %s", ename(w));
    pthread_mutex_unlock(m);
    pthread_mutex_unlock(&other_lock);
    return (void *)(long)w;
}

/* Two mutexes of one name: a thread holding both waits on one's condvar;
 * the signaller must be able to lock that one (its cluster hold is the
 * process's, shared). */
static int mode_shared_cond(void)
{
    pthread_t t;
    pthread_create(&t, NULL, shared_waiter, NULL);
    usleep(200000);
    int r = pthread_mutex_lock(m);
    if (r == 0) {
        __atomic_store_n(&shared_ready, 1, __ATOMIC_SEQ_CST);
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(m);
    }
    void *w;
    pthread_join(t, &w);
    say("shared-cond %s %s", ename(r), ename((int)(long)w));
    return 0;
}

static long long hammer_until;

#define HAMMER_THREADS 4

/* Runs fn on HAMMER_THREADS threads (arg: the thread's index) that stop at
 * hammer_until, `ms` from now; returns the sum of what they return, or -1
 * when one of them returned -1 (it failed). */
static long run_hammers(void *(*fn)(void *), long ms)
{
    pthread_t t[HAMMER_THREADS];
    hammer_until = now_ms() + ms;
    for (long i = 0; i < HAMMER_THREADS; i++)
        pthread_create(&t[i], NULL, fn, (void *)i);
    long total = 0;
    int failed = 0;
    for (int i = 0; i < HAMMER_THREADS; i++) {
        void *n;
        pthread_join(t[i], &n);
        if ((long)n < 0)
            failed = 1;
        else
            total += (long)n;
    }
    return failed ? -1 : total;
}

static void *hammer(void *arg)
{
    long i = (long)arg, n = 0;
    while (now_ms() < hammer_until) {
        pthread_mutex_t *x = &slots[i];
        if (pthread_mutex_lock(x) != 0)
            break;
        usleep(5000);
        pthread_mutex_unlock(x);
        n++;
    }
    return (void *)n;
}

static int mode_family_hammer(long ms)
{
    say("hammering");
    say("hammered %ld", run_hammers(hammer, ms));
    return 0;
}

static void *churner(void *arg)
{
    (void)arg;
    long n = 0;
    while (now_ms() < hammer_until) {
        struct account *a = account_new();
        if (pthread_mutex_lock(&a->lock) != 0 || pthread_mutex_unlock(&a->lock) != 0)
            return (void *)-1L;
        pthread_mutex_destroy(&a->lock);
        free(a);
        n++;
    }
    return (void *)n;
}

static int mode_heap_churn(long ms)
{
    long total = run_hammers(churner, ms);
    if (total < 0) {
        say("churn lock failed");
        return 1;
    }
    say("churned %ld", total);
    return 0;
}

static int (*name_fn)(pthread_mutex_t *, const char *);
static long churn_iters, churn_hold_us;

static void *name_churner(void *arg)
{
    long id = (long)arg, failed = 0;
    unsigned seed = (unsigned)id * 7919u + 1;
    for (long i = 0; i < churn_iters; i++) {
        pthread_mutex_t *x = malloc(sizeof *x);
        pthread_mutex_init(x, NULL);
        char name[64];
        snprintf(name, sizeof name, "nc-%ld-%ld", id, i);
        if (name_fn(x, name) != 0)
            failed++;
        pthread_mutex_lock(x);
        usleep(rand_r(&seed) % (unsigned)churn_hold_us);
        pthread_mutex_unlock(x);
        pthread_mutex_destroy(x);
        free(x);
    }
    return (void *)failed;
}

/* Per-object names whose holds last about a renewal period: a name is
 * freed with its mutex while the watchdog may be renewing its hold. */
static int mode_name_churn(int threads, long iters, long hold_us)
{
    *(void **)&name_fn = dlsym(RTLD_DEFAULT, "dmutex_name");
    if (!name_fn || threads > PP_MAX_THREADS) {
        say("name-churn: no dmutex_name (run it under the shim)");
        return 1;
    }
    churn_iters = iters;
    churn_hold_us = hold_us > 0 ? hold_us : 1;
    pthread_t t[PP_MAX_THREADS];
    for (long i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, name_churner, (void *)i);
    long failed = 0;
    for (int i = 0; i < threads; i++) {
        void *f;
        pthread_join(t[i], &f);
        failed += (long)f;
    }
    say("name-churn %ld", failed);
    return 0;
}

/* What an idle name costs the shim in heap: N mutexes allocated first (not
 * counted), then named; the heap's growth over N. Deterministic: naming
 * does no I/O and starts no thread. */
static int mode_name_heap(long n)
{
    *(void **)&name_fn = dlsym(RTLD_DEFAULT, "dmutex_name");
    pthread_mutex_t **xs = calloc((size_t)n, sizeof *xs);
    if (!name_fn || !xs || n < 1) {
        say("name-heap: no dmutex_name (run it under the shim)");
        return 1;
    }
    for (long i = 0; i < n; i++) {
        if (!(xs[i] = malloc(sizeof *xs[i])))
            return 1;
        pthread_mutex_init(xs[i], NULL);
    }
    size_t before = mallinfo2().uordblks;
    for (long i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "nh-%ld", i);
        if (name_fn(xs[i], name) != 0) {
            say("name-heap: dmutex_name(%s) failed", name);
            return 1;
        }
    }
    size_t after = mallinfo2().uordblks;
    say("name-heap %zu", (after - before) / (size_t)n);
    for (long i = 0; i < n; i++) {
        pthread_mutex_destroy(xs[i]);
        free(xs[i]);
    }
    free(xs);
    return 0;
}

static sem_t xu_to_b, xu_to_a;
static long xu_iters;
static volatile int xu_stop;

static void *xu_locker(void *arg)
{
    (void)arg;
    for (long i = 0; i < xu_iters; i++) {
        pthread_mutex_lock(m);
        sem_post(&xu_to_b);
        sem_wait(&xu_to_a);
    }
    return NULL;
}

static void *xu_unlocker(void *arg)
{
    (void)arg;
    for (long i = 0; i < xu_iters; i++) {
        sem_wait(&xu_to_b);
        pthread_mutex_unlock(m);
        sem_post(&xu_to_a);
    }
    return NULL;
}

static void *xu_third(void *arg)
{
    (void)arg;
    while (!xu_stop) {
        pthread_mutex_lock(m);
        pthread_mutex_unlock(m);
    }
    return NULL;
}

static int mode_xunlock(long iters)
{
    redisContext *c = prog_connect("127.0.0.1", port);
    xu_iters = iters;
    sem_init(&xu_to_b, 0, 0);
    sem_init(&xu_to_a, 0, 0);
    pthread_t a, b, t;
    pthread_create(&t, NULL, xu_third, NULL);
    pthread_create(&a, NULL, xu_locker, NULL);
    pthread_create(&b, NULL, xu_unlocker, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    xu_stop = 1;
    pthread_join(t, NULL);
    say("xunlock exists=%lld", pp_exists_settled(c, key));
    redisFree(c);
    return 0;
}

static int mode_far_timedlock(void)
{
    struct timespec far = { LONG_MAX, 0 };
    long long t0 = now_ms();
    int r = pthread_mutex_timedlock(m, &far);
    say("far %s %lld", ename(r), now_ms() - t0);
    if (r == 0)
        pthread_mutex_unlock(m);
    return 0;
}

static int mode_clocklock_bad(void)
{
    struct timespec t = deadline_in(CLOCK_REALTIME, 1000);
    int r = pthread_mutex_clocklock(m, CLOCK_PROCESS_CPUTIME_ID, &t);
    say("clocklock-bad %s", ename(r));
    if (r == 0)
        pthread_mutex_unlock(m);
    return 0;
}

static int mode_cond_robust(long ms)
{
    int r = pthread_mutex_lock(m);
    if (r != 0) {
        say("lock %s", ename(r));
        return 1;
    }
    struct timespec rt = deadline_in(CLOCK_REALTIME, ms);
    say("waiting");
    r = pthread_cond_timedwait(&cv, m, &rt);
    say("cond-robust %s", ename(r));
    if (r == EOWNERDEAD)
        say("consistent %s", ename(pthread_mutex_consistent(m)));
    say("unlock %s", ename(pthread_mutex_unlock(m)));
    return 0;
}

static int mode_exit_hold(const char *how, const char *file)
{
    if (strcmp(how, "thread") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, hold_forever, NULL);
        wait_file(file);
        say("returning");
        return 0;
    }
    say("locked %s", ename(pthread_mutex_lock(m)));
    wait_file(file);
    if (strcmp(how, "exit") == 0) {
        say("exiting");
        exit(0);
    }
    say("returning");
    return 0;
}

#define ENDED_WAIT_MS 1       /* ended-hold's timed wait: over at once */

static void *lock_and_end(void *arg)
{
    const char *how = arg;
    int r = pthread_mutex_lock(m);
    say("thread locked %s", ename(r));
    if (strcmp(how, "pthread_exit") == 0)
        pthread_exit(NULL);
    struct timespec rt = deadline_in(CLOCK_REALTIME, ENDED_WAIT_MS);
    say("thread timedwait %s", ename(pthread_cond_timedwait(&cv, m, &rt)));
    return NULL;        /* holding m */
}

static sem_t inside_sem;

static void *rec_inside(void *arg)
{
    (void)arg;
    int a = pthread_mutex_lock(&rec_lock), b = pthread_mutex_lock(&rec_lock);
    say("inside %s %s", ename(a), ename(b));
    sem_post(&inside_sem);
    for (;;)
        pause();
    return NULL;
}

static int mode_ended_hold(const char *how)
{
    int inside = strcmp(how, "inside") == 0;
    pthread_t t, u;
    if (inside) {
        sem_init(&inside_sem, 0, 0);
        pthread_create(&u, NULL, rec_inside, NULL);
        while (sem_wait(&inside_sem) != 0)
            ;
    }
    pthread_create(&t, NULL, lock_and_end, (void *)(inside ? "return" : how));
    pthread_join(t, NULL);
    say("thread gone");
    return 0;
}

static int mode_heap_reuse(int n)
{
    struct account *a = account_new();
    int r = pthread_mutex_lock(&a->lock);
    if (r == 0)
        r = pthread_mutex_unlock(&a->lock);
    void *old = a;
    free(a);        /* without pthread_mutex_destroy, as many programs do */
    /* Allocate until malloc hands that memory out again (other chunks of
     * the size may come first); the others are kept until the end, so
     * that malloc does not hand them out again meanwhile. */
    struct account *made[256], *b = NULL;
    int nmade = 0;
    while (nmade < 256 && (void *)b != old)
        b = made[nmade++] = other_new();
    int first = r;
    for (int i = 0; i < n; i++) {
        if ((r = pthread_mutex_lock(&b->lock)) != 0 && !first)
            first = r;
        pthread_mutex_unlock(&b->lock);
    }
    say("reuse same=%d %s", (void *)b == old, ename(first));
    for (int i = 0; i < nmade; i++) {
        pthread_mutex_destroy(&made[i]->lock);
        free(made[i]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5)
        return usage();
    self_path = argv[0];
    port = atoi(argv[1]);
    key = argv[2];
    const char *mode = argv[3];
    char **args = argv + 5;
    int nargs = argc - 5;
    if (pick(argv[4]) != 0)
        return usage();
    if (attr_type >= 0 && init_attr_lock() != 0) {
        say("init failed");
        return 1;
    }

    if (strcmp(mode, "count") == 0 && nargs >= 3) {
        run_count(args, 0);
        return 0;
    }
    if (strcmp(mode, "nested-count") == 0 && nargs >= 3) {
        run_count(args, 1);
        return 0;
    }
    if (strcmp(mode, "fork-count") == 0 && nargs >= 4)
        return fork_count(args, 0, argv[4]);
    if (strcmp(mode, "exec-count") == 0 && nargs >= 4)
        return fork_count(args, 1, argv[4]);
    if (strcmp(mode, "atfork-count") == 0 && nargs >= 4)
        return atfork_count(args);
    if (strcmp(mode, "name-heap") == 0 && nargs >= 1)
        return mode_name_heap(atol(args[0]));
    if (strcmp(mode, "recursive") == 0 && nargs >= 1)
        return mode_recursive(atoi(args[0]));
    if (strcmp(mode, "errcheck") == 0 && nargs >= 1)
        return mode_errcheck(args[0]);
    if (strcmp(mode, "destroy") == 0)
        return mode_destroy();
    if (strcmp(mode, "hold") == 0 && nargs >= 1) {
        say("locked %s", ename(pthread_mutex_lock(m)));
        wait_file(args[0]);
        say("unlocking");
        say("unlocked %s", ename(pthread_mutex_unlock(m)));
        return 0;
    }
    if (strcmp(mode, "lock") == 0) {
        long long t0 = now_ms();
        int r = pthread_mutex_lock(m);
        say("locked %s %lld", ename(r), now_ms() - t0);
        if (r == 0 || r == EOWNERDEAD)
            pthread_mutex_unlock(m);
        return 0;
    }
    if (strcmp(mode, "trylock") == 0) {
        int r = pthread_mutex_trylock(m);
        say("trylock %s", ename(r));
        if (r == 0)
            pthread_mutex_unlock(m);
        return 0;
    }
    if (strcmp(mode, "robust-hold") == 0) {
        say("locked %s", ename(pthread_mutex_lock(m)));
        for (;;)
            pause();
    }
    if (strcmp(mode, "robust-lock") == 0 && nargs >= 1)
        return mode_robust_lock(args[0]);
    if (strcmp(mode, "robust-thread-exit") == 0)
        return mode_robust_thread_exit();
    if (strcmp(mode, "cond") == 0 && nargs >= 2)
        return mode_cond(args[0], args[1]);
    if (strcmp(mode, "cond-timeout") == 0 && nargs >= 2)
        return mode_cond_timeout(args[0], atol(args[1]));
    if (strcmp(mode, "cond-plain") == 0)
        return mode_cond_plain();
    if (strcmp(mode, "fork-hold") == 0 && nargs >= 1)
        return mode_fork_hold(args[0]);
    if (strcmp(mode, "fork-identity") == 0 && nargs >= 1)
        return mode_fork_identity(atol(args[0]));
    if (strcmp(mode, "shared-cond") == 0)
        return mode_shared_cond();
    if (strcmp(mode, "family-hammer") == 0 && nargs >= 1)
        return mode_family_hammer(atol(args[0]));
    if (strcmp(mode, "heap-churn") == 0 && nargs >= 1)
        return mode_heap_churn(atol(args[0]));
    if (strcmp(mode, "name-churn") == 0 && nargs >= 3)
        return mode_name_churn(atoi(args[0]), atol(args[1]), atol(args[2]));
    if (strcmp(mode, "xunlock") == 0 && nargs >= 1)
        return mode_xunlock(atol(args[0]));
    if (strcmp(mode, "far-timedlock") == 0)
        return mode_far_timedlock();
    if (strcmp(mode, "clocklock-bad") == 0)
        return mode_clocklock_bad();
    if (strcmp(mode, "cond-robust") == 0 && nargs >= 1)
        return mode_cond_robust(atol(args[0]));
    if (strcmp(mode, "exit-hold") == 0 && nargs >= 2)
        return mode_exit_hold(args[0], args[1]);
    if (strcmp(mode, "nested-once") == 0) {
        int a = pthread_mutex_lock(&acct_a->lock);
        int b = pthread_mutex_lock(&acct_b->lock);
        int c = pthread_mutex_unlock(&acct_b->lock);
        int d = pthread_mutex_unlock(&acct_a->lock);
        char s[3][32];
        snprintf(s[0], sizeof s[0], "%s", ename(a));
        snprintf(s[1], sizeof s[1], "%s", ename(b));
        snprintf(s[2], sizeof s[2], "%s", ename(c));
        say("nested %s %s %s %s", s[0], s[1], s[2], ename(d));
        return 0;
    }
    if (strcmp(mode, "ended-hold") == 0 && nargs >= 1)
        return mode_ended_hold(args[0]);
    if (strcmp(mode, "heap-reuse") == 0 && nargs >= 1)
        return mode_heap_reuse(atoi(args[0]));
    return usage();
}
