/* record: the entry points of libdmutex-trace.so. Each interposed
 * pthread_* call forwards to glibc through real's table (resolved by the
 * constructor, or by the first call if a library constructor locks
 * earlier) and notes, per mutex address, what `dmutex trace` reports:
 * acquisitions, contention (a trylock first; when it finds the mutex held,
 * the blocking call is timed), wait and hold times, threads, the first
 * init call site. Nothing here allocates, takes a lock or does I/O; the
 * reporter thread (woken through a pipe by SIGUSR1 or by the -i
 * interval) and the destructor write the report. A condition wait
 * releases and retakes its mutex: the hold ends before it, and the
 * re-acquisition after it counts as a lock.
 *
 * Condition variables (waits, signals, broadcasts, time in waits) and
 * rwlocks (read and write acquisitions, contention the way mutexes find
 * it: a try first) are noted in tables of their own, with the first
 * pthread_cond_init / pthread_rwlock_init call site, for the report's
 * `conds` and `rwlocks` blocks. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "real.h"
#include "trace.h"
#include "util.h"

#define DM_EXPORT __attribute__((visibility("default")))
#define NS_PER_S 1000000000ull
#define INTERVAL_MAX_S 86400        /* -i: at most a day */

struct dm_trace_slot dm_trace_table[DM_TRACE_SLOTS];
_Atomic uint64_t dm_trace_untracked;

static _Atomic unsigned thread_seq;
static __thread unsigned my_bit;        /* 1 + thread number, 0: not yet numbered */
static __thread int quiet;              /* this thread's calls are the tracer's own */

static int wake_pipe[2] = { -1, -1 };   /* SIGUSR1 -> reporter thread */
static int reporting;                   /* a reporter thread was wanted (SIGUSR1 or -i) */
static long interval_s;                 /* DMUTEX_TRACE_INTERVAL, 0: none */

int dm_trace_self_quiet(int on)
{
    int was = quiet;
    quiet = on;
    return was;
}

static inline uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * NS_PER_S + (uint64_t)t.tv_nsec;
}

#define LOAD(x)     atomic_load_explicit(&(x), memory_order_relaxed)
#define STORE(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

/* The slot of mutex m, claimed on first sight; NULL when DM_TRACE_PROBES
 * slots from its home are all taken by other mutexes. */
static struct dm_trace_slot *find_slot(const void *m)
{
    uintptr_t key = (uintptr_t)m;
    uint64_t h = ((uint64_t)key >> 3) * 0x9E3779B97F4A7C15ull;
    unsigned i = (unsigned)(h >> (64 - DM_TRACE_SLOTS_LOG2));
    for (unsigned n = 0; n < DM_TRACE_PROBES; n++, i = (i + 1) & (DM_TRACE_SLOTS - 1)) {
        struct dm_trace_slot *s = &dm_trace_table[i];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key)
            return s;
        if (k == 0) {
            uintptr_t zero = 0;
            if (atomic_compare_exchange_strong(&s->key, &zero, key) || zero == key)
                return s;
        }
    }
    return NULL;
}

/* find_slot for an acquisition: one that finds no slot is counted. */
static struct dm_trace_slot *slot_of(const void *m)
{
    struct dm_trace_slot *s = find_slot(m);
    if (!s)
        atomic_fetch_add_explicit(&dm_trace_untracked, 1, memory_order_relaxed);
    return s;
}

/* The calling thread's bit in a slot's `threads`. */
static inline uint64_t thread_bit(void)
{
    if (!my_bit)
        my_bit = 1 + atomic_fetch_add_explicit(&thread_seq, 1, memory_order_relaxed);
    return 1ull << ((my_bit - 1) % DM_TRACE_THREAD_BITS);
}

/* After an acquisition (the caller holds m now): only the holder writes. */
static void acquired(struct dm_trace_slot *s, int contended, uint64_t waited)
{
    uint64_t bit = thread_bit();
    if (!(LOAD(s->threads) & bit))
        atomic_fetch_or_explicit(&s->threads, bit, memory_order_relaxed);
    STORE(s->locks, LOAD(s->locks) + 1);
    if (contended) {
        STORE(s->contended, LOAD(s->contended) + 1);
        STORE(s->wait_ns, LOAD(s->wait_ns) + waited);
        if (waited > LOAD(s->wait_max_ns))
            STORE(s->wait_max_ns, waited);
    }
    uint32_t d = LOAD(s->depth);
    STORE(s->depth, d + 1);
    if (d == 0)
        STORE(s->hold_start_ns, now_ns());
}

