/* sentinel: the primary's address, from Redis Sentinel. The known address
 * and its generation sit under one leaf mutex (smu), never held across
 * I/O. Asking the sentinels is serialised by a second mutex (ask_mu) that
 * guards no data, only the round of questions: threads that find the
 * address stale wait for one round instead of each asking every sentinel.
 *
 * The +switch-master thread keeps one connection to a sentinel (the next
 * one in turn when it fails), subscribed to +switch-master; it reads it
 * with poll(2) and hiredis's reader, as notify does, and PINGs an idle
 * link. A notice for our master moves the address at once, before any
 * command has to fail on the old primary. Before each subscription it asks
 * that sentinel for the primary, so a switch it missed while disconnected
 * is caught too.
 *
 * Connections to sentinels are made here (sentinel_connect) and nowhere
 * else: the sentinels' own credentials, timeouts from the redis group.
 * Their bytes move through net, as a data node's do: send(MSG_NOSIGNAL)
 * on a plain connection, and with redis.tls (or a rediss-sentinel:// URL)
 * TLS with the same settings (verify, ca, cert/key, server_name): a
 * sentinel that fails the certificate check is a TLS error naming its
 * address, never asked in plain text instead. */
#include "sentinel.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "net.h"
#include "real.h"
#include "util.h"

#define DM_SENTINEL_PING_MS       2000  /* idle time before a PING checks the link */
#define DM_SENTINEL_BACKOFF_MIN   50
#define DM_SENTINEL_BACKOFF_MAX   2000
#define DM_SENTINEL_LOG_EVERY_MS  5000
#define DM_SENTINEL_CHANNEL       "+switch-master"

static const struct dm_redis_config *scfg;

static pthread_mutex_t smu = PTHREAD_MUTEX_INITIALIZER;       /* leaf: the state below */
static pthread_mutex_t ask_mu = PTHREAD_MUTEX_INITIALIZER;    /* one round of questions */
static struct dm_primary known;         /* the address; gen counts its changes */
static int known_ok;                    /* 0: unknown or stale, ask again */
static size_t next_sentinel;            /* who to ask first: the last that answered,
                                           or the one after it once its answer failed */
static unsigned long gen_now;           /* known.gen, readable without smu */
static struct dm_hooks switch_hooks;   /* notify's thread, rlock's release resender */
static int watch_running;
static redisContext *watch_ctx;         /* the thread's, for the fork child */

/* A connection to one sentinel: hiredis's context, its TLS session (NULL:
 * plain) and the address text the session's messages point at (so it
 * lives as long as the session). */
struct sconn {
    redisContext *c;
    struct dm_net *t;
    char addr[DM_SENTINEL_HOST_MAX + 32];
};

static void sconn_close(struct sconn *s)
{
    dm_net_close(s->c, s->t);
    s->c = NULL;
    s->t = NULL;
}

/* After a command on s got no reply: was it TLS that failed (an alert,
 * or a sentinel that ended the session right after the handshake: a
 * refused client certificate under TLS 1.3)? Then `why` says so and
 * *answered gets DM_SENTINEL_TLS_FAILED: not "no sentinel reachable". */
static void sconn_no_reply(struct sconn *s, int first, char *why, size_t len, int *answered)
{
    if (s->t && dm_net_tls_failed(s->t)) {
        snprintf(why, len, "%s", dm_net_tls_why(s->t));
        *answered |= DM_SENTINEL_TLS_FAILED;
    } else if (s->t && first && (s->c->err == REDIS_ERR_EOF || strstr(s->c->errstr, "reset"))) {
        const struct dm_tls_config *tc = &scfg->tls;
        snprintf(why, len, "TLS session with %.80s ended by it right after the handshake: did "
                 "it refuse the client certificate (redis.tls.cert = %s%.160s%s)? %.60s", s->addr,
                 tc->cert ? "\"" : "", tc->cert ? tc->cert : "none given", tc->cert ? "\"" : "",
                 s->c->errstr);
        *answered |= DM_SENTINEL_TLS_FAILED;
    } else {
        snprintf(why, len, "%s", s->c->errstr[0] ? s->c->errstr : "no reply");
    }
}

void dm_sentinel_setup(const struct dm_redis_config *cfg)
{
    scfg = cfg;
}

int dm_sentinel_enabled(void)
{
    return scfg && scfg->nsentinels > 0;
}

unsigned long dm_sentinel_gen(void)
{
    return __atomic_load_n(&gen_now, __ATOMIC_ACQUIRE);
}

