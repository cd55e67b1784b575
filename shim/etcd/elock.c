/* elock: the lock protocol over etcd (docs/design.md, "The etcd store"):
 * a process's place in a lock's queue is one key under its lease, the
 * oldest key holds the lock and its create_revision is the fencing token;
 * a waiter watches only the key before it, so a release wakes one process.
 * Every step is one Txn whose compares say, on the leader, whether the
 * step still holds: the queue empty (an uncontended grant in one write),
 * our key still ours and no older key left (a grant after a wait: the
 * read-back etcd 3.4's own lock service lacks), our key still at our
 * token (a release, never a newer hold's). An enqueue is guarded too
 * (etcd.h's NS#NAME#a<lease>): a copy of it that a member kept while it
 * did not answer, and serves later, runs at most once and never after
 * its attempt ended. Records are interned by name, as store.h asks. */
#include "elock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include "http.h"
#include "log.h"
#include "real.h"
#include "stats.h"
#include "util.h"
#include "watch.h"

static pthread_mutex_t locks_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dm_htab locks;

struct dm_elock *dm_elock_of(struct dm_store_lock *l)
{
    return l ? (struct dm_elock *)((char *)l - offsetof(struct dm_elock, pub)) : NULL;
}

static struct dm_elock *record_get(const char *name, int cond)
{
    size_t nl = strlen(name);
    if (nl > DM_NAME_MAX)
        return NULL;
    size_t h = dm_hash_bytes(name, nl);
    dm_lock(&locks_mu);
    struct dm_elock *l = NULL;
    for (struct dm_hnode *x = dm_htab_chain(&locks, h); x; x = x->next) {
        locks.probes++;
        if (x->hash == h && strcmp(((struct dm_elock *)x)->name, name) == 0) {
            l = (struct dm_elock *)x;
            break;
        }
    }
    if (l) {
        l->refs++;
    } else {
        struct dm_name_stats *c = dm_name_stats_get(name, h);
        l = c ? calloc(1, offsetof(struct dm_elock, name) + nl + 1) : NULL;
        if (l) {
            memcpy(l->name, name, nl + 1);
            l->pub.name = l->name;
            l->pub.counters = c;
            l->refs = 1;
            if (dm_htab_add(&locks, &l->node, h) != 0) {
                free(l);
                l = NULL;
            }
        }
        if (!l && c)
            dm_name_stats_drop(c);
    }
    if (l)
        __atomic_store_n(cond ? &l->pub.counters->is_cond : &l->pub.counters->is_lock, 1,
                         __ATOMIC_RELAXED);
    dm_unlock(&locks_mu);
    return l;
}

struct dm_store_lock *dm_elock_get(const char *name)
{
    struct dm_elock *l = record_get(name, 0);
    return l ? &l->pub : NULL;
}

struct dm_store_lock *dm_elock_cond_get(const char *name)
{
    struct dm_elock *l = record_get(name, 1);
    return l ? &l->pub : NULL;
}

void dm_elock_put(struct dm_store_lock *pl)
{
    struct dm_elock *l = dm_elock_of(pl);
    if (!l)
        return;
    dm_lock(&locks_mu);
    int last = --l->refs == 0;
    if (last) {
        dm_htab_del(&locks, &l->node);
        dm_name_stats_drop(l->pub.counters);
    }
    dm_unlock(&locks_mu);
    if (last) {
        dm_watch_free(l->want);
        free(l);
    }
}

void dm_elock_mode(struct dm_store_lock *pl, int fair, int cache, int wants)
{
    /* etcd's queue is always FIFO: fair or not, a release wakes the next */
    if (fair)
        pl->fair = 1;
    if (cache)
        pl->cache = 1;
    if (cache || wants)
        pl->wants = 1;
}

void dm_elock_rwlock(struct dm_store_lock *pl)
{
    pl->rw = 1;
    pl->fair = 1;
    pl->wants = 1;
}

/* ---- Txn bodies ---- */

#define BODY_MAX 8192

/* "...": a base64 key (b64 of key) into the body, without quotes. */
struct keys {
    int read;           /* a reader's: it waits only for older writers */
    char queue[DM_ETCD_KEY_MAX], mine[DM_ETCD_KEY_MAX], marker[DM_ETCD_KEY_MAX];
    char guard[DM_ETCD_KEY_MAX];
    char queue64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1], end64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
    char mine64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1], marker64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
    char guard64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
    /* the keys this one waits for: every key (a writer), the writers' (a reader) */
    char before64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1], bend64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
};

static void keys_make(struct keys *k, const char *name, long long lease, int read)
{
    k->read = read;
    dm_etcd_queue_prefix(k->queue, sizeof k->queue, name);
    dm_etcd_queue_key(k->mine, sizeof k->mine, name, lease, read);
    dm_etcd_marker_key(k->marker, sizeof k->marker, name);
    dm_etcd_guard_key(k->guard, sizeof k->guard, name, lease);
    dm_etcd_b64(k->guard, k->guard64);
    dm_etcd_b64(k->queue, k->queue64);
    dm_etcd_prefix_end_b64(k->queue, k->end64);
    dm_etcd_b64(k->mine, k->mine64);
    dm_etcd_b64(k->marker, k->marker64);
    if (read) {
        char w[DM_ETCD_KEY_MAX];
        dm_etcd_writers_prefix(w, sizeof w, name);
        dm_etcd_b64(w, k->before64);
        dm_etcd_prefix_end_b64(w, k->bend64);
    } else {
        memcpy(k->before64, k->queue64, sizeof k->before64);
        memcpy(k->bend64, k->end64, sizeof k->bend64);
    }
}

static void b64s(const char *s, char *out)
{
    dm_b64_encode(s, strlen(s), out);
}

/* The kv of responses[i].response_range.kvs[0] of the Txn answer at
 * node txn (0: the whole answer), or -1. */
