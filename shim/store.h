/* store: the interface between what a mapped lock means (mapped, watchdog:
 * holds and shares, batches, fairness, leases and their deadlines, fencing,
 * the on_redis_down and on_lease_lost policy) and the store that keeps the
 * locks. Redis (shim/redis/) is its first implementation; above this
 * header nothing includes hiredis or knows a key, a channel or a script.
 * A backend fills struct dm_store_ops; startup picks one (dm_store_init)
 * before the first lock. docs/design.md, "The store interface", is the
 * contract a second backend implements: what each call must guarantee,
 * not how Redis does it.
 *
 * Every call but those marked "no I/O" may block for the store's timeouts;
 * any thread may call them. The store's own threads (Redis: the notice
 * subscriber, the release reader, the resender) are its business. */
#ifndef DM_STORE_H
#define DM_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "config.h"
#include "stats.h"
#include "util.h"

#define DM_OWNER_MAX     64

/* One lock name, interned by the store (lock_get): every caller naming
 * "x" gets the same record while anyone holds a reference. The store
 * embeds it in a record of its own; these fields are what the layer above
 * may read. fair, cache, wants and rw only ever go from 0 to 1 (lock_mode,
 * lock_rwlock). */
struct dm_store_lock {
    const char *name;
    struct dm_name_stats *counters;  /* the name's counters: they outlive the record */
    unsigned char fair;     /* queue waiters, hand over on release */
    unsigned char cache;    /* the holder keeps the lock until another process wants it */
    unsigned char wants;    /* other processes' wants reach want_watch's function */
    unsigned char rw;       /* an rwlock's: read holds beside the write hold */
    unsigned char protocol; /* enum dm_protocol (lock_protocol): dmutex's own layout, or
                               a partner's lock at the bare name (setnx, redisson) */
};

/* The counters of l's name, to count into: made on the first call (a
 * name that never counts anything has none); out of memory, a sink whose
 * counts nobody reads (logged once), and the next call tries again. */
static inline struct dm_stats *dm_store_counts(struct dm_store_lock *l)
{
    struct dm_stats *st = __atomic_load_n(&l->counters->st, __ATOMIC_ACQUIRE);
    return __builtin_expect(st != NULL, 1) ? st : dm_name_stats_make(l->counters);
}

struct dm_grant {
    uint64_t token;     /* fencing token of this hold */
    int owner_dead;     /* the previous holder's lease expired unreleased, or (forced)
                           `dmutex unlock --force` ended its hold */
    int forced;         /* owner_dead by a forced release: the store recorded it so */
    int local_only;     /* on_redis_down = "local" and the store was down: no store hold */
    long lease_ms;      /* lease the store set (the config's, for every grant) */
    int more_waiters;   /* handed over with other waiters queued behind */
    long long sent_ms;  /* CLOCK_MONOTONIC ms the lease runs from, no later than the
                           store's: when the request behind the grant was sent, or
                           for a handover its moment placed on our clock */
    int waited;         /* another holder had it first: the call waited (contended) */
    unsigned long wait_id;  /* the request the grant answered: release_nowait and
                               release_hold name it */
    int regranted;      /* the owner held it already: a retry, or the confirmation
                           of a handover */
};

#define DM_ACQ_TRY 1    /* one attempt only */
#define DM_ACQ_READ 2   /* an rwlock's read hold (l->rw): shared with other readers;
                           released by release like a write hold */

/* How a release found its hold gone. */
enum dm_gone {
    DM_GONE_LOST,       /* its lease cannot have run out: the store lost the
                         * hold some other way (deleted, evicted, a failover
                         * or restart after which the lock was granted
                         * again), at a moment not known */
    DM_GONE_EXPIRED,    /* the reply came at or after the hold's lease end:
                         * the lease may have run out by itself */
    DM_GONE_WITH_DATA   /* lost with the store's data after the grant, and
                         * nobody granted the lock since (ESTALE) */
};

/* Which of those a release's result `released` (EPERM or ESTALE) read at
 * this moment is, for a hold whose lease ends at lease_end_ms. No I/O. */
enum dm_gone dm_store_gone_how(int released, long long lease_end_ms);

/* The end of a hold that a release not waited for found lost, told by
 * the thread that read the reply: the caller's report. */
typedef void (*dm_store_lost_fn)(struct dm_store_lock *l, const char *owner, uint64_t token,
                                 enum dm_gone how);