int dm_sentinel_on_switch(void (*fn)(void))
{
    return dm_hooks_add(&switch_hooks, fn);
}

/* A connection to sentinel i, authenticated when the config says so, over
 * TLS when the config has it. 0, or -1 with `why` filled (*answered gets
 * DM_SENTINEL_ANSWERED when the sentinel answered an AUTH error,
 * DM_SENTINEL_TLS_FAILED when TLS failed) and nothing left open. */
static int sentinel_connect(size_t i, struct sconn *s, char *why, size_t len, int *answered)
{
    const struct dm_endpoint *e = &scfg->sentinels[i];
    long long started = dm_now_ms();
    s->t = NULL;
    snprintf(s->addr, sizeof s->addr, "sentinel %s:%d", e->host, e->port);
    s->c = dm_net_connect(e->host, e->port, NULL, started + scfg->connect_timeout_ms,
                          scfg->command_timeout_ms, 1, why, len);
    if (!s->c)
        return -1;
    if (scfg->tls.enabled) {
        s->t = dm_net_tls_start(s->c, e->host, s->addr, started + scfg->connect_timeout_ms,
                                scfg->command_timeout_ms, why, len);
        if (!s->t) {
            *answered |= DM_SENTINEL_TLS_FAILED;
            sconn_close(s);
            return -1;
        }
    }
    if (scfg->sentinel_password) {
        const char *argv[3] = { "AUTH", scfg->sentinel_username ? scfg->sentinel_username
                                                                : scfg->sentinel_password,
                                scfg->sentinel_password };
        redisReply *r = dm_net_command_argv(s->c, s->t, scfg->sentinel_username ? 3 : 2, argv,
                                            NULL);
        if (!r || r->type == REDIS_REPLY_ERROR) {
            if (r) {
                snprintf(why, len, "AUTH: %s", r->str);
                *answered |= DM_SENTINEL_ANSWERED;
                freeReplyObject(r);
            } else {
                char w[DM_ERR_MAX];
                sconn_no_reply(s, 1, w, sizeof w, answered);
                snprintf(why, len, "AUTH: %.*s", (int)(len > 7 ? len - 7 : 0), w);
            }
            sconn_close(s);
            return -1;
        }
        freeReplyObject(r);
    }
    return 0;
}

/* SENTINEL get-master-addr-by-name on s: 0 and *out filled, or -1 with
 * `why` (*answered gets DM_SENTINEL_ANSWERED when the sentinel answered,
 * e.g. with nil). `first`: the first command after the handshake. */
