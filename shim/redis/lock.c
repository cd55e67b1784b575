/* rlock: acquire and release as Lua scripts (shim/redis/lua/), waiting through
 * notify, failures through the on_redis_down policy. A waiter subscribes
 * before its second attempt, so a release between a failed attempt and the
 * subscription cannot be missed; after that it sleeps until a notice or the
 * holder's remaining lease (capped), never on a fixed poll. The lock
 * records live here; what the protocol's other files share with this one is
 * lock_impl.h (release.c: releases not waited for; resend.c: releases
 * kept for a failover). */
#include "lock.h"
#include "lock_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "log.h"
#include "notify.h"
#include "policy.h"
#include "real.h"
#include "redis.h"
#include "util.h"
#include "wconn.h"

const struct dm_config *rl_cfg;
/* The namespace's intact marker (dm_keys_intact): acquire.lua's ARGV[10]. */
static char intact_key[DM_NAME_MAX + sizeof DM_KEYS_INTACT_SUFFIX];
/* The interned records: a hash table that grows and shrinks with them. */
pthread_mutex_t rl_locks_mu = PTHREAD_MUTEX_INITIALIZER;
struct dm_htab rl_locks;

void dm_rlock_init(const struct dm_config *cfg)
{
    rl_cfg = cfg;
    dm_keys_intact(intact_key, sizeof intact_key, cfg->ns);
    dm_redis_setup(&cfg->redis);
}

size_t dm_rlock_key(const struct dm_rlock *l, enum dm_key k, char *buf, size_t len)
{
    if (k == DM_KEY_WAIT)
        return dm_keys_wait_channel(buf, len, rl_cfg->ns, l->name, dm_store_process_id());
    return dm_keys_build(buf, len, rl_cfg->ns, l->name, k);
}

/* The record and its name in one allocation: no key strings (built per
 * call from the name) and no counters until the name counts something
 * (docs/decisions.md, "an idle name costs under 1 KB"). Under rl_locks_mu (its counters). */
static struct dm_rlock *lock_new(const char *name, size_t h)
{
    size_t nl = strlen(name);
    if (nl > DM_NAME_MAX)
        return NULL;    /* config and dmutex_name refuse it first: keys are sized for it */
    struct dm_name_stats *c = dm_name_stats_get(name, h);
    if (!c)
        return NULL;
    struct dm_rlock *l = calloc(1, offsetof(struct dm_rlock, name) + nl + 1);
    if (!l) {
        dm_name_stats_drop(c);
        return NULL;
    }
    memcpy(l->name, name, nl + 1);
    l->pub.name = l->name;
    char key[DM_RLOCK_KEY_MAX];
    dm_rlock_key(l, DM_KEY_LOCK, key, sizeof key);
    l->slot = dm_redis_slot(key);
    l->refs = 1;
    l->pub.counters = c;
    return l;
}

static struct dm_rlock *record_get(const char *name, int cond)
{
    size_t h = dm_hash_bytes(name, strlen(name));
    dm_lock(&rl_locks_mu);
    struct dm_rlock *l = NULL;
    for (struct dm_hnode *x = dm_htab_chain(&rl_locks, h); x; x = x->next) {
        rl_locks.probes++;
        if (x->hash == h && strcmp(((struct dm_rlock *)x)->name, name) == 0) {
            l = (struct dm_rlock *)x;
            break;
        }
    }
    if (l) {
        l->refs++;
    } else if ((l = lock_new(name, h)) != NULL && dm_htab_add(&rl_locks, &l->node, h) != 0) {
        dm_name_stats_drop(l->pub.counters);
        free(l);
        l = NULL;
    }
    if (l)
        __atomic_store_n(cond ? &l->pub.counters->is_cond : &l->pub.counters->is_lock, 1,
                         __ATOMIC_RELAXED);
    dm_unlock(&rl_locks_mu);
    return l;
}

struct dm_rlock *dm_rlock_get(const char *name)
{
    return record_get(name, 0);
}

struct dm_rlock *dm_rlock_cond_get(const char *name)
{
    return record_get(name, 1);
}


size_t rl_kept_lists;       /* records with a failover's kept list (l->kept; rl_locks_mu) */

/* rl_locks_mu held: drops a reference; 1 when it was the last (the record is
 * out of the table then: rl_lock_free it, without rl_locks_mu). */
int rl_lock_unref_locked(struct dm_rlock *l)
{
    if (--l->refs > 0)
        return 0;
    dm_htab_del(&rl_locks, &l->node);
    if (l->kept)
        rl_kept_lists--;           /* freed with the record (rl_lock_free) */
    /* Its counters stay (if it counted anything), for the file and for a
     * record of the name made again. */
    dm_name_stats_drop(l->pub.counters);
    return 1;
}


void dm_rlock_put(struct dm_rlock *l)
{
    if (!l)
        return;
    dm_lock(&rl_locks_mu);
    int last = rl_lock_unref_locked(l);
    dm_unlock(&rl_locks_mu);
    if (last)
        rl_lock_free(l);
}

/* A record out of the table: no one else can reach it. notify may wait for
 * a handler here, so rl_locks_mu is not held. */
void rl_lock_free(struct dm_rlock *l)
{
    dm_wconn_close(dm_wconn_take(&l->wconn));
    dm_notify_chan_put(l->chan);
    dm_notify_chan_put(l->wchan);
    dm_notify_chan_put(l->wantchan);
    dm_notify_chan_put(l->pchan);
    free(l->kept);
    free(l);
}

struct dm_htab_stats dm_rlock_stats(void)
{
    return dm_htab_stats(&rl_locks, &rl_locks_mu);
}

/* *slot, made from l's channel `k` on first need. Two threads racing make
 * one each; the loser drops its reference. */
