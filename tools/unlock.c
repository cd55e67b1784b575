/* dmutex unlock: end a lock's hold from outside, for an operator whose
 * holder is gone. The decision and the release are one script
 * (shim/redis/lua/force.lua) on the server, so the refusal cannot race a
 * holder's renewal, and a forced release is the protocol's own handover. */
#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "keys.h"
#include "locks.h"
#include "lua_scripts.h"
#include "redis.h"

static const char unlock_usage[] =
    "usage: dmutex unlock -c CONFIG [-r REDIS_URL] [-n NAMESPACE] [--force] NAME\n"
    "\n"
    "Releases lock NAME for a holder that is gone. The rule: a hold whose lease\n"
    "is alive on the server may be a live holder's (a live holder renews it),\n"
    "so without --force it is refused, whether the holder process is alive or\n"
    "was killed: the refusal names the holder, its token and the lease left.\n"
    "A dead holder's lease runs out by itself within lease_ms; the next locker\n"
    "then takes the lock (a robust mutex sees EOWNERDEAD). A lock that is not\n"
    "held is left alone (exit 0).\n"
    "\n"
    "With --force the hold ends now, as a release would end it: the lock goes\n"
    "to the next fair waiter (or is freed and waiters are told), the fencing\n"
    "token is bumped past the old holder's, and the old hold is recorded as\n"
    "lost: if the holder is alive, its next renewal finds the lease lost\n"
    "(on_lease_lost decides: abort, or warn and its unlock returns EPERM), and\n"
    "its release answers lost, never released. The server logs who did it\n"
    "(a warning in its log, and NS:{NAME}:forced keeps the last one); the\n"
    "next holder, the waiter handed the lock or the next locker, sees the\n"
    "holder as dead (EOWNERDEAD for a robust mutex).\n"
    "Only force a lock whose holder you know to be dead or stuck: a live\n"
    "holder keeps running its critical section while another enters it.\n"
    "\n"
    "  -c, --config FILE     the server, namespace and lease (required)\n"
    "  -r, --redis URL       override the server\n"
    "  -n, --namespace NS    key namespace (default: the config's)\n"
    "  -f, --force           release even while the lease is alive\n"
    "  -h, --help            this text\n"
    "\n"
    "Exit status: 0 released, or not held; 1 refused (held, no --force) or the\n"
    "server cannot be reached; 2 usage; 78 bad config.\n";

/* force.lua's first element. */
enum force_reply { FORCE_REFUSED = 0,   /* {0, owner, pttl, token}: the lease is alive */
                   FORCE_RELEASED = 1,  /* {1, owner, old token, new token, next waiter, its token} */
                   FORCE_NOT_HELD = 2   /* {2, holder marker} */ };

/* "user@host pid N": who forced, for the server's log. No '#' and no
 * newline (the marker and the record are parsed). */
static void who_am_i(char *out, size_t len)
{
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    struct passwd *pw = getpwuid(geteuid());
    snprintf(out, len, "%s@%s pid %ld", pw && pw->pw_name ? pw->pw_name : "?", host,
             (long)getpid());
    for (char *p = out; *p; p++)
        if (*p == '#' || *p == '\n' || *p == '\r')
            *p = '_';
}

