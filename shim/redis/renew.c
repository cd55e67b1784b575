/* renew: the Redis store's renewal round (store.h's renew): every due
 * hold's renew.lua in one pipeline on the renewal thread's own connection
 * (with Redis Cluster, one pipeline per node on its pooled connections),
 * then, with Sentinel, ROLE before a loss counts, and with min_replicas one
 * WAIT before a renewal counts. The watchdog (shim/watchdog.c) decides
 * what a verdict means; this file only finds it. */
#include "lock.h"
#include "lock_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys.h"
#include "log.h"
#include "real.h"
#include "redis.h"
#include "util.h"

/* The renewal thread's connection (its own, never pooled), and its
 * context for the fork child, which closes the parent's socket. */
static struct dm_conn wd_conn;
static redisContext *wd_ctx;
/* The process's record's connection (dm_rlock_describe, below). */
static pthread_mutex_t who_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dm_conn who_conn;
static redisContext *who_ctx;   /* the fork child closes its socket */

/* What a round learnt of one hold: store.h's verdicts, and two that are
 * the round's own business. */
enum renewal { RENEW_UNKNOWN = DM_RENEW_UNKNOWN,
               RENEW_LOST = DM_RENEW_LOST,
               RENEW_OK = DM_RENEW_OK,
               RENEW_NOSCRIPT,    /* to be re-run once the pipe is drained */
               RENEW_MOVED };     /* Redis Cluster: the node does not own the slot (any
                                   * more): re-run where the redirection leads */

/* renew.lua's answer. */
enum renew_reply { RENEW_REPLY_GONE = 0,        /* the server no longer has the hold */
                   RENEW_REPLY_RENEWED = 1 };

struct snap {
    size_t i;           /* the hold's index in the caller's array */
    int node;           /* Redis Cluster: the node that owns the key's slot */
    const char *owner;
    int read;           /* an rwlock's read hold: key is its readers set */
    enum dm_script script;      /* renew.lua, or setnx_renew.lua / redisson_renew.lua (a
                                   partner protocol: key is the bare name, token the
                                   hold's token or field) */
    char key[DM_RLOCK_KEY_MAX];
    char token[DM_MEMBER_MAX];
};

/* renew.lua's (or a partner renewal's) KEYS and ARGV for one snapshot (`args` has room for 4);
 * returns how many ARGV follow the one key. */
static int renew_args(const struct snap *s, const char *lease, const char **args)
{
    args[0] = s->key;
    args[1] = s->script == DM_SCRIPT_RENEW ? s->owner : s->token;
    args[2] = lease;
    args[3] = "r";
    return s->read ? 3 : 2;
}

/* Sentinel: "the hold is gone" counts only from the primary. A demoted
 * primary answers renew.lua from its data, which a resync may have emptied
 * (the script writes nothing when the hold is missing, so no READONLY
 * comes): ROLE on the same connection, after the renewals, must still say
 * master. Otherwise the round's losses are no verdict, and the next round
 * renews on the new primary. No round trip without Sentinel. */
static void confirm_losses(struct dm_conn *conn, enum renewal *res, size_t got)
{
    size_t lost = 0;
    for (size_t i = 0; i < got; i++)
        lost += res[i] == RENEW_LOST;
    if (lost == 0 || !conn->c || dm_redis_is_primary(conn) == DM_PRIMARY_YES)
        return;
    for (size_t i = 0; i < got; i++)
        if (res[i] == RENEW_LOST)
            res[i] = RENEW_UNKNOWN;
    __atomic_store_n(&wd_ctx, NULL, __ATOMIC_RELEASE);
    dm_redis_close(conn);
}

