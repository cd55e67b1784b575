/* config: reads a libconfig file into a validated struct dm_config. Every
 * problem becomes one sentence "FILE:LINE: what is wrong" in the caller's
 * buffer, naming the key and the bad value; nothing is logged and nothing
 * exits here (the shim decides that). Knows nothing of pthread or Redis: it
 * only carries the server's address and credentials for others to use.
 *
 * Loading is all-or-nothing. The file is checked by a small pre-scan
 * (config_scan.c: NUL bytes, @include, integers libconfig 1.5 would
 * silently truncate, unclosed strings and comments), parsed by libconfig,
 * then walked key by key into a private struct that is only copied to the
 * caller's on success. DMUTEX_REDIS URLs are config_url.c's, the values'
 * syntax and typed access config_value.c's. Default strings point at static
 * storage, so a struct holding only defaults needs no freeing. */
#include "config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libconfig.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

/* redis.tls or etcd.tls = { ca; cert; key; server_name; verify; }
 * (`qual`: "redis." or "etcd.", the group `parent` is): present (even
 * empty) means TLS. Paths are only checked for form here; the files are
 * read at the first connection, whose error names them. */
static int parse_tls(struct parse *p, const config_setting_t *parent, const char *qual,
                     int unix_set, struct dm_tls_config *tls)
{
    config_setting_t *g;
    int has = cfg_group(p, parent, qual, "tls", "{ ca = ...; cert = ...; }", DM_GROUP_TLS, &g);
    if (has <= 0)
        return has;
    if (unix_set)
        return fail(p, cfg_line_of(g), "redis.tls has no meaning with redis.unix: TLS is for TCP");
    struct { int id; int max; int space; char **dst; } s[] = {
        { DM_K_TLS_CA, DM_PATH_MAX, 1, &tls->ca },
        { DM_K_TLS_CERT, DM_PATH_MAX, 1, &tls->cert },
        { DM_K_TLS_KEY, DM_PATH_MAX, 1, &tls->key },
        { DM_K_TLS_SERVER_NAME, DM_HOST_MAX, 0, &tls->server_name },
    };
    const char *v[4] = { NULL };
    unsigned line[4] = { 0 };
    char why[160], q[16];
    struct shown sv;
    snprintf(q, sizeof q, "%stls.", qual);
    for (int i = 0; i < 4; i++) {
        const char *name = dm_config_keys[s[i].id].name;
        if (cfg_get_string(p, g, q, name, &v[i], &line[i]) < 0)
            return -1;
        if (v[i] && !cfg_token_ok(v[i], s[i].max, s[i].space, why, sizeof why))
            return fail(p, line[i], "%s%s = %s: %s", q, name, show(&sv, v[i]), why);
    }
    if (v[2] && !v[1])
        return fail(p, line[2], "%skey needs %scert (the certificate it is the key of)", q, q);
    unsigned lines[DM_NKEYS] = { 0 };
    if (cfg_parse_scalars(p, g, DM_GROUP_TLS, tls, lines) < 0)
        return -1;
    for (int i = 0; i < 4; i++)
        if (v[i] && cfg_dup_into(p, line[i], s[i].dst, v[i]) < 0)
            return -1;
    tls->enabled = 1;
    tls->line = (int)cfg_line_of(g);
    return 0;
}

/* ---- Sentinel ---------------------------------------------------------- */

/* The value of the environment variable `name` that `key` (on `line`)
 * names, as password_env reads it: secure_getenv, set and not empty. */
static int env_secret(struct parse *p, const char *key, const char *name, unsigned line,
                      const char **out)
{
    char why[160];
    struct shown sv;
    if (!cfg_env_name_ok(name, why, sizeof why))
        return fail(p, line, "redis.%s = %s: %s", key, show(&sv, name), why);
    const char *val = secure_getenv(name);
    if (!val && getenv(name))
        return fail(p, line, "redis.%s = %s: environment variable %s is ignored in a "
                    "set-user-ID or set-group-ID process (AT_SECURE)", key, show(&sv, name), name);
    if (!val)
        return fail(p, line, "redis.%s = %s: environment variable %s is not set", key,
                    show(&sv, name), name);
    if (!*val)
        return fail(p, line, "redis.%s = %s: environment variable %s is empty", key,
                    show(&sv, name), name);
    *out = val;
    return 0;
}

int dm_config_endpoint(const char *v, size_t len, int dflt_port, struct dm_endpoint *e,
                       char *why, size_t n)
{
    const char *h = v, *port_s = NULL;
    size_t hlen;
    if (len > 0 && v[0] == '[') {
        const char *close = memchr(v, ']', len);
        if (!close)
            return snprintf(why, n, "an IPv6 address in [ ] has no ']'"), -1;
        h = v + 1;
        hlen = (size_t)(close - h);
        if (close + 1 < v + len) {
            if (close[1] != ':')
                return snprintf(why, n, "expected ':PORT' after ']'"), -1;
            port_s = close + 2;
        }
    } else {
        const char *colon = memchr(v, ':', len);
        if (colon && memchr(colon + 1, ':', (size_t)(v + len - colon - 1)))
            return snprintf(why, n, "write an IPv6 address in brackets: \"[::1]:%d\"",
                            dflt_port), -1;
        hlen = colon ? (size_t)(colon - v) : len;
        port_s = colon ? colon + 1 : NULL;
    }
    if (hlen == 0 || hlen > DM_HOST_MAX)
        return snprintf(why, n, "needs a host (1..%d bytes) as in \"10.0.0.1:%d\"", DM_HOST_MAX,
                        dflt_port), -1;
    for (size_t i = 0; i < hlen; i++)
        if ((unsigned char)h[i] <= 0x20 || h[i] == 0x7f || h[i] == '/' || h[i] == ',')
            return snprintf(why, n, "the host holds a space, a control character, '/' or ','"), -1;
    long port = dflt_port;
    if (port_s) {
        size_t plen = (size_t)(v + len - port_s);
        port = 0;
        /* Stops at the first non-digit (-1) or once past the range. */
        for (size_t i = 0; i < plen && port >= 0 && port <= DM_PORT_MAX; i++)
            port = az_digit((unsigned char)port_s[i]) ? port * 10 + (port_s[i] - '0') : -1;
        if (plen == 0 || port < 1 || port > DM_PORT_MAX)
            return snprintf(why, n, "the port must be a number from 1 to %ld", DM_PORT_MAX), -1;
    }
    e->host = strndup(h, hlen);
    if (!e->host)
        return snprintf(why, n, "out of memory"), -1;
    e->port = (int)port;
    return 0;
}

void dm_config_free_sentinels(struct dm_redis_config *r)
{
    for (size_t i = 0; i < r->nsentinels; i++)
        free(r->sentinels[i].host);
    free(r->sentinels);
    free(r->master);
    free(r->sentinel_username);
    free(r->sentinel_password);
    r->sentinels = NULL;
    r->nsentinels = 0;
    r->master = r->sentinel_username = r->sentinel_password = NULL;
}

void dm_config_free_cluster(struct dm_redis_config *r)
{
    for (size_t i = 0; i < r->ncluster; i++)
        free(r->cluster[i].host);
    free(r->cluster);
    r->cluster = NULL;
    r->ncluster = 0;
}

void dm_config_free_etcd(struct dm_config *cfg)
{
    for (size_t i = 0; i < cfg->etcd.nendpoints; i++)
        free(cfg->etcd.endpoints[i].host);
    free(cfg->etcd.endpoints);
    cfg->etcd.endpoints = NULL;
    cfg->etcd.nendpoints = 0;
    free(cfg->etcd.username);
    free(cfg->etcd.password);
    cfg->etcd.username = cfg->etcd.password = NULL;
    dm_config_free_tls(&cfg->etcd.tls);
}

void dm_config_free_tls(struct dm_tls_config *tls)
{
    free(tls->ca);
    free(tls->cert);
    free(tls->key);
    free(tls->server_name);
    memset(tls, 0, sizeof *tls);
    dm_config_keys_defaults(DM_GROUP_TLS, tls, NULL);
}

