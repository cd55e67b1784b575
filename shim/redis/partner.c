/* partner: the acquire and release of the partner protocols
 * (docs/interop.md), the locks other languages' clients take at the bare
 * lock name (no namespace, no hash tag of dmutex's):
 *  - setnx: redis-py's Lock, redlock with one server, redsync with one
 *    pool, Jedis's SET NX PX: a string holding its holder's token, taken
 *    with SET NX PX, renewed with a compare-and-PEXPIRE (setnx_renew.lua)
 *    and released with a compare-and-DEL;
 *  - redisson: Redisson's RLock (Java Redisson, node-redisson): a hash with
 *    one field per holder (the hold count its value), taken while the key
 *    is not there, renewed while the field is there (redisson_renew.lua),
 *    released by a DEL and a publish of "0" on
 *    redisson_lock__channel:{NAME} (dm_keys_redisson_channel).
 * A record speaks one once mapped made it so (store.h's lock_protocol);
 * store.c sends its calls here; struct proto below holds what differs.
 *
 * The token of a hold (setnx's string, redisson's field) is "<owner>|<hold
 * id>" (the owner, then a number the record counts up per lock call,
 * l->wait_ids): unique per lock call of the process, so a late copy of an
 * old request never matches a later hold. The record keeps the id of its
 * current hold (l->partner_id) for the renewal round, which is told only
 * the owner. Nested holds stay in the process: a redisson field's count
 * is 1.
 *
 * What they do not have: a fencing token (grants carry 0), a queue, want
 * notices, releases written without waiting, the restart check. A setnx
 * waiter retries on a bounded, jittered interval (DM_SETNX_RETRY_MIN_MS
 * doubling to DM_SETNX_RETRY_MAX_MS, never past the holder's remaining
 * lease): its partners publish nothing; a release of ours publishes on the
 * name's dmutex release channel (not with Redis Cluster: that channel's
 * slot is not the key's), so dmutex waiters of the name retry at once. A
 * redisson waiter subscribes to the Redisson channel, where every
 * release, Redisson's and ours, publishes, and waits for it (at most
 * DM_WAIT_CAP_MS or the holder's remaining lease). A key of another type
 * at the name is never taken: it fails as a server refusal whose words
 * name the key and both protocols, and on_redis_down decides. Knows
 * nothing of pthread_mutex_t; owns nothing but these calls. */
#include "lock.h"
#include "lock_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "keys.h"
#include "log.h"
#include "notify.h"
#include "policy.h"
#include "redis.h"
#include "stats.h"
#include "util.h"

/* What differs between the partner protocols. Their scripts answer
 * alike (setnx_acquire.lua's and setnx_release.lua's headers). */
struct proto {
    const char *word;           /* the protocol's config word */
    enum dm_script acquire, release;
    const char *lock;           /* what that key is */
    const char *others;         /* what a key of another type at the name would be */
    int publishes;              /* every release publishes on the lock's own channel
                                   (partner_chan_name): waiters wait for it */
};

static const struct proto protos[] = {
    [DM_PROTOCOL_SETNX] = { "setnx", DM_SCRIPT_SETNX_ACQUIRE, DM_SCRIPT_SETNX_RELEASE,
                            "the string of a SET NX lock",
                            "a hash is dmutex's layout or Redisson's RLock", 0 },
    [DM_PROTOCOL_REDISSON] = { "redisson", DM_SCRIPT_REDISSON_ACQUIRE,
                               DM_SCRIPT_REDISSON_RELEASE, "the hash of a Redisson RLock",
                               "a string is a SET NX lock, protocol \"setnx\"", 1 },
};

static const struct proto *proto_of(const struct dm_rlock *l)
{
    return &protos[l->pub.protocol == DM_PROTOCOL_REDISSON ? DM_PROTOCOL_REDISSON
                                                           : DM_PROTOCOL_SETNX];
}

/* The scripts' first element (acquire) and answer (release). */
enum sx_acquire_reply { SX_WRONG_TYPE = -1, SX_HELD = 0, SX_GRANTED = 1 };
enum sx_release_reply { SX_REL_WRONG_TYPE = -1, SX_REL_GONE = 0, SX_REL_DONE = 1,
                        SX_REL_OTHER = 2 };

