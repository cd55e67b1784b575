/* mapped: the two levels of a mapped mutex.
 *
 * Lock order is name first, then the real mutex: a thread takes its
 * process's gate for the lock name (so at most one thread per process per
 * name talks to Redis, and the others queue locally), then the cluster
 * lock, then the real mutex. Taking the name first matters when several
 * mutexes share one name (init_site): were the real mutex first, thread A
 * holding X and the name could block on Y while thread B held Y and waited
 * for the name. A thread that already holds the mutex (holder == self)
 * goes straight to glibc, which gives recursion, EDEADLK or a deadlock
 * exactly as without the shim.
 *
 * Unlock releases the cluster hold, then the real mutex; with lock caching
 * the process keeps the cluster hold (renewed by the watchdog) until
 * another process announces it wants the lock, and the next local lock
 * costs no round trip. Condition
 * variables release the name around the real wait and, on wake-up, drop
 * the real mutex again so the name can be re-taken in order. */
#include "mapped.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "log.h"
#include "notify.h"
#include "preload.h"
#include "registry.h"
#include "watchdog.h"

/* glibc's mutex kind bit for robust mutexes (PTHREAD_MUTEX_ROBUST_NORMAL_NP
 * in nptl's internal headers); __kind is part of the public struct. */
#define DM_GLIBC_KIND_ROBUST 16
#define DM_CONDWAIT_RETRY_MS 100

struct dm_name {
    struct dm_cluster_lock *cl;
    pthread_mutex_t gate;               /* guards owner, depth, held */
    pthread_cond_t gate_cv;
    unsigned long owner;                /* thread seq, 0: none */
    unsigned long depth;                /* address holds by the owner */
    int held;                           /* hold is a cluster hold (not local_only) */
    int cached;                         /* held, kept after the last unlock (cache mode) */
    int want;                           /* another process asked for it: release at unlock */
    int want_subscribed;
    struct dm_hold hold;
    struct dm_name *next;
};

static const struct dm_config *mcfg;
static pthread_mutex_t names_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dm_name *names;
static struct dm_entry *free_entries;
static unsigned long tseq_next;
static __thread unsigned long tseq;
static __thread int in_shim;            /* the re-entrancy guard */

static unsigned long self_seq(void)
{
    if (__builtin_expect(tseq == 0, 0))
        tseq = __atomic_add_fetch(&tseq_next, 1, __ATOMIC_RELAXED);
    return tseq;
}

static void gate_init(struct dm_name *nm)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&nm->gate, &fresh, sizeof fresh);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&nm->gate_cv, &a);
    pthread_condattr_destroy(&a);
}

void dm_mapped_init(const struct dm_config *cfg)
{
    mcfg = cfg;
}

static struct dm_name *name_get(const char *name)
{
    pthread_mutex_lock(&names_mu);
    struct dm_name *nm;
    for (nm = names; nm; nm = nm->next)
        if (strcmp(nm->cl->name, name) == 0)
            break;
    if (!nm && (nm = calloc(1, sizeof *nm)) != NULL) {
        nm->cl = dm_cluster_lock_get(name);
        if (!nm->cl) {
            free(nm);
            nm = NULL;
        } else {
            gate_init(nm);
            nm->hold.lock = nm->cl;
            nm->next = names;
            names = nm;
        }
    }
    pthread_mutex_unlock(&names_mu);
    return nm;
}

int dm_mapped_add(const void *addr, const char *name, int flags)
{
    struct dm_entry *old = dm_registry_lookup(addr);
    if (old)
        return strcmp(old->nm->cl->name, name) == 0 ? 0 : EEXIST;
    struct dm_name *nm = name_get(name);
    if (!nm)
        return ENOMEM;
    dm_cluster_lock_mode(nm->cl, flags & DM_MAP_FAIR, flags & DM_MAP_CACHE);
    pthread_mutex_lock(&names_mu);
    struct dm_entry *e = free_entries;
    if (e)
        free_entries = e->next_free;
    pthread_mutex_unlock(&names_mu);
    if (!e && !(e = malloc(sizeof *e)))
        return ENOMEM;
    memset(e, 0, sizeof *e);
    e->addr = addr;
    e->nm = nm;
    e->heap = (flags & DM_MAP_HEAP) != 0;
    int rc = dm_registry_add(addr, e);
    if (rc != 0)
        free(e);
    return rc;
}

