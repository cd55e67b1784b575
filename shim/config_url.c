/* config_url: DMUTEX_REDIS URLs (redis://[user:pass@]host[:port][/db],
 * unix:///path[?db=N], redis-sentinel://[user:pass@]host:port,.../master[/db],
 * rediss:// and rediss-sentinel:// for TLS, redis-cluster://[user:pass@]host:port,...,
 * etcd:// and etcds://host:port,...) into the redis or etcd part of a
 * struct dm_config, and the
 * redaction every message showing such a URL goes through. A URL's bytes
 * are shown only redacted and quoted (dm_config_show). */
#include "config_impl.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The password of user:password@ becomes ***: in any scheme, and in a URL
 * without one ("user:pw@host"), since a mistyped URL is still a secret. */
void dm_config_redact_url(const char *url, char *out, size_t len)
{
    if (!out || len == 0)
        return;
    if (!url) {
        snprintf(out, len, "(none)");
        return;
    }
    /* A password may hold '/', '?', '#' or '@' unescaped: a mistyped URL is
     * exactly what gets printed. So the userinfo ends at the *last* '@'
     * anywhere after the scheme (a redis URL has none elsewhere; a path that
     * did would only be hidden too), not at the end of a well-formed
     * authority. unix:// URLs carry no userinfo. */
    const char *sep = strstr(url, "://");
    const char *a = sep ? sep + 3 : url;
    const char *at = strncasecmp(url, "unix://", 7) == 0 ? NULL : strrchr(a, '@');
    if (!at) {
        snprintf(out, len, "%s", url);
        return;
    }
    const char *colon = memchr(a, ':', (size_t)(at - a));
    const char *keep = colon ? colon + 1 : a;   /* "pw@host" is all password */
    snprintf(out, len, "%.*s***%s", (int)(keep - url), url, at);
}

static int percent_decode(const char *s, size_t len, char **out)
{
    char *d = malloc(len + 1);
    if (!d)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '%') {
            if (i + 2 >= len)
                goto bad;
            if (!is_hex((unsigned char)s[i + 1]) || !is_hex((unsigned char)s[i + 2]))
                goto bad;
            int c = hex_val((unsigned char)s[i + 1]) << 4 | hex_val((unsigned char)s[i + 2]);
            if (c == 0)
                goto bad;
            d[o++] = (char)c;
            i += 2;
        } else {
            d[o++] = s[i];
        }
    }
    d[o] = '\0';
    *out = d;
    return 0;
bad:
    free(d);
    return -2;
}

/* Digits only, value in [lo, hi]. */
static int parse_url_number(const char *s, size_t len, long lo, long hi, long *out)
{
    if (len == 0 || len > 9)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!az_digit((unsigned char)s[i]))
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* The user:password@ that may open the authority a[0..alen) of a redis://,
 * rediss:// or redis-sentinel:// URL, up to the last '@' (a raw '@' may
 * sit in a password): *user (NULL for "password@" and ":password@") and
 * *pass, %-decoded and malloc'ed, and *hp where host[:port] starts. 1 with
 * credentials, 0 without (*hp = a, nothing set), -1 with err set and
 * nothing allocated. */
static int parse_userinfo(const char *a, size_t alen, char **user, char **pass, const char **hp,
                          char *err, size_t errlen)
{
    const char *at = NULL;
    for (const char *q = a; q < a + alen; q++)
        if (*q == '@')
            at = q;
    *hp = a;
    if (!at)
        return 0;
    const char *colon = memchr(a, ':', (size_t)(at - a));
    const char *pw = colon ? colon + 1 : a;
    int r = 0;
    *user = *pass = NULL;
    if (colon && colon > a)
        r = percent_decode(a, (size_t)(colon - a), user);
    if (r == 0)
        r = percent_decode(pw, (size_t)(at - pw), pass);
    if (r != 0 || !**pass) {
        free(*user);
        free(*pass);
        *user = *pass = NULL;
        return fail_plain(err, errlen, r == -1 ? "redis URL: out of memory"
                          : r == -2 ? "redis URL: bad %%-escape in the user name or password "
                                      "(%%XX with two hex digits, not %%00)"
                          : "redis URL: empty password before '@' (leave out "
                            "user:password@ for no AUTH)");
    }
    *hp = at + 1;
    return 1;
}