int dm_config_etcd_endpoint(const char *v, struct dm_endpoint *e, int *scheme, char *why,
                            size_t len)
{
    *scheme = DM_ETCD_BARE;
    if (strncmp(v, "https://", 8) == 0) {
        v += 8;
        *scheme = DM_ETCD_HTTPS;
    } else if (strncmp(v, "http://", 7) == 0) {
        v += 7;
        *scheme = DM_ETCD_HTTP;
    } else if (strstr(v, "://")) {
        return snprintf(why, len, "an etcd member's client URL starts with http:// or "
                        "https://"), -1;
    }
    size_t n = strlen(v);
    if (n > 0 && v[n - 1] == '/')
        n--;
    return dm_config_endpoint(v, n, DM_ETCD_PORT_DEFAULT, e, why, len);
}

/* The list (or array) `key` of group g (qual: its name for messages,
 * "redis." or ""), with an array of its length allocated in *items:
 * returns its length (0 and *l NULL when it is absent; nothing allocated
 * when it is empty), or -1 after saying that it must be `shape` or that
 * memory ran out. */
static int list_member(struct parse *p, const config_setting_t *g, const char *qual,
                       const char *key, const char *shape, size_t item_size, void **items,
                       config_setting_t **l)
{
    *l = config_setting_get_member(g, key);
    if (!*l)
        return 0;
    if (!config_setting_is_list(*l) && !config_setting_is_array(*l))
        return fail(p, cfg_line_of(*l), "%s%s must be %s, not %s", qual, key, shape, cfg_type_name(*l));
    int n = config_setting_length(*l);
    if (n <= 0)
        return 0;
    *items = calloc((size_t)n, item_size);
    if (!*items)
        return fail(p, cfg_line_of(*l), "out of memory");
    return n;
}

/* sentinels, master and the sentinels' credentials. With sentinels the
 * address of the data node is the sentinels' answer, so host, port and
 * unix have no meaning; master is what to ask them for. */
static int parse_sentinel_keys(struct parse *p, const config_setting_t *g, struct dm_redis_config *r,
                               const unsigned lines[DM_NKEYS])
{
    const char *master = NULL, *user = NULL, *pass = NULL, *pass_env = NULL;
    unsigned master_line = 0, user_line = 0, pass_line = 0, env_line = 0;
    char why[160];
    struct shown sv;
    config_setting_t *l = config_setting_get_member(g, "sentinels");
    if (cfg_get_string(p, g, "redis.", "master", &master, &master_line) < 0
        || cfg_get_string(p, g, "redis.", "sentinel_username", &user, &user_line) < 0
        || cfg_get_string(p, g, "redis.", "sentinel_password", &pass, &pass_line) < 0
        || cfg_get_string(p, g, "redis.", "sentinel_password_env", &pass_env, &env_line) < 0)
        return -1;
    if (!l) {
        unsigned line = master_line ? master_line : user_line ? user_line
                      : pass_line ? pass_line : env_line;
        const char *key = master_line ? "master" : user_line ? "sentinel_username"
                        : pass_line ? "sentinel_password" : "sentinel_password_env";
        if (line)
            return fail(p, line, "redis.%s has no meaning without redis.sentinels", key);
        return 0;
    }
    unsigned line = cfg_line_of(l);
    config_setting_t *other = config_setting_get_member(g, "host");
    if (!other)
        other = config_setting_get_member(g, "unix");
    if (other || lines[DM_K_PORT])
        return fail(p, line, "redis.sentinels and redis.%s (line %u) exclude each other: with "
                    "Sentinel the primary's address is the sentinels' answer",
                    other ? config_setting_name(other) : "port",
                    other ? cfg_line_of(other) : lines[DM_K_PORT]);
    int n = list_member(p, g, "redis.", "sentinels", "a list ( \"host:port\", ... )",
                        sizeof *r->sentinels, (void **)&r->sentinels, &l);
    if (n < 0)
        return -1;
    if (n == 0 || n > DM_SENTINELS_MAX)
        return fail(p, line, "redis.sentinels must name 1 to %d sentinels, not %d",
                    DM_SENTINELS_MAX, n);
    if (!master)
        return fail(p, line, "redis.sentinels needs redis.master, the name the sentinels "
                    "monitor (sentinel monitor NAME ...)");
    if (!cfg_token_ok(master, DM_HOST_MAX, 0, why, sizeof why))
        return fail(p, master_line, "redis.master = %s: %s", show(&sv, master), why);
    if (user && !cfg_token_ok(user, DM_HOST_MAX, 0, why, sizeof why))
        return fail(p, user_line, "redis.sentinel_username = %s: %s", show(&sv, user), why);
    if (pass && pass_env)
        return fail(p, pass_line > env_line ? pass_line : env_line, "redis.sentinel_password "
                    "(line %u) and redis.sentinel_password_env (line %u) exclude each other",
                    pass_line, env_line);
    if (pass && !*pass)
        return fail(p, pass_line, "redis.sentinel_password must not be empty (leave it out "
                    "for no AUTH)");
    if (pass_env && env_secret(p, "sentinel_password_env", pass_env, env_line, &pass) < 0)
        return -1;
    if (user && !pass)
        return fail(p, user_line, "redis.sentinel_username needs redis.sentinel_password or "
                    "redis.sentinel_password_env");
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        const char *v = config_setting_get_string(e);
        if (!v)
            return fail(p, cfg_line_of(e), "redis.sentinels[%d] must be a string \"host:port\", "
                        "not %s", i, cfg_type_name(e));
        if (dm_config_endpoint(v, strlen(v), DM_SENTINEL_PORT_DEFAULT, &r->sentinels[i], why,
                               sizeof why) < 0)
            return fail(p, cfg_line_of(e), "redis.sentinels[%d] = %s: %s", i, show(&sv, v), why);
        r->nsentinels++;
    }
    if (cfg_dup_into(p, master_line, &r->master, master) < 0
        || (user && cfg_dup_into(p, user_line, &r->sentinel_username, user) < 0)
        || (pass && cfg_dup_into(p, pass_line ? pass_line : env_line, &r->sentinel_password, pass) < 0))
        return -1;
    return 0;
}

/* cluster: the seed nodes of a Redis Cluster. The nodes' addresses are
 * the slot map's, so host, port, unix and sentinels have no meaning; a
 * cluster has database 0 only (SELECT of another is refused by every
 * node), so a db is an error here rather than at the first connection. */
static int parse_cluster_keys(struct parse *p, const config_setting_t *g, struct dm_redis_config *r,
                              const unsigned lines[DM_NKEYS])
{
    char why[160];
    struct shown sv;
    config_setting_t *l = config_setting_get_member(g, "cluster");
    if (!l)
        return 0;
    unsigned line = cfg_line_of(l);
    static const char *const others[] = { "host", "unix", "sentinels", "master" };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        config_setting_t *o = config_setting_get_member(g, others[i]);
        if (o)
            return fail(p, line, "redis.cluster and redis.%s (line %u) exclude each other: in "
                        "a cluster the nodes' addresses are the slot map's", others[i], cfg_line_of(o));
    }
    if (lines[DM_K_PORT])
        return fail(p, line, "redis.cluster and redis.port (line %u) exclude each other: give "
                    "each seed as \"host:port\"", lines[DM_K_PORT]);
    if (r->db != 0)
        return fail(p, lines[DM_K_DB] ? lines[DM_K_DB] : line, "redis.db = %d with "
                    "redis.cluster: a Redis Cluster has database 0 only", r->db);
    int n = list_member(p, g, "redis.", "cluster", "a list ( \"host:port\", ... )",
                        sizeof *r->cluster, (void **)&r->cluster, &l);
    if (n < 0)
        return -1;
    if (n == 0 || n > DM_CLUSTER_SEEDS_MAX)
        return fail(p, line, "redis.cluster must name 1 to %d seed nodes, not %d",
                    DM_CLUSTER_SEEDS_MAX, n);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        const char *v = config_setting_get_string(e);
        if (!v)
            return fail(p, cfg_line_of(e), "redis.cluster[%d] must be a string \"host:port\", "
                        "not %s", i, cfg_type_name(e));
        if (dm_config_endpoint(v, strlen(v), DM_REDIS_PORT_DEFAULT, &r->cluster[i], why,
                               sizeof why) < 0)
            return fail(p, cfg_line_of(e), "redis.cluster[%d] = %s: %s", i, show(&sv, v), why);
        r->ncluster++;
    }
    return 0;
}

