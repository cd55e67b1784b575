/* mapped: the two levels of a mapped mutex.
 *
 * A lock *name*'s cluster hold belongs to the process, not to a thread:
 * every thread of the process that holds any mutex mapped to the name
 * shares it (counted in `users`), and local exclusion stays with the real
 * mutexes. The hold is taken by the first user (state FREE -> ACQUIRING ->
 * HELD) and given back by the last (HELD -> RELEASING -> FREE); threads
 * arriving during a transition wait for it. With lock caching the last user
 * may leave it HELD with no user until another process asks for it.
 *
 * Lock order is the real mutex first, then the name. A thread never waits
 * for another thread of its process through the name (only for a round
 * trip that another thread has in flight), so program-level lock orders
 * that work without the shim work with it, even when several mutexes share
 * one name (init_site families): thread A holding X of name N and wanting
 * Y, while thread B holds Y of N and waits on X's condition variable, only
 * ever wait on the real mutexes, as they would without the shim.
 *
 * Other processes must not starve while the threads of this one keep the
 * shared hold busy. When another process wants the lock (a want notice; a
 * grant that says others queue), threads that hold nothing of the name
 * step aside: they give their real mutex back and wait until the hold has
 * gone round, so the users drain and the release hands the lock over.
 * Threads that already hold a mutex of the name still join (they keep the
 * hold anyway). Stepping aside is bounded (DM_YIELD_MAX_MS): a thread that
 * steps aside may hold a lock that a user needs, which the program alone
 * would not have made a deadlock.
 *
 * The shim's own waits (condition variables, sleeps, socket I/O) run with
 * cancellation disabled: pthread_mutex_lock is no cancellation point, and a
 * thread cancelled in the middle of the shim's bookkeeping would leave a
 * name or a connection locked. pthread_cond_wait is one: the real wait
 * stays cancellable, and a cleanup handler takes the name back before the
 * program's handlers run, as POSIX wants the mutex held then.
 *
 * At exit only holds that no thread is inside are released: a thread that
 * is still inside its critical section keeps the hold until the process is
 * gone (the lease then ends it).
 *
 * This file owns the name table and the entries of lock names (a mutex's
 * or an rwlock's: union named_entry), the mutex entry points, a mapped mutex's waits on a
 * condition variable that is not listed, thread end, fork and exit. The
 * process's hold of a name (batches included) is mapped_hold.c's, the
 * rwlock entry points mapped_rw.c's, listed conds mapped_cond.c's; what
 * they use of each other is declared in mapped_impl.h. It does not
 * know a listed cond's name records or channels, and calls neither
 * mapped_rw.c nor mapped_cond.c: the layer's init, fork handler and
 * removal of an entry of any kind are mapped_cond.c's, the top of it. */
#include "mapped.h"
#include "mapped_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "store.h"
#include "real.h"
#include "registry.h"
#include "util.h"
#include "watchdog.h"
#include "who.h"

/* glibc's mutex kind bit for robust mutexes (PTHREAD_MUTEX_ROBUST_NORMAL_NP
 * in nptl's internal headers); __kind is part of the public struct. */
#define DM_GLIBC_KIND_ROBUST 16
#define DM_CONDWAIT_RETRY_MS 100

static pthread_mutex_t names_mu = PTHREAD_MUTEX_INITIALIZER;   /* table, refs, free list */
static struct dm_htab names;

static void name_sync_init(struct dm_name *nm)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&nm->mu, &fresh, sizeof fresh);
    dm_cond_init_monotonic(&nm->cv);
}

static void let_go(void);

void mapped_names_init(const struct dm_config *cfg)
{
    mapped_cfg = cfg;
    dm_store->on_image_end(let_go);
    mapped_hold_init();
}

/* ---- the name table ------------------------------------------------------ */

/* The record of `name`, with one more reference; NULL on ENOMEM. */
static struct dm_name *name_get(const char *name)
{
    size_t h = dm_hash_bytes(name, strlen(name));
    dm_lock(&names_mu);
    struct dm_name *nm = NULL;
    for (struct dm_hnode *x = dm_htab_chain(&names, h); x; x = x->next)
        if (x->hash == h && strcmp(((struct dm_name *)x)->cl->name, name) == 0) {
            nm = (struct dm_name *)x;
            break;
        }
    if (!nm && (nm = calloc(1, sizeof *nm)) != NULL) {
        nm->cl = dm_store->lock_get(name);
        if (!nm->cl || dm_htab_add(&names, &nm->node, h) != 0) {
            dm_store->lock_put(nm->cl);
            free(nm);
            nm = NULL;
        } else {
            name_sync_init(nm);
            nm->hold.lock = nm->cl;
        }
    }
    if (nm)
        nm->refs++;
    dm_unlock(&names_mu);
    return nm;
}