/* A URL's user:password@ replaces the config's (parse_userinfo's strings). */
static void take_credentials(struct dm_redis_config *r, char *user, char *pass)
{
    free(r->username);
    free(r->password);
    r->username = user;
    r->password = pass;
}

/* A rediss:// URL's CA, client certificate and key: DMUTEX_TLS_CA,
 * DMUTEX_TLS_CERT, DMUTEX_TLS_KEY when set (secure_getenv: not in a
 * set-user-ID process), malloc'ed into files[0..2]; NULL: not set. */
static int tls_env(char *files[3], char *err, size_t errlen)
{
    static const char *const vars[3] = { "DMUTEX_TLS_CA", "DMUTEX_TLS_CERT", "DMUTEX_TLS_KEY" };
    for (int i = 0; i < 3; i++) {
        const char *v = secure_getenv(vars[i]);
        if (!v || !*v)
            continue;
        size_t len = strlen(v);
        if (len > DM_PATH_MAX || strpbrk(v, "\n\r\t")) {
            for (int j = 0; j < i; j++)
                free(files[j]);
            return fail_plain(err, errlen, "%s: not a file path (at most %d bytes, no control "
                              "characters)", vars[i], DM_PATH_MAX);
        }
        if (!(files[i] = strdup(v))) {
            for (int j = 0; j < i; j++)
                free(files[j]);
            return fail_plain(err, errlen, "redis URL: out of memory");
        }
    }
    return 0;
}

/* redis-sentinel://[user:pass@]host[:port][,host[:port]...]/master[/db]:
 * the sentinels to ask, the name they monitor, the db; user:pass are the
 * data nodes' (as in redis://), the sentinels' own come from the file.
 * rediss-sentinel://...: the same over TLS, to the sentinels and to the
 * data nodes alike (one redis.tls for both; the files as for rediss://).
 * `su` is the redacted URL for messages. */
