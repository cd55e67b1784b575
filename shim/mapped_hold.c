/* mapped_hold: the process's hold of a name (mapped_impl.h's struct
 * dm_name): taking it from the store and giving it back, a batch's
 * linger, the grace after a handover, other processes' wants, and the
 * joins of the process's threads (name_join, name_take, name_leave). The
 * entry points are mapped.c's; this file never touches a pthread_mutex_t. */
#include "mapped.h"
#include "mapped_impl.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "real.h"
#include "store.h"
#include "util.h"
#include "watchdog.h"
#include "who.h"

#define DM_YIELD_MAX_MS      1000       /* longest a thread steps aside for another process */
#define DM_FAR_FUTURE_S      (1LL << 31) /* a deadline this far ahead is no deadline */
#define DM_LINGER_NS         200000LL   /* a batch's hold waits so long for the next lock */
#define DM_HANDED_GRACE_NS   250000LL   /* a process that handed a name over asks again
                                           no sooner (see hold_acquire) */

/* The layer's config and thread state (mapped_impl.h). */
const struct dm_config *mapped_cfg;
int mapped_torn_down;                    /* the exit path ran: no more caching */
static unsigned long tseq_next;
static __thread unsigned long tseq;
__thread int in_shim;                   /* the re-entrancy guard (mapped_impl.h) */
__thread int tl_contended;              /* this lock call found the mutex or the lock taken */

__thread struct tl_name tl_names[DM_TL_NAMES];
__thread unsigned long tl_overflow;

unsigned long mapped_self_seq(void)
{
    if (__builtin_expect(tseq == 0, 0))
        tseq = __atomic_add_fetch(&tseq_next, 1, __ATOMIC_RELAXED);
    return tseq;
}

void tl_note(struct dm_name *nm, int delta)
{
    int free_slot = -1;
    for (int i = 0; i < DM_TL_NAMES; i++) {
        if (tl_names[i].nm == nm && tl_names[i].n > 0) {
            tl_names[i].n += delta;
            return;
        }
        if (tl_names[i].n == 0 && free_slot < 0)
            free_slot = i;
    }
    if (delta > 0 && free_slot >= 0) {
        tl_names[free_slot].nm = nm;
        tl_names[free_slot].n = 1;
    } else if (delta > 0) {
        tl_overflow++;
    } else if (tl_overflow > 0) {
        tl_overflow--;
    }
}

int tl_holds(struct dm_name *nm)
{
    if (tl_overflow)
        return 1;
    for (int i = 0; i < DM_TL_NAMES; i++)
        if (tl_names[i].nm == nm && tl_names[i].n > 0)
            return 1;
    return 0;
}

/* Does this thread hold anything of any name? */
int tl_holds_any(void)
{
    if (tl_overflow)
        return 1;
    for (int i = 0; i < DM_TL_NAMES; i++)
        if (tl_names[i].n > 0)
            return 1;
    return 0;
}

static long long handed_grace_ns = DM_HANDED_GRACE_NS;  /* DMUTEX_TEST_HANDED_GRACE_MS */

void mapped_hold_init(void)
{
    /* Tests only: the grace after a handover (hold_acquire), made long
     * enough for a test to act inside it. */
    const char *grace = secure_getenv("DMUTEX_TEST_HANDED_GRACE_MS");
    if (grace && atol(grace) > 0)
        handed_grace_ns = atol(grace) * 1000000LL;
}

/* ---- the process's hold of a name -------------------------------------- */

static void on_want(void *arg);

/* ---- batches (docs/decisions.md, "Batches and handovers") ----------------
 * A contended grant (it came after a wait, or others queue behind it)
 * serves this process's lock calls until batch_ms after it: the last
 * unlock keeps the hold for DM_LINGER_NS (lingering) in case a thread
 * locks again, and the store's thread gives it back when none did. Only
 * after a critical section shorter than batch_hold_us (busy_ns: since a
 * lock found nobody of the process inside): a batch saves one handoff
 * per section it serves, little next to a long one, and the processes
 * in line wait for all of it (docs/decisions.md has the measurements). Fair
 * mutexes only: not notices (fair = false), cache mode (which keeps a
 * hold until asked, and gives it up when asked), rwlocks, or robust
 * mutexes (a process killed while its batch's hold lingers would pass for
 * one killed inside its critical section: the next holder's EOWNERDEAD).
 * With batch_ms = 0 the batch is empty (it ends at the grant): no lock call
 * joins without a round trip, but the release after a section at least as
 * long as the grace still counts as the handover it most likely is
 * (hold_release notes handed_ns: the grace). */
