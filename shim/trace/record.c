/* record: the entry points of libdmutex-trace.so. Each interposed
 * pthread_* call forwards to glibc through real's table (resolved by the
 * constructor, or by the first call if a library constructor locks
 * earlier) and notes, per mutex address, what `dmutex trace` reports:
 * acquisitions, contention (a trylock first; when it finds the mutex held,
 * the blocking call is timed), wait and hold times, threads, the init
 * call site (the latest: an address initialised from another function is
 * another mutex, and the old one's counts are retired to its site).
 * Nothing on the lock path allocates, takes a lock or does I/O; the
 * reporter thread (woken through a semaphore by SIGUSR1 or by the -i
 * interval) and the destructor write the report, and dlclose has the
 * report identify the object's mutexes before it goes. The reporter is
 * started by the process's first traced unlock that leaves its thread
 * holding nothing, not by the constructor: a program that never locks (a
 * helper it runs, a shell) stays single-threaded, as unshare(2) with
 * CLONE_NEWUSER needs, and no descriptor is taken from any program; and
 * not inside a lock call either: a program's own malloc that takes a
 * mutex must not be re-entered by pthread_create while it holds it. A
 * condition wait releases and retakes its mutex: the hold ends before
 * it, and the re-acquisition after it counts as a lock.
 *
 * Condition variables (waits, signals, broadcasts, time in waits) and
 * rwlocks (read and write acquisitions, contention the way mutexes find
 * it: a try first) are noted in tables of their own, with the
 * pthread_cond_init / pthread_rwlock_init call site (the latest, old
 * counts retired as a mutex's), for the report's `conds` and `rwlocks`
 * blocks. C11's mtx_* and cnd_* are recorded as the pthread calls they are
 * (glibc's never reach the exported pthread ones). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "real.h"
#include "trace.h"
#include "util.h"

#define DM_EXPORT __attribute__((visibility("default")))
#define INTERVAL_MAX_S 86400        /* -i: at most a day */

static _Atomic unsigned thread_seq;
static __thread unsigned my_bit;        /* 1 + thread number, 0: not yet numbered */
static __thread unsigned holding;       /* traced acquisitions this thread has not released */
static __thread unsigned rw_holding;    /* rwlock acquisitions it has not released (rwlocks
                                           keep no holder: a count for the reporter's start) */
static __thread int start_due;          /* start the reporter once this thread holds nothing */

static sem_t wake;                      /* SIGUSR1 -> reporter thread (sem_post is async-signal-safe) */
static int reporting;                   /* a reporter thread is wanted (SIGUSR1 or -i) */
static _Atomic int reporter_started;    /* this process's reporter was started */
static long interval_s;                 /* DMUTEX_TRACE_INTERVAL, 0: none */

static void start_reporter(void);

#define LOAD(x)     atomic_load_explicit(&(x), memory_order_relaxed)
#define STORE(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

/* The slot of key (a mutex's address, or a retired key), claimed on
 * first sight; NULL when DM_TRACE_PROBES slots from its home are all
 * taken by other keys. */