static int sx_slot(const struct dm_rlock *l)
{
    return dm_redis_slot(l->name);     /* the bare name's own slot; -1 without a cluster */
}

/* The channel a release publishes on and a waiter waits for: redisson's
 * own; setnx's, dmutex's release channel ("" with Redis Cluster: its
 * slot is not the key's). */
static void partner_chan_name(const struct dm_rlock *l, char *buf, size_t len)
{
    if (l->pub.protocol == DM_PROTOCOL_REDISSON)
        dm_keys_redisson_channel(buf, len, l->name);
    else if (dm_redis_cluster())
        buf[0] = '\0';
    else
        dm_rlock_key(l, DM_KEY_RELEASED, buf, len);
}

/* The channel record a waiter of l waits on (NULL: none, poll). */
static struct dm_chan *partner_chan(struct dm_rlock *l)
{
    if (l->pub.protocol != DM_PROTOCOL_REDISSON)
        return dm_redis_cluster() ? NULL : dm_rlock_chan(l);
    struct dm_chan *ch = __atomic_load_n(&l->pchan, __ATOMIC_ACQUIRE);
    if (ch)
        return ch;
    char channel[DM_RLOCK_KEY_MAX];
    partner_chan_name(l, channel, sizeof channel);
    struct dm_chan *mine = dm_notify_chan(channel);
    if (!mine)
        return NULL;
    if (__atomic_compare_exchange_n(&l->pchan, &ch, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return mine;
    dm_notify_chan_put(mine);       /* another thread's won */
    return ch;
}

/* What one attempt found. */
enum sx_att { SX_ATT_GRANTED, SX_ATT_HELD, SX_ATT_FAILED };

/* One acquire script call for `token`: *regranted when the key held our
 * token already, *pttl the holder's remaining lease when held (-1: no
 * expiry). A key of another type is SX_ATT_FAILED as a refusal (why says
 * so, naming the key and both protocols). */
static enum sx_att sx_attempt(struct dm_rlock *l, const char *token, int *regranted, long *pttl,
                              struct dm_redis_error *why)
{
    const struct proto *pr = proto_of(l);
    char lease[DM_FMT_U64_MAX + 1];
    dm_fmt_long(lease, rl_cfg->lease_ms);
    const char *args[] = { l->name, token, lease };
    struct dm_conn *conn = dm_redis_get_slot(sx_slot(l));
    redisReply *r = dm_redis_script(conn, pr->acquire, 1, 3, args);
    if (!r) {
        dm_redis_error_keep(why, conn);
        dm_redis_put(conn);
        return SX_ATT_FAILED;
    }
    enum sx_att res = SX_ATT_FAILED;
    why->err = DM_REDIS_BAD_REPLY;
    snprintf(why->errstr, sizeof why->errstr, "redis at %s: %s_acquire.lua on %s: "
             "unexpected reply", dm_redis_conn_addr(conn), pr->word, l->name);
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER) {
        long long v = r->element[0]->integer;
        if (v == SX_GRANTED && r->element[1]->type == REDIS_REPLY_INTEGER) {
            *regranted = r->element[1]->integer == 1;
            res = SX_ATT_GRANTED;
        } else if (v == SX_HELD && r->element[1]->type == REDIS_REPLY_INTEGER) {
            *pttl = (long)r->element[1]->integer;
            res = SX_ATT_HELD;
        } else if (v == SX_WRONG_TYPE && r->element[1]->type == REDIS_REPLY_STRING) {
            long long ttl = r->elements >= 3 && r->element[2]->type == REDIS_REPLY_INTEGER
                            ? r->element[2]->integer : -1;
            char left[48];
            if (ttl < 0)
                snprintf(left, sizeof left, "it has no expiry");
            else
                snprintf(left, sizeof left, "%lld ms left of its expiry", ttl);
            why->err = DM_REDIS_REPLY_ERROR;
            snprintf(why->errstr, sizeof why->errstr, "redis at %s: key %s is a %s, not %s: "
                     "another protocol's lock has the name (%s), and this entry has protocol = "
                     "\"%s\"; not taken while it is there (%s); give every client of the "
                     "name one protocol (docs/interop.md)", dm_redis_conn_addr(conn), l->name,
                     r->element[1]->str, pr->lock, pr->others, pr->word, left);
        }
    }
    freeReplyObject(r);
    dm_redis_put(conn);
    return res;
}

/* One release script call: its answer, or -2 with why. */
#define SX_REL_FAILED (-2)
static long sx_release_once(struct dm_rlock *l, const char *token, struct dm_redis_error *why)
{
    const struct proto *pr = proto_of(l);
    char channel[DM_RLOCK_KEY_MAX];
    partner_chan_name(l, channel, sizeof channel);
    /* Redisson publishes with SPUBLISH in Redis Cluster 7 (sharded pub/sub,
     * which notify subscribes with there); setnx_release.lua ignores it. */
    const char *args[] = { l->name, token, channel, dm_redis_cluster() ? "spublish" : "publish" };
    struct dm_conn *conn = dm_redis_get_slot(sx_slot(l));
    redisReply *r = dm_redis_script(conn, pr->release, 1, 4, args);
    long v = SX_REL_FAILED;
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer >= SX_REL_WRONG_TYPE &&
        r->integer <= SX_REL_OTHER &&
        (r->integer == SX_REL_DONE || dm_redis_is_primary(conn) == DM_PRIMARY_YES)) {
        v = (long)r->integer;       /* Sentinel: "not ours" only from the primary */
    } else if (r) {
        why->err = DM_REDIS_BAD_REPLY;
        snprintf(why->errstr, sizeof why->errstr, "redis at %s: %s_release.lua on %s: "
                 "unexpected reply, or not the primary", dm_redis_conn_addr(conn), pr->word,
                 l->name);
    } else {
        dm_redis_error_keep(why, conn);
    }
    if (r)
        freeReplyObject(r);
    dm_redis_put(conn);
    return v;
}

