/* rlock: the lock protocol over Redis (docs/modules.md, "One lock call"),
 * the Redis store's half of store.h: the interned lock records; acquire (reentrant hash with a lease,
 * fencing token, owner-dead detection), waiting on release notices and
 * handovers (a fair waiter on its own connection: wconn.h), release; the
 * owner identity of this process. Its other files: release.c (releases
 * not waited for, and their reader thread), resend.c (releases kept for a
 * failover, and the resender thread), cond_publish.c (a cond's signal and
 * the conds' outage backoff), policy.h (what a failure means for a lock
 * call); the counters are stats.h's. Independent of pthread_mutex_t: a
 * test drives it with a real Redis and no LD_PRELOAD. Blocking calls; any
 * thread may call them. */
#ifndef DM_RLOCK_H
#define DM_RLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "keys.h"
#include "stats.h"
#include "store.h"
#include "util.h"

#define DM_WAIT_CAP_MS   1000   /* longest sleep between attempts without a notice */
#define DM_BACKOFF_MIN_MS 50    /* first retry after Redis failed us */
#define DM_BACKOFF_MAX_MS 2000
#define DM_DOWN_LOG_EVERY_MS 5000
#define DM_QUEUE_TTL_MS  (3 * DM_WAIT_CAP_MS)   /* a fair waiter silent this long is dead */
/* The setnx protocol's waits between attempts (partner.c): the first
 * DM_SETNX_RETRY_MIN_MS, doubling to DM_SETNX_RETRY_MAX_MS, each drawn
 * in [half, all] of it; a dmutex release's notice starts it over. */
#define DM_SETNX_RETRY_MIN_MS 2
#define DM_SETNX_RETRY_MAX_MS 25

/* One lock name, interned: every caller naming "x" gets the same record
 * while anyone holds a reference to it (dm_rlock_get/put). It keeps
 * no key strings: each is built from the name when a call needs it
 * (dm_rlock_key; keys.h has the layout). The notify channels are
 * made when first needed, through the accessors below (NULL until then). */
struct dm_rlock {
    struct dm_hnode node;       /* first: the table of records (util.h) */
    struct dm_store_lock pub;   /* what store.h shows: name, counters, modes */
    struct dm_chan *chan;        /* release notices: dm_rlock_chan */
    struct dm_chan *wchan;       /* handovers to this process: dm_rlock_wchan */
    struct dm_chan *wantchan;    /* want notices: made by dm_rlock_mode */
    struct dm_conn *wconn;      /* a fair waiter's own connection subscribed to its
                                   wait channel, kept between waits (wconn.h) */
    struct dm_kept *kept;       /* Sentinel or Redis Cluster: its last unlocks'
                                   releases, kept for a failover (resend.c; under
                                   the table's mutex) */
    unsigned long wait_ids;
    unsigned long partner_id;   /* a partner protocol: the hold id of the process's hold
                                   (its token "<owner>|<id>"; atomic; partner.c) */
    struct dm_chan *pchan;      /* the redisson protocol: Redisson's release channel
                                   (made on first need; partner.c) */
    int slot;           /* Redis Cluster: the slot of every key of the name; -1 otherwise */
    unsigned refs;      /* under the table's mutex */
    int releases_unread;        /* releases written without waiting whose reply is
                                   not settled yet (atomic; release.c) */
    void (*want_fn)(void *arg); /* want_watch's (set before the want channel's handler) */
    void *want_arg;
    char name[];
};

/* The longest key or channel of a name (keys.h), with its NUL: a
 * namespace and a name of DM_NAME_MAX bytes each, the hash tag, the
 * longest suffix, and for the handover channel a process id. */
#define DM_RLOCK_KEY_MAX (2 * DM_NAME_MAX + 48)

/* Writes key `k` of l (dm_keys_build with the config's namespace) into
 * buf, snprintf-style; DM_KEY_WAIT gives this process's own handover
 * channel (the prefix and its process id). Returns the key's length. No
 * I/O, no allocation. */
size_t dm_rlock_key(const struct dm_rlock *l, enum dm_key k, char *buf, size_t len);

/* The Redis record of a store.h record. */
static inline struct dm_rlock *dm_rlock_of(struct dm_store_lock *l)
{
    return (struct dm_rlock *)((char *)l - offsetof(struct dm_rlock, pub));
}

/* The counters of l's name (dm_store_counts). */
static inline struct dm_stats *dm_rlock_counts(struct dm_rlock *l)
{
    return dm_store_counts(&l->pub);
}


/* The Redis store's init (dm_store_init calls it): keeps the config,
 * sets up the connections' addresses. No I/O. */
void dm_rlock_init(const struct dm_config *cfg);

/* The interned record for `name`, with one more reference (O(1), no I/O);
 * NULL on ENOMEM. */
struct dm_rlock *dm_rlock_get(const char *name);

/* The same record for a listed condition variable's name (conds): its
 * keys give the cond's channel, and the metrics show it as a cond, not as a
 * lock (a name used for both is shown as both). */
