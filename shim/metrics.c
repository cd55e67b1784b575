/* metrics: the metrics file and the exit summary (see metrics.h).
 *
 * The counters are kept where the facts are (stats.h); this module only
 * reads them: a snapshot of every name's counters is copied under
 * cluster's table mutex (no I/O there), sorted by name, formatted in
 * memory and written to `.<file>.<pid>.tmp` beside the target, then
 * renamed over it: node_exporter (or any reader) sees the old file or the
 * new one, never part of one. No fsync: after a crash the counters start
 * again anyway.
 *
 * Which process writes: the one that loaded the shim, and a fork child
 * only when the path has %p (its own file, named by its pid). A child of
 * a path without %p writes nothing: replacing its parent's file with its
 * own counts would make the parent's counters go backwards.
 *
 * A write that fails (no directory, no right, disk full) is reported once
 * with the path and the reason, and again only after a write succeeded:
 * not once per interval. The program runs on either way. */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "dmutex.h"
#include "log.h"
#include "stats.h"

#define DM_METRICS_NAMES_MAX 100000     /* names a snapshot takes at most */
#define DM_METRICS_PATH_MAX  8192       /* the path, %p expanded */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;  /* all below; held across a write */
static pthread_cond_t cv;               /* the writer's interval wait (CLOCK_MONOTONIC) */
static int cv_ready;
static const char *path_tmpl;           /* metrics.file, "%p" = pid; NULL: no file */
static long interval_ms;
static int may_write;                   /* this process writes the file */
static int started;                     /* the writer thread runs (or could not start); atomic */
static int stopping;                    /* exit: the writer writes no more */
static int failing;                     /* the last write failed and was reported */

void dm_metrics_init(const struct dm_config *cfg)
{
    path_tmpl = cfg->metrics.file;
    interval_ms = cfg->metrics.interval_ms > 0 ? cfg->metrics.interval_ms : DM_METRICS_INTERVAL_MS;
    may_write = path_tmpl != NULL;
}

/* ---- the snapshot -------------------------------------------------------- */

struct row {
    char name[DM_NAME_MAX + 1];
    struct dm_stats st;
    uint64_t lock_calls;        /* the wait histogram's count */
    int is_lock, is_cond;       /* a lock's name, a listed condition variable's (or both) */
};

struct snapshot {
    struct row *rows;
    size_t n, cap;
    int short_of_memory;
};

/* Under cluster's table mutex: a copy, no I/O. */
static void take_row(const struct dm_cluster_lock *l, void *arg)
{
    struct snapshot *s = arg;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct row *r = cap <= DM_METRICS_NAMES_MAX ? realloc(s->rows, cap * sizeof *r)
                                                            : NULL;
        if (!r) {
            s->short_of_memory = 1;
            return;
        }
        s->rows = r;
        s->cap = cap;
    }
    struct row *r = &s->rows[s->n++];
    snprintf(r->name, sizeof r->name, "%s", l->name);
    dm_stats_copy(&r->st, &l->stats);
    r->lock_calls = dm_stats_count(&r->st.wait);
    r->is_lock = l->is_lock;
    r->is_cond = l->is_cond;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct row *)a)->name, ((const struct row *)b)->name);
}

static void snapshot_take(struct snapshot *s)
{
    memset(s, 0, sizeof *s);
    dm_cluster_lock_foreach(take_row, s);
    if (s->n > 1)
        qsort(s->rows, s->n, sizeof *s->rows, by_name);
}

/* ---- the text format ----------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap;
    int oom;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
    for (int tries = 0; !b->oom && tries < 2; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

size_t dm_metrics_escape(const char *v, char *out, size_t len)
{
    size_t o = 0;
    for (; *v; v++) {
        const char *e = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
        char one[2] = { *v, 0 };
        for (const char *c = e ? e : one; *c; c++, o++)
            if (o + 1 < len)
                out[o] = *c;
    }
    if (len > 0)
        out[o < len ? o : len - 1] = '\0';
    return o;
}

static void put_label_value(struct buf *b, const char *v)
{
    char esc[2 * DM_NAME_MAX + 1];
    if (dm_metrics_escape(v, esc, sizeof esc) >= sizeof esc)
        b->oom = 1;     /* no name is that long: the write is refused, not cut */
    else
        put(b, "%s", esc);
}

/* `{name="N"` plus the pid label when files are per process; the caller
 * closes the brace (after more labels, if any). */