static int range_kv_of(const struct dm_json *j, int txn, int i)
{
    int rs = dm_json_at(j, dm_json_get(j, txn, "responses"), i);
    return dm_json_at(j, dm_json_path(j, rs, "response_range.kvs"), 0);
}

static int range_kv(const struct dm_json *j, int i)
{
    return range_kv_of(j, 0, i);
}

/* The guard's mod_revision as this process last saw it under lease. */
static long long guard_seen(struct dm_elock *l, long long lease)
{
    dm_lock(&locks_mu);
    long long g = l->guard_lease == lease ? l->guard_rev : 0;
    dm_unlock(&locks_mu);
    return g;
}

static void guard_saw(struct dm_elock *l, long long lease, long long rev)
{
    dm_lock(&locks_mu);
    l->guard_lease = lease;
    l->guard_rev = rev;
    dm_unlock(&locks_mu);
}

static long long range_count(const struct dm_json *j, int i)
{
    int rs = dm_json_at(j, dm_json_get(j, 0, "responses"), i);
    return dm_json_int(j, dm_json_path(j, rs, "response_range.count"), 0);
}

/* Was the marker (kv) the grant of a holder that never released it: 1 a
 * holder's lease ran out, 2 it was forced (dmutex unlock --force), 0 a
 * release, or our own grant's (a retried request). */
static int marker_dead(const struct dm_json *j, int kv, const char *owner)
{
    char v[DM_OWNER_MAX + 300];
    if (kv < 0 || dm_json_b64(j, dm_json_get(j, kv, "value"), v, sizeof v) < 0)
        return 0;
    if (strncmp(v, "held ", 5) == 0)
        return strcmp(v + 5, owner) != 0;
    return strncmp(v, "forced ", 7) == 0 ? 2 : 0;
}

static long long now_deadline(void)
{
    return dm_now_ms() + dm_etcd_cfg()->redis.command_timeout_ms;
}

/* Deletes our queue key made at revision rev (and the marker of its
 * grant): a wait given up, a grant undone. Guarded by the key's
 * create_revision, so that a late copy of it (held up in a member that
 * was stopped) never deletes a later attempt's key, which has the same
 * name (the name and the process's lease). rev 0 (the request that made
 * it went unanswered, and may run yet): one Txn moves the enqueue guard
 * on if no key of ours is there, so that no copy of the request can run
 * later; else the key's revision, for the guarded delete. 0 done, EIO
 * etcd out of reach. */
static int withdraw_txn(struct dm_elock *l, const struct keys *k, const char *owner, long long rev,
                        long long lease)
{
    struct dm_etcd_reply r;
    enum dm_fail how;
    char why[400];
    if (rev == 0) {
        char owner64[DM_B64_LEN(DM_OWNER_MAX) + 1], body[4 * DM_B64_LEN(DM_ETCD_KEY_MAX) + 400];
        b64s(owner, owner64);
        snprintf(body, sizeof body,
                 "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                 "\"create_revision\":\"0\"}],"
                 "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}}],"
                 "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}]}",
                 k->mine64, k->guard64, owner64, lease, k->mine64);
        if (dm_etcd_call("/v3/kv/txn", body, now_deadline(), &r, &how, why, sizeof why) != 0)
            /* refused for its lease: gone, and its keys with it (a copy
             * cannot put one under it either) */
            return how == DM_FAIL_REFUSED && dm_etcd_last_lease_unknown() ? 0 : EIO;
        if (dm_json_true(&r.j, dm_json_get(&r.j, 0, "succeeded"))) {
            guard_saw(l, lease, dm_json_int(&r.j, dm_json_path(&r.j, 0, "header.revision"), 0));
            dm_etcd_reply_free(&r);
            return 0;       /* nothing of it is there, and nothing of it can come */
        }
        rev = dm_json_int(&r.j, dm_json_get(&r.j, range_kv(&r.j, 0), "create_revision"), 0);
        dm_etcd_reply_free(&r);
        if (rev == 0)
            return EIO;     /* an answer we cannot read: again */
    }
    char held[DM_OWNER_MAX + 8], held64[DM_B64_LEN(DM_OWNER_MAX + 8) + 1];
    char freed[DM_OWNER_MAX + 8], freed64[DM_B64_LEN(DM_OWNER_MAX + 8) + 1];
    snprintf(held, sizeof held, "held %s", owner);
    snprintf(freed, sizeof freed, "free %s", owner);
    b64s(held, held64);
    b64s(freed, freed64);
    char body[BODY_MAX];
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
             "\"create_revision\":\"%lld\"}],"
             "\"success\":[{\"request_delete_range\":{\"key\":\"%s\"}},"
                          "{\"request_txn\":{\"compare\":[{\"key\":\"%s\",\"target\":\"VALUE\","
                           "\"result\":\"EQUAL\",\"value\":\"%s\"}],"
                           "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}]}}]}",
             k->mine64, rev, k->mine64, k->marker64, held64, k->marker64, freed64);
    if (dm_etcd_call("/v3/kv/txn", body, now_deadline(), &r, &how, why, sizeof why) != 0)
        return EIO;
    dm_etcd_reply_free(&r);
    return 0;
}

static void pending_queue(struct dm_elock *l, int withdraw, uint64_t token, long long lease,
                          int read, long long end_ms, const char *owner, dm_store_lost_fn lost,
                          int ran);

/* Gives up this attempt's place (rev: its key's revision, 0 unknown) and
 * its use of the lease; one etcd cannot take now is retried by the
 * store's thread, holding the use until then. */
static void withdraw(struct dm_elock *l, const struct keys *k, const char *owner, long long rev,
                     long long lease)
{
    if (withdraw_txn(l, k, owner, rev, lease) == 0) {
        dm_etcd_lease_unuse();
        return;
    }
    static long said;
    dm_log_every(&said, 10000, DM_LOG_WARN, "lock %s: withdrawing this process's place in the "
                 "queue could not reach etcd at %s; the store's thread retries it", l->name,
                 dm_etcd_where());
    pending_queue(l, 1, (uint64_t)rev, lease, k->read, dm_now_ms() + 2 * dm_etcd_cfg()->lease_ms,
                  owner, NULL, 0);
}