void dm_mapped_remove(const void *addr)
{
    struct dm_entry *e = dm_registry_remove(addr);
    if (!e)
        return;
    /* A reader that looked it up just now may still read it: recycle the
     * memory for another entry rather than give it back to malloc. */
    pthread_mutex_lock(&names_mu);
    e->next_free = free_entries;
    free_entries = e;
    pthread_mutex_unlock(&names_mu);
}

static int release_hold(struct dm_name *nm);
static void on_want(void *arg, const char *msg, size_t len);

static int to_monotonic(clockid_t clk, const struct timespec *abs, struct timespec *out)
{
    if (abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000L)
        return EINVAL;
    struct timespec now;
    if (clock_gettime(clk, &now) != 0)
        return EINVAL;
    long long rem = (abs->tv_sec - now.tv_sec) * 1000000000LL + (abs->tv_nsec - now.tv_nsec);
    clock_gettime(CLOCK_MONOTONIC, out);
    long long t = out->tv_sec * 1000000000LL + out->tv_nsec + (rem > 0 ? rem : 0);
    out->tv_sec = t / 1000000000LL;
    out->tv_nsec = t % 1000000000LL;
    return 0;
}

/* Takes the name for thread `me`: the local gate, then (outermost) the
 * cluster lock. */
static int name_enter(struct dm_name *nm, unsigned long me, enum dm_lock_mode mode,
                      const struct timespec *deadline, int *dead)
{
    *dead = 0;
    pthread_mutex_lock(&nm->gate);
    if (nm->owner == me) {
        nm->depth++;
        pthread_mutex_unlock(&nm->gate);
        return 0;
    }
    while (nm->owner != 0) {
        int r = 0;
        if (mode == DM_TRYLOCK)
            r = EBUSY;
        else if (deadline)
            r = pthread_cond_timedwait(&nm->gate_cv, &nm->gate, deadline);
        else
            pthread_cond_wait(&nm->gate_cv, &nm->gate);
        if (r != 0 && nm->owner != 0) {
            pthread_mutex_unlock(&nm->gate);
            return r;
        }
    }
    nm->owner = me;
    nm->depth = 1;
    if (nm->cached) {
        nm->cached = 0;
        pthread_mutex_unlock(&nm->gate);
        if (!dm_watchdog_is_lost(&nm->hold))
            return 0;                   /* the process still has it: no round trip */
        dm_watchdog_remove(&nm->hold);  /* lost while cached (warn mode): start over */
        nm->held = 0;
    } else {
        pthread_mutex_unlock(&nm->gate);
    }

    struct dm_hold *h = &nm->hold;
    dm_cluster_owner(h->owner, me);
    struct dm_grant g;
    int r = dm_cluster_acquire(nm->cl, h->owner, deadline,
                               mode == DM_TRYLOCK ? DM_ACQ_TRY : 0, &g);
    if (r != 0) {
        pthread_mutex_lock(&nm->gate);
        nm->owner = 0;
        nm->depth = 0;
        pthread_cond_signal(&nm->gate_cv);
        pthread_mutex_unlock(&nm->gate);
        return r;
    }
    h->token = g.token;
    nm->held = !g.local_only;
    if (g.more_waiters) {
        /* Others queue behind us: their wants went to the previous holder.
         * A caching process gives the lock up after this hold. */
        pthread_mutex_lock(&nm->gate);
        nm->want = 1;
        pthread_mutex_unlock(&nm->gate);
    }
    if (nm->held)
        dm_watchdog_add(h, g.sent_ms, g.lease_ms);
    if (nm->held && nm->cl->cache && !nm->want_subscribed) {
        /* Hear other processes' wants before keeping the lock at unlock. */
        dm_notify_set_handler(nm->cl->wantchan, on_want, nm);
        nm->want_subscribed = dm_notify_subscribe(nm->cl->wantchan,
                                                  mcfg->redis.command_timeout_ms) == 0;
    }
    *dead = g.owner_dead;
    if (g.owner_dead)
        dm_info("lock %s: the previous holder's lease expired without a release", nm->cl->name);
    return 0;
}