static void put_labels(struct buf *b, const char *name, const char *pid)
{
    put(b, "{");
    if (pid)
        put(b, "pid=\"%s\",", pid);
    put(b, "name=\"");
    put_label_value(b, name);
    put(b, "\"");
}

static void put_family(struct buf *b, const char *metric, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", metric, help, metric, type);
}

/* The counters, gauges and histograms that exist per name, in the order
 * the file lists them; docs/deploying.md ("Metrics") explains each. */
static const struct {
    const char *metric, *type, *help;
    size_t off;                 /* into struct row */
} scalars[] = {
    { "dmutex_lock_calls_total", "counter",
      "Lock calls of the program that returned holding a mutex of the name (outermost, not "
      "recursive re-locks).", offsetof(struct row, lock_calls) },
    { "dmutex_contended_total", "counter",
      "Lock calls that found the mutex held by another thread or the lock by another process.",
      offsetof(struct row, st.contended) },
    { "dmutex_acquisitions_total", "counter",
      "Grants of the cluster lock to this process (a lock call joining a hold the process has "
      "already, or a cached one, is none).", offsetof(struct row, st.acquisitions) },
    { "dmutex_handoffs_total", "counter",
      "Grants received by a fair handover from the releasing holder.",
      offsetof(struct row, st.handoffs) },
    { "dmutex_lease_renewals_total", "counter", "Lease renewals that succeeded.",
      offsetof(struct row, st.renewals) },
    { "dmutex_leases_lost_total", "counter",
      "Holds found lost (no renewal in time, or the server no longer had them).",
      offsetof(struct row, st.leases_lost) },
    { "dmutex_redis_errors_total", "counter",
      "Redis calls for the lock that failed (no connection, no reply, an error reply): acquire "
      "attempts, releases, renewals.", offsetof(struct row, st.redis_errors) },
    { "dmutex_held", "gauge", "1 while this process holds the cluster lock, else 0.",
      offsetof(struct row, st.held) },
};

/* The same for a listed condition variable's name (rows with is_cond). */
static const struct {
    const char *metric, *type, *help;
    size_t off;                 /* into struct row */
} cond_scalars[] = {
    { "dmutex_cond_signals_total", "counter",
      "pthread_cond_signal and pthread_cond_broadcast calls on the condition variables of the "
      "name.", offsetof(struct row, st.cond_signals) },
    { "dmutex_cond_signals_lost_total", "counter",
      "Of those, the ones whose PUBLISH reached no other process (Redis unreachable or "
      "refusing).", offsetof(struct row, st.cond_lost) },
    { "dmutex_cond_waits_total", "counter",
      "Waits on the condition variables of the name.", offsetof(struct row, st.cond_waits) },
};