static struct dm_trace_slot *find_key(uintptr_t key)
{
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

static inline struct dm_trace_slot *find_slot(const void *m)
{
    return find_key((uintptr_t)m);
}

/* find_slot for an acquisition: one that finds no slot is counted. */
static struct dm_trace_slot *slot_of(const void *m)
{
    struct dm_trace_slot *s = find_slot(m);
    if (!s)
        atomic_fetch_add_explicit(&dm_trace_untracked, 1, memory_order_relaxed);
    return s;
}

/* The calling thread's bit in a slot's `threads`. Its first call numbers
 * the thread, which then starts the reporter at its first unlock that
 * leaves it holding nothing (pthread_mutex_unlock, pthread_rwlock_unlock). */
static inline uint64_t thread_bit(void)
{
    if (!my_bit) {
        my_bit = 1 + atomic_fetch_add_explicit(&thread_seq, 1, memory_order_relaxed);
        start_due = reporting && !atomic_load_explicit(&reporter_started, memory_order_relaxed);
    }
    return 1ull << ((my_bit - 1) % DM_TRACE_THREAD_BITS);
}

/* After an acquisition (the caller holds m now): only the holder writes. */
static void acquired(struct dm_trace_slot *s, int contended, uint64_t waited)
{
    uint64_t bit = thread_bit();
    holding++;
    if (!(LOAD(s->threads) & bit))
        atomic_fetch_or_explicit(&s->threads, bit, memory_order_relaxed);
    STORE(s->locks, LOAD(s->locks) + 1);
    if (contended) {
        STORE(s->contended, LOAD(s->contended) + 1);
        STORE(s->wait_ticks, LOAD(s->wait_ticks) + waited);
        if (waited > LOAD(s->wait_max_ticks))
            STORE(s->wait_max_ticks, waited);
    }
    uint32_t d = LOAD(s->depth);
    STORE(s->depth, d + 1);
    if (d == 0)
        STORE(s->hold_start, now_ticks());
}

/* A hold of s that lasted `held` ticks ended. */
static void hold_ended(struct dm_trace_slot *s, uint64_t held)
{
    if (held > LOAD(s->hold_max_ticks))
        STORE(s->hold_max_ticks, held);
    unsigned b = held ? 63 - (unsigned)__builtin_clzll(held) : 0;
    if (b >= DM_TRACE_HIST)
        b = DM_TRACE_HIST - 1;
    STORE(s->hist[b], LOAD(s->hist[b]) + 1);
}

/* Before the real unlock: the holder's last recursive hold ends. */
static void releasing(struct dm_trace_slot *s)
{
    uint32_t d = LOAD(s->depth);
    if (d == 0)
        return;                 /* not locked through us: nothing to end */
    if (holding)
        holding--;              /* (0: locked by another thread, as glibc allows) */
    STORE(s->depth, d - 1);
    if (d == 1)
        hold_ended(s, since(LOAD(s->hold_start), now_ticks()));
}

static void max_into(_Atomic uint64_t *to, uint64_t v)
{
    uint64_t cur = atomic_load_explicit(to, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(to, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

/* The counts of s (the mutex at address m, about to be initialised from
 * another site) go to its old site's retired slot; s starts over. Other
 * threads may retire into the same slot at once: locked adds. Without
 * room in the table they are dropped, as a full table drops a mutex. */
static void retire(struct dm_trace_slot *s, uintptr_t m)
{
    struct dm_trace_slot *to = find_key(DM_TRACE_RETIRED(LOAD(s->init_site)));
    if (to) {
        uintptr_t none = 0;
        atomic_compare_exchange_strong(&to->first, &none, m);
        STORE(to->init_site, LOAD(s->init_site));
        STORE(to->c11, LOAD(s->c11));
        atomic_fetch_add_explicit(&to->folded, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&to->contended, LOAD(s->contended), memory_order_relaxed);
        atomic_fetch_add_explicit(&to->wait_ticks, LOAD(s->wait_ticks), memory_order_relaxed);
        max_into(&to->wait_max_ticks, LOAD(s->wait_max_ticks));
        max_into(&to->hold_max_ticks, LOAD(s->hold_max_ticks));
        atomic_fetch_or_explicit(&to->threads, LOAD(s->threads), memory_order_relaxed);
        for (int b = 0; b < DM_TRACE_HIST; b++)
            atomic_fetch_add_explicit(&to->hist[b], LOAD(s->hist[b]), memory_order_relaxed);
        /* locks last: the report skips a slot with none */
        atomic_fetch_add_explicit(&to->locks, LOAD(s->locks), memory_order_relaxed);
    }
    dm_trace_slot_zero(s);
}

/* A blocking acquisition: trylock first, and only when that finds the
 * mutex held, the blocking call, timed. */
#define TRACED_LOCK(m, blocking_call)                                         \
    do {                                                                      \
        if (dm_trace_quiet)                                                   \
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
        uint64_t t0_ = now_ticks();                                           \
        r_ = blocking_call;                                                   \
        if (r_ == 0 || r_ == EOWNERDEAD) {                                    \
            struct dm_trace_slot *s_ = slot_of(m);                            \
            if (s_)                                                           \
                acquired(s_, 1, since(t0_, now_ticks()));                     \
        }                                                                     \
        return r_;                                                            \
    } while (0)

/* The bodies the pthread entry points and their C11 twins (below) share:
 * a C11 mtx_t is a pthread_mutex_t, and glibc's mtx_* are its pthread
 * functions with their result turned into a thrd_* one. */
static int traced_lock(pthread_mutex_t *m)
{
    TRACED_LOCK(m, dm_real.mutex_lock(m));
}

static int traced_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
    TRACED_LOCK(m, dm_real.mutex_timedlock(m, t));
}

static int traced_trylock(pthread_mutex_t *m)
{
    int r = dm_real.mutex_trylock(m);
    if (!dm_trace_quiet && (r == 0 || r == EOWNERDEAD)) {
        struct dm_trace_slot *s = slot_of(m);
        if (s)
            acquired(s, 0, 0);
    }
    return r;
}

static int traced_unlock(pthread_mutex_t *m)
{
    if (!dm_trace_quiet) {
        struct dm_trace_slot *s = find_slot(m);
        if (s)
            releasing(s);
    }
    int r = dm_real.mutex_unlock(m);
    /* The reporter starts here, with nothing of the program's held: the
     * first lock may be taken inside the program's own malloc, which
     * pthread_create calls again. */
    if (start_due && !holding && !rw_holding) {
        start_due = 0;
        start_reporter();
    }
    return r;
}

/* A mutex pthread_mutex_init or (c11) mtx_init made at m, called from
 * `site`. */
static void initialised(void *m, uintptr_t site, int c11)
{
    struct dm_trace_slot *s = find_slot(m);
    if (s) {
        uintptr_t old = LOAD(s->init_site);
        if (old != site) {
            /* Another function's mutex at this address now: the
             * counts so far are the old one's. */
            if (old && LOAD(s->locks))
                retire(s, (uintptr_t)m);
            STORE(s->init_site, site);
        }
        STORE(s->c11, (uint32_t)c11);
        STORE(s->depth, 0);     /* a new mutex at an old address is not held */
    }
}

DM_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    return traced_lock(m);
}

DM_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
    return traced_timedlock(m, t);
}

DM_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{
    TRACED_LOCK(m, dm_real.mutex_clocklock(m, c, t));
}

DM_EXPORT int pthread_mutex_trylock(pthread_mutex_t *m)
{
    return traced_trylock(m);
}

DM_EXPORT int pthread_mutex_unlock(pthread_mutex_t *m)
{
    return traced_unlock(m);
}

DM_EXPORT int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    uintptr_t site = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.mutex_init(m, a);
    if (r == 0 && !dm_trace_quiet)
        initialised(m, site, 0);
    return r;
}