/* Ends one hold of the name by `who`; the outermost releases the cluster
 * lock. Returns EPERM when the cluster hold had been lost meanwhile. */
static int name_leave(struct dm_name *nm, unsigned long who)
{
    pthread_mutex_lock(&nm->gate);
    if (nm->owner != who || nm->depth == 0) {
        pthread_mutex_unlock(&nm->gate);
        return 0;
    }
    if (--nm->depth > 0) {
        pthread_mutex_unlock(&nm->gate);
        return 0;
    }
    if (nm->held && nm->cl->cache && nm->want_subscribed && !nm->want &&
        !dm_watchdog_is_lost(&nm->hold)) {
        nm->cached = 1;                 /* keep it until another process asks */
        nm->owner = 0;
        pthread_cond_signal(&nm->gate_cv);
        pthread_mutex_unlock(&nm->gate);
        return 0;
    }
    nm->want = 0;
    pthread_mutex_unlock(&nm->gate);
    return release_hold(nm);
}

/* Gives the cluster hold back; the caller owns the name (nm->owner set).
 * Clears the owner at the end. Returns EPERM if the hold had been lost. */
static int release_hold(struct dm_name *nm)
{
    int lost = 0;
    if (nm->held) {
        struct dm_hold *h = &nm->hold;
        lost = dm_watchdog_remove(h);
        int r = dm_cluster_release(nm->cl, h->owner, h->token);
        if (r == EPERM && !lost) {
            /* The server let the hold expire before the watchdog saw it
             * (the process was stopped, or the clock jumped). */
            lost = 1;
            dm_watchdog_note_lost();
            dm_error("lock %s (owner %s, fencing token %llu): the hold was lost before "
                     "unlock: its lease expired, another process may have entered%s",
                     nm->cl->name, h->owner, (unsigned long long)h->token,
                     mcfg->on_lease_lost == DM_LOST_ABORT ? "; aborting (on_lease_lost = \"abort\")" : "");
            if (mcfg->on_lease_lost == DM_LOST_ABORT)
                abort();
        }
        nm->held = 0;
    }
    pthread_mutex_lock(&nm->gate);
    nm->owner = 0;
    pthread_cond_signal(&nm->gate_cv);
    pthread_mutex_unlock(&nm->gate);
    return lost ? EPERM : 0;
}

#define DM_OWNER_RELEASER ((unsigned long)-1)   /* the subscriber thread, giving a cached lock up */

/* Another process wants a lock this process may be keeping (cache mode):
 * runs in the subscriber thread. If no thread is inside the critical
 * section, give the lock up now; otherwise at the end of the current one. */
static void on_want(void *arg, const char *msg, size_t len)
{
    struct dm_name *nm = arg;
    const char *pid = dm_cluster_process_id();
    size_t n = strlen(pid);
    if (len > n && memcmp(msg, pid, n) == 0 && msg[n] == ':')
        return;                         /* our own want */
    in_shim++;
    pthread_mutex_lock(&nm->gate);
    if (nm->owner == 0 && nm->cached) {
        nm->cached = 0;
        nm->owner = DM_OWNER_RELEASER;
        pthread_mutex_unlock(&nm->gate);
        release_hold(nm);
    } else {
        if (nm->owner != 0 && nm->held)
            nm->want = 1;
        pthread_mutex_unlock(&nm->gate);
    }
    in_shim--;
}

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

static int is_robust(const pthread_mutex_t *m)
{
    return (m->__data.__kind & DM_GLIBC_KIND_ROBUST) != 0;
}

/* A thread that ends holding a robust mutex: glibc gives the next locker
 * EOWNERDEAD. Here the name gate would stay owned by a thread that is gone
 * (every later lock in the process blocks) and the watchdog would renew
 * its cluster hold for ever (every other process too). So the end of a
 * thread that locked robust mapped mutexes hands back what it still holds
 * of them: the gate to the process, and the cluster hold to its lease,
 * unreleased, so that the next locker anywhere gets EOWNERDEAD once the
 * lease has run out, as after a process that died. */
