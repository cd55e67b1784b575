/* redis: the pool of command connections and the script runner. The pool is
 * a stack of idle connections under one mutex: a thread takes one for the
 * length of a command, so a process makes as many connections as it has
 * threads talking to Redis at the same moment, and no more. */
#include "redis.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lua_scripts.h"
#include "real.h"
#include "sentinel.h"
#include "slots.h"
#include "util.h"

#define DM_POOL_IDLE_MAX 64     /* idle connections kept; the rest are closed */

_Static_assert(DM_REDIS_NODES_MAX == DM_SLOTS_NODES_MAX, "one number of nodes");

static const struct dm_redis_config *rcfg;
static char addr_text[300];

/* One pool per node: index 0 is the only one without a cluster; with one,
 * slots.c's node index (which never changes for an address). */
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pool {
    struct dm_conn *idle;
    int nidle;
} pools[DM_SLOTS_NODES_MAX];

static const char *const script_body[DM_SCRIPT_COUNT] = {
    dm_lua_acquire, dm_lua_release, dm_lua_renew, dm_lua_cancel,
    dm_lua_setnx_acquire, dm_lua_setnx_release, dm_lua_setnx_renew,
    dm_lua_redisson_acquire, dm_lua_redisson_release, dm_lua_redisson_renew,
};
static const char *const script_name[DM_SCRIPT_COUNT] = {
    "acquire", "release", "renew", "cancel", "setnx_acquire", "setnx_release", "setnx_renew",
    "redisson_acquire", "redisson_release", "redisson_renew",
};
/* SHA1 hex of each body as the server reported it; empty until loaded. */
static char script_sha[DM_SCRIPT_COUNT][41];

void dm_redis_setup(const struct dm_redis_config *cfg)
{
    rcfg = cfg;
    dm_net_setup(&cfg->tls);
    dm_sentinel_setup(cfg);
    dm_slots_setup(cfg);
    if (cfg->ncluster) {
        int n = snprintf(addr_text, sizeof addr_text, "redis cluster (");
        for (size_t i = 0; i < cfg->ncluster && n < (int)sizeof addr_text; i++)
            n += snprintf(addr_text + n, sizeof addr_text - (size_t)n, "%s%s:%d",
                          i ? "," : "", cfg->cluster[i].host, cfg->cluster[i].port);
        if (n < (int)sizeof addr_text - 1)
            snprintf(addr_text + n, sizeof addr_text - (size_t)n, ")");
    } else if (cfg->unix_path)
        snprintf(addr_text, sizeof addr_text, "%s", cfg->unix_path);
    else
        snprintf(addr_text, sizeof addr_text, "%s:%d", cfg->host, cfg->port);
}

const char *dm_redis_addr(void)
{
    if (dm_sentinel_enabled()) {
        /* The primary moves: each thread gets its own copy of the words. */
        static __thread char primary_text[sizeof addr_text + 64];
        dm_sentinel_describe(primary_text, sizeof primary_text);
        return primary_text;
    }
    return addr_text;
}

/* Sentinel: does this error reply say "not the primary" (a demoted
 * primary, a replica still loading or cut off from its primary)? Nothing
 * ran: the caller re-discovers and retries. Without Sentinel these stay
 * plain error replies, as they always were. */
static int wrong_node_reply(const char *msg)
{
    if (dm_slots_enabled() && (strncmp(msg, "MOVED ", 6) == 0 || strncmp(msg, "ASK ", 4) == 0 ||
                               strncmp(msg, "TRYAGAIN", 8) == 0 ||
                               strncmp(msg, "CLUSTERDOWN", 11) == 0))
        return 1;
    return (dm_sentinel_enabled() || dm_slots_enabled()) &&
           (strncmp(msg, "READONLY", 8) == 0 || strncmp(msg, "LOADING", 7) == 0 ||
            strncmp(msg, "MASTERDOWN", 10) == 0);
}

const char *dm_redis_conn_addr(const struct dm_conn *conn)
{
    if (!dm_slots_enabled())
        return dm_redis_addr();
    static __thread char text[sizeof addr_text + 32];
    char host[DM_SLOTS_HOST_MAX];
    int port;
    if (dm_slots_node_addr(conn->node, host, sizeof host, &port) == 0)
        snprintf(text, sizeof text, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    else
        snprintf(text, sizeof text, "%s", addr_text);
    return text;
}

/* Sentinel: the node must say ROLE master before anything is sent to it;
 * a sentinel's answer can be a moment old. */
static enum dm_redis_err check_role(redisContext *c, struct dm_net *t, char *err, size_t errlen)
{
    const char *argv[1] = { "ROLE" };
    redisReply *r = dm_net_command_argv(c, t, 1, argv, NULL);
    if (!r) {
        snprintf(err, errlen, "ROLE: %s", c->errstr);
        return DM_REDIS_IO;
    }
    enum dm_redis_err rc = DM_REDIS_OK;
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "ROLE: %s", r->str);
        rc = wrong_node_reply(r->str) ? DM_REDIS_WRONG_NODE : DM_REDIS_REPLY_ERROR;
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
               r->element[0]->type != REDIS_REPLY_STRING ||
               strcmp(r->element[0]->str, "master") != 0) {
        snprintf(err, errlen, "the sentinels named it the primary of %s, but its ROLE is %s",
                 rcfg->master, r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
                 r->element[0]->type == REDIS_REPLY_STRING ? r->element[0]->str : "unknown");
        rc = DM_REDIS_WRONG_NODE;
    }
    freeReplyObject(r);
    return rc;
}

/* The server's run_id into conn->run_id (INFO server): acquire.lua tells
 * by it whether a lock's data is continuous on this server run
 * ("Restarts"). A server that refuses INFO (an ACL without +info) or
 * answers without a run_id leaves it empty, which turns that check off:
 * said once per process, with the window it leaves. Only no reply fails
 * the set-up. */
