/* store: the etcd store's entry in store.h's table (dm_etcd_store): the
 * lock protocol's calls (elock.c), a listed cond's signals as puts on its
 * key, counted by a watch (watch.c), the store's thread (etcd.c), and the
 * tools' calls over ranges of the namespace. Releases are waited for:
 * etcd's answer is one Txn away, and its verdict is the caller's at once. */
#include "elock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd.h"
#include "log.h"
#include "real.h"
#include "util.h"
#include "watch.h"

static void e_init(const struct dm_config *cfg)
{
    dm_etcd_setup(cfg);
}

static int e_release_hold(struct dm_store_lock *l, const char *owner, uint64_t token,
                          unsigned long wait_id)
{
    (void)wait_id;      /* the token names the grant: one key per grant */
    return dm_elock_release(l, owner, token);
}

static int e_release_nowait(struct dm_store_lock *l, const char *owner, uint64_t token,
                            unsigned long wait_id, long long lease_end_ms, dm_store_lost_fn lost)
{
    (void)wait_id;
    return dm_elock_release_queued(l, owner, token, lease_end_ms, lost);
}

static void e_flush_bounded(void)
{
    /* exec, _exit, a signal handler: nothing but atomics; a queued
     * release ends with its lease */
}

/* ---- a listed cond's signals ---- */

static pthread_mutex_t cmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ccv;
static int ccv_ready;

struct dm_chan {
    int refs;
    unsigned long seq;              /* cmu */
    struct dm_watch *w;
    char key[DM_ETCD_KEY_MAX];
};

static void cv_ready_locked(void)
{
    if (!ccv_ready) {
        dm_cond_init_monotonic(&ccv);
        ccv_ready = 1;
    }
}

static void chan_event(void *arg, const struct dm_json *j, int ev)
{
    struct dm_chan *ch = arg;
    if (ev >= 0 && dm_json_get(j, ev, "type") >= 0)
        return;     /* a DELETE is no signal */
    dm_lock(&cmu);
    ch->seq++;      /* a signal, or (ev -1) some may have been missed */
    cv_ready_locked();
    dm_cv_broadcast(&ccv);
    dm_unlock(&cmu);
}

static struct dm_chan *e_cond_chan(struct dm_store_lock *l)
{
    struct dm_chan *ch = calloc(1, sizeof *ch);
    if (!ch)
        return NULL;
    ch->refs = 1;
    dm_etcd_cond_key(ch->key, sizeof ch->key, l->name);
    ch->w = dm_watch_new(ch->key, 0, chan_event, ch);
    if (!ch->w) {
        free(ch);
        return NULL;
    }
    return ch;
}

static void e_chan_put(struct dm_chan *ch)
{
    if (!ch)
        return;
    dm_lock(&cmu);
    int last = --ch->refs == 0;
    dm_unlock(&cmu);
    if (last) {
        dm_watch_free(ch->w);
        free(ch);
    }
}

static long long cond_down_until;   /* ms: conds skip subscribing until then */

static int e_chan_subscribe(struct dm_chan *ch, long timeout_ms)
{
    if (dm_now_ms() < __atomic_load_n(&cond_down_until, __ATOMIC_RELAXED))
        return EAGAIN;
    return dm_watch_start(ch->w, timeout_ms);
}

static unsigned long e_chan_seq(struct dm_chan *ch)
{
    dm_lock(&cmu);
    unsigned long s = ch->seq;
    dm_unlock(&cmu);
    return s;
}

static void wait_cancelled(void *arg)
{
    (void)arg;
    dm_unlock(&cmu);
}

static int e_chan_wait_until(struct dm_chan *ch, unsigned long seen, const struct timespec *deadline)
{
    volatile int rc = 0;
    dm_lock(&cmu);
    cv_ready_locked();
    pthread_cleanup_push(wait_cancelled, NULL);
    while (ch->seq == seen) {
        if (!deadline)
            dm_cv_wait(&ccv, &cmu);
        else if (dm_cv_timedwait(&ccv, &cmu, deadline) == ETIMEDOUT) {
            rc = ch->seq == seen ? ETIMEDOUT : 0;
            break;
        }
    }
    pthread_cleanup_pop(1);
    return rc;
}