/* The failure policy for a failed call of acquire: the step's result, or
 * -1 to go on (after a backoff). */
static int on_failure(struct dm_elock *l, enum dm_fail how, const char *why, int flags,
                      const struct timespec *deadline, struct dm_backoff *bo, struct dm_grant *g)
{
    static long logged;
    dm_stats_add(&dm_store_counts(&l->pub)->redis_errors, 1);
    struct dm_failure f = { how, (flags & DM_ACQ_TRY) != 0, dm_etcd_cfg()->on_redis_down, 0, 0,
                            dm_remaining_ms(deadline) };
    switch (dm_policy_on_failure(&f)) {
    case DM_STEP_EBUSY:
        dm_log_every(&logged, 10000, DM_LOG_ERROR, "lock %s: %s; trylock returns EBUSY", l->name, why);
        return EBUSY;
    case DM_STEP_EAGAIN:
        dm_log_every(&logged, 10000, DM_LOG_ERROR, "lock %s: %s; returning EAGAIN "
                     "(on_store_down = \"error\")", l->name, why);
        return EAGAIN;
    case DM_STEP_LOCAL:
        dm_log_every(&logged, 10000, DM_LOG_ERROR, "lock %s: %s; locking this process only "
                     "(on_store_down = \"local\")", l->name, why);
        memset(g, 0, sizeof *g);
        g->local_only = 1;
        return 0;
    case DM_STEP_ETIMEDOUT:
        return ETIMEDOUT;
    default:
        break;
    }
    dm_log_every(&logged, 10000, DM_LOG_ERROR, "lock %s: %s; retrying (on_store_down = \"block\")",
                 l->name, why);
    long d = dm_backoff_next(bo);
    long left = dm_remaining_ms(deadline);
    dm_sleep_ms(left >= 0 && left < d ? left : d);
    return -1;
}

/* Txn 1, if the enqueue guard is still at `seen` (else the guard and our
 * key: a copy of this request ran already), moving the guard on: the
 * queue empty -> our key and the marker, the lock is ours; else our key in
 * the queue (a trylock: only a look at the queue's head). That answer is
 * the inner Txn's, responses[0].response_txn. */
static int txn_enqueue(const struct keys *k, const char *owner, long long lease, int try,
                       long long seen, struct dm_etcd_reply *r, enum dm_fail *how, char *why,
                       size_t wl)
{
    char owner64[DM_B64_LEN(DM_OWNER_MAX) + 1], held[DM_OWNER_MAX + 8];
    char held64[DM_B64_LEN(DM_OWNER_MAX + 8) + 1];
    b64s(owner, owner64);
    snprintf(held, sizeof held, "held %s", owner);
    b64s(held, held64);
    char body[BODY_MAX], fail[2048], mark[1024] = "";
    if (try)
        snprintf(fail, sizeof fail,
                 "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\",\"sort_order\":\"ASCEND\","
                 "\"sort_target\":\"CREATE\",\"limit\":1}}", k->before64, k->bend64);
    else
        snprintf(fail, sizeof fail,
                 "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}},"
                 "{\"request_range\":{\"key\":\"%s\"}}", k->mine64, owner64, lease, k->mine64);
    if (!k->read)       /* a writer's grant is recorded; readers' are not (robust: writers) */
        snprintf(mark, sizeof mark, ",{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}",
                 k->marker64, held64);
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"range_end\":\"%s\",\"target\":\"CREATE\","
             "\"result\":\"EQUAL\",\"create_revision\":\"0\"}],"
             "\"success\":[{\"request_range\":{\"key\":\"%s\"}},"
                          "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}}%s],"
             "\"failure\":[%s]}",
             k->before64, k->bend64, k->marker64, k->mine64, owner64, lease, mark, fail);
    size_t cap = strlen(body) + 4 * sizeof k->guard64 + sizeof owner64 + 512;
    char *outer = malloc(cap);
    if (!outer) {
        *how = DM_FAIL_OTHER;
        snprintf(why, wl, "out of memory");
        memset(r, 0, sizeof *r);
        return ENOMEM;
    }
    snprintf(outer, cap,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"MOD\",\"result\":\"EQUAL\","
             "\"mod_revision\":\"%lld\"}],"
             "\"success\":[{\"request_txn\":%s},"
                          "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}}],"
             "\"failure\":[{\"request_range\":{\"key\":\"%s\"}},{\"request_range\":{\"key\":\"%s\"}}]}",
             k->guard64, seen, body, k->guard64, owner64, lease, k->guard64, k->mine64);
    int e = dm_etcd_call("/v3/kv/txn", outer, now_deadline(), r, how, why, wl);
    free(outer);
    return e;
}

/* Txn 2: our key still at rev and no older key in the queue -> the
 * marker, the lock is ours; else our key and the one just before it. */
