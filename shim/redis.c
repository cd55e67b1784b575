/* redis: the pool of command connections and the script runner. The pool is
 * a stack of idle connections under one mutex: a thread takes one for the
 * length of a command, so a process makes as many connections as it has
 * threads talking to Redis at the same moment, and no more. */
#include "redis.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lua_scripts.h"
#include "sentinel.h"

#define DM_POOL_IDLE_MAX 64     /* idle connections kept; the rest are closed */

static const struct dm_redis_config *rcfg;
static char addr_text[300];

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dm_conn *pool_idle;
static int pool_nidle;

static const char *const script_body[DM_SCRIPT_COUNT] = {
    dm_lua_acquire, dm_lua_release, dm_lua_renew, dm_lua_cancel,
};
static const char *const script_name[DM_SCRIPT_COUNT] = { "acquire", "release", "renew", "cancel" };
/* SHA1 hex of each body as the server reported it; empty until loaded. */
static char script_sha[DM_SCRIPT_COUNT][41];

void dm_redis_setup(const struct dm_redis_config *cfg)
{
    rcfg = cfg;
    dm_sentinel_setup(cfg);
    if (cfg->unix_path)
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
    return dm_sentinel_enabled() && (strncmp(msg, "READONLY", 8) == 0 ||
                                     strncmp(msg, "LOADING", 7) == 0 ||
                                     strncmp(msg, "MASTERDOWN", 10) == 0);
}

/* Sentinel: the node must say ROLE master before anything is sent to it;
 * a sentinel's answer can be a moment old. */