static pthread_key_t robust_key;
static pthread_once_t robust_once = PTHREAD_ONCE_INIT;

static void drop_dead_hold(const void *addr, void *value, void *arg)
{
    struct dm_entry *e = value;
    unsigned long me = *(const unsigned long *)arg;
    if (__atomic_load_n(&e->holder, __ATOMIC_RELAXED) != me || !is_robust(addr))
        return;
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    e->depth = 0;
    struct dm_name *nm = e->nm;
    pthread_mutex_lock(&nm->gate);
    if (nm->owner == me && nm->depth > 0 && --nm->depth == 0) {
        if (nm->held) {
            dm_watchdog_remove(&nm->hold);
            nm->held = 0;
        }
        nm->owner = 0;
        pthread_cond_signal(&nm->gate_cv);
    }
    pthread_mutex_unlock(&nm->gate);
}

static void robust_thread_end(void *arg)
{
    (void)arg;
    unsigned long me = self_seq();
    in_shim++;
    dm_registry_foreach(drop_dead_hold, &me);
    in_shim--;
}

static void robust_key_create(void)
{
    if (pthread_key_create(&robust_key, robust_thread_end) != 0)
        dm_error("no thread-exit hook for robust mutexes: a thread that ends holding "
                 "one leaves it locked");
}

static void watch_thread_end(void)
{
    pthread_once(&robust_once, robust_key_create);
    pthread_setspecific(robust_key, (void *)1);
}

int dm_mapped_lock(struct dm_entry *e, pthread_mutex_t *m, enum dm_lock_mode mode,
                   clockid_t clk, const struct timespec *abstime)
{
    if (in_shim)
        return real_lock_mode(m, mode, clk, abstime);
    unsigned long me = self_seq();
    if (__atomic_load_n(&e->holder, __ATOMIC_RELAXED) == me) {
        int r = real_lock_mode(m, mode, clk, abstime);
        if (r == 0)
            e->depth++;
        return r;
    }
    if (e->robust_state == DM_ROBUST_NOTRECOVERABLE)
        return ENOTRECOVERABLE;
    struct timespec dl, *dlp = NULL;
    if (mode == DM_TIMEDLOCK) {
        int r = to_monotonic(clk, abstime, &dl);
        if (r != 0)
            return r;
        dlp = &dl;
    }
    in_shim++;
    int dead;
    int r = name_enter(e->nm, me, mode, dlp, &dead);
    if (r == 0) {
        r = real_lock_mode(m, mode, clk, abstime);
        if (r == 0 && e->robust_state == DM_ROBUST_NOTRECOVERABLE) {
            /* The holder unlocked it inconsistent while this thread
             * queued: glibc gives its waiters ENOTRECOVERABLE too. */
            dm_real.mutex_unlock(m);
            r = ENOTRECOVERABLE;
        }
        if (r != 0 && r != EOWNERDEAD)
            name_leave(e->nm, me);
    }
    in_shim--;
    if (r != 0 && r != EOWNERDEAD)
        return r;
    __atomic_store_n(&e->holder, me, __ATOMIC_RELAXED);
    e->depth = 1;
    if (is_robust(m))
        watch_thread_end();
    if (r == 0 && dead && is_robust(m)) {
        e->robust_state = DM_ROBUST_INCONSISTENT;
        return EOWNERDEAD;
    }
    return r;
}

int dm_mapped_unlock(struct dm_entry *e, pthread_mutex_t *m)
{
    if (in_shim)
        return dm_real.mutex_unlock(m);
    unsigned long me = self_seq();
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
        /* glibc refuses this for error-checking, recursive and robust
         * mutexes (EPERM) and allows it for normal ones: then the unlocking
         * thread ends the holder's hold on its behalf. */
        int r = dm_real.mutex_unlock(m);
        if (r != 0)
            return r;
        __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
        e->depth = 0;
        in_shim++;
        r = name_leave(e->nm, h);
        in_shim--;
        return r;
    }
    if (e->robust_state == DM_ROBUST_INCONSISTENT)
        e->robust_state = DM_ROBUST_NOTRECOVERABLE;
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    e->depth = 0;
    in_shim++;
    int lost = name_leave(e->nm, me);
    in_shim--;
    int r = dm_real.mutex_unlock(m);
    return r ? r : lost;
}