static int set_sentinel_url(struct dm_config *cfg, const char *url, int tls, const char *su,
                            char *err, size_t errlen)
{
    const char *a = url + strlen(tls ? "rediss-sentinel://" : "redis-sentinel://");
    size_t alen = strcspn(a, "/?#");
    char *user = NULL, *pass = NULL, *master = NULL;
    struct dm_endpoint *eps = NULL;
    size_t neps = 0;
    long db = 0;
    char why[160];
    const char *hp;
    int has_cred = parse_userinfo(a, alen, &user, &pass, &hp, err, errlen);
    if (has_cred < 0)
        return -1;
    const char *end = a + alen;
    eps = calloc(DM_SENTINELS_MAX, sizeof *eps);
    if (!eps)
        goto oom;
    for (const char *h = hp; h <= end; ) {
        const char *comma = memchr(h, ',', (size_t)(end - h));
        const char *e = comma ? comma : end;
        if (neps == DM_SENTINELS_MAX) {
            fail_plain(err, errlen, "redis URL %s: more than %d sentinels", su, DM_SENTINELS_MAX);
            goto fail;
        }
        if (dm_config_endpoint(h, (size_t)(e - h), DM_SENTINEL_PORT_DEFAULT, &eps[neps], why,
                               sizeof why) < 0) {
            fail_plain(err, errlen, "redis URL %s: sentinel %zu: %s "
                       "(redis-sentinel://[user:password@]host[:port][,host[:port]...]/master[/db])",
                       su, neps + 1, why);
            goto fail;
        }
        neps++;
        if (!comma)
            break;
        h = comma + 1;
    }
    const char *path = end;
    if (*path != '/' || !path[1] || path[1] == '/') {
        fail_plain(err, errlen, "redis URL %s: the path must name the master the sentinels "
                   "monitor: redis-sentinel://host:port[,host:port...]/master[/db]", su);
        goto fail;
    }
    path++;
    size_t mlen = strcspn(path, "/");
    for (size_t i = 0; i < mlen; i++)
        if ((unsigned char)path[i] <= 0x20 || path[i] == 0x7f || path[i] == '?' || path[i] == '#') {
            fail_plain(err, errlen, "redis URL %s: the master name holds a space, a control "
                       "character, '?' or '#'", su);
            goto fail;
        }
    if (mlen > DM_HOST_MAX) {
        fail_plain(err, errlen, "redis URL %s: the master name is longer than %d bytes", su,
                   DM_HOST_MAX);
        goto fail;
    }
    const char *rest = path + mlen;
    if (*rest == '/' && rest[1] && parse_url_number(rest + 1, strlen(rest + 1), 0,
                                                    DM_REDIS_DB_MAX, &db) < 0) {
        fail_plain(err, errlen, "redis URL %s: after the master name the path must be a "
                   "database number from 0 to %ld", su, DM_REDIS_DB_MAX);
        goto fail;
    }
    if ((master = strndup(path, mlen)) == NULL)
        goto oom;
    char *tls_files[3] = { NULL, NULL, NULL };
    if (tls && tls_env(tls_files, err, errlen) < 0)
        goto fail;

    dm_config_free_sentinels(&cfg->redis);
    dm_config_free_cluster(&cfg->redis);
    free(cfg->redis.unix_path);
    cfg->redis.unix_path = NULL;
    cfg->redis.sentinels = eps;
    cfg->redis.nsentinels = neps;
    cfg->redis.master = master;
    cfg->redis.db = (int)db;
    if (tls) {
        cfg->redis.tls.enabled = 1;
        char **slot[3] = { &cfg->redis.tls.ca, &cfg->redis.tls.cert, &cfg->redis.tls.key };
        for (int i = 0; i < 3; i++)
            if (tls_files[i]) {
                free(*slot[i]);
                *slot[i] = tls_files[i];
            }
    }
    if (has_cred)
        take_credentials(&cfg->redis, user, pass);
    return 0;
oom:
    fail_plain(err, errlen, "redis URL: out of memory");
fail:
    for (size_t i = 0; i < neps; i++)
        free(eps[i].host);
    free(eps);
    free(user);
    free(pass);
    free(master);
    return -1;
}

/* redis-cluster://[user:pass@]host[:port][,host[:port]...][/]: the seed
 * nodes of a Redis Cluster (db 0, the only one a cluster has); user:pass
 * are every node's. `su` is the redacted URL for messages. */
