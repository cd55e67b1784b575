/* dmutex top: the locks of a namespace, read again every few seconds
 * (tools/locks.c, as ls reads them), with each lock's acquisitions per
 * second: the growth of its fencing counter between two reads (every
 * grant, direct or handed over, draws one token). Read-only. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "locks.h"
#include "util.h"

#define TOP_DEFAULT_DELAY_S 2.0
#define TOP_MIN_DELAY_S 0.05
/* A counter cannot grow by more than one per microsecond of server time:
 * more means it restarted (lost by the server, then started again from
 * the server's clock in microseconds: see acquire.lua). */
#define TOP_MAX_RATE 1e6

static const char top_usage[] =
    "usage: dmutex top [-c CONFIG | -r REDIS_URL] [-n NAMESPACE] [-d SECONDS]\n"
    "                  [-N ITERATIONS]\n"
    "\n"
    "A live view of the locks of NAMESPACE on the server, redrawn every -d\n"
    "seconds like top(1) (clear screen, redraw) while stdout is a terminal and\n"
    "no -N is given; else each refresh is printed as a plain snapshot:\n"
    "  NAME, STATE, HOLDER (host:pid program (thread) and its hold count, as\n"
    "  the holder's record says), SINCE, ALIVE, LEASE_MS, TOKEN, WAITERS as in\n"
    "  dmutex ls (see dmutex ls -h), with the same lines below a lock (its\n"
    "  holder's owner id and last renewal, the read holders, the processes\n"
    "  waiting), and\n"
    "  ACQ/S      acquisitions per second since the previous refresh: the\n"
    "             growth of the lock's fencing counter (one per grant from the\n"
    "             server; a process's cached re-locks never reach it). \"-\" on\n"
    "             the first refresh and for a name new since the last one,\n"
    "             \"reset\" when the counter restarted.\n"
    "\n"
    "  -c, --config FILE     take the server and namespace from FILE\n"
    "  -r, --redis URL       the server, a REDIS_URL (below; default: $DMUTEX_REDIS,\n"
    "                        else the config's)\n"
    "  -n, --namespace NS    key namespace (default: the config's, or \"dmutex\")\n"
    "  -d, --delay SECONDS   time between refreshes (default 2, fractions allowed)\n"
    "  -N, --iterations N    stop after N refreshes (default: until interrupted)\n"
    "  -h, --help            this text\n"
    "\n"
    DM_URL_HELP
    "\n"
    "Exit status 0; 1 if the server cannot be reached; 2 usage; 78 bad config.\n";

