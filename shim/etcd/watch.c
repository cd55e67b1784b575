/* watch: etcd's watch streams over its JSON gateway: one POST of a
 * create_request, then one {"result": ...} line per message for as long as
 * the connection lasts (closing the request does not end a watch: the
 * client closes the connection). Every request carries
 * Grpc-Metadata-hasleader, so a member cut off from its leader cancels the
 * stream instead of keeping it silent (etcd #10819); a stream is re-made on
 * the next member from the revision after the last one seen. */
#include "watch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "etcd.h"
#include "http.h"
#include "log.h"
#include "real.h"
#include "util.h"

struct dm_watch {
    struct dm_watch *next, *prev;   /* every watch of the process (all_mu) */
    char *key64, *end64;            /* base64; end64 NULL: the key alone */
    dm_watch_fn fn;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, created, stop, done;
    struct dm_http h;               /* the thread's connection */
    long long next_rev;             /* the revision to go on from, 0: now */
};

static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dm_watch *all;

struct dm_watch *dm_watch_new(const char *key, int prefix, dm_watch_fn fn, void *arg)
{
    struct dm_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    size_t n = strlen(key);
    w->key64 = malloc(DM_B64_LEN(n) + 1);
    w->end64 = prefix ? malloc(DM_B64_LEN(n) + 1) : NULL;
    if (!w->key64 || (prefix && !w->end64)) {
        free(w->key64);
        free(w->end64);
        free(w);
        return NULL;
    }
    dm_etcd_b64(key, w->key64);
    if (prefix)
        dm_etcd_prefix_end_b64(key, w->end64);
    w->fn = fn;
    w->arg = arg;
    dm_real.mutex_init(&w->mu, NULL);
    dm_cond_init_monotonic(&w->cv);
    w->h.fd = -1;
    dm_lock(&all_mu);
    w->next = all;
    if (all)
        all->prev = w;
    all = w;
    dm_unlock(&all_mu);
    return w;
}

void dm_watch_atfork(enum dm_fork_phase phase)
{
    if (phase == DM_FORK_PREPARE) {
        dm_lock(&all_mu);
        return;
    }
    if (phase == DM_FORK_PARENT) {
        dm_unlock(&all_mu);
        return;
    }
    /* The child has none of the watches' threads: each starts again at its
     * next dm_watch_start (a cond waited on, a want watched). */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    all_mu = fresh;
    for (struct dm_watch *w = all; w; w = w->next) {
        if (w->h.fd >= 0)
            close(w->h.fd);
        w->h.fd = -1;
        w->h.in = w->h.body = NULL;     /* the parent's buffers: left, not freed */
        w->h.inlen = w->h.incap = w->h.bodylen = w->h.bodycap = 0;
        w->started = w->created = w->stop = w->done = 0;
        dm_real.mutex_init(&w->mu, NULL);
        dm_cond_init_monotonic(&w->cv);
    }
}

/* The create_request for a stream from revision `from` (0: now). */
static void create_body(char *body, size_t len, const char *key64, const char *end64, long long from)
{
    char extra[200] = "";
    if (end64)
        snprintf(extra, sizeof extra, ",\"range_end\":\"%s\"", end64);
    char start[64] = "";
    if (from > 0)
        snprintf(start, sizeof start, ",\"start_revision\":\"%lld\"", from);
    snprintf(body, len, "{\"create_request\":{\"key\":\"%s\"%s%s}}", key64, end64 ? extra : "", start);
}

/* One message of a stream: 1 created, 2 events (each to fn), 0 nothing of
 * note, -1 the stream is over (canceled, an error). */