struct dm_rlock *dm_rlock_cond_get(const char *name);

/* Drops a reference. The last one frees the record (not its counters:
 * see struct dm_name_stats) and drops its notify channels
 * (unsubscribed by the subscriber thread). The caller must be the
 * last user: no acquire or release of `l` in progress or to come, no hold
 * of it with the watchdog, and no handler of its channels that uses memory
 * about to go (dm_notify_set_handler(ch, NULL, NULL) first: it waits for a
 * call in progress). Must not be called holding a lock a handler takes.
 * NULL is ignored. */
void dm_rlock_put(struct dm_rlock *l);

/* The lock's notify channels, made (and held until the last put) on first
 * call; NULL out of memory (waits then poll). The want channel has no
 * accessor: dm_rlock_mode makes it when it turns wants on, and
 * l->wantchan is read directly from then on. */
struct dm_chan *dm_rlock_chan(struct dm_rlock *l);
struct dm_chan *dm_rlock_wchan(struct dm_rlock *l);

/* Records alive, and the chain steps all lookups took so far: for tests. */
struct dm_htab_stats dm_rlock_stats(void);

/* Sentinel, Redis Cluster: the rounds the release resender has finished,
 * each after a move of the primary or a change of the slot map (its
 * releases sent again), and the records that keep releases for a
 * failover now (each list freed a lease or two after its last release):
 * for tests. */
unsigned long dm_rlock_resend_rounds(void);
size_t dm_rlock_kept_lists(void);

/* Fair mode (queue, FIFO handover), lock caching, and want notices (cache
 * mode, or a name several mutexes share) for a name; any entry asking for
 * one turns it on for the process, for as long as the record lives.
 * Caching implies wants; turning wants on makes the want channel now; out
 * of memory both stay off (logged). */
void dm_rlock_mode(struct dm_rlock *l, int fair, int cache, int wants);

/* Makes `l` an rwlock's (rwlocks entries): read holds beside the write
 * hold in every script, writers queue (fair) and waiters announce wants,
 * so a process whose threads keep a hold busy lets a waiting writer in.
 * A name is a mutex's or an rwlock's, never both (config refuses it). */
void dm_rlock_rwlock(struct dm_rlock *l);



/* The partner protocols, setnx and redisson (partner.c; store.h's
 * lock_protocol, docs/interop.md): store.c's acquire and every release of
 * a record that speaks one. The acquire has dm_rlock_acquire's contract,
 * but grants token 0 and waits by retrying (setnx: see
 * DM_SETNX_RETRY_MIN_MS) or for Redisson's release channel (redisson).
 * The release (waited for, and retried as dm_rlock_release) ends the hold
 * of lock call hold_id (the grant's wait_id; 0: the record's current
 * hold): 0, EPERM (the key was gone or another client's), or EIO. */
int dm_partner_acquire(struct dm_rlock *l, const char *owner, const struct timespec *deadline,
                       int flags, struct dm_grant *g);
int dm_partner_release(struct dm_rlock *l, const char *owner, unsigned long hold_id);

/* Acquires `l` for `owner`, waiting for releases (notices, or at most
 * DM_WAIT_CAP_MS / the holder's remaining lease between attempts) until
 * `deadline` (CLOCK_MONOTONIC, NULL: no limit). Through a Redis outage it
 * retries with capped exponential backoff and jitter, logging every few
 * seconds, unless on_redis_down says otherwise; "local" applies only when
 * no connection could be made (an error reply is retried, or EAGAIN under
 * "error"). A request whose reply never came is withdrawn (and voided, in
 * case the server runs it later) before another is sent or the call
 * returns, so no failed call leaves a grant behind.
 * Returns 0 (g filled), EBUSY (DM_ACQ_TRY and held elsewhere, or any Redis
 * failure), ETIMEDOUT, or EAGAIN (Redis failed and on_redis_down = "error"). */
int dm_rlock_acquire(struct dm_rlock *l, const char *owner,
                       const struct timespec *deadline, int flags, struct dm_grant *g);

/* Ends the hold `owner` got with fencing token `token`. Safe to retry: a
 * release whose reply was lost is recognised, even after the lock has
 * passed to others since (release.lua). Returns 0, EPERM when the
 * hold was no longer there (its lease expired: it was lost), ESTALE when
 * it was not there because the server lost the lock's data after the
 * grant (a restart without persistence, an older snapshot, a failover:
 * the lock's epoch names another server run) and has granted the lock to
 * nobody since, or EIO when Redis could not be reached within a few
 * command timeouts (the lease will run out on its own). */
int dm_rlock_release(struct dm_rlock *l, const char *owner, uint64_t token);

/* dm_rlock_release of the hold `owner` got through request `wait_id`
 * (dm_grant), naming that request (not for an rwlock, whose read release
 * is not told apart by it): a later grant of the same owner under the same
 * token is left alone, so that with Sentinel the release can be kept and
 * sent again after a failover (lock.c). An unlock's release. */
int dm_rlock_release_hold(struct dm_rlock *l, const char *owner, uint64_t token,
                            unsigned long wait_id);