static int set_cluster_url(struct dm_config *cfg, const char *url, const char *su,
                           char *err, size_t errlen)
{
    const char *a = url + strlen("redis-cluster://");
    size_t alen = strcspn(a, "/?#");
    char *user = NULL, *pass = NULL;
    struct dm_endpoint *eps = NULL;
    size_t neps = 0;
    char why[160];
    const char *hp;
    int has_cred = parse_userinfo(a, alen, &user, &pass, &hp, err, errlen);
    if (has_cred < 0)
        return -1;
    const char *end = a + alen;
    if (*end && strcmp(end, "/") != 0) {
        fail_plain(err, errlen, "redis URL %s: a cluster URL has no path or query (a Redis "
                   "Cluster has database 0 only): redis-cluster://host:port[,host:port...]", su);
        goto fail;
    }
    eps = calloc(DM_CLUSTER_SEEDS_MAX, sizeof *eps);
    if (!eps)
        goto oom;
    for (const char *h = hp; h <= end; ) {
        const char *comma = memchr(h, ',', (size_t)(end - h));
        const char *e = comma ? comma : end;
        if (neps == DM_CLUSTER_SEEDS_MAX) {
            fail_plain(err, errlen, "redis URL %s: more than %d seed nodes", su,
                       DM_CLUSTER_SEEDS_MAX);
            goto fail;
        }
        if (dm_config_endpoint(h, (size_t)(e - h), DM_REDIS_PORT_DEFAULT, &eps[neps], why,
                               sizeof why) < 0) {
            fail_plain(err, errlen, "redis URL %s: node %zu: %s "
                       "(redis-cluster://[user:password@]host[:port][,host[:port]...])",
                       su, neps + 1, why);
            goto fail;
        }
        neps++;
        if (!comma)
            break;
        h = comma + 1;
    }
    dm_config_free_sentinels(&cfg->redis);
    dm_config_free_cluster(&cfg->redis);
    free(cfg->redis.unix_path);
    cfg->redis.unix_path = NULL;
    cfg->redis.cluster = eps;
    cfg->redis.ncluster = neps;
    cfg->redis.db = 0;
    if (has_cred)
        take_credentials(&cfg->redis, user, pass);
    return 0;
oom:
    fail_plain(err, errlen, "redis URL: out of memory");
fail:
    for (size_t i = 0; i < neps; i++)
        free(eps[i].host);
    free(eps);
    free(user);
    free(pass);
    return -1;
}

/* The URL names the whole endpoint: host and port, or the socket, and the
 * db. Credentials are replaced only when the URL carries them, so a
 * password can stay in password_env instead of a URL in the environment. */
/* A config that asks for TLS is not turned to plain text by a URL in the
 * environment (dmutex run -r, a unit file): the two disagree, and the user
 * decides which is right. 0, or -1 with the message (FILE:LINE of the
 * redis.tls group first, as every config error: the user must find what
 * contradicts the URL). */
static int plain_refused(const struct dm_config *cfg, const char *url, const char *shown,
                         char *err, size_t errlen)
{
    static const struct { const char *scheme, *instead; } plain[] = {
        { "redis://", "rediss://" },
        { "redis-sentinel://", "rediss-sentinel://" },
        { "unix://", "a rediss:// URL (a unix socket carries no TLS)" },
    };
    char where[300] = "";
    if (cfg->path && cfg->redis.tls.line > 0)
        snprintf(where, sizeof where, "%.256s:%d: ", cfg->path, cfg->redis.tls.line);
    else if (cfg->path)
        snprintf(where, sizeof where, "%.256s: ", cfg->path);
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (cfg->redis.tls.enabled && strncasecmp(url, plain[i].scheme, strlen(plain[i].scheme)) == 0)
            return fail_plain(err, errlen, "%sredis URL %s is plain text, but the config asks "
                              "for TLS (its redis.tls group): use %s, or take redis.tls out of "
                              "the config; dmutex never falls back to plain text", where, shown,
                              plain[i].instead);
    return 0;
}

/* What a URL naming one node (redis://, rediss://, unix://) says. */
struct node_url {
    char *host, *unix_path, *user, *pass;
    long port, db;
    int has_cred, tls;
};

static void node_url_free(struct node_url *u)
{
    free(u->host);
    free(u->unix_path);
    free(u->user);
    free(u->pass);
}

/* unix:///path[?db=N] (path: after "unix://") into u. 0 or -1. */
static int parse_unix_url(const char *path, const char *shown, struct node_url *u, char *err,
                          size_t errlen)
{
    size_t plen = strcspn(path, "?");
    if (plen == 0 || path[0] != '/')
        return fail_plain(err, errlen, "redis URL %s: needs an absolute socket path, as in "
                          "unix:///run/redis.sock", shown);
    if (path[plen] == '?') {
        const char *q = path + plen + 1;
        if (strncmp(q, "db=", 3) != 0 || parse_url_number(q + 3, strlen(q + 3), 0,
                                                          DM_REDIS_DB_MAX, &u->db) < 0)
            return fail_plain(err, errlen, "redis URL %s: the only query is ?db=N with N "
                              "from 0 to %ld", shown, DM_REDIS_DB_MAX);
    }
    if (plen > (size_t)DM_UNIX_PATH_MAX)
        return fail_plain(err, errlen, "redis URL %s: the socket path is %zu bytes, the "
                          "limit is %d", shown, plen, DM_UNIX_PATH_MAX);
    for (size_t i = 0; i < plen; i++)
        if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
            return fail_plain(err, errlen, "redis URL %s: control character in the socket path",
                              shown);
    if (!(u->unix_path = strndup(path, plen)))
        return fail_plain(err, errlen, "redis URL: out of memory");
    u->port = 0;
    return 0;
}