/* The statistics stay: a destroyed heap mutex still tells how its
 * init_site's mutexes were used. */
DM_EXPORT int pthread_mutex_destroy(pthread_mutex_t *m)
{
    return dm_real.mutex_destroy(m);
}

/* An object about to be unloaded: its mutexes are identified while its
 * symbols can still be read, and the symbol tables read are dropped after
 * it (report.c). */
DM_EXPORT int dlclose(void *handle)
{
    if (dm_trace_quiet || !handle)
        return dm_real.dlclose(handle);
    dm_trace_report_unloading(handle);
    int r = dm_real.dlclose(handle);
    dm_trace_report_unloaded();
    return r;
}

/* ---- condition variables and rwlocks ------------------------------------ */

#define ADD(x, v) atomic_fetch_add_explicit(&(x), (v), memory_order_relaxed)

/* The slot of key (an object's address, or a retired key) in `table`
 * (find_key's probing), claimed on first sight; NULL when DM_TRACE_PROBES
 * slots from its home are taken, counted in *untracked (when given). */
static struct dm_trace_obj *obj_slot(struct dm_trace_obj *table, uintptr_t key,
                                     _Atomic uint64_t *untracked)
{
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

/* A wait of `ticks` on s ended. */
static void obj_waited(struct dm_trace_obj *s, uint64_t ticks)
{
    ADD(s->wait_ticks, ticks);
    max_into(&s->wait_max_ticks, ticks);
}

/* The counts of s (the object at address o, about to be initialised from
 * another site) go to its old site's retired slot of `table`, as retire()
 * does for a mutex; s starts over. */
static void obj_retire(struct dm_trace_obj *table, struct dm_trace_obj *s, uintptr_t o)
{
    struct dm_trace_obj *to = obj_slot(table, DM_TRACE_RETIRED(LOAD(s->init_site)), NULL);
    if (to) {
        uintptr_t none = 0;
        atomic_compare_exchange_strong(&to->first, &none, o);
        STORE(to->init_site, LOAD(s->init_site));
        STORE(to->c11, LOAD(s->c11));
        ADD(to->folded, 1);
        ADD(to->wait_ticks, LOAD(s->wait_ticks));
        max_into(&to->wait_max_ticks, LOAD(s->wait_max_ticks));
        atomic_fetch_or_explicit(&to->threads, LOAD(s->threads), memory_order_relaxed);
        /* the counts last: the report skips a slot with none */
        for (int k = 0; k < 3; k++)
            ADD(to->n[k], LOAD(s->n[k]));
    }
    dm_trace_obj_zero(s);
}

/* The init call site of the object at o: the latest, as a mutex's (an
 * address initialised from another function holds another object, and
 * the old one's counts are retired to its site). */
static void obj_init(struct dm_trace_obj *table, const void *o, uintptr_t site, int c11)
{
    struct dm_trace_obj *s = obj_slot(table, (uintptr_t)o, NULL);
    if (!s)
        return;
    uintptr_t old = LOAD(s->init_site);
    if (old != site) {
        if (old && (LOAD(s->n[0]) || LOAD(s->n[1]) || LOAD(s->n[2])))
            obj_retire(table, s, (uintptr_t)o);
        STORE(s->init_site, site);
    }
    STORE(s->c11, (uint32_t)c11);
}

/* A cond wait is counted when it begins and timed until it returns (the
 * mutex retaken included). One that fails at once (EINVAL, EPERM: see
 * TRACED_WAIT) waited for nothing: its count is taken back. */
struct cond_wait {
    struct dm_trace_obj *s;
    uint64_t t0;
};

static struct cond_wait cond_wait_begin(pthread_cond_t *c)
{
    struct cond_wait w = { NULL, 0 };
    if (!dm_trace_quiet)
        w.s = obj_slot(dm_trace_conds, (uintptr_t)c, &dm_trace_untracked_conds);
    if (w.s) {
        obj_used(w.s, DM_TRACE_COND_WAITS);
        w.t0 = now_ticks();
    }
    return w;
}

static int cond_wait_end(const struct cond_wait *w, int r)
{
    if (!w->s)
        return r;
    if (r == 0 || r == ETIMEDOUT || r == EOWNERDEAD)
        obj_waited(w->s, since(w->t0, now_ticks()));
    else
        atomic_fetch_sub_explicit(&w->s->n[DM_TRACE_COND_WAITS], 1, memory_order_relaxed);
    return r;
}

static void cond_used(pthread_cond_t *c, int which)
{
    struct dm_trace_obj *s = dm_trace_quiet ? NULL
        : obj_slot(dm_trace_conds, (uintptr_t)c, &dm_trace_untracked_conds);
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
    if (r == 0 && !dm_trace_quiet)
        obj_init(dm_trace_conds, c, site, 0);
    return r;
}

static void rwlock_acquired(pthread_rwlock_t *l, int which, int contended, uint64_t waited)
{
    rw_holding++;
    struct dm_trace_obj *s = obj_slot(dm_trace_rwlocks, (uintptr_t)l, &dm_trace_untracked_rwlocks);
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
        if (dm_trace_quiet)                                                   \
            return blocking_call;                                             \
        int r_ = try_call;                                                    \
        if (r_ == 0) {                                                        \
            rwlock_acquired(l, which, 0, 0);                                  \
            return 0;                                                         \
        }                                                                     \
        if (r_ != EBUSY)                                                      \
            return blocking_call;                                             \
        uint64_t t0_ = now_ticks();                                           \
        r_ = blocking_call;                                                   \
        if (r_ == 0)                                                          \
            rwlock_acquired(l, which, 1, since(t0_, now_ticks()));            \
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
    if (r == 0 && !dm_trace_quiet)
        rwlock_acquired(l, DM_TRACE_RW_READS, 0, 0);
    return r;
}

DM_EXPORT int pthread_rwlock_trywrlock(pthread_rwlock_t *l)
{
    int r = dm_real.rwlock_trywrlock(l);
    if (r == 0 && !dm_trace_quiet)
        rwlock_acquired(l, DM_TRACE_RW_WRITES, 0, 0);
    return r;
}

/* Only for the reporter's start: a program that locks rwlocks and never
 * a mutex gets its reporter at the first rwlock unlock that leaves the
 * thread holding nothing, as pthread_mutex_unlock starts it. */
DM_EXPORT int pthread_rwlock_unlock(pthread_rwlock_t *l)
{
    if (rw_holding)
        rw_holding--;
    int r = dm_real.rwlock_unlock(l);
    if (start_due && !holding && !rw_holding) {
        start_due = 0;
        start_reporter();
    }
    return r;
}

DM_EXPORT int pthread_rwlock_init(pthread_rwlock_t *l, const pthread_rwlockattr_t *a)
{
    uintptr_t site = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.rwlock_init(l, a);
    if (r == 0 && !dm_trace_quiet)
        obj_init(dm_trace_rwlocks, l, site, 0);
    return r;
}

/* A condition wait releases m and retakes it before returning: the hold
 * ends when the wait starts and the re-acquisition counts as a lock. A
 * wait that fails at once (EINVAL: a bad deadline; EPERM: an error-
 * checking mutex the caller does not hold) neither releases nor retakes
 * m: then nothing changed. */
#define TRACED_WAIT(m, wait_call)                                             \
    do {                                                                      \
        struct dm_trace_slot *s_ = dm_trace_quiet ? NULL : slot_of(m);        \
        uint32_t depth_ = 0;                                                  \
        uint64_t start_ = 0, end_ = 0;                                        \
        if (s_) {                                                             \
            depth_ = LOAD(s_->depth);                                         \
            start_ = LOAD(s_->hold_start);                                    \
            if (depth_) {                                                     \
                end_ = now_ticks();                                           \
                STORE(s_->depth, 0);    /* others may hold it while we wait */ \
            }                                                                 \
        }                                                                     \
        int r_ = wait_call;                                                   \
        if (s_ && (r_ == 0 || r_ == ETIMEDOUT || r_ == EOWNERDEAD)) {         \
            if (depth_) {                                                     \
                hold_ended(s_, since(start_, end_));                          \
                if (holding)                                                  \
                    holding--;                                                \
            }                                                                 \
            acquired(s_, 0, 0);                                               \
            if (depth_ > 1)                                                   \
                STORE(s_->depth, depth_);                                     \
        } else if (s_) {                                                      \
            STORE(s_->hold_start, start_);                                    \
            STORE(s_->depth, depth_);                                         \
        }                                                                     \
        return r_;                                                            \
    } while (0)

/* Shared with cnd_wait and cnd_timedwait (below). */
static int traced_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    struct cond_wait w = cond_wait_begin(c);
    TRACED_WAIT(m, cond_wait_end(&w, dm_real.cond_wait(c, m)));
}