int dm_cli_unlock(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "redis", required_argument, NULL, 'r' },
        { "namespace", required_argument, NULL, 'n' },
        { "force", no_argument, NULL, 'f' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cfg_path = NULL, *url = getenv("DMUTEX_REDIS"), *ns = NULL;
    int ch, force = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:r:n:fh", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': cfg_path = optarg; break;
        case 'r': url = optarg; break;
        case 'n': ns = optarg; break;
        case 'f': force = 1; break;
        case 'h': fputs(unlock_usage, stdout); return 0;
        default: fputs(unlock_usage, stderr); return 2;
        }
    }
    if (!cfg_path) {
        fprintf(stderr, "dmutex unlock: -c CONFIG is required\n\n%s", unlock_usage);
        return 2;
    }
    if (optind != argc - 1) {
        fprintf(stderr, "dmutex unlock: %s\n\n%s", optind >= argc ? "no NAME given" :
                "one NAME only", unlock_usage);
        return 2;
    }
    const char *name = argv[optind];
    struct dm_locks_conn *lc;
    int r = dm_locks_connect("unlock", cfg_path, url, ns, &lc);
    if (r != 0)
        return r;
    ns = dm_locks_ns(lc);
    const struct dm_config *cfg = dm_locks_config(lc);

    static const enum dm_key kk[] = { DM_KEY_LOCK, DM_KEY_HOLDER, DM_KEY_TOKEN, DM_KEY_QUEUE,
                                      DM_KEY_QTIME, DM_KEY_LOST, DM_KEY_FORCED, DM_KEY_EPOCH };
    enum { NK = sizeof kk / sizeof kk[0] };
    char *keys[NK + 2] = { 0 };
    int oom = 0;
    for (int i = 0; i < NK; i++)
        oom |= !(keys[i] = dm_locks_key(ns, name, kk[i]));
    oom |= !(keys[NK] = dm_locks_key(ns, name, DM_KEY_RELEASED));
    oom |= !(keys[NK + 1] = dm_locks_key(ns, name, DM_KEY_WAIT));
    char who[512], keep[24], nkeys[8];
    who_am_i(who, sizeof who);
    /* also the lease of a handover: the whole lease, as the shim's release gives it */
    snprintf(keep, sizeof keep, "%ld", cfg->lease_ms);
    snprintf(nkeys, sizeof nkeys, "%d", NK);
    redisReply *rep = NULL;
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
        struct dm_conn *conn = dm_locks_conn(lc);
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
    int rc = 1;
    if (oom) {
        fprintf(stderr, "dmutex unlock: out of memory\n");
    } else if (!rep) {
        fprintf(stderr, "dmutex unlock: lock %s: %s\n", name, dm_locks_conn(lc)->errstr);
    } else if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 2) {
        fprintf(stderr, "dmutex unlock: lock %s at %s: unexpected reply from force.lua\n", name,
                dm_redis_addr());
    } else if (rep->element[0]->integer == FORCE_REFUSED && rep->elements == 4) {
        fprintf(stderr, "dmutex unlock: lock %s (namespace %s at %s) is held by %s, fencing "
                "token %s, its lease alive for %lld ms more: a live holder renews it, so it "
                "is not released; a dead holder's lease runs out by itself (then the next "
                "locker takes it). --force releases it now.\n", name, ns,
                dm_redis_addr(), rep->element[1]->str, rep->element[3]->str,
                rep->element[2]->integer);
    } else if (rep->element[0]->integer == FORCE_NOT_HELD) {
        struct dm_holder m;
        const char *marker = rep->element[1]->str;
        const char *how = "never granted, or its last holder released it";
        if (*marker && (dm_keys_holder_decode(marker, &m), 1)) {
            if (m.state == DM_HOLDER_GRANTED)
                how = "its last holder's lease ran out: the next locker takes it";
            else if (m.state == DM_HOLDER_EXPIRY_SEEN)
                how = "an expired lease was seen: the next locker takes it after lock_delay_ms";
            else if (m.state == DM_HOLDER_KEPT_OFF)
                how = "kept off after a server restart that lost its data, for a lease after "
                      "the server's start";
            else if (m.state == DM_HOLDER_FORCED)
                how = "it was forced free";
        }
        printf("lock %s is not held (%s): nothing to release\n", name, how);
        rc = 0;
    } else if (rep->element[0]->integer == FORCE_RELEASED && rep->elements == 6) {
        printf("lock %s: forced release of %s's hold (fencing token %s); token now %lld; ", name,
               rep->element[1]->str, *rep->element[2]->str ? rep->element[2]->str : "?",
               rep->element[3]->integer);
        if (*rep->element[4]->str)
            printf("handed to the next waiter %s (token %lld)\n", rep->element[4]->str,
                   rep->element[5]->integer);
        else
            printf("free, nobody was waiting\n");
        rc = 0;
    } else {
        fprintf(stderr, "dmutex unlock: lock %s at %s: unexpected reply from force.lua\n", name,
                dm_redis_addr());
    }
    if (rep)
        freeReplyObject(rep);
    for (int i = 0; i < NK + 2; i++)
        free(keys[i]);
    dm_locks_disconnect(lc);
    return rc;
}