static void e_chan_bump(struct dm_chan *ch)
{
    dm_lock(&cmu);
    ch->seq++;
    cv_ready_locked();
    dm_cv_broadcast(&ccv);
    dm_unlock(&cmu);
}

static long e_cond_publish(struct dm_store_lock *l, int broadcast)
{
    char key[DM_ETCD_KEY_MAX], key64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
    char msg[64], msg64[DM_B64_LEN(64) + 1];
    dm_etcd_cond_key(key, sizeof key, l->name);
    dm_etcd_b64(key, key64);
    snprintf(msg, sizeof msg, "%s %s", dm_store_process_id(), broadcast ? "broadcast" : "signal");
    dm_b64_encode(msg, strlen(msg), msg64);
    char body[DM_B64_LEN(DM_ETCD_KEY_MAX) + 200];
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"%s\"}", key64, msg64);
    struct dm_etcd_reply r;
    enum dm_fail how;
    char why[400];
    if (dm_etcd_call("/v3/kv/put", body, dm_now_ms() + dm_etcd_cfg()->redis.command_timeout_ms,
                     &r, &how, why, sizeof why) != 0) {
        static long logged;
        dm_stats_add(&dm_store_counts(l)->redis_errors, 1);
        dm_log_every(&logged, 10000, DM_LOG_ERROR, "cond %s: the %s reached no process: %s",
                     l->name, broadcast ? "broadcast" : "signal", why);
        return -1;
    }
    dm_etcd_reply_free(&r);
    return 0;       /* etcd does not count its watchers */
}

static void e_cond_outcome(const struct dm_store_lock *l, int ok, long took_ms)
{
    (void)l;
    (void)took_ms;
    /* After a subscription that failed, the next waits skip it for a
     * second (they wait locally, signals counted as they come). */
    __atomic_store_n(&cond_down_until, ok ? 0 : dm_now_ms() + 1000, __ATOMIC_RELAXED);
}

static int e_cond_down(const struct dm_store_lock *l)
{
    (void)l;
    return dm_now_ms() < __atomic_load_n(&cond_down_until, __ATOMIC_RELAXED);
}

/* ---- the process's record (who.h) ---- */

/* The record holds a use of the process lease while the process holds or
 * waits (the store's thread keeps a used lease alive between the
 * watchdog's rounds), and goes with the lease when the process dies. It
 * never grants the lease: the first lock does (a second grant racing it
 * would cost that lock a revoke); till then the write waits. used_on: the
 * lease the use was taken on, 0 none (a lease that lapsed dropped its
 * uses with it). */
static pthread_mutex_t dmu = PTHREAD_MUTEX_INITIALIZER;
static long long used_on;

/* dmu held. */
static void drop_use_locked(void)
{
    if (used_on && dm_etcd_lease_live(used_on))
        dm_etcd_lease_unuse();
    used_on = 0;
}