/* What a renewal round learnt of one hold. */
enum dm_renewal { DM_RENEW_UNKNOWN = 0,   /* no verdict: an error, no reply, not acknowledged */
                  DM_RENEW_LOST,          /* the store no longer has the hold */
                  DM_RENEW_OK };          /* renewed for the config's lease_ms */

/* One hold to renew: lock, owner, and an rwlock's read hold or not. */
struct dm_renew {
    struct dm_store_lock *lock;
    const char *owner;
    int read;
};

/* A count of notices the store moves (a cond's signals); opaque. */
struct dm_chan;

/* A one-shot call the store's event thread makes at a CLOCK_MONOTONIC
 * time (mapped's lingering holds). The caller owns the record and keeps it
 * zeroed until its first arm; the fields are the store's. */
struct dm_timer {
    struct dm_timer *next;
    long long at_ns;
    void (*fn)(void *arg);
    void *arg;
    int armed;
};

/* ---- for the tools (dmutex ls, top, unlock, fresh) ---- */

/* What the store holds for one lock, read once (admin_list). */
struct dm_lock_row {
    char *name;             /* the lock name */
    const char *state;      /* "held", "free", "expired", "delayed", "forced", "read"
                               (an rwlock held by `readers` read holders) */
    char *owner;            /* the holder's owner id while held, else NULL */
    char *holds;            /* its hold count (decimal, from the store), else NULL */
    long long lease_ms;     /* ms left on the lease, -1 when none */
    char *token;            /* the fencing counter (decimal), NULL when absent */
    long long waiters;      /* fair queue length */
    long long listening;    /* processes listening for its release notices */
    long long readers;      /* an rwlock's read holders the store has (state "read"; an
                               expired one counts until the next acquire drops it) */
    char *node;             /* a store that spreads locks over nodes (Redis Cluster):
                               "host:port" of the node that keeps it; NULL otherwise */
    const char *protocol;   /* admin_partner's: "setnx", "redisson" (the lock on the
                               wire, config protocol); NULL: dmutex's own */
    long long lease_granted_ms; /* the backend's: the holder's lease as granted (etcd:
                               its process lease's TTL); 0 unknown (the holder's
                               record then says: Redis) */
    /* dm_who_join's (who.h), from the processes' records; NULL, -1, 0 when
     * none says: */
    char *who;              /* the holder, "host:pid program (thread)" */
    long long since_ms;     /* CLOCK_REALTIME ms its hold began */
    long long renewed_ago_ms; /* ms since its lease was last renewed */
    long renew_ms;          /* its renewal interval */
    struct dm_lock_waiter *waiting; /* processes waiting for it, oldest first by their
                               clocks */
    size_t nwaiting;
    struct dm_lock_waiter *reading; /* state "read": the read holders, as their records
                               say */
    size_t nreading;
};

/* A process waiting for a lock, as its record says (dm_who_join). */
struct dm_lock_waiter {
    char *owner;            /* "<process id>:<seq>" */
    char *who;              /* "host:pid program (thread)" */
    long long since_ms;     /* CLOCK_REALTIME ms its wait began */
};

/* Frees admin_list's rows (every backend's: malloc'ed strings). */
void dm_store_rows_free(struct dm_lock_row *rows, size_t n);

/* How a lock's last grant ended, as the store recorded it. */
enum dm_last_end { DM_LAST_NONE,        /* never granted, or released */
                   DM_LAST_EXPIRED,     /* its holder's lease ran out */
                   DM_LAST_EXPIRY_SEEN, /* an expired lease was seen: lock_delay_ms applies */
                   DM_LAST_KEPT_OFF,    /* kept off after a restart that lost its data */
                   DM_LAST_FORCED };    /* forced free (admin_force) */

/* The room a tools' call's message (said, err) needs: an address (a host
 * name up to 255 bytes), a key (a namespace and a name, DM_NAME_MAX each)
 * and the words around them. */
#define DM_STORE_MSG_MAX 2048

/* What admin_force did. */
struct dm_force {
    enum { DM_FORCE_REFUSED,    /* the lease is alive and force was 0 */
           DM_FORCE_RELEASED,   /* the hold ended: handed on or freed */
           DM_FORCE_NOT_HELD } verdict;
    char owner[256];                /* refused, released: the holder (another client's
                                       owner may be longer than ours) */
    char token[24];                 /* refused: its token; released: the old one ("" unknown) */
    long long lease_left_ms;        /* refused */
    long long new_token;            /* released: the fencing counter now */
    char next[256];                 /* released: the waiter it went to ("" nobody) */
    long long next_token;
    enum dm_last_end last;          /* not held */
};