/* qual + "password_env = NAME": the password from environment variable
 * NAME into *pass (not copied), or -1 with the message. secure_getenv: a
 * set-user-ID process takes no secret from the environment of whoever
 * started it. */
static int password_from_env(struct parse *p, const char *qual, const char *name, unsigned line,
                             const char **pass)
{
    char why[160];
    struct shown sv;
    if (!cfg_env_name_ok(name, why, sizeof why))
        return fail(p, line, "%spassword_env = %s: %s", qual, show(&sv, name), why);
    const char *val = secure_getenv(name);
    if (!val && getenv(name))
        return fail(p, line, "%spassword_env = %s: environment variable %s is ignored in a "
                    "set-user-ID or set-group-ID process (AT_SECURE)", qual, show(&sv, name), name);
    if (!val || !*val)
        return fail(p, line, "%spassword_env = %s: environment variable %s is %s", qual,
                    show(&sv, name), name, val ? "empty" : "not set");
    *pass = val;
    return 0;
}

static int parse_redis(struct parse *p, const config_setting_t *root, struct dm_redis_config *r)
{
    config_setting_t *g;
    int has = cfg_group(p, root, "", "redis", "{ host = ...; port = ...; }", DM_GROUP_REDIS,
                           &g);
    if (has <= 0)
        return has;

    const char *host = NULL, *unix_path = NULL, *user = NULL, *pass = NULL, *pass_env = NULL;
    unsigned host_line = 0, unix_line = 0, user_line = 0, pass_line = 0, env_line = 0;
    char why[160];
    struct shown sv;

    if (cfg_get_string(p, g, "redis.", "host", &host, &host_line) < 0
        || cfg_get_string(p, g, "redis.", "unix", &unix_path, &unix_line) < 0
        || cfg_get_string(p, g, "redis.", "username", &user, &user_line) < 0
        || cfg_get_string(p, g, "redis.", "password", &pass, &pass_line) < 0
        || cfg_get_string(p, g, "redis.", "password_env", &pass_env, &env_line) < 0)
        return -1;

    if (host && unix_path)
        return fail(p, host_line > unix_line ? host_line : unix_line,
                    "redis.host (line %u) and redis.unix (line %u) exclude each other: "
                    "connect over TCP or over a unix socket, not both", host_line, unix_line);
    if (pass && pass_env)
        return fail(p, pass_line > env_line ? pass_line : env_line,
                    "redis.password (line %u) and redis.password_env (line %u) exclude each other",
                    pass_line, env_line);

    if (host && !cfg_token_ok(host, DM_HOST_MAX, 0, why, sizeof why))
        return fail(p, host_line, "redis.host = %s: %s", show(&sv, host), why);
    if (host && strchr(host, '/'))
        return fail(p, host_line, "redis.host = %s: a host name has no '/'; for a socket use redis.unix",
                    show(&sv, host));
    if (host && strpbrk(host, "[]"))
        return fail(p, host_line, "redis.host = %s: write an IPv6 address without brackets, "
                    "as in \"::1\"", show(&sv, host));
    if (unix_path && !cfg_token_ok(unix_path, DM_UNIX_PATH_MAX, 1, why, sizeof why))
        return fail(p, unix_line, "redis.unix = %s: %s", show(&sv, unix_path), why);
    if (user && !cfg_token_ok(user, DM_HOST_MAX, 0, why, sizeof why))
        return fail(p, user_line, "redis.username = %s: %s", show(&sv, user), why);
    if (pass && !*pass)
        return fail(p, pass_line, "redis.password must not be empty (leave it out for no AUTH)");
    if (pass_env) {
        if (password_from_env(p, "redis.", pass_env, env_line, &pass) < 0)
            return -1;
        pass_line = env_line;
    }
    if (user && !pass)
        return fail(p, user_line, "redis.username needs redis.password or redis.password_env");

    unsigned lines[DM_NKEYS] = { 0 };
    if (cfg_parse_scalars(p, g, DM_GROUP_REDIS, r, lines) < 0)
        return -1;

    if (host && cfg_dup_into(p, host_line, &r->host, host) < 0)
        return -1;
    if (unix_path) {
        if (cfg_dup_into(p, unix_line, &r->unix_path, unix_path) < 0)
            return -1;
        r->host = NULL;          /* still the static default: nothing to free */
    }
    if (user && cfg_dup_into(p, user_line, &r->username, user) < 0)
        return -1;
    if (pass && cfg_dup_into(p, pass_line, &r->password, pass) < 0)
        return -1;
    if (parse_tls(p, g, "redis.", r->unix_path != NULL, &r->tls) < 0)
        return -1;
    if (parse_sentinel_keys(p, g, r, lines) < 0)
        return -1;
    return parse_cluster_keys(p, g, r, lines);
}

/* etcd.username, password, password_env: as the redis group's. */
static int parse_etcd_user(struct parse *p, config_setting_t *g, struct dm_etcd_config *e)
{
    const char *user = NULL, *pass = NULL, *pass_env = NULL;
    unsigned user_line = 0, pass_line = 0, env_line = 0;
    char why[160];
    struct shown sv;
    if (cfg_get_string(p, g, "etcd.", "username", &user, &user_line) < 0
        || cfg_get_string(p, g, "etcd.", "password", &pass, &pass_line) < 0
        || cfg_get_string(p, g, "etcd.", "password_env", &pass_env, &env_line) < 0)
        return -1;
    if (pass && pass_env)
        return fail(p, pass_line > env_line ? pass_line : env_line,
                    "etcd.password (line %u) and etcd.password_env (line %u) exclude each other",
                    pass_line, env_line);
    if (user && !cfg_token_ok(user, DM_HOST_MAX, 0, why, sizeof why))
        return fail(p, user_line, "etcd.username = %s: %s", show(&sv, user), why);
    if (pass && !*pass)
        return fail(p, pass_line, "etcd.password must not be empty");
    if (pass_env) {
        if (password_from_env(p, "etcd.", pass_env, env_line, &pass) < 0)
            return -1;
        pass_line = env_line;
    }
    if (user && !pass)
        return fail(p, user_line, "etcd.username needs etcd.password or etcd.password_env");
    if (pass && !user)
        return fail(p, pass_line, "etcd.password needs etcd.username (etcd authenticates a user)");
    if (user && (cfg_dup_into(p, user_line, &e->username, user) < 0 ||
                 cfg_dup_into(p, pass_line, &e->password, pass) < 0))
        return -1;
    return 0;
}

/* etcd = { endpoints = ( "http://host:port", ... ); connect_timeout_ms;
 * command_timeout_ms; }: present means the store is etcd. */