static int e_describe(const char *text, enum dm_describe what)
{
    dm_lock(&dmu);
    if (what == DM_DESCRIBE_IDLE) {
        drop_use_locked();  /* no keep-alive on its account: it goes with the lease */
        dm_unlock(&dmu);
        return 0;
    }
    char key[DM_ETCD_KEY_MAX], key64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
    dm_etcd_who_key(key, sizeof key, NULL, dm_store_process_id());
    dm_etcd_b64(key, key64);
    long long deadline = dm_now_ms() + dm_etcd_cfg()->redis.command_timeout_ms;
    struct dm_etcd_reply r;
    enum dm_fail how;
    char why[400] = "";
    int rc = -1;
    if (what == DM_DESCRIBE_DELETE) {
        if (deadline > dm_now_ms() + DM_DESCRIBE_DELETE_MS)
            deadline = dm_now_ms() + DM_DESCRIBE_DELETE_MS;    /* the exit's */
        char body[sizeof key64 + 32];
        snprintf(body, sizeof body, "{\"key\":\"%s\"}", key64);
        rc = dm_etcd_call("/v3/kv/deleterange", body, deadline, &r, &how, why, sizeof why);
        if (rc == 0)
            dm_etcd_reply_free(&r);
        drop_use_locked();
    } else {
        long long id = dm_etcd_lease_current();
        size_t tl = strlen(text);
        char *body = id ? malloc(sizeof key64 + DM_B64_LEN(tl) + 100) : NULL;
        if (body) {
            int n = sprintf(body, "{\"key\":\"%s\",\"value\":\"", key64);
            n += (int)dm_b64_encode(text, tl, body + n);
            sprintf(body + n, "\",\"lease\":\"%lld\"}", id);
            rc = dm_etcd_call("/v3/kv/put", body, deadline, &r, &how, why, sizeof why);
            free(body);
            if (rc == 0) {
                dm_etcd_reply_free(&r);
                if (used_on != id) {
                    drop_use_locked();
                    used_on = id;
                    dm_etcd_lease_use();
                    /* A lease granted anew meanwhile took the use: give it
                     * back (the record's lease is gone). */
                    if (!dm_etcd_lease_live(id)) {
                        dm_etcd_lease_unuse();
                        used_on = 0;
                    }
                }
            }
        } else {
            snprintf(why, sizeof why, "%s", id ? "out of memory" : "no process lease yet");
        }
    }
    dm_unlock(&dmu);
    if (rc != 0)
        dm_debug("the process's record %s: %s", key, why);
    return rc == 0 ? 0 : -1;
}

/* ---- fork ---- */

static void e_atfork(enum dm_fork_phase phase)
{
    if (phase == DM_FORK_PREPARE) {
        dm_elock_atfork(phase);
        dm_lock(&cmu);
        dm_watch_atfork(phase);
        dm_etcd_atfork(phase);
        return;
    }
    dm_etcd_atfork(phase);
    dm_watch_atfork(phase);
    if (phase == DM_FORK_CHILD) {
        pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
        cmu = fresh;
        dmu = fresh;        /* only the renewal thread and the exit path write */
        used_on = 0;        /* the record and its lease are the parent's */
        ccv_ready = 0;
    } else
        dm_unlock(&cmu);
    dm_elock_atfork(phase);
}

/* ---- the tools' calls ---- */

/* ms left on lease id (etcd's timetolive: whole seconds), -1 unknown or
 * gone; *granted_ms (when not NULL): the TTL it was granted, 0 unknown. */
static long long lease_left_ms_of(long long id, long long *granted_ms);
static long long lease_left_ms(long long id)
{
    return lease_left_ms_of(id, NULL);
}

static long long lease_left_ms_of(long long id, long long *granted_ms)
{
    if (granted_ms)
        *granted_ms = 0;
    if (!id)
        return -1;
    char body[64], why[300];
    snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", id);
    struct dm_etcd_reply r;
    enum dm_fail how;
    if (dm_etcd_call("/v3/lease/timetolive", body,
                     dm_now_ms() + dm_etcd_cfg()->redis.command_timeout_ms, &r, &how, why, sizeof why) != 0)
        return -1;
    long long ttl = dm_json_int(&r.j, dm_json_get(&r.j, 0, "TTL"), -1);
    if (granted_ms && ttl >= 0)
        *granted_ms = dm_json_int(&r.j, dm_json_get(&r.j, 0, "grantedTTL"), 0) * 1000;
    dm_etcd_reply_free(&r);
    return ttl < 0 ? -1 : ttl * 1000;
}

static int e_admin_connect(char *err, size_t errlen)
{
    struct dm_etcd_reply r;
    enum dm_fail how;
    if (dm_etcd_call("/v3/maintenance/status", "{}",
                     dm_now_ms() + dm_etcd_cfg()->redis.connect_timeout_ms +
                     dm_etcd_cfg()->redis.command_timeout_ms, &r, &how, err, errlen) != 0)
        return -1;
    dm_etcd_reply_free(&r);
    return 0;
}

