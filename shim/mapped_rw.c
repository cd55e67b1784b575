/* mapped_rw: cluster-wide read-write locks (rwlocks), the part of mapped
 * (mapped.h) that the pthread_rwlock_* entry points reach.
 *
 * An rwlock's name is a struct dm_name like a mutex's (the same hold, the
 * same watchdog, want, lost-lease, fork and exit handling), with a mode:
 * the process holds the name for reading (shared by every local reader:
 * `users` counts their rdlocks, the first takes the cluster read hold,
 * the last gives it back) or for writing. The real rwlock comes first, so
 * its kind (reader or writer preference) and glibc's recursion and
 * EDEADLK rules hold locally; the name only adds the other processes.
 *
 * A waiting writer anywhere keeps new readers out: its acquire.lua
 * refusals are want notices, and a process whose readers keep the read
 * hold busy lets no new reader join once it heard one (a thread that
 * already holds a share of the name, a recursive rdlock, still joins:
 * anything else would deadlock it). Unlike a mutex's step-aside, this has
 * no time bound: a writer must not starve under a stream of readers. A
 * local writer of another rwlock of the same name (init_site families)
 * waits for the process's read hold to drain (new local readers wait with
 * it); one that itself holds a read share of the name gets EDEADLK.
 *
 * This file owns an rwlock entry's lock, unlock, token, init and destroy,
 * and the join of a name's hold for reading or writing (rw_join). The name
 * table and the entries (mapped.c maps an rwlock as it maps a mutex), the
 * hold's acquire and release, the grace after a handover, thread end, fork
 * and exit are mapped.c's, used through mapped_impl.h. It does not know
 * mutexes' entries (recursion, robust owners, batches) nor listed conds. */
#include "mapped.h"
#include "mapped_impl.h"

#include <errno.h>

#include "store.h"
#include "real.h"
#include "util.h"

/* nm->mu held: waits for a change of the name, to the deadline. */
static int rw_wait(struct dm_name *nm, const struct timespec *deadline)
{
    tl_contended = 1;
    if (!deadline) {
        dm_cv_wait(&nm->cv, &nm->mu);
        return 0;
    }
    if (dm_cv_timedwait(&nm->cv, &nm->mu, deadline) == ETIMEDOUT && dm_ts_passed(deadline))
        return ETIMEDOUT;
    return 0;
}

/* Joins the process's hold of an rwlock's name, for reading or writing,
 * for a thread that holds the real rwlock so. Returns 0, EBUSY (trylock),
 * ETIMEDOUT, EAGAIN (on_redis_down = "error") or EDEADLK. */
static int rw_join(struct dm_name *nm, unsigned long me, int write, enum dm_lock_mode mode,
                   const struct timespec *deadline)
{
    int r = 0;
    dm_lock(&nm->mu);
    for (;;) {
        if (nm->state == NAME_HELD) {
            int lost = hold_lost_locked(nm);
            if (nm->users == 0) {
                /* Asked for (on_want) or lost with nobody inside: go round. */
                nm->state = NAME_RELEASING;
                dm_unlock(&nm->mu);
                hold_release(nm);
                dm_lock(&nm->mu);
                continue;
            }
            int mine = tl_holds(nm);
            if (write && !nm->write) {
                /* The process reads: wait for its readers to drain. */
                if (mine) {
                    r = EDEADLK;
                    break;
                }
                if (mode == DM_TRYLOCK) {
                    r = EBUSY;
                    break;
                }
                nm->wwait++;
                r = rw_wait(nm, deadline);
                nm->wwait--;
                if (r != 0)
                    break;
                continue;
            }
            if (mine || !(nm->want || lost || (!nm->write && nm->wwait))) {
                nm->users++;
                dm_unlock(&nm->mu);
                tl_note(nm, 1);
                return 0;
            }
            if (lost && !nm->want) {
                nm->want = 1;           /* drain the users, then take it anew */
                nm->want_ms = dm_now_ms();
            }
            if (mode == DM_TRYLOCK) {
                r = EBUSY;
                break;
            }
            if ((r = rw_wait(nm, deadline)) != 0)
                break;
            continue;
        }
        if (nm->state == NAME_FREE) {
            if (grace_wait_locked(nm, mode, deadline))
                continue;
            int dead;
            nm->write = write;
            return name_take(nm, me, mode, deadline, &dead);
        }
        /* Another thread has a round trip in flight for the name. */
        if (mode == DM_TRYLOCK) {
            r = EBUSY;
            break;
        }
        if ((r = rw_wait(nm, deadline)) != 0)
            break;
    }
    dm_unlock(&nm->mu);
    return r;
}

