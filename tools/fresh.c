/* dmutex fresh: declare a new server that lost no lock data, so that a
 * lock new to it is granted at once rather than a lease after the
 * server's start (acquire.lua, "Restarts"). The declaration is the
 * server's run_id in NS:intact: a restart gives the server a new run_id,
 * which voids it. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "keys.h"
#include "locks.h"
#include "redis.h"

static const char fresh_usage[] =
    "usage: dmutex fresh [-c CONFIG] [-r REDIS_URL] [-n NAMESPACE]\n"
    "\n"
    "Declares that the server has lost no lock data since it started. A\n"
    "server up for less than a lease that lacks a lock's data may have\n"
    "restarted without persistence while a process held the lock; so, by\n"
    "default, nobody is granted such a lock until a lease has passed since\n"
    "the server started (the holder of the lost data stops first). For a\n"
    "server just created, that wait is needless: this command records the\n"
    "server's run_id in NS:intact, and locks new to that server are granted\n"
    "at once. A restart gives the server a new run_id, which voids the\n"
    "declaration. Only run it on a server no dmutex process has used yet.\n"
    "Redis Cluster makes no such check (a node that restarts without its data\n"
    "is not detected: docs/failures.md), so there is nothing to declare there.\n"
    "\n"
    "  -c, --config FILE     the server and namespace (default: the defaults)\n"
    "  -r, --redis URL       the server (default: the config's)\n"
    "  -n, --namespace NS    key namespace (default: the config's)\n"
    "  -h, --help            this text\n"
    "\n"
    "Exit status: 0 declared; 1 the server cannot be reached or refused;\n"
    "2 usage; 78 bad config.\n";

static const char fresh_lua[] =
    "local id = string.match(redis.call('info', 'server'), 'run_id:(%x+)')\n"
    "redis.call('set', KEYS[1], id)\n"
    "return id\n";

int dm_cli_fresh(int argc, char **argv)
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
        case 'h': fputs(fresh_usage, stdout); return 0;
        default: fputs(fresh_usage, stderr); return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "dmutex fresh: no arguments expected\n\n%s", fresh_usage);
        return 2;
    }
    struct dm_locks_conn *lc;
    int r = dm_locks_connect("fresh", cfg_path, url, ns, &lc);
    if (r != 0)
        return r;
    ns = dm_locks_ns(lc);
    if (dm_redis_cluster()) {
        fprintf(stderr, "dmutex fresh: %s is a Redis Cluster, where no restart check is made "
                "(docs/failures.md): nothing to declare\n", dm_redis_addr());
        dm_locks_disconnect(lc);
        return 1;
    }
    size_t len = dm_keys_intact(NULL, 0, ns) + 1;
    char *key = malloc(len);
    redisReply *rep = NULL;
    if (key) {
        dm_keys_intact(key, len, ns);
        const char *args[] = { "EVAL", fresh_lua, "1", key };
        rep = dm_redis_command_argv(dm_locks_conn(lc), "fresh", 4, args);
    }
    int rc = 1;
    if (!key)
        fputs("dmutex fresh: out of memory\n", stderr);
    else if (!rep)
        fprintf(stderr, "dmutex fresh: %s\n", dm_locks_conn(lc)->errstr);
    else if (rep->type != REDIS_REPLY_STRING)
        fprintf(stderr, "dmutex fresh: %s: unexpected reply\n", dm_redis_addr());
    else {
        printf("redis at %s (run_id %s): declared to have lost no lock data (%s); locks new "
               "to it are granted at once until it restarts\n", dm_redis_addr(), rep->str, key);
        rc = 0;
    }
    if (rep)
        freeReplyObject(rep);
    free(key);
    dm_locks_disconnect(lc);
    return rc;
}
