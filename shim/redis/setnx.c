/* setnx: the setnx protocol's acquire and release (docs/interop.md), the
 * lock that redis-py's Lock, redlock with one server, redsync with one
 * pool and Jedis's SET NX PX take: a string at the bare lock name (no
 * namespace, no hash tag) holding its holder's token, taken with SET NX
 * PX, renewed with a compare-and-PEXPIRE (renew.c, setnx_renew.lua) and
 * released with a compare-and-DEL. A record speaks it once mapped made it
 * so (store.h's lock_protocol); store.c sends its calls here.
 *
 * The token of a hold is "<owner>|<hold id>" (the owner, then a number
 * the record counts up per lock call, l->wait_ids): unique per lock call
 * of the process, so a late copy of an old request never matches a later
 * hold. The record keeps the id of its current hold (l->sx_id) for the
 * renewal round, which is told only the owner.
 *
 * What it does not have: a fencing token (grants carry 0), a queue, want
 * notices, releases written without waiting, the restart check. Waiters
 * retry on a bounded, jittered interval (DM_SETNX_RETRY_MIN_MS doubling
 * to DM_SETNX_RETRY_MAX_MS, never past the holder's remaining lease): the
 * partners publish nothing. A release of ours publishes on the name's
 * dmutex release channel (not with Redis Cluster: that channel's slot is
 * not the key's), so dmutex waiters of the name retry at once. A key of
 * another type at the name (a hash: dmutex's or Redisson's layout) is
 * never taken: it fails as a server refusal whose words name the key and
 * both protocols, and on_redis_down decides. Knows nothing of
 * pthread_mutex_t; owns nothing but these calls. */
#include "lock.h"
#include "lock_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "notify.h"
#include "policy.h"
#include "redis.h"
#include "stats.h"
#include "util.h"

/* setnx_acquire.lua's first element. */
enum sx_acquire_reply { SX_WRONG_TYPE = -1, SX_HELD = 0, SX_GRANTED = 1 };
/* setnx_release.lua's answer. */
enum sx_release_reply { SX_REL_WRONG_TYPE = -1, SX_REL_GONE = 0, SX_REL_DONE = 1,
                        SX_REL_OTHER = 2 };

static int sx_slot(const struct dm_rlock *l)
{
    return dm_redis_slot(l->name);     /* the bare name's own slot; -1 without a cluster */
}

/* The release channel a release publishes on ("" with Redis Cluster). */
static void sx_channel(const struct dm_rlock *l, char *buf, size_t len)
{
    if (dm_redis_cluster())
        buf[0] = '\0';
    else
        dm_rlock_key(l, DM_KEY_RELEASED, buf, len);
}

/* What one attempt found. */
enum sx_att { SX_ATT_GRANTED, SX_ATT_HELD, SX_ATT_FAILED };

/* One setnx_acquire.lua call for `token`: *regranted when the key held our
 * token already, *pttl the holder's remaining lease when held (-1: no
 * expiry). A key of another type is SX_ATT_FAILED as a refusal (why says
 * so, naming the key and both protocols). */
static enum sx_att sx_attempt(struct dm_rlock *l, const char *token, int *regranted, long *pttl,
                              struct dm_redis_error *why)
{
    char lease[DM_FMT_U64_MAX + 1];
    dm_fmt_long(lease, rl_cfg->lease_ms);
    const char *args[] = { l->name, token, lease };
    struct dm_conn *conn = dm_redis_get_slot(sx_slot(l));
    redisReply *r = dm_redis_script(conn, DM_SCRIPT_SETNX_ACQUIRE, 1, 3, args);
    if (!r) {
        dm_redis_error_keep(why, conn);
        dm_redis_put(conn);
        return SX_ATT_FAILED;
    }
    enum sx_att res = SX_ATT_FAILED;
    why->err = DM_REDIS_BAD_REPLY;
    snprintf(why->errstr, sizeof why->errstr, "redis at %s: setnx_acquire.lua on %s: "
             "unexpected reply", dm_redis_conn_addr(conn), l->name);
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
            snprintf(why->errstr, sizeof why->errstr, "redis at %s: key %s is a %s, not the "
                     "string of a SET NX lock: another protocol's lock has the name (a hash is "
                     "dmutex's layout or Redisson's RLock), and this entry has protocol = "
                     "\"setnx\"; not taken while it is there (%s); give every client of the "
                     "name one protocol (docs/interop.md)",
                     dm_redis_conn_addr(conn), l->name, r->element[1]->str, left);
        }
    }
    freeReplyObject(r);
    dm_redis_put(conn);
    return res;
}