int dm_mapped_consistent(struct dm_entry *e, pthread_mutex_t *m)
{
    if (e->robust_state == DM_ROBUST_INCONSISTENT &&
        __atomic_load_n(&e->holder, __ATOMIC_RELAXED) == self_seq()) {
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
        if (e->heap)
            dm_mapped_remove(m);
    }
    return r;
}

int dm_mapped_init_mutex(struct dm_entry *e, pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    e->depth = 0;
    e->robust_state = DM_ROBUST_OK;
    return dm_real.mutex_init(m, a);
}

int dm_mapped_cond_wait(struct dm_entry *e, pthread_cond_t *c, pthread_mutex_t *m,
                        int timed, clockid_t clk, const struct timespec *abstime)
{
    unsigned long me = self_seq();
    if (in_shim || __atomic_load_n(&e->holder, __ATOMIC_RELAXED) != me) {
        if (!timed)
            return dm_real.cond_wait(c, m);
        return clk == CLOCK_REALTIME ? dm_real.cond_timedwait(c, m, abstime)
                                     : dm_real.cond_clockwait(c, m, clk, abstime);
    }
    unsigned long depth = e->depth;
    __atomic_store_n(&e->holder, 0, __ATOMIC_RELAXED);
    e->depth = 0;
    in_shim++;
    int lost = name_leave(e->nm, me);
    in_shim--;

    int r;
    if (!timed)
        r = dm_real.cond_wait(c, m);
    else if (clk == CLOCK_REALTIME)
        r = dm_real.cond_timedwait(c, m, abstime);
    else
        r = dm_real.cond_clockwait(c, m, clk, abstime);

    /* Back in the lock order: name, then the real mutex. */
    dm_real.mutex_unlock(m);
    in_shim++;
    int dead;
    while (name_enter(e->nm, me, DM_LOCK, NULL, &dead) != 0) {
        /* on_redis_down = "error": a condition wait has no way to return
         * without the mutex, so it keeps trying. */
        struct timespec ts = { 0, DM_CONDWAIT_RETRY_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
    dm_real.mutex_lock(m);
    in_shim--;
    __atomic_store_n(&e->holder, me, __ATOMIC_RELAXED);
    e->depth = depth;
    return r ? r : lost;
}

uint64_t dm_mapped_token(struct dm_entry *e)
{
    if (__atomic_load_n(&e->holder, __ATOMIC_RELAXED) != self_seq() || !e->nm->held)
        return 0;
    return e->nm->hold.token;
}

static void entry_forget(const void *addr, void *value, void *arg)
{
    (void)addr;
    (void)arg;
    struct dm_entry *e = value;
    e->holder = 0;
    e->depth = 0;
}

/* Fork: preload's prepare handler holds names_mu across fork() (see the lock
 * order in preload.c); the parent lets go, the child makes it anew. */
void dm_mapped_atfork_prepare(void)
{
    pthread_mutex_lock(&names_mu);
}

void dm_mapped_atfork_parent(void)
{
    pthread_mutex_unlock(&names_mu);
}

void dm_mapped_atfork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&names_mu, &fresh, sizeof fresh);
    for (struct dm_name *nm = names; nm; nm = nm->next) {
        gate_init(nm);
        nm->owner = 0;
        nm->depth = 0;
        nm->held = 0;
        nm->cached = 0;
        nm->want = 0;
        nm->want_subscribed = 0;
    }
    dm_registry_foreach(entry_forget, NULL);
}

void dm_mapped_release_all(void)
{
    in_shim++;
    for (struct dm_name *nm = names; nm; nm = nm->next) {
        if (!nm->held)
            continue;
        struct dm_hold *h = &nm->hold;
        dm_watchdog_remove(h);
        nm->held = 0;
        dm_cluster_release(nm->cl, h->owner, h->token);
    }
    in_shim--;
}
