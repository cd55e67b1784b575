/* dmutex ls: what the server knows about the locks of one namespace: for
 * each name ever granted, its state, holder and hold count, remaining
 * lease, fencing token, how its last hold ended, and the processes
 * subscribed to its release notices. Read-only: never changes a key. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "locks.h"

static const char ls_usage[] =
    "usage: dmutex ls [-c CONFIG | -r REDIS_URL] [-n NAMESPACE] [--json]\n"
    "\n"
    "Lists the cluster locks of NAMESPACE (default: the config's, or \"dmutex\"):\n"
    "  NAME       the lock name (config `name`, default the symbol); a partner\n"
    "             protocol's lock (config protocol = \"setnx\" or \"redisson\") is\n"
    "             marked [setnx] or [redisson] and listed only with -c CONFIG\n"
    "             naming it (its key is the bare name, which no scan of the\n"
    "             namespace finds); its HOLDER is the token or field its client\n"
    "             wrote, or the dmutex process holding it\n"
    "  STATE      held, free, other (a partner protocol's key holding another\n"
    "             type), expired (last holder's lease ran out unreleased),\n"
    "             delayed (lock_delay_ms after an expiry, or a lease after a\n"
    "             restart that lost the data), forced (dmutex\n"
    "             unlock --force freed it), or read (an rwlock held by readers)\n"
    "  HOLDER     the holding process as host:pid program (thread), and its\n"
    "             hold count; its owner id <process id>:<thread seq> when the\n"
    "             holder wrote no record (an older dmutex, or a record that\n"
    "             expired: it renews nothing); for read, the number of reader\n"
    "             processes (\"N readers\")\n"
    "  SINCE      how long it has held it\n"
    "  ALIVE      yes: its lease was renewed within its renewal interval (plus\n"
    "             half of it and a second), as a live holder's is; NO: it was not\n"
    "             (stopped, cut off from the server, or dead: its lease runs out\n"
    "             in LEASE_MS); ?: unknown (no record)\n"
    "  LEASE_MS   milliseconds left on the holder's lease (read: the latest\n"
    "             reader's)\n"
    "  TOKEN      fencing token of the latest grant\n"
    "  WAITERS    processes queued for it (fair and cache modes)\n"
    "  LISTENING  processes subscribed to its release notices (fair = false:\n"
    "             waiting now, or having waited before)\n"
    "  NODE       Redis Cluster only: the node that holds its keys (the primary\n"
    "             of its slot; --json: \"node\")\n"
    "Below a lock, indented: the holder's owner id and when its lease was last\n"
    "renewed; an rwlock's read holders (reading ...); the processes waiting\n"
    "for it (waiting host:pid program (thread) for how long, oldest first by\n"
    "their own clocks), as their records say. Each process writes its record\n"
    "from a thread of its own, not from its lock calls: a wait shows once it\n"
    "has lasted min(renew_ms/4, 1 s).\n"
    "\n"
    "  -c, --config FILE   take the server and namespace from FILE\n"
    "  -r, --redis URL     the server, a REDIS_URL (below; default: $DMUTEX_REDIS,\n"
    "                      else the config's, else 127.0.0.1:6379): with Sentinel\n"
    "                      the primary the sentinels name, with redis-cluster://\n"
    "                      every primary is scanned\n"
    "  -n, --namespace NS  key namespace\n"
    "      --json          print one JSON document instead of the table:\n"
    "                      {\"namespace\", \"redis\", \"locks\": [{\"name\", \"protocol\",\n"
    "                      \"state\",\n"
    "                      \"holder\" (the owner id), \"who\", \"since_ms\" (Unix ms),\n"
    "                      \"renewed_ms_ago\", \"renew_ms\", \"alive\" (true, false, null),\n"
    "                      \"holds\", \"lease_ms\", \"token\", \"waiters\", \"listening\",\n"
    "                      \"readers\", \"waiting\": [{\"owner\", \"who\", \"since_ms\"}]}]},\n"
    "                      null where the table shows - or ?\n"
    "  -h, --help          this text\n"
    "\n"
    DM_URL_HELP
    "\n"
    "Exit status 0; 1 if the server cannot be reached; 2 usage; 78 bad config.\n";

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

/* `, "key": [{"owner", "who", "since_ms"}, ...]` of the processes p[0..n). */
static void json_people(FILE *out, const char *key, const struct dm_lock_waiter *p, size_t n)
{
    fprintf(out, ", \"%s\": [", key);
    for (size_t k = 0; k < n; k++) {
        fputs(k ? ", {\"owner\": " : "{\"owner\": ", out);
        json_str(out, p[k].owner);
        fputs(", \"who\": ", out);
        json_str(out, p[k].who);
        fprintf(out, ", \"since_ms\": %lld}", p[k].since_ms);
    }
    fputs("]", out);
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
    struct dm_locks_conn *lc;
    int rc = dm_locks_connect("ls", cfg_path, url, ns, &lc);
    if (rc != 0)
        return rc;
    ns = dm_locks_ns(lc);
    struct dm_lock_row *rows;
    size_t n;
    char err[DM_ERR_MAX];
    if (dm_locks_read(lc, &rows, &n, err, sizeof err) != 0) {
        fprintf(stderr, "dmutex ls: %s\n", err);
        dm_locks_disconnect(lc);
        return 1;
    }

    if (json) {
        fputs("{\"namespace\": ", stdout);
        json_str(stdout, ns);
        fputs(", \"redis\": ", stdout);
        json_str(stdout, dm_store->where());
        fputs(", \"locks\": [", stdout);
    } else {
        printf("%-24s %-8s %-44s %6s %5s %9s %16s %7s %9s%s\n", "NAME", "STATE", "HOLDER",
               "SINCE", "ALIVE", "LEASE_MS", "TOKEN", "WAITERS", "LISTENING",
               dm_store->admin_sharded() ? "  NODE" : "");
    }
    for (size_t i = 0; i < n; i++) {
        const struct dm_lock_row *l = &rows[i];
        char lease[24] = "-";
        if (l->lease_ms >= 0)
            snprintf(lease, sizeof lease, "%lld", l->lease_ms);
        if (json) {
            fputs(i ? ",\n  {\"name\": " : "\n  {\"name\": ", stdout);
            json_str(stdout, l->name);
            printf(", \"protocol\": \"%s\", \"state\": \"%s\", \"holder\": ",
                   l->protocol ? l->protocol : "dmutex", l->state);
            if (l->owner)
                json_str(stdout, l->owner);
            else
                fputs("null", stdout);
            fputs(", \"who\": ", stdout);
            if (l->who)
                json_str(stdout, l->who);
            else
                fputs("null", stdout);
            if (l->since_ms >= 0)
                printf(", \"since_ms\": %lld", l->since_ms);
            else
                fputs(", \"since_ms\": null", stdout);
            if (l->renewed_ago_ms >= 0)
                printf(", \"renewed_ms_ago\": %lld", l->renewed_ago_ms);
            else
                fputs(", \"renewed_ms_ago\": null", stdout);
            if (l->renew_ms > 0)
                printf(", \"renew_ms\": %ld", l->renew_ms);
            else
                fputs(", \"renew_ms\": null", stdout);
            int alive = dm_locks_alive(l);
            printf(", \"alive\": %s", alive < 0 ? "null" : alive ? "true" : "false");
            fputs(", \"holds\": ", stdout);
            json_int_or_null(stdout, l->holds);
            fputs(", \"lease_ms\": ", stdout);
            json_int_or_null(stdout, lease[0] == '-' ? NULL : lease);
            fputs(", \"token\": ", stdout);
            json_int_or_null(stdout, l->token);
            printf(", \"waiters\": %lld, \"listening\": %lld, \"readers\": %lld", l->waiters,
                   l->listening, l->readers);
            json_people(stdout, "waiting", l->waiting, l->nwaiting);
            json_people(stdout, "reading", l->reading, l->nreading);
            if (l->node) {      /* Redis Cluster: the node of the lock's slot */
                fputs(", \"node\": ", stdout);
                json_str(stdout, l->node);
            }
            fputs("}", stdout);
        } else {
            char holder[640] = "-", since[24] = "-", safe[DM_NAME_MAX + 1];
            int alive = dm_locks_alive(l);
            if (l->owner)
                snprintf(holder, sizeof holder, "%s x%s", l->who ? l->who
                         : dm_locks_safe(l->owner, safe, sizeof safe), l->holds);
            else if (l->readers > 0)
                snprintf(holder, sizeof holder, "%lld reader%s", l->readers,
                         l->readers == 1 ? "" : "s");
            if (l->owner)
                dm_locks_ago(l->since_ms, since, sizeof since);
            char name[DM_NAME_MAX + 16];
            snprintf(name, sizeof name, l->protocol ? "%s [%s]" : "%s",
                     dm_locks_safe(l->name, safe, sizeof safe), l->protocol);
            printf("%-24s %-8s %-44s %6s %5s %9s %16s %7lld %9lld%s%s\n", name, l->state,
                   holder, since, !l->owner ? "-" : alive < 0 ? "?" : alive ? "yes" : "NO", lease,
                   l->token ? l->token : "-", l->waiters, l->listening, l->node ? "  " : "",
                   l->node ? l->node : "");
            dm_locks_print_details(stdout, l);
        }
    }
    if (json)
        fputs(n ? "\n]}\n" : "]}\n", stdout);
    else if (n == 0)
        printf("(no locks in namespace %s at %s)\n", ns, dm_store->where());
    dm_store_rows_free(rows, n);
    dm_locks_disconnect(lc);
    return fflush(stdout) == 0 ? 0 : 1;
}
