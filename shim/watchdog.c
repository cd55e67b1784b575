/* watchdog: the renewal thread. Each round snapshots the watched holds
 * (lock key, owner, generation) under the mutex, renews them all in one
 * pipeline on its own connection, then applies the replies to holds that
 * are still the same generation. The time of a successful renewal is the
 * time its round was *sent*, so the client's idea of the lease never runs
 * past the server's. Loss deadlines are watched by a second thread that
 * does no I/O: a renewal round can block for a connect timeout plus
 * several command timeouts (a server whose packets are dropped), longer
 * than the margin, and the holder must still stop before the server-side
 * lease runs out. */
#include "watchdog.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "real.h"
#include "redis.h"
#include "util.h"

static pthread_mutex_t wmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wcv;              /* the renewal thread waits here */
static pthread_cond_t dcv;              /* the deadline thread waits here */
static int wcv_ready;
static long long deadline_wake_ms;      /* when the deadline thread will look next */
static struct dm_hold *holds;           /* doubly linked, newest first */
static size_t nholds;
static pthread_cond_t round_cv;         /* a renewal round has been applied */
static unsigned long rounds_started, rounds_done;
static int running;                     /* the renewal thread */
static int deadline_running;            /* the deadline thread */
static long long wd_wake_ms = LLONG_MAX; /* when the renewal thread will look next */
static unsigned long lost_count;
static redisContext *wd_ctx;            /* the thread's connection, for the fork child */

/* What a round learnt of one hold. */
enum renewal { RENEW_UNKNOWN,     /* no verdict: an error reply, or no reply at all */
               RENEW_LOST,        /* the server no longer has the hold */
               RENEW_OK,          /* renewed */
               RENEW_NOSCRIPT,    /* to be re-run once the pipe is drained */
               RENEW_MOVED };     /* Redis Cluster: the node does not own the slot (any
                                   * more): re-run where the redirection leads */

/* renew.lua's answer. */
enum renew_reply { RENEW_REPLY_GONE = 0,        /* the server no longer has the hold */
                   RENEW_REPLY_RENEWED = 1 };

struct snap {
    struct dm_hold *h;
    int node;           /* Redis Cluster: the node that owns the key's slot */
    unsigned gen;
    char key[DM_RLOCK_KEY_MAX];
    char owner[DM_OWNER_MAX];
    int read;           /* an rwlock's read hold: key is its readers set */
};

/* renew.lua's KEYS and ARGV for one snapshot (`args` has room for 4);
 * returns how many ARGV follow the one key. */
static int renew_args(const struct snap *s, const char *lease, const char **args)
{
    args[0] = s->key;
    args[1] = s->owner;
    args[2] = lease;
    args[3] = "r";
    return s->read ? 3 : 2;
}

static void cv_init_locked(void)
{
    if (wcv_ready)
        return;
    dm_cond_init_monotonic(&wcv);
    dm_cond_init_monotonic(&dcv);
    dm_cond_init_monotonic(&round_cv);
    wcv_ready = 1;
}

/* wmu held. */
static void declare_lost(struct dm_hold *h, const char *why, long long now)
{
    const struct dm_config *cfg = dm_rlock_config();
    __atomic_store_n(&h->lost, 1, __ATOMIC_SEQ_CST);   /* read without wmu: is_lost */
    __atomic_add_fetch(&lost_count, 1, __ATOMIC_RELAXED);
    dm_stats_add(&dm_rlock_counts(h->lock)->leases_lost, 1);
    if (__atomic_load_n(&h->idle, __ATOMIC_SEQ_CST)) {
        /* Kept with nobody inside (the process was stopped, or Redis
         * unreachable): nothing ran under it. The next lock takes it anew. */
        dm_warn("lock %s (owner %s, fencing token %llu): the lease of a hold nobody was "
                "inside (kept by lock caching or a batch) ran out: %s; given up, the next "
                "lock asks Redis again", h->lock->name, h->owner,
                (unsigned long long)h->token, why);
        return;
    }
    dm_error("lost the lease of lock %s (owner %s, fencing token %llu) while held: %s; "
             "last renewal succeeded %lld ms ago (lease %ld ms); "
             "lost leases in this process: %lu%s",
             h->lock->name, h->owner, (unsigned long long)h->token, why,
             now - h->renewed_ms, cfg->lease_ms, lost_count,
             cfg->on_lease_lost == DM_LOST_ABORT
                 ? "; aborting before another process can enter (on_lease_lost = \"abort\")"
                 : "; continuing (on_lease_lost = \"warn\"): its unlock will return EPERM");
    if (cfg->on_lease_lost == DM_LOST_ABORT)
        abort();
}