static struct dm_chan *lazy_chan(const struct dm_rlock *l,
                                        struct dm_chan **slot, enum dm_key k)
{
    struct dm_chan *ch = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (ch)
        return ch;
    char channel[DM_RLOCK_KEY_MAX];
    dm_rlock_key(l, k, channel, sizeof channel);
    struct dm_chan *mine = dm_notify_chan(channel);
    if (!mine)
        return NULL;
    if (__atomic_compare_exchange_n(slot, &ch, mine, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return mine;
    dm_notify_chan_put(mine);
    return ch;
}

struct dm_chan *dm_rlock_chan(struct dm_rlock *l)
{
    return lazy_chan(l, &l->chan, DM_KEY_RELEASED);
}

struct dm_chan *dm_rlock_wchan(struct dm_rlock *l)
{
    return lazy_chan(l, &l->wchan, DM_KEY_WAIT);
}

void dm_rlock_rwlock(struct dm_rlock *l)
{
    l->pub.rw = 1;
    dm_rlock_mode(l, 1, 0, 1);
}

void dm_rlock_mode(struct dm_rlock *l, int fair, int cache, int wants)
{
    if (fair)
        l->pub.fair = 1;
    if ((cache || wants) && !l->pub.wants) {
        /* Made now: mapped.c uses l->wantchan directly once wants are on. */
        if (lazy_chan(l, &l->wantchan, DM_KEY_WANT))
            l->pub.wants = 1;
        else
            dm_error("lock %s: out of memory for its want channel; lock caching and "
                     "want notices stay off", l->name);
    }
    if (cache && l->pub.wants)
        l->pub.cache = 1;
}

/* What became of one script call. ATT_FAILED leaves the cause in a
 * struct dm_redis_error: only DM_REDIS_NOCONN says for sure that nothing
 * reached the server; an error reply (DM_REDIS_REPLY_ERROR, or a reply of
 * the wrong shape) is the server refusing (OOM, NOPERM, READONLY...), and a
 * request that got no reply (DM_REDIS_IO: timeout, closed connection) may
 * have run or may still run later. */
enum attempt { ATT_GRANTED, ATT_HELD,
               ATT_REPLIED,     /* a reply came (run_script, abandon) */
               ATT_FAILED };

/* acquire.lua's first element: {1, token, owner_dead} or {0, pttl}. */
enum acquire_reply { ACQUIRE_NOT_GRANTED = 0,   /* {0, ms to wait}: held, or not our turn */
                     ACQUIRE_GRANTED = 1 };     /* {1, fencing token, DEAD_*} */
/* Its third: how the last holder's hold ended, if not by a release. */
enum acquire_dead { DEAD_NO = 0, DEAD_EXPIRED = 1, DEAD_FORCED = 2 };
/* cancel.lua: {1, token} when the request had been granted (the hold is
 * handed on), {0, 0} when not. */
enum cancel_reply { CANCEL_NOT_GRANTED = 0, CANCEL_WAS_GRANTED = 1 };

/* An error reply, or a reply that is not what the script returns: the
 * server refuses, it is not absent. */
static int refused_by_server(enum dm_redis_err e)
{
    return e == DM_REDIS_REPLY_ERROR || e == DM_REDIS_BAD_REPLY;
}

#define DM_VOID_LEASES 1        /* an abandoned request is void this many leases */

void rl_member_of(char *member, const char *owner, unsigned long wait_id)
{
    size_t n = strnlen(owner, DM_OWNER_MAX - 1);
    memcpy(member, owner, n);
    member[n] = '|';
    dm_fmt_u64(member + n + 1, wait_id);
}

/* A new request id for one acquire call of `owner`. */
static void new_member(struct dm_rlock *l, const char *owner, char *member)
{
    rl_member_of(member, owner, __atomic_add_fetch(&l->wait_ids, 1, __ATOMIC_RELAXED));
}

/* The wait id of request "<owner>|<wait id>". */
static unsigned long member_id(const char *member)
{
    const char *bar = strrchr(member, '|');
    return bar ? strtoul(bar + 1, NULL, 10) : 0;
}

/* Runs one script on a pooled connection: ATT_REPLIED with *out, or
 * ATT_FAILED with the connection's error kept in *why. */
static enum attempt run_script(const struct dm_rlock *l, enum dm_script s, int nkeys,
                               int nargs, const char *const *args, redisReply **out,
                               struct dm_redis_error *why)
{
    struct dm_conn *conn = dm_redis_get_slot(l->slot);
    *out = dm_redis_script(conn, s, nkeys, nargs, args);
    if (!*out)
        dm_redis_error_keep(why, conn);
    dm_redis_put(conn);
    return *out ? ATT_REPLIED : ATT_FAILED;
}

/* min_replicas: a grant counts once that many replicas have it. WAIT
 * counts the writes of this connection only, so it runs on the connection
 * that ran the grant; the replication stream is ordered, so it covers
 * everything before the grant too (a handover's confirming attempt relies
 * on that). Not acknowledged in time: the grant is released (it may still
 * reach a replica: then it is a released grant there too) and the attempt
 * fails like a refusing server, with the words why. No reply to the WAIT:
 * the grant may have reached them or not: ambiguous, as a lost reply (the
 * caller withdraws the request, which hands back a grant it got). The WAIT
 * lasts wait_ms (ack_wait_ms: never past the caller's deadline). */

/* Releases the grant `token` that request `member` got and its caller
 * gives back (not acknowledged, withdrawn): named, so that a copy of this
 * release that reaches the server late (after a partition) leaves alone
 * the owner's next grant of the same hold, which has the same token
 * (release.lua's ARGV[8]); an rwlock's is not told apart by its request. */
static void release_request_grant(struct dm_rlock *l, const char *owner,
                                  const char *member, uint64_t token)
{
    rl_release_waited(l, owner, token, l->pub.rw ? NULL : member, 0, NULL);
}

static enum attempt acknowledged(struct dm_rlock *l, const char *owner,
                                 const char *member, struct dm_conn *conn,
                                 const struct dm_grant *g, long wait_ms,
                                 struct dm_redis_error *why)
{
    long acks = dm_redis_wait(conn, rl_cfg->min_replicas, wait_ms);
    if (acks >= rl_cfg->min_replicas && dm_redis_conn_stale(conn)) {
        /* The sentinels moved the primary while the WAIT was pending: the
         * acks may come from a replica still attached to the old primary
         * (cut off from the sentinels), and the new primary may not have
         * the grant: it does not count. Given back as a grant not
         * acknowledged in time; WRONG_NODE makes the caller ask again at
         * once, on the new primary. A switch not yet heard of when the
         * WAIT returns is not caught here. */
        why->err = DM_REDIS_WRONG_NODE;
        snprintf(why->errstr, sizeof why->errstr, "redis at %s: the primary changed while "
                 "replicas acknowledged the grant (token %" PRIu64 "); released it",
                 dm_redis_addr(), g->token);
        release_request_grant(l, owner, member, g->token);
        return ATT_FAILED;
    }
    if (acks >= rl_cfg->min_replicas)
        return ATT_GRANTED;
    if (acks < 0) {
        dm_redis_error_keep(why, conn);
        return ATT_FAILED;
    }
    why->err = DM_REDIS_REPLY_ERROR;
    snprintf(why->errstr, sizeof why->errstr, "redis at %s: only %ld of min_replicas = %d "
             "replicas acknowledged the grant (token %" PRIu64 ") within %ld ms; released it",
             dm_redis_addr(), acks, rl_cfg->min_replicas, g->token, wait_ms);
    release_request_grant(l, owner, member, g->token);
    return ATT_FAILED;
}

#define DM_ACK_WAIT_MIN_MS 1    /* WAIT's shortest bound: WAIT with 0 waits forever */

/* How long a grant's WAIT (min_replicas) may last: replica_timeout_ms, but
 * never past the caller's deadline (a timed lock returns by it, plus at
 * most the one command timeout the WAIT's reply may take), and for a
 * trylock, which has no deadline but must not block, at most one command
 * timeout. A bound cut short only makes the grant fail sooner: it is
 * released as any grant not acknowledged in time. */
static long ack_wait_ms(const struct timespec *deadline, int flags)
{
    long t = rl_cfg->replica_timeout_ms;
    if ((flags & DM_ACQ_TRY) && rl_cfg->redis.command_timeout_ms < t)
        t = rl_cfg->redis.command_timeout_ms;
    long left = dm_remaining_ms(deadline);
    if (left >= 0 && left < t)
        t = left;
    return t >= DM_ACK_WAIT_MIN_MS ? t : DM_ACK_WAIT_MIN_MS;
}

/* One acquire script call for request `member`. ATT_HELD sets *pttl (may
 * be <= 0: unknown). `queue` asks to be queued (fair). With min_replicas
 * a grant waits up to ack_ms for its replicas. */
/* The keys one script call passes, built on the caller's stack from the
 * record's name (records keep no key strings): the keys of `mask` (bits
 * by enum dm_key), an rwlock's read keys with them; the others NULL. At
 * most 10 of them (release.lua's, with the channels it publishes on and an
 * rwlock's two). The caller's buffer is a variable-length array of
 * call_keys_len bytes: what this name's keys take (about 300 bytes for a
 * name of a dozen bytes in the default namespace; 4 KB for a name and a
 * namespace of DM_NAME_MAX bytes each), never more, since a small thread
 * stack pays for every byte (docs/semantics.md). A function that builds
 * keys is kept out of line (DM_KEYS_FRAME) and calls nothing that builds
 * keys again but a release that a late reply read meanwhile asks for (a
 * redis call reads those first): so at most two such arrays are on a
 * stack at once. */
#define DM_CALL_KEY(k) (1u << (k))
#define DM_CALL_ACQUIRE (DM_CALL_KEY(DM_KEY_LOCK) | DM_CALL_KEY(DM_KEY_TOKEN) | \
                         DM_CALL_KEY(DM_KEY_HOLDER) | DM_CALL_KEY(DM_KEY_QUEUE) | \
                         DM_CALL_KEY(DM_KEY_QTIME) | DM_CALL_KEY(DM_KEY_LOST) | \
                         DM_CALL_KEY(DM_KEY_VOID) | DM_CALL_KEY(DM_KEY_WANT) | \
                         DM_CALL_KEY(DM_KEY_EPOCH))
#define DM_CALL_CANCEL (DM_CALL_KEY(DM_KEY_LOCK) | DM_CALL_KEY(DM_KEY_QUEUE) | \
                        DM_CALL_KEY(DM_KEY_QTIME) | DM_CALL_KEY(DM_KEY_TOKEN) | \
                        DM_CALL_KEY(DM_KEY_HOLDER) | DM_CALL_KEY(DM_KEY_VOID))