static int batching(const struct dm_name *nm)
{
    return nm->fair && !nm->cache && !nm->rw &&
           !__atomic_load_n(&nm->robust, __ATOMIC_RELAXED);
}

/* nm->mu held. */
static int batch_open_locked(const struct dm_name *nm)
{
    return nm->batch_end_ns != 0 && dm_now_ns() < nm->batch_end_ns;
}

static void linger_end(void *arg);

/* nm->mu held, the last user just left at `now`: keeps the hold until
 * the linger's end (or the batch's, if sooner). 0: it cannot (no store
 * thread), the caller releases now. */
static int linger_arm_locked(struct dm_name *nm, long long now)
{
    nm->left_ns = now;
    long long at = now + DM_LINGER_NS;
    if (at > nm->batch_end_ns)
        at = nm->batch_end_ns;
    return dm_store->timer_arm(&nm->linger, at, linger_end, nm) == 0;
}

/* The store's thread, at a lingering hold's end: gives it back unless a
 * thread joined (its last unlock decides then) or left again lately. */
static void linger_end(void *arg)
{
    struct dm_name *nm = arg;
    in_shim++;
    dm_lock(&nm->mu);
    if (nm->state != NAME_HELD || nm->users != 0) {
        dm_unlock(&nm->mu);
        in_shim--;
        return;
    }
    long long now = dm_now_ns();
    long long at = nm->left_ns + DM_LINGER_NS;
    if (at > nm->batch_end_ns)
        at = nm->batch_end_ns;
    if (at > now && !mapped_torn_down && !hold_lost_locked(nm) &&
        dm_store->timer_arm(&nm->linger, at, linger_end, nm) == 0) {
        dm_unlock(&nm->mu);
        in_shim--;
        return;
    }
    nm->state = NAME_RELEASING;
    dm_unlock(&nm->mu);
    hold_release(nm);
    in_shim--;
}

/* clk's absolute time -> a CLOCK_MONOTONIC deadline. *none is set for a
 * deadline too far ahead to compute with (glibc waits for those). */
int mapped_to_monotonic(clockid_t clk, const struct timespec *abs, struct timespec *out, int *none)
{
    *none = 0;
    if (abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000L)
        return EINVAL;
    struct timespec now;
    if (clock_gettime(clk, &now) != 0)
        return EINVAL;
    long long rem = 0;
    if (abs->tv_sec > now.tv_sec && abs->tv_sec - now.tv_sec >= DM_FAR_FUTURE_S) {
        *none = 1;
        return 0;
    }
    if (abs->tv_sec >= now.tv_sec)
        rem = (abs->tv_sec - now.tv_sec) * 1000000000LL + (abs->tv_nsec - now.tv_nsec);
    clock_gettime(CLOCK_MONOTONIC, out);
    long long t = out->tv_sec * 1000000000LL + out->tv_nsec + (rem > 0 ? rem : 0);
    out->tv_sec = t / 1000000000LL;
    out->tv_nsec = t % 1000000000LL;
    return 0;
}

/* nm->mu held, the name FREE, a lock call about to take it: this process
 * just gave back a hold others queued or asked for (a batch's, even an
 * empty one with batch_ms = 0, or a wanted one): its release most likely
 * handed the lock over. A request sent at once would reach the server with
 * that release, whose handover notice then leaves only after this
 * request's script has run too, and with wants on (cache mode, several
 * mutexes) its want notice would wake the new holder's subscriber thread
 * beside the waiter. So it waits until DM_HANDED_GRACE_NS after the
 * release (docs/decisions.md, "the grace after a handover"). It
 * would have waited for the new holder's critical section anyway. Not a
 * trylock, nor a timed lock whose deadline comes first: that one asks at
 * once, as without the grace, since the release may not have handed the
 * lock over (nobody queued any more) and POSIX lets no timed lock time out
 * on a mutex it could have taken. The wait leaves the name FREE (mu let go
 * meanwhile): another thread's trylock or timed lock of a mutex of the
 * name takes it meanwhile rather than find it busy (ACQUIRING) or wait
 * for this one's grace. Returns 1 when it waited: the caller looks at the
 * name again. */
