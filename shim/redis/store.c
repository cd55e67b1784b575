/* store: the Redis store's entry in store.h's table (dm_redis_store): each
 * entry is the rlock, notify or renew call it names, on the Redis record
 * behind the interface's (dm_rlock_of); the want notices and the cond
 * channels, which the layer above sees only as store.h's, are made here
 * from the name's keys. */
#include "admin.h"
#include "lock.h"

#include <errno.h>
#include <string.h>

#include "log.h"
#include "net.h"
#include "notify.h"
#include "redis.h"
#include "sentinel.h"
#include "slots.h"

static struct dm_store_lock *pub_of(struct dm_rlock *l)
{
    return l ? &l->pub : NULL;
}

static struct dm_store_lock *r_lock_get(const char *name)
{
    return pub_of(dm_rlock_get(name));
}

static struct dm_store_lock *r_cond_get(const char *name)
{
    return pub_of(dm_rlock_cond_get(name));
}

static void r_lock_put(struct dm_store_lock *l)
{
    if (l)
        dm_rlock_put(dm_rlock_of(l));
}

static void r_lock_mode(struct dm_store_lock *l, int fair, int cache, int wants)
{
    /* A partner's lock has no queue and no want notices (store.h). */
    if (l->protocol == DM_PROTOCOL_DMUTEX)
        dm_rlock_mode(dm_rlock_of(l), fair, cache, wants);
}

static int r_lock_protocol(struct dm_store_lock *l, int protocol)
{
    if (protocol != DM_PROTOCOL_DMUTEX && protocol != DM_PROTOCOL_SETNX &&
        protocol != DM_PROTOCOL_REDISSON)
        return ENOTSUP;
    l->protocol = (unsigned char)protocol;
    return 0;
}

/* A partner protocol's record (setnx, redisson: partner.c). */
static int partner(const struct dm_store_lock *l)
{
    return l->protocol != DM_PROTOCOL_DMUTEX;
}

static void r_lock_rwlock(struct dm_store_lock *l)
{
    dm_rlock_rwlock(dm_rlock_of(l));
}

static int r_acquire(struct dm_store_lock *l, const char *owner, const struct timespec *deadline,
                     int flags, struct dm_grant *g)
{
    if (partner(l))
        return dm_partner_acquire(dm_rlock_of(l), owner, deadline, flags, g);
    return dm_rlock_acquire(dm_rlock_of(l), owner, deadline, flags, g);
}

static int r_release(struct dm_store_lock *l, const char *owner, uint64_t token)
{
    if (partner(l))
        return dm_partner_release(dm_rlock_of(l), owner, 0);
    return dm_rlock_release(dm_rlock_of(l), owner, token);
}

static int r_release_hold(struct dm_store_lock *l, const char *owner, uint64_t token,
                          unsigned long wait_id)
{
    if (partner(l))
        return dm_partner_release(dm_rlock_of(l), owner, wait_id);
    return dm_rlock_release_hold(dm_rlock_of(l), owner, token, wait_id);
}

static int r_release_nowait(struct dm_store_lock *l, const char *owner, uint64_t token,
                            unsigned long wait_id, long long lease_end_ms, dm_store_lost_fn lost)
{
    if (partner(l)) {
        /* Every partner release is waited for: its verdict, told as a late
         * one would be. */
        int r = dm_partner_release(dm_rlock_of(l), owner, wait_id);
        if (r == EPERM && lost)
            lost(l, owner, token, dm_store_gone_how(r, lease_end_ms));
        return r;
    }
    return dm_rlock_release_nowait(dm_rlock_of(l), owner, token, wait_id, lease_end_ms, lost);
}

/* A want notice on l's want channel: "<owner> ..." of the process that
 * wants it (acquire.lua); this process's own are not told. */
static void want_msg(void *arg, const char *msg, size_t len)
{
    struct dm_rlock *l = arg;
    const char *pid = dm_store_process_id();
    size_t n = strlen(pid);
    if (len > n && memcmp(msg, pid, n) == 0 && msg[n] == ':')
        return;
    void (*fn)(void *) = __atomic_load_n(&l->want_fn, __ATOMIC_ACQUIRE);
    fn(__atomic_load_n(&l->want_arg, __ATOMIC_ACQUIRE));
}