#define DM_CALL_RELEASE (DM_CALL_KEY(DM_KEY_LOCK) | DM_CALL_KEY(DM_KEY_HOLDER) | \
                         DM_CALL_KEY(DM_KEY_TOKEN) | DM_CALL_KEY(DM_KEY_QUEUE) | \
                         DM_CALL_KEY(DM_KEY_QTIME) | DM_CALL_KEY(DM_KEY_LOST) | \
                         DM_CALL_KEY(DM_KEY_RELEASED) | DM_CALL_KEY(DM_KEY_WAIT) | \
                         DM_CALL_KEY(DM_KEY_EPOCH))
#define DM_KEYS_FRAME __attribute__((noinline))

struct call_keys {
    const char *k[DM_KEY_COUNT];
};

static unsigned call_mask(const struct dm_rlock *l, unsigned mask)
{
    return l->pub.rw ? mask | DM_CALL_KEY(DM_KEY_READERS) | DM_CALL_KEY(DM_KEY_RGRANT) : mask;
}

/* The bytes call_keys(l, .., mask, ..) writes: each key "NS:{NAME}" and
 * its suffix (keys.h; DM_KEY_WAIT is the prefix here, no process id) and
 * its NUL. lock_new refused a name longer than DM_NAME_MAX, config a
 * longer namespace. */
static size_t call_keys_len(const struct dm_rlock *l, unsigned mask)
{
    mask = call_mask(l, mask);
    size_t n = dm_keys_len(rl_cfg->ns, l->name, DM_KEY_LOCK), len = 0;
    for (int k = 0; k < DM_KEY_COUNT; k++)
        if (mask & DM_CALL_KEY(k))
            len += n + strlen(dm_keys_suffix((enum dm_key)k)) + 1;
    return len;
}

/* Builds them into buf (call_keys_len bytes). */
static const char *const *call_keys(const struct dm_rlock *l, struct call_keys *ks,
                                    unsigned mask, char *buf, size_t len)
{
    mask = call_mask(l, mask);
    /* "NS:{NAME}" (the lock's key) once, then each key is it and its
     * suffix: two copies a key, no formatting. */
    char *p = buf;
    size_t n = dm_keys_build(p, len, rl_cfg->ns, l->name, DM_KEY_LOCK);
    const char *lock = p;
    for (int k = 0; k < DM_KEY_COUNT; k++) {
        ks->k[k] = NULL;
        if (mask & DM_CALL_KEY(k)) {
            const char *suffix = dm_keys_suffix((enum dm_key)k);
            size_t sl = strlen(suffix);
            if (p != lock)
                memcpy(p, lock, n);
            memcpy(p + n, suffix, sl + 1);
            ks->k[k] = p;
            p += n + sl + 1;
        }
    }
    return ks->k;
}

/* An rwlock's scripts take its read keys after the mutex's (acquire.lua):
 * appends them (from k, call_keys's) to args at n when l is one; returns
 * the new n. */
static int rw_keys(const struct dm_rlock *l, const char *const *k, const char **args, int n)
{
    if (l->pub.rw) {
        args[n++] = k[DM_KEY_READERS];
        args[n++] = k[DM_KEY_RGRANT];
    }
    return n;
}

/* An acquire refused with WRONGTYPE: acquire.lua found the lock's key of
 * another type ("WRONGTYPE NS:{NAME} holds a string, ..."). Not a passing
 * refusal but another client's lock under the key (a SET NX string at
 * NS:{NAME}): the server's words, then the cause naming both protocols,
 * as the setnx protocol says of a hash at its name (partner.c). No grant
 * comes of it: on_redis_down decides, as for any refusal. */
static void wrongtype_words(struct dm_redis_error *why)
{
    if (why->err != DM_REDIS_REPLY_ERROR || !strstr(why->errstr, "WRONGTYPE"))
        return;
    size_t n = strlen(why->errstr);
    snprintf(why->errstr + n, sizeof why->errstr - n, ": another protocol's lock has the key "
             "(a string is a SET NX lock, protocol \"setnx\"), and this entry has protocol = "
             "\"dmutex\"; not taken while it is there; give every client of the name one "
             "protocol (docs/interop.md)");
}