static const struct dm_lock_row *find(const struct dm_lock_row *rows, size_t n, const char *name)
{
    size_t lo = 0, hi = n;      /* rows are sorted by name (dm_locks_read) */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(rows[mid].name, name);
        if (c == 0)
            return &rows[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* The rate of `l` since `prev` (dt seconds earlier), into out. */
static void rate(const struct dm_lock_row *l, const struct dm_lock_row *prev, double dt,
                 char *out, size_t len)
{
    snprintf(out, len, "-");
    if (!prev || !l->token || !prev->token || dt <= 0)
        return;
    unsigned long long a = strtoull(prev->token, NULL, 10), b = strtoull(l->token, NULL, 10);
    if (b < a || (double)(b - a) / dt > TOP_MAX_RATE) {
        snprintf(out, len, "reset");
        return;
    }
    double r = (double)(b - a) / dt;
    snprintf(out, len, r >= 100 || r == 0 ? "%.0f/s" : "%.1f/s", r);
}

static void draw(FILE *out, const char *ns, const struct dm_lock_row *rows, size_t n,
                 const struct dm_lock_row *prev, size_t nprev, int have_prev, double dt,
                 double delay)
{
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%H:%M:%S", localtime_r(&t, &tm));
    size_t held = 0, waiting = 0;
    for (size_t i = 0; i < n; i++) {
        held += rows[i].owner != NULL;
        waiting += (size_t)rows[i].waiters;
    }
    fprintf(out, "dmutex top - %s - namespace %s at %s - %zu locks, %zu held, %zu waiting - "
            "every %.2gs\n\n", when, ns, dm_store->where(), n, held, waiting, delay);
    fprintf(out, "%-24s %-8s %-40s %6s %5s %9s %16s %7s %9s\n", "NAME", "STATE", "HOLDER",
            "SINCE", "ALIVE", "LEASE_MS", "TOKEN", "WAITERS", "ACQ/S");
    for (size_t i = 0; i < n; i++) {
        const struct dm_lock_row *l = &rows[i];
        char holder[640] = "-", lease[24] = "-", r[24], since[24] = "-";
        int alive = dm_locks_alive(l);
        if (l->owner) {
            char own[DM_OWNER_MAX * 4];
            snprintf(holder, sizeof holder, "%s x%s", l->who ? l->who
                     : dm_locks_safe(l->owner, own, sizeof own), l->holds);
            dm_locks_ago(l->since_ms, since, sizeof since);
        }
        if (l->lease_ms >= 0)
            snprintf(lease, sizeof lease, "%lld", l->lease_ms);
        rate(l, have_prev ? find(prev, nprev, l->name) : NULL, dt, r, sizeof r);
        char name[DM_NAME_MAX + 16], safe[DM_NAME_MAX + 1];
        snprintf(name, sizeof name, l->protocol ? "%s [%s]" : "%s",
                 dm_locks_safe(l->name, safe, sizeof safe), l->protocol);
        fprintf(out, "%-24s %-8s %-40s %6s %5s %9s %16s %7lld %9s\n", name, l->state, holder,
                since, !l->owner ? "-" : alive < 0 ? "?" : alive ? "yes" : "NO", lease,
                l->token ? l->token : "-", l->waiters, r);
        dm_locks_print_details(out, l);
    }
    if (n == 0)
        fprintf(out, "(no locks in namespace %s)\n", ns);
}

int dm_cli_top(int argc, char **argv)
{
    enum { OPT_NAMESPACE = 256 };
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "redis", required_argument, NULL, 'r' },
        { "namespace", required_argument, NULL, OPT_NAMESPACE },
        { "delay", required_argument, NULL, 'd' },
        { "iterations", required_argument, NULL, 'N' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cfg_path = NULL, *url = getenv("DMUTEX_REDIS"), *ns = NULL;
    double delay = TOP_DEFAULT_DELAY_S;
    long iterations = 0;
    char *end;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:r:n:d:N:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': cfg_path = optarg; break;
        case 'r': url = optarg; break;
        case 'n':
            /* -n was top's iteration count: a bare number is an old
             * command line more likely than a namespace named so, and
             * taking it for either would be a silent guess. */
            if (*optarg && optarg[strspn(optarg, "0123456789")] == 0) {
                fprintf(stderr, "dmutex top: -n %s: -n is the namespace, as in every command; "
                        "for %s refreshes write -N %s (-n counted refreshes before; a "
                        "namespace named %s: --namespace %s)\n", optarg, optarg, optarg,
                        optarg, optarg);
                return 2;
            }
            ns = optarg;
            break;
        case OPT_NAMESPACE: ns = optarg; break;
        case 'd':
            errno = 0;
            delay = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(delay >= TOP_MIN_DELAY_S) || delay > 86400) {
                fprintf(stderr, "dmutex top: -d %s: not a number of seconds from %g to 86400\n",
                        optarg, TOP_MIN_DELAY_S);
                return 2;
            }
            break;
        case 'N':
            errno = 0;
            iterations = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || iterations < 1) {
                fprintf(stderr, "dmutex top: -N %s: not a positive count\n", optarg);
                return 2;
            }
            break;
        case 'h': fputs(top_usage, stdout); return 0;
        default: fputs(top_usage, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "dmutex top: unexpected argument '%s'\n\n%s", argv[optind], top_usage);
        return 2;
    }
    struct dm_locks_conn *lc;
    int rc = dm_locks_connect("top", cfg_path, url, ns, &lc);
    if (rc != 0)
        return rc;
    ns = dm_locks_ns(lc);
    int live = iterations == 0 && isatty(STDOUT_FILENO);
    struct dm_lock_row *prev = NULL;
    size_t nprev = 0;
    double prev_t = 0;
    int have_prev = 0;
    rc = 0;
    for (long i = 0; iterations == 0 || i < iterations; i++) {
        if (i > 0)
            dm_sleep_ms((long)(delay * 1000));
        struct dm_lock_row *rows;
        size_t n;
        char err[DM_ERR_MAX];
        double t = (double)dm_now_ms() / 1000;
        if (dm_locks_read(lc, &rows, &n, err, sizeof err) != 0) {
            fprintf(stderr, "dmutex top: %s\n", err);
            rc = 1;
            break;
        }
        if (live)
            fputs("\033[H\033[2J", stdout);
        else if (i > 0)
            putchar('\n');
        draw(stdout, ns, rows, n, prev, nprev, have_prev, t - prev_t, delay);
        if (fflush(stdout) != 0) {
            dm_store_rows_free(rows, n);
            rc = 1;
            break;
        }
        if (have_prev)
            dm_store_rows_free(prev, nprev);
        prev = rows;
        nprev = n;
        prev_t = t;
        have_prev = 1;
    }
    if (have_prev)
        dm_store_rows_free(prev, nprev);
    dm_locks_disconnect(lc);
    return rc;
}