static int r_want_watch(struct dm_store_lock *pl, void (*fn)(void *arg), void *arg,
                        long timeout_ms)
{
    struct dm_rlock *l = dm_rlock_of(pl);
    if (!l->wantchan)
        return ENOMEM;      /* dm_rlock_mode could not make it (logged there) */
    /* Set before the handler (a call after a failed subscription sets the
     * same again while the handler may run: atomics). */
    __atomic_store_n(&l->want_arg, arg, __ATOMIC_RELEASE);
    __atomic_store_n(&l->want_fn, fn, __ATOMIC_RELEASE);
    dm_notify_set_handler(l->wantchan, want_msg, l);
    return dm_notify_subscribe(l->wantchan, timeout_ms);
}

static void r_want_unwatch(struct dm_store_lock *pl)
{
    struct dm_rlock *l = dm_rlock_of(pl);
    if (l->wantchan)
        dm_notify_set_handler(l->wantchan, NULL, NULL);     /* waits for a call in progress */
}

static struct dm_chan *r_cond_chan(struct dm_store_lock *l)
{
    char channel[DM_RLOCK_KEY_MAX];
    dm_rlock_key(dm_rlock_of(l), DM_KEY_COND, channel, sizeof channel);
    return dm_notify_chan(channel);
}

static long r_cond_publish(struct dm_store_lock *l, int broadcast)
{
    return dm_rlock_cond_publish(dm_rlock_of(l), broadcast);
}

static void r_cond_outcome(const struct dm_store_lock *l, int ok, long took_ms)
{
    dm_rlock_cond_outcome(dm_rlock_of((struct dm_store_lock *)l), ok, took_ms);
}

static int r_cond_down(const struct dm_store_lock *l)
{
    return dm_rlock_cond_down(dm_rlock_of((struct dm_store_lock *)l));
}

/* The Redis store's part of startup's lock order (docs/design.md, "Locks
 * and their order"): prepare walks it forward, parent and child backward. */
static void (*const fork_order[])(enum dm_fork_phase) = {
    dm_release_atfork, dm_resend_atfork, dm_rlock_atfork, dm_notify_atfork, dm_redis_atfork,
    dm_sentinel_atfork, dm_slots_atfork, dm_renew_atfork,
};
#define FORK_MODULES (sizeof fork_order / sizeof fork_order[0])

static void r_atfork(enum dm_fork_phase phase)
{
    if (phase == DM_FORK_PREPARE)
        for (size_t i = 0; i < FORK_MODULES; i++)
            fork_order[i](phase);
    else
        for (size_t i = FORK_MODULES; i-- > 0;)
            fork_order[i](phase);
}

const struct dm_store_ops dm_redis_store = {
    .name = "redis",
    .init = dm_rlock_init,
    .where = dm_redis_addr,
    .lock_get = r_lock_get,
    .cond_get = r_cond_get,
    .lock_put = r_lock_put,
    .lock_mode = r_lock_mode,
    .lock_rwlock = r_lock_rwlock,
    .lock_protocol = r_lock_protocol,
    .acquire = r_acquire,
    .release = r_release,
    .release_hold = r_release_hold,
    .release_nowait = r_release_nowait,
    .flush = dm_rlock_flush,
    .flush_bounded = dm_rlock_flush_bounded,
    .renew = dm_rlock_renew,
    .describe = dm_rlock_describe,
    .want_watch = r_want_watch,
    .want_unwatch = r_want_unwatch,
    .cond_chan = r_cond_chan,
    .chan_put = dm_notify_chan_put,
    .chan_subscribe = dm_notify_subscribe,
    .chan_seq = dm_notify_seq,
    .chan_wait_until = dm_notify_wait_until,
    .chan_bump = dm_notify_bump,
    .cond_publish = r_cond_publish,
    .cond_outcome = r_cond_outcome,
    .cond_down = r_cond_down,
    .timer_arm = dm_notify_timer_arm,
    .timer_cancel = dm_notify_timer_cancel,
    .on_image_end = dm_notify_on_image_end,
    .image_ends = dm_notify_image_ends,
    .atfork = r_atfork,
    .admin_connect = dm_admin_connect,
    .admin_disconnect = dm_admin_disconnect,
    .admin_list = dm_admin_list,
    .admin_who = dm_admin_who,
    .admin_partner = dm_admin_partner,
    .admin_force = dm_admin_force,
    .admin_fresh = dm_admin_fresh,
    .admin_keys = dm_admin_keys,
    .admin_sharded = dm_redis_cluster,
};