/* What describe does with the process's record. */
enum dm_describe { DM_DESCRIBE_WRITE, DM_DESCRIBE_IDLE, DM_DESCRIBE_DELETE };
/* The exit's delete waits no longer than this for its answer (the record
 * expires a lease later anyway): a stalled store does not hold the exit
 * up by a command timeout. */
#define DM_DESCRIBE_DELETE_MS 200

/* A backend. Every entry is required. */
struct dm_store_ops {
    const char *name;       /* "redis" */
    /* Keeps the config (it outlives every lock). No I/O. */
    void (*init)(const struct dm_config *cfg);
    /* Where the store is, for log lines ("127.0.0.1:6379", "sentinel
     * mymaster"); no I/O. */
    const char *(*where)(void);

    /* The interned record for `name` (a lock's, or a listed cond's: the
     * metrics show it as such), with one more reference; NULL on ENOMEM. No
     * I/O. put drops one; the last frees the record (not its counters).
     * The caller of the last put must be the last user: no call on l in
     * progress or to come, no hold of it with the watchdog, want_unwatch
     * done. NULL is ignored. */
    struct dm_store_lock *(*lock_get)(const char *name);
    struct dm_store_lock *(*cond_get)(const char *name);
    void (*lock_put)(struct dm_store_lock *l);
    /* Fair mode (queue, FIFO handover), lock caching, want notices (cache
     * mode, or a name several mutexes share): any call asking for one turns
     * it on for as long as the record lives; caching implies wants; out of
     * memory both stay off (logged). rwlock makes l an rwlock's (fair, with
     * wants). No I/O. */
    void (*lock_mode)(struct dm_store_lock *l, int fair, int cache, int wants);
    void (*lock_rwlock)(struct dm_store_lock *l);
    /* The protocol l speaks on the wire (enum dm_protocol), set before any
     * acquire of l. DM_PROTOCOL_SETNX (docs/interop.md): the lock is a
     * string at the bare name holding the holder's token (SET NX PX,
     * compare-and-PEXPIRE, compare-and-DEL), shared with other clients;
     * it has no fair mode, caching or want notices (lock_mode leaves them
     * off), its grants carry token 0 (no fencing token), its waits retry
     * on a bounded jittered interval (the partner publishes nothing) and
     * its releases are all waited for. DM_PROTOCOL_REDISSON: Redisson's
     * RLock, a hash at the bare name with one field per holder (count 1
     * for dmutex's hold), renewed while the field is there, released with
     * a DEL and a publish on redisson_lock__channel:{NAME}, which its
     * waiters wait for; otherwise as setnx (no fair mode, caching, want
     * notices or fencing token; waited releases). 0, or ENOTSUP when the backend
     * does not speak it (etcd). The caller (mapped, under the name
     * table's mutex) sets it while nothing else uses l's lock. No I/O. */
    int (*lock_protocol)(struct dm_store_lock *l, int protocol);

    /* Acquires l for `owner` ("<process id>:<seq>", dm_store_owner) until
     * `deadline` (CLOCK_MONOTONIC, NULL: none), waiting for notices or
     * handovers, never on a fixed poll; through an outage retrying with
     * backoff unless on_redis_down says otherwise ("local" only when the
     * store could not be reached at all). A request whose reply never came
     * is withdrawn before another is sent or the call returns: no failed
     * call leaves a grant behind. Returns 0 (g filled), EBUSY (DM_ACQ_TRY
     * and held elsewhere, or a store failure under DM_ACQ_TRY), ETIMEDOUT,
     * or EAGAIN (the store failed and on_redis_down = "error"). */
    int (*acquire)(struct dm_store_lock *l, const char *owner,
                   const struct timespec *deadline, int flags, struct dm_grant *g);
    /* Ends the hold `owner` got with `token`; safe to retry (a release
     * whose reply was lost is recognised). 0, EPERM (the hold was gone: its
     * lease ran out), ESTALE (lost with the store's data, granted to
     * nobody since), EIO (the store could not be reached: the lease runs
     * out on its own). release_hold names the grant's request (wait_id),
     * so a later grant of the same owner and token is left alone. */
    int (*release)(struct dm_store_lock *l, const char *owner, uint64_t token);
    int (*release_hold)(struct dm_store_lock *l, const char *owner, uint64_t token,
                        unsigned long wait_id);
    /* release_hold without waiting for the reply: what the reply says is
     * acted on by whichever thread reads it (not held: lost(l, owner,
     * token, how); a failure: retried by the store's own thread, never
     * inside an unrelated call). Returns at once with release_hold's
     * result where a verdict needs the reply first. flush reads every
     * reply still due (at exit); flush_bounded does it from the store's
     * own thread and waits a bounded time (exec, _exit, possibly a signal
     * handler: only atomics, write(2) and nanosleep). */
    int (*release_nowait)(struct dm_store_lock *l, const char *owner, uint64_t token,
                          unsigned long wait_id, long long lease_end_ms, dm_store_lost_fn lost);
    void (*flush)(void);
    void (*flush_bounded)(void);