/* min_replicas: a renewal counts once that many replicas have it, as a
 * grant does (lock.c), so the holder's idea of its lease never runs
 * past what a promoted replica would enforce. One WAIT covers the whole
 * round (it counts every write of this connection so far). Not
 * acknowledged: the round's renewals are no verdict (the deadline thread
 * then declares the hold lost at lease - margin after the last
 * acknowledged renewal, before a promoted replica would expire it). A
 * WAIT answered after the sentinels moved the primary is no verdict
 * either, as for a grant: its acks may come from a replica still
 * attached to the old primary, and the new one may not have the renewals;
 * the connection is dropped, the next round renews on the new primary. */
static void acknowledge_round(struct dm_conn *conn, enum renewal *res, size_t got, long io_ms,
                              long *log_last)
{
    const struct dm_config *cfg = rl_cfg;
    size_t ok = 0;
    for (size_t i = 0; i < got; i++)
        ok += res[i] == RENEW_OK;
    if (ok == 0)
        return;
    long acks = conn->c ? dm_redis_wait(conn, cfg->min_replicas, cfg->replica_timeout_ms) : -1;
    if (conn->c)
        dm_redis_set_timeout(conn, io_ms);
    int moved = acks >= cfg->min_replicas && dm_redis_conn_stale(conn);
    if (acks >= cfg->min_replicas && !moved)
        return;
    for (size_t i = 0; i < got; i++)
        if (res[i] == RENEW_OK)
            res[i] = RENEW_UNKNOWN;
    if (moved)
        dm_log_every(log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN, "lease renewal: the primary "
                     "moved (now %s) while replicas acknowledged the round; it does not count",
                     dm_redis_addr());
    else if (acks < 0)
        dm_log_every(log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN, "lease renewal: %s; the "
                     "round's renewals do not count", conn->c ? conn->errstr : "not connected");
    else
        dm_log_every(log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN, "lease renewal at %s: only "
                     "%ld of min_replicas = %d replicas acknowledged it within %ld ms; it does "
                     "not count", dm_redis_addr(), acks, cfg->min_replicas, cfg->replica_timeout_ms);
    if (conn->c && (moved || (acks < 0 && conn->err == DM_REDIS_IO))) {
        __atomic_store_n(&wd_ctx, NULL, __ATOMIC_RELEASE);
        dm_redis_close(conn);
    }
}

/* One pipeline of renewals on conn: snaps[0..n) into res; returns how
 * many got a verdict (a broken connection ends the round there). The
 * connection is closed when it can no longer be trusted (the caller sees
 * conn->c NULL). */