/* The release of `token`, retried as rl_release_waited retries (any
 * failure, with backoff, for DM_RELEASE_TIMEOUTS command timeouts, never
 * past what the hold surely has left of its lease). A retry after a try
 * that got no reply and finds the key gone counts as done: that try may
 * have deleted it. 0, EPERM (gone, or another client's: the lease had run
 * out), or EIO (logged). */
static int sx_release(struct dm_rlock *l, const char *token)
{
    struct dm_redis_error why = { DM_REDIS_OK, "" };
    long long start = dm_now_ms();
    long budget = DM_RELEASE_TIMEOUTS * rl_cfg->redis.command_timeout_ms;
    long safe = rl_cfg->lease_ms - rl_cfg->lease_margin_ms - rl_cfg->renew_ms;
    if (rl_cfg->redis.nsentinels > 0 || rl_cfg->redis.ncluster > 0 || budget > safe)
        budget = safe;
    struct dm_backoff backoff = DM_BACKOFF_INIT(DM_BACKOFF_MIN_MS, DM_BACKOFF_MAX_MS);
    int unanswered = 0;
    for (int i = 0;; i++) {
        long left = budget - (long)(dm_now_ms() - start);
        if (i > 0 && left <= 0)
            break;
        long v = sx_release_once(l, token, &why);
        switch (v) {
        case SX_REL_DONE:
            return 0;
        case SX_REL_GONE:
            return unanswered ? 0 : EPERM;
        case SX_REL_OTHER:
            return EPERM;
        case SX_REL_WRONG_TYPE:
            dm_error("lock %s: releasing: key %s is not %s any more (another protocol's "
                     "lock has the name: %s): the protocol = \"%s\" hold was gone; give every "
                     "client of the name one protocol (docs/interop.md)", l->name, l->name,
                     proto_of(l)->lock, proto_of(l)->others, proto_of(l)->word);
            return EPERM;
        default:
            break;
        }
        dm_stats_add(&dm_rlock_counts(l)->redis_errors, 1);
        unanswered |= why.err == DM_REDIS_IO;
        if (why.err != DM_REDIS_IO) {
            dm_sleep_ms(left > 0 && left < backoff.cur_ms ? left : backoff.cur_ms);
            dm_backoff_grow(&backoff);
        }
    }
    dm_error("lock %s: release failed for %lld ms (%s); the lock frees itself when its "
             "lease (%ld ms) runs out", l->name, dm_now_ms() - start, why.errstr,
             rl_cfg->lease_ms);
    return EIO;
}

int dm_partner_release(struct dm_rlock *l, const char *owner, unsigned long hold_id)
{
    char token[DM_MEMBER_MAX];
    rl_member_of(token, owner, hold_id ? hold_id : __atomic_load_n(&l->partner_id,
                                                                   __ATOMIC_ACQUIRE));
    return sx_release(l, token);
}

