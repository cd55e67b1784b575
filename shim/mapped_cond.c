/* mapped_cond: cluster-wide condition variables (conds), the part of
 * mapped (mapped.h) that the cond entry points reach for a listed cond.
 *
 * A listed cond (conds) has a name and a store channel (struct dm_chan;
 * Redis: NS:{NAME}:cond). Its waiters do not sleep on the program's
 * pthread_cond_t: they sleep on the channel's count, which moves on every
 * signal from anywhere, on every local one (chan_bump) and when the
 * store's delivery was interrupted.
 * A waiter subscribes and reads the count *before* it lets go of anything,
 * so a signal from anywhere after that moment moves the count it compares
 * against: none falls into the gap between the cluster release and the
 * sleep (a broadcast of the program's cond from the subscriber thread,
 * without the mutex, would). Every wake-up wakes every waiter of the name
 * in the process: a signal may wake more than one (POSIX allows it), a
 * broadcast wakes all.
 *
 * This file owns the cond names' records (one per cond name: its store
 * record and channel, reference counted,
 * conds_mu), the cond entries, the cluster wait, signal and destroy, and
 * their fork child state; and the layer's init, fork handler and removal
 * of an entry of any kind (the end of this file). A mapped mutex's share of its name goes back
 * and comes in again through mapped.c (name_leave, cond_rejoin:
 * mapped_impl.h); this file does not know the hold's states, batches or
 * the name table, nor rwlocks. */
#include "mapped.h"
#include "mapped_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "real.h"
#include "util.h"

#define DM_COND_UNSUBSCRIBED_MS 1000    /* longest sleep while the channel is not subscribed */
#define DM_GLIBC_COND_CLOCK_MONOTONIC 2 /* __wrefs bit: condattr clock (nptl's pthread_cond_init) */

struct dm_cond_name {
    struct dm_cond_name *next;          /* conds_mu */
    struct dm_store_lock *cl;         /* the name's keys: the channel's name */
    struct dm_chan *ch;
    unsigned long refs;                 /* conds_mu */
    unsigned long waiting;              /* conds_mu: of refs, those of waits in progress
                                           (a fork child has none of them) */
};

static const struct dm_config *mcfg;
static long cond_gap_ms;                /* DMUTEX_TEST_COND_GAP_MS (see mapped_cond_init) */
static pthread_mutex_t conds_mu = PTHREAD_MUTEX_INITIALIZER;   /* cond_names, refs, free list */
static struct dm_cond_name *cond_names;
static struct dm_cond_entry *free_conds;

static void mapped_cond_init(const struct dm_config *cfg)
{
    mcfg = cfg;
    /* Tests only: a cluster cond waiter pauses this long between letting
     * go of its mutex and its sleep, so that a signal lands in that gap. */
    const char *gap = secure_getenv("DMUTEX_TEST_COND_GAP_MS");
    cond_gap_ms = gap ? atol(gap) : 0;
}

/* The record of cond name `name`, one more reference; NULL on ENOMEM. The
 * calls into the store take its own locks after conds_mu (the fork order:
 * mapped, then the store). */
static struct dm_cond_name *cond_name_get(const char *name)
{
    dm_lock(&conds_mu);
    struct dm_cond_name *cn = cond_names;
    while (cn && strcmp(cn->cl->name, name) != 0)
        cn = cn->next;
    if (!cn && (cn = calloc(1, sizeof *cn)) != NULL) {
        cn->cl = dm_store->cond_get(name);
        cn->ch = cn->cl ? dm_store->cond_chan(cn->cl) : NULL;
        if (!cn->ch) {
            dm_store->lock_put(cn->cl);
            free(cn);
            cn = NULL;
        } else {
            cn->next = cond_names;
            cond_names = cn;
        }
    }
    if (cn)
        cn->refs++;
    dm_unlock(&conds_mu);
    return cn;
}

/* A waiter's reference to a record the caller knows is alive, for the
 * length of its wait (cond_wait_end drops it). */
static void cond_wait_start(struct dm_cond_name *cn)
{
    dm_lock(&conds_mu);
    cn->refs++;
    cn->waiting++;
    dm_unlock(&conds_mu);
}

