/* cond_publish: a cluster-wide condition variable's signal (PUBLISH, or
 * SPUBLISH on the slot's primary with Redis Cluster), and the conds'
 * outage backoff per node (lock.h: dm_rlock_cond_down/_outcome).
 * Over lock.c's records; the listed conds themselves are mapped's. */
#include "lock.h"
#include "lock_impl.h"

#include <stdio.h>

#include "log.h"
#include "redis.h"
#include "util.h"

#define DM_COND_PUBLISH_TRIES 3 /* a signal sent again after a MOVED (Redis Cluster) */

/* Condition variables while Redis does not answer: after a failed publish
 * or subscription, their Redis calls are not tried again for a backoff
 * (doubling from DM_BACKOFF_MIN_MS, at least twice what the failure took,
 * at most DM_COND_DOWN_MAX_MS), so that a program signalling and waiting
 * under its own mutex does not pay a connect or command timeout per call.
 * Per node (the one without a cluster; with one, the node of the cond's
 * slot: a node down does not silence the conds of the others), lock-free
 * (two atomics each: a race between two failures only picks one of their
 * periods). */
static long long cond_down_until[DM_REDIS_NODES_MAX];  /* CLOCK_MONOTONIC ms; 0: up */
static long cond_down_ms[DM_REDIS_NODES_MAX];          /* the last period; 0 after a success */

static int cond_node(const struct dm_rlock *l)
{
    int node = dm_redis_node_cached(l->slot);
    return node >= 0 && node < DM_REDIS_NODES_MAX ? node : 0;
}

int dm_rlock_cond_down(const struct dm_rlock *l)
{
    long long until = __atomic_load_n(&cond_down_until[cond_node(l)], __ATOMIC_RELAXED);
    return until != 0 && dm_now_ms() < until;
}

void dm_rlock_cond_outcome(const struct dm_rlock *l, int ok, long took_ms)
{
    int node = cond_node(l);
    if (ok) {
        if (__atomic_load_n(&cond_down_until[node], __ATOMIC_RELAXED) != 0) {
            __atomic_store_n(&cond_down_ms[node], 0, __ATOMIC_RELAXED);
            __atomic_store_n(&cond_down_until[node], 0, __ATOMIC_RELAXED);
        }
        return;
    }
    long d = __atomic_load_n(&cond_down_ms[node], __ATOMIC_RELAXED);
    d = d > 0 ? 2 * d : DM_BACKOFF_MIN_MS;
    if (d < 2 * took_ms)
        d = 2 * took_ms;
    if (d > DM_COND_DOWN_MAX_MS)
        d = DM_COND_DOWN_MAX_MS;
    __atomic_store_n(&cond_down_ms[node], d, __ATOMIC_RELAXED);
    __atomic_store_n(&cond_down_until[node], dm_now_ms() + d - dm_jitter(d / 4),
                     __ATOMIC_RELAXED);
}

/* One (S)PUBLISH on a connection; its subscriber count, or -1 with the
 * cause in *why. `again`: Redis Cluster redirected it (sent again there). */
static long cond_publish_on(struct dm_conn *conn, const struct dm_rlock *l,
                            const char *msg, struct dm_redis_error *why, int *again)
{
    int cluster = l->slot >= 0;
    char channel[DM_RLOCK_KEY_MAX];
    dm_rlock_key(l, DM_KEY_COND, channel, sizeof channel);
    redisReply *r = cluster ? dm_redis_command(conn, "SPUBLISH %s %s", channel, msg)
                            : dm_redis_command(conn, "PUBLISH %s %s", channel, msg);
    long n = -1;
    if (r && r->type == REDIS_REPLY_INTEGER) {
        n = (long)r->integer;
    } else if (r) {
        why->err = DM_REDIS_BAD_REPLY;
        snprintf(why->errstr, sizeof why->errstr, "redis at %s: PUBLISH: unexpected reply",
                 dm_redis_conn_addr(conn));
    } else {
        dm_redis_error_keep(why, conn);
    }
    *again = !r && cluster && conn->err == DM_REDIS_WRONG_NODE;
    if (r)
        freeReplyObject(r);
    return n;
}

long dm_rlock_cond_publish(struct dm_rlock *l, int broadcast)
{
    static long publish_logged;
    const char *what = broadcast ? "broadcast" : "signal";
    char msg[48];
    snprintf(msg, sizeof msg, "%s %s", dm_store_process_id(), what);
    if (dm_rlock_cond_down(l)) {
        dm_stats_add(&dm_rlock_counts(l)->cond_lost, 1);
        dm_log_every(&publish_logged, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN,
                     "condition variable %s: the %s reached no other process (redis at %s "
                     "did not answer a moment ago; not tried again yet); their waiters wake "
                     "at their deadline or after their reconnect", l->name, what,
                     dm_redis_addr());
        return -1;
    }
    /* With Redis Cluster the waiters listen on the shard of the channel's
     * slot (SSUBSCRIBE): the signal is a SPUBLISH on the slot's primary. A
     * MOVED (the slot moved; redis updated the map) is sent again there.
     * A failure that came back faster than any timeout (a pooled
     * connection the server closed, idle or by a restart: no reply at
     * once; a connect refused) is followed by one more try on a new
     * connection: PUBLISH is safe to repeat (at worst a spurious
     * wake-up), and a signal must reach the others or be reported. A
     * server that does not answer is not asked twice. */
    struct dm_redis_error why = { DM_REDIS_OK, "" };
    long n = -1;
    long long start = dm_now_ms();
    long fast = rl_cfg->redis.connect_timeout_ms < rl_cfg->redis.command_timeout_ms
                    ? rl_cfg->redis.connect_timeout_ms / 2 : rl_cfg->redis.command_timeout_ms / 2;
    int fresh = 0;
    for (int attempt = 0; attempt < DM_COND_PUBLISH_TRIES; attempt++) {
        struct dm_conn *conn = fresh ? dm_redis_get_slot_new(l->slot) : dm_redis_get_slot(l->slot);
        int again = 0;
        n = cond_publish_on(conn, l, msg, &why, &again);
        dm_redis_put(conn);
        if (n >= 0)
            break;
        if (!again && !fresh && (why.err == DM_REDIS_IO || why.err == DM_REDIS_NOCONN) &&
            dm_now_ms() - start < fast) {
            fresh = 1;          /* a dead pooled connection: once more on a new one */
            continue;
        }
        if (!again)
            break;
    }
    int outage = n < 0 && (why.err == DM_REDIS_NOCONN || why.err == DM_REDIS_IO ||
                           why.err == DM_REDIS_TLS || why.err == DM_REDIS_WRONG_NODE);
    if (n >= 0 || outage)
        dm_rlock_cond_outcome(l, n >= 0, (long)(dm_now_ms() - start));
    if (n < 0) {
        dm_stats_add(&dm_rlock_counts(l)->cond_lost, 1);
        dm_log_every(&publish_logged, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN,
                     "condition variable %s: the %s reached no other process (%s); their "
                     "waiters wake at their deadline or after their reconnect",
                     l->name, what, why.errstr);
    }
    return n;
}