static void e_admin_disconnect(void)
{
}

static int row_cmp(const void *a, const void *b)
{
    return strcmp(((const struct dm_lock_row *)a)->name, ((const struct dm_lock_row *)b)->name);
}

/* The row of `name` in rows[0..*n), made if missing. */
static struct dm_lock_row *row_of(struct dm_lock_row **rows, size_t *n, size_t *cap, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*rows)[i].name, name) == 0)
            return &(*rows)[i];
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        struct dm_lock_row *nr = realloc(*rows, c * sizeof *nr);
        if (!nr)
            return NULL;
        *rows = nr;
        *cap = c;
    }
    struct dm_lock_row *r = &(*rows)[(*n)++];
    memset(r, 0, sizeof *r);
    r->name = strdup(name);
    r->state = "free";
    r->lease_ms = -1;
    return r->name ? r : NULL;
}

static int e_admin_list(const char *ns, struct dm_lock_row **rows, size_t *n, char *err,
                        size_t errlen)
{
    char pfx[DM_NAME_MAX + 4], p64[DM_B64_LEN(DM_NAME_MAX + 4) + 1], e64[DM_B64_LEN(DM_NAME_MAX + 4) + 1];
    snprintf(pfx, sizeof pfx, "%s#", ns);
    dm_etcd_b64(pfx, p64);
    dm_etcd_prefix_end_b64(pfx, e64);
    char body[sizeof p64 * 2 + 100];
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\",\"sort_order\":\"ASCEND\","
             "\"sort_target\":\"KEY\"}", p64, e64);
    struct dm_etcd_reply r;
    enum dm_fail how;
    if (dm_etcd_call("/v3/kv/range", body, dm_now_ms() + 10 * dm_etcd_cfg()->redis.command_timeout_ms,
                     &r, &how, err, errlen) != 0)
        return -1;
    *rows = NULL;
    *n = 0;
    size_t cap = 0;
    int kvs = dm_json_get(&r.j, 0, "kvs");
    int nk = dm_json_len(&r.j, kvs);
    /* The queue's oldest key of each name holds it; an rwlock's readers
     * (q#r) older than its oldest writer (q#w) hold it together. */
    long long *best = calloc((size_t)nk + 1, sizeof *best);
    long long *minw = calloc((size_t)nk + 1, sizeof *minw);
    long long *lid = calloc((size_t)nk + 1, sizeof *lid);
    for (int pass = 0; pass < 2 && best && minw; pass++)
    for (int i = 0; i < nk; i++) {
        int kv = dm_json_at(&r.j, kvs, i);
        char key[DM_ETCD_KEY_MAX], val[DM_OWNER_MAX + 300];
        if (dm_json_b64(&r.j, dm_json_get(&r.j, kv, "key"), key, sizeof key) < 0)
            continue;
        if (dm_json_b64(&r.j, dm_json_get(&r.j, kv, "value"), val, sizeof val) < 0)
            val[0] = '\0';
        char *name = key + strlen(pfx);
        char *kind = strchr(name, '#');
        if (!kind || kind == name)
            continue;       /* an empty name: a process's record (NS##who#...) */
        if (kind[1] == 'a')
            continue;       /* an enqueue guard (NS#NAME#a<lease>) says nothing of the lock */
        *kind++ = '\0';
        struct dm_lock_row *row = row_of(rows, n, &cap, name);
        if (!row)
            break;
        size_t at = (size_t)(row - *rows);
        long long cr = dm_json_int(&r.j, dm_json_get(&r.j, kv, "create_revision"), 0);
        int reader = kind[0] == 'q' && kind[1] == '#' && kind[2] == 'r';
        if (pass == 1) {
            if (reader && (!minw[at] || cr < minw[at])) {
                row->readers++;
                row->waiters--;
                if (cr == best[at]) {       /* readers hold it */
                    row->state = "read";
                    free(row->owner);
                    free(row->holds);
                    row->owner = row->holds = NULL;
                    row->waiters++;         /* the holder was not counted */
                }
            }
            continue;
        }
        if (kind[0] == 'q') {
            if (!reader && (!minw[at] || cr < minw[at]))
                minw[at] = cr;
            if (!row->owner || cr < best[at]) {
                if (row->owner)
                    row->waiters++;
                free(row->owner);
                free(row->token);
                free(row->holds);
                row->owner = strdup(val);
                char t[32];
                snprintf(t, sizeof t, "%lld", cr);
                row->token = strdup(t);
                row->holds = strdup("1");
                row->state = "held";
                best[at] = cr;
                if (lid)
                    lid[at] = dm_json_int(&r.j, dm_json_get(&r.j, kv, "lease"), 0);
            } else
                row->waiters++;
        } else if (kind[0] == 'm' && !row->owner) {
            row->state = strncmp(val, "forced ", 7) == 0 ? "forced" : strncmp(val, "held ", 5) == 0
                         ? "expired" : "free";
        }
    }
    free(minw);
    for (size_t i = 0; lid && i < *n; i++)
        if (best && best[i] && (*rows)[i].owner)
            (*rows)[i].lease_ms = lease_left_ms_of(lid[i], &(*rows)[i].lease_granted_ms);
    free(lid);
    free(best);
    dm_etcd_reply_free(&r);
    qsort(*rows, *n, sizeof **rows, row_cmp);
    return 0;
}