static size_t renew_pipeline(struct dm_conn *conn, struct snap *snaps, size_t n,
                             enum renewal *res, const char *lease, long io_ms, long *log_last_p)
{
    const struct dm_config *cfg = rl_cfg;
    size_t got = 0;
    long *log_last = log_last_p;
    if (!conn->c)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char *args[4];
        int nargs = renew_args(&snaps[i], lease, args);
        dm_redis_append_script(conn, snaps[i].script, 1, 1 + nargs, args);
    }
    int broken = 0, wrong_node = 0;
    for (got = 0; got < n && !broken; got++) {
        redisReply *r = dm_redis_pipeline_reply(conn, snaps[got].script);
        if (r) {
            res[got] = r->type == REDIS_REPLY_INTEGER && r->integer == RENEW_REPLY_RENEWED ? RENEW_OK
                                                                        : RENEW_LOST;
            freeReplyObject(r);
        } else if (conn->err == DM_REDIS_NOSCRIPT) {
            res[got] = RENEW_NOSCRIPT;
        } else if (conn->err == DM_REDIS_IO) {
            broken = 1;
        } else if (conn->err == DM_REDIS_WRONG_NODE && dm_redis_cluster()) {
            res[got] = RENEW_MOVED;     /* re-run where the slot is now (renew_cluster) */
        } else if (conn->err == DM_REDIS_WRONG_NODE) {
            res[got] = RENEW_UNKNOWN;   /* not a verdict; reconnect below */
            wrong_node = 1;
        } else {
            res[got] = RENEW_UNKNOWN;
            dm_log_every(log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN,
                         "lease renewal of %s: %s", snaps[got].key, conn->errstr);
        }
    }
    if (wrong_node && !broken) {
        dm_log_every(log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN,
                     "lease renewal: %s; asking the sentinels for the primary", conn->errstr);
        __atomic_store_n(&wd_ctx, NULL, __ATOMIC_RELEASE);
        dm_redis_close(conn);
    }
    if (broken) {
        got--;
        dm_log_every(log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN,
                     "lease renewal: %s; reconnecting", conn->errstr);
        __atomic_store_n(&wd_ctx, NULL, __ATOMIC_RELEASE);
        dm_redis_close(conn);
    }
    for (size_t i = 0; i < got && conn->c; i++) {
        if (res[i] != RENEW_NOSCRIPT)
            continue;
        if (dm_redis_cluster()) {
            /* Re-run alone (renew_cluster), with its own WAIT: a script
             * run here could be redirected to another node, and this
             * connection's WAIT would no longer cover it. */
            res[i] = RENEW_MOVED;
            continue;
        }
        const char *args[4];
        int nargs = renew_args(&snaps[i], lease, args);
        redisReply *r = dm_redis_script(conn, snaps[i].script, 1, 1 + nargs, args);
        res[i] = !r || r->type != REDIS_REPLY_INTEGER ? RENEW_UNKNOWN
               : r->integer == RENEW_REPLY_RENEWED ? RENEW_OK : RENEW_LOST;
        if (r)
            freeReplyObject(r);
        if (conn->err == DM_REDIS_IO) {
            __atomic_store_n(&wd_ctx, NULL, __ATOMIC_RELEASE);
            dm_redis_close(conn);
            got = i;
        }
    }
    confirm_losses(conn, res, got);
    if (cfg->min_replicas > 0)
        acknowledge_round(conn, res, got, io_ms, log_last);
    return got;
}

/* Redis Cluster: one pipeline per node (the holds grouped by the node that
 * owns their slot, on that node's pooled connections); a renewal a node
 * answers with MOVED or ASK is re-run at once where the redirection leads
 * (dm_redis_script follows it), with its own WAIT. */
static int snap_by_node(const void *a, const void *b)
{
    const struct snap *x = a, *y = b;
    return (x->node > y->node) - (x->node < y->node);
}

static size_t renew_cluster(struct snap *snaps, size_t n, enum renewal *res, const char *lease,
                            long io_ms, long *log_last)
{
    const struct dm_config *cfg = rl_cfg;
    for (size_t i = 0; i < n; i++)
        snaps[i].node = dm_redis_node_of(dm_redis_slot(snaps[i].key));
    qsort(snaps, n, sizeof *snaps, snap_by_node);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && snaps[j].node == snaps[i].node)
            j++;
        if (snaps[i].node >= 0) {
            struct dm_conn *conn = dm_redis_get_node(snaps[i].node);
            if (conn->c) {
                __atomic_store_n(&wd_ctx, conn->c, __ATOMIC_RELEASE);
                dm_redis_set_timeout(conn, io_ms);
                size_t got = renew_pipeline(conn, snaps + i, j - i, res + i, lease, io_ms,
                                            log_last);
                for (size_t k = i + got; k < j; k++)
                    res[k] = RENEW_UNKNOWN;
                __atomic_store_n(&wd_ctx, NULL, __ATOMIC_RELEASE);
                dm_redis_set_timeout(conn, cfg->redis.command_timeout_ms);
            } else {
                dm_log_every(log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN,
                             "lease renewal: %s; retrying", conn->errstr);
            }
            dm_redis_put(conn);
        }
        i = j;
    }
    for (size_t i = 0; i < n; i++) {
        if (res[i] != RENEW_MOVED && snaps[i].node >= 0)
            continue;
        res[i] = RENEW_UNKNOWN;
        struct dm_conn *conn = dm_redis_get_key(snaps[i].key);
        const char *args[4];
        int nargs = renew_args(&snaps[i], lease, args);
        redisReply *r = dm_redis_script(conn, snaps[i].script, 1, 1 + nargs, args);
        if (r && r->type == REDIS_REPLY_INTEGER)
            res[i] = r->integer == RENEW_REPLY_RENEWED ? RENEW_OK : RENEW_LOST;
        if (r)
            freeReplyObject(r);
        else
            dm_log_every(log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN,
                         "lease renewal of %s: %s", snaps[i].key, conn->errstr);
        if (res[i] == RENEW_OK && cfg->min_replicas > 0 &&
            dm_redis_wait(conn, cfg->min_replicas, cfg->replica_timeout_ms) < cfg->min_replicas)
            res[i] = RENEW_UNKNOWN;
        dm_redis_put(conn);
    }
    return n;
}

