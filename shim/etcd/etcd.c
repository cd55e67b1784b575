/* etcd: the cluster's members and the calls to them, the process lease,
 * and the store's thread (timers, the image's end, keep-alives between
 * the watchdog's rounds). Knows what a call, a member and a lease are;
 * what a lock is belongs to elock.c.
 *
 * Connections: a call takes an idle connection to the current member from
 * a small pool (or makes one) and gives it back after a whole answer, so
 * a thread never waits for another's round trip. */
#include "etcd.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "http.h"
#include "log.h"
#include "real.h"
#include "tls.h"
#include "util.h"

static const struct dm_config *cfg;
static pthread_mutex_t emu = PTHREAD_MUTEX_INITIALIZER;    /* members, pool, lease, timers */
static size_t cur;                  /* the member that answered last */
static char where[300] = "etcd";

#define POOL_MAX 8
static struct dm_http *pool[POOL_MAX];
static size_t npool;

void dm_etcd_setup(const struct dm_config *c)
{
    cfg = c;
    if (c->etcd.nendpoints) {
        snprintf(where, sizeof where, "%s:%d", c->etcd.endpoints[0].host, c->etcd.endpoints[0].port);
        dm_tls_setup(&c->etcd.tls, "etcd");     /* OpenSSL now, with etcd.tls: tls.h says why */
    }
}

const struct dm_config *dm_etcd_cfg(void)
{
    return cfg;
}

const char *dm_etcd_where(void)
{
    return where;
}

void dm_etcd_reply_free(struct dm_etcd_reply *r)
{
    dm_json_free(&r->j);
    free(r->text);
    r->text = NULL;
}

void dm_etcd_b64(const char *key, char *out)
{
    dm_b64_encode(key, strlen(key), out);
}

void dm_etcd_prefix_end_b64(const char *prefix, char *out)
{
    char end[DM_ETCD_KEY_MAX];
    size_t n = strlen(prefix);
    memcpy(end, prefix, n);
    end[n - 1]++;           /* no key byte here is 0xff: names are ASCII */
    dm_b64_encode(end, n, out);
}

static const char *ns(void)
{
    return cfg->ns;
}

void dm_etcd_queue_prefix(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s#%s#q#", ns(), name);
}

void dm_etcd_queue_key(char *buf, size_t len, const char *name, long long lease, int read)
{
    snprintf(buf, len, "%s#%s#q#%c%llx", ns(), name, read ? 'r' : 'w', (unsigned long long)lease);
}

void dm_etcd_writers_prefix(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s#%s#q#w", ns(), name);
}

void dm_etcd_marker_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s#%s#m", ns(), name);
}

void dm_etcd_guard_key(char *buf, size_t len, const char *name, long long lease)
{
    snprintf(buf, len, "%s#%s#a%llx", ns(), name, (unsigned long long)lease);
}

void dm_etcd_cond_key(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s#%s#c", ns(), name);
}

void dm_etcd_who_key(char *buf, size_t len, const char *ns_, const char *process_id)
{
    snprintf(buf, len, "%s##who#%s", ns_ ? ns_ : ns(), process_id);
}

/* ---- members and calls ---- */

/* A member that failed a call is skipped for a while (CLOCK_MONOTONIC ms,
 * relaxed atomics): the threads of a process move on together instead of
 * each losing a command_timeout to the same stopped member. */
#define MEMBER_BAD_MS 3000
static long long bad_until[DM_ETCD_ENDPOINTS_MAX];

static size_t member_now(void)
{
    size_t n = cfg->etcd.nendpoints, c = __atomic_load_n(&cur, __ATOMIC_ACQUIRE);
    long long now = dm_now_ms();
    for (size_t i = 0; i < n; i++) {
        size_t m = (c + i) % n;
        if (__atomic_load_n(&bad_until[m], __ATOMIC_RELAXED) <= now)
            return m;
    }
    return c % n;       /* every one failed lately: the next in turn */
}

static void member_bad(size_t m)
{
    __atomic_store_n(&bad_until[m], dm_now_ms() + MEMBER_BAD_MS, __ATOMIC_RELAXED);
}