int grace_wait_locked(struct dm_name *nm, enum dm_lock_mode mode, const struct timespec *deadline)
{
    long long now = dm_now_ns(), until = nm->handed_ns + handed_grace_ns;
    int due_first = deadline &&
                    deadline->tv_sec * 1000000000LL + deadline->tv_nsec < until;   /* monotonic */
    if (mode == DM_TRYLOCK || due_first || nm->handed_ns == 0 || now >= until)
        return 0;
    dm_unlock(&nm->mu);
    struct timespec ts = { (time_t)((until - now) / 1000000000LL),
                           (long)((until - now) % 1000000000LL) };
    nanosleep(&ts, NULL);
    dm_lock(&nm->mu);
    return 1;
}

/* Takes the cluster lock for the process; the caller has moved the name to
 * ACQUIRING, so the hold's fields are its own until it publishes HELD. A
 * hold that cannot be watched is not granted: nothing would renew it and
 * it would expire under the critical section. */
static int hold_acquire(struct dm_name *nm, unsigned long me, enum dm_lock_mode mode,
                        const struct timespec *deadline, int *dead, int *more, int *held,
                        int *contended)
{
    struct dm_hold *h = &nm->hold;
    dm_metrics_start();     /* the writer thread, at the first round trip (not in the constructor) */
    dm_store_owner(h->owner, me);
    struct dm_grant g;
    h->read = nm->rw && !nm->write;
    __atomic_store_n(&h->idle, 0, __ATOMIC_SEQ_CST);
    /* The process's record (who.h) lists the call while it waits. */
    struct dm_who_wait ww;
    dm_who_wait_begin(&ww, nm->cl->name, me);
    int r = dm_store->acquire(nm->cl, h->owner, deadline,
                               (mode == DM_TRYLOCK ? DM_ACQ_TRY : 0) | (h->read ? DM_ACQ_READ : 0),
                               &g);
    dm_who_wait_end(&ww);
    if (r != 0)
        return r;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    h->since_real_ms = (long long)rt.tv_sec * 1000 + rt.tv_nsec / 1000000;
    if (g.waited)
        tl_contended = 1;
    h->token = g.token;
    h->wait_id = g.wait_id;
    *held = !g.local_only;
    *more = g.more_waiters;
    *contended = g.waited || g.more_waiters;
    *dead = g.owner_dead;
    if (!*held)
        return 0;
    int rc = dm_watchdog_add(h, g.sent_ms, g.lease_ms);
    if (rc != 0) {
        dm_error("lock %s: the lease watchdog cannot run (%s); giving the lock back and "
                 "returning EAGAIN: nothing would renew the lease, and it would expire "
                 "under the critical section", nm->cl->name, strerror(rc));
        dm_store->release_hold(nm->cl, h->owner, h->token, h->wait_id);
        return EAGAIN;
    }
    dm_stats_set(&dm_store_counts(nm->cl)->held, 1);
    if (nm->cl->wants && !__atomic_load_n(&nm->want_subscribed, __ATOMIC_RELAXED)) {
        /* Hear other processes' wants: before keeping the lock at unlock
         * (cache mode), and to let them in while threads keep it busy. */
        int ok = dm_store->want_watch(nm->cl, on_want, nm, mapped_cfg->redis.command_timeout_ms) == 0;
        dm_lock(&nm->mu);
        nm->want_subscribed = ok;
        dm_unlock(&nm->mu);
    }
    if (g.forced)
        dm_info("lock %s: the previous holder's hold was ended by `dmutex unlock --force`, "
                "not released: if that holder is alive, it loses the lock at its next renewal "
                "and may still be inside its critical section", nm->cl->name);
    else if (g.owner_dead)
        dm_info("lock %s: the previous holder's lease expired without a release", nm->cl->name);
    return 0;
}