static void put_hist(struct buf *b, const char *metric, const struct dm_hist *h, const char *name,
                     const char *pid)
{
    uint64_t cum = 0;
    for (int i = 0; i <= DM_STATS_BUCKETS; i++) {
        cum += h->bucket[i];
        put(b, "%s_bucket", metric);
        put_labels(b, name, pid);
        if (i < DM_STATS_BUCKETS)
            put(b, ",le=\"%g\"} %llu\n", (double)dm_stats_bounds_ns[i] / 1e9,
                (unsigned long long)cum);
        else
            put(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    put(b, "%s_sum", metric);
    put_labels(b, name, pid);
    put(b, "} %.9f\n", (double)h->sum_ns / 1e9);
    put(b, "%s_count", metric);
    put_labels(b, name, pid);
    put(b, "} %llu\n", (unsigned long long)cum);
}

static void format(struct buf *b, const struct snapshot *s, const char *pid)
{
    put_family(b, "dmutex_info", "gauge", "The libdmutex version of this process.");
    put(b, "dmutex_info{");
    if (pid)
        put(b, "pid=\"%s\",", pid);
    put(b, "version=\"%s\"} 1\n", DMUTEX_VERSION);
    for (size_t k = 0; k < sizeof scalars / sizeof scalars[0]; k++) {
        put_family(b, scalars[k].metric, scalars[k].type, scalars[k].help);
        for (size_t i = 0; i < s->n; i++) {
            if (!s->rows[i].is_lock)
                continue;
            put(b, "%s", scalars[k].metric);
            put_labels(b, s->rows[i].name, pid);
            put(b, "} %llu\n", (unsigned long long)*(const uint64_t *)
                ((const char *)&s->rows[i] + scalars[k].off));
        }
    }
    put_family(b, "dmutex_wait_seconds", "histogram",
               "Time from a lock call to holding the mutex and the cluster lock.");
    for (size_t i = 0; i < s->n; i++)
        if (s->rows[i].is_lock)
            put_hist(b, "dmutex_wait_seconds", &s->rows[i].st.wait, s->rows[i].name, pid);
    put_family(b, "dmutex_hold_seconds", "histogram",
               "Time from holding a mutex to its unlock (or to a condition wait on it).");
    for (size_t i = 0; i < s->n; i++)
        if (s->rows[i].is_lock)
            put_hist(b, "dmutex_hold_seconds", &s->rows[i].st.hold, s->rows[i].name, pid);
    for (size_t k = 0; k < sizeof cond_scalars / sizeof cond_scalars[0]; k++) {
        put_family(b, cond_scalars[k].metric, cond_scalars[k].type, cond_scalars[k].help);
        for (size_t i = 0; i < s->n; i++) {
            if (!s->rows[i].is_cond)
                continue;
            put(b, "%s", cond_scalars[k].metric);
            put_labels(b, s->rows[i].name, pid);
            put(b, "} %llu\n", (unsigned long long)*(const uint64_t *)
                ((const char *)&s->rows[i] + cond_scalars[k].off));
        }
    }
    put(b, "# EOF\n");
}

/* ---- the file -------------------------------------------------------------- */

/* The path with %p replaced by the pid; 0, or -1 when too long. */
static int expand_path(char *out, size_t len, const char *pid)
{
    size_t o = 0;
    for (const char *c = path_tmpl; *c; c++) {
        int n = c[0] == '%' && c[1] == 'p' ? snprintf(out + o, len - o, "%s", pid)
                                           : snprintf(out + o, len - o, "%c", *c);
        if (n < 0 || (size_t)n >= len - o)
            return -1;
        o += (size_t)n;
        c += c[0] == '%' && c[1] == 'p';
    }
    return 0;
}

static int write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Writes `text` to `path` by a rename over it; 0, or an errno with *what
 * saying which step failed. */
static int replace_file(const char *path, const char *text, size_t len, const char **what)
{
    char tmp[DM_METRICS_PATH_MAX + 64];
    const char *slash = strrchr(path, '/');
    int n = snprintf(tmp, sizeof tmp, "%.*s.%s.%ld.tmp", (int)(slash - path + 1), path, slash + 1,
                     (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp) {
        *what = "the path is too long";
        return ENAMETOOLONG;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        *what = "cannot create the temporary file beside it";
        return errno;
    }
    int err = 0;
    if (write_all(fd, text, len) != 0) {
        err = errno;
        *what = "cannot write the temporary file";
    }
    if (close(fd) != 0 && !err) {
        err = errno;
        *what = "cannot write the temporary file";
    }
    if (!err && rename(tmp, path) != 0) {
        err = errno;
        *what = "cannot rename the temporary file over it";
    }
    if (err)
        unlink(tmp);
    return err;
}

/* mu held. */
static void write_locked(void)
{
    if (!may_write)
        return;
    char pid[24], path[DM_METRICS_PATH_MAX];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    int per_process = strstr(path_tmpl, "%p") != NULL;
    struct snapshot s;
    snapshot_take(&s);
    struct buf b = { 0 };
    format(&b, &s, per_process ? pid : NULL);
    int err = 0;
    const char *what = "";
    if (expand_path(path, sizeof path, pid) != 0) {
        err = ENAMETOOLONG;
        what = "the path is too long";
    } else if (b.oom || s.short_of_memory) {
        err = ENOMEM;
        what = "out of memory for its text";
    } else {
        err = replace_file(path, b.p, b.len, &what);
    }
    if (err && !failing)
        dm_error("metrics: %s: %s (%s); the program runs on, and this is reported again only "
                 "after a write succeeds", path, what, strerror(err));
    else if (!err && failing)
        dm_info("metrics: %s: written again", path);
    failing = err != 0;
    free(b.p);
    free(s.rows);
}

static void *writer_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!stopping) {
        struct timespec next;
        dm_deadline_in(&next, interval_ms);
        while (!stopping && !dm_ts_passed(&next))
            pthread_cond_timedwait(&cv, &mu, &next);
        if (!stopping)
            write_locked();
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

void dm_metrics_start(void)
{
    if (__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&mu);
    if (!started && may_write && !stopping) {
        if (!cv_ready) {
            dm_cond_init_monotonic(&cv);
            cv_ready = 1;
        }
        int r = dm_thread_start(NULL, writer_main, NULL);
        if (r != 0)
            dm_error("metrics: no writer thread (%s): %s is written at exit only",
                     strerror(r), path_tmpl);
    }
    __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
}

/* ---- exit ------------------------------------------------------------------ */

/* The upper bound of the bucket the median falls in, as words. */
static void median_words(const struct dm_hist *h, char *out, size_t len)
{
    uint64_t total = 0, cum = 0;
    for (int i = 0; i <= DM_STATS_BUCKETS; i++)
        total += h->bucket[i];
    if (total == 0) {
        snprintf(out, len, "-");
        return;
    }
    for (int i = 0; i <= DM_STATS_BUCKETS; i++) {
        cum += h->bucket[i];
        if (cum * 2 >= total) {
            if (i < DM_STATS_BUCKETS)
                snprintf(out, len, "<=%gms", (double)dm_stats_bounds_ns[i] / 1e6);
            else
                snprintf(out, len, ">%gms", (double)dm_stats_bounds_ns[DM_STATS_BUCKETS - 1] / 1e6);
            return;
        }
    }
}

static void summary(const struct snapshot *s)
{
    for (size_t i = 0; i < s->n; i++) {
        const struct dm_stats *st = &s->rows[i].st;
        if (s->rows[i].is_cond)
            dm_log(DM_LOG_INFO, "exit: cond %s: %llu signals (%llu reached no other process), "
                   "%llu waits", s->rows[i].name, (unsigned long long)st->cond_signals,
                   (unsigned long long)st->cond_lost, (unsigned long long)st->cond_waits);
        if (!s->rows[i].is_lock)
            continue;
        char p50[32];
        median_words(&st->wait, p50, sizeof p50);
        dm_log(DM_LOG_INFO, "exit: lock %s: %llu lock calls, %llu cluster acquisitions "
               "(%llu handed over), %llu contended, wait p50 %s max %.3fms, hold max %.3fms, "
               "%llu renewals, %llu leases lost, %llu redis errors", s->rows[i].name,
               (unsigned long long)s->rows[i].lock_calls, (unsigned long long)st->acquisitions,
               (unsigned long long)st->handoffs, (unsigned long long)st->contended, p50,
               (double)st->wait.max_ns / 1e6, (double)st->hold.max_ns / 1e6,
               (unsigned long long)st->renewals, (unsigned long long)st->leases_lost,
               (unsigned long long)st->redis_errors);
    }
}

/* At exit mu may never come free: exit() called from a signal handler
 * that interrupted dm_metrics_start in this very thread, or a write stuck
 * on a hung file system. The exit does not wait longer than this for it:
 * no last write then (the previous interval's file stays). */
#define DM_METRICS_EXIT_WAIT_MS 2000

void dm_metrics_exit(void)
{
    struct timespec dl;
    dm_deadline_in(&dl, DM_METRICS_EXIT_WAIT_MS);
    int cs;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);    /* write(2) is a cancellation point */
    int r = pthread_mutex_clocklock(&mu, CLOCK_MONOTONIC, &dl);
    if (r != 0) {
        dm_warn("metrics: exit: the writer did not let go within %d ms (%s): no last write%s%s",
                DM_METRICS_EXIT_WAIT_MS, strerror(r), path_tmpl ? " of " : "",
                path_tmpl ? path_tmpl : "");
        pthread_setcancelstate(cs, NULL);
        return;
    }
    stopping = 1;
    if (cv_ready)
        pthread_cond_broadcast(&cv);
    if (dm_log_level >= DM_LOG_INFO) {
        struct snapshot s;
        snapshot_take(&s);
        summary(&s);
        free(s.rows);
    }
    write_locked();
    pthread_mutex_unlock(&mu);
    pthread_setcancelstate(cs, NULL);
}

void dm_metrics_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&mu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    /* The writer thread is the parent's; the child starts its own (at
     * its first round trip) only when it has a file of its own. */
    if (cv_ready)
        dm_cond_init_monotonic(&cv);
    started = 0;
    failing = 0;
    if (path_tmpl && !strstr(path_tmpl, "%p"))
        may_write = 0;
}