/* dm_rlock_release without waiting for the reply: the release of the
 * hold `owner` got with `token` through request `wait_id` (dm_grant) is
 * written and the call returns; the reply is read before that
 * connection's next command, by the release reader thread once it sat
 * unread on an idle connection for a tick (started by the first call;
 * when it cannot start, the release is waited for), or at
 * dm_rlock_flush or dm_rlock_flush_bounded (redis.h). What the
 * reply says is acted on then, by the thread that reads it: not held ->
 * lost(l, owner, token, how); no reply, an error reply or NOSCRIPT ->
 * dm_rlock_release, retried as usual in that thread. The release names
 * its request, so a grant of the same owner sent after it (on another
 * connection, which may overtake it) is not released by it. Returns at
 * once with dm_rlock_release's result where a verdict needs the reply
 * first (Sentinel: ROLE; Redis Cluster: MOVED; an rwlock), or when the
 * request cannot be written. */
int dm_rlock_release_nowait(struct dm_rlock *l, const char *owner, uint64_t token,
                              unsigned long wait_id, long long lease_end_ms,
                              dm_store_lost_fn lost);

/* Reads every release reply still due (dm_rlock_release_nowait) and acts
 * on it: at exit, so that each has run, or been retried, before the
 * process ends. */
void dm_rlock_flush(void);

/* dm_rlock_flush before the process image ends (exec, _exit), done by
 * rlock's release reader thread and waited for at most a release's
 * retry budget plus one command timeout (4 s by default): the caller may
 * be a signal handler that interrupted this very thread inside the shim
 * or malloc, where reading the replies itself could deadlock. Only
 * nanosleep(2) and atomics here, one write(2) to wake the reader, and a
 * log line past the bound.
 * Returns at once when no release is unread. A flush that took longer is
 * logged (the locks it did not free free themselves at their lease's
 * end). Not in a vfork child (it shares the parent's memory): the
 * caller's to tell. */
void dm_rlock_flush_bounded(void);

/* A condition variable's signal (broadcast = 0) or broadcast to every
 * process: one PUBLISH of "<process id> signal" or "<process id>
 * broadcast" on l's NS:{NAME}:cond channel (l is the record of the cond's
 * name), awaited on a pooled connection; a failure faster than any timeout
 * (a dead pooled connection, a refused connect) is tried once more on a new
 * connection. Returns how many subscribers got it (>= 0), or -1 when it
 * reached nobody: Redis could not be reached or refused, or did not answer
 * a moment ago (dm_rlock_cond_down: not tried); logged at warning every
 * few seconds with the name, the address and the cause, and counted
 * (cond_lost). Remote waiters then wake at their deadline or their
 * subscriber's reconnect. */
long dm_rlock_cond_publish(struct dm_rlock *l, int broadcast);

/* Condition variables while Redis is down: the outcome of a Redis call for
 * cond name l (a publish, a waiter's subscription; `took_ms` what it cost)
 * and whether one failed a moment ago on l's node (the server; with Redis
 * Cluster the primary of l's slot). After a failure none is tried there
 * again for a backoff (DM_BACKOFF_MIN_MS doubling, at least twice took_ms,
 * at most DM_COND_DOWN_MAX_MS); a success ends it. Lock-free, no I/O. */
#define DM_COND_DOWN_MAX_MS 5000
void dm_rlock_cond_outcome(const struct dm_rlock *l, int ok, long took_ms);
int dm_rlock_cond_down(const struct dm_rlock *l);

/* Around fork (startup's one pthread_atfork, in its lock order): prepare
 * takes the lock table's mutex, so that the child never sees the table
 * half rebuilt; parent gives it back. The child handler runs after
 * notify's: it gives each record this process's new wait channel. */
void dm_rlock_atfork(enum dm_fork_phase phase);
/* The same for release.c (the release reader's mutex; the child starts
 * its own reader and gives back the references of the parent's releases
 * unread) and resend.c (the resender's mutex; the child starts its own
 * resender and gives back those of a round in progress). Both come before
 * dm_rlock_atfork in the Redis store's order (store.c): their child handlers run after
 * rlock's, which has made the table's mutex anew. */
void dm_release_atfork(enum dm_fork_phase phase);
void dm_resend_atfork(enum dm_fork_phase phase);

/* store.h's renew for Redis (renew.c): renew.lua for each hold, in one
 * pipeline on the renewal thread's own connection (Redis Cluster: one per
 * node); with Sentinel ROLE before a loss counts, with min_replicas one
 * WAIT before a renewal counts. Called by the watchdog's renewal thread
 * only. */
void dm_rlock_renew(const struct dm_renew *holds, size_t n, enum dm_renewal *res,
                    long long *sent_ms);
/* store.h's describe: the process's record at NS:who:{<process id>}. */
int dm_rlock_describe(const char *text, enum dm_describe how);
/* The fork child closes the renewal connection's socket (the thread is
 * the parent's). */
void dm_renew_atfork(enum dm_fork_phase phase);

#endif