/* Drops a reference; the last one (the name's last mutex destroyed, or its
 * library unloaded) gives back a hold kept by caching and frees the name's
 * record and its store record (with its channels), so per-object names
 * cost nothing once their objects are gone.
 *
 * Everything is decided under names_mu, where name_get revives a record:
 * while a kept hold goes back (a round trip, names_mu let go) the record
 * is pinned by a reference of its own, so that a name_get and name_put of
 * another thread meanwhile cannot free it twice. The unlink happens under
 * names_mu too, so that no new record of the name can install its want
 * handler before this one's is gone (on_want takes nm->mu only, never
 * names_mu). */
static void name_put(struct dm_name *nm)
{
    int idle = 0;
    dm_lock(&names_mu);
    while (--nm->refs == 0) {
        dm_lock(&nm->mu);
        /* Another thread gives the hold back (the store's: a batch's linger
         * ended, a want came): its outcome decides. */
        while (nm->state == NAME_RELEASING)
            dm_cv_wait(&nm->cv, &nm->mu);
        int kept = nm->state == NAME_HELD && nm->users == 0;
        idle = nm->state == NAME_FREE && nm->users == 0;
        if (kept)
            nm->state = NAME_RELEASING;
        dm_unlock(&nm->mu);
        if (!kept)
            break;
        nm->refs++;                     /* the pin, dropped by the loop */
        dm_unlock(&names_mu);
        in_shim++;
        hold_release(nm);
        in_shim--;
        dm_lock(&names_mu);
    }
    if (nm->refs == 0 && idle) {
        dm_htab_del(&names, &nm->node);
        dm_store->want_unwatch(nm->cl);        /* waits for a call in progress */
        dm_store->timer_cancel(&nm->linger);    /* likewise */
        dm_watchdog_forget(&nm->hold);  /* a renewal round may still read it */
        dm_store->lock_put(nm->cl);
        dm_mutex_destroy(&nm->mu);
        dm_cv_destroy(&nm->cv);
        free(nm);
    }
    dm_unlock(&names_mu);
}

/* The entry of a lock name, a mutex's or an rwlock's: both start with
 * kind, addr and nm (a common initial sequence), and freed ones of either
 * kind are recycled through one list (names_mu), linked by m.next_free. */
union named_entry {
    struct dm_entry m;
    struct dm_rw_entry rw;
};
static union named_entry *free_named;

/* Maps `addr` (kind DM_ENTRY_MUTEX or DM_ENTRY_RWLOCK) under lock name
 * `name`. A name is a mutex's or an rwlock's: the other kind is EEXIST. */
static int named_add(const void *addr, const char *name, int flags, int kind)
{
    union named_entry *old = dm_registry_lookup(addr);
    if (old)
        return old->m.kind == kind && strcmp(old->m.nm->cl->name, name) == 0 ? 0 : EEXIST;
    struct dm_name *nm = name_get(name);
    if (!nm)
        return ENOMEM;
    int rw = kind == DM_ENTRY_RWLOCK;
    dm_lock(&names_mu);
    if (nm->rw != rw && (nm->rw || nm->refs > 1)) {
        dm_unlock(&names_mu);
        name_put(nm);
        return EEXIST;          /* the other kind's name */
    }
    int proto = DM_MAP_PROTOCOL_OF(flags);
    if (nm->cl->protocol != proto && (nm->refs > 1 || rw)) {
        dm_unlock(&names_mu);
        name_put(nm);
        return EEXIST;          /* the name's lock is the other protocol's */
    }
    if (nm->cl->protocol != proto) {
        int pr = dm_store->lock_protocol(nm->cl, proto);
        if (pr != 0) {
            dm_unlock(&names_mu);
            name_put(nm);
            return pr;
        }
    }
    if (rw && !nm->rw) {
        nm->rw = 1;
        dm_store->lock_rwlock(nm->cl);
    } else if (!rw) {
        nm->fair |= (flags & DM_MAP_FAIR) != 0;
        nm->cache |= (flags & DM_MAP_CACHE) != 0;
        /* Several mutexes share the name: its holder listens for other
         * processes' wants, so that threads keeping the shared hold busy
         * let them in. */
        dm_store->lock_mode(nm->cl, nm->fair, nm->cache, nm->refs > 1);
    }
    union named_entry *e = free_named;
    if (e)
        free_named = (union named_entry *)e->m.next_free;
    dm_unlock(&names_mu);
    if (!e && !(e = malloc(sizeof *e))) {
        name_put(nm);
        return ENOMEM;
    }
    memset(e, 0, sizeof *e);
    e->m.kind = kind;
    e->m.addr = addr;
    e->m.nm = nm;
    if (rw)
        e->rw.heap = (flags & DM_MAP_HEAP) != 0;
    else
        e->m.heap = (flags & DM_MAP_HEAP) != 0;
    int rc = dm_registry_add(addr, e);
    if (rc != 0) {
        free(e);
        name_put(nm);
    }
    return rc;
}