static int e_admin_who(const char *ns, char ***texts, size_t *n, char *err, size_t errlen)
{
    char pfx[DM_ETCD_KEY_MAX], p64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
    char e64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
    dm_etcd_who_key(pfx, sizeof pfx, ns, "");
    dm_etcd_b64(pfx, p64);
    dm_etcd_prefix_end_b64(pfx, e64);
    char body[sizeof p64 * 2 + 64];
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\"}", p64, e64);
    struct dm_etcd_reply r;
    enum dm_fail how;
    if (dm_etcd_call("/v3/kv/range", body, dm_now_ms() + 10 * dm_etcd_cfg()->redis.command_timeout_ms,
                     &r, &how, err, errlen) != 0)
        return -1;
    int kvs = dm_json_get(&r.j, 0, "kvs");
    int nk = dm_json_len(&r.j, kvs);
    char **out = calloc(nk > 0 ? (size_t)nk : 1, sizeof *out);
    size_t no = 0;
    for (int i = 0; out && i < nk; i++) {
        int kv = dm_json_at(&r.j, kvs, i);
        int v = dm_json_get(&r.j, kv, "value");
        char key[DM_ETCD_KEY_MAX], want[DM_ETCD_KEY_MAX + 8], probe;
        if (dm_json_b64(&r.j, dm_json_get(&r.j, kv, "key"), key, sizeof key) < 0)
            continue;
        /* the text must name the process its key names: a record may not
         * speak for another */
        snprintf(want, sizeof want, "\nid\t%s\n", key + strlen(pfx));
        long len = dm_json_b64(&r.j, v, &probe, 1);     /* its length */
        char *t = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (t && dm_json_b64(&r.j, v, t, (size_t)len + 1) >= 0 && strstr(t, want))
            out[no++] = t;
        else
            free(t);
    }
    dm_etcd_reply_free(&r);
    if (!out) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *texts = out;
    *n = no;
    return 0;
}

static int e_admin_partner(const char *name, int protocol, struct dm_lock_row *row, char *err,
                           size_t errlen)
{
    (void)protocol;
    memset(row, 0, sizeof *row);
    snprintf(err, errlen, "lock %s: etcd speaks only dmutex's protocol", name);
    return -1;
}