static void cond_name_put(struct dm_cond_name *cn);

static void cond_wait_end(struct dm_cond_name *cn)
{
    dm_lock(&conds_mu);
    cn->waiting--;
    dm_unlock(&conds_mu);
    cond_name_put(cn);
}

/* Drops a reference; the last one unsubscribes the channel and frees. */
static void cond_name_put(struct dm_cond_name *cn)
{
    dm_lock(&conds_mu);
    int last = --cn->refs == 0;
    if (last) {
        struct dm_cond_name **p = &cond_names;
        while (*p != cn)
            p = &(*p)->next;
        *p = cn->next;
    }
    dm_unlock(&conds_mu);
    if (!last)
        return;
    dm_store->chan_put(cn->ch);
    dm_store->lock_put(cn->cl);
    free(cn);
}

int dm_mapped_add_cond(const void *addr, const char *name, int flags)
{
    struct dm_cond_entry *old = dm_registry_lookup(addr);
    if (old)
        return old->kind == DM_ENTRY_COND && strcmp(old->cn->cl->name, name) == 0 ? 0 : EEXIST;
    struct dm_cond_name *cn = cond_name_get(name);
    if (!cn)
        return ENOMEM;
    dm_lock(&conds_mu);
    struct dm_cond_entry *ce = free_conds;
    if (ce)
        free_conds = ce->next_free;
    dm_unlock(&conds_mu);
    if (!ce && !(ce = malloc(sizeof *ce))) {
        cond_name_put(cn);
        return ENOMEM;
    }
    memset(ce, 0, sizeof *ce);
    ce->kind = DM_ENTRY_COND;
    ce->addr = addr;
    ce->cn = cn;
    ce->heap = (flags & DM_MAP_HEAP) != 0;
    int rc = dm_registry_add(addr, ce);
    if (rc != 0) {
        free(ce);
        cond_name_put(cn);
    }
    return rc;
}

/* An entry already out of the registry: its memory is recycled (a reader
 * may still be looking at it), its name dropped. */
static void cond_remove(struct dm_cond_entry *ce)
{
    struct dm_cond_name *cn = ce->cn;
    dm_lock(&conds_mu);
    ce->next_free = free_conds;
    free_conds = ce;
    dm_unlock(&conds_mu);
    cond_name_put(cn);
}

int dm_mapped_cond_destroy(struct dm_cond_entry *ce, pthread_cond_t *c)
{
    int r = dm_real.cond_destroy(c);
    if (r == 0 && ce->heap)
        dm_mapped_remove(c);
    return r;
}

int dm_mapped_cond_signal(struct dm_cond_entry *ce, pthread_cond_t *c, int broadcast)
{
    /* Waiters that went through glibc (a wait from inside the shim) wait
     * on c itself; ours on the channel's count. */
    int r = broadcast ? dm_real.cond_broadcast(c) : dm_real.cond_signal(c);
    if (in_shim)
        return r;
    dm_stats_add(&dm_store_counts(ce->cn->cl)->cond_signals, 1);
    dm_store->chan_bump(ce->cn->ch);
    int cs;
    shim_enter(&cs);
    dm_store->cond_publish(ce->cn->cl, broadcast);
    shim_leave(cs);
    return r;
}

/* The mutex's way back, in the cancellation cleanup of a cluster cond
 * wait: glibc's cancelled waiter owns its mutex when the program's
 * handlers run, so this one does too, cluster hold included. */
struct cond_cluster_wait {
    struct cond_wait w;
    int mapped;                 /* w.e is a mapped mutex whose hold was given back */
    int relock_err;             /* the mutex could not be taken back: ENOTRECOVERABLE */
    struct dm_cond_name *cn;    /* referenced for the wait (see below) */
};