static int txn_confirm(const struct keys *k, const char *owner, long long rev,
                       struct dm_etcd_reply *r, enum dm_fail *how, char *why, size_t wl)
{
    char held[DM_OWNER_MAX + 8], held64[DM_B64_LEN(DM_OWNER_MAX + 8) + 1];
    snprintf(held, sizeof held, "held %s", owner);
    b64s(held, held64);
    char body[BODY_MAX], mark[1024];
    if (k->read) {
        /* A reader writes nothing: a look, on the leader, at its key and
         * at the newest writer older than it (none: it holds, since no
         * older writer can come later). A compare cannot say "no key in
         * a range is older", when the range may be empty. */
        snprintf(body, sizeof body,
                 "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                                "\"create_revision\":\"%lld\"}],"
                 "\"success\":[{\"request_range\":{\"key\":\"%s\",\"count_only\":true}},"
                              "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\",\"sort_order\":\"DESCEND\","
                               "\"sort_target\":\"CREATE\",\"limit\":1,\"max_create_revision\":\"%lld\","
                               "\"keys_only\":true}},"
                              "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true}}],"
                 "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}]}",
                 k->mine64, rev, k->marker64, k->before64, k->bend64, rev - 1, k->queue64, k->end64,
                 k->mine64);
        return dm_etcd_call("/v3/kv/txn", body, now_deadline(), r, how, why, wl);
    }
    snprintf(mark, sizeof mark, "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}",
             k->marker64, held64);
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
                            "\"create_revision\":\"%lld\"},"
                           "{\"key\":\"%s\",\"range_end\":\"%s\",\"target\":\"CREATE\","
                            "\"result\":\"GREATER\",\"create_revision\":\"%lld\"}],"
             "\"success\":[{\"request_range\":{\"key\":\"%s\"}},%s,"
                          "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\",\"count_only\":true}}],"
             "\"failure\":[{\"request_range\":{\"key\":\"%s\"}},"
                          "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\",\"sort_order\":\"DESCEND\","
                           "\"sort_target\":\"CREATE\",\"limit\":1,\"max_create_revision\":\"%lld\","
                           "\"keys_only\":true}}]}",
             k->mine64, rev, k->before64, k->bend64, rev - 1, k->marker64, mark,
             k->queue64, k->end64, k->mine64, k->before64, k->bend64, rev - 1);
    return dm_etcd_call("/v3/kv/txn", body, now_deadline(), r, how, why, wl);
}

static void granted(struct dm_elock *l, struct dm_grant *g, long long lease, long long rev,
                    long long sent_ms, int waited, int dead, int more, const char *owner, int read)
{
    memset(g, 0, sizeof *g);
    /* The lease runs from its last renewal, which may be after the call
     * began (a wait is kept alive by the store's thread). */
    long long now_sent = dm_etcd_lease_sent(lease);
    if (now_sent > sent_ms)
        sent_ms = now_sent;
    g->token = (uint64_t)rev;
    g->owner_dead = dead != 0;
    g->forced = dead == 2;
    g->lease_ms = dm_etcd_cfg()->lease_ms;
    g->sent_ms = sent_ms;
    g->waited = waited;
    g->more_waiters = more;
    g->wait_id = (unsigned long)rev;
    dm_lock(&locks_mu);
    l->lease = lease;
    l->rev = rev;
    l->read = read;
    snprintf(l->owner, sizeof l->owner, "%s", owner);
    dm_unlock(&locks_mu);
    dm_stats_add(&dm_store_counts(&l->pub)->acquisitions, 1);
    if (waited)
        dm_stats_add(&dm_store_counts(&l->pub)->handoffs, 1);
}

/* Waits until the key `pred` (base64) is deleted, from revision `from`
 * on, or the deadline: 0 deleted (or the watch cannot tell: look again),
 * ETIMEDOUT. A watch is re-checked every few seconds: a member cut off
 * from the others may never say (the caller looks again). */
static int wait_deleted(const char *pred64, long long made, long long from,
                        const struct timespec *deadline)
{
    long left = dm_remaining_ms(deadline);
    long slice = 5 * dm_etcd_cfg()->redis.command_timeout_ms;
    if (left == 0)
        return ETIMEDOUT;
    if (left < 0 || left > slice)
        left = slice;
    int r = dm_watch_deleted(pred64, made, from, dm_now_ms() + left);
    if (r == ETIMEDOUT && dm_remaining_ms(deadline) == 0)
        return ETIMEDOUT;
    return 0;
}

static int pending_settle(struct dm_elock *l);

/* Did etcd refuse the request because our lease is gone (it lapsed)? Then
 * the process forgets it: the next lease_get grants a new one. */
static int lease_gone_answer(struct dm_etcd_reply *r, enum dm_fail how, long long lease)
{
    (void)r;
    if (how != DM_FAIL_REFUSED || !dm_etcd_last_lease_unknown())
        return 0;
    dm_etcd_lease_forget(lease);
    return 1;
}