/* A release found the hold gone although the unlock came before the
 * hold's deadline (dm_watchdog_remove had not found it lost). `how`:
 * DM_GONE_EXPIRED (the reply came after the lease could have run out by
 * itself): the server let it expire after the critical section had ended,
 * the release being late (a server stall or pause, a restart, a stopped
 * process): the lease covered the section, the lock was free meanwhile.
 * DM_GONE_WITH_DATA: the server lost the lock's data after the grant (a
 * restart without persistence, an older snapshot, a failover) and has
 * granted the lock to nobody since: nobody entered beside the section.
 * Either is a warning, and the process goes on. (A hold the server lost
 * earlier some other way, a DEL or an eviction, whose release is also
 * late, or one lost that way before such a restart, looks the same from
 * here: the message says so.) DM_GONE_LOST: the lease cannot have run
 * out and the lock may have been granted since: the server lost the hold
 * some other way (deleted, evicted, a restart or failover after which it
 * was granted again), perhaps while a thread was inside: a lost hold,
 * on_lease_lost applying. Called by the releasing thread, or, for a
 * release sent without waiting, by the thread that read its reply.
 * Returns 1 for a hold lost while held. */
static int release_found_gone(struct dm_store_lock *l, const char *owner, uint64_t token,
                              enum dm_gone how)
{
    if (how == DM_GONE_EXPIRED) {
        dm_stats_add(&dm_store_counts(l)->expired_after_unlock, 1);
        dm_warn("lock %s (owner %s, fencing token %llu): the hold expired after unlock: its "
                "release reached the server late (a stall, a pause or a restart) and found "
                "the lease over; the critical section had ended before the hold's deadline, "
                "so its lease covered it (unless the server had lost the hold earlier some "
                "other way, a DEL, an eviction or a failover, which a late reply cannot tell "
                "apart); the lock was free from the lease's end", l->name, owner,
                (unsigned long long)token);
        return 0;
    }
    if (how == DM_GONE_WITH_DATA) {
        dm_stats_add(&dm_store_counts(l)->expired_after_unlock, 1);
        dm_warn("lock %s (owner %s, fencing token %llu): the hold was lost with the server's "
                "data (a restart without persistence, an older snapshot or a failover, after "
                "the grant), and the server has granted the lock to nobody since: the "
                "critical section had ended before the hold's deadline, so nobody entered "
                "beside it (unless the server had lost the hold earlier some other way, a "
                "DEL or an eviction, which this release cannot tell apart)", l->name, owner,
                (unsigned long long)token);
        return 0;
    }
    dm_watchdog_note_lost();
    dm_stats_add(&dm_store_counts(l)->leases_lost, 1);
    dm_error("lock %s (owner %s, fencing token %llu): the hold was lost while held: at "
             "unlock the server no longer had it, before its lease could have run out "
             "(deleted, evicted, or lost by a restart or failover); another process may have "
             "entered%s", l->name, owner, (unsigned long long)token,
             mapped_cfg->on_lease_lost == DM_LOST_ABORT ? "; aborting (on_lease_lost = \"abort\")" : "");
    if (mapped_cfg->on_lease_lost == DM_LOST_ABORT)
        abort();
    return 1;
}

static void release_found_lost(struct dm_store_lock *l, const char *owner, uint64_t token,
                               enum dm_gone how)
{
    release_found_gone(l, owner, token, how);
}

/* Gives the cluster hold back. The caller moved the name to RELEASING (it
 * alone touches the hold now); it is FREE on return. EPERM if the hold had
 * been lost while held.
 *
 * With on_lease_lost = "abort" (the default) the release is written and
 * not waited for (the store's release_nowait): the hold ends no earlier
 * than before, only its reply is read later, and a hold the reply finds
 * lost while held aborts the process from the thread that reads it, as
 * the watchdog would (release_found_gone; one that expired after the
 * unlock is a warning). "warn" waits, since unlock then returns EPERM for
 * a hold lost while held. */