static enum dm_redis_err read_run_id(struct dm_conn *conn, redisContext *c, struct dm_net *t,
                                     char *err, size_t errlen)
{
    static int warned;
    conn->run_id[0] = 0;
    const char *argv[2] = { "INFO", "server" };
    redisReply *r = dm_net_command_argv(c, t, 2, argv, NULL);
    if (!r) {
        snprintf(err, errlen, "INFO server: %s", c->errstr);
        return DM_REDIS_IO;
    }
    const char *p = r->type == REDIS_REPLY_STRING ? strstr(r->str, "run_id:") : NULL;
    if (p) {
        p += 7;
        size_t n = strspn(p, "0123456789abcdef");
        if (n > 0 && n < sizeof conn->run_id) {
            memcpy(conn->run_id, p, n);
            conn->run_id[n] = 0;
        }
    }
    if (!conn->run_id[0] && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        dm_warn("redis at %s: INFO server %s: a restart that loses the lock data is not "
                "detected, so a waiter may enter beside the holder of the lost data until "
                "that holder's next renewal; grant +info (`dmutex acl`)", dm_redis_conn_addr(conn),
                r->type == REDIS_REPLY_ERROR ? r->str : "gave no run_id");
    freeReplyObject(r);
    return DM_REDIS_OK;
}

/* Loads the scripts (one pipelined round trip) the first time any
 * connection of this process is made. */
/* The connection's set-up steps answer with one of these: the server
 * answered with an error, or a request got no reply (sent, perhaps run). */
static enum dm_redis_err load_scripts(redisContext *c, struct dm_net *t, char *err, size_t errlen)
{
    if (__atomic_load_n(&script_sha[DM_SCRIPT_COUNT - 1][0], __ATOMIC_ACQUIRE))
        return DM_REDIS_OK;
    for (int i = 0; i < DM_SCRIPT_COUNT; i++)
        redisAppendCommand(c, "SCRIPT LOAD %s", script_body[i]);
    char sha[DM_SCRIPT_COUNT][41];
    enum dm_redis_err rc = DM_REDIS_OK;
    for (int i = 0; i < DM_SCRIPT_COUNT; i++) {
        redisReply *r = NULL;
        if (dm_net_get_reply(c, t, (void **)&r) != REDIS_OK || !r) {
            snprintf(err, errlen, "loading scripts: %s", c->errstr);
            return DM_REDIS_IO;
        }
        if (r->type == REDIS_REPLY_STRING && r->len == 40) {
            memcpy(sha[i], r->str, 41);
        } else if (rc == DM_REDIS_OK) {
            snprintf(err, errlen, "SCRIPT LOAD %s.lua: %s", script_name[i],
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
            rc = r->type == REDIS_REPLY_ERROR ? DM_REDIS_REPLY_ERROR : DM_REDIS_BAD_REPLY;
        }
        freeReplyObject(r);
    }
    if (rc == DM_REDIS_OK) {
        for (int i = 0; i < DM_SCRIPT_COUNT; i++)
            memcpy(script_sha[i], sha[i], 41);
        __atomic_thread_fence(__ATOMIC_RELEASE);
    }
    return rc;
}

static enum dm_redis_err simple_command(redisContext *c, struct dm_net *t, char *err,
                                        size_t errlen, const char *what, int argc,
                                        const char **argv)
{
    redisReply *r = dm_net_command_argv(c, t, argc, argv, NULL);
    if (!r) {
        snprintf(err, errlen, "%s: %s", what, c->errstr);
        return DM_REDIS_IO;
    }
    enum dm_redis_err rc = r->type == REDIS_REPLY_ERROR ? DM_REDIS_REPLY_ERROR : DM_REDIS_OK;
    if (rc != DM_REDIS_OK)
        snprintf(err, errlen, "%s: %s", what, r->str);
    freeReplyObject(r);
    return rc;
}

__attribute__((format(printf, 3, 4)))
static void set_err(struct dm_conn *conn, enum dm_redis_err kind, const char *fmt, ...)
{
    conn->err = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(conn->errstr, sizeof conn->errstr, fmt, ap);
    va_end(ap);
}

/* The TLS step of a connect, once the TCP connection is made: the
 * handshake (within what is left of the connect timeout), then a PING, so
 * that a server that ends the session after the handshake (TLS 1.3 checks
 * the client's certificate only then) is told apart here, as DM_REDIS_TLS,
 * not taken for a lost reply to the first script. `host` is the name or
 * address c was connected to: the certificate must be for it (unless
 * redis.tls.server_name says otherwise). 0 (with *out: NULL for a plain
 * connection), or -1 with conn's error set and c freed. */
__attribute__((noinline))       /* its error text off connect_node's frame (DM_CONNECT_FRAME) */
static int tls_start(struct dm_conn *conn, redisContext *c, const char *host,
                     const char *addr, long long started, struct dm_net **out)
{
    *out = NULL;
    if (!rcfg->tls.enabled)
        return 0;
    char why[DM_ERR_MAX];
    struct dm_net *t = dm_net_tls_start(c, host, addr,
                                        started + rcfg->connect_timeout_ms,
                                        rcfg->command_timeout_ms, why, sizeof why);
    if (!t) {
        set_err(conn, DM_REDIS_TLS, "%s", why);
        redisFree(c);
        return -1;
    }
    const char *argv[1] = { "PING" };
    enum dm_redis_err rc = simple_command(c, t, why, sizeof why, "PING", 1, argv);
    /* An error reply (NOAUTH before the AUTH that follows) is an answer:
     * the session works. */
    if (rc == DM_REDIS_OK || rc == DM_REDIS_REPLY_ERROR) {
        *out = t;
        return 0;
    }
    if (dm_net_tls_failed(t))
        set_err(conn, DM_REDIS_TLS, "%s", dm_net_tls_why(t));
    else if (c->err == REDIS_ERR_EOF || strstr(c->errstr, "reset"))
        /* A server that ends the session right after the handshake, before
         * its alert could be read (TLS 1.3 checks the client's certificate
         * after the client's handshake is done): only the PING was sent. */
        set_err(conn, DM_REDIS_TLS, "TLS session with redis at %s ended by the server right "
                "after the handshake: did it refuse the client certificate "
                "(redis.tls.cert = %s%s%s)? %s", addr, rcfg->tls.cert ? "\"" : "",
                rcfg->tls.cert ? rcfg->tls.cert : "none given", rcfg->tls.cert ? "\"" : "",
                c->errstr);
    else
        set_err(conn, rc, "redis at %s: %s", addr, why);
    dm_net_close(c, t);
    return -1;
}

static int connect_node(struct dm_conn *conn);

/* With a cluster, any node will do for a caller that is not about one
 * lock (the subscriber, a tool): conn->node first, then the others. */
int dm_redis_connect(struct dm_conn *conn)
{
    if (!dm_slots_enabled())
        return connect_node(conn);
    int n = dm_slots_nnodes(), first = conn->node;
    for (int i = 0; i < n; i++) {
        conn->node = (first + i) % n;
        if (connect_node(conn) == 0 || conn->err != DM_REDIS_NOCONN)
            return conn->c ? 0 : -1;
    }
    return -1;
}

/* connect_node's steps each keep their error text in a frame of their
 * own, gone before the next step: the thread connecting is a program's,
 * and its stack may be a small one (docs/semantics.md). */
#define DM_CONNECT_FRAME __attribute__((noinline))

/* The primary the sentinels name, into *primary: 0, or -1 with conn's error set. */
DM_CONNECT_FRAME
static int sentinel_address(struct dm_conn *conn, struct dm_primary *primary)
{
    char why[DM_ERR_MAX];
    int answered;
    if (dm_sentinel_primary(primary, why, sizeof why, &answered) == 0)
        return 0;
    /* No sentinel could be reached: no connection could be made.
     * One answered without an address: a wrong master name, not
     * an outage; nor is a sentinel's certificate that fails. */
    set_err(conn, answered & DM_SENTINEL_ANSWERED ? DM_REDIS_REPLY_ERROR
                  : answered & DM_SENTINEL_TLS_FAILED ? DM_REDIS_TLS : DM_REDIS_NOCONN,
            "redis: %s", why);
    return -1;
}

/* net's connect, for connect_node: the context, or NULL with conn's error set. */
DM_CONNECT_FRAME
static redisContext *net_connect(struct dm_conn *conn, const char *host, int port,
                                 const char *path, const char *addr)
{
    char cwhy[DM_ERR_MAX];
    redisContext *c = dm_net_connect(host, port, path, dm_now_ms() + rcfg->connect_timeout_ms,
                                     rcfg->command_timeout_ms, !rcfg->unix_path, cwhy,
                                     sizeof cwhy);
    if (!c) {
        set_err(conn, DM_REDIS_NOCONN, "cannot connect to redis at %s: %s", addr, cwhy);
        dm_sentinel_stale(conn->gen);
    }
    return c;
}

static int session_setup(struct dm_conn *conn, redisContext *c, struct dm_net *t, const char *addr);

static int connect_node(struct dm_conn *conn)
{
    conn->c = NULL;
    conn->tls = NULL;
    conn->nlate = 0;    /* a new context: no reply can be due on it */
    conn->err = DM_REDIS_OK;
    conn->errstr[0] = 0;
    conn->gen = 0;
    long long started = dm_now_ms();
    /* With Sentinel the address is the sentinels' answer; it is all that
     * changes here (sentinel.c). */
    const char *host = rcfg->host, *addr = addr_text;
    int port = rcfg->port;
    struct dm_primary primary;
    char primary_text[sizeof addr_text + 64];
    char node_host[DM_SLOTS_HOST_MAX];
    if (dm_slots_enabled()) {
        /* read before the address: an index given another address in
         * between makes the connection stale at once, never the reverse */
        conn->gen = dm_slots_node_epoch(conn->node);
        if (dm_slots_node_addr(conn->node, node_host, sizeof node_host, &port) != 0) {
            set_err(conn, DM_REDIS_WRONG_NODE, "redis cluster: no node %d known", conn->node);
            return -1;
        }
        host = node_host;
        snprintf(primary_text, sizeof primary_text, "%s:%d", host, port);
        addr = primary_text;
    } else if (dm_sentinel_enabled()) {
        if (sentinel_address(conn, &primary) != 0)
            return -1;
        host = primary.host;
        port = primary.port;
        conn->gen = primary.gen;
        snprintf(primary_text, sizeof primary_text, "%s:%d (primary of %s)", host, port,
                 rcfg->master);
        addr = primary_text;
    }
    /* net's connect: a signal during it is no failure (hiredis's was). It
     * gets the whole connect timeout, as hiredis's did, whatever asking the
     * sentinels took; the TLS handshake what is left of it from `started`. */
    const char *path = rcfg->unix_path && !dm_sentinel_enabled() && !dm_slots_enabled()
                           ? rcfg->unix_path : NULL;
    redisContext *c = net_connect(conn, host, port, path, addr);
    if (!c)
        return -1;
    struct dm_net *t = NULL;
    if (tls_start(conn, c, host, addr, started, &t) != 0)
        return -1;
    return session_setup(conn, c, t, addr);
}

/* The connection's first requests, once the server is there: AUTH,
 * SELECT, ROLE (Sentinel), the scripts. 0 with conn->c and conn->tls set,
 * or -1 with conn's error and c closed. */
DM_CONNECT_FRAME
static int session_setup(struct dm_conn *conn, redisContext *c, struct dm_net *t, const char *addr)
{
    /* From here on the server is there: an error it answers (WRONGPASS,
     * NOPERM, "max number of clients reached", LOADING...) or a request it
     * does not answer in time is not "no connection could be made", the
     * one case on_redis_down = "local" may lock this process alone. */
    char why[400];
    enum dm_redis_err rc = DM_REDIS_OK;
    if (rcfg->password) {
        const char *argv[3] = { "AUTH", rcfg->username ? rcfg->username : rcfg->password,
                                rcfg->password };
        rc = simple_command(c, t, why, sizeof why, "AUTH", rcfg->username ? 3 : 2, argv);
    }
    if (rc == DM_REDIS_OK && rcfg->db && !dm_slots_enabled()) {
        char db[16];
        snprintf(db, sizeof db, "%d", rcfg->db);
        const char *argv[2] = { "SELECT", db };
        rc = simple_command(c, t, why, sizeof why, "SELECT", 2, argv);
    }
    if (rc == DM_REDIS_OK && dm_sentinel_enabled())
        rc = check_role(c, t, why, sizeof why);
    if (rc == DM_REDIS_OK)
        rc = load_scripts(c, t, why, sizeof why);
    if (rc == DM_REDIS_OK)
        rc = read_run_id(conn, c, t, why, sizeof why);
    if (rc == DM_REDIS_REPLY_ERROR && strstr(why, ": ") && wrong_node_reply(strstr(why, ": ") + 2))
        rc = DM_REDIS_WRONG_NODE;       /* "AUTH: LOADING ...", "SCRIPT LOAD x.lua: ..." */
    if (rc == DM_REDIS_OK) {
        conn->c = c;
        conn->tls = t;
        return 0;
    }
    set_err(conn, rc, "redis at %s: %s", addr, why);
    dm_net_close(c, t);
    if (rc == DM_REDIS_WRONG_NODE || rc == DM_REDIS_IO)
        dm_sentinel_stale(conn->gen);
    return -1;
}

void dm_redis_error_keep(struct dm_redis_error *e, const struct dm_conn *conn)
{
    e->err = conn->err;
    memcpy(e->errstr, conn->errstr, sizeof e->errstr);
}

/* The replies due on conn that will never be read: each fn gets NULL. */
static void late_drop(struct dm_conn *conn, const struct dm_redis_error *why)
{
    while (conn->nlate > 0) {
        struct dm_redis_late x = conn->late[0];
        memmove(conn->late, conn->late + 1, (size_t)(conn->nlate - 1) * sizeof x);
        conn->nlate--;
        conn->late_done++;
        x.fn(x.arg, NULL, why);
    }
}

/* Reads the replies due on conn (dm_redis_script_nowait), oldest first,
 * each handed to its fn. 0, or -1 when the connection broke (conn->err
 * DM_REDIS_IO; the replies not read are dropped, their fns told so). A
 * request the caller appended already is still unanswered. */
static int late_drain(struct dm_conn *conn)
{
    while (conn->nlate > 0) {
        struct dm_redis_late x = conn->late[0];
        memmove(conn->late, conn->late + 1, (size_t)(conn->nlate - 1) * sizeof x);
        conn->nlate--;
        conn->late_done++;
        redisReply *r = NULL;
        if (!conn->c || dm_net_get_reply(conn->c, conn->tls, (void **)&r) != REDIS_OK) {
            set_err(conn, DM_REDIS_IO, "redis at %s: no reply to a request sent earlier: %s",
                    dm_redis_conn_addr(conn), conn->c && conn->c->err ? conn->c->errstr
                                                                    : "not connected");
            struct dm_redis_error why;
            dm_redis_error_keep(&why, conn);
            x.fn(x.arg, NULL, &why);
            late_drop(conn, &why);
            return -1;
        }
        x.fn(x.arg, r, NULL);
        freeReplyObject(r);
    }
    return 0;
}

void dm_redis_close(struct dm_conn *conn)
{
    if (conn->nlate > 0) {
        /* Closed with replies due: read them while the connection still
         * can (a healthy one the pool had no room for), else each fn
         * hears that its reply will never come. */
        if (conn->c && conn->err != DM_REDIS_IO)
            late_drain(conn);
        struct dm_redis_error why = { DM_REDIS_IO, "" };
        snprintf(why.errstr, sizeof why.errstr, "redis at %s: connection closed before the "
                 "reply of a request sent earlier", dm_redis_conn_addr(conn));
        late_drop(conn, &why);
    }
    if (conn->c && (conn->err == DM_REDIS_IO || conn->err == DM_REDIS_WRONG_NODE))
        dm_sentinel_stale(conn->gen);
    if (conn->c && conn->err == DM_REDIS_IO && dm_slots_enabled())
        dm_slots_stale();       /* the node may be gone: its slots may have moved */
    dm_net_close(conn->c, conn->tls);
    conn->c = NULL;
    conn->tls = NULL;
}

void dm_redis_set_timeout(struct dm_conn *conn, long ms)
{
    if (conn->c)
        dm_net_set_timeout(conn->c, conn->tls, ms);
}

int dm_redis_conn_stale(const struct dm_conn *conn)
{
    if (dm_slots_enabled())
        return conn->c && conn->gen != dm_slots_node_epoch(conn->node);
    return dm_sentinel_enabled() && conn->c && conn->gen != dm_sentinel_gen();
}

void dm_redis_on_switch(void (*fn)(void))
{
    if (dm_sentinel_on_switch(fn) != 0 || dm_slots_on_change(fn) != 0)
        dm_error("redis: more than %d callers asked to hear of a new primary", DM_HOOKS_MAX);
}

unsigned long dm_redis_primary_gen(void)
{
    return dm_sentinel_enabled() ? dm_sentinel_gen() : dm_slots_enabled() ? dm_slots_gen() : 0;
}

/* What dm_redis_get hands out when it cannot even allocate a connection:
 * never written (every call returns at once on a conn without a context)
 * and never freed. */
static struct dm_conn no_memory = { .c = NULL, .err = DM_REDIS_NOCONN,
                                    .errstr = "out of memory" };

/* A pooled connection to node `node` (0 without a cluster); `any`: with
 * a cluster, another node will do when that one cannot be reached;
 * `fresh`: a new connection, none of the idle ones (they may all be as
 * stale as the one that just failed). */
static struct dm_conn *pool_get(int node, int any, int fresh)
{
    struct dm_conn *conn = NULL;
    struct pool *pl = &pools[node >= 0 && node < DM_SLOTS_NODES_MAX ? node : 0];
    while (!fresh) {
        dm_lock(&pool_mu);
        conn = pl->idle;
        if (conn) {
            pl->idle = conn->next;
            pl->nidle--;
        }
        dm_unlock(&pool_mu);
        if (!conn || !dm_redis_conn_stale(conn))
            break;
        dm_redis_close(conn);   /* to a node that is no longer the primary */
        free(conn);
    }
    if (conn) {
        conn->err = DM_REDIS_OK;
        conn->errstr[0] = 0;
        return conn;
    }
    conn = calloc(1, sizeof *conn);
    if (!conn)
        return &no_memory;
    conn->node = (int)(pl - pools);
    if (any)
        dm_redis_connect(conn);
    else
        connect_node(conn);
    if (!conn->c && dm_slots_enabled())
        dm_slots_stale();       /* a failover may have moved its slots */
    return conn;
}

struct dm_conn *dm_redis_get(void)
{
    return pool_get(0, 1, 0);
}

struct dm_conn *dm_redis_get_node(int node)
{
    return pool_get(node, 0, 0);
}

/* The map is asked first of the node that answered last: a dead node
 * (refused, or a connect timeout away) is not tried first every time. */
static int refresh_from;

/* Redis Cluster: asks the nodes for the slot map now (CLUSTER SLOTS), one
 * after the other until one answers. 0, or -1 with err saying why and
 * *noconn 1 when no node could be connected to at all (the cluster is out
 * of reach: "no connection"). */
static int refresh_slots(char *err, size_t errlen, int *noconn)
{
    int n = dm_slots_nnodes();
    int first = __atomic_load_n(&refresh_from, __ATOMIC_RELAXED);
    snprintf(err, errlen, "redis cluster: no node known");
    *noconn = 1;
    for (int k = 0; k < n; k++) {
        int i = (first + k) % n;
        struct dm_conn *conn = pool_get(i, 0, 0);
        redisReply *r = dm_redis_command(conn, "CLUSTER SLOTS");
        int ok = r && dm_slots_update(r) == 0;
        if (conn->c || conn->err != DM_REDIS_NOCONN)
            *noconn = 0;
        if (!ok)
            snprintf(err, errlen, "%s", conn->errstr[0] ? conn->errstr
                                                        : "unexpected reply to CLUSTER SLOTS");
        if (r)
            freeReplyObject(r);
        dm_redis_put(conn);
        if (ok) {
            __atomic_store_n(&refresh_from, i, __ATOMIC_RELAXED);
            return 0;
        }
    }
    return -1;
}

/* refresh_slots, when whether a node answered at all does not matter. */
static int slots_refresh(char *err, size_t errlen)
{
    int noconn;
    return refresh_slots(err, errlen, &noconn);
}

static struct dm_conn *get_slot(int slot, int fresh)
{
    if (!dm_slots_enabled() || slot < 0)
        return pool_get(0, 1, fresh);
    char why[DM_ERR_MAX];
    if (dm_slots_want_refresh() && slots_refresh(why, sizeof why) != 0)
        dm_debug("redis cluster: slot map not refreshed: %s", why);
    int node = dm_slots_node_of((unsigned)slot);
    if (node < 0) {
        int noconn = 0;
        if (refresh_slots(why, sizeof why, &noconn) == 0)
            node = dm_slots_node_of((unsigned)slot);
        if (node < 0) {
            struct dm_conn *conn = calloc(1, sizeof *conn);
            if (!conn)
                return &no_memory;
            /* No node could even be connected to: the cluster is out of
             * reach, as a single server that refuses (on_redis_down). */
            if (noconn)
                set_err(conn, DM_REDIS_NOCONN, "redis cluster: no node can be reached for "
                        "slot %d (%s)", slot, why);
            else
                set_err(conn, DM_REDIS_WRONG_NODE, "redis cluster: no node owns slot %d (%s)",
                        slot, why);
            return conn;
        }
    }
    struct dm_conn *conn = pool_get(node, 0, fresh);
    if (conn->c || conn == &no_memory)
        return conn;
    /* The map's owner cannot be reached: it may be gone for good (a
     * failover this process has not heard of, a node removed), and the
     * slot live on another node; only when the map asked again still
     * names it (or no node answers) is it no connection. */
    if (slots_refresh(why, sizeof why) != 0)
        return conn;
    int now = dm_slots_node_of((unsigned)slot);
    if (now < 0 || now == node)
        return conn;
    dm_debug("redis cluster: %s; slot %d is on another node now", conn->errstr, slot);
    dm_redis_put(conn);
    return pool_get(now, 0, fresh);
}

struct dm_conn *dm_redis_get_slot(int slot)
{
    return get_slot(slot, 0);
}

struct dm_conn *dm_redis_get_slot_new(int slot)
{
    return get_slot(slot, 1);
}

int dm_redis_cluster(void)
{
    return dm_slots_enabled();
}

int dm_redis_node_of(int slot)
{
    if (!dm_slots_enabled() || slot < 0)
        return 0;
    char why[DM_ERR_MAX];
    if (dm_slots_want_refresh())
        slots_refresh(why, sizeof why);
    int node = dm_slots_node_of((unsigned)slot);
    if (node < 0 && slots_refresh(why, sizeof why) == 0)
        node = dm_slots_node_of((unsigned)slot);
    return node;
}

int dm_redis_connect_node(struct dm_conn *conn, int node)
{
    conn->node = node;
    int rc = connect_node(conn);
    if (rc != 0 && dm_slots_enabled())
        dm_slots_stale();
    return rc;
}

void dm_redis_refresh_if_wanted(void)
{
    char why[DM_ERR_MAX];
    if (dm_slots_enabled() && dm_slots_want_refresh() && slots_refresh(why, sizeof why) != 0)
        dm_debug("redis cluster: slot map not refreshed: %s", why);
}

int dm_redis_primaries(int *out, int max, char *err, size_t errlen)
{
    if (slots_refresh(err, errlen) != 0)
        return -1;
    return dm_slots_primaries(out, max);
}

int dm_redis_node_cached(int slot)
{
    if (!dm_slots_enabled() || slot < 0)
        return 0;
    return dm_slots_node_of((unsigned)slot);
}

unsigned long dm_redis_node_epoch(int node)
{
    return dm_slots_enabled() && node >= 0 ? dm_slots_node_epoch(node) : 0;
}

int dm_redis_redirected(const char *msg)
{
    int ask, node;
    unsigned slot;
    return dm_slots_enabled() && dm_slots_redirect(msg, &ask, &slot, &node);
}

void dm_redis_slots_stale(void)
{
    if (dm_slots_enabled())
        dm_slots_stale();
}

unsigned long dm_redis_slots_gen(void)
{
    return dm_slots_gen();
}

int dm_redis_slot(const char *key)
{
    return dm_slots_enabled() ? (int)dm_slots_keyslot(key, strlen(key)) : -1;
}

struct dm_conn *dm_redis_get_key(const char *key)
{
    return dm_redis_get_slot(dm_redis_slot(key));
}

void dm_redis_put(struct dm_conn *conn)
{
    if (!conn || conn == &no_memory)
        return;
    if (conn->c && conn->err != DM_REDIS_IO && conn->err != DM_REDIS_WRONG_NODE) {
        struct pool *pl = &pools[conn->node >= 0 && conn->node < DM_SLOTS_NODES_MAX ? conn->node : 0];
        dm_lock(&pool_mu);
        if (pl->nidle < DM_POOL_IDLE_MAX) {
            conn->next = pl->idle;
            pl->idle = conn;
            pl->nidle++;
            conn = NULL;
        }
        dm_unlock(&pool_mu);
    }
    if (conn) {
        dm_redis_close(conn);
        free(conn);
    }
}

#define DM_SCRIPT_ARGS_MAX 21    /* acquire.lua of an rwlock: 9 keys, 12 arguments */

static int build_argv(const char **argv, enum dm_script s, int use_body, int nkeys,
                      int nargs, const char *const *args, char *nk)
{
    int n = 0;
    argv[n++] = use_body ? "EVAL" : "EVALSHA";
    argv[n++] = use_body ? script_body[s] : script_sha[s];
    snprintf(nk, 12, "%d", nkeys);
    argv[n++] = nk;
    for (int i = 0; i < nargs && n < DM_SCRIPT_ARGS_MAX + 3; i++)
        argv[n++] = args[i];
    return n;
}

/* The words to add to an ACL refusal: NOPERM (the user lacks EVALSHA, a
 * key or a channel), or a command a script calls, which Redis 7.0 refuses
 * without naming it ("The user executing the script can't run this
 * command...", "...can't publish to the channel..."). "" otherwise. */
static const char *acl_refusal_hint(const char *msg)
{
    static const char script_words[] = "The user executing the script can't";
    if (strncmp(msg, "NOPERM", 6) == 0)
        return " (an ACL refusal: `dmutex acl -c CONFIG` prints the rights a config needs)";
    if (strstr(msg, script_words))
        return " (an ACL refusal of a command the script calls; Redis does not say which: "
               "`ACL LOG` on the server does, and `dmutex acl -c CONFIG` prints the rights "
               "a config needs)";
    return "";
}

/* A reply, or its absence, on conn's error state: NULL (no reply) is
 * DM_REDIS_IO; an error reply is freed and is DM_REDIS_REPLY_ERROR (with
 * Sentinel, READONLY/LOADING/MASTERDOWN: DM_REDIS_WRONG_NODE), `what` and
 * the server's words in errstr; anything else clears the error and is
 * returned. */
static redisReply *check_reply(struct dm_conn *conn, redisReply *r, const char *what)
{
    if (!r) {
        set_err(conn, DM_REDIS_IO, "redis at %s: %s%s%s", dm_redis_conn_addr(conn), what,
                *what ? ": " : "", conn->c->err ? conn->c->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        int ask, node;
        unsigned slot;
        if (dm_slots_enabled())     /* a MOVED moves the slot in the map */
            dm_slots_redirect(r->str, &ask, &slot, &node);
        set_err(conn, wrong_node_reply(r->str) ? DM_REDIS_WRONG_NODE : DM_REDIS_REPLY_ERROR,
                "redis at %s: %s%s%s%s", dm_redis_conn_addr(conn), what, *what ? ": " : "", r->str,
                acl_refusal_hint(r->str));
        freeReplyObject(r);
        return NULL;
    }
    conn->err = DM_REDIS_OK;
    conn->errstr[0] = 0;
    return r;
}

static redisReply *check_script_reply(struct dm_conn *conn, redisReply *r, enum dm_script s)
{
    char what[32];
    snprintf(what, sizeof what, "%s.lua", script_name[s]);
    return check_reply(conn, r, what);
}

/* The command's name in a hiredis format (its first word), for
 * errstr. */
static void fmt_name(char *out, size_t len, const char *fmt)
{
    size_t n = strcspn(fmt, " %");
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), fmt);
}

redisReply *dm_redis_command(struct dm_conn *conn, const char *fmt, ...)
{
    if (!conn->c)
        return NULL;    /* not connected: the connect's error stays */
    if (late_drain(conn) != 0)
        return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = dm_net_vcommand(conn->c, conn->tls, fmt, ap);
    va_end(ap);
    char what[32];
    fmt_name(what, sizeof what, fmt);
    return check_reply(conn, r, what);
}

redisReply *dm_redis_command_argv(struct dm_conn *conn, const char *what, int argc,
                                  const char **argv)
{
    if (!conn->c || late_drain(conn) != 0)
        return NULL;
    redisReply *r = dm_net_command_argv(conn->c, conn->tls, argc, argv, NULL);
    return check_reply(conn, r, what ? what : argv[0]);
}

int dm_redis_append_command(struct dm_conn *conn, const char *fmt, ...)
{
    if (!conn->c || late_drain(conn) != 0)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int rc = redisvAppendCommand(conn->c, fmt, ap);
    va_end(ap);
    if (rc != REDIS_OK) {
        /* what was queued before can no longer be matched to its replies */
        set_err(conn, DM_REDIS_IO, "redis at %s: out of memory", dm_redis_conn_addr(conn));
        return -1;
    }
    return 0;
}

redisReply *dm_redis_pipeline_next(struct dm_conn *conn)
{
    if (!conn->c)
        return NULL;
    redisReply *r = NULL;
    if (dm_net_get_reply(conn->c, conn->tls, (void **)&r) != REDIS_OK)
        r = NULL;
    return check_reply(conn, r, "");
}

static int is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Redis Cluster: conn becomes a connection to `node` (a pooled one, or a
 * new one), and what it was goes back to its own node's pool. 0, or -1
 * with conn->err DM_REDIS_WRONG_NODE (never "no connection": a node named
 * by a redirection that cannot be reached is not an outage of the
 * cluster, and on_redis_down = "local" must not lock alone on it). */
static int redirect(struct dm_conn *conn, int node)
{
    late_drain(conn);   /* its context goes to the pool: nothing due may go with it */
    struct dm_conn *x = pool_get(node, 0, 0);
    if (x != &no_memory && x->c)
        late_drain(x);
    if (x == &no_memory || !x->c) {
        set_err(conn, DM_REDIS_WRONG_NODE, "redis cluster: redirected to a node that cannot "
                "be reached: %s", x->errstr);
        dm_redis_put(x);
        return -1;
    }
    struct dm_conn t = *conn;
    conn->c = x->c;
    conn->tls = x->tls;
    conn->node = x->node;
    conn->gen = x->gen;
    x->c = t.c;
    x->tls = t.tls;
    x->node = t.node;
    x->gen = t.gen;
    x->err = DM_REDIS_OK;
    dm_redis_put(x);
    return 0;
}

static redisReply *script_once(struct dm_conn *conn, enum dm_script s, int nkeys, int nargs,
                               const char *const *args, int asking)
{
    const char *argv[DM_SCRIPT_ARGS_MAX + 3];
    char nk[12];
    if (asking && late_drain(conn) != 0)
        return NULL;
    if (asking) {
        /* ASKING holds for the next command of this connection only. */
        const char *a[1] = { "ASKING" };
        redisReply *r = dm_net_command_argv(conn->c, conn->tls, 1, a, NULL);
        if (!r)
            return NULL;
        freeReplyObject(r);
    }
    int argc = build_argv(argv, s, !script_sha[s][0], nkeys, nargs, args, nk);
    redisReply *r = NULL;
    if (conn->nlate > 0) {
        /* Replies are due (an unlock's release): this request goes out
         * first, then they are read, then its own: one round trip. */
        if (dm_net_append_argv(conn->c, argc, argv, NULL) != REDIS_OK ||
            late_drain(conn) != 0 || dm_net_get_reply(conn->c, conn->tls, (void **)&r) != REDIS_OK)
            r = NULL;
    } else {
        r = dm_net_command_argv(conn->c, conn->tls, argc, argv, NULL);
    }
    if (is_noscript(r)) {
        freeReplyObject(r);
        r = NULL;       /* a failed resend below frees what it got, not this */
        if (asking) {
            const char *a[1] = { "ASKING" };
            redisReply *q = dm_net_command_argv(conn->c, conn->tls, 1, a, NULL);
            if (!q)
                return NULL;
            freeReplyObject(q);
        }
        argc = build_argv(argv, s, 1, nkeys, nargs, args, nk);
        if (s == DM_SCRIPT_RELEASE) {
            r = dm_net_command_argv(conn->c, conn->tls, argc, argv, NULL);
            return r;
        }
        /* The server lost its scripts (SCRIPT FLUSH, a restart that kept
         * the keys). release.lua is loaded again in the same round trip:
         * an unlock sends it without waiting (dm_redis_script_nowait), and
         * a NOSCRIPT to that is only read, and the release sent again, a
         * tick later (rlock's release reader) or at the connection's
         * next use: a retry and that much time saved. */
        redisReply *q = NULL;
        if (dm_net_append_argv(conn->c, argc, argv, NULL) != REDIS_OK ||
            redisAppendCommand(conn->c, "SCRIPT LOAD %s", script_body[DM_SCRIPT_RELEASE]) != REDIS_OK ||
            dm_net_get_reply(conn->c, conn->tls, (void **)&r) != REDIS_OK ||
            dm_net_get_reply(conn->c, conn->tls, (void **)&q) != REDIS_OK) {
            freeReplyObject(r);
            r = NULL;
        }
        freeReplyObject(q);
    }
    return r;
}

redisReply *dm_redis_script(struct dm_conn *conn, enum dm_script s, int nkeys, int nargs,
                            const char *const *args)
{
    if (!conn->c)
        return NULL;    /* not connected: its DM_REDIS_NOCONN stays */
    redisReply *r = script_once(conn, s, nkeys, nargs, args, 0);
    for (int i = 0; dm_slots_enabled() && i < DM_REDIS_REDIRECTS_MAX && r &&
                    r->type == REDIS_REPLY_ERROR; i++) {
        int ask, node;
        unsigned slot;
        if (!dm_slots_redirect(r->str, &ask, &slot, &node) || node < 0)
            break;
        dm_debug("redis at %s: %s.lua: %s: following it", dm_redis_conn_addr(conn),
                 script_name[s], r->str);
        freeReplyObject(r);
        r = NULL;
        if (redirect(conn, node) != 0)
            return NULL;
        r = script_once(conn, s, nkeys, nargs, args, ask);
    }
    return check_script_reply(conn, r, s);
}

int dm_redis_append_script(struct dm_conn *conn, enum dm_script s, int nkeys, int nargs,
                           const char *const *args)
{
    if (!conn->c || late_drain(conn) != 0)
        return -1;
    const char *argv[DM_SCRIPT_ARGS_MAX + 3];
    char nk[12];
    int argc = build_argv(argv, s, !script_sha[s][0], nkeys, nargs, args, nk);
    return dm_net_append_argv(conn->c, argc, argv, NULL) == REDIS_OK ? 0 : -1;
}

/* Whether conn has something to read: replies due, or, with none due,
 * the end of a connection the server closed while it sat in the pool
 * (its `timeout`, a restart, CLIENT KILL). No wait. */
static int readable(const struct dm_conn *conn)
{
    if (dm_net_buffered(conn->tls))
        return 1;
    struct pollfd p = { conn->c->fd, POLLIN | POLLRDHUP, 0 };
    return poll(&p, 1, 0) > 0;
}

int dm_redis_script_nowait(struct dm_conn *conn, enum dm_script s, int nkeys, int nargs,
                           const char *const *args, dm_redis_late_fn fn, void *arg)
{
    if (!conn->c)
        return -1;
    /* A request written into a connection the server closed is lost with
     * nobody left to notice until that connection's next use, which may
     * never come (an idle process): the lock would stay held for its
     * lease. The replies already here are read; then anything more to
     * read means the server closed it, and the caller waits for its
     * release on another connection instead. */
    if (readable(conn) && (conn->nlate == 0 || late_drain(conn) != 0 || readable(conn))) {
        if (conn->err != DM_REDIS_IO)
            set_err(conn, DM_REDIS_IO, "redis at %s: connection closed by the server while "
                    "idle", dm_redis_conn_addr(conn));
        return -1;
    }
    if (conn->nlate == DM_REDIS_LATE_MAX && late_drain(conn) != 0)
        return -1;
    const char *argv[DM_SCRIPT_ARGS_MAX + 3];
    char nk[12];
    int argc = build_argv(argv, s, !script_sha[s][0], nkeys, nargs, args, nk);
    if (dm_net_append_argv(conn->c, argc, argv, NULL) != REDIS_OK) {
        set_err(conn, DM_REDIS_IO, "redis at %s: out of memory", dm_redis_conn_addr(conn));
        return -1;
    }
    if (dm_net_write(conn->c, conn->tls, NULL) != REDIS_OK) {
        set_err(conn, DM_REDIS_IO, "redis at %s: %s.lua: %s", dm_redis_conn_addr(conn),
                script_name[s], conn->c->err ? conn->c->errstr : "not sent");
        return -1;
    }
    conn->late[conn->nlate].fn = fn;
    conn->late[conn->nlate].arg = arg;
    conn->nlate++;
    return 0;
}

/* Takes an idle connection with replies due out of the pools; NULL: none. */
static struct dm_conn *pool_take_late(void)
{
    struct dm_conn *found = NULL;
    dm_lock(&pool_mu);
    for (int i = 0; i < DM_SLOTS_NODES_MAX && !found; i++)
        for (struct dm_conn **pp = &pools[i].idle; *pp; pp = &(*pp)->next)
            if ((*pp)->nlate > 0) {
                found = *pp;
                *pp = found->next;
                pools[i].nidle--;
                break;
            }
    dm_unlock(&pool_mu);
    return found;
}

int dm_redis_flush_older(void)
{
    struct dm_conn *take[DM_REDIS_LATE_MAX];
    int n = 0, left = 0;
    dm_lock(&pool_mu);
    for (int i = 0; i < DM_SLOTS_NODES_MAX; i++)
        for (struct dm_conn **pp = &pools[i].idle; *pp;) {
            struct dm_conn *c = *pp;
            /* the same oldest request as last time: nothing was read since
             * (a count, not its address: malloc hands the next one the same) */
            if (c->nlate > 0 && c->late_seen == c->late_done + 1 && n < DM_REDIS_LATE_MAX) {
                *pp = c->next;
                pools[i].nidle--;
                take[n++] = c;
                continue;
            }
            c->late_seen = c->nlate > 0 ? c->late_done + 1 : 0;
            left += c->nlate > 0;
            pp = &c->next;
        }
    dm_unlock(&pool_mu);
    for (int i = 0; i < n; i++) {
        take[i]->late_seen = 0;
        late_drain(take[i]);
        dm_redis_put(take[i]);
    }
    return left;
}

void dm_redis_flush(void)
{
    struct dm_conn *conn;
    while ((conn = pool_take_late()) != NULL) {
        late_drain(conn);
        dm_redis_put(conn);
    }
}

int dm_redis_subscribe(struct dm_conn *conn, const char *channel)
{
    redisReply *r = dm_redis_command(conn, "SUBSCRIBE %s", channel);
    if (!r)
        return -1;
    int ok = r->type == REDIS_REPLY_ARRAY && r->elements == 3;
    freeReplyObject(r);
    if (!ok)
        set_err(conn, DM_REDIS_BAD_REPLY, "redis at %s: SUBSCRIBE %s: unexpected reply",
                dm_redis_conn_addr(conn), channel);
    return ok ? 0 : -1;
}

int dm_redis_next_message(struct dm_conn *conn, long timeout_ms, char *buf, size_t len)
{
    if (!conn->c)
        return -1;
    long long end = dm_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        redisReply *r = NULL;
        if (redisGetReplyFromReader(conn->c, (void **)&r) != REDIS_OK)
            break;
        if (r) {
            int msg = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                      r->element[0]->type == REDIS_REPLY_STRING &&
                      strcmp(r->element[0]->str, "message") == 0 &&
                      r->element[2]->type == REDIS_REPLY_STRING;
            if (msg)
                snprintf(buf, len, "%s", r->element[2]->str);
            freeReplyObject(r);
            if (msg)
                return 1;
            continue;
        }
        if (!dm_net_buffered(conn->tls)) {
            long long left = end - dm_now_ms();
            if (left <= 0)
                return 0;
            struct pollfd p = { conn->c->fd, POLLIN, 0 };
            int n = poll(&p, 1, (int)left);
            if (n < 0 && errno == EINTR)
                continue;
            if (n == 0)
                return 0;
            if (n < 0)
                break;
        }
        if (dm_net_read(conn->c, conn->tls) != REDIS_OK)
            break;
    }
    set_err(conn, DM_REDIS_IO, "redis at %s: subscribed connection: %s", dm_redis_conn_addr(conn),
            conn->c->err ? conn->c->errstr : strerror(errno));
    return -1;
}