    /* One renewal round of n holds, each for the config's lease_ms: fills
     * res[0..n) (zeroed by the caller: DM_RENEW_UNKNOWN) and *sent_ms, the
     * CLOCK_MONOTONIC ms the round went out (after any connect: a lease it
     * renews runs from no earlier on the store). DM_RENEW_LOST only when
     * the store that grants the lock (the primary, acknowledged by
     * min_replicas) says the hold is gone. Called by the renewal thread
     * only; may block for a connect plus a few command timeouts. */
    void (*renew)(const struct dm_renew *holds, size_t n, enum dm_renewal *res,
                  long long *sent_ms);
    /* The process's record for the tools (who.h), under its process id in
     * the config's namespace. DM_DESCRIBE_WRITE: text replaces the last
     * one, expiring a lease after this write unless written again (a store
     * whose process lease keeps it ties it to that lease, kept alive while
     * anything is held); DM_DESCRIBE_IDLE: nothing more is held nor waited
     * for: no I/O, and nothing keeps it alive on its account any more (it
     * expires a lease after the last write); DM_DESCRIBE_DELETE: gone now
     * (the exit). The renewal thread calls it, and the exit path; a command
     * timeout at most. 0, or -1 (logged at debug; the next write tries
     * again). */
    int (*describe)(const char *text, enum dm_describe how);

    /* Calls fn(arg) in the store's event thread when another process wants
     * l (l->wants; its own wants are not told); returns 0 once the store
     * delivers them, else an errno (wants are then missed until a later
     * call succeeds). unwatch: on return a call of fn in progress has
     * ended and none will start. Must not be called holding a lock fn
     * takes. */
    int (*want_watch)(struct dm_store_lock *l, void (*fn)(void *arg), void *arg, long timeout_ms);
    void (*want_unwatch)(struct dm_store_lock *l);

    /* A listed cond's notices (l from cond_get): chan makes a reference
     * (NULL on ENOMEM), chan_put drops it. subscribe: 0 once the store
     * delivers the cond's signals, ETIMEDOUT after timeout_ms, EAGAIN at once
     * when the store was unreachable a moment ago. seq: the count; read it
     * before giving up the mutex. wait_until: until the count differs from
     * `seen` (0) or the deadline (ETIMEDOUT), a cancellation point; the count
     * also moves when delivery was interrupted. bump: a local signal (no
     * I/O). publish: a signal (broadcast = 0) or broadcast to every process;
     * how many got it, or -1 when it reached nobody (logged, counted).
     * outcome/down: the outage backoff of conds on l's server (no I/O). */
    struct dm_chan *(*cond_chan)(struct dm_store_lock *l);
    void (*chan_put)(struct dm_chan *ch);
    int (*chan_subscribe)(struct dm_chan *ch, long timeout_ms);
    unsigned long (*chan_seq)(struct dm_chan *ch);
    int (*chan_wait_until)(struct dm_chan *ch, unsigned long seen, const struct timespec *deadline);
    void (*chan_bump)(struct dm_chan *ch);
    long (*cond_publish)(struct dm_store_lock *l, int broadcast);
    void (*cond_outcome)(const struct dm_store_lock *l, int ok, long took_ms);
    int (*cond_down)(const struct dm_store_lock *l);