static int message(struct dm_watch *w, const char *line, long long *next_rev,
                   void (*each)(struct dm_watch *, const struct dm_json *, int))
{
    struct dm_json j;
    if (dm_json_parse(&j, line, strlen(line)) < 0) {
        dm_json_free(&j);
        return -1;
    }
    int res = dm_json_get(&j, 0, "result");
    int out = 0;
    if (res < 0 || dm_json_true(&j, dm_json_get(&j, res, "canceled")))
        out = -1;
    else {
        long long rev = dm_json_int(&j, dm_json_path(&j, res, "header.revision"), 0);
        int evs = dm_json_get(&j, res, "events");
        int n = dm_json_len(&j, evs);
        for (int i = 0; i < n; i++) {
            int ev = dm_json_at(&j, evs, i);
            long long mod = dm_json_int(&j, dm_json_path(&j, ev, "kv.mod_revision"), 0);
            if (mod >= *next_rev)
                *next_rev = mod + 1;
            if (each)
                each(w, &j, ev);
        }
        if (n > 0)
            out = 2;
        else if (dm_json_true(&j, dm_json_get(&j, res, "created"))) {
            out = 1;
            if (rev + 1 > *next_rev)
                *next_rev = rev + 1;
        }
    }
    dm_json_free(&j);
    return out;
}

static void call_fn(struct dm_watch *w, const struct dm_json *j, int ev)
{
    w->fn(w->arg, j, ev);
}

static void *watch_main(void *arg)
{
    struct dm_watch *w = arg;
    const struct dm_config *cfg = dm_etcd_cfg();
    struct dm_backoff bo = DM_BACKOFF_INIT(50, 1000);
    int interrupted = 0;
    for (;;) {
        dm_lock(&w->mu);
        int stop = w->stop;
        dm_unlock(&w->mu);
        if (stop)
            break;
        struct dm_http h;
        dm_etcd_member(&h);
        dm_lock(&w->mu);
        w->h = h;
        dm_unlock(&w->mu);
        char body[1024];
        create_body(body, sizeof body, w->key64, w->end64, w->next_rev);
        int status = 0;
        char tok[512];
        dm_etcd_auth(tok, sizeof tok);
        int e = dm_http_stream(&w->h, "/v3/watch", body, strlen(body), tok[0] ? tok : NULL,
                               dm_now_ms() + cfg->redis.command_timeout_ms, &status);
        if (e == 0 && status == 200) {
            for (;;) {
                char *line = NULL;
                e = dm_http_line(&w->h, dm_now_ms() + 1000, &line);
                dm_lock(&w->mu);
                stop = w->stop;
                dm_unlock(&w->mu);
                if (stop) {
                    free(line);
                    break;
                }
                if (e == ETIMEDOUT)
                    continue;
                if (e)
                    break;
                int m = message(w, line, &w->next_rev, call_fn);
                free(line);
                if (m < 0)
                    break;
                if (m == 1) {
                    dm_backoff_reset(&bo);
                    if (interrupted) {
                        w->fn(w->arg, NULL, -1);
                        interrupted = 0;
                    }
                    dm_lock(&w->mu);
                    w->created = 1;
                    dm_cv_broadcast(&w->cv);
                    dm_unlock(&w->mu);
                }
            }
        }
        dm_lock(&w->mu);
        dm_http_close(&w->h);
        stop = w->stop;
        dm_unlock(&w->mu);
        if (stop)
            break;
        interrupted = 1;
        dm_etcd_member_next();
        dm_sleep_ms(dm_backoff_next(&bo));
    }
    dm_lock(&w->mu);
    w->done = 1;
    dm_cv_broadcast(&w->cv);
    dm_unlock(&w->mu);
    return NULL;
}

int dm_watch_start(struct dm_watch *w, long timeout_ms)
{
    dm_lock(&w->mu);
    if (!w->started) {
        int rc = dm_thread_start(NULL, watch_main, w);
        if (rc) {
            dm_unlock(&w->mu);
            return rc;
        }
        w->started = 1;
    }
    struct timespec ts;
    dm_deadline_in(&ts, timeout_ms);
    while (!w->created)
        if (dm_cv_timedwait(&w->cv, &w->mu, &ts) == ETIMEDOUT)
            break;
    int rc = w->created ? 0 : ETIMEDOUT;
    dm_unlock(&w->mu);
    return rc;
}