/* Before the real unlock (or a condition wait): the holder's last
 * recursive hold ends. */
static void releasing(struct dm_trace_slot *s)
{
    uint32_t d = LOAD(s->depth);
    if (d == 0)
        return;                 /* not locked through us: nothing to end */
    STORE(s->depth, d - 1);
    if (d != 1)
        return;
    uint64_t held = now_ns() - LOAD(s->hold_start_ns);
    if (held > LOAD(s->hold_max_ns))
        STORE(s->hold_max_ns, held);
    unsigned b = held ? 63 - (unsigned)__builtin_clzll(held) : 0;
    if (b >= DM_TRACE_HIST)
        b = DM_TRACE_HIST - 1;
    STORE(s->hist[b], LOAD(s->hist[b]) + 1);
}

/* A blocking acquisition: trylock first, and only when that finds the
 * mutex held, the blocking call, timed. */
#define TRACED_LOCK(m, blocking_call)                                         \
    do {                                                                      \
        if (quiet)                                                            \
            return blocking_call;                                             \
        int r_ = dm_real.mutex_trylock(m);                                    \
        if (r_ != EBUSY) {                                                    \
            if (r_ == 0 || r_ == EOWNERDEAD) {                                \
                struct dm_trace_slot *s_ = slot_of(m);                        \
                if (s_)                                                       \
                    acquired(s_, 0, 0);                                       \
            }                                                                 \
            if (r_ != EAGAIN && r_ != EINVAL)                                 \
                return r_;                                                    \
            return blocking_call;   /* recursion limit, odd types: glibc decides */ \
        }                                                                     \
        uint64_t t0_ = now_ns();                                              \
        r_ = blocking_call;                                                   \
        if (r_ == 0 || r_ == EOWNERDEAD) {                                    \
            struct dm_trace_slot *s_ = slot_of(m);                            \
            if (s_)                                                           \
                acquired(s_, 1, now_ns() - t0_);                              \
        }                                                                     \
        return r_;                                                            \
    } while (0)

DM_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    TRACED_LOCK(m, dm_real.mutex_lock(m));
}

DM_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
    TRACED_LOCK(m, dm_real.mutex_timedlock(m, t));
}

DM_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{
    TRACED_LOCK(m, dm_real.mutex_clocklock(m, c, t));
}

DM_EXPORT int pthread_mutex_trylock(pthread_mutex_t *m)
{
    int r = dm_real.mutex_trylock(m);
    if (!quiet && (r == 0 || r == EOWNERDEAD)) {
        struct dm_trace_slot *s = slot_of(m);
        if (s)
            acquired(s, 0, 0);
    }
    return r;
}

DM_EXPORT int pthread_mutex_unlock(pthread_mutex_t *m)
{
    if (!quiet) {
        struct dm_trace_slot *s = find_slot(m);
        if (s)
            releasing(s);
    }
    return dm_real.mutex_unlock(m);
}

DM_EXPORT int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    uintptr_t site = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.mutex_init(m, a);
    if (r == 0 && !quiet) {
        struct dm_trace_slot *s = find_slot(m);
        if (s) {
            uintptr_t none = 0;
            atomic_compare_exchange_strong(&s->init_site, &none, site);
            STORE(s->depth, 0);     /* a new mutex at an old address is not held */
        }
    }
    return r;
}

/* The statistics stay: a destroyed heap mutex still tells how its
 * init_site's mutexes were used. */
DM_EXPORT int pthread_mutex_destroy(pthread_mutex_t *m)
{
    return dm_real.mutex_destroy(m);
}

/* ---- condition variables and rwlocks ------------------------------------ */

struct dm_trace_obj dm_trace_conds[DM_TRACE_OBJ_SLOTS];
struct dm_trace_obj dm_trace_rwlocks[DM_TRACE_OBJ_SLOTS];
_Atomic uint64_t dm_trace_untracked_conds, dm_trace_untracked_rwlocks;

#define ADD(x, v) atomic_fetch_add_explicit(&(x), (v), memory_order_relaxed)

/* The slot of object o in `table` (find_slot's probing), claimed on first
 * sight; NULL when DM_TRACE_PROBES slots from its home are taken, counted
 * in *untracked (when given). */
