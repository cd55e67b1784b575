/* locks: the server's view of a namespace's locks, for ls and top (see
 * locks.h). Every key name comes from shim/redis/keys.c. */
#include "locks.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "keys.h"
#include "redis.h"

struct dm_locks_conn {
    struct dm_config cfg;
    struct dm_conn conn;
    const char *ns;
};

char *dm_locks_key(const char *ns, const char *nm, int k)
{
    size_t n = dm_keys_build(NULL, 0, ns, nm, (enum dm_key)k) + 1;
    char *key = malloc(n);
    if (key)
        dm_keys_build(key, n, ns, nm, (enum dm_key)k);
    return key;
}

int dm_locks_connect(const char *cmd, const char *cfg_path, const char *url, const char *ns,
                     struct dm_locks_conn **out)
{
    struct dm_locks_conn *lc = calloc(1, sizeof *lc);
    if (!lc) {
        fprintf(stderr, "dmutex %s: out of memory\n", cmd);
        return 1;
    }
    if (cfg_path) {
        if (dm_cli_load_config(cfg_path, &lc->cfg) != 0) {
            free(lc);
            return DM_EX_CONFIG;
        }
    } else {
        dm_config_defaults(&lc->cfg);
    }
    char what[64];
    snprintf(what, sizeof what, "dmutex %s: ", cmd);
    if (url && *url && dm_cli_set_redis_url(&lc->cfg, what, url) != 0) {
        dm_config_free(&lc->cfg);
        free(lc);
        return 2;
    }
    lc->ns = ns ? ns : lc->cfg.ns;
    dm_redis_setup(&lc->cfg.redis);
    if (dm_redis_connect(&lc->conn) != 0) {
        fprintf(stderr, "dmutex %s: %s\n", cmd, lc->conn.errstr);
        dm_config_free(&lc->cfg);
        free(lc);
        return 1;
    }
    *out = lc;
    return 0;
}

struct dm_conn *dm_locks_conn(struct dm_locks_conn *lc) { return &lc->conn; }
const char *dm_locks_ns(struct dm_locks_conn *lc) { return lc->ns; }
const struct dm_config *dm_locks_config(struct dm_locks_conn *lc) { return &lc->cfg; }

void dm_locks_disconnect(struct dm_locks_conn *lc)
{
    if (!lc)
        return;
    dm_redis_close(&lc->conn);
    dm_config_free(&lc->cfg);
    free(lc);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every name with a token key: SCAN for ns:{*}:token. */
static int scan_names(struct dm_conn *conn, const char *ns, char ***out, size_t *nout, char *err,
                      size_t errlen)
{
    char **names = NULL;
    size_t n = 0, cap = 0;
    char cursor[32] = "0";
    char *match = dm_locks_key(ns, "*", DM_KEY_TOKEN);
    int rc = 0;
    do {
        redisReply *r = match ? dm_redis_command(conn, "SCAN %s MATCH %s COUNT 1000", cursor,
                                                 match)
                              : NULL;
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (!match)
                snprintf(err, errlen, "out of memory");
            else if (!r)
                snprintf(err, errlen, "%s", conn->errstr);
            else
                snprintf(err, errlen, "redis at %s: SCAN: unexpected reply", dm_redis_addr());
            if (r)
                freeReplyObject(r);
            rc = -1;
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements && rc == 0; i++) {
            const char *name;
            size_t namelen;
            if (!dm_keys_name(keys->element[i]->str, keys->element[i]->len, ns, DM_KEY_TOKEN,
                              &name, &namelen))
                continue;
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 64;
                char **nn = realloc(names, ncap * sizeof *nn);
                if (!nn) {
                    snprintf(err, errlen, "out of memory");
                    rc = -1;
                    break;
                }
                names = nn;
                cap = ncap;
            }
            if (!(names[n] = strndup(name, namelen))) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
                break;
            }
            n++;
        }
        freeReplyObject(r);
    } while (rc == 0 && strcmp(cursor, "0") != 0);
    free(match);
    if (rc != 0) {
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        return -1;
    }
    qsort(names, n, sizeof *names, by_name);
    *out = names;
    *nout = n;
    return 0;
}

/* One lock's keys, pipelined: eight commands, eight replies (the last two:
 * an rwlock's read holders, none for a mutex). */