redisReply *dm_redis_pipeline_reply(struct dm_conn *conn, enum dm_script s)
{
    if (!conn->c)
        return NULL;
    redisReply *r = NULL;
    if (dm_net_get_reply(conn->c, conn->tls, (void **)&r) != REDIS_OK)
        r = NULL;
    if (is_noscript(r)) {
        freeReplyObject(r);
        set_err(conn, DM_REDIS_NOSCRIPT, "NOSCRIPT");
        return NULL;
    }
    return check_script_reply(conn, r, s);
}

enum dm_is_primary dm_redis_is_primary(struct dm_conn *conn)
{
    /* A cluster's replica answers a lock's keys with MOVED: no ROLE needed. */
    if (!dm_sentinel_enabled())
        return DM_PRIMARY_YES;
    if (!conn->c || late_drain(conn) != 0)
        return DM_PRIMARY_UNKNOWN;
    char why[400];
    enum dm_redis_err rc = check_role(conn->c, conn->tls, why, sizeof why);
    if (rc == DM_REDIS_OK)
        return DM_PRIMARY_YES;
    set_err(conn, rc, "redis at %s: %s", dm_redis_conn_addr(conn), why);
    if (rc == DM_REDIS_WRONG_NODE)
        dm_sentinel_stale(conn->gen);
    return rc == DM_REDIS_WRONG_NODE ? DM_PRIMARY_NO : DM_PRIMARY_UNKNOWN;
}