/* The mutex back, as glibc's wait takes it: EOWNERDEAD (held, its owner
 * died) is passed on; ENOTRECOVERABLE (not held) too, and then nothing is
 * joined; a mapped robust mutex the shim made unrecoverable meanwhile (its
 * locker unlocked it inconsistent) is given back, ENOTRECOVERABLE, as
 * lock_both does. Then the waiter's reference to the cond's name goes: a
 * cond may be destroyed as soon as its waiters are woken (POSIX lets a
 * program destroy it right after its broadcast), and the channel this
 * waiter slept on must outlive the waiter's last look at it. */
static void cond_cluster_retake(struct cond_cluster_wait *cw)
{
    int r = dm_real.mutex_lock(cw->w.m);
    if (r == EOWNERDEAD) {
        cw->w.real_dead = 1;
    } else if (r != 0) {
        cw->relock_err = r;
    } else if (cw->mapped && cw->w.e->robust_state == DM_ROBUST_NOTRECOVERABLE) {
        dm_real.mutex_unlock(cw->w.m);
        cw->relock_err = ENOTRECOVERABLE;
    }
    if (cw->mapped && !cw->relock_err)
        cond_rejoin(&cw->w);
    if (cw->cn) {
        cond_wait_end(cw->cn);
        cw->cn = NULL;
    }
}

static void cond_cluster_cancelled(void *arg)
{
    int cs;
    shim_enter(&cs);
    cond_cluster_retake(arg);
    shim_leave(cs);
}

/* The clock of a timedwait: the cond's condattr clock, which glibc keeps
 * in the cond itself (so a cond made before the shim's constructor, or
 * statically, is read right too). */
static clockid_t cond_clock(const pthread_cond_t *c)
{
    unsigned int wrefs = __atomic_load_n(&c->__data.__wrefs, __ATOMIC_RELAXED);
    return (wrefs & DM_GLIBC_COND_CLOCK_MONOTONIC) ? CLOCK_MONOTONIC : CLOCK_REALTIME;
}

/* One function of about 100 lines on purpose: its order (subscribe and
 * count, then let go of the mutex, then sleep, then take it back) is why
 * no signal is missed, and reads best in one place. */