/* The host part "host[:port]" or "[v6][:port]" (hlen bytes at hp): *h and
 * *host_len, *port_s (NULL: none). 0, or -1: a bad host. */
static int split_host(const char *hp, size_t hlen, const char **h, size_t *host_len,
                      const char **port_s)
{
    *h = hp;
    *port_s = NULL;
    if (hlen > 0 && hp[0] == '[') {     /* [IPv6]:port */
        const char *close = memchr(hp, ']', hlen);
        if (!close)
            return -1;
        *h = hp + 1;
        *host_len = (size_t)(close - *h);
        if (close + 1 < hp + hlen) {
            if (close[1] != ':')
                return -1;
            *port_s = close + 2;
        }
    } else {
        const char *colon = memchr(hp, ':', hlen);
        *host_len = colon ? (size_t)(colon - hp) : hlen;
        if (colon)
            *port_s = colon + 1;
    }
    if (*host_len == 0 || *host_len > DM_HOST_MAX)
        return -1;
    for (size_t i = 0; i < *host_len; i++)
        if ((unsigned char)(*h)[i] <= 0x20 || (*h)[i] == 0x7f)
            return -1;
    return 0;
}

/* redis[s]://[user:password@]host[:port][/db] (a: after the scheme) into
 * u. 0, or -1 (u's strings freed by the caller). */
static int parse_tcp_url(const char *a, const char *shown, struct node_url *u, char *err,
                         size_t errlen)
{
    size_t alen = strcspn(a, "/?#");
    const char *hp, *h, *port_s;
    struct shown sv;
    if ((u->has_cred = parse_userinfo(a, alen, &u->user, &u->pass, &hp, err, errlen)) < 0)
        return -1;
    size_t host_len;
    if (split_host(hp, (size_t)(a + alen - hp), &h, &host_len, &port_s) != 0)
        return fail_plain(err, errlen, "redis URL %s: bad or missing host "
                          "(redis://[user:password@]host[:port][/db])", shown);
    if (port_s && parse_url_number(port_s, (size_t)(a + alen - port_s), 1, DM_PORT_MAX,
                                   &u->port) < 0)
        return fail_plain(err, errlen, "redis URL %s: the port must be a number from 1 to %ld",
                          shown, DM_PORT_MAX);
    const char *rest = a + alen;
    if (*rest == '/' && rest[1]) {
        if (parse_url_number(rest + 1, strlen(rest + 1), 0, DM_REDIS_DB_MAX, &u->db) < 0)
            return fail_plain(err, errlen, "redis URL %s: the path must be a database number "
                              "from 0 to %ld", shown, DM_REDIS_DB_MAX);
    } else if (*rest && strcmp(rest, "/") != 0) {
        return fail_plain(err, errlen, "redis URL %s: unexpected %s after the host "
                          "(redis://[user:password@]host[:port][/db])", shown, show(&sv, rest));
    }
    if (!(u->host = strndup(h, host_len)))
        return fail_plain(err, errlen, "redis URL: out of memory");
    return 0;
}

/* u (and the TLS files of DMUTEX_TLS_*, tls_files) into cfg, which then
 * names that node alone; u's strings are cfg's from here. */