static enum dm_redis_err check_role(redisContext *c, char *err, size_t errlen)
{
    redisReply *r = redisCommand(c, "ROLE");
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

static struct timeval ms_tv(long ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    return tv;
}

/* Loads the scripts (one pipelined round trip) the first time any
 * connection of this process is made. */
/* The connection's set-up steps answer with one of these: the server
 * answered with an error, or a request got no reply (sent, perhaps run). */
static enum dm_redis_err load_scripts(redisContext *c, char *err, size_t errlen)
{
    if (__atomic_load_n(&script_sha[DM_SCRIPT_COUNT - 1][0], __ATOMIC_ACQUIRE))
        return DM_REDIS_OK;
    for (int i = 0; i < DM_SCRIPT_COUNT; i++)
        redisAppendCommand(c, "SCRIPT LOAD %s", script_body[i]);
    char sha[DM_SCRIPT_COUNT][41];
    enum dm_redis_err rc = DM_REDIS_OK;
    for (int i = 0; i < DM_SCRIPT_COUNT; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
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

static enum dm_redis_err simple_command(redisContext *c, char *err, size_t errlen,
                                        const char *what, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
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

int dm_redis_connect(struct dm_conn *conn)
{
    conn->c = NULL;
    conn->err = DM_REDIS_OK;
    conn->errstr[0] = 0;
    conn->gen = 0;
    struct timeval cto = ms_tv(rcfg->connect_timeout_ms);
    /* With Sentinel the address is the sentinels' answer; it is all that
     * changes here (sentinel.c). */
    const char *host = rcfg->host, *addr = addr_text;
    int port = rcfg->port;
    struct dm_primary primary;
    char primary_text[sizeof addr_text + 64];
    if (dm_sentinel_enabled()) {
        char why[DM_ERR_MAX];
        int answered;
        if (dm_sentinel_primary(&primary, why, sizeof why, &answered) != 0) {
            /* No sentinel could be reached: no connection could be made.
             * One answered without an address: a wrong master name, not
             * an outage. */
            set_err(conn, answered ? DM_REDIS_REPLY_ERROR : DM_REDIS_NOCONN, "redis: %s", why);
            return -1;
        }
        host = primary.host;
        port = primary.port;
        conn->gen = primary.gen;
        snprintf(primary_text, sizeof primary_text, "%s:%d (primary of %s)", host, port,
                 rcfg->master);
        addr = primary_text;
    }
    redisContext *c = rcfg->unix_path && !dm_sentinel_enabled()
                          ? redisConnectUnixWithTimeout(rcfg->unix_path, cto)
                          : redisConnectWithTimeout(host, port, cto);
    if (!c) {
        set_err(conn, DM_REDIS_NOCONN, "cannot connect to redis at %s: out of memory", addr);
        return -1;
    }
    if (c->err) {
        set_err(conn, DM_REDIS_NOCONN, "cannot connect to redis at %s: %s", addr, c->errstr);
        redisFree(c);
        dm_sentinel_stale(conn->gen);
        return -1;
    }
    redisSetTimeout(c, ms_tv(rcfg->command_timeout_ms));
    if (!rcfg->unix_path)
        redisEnableKeepAlive(c);
    /* From here on the server is there: an error it answers (WRONGPASS,
     * NOPERM, "max number of clients reached", LOADING...) or a request it
     * does not answer in time is not "no connection could be made", the
     * one case on_redis_down = "local" may lock this process alone. */
    char why[400];
    enum dm_redis_err rc = DM_REDIS_OK;
    if (rcfg->password) {
        const char *argv[3] = { "AUTH", rcfg->username ? rcfg->username : rcfg->password,
                                rcfg->password };
        rc = simple_command(c, why, sizeof why, "AUTH", rcfg->username ? 3 : 2, argv);
    }
    if (rc == DM_REDIS_OK && rcfg->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", rcfg->db);
        const char *argv[2] = { "SELECT", db };
        rc = simple_command(c, why, sizeof why, "SELECT", 2, argv);
    }
    if (rc == DM_REDIS_OK && dm_sentinel_enabled())
        rc = check_role(c, why, sizeof why);
    if (rc == DM_REDIS_OK)
        rc = load_scripts(c, why, sizeof why);
    if (rc == DM_REDIS_REPLY_ERROR && strstr(why, ": ") && wrong_node_reply(strstr(why, ": ") + 2))
        rc = DM_REDIS_WRONG_NODE;       /* "AUTH: LOADING ...", "SCRIPT LOAD x.lua: ..." */
    if (rc == DM_REDIS_OK) {
        conn->c = c;
        return 0;
    }
    set_err(conn, rc, "redis at %s: %s", addr, why);
    redisFree(c);
    if (rc == DM_REDIS_WRONG_NODE || rc == DM_REDIS_IO)
        dm_sentinel_stale(conn->gen);
    return -1;
}

void dm_redis_error_keep(struct dm_redis_error *e, const struct dm_conn *conn)
{
    e->err = conn->err;
    memcpy(e->errstr, conn->errstr, sizeof e->errstr);
}

void dm_redis_close(struct dm_conn *conn)
{
    if (conn->c) {
        redisFree(conn->c);
        if (conn->err == DM_REDIS_IO || conn->err == DM_REDIS_WRONG_NODE)
            dm_sentinel_stale(conn->gen);
    }
    conn->c = NULL;
}

int dm_redis_conn_stale(const struct dm_conn *conn)
{
    return dm_sentinel_enabled() && conn->c && conn->gen != dm_sentinel_gen();
}

void dm_redis_on_switch(void (*fn)(void))
{
    dm_sentinel_on_switch(fn);
}

/* What dm_redis_get hands out when it cannot even allocate a connection:
 * never written (every call returns at once on a conn without a context)
 * and never freed. */
static struct dm_conn no_memory = { .c = NULL, .err = DM_REDIS_NOCONN,
                                    .errstr = "out of memory" };

struct dm_conn *dm_redis_get(void)
{
    struct dm_conn *conn;
    for (;;) {
        pthread_mutex_lock(&pool_mu);
        conn = pool_idle;
        if (conn) {
            pool_idle = conn->next;
            pool_nidle--;
        }
        pthread_mutex_unlock(&pool_mu);
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
    dm_redis_connect(conn);
    return conn;
}

void dm_redis_put(struct dm_conn *conn)
{
    if (!conn || conn == &no_memory)
        return;
    if (conn->c && conn->err != DM_REDIS_IO && conn->err != DM_REDIS_WRONG_NODE) {
        pthread_mutex_lock(&pool_mu);
        if (pool_nidle < DM_POOL_IDLE_MAX) {
            conn->next = pool_idle;
            pool_idle = conn;
            pool_nidle++;
            conn = NULL;
        }
        pthread_mutex_unlock(&pool_mu);
    }
    if (conn) {
        dm_redis_close(conn);
        free(conn);
    }
}

#define DM_SCRIPT_ARGS_MAX 16

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

static redisReply *check_reply(struct dm_conn *conn, redisReply *r, enum dm_script s)
{
    if (!r) {
        set_err(conn, DM_REDIS_IO, "redis at %s: %s", dm_redis_addr(),
                conn->c->err ? conn->c->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        set_err(conn, wrong_node_reply(r->str) ? DM_REDIS_WRONG_NODE : DM_REDIS_REPLY_ERROR,
                "redis at %s: %s.lua: %s", dm_redis_addr(), script_name[s], r->str);
        freeReplyObject(r);
        return NULL;
    }
    conn->err = DM_REDIS_OK;
    conn->errstr[0] = 0;
    return r;
}

static int is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

redisReply *dm_redis_script(struct dm_conn *conn, enum dm_script s, int nkeys, int nargs,
                            const char *const *args)
{
    if (!conn->c)
        return NULL;    /* not connected: its DM_REDIS_NOCONN stays */
    const char *argv[DM_SCRIPT_ARGS_MAX + 3];
    char nk[12];
    int argc = build_argv(argv, s, !script_sha[s][0], nkeys, nargs, args, nk);
    redisReply *r = redisCommandArgv(conn->c, argc, argv, NULL);
    if (is_noscript(r)) {
        freeReplyObject(r);
        argc = build_argv(argv, s, 1, nkeys, nargs, args, nk);
        r = redisCommandArgv(conn->c, argc, argv, NULL);
    }
    return check_reply(conn, r, s);
}

int dm_redis_append_script(struct dm_conn *conn, enum dm_script s, int nkeys, int nargs,
                           const char *const *args)
{
    if (!conn->c)
        return -1;
    const char *argv[DM_SCRIPT_ARGS_MAX + 3];
    char nk[12];
    int argc = build_argv(argv, s, !script_sha[s][0], nkeys, nargs, args, nk);
    return redisAppendCommandArgv(conn->c, argc, argv, NULL) == REDIS_OK ? 0 : -1;
}

redisReply *dm_redis_pipeline_reply(struct dm_conn *conn, enum dm_script s)
{
    if (!conn->c)
        return NULL;
    redisReply *r = NULL;
    if (redisGetReply(conn->c, (void **)&r) != REDIS_OK)
        r = NULL;
    if (is_noscript(r)) {
        freeReplyObject(r);
        set_err(conn, DM_REDIS_NOSCRIPT, "NOSCRIPT");
        return NULL;
    }
    return check_reply(conn, r, s);
}

int dm_redis_is_primary(struct dm_conn *conn)
{
    if (!dm_sentinel_enabled())
        return 1;
    if (!conn->c)
        return -1;
    char why[400];
    enum dm_redis_err rc = check_role(conn->c, why, sizeof why);
    if (rc == DM_REDIS_OK)
        return 1;
    set_err(conn, rc, "redis at %s: %s", dm_redis_addr(), why);
    if (rc == DM_REDIS_WRONG_NODE)
        dm_sentinel_stale(conn->gen);
    return rc == DM_REDIS_WRONG_NODE ? 0 : -1;
}

long dm_redis_wait(struct dm_conn *conn, int n, long timeout_ms)
{
    if (!conn->c)
        return -1;
    /* The server answers WAIT after up to timeout_ms: the reply may come
     * that much later than a command's. */
    redisSetTimeout(conn->c, ms_tv(timeout_ms + rcfg->command_timeout_ms));
    redisReply *r = redisCommand(conn->c, "WAIT %d %ld", n, timeout_ms);
    if (!conn->c->err)
        redisSetTimeout(conn->c, ms_tv(rcfg->command_timeout_ms));
    if (!r) {
        set_err(conn, DM_REDIS_IO, "redis at %s: WAIT: %s", dm_redis_addr(),
                conn->c->err ? conn->c->errstr : "no reply");
        return -1;
    }
    long v = -1;
    if (r->type == REDIS_REPLY_INTEGER)
        v = (long)r->integer;
    else
        set_err(conn, r->type == REDIS_REPLY_ERROR && wrong_node_reply(r->str) ? DM_REDIS_WRONG_NODE
                      : r->type == REDIS_REPLY_ERROR ? DM_REDIS_REPLY_ERROR : DM_REDIS_BAD_REPLY,
                "redis at %s: WAIT: %s", dm_redis_addr(),
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return v;
}

/* Fork: startup's prepare handler holds pool_mu across fork() (see the lock
 * order in startup.c); the parent lets go, the child makes it anew.
 * sentinel's mutex is a leaf, taken last. */
void dm_redis_atfork_prepare(void)
{
    pthread_mutex_lock(&pool_mu);
    dm_sentinel_atfork_prepare();
}

void dm_redis_atfork_parent(void)
{
    dm_sentinel_atfork_parent();
    pthread_mutex_unlock(&pool_mu);
}

void dm_redis_atfork_child(void)
{
    /* The pool mutex may have been held by a parent thread at fork. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&pool_mu, &fresh, sizeof fresh);
    dm_sentinel_atfork_child();
    while (pool_idle) {
        struct dm_conn *next = pool_idle->next;
        redisFree(pool_idle->c);    /* close(2) only: nothing is sent */
        free(pool_idle);
        pool_idle = next;
    }
    pool_nidle = 0;
}
