/* dmutex fresh: declare a server's lock data continuous, so that a lock
 * granted first on a server run is granted at once rather than a lease
 * after the server's start (acquire.lua, "Restarts"): the store's
 * admin_fresh (Redis: the server's run_id in NS:intact, or "durable",
 * shim/redis/admin.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "locks.h"

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
    "  -r, --redis URL       the server, a REDIS_URL (below; default: the config's)\n"
    "  -n, --namespace NS    key namespace (default: the config's)\n"
    "      --durable         declare every restart lossless (see above)\n"
    "  -h, --help            this text\n"
    "\n"
    DM_URL_HELP
    "\n"
    "Exit status: 0 declared; 1 the server cannot be reached, refused, or\n"
    "(--durable) is not set up so; 2 usage; 78 bad config.\n";

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
    /* -d: the old spelling of --durable, still taken (fresh has no other
     * -d) but no longer shown, so that the texts give -d one meaning, top's
     * delay. */
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
    char said[DM_STORE_MSG_MAX], err[DM_STORE_MSG_MAX];
    int rc = dm_store->admin_fresh(dm_locks_ns(lc), durable, said, sizeof said, err, sizeof err);
    if (rc == 0)
        printf("%s\n", said);
    else
        fprintf(stderr, "dmutex fresh%s: %s\n", rc == -2 ? " --durable" : "", err);
    dm_locks_disconnect(lc);
    return rc == 0 ? 0 : 1;
}
