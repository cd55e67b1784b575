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
#include "redis.h"

static const char ls_usage[] =
    "usage: dmutex ls [-c CONFIG | -r REDIS_URL] [-n NAMESPACE]\n"
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
    "  -r, --redis URL     redis://[user:pass@]host[:port][/db] or unix:///path\n"
    "                      (default: $DMUTEX_REDIS, else the config's, else\n"
    "                      127.0.0.1:6379)\n"
    "  -n, --namespace NS  key namespace\n"
    "  -h, --help          this text\n"
    "\n"
    "Exit status 0; 1 if the server cannot be reached; 2 usage; 78 bad config.\n";

static redisReply *cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    return r;
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
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cfg_path = NULL, *url = getenv("DMUTEX_REDIS"), *ns = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:r:n:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': cfg_path = optarg; break;
        case 'r': url = optarg; break;
        case 'n': ns = optarg; break;
        case 'h': fputs(ls_usage, stdout); return 0;
        default: fputs(ls_usage, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dmutex ls: unexpected argument '%s'\n\n%s", argv[optind], ls_usage);
        return 2;
    }
    struct dm_config cfg;
    char err[DM_ERR_MAX];
    if (cfg_path) {
        if (dm_config_load(cfg_path, &cfg, err, sizeof err) != 0) {
            fprintf(stderr, "dmutex: %s\n", err);
            return DM_EX_CONFIG;
        }
    } else {
        dm_config_defaults(&cfg);
    }
    if (url && *url && dm_config_set_redis_url(&cfg, url, err, sizeof err) != 0) {
        char shown[DM_ERR_MAX];
        dm_config_redact_url(url, shown, sizeof shown);
        fprintf(stderr, "dmutex ls: %s: %s\n", shown, err);
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

    /* Every name ever granted has a token key: ns:{NAME}:token. */
    char **names = NULL;
    size_t n = 0, cap = 0;
    char cursor[32] = "0";
    size_t nslen = strlen(ns);
    do {
        redisReply *r = cmd(c, "SCAN %s MATCH %s:{*}:token COUNT 1000", cursor, ns);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            fprintf(stderr, "dmutex ls: SCAN: %s\n", r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
            if (r) freeReplyObject(r);
            dm_redis_close(&conn);
            dm_config_free(&cfg);
            return 1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const char *k = keys->element[i]->str;
            size_t kl = keys->element[i]->len;
            if (kl < nslen + 9 || strncmp(k + nslen, ":{", 2) != 0)
                continue;
            size_t namelen = kl - nslen - 2 - 7;    /* minus ":{" and "}:token" */
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                names = realloc(names, cap * sizeof *names);
            }
            names[n++] = strndup(k + nslen + 2, namelen);
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    qsort(names, n, sizeof *names, by_name);

    printf("%-24s %-8s %-44s %9s %16s %7s %9s\n", "NAME", "STATE", "HOLDER", "LEASE_MS", "TOKEN",
           "WAITERS", "LISTENING");
    for (size_t i = 0; i < n; i++) {
        const char *nm = names[i];
        redisReply *hold = cmd(c, "HGETALL %s:{%s}", ns, nm);
        redisReply *pttl = cmd(c, "PTTL %s:{%s}", ns, nm);
        redisReply *tok = cmd(c, "GET %s:{%s}:token", ns, nm);
        redisReply *last = cmd(c, "GET %s:{%s}:holder", ns, nm);
        redisReply *subs = cmd(c, "PUBSUB NUMSUB %s:{%s}:released", ns, nm);
        redisReply *queue = cmd(c, "LLEN %s:{%s}:queue", ns, nm);
        if (!hold || !pttl || !tok || !last || !subs || !queue) {
            fprintf(stderr, "dmutex ls: %s\n", c->errstr);
            return 1;
        }
        char holder[128] = "-";
        const char *state = "free";
        if (hold->type == REDIS_REPLY_ARRAY && hold->elements >= 2) {
            snprintf(holder, sizeof holder, "%s x%s", hold->element[0]->str, hold->element[1]->str);
            state = "held";
        } else if (last->type == REDIS_REPLY_STRING && last->str[0] == '!') {
            state = "delayed";
        } else if (last->type == REDIS_REPLY_STRING && last->str[0] != '=') {
            state = "expired";
        }
        char lease[24] = "-";
        if (pttl->type == REDIS_REPLY_INTEGER && pttl->integer >= 0)
            snprintf(lease, sizeof lease, "%lld", pttl->integer);
        long long listening = subs->type == REDIS_REPLY_ARRAY && subs->elements == 2
                                  ? subs->element[1]->integer : 0;
        long long waiters = queue->type == REDIS_REPLY_INTEGER ? queue->integer : 0;
        printf("%-24s %-8s %-44s %9s %16s %7lld %9lld\n", nm, state, holder, lease,
               tok->type == REDIS_REPLY_STRING ? tok->str : "-", waiters, listening);
        freeReplyObject(hold);
        freeReplyObject(pttl);
        freeReplyObject(tok);
        freeReplyObject(last);
        freeReplyObject(subs);
        freeReplyObject(queue);
        free(names[i]);
    }
    if (n == 0)
        printf("(no locks in namespace %s at %s)\n", ns, dm_redis_addr());
    free(names);
    dm_redis_close(&conn);
    dm_config_free(&cfg);
    return 0;
}