void dm_rlock_renew(const struct dm_renew *holds, size_t n, enum dm_renewal *out,
                    long long *sent_ms)
{
    const struct dm_config *cfg = rl_cfg;
    static long log_last;
    char lease[24];
    snprintf(lease, sizeof lease, "%ld", cfg->lease_ms);
    /* Loss deadlines are the deadline thread's; a slow reply only has to
     * come back before the next round is due. */
    long io_ms = cfg->redis.command_timeout_ms;
    if (io_ms > cfg->renew_ms)
        io_ms = cfg->renew_ms;
    struct snap *snaps = calloc(n, sizeof *snaps);
    enum renewal *res = calloc(n, sizeof *res);
    *sent_ms = dm_now_ms();
    if (!snaps || !res) {
        free(snaps);
        free(res);
        return;     /* no verdict: the next round tries again */
    }
    for (size_t i = 0; i < n; i++) {
        snaps[i].i = i;
        snaps[i].owner = holds[i].owner;
        snaps[i].read = holds[i].read;
        snaps[i].script = DM_SCRIPT_RENEW;
        struct dm_rlock *l = dm_rlock_of(holds[i].lock);
        if (l->pub.protocol != DM_PROTOCOL_DMUTEX) {
            /* The bare name holding the hold's token (setnx) or field
             * (redisson): partner.c. */
            snaps[i].script = l->pub.protocol == DM_PROTOCOL_SETNX ? DM_SCRIPT_SETNX_RENEW
                                                                   : DM_SCRIPT_REDISSON_RENEW;
            snprintf(snaps[i].key, sizeof snaps[i].key, "%s", l->name);
            rl_member_of(snaps[i].token, holds[i].owner,
                         __atomic_load_n(&l->partner_id, __ATOMIC_ACQUIRE));
            continue;
        }
        dm_rlock_key(l, holds[i].read ? DM_KEY_READERS : DM_KEY_LOCK,
                     snaps[i].key, sizeof snaps[i].key);
    }
    struct dm_conn *conn = &wd_conn;
    if (conn->c && dm_redis_conn_stale(conn)) {
        /* Sentinel: the primary moved; renew on the new one. */
        __atomic_store_n(&wd_ctx, NULL, __ATOMIC_RELEASE);
        dm_redis_close(conn);
    }
    if (!conn->c && !dm_redis_cluster()) {
        dm_redis_connect(conn);
        __atomic_store_n(&wd_ctx, conn->c, __ATOMIC_RELEASE);
        if (conn->c)
            dm_redis_set_timeout(conn, io_ms);
        else
            dm_log_every(&log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN,
                         "lease renewal: %s; retrying", conn->errstr);
    }
    /* The lease of a renewal runs from when it was sent: after the connect
     * (Redis Cluster: each node's pooled connection is got in the round). */
    *sent_ms = dm_now_ms();
    size_t got = 0;
    if (dm_redis_cluster())
        got = renew_cluster(snaps, n, res, lease, io_ms, &log_last);
    else if (conn->c)
        got = renew_pipeline(conn, snaps, n, res, lease, io_ms, &log_last);
    for (size_t k = 0; k < got; k++)
        out[snaps[k].i] = res[k] == RENEW_OK || res[k] == RENEW_LOST ? (enum dm_renewal)res[k]
                                                                     : DM_RENEW_UNKNOWN;
    free(snaps);
    free(res);
}