DM_KEYS_FRAME
static enum attempt attempt(struct dm_rlock *l, const char *owner, const char *member,
                            int queue, int read, long ack_ms, struct dm_grant *g, long *pttl,
                            long long *srv_ms, int *kept_off, struct dm_redis_error *why)
{
    char lease[DM_FMT_U64_MAX + 1], delay[DM_FMT_U64_MAX + 1], qttl[DM_FMT_U64_MAX + 1];
    dm_fmt_long(lease, rl_cfg->lease_ms);
    dm_fmt_long(delay, rl_cfg->lock_delay_ms);
    dm_fmt_long(qttl, DM_QUEUE_TTL_MS);
    struct call_keys ks;
    char kb[call_keys_len(l, DM_CALL_ACQUIRE)];
    const char *const *k = call_keys(l, &ks, DM_CALL_ACQUIRE, kb, sizeof kb);
    const char *args[21] = { k[DM_KEY_LOCK], k[DM_KEY_TOKEN], k[DM_KEY_HOLDER], k[DM_KEY_QUEUE],
                             k[DM_KEY_QTIME], k[DM_KEY_LOST], k[DM_KEY_VOID] };
    int nkeys = rw_keys(l, k, args, 7);
    struct dm_conn *conn = dm_redis_get_slot(l->slot);
    /* Redis Cluster: the notices on the lock's shard (sharded pub/sub,
     * ARGV[9]), otherwise PUBLISH, which Redis < 7 has; no intact marker
     * there (ARGV[10]: it is in another slot). ARGV[11]: the server run
     * the connection reached, for the restart check ("Restarts"). */
    const char *argv[] = { owner, lease, delay, read ? "r" : queue ? "1" : "0", member,
                           qttl, k[DM_KEY_WANT], DM_KEYS_LOST_KEEP,
                           l->slot >= 0 ? "spublish" : "", l->slot >= 0 ? "" : intact_key,
                           conn->run_id, k[DM_KEY_EPOCH] };
    memcpy(args + nkeys, argv, sizeof argv);
    redisReply *r = dm_redis_script(conn, DM_SCRIPT_ACQUIRE, nkeys, nkeys + 12, args);
    if (!r) {
        dm_redis_error_keep(why, conn);
        wrongtype_words(why);
        dm_redis_put(conn);
        return ATT_FAILED;
    }
    enum attempt res = ATT_FAILED;
    *kept_off = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER && r->element[1]->type == REDIS_REPLY_INTEGER) {
        if (r->element[0]->integer == ACQUIRE_GRANTED && r->elements >= 3) {
            memset(g, 0, sizeof *g);
            g->token = (uint64_t)r->element[1]->integer;
            long long dead = r->element[2]->type == REDIS_REPLY_INTEGER ? r->element[2]->integer
                                                                        : DEAD_NO;
            g->owner_dead = dead == DEAD_EXPIRED || dead == DEAD_FORCED;
            g->forced = dead == DEAD_FORCED;
            g->regranted = r->elements >= 4 && r->element[3]->type == REDIS_REPLY_INTEGER &&
                           r->element[3]->integer == 1;
            g->lease_ms = rl_cfg->lease_ms;
            res = ATT_GRANTED;
        } else if (r->element[0]->integer == ACQUIRE_NOT_GRANTED) {
            *pttl = (long)r->element[1]->integer;
            *srv_ms = r->elements >= 3 && r->element[2]->type == REDIS_REPLY_INTEGER
                          ? r->element[2]->integer : 0;
            *kept_off = r->elements >= 4 && r->element[3]->type == REDIS_REPLY_STRING;
            res = ATT_HELD;
        }
    }
    if (res == ATT_FAILED) {
        why->err = DM_REDIS_BAD_REPLY;
        snprintf(why->errstr, sizeof why->errstr, "redis at %s: acquire.lua on %s: unexpected reply",
                 dm_redis_addr(), k[DM_KEY_LOCK]);
    }
    freeReplyObject(r);
    if (res == ATT_GRANTED && rl_cfg->min_replicas > 0)
        res = acknowledged(l, owner, member, conn, g, ack_ms, why);
    dm_redis_put(conn);
    return res;
}

/* abandon's script calls; *tok the token of a grant the request had got
 * (0: none), for the caller to release once this frame and its keys are
 * gone. */
DM_KEYS_FRAME
static enum attempt cancel_calls(struct dm_rlock *l, const char *owner, const char *member,
                                 int void_it, uint64_t *tok, struct dm_redis_error *why)
{
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%ld", void_it ? DM_VOID_LEASES * rl_cfg->lease_ms : 0L);
    struct call_keys ks;
    char kb[call_keys_len(l, DM_CALL_CANCEL)];
    const char *const *k = call_keys(l, &ks, DM_CALL_CANCEL, kb, sizeof kb);
    const char *args[11] = { k[DM_KEY_LOCK], k[DM_KEY_QUEUE], k[DM_KEY_QTIME], k[DM_KEY_TOKEN],
                             k[DM_KEY_HOLDER], k[DM_KEY_VOID] };
    int nkeys = rw_keys(l, k, args, 6);
    args[nkeys] = owner;
    args[nkeys + 1] = member;
    args[nkeys + 2] = ttl;
    long long start = dm_now_ms();
    enum attempt res = ATT_FAILED;
    *tok = 0;
    for (int i = 0; i < 3; i++) {
        if (i > 0 && dm_now_ms() - start >= rl_cfg->redis.command_timeout_ms)
            break;
        redisReply *r;
        res = run_script(l, DM_SCRIPT_CANCEL, nkeys, nkeys + 3, args, &r, why);
        if (!r) {
            if (why->err == DM_REDIS_IO)
                continue;       /* void is idempotent: say it again */
            break;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == CANCEL_WAS_GRANTED &&
            r->element[1]->type == REDIS_REPLY_INTEGER)
            *tok = (uint64_t)r->element[1]->integer;
        freeReplyObject(r);
        return ATT_REPLIED;
    }
    return res;
}

/* Gives up the acquire request `member` (cancel.lua): out of the fair
 * queue; with `void_it` (a request whose reply never came, which may still
 * run) void for DM_VOID_LEASES leases; a hold that came through it
 * released with the normal handover. Tries for about one command timeout
 * (a stale pooled connection fails at once, so a second connection is
 * tried). Returns ATT_REPLIED when the server confirmed it, else
 * ATT_FAILED with what went wrong in *why. */
static enum attempt abandon(struct dm_rlock *l, const char *owner, const char *member,
                            int void_it, struct dm_redis_error *why)
{
    uint64_t tok;
    enum attempt res = cancel_calls(l, owner, member, void_it, &tok, why);
    if (res == ATT_REPLIED && tok) {
        dm_debug("lock %s: request %s had been granted (token %" PRIu64 "); handing it on",
                 l->name, member, tok);
        release_request_grant(l, owner, member, tok);
    }
    return res;
}

static void warn_unwithdrawn(struct dm_rlock *l, const char *err)
{
    dm_warn("lock %s: could not withdraw an unanswered request (%s); if the server "
            "still runs it, the lock stays held by nobody for up to its lease (%ld ms)",
            l->name, err, rl_cfg->lease_ms);
}

/* Leaves before a grant: gives `member` up if it may have had an effect
 * (queued, or refused with an error reply, which a script can return after
 * some of its writes), voided if it may still run (unanswered), logging the
 * window left when even that could not get through. */
static void give_up(struct dm_rlock *l, const char *owner, const char *member,
                    int queued, int unanswered)
{
    if (!queued && !unanswered)
        return;
    struct dm_redis_error why;
    if (abandon(l, owner, member, unanswered, &why) == ATT_REPLIED)
        return;
    if (unanswered)
        warn_unwithdrawn(l, why.errstr);
    else    /* the queue entry dies by its deadline, a handover by its lease */
        dm_debug("lock %s: could not leave the wait queue (%s)", l->name, why.errstr);
}

/* Is there still a safe part of the lease left? A reply or notice that
 * arrives after lease - margin (a stalled or starved process) must not be
 * taken for a hold: another process may get the lock any moment. */
static int fresh(const struct dm_grant *g)
{
    return dm_now_ms() - g->sent_ms < g->lease_ms - rl_cfg->lease_margin_ms;
}

/* A grant too late to trust is asked for again, but what it found stands:
 * a previous holder it found dead is the next grant's news too, as long as
 * no other grant came between. Tokens count every grant of a lock (and a
 * forced release), so that is the same token (the retry renewed the late
 * grant) or the next (the late grant expired and nobody else had it). */
struct late_grant {
    uint64_t token;             /* 0: none */
    int owner_dead;
    int forced;                 /* ... by a forced release */
};

static void late_grant_keep(struct late_grant *lg, const struct dm_grant *g)
{
    int after = lg->token && (g->token == lg->token || g->token == lg->token + 1);
    if (g->owner_dead) {
        lg->owner_dead = 1;
        lg->forced = g->forced;
    } else if (!(after && lg->owner_dead)) {
        lg->owner_dead = 0;
        lg->forced = 0;
    }
    lg->token = g->token;
}

/* What the late grant found, for the grant g that followed it. */
static void late_grant_tell(const struct late_grant *lg, struct dm_grant *g)
{
    if (lg->token && lg->owner_dead && (g->token == lg->token || g->token == lg->token + 1)) {
        g->owner_dead = 1;
        g->forced |= lg->forced;
    }
}