int dm_elock_acquire(struct dm_store_lock *pl, const char *owner, const struct timespec *deadline,
                     int flags, struct dm_grant *g)
{
    struct dm_elock *l = dm_elock_of(pl);
    int try = (flags & DM_ACQ_TRY) != 0;
    int read = (flags & DM_ACQ_READ) != 0 && pl->rw;
    struct dm_backoff bo = DM_BACKOFF_INIT(20, 1000);
    struct keys k;
    char why[400];
    enum dm_fail how;
    struct dm_etcd_reply r;
    int rc;

again:
    if (pending_settle(l) != 0) {
        snprintf(why, sizeof why, "etcd %s: this process's last release of the lock is still "
                 "on its way", dm_etcd_where());
        if ((rc = on_failure(l, DM_FAIL_NOREPLY, why, flags, deadline, &bo, g)) >= 0)
            return rc;
        goto again;
    }
    long long sent_ms = 0;
    int lerr = 0;
    long long lease = dm_etcd_lease_get(&sent_ms, &lerr, now_deadline());
    if (!lease && lerr == ECANCELED) {
        /* exit has revoked the lease: this wait ends with the process */
        long left = dm_remaining_ms(deadline);
        if (left >= 0) {
            dm_sleep_ms(left);
            return try ? EBUSY : ETIMEDOUT;
        }
        for (;;)
            dm_sleep_ms(1000);
    }
    if (!lease) {
        snprintf(why, sizeof why, "etcd %s: no lease could be granted (%s)", dm_etcd_where(),
                 strerror(lerr));
        if ((rc = on_failure(l, lerr == ECONNREFUSED ? DM_FAIL_NOCONN : DM_FAIL_NOREPLY, why,
                             flags, deadline, &bo, g)) >= 0)
            return rc;
        goto again;
    }
    keys_make(&k, l->name, lease, read);
    dm_etcd_lease_use();
    long long rev = 0;
    for (int moved = 0;; moved++) {
        if (txn_enqueue(&k, owner, lease, try, guard_seen(l, lease), &r, &how, why,
                        sizeof why) != 0) {
            if (lease_gone_answer(&r, how, lease)) {
                dm_etcd_lease_unuse();
                goto again;     /* the lease lapsed: a new one */
            }
            if (how == DM_FAIL_NOREPLY && try)
                /* it may have run or run yet, and granted (the queue
                 * empty): the store's thread undoes or fences it, the
                 * trylock does not wait for that */
                pending_queue(l, 1, 0, lease, read, 0, owner, NULL, 0);
            else if (how == DM_FAIL_NOREPLY)
                withdraw(l, &k, owner, 0, lease);   /* it may have run, or run yet: nothing of it stays */
            else
                dm_etcd_lease_unuse();
            if ((rc = on_failure(l, how, why, flags, deadline, &bo, g)) >= 0)
                return rc;
            goto again;
        }
        if (dm_json_true(&r.j, dm_json_get(&r.j, 0, "succeeded")))
            break;
        /* The guard moved on: a copy of this request, sent to a member
         * that did not answer, ran (our key is there: our place, whatever
         * that copy found), or this process does not know the guard's
         * revision (a withdraw's answer lost, a fence made since). */
        long long now = dm_json_int(&r.j, dm_json_get(&r.j, range_kv(&r.j, 0), "mod_revision"), 0);
        rev = dm_json_int(&r.j, dm_json_get(&r.j, range_kv(&r.j, 1), "create_revision"), 0);
        dm_etcd_reply_free(&r);
        guard_saw(l, lease, now);
        if (rev)
            break;
        if (moved > 0)
            dm_sleep_ms(dm_backoff_next(&bo));  /* moved again meanwhile: not in a tight loop */
    }
    if (!rev) {
        guard_saw(l, lease, dm_json_int(&r.j, dm_json_path(&r.j, 0, "header.revision"), 0));
        int in = dm_json_path(&r.j, dm_json_at(&r.j, dm_json_get(&r.j, 0, "responses"), 0),
                              "response_txn");
        if (dm_json_true(&r.j, dm_json_get(&r.j, in, "succeeded"))) {
            rev = dm_json_int(&r.j, dm_json_path(&r.j, 0, "header.revision"), 0);
            int dead = !read && marker_dead(&r.j, range_kv_of(&r.j, in, 0), owner);
            dm_etcd_reply_free(&r);
            granted(l, g, lease, rev, sent_ms, 0, dead, 0, owner, read);
            return 0;
        }
        if (try) {
            /* The queue's head: ours only if a key of ours is left there. */
            int kv = range_kv_of(&r.j, in, 0);
            char head[DM_ETCD_KEY_MAX];
            long got = dm_json_b64(&r.j, dm_json_get(&r.j, kv, "key"), head, sizeof head);
            rev = dm_json_int(&r.j, dm_json_get(&r.j, kv, "create_revision"), 0);
            dm_etcd_reply_free(&r);
            if (got < 0 || strcmp(head, k.mine) != 0) {
                dm_etcd_lease_unuse();
                return EBUSY;
            }
        } else {
            rev = dm_json_int(&r.j, dm_json_get(&r.j, range_kv_of(&r.j, in, 1), "create_revision"), 0);
            dm_etcd_reply_free(&r);
            if (!rev) {     /* the lease ended between the put and the range */
                dm_etcd_lease_unuse();
                goto again;
            }
        }
    }

    for (;;) {
        if (txn_confirm(&k, owner, rev, &r, &how, why, sizeof why) != 0) {
            if ((rc = on_failure(l, how, why, flags, deadline, &bo, g)) >= 0) {
                withdraw(l, &k, owner, rev, lease);
                return rc;
            }
            continue;
        }
        dm_backoff_reset(&bo);
        /* writer: succeeded = granted, else our key and the one before it;
         * reader: succeeded = our key is there, and the writer before it
         * (none: granted); else our key is gone */
        int ok = dm_json_true(&r.j, dm_json_get(&r.j, 0, "succeeded"));
        if (read && ok && range_kv(&r.j, 1) >= 0)
            ok = 0;
        if (ok) {
            int dead = !read && marker_dead(&r.j, range_kv(&r.j, 0), owner);
            int more = range_count(&r.j, 2) > 1;
            dm_etcd_reply_free(&r);
            if (!dm_etcd_lease_live(lease)) {
                /* granted under a lease this process found gone meanwhile:
                 * nothing would renew it */
                withdraw(l, &k, owner, rev, lease);
                goto again;
            }
            granted(l, g, lease, rev, sent_ms, 1, dead, more, owner, read);
            return 0;
        }
        int mine = range_kv(&r.j, 0);
        if (read ? !dm_json_true(&r.j, dm_json_get(&r.j, 0, "succeeded"))
                 : dm_json_int(&r.j, dm_json_get(&r.j, mine, "create_revision"), 0) != rev) {
            /* our key is gone: the lease ran out while we waited (never
             * granted: etcd 3.4's lock service would say granted here) */
            dm_etcd_reply_free(&r);
            dm_etcd_lease_unuse();
            dm_warn("lock %s: this process's place in the queue was lost with its lease "
                    "(a pause, or etcd out of reach for longer than lease_ms); queueing again",
                    l->name);
            goto again;
        }
        int pred = range_kv(&r.j, 1);
        long long from = dm_json_int(&r.j, dm_json_path(&r.j, 0, "header.revision"), 0) + 1;
        char pred64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
        long pn = dm_json_str(&r.j, dm_json_get(&r.j, pred, "key"), pred64, sizeof pred64);
        long long made = dm_json_int(&r.j, dm_json_get(&r.j, pred, "create_revision"), 0);
        dm_etcd_reply_free(&r);
        if (try) {
            withdraw(l, &k, owner, rev, lease);
            return EBUSY;
        }
        if (pn <= 0) {
            /* one Txn sees one revision: a failed compare with our key
             * there has an older key in the range; an answer without it
             * is one we cannot read. Again, not in a tight loop. */
            static long said;
            dm_log_every(&said, 10000, DM_LOG_WARN, "lock %s: etcd's answer named no key before "
                         "ours; looking again", l->name);
            dm_sleep_ms(dm_backoff_next(&bo));
            continue;
        }
        if (wait_deleted(pred64, made, from, deadline) == ETIMEDOUT) {
            /* a grant that races the timeout is undone by the delete */
            withdraw(l, &k, owner, rev, lease);
            return ETIMEDOUT;
        }
    }
}

