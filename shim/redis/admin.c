/* admin: the Redis store's calls for the tools (store.h: admin_*):
 * `dmutex ls` and `top` read a namespace's locks (SCAN for the token keys,
 * then each lock's keys pipelined; with Redis Cluster every primary is
 * scanned and each lock read on the node of its slot), `dmutex unlock`
 * runs force.lua, `dmutex fresh` writes NS:intact, and the hidden `dmutex
 * keys` prints key names for the shell tests. One connection of the
 * tool's, made by admin_connect. Every key name comes from keys.c. */
#include "admin.h"
#include "lock.h"
#include "lock_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "keys.h"
#include "lua_scripts.h"
#include "redis.h"

static struct dm_conn tool_conn;

/* Key `k` of lock `nm`, malloc'ed (NULL out of memory). */
static char *key_of(const char *ns, const char *nm, enum dm_key k)
{
    size_t n = dm_keys_build(NULL, 0, ns, nm, k) + 1;
    char *key = malloc(n);
    if (key)
        dm_keys_build(key, n, ns, nm, k);
    return key;
}

int dm_admin_connect(char *err, size_t errlen)
{
    if (dm_redis_connect(&tool_conn) == 0)
        return 0;
    snprintf(err, errlen, "%s", tool_conn.errstr);
    return -1;
}

void dm_admin_disconnect(void)
{
    dm_redis_close(&tool_conn);
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
    char *match = key_of(ns, "*", DM_KEY_TOKEN);
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
        char *key = key_of(ns, nm, q[i].k);
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

int dm_admin_list(const char *ns, struct dm_lock_row **rows, size_t *n, char *err, size_t errlen)
{
    struct dm_conn *conn = &tool_conn;
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
        char *key = key_of(ns, names[done], DM_KEY_LOCK);
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
        dm_store_rows_free(out, done);
        free(names);
        return -1;
    }
    free(names);
    *rows = out;
    *n = count;
    return 0;
}

