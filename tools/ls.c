/* dmutex ls: what the server knows about the locks of one namespace: for
 * each name ever granted, its state, holder and hold count, remaining
 * lease, fencing token, how its last hold ended, and the processes
 * subscribed to its release notices. Read-only: never changes a key. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "keys.h"
#include "redis.h"

static const char ls_usage[] =
    "usage: dmutex ls [-c CONFIG | -r REDIS_URL] [-n NAMESPACE] [--json]\n"
    "\n"
    "Lists the cluster locks of NAMESPACE (default: the config's, or \"dmutex\"):\n"
    "  NAME       the lock name (config `name`, default the symbol)\n"
    "  STATE      held, free, expired (last holder's lease ran out unreleased),\n"
    "             or delayed (lock_delay_ms after an expiry)\n"
    "  HOLDER     owner id <process id>:<thread seq> and its hold count\n"
    "  LEASE_MS   milliseconds left on the holder's lease\n"
    "  TOKEN      fencing token of the latest grant\n"
    "  WAITERS    processes queued for it (fair and cache modes)\n"
    "  LISTENING  processes subscribed to its release notices (fair = false:\n"
    "             waiting now, or having waited before)\n"
    "\n"
    "  -c, --config FILE   take the server and namespace from FILE\n"
    "  -r, --redis URL     redis://[user:pass@]host[:port][/db], rediss://... (TLS),\n"
    "                      unix:///path or redis-sentinel://host[:port][,...]/master[/db]\n"
    "                      (the primary the sentinels name)\n"
    "                      (default: $DMUTEX_REDIS, else the config's, else\n"
    "                      127.0.0.1:6379)\n"
    "  -n, --namespace NS  key namespace\n"
    "      --json          print one JSON document instead of the table:\n"
    "                      {\"namespace\", \"redis\", \"locks\": [{\"name\", \"state\",\n"
    "                      \"holder\", \"holds\", \"lease_ms\", \"token\", \"waiters\",\n"
    "                      \"listening\"}]}, null where the table shows -\n"
    "  -h, --help          this text\n"
    "\n"
    "Exit status 0; 1 if the server cannot be reached; 2 usage; 78 bad config.\n";

static redisReply *cmd(struct dm_conn *conn, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = dm_net_vcommand(conn->c, conn->tls, fmt, ap);
    va_end(ap);
    return r;
}

/* Key `k` of lock `nm`, malloc'ed (NULL out of memory). */
static char *key_of(const char *ns, const char *nm, enum dm_key k)
{
    size_t n = dm_keys_build(NULL, 0, ns, nm, k) + 1;
    char *key = malloc(n);
    if (key)
        dm_keys_build(key, n, ns, nm, k);
    return key;
}

/* Runs `fmt` (one %s) on key `k` of lock `nm`; NULL out of memory or on
 * a connection error (c->errstr). */
static redisReply *key_cmd(struct dm_conn *conn, const char *fmt, const char *ns, const char *nm,
                           enum dm_key k)
{
    char *key = key_of(ns, nm, k);
    redisReply *r = key ? cmd(conn, fmt, key) : NULL;
    free(key);
    return r;
}

/* `s` as a JSON string: quotes, backslashes and control characters
 * escaped; a byte that is not part of valid UTF-8 (key names come from the
 * server, which stores any bytes) becomes U+FFFD, so the document always
 * parses. */