/* Txn: our key still at token -> deleted, the marker "free"; else the
 * marker, to tell a retry from a loss. retry: an earlier try of this
 * release may have run (its answer was lost); *ran is set when this
 * call's may have, for the queue's later tries. */
static int release_txn(struct dm_elock *l, const char *owner, uint64_t token, long long lease,
                       int read, int retry, int *ran)
{
    struct keys k;
    keys_make(&k, l->name, lease, read);
    char freed[DM_OWNER_MAX + 8], freed64[DM_B64_LEN(DM_OWNER_MAX + 8) + 1];
    snprintf(freed, sizeof freed, "free %s", owner);
    b64s(freed, freed64);
    char body[BODY_MAX];
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
             "\"create_revision\":\"%llu\"}],"
             "\"success\":[{\"request_delete_range\":{\"key\":\"%s\"}},"
                          "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}],"
             "\"failure\":[{\"request_range\":{\"key\":\"%s\"}}]}",
             k.mine64, (unsigned long long)token, k.mine64, k.marker64, freed64, k.marker64);
    struct dm_etcd_reply r;
    enum dm_fail how;
    char why[400];
    int e = dm_etcd_call("/v3/kv/txn", body, now_deadline(), &r, &how, why, sizeof why);
    if (e) {
        if (how == DM_FAIL_NOREPLY)
            *ran = 1;
        if (how == DM_FAIL_NOREPLY && !retry)
            return release_txn(l, owner, token, lease, read, 1, ran) == 0 ? 0 : EIO;
        dm_stats_add(&dm_store_counts(&l->pub)->redis_errors, 1);
        dm_debug("lock %s: release: %s", l->name, why);    /* the caller says what follows */
        return EIO;
    }
    int ok = dm_json_true(&r.j, dm_json_get(&r.j, 0, "succeeded"));
    if (!ok) {
        char v[DM_OWNER_MAX + 300];
        int kv = range_kv(&r.j, 0);
        if (dm_json_b64(&r.j, dm_json_get(&r.j, kv, "value"), v, sizeof v) >= 0 && strcmp(v, freed) == 0)
            ok = 1;     /* a retry: the first one did it */
        else if ((retry || r.resent) && dm_etcd_lease_live(lease) && strncmp(v, "forced ", 7) != 0)
            ok = 1;     /* the first try's reply was lost (on this call's member
                           before, too), and only it could have deleted the key
                           of a live lease (the marker moved on since) */
    }
    dm_etcd_reply_free(&r);
    return ok ? 0 : EPERM;
}

static void hold_ends(struct dm_elock *l, uint64_t token)
{
    dm_lock(&locks_mu);
    if ((uint64_t)l->rev == token) {
        l->rev = 0;
        dm_unlock(&locks_mu);
        dm_etcd_lease_unuse();
        return;
    }
    dm_unlock(&locks_mu);
}

int dm_elock_release(struct dm_store_lock *pl, const char *owner, uint64_t token)
{
    return dm_elock_release_queued(pl, owner, token, dm_now_ms(), NULL);
}

static void pending_fire(void *arg);

/* Tries l's queued release once: 1 settled (done, or lost and told, or
 * past its lease: etcd let it go), 0 still queued. The caller set busy. */
static int pending_try(struct dm_elock *l)
{
    dm_lock(&locks_mu);
    uint64_t token = l->pend.token;
    long long lease = l->pend.lease, end = l->pend.end_ms;
    int read = l->pend.read, wd = l->pend.withdraw, ran = l->pend.ran;
    char owner[DM_OWNER_MAX];
    memcpy(owner, l->pend.owner, sizeof owner);
    dm_store_lost_fn lost = l->pend.lost;
    dm_unlock(&locks_mu);
    int r;
    if (wd) {
        /* Until done, or the lease is gone (its keys with it); a token 0
         * (an unanswered enqueue) is done once the guard moved on: no copy
         * of it can run after that. */
        struct keys k;
        keys_make(&k, l->name, lease, read);
        r = dm_etcd_lease_live(lease) ? withdraw_txn(l, &k, owner, (long long)token, lease) : 0;
        if (r == EIO)
            return 0;
    } else {
        int now_ran = 0;
        r = release_txn(l, owner, token, lease, read, ran, &now_ran);
        /* the key lives while the process's lease does (its other holds
         * keep it): retried for as long */
        if (r == EIO && dm_etcd_lease_live(lease)) {
            dm_lock(&locks_mu);
            l->pend.ran |= now_ran;
            dm_unlock(&locks_mu);
            return 0;
        }
        if (r == EPERM && lost)
            lost(&l->pub, owner, token, dm_store_gone_how(r, end));
        if (r == 0)
            dm_info("lock %s: the release queued while etcd was out of reach is done", l->name);
    }
    dm_lock(&locks_mu);
    l->pend.on = 0;
    dm_unlock(&locks_mu);
    dm_etcd_lease_unuse();
    return 1;
}

/* The store's thread: the queued release again; with the timer's
 * reference on the record. */