int dm_admin_partner(const char *name, int protocol, struct dm_lock_row *row, char *err,
                     size_t errlen)
{
    memset(row, 0, sizeof *row);
    row->lease_ms = -1;
    int redisson = protocol == DM_PROTOCOL_REDISSON;
    if (protocol != DM_PROTOCOL_SETNX && !redisson) {
        snprintf(err, errlen, "lock %s: protocol %d is not one the tools read", name, protocol);
        return -1;
    }
    /* setnx: a string holding the holder's token; redisson: a hash, the
     * holder's field -> its hold count (Redisson's RLock). The read that
     * is not the key's type answers WRONGTYPE: ignored. */
    const char *want = redisson ? "hash" : "string";
    struct dm_conn *conn = dm_redis_cluster() ? dm_redis_get_key(name) : &tool_conn;
    redisReply *r[3] = { 0 };
    int rc = conn->c ? 0 : -1;
    if (rc == 0 && (dm_redis_append_command(conn, "TYPE %s", name) != 0 ||
                    dm_redis_append_command(conn, redisson ? "HGETALL %s" : "GET %s", name) != 0 ||
                    dm_redis_append_command(conn, "PTTL %s", name) != 0))
        rc = -1;
    for (int i = 0; i < 3 && rc == 0; i++)
        if (!(r[i] = dm_redis_pipeline_next(conn)) && conn->err != DM_REDIS_REPLY_ERROR)
            rc = -1;
    if (rc != 0) {
        snprintf(err, errlen, "lock %s: %s", name, conn->errstr);
    } else {
        const char *type = r[0] && r[0]->type == REDIS_REPLY_STATUS ? r[0]->str : "?";
        row->name = strdup(name);
        row->protocol = redisson ? "redisson" : "setnx";
        row->state = strcmp(type, "none") == 0 ? "free" : strcmp(type, want) == 0 ? "held"
                   : "other";
        const char *holder = NULL, *count = "1";
        if (row->state[0] == 'h' && r[1] && r[1]->type == REDIS_REPLY_STRING)
            holder = r[1]->str;
        if (row->state[0] == 'h' && r[1] && r[1]->type == REDIS_REPLY_ARRAY &&
            r[1]->elements >= 2) {
            holder = r[1]->element[0]->str;     /* one holder: a reentrant hold is its count */
            count = r[1]->element[1]->str;
        }
        if (holder)
            row->owner = strdup(holder);
        if (row->state[0] == 'h' && r[2] && r[2]->type == REDIS_REPLY_INTEGER && r[2]->integer >= 0)
            row->lease_ms = r[2]->integer;
        if (!row->name || (holder && !row->owner)) {
            free(row->name);
            free(row->owner);
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
        if (rc == 0 && row->owner && !(row->holds = strdup(count))) {
            free(row->name);
            free(row->owner);
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
        if (rc == 0 && dm_redis_cluster() && !(row->node = strdup(dm_redis_conn_addr(conn)))) {
            free(row->name);
            free(row->owner);
            free(row->holds);
            snprintf(err, errlen, "out of memory");
            rc = -1;
        }
    }
    for (int i = 0; i < 3; i++)
        if (r[i])
            freeReplyObject(r[i]);
    if (dm_redis_cluster())
        dm_redis_put(conn);
    return rc;
}

/* Appends s (malloc'ed) to *v; -1 out of memory (s freed). */
static int push(char ***v, size_t *n, size_t *cap, char *s)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        char **nv = realloc(*v, c * sizeof *nv);
        if (!nv) {
            free(s);
            return -1;
        }
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = s;
    return 0;
}

/* Does record text name the process its key NS:who:{ID} names ("id\tID"
 * line)? A record is text anyone with the namespace's rights can write:
 * one may not speak for another process. */
static int who_names_key(const char *text, const char *key)
{
    const char *o = strrchr(key, '{');
    size_t klen = strlen(key);
    if (!o || klen < 2 || key[klen - 1] != '}')
        return 0;
    char want[DM_OWNER_MAX + 8];
    int n = snprintf(want, sizeof want, "\nid\t%.*s\n", (int)(key + klen - 1 - o - 1), o + 1);
    return n > 0 && (size_t)n < sizeof want && strstr(text, want) != NULL;
}

/* The record keys on conn's node: SCAN MATCH NS:who:{*}. */
static int scan_who(struct dm_conn *conn, const char *match, char ***keys, size_t *n, size_t *cap,
                    char *err, size_t errlen)
{
    char cursor[32] = "0";
    do {
        redisReply *r = dm_redis_command(conn, "SCAN %s MATCH %s COUNT 1000", cursor, match);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            snprintf(err, errlen, "%s", r ? "SCAN: unexpected reply" : conn->errstr);
            if (r)
                freeReplyObject(r);
            return -1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++) {
            char *k = strdup(r->element[1]->element[i]->str);
            if (!k || push(keys, n, cap, k) != 0) {
                snprintf(err, errlen, "out of memory");
                freeReplyObject(r);
                return -1;
            }
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return 0;
}

int dm_admin_who(const char *ns, char ***texts, size_t *n, char *err, size_t errlen)
{
    char match[DM_NAME_MAX + 16];
    dm_keys_who(match, sizeof match, ns, "*");
    char **keys = NULL, **out = NULL;
    size_t nk = 0, capk = 0, no = 0, capo = 0;
    int rc = 0;
    if (dm_redis_cluster()) {
        int nodes[DM_REDIS_NODES_MAX];
        int np = dm_redis_primaries(nodes, DM_REDIS_NODES_MAX, err, errlen);
        rc = np < 0 ? -1 : 0;
        for (int i = 0; i < np && rc == 0; i++) {
            struct dm_conn *conn = dm_redis_get_node(nodes[i]);
            rc = conn->c ? scan_who(conn, match, &keys, &nk, &capk, err, errlen) : -1;
            if (!conn->c)
                snprintf(err, errlen, "%s", conn->errstr);
            dm_redis_put(conn);
        }
    } else {
        rc = scan_who(&tool_conn, match, &keys, &nk, &capk, err, errlen);
    }
    for (size_t i = 0; i < nk && rc == 0; i++) {
        struct dm_conn *conn = dm_redis_cluster() ? dm_redis_get_key(keys[i]) : &tool_conn;
        redisReply *r = conn->c ? dm_redis_command(conn, "GET %s", keys[i]) : NULL;
        if (!r && conn->err != DM_REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "%s", conn->errstr);
            rc = -1;
        } else if (r && r->type == REDIS_REPLY_STRING && who_names_key(r->str, keys[i])) {
            /* expired since the SCAN: nil; another type, or a text naming
             * another process than its key: not ours, skipped */
            char *t = strdup(r->str);
            if (!t || push(&out, &no, &capo, t) != 0) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
            }
        }
        if (r)
            freeReplyObject(r);
        if (dm_redis_cluster())
            dm_redis_put(conn);
    }
    for (size_t i = 0; i < nk; i++)
        free(keys[i]);
    free(keys);
    if (rc != 0) {
        for (size_t i = 0; i < no; i++)
            free(out[i]);
        free(out);
        return -1;
    }
    *texts = out;
    *n = no;
    return 0;
}