int hold_release(struct dm_name *nm)
{
    int lost = 0;
    if (nm->held) {
        struct dm_hold *h = &nm->hold;
        lost = dm_watchdog_remove(h);
        long long end = dm_watchdog_lease_end(h);
        if (!lost && mapped_cfg->on_lease_lost == DM_LOST_ABORT)
            dm_store->release_nowait(nm->cl, h->owner, h->token, h->wait_id, end,
                                      release_found_lost);
        else {
            int r = dm_store->release_hold(nm->cl, h->owner, h->token, h->wait_id);
            if ((r == EPERM || r == ESTALE) && !lost)
                lost = release_found_gone(nm->cl, h->owner, h->token, dm_store_gone_how(r, end));
        }
    }
    dm_stats_set(&dm_store_counts(nm->cl)->held, 0);
    dm_lock(&nm->mu);
    /* Most likely a handover: the next lock call waits for the grace
     * (grace_wait_locked). Without a batch (batch_ms = 0) only after a
     * critical section at least as long as the grace: the new holder's
     * would then outlast it too, while after short ones both processes
     * could sit in a grace with the lock free (K = 2, empty sections:
     * 5.8-7.7 k acquisitions/s without the grace, 4.7-6.1 k with it). */
    long long now = dm_now_ns();
    if (nm->want || (nm->batch_end_ns != 0 &&
                     (mapped_cfg->batch_ms > 0 || now - nm->busy_ns >= handed_grace_ns)))
        nm->handed_ns = now;
    nm->held = 0;
    nm->want = 0;
    nm->yield_logged = 0;
    nm->state = NAME_FREE;
    dm_cv_broadcast(&nm->cv);
    dm_unlock(&nm->mu);
    return lost ? EPERM : 0;
}

/* nm->mu held, state HELD, a thread about to join: a hold nobody was
 * inside (kept: cached or lingering) is marked in use, then looked at once
 * more (the watchdog marks a loss, then reads `idle`: a loss it declares
 * once a thread may be inside aborts as always). 0: found lost. */
static int hold_use_locked(struct dm_name *nm)
{
    if (nm->users > 0 || !nm->held)
        return 1;
    __atomic_store_n(&nm->hold.idle, 0, __ATOMIC_SEQ_CST);
    return !__atomic_load_n(&nm->hold.lost, __ATOMIC_SEQ_CST);
}

/* nm->mu held, state HELD: has the watchdog found the hold lost (warn
 * mode)? Nobody may join a lost hold: it excludes nobody. */
int hold_lost_locked(struct dm_name *nm)
{
    return nm->held && dm_watchdog_is_lost(&nm->hold);
}

/* The common case of name_join: the process holds the name and no other
 * process wants it. Nothing to wait for, no round trip, nothing to log:
 * no cancellation point is reached, so the caller need not turn
 * cancellation off (two atomic updates of the thread's cancel state per
 * call were a quarter of a cached lock+unlock). Returns 1 when joined. */
int name_join_fast(struct dm_name *nm)
{
    dm_lock(&nm->mu);
    int ok = nm->state == NAME_HELD && (!nm->want || batch_open_locked(nm)) &&
             !hold_lost_locked(nm) && hold_use_locked(nm);
    if (ok && nm->users++ == 0 && nm->batch_end_ns != 0)
        nm->busy_ns = dm_now_ns();
    dm_unlock(&nm->mu);
    if (ok)
        tl_note(nm, 1);
    return ok;
}

/* The name is FREE, nm->mu held (let go on return): this thread takes the
 * cluster hold for the process (ACQUIRING, then HELD with it as the one
 * user, or FREE again on failure). Returns hold_acquire's result. */