static void check_deadlines_locked(long long now)
{
    const struct dm_config *cfg = dm_rlock_config();
    for (struct dm_hold *h = holds; h; h = h->next)
        if (!h->lost && now - h->renewed_ms > h->lease_ms - cfg->lease_margin_ms)
            declare_lost(h, "no renewal succeeded in time (redis unreachable or stuck)", now);
}

static void apply(struct snap *s, enum renewal res, long long sent)
{
    struct dm_hold *h = s->h;
    if (!h->registered || h->gen != s->gen || h->lost)
        return;
    if (res != RENEW_OK && res != RENEW_LOST) {
        dm_stats_add(&dm_rlock_counts(h->lock)->redis_errors, 1);
        return;     /* not a verdict on the hold */
    }
    if (res == RENEW_OK) {
        dm_stats_add(&dm_rlock_counts(h->lock)->renewals, 1);
        /* The lease first: is_lost reads renewed_ms, then lease_ms. */
        __atomic_store_n(&h->lease_ms, dm_rlock_config()->lease_ms, __ATOMIC_RELAXED);
        __atomic_store_n(&h->renewed_ms, sent, __ATOMIC_RELEASE);
    }
    else
        declare_lost(h, "the server no longer has the hold (expired, deleted, or "
                        "lost by a restart or failover)", dm_now_ms());
}

/* The deadline thread: sleeps until the earliest loss deadline (or a
 * change to the holds) and declares the late ones lost. Never blocks on
 * anything but wmu, which nobody holds across I/O. */
static void *deadline_main(void *arg)
{
    (void)arg;
    const struct dm_config *cfg = dm_rlock_config();
    dm_lock(&wmu);
    for (;;) {
        long long now = dm_now_ms();
        check_deadlines_locked(now);
        long long wake = now + cfg->renew_ms;
        for (struct dm_hold *h = holds; h; h = h->next) {
            long long dl = h->renewed_ms + h->lease_ms - cfg->lease_margin_ms + 1;
            if (!h->lost && dl < wake)
                wake = dl;
        }
        struct timespec ts;
        long long d = wake > now ? wake - now : 1;
        dm_deadline_in(&ts, (long)d);
        deadline_wake_ms = now + d;
        dm_cv_timedwait(&dcv, &wmu, &ts);
    }
    return NULL;
}

/* When `h` should be renewed: a renewal period after the last good one;
 * a hold with a shorter lease than ours (handed over by a process with a
 * shorter lease_ms) at a third of that lease. */