static int traced_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t)
{
    struct cond_wait w = cond_wait_begin(c);
    TRACED_WAIT(m, cond_wait_end(&w, dm_real.cond_timedwait(c, m, t)));
}

DM_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    return traced_wait(c, m);
}

DM_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                     const struct timespec *t)
{
    return traced_timedwait(c, m, t);
}

DM_EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t k,
                                     const struct timespec *t)
{
    struct cond_wait w = cond_wait_begin(c);
    TRACED_WAIT(m, cond_wait_end(&w, dm_real.cond_clockwait(c, m, k, t)));
}

/* ---- C11 <threads.h> ------------------------------------------------------
 * glibc's mtx_* and cnd_* never call the exported pthread functions above,
 * so they are recorded here, as the pthread calls they are (the shim
 * interposes them the same way): a mtx_t is a mutex, a cnd_t a cond, and
 * mtx_init's or cnd_init's caller their init site. */

DM_EXPORT int mtx_lock(mtx_t *m)
{
    return dm_real_thrd(traced_lock((pthread_mutex_t *)m));
}

DM_EXPORT int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict t)
{
    return dm_real_thrd(traced_timedlock((pthread_mutex_t *)m, t));
}

DM_EXPORT int mtx_trylock(mtx_t *m)
{
    return dm_real_thrd(traced_trylock((pthread_mutex_t *)m));
}