/* Is `msg` the handover of this wait ("<member> <token>[ +][ !] @<ms>:<lease>":
 * " +" others queue behind, " !" a forced release (dmutex unlock --force)
 * handed it over: its holder is dead, as after an expiry; ms the server's
 * clock at the handover, lease what it set: the releaser's whole lease)?
 * The hold's lease is that one, or ours if shorter, from the handover's
 * own moment on the server (a shorter one than ours is renewed early:
 * watchdog's due_ms). `sent` is when our last attempt was sent and
 * `srv_ms` the server's clock when it ran (0: not known): the handover
 * came srv_ms..ms later on the server's clock, so on ours no earlier than
 * sent + (ms - srv_ms), and no later than now; the hold's deadline is
 * counted from that, never later than the server's own lease (the
 * attempt ran after it was sent; only the two clocks' rates may differ,
 * which the margin covers, and the server's must not step).
 * Returns 0: not ours; 1: ours, made after our last attempt ran; 2: ours
 * by its words, but made no later than that attempt ran, or when that is
 * not known: a late copy (a notice held up by a cut link, retransmitted
 * when it came back), since an attempt that ran after a handover still
 * ours would have been granted it, not told the lock is held. Only
 * another attempt can say whether it is still ours. */
static int handed_over(const char *msg, const char *member, long long sent, long long srv_ms,
                       struct dm_grant *g)
{
    size_t n = strlen(member);
    if (strncmp(msg, member, n) != 0 || msg[n] != ' ')
        return 0;
    char *end;
    unsigned long long tok = strtoull(msg + n + 1, &end, 10);
    int more = strncmp(end, " +", 2) == 0;
    if (more)
        end += 2;
    int dead = strncmp(end, " !", 2) == 0;
    if (dead)
        end += 2;
    long long at = 0, set = 0;
    if (strncmp(end, " @", 2) == 0) {
        at = strtoll(end + 2, &end, 10);
        if (*end == ':')
            set = strtoll(end + 1, &end, 10);
    }
    if (*end != 0 || tok == 0 || set <= 0)
        return 0;
    memset(g, 0, sizeof *g);
    g->token = tok;
    g->more_waiters = more;
    g->owner_dead = dead;
    g->forced = dead;           /* only force.lua's handover says " !" */
    g->lease_ms = set < rl_cfg->lease_ms ? (long)set : rl_cfg->lease_ms;
    if (srv_ms <= 0 || at <= srv_ms)
        return 2;
    long long now = dm_now_ms(), later = at - srv_ms;
    g->sent_ms = sent + later < now ? sent + later : now;
    return 1;
}

static const char *down_policy(void)
{
    return rl_cfg->on_redis_down == DM_DOWN_ERROR ? "error"
         : rl_cfg->on_redis_down == DM_DOWN_LOCAL ? "local" : "block";
}

/* Failures, by what is known of them. No connection could be made:
 * on_redis_down decides (block, EAGAIN, or this process only). An error
 * reply is the server refusing, not absent: never a reason to lock
 * locally; "error" returns EAGAIN, "block" and "local" retry with backoff.
 * No reply to a sent request: it may have run, or may run later (a paused
 * server runs it when the pause ends, perhaps after anything sent since on
 * another connection), so the request is given up (abandon: left, voided,
 * and a grant it got handed on) before a new one is sent or the call
 * returns. A trylock returns EBUSY on any failure, as it always has. */
/* A fair mutex waiter reads its handover on a connection of its own
 * (wconn.h), without Sentinel and Redis Cluster only (their subscriptions
 * follow the primary and the slots in notify), and not for an rwlock's
 * writer (its wake-ups are not all handovers). */
static int direct_wait(const struct dm_rlock *l)
{
    return !l->pub.rw && rl_cfg->redis.nsentinels == 0 && rl_cfg->redis.ncluster == 0;
}

static int acquire_loop(struct dm_rlock *l, const char *owner,
                        const struct timespec *deadline, int flags, struct dm_grant *g,
                        struct dm_conn **wcp);

/* A trylock after an unlock of the name in this process returned must
 * not find the lock still held by that unlock's release, written without
 * waiting, on a connection the trylock's attempt does not use (it may
 * overtake it; a lock or a timed lock would just wait for its notice).
 * So the replies of those releases are read first (the pool's, here, and
 * those on connections in use, by the threads using them, before their
 * own reply) and settled by the release reader (a retry, when the reply
 * was none), waited for up to what a retried release may take. */
static void releases_read(struct dm_rlock *l)
{
    long long end = dm_now_ms() + (DM_RELEASE_TIMEOUTS + 1) * rl_cfg->redis.command_timeout_ms;
    while (__atomic_load_n(&l->releases_unread, __ATOMIC_ACQUIRE) > 0) {
        dm_redis_flush();
        if (__atomic_load_n(&l->releases_unread, __ATOMIC_ACQUIRE) == 0 || dm_now_ms() >= end)
            break;
        dm_sleep_ms(1);
    }
}

int dm_rlock_acquire(struct dm_rlock *l, const char *owner,
                       const struct timespec *deadline, int flags, struct dm_grant *g)
{
    if (flags & DM_ACQ_TRY)
        releases_read(l);
    struct dm_conn *wc = NULL;
    int r = acquire_loop(l, owner, deadline, flags, g, &wc);
    dm_wconn_keep(&l->wconn, wc);
    return r;
}

/* One lock call's state between its attempts (acquire_loop). */
struct acquire {
    struct dm_rlock *l;
    const char *owner;
    const struct timespec *deadline;
    int flags;
    struct dm_grant *g;
    struct dm_conn **wcp;       /* a fair waiter's own connection (direct_wait) */
    struct dm_chan *ch;  /* made when a wait first needs it (NULL until then, and
                                   out of memory: the wait then polls) */
    int fair;           /* queued: handed over on release */
    int direct;         /* waits on *wcp, not on notify's channel */
    int subscribed;     /* a notice or handover after the next attempt cannot be missed */
    int queued;         /* the request is in the queue */
    int unanswered;     /* a request of `member` got no reply: it may still run */
    int refused;        /* one got an error reply: it may have run in part */
    int rediscovered;   /* a wrong node (Sentinel) was retried at once */
    int handover_more;  /* a handover being confirmed said others queue */
    int handover_dead;  /* ... or that a forced release handed it over (" !": only
                           force.lua's handovers say it, so dead is forced) */
    int handed;         /* a handover is being confirmed */
    uint64_t handed_tok;        /* ... its token: the confirming grant's, if it was ours */
    int waited;         /* another holder had it: contended */
    int kept_logged;    /* the server's restart keeping grants off was logged */
    int was_down;       /* a failure since the call began */
    long long down_since;
    struct late_grant late;     /* the last grant too late to trust */
    struct dm_backoff backoff;
    char member[DM_MEMBER_MAX];
};

#define ACQ_ON (-1)     /* a step's "attempt again" (any other value: the call's result) */