static int e_admin_force(const char *ns, const char *name, int force, const char *who,
                         struct dm_force *out, char *err, size_t errlen)
{
    (void)ns;
    memset(out, 0, sizeof *out);
    /* The queue's head, then a Txn that deletes it only if it still is. */
    char q[DM_ETCD_KEY_MAX], q64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1], e64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
    dm_etcd_queue_prefix(q, sizeof q, name);
    dm_etcd_b64(q, q64);
    dm_etcd_prefix_end_b64(q, e64);
    char body[DM_B64_LEN(DM_ETCD_KEY_MAX) * 6 + DM_B64_LEN(600) + 600];
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\",\"sort_order\":\"ASCEND\","
             "\"sort_target\":\"CREATE\",\"limit\":1}", q64, e64);
    struct dm_etcd_reply r;
    enum dm_fail how;
    long long dl = dm_now_ms() + dm_etcd_cfg()->redis.command_timeout_ms;
    if (dm_etcd_call("/v3/kv/range", body, dl, &r, &how, err, errlen) != 0)
        return -1;
    int kv = dm_json_at(&r.j, dm_json_get(&r.j, 0, "kvs"), 0);
    if (kv < 0) {
        dm_etcd_reply_free(&r);
        out->verdict = DM_FORCE_NOT_HELD;
        out->last = DM_LAST_NONE;
        return 0;
    }
    char key64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1];
    dm_json_str(&r.j, dm_json_get(&r.j, kv, "key"), key64, sizeof key64);
    dm_json_b64(&r.j, dm_json_get(&r.j, kv, "value"), out->owner, sizeof out->owner);
    long long cr = dm_json_int(&r.j, dm_json_get(&r.j, kv, "create_revision"), 0);
    long long lease_id = dm_json_int(&r.j, dm_json_get(&r.j, kv, "lease"), 0);
    snprintf(out->token, sizeof out->token, "%lld", cr);
    dm_etcd_reply_free(&r);
    if (!force) {
        /* Its lease is alive for as long as the key exists: refused. */
        out->verdict = DM_FORCE_REFUSED;
        out->lease_left_ms = lease_left_ms(lease_id);
        return 0;
    }
    char m[DM_ETCD_KEY_MAX], m64[DM_B64_LEN(DM_ETCD_KEY_MAX) + 1], v[600], v64[DM_B64_LEN(600) + 1];
    dm_etcd_marker_key(m, sizeof m, name);
    dm_etcd_b64(m, m64);
    snprintf(v, sizeof v, "forced %s by %s", out->owner, who);
    dm_b64_encode(v, strlen(v), v64);
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
             "\"create_revision\":\"%lld\"}],"
             "\"success\":[{\"request_delete_range\":{\"key\":\"%s\"}},"
                          "{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}},"
                          "{\"request_range\":{\"key\":\"%s\",\"range_end\":\"%s\","
                          "\"sort_order\":\"ASCEND\",\"sort_target\":\"CREATE\",\"limit\":1}}]}",
             key64, cr, key64, m64, v64, q64, e64);
    if (dm_etcd_call("/v3/kv/txn", body, dl, &r, &how, err, errlen) != 0)
        return -1;
    int ok = dm_json_true(&r.j, dm_json_get(&r.j, 0, "succeeded"));
    long long rev = dm_json_int(&r.j, dm_json_path(&r.j, 0, "header.revision"), 0);
    /* The queue's new head, if any, is the next holder: its token is
     * its key's create_revision (it confirms the grant itself); else the
     * next locker's token is above the revision now. */
    int rs = dm_json_at(&r.j, dm_json_get(&r.j, 0, "responses"), 2);
    int nkv = dm_json_at(&r.j, dm_json_path(&r.j, rs, "response_range.kvs"), 0);
    if (ok && nkv >= 0) {
        if (dm_json_b64(&r.j, dm_json_get(&r.j, nkv, "value"), out->next, sizeof out->next) < 0)
            snprintf(out->next, sizeof out->next, "?");
        out->next_token = dm_json_int(&r.j, dm_json_get(&r.j, nkv, "create_revision"), 0);
    }
    dm_etcd_reply_free(&r);
    if (!ok) {
        snprintf(err, errlen, "lock %s changed hands while it was being forced: run it again", name);
        return -1;
    }
    out->verdict = DM_FORCE_RELEASED;
    out->new_token = out->next[0] ? out->next_token : rev;
    return 0;
}