static void json_str(FILE *out, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    putc('"', out);
    while (*p) {
        unsigned char b = *p;
        if (b == '"' || b == '\\') {
            fprintf(out, "\\%c", b);
            p++;
        } else if (b < 0x20 || b == 0x7f) {
            fprintf(out, "\\u%04x", b);
            p++;
        } else if (b < 0x80) {
            putc(b, out);
            p++;
        } else {
            /* length of the sequence b starts, and the least code point it
             * may encode (overlong forms are invalid) */
            int n = b >= 0xc2 && b <= 0xdf ? 2 : (b & 0xf0) == 0xe0 ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
            unsigned long cp = n == 2 ? b & 0x1f : n == 3 ? b & 0x0f : b & 0x07;
            int i = 1;
            for (; i < n && (p[i] & 0xc0) == 0x80; i++)
                cp = cp << 6 | (p[i] & 0x3f);
            if (n == 0 || i < n || (n == 3 && cp < 0x800) || (n == 3 && cp >= 0xd800 && cp <= 0xdfff) ||
                (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
                fputs("\\ufffd", out);
                p++;
            } else {
                fwrite(p, 1, (size_t)n, out);
                p += n;
            }
        }
    }
    putc('"', out);
}

/* A decimal integer reply as a JSON number, anything else as null. */
static void json_int_or_null(FILE *out, const char *s)
{
    size_t n = s ? strspn(s, "0123456789") : 0;
    if (n > 0 && s[n] == 0 && n < 20)
        fputs(s, out);
    else
        fputs("null", out);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int dm_cli_ls(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "redis", required_argument, NULL, 'r' },
        { "namespace", required_argument, NULL, 'n' },
        { "json", no_argument, NULL, 'j' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cfg_path = NULL, *url = getenv("DMUTEX_REDIS"), *ns = NULL;
    int ch, json = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:r:n:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': cfg_path = optarg; break;
        case 'r': url = optarg; break;
        case 'n': ns = optarg; break;
        case 'j': json = 1; break;
        case 'h': fputs(ls_usage, stdout); return 0;
        default: fputs(ls_usage, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dmutex ls: unexpected argument '%s'\n\n%s", argv[optind], ls_usage);
        return 2;
    }
    struct dm_config cfg;
    if (cfg_path) {
        if (dm_cli_load_config(cfg_path, &cfg) != 0)
            return DM_EX_CONFIG;
    } else {
        dm_config_defaults(&cfg);
    }
    if (url && *url && dm_cli_set_redis_url(&cfg, "dmutex ls: ", url) != 0) {
        dm_config_free(&cfg);
        return 2;
    }
    if (!ns)
        ns = cfg.ns;
    dm_redis_setup(&cfg.redis);
    struct dm_conn conn;
    if (dm_redis_connect(&conn) != 0) {
        fprintf(stderr, "dmutex ls: %s\n", conn.errstr);
        dm_config_free(&cfg);
        return 1;
    }
    redisContext *c = conn.c;

    /* Every name ever granted has a token key: SCAN for ns:{*}:token. */
    char **names = NULL;
    size_t n = 0, cap = 0;
    char cursor[32] = "0";
    char *match = key_of(ns, "*", DM_KEY_TOKEN);
    do {
        redisReply *r = match ? cmd(&conn, "SCAN %s MATCH %s COUNT 1000", cursor, match) : NULL;
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            fprintf(stderr, "dmutex ls: SCAN: %s\n", r && r->type == REDIS_REPLY_ERROR ? r->str :
                    match ? c->errstr : "out of memory");
            if (r) freeReplyObject(r);
            free(match);
            dm_redis_close(&conn);
            dm_config_free(&cfg);
            return 1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const char *name;
            size_t namelen;
            if (!dm_keys_name(keys->element[i]->str, keys->element[i]->len, ns, DM_KEY_TOKEN,
                              &name, &namelen))
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                names = realloc(names, cap * sizeof *names);
            }
            names[n++] = strndup(name, namelen);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    free(match);
    qsort(names, n, sizeof *names, by_name);

    if (json) {
        fputs("{\"namespace\": ", stdout);
        json_str(stdout, ns);
        fputs(", \"redis\": ", stdout);
        json_str(stdout, dm_redis_addr());
        fputs(", \"locks\": [", stdout);
    } else {
        printf("%-24s %-8s %-44s %9s %16s %7s %9s\n", "NAME", "STATE", "HOLDER", "LEASE_MS",
               "TOKEN", "WAITERS", "LISTENING");
    }
    for (size_t i = 0; i < n; i++) {
        const char *nm = names[i];
        redisReply *hold = key_cmd(&conn, "HGETALL %s", ns, nm, DM_KEY_LOCK);
        redisReply *pttl = key_cmd(&conn, "PTTL %s", ns, nm, DM_KEY_LOCK);
        redisReply *tok = key_cmd(&conn, "GET %s", ns, nm, DM_KEY_TOKEN);
        redisReply *last = key_cmd(&conn, "GET %s", ns, nm, DM_KEY_HOLDER);
        redisReply *subs = key_cmd(&conn, "PUBSUB NUMSUB %s", ns, nm, DM_KEY_RELEASED);
        redisReply *queue = key_cmd(&conn, "LLEN %s", ns, nm, DM_KEY_QUEUE);
        if (!hold || !pttl || !tok || !last || !subs || !queue) {
            fprintf(stderr, "dmutex ls: %s\n", c->errstr);
            return 1;
        }
        char holder[128] = "-";
        const char *state = "free";
        if (hold->type == REDIS_REPLY_ARRAY && hold->elements >= 2) {
            snprintf(holder, sizeof holder, "%s x%s", hold->element[0]->str, hold->element[1]->str);
            state = "held";
        } else if (last->type == REDIS_REPLY_STRING) {
            /* the marker says how the last grant ended */
            struct dm_holder m;
            dm_keys_holder_decode(last->str, &m);
            if (m.state == DM_HOLDER_EXPIRY_SEEN)
                state = "delayed";
            else if (m.state == DM_HOLDER_GRANTED)
                state = "expired";
        }
        char lease[24] = "-";
        if (pttl->type == REDIS_REPLY_INTEGER && pttl->integer >= 0)
            snprintf(lease, sizeof lease, "%lld", pttl->integer);
        long long listening = subs->type == REDIS_REPLY_ARRAY && subs->elements == 2
                                  ? subs->element[1]->integer : 0;
        long long waiters = queue->type == REDIS_REPLY_INTEGER ? queue->integer : 0;
        const char *token = tok->type == REDIS_REPLY_STRING ? tok->str : NULL;
        if (json) {
            int held = state[0] == 'h';
            fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", stdout);
            json_str(stdout, nm);
            printf(", \"state\": \"%s\", \"holder\": ", state);
            if (held)
                json_str(stdout, hold->element[0]->str);
            else
                fputs("null", stdout);
            fputs(", \"holds\": ", stdout);
            json_int_or_null(stdout, held ? hold->element[1]->str : NULL);
            fputs(", \"lease_ms\": ", stdout);
            json_int_or_null(stdout, lease[0] == '-' ? NULL : lease);
            fputs(", \"token\": ", stdout);
            json_int_or_null(stdout, token);
            printf(", \"waiters\": %lld, \"listening\": %lld}", waiters, listening);
        } else {
            printf("%-24s %-8s %-44s %9s %16s %7lld %9lld\n", nm, state, holder, lease,
                   token ? token : "-", waiters, listening);
        }
        freeReplyObject(hold);
        freeReplyObject(pttl);
        freeReplyObject(tok);
        freeReplyObject(last);
        freeReplyObject(subs);
        freeReplyObject(queue);
        free(names[i]);
    }
    if (json)
        fputs(n ? "\n]}\n" : "]}\n", stdout);
    else if (n == 0)
        printf("(no locks in namespace %s at %s)\n", ns, dm_redis_addr());
    free(names);
    dm_redis_close(&conn);
    dm_config_free(&cfg);
    return 0;
}
