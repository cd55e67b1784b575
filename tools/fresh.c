/* dmutex fresh: declare a server's lock data continuous, so that a lock
 * granted first on a server run is granted at once rather than a lease
 * after the server's start (acquire.lua, "Restarts"): the server's run_id
 * in NS:intact (this run lost nothing; a restart voids it), or "durable"
 * (appendfsync always, checked here: no restart loses anything). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "keys.h"
#include "locks.h"
#include "redis.h"

static const char fresh_usage[] =
    "usage: dmutex fresh [-c CONFIG] [-r REDIS_URL] [-n NAMESPACE] [--durable]\n"
    "\n"
    "Tells the server's locks that its data is continuous. A lock granted\n"
    "first on a server run (after a restart, or on a new server) whose\n"
    "server is up for less than a lease is, by default, granted to nobody\n"
    "until a lease after the server's start: a restart may have lost the\n"
    "hold of a process still inside (no persistence, an older snapshot,\n"
    "AOF everysec after an OS crash), and that holder stops at its next\n"
    "renewal. Two declarations spare that wait:\n"
    "\n"
    "  (default)   this server run has lost nothing: a server just created,\n"
    "              before any dmutex process used it. Its run_id goes in\n"
    "              NS:intact; a restart gives the server a new run_id, which\n"
    "              voids the declaration.\n"
    "  --durable   every restart of this server loses nothing: appendonly yes\n"
    "              and appendfsync always, checked now (CONFIG GET: run it as\n"
    "              a user that may); NS:intact = \"durable\". Void while the\n"
    "              server writes no AOF; but a change made at run time is not\n"
    "              seen: DEL NS:intact before CONFIG SET appendonly no or\n"
    "              appendfsync everysec (the server's stale AOF would bring\n"
    "              the declaration back).\n"
    "\n"
    "A promoted replica never waits (its data came by replication; what a\n"
    "failover may lose is min_replicas' matter). Redis Cluster makes no such\n"
    "wait (docs/failures.md), so there is nothing to declare there.\n"
    "\n"
    "  -c, --config FILE     the server and namespace (default: the defaults)\n"
    "  -r, --redis URL       the server (default: the config's)\n"
    "  -n, --namespace NS    key namespace (default: the config's)\n"
    "  -d, --durable         declare every restart lossless (see above)\n"
    "  -h, --help            this text\n"
    "\n"
    "Exit status: 0 declared; 1 the server cannot be reached, refused, or\n"
    "(--durable) is not set up so; 2 usage; 78 bad config.\n";

/* ARGV[1] "durable" or "": the marker's value, or the server's run_id. */
static const char fresh_lua[] =
    "local id = ARGV[1]\n"
    "if id == '' then id = string.match(redis.call('info', 'server'), 'run_id:(%x+)') end\n"
    "redis.call('set', KEYS[1], id)\n"
    "return id\n";

/* --durable: appendonly yes and appendfsync always, by CONFIG GET on conn;
 * 0, or 1 with the reason said. */
static int durable_checked(struct dm_conn *conn)
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
            fprintf(stderr, "dmutex fresh --durable: redis at %s: %s %s: a restart may lose "
                    "acknowledged writes; not declared (set appendonly yes and appendfsync "
                    "always, or declare only this server run: dmutex fresh)\n", dm_redis_addr(),
                    want[i][0], is);
        }
        if (r)
            freeReplyObject(r);
        if (!ok)
            return 1;
    }
    return 0;
}

int dm_cli_fresh(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "redis", required_argument, NULL, 'r' },
        { "namespace", required_argument, NULL, 'n' },
        { "durable", no_argument, NULL, 'd' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cfg_path = NULL, *url = getenv("DMUTEX_REDIS"), *ns = NULL;
    int ch, durable = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:r:n:dh", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': cfg_path = optarg; break;
        case 'r': url = optarg; break;
        case 'n': ns = optarg; break;
        case 'd': durable = 1; break;
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
        fprintf(stderr, "dmutex fresh: %s is a Redis Cluster, where locks do not wait after a "
                "node's start (docs/failures.md): nothing to declare\n", dm_redis_addr());
        dm_locks_disconnect(lc);
        return 1;
    }
    size_t len = dm_keys_intact(NULL, 0, ns) + 1;
    char *key = malloc(len);
    redisReply *rep = NULL;
    if (durable && durable_checked(dm_locks_conn(lc)) != 0) {
        free(key);
        dm_locks_disconnect(lc);
        return 1;
    }
    if (key) {
        dm_keys_intact(key, len, ns);
        const char *args[] = { "EVAL", fresh_lua, "1", key, durable ? "durable" : "" };
        rep = dm_redis_command_argv(dm_locks_conn(lc), "fresh", 5, args);
    }
    int rc = 1;
    if (!key)
        fputs("dmutex fresh: out of memory\n", stderr);
    else if (!rep)
        fprintf(stderr, "dmutex fresh: %s\n", dm_locks_conn(lc)->errstr);
    else if (rep->type != REDIS_REPLY_STRING)
        fprintf(stderr, "dmutex fresh: %s: unexpected reply\n", dm_redis_addr());
    else {
        if (durable)
            printf("redis at %s: declared durable (%s): after a restart its locks are granted "
                   "at once while it writes an AOF\n", dm_redis_addr(), key);
        else
            printf("redis at %s (run_id %s): declared to have lost no lock data (%s); its "
                   "locks are granted at once until it restarts\n", dm_redis_addr(), rep->str,
                   key);
        rc = 0;
    }
    if (rep)
        freeReplyObject(rep);
    free(key);
    dm_locks_disconnect(lc);
    return rc;
}