    /* The event thread's one-shot timers: fn(arg) at at_ns or soon after
     * (0, or the errno that kept the thread from starting); cancel: on
     * return a call in progress has ended. on_image_end sets, once, the
     * function that thread runs when the image ends; image_ends asks for
     * it and waits at most max_ms (exec, _exit, a signal handler: atomics,
     * write(2), nanosleep). */
    int (*timer_arm)(struct dm_timer *t, long long at_ns, void (*fn)(void *arg), void *arg);
    void (*timer_cancel)(struct dm_timer *t);
    void (*on_image_end)(void (*fn)(void));
    void (*image_ends)(long max_ms);

    /* Around fork, at the store's place in startup's lock order: prepare
     * takes the store's locks in its own order, parent and child give them
     * back in reverse. The child has no store thread and no connection, and
     * holds nothing (a new process id: dm_store_process_id). */
    void (*atfork)(enum dm_fork_phase phase);

    /* The tools' calls, on one connection of the tool's (after init):
     * connect (-1 with the cause in err), disconnect. list: every lock
     * of namespace ns (every name ever granted), sorted by name; 0 with
     * *rows and *n, or -1 with err. force: ends lock name's hold from
     * outside, deciding and releasing in one step on the store, so the
     * refusal cannot race a renewal; with force = 0 a hold whose lease is
     * alive is refused. A forced hold ends as a release would (the next
     * fair waiter gets it, the token moves past the old holder's) and is
     * recorded as lost (the holder's renewal and release find it so) and
     * as forced by `who`. 0 with *out, or -1 with err. fresh: declares
     * the store's lock data continuous (durable: every restart loses
     * nothing, checked now), so a lock first granted on this server run
     * waits no lease; 0 with what was declared in `said`, -2 with err when
     * the durability check refused (durable), -1 with err otherwise.
     * keys: the hidden `dmutex keys ...` verb (argv[0] "keys"), the store's
     * names of a lock's keys for the shell tests; an exit status. */
    int (*admin_connect)(char *err, size_t errlen);
    void (*admin_disconnect)(void);
    int (*admin_list)(const char *ns, struct dm_lock_row **rows, size_t *n, char *err,
                      size_t errlen);
    /* A partner protocol's lock `name` (config protocol: DM_PROTOCOL_SETNX,
     * _REDISSON), which no scan finds (its key is the bare name): into *row
     * (state "held" with owner the holder's token or field as written, and
     * its hold count, "free", or "other":
     * the key holds another type, not this protocol's lock), lease_ms its
     * expiry. 0, or -1 with err (ENOTSUP-like: the store cannot speak it). */
    int (*admin_partner)(const char *name, int protocol, struct dm_lock_row *row, char *err,
                         size_t errlen);
    /* Every process record (describe's) of namespace ns: *texts[0..*n),
     * malloc'ed, the array too. 0, or -1 with err. */
    int (*admin_who)(const char *ns, char ***texts, size_t *n, char *err, size_t errlen);
    int (*admin_force)(const char *ns, const char *name, int force, const char *who,
                       struct dm_force *out, char *err, size_t errlen);
    int (*admin_fresh)(const char *ns, int durable, char *said, size_t saidlen, char *err,
                       size_t errlen);
    int (*admin_keys)(int argc, char **argv);
    /* Does the store spread locks over nodes (Redis Cluster), so that a
     * row names its node (struct dm_lock_row's node)? No I/O. */
    int (*admin_sharded)(void);
};

/* The backends. */
extern const struct dm_store_ops dm_redis_store;
extern const struct dm_store_ops dm_etcd_store;

/* The store in use (dm_store_init's); NULL before. */
extern const struct dm_store_ops *dm_store;

/* The store cfg names: etcd with etcd endpoints, else Redis. No I/O. */
#define DM_STORE_OF(cfg) ((cfg)->etcd.nendpoints ? &dm_etcd_store : &dm_redis_store)

/* Picks `ops`, makes this process's id and calls ops->init(cfg). Once, at
 * start (tests: once per process). No I/O. */
void dm_store_init(const struct dm_config *cfg, const struct dm_store_ops *ops);
const struct dm_config *dm_store_config(void);

/* This process's random id (32 hex digits), new in every fork child. */
const char *dm_store_process_id(void);

/* Writes "<process id>:<seq>" into buf (DM_OWNER_MAX bytes). */
void dm_store_owner(char *buf, unsigned long seq);

/* startup's fork table entry: the new process id in the child, then the
 * store's own handlers. */
void dm_store_atfork(enum dm_fork_phase phase);

#endif