static int parse_etcd(struct parse *p, const config_setting_t *root, struct dm_config *cfg)
{
    config_setting_t *g;
    int has = cfg_group(p, root, "", "etcd", "{ endpoints = ( \"http://127.0.0.1:2379\" ); }",
                        DM_GROUP_ETCD, &g);
    if (has <= 0)
        return has;
    const config_setting_t *redis = config_setting_get_member(root, "redis");
    if (redis)
        return fail(p, cfg_line_of(g), "etcd (line %u) and redis (line %u) exclude each other: a "
                    "program's locks live in one store; keep the one its other processes use",
                    cfg_line_of(g), cfg_line_of(redis));
    unsigned lines[DM_NKEYS] = { 0 };
    if (cfg_parse_scalars(p, g, DM_GROUP_ETCD, &cfg->redis, lines) < 0)
        return -1;
    if (parse_etcd_user(p, g, &cfg->etcd) < 0)
        return -1;
    if (parse_tls(p, g, "etcd.", 0, &cfg->etcd.tls) < 0)
        return -1;
    config_setting_t *l;
    int n = list_member(p, g, "etcd.", "endpoints", "a list ( \"http://host:port\", ... )",
                        sizeof *cfg->etcd.endpoints, (void **)&cfg->etcd.endpoints, &l);
    if (n < 0)
        return -1;
    if (n == 0 || n > DM_ETCD_ENDPOINTS_MAX)
        return fail(p, l ? cfg_line_of(l) : cfg_line_of(g), "etcd.endpoints must name 1 to %d "
                    "members (their client URLs, \"http://host:2379\"), not %d",
                    DM_ETCD_ENDPOINTS_MAX, n);
    int first = -1, first_scheme = DM_ETCD_BARE;     /* the first with a scheme */
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        const char *v = config_setting_get_string(e);
        char why[200];
        struct shown sv;
        int scheme;
        if (!v)
            return fail(p, cfg_line_of(e), "etcd.endpoints[%d] must be a string "
                        "\"http://host:port\", not %s", i, cfg_type_name(e));
        if (dm_config_etcd_endpoint(v, &cfg->etcd.endpoints[i], &scheme, why, sizeof why) < 0)
            return fail(p, cfg_line_of(e), "etcd.endpoints[%d] = %s: %s", i, show(&sv, v), why);
        cfg->etcd.nendpoints++;
        if (scheme != DM_ETCD_BARE && first < 0) {
            first = i;
            first_scheme = scheme;
        } else if (scheme != DM_ETCD_BARE && scheme != first_scheme) {
            return fail(p, cfg_line_of(e), "etcd.endpoints[%d] = %s is %s, but etcd.endpoints[%d] "
                        "is %s: every member is reached the same way; write https:// for all of "
                        "them (TLS) or http:// for all", i, show(&sv, v),
                        scheme == DM_ETCD_HTTPS ? "TLS (https://)" : "plain (http://)", first,
                        first_scheme == DM_ETCD_HTTPS ? "https://" : "http://");
        }
    }
    /* https:// means TLS: with the tls group's settings, or the system's
     * CAs (tls = {}) without one. A tls group over http:// members is a
     * contradiction the user must settle: dmutex never picks plain text. */
    if (first_scheme == DM_ETCD_HTTP && cfg->etcd.tls.enabled)
        return fail(p, cfg->etcd.tls.line, "etcd.tls asks for TLS, but etcd.endpoints[%d] is "
                    "http:// (plain text): write its members as https://host:port, or take "
                    "etcd.tls out", first);
    if (first_scheme == DM_ETCD_HTTPS)
        cfg->etcd.tls.enabled = 1;
    return 0;
}

/* The rules between the lease keys, once parse_scalars has read them all
 * (lines[id] != 0: written in the file): lease_margin_ms and renew_ms must
 * leave two renewals inside the lease, lock_delay_ms at most the lease.
 * The derived defaults are the table's (lease_ms / dflt_div). */
static int check_timing(struct parse *p, struct dm_config *cfg, const unsigned lines[DM_NKEYS])
{
    const struct dm_config_key *kr = &dm_config_keys[DM_K_RENEW];
    const struct dm_config_key *km = &dm_config_keys[DM_K_MARGIN];
    const struct dm_config_key *kd = &dm_config_keys[DM_K_LOCK_DELAY];
    long lease = cfg->lease_ms;
    long margin = cfg->lease_margin_ms, renew = cfg->renew_ms, delay = cfg->lock_delay_ms;

    if (lines[DM_K_MARGIN] && (margin < km->lo || margin > (lease - 1) / 2))
        return fail(p, lines[DM_K_MARGIN], "lease_margin_ms = %ld: must be between "
                    "%ld and %ld (less than half of lease_ms = %ld)", margin, km->lo,
                    (lease - 1) / 2, lease);
    if (!lines[DM_K_MARGIN])
        margin = lease / km->dflt_div;

    long renew_max = (lease - margin) / 2;
    if (lines[DM_K_RENEW] && (renew < kr->lo || renew > renew_max))
        return fail(p, lines[DM_K_RENEW], "renew_ms = %ld: must be between %ld and %ld, "
                    "so that two renewals fit in lease_ms - lease_margin_ms = %ld",
                    renew, kr->lo, renew_max, lease - margin);
    if (!lines[DM_K_RENEW]) {
        renew = lease / kr->dflt_div;
        if (renew > renew_max)   /* only a large explicit margin gets here */
            return fail(p, lines[DM_K_MARGIN], "lease_margin_ms = %ld leaves too little "
                        "of lease_ms = %ld for renewals: with renew_ms at its default "
                        "(lease_ms/%ld = %ld), 2 * renew_ms must be <= lease_ms - "
                        "lease_margin_ms = %ld; lower lease_margin_ms or set renew_ms "
                        "to at most %ld", margin, lease, kr->dflt_div, renew,
                        lease - margin, renew_max);
    }

    long delay_max = lease < kd->hi ? lease : kd->hi;
    if (lines[DM_K_LOCK_DELAY] && (delay < kd->lo || delay > delay_max))
        return fail(p, lines[DM_K_LOCK_DELAY], "lock_delay_ms = %ld: must be between "
                    "%ld and %ld (%s)", delay, kd->lo, delay_max,
                    delay_max == lease ? "at most lease_ms" : "ten minutes");
    cfg->renew_ms = renew;
    cfg->lease_margin_ms = margin;
    cfg->lock_delay_ms = delay;

    /* A grant waits for its replicas before it counts, and a renewal round
     * before its verdict: longer than a renewal period and the next round
     * would be late. Without min_replicas the key means nothing. */
    const struct dm_config_key *kt = &dm_config_keys[DM_K_REPLICA_TIMEOUT];
    long rt = cfg->replica_timeout_ms;
    if (lines[DM_K_REPLICA_TIMEOUT] && (rt < kt->lo || rt > kt->hi))
        return fail(p, lines[DM_K_REPLICA_TIMEOUT], "replica_timeout_ms = %ld: must be between "
                    "%ld and %ld", rt, kt->lo, kt->hi);
    if (lines[DM_K_REPLICA_TIMEOUT] && cfg->min_replicas > 0 && rt > renew)
        return fail(p, lines[DM_K_REPLICA_TIMEOUT], "replica_timeout_ms = %ld: must be at most "
                    "renew_ms = %ld, so that a renewal round ends before the next one is due",
                    rt, renew);
    if (!lines[DM_K_REPLICA_TIMEOUT] && rt > renew)
        cfg->replica_timeout_ms = renew;
    return 0;
}

/* The metrics file's path (metrics.file, DMUTEX_METRICS): absolute (the
 * shim must not write somewhere else after the program's chdir), a file
 * name after the last '/', and no '%' but "%p" (the pid); short enough,
 * with %p as the longest pid, for the file system to take the temporary
 * file beside it (else it would be accepted and never written). 1, or 0
 * with `why`. */
static int metrics_path_ok(const char *v, char *why, size_t n)
{
    if (!cfg_token_ok(v, DM_PATH_MAX, 1, why, n))
        return 0;
    if (v[0] != '/')
        return snprintf(why, n, "must be an absolute path"), 0;
    if (v[strlen(v) - 1] == '/')
        return snprintf(why, n, "names a directory, not a file"), 0;
    size_t len = 0, name_len = 0;
    for (const char *c = v; *c; c++) {
        size_t add = 1;
        if (c[0] == '%' && c[1] != 'p')
            return snprintf(why, n, "has %%%c: the only %% sequence is %%p (the process id)",
                            c[1] ? c[1] : ' '), 0;
        if (c[0] == '%') {
            add = DM_METRICS_PID_DIGITS;
            c++;
        }
        len += add;
        name_len = *c == '/' ? 0 : name_len + add;
    }
    if (name_len > DM_METRICS_NAME_MAX || len > DM_METRICS_PATH_MAX)
        return snprintf(why, n, "the %s is too long: %zu bytes (%%p counted as %d digits), at "
                        "most %d (the file system's limit less the %d bytes the temporary "
                        "file written beside it adds)", name_len > DM_METRICS_NAME_MAX ?
                        "file name" : "path", name_len > DM_METRICS_NAME_MAX ? name_len : len,
                        DM_METRICS_PID_DIGITS, name_len > DM_METRICS_NAME_MAX ?
                        DM_METRICS_NAME_MAX : DM_METRICS_PATH_MAX, DM_METRICS_TMP_EXTRA), 0;
    return 1;
}