/* The next wait between attempts: a jittered `*step` (in [step/2, step]),
 * which then doubles up to DM_SETNX_RETRY_MAX_MS; never past the holder's
 * remaining lease (pttl > 0) or the call's deadline. */
static long sx_next_wait(long *step, long pttl, long left)
{
    static unsigned long seed;
    unsigned long x = __atomic_add_fetch(&seed, 0x9e3779b97f4a7c15UL, __ATOMIC_RELAXED);
    x ^= (unsigned long)dm_now_ns();
    x *= 0xbf58476d1ce4e5b9UL;
    x ^= x >> 31;
    long w = *step / 2 + (long)(x % (unsigned long)(*step / 2 + 1));
    if (*step < DM_SETNX_RETRY_MAX_MS)
        *step = *step * 2 < DM_SETNX_RETRY_MAX_MS ? *step * 2 : DM_SETNX_RETRY_MAX_MS;
    if (pttl > 0 && pttl + 1 < w)
        w = pttl + 1;
    if (left >= 0 && left < w)
        w = left;
    return w > 0 ? w : 1;
}

/* Gives an unanswered request's token up: a compare-and-DEL of it, which
 * ends whatever hold it got if it ran, or will find nothing. 0 when the
 * server answered. */
static int sx_withdraw(struct dm_rlock *l, const char *token)
{
    struct dm_redis_error why;
    long v = sx_release_once(l, token, &why);
    if (v != SX_REL_FAILED)
        return 0;
    dm_warn("lock %s: could not withdraw an unanswered request (%s); if the server "
            "still runs it, the lock stays held by nobody for up to its lease (%ld ms)",
            l->name, why.errstr, rl_cfg->lease_ms);
    return -1;
}

/* The wait after a held attempt with a subscribed channel of a protocol
 * whose releases all publish: until the notice, at most DM_WAIT_CAP_MS (a
 * notice lost with the connection is covered by notify's count; a holder
 * that died, by its lease), the holder's remaining lease or the call's
 * deadline. */
static long notice_wait(long pttl, long left)
{
    long w = DM_WAIT_CAP_MS;
    if (pttl > 0 && pttl + 1 < w)
        w = pttl + 1;
    if (left >= 0 && left < w)
        w = left;
    return w > 0 ? w : 1;
}