static void pending_fire(void *arg)
{
    struct dm_elock *l = arg;
    dm_lock(&locks_mu);
    int mine = l->pend.on && !l->pend.busy;
    if (mine)
        l->pend.busy = 1;
    dm_unlock(&locks_mu);
    if (mine && !pending_try(l)) {
        dm_lock(&locks_mu);
        l->pend.busy = 0;
        long d = l->pend.delay_ms = l->pend.delay_ms < 500 ? l->pend.delay_ms * 2 : 1000;
        dm_unlock(&locks_mu);
        if (dm_etcd_timer_arm(&l->pend.timer, dm_now_ns() + d * 1000000LL, pending_fire, l) == 0)
            return;     /* the reference goes with the timer */
    } else if (mine) {
        dm_lock(&locks_mu);
        l->pend.busy = 0;
        dm_unlock(&locks_mu);
    }
    dm_elock_put(&l->pub);
}

/* Before a new grant: a queued release of this record done first (its
 * key is the one a new hold of the same lease would have). 0 settled, or
 * EIO still queued (etcd out of reach). */
static int pending_settle(struct dm_elock *l)
{
    for (;;) {
        dm_lock(&locks_mu);
        if (!l->pend.on) {
            dm_unlock(&locks_mu);
            return 0;
        }
        int busy = l->pend.busy;
        if (!busy && l->pend.withdraw && l->pend.token == 0) {
            /* The guard of an unanswered enqueue, still to be moved on:
             * this acquire's own enqueue moves it (no copy of the old one
             * can run after it), and takes a key such a copy put as its own
             * place (same name), so the queued one ends here; it must not
             * delete this attempt's key later. */
            l->pend.on = 0;
            dm_unlock(&locks_mu);
            dm_etcd_lease_unuse();
            return 0;
        }
        if (!busy)
            l->pend.busy = 1;
        dm_unlock(&locks_mu);
        if (busy) {
            dm_sleep_ms(1);
            continue;
        }
        int done = pending_try(l);
        dm_lock(&locks_mu);
        l->pend.busy = 0;
        dm_unlock(&locks_mu);
        return done ? 0 : EIO;
    }
}

int dm_elock_release_queued(struct dm_store_lock *pl, const char *owner, uint64_t token,
                            long long lease_end_ms, dm_store_lost_fn lost)
{
    struct dm_elock *l = dm_elock_of(pl);
    dm_lock(&locks_mu);
    long long lease = (uint64_t)l->rev == token ? l->lease : 0;
    int read = l->read;
    dm_unlock(&locks_mu);
    if (!lease)
        return lost ? 0 : EPERM;
    int ran = 0;
    int r = release_txn(l, owner, token, lease, read, 0, &ran);
    if (r != EIO) {
        hold_ends(l, token);
        if (r == EPERM && lost)
            lost(pl, owner, token, dm_store_gone_how(r, lease_end_ms));
        return lost ? 0 : r;
    }
    /* Queued: the key stays ours (its lease kept) until the retry. */
    dm_lock(&locks_mu);
    l->rev = 0;
    dm_unlock(&locks_mu);
    static long said;
    dm_log_every(&said, 10000, DM_LOG_WARN, "lock %s: the release could not reach etcd at %s; "
                 "the store's thread retries it (the lock stays held meanwhile)", l->name,
                 dm_etcd_where());
    pending_queue(l, 0, token, lease, read, lease_end_ms, owner, lost, ran);
    return lost ? 0 : EIO;
}

/* Queues l's release (withdraw 0) or withdraw (1) for the store's
 * thread, with the use of the lease the caller had; ran: a release's try
 * may have run already (its answer lost). */
static void pending_queue(struct dm_elock *l, int withdraw, uint64_t token, long long lease,
                          int read, long long end_ms, const char *owner, dm_store_lost_fn lost,
                          int ran)
{
    dm_lock(&locks_mu);
    if (l->pend.on) {           /* one at a time: this one is left to the lease */
        dm_unlock(&locks_mu);
        dm_etcd_lease_unuse();
        return;
    }
    l->refs++;                  /* the timer's */
    l->pend.on = 1;
    l->pend.withdraw = withdraw;
    l->pend.token = token;
    l->pend.lease = lease;
    l->pend.end_ms = end_ms;
    l->pend.read = read;
    l->pend.ran = ran;          /* its later tries know an earlier one may have run */
    l->pend.delay_ms = 50;
    l->pend.lost = lost;
    snprintf(l->pend.owner, sizeof l->pend.owner, "%s", owner);
    dm_unlock(&locks_mu);
    if (dm_etcd_timer_arm(&l->pend.timer, dm_now_ns() + 50000000LL, pending_fire, l) != 0) {
        dm_lock(&locks_mu);
        l->pend.on = 0;
        l->refs--;              /* nothing retries it */
        dm_unlock(&locks_mu);
        dm_etcd_lease_unuse();
    }
}

void dm_elock_flush(void)
{
    dm_elock_flush_queued();
    /* At exit with nothing held (a thread still inside keeps its hold
     * until the process is gone), the lease goes: the keys of threads
     * still waiting go with it at once, not a lease later at the head of
     * the queue. */
    int held = 0;
    dm_lock(&locks_mu);
    for (size_t b = 0; b < locks.n && !held; b++)
        for (struct dm_hnode *x = locks.b[b]; x && !held; x = x->next)
            held = ((struct dm_elock *)x)->rev != 0 || ((struct dm_elock *)x)->pend.on;
    dm_unlock(&locks_mu);
    if (!held)
        dm_etcd_lease_revoke();
}

void dm_elock_flush_queued(void)
{
    for (;;) {
        struct dm_elock *l = NULL;
        dm_lock(&locks_mu);
        for (size_t b = 0; b < locks.n && !l; b++)
            for (struct dm_hnode *x = locks.b[b]; x && !l; x = x->next)
                if (((struct dm_elock *)x)->pend.on && !((struct dm_elock *)x)->pend.busy)
                    l = (struct dm_elock *)x;
        if (l)
            l->pend.busy = 1;
        dm_unlock(&locks_mu);
        if (!l)
            return;
        if (!pending_try(l)) {      /* once: at exit the lease ends it anyway */
            dm_lock(&locks_mu);
            l->pend.on = 0;
            dm_unlock(&locks_mu);
            dm_etcd_lease_unuse();
        }
        dm_lock(&locks_mu);
        l->pend.busy = 0;
        dm_unlock(&locks_mu);
    }
}