/* metrics = { file; interval_ms; }: present means metrics; `file` is
 * required in it. */
static int parse_metrics(struct parse *p, const config_setting_t *root, struct dm_config *cfg)
{
    config_setting_t *g;
    int has = cfg_group(p, root, "", "metrics",
                           "{ file = \"/run/app/dmutex.prom\"; interval_ms = 10000; }",
                           DM_GROUP_METRICS, &g);
    if (has <= 0)
        return has;
    const char *file = NULL;
    unsigned line = 0;
    char why[256];
    struct shown sv;
    if (cfg_get_string(p, g, "metrics.", "file", &file, &line) < 0)
        return -1;
    if (!file)
        return fail(p, cfg_line_of(g), "metrics needs file = \"/path/name.prom\" (the file "
                    "written)");
    if (!metrics_path_ok(file, why, sizeof why))
        return fail(p, line, "metrics.file = %s: %s", show(&sv, file), why);
    unsigned lines[DM_NKEYS] = { 0 };
    if (cfg_parse_scalars(p, g, DM_GROUP_METRICS, &cfg->metrics, lines) < 0)
        return -1;
    return cfg_dup_into(p, line, &cfg->metrics.file, file);
}

int dm_config_set_metrics_file(struct dm_config *cfg, const char *path, char *err, size_t errlen)
{
    char why[256];
    if (!metrics_path_ok(path, why, sizeof why)) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    char *c = strdup(path);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    free(cfg->metrics.file);
    cfg->metrics.file = c;
    return 0;
}

/* Every top-level key but the hand-written groups and lists. */
static int parse_top(struct parse *p, const config_setting_t *root, struct dm_config *cfg)
{
    unsigned lines[DM_NKEYS] = { 0 };
    if (cfg_parse_scalars(p, root, DM_GROUP_TOP, cfg, lines) < 0)
        return -1;
    if (lines[DM_K_ON_STORE_DOWN] && lines[DM_K_ON_REDIS_DOWN])
        return fail(p, lines[DM_K_ON_STORE_DOWN] > lines[DM_K_ON_REDIS_DOWN] ?
                    lines[DM_K_ON_STORE_DOWN] : lines[DM_K_ON_REDIS_DOWN],
                    "on_store_down (line %u) and on_redis_down (line %u) are one setting: "
                    "on_redis_down is its old name; keep on_store_down",
                    lines[DM_K_ON_STORE_DOWN], lines[DM_K_ON_REDIS_DOWN]);
    if (parse_metrics(p, root, cfg) < 0)
        return -1;
    return check_timing(p, cfg, lines);
}

static void mutex_free(struct dm_object_config *m)
{
    free(m->symbol);
    free(m->object);
    free(m->init_site);
    free(m->name);
    free(m->build_id);
}

/* build_id = "...": hex digits, a whole number of bytes. */
static int build_id_ok(const char *v, char *why, size_t n)
{
    size_t len = strlen(v);
    if (len < 2 || len > DM_BUILD_ID_HEX_MAX || len % 2)
        return snprintf(why, n, "must be an even number (2..%d) of hex digits, as "
                        "`dmutex trace` or `readelf -n` print it", DM_BUILD_ID_HEX_MAX), 0;
    for (const char *c = v; *c; c++)
        if (!isxdigit((unsigned char)*c))
            return snprintf(why, n, "must be hex digits only"), 0;
    return 1;
}

/* One entry of `mutexes`, of `conds` (m->cond set by the caller) or of
 * `rwlocks` (m->rw): the same keys, but a condition variable has no lock
 * mode (fair, cache), and an rwlock's is fixed (its writers queue). A
 * little over 100 lines: one pass over the entry's keys, each check a few
 * lines next to the key it checks, in the order REFERENCE.md lists them. */
static const char *protocol_word(int protocol)
{
    return dm_config_keys[DM_K_PROTOCOL].values[protocol];
}