int name_take(struct dm_name *nm, unsigned long me, enum dm_lock_mode mode,
              const struct timespec *deadline, int *dead)
{
    nm->state = NAME_ACQUIRING;
    dm_unlock(&nm->mu);
    int more = 0, held = 0, contended = 0;
    int r = hold_acquire(nm, me, mode, deadline, dead, &more, &held, &contended);
    dm_lock(&nm->mu);
    if (r == 0) {
        nm->state = NAME_HELD;
        nm->held = held;
        nm->users = 1;
        nm->busy_ns = dm_now_ns();
        nm->batch_end_ns = held && contended && batching(nm)
                           ? nm->busy_ns + mapped_cfg->batch_ms * 1000000LL : 0;
        if (!held) {
            /* A local-only hold (on_redis_down = "local", no connection)
             * is for the outage: new threads step aside so that it drains
             * and the next lock asks Redis again. */
            more = 1;
        }
        if (more && !nm->want) {
            /* Others queue behind this grant: their wants went to the
             * previous holder. */
            nm->want = 1;
            nm->want_ms = dm_now_ms();
        }
    } else {
        nm->state = NAME_FREE;
    }
    dm_cv_broadcast(&nm->cv);
    dm_unlock(&nm->mu);
    if (r == 0)
        tl_note(nm, 1);
    return r;
}

/* Joins the process's hold of the name for a thread that holds the real
 * mutex now, taking the cluster lock when the process has none. Returns 0,
 * EBUSY, ETIMEDOUT, EAGAIN, or DM_YIELD: another process waits and this
 * thread should step aside (give its real mutex back and name_wait_turn).
 * `no_yield`: the thread may not give its mutex back (a robust mutex it got
 * with EOWNERDEAD). */
int name_join(struct dm_name *nm, unsigned long me, enum dm_lock_mode mode,
              const struct timespec *deadline, int *dead, int no_yield)
{
    *dead = 0;
    dm_lock(&nm->mu);
    for (;;) {
        if (nm->state == NAME_HELD) {
            int lost = hold_lost_locked(nm);
            int wanted = nm->want && !batch_open_locked(nm);
            if (nm->users == 0 && (wanted || lost)) {
                /* Kept after its last unlock (cache mode), but another
                 * process asked, or it was lost: go round. */
                nm->state = NAME_RELEASING;
                dm_unlock(&nm->mu);
                hold_release(nm);
                dm_lock(&nm->mu);
                continue;
            }
            if ((wanted || lost) && !no_yield && !tl_holds(nm)) {
                if (lost && !nm->want) {
                    nm->want = 1;       /* drain the users, then take it anew */
                    nm->want_ms = dm_now_ms();
                }
                /* A lost hold excludes nobody: no new thread joins it,
                 * however long its users take to drain. */
                if (lost || dm_now_ms() - nm->want_ms < DM_YIELD_MAX_MS) {
                    dm_unlock(&nm->mu);
                    tl_contended = 1;
                    return mode == DM_TRYLOCK ? EBUSY : DM_YIELD;
                }
                if (!nm->yield_logged) {
                    nm->yield_logged = 1;
                    dm_warn("lock %s: another process has waited %d ms while threads of this "
                            "process keep the lock busy; letting new threads in rather than "
                            "risk a deadlock (a thread that steps aside may hold what the "
                            "others need)", nm->cl->name, DM_YIELD_MAX_MS);
                }
            }
            if (!hold_use_locked(nm))
                continue;               /* found lost while kept: go round */
            if (nm->users++ == 0 && nm->batch_end_ns != 0)
                nm->busy_ns = dm_now_ns();
            dm_unlock(&nm->mu);
            tl_note(nm, 1);
            return 0;
        }
        if (nm->state == NAME_FREE) {
            if (grace_wait_locked(nm, mode, deadline))
                continue;
            return name_take(nm, me, mode, deadline, dead);
        }
        /* Another thread has a round trip in flight for the name. */
        tl_contended = 1;
        if (mode == DM_TRYLOCK) {
            dm_unlock(&nm->mu);
            return EBUSY;
        }
        if (deadline) {
            if (dm_cv_timedwait(&nm->cv, &nm->mu, deadline) == ETIMEDOUT &&
                (nm->state == NAME_ACQUIRING || nm->state == NAME_RELEASING)) {
                dm_unlock(&nm->mu);
                return ETIMEDOUT;
            }
        } else {
            dm_cv_wait(&nm->cv, &nm->mu);
        }
    }
}

/* A thread that stepped aside waits until the hold has gone round (or the
 * yield bound passed). Returns 0 or ETIMEDOUT. */