int dm_mapped_cond_cluster_wait(struct dm_cond_entry *ce, pthread_cond_t *c, pthread_mutex_t *m,
                                int timed, clockid_t clk, const struct timespec *abstime)
{
    if (timed && clk == DM_COND_CLOCK_OF_COND)
        clk = cond_clock(c);
    if (in_shim) {
        if (!timed)
            return dm_real.cond_wait(c, m);
        return dm_real.cond_clockwait(c, m, clk, abstime);
    }
    struct timespec dl, *dlp;
    if (mapped_deadline_of(timed, clk, abstime, &dl, &dlp) != 0)
        return EINVAL;
    unsigned long me = mapped_self_seq();
    struct dm_entry *e = dm_mapped_find(m);
    struct cond_cluster_wait cw = { { e, m, me, 0, 0, 0 }, 0, 0, NULL };
    cw.mapped = e && __atomic_load_n(&e->holder, __ATOMIC_RELAXED) == me;
    /* glibc refuses a wait on an error-checking, recursive or robust
     * mutex the thread does not own (EPERM), before it waits; a mapped
     * one's owner is known here, an unmapped one's unlock below says. */
    if (e && !cw.mapped && !mapped_foreign_unlock_ok(m))
        return EPERM;

    int cs;
    shim_enter(&cs);
    struct dm_cond_name *cn = ce->cn;
    cond_wait_start(cn);
    cw.cn = cn;
    /* Subscribed and counted before anything is let go: from here on no
     * signal of any process can be missed. While Redis failed a moment
     * ago (the store's cond_down) nothing is waited for: the mutex is not
     * held for a timeout per call; the subscription is made in the
     * background, and the sleep is cut short below. */
    struct dm_chan *ch = cn->ch;
    long sub_ms = mcfg->redis.command_timeout_ms;   /* cut to the deadline: a timed wait */
    long left = dm_remaining_ms(dlp);               /* returns by it, Redis or not */
    if (left >= 0 && left < sub_ms)
        sub_ms = left;
    if (dm_store->cond_down(cn->cl))
        sub_ms = 0;
    long long sub_t0 = dm_now_ms();
    int sr = dm_store->chan_subscribe(ch, sub_ms);
    int subscribed = sr == 0;
    if (subscribed || sr == EAGAIN || (sr != 0 && sub_ms == mcfg->redis.command_timeout_ms))
        dm_store->cond_outcome(cn->cl, subscribed, (long)(dm_now_ms() - sub_t0));
    unsigned long seen = dm_store->chan_seq(ch);
    if (cw.mapped) {
        hold_observe(e);
        cw.w.depth = e->depth;
        __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
        e->depth = 0;
        name_leave(e->nm);      /* a hold lost meanwhile was reported; no EPERM here */
    }
    int ur = dm_real.mutex_unlock(m);
    if (ur != 0) {
        /* Not this thread's to let go of (EPERM): glibc's answer, nothing waited. */
        if (cw.mapped)
            cond_rejoin(&cw.w);
        cond_wait_end(cn);
        shim_leave(cs);
        return ur;
    }
    dm_stats_add(&dm_store_counts(cn->cl)->cond_waits, 1);
    if (cond_gap_ms > 0)
        dm_sleep_ms(cond_gap_ms);
    shim_leave(cs);

    /* Not subscribed (Redis unreachable): a remote signal could not reach
     * us, so the sleep is cut short and the caller re-checks (a spurious
     * wake-up) rather than sleep past it. */
    struct timespec cap;
    int capped = 0;
    if (!subscribed) {
        dm_deadline_in(&cap, DM_COND_UNSUBSCRIBED_MS);
        if (!dlp || dm_ts_before(&cap, dlp)) {
            dlp = &cap;
            capped = 1;
        }
    }
    int r;
    pthread_cleanup_push(cond_cluster_cancelled, &cw);
    r = dm_store->chan_wait_until(ch, seen, dlp);
    pthread_cleanup_pop(0);
    if (capped && r == ETIMEDOUT)
        r = 0;

    shim_enter(&cs);
    cond_cluster_retake(&cw);
    shim_leave(cs);
    if (cw.relock_err)
        return cw.relock_err;
    if (cw.w.real_dead)
        return EOWNERDEAD;
    if (cw.mapped && (cw.w.dead || e->dead_pending) && mapped_is_robust(m)) {
        e->dead_pending = 0;
        e->robust_state = DM_ROBUST_INCONSISTENT;
        return EOWNERDEAD;
    }
    return r;
}

/* Fork: prepare takes conds_mu (after names_mu, before the store's
 * locks); the child's subscriptions are gone with the store's, and
 * the first wait there subscribes again. The parent's waiters are not in
 * the child: their references are given back, and a record only they
 * kept goes (the store's child handlers ran already). */
static void cond_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&conds_mu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    struct dm_cond_name **p = &cond_names;
    while (*p) {
        struct dm_cond_name *cn = *p;
        cn->refs -= cn->waiting;
        cn->waiting = 0;
        if (cn->refs > 0) {
            p = &cn->next;
            continue;
        }
        *p = cn->next;
        dm_store->chan_put(cn->ch);
        dm_store->lock_put(cn->cl);
        free(cn);
    }
}

/* ---- the layer's own: init, fork, removal of any entry -------------------
 * Here, at the top of mapped, so that mapped.c (mutexes, holds) calls no
 * file above it. */

void dm_mapped_init(const struct dm_config *cfg)
{
    mapped_names_init(cfg);
    mapped_cond_init(cfg);
}

void dm_mapped_remove(const void *addr)
{
    /* every entry starts with its kind (mapped.h) */
    struct dm_entry *e = dm_registry_remove(addr);
    if (!e)
        return;
    if (e->kind == DM_ENTRY_COND)
        cond_remove((struct dm_cond_entry *)(void *)e);
    else
        mapped_named_remove(e);
}

/* names_mu, then conds_mu (startup's lock order); the child's names are
 * made anew after the conds' (as before the split). */
void dm_mapped_atfork(enum dm_fork_phase phase)
{
    mapped_names_fork_mutex(phase);
    cond_atfork(phase);
    if (phase == DM_FORK_CHILD)
        mapped_names_fork_child();
}