static void set_node(struct dm_config *cfg, struct node_url *u, char *tls_files[3])
{
    if (!dm_config_is_default(cfg->redis.host))
        free(cfg->redis.host);
    free(cfg->redis.unix_path);
    dm_config_free_sentinels(&cfg->redis);     /* the URL names the node itself */
    dm_config_free_cluster(&cfg->redis);
    cfg->redis.host = u->host;
    cfg->redis.unix_path = u->unix_path;
    cfg->redis.port = (int)u->port;
    cfg->redis.db = (int)u->db;
    /* The scheme says whether TLS is on; the files come from DMUTEX_TLS_*
     * or else stay the config's. */
    cfg->redis.tls.enabled = u->tls;
    char **slot[3] = { &cfg->redis.tls.ca, &cfg->redis.tls.cert, &cfg->redis.tls.key };
    for (int i = 0; i < 3; i++)
        if (tls_files[i]) {
            free(*slot[i]);
            *slot[i] = tls_files[i];
        }
    if (u->has_cred) {
        take_credentials(&cfg->redis, u->user, u->pass);
    } else {
        free(u->user);
        free(u->pass);
    }
}

/* An etcd:// URL over a config whose etcd members are reached with TLS
 * (its etcd.tls group, or https:// endpoints): refused as plain_refused
 * refuses a redis:// one. 0, or -1 with the message. */
static int etcd_plain_refused(const struct dm_config *cfg, const char *shown, char *err,
                              size_t errlen)
{
    if (!cfg->etcd.nendpoints || !cfg->etcd.tls.enabled)
        return 0;
    char where[300] = "";
    if (cfg->path && cfg->etcd.tls.line > 0)
        snprintf(where, sizeof where, "%.256s:%d: ", cfg->path, cfg->etcd.tls.line);
    else if (cfg->path)
        snprintf(where, sizeof where, "%.256s: ", cfg->path);
    return fail_plain(err, errlen, "%setcd URL %s is plain text, but the config asks for TLS "
                      "(%s): use etcds://, or take TLS out of the config; dmutex never falls "
                      "back to plain text", where, shown,
                      cfg->etcd.tls.line > 0 ? "its etcd.tls group" : "its https:// endpoints");
}

/* etcd://host[:port][,host[:port]...] (etcds://: over TLS): the store is
 * etcd, at these members (the config's etcd group, or its redis group,
 * replaced). etcds:// keeps the etcd.tls group's settings but for the
 * files DMUTEX_TLS_CA/CERT/KEY name, as rediss:// does. */
static int set_etcd_url(struct dm_config *cfg, const char *url, int tls, const char *shown,
                        char *err, size_t errlen)
{
    struct dm_endpoint eps[DM_ETCD_ENDPOINTS_MAX];
    size_t n = 0;
    char why[200];
    const char *p = url + (tls ? 8 : 7);
    int rc = 0;
    if (!tls && etcd_plain_refused(cfg, shown, err, errlen) != 0)
        return -1;
    while (*p && rc == 0) {
        size_t len = strcspn(p, ",/");
        if (n == DM_ETCD_ENDPOINTS_MAX) {
            rc = fail_plain(err, errlen, "etcd URL %s: at most %d members", shown,
                            DM_ETCD_ENDPOINTS_MAX);
            break;
        }
        if (len == 0 || dm_config_endpoint(p, len, DM_ETCD_PORT_DEFAULT, &eps[n], why, sizeof why) < 0) {
            rc = fail_plain(err, errlen, "etcd URL %s: %s", shown,
                            len == 0 ? "a member's host:port is empty" : why);
            break;
        }
        n++;
        p += len;
        if (*p == ',')
            p++;
        else if (*p == '/' && p[1])
            rc = fail_plain(err, errlen, "etcd URL %s: has a path; write etcd://host:port[,host:port...]",
                            shown);
        else if (*p == '/')
            break;
    }
    if (rc == 0 && n == 0)
        rc = fail_plain(err, errlen, "etcd URL %s: names no member (%s://host:port[,host:port...])",
                        shown, tls ? "etcds" : "etcd");
    char *tls_files[3] = { NULL, NULL, NULL };
    if (rc == 0 && tls && tls_env(tls_files, err, errlen) < 0)
        rc = -1;
    struct dm_endpoint *copy = rc == 0 ? malloc(n * sizeof *copy) : NULL;
    if (rc == 0 && !copy)
        rc = fail_plain(err, errlen, "out of memory");
    if (rc != 0) {
        for (size_t i = 0; i < n; i++)
            free(eps[i].host);
        for (int i = 0; i < 3; i++)
            free(tls_files[i]);
        return rc;
    }
    memcpy(copy, eps, n * sizeof *copy);
    for (size_t i = 0; i < cfg->etcd.nendpoints; i++)   /* the members only: a user stays */
        free(cfg->etcd.endpoints[i].host);
    free(cfg->etcd.endpoints);
    cfg->etcd.endpoints = copy;
    cfg->etcd.nendpoints = n;
    if (tls) {
        cfg->etcd.tls.enabled = 1;
        char **slot[3] = { &cfg->etcd.tls.ca, &cfg->etcd.tls.cert, &cfg->etcd.tls.key };
        for (int i = 0; i < 3; i++)
            if (tls_files[i]) {
                free(*slot[i]);
                *slot[i] = tls_files[i];
            }
    }
    return 0;
}