/* Fork: the renewal thread is the parent's; its socket is closed in the
 * child (the context's memory left alone), so the child's own thread
 * connects anew. */
void dm_renew_atfork(enum dm_fork_phase phase)
{
    if (phase != DM_FORK_CHILD)
        return;
    if (wd_ctx) {
        close(wd_ctx->fd);
        wd_ctx = NULL;
    }
    /* Only wd_ctx names a socket to close: it is cleared before a close
     * and set after a connect, so it never names an fd the parent has
     * already given back (a number another of its threads may have been
     * given since). The context's memory is the parent's. */
    memset(&wd_conn, 0, sizeof wd_conn);
    if (who_ctx) {
        close(who_ctx->fd);
        who_ctx = NULL;
    }
    memset(&who_conn, 0, sizeof who_conn);
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    who_mu = fresh;     /* who's thread is the parent's */
}

/* The process's record (store.h: describe), written by who's thread on a
 * connection of its own: taken from the pool, a write in flight would
 * leave a lock call none idle, and a connect then (a stalled server's
 * INFO) would cost that call. Redis Cluster: the pooled connection of the
 * key's node. The exit's delete uses it too, when who's thread is not in
 * a write (who_mu, tried: a write stuck on a stalled server is left to
 * its timeout, the record to its expiry). Idle: nothing to do, the key's
 * expiry is the lease. */

int dm_rlock_describe(const char *text, enum dm_describe how)
{
    if (how == DM_DESCRIBE_IDLE)
        return 0;
    char key[DM_NAME_MAX + 64];
    dm_keys_who(key, sizeof key, rl_cfg->ns, dm_store_process_id());
    int cluster = dm_redis_cluster();
    if (!cluster && (how == DM_DESCRIBE_DELETE ? dm_real.mutex_trylock(&who_mu) : dm_lock(&who_mu)) != 0)
        return -1;      /* the exit, while a write is stuck */
    struct dm_conn *conn = &who_conn;
    if (cluster) {
        conn = dm_redis_get_key(key);
    } else {
        if (conn->c && dm_redis_conn_stale(conn)) {     /* Sentinel: the primary moved */
            __atomic_store_n(&who_ctx, NULL, __ATOMIC_RELEASE);
            dm_redis_close(conn);
        }
        if (!conn->c && how == DM_DESCRIBE_WRITE) {
            dm_redis_connect(conn);
            __atomic_store_n(&who_ctx, conn->c, __ATOMIC_RELEASE);
        }
    }
    redisReply *r = NULL;
    long io = rl_cfg->redis.command_timeout_ms;
    if (how == DM_DESCRIBE_DELETE && io > DM_DESCRIBE_DELETE_MS && conn->c)
        dm_redis_set_timeout(conn, DM_DESCRIBE_DELETE_MS);     /* the exit's */
    if (conn->c)
        r = how == DM_DESCRIBE_WRITE
            ? dm_redis_command(conn, "SET %s %s PX %ld", key, text, rl_cfg->lease_ms)
            : dm_redis_command(conn, "DEL %s", key);
    if (how == DM_DESCRIBE_DELETE && io > DM_DESCRIBE_DELETE_MS && conn->c)
        dm_redis_set_timeout(conn, io);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (!ok)
        dm_debug("the process's record %s: %s", key, r ? r->str : conn->c || cluster ?
                 conn->errstr : "not connected");
    if (r)
        freeReplyObject(r);
    if (cluster) {
        dm_redis_put(conn);
    } else {
        if (conn->c && !ok && conn->err == DM_REDIS_IO) {
            __atomic_store_n(&who_ctx, NULL, __ATOMIC_RELEASE);
            dm_redis_close(conn);
        }
        dm_unlock(&who_mu);
    }
    return ok ? 0 : -1;
}