int dm_mapped_add(const void *addr, const char *name, int flags)
{
    return named_add(addr, name, flags, DM_ENTRY_MUTEX);
}

int dm_mapped_add_rwlock(const void *addr, const char *name, int flags)
{
    return named_add(addr, name, flags & DM_MAP_HEAP, DM_ENTRY_RWLOCK);
}

void mapped_named_remove(void *entry)
{
    union named_entry *e = entry;
    struct dm_name *nm = e->m.nm;
    /* A reader that looked it up just now may still read it: recycle the
     * memory for another entry rather than give it back to malloc. */
    dm_lock(&names_mu);
    e->m.next_free = (struct dm_entry *)free_named;
    free_named = e;
    dm_unlock(&names_mu);
    name_put(nm);
}

/* ---- the entry points ------------------------------------------------------ */

static int real_lock_mode(pthread_mutex_t *m, enum dm_lock_mode mode, clockid_t clk,
                          const struct timespec *abstime)
{
    switch (mode) {
    case DM_TRYLOCK:
        return dm_real.mutex_trylock(m);
    case DM_TIMEDLOCK:
        return clk == CLOCK_REALTIME ? dm_real.mutex_timedlock(m, abstime)
                                     : dm_real.mutex_clocklock(m, clk, abstime);
    default:
        return dm_real.mutex_lock(m);
    }
}

int mapped_is_robust(const pthread_mutex_t *m)
{
    return (m->__data.__kind & DM_GLIBC_KIND_ROBUST) != 0;
}

/* Does glibc let a thread that does not own `m` unlock it? Only for the
 * normal kinds (PTHREAD_MUTEX_TIMED_NP, ADAPTIVE_NP) without the robust,
 * priority-inheritance or priority-protect bits (nptl's pthreadP.h). */
#define DM_GLIBC_KIND_TYPE_MASK 3
#define DM_GLIBC_KIND_ERRCHECK  2
#define DM_GLIBC_KIND_RECURSIVE 1
#define DM_GLIBC_KIND_PI        32
#define DM_GLIBC_KIND_PP        64

int mapped_foreign_unlock_ok(const pthread_mutex_t *m)
{
    int kind = m->__data.__kind;
    int type = kind & DM_GLIBC_KIND_TYPE_MASK;
    return type != DM_GLIBC_KIND_ERRCHECK && type != DM_GLIBC_KIND_RECURSIVE &&
           !(kind & (DM_GLIBC_KIND_ROBUST | DM_GLIBC_KIND_PI | DM_GLIBC_KIND_PP));
}

/* The clocks glibc's clocklock and clockwait accept. */
static int clock_ok(clockid_t clk)
{
    return clk == CLOCK_REALTIME || clk == CLOCK_MONOTONIC;
}

/* The prologue of a timed lock or wait: *dlp is `dl`, abstime as a
 * CLOCK_MONOTONIC deadline, or NULL (not `timed`, or a deadline too far
 * ahead to compute with). EINVAL for a clock glibc refuses or a bad
 * abstime, as glibc answers. */
int mapped_deadline_of(int timed, clockid_t clk, const struct timespec *abstime,
                       struct timespec *dl, struct timespec **dlp)
{
    int none;
    *dlp = NULL;
    if (!timed)
        return 0;
    if (!clock_ok(clk) || mapped_to_monotonic(clk, abstime, dl, &none) != 0)
        return EINVAL;
    if (!none)
        *dlp = dl;
    return 0;
}

/* A thread that ends (pthread_exit, a return from its start routine, a
 * cancel) holding mapped mutexes: a key's destructor, set for every
 * thread that locked one, looks at what it still holds.
 *
 * A robust mutex: glibc gives the next locker EOWNERDEAD. Here its share
 * of the name's hold would stay counted (the process would keep the
 * cluster lock for ever). So its share goes back to the process and, if
 * it was the last user, the cluster hold to its lease, unreleased, so
 * that the next locker anywhere gets EOWNERDEAD once the lease has run
 * out, as after a process that died.
 *
 * Any other mutex stays locked, as glibc leaves it, and the process keeps
 * the hold; its holder becomes DM_HOLDER_ENDED, so that the exit tells it
 * from a thread still inside and releases a hold nobody is inside any
 * more (dm_mapped_release_all). An unlock by another thread (a normal
 * mutex) ends it as it ends a live holder's. An rwlock's shares, which
 * only their own thread gives back, are counted into the name's
 * `exiting` at once. */
#define DM_HOLDER_ENDED ULONG_MAX       /* no thread seq: they count up from 1 */

static pthread_key_t end_key;
static pthread_once_t end_once = PTHREAD_ONCE_INIT;
static __thread int tl_watched;         /* end_key is set for this thread */

