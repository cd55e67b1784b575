/* dmutex unlock: end a lock's hold from outside, for an operator whose
 * holder is gone. The decision and the release are one step on the store
 * (its admin_force; Redis: shim/redis/lua/force.lua), so the refusal
 * cannot race a holder's renewal, and a forced release is the protocol's
 * own handover. */
#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "locks.h"

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
    "  -r, --redis URL       override the server, a REDIS_URL (below)\n"
    "  -n, --namespace NS    key namespace (default: the config's)\n"
    "  -f, --force           release even while the lease is alive\n"
    "  -h, --help            this text\n"
    "\n"
    DM_URL_HELP
    "\n"
    "Exit status: 0 released, or not held; 1 refused (held, no --force) or the\n"
    "server cannot be reached; 2 usage; 78 bad config.\n";

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
    char who[512], err[DM_STORE_MSG_MAX];
    who_am_i(who, sizeof who);
    struct dm_force f;
    int rc = 1;
    if (dm_store->admin_force(ns, name, force, who, &f, err, sizeof err) != 0) {
        fprintf(stderr, "dmutex unlock: %s\n", err);
    } else if (f.verdict == DM_FORCE_REFUSED) {
        /* Who it is, and whether it renews, as the holder's record and
         * the locks say (a second read: the refusal itself is the store's
         * one step). */
        char desc[600] = "", alive[160] = "";
        dm_locks_who(lc, f.owner, desc, sizeof desc);
        struct dm_lock_row *rows;
        size_t n;
        char rerr[DM_ERR_MAX];
        if (dm_locks_read(lc, &rows, &n, rerr, sizeof rerr) == 0) {
            for (size_t i = 0; i < n; i++) {
                const struct dm_lock_row *l = &rows[i];
                if (strcmp(l->name, name) != 0 || !l->owner || strcmp(l->owner, f.owner) != 0)
                    continue;
                int a = dm_locks_alive(l);
                if (a >= 0)
                    snprintf(alive, sizeof alive, "; its lease was renewed %.1f s ago (it renews "
                             "every %.1f s): %s", (double)l->renewed_ago_ms / 1000,
                             (double)l->renew_ms / 1000,
                             a ? "alive as far as the server can tell"
                               : "NOT renewing: stopped, cut off from the server, or dead");
            }
            dm_store_rows_free(rows, n);
        }
        fprintf(stderr, "dmutex unlock: lock %s (namespace %s at %s) is held by %s%s%s%s, "
                "fencing token %s, its lease alive for %lld ms more%s: a live holder renews "
                "it, so it is not released; a dead holder's lease runs out by itself (then the "
                "next locker takes it). --force releases it now.\n", name, ns,
                dm_store->where(), desc[0] ? desc : f.owner, desc[0] ? " (owner " : "",
                desc[0] ? f.owner : "", desc[0] ? ")" : "", f.token, f.lease_left_ms, alive);
    } else if (f.verdict == DM_FORCE_NOT_HELD) {
        static const char *const how[] = {
            [DM_LAST_NONE] = "never granted, or its last holder released it",
            [DM_LAST_EXPIRED] = "its last holder's lease ran out: the next locker takes it",
            [DM_LAST_EXPIRY_SEEN] = "an expired lease was seen: the next locker takes it after "
                                    "lock_delay_ms",
            [DM_LAST_KEPT_OFF] = "kept off after a server restart that lost its data, for a "
                                 "lease after the server's start",
            [DM_LAST_FORCED] = "it was forced free",
        };
        printf("lock %s is not held (%s): nothing to release\n", name, how[f.last]);
        rc = 0;
    } else {
        printf("lock %s: forced release of %s's hold (fencing token %s); token now %lld; ", name,
               f.owner, *f.token ? f.token : "?", f.new_token);
        if (*f.next)
            printf("handed to the next waiter %s (token %lld)\n", f.next, f.next_token);
        else
            printf("free, nobody was waiting\n");
        rc = 0;
    }
    dm_locks_disconnect(lc);
    return rc;
}