static struct dm_trace_obj *obj_slot(struct dm_trace_obj *table, const void *o,
                                     _Atomic uint64_t *untracked)
{
    uintptr_t key = (uintptr_t)o;
    uint64_t h = ((uint64_t)key >> 3) * 0x9E3779B97F4A7C15ull;
    unsigned i = (unsigned)(h >> (64 - DM_TRACE_OBJ_SLOTS_LOG2));
    for (unsigned n = 0; n < DM_TRACE_PROBES; n++, i = (i + 1) & (DM_TRACE_OBJ_SLOTS - 1)) {
        struct dm_trace_obj *s = &table[i];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == key)
            return s;
        if (k == 0) {
            uintptr_t zero = 0;
            if (atomic_compare_exchange_strong(&s->key, &zero, key) || zero == key)
                return s;
        }
    }
    if (untracked)
        ADD(*untracked, 1);
    return NULL;
}

/* One use of slot s by this thread: n[which] counted, the thread marked. */
static void obj_used(struct dm_trace_obj *s, int which)
{
    uint64_t bit = thread_bit();
    if (!(LOAD(s->threads) & bit))
        atomic_fetch_or_explicit(&s->threads, bit, memory_order_relaxed);
    ADD(s->n[which], 1);
}

static void obj_waited(struct dm_trace_obj *s, uint64_t ns)
{
    ADD(s->wait_ns, ns);
    uint64_t max = LOAD(s->wait_max_ns);
    while (ns > max && !atomic_compare_exchange_weak_explicit(&s->wait_max_ns, &max, ns,
                                                              memory_order_relaxed,
                                                              memory_order_relaxed))
        ;
}

/* The first init call site of the object at o (a new object at an old
 * address keeps the first: its report row stays the same). */
static void obj_init(struct dm_trace_obj *table, const void *o, uintptr_t site)
{
    struct dm_trace_obj *s = obj_slot(table, o, NULL);
    if (s) {
        uintptr_t none = 0;
        atomic_compare_exchange_strong(&s->init_site, &none, site);
    }
}

/* A cond wait is counted when it begins and timed until it returns (the
 * mutex retaken included). */
struct cond_wait {
    struct dm_trace_obj *s;
    uint64_t t0;
};

static struct cond_wait cond_wait_begin(pthread_cond_t *c)
{
    struct cond_wait w = { NULL, 0 };
    if (!quiet && (w.s = obj_slot(dm_trace_conds, c, &dm_trace_untracked_conds)) != NULL) {
        obj_used(w.s, DM_TRACE_COND_WAITS);
        w.t0 = now_ns();
    }
    return w;
}

static int cond_wait_end(const struct cond_wait *w, int r)
{
    if (w->s)
        obj_waited(w->s, now_ns() - w->t0);
    return r;
}

static void cond_used(pthread_cond_t *c, int which)
{
    struct dm_trace_obj *s = quiet ? NULL : obj_slot(dm_trace_conds, c, &dm_trace_untracked_conds);
    if (s)
        obj_used(s, which);
}

DM_EXPORT int pthread_cond_signal(pthread_cond_t *c)
{
    cond_used(c, DM_TRACE_COND_SIGNALS);
    return dm_real.cond_signal(c);
}

DM_EXPORT int pthread_cond_broadcast(pthread_cond_t *c)
{
    cond_used(c, DM_TRACE_COND_BROADCASTS);
    return dm_real.cond_broadcast(c);
}

DM_EXPORT int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
    uintptr_t site = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.cond_init(c, a);
    if (r == 0 && !quiet)
        obj_init(dm_trace_conds, c, site);
    return r;
}

static void rwlock_acquired(pthread_rwlock_t *l, int which, int contended, uint64_t waited)
{
    struct dm_trace_obj *s = obj_slot(dm_trace_rwlocks, l, &dm_trace_untracked_rwlocks);
    if (!s)
        return;
    obj_used(s, which);
    if (contended) {
        ADD(s->n[DM_TRACE_RW_CONTENDED], 1);
        obj_waited(s, waited);
    }
}

/* A blocking rwlock acquisition: the try of the same kind first, and
 * only when that finds it busy, the blocking call, timed. Any other
 * answer of the try (too many readers, ...) is left to the blocking call. */