void dm_elock_renew(const struct dm_renew *holds, size_t n, enum dm_renewal *res,
                    long long *sent_ms)
{
    *sent_ms = dm_now_ms();
    if (n == 0)
        return;
    long long lease = 0;
    dm_lock(&locks_mu);
    for (size_t i = 0; i < n && !lease; i++)
        lease = dm_elock_of(holds[i].lock)->lease;
    dm_unlock(&locks_mu);
    if (!lease)
        return;
    long long sent;
    int lr = dm_etcd_lease_renew(lease, &sent);
    *sent_ms = sent;
    if (lr < 0)
        return;
    /* The keys, read in one Txn (at most 128 operations each). */
    for (size_t at = 0; at < n; at += 100) {
        size_t m = n - at < 100 ? n - at : 100;
        char *body = malloc(m * (DM_B64_LEN(DM_ETCD_KEY_MAX) + 64) + 64);
        if (!body)
            return;
        size_t o = (size_t)sprintf(body, "{\"success\":[");
        long long leases[100];
        for (size_t i = 0; i < m; i++) {
            struct dm_elock *l = dm_elock_of(holds[at + i].lock);
            dm_lock(&locks_mu);
            leases[i] = l->lease;
            dm_unlock(&locks_mu);
            char key[DM_ETCD_KEY_MAX], key64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
            dm_etcd_queue_key(key, sizeof key, l->name, leases[i], holds[at + i].read);
            dm_etcd_b64(key, key64);
            o += (size_t)sprintf(body + o, "%s{\"request_range\":{\"key\":\"%s\"}}", i ? "," : "", key64);
        }
        sprintf(body + o, "]}");
        struct dm_etcd_reply r;
        enum dm_fail how;
        char why[400];
        int e = dm_etcd_call("/v3/kv/txn", body, now_deadline(), &r, &how, why, sizeof why);
        free(body);
        if (e)
            return;
        for (size_t i = 0; i < m; i++) {
            if (!lr || leases[i] != lease) {
                res[at + i] = DM_RENEW_LOST;
                continue;
            }
            char v[DM_OWNER_MAX + 8];
            int kv = range_kv(&r.j, (int)i);
            res[at + i] = kv >= 0 && dm_json_b64(&r.j, dm_json_get(&r.j, kv, "value"), v, sizeof v) >= 0
                          && strcmp(v, holds[at + i].owner) == 0 ? DM_RENEW_OK : DM_RENEW_LOST;
        }
        dm_etcd_reply_free(&r);
    }
}

/* ---- want notices: another process's key appearing in the queue ---- */

static void want_event(void *arg, const struct dm_json *j, int ev)
{
    struct dm_elock *l = arg;
    if (dm_json_get(j, ev, "type") >= 0)
        return;         /* a DELETE: only puts are wants */
    int kv = dm_json_get(j, ev, "kv");
    if (dm_json_int(j, dm_json_get(j, kv, "version"), 0) != 1)
        return;         /* not a new key */
    char key[DM_ETCD_KEY_MAX];
    if (dm_json_b64(j, dm_json_get(j, kv, "key"), key, sizeof key) < 0)
        return;
    dm_lock(&locks_mu);
    char mine[DM_ETCD_KEY_MAX];
    dm_etcd_queue_key(mine, sizeof mine, l->name, l->lease, l->read);
    int own = l->lease && strcmp(key, mine) == 0;
    void (*fn)(void *) = l->want_fn;
    void *fa = l->want_arg;
    dm_unlock(&locks_mu);
    if (!own && fn)
        fn(fa);
}

int dm_elock_want_watch(struct dm_store_lock *pl, void (*fn)(void *arg), void *arg, long timeout_ms)
{
    struct dm_elock *l = dm_elock_of(pl);
    dm_lock(&locks_mu);
    l->want_fn = fn;
    l->want_arg = arg;
    struct dm_watch *w = l->want;
    dm_unlock(&locks_mu);
    if (!w) {
        char prefix[DM_ETCD_KEY_MAX];
        dm_etcd_queue_prefix(prefix, sizeof prefix, l->name);
        w = dm_watch_new(prefix, 1, want_event, l);
        if (!w)
            return ENOMEM;
        dm_lock(&locks_mu);
        if (l->want) {
            dm_unlock(&locks_mu);
            dm_watch_free(w);
            w = l->want;
        } else {
            l->want = w;
            dm_unlock(&locks_mu);
        }
    }
    return dm_watch_start(w, timeout_ms);
}

void dm_elock_want_unwatch(struct dm_store_lock *pl)
{
    struct dm_elock *l = dm_elock_of(pl);
    dm_lock(&locks_mu);
    struct dm_watch *w = l->want;
    l->want = NULL;
    l->want_fn = NULL;
    dm_unlock(&locks_mu);
    dm_watch_free(w);       /* waits for a call in progress */
}

void dm_elock_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&locks_mu, phase);
    if (phase == DM_FORK_CHILD) {
        /* The parent's holds and watches are not the child's. */
        for (size_t b = 0; b < locks.n; b++)
            for (struct dm_hnode *x = locks.b[b]; x; x = x->next) {
                struct dm_elock *l = (struct dm_elock *)x;
                l->lease = l->rev = 0;
                l->guard_lease = l->guard_rev = 0;
                l->pend.on = l->pend.busy = 0;  /* the parent's key: its release is the parent's */
                memset(&l->pend.timer, 0, sizeof l->pend.timer);
                /* its want watch starts again at the next want_watch */
            }
        dm_name_stats_fork_child();
    }
}