int dm_partner_acquire(struct dm_rlock *l, const char *owner, const struct timespec *deadline,
                     int flags, struct dm_grant *g)
{
    static long down_logged;
    struct dm_backoff backoff = DM_BACKOFF_INIT(DM_BACKOFF_MIN_MS, DM_BACKOFF_MAX_MS);
    char token[DM_MEMBER_MAX];
    unsigned long id = __atomic_add_fetch(&l->wait_ids, 1, __ATOMIC_RELAXED);
    rl_member_of(token, owner, id);
    struct dm_chan *ch = NULL;      /* release notices, once subscribed */
    int publishes = proto_of(l)->publishes;
    long step = DM_SETNX_RETRY_MIN_MS;
    int waited = 0, unanswered = 0, rediscovered = 0, was_down = 0;
    long long down_since = 0;
    for (;;) {
        struct dm_redis_error why = { DM_REDIS_OK, "" };
        if (unanswered) {
            /* No new request while an unanswered one could still run. */
            if (sx_withdraw(l, token) == 0) {
                unanswered = 0;
                id = __atomic_add_fetch(&l->wait_ids, 1, __ATOMIC_RELAXED);
                rl_member_of(token, owner, id);
            }
        }
        unsigned long seen = ch ? dm_notify_seq(ch) : 0;
        long long sent = dm_now_ms();
        int regranted = 0;
        long pttl = 0;
        enum sx_att res = unanswered ? SX_ATT_FAILED
                                     : sx_attempt(l, token, &regranted, &pttl, &why);
        if (unanswered) {
            why.err = DM_REDIS_IO;
            snprintf(why.errstr, sizeof why.errstr, "redis at %s: an unanswered request "
                     "could not be withdrawn", dm_redis_addr());
        }
        long left = dm_remaining_ms(deadline);
        if (res == SX_ATT_GRANTED) {
            if (dm_now_ms() - sent >= rl_cfg->lease_ms - rl_cfg->lease_margin_ms) {
                dm_warn("lock %s: the grant came back too late to trust (%lld ms); asking "
                        "again", l->name, dm_now_ms() - sent);
                continue;       /* the same token: the retry renews it */
            }
            if (was_down)
                dm_info("lock %s: redis at %s answers again; acquired after %lld ms",
                        l->name, dm_redis_addr(), dm_now_ms() - down_since);
            memset(g, 0, sizeof *g);
            g->token = 0;               /* no fencing token on this protocol */
            g->lease_ms = rl_cfg->lease_ms;
            g->sent_ms = sent;
            g->waited = waited;
            g->wait_id = id;
            g->regranted = regranted;
            __atomic_store_n(&l->partner_id, id, __ATOMIC_RELEASE);
            dm_stats_add(&dm_rlock_counts(l)->acquisitions, 1);
            return 0;
        }
        if (res == SX_ATT_HELD) {
            waited = 1;
            rediscovered = 0;
            dm_backoff_reset(&backoff);
            if (flags & DM_ACQ_TRY)
                return EBUSY;
            if (left == 0)
                return ETIMEDOUT;
            if (!ch && (ch = partner_chan(l)) != NULL) {
                long to = rl_cfg->redis.command_timeout_ms;
                if (dm_notify_subscribe(ch, left >= 0 && left < to ? left : to) == 0)
                    continue;   /* again at once: no release can be missed now */
                ch = NULL;      /* poll only */
            }
            long w = ch && publishes ? notice_wait(pttl, left) : sx_next_wait(&step, pttl, left);
            if (ch && dm_notify_wait(ch, seen, w) == 0)
                step = DM_SETNX_RETRY_MIN_MS;   /* a release: the next one soon, too */
            else if (!ch)
                dm_sleep_ms(w);
            continue;
        }
        /* A failure: what policy.c decides, done (lock.c's acq_failed). */
        dm_stats_add(&dm_rlock_counts(l)->redis_errors, 1);
        int withdrawing = unanswered;
        if (why.err == DM_REDIS_IO)
            unanswered = 1;
        struct dm_failure f = { rl_fail_of(why.err), (flags & DM_ACQ_TRY) != 0,
                                rl_cfg->on_redis_down, withdrawing, rediscovered, left };
        enum dm_step st = dm_policy_on_failure(&f);
        switch (st) {
        case DM_STEP_REDISCOVER:
            rediscovered = 1;
            continue;
        case DM_STEP_EBUSY:
        case DM_STEP_EAGAIN:
        case DM_STEP_LOCAL:
        case DM_STEP_ETIMEDOUT:
            dm_log_every(&down_logged, DM_DOWN_LOG_EVERY_MS, DM_LOG_ERROR, "lock %s: %s; %s",
                         l->name, why.errstr,
                         st == DM_STEP_EBUSY ? "trylock returns EBUSY"
                         : st == DM_STEP_EAGAIN ? "returning EAGAIN (on_redis_down = \"error\")"
                         : st == DM_STEP_LOCAL ? "locking this process only (on_redis_down = "
                                                 "\"local\")"
                                               : "timed out");
            if (unanswered && !withdrawing)
                sx_withdraw(l, token);
            if (st == DM_STEP_LOCAL) {
                memset(g, 0, sizeof *g);
                g->local_only = 1;
                return 0;
            }
            return st == DM_STEP_EBUSY ? EBUSY : st == DM_STEP_EAGAIN ? EAGAIN : ETIMEDOUT;
        default:
            break;
        }
        if (!was_down) {
            was_down = 1;
            down_since = dm_now_ms();
        }
        dm_log_every(&down_logged, DM_DOWN_LOG_EVERY_MS, DM_LOG_ERROR,
                     "lock %s: %s; %s (for %lld ms)", l->name, why.errstr,
                     why.err == DM_REDIS_REPLY_ERROR ? "the server refuses, retrying"
                     : why.err == DM_REDIS_IO ? "no reply, withdrawing the request and retrying"
                                              : "waiting for redis",
                     dm_now_ms() - down_since);
        if (st == DM_STEP_BACKOFF) {
            long d = dm_backoff_next(&backoff);
            dm_sleep_ms(left >= 0 && left < d ? left : d);
        }
    }
}