#define TRACED_RWLOCK(l, which, try_call, blocking_call)                      \
    do {                                                                      \
        if (quiet)                                                            \
            return blocking_call;                                             \
        int r_ = try_call;                                                    \
        if (r_ == 0) {                                                        \
            rwlock_acquired(l, which, 0, 0);                                  \
            return 0;                                                         \
        }                                                                     \
        if (r_ != EBUSY)                                                      \
            return blocking_call;                                             \
        uint64_t t0_ = now_ns();                                              \
        r_ = blocking_call;                                                   \
        if (r_ == 0)                                                          \
            rwlock_acquired(l, which, 1, now_ns() - t0_);                     \
        return r_;                                                            \
    } while (0)

DM_EXPORT int pthread_rwlock_rdlock(pthread_rwlock_t *l)
{
    TRACED_RWLOCK(l, DM_TRACE_RW_READS, dm_real.rwlock_tryrdlock(l), dm_real.rwlock_rdlock(l));
}

DM_EXPORT int pthread_rwlock_timedrdlock(pthread_rwlock_t *l, const struct timespec *t)
{
    TRACED_RWLOCK(l, DM_TRACE_RW_READS, dm_real.rwlock_tryrdlock(l),
                  dm_real.rwlock_timedrdlock(l, t));
}

DM_EXPORT int pthread_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{
    TRACED_RWLOCK(l, DM_TRACE_RW_READS, dm_real.rwlock_tryrdlock(l),
                  dm_real.rwlock_clockrdlock(l, c, t));
}

DM_EXPORT int pthread_rwlock_wrlock(pthread_rwlock_t *l)
{
    TRACED_RWLOCK(l, DM_TRACE_RW_WRITES, dm_real.rwlock_trywrlock(l), dm_real.rwlock_wrlock(l));
}

DM_EXPORT int pthread_rwlock_timedwrlock(pthread_rwlock_t *l, const struct timespec *t)
{
    TRACED_RWLOCK(l, DM_TRACE_RW_WRITES, dm_real.rwlock_trywrlock(l),
                  dm_real.rwlock_timedwrlock(l, t));
}

DM_EXPORT int pthread_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{
    TRACED_RWLOCK(l, DM_TRACE_RW_WRITES, dm_real.rwlock_trywrlock(l),
                  dm_real.rwlock_clockwrlock(l, c, t));
}

DM_EXPORT int pthread_rwlock_tryrdlock(pthread_rwlock_t *l)
{
    int r = dm_real.rwlock_tryrdlock(l);
    if (r == 0 && !quiet)
        rwlock_acquired(l, DM_TRACE_RW_READS, 0, 0);
    return r;
}

DM_EXPORT int pthread_rwlock_trywrlock(pthread_rwlock_t *l)
{
    int r = dm_real.rwlock_trywrlock(l);
    if (r == 0 && !quiet)
        rwlock_acquired(l, DM_TRACE_RW_WRITES, 0, 0);
    return r;
}

DM_EXPORT int pthread_rwlock_init(pthread_rwlock_t *l, const pthread_rwlockattr_t *a)
{
    uintptr_t site = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.rwlock_init(l, a);
    if (r == 0 && !quiet)
        obj_init(dm_trace_rwlocks, l, site);
    return r;
}

/* A condition wait releases m and retakes it before returning. */
#define TRACED_WAIT(m, wait_call)                                             \
    do {                                                                      \
        struct dm_trace_slot *s_ = quiet ? NULL : slot_of(m);                 \
        uint32_t depth_ = 0;                                                  \
        if (s_) {                                                             \
            depth_ = LOAD(s_->depth);                                         \
            if (depth_) {                                                     \
                STORE(s_->depth, 1);                                          \
                releasing(s_);                                                \
            }                                                                 \
        }                                                                     \
        int r_ = wait_call;                                                   \
        if (s_) {                                                             \
            acquired(s_, 0, 0);                                               \
            if (depth_ > 1)                                                   \
                STORE(s_->depth, depth_);                                     \
        }                                                                     \
        return r_;                                                            \
    } while (0)

DM_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    struct cond_wait w = cond_wait_begin(c);
    TRACED_WAIT(m, cond_wait_end(&w, dm_real.cond_wait(c, m)));
}

DM_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                     const struct timespec *t)
{
    struct cond_wait w = cond_wait_begin(c);
    TRACED_WAIT(m, cond_wait_end(&w, dm_real.cond_timedwait(c, m, t)));
}

DM_EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t k,
                                     const struct timespec *t)
{
    struct cond_wait w = cond_wait_begin(c);
    TRACED_WAIT(m, cond_wait_end(&w, dm_real.cond_clockwait(c, m, k, t)));
}

/* ---- when to report ---------------------------------------------------- */