enum { Q_HOLD, Q_PTTL, Q_TOKEN, Q_MARKER, Q_SUBS, Q_QUEUE, Q_READERS, Q_RPTTL, Q_COUNT };

static int read_row(struct dm_conn *conn, const char *ns, char *nm, struct dm_lock_row *row,
                    char *err, size_t errlen)
{
    /* A cluster's notices are sharded: their subscribers are counted by
     * SHARDNUMSUB, on the node of the channel's slot. */
    const char *subs_fmt = dm_redis_cluster() ? "PUBSUB SHARDNUMSUB %s" : "PUBSUB NUMSUB %s";
    static const struct { const char *fmt; enum dm_key k; } q[Q_COUNT] = {
        [Q_HOLD] = { "HGETALL %s", DM_KEY_LOCK }, [Q_PTTL] = { "PTTL %s", DM_KEY_LOCK },
        [Q_TOKEN] = { "GET %s", DM_KEY_TOKEN }, [Q_MARKER] = { "GET %s", DM_KEY_HOLDER },
        [Q_SUBS] = { "PUBSUB NUMSUB %s", DM_KEY_RELEASED }, [Q_QUEUE] = { "LLEN %s", DM_KEY_QUEUE },
        [Q_READERS] = { "ZCARD %s", DM_KEY_READERS }, [Q_RPTTL] = { "PTTL %s", DM_KEY_READERS },
    };
    redisReply *r[Q_COUNT] = { 0 };
    int rc = 0;
    for (int i = 0; i < Q_COUNT; i++) {
        char *key = dm_locks_key(ns, nm, q[i].k);
        int a = key ? dm_redis_append_command(conn, i == Q_SUBS ? subs_fmt : q[i].fmt, key) : -1;
        free(key);
        if (a != 0) {
            snprintf(err, errlen, "%s", key ? conn->errstr : "out of memory");
            return -1;
        }
    }
    for (int i = 0; i < Q_COUNT; i++) {
        r[i] = dm_redis_pipeline_next(conn);
        if (!r[i] && conn->err == DM_REDIS_REPLY_ERROR) {
            /* the pipe is still in step: read the rest */
            if (rc == 0)
                snprintf(err, errlen, "lock %s: %s", nm, conn->errstr);
            rc = -1;
        } else if (!r[i]) {
            snprintf(err, errlen, "%s", conn->errstr);
            rc = -1;
            break;
        }
    }
    if (rc == 0) {
        memset(row, 0, sizeof *row);
        row->name = nm;
        row->state = "free";
        row->lease_ms = -1;
        redisReply *hold = r[Q_HOLD], *marker = r[Q_MARKER];
        if (hold->type == REDIS_REPLY_ARRAY && hold->elements >= 2) {
            row->owner = strdup(hold->element[0]->str);
            row->holds = strdup(hold->element[1]->str);
            row->state = "held";
        } else if (marker->type == REDIS_REPLY_STRING) {
            /* the marker says how the last grant ended */
            struct dm_holder m;
            dm_keys_holder_decode(marker->str, &m);
            if (m.state == DM_HOLDER_EXPIRY_SEEN || m.state == DM_HOLDER_KEPT_OFF)
                row->state = "delayed";
            else if (m.state == DM_HOLDER_GRANTED)
                row->state = "expired";
            else if (m.state == DM_HOLDER_FORCED)
                row->state = "forced";
        }
        if (r[Q_PTTL]->type == REDIS_REPLY_INTEGER && r[Q_PTTL]->integer >= 0)
            row->lease_ms = r[Q_PTTL]->integer;
        if (r[Q_READERS]->type == REDIS_REPLY_INTEGER && r[Q_READERS]->integer > 0 &&
            row->state[0] != 'h') {
            row->readers = r[Q_READERS]->integer;
            row->state = "read";
            if (r[Q_RPTTL]->type == REDIS_REPLY_INTEGER && r[Q_RPTTL]->integer >= 0)
                row->lease_ms = r[Q_RPTTL]->integer;
        }
        if (r[Q_TOKEN]->type == REDIS_REPLY_STRING)
            row->token = strdup(r[Q_TOKEN]->str);
        if (r[Q_SUBS]->type == REDIS_REPLY_ARRAY && r[Q_SUBS]->elements == 2)
            row->listening = r[Q_SUBS]->element[1]->integer;
        if (r[Q_QUEUE]->type == REDIS_REPLY_INTEGER)
            row->waiters = r[Q_QUEUE]->integer;
        if ((row->state[0] == 'h' && (!row->owner || !row->holds)) ||
            (r[Q_TOKEN]->type == REDIS_REPLY_STRING && !row->token)) {
            snprintf(err, errlen, "out of memory");
            free(row->owner);
            free(row->holds);
            free(row->token);
            rc = -1;
        }
    }
    for (int i = 0; i < Q_COUNT; i++)
        if (r[i])
            freeReplyObject(r[i]);
    return rc;
}