static int parse_mutex(struct parse *p, const config_setting_t *e, struct dm_object_config *m)
{
    int cond = m->cond, rw = m->rw;
    const char *what = cond ? "cond entry" : rw ? "rwlock entry" : "mutex entry";
    unsigned line = cfg_line_of(e);
    const char *sym = NULL, *obj = NULL, *site = NULL, *name = NULL, *bid = NULL;
    unsigned sym_line = 0, obj_line = 0, site_line = 0, name_line = 0, bid_line = 0;
    char why[200];
    struct shown sv, sv2;
    unsigned lines[DM_NKEYS] = { 0 };

    dm_config_keys_defaults(DM_GROUP_MUTEX, m, NULL);
    m->line = (int)line;
    m->cond = cond;
    m->rw = rw;
    if (!config_setting_is_group(e))
        return fail(p, line, "each entry of %s must be a group { symbol = \"...\"; }, not %s",
                    cond ? "conds" : rw ? "rwlocks" : "mutexes", cfg_type_name(e));
    char in[32];
    snprintf(in, sizeof in, "in a%s %s", cond ? "" : rw ? "n" : "", what);
    if (cfg_check_keys(p, e, DM_GROUP_MUTEX, in) < 0)
        return -1;
    for (int id = DM_K_FAIR; (cond || rw) && id <= DM_K_CACHE; id++) {
        const config_setting_t *s = config_setting_get_member(e, dm_config_keys[id].name);
        if (s)
            return fail(p, cfg_line_of(s), "%s only applies to mutex entries: %s", dm_config_keys[id].name,
                        cond ? "a condition variable has no lock mode (its mutex's entry has)"
                             : "an rwlock's writers always queue in order, and it is never "
                               "kept past its unlock");
    }
    const config_setting_t *ps = config_setting_get_member(e, dm_config_keys[DM_K_PROTOCOL].name);
    if (ps && (cond || rw))
        return fail(p, cfg_line_of(ps), "protocol only applies to mutex entries: %s",
                    cond ? "a condition variable's signals are dmutex's own channel (its "
                           "mutex's entry says the lock's protocol)"
                         : "an rwlock's read holds have no form in another client's lock; "
                           "it is always protocol \"dmutex\"");
    if (cfg_get_string(p, e, "", "symbol", &sym, &sym_line) < 0
        || cfg_get_string(p, e, "", "init_site", &site, &site_line) < 0
        || cfg_get_string(p, e, "", "object", &obj, &obj_line) < 0
        || cfg_get_string(p, e, "", "name", &name, &name_line) < 0
        || cfg_get_string(p, e, "", "build_id", &bid, &bid_line) < 0
        || cfg_parse_scalars(p, e, DM_GROUP_MUTEX, m, lines) < 0)
        return -1;
    if (m->protocol != DM_PROTOCOL_DMUTEX) {
        /* A partner's lock (a SET NX string, a Redisson RLock hash) has
         * no queue dmutex can keep and no want notices: fair is off (its
         * default is on), and a config that asks for either says what it
         * would not get. */
        const char *pw = protocol_word(m->protocol);
        const char *lock = m->protocol == DM_PROTOCOL_SETNX ? "a SET NX lock" : "a Redisson RLock";
        if (lines[DM_K_FAIR] && m->fair)
            return fail(p, lines[DM_K_FAIR], "fair = true with protocol = \"%s\" (line %u): "
                        "%s has no queue, its waiters retry in no order; remove fair (a %s "
                        "entry is fair = false) or use protocol = \"dmutex\"", pw,
                        lines[DM_K_PROTOCOL], lock, pw);
        if (m->cache)
            return fail(p, lines[DM_K_CACHE], "cache = true with protocol = \"%s\" (line %u): "
                        "nobody tells %s's holder that another process wants it, so a cached "
                        "hold would never be given up; remove cache or use protocol = "
                        "\"dmutex\"", pw, lines[DM_K_PROTOCOL], lock);
        m->fair = 0;
    }
    unsigned off_line = lines[DM_K_OFFSET], idx_line = lines[DM_K_INDEX];
    int has_off = off_line != 0, has_idx = idx_line != 0;
    unsigned addr_line = lines[DM_K_ADDRESS], isa_line = lines[DM_K_INIT_SITE_ADDRESS];

    /* What the entry names: exactly one of these. */
    const char *kinds[] = { "symbol", "init_site", "address", "init_site_address" };
    unsigned kind_lines[] = { sym_line, site_line, addr_line, isa_line };
    int first = -1;
    for (int k = 0; k < 4; k++) {
        if (!kind_lines[k])
            continue;
        if (first >= 0)
            return fail(p, line, "%s has both %s (line %u) and %s (line %u); "
                        "use one per entry", what, kinds[first], kind_lines[first], kinds[k],
                        kind_lines[k]);
        first = k;
    }
    if (first < 0)
        return fail(p, line, "%s needs symbol = \"...\" (a variable) or "
                    "init_site = \"...\" (the function that initialises heap %s), "
                    "or for a stripped binary address or init_site_address (as `dmutex trace` "
                    "prints them)", what, cond ? "condition variables" : rw ? "rwlocks" : "mutexes");
    if (has_off && has_idx)
        return fail(p, line, "%s has both offset (line %u) and index (line %u); "
                    "use one", what, off_line, idx_line);
    if (!sym && (has_off || has_idx))
        return fail(p, has_off ? off_line : idx_line, "%s only applies to symbol entries, "
                    "not to %s", has_off ? "offset" : "index", kinds[first]);
    int by_address = addr_line || isa_line;
    if (bid && !by_address)
        return fail(p, bid_line, "build_id only applies to address and init_site_address "
                    "entries, not to %s", kinds[first]);
    if (bid && !build_id_ok(bid, why, sizeof why))
        return fail(p, bid_line, "build_id = %s: %s", show(&sv, bid), why);
    if (by_address && !name)
        return fail(p, line, "%s with %s needs name = \"...\" (an address has no "
                    "name to default to)", what, kinds[first]);

    const char *dflt_name = NULL;
    if (by_address) {
        /* the name is given */
    } else if (sym) {
        long from = cfg_symbol_ok(sym, why, sizeof why);
        if (from < 0)
            return fail(p, sym_line, "symbol = %s: %s", show(&sv, sym), why);
        dflt_name = sym + from;
    } else {
        if (strlen(site) > DM_SYMBOL_MAX)
            return fail(p, site_line, "init_site = %s: is %zu bytes, the limit is %d",
                        show(&sv, site), strlen(site), DM_SYMBOL_MAX);
        if (!cfg_ident_ok(site, 0, why, sizeof why))
            return fail(p, site_line, "init_site = %s: %s", show(&sv, site), why);
        dflt_name = site;
    }
    if (obj && !cfg_object_ok(obj, why, sizeof why))
        return fail(p, obj_line, "object = %s: %s", show(&sv, obj), why);
    if (name && !cfg_name_ok(name, why, sizeof why))
        return fail(p, name_line, "name = %s: %s", show(&sv, name), why);
    if (!name && dflt_name && !cfg_name_ok(dflt_name, why, sizeof why))
        return fail(p, sym ? sym_line : site_line, "%s = %s: the lock name defaults to %s, which is "
                    "not a valid name: %s; set name = \"...\"", sym ? "symbol" : "init_site",
                    show(&sv, sym ? sym : site), show(&sv2, dflt_name), why);

    if ((sym && cfg_dup_into(p, sym_line, &m->symbol, sym) < 0)
        || (site && cfg_dup_into(p, site_line, &m->init_site, site) < 0)
        || (obj && cfg_dup_into(p, obj_line, &m->object, obj) < 0)
        || (bid && cfg_dup_into(p, bid_line, &m->build_id, bid) < 0)
        || cfg_dup_into(p, name ? name_line : line, &m->name, name ? name : dflt_name) < 0)
        return -1;
    return 0;
}

static int strcmp_null(const char *a, const char *b)
{
    if (!a || !b)
        return (a != NULL) - (b != NULL);
    return strcmp(a, b);
}

/* Orders entries by what they map, then by line, so duplicates sit side
 * by side with the earlier one first. */
static int mutex_cmp(const void *pa, const void *pb)
{
    const struct dm_object_config *a = *(const struct dm_object_config *const *)pa;
    const struct dm_object_config *b = *(const struct dm_object_config *const *)pb;
    int c;
    if ((c = (a->symbol != NULL) - (b->symbol != NULL)) != 0
        || (c = strcmp_null(a->object, b->object)) != 0
        || (c = strcmp_null(a->symbol, b->symbol)) != 0
        || (c = strcmp_null(a->init_site, b->init_site)) != 0
        || (c = (a->offset > b->offset) - (a->offset < b->offset)) != 0
        || (c = (a->index > b->index) - (a->index < b->index)) != 0
        || (c = (a->address > b->address) - (a->address < b->address)) != 0
        || (c = (a->init_site_address > b->init_site_address)
              - (a->init_site_address < b->init_site_address)) != 0)
        return c;
    return (a->line > b->line) - (a->line < b->line);
}

static int same_target(const struct dm_object_config *a, const struct dm_object_config *b)
{
    return strcmp_null(a->object, b->object) == 0 && strcmp_null(a->symbol, b->symbol) == 0
        && strcmp_null(a->init_site, b->init_site) == 0
        && a->offset == b->offset && a->index == b->index && a->address == b->address
        && a->init_site_address == b->init_site_address;
}

/* Two entries mapping the same mutex would register it twice; reports the
 * first repeat in file order, naming both lines. */
static int check_duplicates(struct parse *p, struct dm_object_config *ms, size_t n)
{
    if (n < 2)
        return 0;
    struct dm_object_config **v = malloc(n * sizeof *v);
    if (!v)
        return fail(p, 0, "out of memory");
    for (size_t i = 0; i < n; i++)
        v[i] = &ms[i];
    qsort(v, n, sizeof *v, mutex_cmp);
    const struct dm_object_config *first = NULL, *again = NULL;
    for (size_t i = 1; i < n; i++) {
        if (same_target(v[i - 1], v[i]) && (!again || v[i]->line < again->line)) {
            size_t j = i - 1;
            while (j > 0 && same_target(v[j - 1], v[i]))
                j--;
            first = v[j];
            again = v[i];
        }
    }
    free(v);
    if (!again)
        return 0;
    struct shown sv;
    const char *what = again->cond ? "cond entry" : again->rw ? "rwlock entry" : "mutex entry";
    if (again->address >= 0 || again->init_site_address >= 0)
        return fail(p, (unsigned)again->line, "%s repeats the one at line %d "
                    "(same object and %s = 0x%lx)", what, first->line,
                    again->address >= 0 ? "address" : "init_site_address",
                    again->address >= 0 ? again->address : again->init_site_address);
    if (again->init_site)
        return fail(p, (unsigned)again->line, "%s repeats the one at line %d "
                    "(same object and init_site = %s)", what, first->line,
                    show(&sv, again->init_site));
    return fail(p, (unsigned)again->line, "%s repeats the one at line %d "
                "(same object, symbol = %s, offset and index)", what, first->line,
                show(&sv, again->symbol));
}

/* programs = ["stock", "app"]: the executables the config is for. Other
 * processes that inherit LD_PRELOAD (a shell from system(), a helper
 * exec'ed by the program) then run untouched instead of failing on
 * symbols they do not have. */