void dm_watch_free(struct dm_watch *w)
{
    if (!w)
        return;
    dm_lock(&w->mu);
    w->stop = 1;
    if (w->started) {
        dm_http_abort(&w->h);
        while (!w->done)
            dm_cv_wait(&w->cv, &w->mu);
    }
    dm_unlock(&w->mu);
    dm_lock(&all_mu);
    if (w->prev)
        w->prev->next = w->next;
    else
        all = w->next;
    if (w->next)
        w->next->prev = w->prev;
    dm_unlock(&all_mu);
    dm_mutex_destroy(&w->mu);
    dm_cv_destroy(&w->cv);
    free(w->key64);
    free(w->end64);
    free(w);
}

static int deleted_in(struct dm_watch *w, const struct dm_json *j, int ev)
{
    (void)w;
    char t[16];
    return dm_json_str(j, dm_json_get(j, ev, "type"), t, sizeof t) > 0 && strcmp(t, "DELETE") == 0;
}

static void mark_delete(struct dm_watch *w, const struct dm_json *j, int ev)
{
    if (deleted_in(w, j, ev))
        *(int *)w->arg = 1;
}

/* Is the key (base64) made at revision `made` gone now (a linearizable
 * read)? A key of that name made again later is another key: the one
 * waited for is gone. No answer: no. */
static int key_gone(const char *key64, long long made)
{
    char body[DM_B64_LEN(DM_ETCD_KEY_MAX) + 64], why[300];
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"keys_only\":true}", key64);
    struct dm_etcd_reply r;
    enum dm_fail how;
    if (dm_etcd_call("/v3/kv/range", body, dm_now_ms() + dm_etcd_cfg()->redis.command_timeout_ms,
                     &r, &how, why, sizeof why) != 0)
        return 0;
    int kv = dm_json_at(&r.j, dm_json_get(&r.j, 0, "kvs"), 0);
    int gone = kv < 0 || dm_json_int(&r.j, dm_json_get(&r.j, kv, "create_revision"), 0) != made;
    dm_etcd_reply_free(&r);
    return gone;
}

int dm_watch_deleted(const char *key64, long long made, long long from, long long deadline_ms)
{
    const struct dm_config *cfg = dm_etcd_cfg();
    struct dm_http h;
    dm_etcd_member(&h);
    /* From now, not from `from`: etcd serves a watch that starts in the
     * past from its unsynced set, up to 100 ms later; one from now is
     * synced at once, and a look at the key covers what came between. */
    char body[1024];
    create_body(body, sizeof body, key64, NULL, 0);
    int status = 0, del = 0;
    long long cdl = dm_now_ms() + cfg->redis.command_timeout_ms;
    char tok[512];
    dm_etcd_auth(tok, sizeof tok);
    int e = dm_http_stream(&h, "/v3/watch", body, strlen(body), tok[0] ? tok : NULL,
                           cdl < deadline_ms ? cdl : deadline_ms, &status);
    if (e || status != 200) {
        dm_http_close(&h);
        if (e == ETIMEDOUT && dm_now_ms() >= deadline_ms)
            return ETIMEDOUT;
        dm_etcd_member_next();
        return EIO;
    }
    struct dm_watch w = { .arg = &del };
    long long next = 0;
    while (!del) {
        char *line = NULL;
        e = dm_http_line(&h, deadline_ms, &line);
        if (e)
            break;
        int m = message(&w, line, &next, mark_delete);
        free(line);
        if (m < 0) {
            e = EIO;
            break;
        }
        if (m == 1 && next > from && key_gone(key64, made)) {
            del = 1;    /* deleted before the watch began */
            break;
        }
    }
    dm_http_close(&h);
    if (del)
        return 0;
    if (e != ETIMEDOUT)
        dm_etcd_member_next();
    return e == ETIMEDOUT ? ETIMEDOUT : EIO;
}