static void drop_dead_hold(struct dm_entry *e)
{
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    e->depth = 0;
    struct dm_name *nm = e->nm;
    dm_lock(&nm->mu);
    if (nm->state == NAME_HELD && nm->users > 0 && --nm->users == 0) {
        if (nm->held)
            dm_watchdog_remove(&nm->hold);
        dm_stats_set(&dm_store_counts(nm->cl)->held, 0);
        nm->held = 0;
        nm->want = 0;
        nm->state = NAME_FREE;
        dm_cv_broadcast(&nm->cv);
    }
    dm_unlock(&nm->mu);
}

static void holder_ends(const void *addr, void *value, void *arg)
{
    struct dm_entry *e = value;
    unsigned long me = *(const unsigned long *)arg;
    if (e->kind != DM_ENTRY_MUTEX || __atomic_load_n(&e->holder, __ATOMIC_RELAXED) != me)
        return;
    if (mapped_is_robust(addr)) {
        drop_dead_hold(e);
        return;
    }
    /* Not if another thread's unlock took it meanwhile. */
    __atomic_compare_exchange_n(&e->holder, &me, DM_HOLDER_ENDED, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
}

static void thread_end(void *arg)
{
    (void)arg;
    tl_watched = 0;             /* a later destructor's lock sets the key again */
    if (!tl_holds_any())
        return;
    unsigned long me = mapped_self_seq();
    in_shim++;
    for (int i = 0; i < DM_TL_NAMES; i++) {
        struct dm_name *nm = tl_names[i].nm;
        if (tl_names[i].n > 0 && nm->rw) {
            dm_lock(&nm->mu);
            nm->exiting += tl_names[i].n;
            dm_unlock(&nm->mu);
            tl_names[i].n = 0;  /* counted: not again by this thread's exit */
        }
    }
    dm_registry_foreach(holder_ends, &me);
    in_shim--;
}

static void end_key_create(void)
{
    if (pthread_key_create(&end_key, thread_end) != 0)
        dm_error("no thread-exit hook: a thread that ends holding a robust mapped mutex "
                 "leaves it locked, and the exit keeps a hold whose threads all ended "
                 "until its lease ends it");
}

void mapped_watch_thread_end(void)
{
    if (__builtin_expect(tl_watched, 1))
        return;
    tl_watched = 1;
    pthread_once(&end_once, end_key_create);
    pthread_setspecific(end_key, (void *)1);
}

/* Real mutex, then the name; a thread asked to step aside gives the real
 * mutex back and starts over once the hold has gone round. `r` is the
 * result of the real lock the caller already took (0 or EOWNERDEAD).
 * Returns the real lock's result (0 or EOWNERDEAD) or an error, holding
 * nothing. */
static int lock_both(struct dm_entry *e, pthread_mutex_t *m, enum dm_lock_mode mode,
                     clockid_t clk, const struct timespec *abstime,
                     const struct timespec *deadline, unsigned long me, int *dead, int r)
{
    for (int again = 0;; again = 1) {
        if (again)
            r = real_lock_mode(m, mode, clk, abstime);
        if (r != 0 && r != EOWNERDEAD)
            return r;
        if (e->robust_state == DM_ROBUST_NOTRECOVERABLE) {
            /* The holder unlocked it inconsistent while this thread
             * queued: glibc gives its waiters ENOTRECOVERABLE too. */
            dm_real.mutex_unlock(m);
            return ENOTRECOVERABLE;
        }
        int j = name_join(e->nm, me, mode, deadline, dead, r == EOWNERDEAD);
        if (j == 0)
            return r;
        if (r == EOWNERDEAD) {
            /* Giving an EOWNERDEAD mutex back unrepaired would make it
             * unrecoverable: repair it, and tell its next locker. */
            dm_real.mutex_consistent(m);
            e->dead_pending = 1;
        }
        dm_real.mutex_unlock(m);
        if (j != DM_YIELD)
            return j;
        if ((j = name_wait_turn(e->nm, deadline)) != 0)
            return j;
    }
}

int dm_mapped_lock(struct dm_entry *e, pthread_mutex_t *m, enum dm_lock_mode mode,
                   clockid_t clk, const struct timespec *abstime)
{
    if (in_shim)
        return real_lock_mode(m, mode, clk, abstime);
    unsigned long me = mapped_self_seq();
    if (__atomic_load_n(&e->holder, __ATOMIC_RELAXED) == me) {
        int r = real_lock_mode(m, mode, clk, abstime);
        if (r == 0)
            e->depth++;
        return r;
    }
    if (mode == DM_TIMEDLOCK && !clock_ok(clk))
        return EINVAL;          /* before ENOTRECOVERABLE, as glibc */
    if (e->robust_state == DM_ROBUST_NOTRECOVERABLE)
        return ENOTRECOVERABLE;
    struct timespec dl, *dlp;
    int dr = mapped_deadline_of(mode == DM_TIMEDLOCK, clk, abstime, &dl, &dlp);
    if (dr != 0)
        return dr;
    in_shim++;
    /* Neither the real lock nor a join of a hold the process has is a
     * cancellation point; the rest (waits, round trips) runs with
     * cancellation off. A trylock first tells a mutex another thread
     * holds (contended) at the price of the lock's own first step. The
     * wait's clock starts only when there is something to wait for (the
     * mutex is busy, or the name needs a round trip): a lock call that
     * waits for nothing reads the clock once, and counts as a wait of 0. */
    int dead = 0;
    uint64_t t0 = 0;
    tl_contended = 0;
    int r = dm_real.mutex_trylock(m);
    if (r == EBUSY && mode != DM_TRYLOCK) {
        tl_contended = 1;
        t0 = (uint64_t)dm_now_ns();
        r = real_lock_mode(m, mode, clk, abstime);
    }
    if (r != 0 && r != EOWNERDEAD) {
        in_shim--;
        return r;
    }
    if (r != 0 || e->robust_state == DM_ROBUST_NOTRECOVERABLE || !name_join_fast(e->nm)) {
        if (t0 == 0)
            t0 = (uint64_t)dm_now_ns();
        if (mapped_is_robust(m) && !__atomic_load_n(&e->nm->robust, __ATOMIC_RELAXED))
            __atomic_store_n(&e->nm->robust, 1, __ATOMIC_RELAXED);     /* no batches */
        int cs;
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
        r = lock_both(e, m, mode, clk, abstime, dlp, me, &dead, r);
        pthread_setcancelstate(cs, NULL);
    }
    in_shim--;
    if (r != 0 && r != EOWNERDEAD)
        return r;
    __atomic_store_n(&e->holder, me, __ATOMIC_RELAXED);
    e->depth = 1;
    uint64_t t1 = (uint64_t)dm_now_ns();
    struct dm_stats *st = dm_store_counts(e->nm->cl);
    if (tl_contended)
        dm_stats_add(&st->contended, 1);
    dm_stats_observe(&st->wait, t0 ? t1 - t0 : 0);     /* its count is the lock calls */
    __atomic_store_n(&e->since_ns, t1, __ATOMIC_RELAXED);
    mapped_watch_thread_end();
    if (r == 0 && (dead || e->dead_pending) && mapped_is_robust(m)) {
        e->dead_pending = 0;
        e->robust_state = DM_ROBUST_INCONSISTENT;
        return EOWNERDEAD;
    }
    return r;
}

/* The end of a hold of e (outermost unlock, or a condition wait): its
 * time into the name's hold histogram. */
void hold_observe(struct dm_entry *e)
{
    dm_stats_observe(&dm_store_counts(e->nm->cl)->hold,
                     (uint64_t)dm_now_ns() - __atomic_load_n(&e->since_ns, __ATOMIC_RELAXED));
}

/* Ends the calling thread's share of the name (name_leave turns
 * cancellation off for its round trip). */
int mapped_leave_quietly(struct dm_name *nm)
{
    in_shim++;
    int r = name_leave(nm);
    in_shim--;
    return r;
}

int dm_mapped_unlock(struct dm_entry *e, pthread_mutex_t *m)
{
    if (in_shim)
        return dm_real.mutex_unlock(m);
    unsigned long me = mapped_self_seq();
    unsigned long h = __atomic_load_n(&e->holder, __ATOMIC_RELAXED);
    if (h == 0)
        return dm_real.mutex_unlock(m);     /* not held through the shim: glibc's answer */
    if (h == me && e->depth > 1) {
        int r = dm_real.mutex_unlock(m);
        if (r == 0)
            e->depth--;
        return r;
    }
    if (h != me) {
        /* glibc refuses this for error-checking, recursive, robust and
         * priority mutexes (EPERM) and allows it for normal ones: then the
         * unlocking thread ends the holder's share on its behalf, before
         * the real unlock, as the holder would (once the real mutex is
         * free, a third thread may lock it and become the holder). */
        if (!mapped_foreign_unlock_ok(m))
            return dm_real.mutex_unlock(m);
        hold_observe(e);
        __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
        e->depth = 0;
        int lost = mapped_leave_quietly(e->nm);
        int r = dm_real.mutex_unlock(m);
        return r ? r : lost;
    }
    if (e->robust_state == DM_ROBUST_INCONSISTENT)
        e->robust_state = DM_ROBUST_NOTRECOVERABLE;
    hold_observe(e);
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    e->depth = 0;
    int lost = mapped_leave_quietly(e->nm);
    int r = dm_real.mutex_unlock(m);
    return r ? r : lost;
}

int dm_mapped_consistent(struct dm_entry *e, pthread_mutex_t *m)
{
    if (e->robust_state == DM_ROBUST_INCONSISTENT &&
        __atomic_load_n(&e->holder, __ATOMIC_RELAXED) == mapped_self_seq()) {
        e->robust_state = DM_ROBUST_OK;
        return 0;
    }
    return dm_real.mutex_consistent(m);
}

int dm_mapped_destroy(struct dm_entry *e, pthread_mutex_t *m)
{
    if (__atomic_load_n(&e->holder, __ATOMIC_RELAXED) != 0)
        return EBUSY;
    int r = dm_real.mutex_destroy(m);
    if (r == 0) {
        e->robust_state = DM_ROBUST_OK;
        e->dead_pending = 0;
        void *x;
        if (e->heap && (x = dm_registry_remove(m)) != NULL)
            mapped_named_remove(x);     /* a mutex's entry: dm_mapped_remove's other half */
    }
    return r;
}

void dm_mapped_reinit(struct dm_entry *e)
{
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    e->depth = 0;
    e->robust_state = DM_ROBUST_OK;
    e->dead_pending = 0;
}

int dm_mapped_init_mutex(struct dm_entry *e, pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    dm_mapped_reinit(e);
    return dm_real.mutex_init(m, a);
}

/* ---- condition variables ------------------------------------------------- */

/* Back into the name with the real mutex held (after the real wait, or in
 * the cancellation cleanup, where glibc has re-taken the mutex). A condition
 * wait has no way to return without its mutex: failures (on_redis_down =
 * "error") are retried. Cancellation is off and in_shim set by the caller. */
void cond_rejoin(struct cond_wait *w)
{
    for (;;) {
        int j = name_join(w->e->nm, w->me, DM_LOCK, NULL, &w->dead, w->real_dead);
        if (j == 0)
            break;
        if (j == DM_YIELD) {
            dm_real.mutex_unlock(w->m);
            name_wait_turn(w->e->nm, NULL);
            if (dm_real.mutex_lock(w->m) == EOWNERDEAD)
                w->real_dead = 1;
            continue;
        }
        dm_sleep_ms(DM_CONDWAIT_RETRY_MS);
    }
    __atomic_store_n(&w->e->holder, w->me, __ATOMIC_RELAXED);
    w->e->depth = w->depth;
    __atomic_store_n(&w->e->since_ns, (uint64_t)dm_now_ns(), __ATOMIC_RELAXED);
}

static int unlisted_logged;             /* the info line of a mapped mutex's unlisted cond */

static void cond_cancelled(void *arg)
{
    int cs;
    shim_enter(&cs);
    cond_rejoin(arg);
    shim_leave(cs);
}

int dm_mapped_cond_wait(struct dm_entry *e, pthread_cond_t *c, pthread_mutex_t *m,
                        int timed, clockid_t clk, const struct timespec *abstime)
{
    unsigned long me = mapped_self_seq();
    if (in_shim || __atomic_load_n(&e->holder, __ATOMIC_RELAXED) != me) {
        if (!timed)
            return dm_real.cond_wait(c, m);
        return clk == CLOCK_REALTIME ? dm_real.cond_timedwait(c, m, abstime)
                                     : dm_real.cond_clockwait(c, m, clk, abstime);
    }
    /* glibc's own checks, before anything is let go. */
    if (timed && (!clock_ok(clk) || abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000L))
        return EINVAL;
    if (!__atomic_exchange_n(&unlisted_logged, 1, __ATOMIC_RELAXED))
        dm_info("lock %s: condition variable %p is not in conds: its signals wake this "
                "process's waiters only (list it in conds for cluster-wide wake-ups)",
                e->nm->cl->name, (void *)c);
    struct cond_wait w = { e, m, me, e->depth, 0, 0 };
    hold_observe(e);
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    e->depth = 0;
    /* A hold lost meanwhile was reported; cond_wait has no EPERM. */
    mapped_leave_quietly(e->nm);

    int r;
    pthread_cleanup_push(cond_cancelled, &w);
    if (!timed)
        r = dm_real.cond_wait(c, m);
    else if (clk == CLOCK_REALTIME)
        r = dm_real.cond_timedwait(c, m, abstime);
    else
        r = dm_real.cond_clockwait(c, m, clk, abstime);
    pthread_cleanup_pop(0);

    /* glibc's re-lock: ENOTRECOVERABLE leaves the mutex not held, so
     * nothing is joined; one the shim made unrecoverable meanwhile is
     * given back with the same answer (lock_both's). */
    if (r == ENOTRECOVERABLE)
        return r;
    if (r != EOWNERDEAD && e->robust_state == DM_ROBUST_NOTRECOVERABLE) {
        dm_real.mutex_unlock(m);
        return ENOTRECOVERABLE;
    }
    int cs;
    shim_enter(&cs);
    w.real_dead = r == EOWNERDEAD;
    cond_rejoin(&w);
    shim_leave(cs);
    if (w.real_dead)
        return EOWNERDEAD;
    if ((w.dead || e->dead_pending) && mapped_is_robust(m)) {
        e->dead_pending = 0;
        e->robust_state = DM_ROBUST_INCONSISTENT;
        return EOWNERDEAD;
    }
    return r;
}

uint64_t dm_mapped_token(struct dm_entry *e)
{
    struct dm_name *nm = e->nm;
    if (__atomic_load_n(&e->holder, __ATOMIC_RELAXED) != mapped_self_seq())
        return 0;
    dm_lock(&nm->mu);
    uint64_t t = nm->state == NAME_HELD && nm->held ? nm->hold.token : 0;
    dm_unlock(&nm->mu);
    return t;
}

/* ---- fork and exit ---------------------------------------------------------- */

static void entry_forget(const void *addr, void *value, void *arg)
{
    (void)addr;
    (void)arg;
    struct dm_entry *e = value;
    if (e->kind == DM_ENTRY_RWLOCK) {
        ((struct dm_rw_entry *)value)->writer = 0;
        ((struct dm_rw_entry *)value)->readers = 0;
    }
    if (e->kind != DM_ENTRY_MUTEX)
        return;
    e->holder = 0;
    e->depth = 0;
}

/* Fork: startup's prepare handler holds names_mu across fork() (see the lock
 * order in startup.c); the parent lets go, the child makes it anew. */
void mapped_names_fork_mutex(enum dm_fork_phase phase)
{
    dm_fork_mutex(&names_mu, phase);
}

void mapped_names_fork_child(void)
{
    /* The parent's holds are the parent's: the child holds nothing (no
     * batch, no grace after a handover of its own), and a name's mutex
     * may have been held by a thread that is not here. */
    for (size_t i = 0; i < names.n; i++)
        for (struct dm_name *nm = (struct dm_name *)names.b[i]; nm;
             nm = (struct dm_name *)nm->node.next) {
            name_sync_init(nm);
            nm->state = NAME_FREE;
            nm->users = 0;
            nm->held = 0;
            nm->want = 0;
            nm->want_subscribed = 0;
            nm->yield_logged = 0;
            nm->wwait = 0;
            nm->exiting = 0;        /* shares of the parent's threads that ended */
            nm->batch_end_ns = 0;
            nm->handed_ns = 0;      /* the parent's handover: the child's lock calls
                                       owe nobody a grace */
        }
    memset(tl_names, 0, sizeof tl_names);
    tl_overflow = 0;
    dm_registry_foreach(entry_forget, NULL);
}

/* Is e held by the exiting thread `me`, or by a thread that ended? Nobody
 * is inside it any more. */
static int held_by_nobody_inside(const struct dm_entry *e, unsigned long me)
{
    unsigned long h = __atomic_load_n(&e->holder, __ATOMIC_RELAXED);
    return h == me || h == DM_HOLDER_ENDED;
}

/* Counts, per name, the mutexes nobody is inside any more: the exiting
 * thread's, and those of threads that ended holding them. */
static void count_exiting(const void *addr, void *value, void *arg)
{
    (void)addr;
    struct dm_entry *e = value;
    if (e->kind != DM_ENTRY_MUTEX || !held_by_nobody_inside(e, *(const unsigned long *)arg))
        return;
    dm_lock(&e->nm->mu);
    e->nm->exiting++;
    dm_unlock(&e->nm->mu);
}

/* The mutexes of a name exit released (the exiting thread's, and those
 * of threads that ended): their shares are gone, so a later unlock (a
 * library destructor that runs after the shim's) goes straight to glibc
 * instead of ending another thread's new hold. */
static void forget_exiting(const void *addr, void *value, void *arg)
{
    (void)addr;
    struct dm_entry *e = value;
    if (e->kind == DM_ENTRY_RWLOCK) {
        struct dm_rw_entry *re = value;
        if (__atomic_load_n(&re->writer, __ATOMIC_RELAXED) == *(const unsigned long *)arg &&
            __atomic_load_n(&re->nm->exit_released, __ATOMIC_RELAXED))
            __atomic_store_n(&re->writer, 0, __ATOMIC_RELAXED);
        return;
    }
    if (e->kind != DM_ENTRY_MUTEX || !held_by_nobody_inside(e, *(const unsigned long *)arg) ||
        !__atomic_load_n(&e->nm->exit_released, __ATOMIC_RELAXED))
        return;
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    e->depth = 0;
}

/* The store's thread, when the image ends (exec, _exit): gives back the holds
 * nobody is inside, kept by lock caching or lingering in a batch, which
 * would otherwise keep the lock for the rest of their lease once the
 * process's watchdog is gone. Holds a thread is inside stay (a failed
 * exec goes on; an _exit's other threads may still be writing). */
static void let_go(void)
{
    in_shim++;
    struct dm_name **idle = NULL;
    size_t n = 0;
    dm_lock(&names_mu);
    idle = calloc(names.count ? names.count : 1, sizeof *idle);
    for (size_t i = 0; idle && i < names.n; i++)
        for (struct dm_name *nm = (struct dm_name *)names.b[i]; nm;
             nm = (struct dm_name *)nm->node.next) {
            dm_lock(&nm->mu);
            if (nm->state == NAME_HELD && nm->held && nm->users == 0) {
                nm->refs++;             /* the pin, dropped by name_put below */
                idle[n++] = nm;
            }
            dm_unlock(&nm->mu);
        }
    dm_unlock(&names_mu);
    for (size_t i = 0; i < n; i++) {
        struct dm_name *nm = idle[i];
        dm_lock(&nm->mu);
        int release = nm->state == NAME_HELD && nm->held && nm->users == 0;
        if (release)
            nm->state = NAME_RELEASING;
        dm_unlock(&nm->mu);
        if (release)
            hold_release(nm);
        name_put(nm);
    }
    free(idle);
    in_shim--;
}

void dm_mapped_image_ends(void)
{
    dm_store->image_ends(2 * mapped_cfg->redis.command_timeout_ms);
}

/* Process exit: give back the holds that no thread is inside any more:
 * those kept by lock caching, those of the thread that is running exit()
 * itself (it runs no more critical sections), and those of threads that
 * ended holding their mutexes (DM_HOLDER_ENDED: they run none either). A
 * hold with another thread still inside stays: that thread may go on
 * writing until the process is really gone, and releasing it would let
 * another machine in beside it. Its lease ends it once the process (and
 * its watchdog) is gone. */
void dm_mapped_release_all(void)
{
    in_shim++;
    unsigned long me = mapped_self_seq();
    dm_registry_foreach(count_exiting, &me);
    /* An rwlock's shares (readers are many threads) are the thread's own
     * notes of the names it holds. */
    for (int i = 0; i < DM_TL_NAMES; i++) {
        struct dm_name *nm = tl_names[i].nm;
        if (tl_names[i].n > 0 && nm->rw) {
            dm_lock(&nm->mu);
            nm->exiting += tl_names[i].n;
            dm_unlock(&nm->mu);
        }
    }
    /* Pin the holds to give back (a reference each) and release them
     * outside names_mu: a release is a round trip. */
    struct dm_name **gone = NULL;
    size_t ngone = 0;
    dm_lock(&names_mu);
    mapped_torn_down = 1;
    gone = calloc(names.count ? names.count : 1, sizeof *gone);
    for (size_t i = 0; gone && i < names.n; i++)
        for (struct dm_name *nm = (struct dm_name *)names.b[i]; nm;
             nm = (struct dm_name *)nm->node.next) {
            dm_lock(&nm->mu);
            if (nm->state == NAME_HELD && nm->held && nm->users <= nm->exiting) {
                nm->refs++;
                gone[ngone++] = nm;     /* its `exiting` is read again below */
            } else {
                if (nm->state == NAME_HELD && nm->users > nm->exiting)
                    dm_info("exit: lock %s stays held until this process is gone: %lu "
                            "thread(s) still inside", nm->cl->name, nm->users - nm->exiting);
                nm->exiting = 0;
            }
            dm_unlock(&nm->mu);
        }
    dm_unlock(&names_mu);
    if (!gone)
        dm_warn("out of memory at exit: held locks end with their lease");
    for (size_t i = 0; i < ngone; i++) {
        struct dm_name *nm = gone[i];
        dm_lock(&nm->mu);
        /* Again: a thread may have joined a kept hold meanwhile (no round
         * trip needed), and is inside now. */
        int release = nm->state == NAME_HELD && nm->held && nm->users <= nm->exiting;
        nm->exiting = 0;
        if (release) {
            nm->state = NAME_RELEASING;
            nm->users = 0;      /* the holds nobody is inside end here */
            __atomic_store_n(&nm->exit_released, 1, __ATOMIC_RELAXED);
            dm_unlock(&nm->mu);
            hold_release(nm);
        } else {
            dm_unlock(&nm->mu);
        }
    }
    dm_registry_foreach(forget_exiting, &me);
    for (int i = 0; i < DM_TL_NAMES; i++)       /* its rwlock shares ended too */
        if (tl_names[i].n > 0 && tl_names[i].nm->rw &&
            __atomic_load_n(&tl_names[i].nm->exit_released, __ATOMIC_RELAXED))
            tl_names[i].n = 0;
    for (size_t i = 0; i < ngone; i++)
        name_put(gone[i]);
    free(gone);
    /* The process's record goes first: it says what is held. */
    dm_who_exit();
    /* Every release written without waiting (these, and the unlocks
     * before): their replies read, a failed one sent again, before the
     * process ends. */
    dm_store->flush();
    in_shim--;
}