void dm_etcd_member(struct dm_http *h)
{
    const struct dm_endpoint *e = &cfg->etcd.endpoints[member_now()];
    dm_http_init(h, e->host, e->port, cfg->etcd.tls.enabled);
}

void dm_etcd_member_next(void)
{
    member_bad(member_now());
    __atomic_add_fetch(&cur, 1, __ATOMIC_ACQ_REL);
}

static struct dm_http *conn_take(size_t m)
{
    dm_lock(&emu);
    for (size_t i = 0; i < npool; i++) {
        const struct dm_endpoint *e = &cfg->etcd.endpoints[m];
        if (pool[i]->port == e->port && strcmp(pool[i]->host, e->host) == 0) {
            struct dm_http *h = pool[i];
            pool[i] = pool[--npool];
            dm_unlock(&emu);
            return h;
        }
    }
    dm_unlock(&emu);
    struct dm_http *h = malloc(sizeof *h);
    if (h)
        dm_http_init(h, cfg->etcd.endpoints[m].host, cfg->etcd.endpoints[m].port,
                     cfg->etcd.tls.enabled);
    return h;
}

static void conn_give(struct dm_http *h)
{
    if (h->fd >= 0) {
        dm_lock(&emu);
        if (npool < POOL_MAX) {
            pool[npool++] = h;
            h = NULL;
        }
        dm_unlock(&emu);
    }
    if (h) {
        dm_http_close(h);
        free(h);
    }
}

/* An error answer that another member may not give: no leader, a leader
 * change, the member stopping or out of reach of the others. */
static int member_trouble(const struct dm_etcd_reply *r)
{
    int code = (int)dm_json_int(&r->j, dm_json_get(&r->j, 0, "code"), 0);
    char msg[200];
    if (dm_json_str(&r->j, dm_json_get(&r->j, 0, "message"), msg, sizeof msg) < 0)
        msg[0] = '\0';
    return code == 14 || code == 4 || r->status == 503 || strstr(msg, "leader") ||
           strstr(msg, "stopped") || strstr(msg, "timed out");
}

/* ---- authentication: a token from /v3/auth/authenticate, sent as the
 * Authorization header; made again when etcd says it is no longer valid
 * (a simple token lives 5 minutes by default, and dies with a restart) */

static pthread_mutex_t tok_mu = PTHREAD_MUTEX_INITIALIZER;
static char token[512];
static unsigned long token_gen;     /* tok_mu: a new token for every authentication */

static int member_call(const char *path, const char *body, long long deadline_ms,
                     struct dm_etcd_reply *r, enum dm_fail *how, char *why, size_t why_len,
                     const char *auth);

/* The token to send (copied into buf), authenticating if there is none:
 * 1 with a token, 0 no authentication configured, -1 failed (why). */
static int auth_token(char *buf, size_t len, unsigned long *gen, long long deadline_ms,
                      enum dm_fail *how, char *why, size_t why_len)
{
    if (!cfg->etcd.username)
        return 0;
    dm_lock(&tok_mu);
    if (token[0]) {
        snprintf(buf, len, "%s", token);
        *gen = token_gen;
        dm_unlock(&tok_mu);
        return 1;
    }
    dm_unlock(&tok_mu);
    char user[600], pass[600], body[1300];
    dm_json_escape(cfg->etcd.username, user, sizeof user);
    dm_json_escape(cfg->etcd.password, pass, sizeof pass);
    snprintf(body, sizeof body, "{\"name\":\"%s\",\"password\":\"%s\"}", user, pass);
    struct dm_etcd_reply r;
    if (member_call("/v3/auth/authenticate", body, deadline_ms, &r, how, why, why_len, NULL) != 0) {
        if (*how == DM_FAIL_REFUSED) {
            size_t n = strlen(why);
            snprintf(why + n, why_len - n, " (authenticating as etcd user %s: check "
                     "etcd.username and its password)", cfg->etcd.username);
        }
        return -1;
    }
    char t[sizeof token];
    long got = dm_json_str(&r.j, dm_json_get(&r.j, 0, "token"), t, sizeof t);
    dm_etcd_reply_free(&r);
    if (got <= 0 || (size_t)got >= sizeof t) {
        *how = DM_FAIL_REFUSED;
        snprintf(why, why_len, "etcd answered the authentication of user %s without a token "
                 "(is authentication enabled: etcdctl auth enable?)", cfg->etcd.username);
        return -1;
    }
    dm_lock(&tok_mu);
    snprintf(token, sizeof token, "%s", t);
    *gen = ++token_gen;
    snprintf(buf, len, "%s", token);
    dm_unlock(&tok_mu);
    return 1;
}