int dm_config_set_redis_url(struct dm_config *cfg, const char *url, char *err, size_t errlen)
{
    struct shown su;
    if (err && errlen)
        err[0] = '\0';
    if (!url || !*url)
        return fail_plain(err, errlen, "redis URL is empty (use redis://host:port/db or unix:///path)");
    char redacted[DM_SHOW_MAX * 2 + 8];
    dm_config_redact_url(url, redacted, sizeof redacted);
    show(&su, redacted);
    if (strncasecmp(url, "etcd://", 7) == 0)
        return set_etcd_url(cfg, url, 0, su.s, err, errlen);
    if (strncasecmp(url, "etcds://", 8) == 0)
        return set_etcd_url(cfg, url, 1, su.s, err, errlen);
    if (plain_refused(cfg, url, su.s, err, errlen) != 0)
        return -1;
    dm_config_free_etcd(cfg);   /* a Redis URL: the store is Redis */
    if (strncasecmp(url, "redis-sentinel://", 17) == 0)
        return set_sentinel_url(cfg, url, 0, su.s, err, errlen);
    if (strncasecmp(url, "rediss-sentinel://", 18) == 0)
        return set_sentinel_url(cfg, url, 1, su.s, err, errlen);
    if (strncasecmp(url, "redis-cluster://", 16) == 0)
        return set_cluster_url(cfg, url, su.s, err, errlen);
    struct node_url u = { .port = DM_REDIS_PORT_DEFAULT };
    u.tls = strncasecmp(url, "rediss://", 9) == 0;
    int r;
    if (strncasecmp(url, "unix://", 7) == 0) {
        r = parse_unix_url(url + 7, su.s, &u, err, errlen);
    } else if (u.tls || strncasecmp(url, "redis://", 8) == 0) {
        r = parse_tcp_url(url + (u.tls ? 9 : 8), su.s, &u, err, errlen);
    } else {
        size_t slen = strcspn(url, ":");
        if (strncmp(url + slen, "://", 3) == 0 && slen < 32)
            return fail_plain(err, errlen, "redis URL %s: unknown scheme \"%.*s\" (use one of"
                              DM_URL_SCHEMES ")", su.s, (int)slen, url);
        return fail_plain(err, errlen, "redis URL %s: must start with one of" DM_URL_SCHEMES,
                          su.s);
    }
    char *tls_files[3] = { NULL, NULL, NULL };
    if (r != 0 || (u.tls && tls_env(tls_files, err, errlen) < 0)) {
        node_url_free(&u);
        return -1;
    }
    set_node(cfg, &u, tls_files);
    return 0;
}