DM_EXPORT int mtx_unlock(mtx_t *m)
{
    return dm_real_thrd(traced_unlock((pthread_mutex_t *)m));
}

DM_EXPORT int mtx_init(mtx_t *m, int type)
{
    uintptr_t site = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.mtx_init(m, type);
    if (r == thrd_success && !dm_trace_quiet)
        initialised(m, site, 1);
    return r;
}

DM_EXPORT int cnd_wait(cnd_t *c, mtx_t *m)
{
    return dm_real_thrd(traced_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}

DM_EXPORT int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m,
                            const struct timespec *restrict t)
{
    return dm_real_thrd(traced_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, t));
}

DM_EXPORT int cnd_signal(cnd_t *c)
{
    cond_used((pthread_cond_t *)c, DM_TRACE_COND_SIGNALS);
    return dm_real.cnd_signal(c);
}

DM_EXPORT int cnd_broadcast(cnd_t *c)
{
    cond_used((pthread_cond_t *)c, DM_TRACE_COND_BROADCASTS);
    return dm_real.cnd_broadcast(c);
}

DM_EXPORT int cnd_init(cnd_t *c)
{
    uintptr_t site = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.cnd_init(c);
    if (r == thrd_success && !dm_trace_quiet)
        obj_init(dm_trace_conds, c, site, 1);
    return r;
}