/* The token of generation gen is no longer valid: the next call makes one. */
static void auth_drop(unsigned long gen)
{
    dm_lock(&tok_mu);
    if (gen == token_gen)
        token[0] = '\0';
    dm_unlock(&tok_mu);
}

int dm_etcd_auth(char *buf, size_t len)
{
    enum dm_fail how;
    char why[300];
    unsigned long gen;
    buf[0] = '\0';
    return auth_token(buf, len, &gen, dm_now_ms() + cfg->redis.command_timeout_ms, &how, why,
                      sizeof why) < 0 ? -1 : 0;
}

static __thread int last_lease_unknown;    /* this thread's last refusal: "lease not found" */

int dm_etcd_last_lease_unknown(void)
{
    return last_lease_unknown;
}

static int token_refused(const struct dm_etcd_reply *r)
{
    char msg[200];
    if (dm_json_str(&r->j, dm_json_get(&r->j, 0, "message"), msg, sizeof msg) < 0)
        return 0;
    return strstr(msg, "invalid auth token") != NULL || strstr(msg, "user name is empty") != NULL;
}

int dm_etcd_call(const char *path, const char *body, long long deadline_ms,
                 struct dm_etcd_reply *r, enum dm_fail *how, char *why, size_t why_len)
{
    for (int tries = 0;; tries++) {
        char tok[sizeof token];
        unsigned long gen = 0;
        int a = auth_token(tok, sizeof tok, &gen, deadline_ms, how, why, why_len);
        if (a < 0)
            return *how == DM_FAIL_REFUSED ? EACCES : ETIMEDOUT;
        int e = member_call(path, body, deadline_ms, r, how, why, why_len, a ? tok : NULL);
        if (e != EACCES || !a || tries > 0)
            return e;
        auth_drop(gen);         /* its token expired: authenticate once more */
    }
}

