/* elock: the etcd store's lock protocol (elock.c) and records. */
#ifndef DM_ETCD_ELOCK_H
#define DM_ETCD_ELOCK_H

#include "store.h"
#include "util.h"

struct dm_watch;

/* A lock name's record: store.h's part, and this process's key in the
 * lock's queue while it waits or holds (one request per name per process,
 * as mapped makes them). */
struct dm_elock {
    struct dm_hnode node;           /* first: the records' table */
    struct dm_store_lock pub;
    int refs;
    long long lease;                /* the hold's lease (its key's name); locks_mu */
    long long rev;                  /* the hold's token, 0: none; locks_mu */
    int read;                       /* the hold is an rwlock's read hold; locks_mu */
    char owner[DM_OWNER_MAX];
    /* The enqueue guard (etcd.h's NS#NAME#a<lease>): its mod_revision as
     * this process last saw it, under lease guard_lease (another lease:
     * 0, no such key yet). locks_mu. */
    long long guard_lease, guard_rev;
    /* A release that could not reach etcd, retried by the store's thread
     * (and by the next acquire first: a hold of the same lease has the
     * same key, which a late release would delete). locks_mu. */
    struct {
        int on, busy;
        int withdraw;               /* a place given up (token: its key's revision, 0
                                       unknown: the guard moved on, or a guarded delete) */
        uint64_t token;
        long long lease, end_ms;    /* the hold's lease end: etcd lets it go then */
        int read;
        int ran;                    /* a release's try may have run: its answer was lost */
        long delay_ms;
        char owner[DM_OWNER_MAX];
        dm_store_lost_fn lost;      /* NULL: nobody to tell (release_hold's) */
        struct dm_timer timer;
    } pend;
    struct dm_watch *want;          /* the queue's new keys, for want_watch */
    void (*want_fn)(void *arg);
    void *want_arg;
    char name[];
};

struct dm_elock *dm_elock_of(struct dm_store_lock *l);
struct dm_store_lock *dm_elock_get(const char *name);
struct dm_store_lock *dm_elock_cond_get(const char *name);
void dm_elock_put(struct dm_store_lock *l);
void dm_elock_mode(struct dm_store_lock *l, int fair, int cache, int wants);
void dm_elock_rwlock(struct dm_store_lock *l);
int dm_elock_acquire(struct dm_store_lock *l, const char *owner, const struct timespec *deadline,
                     int flags, struct dm_grant *g);
int dm_elock_release(struct dm_store_lock *l, const char *owner, uint64_t token);
/* release, what its failure leaves retried by the store's thread: 0 (also
 * when lost, told to lost), or EIO queued. lost NULL: EPERM returned. */
int dm_elock_release_queued(struct dm_store_lock *l, const char *owner, uint64_t token,
                            long long lease_end_ms, dm_store_lost_fn lost);
/* At exit: every queued release tried once more, then, with nothing
 * held, the process lease revoked (waiting keys go with it). */
void dm_elock_flush(void);
void dm_elock_flush_queued(void);
void dm_elock_renew(const struct dm_renew *holds, size_t n, enum dm_renewal *res,
                    long long *sent_ms);
int dm_elock_want_watch(struct dm_store_lock *l, void (*fn)(void *arg), void *arg, long timeout_ms);
void dm_elock_want_unwatch(struct dm_store_lock *l);
void dm_elock_atfork(enum dm_fork_phase phase);

#endif