int name_wait_turn(struct dm_name *nm, const struct timespec *deadline)
{
    int r = 0;
    dm_lock(&nm->mu);
    for (;;) {
        if (nm->state != NAME_HELD || nm->users == 0)
            break;
        int lost = hold_lost_locked(nm);
        if (!lost && (!nm->want || dm_now_ms() >= nm->want_ms + DM_YIELD_MAX_MS))
            break;
        if (deadline && dm_ts_passed(deadline)) {
            r = ETIMEDOUT;
            break;
        }
        /* A lost hold is waited out (users leaving wake us); a wanted one
         * for the step-aside bound at most. */
        struct timespec ts;
        dm_deadline_at(&ts, lost ? dm_now_ms() + DM_YIELD_MAX_MS : nm->want_ms + DM_YIELD_MAX_MS);
        if (deadline && dm_ts_before(deadline, &ts))
            ts = *deadline;
        dm_cv_timedwait(&nm->cv, &nm->mu, &ts);
    }
    dm_unlock(&nm->mu);
    return r;
}

/* Ends one thread's hold of one mutex of the name; the last user releases
 * the cluster lock (or, caching, keeps it). Returns EPERM when the hold
 * had been lost meanwhile. */
int name_leave(struct dm_name *nm)
{
    dm_lock(&nm->mu);
    if (nm->state != NAME_HELD || nm->users == 0) {
        dm_unlock(&nm->mu);
        return 0;
    }
    tl_note(nm, -1);
    if (--nm->users > 0) {
        int lost = hold_lost_locked(nm);
        dm_cv_broadcast(&nm->cv);
        dm_unlock(&nm->mu);
        return lost ? EPERM : 0;
    }
    if (!nm->held) {
        nm->state = NAME_FREE;          /* a local-only hold (on_redis_down = "local") */
        dm_cv_broadcast(&nm->cv);
        dm_unlock(&nm->mu);
        return 0;
    }
    if (nm->cl->cache && nm->want_subscribed && !nm->want && !mapped_torn_down &&
        !hold_lost_locked(nm)) {
        __atomic_store_n(&nm->hold.idle, 1, __ATOMIC_SEQ_CST);
        dm_cv_broadcast(&nm->cv);
        dm_unlock(&nm->mu);
        return 0;                       /* cached: kept until another process asks */
    }
    long long now;                      /* batch_open_locked's test, with its one clock read */
    if (nm->batch_end_ns != 0 && (now = dm_now_ns()) < nm->batch_end_ns &&
        now - nm->busy_ns < mapped_cfg->batch_hold_us * 1000LL && !mapped_torn_down &&
        !hold_lost_locked(nm) && linger_arm_locked(nm, now)) {
        __atomic_store_n(&nm->hold.idle, 1, __ATOMIC_SEQ_CST);
        dm_cv_broadcast(&nm->cv);
        dm_unlock(&nm->mu);
        return 0;                       /* lingering: the batch may go on */
    }
    nm->state = NAME_RELEASING;
    dm_unlock(&nm->mu);
    /* The round trip: its I/O must not be a cancellation point (the
     * branches above reach none). */
    int cs;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);
    int r = hold_release(nm);
    pthread_setcancelstate(cs, NULL);
    return r;
}

/* Another process wants a lock this process holds or keeps (a want
 * notice, in the store's event thread). A kept hold nobody is inside is given
 * up now; otherwise when its last user leaves. */
static void on_want(void *arg)
{
    struct dm_name *nm = arg;
    in_shim++;
    dm_lock(&nm->mu);
    if (nm->state == NAME_HELD && nm->users == 0) {
        nm->state = NAME_RELEASING;
        nm->want = 1;                   /* a handover: hold_release notes it */
        dm_unlock(&nm->mu);
        hold_release(nm);
    } else {
        if (nm->state != NAME_FREE && !nm->want) {
            nm->want = 1;
            nm->want_ms = dm_now_ms();
            dm_cv_broadcast(&nm->cv);
        }
        dm_unlock(&nm->mu);
    }
    in_shim--;
}