static int member_call(const char *path, const char *body, long long deadline_ms,
                     struct dm_etcd_reply *r, enum dm_fail *how, char *why, size_t why_len,
                     const char *auth)
{
    size_t n = cfg->etcd.nendpoints;
    int reached = 0, tls_refused = 0, said = 0, e = ETIMEDOUT;
    char tls_why[sizeof ((struct dm_http *)0)->err] = "";  /* a TLS refusal's words outlive a later timeout */
    memset(r, 0, sizeof *r);
    snprintf(why, why_len, "no etcd member answered in time");
    for (size_t tries = 0; ; tries++) {
        size_t m = member_now();
        const struct dm_endpoint *ep = &cfg->etcd.endpoints[m];
        struct dm_http *h = conn_take(m);
        if (!h) {
            *how = DM_FAIL_OTHER;
            snprintf(why, why_len, "out of memory");
            return ENOMEM;
        }
        long left = (long)(deadline_ms - dm_now_ms());
        long step = left < cfg->redis.command_timeout_ms ? left : cfg->redis.command_timeout_ms;
        size_t untried = n - tries % n;
        if (untried > 1 && step > left / (long)untried && left / (long)untried >= 100)
            step = left / (long)untried;    /* room for the others in this call */
        if (step <= 0)
            step = 1;
        int pooled = h->fd >= 0;
        int sent_before = pooled || dm_http_connect(h, step < cfg->redis.connect_timeout_ms
                                                       ? step : cfg->redis.connect_timeout_ms) == 0;
        size_t outlen = 0;
        e = sent_before ? dm_http_post(h, path, body, strlen(body), auth, dm_now_ms() + step,
                                       &r->status, &r->text, &outlen)
                        : h->tls_failed ? EPROTO : (h->err[0] ? ECONNREFUSED : ETIMEDOUT);
        if (e == 0) {
            int before = reached;
            reached = 1;
            if (dm_json_parse(&r->j, r->text, outlen) < 0) {
                snprintf(why, why_len, "etcd %s:%d answered what is not JSON (HTTP %d)",
                         ep->host, ep->port, r->status);
                dm_etcd_reply_free(r);
                conn_give(h);
                e = EPROTO;
            } else if (r->status == 200) {
                r->resent = before;
                __atomic_store_n(&bad_until[m], 0, __ATOMIC_RELAXED);
                conn_give(h);
                if (m != 0 || strncmp(where, ep->host, strlen(ep->host)) != 0)
                    snprintf(where, sizeof where, "%s:%d", ep->host, ep->port);
                return 0;
            } else {
                char msg[200];
                if (dm_json_str(&r->j, dm_json_get(&r->j, 0, "message"), msg, sizeof msg) < 0)
                    snprintf(msg, sizeof msg, "HTTP %d", r->status);
                snprintf(why, why_len, "etcd %s:%d: %s", ep->host, ep->port, msg);
                int trouble = member_trouble(r), stale = auth && token_refused(r);
                last_lease_unknown = strstr(why, "lease not found") != NULL;
                conn_give(h);
                if (!trouble) {
                    *how = DM_FAIL_REFUSED;
                    dm_etcd_reply_free(r);
                    return stale ? EACCES : EPROTO;
                }
                dm_etcd_reply_free(r);
                e = EAGAIN;
            }
        } else if (h->tls_failed && !pooled) {
            /* A certificate, or the server's alert on the session this call
             * made (TLS 1.3 refuses a client certificate after the
             * client's handshake, at the first read): etcd ran nothing.
             * The words name the member. */
            snprintf(why, why_len, "%s", h->err);
            snprintf(tls_why, sizeof tls_why, "%s", h->err);
            tls_refused = 1;
            e = EPROTO;
            dm_http_close(h);
            free(h);
        } else {
            /* A step cut short by the call's deadline says less than an
             * earlier member's own failure: that one's words stay. */
            if (e != ETIMEDOUT || !said)
                snprintf(why, why_len, "etcd %s:%d: %s", ep->host, ep->port,
                         h->err[0] ? h->err : strerror(e));
            said |= e != ETIMEDOUT;
            if (sent_before)
                reached = 1;    /* connected: the request may have gone out and run */
            dm_http_close(h);
            free(h);
        }
        /* This member cannot answer now: the next one. */
        dm_etcd_member_next();
        if (dm_now_ms() >= deadline_ms)
            break;
        if ((tries + 1) % n == 0) {
            long pause = (long)(deadline_ms - dm_now_ms());
            dm_sleep_ms(pause < 50 ? pause : 50);   /* every member failed: a breath */
        }
    }
    /* A member that refused TLS was there: never "no connection" (with
     * on_store_down = "local" a process must not lock alone for it). */
    *how = reached ? DM_FAIL_NOREPLY : tls_refused ? DM_FAIL_OTHER : DM_FAIL_NOCONN;
    if (tls_refused && !reached) {
        snprintf(why, why_len, "%s", tls_why);
        e = EPROTO;
    }
    return e;
}

/* ---- the process lease ---- */

static struct {
    long long id;           /* 0: none */
    long long sent_ms;      /* the last renewal (or the grant) that etcd confirmed was sent then */
    int users;              /* keys under it */
    long ttl_s;
} lease;

static void thread_wake(void);
static int thread_start_locked(void);
static int closing;     /* the lease was revoked at exit: no new one (emu) */

static long ttl_s(void)
{
    /* etcd's TTLs are whole seconds: never shorter than lease_ms */
    return (cfg->lease_ms + 999) / 1000;
}