static int e_admin_fresh(const char *ns, int durable, char *said, size_t saidlen, char *err,
                         size_t errlen)
{
    (void)ns;
    (void)durable;
    (void)err;
    (void)errlen;
    snprintf(said, saidlen, "etcd keeps its lock data through restarts (its Raft log and "
             "snapshots) and its tokens are its revisions: nothing to declare");
    return 0;
}

static int e_admin_keys(int argc, char **argv)
{
    if (argc != 4) {
        fputs("usage: dmutex keys NS NAME queue|marker|cond\n", stderr);
        return 2;
    }
    /* the layout needs the namespace the config would give */
    static struct dm_config c;
    c.ns = argv[1];
    const struct dm_config *keep = dm_etcd_cfg();
    dm_etcd_setup(&c);
    char k[DM_ETCD_KEY_MAX];
    int rc = 0;
    if (strcmp(argv[3], "queue") == 0)
        dm_etcd_queue_prefix(k, sizeof k, argv[2]);
    else if (strcmp(argv[3], "marker") == 0)
        dm_etcd_marker_key(k, sizeof k, argv[2]);
    else if (strcmp(argv[3], "cond") == 0)
        dm_etcd_cond_key(k, sizeof k, argv[2]);
    else {
        fprintf(stderr, "dmutex keys: no etcd key kind '%s'\n", argv[3]);
        rc = 2;
    }
    if (keep)
        dm_etcd_setup(keep);
    if (rc == 0)
        puts(k);
    return rc;
}

static int e_admin_sharded(void)
{
    return 0;
}

/* etcd speaks dmutex's protocol only: the setnx lock is a Redis string
 * (config refuses it with etcd: dm_config_check_protocols). */
static int e_lock_protocol(struct dm_store_lock *l, int protocol)
{
    (void)l;
    return protocol == DM_PROTOCOL_DMUTEX ? 0 : ENOTSUP;
}

const struct dm_store_ops dm_etcd_store = {
    .name = "etcd",
    .init = e_init,
    .where = dm_etcd_where,
    .lock_get = dm_elock_get,
    .cond_get = dm_elock_cond_get,
    .lock_put = dm_elock_put,
    .lock_mode = dm_elock_mode,
    .lock_rwlock = dm_elock_rwlock,
    .lock_protocol = e_lock_protocol,
    .acquire = dm_elock_acquire,
    .release = dm_elock_release,
    .release_hold = e_release_hold,
    .release_nowait = e_release_nowait,
    .flush = dm_elock_flush,
    .flush_bounded = e_flush_bounded,
    .renew = dm_elock_renew,
    .describe = e_describe,
    .want_watch = dm_elock_want_watch,
    .want_unwatch = dm_elock_want_unwatch,
    .cond_chan = e_cond_chan,
    .chan_put = e_chan_put,
    .chan_subscribe = e_chan_subscribe,
    .chan_seq = e_chan_seq,
    .chan_wait_until = e_chan_wait_until,
    .chan_bump = e_chan_bump,
    .cond_publish = e_cond_publish,
    .cond_outcome = e_cond_outcome,
    .cond_down = e_cond_down,
    .timer_arm = dm_etcd_timer_arm,
    .timer_cancel = dm_etcd_timer_cancel,
    .on_image_end = dm_etcd_on_image_end,
    .image_ends = dm_etcd_image_ends,
    .atfork = e_atfork,
    .admin_connect = e_admin_connect,
    .admin_disconnect = e_admin_disconnect,
    .admin_list = e_admin_list,
    .admin_who = e_admin_who,
    .admin_partner = e_admin_partner,
    .admin_force = e_admin_force,
    .admin_fresh = e_admin_fresh,
    .admin_keys = e_admin_keys,
    .admin_sharded = e_admin_sharded,
};