static void acq_start(struct acquire *a, struct dm_rlock *l, const char *owner,
                      const struct timespec *deadline, int flags, struct dm_grant *g,
                      struct dm_conn **wcp)
{
    memset(a, 0, sizeof *a);
    a->l = l;
    a->owner = owner;
    a->deadline = deadline;
    a->flags = flags;
    a->g = g;
    a->wcp = wcp;
    a->backoff = (struct dm_backoff)DM_BACKOFF_INIT(DM_BACKOFF_MIN_MS, DM_BACKOFF_MAX_MS);
    /* Fair and caching waiters queue (an rwlock's writers too: their
     * place in line keeps new readers out); a trylock never does, nor a
     * reader (it waits for release notices). */
    a->fair = (l->pub.fair || l->pub.cache) && !(flags & (DM_ACQ_TRY | DM_ACQ_READ));
    a->ch = __atomic_load_n(a->fair ? &l->wchan : &l->chan, __ATOMIC_ACQUIRE);
    new_member(l, owner, a->member);
    a->direct = a->fair && direct_wait(l);
    if (a->direct) {
        a->ch = NULL;
        *wcp = dm_wconn_take(&l->wconn);
    }
    /* Already subscribed (from an earlier wait): a notice sent after the
     * first attempt cannot be missed, so that attempt is enough. */
    if (!(flags & DM_ACQ_TRY) && a->ch)
        a->subscribed = dm_notify_is_subscribed(a->ch);
    if (a->direct && *wcp)
        a->subscribed = 1;
}

/* A grant: 0 (the lock is ours), or ACQ_ON when it came too late to trust. */
static int acq_granted(struct acquire *a, long long sent)
{
    struct dm_grant *g = a->g;
    g->sent_ms = sent;
    if (!fresh(g)) {
        dm_warn("lock %s: the grant came back too late to trust (%lld ms); asking again",
                a->l->name, dm_now_ms() - sent);
        late_grant_keep(&a->late, g);
        return ACQ_ON;          /* acquire is idempotent: the retry renews or re-queues */
    }
    late_grant_tell(&a->late, g);
    if (a->was_down)
        dm_info("lock %s: redis at %s answers again; acquired after %lld ms",
                a->l->name, dm_redis_addr(), dm_now_ms() - a->down_since);
    if (a->handed && (g->token == a->handed_tok || g->regranted)) {
        /* the handover was ours: this attempt renewed it (under a
         * token of this run if the restart check raised the counter) */
        g->more_waiters |= a->handover_more;
        g->owner_dead |= a->handover_dead;
        g->forced |= a->handover_dead;
        dm_stats_add(&dm_rlock_counts(a->l)->handoffs, 1);
    }
    g->waited = a->waited;
    g->wait_id = member_id(a->member);
    dm_stats_add(&dm_rlock_counts(a->l)->acquisitions, 1);
    return 0;
}

enum dm_fail rl_fail_of(enum dm_redis_err e)
{
    switch (e) {
    case DM_REDIS_NOCONN:
        return DM_FAIL_NOCONN;
    case DM_REDIS_IO:
        return DM_FAIL_NOREPLY;
    case DM_REDIS_WRONG_NODE:
        return DM_FAIL_WRONG_NODE;
    default:
        return refused_by_server(e) ? DM_FAIL_REFUSED : DM_FAIL_OTHER;
    }
}

/* A failed call (attempt's, or abandon's when `withdrawing`): what
 * policy.c decides, done. ACQ_ON, or the call's result. */
static int acq_failed(struct acquire *a, const struct dm_redis_error *why, int withdrawing)
{
    static long down_logged;
    struct dm_rlock *l = a->l;
    const char *err = why->errstr;
    dm_stats_add(&dm_rlock_counts(l)->redis_errors, 1);
    if (why->err == DM_REDIS_IO)
        a->unanswered = 1;
    if (refused_by_server(why->err) && !withdrawing)
        a->refused = 1;
    long left = dm_remaining_ms(a->deadline);
    struct dm_failure f = { rl_fail_of(why->err), (a->flags & DM_ACQ_TRY) != 0, rl_cfg->on_redis_down,
                            withdrawing, a->rediscovered, left };
    enum dm_step step = dm_policy_on_failure(&f);
    int gave_up = a->queued || a->refused;
    switch (step) {
    case DM_STEP_REDISCOVER:
        /* Not the primary (any more): nothing ran; the next connection
         * asks the sentinels, so try again at once. */
        a->rediscovered = 1;
        return ACQ_ON;
    case DM_STEP_EBUSY:
        dm_log_every(&down_logged, DM_DOWN_LOG_EVERY_MS, DM_LOG_ERROR,
                     "lock %s: %s; trylock returns EBUSY", l->name, err);
        give_up(l, a->owner, a->member, gave_up, a->unanswered);
        return EBUSY;
    case DM_STEP_EAGAIN:
        dm_log_every(&down_logged, DM_DOWN_LOG_EVERY_MS, DM_LOG_ERROR,
                     "lock %s: %s; returning EAGAIN (on_redis_down = \"error\")", l->name, err);
        give_up(l, a->owner, a->member, gave_up, a->unanswered);
        return EAGAIN;
    case DM_STEP_LOCAL:
        dm_log_every(&down_logged, DM_DOWN_LOG_EVERY_MS, DM_LOG_ERROR,
                     "lock %s: %s; locking this process only (on_redis_down = \"local\")",
                     l->name, err);
        give_up(l, a->owner, a->member, gave_up, a->unanswered);
        memset(a->g, 0, sizeof *a->g);
        a->g->local_only = 1;
        return 0;
    default:
        break;
    }
    if (!a->was_down) {
        a->was_down = 1;
        a->down_since = dm_now_ms();
    }
    dm_log_every(&down_logged, DM_DOWN_LOG_EVERY_MS, DM_LOG_ERROR,
                 "lock %s: %s; %s (for %lld ms, on_redis_down = \"%s\")", l->name, err,
                 refused_by_server(why->err) ? "the server refuses, retrying"
                 : why->err == DM_REDIS_IO ? "no reply, withdrawing the request and retrying"
                 : why->err == DM_REDIS_WRONG_NODE && l->slot >= 0 ? "not the slot's node (yet), retrying"
                 : why->err == DM_REDIS_WRONG_NODE ? "not the primary, asking the sentinels again"
                                                   : "waiting for redis",
                 dm_now_ms() - a->down_since, down_policy());
    if (step == DM_STEP_ETIMEDOUT) {
        /* A withdrawal that just failed is not tried again: the deadline
         * is already past. */
        if (withdrawing)
            warn_unwithdrawn(l, err);
        else
            give_up(l, a->owner, a->member, gave_up, a->unanswered);
        return ETIMEDOUT;
    }
    if (step == DM_STEP_BACKOFF) {
        long d = dm_backoff_next(&a->backoff);
        dm_sleep_ms(left >= 0 && left < d ? left : d);
    }
    return ACQ_ON;
}

/* Another holder has it (or it is not our turn): noted. */
static void acq_held(struct acquire *a, int kept_off, long pttl)
{
    if (kept_off && !a->kept_logged) {
        a->kept_logged = 1;
        dm_warn("lock %s: redis at %s started less than a lease ago, and nothing "
                "says it kept the lock's data (a restart may have lost a hold: no or "
                "partial persistence; or it is new): no grant for %ld ms more, until "
                "a lease (%ld ms) after its start, so that a holder of lost data "
                "stops first (`dmutex fresh` declares a new server, `dmutex fresh "
                "--durable` one with appendfsync always)", a->l->name, dm_redis_addr(),
                pttl, rl_cfg->lease_ms);
    }
    a->queued = a->fair;
    a->rediscovered = 0;
    a->handover_more = 0;       /* a handover being confirmed is not ours after all */
    a->handover_dead = 0;
    a->handed = 0;
    a->waited = 1;
}

/* Until a notice, a handover (ours: taken, or confirmed by one more
 * attempt), the holder's remaining lease (pttl, capped) or the deadline.
 * The first wait subscribes instead, and attempts again at once. `sent`,
 * `srv_ms`: the last attempt's, `seen`: the channel's count before it.
 * ACQ_ON, or the call's result. */