static long long due_ms(const struct dm_hold *h, const struct dm_config *cfg)
{
    long period = h->lease_ms < cfg->lease_ms ? h->lease_ms / 3 : cfg->renew_ms;
    return h->renewed_ms + period;
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
 * grant does (cluster.c), so the holder's idea of its lease never runs
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
    const struct dm_config *cfg = dm_rlock_config();
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
    const struct dm_config *cfg = dm_rlock_config();
    size_t got = 0;
    long *log_last = log_last_p;
    if (!conn->c)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char *args[4];
        int nargs = renew_args(&snaps[i], lease, args);
        dm_redis_append_script(conn, DM_SCRIPT_RENEW, 1, 1 + nargs, args);
    }
    int broken = 0, wrong_node = 0;
    for (got = 0; got < n && !broken; got++) {
        redisReply *r = dm_redis_pipeline_reply(conn, DM_SCRIPT_RENEW);
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
        redisReply *r = dm_redis_script(conn, DM_SCRIPT_RENEW, 1, 1 + nargs, args);
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
    const struct dm_config *cfg = dm_rlock_config();
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
        redisReply *r = dm_redis_script(conn, DM_SCRIPT_RENEW, 1, 1 + nargs, args);
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

static void *watchdog_main(void *arg)
{
    (void)arg;
    const struct dm_config *cfg = dm_rlock_config();
    struct dm_conn conn = { 0 };    /* the thread's own, never pooled */
    struct snap *snaps = NULL;
    size_t cap = 0;
    char lease[24];
    static long log_last;
    snprintf(lease, sizeof lease, "%ld", cfg->lease_ms);
    /* Loss deadlines are the deadline thread's; a slow reply only has to
     * come back before the next round is due. */
    long io_ms = cfg->redis.command_timeout_ms;
    if (io_ms > cfg->renew_ms)
        io_ms = cfg->renew_ms;
    /* After a round, the next one waits at least this long, so a server
     * that fails every renewal is not hammered. */
    long min_gap = cfg->renew_ms / 4 > 0 ? cfg->renew_ms / 4 : 1;
    long long last_round = 0;

    dm_lock(&wmu);
    for (;;) {
        /* Sleep until the first hold is due (one round renews them all). */
        for (;;) {
            long long now = dm_now_ms();
            check_deadlines_locked(now);
            long long wake = LLONG_MAX;
            for (struct dm_hold *h = holds; h; h = h->next)
                if (!h->lost && due_ms(h, cfg) < wake)
                    wake = due_ms(h, cfg);
            if (wake != LLONG_MAX && wake < last_round + min_gap)
                wake = last_round + min_gap;
            if (now >= wake)
                break;
            wd_wake_ms = wake;
            long long d = wake - now < cfg->renew_ms ? wake - now : cfg->renew_ms;
            struct timespec ts;
            dm_deadline_in(&ts, (long)d);
            dm_cv_timedwait(&wcv, &wmu, &ts);
        }
        wd_wake_ms = LLONG_MAX;
        last_round = dm_now_ms();

        if (nholds > cap) {
            size_t ncap = nholds * 2;
            struct snap *n = realloc(snaps, ncap * sizeof *n);
            if (!n)
                continue;
            snaps = n;
            cap = ncap;
        }
        size_t n = 0;
        unsigned long round = ++rounds_started;
        for (struct dm_hold *h = holds; h; h = h->next) {
            if (h->lost)
                continue;
            h->snap_round = round;  /* its memory must outlive this round */
            snaps[n].h = h;
            snaps[n].gen = h->gen;
            snaps[n].read = h->read;
            dm_rlock_key(h->lock, h->read ? DM_KEY_READERS : DM_KEY_LOCK,
                                snaps[n].key, sizeof snaps[n].key);
            memcpy(snaps[n].owner, h->owner, sizeof h->owner);
            n++;
        }
        dm_unlock(&wmu);

        if (conn.c && dm_redis_conn_stale(&conn)) {
            /* Sentinel: the primary moved; renew on the new one. */
            __atomic_store_n(&wd_ctx, NULL, __ATOMIC_RELEASE);
            dm_redis_close(&conn);
        }
        if (n > 0 && !conn.c && !dm_redis_cluster()) {
            dm_redis_connect(&conn);
            __atomic_store_n(&wd_ctx, conn.c, __ATOMIC_RELEASE);
            if (conn.c) {
                dm_redis_set_timeout(&conn, io_ms);
            } else {
                dm_log_every(&log_last, DM_DOWN_LOG_EVERY_MS, DM_LOG_WARN,
                             "lease renewal: %s; retrying", conn.errstr);
            }
        }
        long long sent = dm_now_ms();
        size_t got = 0;
        enum renewal *res = NULL;
        if (n > 0 && dm_redis_cluster() && (res = calloc(n, sizeof *res)) != NULL)
            got = renew_cluster(snaps, n, res, lease, io_ms, &log_last);
        else if (n > 0 && conn.c && (res = calloc(n, sizeof *res)) != NULL)
            got = renew_pipeline(&conn, snaps, n, res, lease, io_ms, &log_last);

        dm_lock(&wmu);
        for (size_t i = 0; res && i < got; i++)
            apply(&snaps[i], res[i], sent);
        /* The holds the round could not renew at all (no connection, or
         * it broke before their reply): a failed Redis call each. */
        for (size_t i = res ? got : 0; i < n; i++)
            apply(&snaps[i], RENEW_UNKNOWN, sent);
        free(res);
        rounds_done = round;
        dm_cv_broadcast(&round_cv);
    }
    return NULL;
}

/* wmu held. */
static void unlink_locked(struct dm_hold *h)
{
    if (!h->registered)
        return;
    if (h->prev)
        h->prev->next = h->next;
    else
        holds = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->registered = 0;
    nholds--;
}

int dm_watchdog_add(struct dm_hold *h, long long asked_ms, long lease_ms)
{
    int rc = 0;
    dm_lock(&wmu);
    cv_init_locked();
    __atomic_store_n(&h->lease_ms, lease_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&h->renewed_ms, asked_ms, __ATOMIC_RELEASE);
    /* Wake a thread only when this hold needs it sooner than it will look
     * anyway: a lock/unlock cycle must not cost two context switches. */
    const struct dm_config *cfg = dm_rlock_config();
    if (due_ms(h, cfg) < wd_wake_ms)
        dm_cv_signal(&wcv);
    if (asked_ms + lease_ms - cfg->lease_margin_ms < deadline_wake_ms)
        dm_cv_signal(&dcv);
    h->gen++;
    __atomic_store_n(&h->lost, 0, __ATOMIC_RELEASE);
    h->registered = 1;
    h->prev = NULL;
    h->next = holds;
    if (holds)
        holds->prev = h;
    holds = h;
    nholds++;
    if (!running || !deadline_running) {
        /* Both threads or no hold: without the renewal thread the lease
         * runs out under the critical section, and without the deadline
         * thread a stuck renewal round hides the loss past the lease. */
        if (!running && (rc = dm_thread_start(NULL, watchdog_main, NULL)) == 0)
            running = 1;
        if (rc == 0 && !deadline_running &&
            (rc = dm_thread_start(NULL, deadline_main, NULL)) == 0)
            deadline_running = 1;
        if (rc != 0) {
            unlink_locked(h);
            dm_error("cannot start the lease %s thread: %s", running ? "deadline" : "renewal",
                     strerror(rc));
        }
    }
    dm_unlock(&wmu);
    return rc;
}

void dm_watchdog_forget(struct dm_hold *h)
{
    dm_lock(&wmu);
    cv_init_locked();
    while (h->snap_round > rounds_done)
        dm_cv_wait(&round_cv, &wmu);
    dm_unlock(&wmu);
}

int dm_watchdog_remove(struct dm_hold *h)
{
    dm_lock(&wmu);
    /* Past its loss deadline, not declared yet (the process was stopped
     * and the deadline thread has not run since): declared here, as that
     * thread would, before the release, whose answer can no longer be
     * trusted to say "lost" (the server's record of the loss lasts a lease). */
    long long now = dm_now_ms();
    if (h->registered && !h->lost &&
        now - h->renewed_ms > h->lease_ms - dm_rlock_config()->lease_margin_ms)
        declare_lost(h, "no renewal succeeded in time (redis unreachable or stuck)", now);
    int lost = h->lost;
    unlink_locked(h);
    dm_unlock(&wmu);
    return lost;
}

long long dm_watchdog_lease_end(struct dm_hold *h)
{
    long long renewed = __atomic_load_n(&h->renewed_ms, __ATOMIC_ACQUIRE);
    return renewed + __atomic_load_n(&h->lease_ms, __ATOMIC_RELAXED);
}

/* Without wmu: asked on every lock and unlock of a held name (cache mode),
 * it must not serialise them on the watchdog's mutex. The flag is written
 * under wmu with release stores; a loss declared a moment later is seen by
 * the next call, as it would be with the mutex. A hold past its loss
 * deadline counts as lost before the deadline thread declares it: a
 * process stopped past its lease (SIGSTOP, a paused VM) resumes every
 * thread at once, and a lock call that ran first joined a hold the server
 * had already given to another process. The test is the deadline
 * thread's own (renewed_ms is stored last, with release). */
int dm_watchdog_is_lost(struct dm_hold *h)
{
    if (__atomic_load_n(&h->lost, __ATOMIC_ACQUIRE))
        return 1;
    long long renewed = __atomic_load_n(&h->renewed_ms, __ATOMIC_ACQUIRE);
    long lease = __atomic_load_n(&h->lease_ms, __ATOMIC_RELAXED);
    return dm_now_ms() - renewed > lease - dm_rlock_config()->lease_margin_ms;
}

void dm_watchdog_note_lost(void)
{
    __atomic_add_fetch(&lost_count, 1, __ATOMIC_RELAXED);
}

unsigned long dm_watchdog_lost_count(void)
{
    return __atomic_load_n(&lost_count, __ATOMIC_RELAXED);
}

/* Fork: startup's prepare handler holds wmu across fork() (see the lock
 * order in startup.c); the parent lets go, the child makes it anew. */
void dm_watchdog_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&wmu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    wcv_ready = 0;
    cv_init_locked();
    /* No round is in flight in the child: the renewal thread is the
     * parent's. */
    rounds_done = rounds_started;
    /* The parent's holds are the parent's: the child holds nothing. */
    for (struct dm_hold *h = holds; h;) {
        struct dm_hold *next = h->next;
        h->registered = 0;
        h->prev = h->next = NULL;
        h = next;
    }
    holds = NULL;
    nholds = 0;
    running = 0;
    deadline_running = 0;
    wd_wake_ms = LLONG_MAX;
    if (wd_ctx) {
        close(wd_ctx->fd);     /* the parent's socket; its memory is left alone */
        wd_ctx = NULL;
    }
}
