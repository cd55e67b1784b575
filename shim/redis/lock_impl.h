/* lock_impl: what the files of the lock protocol over Redis share (lock.c: the
 * records and the scripts; resend.c: releases kept for a failover and the
 * thread that sends them again; release.c: releases written without
 * waiting and the thread that reads their replies). Not for other modules:
 * they see lock.h.
 *
 * Calls run one way: release.c uses resend.c and lock.c, resend.c uses
 * lock.c, lock.c neither (a reply written without waiting comes back
 * through struct rl_late's function, which release.c sets). */
#ifndef DM_RLOCK_IMPL_H
#define DM_RLOCK_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "lock.h"
#include "config.h"
#include "policy.h"
#include "redis.h"
#include "util.h"

#define DM_RELEASE_TIMEOUTS 3   /* a release keeps trying for this many command timeouts */

/* The request id "<owner>|<wait id>" (rl_member_of), with its NUL. */
#define DM_MEMBER_MAX (DM_OWNER_MAX + 24)

/* What release.lua answers. */
enum release_reply { RELEASE_NOT_HELD = 0,      /* the hold was lost (lease expired) */
                     RELEASE_DONE = 1,          /* released, or already by this hold */
                     RELEASE_STILL_HELD = 2,    /* a nested count of another client */
                     RELEASE_GONE_WITH_DATA = 3 };  /* not held: lost with the server's
                                                 * data, granted to nobody since */

extern const struct dm_config *rl_cfg;  /* dm_rlock_init's */
/* The interned records, and the mutex of the table, the records' refs,
 * their kept lists (l->kept) and release.c's list of releases unread. */
extern pthread_mutex_t rl_locks_mu;
extern struct dm_htab rl_locks;
extern size_t rl_kept_lists;            /* records with a kept list (rl_locks_mu) */

/* rl_locks_mu held: drops a reference; 1 when it was the last (the record
 * is out of the table then: rl_lock_free it, without rl_locks_mu). */
int rl_lock_unref_locked(struct dm_rlock *l);
/* A record out of the table: no one else can reach it (not under
 * rl_locks_mu: notify may wait for a handler). */
void rl_lock_free(struct dm_rlock *l);

/* The request id "<owner>|<wait id>" into member (DM_MEMBER_MAX bytes). */
void rl_member_of(char *member, const char *owner, unsigned long wait_id);
/* What a failed call's error is to policy.c: no connection, no reply, the
 * wrong node, refused by the server, or other. */
enum dm_fail rl_fail_of(enum dm_redis_err e);

/* release.lua for l's hold `token`, waited for and retried (lock.c says
 * for how long). `request` ("<owner>|<wait id>", or NULL) names the lock
 * call whose grant it ends (a later grant of the same owner and token is
 * left alone); *done (not NULL) is set when the server released the hold;
 * until_ms (not 0): a release sent again after a failover, tried until
 * then only, its failure a warning. 0, EPERM (not held), ESTALE (lost with
 * the server's data) or EIO (given up, logged). */
int rl_release_waited(struct dm_rlock *l, const char *owner, uint64_t token,
                      const char *request, long long until_ms, int *done);

/* A release written without waiting: `done` is called once, in the thread
 * that read the reply (any thread of the process), with release.lua's
 * answer (enum release_reply) or -1 when there is none (no reply, an error
 * reply: `why` says which; `noreply` when nothing came back). */
struct rl_late {
    void (*done)(struct rl_late *x, long v, const char *why, int noreply);
};
/* Writes release.lua for request `member` without waiting: 0 when
 * written (x->done follows), else what dm_redis_script_nowait said (x is
 * the caller's again; the release may have gone out whole all the same). */
int rl_release_write(struct dm_rlock *l, const char *owner, uint64_t token,
                     const char *member, struct rl_late *x);

/* resend.c, for release.c and lock.h's dm_rlock_release_hold:
 * nothing else. */

#endif