/* One setnx_release.lua call: its answer, or -2 with why. */
#define SX_REL_FAILED (-2)
static long sx_release_once(struct dm_rlock *l, const char *token, struct dm_redis_error *why)
{
    char channel[DM_RLOCK_KEY_MAX];
    sx_channel(l, channel, sizeof channel);
    const char *args[] = { l->name, token, channel };
    struct dm_conn *conn = dm_redis_get_slot(sx_slot(l));
    redisReply *r = dm_redis_script(conn, DM_SCRIPT_SETNX_RELEASE, 1, 3, args);
    long v = SX_REL_FAILED;
    if (r && r->type == REDIS_REPLY_INTEGER && r->integer >= SX_REL_WRONG_TYPE &&
        r->integer <= SX_REL_OTHER &&
        (r->integer == SX_REL_DONE || dm_redis_is_primary(conn) == DM_PRIMARY_YES)) {
        v = (long)r->integer;       /* Sentinel: "not ours" only from the primary */
    } else if (r) {
        why->err = DM_REDIS_BAD_REPLY;
        snprintf(why->errstr, sizeof why->errstr, "redis at %s: setnx_release.lua on %s: "
                 "unexpected reply, or not the primary", dm_redis_conn_addr(conn), l->name);
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
            dm_error("lock %s: releasing: key %s is not a string any more (another protocol's "
                     "lock has the name): the SET NX hold was gone; give every client of the "
                     "name one protocol (docs/interop.md)", l->name, l->name);
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

int dm_setnx_release(struct dm_rlock *l, const char *owner, unsigned long hold_id)
{
    char token[DM_MEMBER_MAX];
    rl_member_of(token, owner, hold_id ? hold_id : __atomic_load_n(&l->sx_id, __ATOMIC_ACQUIRE));
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

static enum dm_fail sx_fail_of(enum dm_redis_err e)
{
    switch (e) {
    case DM_REDIS_NOCONN:
        return DM_FAIL_NOCONN;
    case DM_REDIS_IO:
        return DM_FAIL_NOREPLY;
    case DM_REDIS_WRONG_NODE:
        return DM_FAIL_WRONG_NODE;
    case DM_REDIS_REPLY_ERROR:
    case DM_REDIS_BAD_REPLY:
        return DM_FAIL_REFUSED;
    default:
        return DM_FAIL_OTHER;
    }
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

int dm_setnx_acquire(struct dm_rlock *l, const char *owner, const struct timespec *deadline,
                     int flags, struct dm_grant *g)
{
    static long down_logged;
    struct dm_backoff backoff = DM_BACKOFF_INIT(DM_BACKOFF_MIN_MS, DM_BACKOFF_MAX_MS);
    char token[DM_MEMBER_MAX];
    unsigned long id = __atomic_add_fetch(&l->wait_ids, 1, __ATOMIC_RELAXED);
    rl_member_of(token, owner, id);
    struct dm_chan *ch = NULL;      /* dmutex releasers' notices, once subscribed */
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
            __atomic_store_n(&l->sx_id, id, __ATOMIC_RELEASE);
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
            if (!ch && !dm_redis_cluster() && (ch = dm_rlock_chan(l)) != NULL) {
                long to = rl_cfg->redis.command_timeout_ms;
                if (dm_notify_subscribe(ch, left >= 0 && left < to ? left : to) == 0)
                    continue;   /* again at once: no dmutex release can be missed now */
                ch = NULL;      /* poll only */
            }
            long w = sx_next_wait(&step, pttl, left);
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
        struct dm_failure f = { sx_fail_of(why.err), (flags & DM_ACQ_TRY) != 0,
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