long long dm_etcd_lease_get(long long *sent_ms, int *err, long long deadline_ms)
{
    dm_lock(&emu);
    long long id = lease.id;
    *sent_ms = lease.sent_ms;
    int ending = closing;
    dm_unlock(&emu);
    if (id && dm_now_ms() - *sent_ms < (long long)lease.ttl_s * 1000 - cfg->lease_margin_ms)
        return id;
    if (id) {
        /* not renewed for a TTL: it may have lapsed; ask before using it */
        long long sent;
        int lr = dm_etcd_lease_renew(id, &sent);
        if (lr > 0) {
            *sent_ms = sent;
            return id;
        }
        if (lr < 0) {
            *err = ETIMEDOUT;
            return 0;
        }
        /* gone (lease_renew forgot it): a new one */
    }
    if (ending) {
        *err = ECANCELED;   /* the process is ending: nothing would keep a new lease */
        return 0;
    }
    char body[64];
    snprintf(body, sizeof body, "{\"TTL\":%ld}", ttl_s());
    struct dm_etcd_reply r;
    enum dm_fail how;
    char why[400];
    long long sent = dm_now_ms();
    int e = dm_etcd_call("/v3/lease/grant", body, deadline_ms, &r, &how, why, sizeof why);
    if (e) {
        static long logged;
        if (how == DM_FAIL_OTHER)   /* a TLS refusal: the fix is the user's, say it */
            dm_log_every(&logged, 10000, DM_LOG_ERROR, "lease grant: %s", why);
        else
            dm_debug("lease grant: %s", why);
        *err = how == DM_FAIL_NOCONN ? ECONNREFUSED : e;
        return 0;
    }
    id = dm_json_int(&r.j, dm_json_get(&r.j, 0, "ID"), 0);
    long ttl = (long)dm_json_int(&r.j, dm_json_get(&r.j, 0, "TTL"), 0);
    dm_etcd_reply_free(&r);
    if (!id || ttl <= 0) {
        *err = EPROTO;
        return 0;
    }
    dm_lock(&emu);
    if (lease.id) {             /* another thread's grant came first: keep one lease */
        long long keep = lease.id;
        *sent_ms = lease.sent_ms;
        dm_unlock(&emu);
        char rb[64];
        snprintf(rb, sizeof rb, "{\"ID\":\"%lld\"}", id);
        if (dm_etcd_call("/v3/lease/revoke", rb, dm_now_ms() + cfg->redis.command_timeout_ms,
                         &r, &how, why, sizeof why) == 0)
            dm_etcd_reply_free(&r);
        return keep;
    }
    lease.id = id;
    lease.sent_ms = sent;
    lease.ttl_s = ttl;
    *sent_ms = sent;
    dm_unlock(&emu);
    dm_debug("etcd lease %llx granted, TTL %ld s", (unsigned long long)id, ttl);
    return id;
}

long long dm_etcd_lease_current(void)
{
    dm_lock(&emu);
    long long id = lease.id;
    dm_unlock(&emu);
    return id;
}

long long dm_etcd_lease_sent(long long id)
{
    dm_lock(&emu);
    long long sent = lease.id == id ? lease.sent_ms : 0;
    dm_unlock(&emu);
    return sent;
}

void dm_etcd_lease_forget(long long id)
{
    dm_lock(&emu);
    if (lease.id == id) {
        lease.id = 0;
        lease.users = 0;
    }
    dm_unlock(&emu);
}

void dm_etcd_lease_revoke(void)
{
    dm_lock(&emu);
    closing = 1;
    long long id = lease.id;
    lease.id = 0;
    lease.users = 0;
    dm_unlock(&emu);
    if (!id)
        return;
    char body[64], why[300];
    snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", id);
    struct dm_etcd_reply r;
    enum dm_fail how;
    if (dm_etcd_call("/v3/lease/revoke", body, dm_now_ms() + cfg->redis.command_timeout_ms, &r,
                     &how, why, sizeof why) == 0)
        dm_etcd_reply_free(&r);
    else
        dm_debug("lease revoke at exit: %s (it expires by itself)", why);
}

int dm_etcd_lease_live(long long id)
{
    dm_lock(&emu);
    int live = id != 0 && lease.id == id;
    dm_unlock(&emu);
    return live;
}