/* force.lua's first element. */
enum force_reply { FORCE_REFUSED = 0,   /* {0, owner, pttl, token}: the lease is alive */
                   FORCE_RELEASED = 1,  /* {1, owner, old token, new token, next waiter, its token} */
                   FORCE_NOT_HELD = 2   /* {2, holder marker} */ };

static enum dm_last_end last_end_of(const char *marker)
{
    struct dm_holder m;
    if (!*marker)
        return DM_LAST_NONE;
    dm_keys_holder_decode(marker, &m);
    switch (m.state) {
    case DM_HOLDER_GRANTED: return DM_LAST_EXPIRED;
    case DM_HOLDER_EXPIRY_SEEN: return DM_LAST_EXPIRY_SEEN;
    case DM_HOLDER_KEPT_OFF: return DM_LAST_KEPT_OFF;
    case DM_HOLDER_FORCED: return DM_LAST_FORCED;
    default: return DM_LAST_NONE;
    }
}

/* force.lua's reply into *out; 0, or -1 (err: an unexpected reply). */
static int force_read(const redisReply *rep, const char *name, struct dm_force *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2) {
    } else if (rep->element[0]->integer == FORCE_REFUSED && rep->elements == 4) {
        out->verdict = DM_FORCE_REFUSED;
        snprintf(out->owner, sizeof out->owner, "%s", rep->element[1]->str);
        snprintf(out->token, sizeof out->token, "%s", rep->element[3]->str);
        out->lease_left_ms = rep->element[2]->integer;
        return 0;
    } else if (rep->element[0]->integer == FORCE_NOT_HELD) {
        out->verdict = DM_FORCE_NOT_HELD;
        out->last = last_end_of(rep->element[1]->str ? rep->element[1]->str : "");
        return 0;
    } else if (rep->element[0]->integer == FORCE_RELEASED && rep->elements == 6) {
        out->verdict = DM_FORCE_RELEASED;
        snprintf(out->owner, sizeof out->owner, "%s", rep->element[1]->str);
        snprintf(out->token, sizeof out->token, "%s", rep->element[2]->str);
        out->new_token = rep->element[3]->integer;
        snprintf(out->next, sizeof out->next, "%s", rep->element[4]->str);
        out->next_token = rep->element[5]->integer;
        return 0;
    }
    snprintf(err, errlen, "lock %s at %s: unexpected reply from force.lua", name, dm_redis_addr());
    return -1;
}