static int parse_programs(struct parse *p, const config_setting_t *root, struct dm_config *cfg)
{
    config_setting_t *l;
    int n = list_member(p, root, "", "programs", "a list of executable file names [\"app\", ...]",
                        sizeof *cfg->programs, (void **)&cfg->programs, &l);
    if (n < 0)
        return -1;
    if (!l)
        return 0;
    if (n == 0)
        return fail(p, cfg_line_of(l), "programs is empty: the config would apply to no process "
                    "(leave programs out to apply it to every process)");
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        const char *v = config_setting_get_string(e);
        char why[200];
        struct shown sv;
        if (!v)
            return fail(p, cfg_line_of(e), "programs[%d] must be a string, not %s", i, cfg_type_name(e));
        if (strchr(v, '/'))
            return fail(p, cfg_line_of(e), "programs[%d] = %s: must be a file name like \"app\", "
                        "without '/'", i, show(&sv, v));
        if (!cfg_object_ok(v, why, sizeof why))
            return fail(p, cfg_line_of(e), "programs[%d] = %s: %s", i, show(&sv, v), why);
        if (cfg_dup_into(p, cfg_line_of(e), &cfg->programs[cfg->nprograms], v) < 0)
            return -1;
        cfg->nprograms++;
    }
    return 0;
}

/* One lock name is one lock on the wire: entries that share a name share
 * its protocol (dmutex's keys NS:{NAME} and a SET NX string at NAME would
 * not exclude each other). Reports the later entry, naming the earlier. */
static int check_protocol_names(struct parse *p, const struct dm_object_config *ms, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = 0; j < i; j++) {
            if (ms[i].protocol == ms[j].protocol || strcmp(ms[i].name, ms[j].name) != 0)
                continue;
            const struct dm_object_config *a = ms[i].line < ms[j].line ? &ms[i] : &ms[j];
            const struct dm_object_config *b = a == &ms[i] ? &ms[j] : &ms[i];
            struct shown sv;
            return fail(p, (unsigned)b->line, "mutex entry has protocol = \"%s\" and the lock "
                        "name %s of the mutex entry at line %d, which has protocol = \"%s\": "
                        "one name is one lock on the wire, give both the same protocol",
                        protocol_word(b->protocol), show(&sv, b->name), a->line,
                        protocol_word(a->protocol));
        }
    return 0;
}

int dm_config_check_protocols(const struct dm_config *cfg, char *err, size_t errlen)
{
    if (cfg->etcd.nendpoints == 0)
        return 0;
    for (size_t i = 0; i < cfg->nmutexes; i++) {
        const struct dm_object_config *m = &cfg->mutexes[i];
        if (m->protocol == DM_PROTOCOL_DMUTEX)
            continue;
        struct parse p = { .label = cfg->path ? cfg->path : "config", .err = err, .errlen = errlen };
        struct shown sv;
        return fail(&p, (unsigned)m->line, "protocol = \"%s\" is a Redis lock (a %s at the "
                    "key %s) and the store is etcd: use protocol = \"dmutex\" (the default) "
                    "with etcd, or a Redis store", protocol_word(m->protocol),
                    m->protocol == DM_PROTOCOL_SETNX ? "string" : "hash", show(&sv, m->name));
    }
    return 0;
}

static int parse_mutexes(struct parse *p, const config_setting_t *root, struct dm_config *cfg)
{
    config_setting_t *l;
    int n = list_member(p, root, "", "mutexes", "a list ( { symbol = \"...\"; }, ... ) of groups",
                        sizeof *cfg->mutexes, (void **)&cfg->mutexes, &l);
    if (n <= 0)
        return n;
    for (int i = 0; i < n; i++) {
        struct dm_object_config *m = &cfg->mutexes[cfg->nmutexes];
        int rc = parse_mutex(p, config_setting_get_elem(l, (unsigned)i), m);
        if (rc < 0) {
            mutex_free(m);
            return -1;
        }
        cfg->nmutexes++;
    }
    if (check_duplicates(p, cfg->mutexes, cfg->nmutexes) < 0)
        return -1;
    return check_protocol_names(p, cfg->mutexes, cfg->nmutexes);
}

/* conds = ( { symbol = "not_empty"; name = "queue"; }, ... ): the entries
 * of mutexes, for pthread_cond_t. A symbol named in both lists would be
 * one object taken for a mutex and a condition variable: refused. */
static int parse_conds(struct parse *p, const config_setting_t *root, struct dm_config *cfg)
{
    config_setting_t *l;
    int n = list_member(p, root, "", "conds", "a list ( { symbol = \"...\"; }, ... ) of groups",
                        sizeof *cfg->conds, (void **)&cfg->conds, &l);
    if (n <= 0)
        return n;
    for (int i = 0; i < n; i++) {
        struct dm_object_config *m = &cfg->conds[cfg->nconds];
        m->cond = 1;
        int rc = parse_mutex(p, config_setting_get_elem(l, (unsigned)i), m);
        if (rc < 0) {
            mutex_free(m);
            return -1;
        }
        cfg->nconds++;
    }
    if (check_duplicates(p, cfg->conds, cfg->nconds) < 0)
        return -1;
    for (size_t i = 0; i < cfg->nconds; i++)
        for (size_t j = 0; j < cfg->nmutexes; j++) {
            const struct dm_object_config *c = &cfg->conds[i], *m = &cfg->mutexes[j];
            if (same_target(c, m) && !c->init_site) {
                struct shown sv;
                return fail(p, (unsigned)c->line, "cond entry names the mutex of the mutex "
                            "entry at line %d (same object, symbol = %s, offset and index): "
                            "one variable cannot be both", m->line, show(&sv, c->symbol));
            }
        }
    return 0;
}

/* rwlocks = ( { symbol = "routes_lock"; }, ... ): the entries of mutexes,
 * for pthread_rwlock_t. A lock name is a mutex's or an rwlock's (their
 * Redis protocols differ), and a symbol in both lists would be one object
 * taken for two kinds: both refused. */
static int parse_rwlocks(struct parse *p, const config_setting_t *root, struct dm_config *cfg)
{
    config_setting_t *l;
    int n = list_member(p, root, "", "rwlocks", "a list ( { symbol = \"...\"; }, ... ) of groups",
                        sizeof *cfg->rwlocks, (void **)&cfg->rwlocks, &l);
    if (n <= 0)
        return n;
    for (int i = 0; i < n; i++) {
        struct dm_object_config *m = &cfg->rwlocks[cfg->nrwlocks];
        m->rw = 1;
        int rc = parse_mutex(p, config_setting_get_elem(l, (unsigned)i), m);
        if (rc < 0) {
            mutex_free(m);
            return -1;
        }
        cfg->nrwlocks++;
    }
    if (check_duplicates(p, cfg->rwlocks, cfg->nrwlocks) < 0)
        return -1;
    for (size_t i = 0; i < cfg->nrwlocks; i++)
        for (size_t j = 0; j < cfg->nmutexes + cfg->nconds; j++) {
            const struct dm_object_config *r = &cfg->rwlocks[i];
            const struct dm_object_config *m = j < cfg->nmutexes ? &cfg->mutexes[j]
                                                                : &cfg->conds[j - cfg->nmutexes];
            struct shown sv;
            if (same_target(r, m) && !r->init_site)
                return fail(p, (unsigned)r->line, "rwlock entry names the variable of the %s "
                            "entry at line %d (same object, symbol = %s, offset and index): "
                            "one variable cannot be both", m->cond ? "cond" : "mutex", m->line,
                            show(&sv, r->symbol));
            if (!m->cond && strcmp(r->name, m->name) == 0)
                return fail(p, (unsigned)r->line, "rwlock entry has the lock name %s of the "
                            "mutex entry at line %d: a name is a mutex's or an rwlock's",
                            show(&sv, r->name), m->line);
        }
    return 0;
}

/* libconfig's message and line. The line itself is not quoted: a file that
 * does not parse may not be a config file at all (a wrong DMUTEX_CONFIG
 * naming a key file, a binary), and its bytes must not end up in a log. */
static int syntax_error(struct parse *p, const config_t *lc)
{
    const char *what = config_error_text(lc) ? config_error_text(lc) : "cannot parse";
    int line = config_error_line(lc);
    return fail(p, line > 0 ? (unsigned)line : 0, "%s (this file is not valid libconfig syntax)",
                what);
}

