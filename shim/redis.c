/* redis: the pool of command connections and the script runner. The pool is
 * a stack of idle connections under one mutex: a thread takes one for the
 * length of a command, so a process makes as many connections as it has
 * threads talking to Redis at the same moment, and no more. */
#include "redis.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lua_scripts.h"

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
    if (cfg->unix_path)
        snprintf(addr_text, sizeof addr_text, "%s", cfg->unix_path);
    else
        snprintf(addr_text, sizeof addr_text, "%s:%d", cfg->host, cfg->port);
}

const char *dm_redis_addr(void)
{
    return addr_text;
}

static struct timeval ms_tv(long ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    return tv;
}

/* Loads the scripts (one pipelined round trip) the first time any
 * connection of this process is made. */
static int load_scripts(redisContext *c, char *err, size_t errlen)
{
    if (__atomic_load_n(&script_sha[DM_SCRIPT_COUNT - 1][0], __ATOMIC_ACQUIRE))
        return 0;
    for (int i = 0; i < DM_SCRIPT_COUNT; i++)
        redisAppendCommand(c, "SCRIPT LOAD %s", script_body[i]);
    char sha[DM_SCRIPT_COUNT][41];
    int rc = 0;
    for (int i = 0; i < DM_SCRIPT_COUNT; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
            snprintf(err, errlen, "loading scripts: %s", c->errstr);
            return -1;
        }
        if (r->type == REDIS_REPLY_STRING && r->len == 40) {
            memcpy(sha[i], r->str, 41);
        } else if (!rc) {
            snprintf(err, errlen, "SCRIPT LOAD %s.lua: %s", script_name[i],
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
            rc = -1;
        }
        freeReplyObject(r);
    }
    if (rc == 0) {
        for (int i = 0; i < DM_SCRIPT_COUNT; i++)
            memcpy(script_sha[i], sha[i], 41);
        __atomic_thread_fence(__ATOMIC_RELEASE);
    }
    return rc;
}

static int simple_command(redisContext *c, char *err, size_t errlen, const char *what,
                          int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (!r) {
        snprintf(err, errlen, "%s: %s", what, c->errstr);
        return -1;
    }
    int bad = r->type == REDIS_REPLY_ERROR;
    if (bad)
        snprintf(err, errlen, "%s: %s", what, r->str);
    freeReplyObject(r);
    return bad ? -1 : 0;
}

redisContext *dm_redis_connect(char *err, size_t errlen)
{
    struct timeval cto = ms_tv(rcfg->connect_timeout_ms);
    redisContext *c = rcfg->unix_path ? redisConnectUnixWithTimeout(rcfg->unix_path, cto)
                                      : redisConnectWithTimeout(rcfg->host, rcfg->port, cto);
    if (!c) {
        snprintf(err, errlen, "cannot connect to redis at %s: out of memory", addr_text);
        return NULL;
    }
    if (c->err) {
        snprintf(err, errlen, "cannot connect to redis at %s: %s", addr_text, c->errstr);
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, ms_tv(rcfg->command_timeout_ms));
    if (!rcfg->unix_path)
        redisEnableKeepAlive(c);
    char why[400];
    if (rcfg->password) {
        const char *argv[3] = { "AUTH", rcfg->username ? rcfg->username : rcfg->password,
                                rcfg->password };
        if (simple_command(c, why, sizeof why, "AUTH", rcfg->username ? 3 : 2, argv) != 0)
            goto fail;
    }
    if (rcfg->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", rcfg->db);
        const char *argv[2] = { "SELECT", db };
        if (simple_command(c, why, sizeof why, "SELECT", 2, argv) != 0)
            goto fail;
    }
    if (load_scripts(c, why, sizeof why) != 0)
        goto fail;
    return c;
fail:
    snprintf(err, errlen, "redis at %s: %s", addr_text, why);
    redisFree(c);
    return NULL;
}

struct dm_conn *dm_redis_get(char *err, size_t errlen)
{
    pthread_mutex_lock(&pool_mu);
    struct dm_conn *conn = pool_idle;
    if (conn) {
        pool_idle = conn->next;
        pool_nidle--;
    }
    pthread_mutex_unlock(&pool_mu);
    if (conn)
        return conn;
    redisContext *c = dm_redis_connect(err, errlen);
    if (!c)
        return NULL;
    conn = calloc(1, sizeof *conn);
    if (!conn) {
        redisFree(c);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    conn->c = c;
    return conn;
}

void dm_redis_put(struct dm_conn *conn, int broken)
{
    if (!conn)
        return;
    if (!broken) {
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
        redisFree(conn->c);
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

static redisReply *check_reply(redisContext *c, redisReply *r, enum dm_script s, int *broken,
                               char *err, size_t errlen)
{
    if (!r) {
        *broken = 1;
        snprintf(err, errlen, "redis at %s: %s", addr_text,
                 c->err ? c->errstr : "no reply");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis at %s: %s.lua: %s", addr_text, script_name[s], r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

static int is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

redisReply *dm_redis_script(redisContext *c, enum dm_script s, int nkeys, int nargs,
                            const char *const *args, int *broken, char *err, size_t errlen)
{
    const char *argv[DM_SCRIPT_ARGS_MAX + 3];
    char nk[12];
    *broken = 0;
    int argc = build_argv(argv, s, !script_sha[s][0], nkeys, nargs, args, nk);
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (is_noscript(r)) {
        freeReplyObject(r);
        argc = build_argv(argv, s, 1, nkeys, nargs, args, nk);
        r = redisCommandArgv(c, argc, argv, NULL);
    }
    return check_reply(c, r, s, broken, err, errlen);
}

int dm_redis_append_script(redisContext *c, enum dm_script s, int nkeys, int nargs,
                           const char *const *args)
{
    const char *argv[DM_SCRIPT_ARGS_MAX + 3];
    char nk[12];
    int argc = build_argv(argv, s, !script_sha[s][0], nkeys, nargs, args, nk);
    return redisAppendCommandArgv(c, argc, argv, NULL) == REDIS_OK ? 0 : -1;
}

redisReply *dm_redis_pipeline_reply(redisContext *c, enum dm_script s, int *broken,
                                    int *noscript, char *err, size_t errlen)
{
    redisReply *r = NULL;
    *broken = 0;
    *noscript = 0;
    if (redisGetReply(c, (void **)&r) != REDIS_OK)
        r = NULL;
    if (is_noscript(r)) {
        freeReplyObject(r);
        *noscript = 1;
        snprintf(err, errlen, "NOSCRIPT");
        return NULL;
    }
    return check_reply(c, r, s, broken, err, errlen);
}

/* Fork: startup's prepare handler holds pool_mu across fork() (see the lock
 * order in startup.c); the parent lets go, the child makes it anew. */
void dm_redis_atfork_prepare(void)
{
    pthread_mutex_lock(&pool_mu);
}

void dm_redis_atfork_parent(void)
{
    pthread_mutex_unlock(&pool_mu);
}

void dm_redis_atfork_child(void)
{
    /* The pool mutex may have been held by a parent thread at fork. */
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&pool_mu, &fresh, sizeof fresh);
    while (pool_idle) {
        struct dm_conn *next = pool_idle->next;
        redisFree(pool_idle->c);    /* close(2) only: nothing is sent */
        free(pool_idle);
        pool_idle = next;
    }
    pool_nidle = 0;
}