void dm_etcd_lease_use(void)
{
    dm_lock(&emu);
    lease.users++;
    int rc = thread_start_locked();
    dm_unlock(&emu);
    if (rc) {
        static long said;
        dm_log_every(&said, 60000, DM_LOG_WARN, "etcd: the store's thread cannot start "
                     "(%s): only the watchdog's rounds keep the lease", strerror(rc));
    }
    thread_wake();
}

void dm_etcd_lease_unuse(void)
{
    dm_lock(&emu);
    if (lease.users > 0)
        lease.users--;
    dm_unlock(&emu);
}

int dm_etcd_lease_renew(long long id, long long *sent_ms)
{
    char body[64];
    snprintf(body, sizeof body, "{\"ID\":\"%lld\"}", id);
    struct dm_etcd_reply r;
    enum dm_fail how;
    char why[400];
    long long sent = dm_now_ms();
    *sent_ms = sent;
    int e = dm_etcd_call("/v3/lease/keepalive", body, sent + cfg->redis.command_timeout_ms, &r,
                         &how, why, sizeof why);
    if (e) {
        dm_debug("lease keep-alive: %s", why);
        return -1;
    }
    /* One {"result":{...}} line per request; a gone lease has no TTL
     * (zero values are left out), at HTTP 200. */
    int res = dm_json_get(&r.j, 0, "result");
    long ttl = (long)dm_json_int(&r.j, dm_json_get(&r.j, res, "TTL"), 0);
    int err = dm_json_get(&r.j, 0, "error") >= 0;
    dm_etcd_reply_free(&r);
    if (err || res < 0)
        return -1;
    dm_lock(&emu);
    if (ttl <= 0) {
        /* Said once, by the call that forgets it; and a loss only when a
         * key was under it: an idle process's lease (nothing held or
         * queued) that lapsed in a pause costs nothing, the next lock
         * grants a new one. */
        int mine = lease.id == id, users = lease.users;
        if (mine) {
            lease.id = 0;
            lease.users = 0;
        }
        dm_unlock(&emu);
        if (mine && users > 0)
            dm_warn("etcd lease %llx is gone (expired or revoked): every hold under it is lost",
                    (unsigned long long)id);
        else if (mine)
            dm_info("etcd lease %llx lapsed while nothing was held or queued under it (the "
                    "process was paused, or etcd out of reach, past its TTL): the next lock "
                    "takes a new one", (unsigned long long)id);
        return 0;
    }
    if (lease.id == id && sent > lease.sent_ms)
        lease.sent_ms = sent;
    dm_unlock(&emu);
    return 1;
}

/* ---- the store's thread ---- */

static int wake_fd = -1;
static int thread_on;               /* started (emu) */
static pthread_t ev_thread;
static struct dm_timer *timers;     /* emu */
static void (*image_fn)(void);
static unsigned long image_asked, image_done;

static void thread_wake(void)
{
    int fd = __atomic_load_n(&wake_fd, __ATOMIC_ACQUIRE);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(fd, &one, sizeof one);
        (void)w;
    }
}

static void timers_run(void)
{
    dm_lock(&emu);
    for (;;) {
        long long now = dm_now_ns();
        struct dm_timer **pp = &timers;
        while (*pp && (*pp)->at_ns > now)
            pp = &(*pp)->next;
        struct dm_timer *t = *pp;
        if (!t)
            break;
        *pp = t->next;
        t->armed = 2;           /* running: cancel waits */
        dm_unlock(&emu);
        t->fn(t->arg);
        dm_lock(&emu);
        if (t->armed == 2)
            t->armed = 0;
    }
    dm_unlock(&emu);
}