long dm_redis_wait(struct dm_conn *conn, int n, long timeout_ms)
{
    if (!conn->c || late_drain(conn) != 0)
        return -1;
    /* The server answers WAIT after up to timeout_ms: the reply may come
     * that much later than a command's. */
    dm_net_set_timeout(conn->c, conn->tls, timeout_ms + rcfg->command_timeout_ms);
    char nbuf[24], tbuf[24];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    snprintf(tbuf, sizeof tbuf, "%ld", timeout_ms);
    const char *argv[3] = { "WAIT", nbuf, tbuf };
    redisReply *r = dm_net_command_argv(conn->c, conn->tls, 3, argv, NULL);
    if (!conn->c->err)
        dm_net_set_timeout(conn->c, conn->tls, rcfg->command_timeout_ms);
    if (!r) {
        set_err(conn, DM_REDIS_IO, "redis at %s: WAIT: %s", dm_redis_conn_addr(conn),
                conn->c->err ? conn->c->errstr : "no reply");
        return -1;
    }
    long v = -1;
    if (r->type == REDIS_REPLY_INTEGER)
        v = (long)r->integer;
    else
        set_err(conn, r->type == REDIS_REPLY_ERROR && wrong_node_reply(r->str) ? DM_REDIS_WRONG_NODE
                      : r->type == REDIS_REPLY_ERROR ? DM_REDIS_REPLY_ERROR : DM_REDIS_BAD_REPLY,
                "redis at %s: WAIT: %s", dm_redis_conn_addr(conn),
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return v;
}

/* Fork: startup's prepare handler holds pool_mu across fork() (see the lock
 * order in startup.c); the parent lets go, the child makes it anew. */
void dm_redis_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&pool_mu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    for (int i = 0; i < DM_SLOTS_NODES_MAX; i++) {
        struct pool *pl = &pools[i];
        while (pl->idle) {
            struct dm_conn *next = pl->idle->next;
            /* close(2) only: nothing is sent. A TLS session's memory is
             * left alone (dm_tls_atfork). */
            redisFree(pl->idle->c);
            free(pl->idle);
            pl->idle = next;
        }
        pl->nidle = 0;
    }
}