int dm_admin_force(const char *ns, const char *name, int force, const char *who,
                   struct dm_force *out, char *err, size_t errlen)
{
    static const enum dm_key kk[] = { DM_KEY_LOCK, DM_KEY_HOLDER, DM_KEY_TOKEN, DM_KEY_QUEUE,
                                      DM_KEY_QTIME, DM_KEY_LOST, DM_KEY_FORCED, DM_KEY_EPOCH };
    enum { NK = sizeof kk / sizeof kk[0] };
    char *keys[NK + 2] = { 0 };
    int oom = 0;
    for (int i = 0; i < NK; i++)
        oom |= !(keys[i] = key_of(ns, name, kk[i]));
    oom |= !(keys[NK] = key_of(ns, name, DM_KEY_RELEASED));
    oom |= !(keys[NK + 1] = key_of(ns, name, DM_KEY_WAIT));
    char keep[24], nkeys[8];
    /* also the lease of a handover: the whole lease, as the shim's release gives it */
    snprintf(keep, sizeof keep, "%ld", rl_cfg->lease_ms);
    snprintf(nkeys, sizeof nkeys, "%d", NK);
    redisReply *rep = NULL;
    struct dm_conn *conn = &tool_conn;
    if (!oom) {
        const char *args[3 + NK + 9] = { "EVAL", dm_lua_force, nkeys };
        for (int i = 0; i < NK; i++)
            args[3 + i] = keys[i];
        /* ARGV[8]: a cluster's waiters hear sharded notices only; ARGV[9]:
         * the run the connection reached (set before each call), so that a
         * handover leaves an epoch of this run as it is */
        const char *av[] = { force ? "1" : "0", who, keys[NK], keep, keys[NK + 1], keep,
                             DM_KEYS_LOST_KEEP, dm_redis_cluster() ? "spublish" : "", "" };
        memcpy(args + 3 + NK, av, sizeof av);
        enum { RUNID_ARG = 3 + NK + 8 };
        int argn = (int)(sizeof args / sizeof args[0]);
        if (dm_redis_cluster()) {
            /* Redis Cluster: the script runs on the primary of the lock's slot. */
            int node = dm_redis_node_of(dm_redis_slot(keys[0]));
            dm_redis_close(conn);
            if (node < 0 || dm_redis_connect_node(conn, node) != 0) {
                if (node < 0)
                    snprintf(conn->errstr, sizeof conn->errstr, "redis cluster: no node owns "
                             "the slot of %s", keys[0]);
                argn = 0;
            }
        }
        args[RUNID_ARG] = conn->run_id;
        rep = argn ? dm_redis_command_argv(conn, "force.lua", argn, args) : NULL;
        if (!rep && argn && conn->err == DM_REDIS_WRONG_NODE && !dm_redis_cluster()) {
            /* Sentinel: the node is no longer the primary and nothing ran.
             * Closing it makes the next connect ask the sentinels again:
             * one more try on the primary they name now. */
            dm_redis_close(conn);
            if (dm_redis_connect(conn) == 0) {
                args[RUNID_ARG] = conn->run_id;
                rep = dm_redis_command_argv(conn, "force.lua", argn, args);
            }
        }
    }
    int rc = -1;
    if (oom)
        snprintf(err, errlen, "out of memory");
    else if (!rep)
        snprintf(err, errlen, "lock %s: %s", name, conn->errstr);
    else
        rc = force_read(rep, name, out, err, errlen);
    if (rep)
        freeReplyObject(rep);
    for (int i = 0; i < NK + 2; i++)
        free(keys[i]);
    return rc;
}

/* ARGV[1] "durable" or "": the marker's value, or the server's run_id. */
static const char fresh_lua[] =
    "local id = ARGV[1]\n"
    "if id == '' then id = string.match(redis.call('info', 'server'), 'run_id:(%x+)') end\n"
    "redis.call('set', KEYS[1], id)\n"
    "return id\n";

/* --durable: appendonly yes and appendfsync always, by CONFIG GET on conn;
 * 0, or -1 with the reason in err. */