static int ask_one(struct sconn *s, int first, struct dm_primary *out, char *why, size_t len,
                   int *answered)
{
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", scfg->master };
    redisReply *r = dm_net_command_argv(s->c, s->t, 3, argv, NULL);
    if (!r) {
        sconn_no_reply(s, first, why, len, answered);
        return -1;
    }
    *answered |= DM_SENTINEL_ANSWERED;
    int rc = -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING &&
        r->element[0]->len < sizeof out->host) {
        memcpy(out->host, r->element[0]->str, r->element[0]->len + 1);
        out->port = atoi(r->element[1]->str);
        rc = out->port > 0 ? 0 : -1;
        if (rc != 0)
            snprintf(why, len, "named a primary with port \"%s\"", r->element[1]->str);
    } else if (r->type == REDIS_REPLY_NIL) {
        snprintf(why, len, "does not know master \"%s\" (not in its sentinel monitor lines)",
                 scfg->master);
    } else {
        snprintf(why, len, "%s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    freeReplyObject(r);
    return rc;
}

/* smu held: the primary is now `p` (as a sentinel said). A new address is
 * a new generation. Returns 1 if it changed. */
static int set_known_locked(const struct dm_primary *p)
{
    int changed = strcmp(known.host, p->host) != 0 || known.port != p->port;
    if (changed) {
        snprintf(known.host, sizeof known.host, "%s", p->host);
        known.port = p->port;
        known.gen++;
        __atomic_store_n(&gen_now, known.gen, __ATOMIC_RELEASE);
    }
    known_ok = 1;
    return changed;
}

/* The address changed from outside a connect (a +switch-master notice, or
 * the thread's own question): log it and wake the hook's owner. */
static void switched(const struct dm_primary *p, const char *how)
{
    dm_lock(&smu);
    char old[DM_SENTINEL_HOST_MAX + 16];
    snprintf(old, sizeof old, "%s:%d", known.host, known.port);
    int changed = set_known_locked(p);
    dm_unlock(&smu);
    if (!changed)
        return;
    if (strcmp(old, ":0") == 0)     /* the first answer: nothing moved */
        dm_info("redis: the primary of %s is %s:%d (%s)", scfg->master, p->host, p->port, how);
    else
        dm_warn("redis: the primary of %s moved from %s to %s:%d (%s); connections follow it",
                scfg->master, old, p->host, p->port, how);
    dm_hooks_call(&switch_hooks);
}

/* ---- the +switch-master thread ---------------------------------------- */

/* "<name> <old ip> <old port> <new ip> <new port>" for our master? */
static int parse_switch(const char *msg, struct dm_primary *p)
{
    char name[DM_SENTINEL_HOST_MAX], oh[DM_SENTINEL_HOST_MAX], nh[DM_SENTINEL_HOST_MAX];
    int op, np;
    if (sscanf(msg, "%255s %255s %d %255s %d", name, oh, &op, nh, &np) != 5)
        return 0;
    if (strcmp(name, scfg->master) != 0 || np <= 0)
        return 0;
    snprintf(p->host, sizeof p->host, "%s", nh);
    p->port = np;
    return 1;
}

static int flush_out(struct sconn *s)
{
    int done = 0;
    while (!done)
        if (dm_net_write(s->c, s->t, &done) != REDIS_OK)
            return -1;
    return 0;
}

static void *watch_main(void *arg)
{
    (void)arg;
    struct dm_backoff backoff = DM_BACKOFF_INIT(DM_SENTINEL_BACKOFF_MIN, DM_SENTINEL_BACKOFF_MAX);
    static long log_last;
    size_t i = 0;
    for (;; i = (i + 1) % scfg->nsentinels) {
        char why[DM_ERR_MAX] = "";
        int answered = 0;
        struct sconn sc;
        int up = sentinel_connect(i, &sc, why, sizeof why, &answered) == 0;
        struct dm_primary p;
        if (up && ask_one(&sc, !scfg->sentinel_password, &p, why, sizeof why, &answered) == 0)
            switched(&p, "as a sentinel answered");
        redisContext *c = up ? sc.c : NULL;
        if (c && !c->err && redisAppendCommand(c, "SUBSCRIBE %s", DM_SENTINEL_CHANNEL) == REDIS_OK &&
            flush_out(&sc) == 0) {
            __atomic_store_n(&watch_ctx, c, __ATOMIC_RELEASE);
            long long last_rx = dm_now_ms();
            int ping_out = 0, subscribed = 0;
            for (;;) {
                /* Bytes a TLS session already holds are invisible to poll(2). */
                int held = dm_net_buffered(sc.t);
                struct pollfd pf = { c->fd, POLLIN, 0 };
                int n = held ? 1 : poll(&pf, 1, DM_SENTINEL_PING_MS / 2);
                if (n < 0 && errno != EINTR)
                    break;
                if (n > 0) {
                    if (dm_net_read(c, sc.t) != REDIS_OK)
                        break;
                    last_rx = dm_now_ms();
                    ping_out = 0;
                    redisReply *r;
                    while (redisGetReplyFromReader(c, (void **)&r) == REDIS_OK && r) {
                        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                            r->element[0]->type == REDIS_REPLY_STRING &&
                            r->element[2]->type == REDIS_REPLY_STRING) {
                            if (strcmp(r->element[0]->str, "message") == 0 &&
                                parse_switch(r->element[2]->str, &p))
                                switched(&p, "+switch-master");
                            else if (strcmp(r->element[0]->str, "subscribe") == 0 && !subscribed) {
                                subscribed = 1;
                                dm_backoff_reset(&backoff);
                            }
                        }
                        freeReplyObject(r);
                    }
                    if (c->err)
                        break;
                }
                long long idle = dm_now_ms() - last_rx;
                if (idle >= DM_SENTINEL_PING_MS && !ping_out) {
                    if (redisAppendCommand(c, "PING") != REDIS_OK || flush_out(&sc) != 0)
                        break;
                    ping_out = 1;
                }
                if (ping_out && idle >= DM_SENTINEL_PING_MS + 2 * scfg->command_timeout_ms) {
                    snprintf(why, sizeof why, "no answer to PING");
                    break;
                }
            }
            if (sc.t && dm_net_tls_failed(sc.t))
                snprintf(why, sizeof why, "%s", dm_net_tls_why(sc.t));
            else if (c->err)
                snprintf(why, sizeof why, "%s", c->errstr);
        }
        const struct dm_endpoint *e = &scfg->sentinels[i];
        dm_log_every(&log_last, DM_SENTINEL_LOG_EVERY_MS, DM_LOG_WARN,
                     "redis: +switch-master notices from sentinel %s:%d lost (%s); trying the "
                     "next sentinel (a failover is still found by the next error)",
                     e->host, e->port, c && !why[0] ? "closed" : why);
        __atomic_store_n(&watch_ctx, NULL, __ATOMIC_RELEASE);
        if (up)
            sconn_close(&sc);
        dm_sleep_ms(dm_backoff_next(&backoff));
    }
    return NULL;
}