static int acq_wait(struct acquire *a, long pttl, long long sent, long long srv_ms,
                    unsigned long seen)
{
    struct dm_rlock *l = a->l;
    struct dm_grant *g = a->g;
    dm_backoff_reset(&a->backoff);
    if (a->flags & DM_ACQ_TRY)
        return EBUSY;
    long left = dm_remaining_ms(a->deadline);
    if (left == 0) {
        /* Out of time. A queued waiter may have been handed the lock
         * already: give it back rather than guess how much of its lease
         * is left. */
        give_up(l, a->owner, a->member, a->queued, 0);
        return ETIMEDOUT;
    }
    if (!a->subscribed && a->direct) {
        char wch[DM_RLOCK_KEY_MAX];
        dm_rlock_key(l, DM_KEY_WAIT, wch, sizeof wch);
        if ((*a->wcp = dm_wconn_new(wch, l->name)) != NULL) {
            a->subscribed = 1;
            return ACQ_ON;      /* the second attempt, now that no handover can be missed */
        }
        a->direct = 0;          /* none to be had: notify's channel, as any other wait */
    }
    if (!a->subscribed) {
        long to = rl_cfg->redis.command_timeout_ms;
        if (left >= 0 && left < to)
            to = left;
        if (!a->ch)
            a->ch = a->fair ? dm_rlock_wchan(l) : dm_rlock_chan(l);
        if (a->ch && dm_notify_subscribe(a->ch, to) == 0) {
            a->subscribed = 1;
            return ACQ_ON;      /* the second attempt, now that no notice can be missed */
        }
    }
    long wait = pttl > 0 && pttl < DM_WAIT_CAP_MS ? pttl : DM_WAIT_CAP_MS;
    if (left >= 0 && left < wait)
        wait = left;
    if (!a->subscribed) {
        dm_sleep_ms(wait);
        return ACQ_ON;
    }
    char msg[DM_OWNER_MAX + 48];
    int got;
    if (a->direct) {
        /* Every message on our channel, until ours or the wait's end;
         * a broken connection may have lost one: attempt again first. */
        size_t ml = strlen(a->member);
        long long until = dm_now_ms() + wait;
        do
            got = dm_redis_next_message(*a->wcp, until - dm_now_ms(), msg, sizeof msg);
        while (got == 1 && !(strncmp(msg, a->member, ml) == 0 && msg[ml] == ' '));
        if (got < 0) {
            dm_debug("lock %s: %s; subscribing again", l->name, (*a->wcp)->errstr);
            dm_wconn_close(*a->wcp);
            *a->wcp = NULL;
            a->subscribed = 0;
        }
    } else {
        got = dm_notify_wait(a->ch, seen, wait) == 0;
        if (got && a->fair)
            dm_notify_last(a->ch, msg, sizeof msg);
    }
    if (got != 1 || !a->fair)
        return ACQ_ON;
    /* The handover happened after our last attempt ran; its lease runs
     * from the handover (handed_over places it on our clock). A late
     * notice (a stalled process) is checked by one more attempt instead. */
    int ho = handed_over(msg, a->member, sent, srv_ms, g);
    if (!ho)
        return ACQ_ON;
    /* With min_replicas the handover counts once replicas have it: WAIT
     * counts only our own writes, so one more attempt (we hold it: a
     * renewal to a full lease) is our write after the handover, and its
     * WAIT covers both. */
    if (ho == 1 && fresh(g) && rl_cfg->min_replicas == 0) {
        g->waited = 1;
        g->wait_id = member_id(a->member);
        dm_stats_add(&dm_rlock_counts(l)->acquisitions, 1);
        dm_stats_add(&dm_rlock_counts(l)->handoffs, 1);
        return 0;
    }
    a->handover_more = g->more_waiters;
    a->handover_dead = g->owner_dead;
    a->handed = 1;
    a->handed_tok = g->token;
    return ACQ_ON;
}

/* The lock call: attempts (or, while a request may still run
 * unanswered, its withdrawal) until one step ends the call. */
static int acquire_loop(struct dm_rlock *l, const char *owner,
                        const struct timespec *deadline, int flags, struct dm_grant *g,
                        struct dm_conn **wcp)
{
    struct acquire a;
    acq_start(&a, l, owner, deadline, flags, g, wcp);
    for (int r = ACQ_ON;; r = ACQ_ON) {
        unsigned long seen = a.subscribed && a.ch ? dm_notify_seq(a.ch) : 0;
        long pttl = 0;
        long long sent = dm_now_ms(), srv_ms = 0;
        int kept_off = 0;
        struct dm_redis_error why;
        enum attempt res;
        int withdrawing = a.unanswered;
        if (withdrawing) {
            /* No new request while an unanswered one could still run. */
            res = abandon(l, owner, a.member, 1, &why);
            if (res == ATT_REPLIED) {
                a.unanswered = a.queued = a.refused = 0;
                new_member(l, owner, a.member);
                continue;
            }
        } else {
            res = attempt(l, owner, a.member, a.fair, (flags & DM_ACQ_READ) != 0,
                          ack_wait_ms(deadline, flags), g, &pttl, &srv_ms, &kept_off, &why);
        }
        if (res == ATT_GRANTED) {
            r = acq_granted(&a, sent);
        } else if (res == ATT_HELD) {
            acq_held(&a, kept_off, pttl);
            r = acq_wait(&a, pttl, sent, srv_ms, seen);
        } else {
            r = acq_failed(&a, &why, withdrawing);
        }
        if (r != ACQ_ON)
            return r;
    }
}

/* A release is retried, with backoff, for DM_RELEASE_TIMEOUTS command
 * timeouts rather than a number of tries: a server restart leaves every
 * pooled connection stale (each fails at once) and refuses connections for
 * a while, and a release given up leaves the lock held for the rest of its
 * lease. Any failure is retried (the release recognises its own retry);
 * never for longer than the hold surely has left of its lease when it is
 * released (its last renewal was at most a round ago), so that a release
 * that gets through does not find its own hold expired. */
int dm_rlock_release(struct dm_rlock *l, const char *owner, uint64_t token)
{
    return rl_release_waited(l, owner, token, NULL, 0, NULL);
}

/* dm_rlock_release, naming the request whose grant it ends when
 * `request` ("<owner>|<wait id>") is not NULL (release.lua's ARGV[8]): a
 * later grant of the same owner under the same token is then left alone.
 * *done (if not NULL) is set when the server released the hold (not a
 * nested count). until_ms (not 0): a release sent again after a failover,
 * tried until then only, its failure logged at warning level.
 * Every retry of a release sent without waiting goes through here with
 * the request the first one named, whatever became of that one (NOSCRIPT,
 * an error, no reply, a dropped connection, the exit flush): the owner's
 * next acquire may have run on the server before the retry does. */