/* Redis Cluster: the names of every primary, sorted. */
static int scan_cluster(const char *ns, char ***out, size_t *nout, char *err, size_t errlen)
{
    int nodes[DM_REDIS_NODES_MAX];
    int np = dm_redis_primaries(nodes, DM_REDIS_NODES_MAX, err, errlen);
    if (np < 0)
        return -1;
    char **all = NULL;
    size_t n = 0;
    for (int i = 0; i < np; i++) {
        struct dm_conn *conn = dm_redis_get_node(nodes[i]);
        char **names;
        size_t count;
        int rc = conn->c ? scan_names(conn, ns, &names, &count, err, errlen) : -1;
        if (!conn->c)
            snprintf(err, errlen, "%s", conn->errstr);
        dm_redis_put(conn);
        char **grown = rc == 0 ? realloc(all, (n + count + 1) * sizeof *all) : NULL;
        if (rc == 0 && !grown) {
            snprintf(err, errlen, "out of memory");
            for (size_t j = 0; j < count; j++)
                free(names[j]);
            free(names);
        }
        if (!grown) {
            for (size_t j = 0; j < n; j++)
                free(all[j]);
            free(all);
            return -1;
        }
        all = grown;
        memcpy(all + n, names, count * sizeof *names);
        n += count;
        free(names);
    }
    qsort(all, n, sizeof *all, by_name);
    *out = all;
    *nout = n;
    return 0;
}

int dm_locks_read(struct dm_conn *conn, const char *ns, struct dm_lock_row **rows, size_t *n,
                  char *err, size_t errlen)
{
    char **names;
    size_t count;
    int cluster = dm_redis_cluster();
    if ((cluster ? scan_cluster(ns, &names, &count, err, errlen)
                 : scan_names(conn, ns, &names, &count, err, errlen)) != 0)
        return -1;
    struct dm_lock_row *out = calloc(count ? count : 1, sizeof *out);
    if (!out) {
        snprintf(err, errlen, "out of memory");
        for (size_t i = 0; i < count; i++)
            free(names[i]);
        free(names);
        return -1;
    }
    size_t done = 0;
    for (; done < count; done++) {
        if (!cluster) {
            if (read_row(conn, ns, names[done], &out[done], err, errlen) != 0)
                break;
            continue;
        }
        char *key = dm_locks_key(ns, names[done], DM_KEY_LOCK);
        struct dm_conn *nc = key ? dm_redis_get_key(key) : NULL;
        free(key);
        int rc = nc && nc->c ? read_row(nc, ns, names[done], &out[done], err, errlen) : -1;
        if (nc && !nc->c)
            snprintf(err, errlen, "%s", nc->errstr);
        else if (!nc)
            snprintf(err, errlen, "out of memory");
        if (rc == 0 && !(out[done].node = strdup(dm_redis_conn_addr(nc)))) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
        dm_redis_put(nc);
        if (rc != 0) {
            if (out[done].name)
                done++;     /* read, then out of memory: its row owns its name now */
            break;
        }
    }
    if (done < count) {
        for (size_t i = done; i < count; i++)
            free(names[i]);
        dm_locks_free(out, done);
        free(names);
        return -1;
    }
    free(names);
    *rows = out;
    *n = count;
    return 0;
}

void dm_locks_free(struct dm_lock_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(rows[i].name);
        free(rows[i].owner);
        free(rows[i].holds);
        free(rows[i].token);
        free(rows[i].node);
    }
    free(rows);
}