static void on_sigusr1(int sig)
{
    (void)sig;
    int saved = errno;
    char b = 'r';
    if (write(wake_pipe[1], &b, 1) < 0) {
        /* the pipe is full: a report is already due */
    }
    errno = saved;
}

/* Waits for SIGUSR1's byte or the interval, and reports. Blocks every
 * signal (dm_thread_start): they are the program's. */
static void *reporter(void *arg)
{
    (void)arg;
    dm_trace_self_quiet(1);
    for (;;) {
        struct pollfd p = { .fd = wake_pipe[0], .events = POLLIN };
        int n = poll(&p, 1, interval_s ? (int)(interval_s * 1000) : -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return NULL;
        if (n == 0) {
            dm_trace_report("interval");
            continue;
        }
        char buf[64];
        ssize_t got = read(wake_pipe[0], buf, sizeof buf);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
            return NULL;
        if (got > 0)
            dm_trace_report("signal");
    }
}

static void start_reporter(void)
{
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        wake_pipe[0] = wake_pipe[1] = -1;
        return;
    }
    /* The read end blocks in poll, not in read: non-blocking is right. */
    pthread_t t;
    if (dm_thread_start(&t, reporter, NULL) != 0) {
        close(wake_pipe[0]);
        close(wake_pipe[1]);
        wake_pipe[0] = wake_pipe[1] = -1;
    }
}

/* The child of a fork reports on its own: its counts start from zero
 * (the parent's stay the parent's), its mutexes keep their identities,
 * and it gets its own reporter thread (the parent's is not there). */
static void atfork_parent(void)
{
    dm_trace_report_release();
}

static void atfork_child(void)
{
    dm_trace_report_release();
    for (unsigned i = 0; i < DM_TRACE_SLOTS; i++) {
        struct dm_trace_slot *s = &dm_trace_table[i];
        if (!LOAD(s->key))
            continue;
        STORE(s->locks, 0);
        STORE(s->contended, 0);
        STORE(s->wait_ns, 0);
        STORE(s->wait_max_ns, 0);
        STORE(s->hold_max_ns, 0);
        STORE(s->threads, 0);
        for (int b = 0; b < DM_TRACE_HIST; b++)
            STORE(s->hist[b], 0);
        /* depth and hold_start stay: the forking thread's holds are held. */
    }
    STORE(dm_trace_untracked, 0);
    struct dm_trace_obj *tables[] = { dm_trace_conds, dm_trace_rwlocks };
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (unsigned i = 0; i < DM_TRACE_OBJ_SLOTS; i++) {
            struct dm_trace_obj *s = &tables[t][i];
            if (!LOAD(s->key))
                continue;
            for (int k = 0; k < 3; k++)
                STORE(s->n[k], 0);
            STORE(s->wait_ns, 0);
            STORE(s->wait_max_ns, 0);
            STORE(s->threads, 0);
        }
    STORE(dm_trace_untracked_conds, 0);
    STORE(dm_trace_untracked_rwlocks, 0);
    my_bit = 0;
    STORE(thread_seq, 0);
    if (wake_pipe[0] >= 0) {
        close(wake_pipe[0]);
        close(wake_pipe[1]);
        wake_pipe[0] = wake_pipe[1] = -1;
    }
    if (reporting)
        start_reporter();
}

__attribute__((constructor)) static void dm_trace_start(void)
{
    dm_real_resolve();
    const char *iv = getenv("DMUTEX_TRACE_INTERVAL");
    if (iv && *iv) {
        char *end;
        long v = strtol(iv, &end, 10);
        if (*end == '\0' && v > 0 && v <= INTERVAL_MAX_S)
            interval_s = v;
    }
    /* SIGUSR1 reports only where the program has not claimed it. */
    struct sigaction old;
    int want_signal = sigaction(SIGUSR1, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO)
        && old.sa_handler == SIG_DFL;
    /* A thread from a constructor, unlike the shim: the program may get
     * SIGUSR1 before it locks anything, and the report must not be
     * written from the handler. It blocks every signal and sleeps in poll. */
    reporting = want_signal || interval_s;
    if (reporting)
        start_reporter();
    if (want_signal && wake_pipe[1] >= 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigusr1;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, NULL);
    }
    pthread_atfork(dm_trace_report_prepare, atfork_parent, atfork_child);
}

__attribute__((destructor)) static void dm_trace_stop(void)
{
    dm_trace_report("exit");
}