static int real_rw_lock(pthread_rwlock_t *l, int write, enum dm_lock_mode mode, clockid_t clk,
                        const struct timespec *abstime)
{
    switch (mode) {
    case DM_TRYLOCK:
        return write ? dm_real.rwlock_trywrlock(l) : dm_real.rwlock_tryrdlock(l);
    case DM_TIMEDLOCK:
        if (clk == CLOCK_REALTIME)
            return write ? dm_real.rwlock_timedwrlock(l, abstime) : dm_real.rwlock_timedrdlock(l, abstime);
        return write ? dm_real.rwlock_clockwrlock(l, clk, abstime)
                     : dm_real.rwlock_clockrdlock(l, clk, abstime);
    default:
        return write ? dm_real.rwlock_wrlock(l) : dm_real.rwlock_rdlock(l);
    }
}

int dm_mapped_rwlock(struct dm_rw_entry *e, pthread_rwlock_t *l, int write,
                     enum dm_lock_mode mode, clockid_t clk, const struct timespec *abstime)
{
    if (in_shim)
        return real_rw_lock(l, write, mode, clk, abstime);
    struct timespec dl, *dlp;
    int dr = mapped_deadline_of(mode == DM_TIMEDLOCK, clk, abstime, &dl, &dlp);
    if (dr != 0)
        return dr;
    unsigned long me = mapped_self_seq();
    in_shim++;
    tl_contended = 0;
    uint64_t t0 = (uint64_t)dm_now_ns();
    /* glibc decides first: EDEADLK for its writer, EBUSY, ETIMEDOUT. */
    int r = real_rw_lock(l, write, mode, clk, abstime);
    if (r == 0) {
        int cs;
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
        r = rw_join(e->nm, me, write, mode, dlp);
        pthread_setcancelstate(cs, NULL);
        if (r != 0)
            dm_real.rwlock_unlock(l);
    }
    in_shim--;
    if (r != 0)
        return r;
    if (write)
        __atomic_store_n(&e->writer, me, __ATOMIC_RELAXED);
    else
        __atomic_add_fetch(&e->readers, 1, __ATOMIC_RELAXED);
    mapped_watch_thread_end();
    struct dm_stats *st = dm_store_counts(e->nm->cl);
    if (tl_contended)
        dm_stats_add(&st->contended, 1);
    dm_stats_observe(&st->wait, (uint64_t)dm_now_ns() - t0);
    return 0;
}

int dm_mapped_rwunlock(struct dm_rw_entry *e, pthread_rwlock_t *l)
{
    if (in_shim)
        return dm_real.rwlock_unlock(l);
    unsigned long me = mapped_self_seq();
    int write = __atomic_load_n(&e->writer, __ATOMIC_RELAXED) == me;
    /* Not held through the shim by this thread (locked before the shim
     * mapped it, or in a fork child): glibc's answer alone. */
    if (!write && !tl_holds(e->nm))
        return dm_real.rwlock_unlock(l);
    if (write) {
        __atomic_store_n(&e->writer, 0, __ATOMIC_RELAXED);
    } else {
        /* Never below 0: a family member's unlock by a thread that read
         * another rwlock of the name is the program's error, not a count. */
        unsigned long n = __atomic_load_n(&e->readers, __ATOMIC_RELAXED);
        while (n > 0 && !__atomic_compare_exchange_n(&e->readers, &n, n - 1, 0, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED))
            ;
    }
    int lost = mapped_leave_quietly(e->nm);
    int r = dm_real.rwlock_unlock(l);
    return r ? r : lost;
}

uint64_t dm_mapped_rwtoken(struct dm_rw_entry *e)
{
    struct dm_name *nm = e->nm;
    int write = __atomic_load_n(&e->writer, __ATOMIC_RELAXED) == mapped_self_seq();
    if (!write && !tl_holds(nm))
        return 0;
    dm_lock(&nm->mu);
    uint64_t t = nm->state == NAME_HELD && nm->held && nm->write == write ? nm->hold.token : 0;
    dm_unlock(&nm->mu);
    return t;
}

/* EBUSY while held through the shim, for reading too: glibc's destroy
 * answers 0 there, but a heap rwlock unmapped under its readers leaves
 * their cluster read hold with no unlock to end it (the unlock goes to
 * glibc alone), renewed while the process lives: every writer anywhere
 * would wait for the process's exit. */
int dm_mapped_rwdestroy(struct dm_rw_entry *e, pthread_rwlock_t *l)
{
    if (__atomic_load_n(&e->writer, __ATOMIC_RELAXED) != 0 ||
        __atomic_load_n(&e->readers, __ATOMIC_RELAXED) != 0)
        return EBUSY;
    int r = dm_real.rwlock_destroy(l);
    void *x;
    if (r == 0 && e->heap && (x = dm_registry_remove(l)) != NULL)
        mapped_named_remove(x);
    return r;
}

int dm_mapped_rwinit(struct dm_rw_entry *e, pthread_rwlock_t *l, const pthread_rwlockattr_t *a)
{
    __atomic_store_n(&e->writer, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&e->readers, 0, __ATOMIC_RELAXED);
    return dm_real.rwlock_init(l, a);
}