static int durable_checked(struct dm_conn *conn, char *err, size_t errlen)
{
    static const char *const want[2][2] = { { "appendonly", "yes" }, { "appendfsync", "always" } };
    for (int i = 0; i < 2; i++) {
        const char *args[] = { "CONFIG", "GET", want[i][0] };
        redisReply *r = dm_redis_command_argv(conn, "fresh", 3, args);
        int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                 r->element[1]->type == REDIS_REPLY_STRING &&
                 strcmp(r->element[1]->str, want[i][1]) == 0;
        if (!ok) {
            char is[DM_ERR_MAX + 32];
            if (!r || r->type == REDIS_REPLY_ERROR)
                snprintf(is, sizeof is, "cannot be read (%s)", r ? r->str : conn->errstr);
            else
                snprintf(is, sizeof is, "is not %s", want[i][1]);
            snprintf(err, errlen, "redis at %s: %s %s: a restart may lose acknowledged "
                     "writes; not declared (set appendonly yes and appendfsync always, or "
                     "declare only this server run: dmutex fresh)", dm_redis_addr(),
                     want[i][0], is);
        }
        if (r)
            freeReplyObject(r);
        if (!ok)
            return -1;
    }
    return 0;
}

int dm_admin_fresh(const char *ns, int durable, char *said, size_t saidlen, char *err,
                   size_t errlen)
{
    if (dm_redis_cluster()) {
        snprintf(err, errlen, "%s is a Redis Cluster, where locks do not wait after a node's "
                 "start (docs/failures.md): nothing to declare", dm_redis_addr());
        return -1;
    }
    if (durable && durable_checked(&tool_conn, err, errlen) != 0)
        return -2;
    size_t len = dm_keys_intact(NULL, 0, ns) + 1;
    char *key = malloc(len);
    redisReply *rep = NULL;
    if (key) {
        dm_keys_intact(key, len, ns);
        const char *args[] = { "EVAL", fresh_lua, "1", key, durable ? "durable" : "" };
        rep = dm_redis_command_argv(&tool_conn, "fresh", 5, args);
    }
    int rc = -1;
    if (!key)
        snprintf(err, errlen, "out of memory");
    else if (!rep)
        snprintf(err, errlen, "%s", tool_conn.errstr);
    else if (rep->type != REDIS_REPLY_STRING)
        snprintf(err, errlen, "%s: unexpected reply", dm_redis_addr());
    else if (durable)
        snprintf(said, saidlen, "redis at %s: declared durable (%s): after a restart its "
                 "locks are granted at once while it writes an AOF", dm_redis_addr(), key);
    else
        snprintf(said, saidlen, "redis at %s (run_id %s): declared to have lost no lock data "
                 "(%s); its locks are granted at once until it restarts", dm_redis_addr(),
                 rep->str, key);
    if (key && rep && rep->type == REDIS_REPLY_STRING)
        rc = 0;
    if (rep)
        freeReplyObject(rep);
    free(key);
    return rc;
}

/* `dmutex keys NS NAME KIND...` and `dmutex keys --release NS NAME` (not
 * in the usage text): lock NAME's keys of those kinds (lock, token,
 * holder...), or release.lua's KEYS in its order, one per line, built by
 * shim/redis/keys.c, so that the shell tests spell no key by hand. */
int dm_admin_keys(int argc, char **argv)
{
    int release = argc >= 2 && strcmp(argv[1], "--release") == 0;
    argc -= release;
    argv += release;
    int n = release ? DM_KEYS_RELEASE_N : argc - 3;
    if (argc < 3 || (release ? argc != 3 : n < 1)) {
        fputs("usage: dmutex keys NS NAME KIND... | dmutex keys --release NS NAME\n", stderr);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        enum dm_key k = release ? dm_keys_release[i] : DM_KEY_LOCK;
        if (!release && dm_keys_kind_parse(argv[3 + i], &k) != 0) {
            fprintf(stderr, "dmutex keys: no key kind '%s'\n", argv[3 + i]);
            return 2;
        }
        size_t len = dm_keys_build(NULL, 0, argv[1], argv[2], k) + 1;
        char *key = malloc(len);
        if (!key) {
            fputs("dmutex keys: out of memory\n", stderr);
            return 1;
        }
        dm_keys_build(key, len, argv[1], argv[2], k);
        puts(key);
        free(key);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