/* Starts the thread once (smu held). */
static void start_watch_locked(void)
{
    if (watch_running)
        return;
    int rc = dm_thread_start(NULL, watch_main, NULL);
    if (rc == 0)
        watch_running = 1;
    else
        dm_warn("redis: cannot start the thread that hears +switch-master from the sentinels "
                "(%s); a failover is found by the first error on the old primary instead",
                strerror(rc));
}

/* ---- discovery ------------------------------------------------------- */

int dm_sentinel_primary(struct dm_primary *out, char *err, size_t errlen, int *answered)
{
    *answered = 0;
    dm_lock(&smu);
    start_watch_locked();
    if (known_ok) {
        *out = known;
        dm_unlock(&smu);
        return 0;
    }
    dm_unlock(&smu);

    dm_lock(&ask_mu);
    dm_lock(&smu);
    int ok = known_ok;      /* another thread's round may have answered meanwhile */
    if (ok)
        *out = known;
    size_t first = next_sentinel;
    dm_unlock(&smu);
    if (ok) {
        dm_unlock(&ask_mu);
        return 0;
    }
    size_t o = (size_t)snprintf(err, errlen, "no sentinel named the primary of \"%s\":",
                                scfg->master);
    for (size_t k = 0; k < scfg->nsentinels; k++) {
        size_t i = (first + k) % scfg->nsentinels;
        const struct dm_endpoint *e = &scfg->sentinels[i];
        char why[DM_ERR_MAX];
        struct dm_primary p;
        int said = 0;
        struct sconn sc;
        int rc = sentinel_connect(i, &sc, why, sizeof why, &said);
        if (rc == 0) {
            rc = ask_one(&sc, !scfg->sentinel_password, &p, why, sizeof why, &said);
            sconn_close(&sc);
        }
        *answered |= said;
        if (rc == 0) {
            dm_lock(&smu);
            int first = known.port == 0;
            int moved = set_known_locked(&p) && !first;
            next_sentinel = i;
            *out = known;
            dm_unlock(&smu);
            dm_unlock(&ask_mu);
            if (moved)
                dm_hooks_call(&switch_hooks);   /* found here before the +switch-master notice came */
            return 0;
        }
        if (o < errlen)
            o += (size_t)snprintf(err + o, errlen - o, "%s sentinel %s:%d: %s", k ? ";" : "",
                                  e->host, e->port, why);
    }
    dm_unlock(&ask_mu);
    return -1;
}

void dm_sentinel_stale(unsigned long gen)
{
    if (!dm_sentinel_enabled())
        return;
    dm_lock(&smu);
    if (gen == known.gen && known_ok) {
        known_ok = 0;
        /* The next round starts at the next sentinel: the one that named
         * this node may have a stale view (it still names a demoted
         * primary, or a replica) and would name it again, forever. */
        next_sentinel = (next_sentinel + 1) % scfg->nsentinels;
    }
    dm_unlock(&smu);
}

void dm_sentinel_describe(char *buf, size_t len)
{
    dm_lock(&smu);
    if (known.port > 0) {
        snprintf(buf, len, "%s:%d (primary of %s)", known.host, known.port, scfg->master);
        dm_unlock(&smu);
        return;
    }
    dm_unlock(&smu);
    size_t o = (size_t)snprintf(buf, len, "primary of %s (sentinels", scfg->master);
    for (size_t i = 0; i < scfg->nsentinels && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s:%d", i ? "," : " ",
                              scfg->sentinels[i].host, scfg->sentinels[i].port);
    if (o < len)
        snprintf(buf + o, len - o, ")");
}

/* Fork: smu is a leaf, held across fork() by the prepare handler. ask_mu
 * guards no data (only a round of questions in flight, whose thread is not
 * in the child), so the child makes it anew without the parent holding it:
 * prepare must not wait for a round of network questions. */
void dm_sentinel_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&smu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    /* A parent thread may have been asking the sentinels. */
    dm_fork_mutex(&ask_mu, phase);
    watch_running = 0;
    if (watch_ctx) {
        close(watch_ctx->fd);   /* the parent's socket; its memory is left alone */
        watch_ctx = NULL;
    }
}