static void *ev_main(void *arg)
{
    (void)arg;
    for (;;) {
        if (__atomic_load_n(&image_asked, __ATOMIC_ACQUIRE) != image_done) {
            unsigned long asked = __atomic_load_n(&image_asked, __ATOMIC_ACQUIRE);
            if (image_fn)
                image_fn();
            __atomic_store_n(&image_done, asked, __ATOMIC_RELEASE);
        }
        timers_run();
        dm_lock(&emu);
        long long now = dm_now_ms(), next = now + 1000;
        for (struct dm_timer *t = timers; t; t = t->next)
            if (t->at_ns / 1000000 < next)
                next = t->at_ns / 1000000;
        long long id = lease.id;     /* kept while it exists: a lapsed lease would fail the next lock */
        long long due = lease.sent_ms + cfg->renew_ms;
        dm_unlock(&emu);
        if (id && due <= now) {
            long long sent;
            if (dm_etcd_lease_renew(id, &sent) >= 0)
                continue;
            next = dm_now_ms() + 100;   /* no verdict: again shortly */
        } else if (id && due < next)
            next = due;
        long wait = next > now ? (long)(next - now) : 0;
        struct pollfd p = { wake_fd, POLLIN, 0 };
        if (poll(&p, 1, (int)wait) > 0) {
            uint64_t v;
            ssize_t r = read(wake_fd, &v, sizeof v);
            (void)r;
        }
    }
    return NULL;
}

/* emu held. */
static int thread_start_locked(void)
{
    if (thread_on)
        return 0;
    if (wake_fd < 0) {
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (fd < 0)
            return errno;
        __atomic_store_n(&wake_fd, fd, __ATOMIC_RELEASE);
    }
    int rc = dm_thread_start(&ev_thread, ev_main, NULL);
    if (rc == 0)
        thread_on = 1;
    return rc;
}

int dm_etcd_timer_arm(struct dm_timer *t, long long at_ns, void (*fn)(void *arg), void *arg)
{
    dm_lock(&emu);
    int rc = thread_start_locked();
    if (rc == 0) {
        if (t->armed == 1) {
            struct dm_timer **pp = &timers;
            while (*pp && *pp != t)
                pp = &(*pp)->next;
            if (*pp)
                *pp = t->next;
        }
        t->at_ns = at_ns;
        t->fn = fn;
        t->arg = arg;
        t->armed = 1;
        t->next = timers;
        timers = t;
    }
    dm_unlock(&emu);
    if (rc == 0)
        thread_wake();
    return rc;
}

void dm_etcd_timer_cancel(struct dm_timer *t)
{
    dm_lock(&emu);
    if (t->armed == 1) {
        struct dm_timer **pp = &timers;
        while (*pp && *pp != t)
            pp = &(*pp)->next;
        if (*pp)
            *pp = t->next;
        t->armed = 0;
    }
    while (t->armed == 2 && !pthread_equal(pthread_self(), ev_thread)) {
        dm_unlock(&emu);
        dm_sleep_ms(1);
        dm_lock(&emu);
    }
    dm_unlock(&emu);
}

void dm_etcd_on_image_end(void (*fn)(void))
{
    image_fn = fn;
}

void dm_etcd_image_ends(long max_ms)
{
    if (!image_fn || !__atomic_load_n(&thread_on, __ATOMIC_ACQUIRE) ||
        pthread_equal(pthread_self(), ev_thread))
        return;
    unsigned long want = __atomic_add_fetch(&image_asked, 1, __ATOMIC_ACQ_REL);
    thread_wake();
    for (long waited = 0; waited < max_ms; waited++) {
        if ((long)(__atomic_load_n(&image_done, __ATOMIC_ACQUIRE) - want) >= 0)
            return;
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
}

void dm_etcd_atfork(enum dm_fork_phase phase)
{
    if (phase == DM_FORK_PREPARE) {
        dm_lock(&emu);
        return;
    }
    if (phase == DM_FORK_PARENT) {
        dm_unlock(&emu);
        return;
    }
    /* The child: no thread, no connection of its own, no lease (its
     * parent's keys are the parent's), no timer. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    emu = fresh;
    for (size_t i = 0; i < npool; i++) {
        dm_http_close(pool[i]);
        free(pool[i]);
    }
    npool = 0;
    memset(&lease, 0, sizeof lease);
    closing = 0;
    pthread_mutex_t fresh_tok = PTHREAD_MUTEX_INITIALIZER;
    tok_mu = fresh_tok;         /* the token stays good: the same user */
    thread_on = 0;
    timers = NULL;
    image_asked = image_done = 0;
    if (wake_fd >= 0)
        close(wake_fd);
    wake_fd = -1;
}