DM_KEYS_FRAME
int rl_release_waited(struct dm_rlock *l, const char *owner, uint64_t token,
                      const char *request, long long until_ms, int *done)
{
    struct dm_redis_error why = { DM_REDIS_OK, "" };
    char tok[DM_FMT_U64_MAX], keep[DM_FMT_U64_MAX + 1];
    dm_fmt_u64(tok, token);
    dm_fmt_long(keep, rl_cfg->lease_ms);
    struct call_keys ks;
    char kb[call_keys_len(l, DM_CALL_RELEASE)];
    const char *const *k = call_keys(l, &ks, DM_CALL_RELEASE, kb, sizeof kb);
    const char *args[DM_KEYS_RELEASE_N + 2 + 10];
    for (int i = 0; i < DM_KEYS_RELEASE_N; i++)
        args[i] = k[dm_keys_release[i]];
    int nkeys = rw_keys(l, k, args, DM_KEYS_RELEASE_N);
    /* ARGV[6], a handover's lease: the whole one, as every grant's; ARGV[7]:
     * Redis Cluster's sharded pub/sub (see attempt); ARGV[8]: the request
     * (""; none); ARGV[9]: the run the connection reached (set per try),
     * ARGV[10]: the epoch key, for "lost with the server's data" */
    const char *argv[] = { owner, tok, k[DM_KEY_RELEASED], keep, k[DM_KEY_WAIT], keep,
                           l->slot >= 0 ? "spublish" : "", request ? request : "", "",
                           k[DM_KEY_EPOCH] };
    memcpy(args + nkeys, argv, sizeof argv);
    int nargs = nkeys + 10;
    long long start = dm_now_ms();
    long budget = DM_RELEASE_TIMEOUTS * rl_cfg->redis.command_timeout_ms;
    long safe = rl_cfg->lease_ms - rl_cfg->lease_margin_ms - rl_cfg->renew_ms;
    /* A Sentinel failover takes the sentinels' down-after time and an
     * election, seconds rather than command timeouts: a release given up
     * meanwhile would keep the lock from everyone for the rest of its lease
     * on the new primary. */
    if (rl_cfg->redis.nsentinels > 0 || rl_cfg->redis.ncluster > 0 || budget > safe)
        budget = safe;
    if (until_ms != 0)
        budget = (long)(until_ms - start);
    struct dm_backoff backoff = DM_BACKOFF_INIT(DM_BACKOFF_MIN_MS, DM_BACKOFF_MAX_MS);
    int rediscovered = 0;   /* a wrong node (Sentinel) is retried at once, once */
    for (int i = 0;; i++) {
        long left = budget - (long)(dm_now_ms() - start);
        if (i > 0 && left <= 0)
            break;
        struct dm_conn *conn = dm_redis_get_slot(l->slot);
        args[nkeys + 8] = conn->run_id;
        redisReply *r = dm_redis_script(conn, DM_SCRIPT_RELEASE, nkeys, nargs, args);
        /* Sentinel: "not held" only from the primary (a demoted one may
         * have lost its data to a resync); no round trip otherwise. */
        if (r && r->type == REDIS_REPLY_INTEGER &&
            (r->integer == RELEASE_NOT_HELD || r->integer == RELEASE_GONE_WITH_DATA) &&
            dm_redis_is_primary(conn) != DM_PRIMARY_YES) {
            freeReplyObject(r);
            r = NULL;
        }
        if (!r) {
            dm_redis_error_keep(&why, conn);
            dm_stats_add(&dm_rlock_counts(l)->redis_errors, 1);
        }
        dm_redis_put(conn);
        if (!r) {
            /* A stale connection fails at once: straight on to the next.
             * No connection, or an error reply (LOADING...): wait a bit. */
            int again = why.err == DM_REDIS_IO || (why.err == DM_REDIS_WRONG_NODE && !rediscovered);
            rediscovered |= why.err == DM_REDIS_WRONG_NODE;
            if (!again) {
                dm_sleep_ms(left > 0 && left < backoff.cur_ms ? left : backoff.cur_ms);
                dm_backoff_grow(&backoff);
            }
            continue;
        }
        long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        freeReplyObject(r);
        if (v == RELEASE_DONE && done)
            *done = 1;
        if (v == RELEASE_DONE || v == RELEASE_STILL_HELD)
            return 0;
        if (v == RELEASE_NOT_HELD)
            return EPERM;
        if (v == RELEASE_GONE_WITH_DATA)
            return ESTALE;
        why.err = DM_REDIS_BAD_REPLY;
        snprintf(why.errstr, sizeof why.errstr, "redis at %s: release.lua on %s: unexpected reply",
                 dm_redis_addr(), k[DM_KEY_LOCK]);
        break;
    }
    if (until_ms != 0) {
        dm_warn("lock %s: the release sent again to the new primary failed (%s); the lock "
                "frees itself when its lease runs out", l->name, why.errstr);
        return EIO;
    }
    dm_error("lock %s: release failed for %lld ms (%s); the lock frees itself when its "
             "lease (%ld ms) runs out", l->name, dm_now_ms() - start, why.errstr, rl_cfg->lease_ms);
    return EIO;
}

/* A reply to rl_release_write, in whatever thread read it: handed to the
 * caller's function as release.lua's answer, or -1 and why not. */
static void late_reply(void *arg, redisReply *r, const struct dm_redis_error *why)
{
    struct rl_late *x = arg;
    long v = r && r->type == REDIS_REPLY_INTEGER ? (long)r->integer : -1;
    const char *text = !r ? (why ? why->errstr : "no reply")
                     : r->type == REDIS_REPLY_ERROR ? r->str : "an unexpected reply";
    x->done(x, v, text, r == NULL);
}

DM_KEYS_FRAME
int rl_release_write(struct dm_rlock *l, const char *owner, uint64_t token,
                     const char *member, struct rl_late *x)
{
    char tok[DM_FMT_U64_MAX], keep[DM_FMT_U64_MAX + 1];
    dm_fmt_u64(tok, token);
    dm_fmt_long(keep, rl_cfg->lease_ms);
    struct call_keys ks;
    char kb[call_keys_len(l, DM_CALL_RELEASE)];
    const char *const *k = call_keys(l, &ks, DM_CALL_RELEASE, kb, sizeof kb);
    const char *args[DM_KEYS_RELEASE_N + 10];
    for (int i = 0; i < DM_KEYS_RELEASE_N; i++)
        args[i] = k[dm_keys_release[i]];
    struct dm_conn *conn = dm_redis_get_slot(l->slot);
    /* as rl_release_waited's */
    const char *argv[] = { owner, tok, k[DM_KEY_RELEASED], keep, k[DM_KEY_WAIT], keep, "",
                           member, conn->run_id, k[DM_KEY_EPOCH] };
    memcpy(args + DM_KEYS_RELEASE_N, argv, sizeof argv);
    int rc = dm_redis_script_nowait(conn, DM_SCRIPT_RELEASE, DM_KEYS_RELEASE_N,
                                    DM_KEYS_RELEASE_N + 10, args, late_reply, x);
    dm_redis_put(conn);
    return rc;
}

/* Fork: rl_locks_mu is held across fork() (see the lock order in startup.c).
 * The child has a new process id, so a new wait channel (built from it
 * when needed): the old one's notify record dropped (notify's own fork handling ran
 * first: nothing is subscribed) and made again when a waiter needs it. */
void dm_rlock_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&rl_locks_mu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    /* The releases kept for a failover are the parent's (the child has
     * its own owner ids): freed with the records' other parent state
     * (resend.c's child handler, after this one, forgets its thread). */
    rl_kept_lists = 0;
    for (size_t b = 0; b < rl_locks.n; b++)
        for (struct dm_rlock *l = (struct dm_rlock *)rl_locks.b[b]; l;
             l = (struct dm_rlock *)l->node.next) {
            dm_notify_chan_put(l->wchan);
            l->wchan = NULL;
            l->wconn = NULL;    /* closed below, with those of waits in progress */
            l->releases_unread = 0;     /* the parent's: never read here */
            free(l->kept);
            l->kept = NULL;
        }
    dm_wconn_fork_child();     /* those of waits in progress included */
    dm_name_stats_fork_child();
}