/* ---- when to report ---------------------------------------------------- */

static void on_sigusr1(int sig)
{
    (void)sig;
    int saved = errno;
    sem_post(&wake);        /* EOVERFLOW: a report is due anyway */
    errno = saved;
}

/* Waits for SIGUSR1's post or the interval, and reports. Blocks every
 * signal (dm_thread_start): they are the program's. */
static void *reporter(void *arg)
{
    (void)arg;
    dm_trace_self_quiet(1);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    next.tv_sec += interval_s;
    for (;;) {
        int r = interval_s ? sem_clockwait(&wake, CLOCK_MONOTONIC, &next) : sem_wait(&wake);
        if (r != 0 && errno == EINTR)
            continue;
        if (r != 0 && errno == ETIMEDOUT) {
            dm_trace_report("interval");
            clock_gettime(CLOCK_MONOTONIC, &next);
            next.tv_sec += interval_s;
            continue;
        }
        if (r != 0)
            return NULL;
        while (sem_trywait(&wake) == 0) {
            /* signals sent together: one report */
        }
        dm_trace_report("signal");
    }
}

/* From the first unlock after which a thread holds no traced mutex (the
 * first thread that locks, usually). Once: the exchange decides. */
static void start_reporter(void)
{
    if (atomic_exchange(&reporter_started, 1))
        return;
    int was = dm_trace_self_quiet(1);
    pthread_t t;
    if (dm_thread_start(&t, reporter, NULL) != 0) {
        /* no reporter: SIGUSR1 and -i report nothing; the exit report stays */
    }
    dm_trace_self_quiet(was);
}

/* The child of a fork reports on its own: its counts start from zero
 * (the parent's stay the parent's), its mutexes keep their identities,
 * and it gets its own reporter thread at its first acquisition (the
 * parent's is not there). */
static void atfork_parent(void)
{
    dm_trace_report_release();
}

static void atfork_child(void)
{
    dm_trace_report_child();
    for (unsigned i = 0; i < DM_TRACE_SLOTS; i++) {
        struct dm_trace_slot *s = &dm_trace_table[i];
        /* depth and hold_start stay: the forking thread's holds are held. */
        if (LOAD(s->key))
            dm_trace_slot_zero(s);
    }
    STORE(dm_trace_untracked, 0);
    struct dm_trace_obj *tables[] = { dm_trace_conds, dm_trace_rwlocks };
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
        for (unsigned i = 0; i < DM_TRACE_OBJ_SLOTS; i++) {
            struct dm_trace_obj *s = &tables[t][i];
            if (LOAD(s->key))
                dm_trace_obj_zero(s);
        }
    STORE(dm_trace_untracked_conds, 0);
    STORE(dm_trace_untracked_rwlocks, 0);
    my_bit = 0;
    STORE(thread_seq, 0);
    sem_init(&wake, 0, 0);
    STORE(reporter_started, 0);
}

__attribute__((constructor)) static void dm_trace_start(void)
{
    dm_real_resolve();
    dm_trace_clock_start();
    dm_trace_report_start();
    sem_init(&wake, 0, 0);
    const char *iv = secure_getenv("DMUTEX_TRACE_INTERVAL");
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
    /* The reporter starts at the first unlock that leaves a thread
     * holding nothing; a SIGUSR1 before it waits in the semaphore. This
     * thread was numbered by a library constructor's lock before this
     * one ran, perhaps: its next such unlock starts it. */
    reporting = want_signal || interval_s;
    if (reporting && my_bit)
        start_due = 1;
    if (want_signal) {
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