/* Is `program` among cfg->programs (always, when none are listed or the
 * program is unknown)? */
static int program_listed(const struct dm_config *cfg, const char *program)
{
    if (cfg->nprograms == 0 || !program)
        return 1;
    for (size_t i = 0; i < cfg->nprograms; i++)
        if (strcmp(program, cfg->programs[i]) == 0)
            return 1;
    return 0;
}

static int load_text(const char *text, const char *label, const char *program,
                     struct dm_config *out, char *err, size_t errlen)
{
    struct parse p = { .label = label ? label : "(string)", .err = err, .errlen = errlen };
    struct dm_config cfg;
    config_t lc;
    int rc = -1;

    dm_config_defaults(out);
    if (err && errlen)
        err[0] = '\0';
    if (!text)
        return fail(&p, 0, "no configuration text");
    if (dm_config_prescan(&p, text) < 0)
        return -1;
    config_init(&lc);
    if (!config_read_string(&lc, text)) {
        /* libconfig may trip over the very number (an int among int64s
         * of an array): say so, still without quoting the file. */
        if (p.number_error)
            fail(&p, p.number_line, "a number is out of range (%s)", p.number_limit);
        else
            syntax_error(&p, &lc);
        config_destroy(&lc);
        return -1;
    }
    if (p.number_error) {       /* the pre-scan's message, now that the file parsed */
        config_destroy(&lc);
        return -1;
    }
    dm_config_defaults(&cfg);
    config_setting_t *root = config_root_setting(&lc);
    /* `programs` first: a process the config is not for must not be
     * stopped by anything else in it (see dm_config_load_for). */
    if (parse_programs(&p, root, &cfg) == 0 && cfg_dup_into(&p, 0, &cfg.path, p.label) == 0) {
        if (!program_listed(&cfg, program)) {
            rc = DM_CONFIG_NOT_FOR;
        } else if (cfg_check_keys(&p, root, DM_GROUP_TOP, "at the top level") == 0
                   && parse_redis(&p, root, &cfg.redis) == 0
                   && parse_etcd(&p, root, &cfg) == 0
                   && parse_top(&p, root, &cfg) == 0
                   && parse_mutexes(&p, root, &cfg) == 0
                   && parse_conds(&p, root, &cfg) == 0
                   && parse_rwlocks(&p, root, &cfg) == 0) {
            cfg.settings = config_setting_length(root);
            cfg.mutexes_line = config_setting_get_member(root, "mutexes") ?
                (int)cfg_line_of(config_setting_get_member(root, "mutexes")) : 0;
            rc = 0;
        }
    }
    config_destroy(&lc);
    if (rc < 0) {
        dm_config_free(&cfg);
        return -1;
    }
    *out = cfg;
    return rc;
}

/* ---- public ----------------------------------------------------------- */

/* The table's defaults; no string is allocated (see dm_config_is_default). */
void dm_config_defaults(struct dm_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    dm_config_keys_defaults(DM_GROUP_TOP, cfg, cfg);
    dm_config_keys_defaults(DM_GROUP_REDIS, &cfg->redis, cfg);
    dm_config_keys_defaults(DM_GROUP_TLS, &cfg->redis.tls, cfg);
    dm_config_keys_defaults(DM_GROUP_TLS, &cfg->etcd.tls, cfg);
    dm_config_keys_defaults(DM_GROUP_METRICS, &cfg->metrics, cfg);
}

int dm_config_load_string(const char *text, const char *label,
                          struct dm_config *cfg, char *err, size_t errlen)
{
    return load_text(text, label, NULL, cfg, err, errlen);
}

/* Reads the file whole (bounded) rather than handing libconfig a FILE, so
 * that the pre-scan sees exactly what libconfig parses and a NUL byte in
 * the file is reported instead of silently ending it. Pipes and
 * /dev/fd/N work too: `dmutex run -c <(...)`. */
static char *read_file(const char *path, size_t *len_out, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fail_plain(err, errlen, "%s: cannot read: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *text = malloc(cap);
    while (text) {
        if (len + 1 == cap) {
            if (cap > (size_t)DM_CONFIG_FILE_MAX) {
                fail_plain(err, errlen, "%s: cannot read: larger than %ld bytes, too large for "
                           "a config file", path, DM_CONFIG_FILE_MAX);
                free(text);
                close(fd);
                return NULL;
            }
            char *bigger = realloc(text, cap * 2);
            if (!bigger)
                break;
            text = bigger;
            cap *= 2;
        }
        ssize_t r = read(fd, text + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            fail_plain(err, errlen, "%s: cannot read: %s", path, strerror(errno));
            free(text);
            close(fd);
            return NULL;
        }
        if (r == 0) {
            close(fd);
            text[len] = '\0';
            *len_out = len;
            return text;
        }
        len += (size_t)r;
    }
    free(text);
    close(fd);
    fail_plain(err, errlen, "%s: cannot read: out of memory", path);
    return NULL;
}

int dm_config_load_for(const char *path, const char *program, struct dm_config *cfg,
                       char *err, size_t errlen)
{
    dm_config_defaults(cfg);
    if (err && errlen)
        err[0] = '\0';
    if (!path || !*path)
        return fail_plain(err, errlen, "config: no file name given");
    size_t len;
    char *text = read_file(path, &len, err, errlen);
    if (!text)
        return -1;
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        struct parse p = { .label = path, .err = err, .errlen = errlen };
        unsigned line = 1;
        for (const char *s = text; s < nul; s++)
            line += *s == '\n';
        free(text);
        return fail(&p, line, "the file holds a NUL byte: a config file is text");
    }
    int rc = load_text(text, path, program, cfg, err, errlen);
    free(text);
    return rc;
}

int dm_config_load(const char *path, struct dm_config *cfg, char *err, size_t errlen)
{
    return dm_config_load_for(path, NULL, cfg, err, errlen);
}

/* An empty file, or one without `mutexes` (or entries of `rwlocks`, which
 * name locks too), is almost always a truncated or wrong file: running
 * the program with nothing mapped and no word would leave it unprotected
 * in silence. */
int dm_config_check_mutexes(const struct dm_config *cfg, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (cfg->mutexes_line > 0 || cfg->nrwlocks > 0)
        return 0;
    const char *path = cfg->path ? cfg->path : "(string)";
    if (cfg->settings == 0)
        return fail_plain(err, errlen, "%s: the file has no settings (empty, or only comments): "
                          "it may be truncated or the wrong file, and no mutex would be "
                          "cluster-wide; write mutexes = (); to run with nothing mapped", path);
    return fail_plain(err, errlen, "%s: no mutexes list: no mutex would be cluster-wide (a "
                      "truncated or wrong file?); write mutexes = (); to run with nothing mapped",
                      path);
}


void dm_config_free(struct dm_config *cfg)
{
    if (!cfg)
        return;
    free(cfg->path);
    if (!dm_config_is_default(cfg->redis.host))
        free(cfg->redis.host);
    free(cfg->redis.unix_path);
    free(cfg->redis.username);
    free(cfg->redis.password);
    free(cfg->redis.tls.ca);
    free(cfg->redis.tls.cert);
    free(cfg->redis.tls.key);
    free(cfg->redis.tls.server_name);
    free(cfg->metrics.file);
    dm_config_free_sentinels(&cfg->redis);
    dm_config_free_cluster(&cfg->redis);
    dm_config_free_etcd(cfg);
    if (!dm_config_is_default(cfg->ns))
        free(cfg->ns);
    for (size_t i = 0; i < cfg->nmutexes; i++)
        mutex_free(&cfg->mutexes[i]);
    free(cfg->mutexes);
    for (size_t i = 0; i < cfg->nconds; i++)
        mutex_free(&cfg->conds[i]);
    free(cfg->conds);
    for (size_t i = 0; i < cfg->nrwlocks; i++)
        mutex_free(&cfg->rwlocks[i]);
    free(cfg->rwlocks);
    for (size_t i = 0; i < cfg->nprograms; i++)
        free(cfg->programs[i]);
    free(cfg->programs);
    dm_config_defaults(cfg);
}
