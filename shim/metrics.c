/* metrics: the metrics file and the exit summary (see metrics.h).
 *
 * The counters are kept where the facts are (stats.h), per name in
 * stats.c's list of them (struct dm_name_stats, which a name gone keeps
 * if it counted anything), and this module copies them during a walk that
 * takes no lock (dm_name_stats_begin): no shim lock is taken for a
 * snapshot, however many names there are. A write lists the names that
 * have a record now or counted anything (a name destroyed keeps its
 * counters in the file: a _total never goes down), sorted; formats them
 * in a bounded buffer straight into `.<file>.<pid>.tmp` beside the
 * target, then renames it over it:
 * node_exporter (or any reader) sees the old file or the new one, never
 * part of one. No fsync: after a crash the counters start again anyway.
 *
 * No lock is held across I/O: the module's mutex guards a few flags and
 * the interval wait; a write runs outside it, owned by the thread that set
 * `writing` (the writer thread, or the exit). fork()'s prepare handler
 * takes that mutex, so a write stuck on a slow disk, a hung NFS mount or
 * a FIFO never holds up the program's fork() or its locks. The temporary
 * file is made with O_CREAT|O_EXCL|O_NOFOLLOW|O_NONBLOCK: whatever sits at
 * its path (a leftover, a FIFO, a symbolic link) is removed, never opened
 * or followed.
 *
 * Which process writes: with %p in the path, each process its own file
 * (a fork child too, under its own pid). Without %p, one process at a
 * time: the one that holds the lock file `.<file>.lock` beside it
 * (flock(2), taken when the writer thread starts, at the first round
 * trip, or at the first write, and kept until the process ends; the pid
 * written in it). Another process with the same path (a program it runs,
 * preloaded with the same config; a second instance) writes nothing and
 * says so once; it takes the file over when the holder has ended. A fork
 * child without %p never writes: it must not replace its parent's file
 * with its own counts.
 *
 * A write that fails (no directory, no right, disk full) is reported once
 * with the path and the reason, and again only after a write succeeded:
 * not once per interval. The program runs on either way. */
#include "metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dmutex.h"
#include "log.h"
#include "real.h"
#include "stats.h"
#include "store.h"

#define DM_METRICS_BUF      (64 * 1024)  /* the text is written in pieces of about this */
#define DM_METRICS_LINE_MAX 1024         /* the longest line the file has (a name is 200 bytes) */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;  /* the flags below; never held across I/O */
static pthread_cond_t cv;               /* the writer's interval wait and the end of a write
                                           (CLOCK_MONOTONIC) */
static int cv_ready;
static const char *path_tmpl;           /* metrics.file, "%p" = pid; NULL: no file */
static int per_process;                 /* the path has %p */
static long interval_ms;
static int may_write;                   /* this process writes the file */
static int started;                     /* the writer thread runs (or could not start); atomic */
static int stopping;                    /* exit: the writer writes no more */
static int writing;                     /* a write runs (outside mu); the one that set it owns
                                           what follows */

/* The writing thread's alone (the one that set `writing`). */
static int failing;                     /* the last write failed and was reported */
static int claim_fd = -1;               /* the lock file (no %p) */
static int claimed;                     /* this process holds it (or locks do not work there) */
static int claim_warned;                /* "written by another process" said */
static int out_fd = -1;                 /* the temporary file being written */
static pid_t forking_pid;               /* who forked last (fork's prepare, under mu) */
static pid_t child_of;                  /* a fork child: its parent's pid (the summary) */
static char obuf[DM_METRICS_BUF + DM_METRICS_LINE_MAX];

void dm_metrics_init(const struct dm_config *cfg)
{
    path_tmpl = cfg->metrics.file;
    interval_ms = cfg->metrics.interval_ms > 0 ? cfg->metrics.interval_ms : DM_METRICS_INTERVAL_MS;
    may_write = path_tmpl != NULL;
    per_process = path_tmpl && strstr(path_tmpl, "%p") != NULL;
}

/* ---- the snapshot -------------------------------------------------------- */

/* A copy of the counters of the names a write lists, sorted: made during
 * a walk of stats's list (no lock, no I/O), which ends before any I/O,
 * so a slow write holds back no memory of names dropped meanwhile. */
struct row {
    struct dm_stats st;
    size_t name_off;            /* into names, while they are collected */
    const char *name;           /* then into names */
    int is_lock, is_cond;       /* a lock's name, a listed condition variable's (or both) */
};

struct snapshot {
    struct row *rows;
    size_t n, cap;
    char *names;
    size_t names_len, names_cap;
    size_t live;                /* rows of names with a record now (dmutex_names) */
    int short_of_memory;
};

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 256;
    while (ncap < need && ncap < SIZE_MAX / 2 / size)
        ncap *= 2;
    if (ncap < need)
        return -1;
    void *np = realloc(*p, ncap * size);
    if (!np)
        return -1;
    *p = np;
    *cap = ncap;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct row *)a)->name, ((const struct row *)b)->name);
}

static void snapshot_take(struct snapshot *s)
{
    memset(s, 0, sizeof *s);
    for (const struct dm_name_stats *c = dm_name_stats_begin(); c;
         c = dm_name_stats_next(c)) {
        struct dm_stats st;
        int any = dm_name_stats_copy(c, &st);
        if (!__atomic_load_n(&c->live, __ATOMIC_RELAXED) && !any)
            continue;           /* gone meanwhile with nothing counted */
        size_t nl = strlen(c->name) + 1;
        if (grow((void **)&s->rows, &s->cap, s->n + 1, sizeof *s->rows) != 0 ||
            grow((void **)&s->names, &s->names_cap, s->names_len + nl, 1) != 0) {
            s->short_of_memory = 1;
            break;
        }
        struct row *r = &s->rows[s->n++];
        s->live += __atomic_load_n(&c->live, __ATOMIC_RELAXED) != 0;
        r->st = st;
        r->is_lock = __atomic_load_n(&c->is_lock, __ATOMIC_RELAXED);
        r->is_cond = __atomic_load_n(&c->is_cond, __ATOMIC_RELAXED);
        r->name_off = s->names_len;
        memcpy(s->names + s->names_len, c->name, nl);
        s->names_len += nl;
    }
    dm_name_stats_end();
    for (size_t i = 0; i < s->n; i++)
        s->rows[i].name = s->names + s->rows[i].name_off;
    if (s->n > 1)
        qsort(s->rows, s->n, sizeof *s->rows, by_name);
}

static void snapshot_free(struct snapshot *s)
{
    free(s->rows);
    free(s->names);
}

/* ---- the text format ----------------------------------------------------- */

/* The text goes to fd through obuf, in pieces: memory stays bounded
 * however many names there are. err: the first errno. */
struct out {
    int fd;
    size_t len;
    int err;
    const char *what;           /* the step that failed */
};

static void flush(struct out *o)
{
    const char *p = obuf;
    size_t len = o->len;
    while (!o->err && len > 0) {
        ssize_t w = write(o->fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            o->err = errno;
            o->what = "cannot write the temporary file";
            break;
        }
        p += w;
        len -= (size_t)w;
    }
    o->len = 0;
}

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    if (o->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(obuf + o->len, sizeof obuf - o->len, fmt, ap);
    va_end(ap);
    if (n < 0 || o->len + (size_t)n >= sizeof obuf) {
        o->err = EOVERFLOW;     /* a line longer than DM_METRICS_LINE_MAX: none is */
        o->what = "a line of the text too long";
        return;
    }
    o->len += (size_t)n;
    if (o->len >= DM_METRICS_BUF)
        flush(o);
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

static void put_label_value(struct out *o, const char *v)
{
    char esc[2 * DM_NAME_MAX + 1];
    if (dm_metrics_escape(v, esc, sizeof esc) >= sizeof esc) {
        o->err = EOVERFLOW;     /* no name is that long: the write is refused, not cut */
        o->what = "a lock name too long to write";
    } else {
        put(o, "%s", esc);
    }
}

/* `{name="N"` plus the pid label when files are per process; the caller
 * closes the brace (after more labels, if any). */
static void put_labels(struct out *o, const char *name, const char *pid)
{
    put(o, "{");
    if (pid)
        put(o, "pid=\"%s\",", pid);
    put(o, "name=\"");
    put_label_value(o, name);
    put(o, "\"");
}

static void put_family(struct out *o, const char *metric, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", metric, help, metric, type);
}

#define CALLS SIZE_MAX          /* scalars[].off of the lock calls: the wait histogram's count */

/* The counters, gauges and histograms that exist per name, in the order
 * the file lists them; docs/deploying.md ("Metrics") explains each. */
static const struct {
    const char *metric, *type, *help;
    size_t off;                 /* into struct dm_stats, or CALLS */
} scalars[] = {
    { "dmutex_lock_calls_total", "counter",
      "Lock calls of the program that returned holding a mutex of the name (outermost, not "
      "recursive re-locks).", CALLS },
    { "dmutex_contended_total", "counter",
      "Lock calls that found the mutex held by another thread or the lock by another process.",
      offsetof(struct dm_stats, contended) },
    { "dmutex_acquisitions_total", "counter",
      "Grants of the cluster lock to this process (a lock call joining a hold the process has "
      "already, or a cached one, is none).", offsetof(struct dm_stats, acquisitions) },
    { "dmutex_handoffs_total", "counter",
      "Grants received by a fair handover from the releasing holder.",
      offsetof(struct dm_stats, handoffs) },
    { "dmutex_lease_renewals_total", "counter", "Lease renewals that succeeded.",
      offsetof(struct dm_stats, renewals) },
    { "dmutex_leases_lost_total", "counter",
      "Holds found lost while held (no renewal in time, or the server no longer had them).",
      offsetof(struct dm_stats, leases_lost) },
    { "dmutex_leases_expired_after_unlock_total", "counter",
      "Releases that found the hold already expired on the server although the unlock came "
      "before the hold's deadline (the release was late: a server stall, pause or restart; "
      "no critical section ran unprotected, the lock was free meanwhile).",
      offsetof(struct dm_stats, expired_after_unlock) },
    { "dmutex_redis_errors_total", "counter",
      "Redis calls for the lock that failed (no connection, no reply, an error reply): acquire "
      "attempts, releases, renewals.", offsetof(struct dm_stats, redis_errors) },
    { "dmutex_held", "gauge", "1 while this process holds the cluster lock, else 0.",
      offsetof(struct dm_stats, held) },
};

/* The same for a listed condition variable's name (rows with is_cond). */
static const struct {
    const char *metric, *type, *help;
    size_t off;                 /* into struct dm_stats */
} cond_scalars[] = {
    { "dmutex_cond_signals_total", "counter",
      "pthread_cond_signal and pthread_cond_broadcast calls on the condition variables of the "
      "name.", offsetof(struct dm_stats, cond_signals) },
    { "dmutex_cond_signals_lost_total", "counter",
      "Of those, the ones whose PUBLISH reached no other process (Redis unreachable or "
      "refusing).", offsetof(struct dm_stats, cond_lost) },
    { "dmutex_cond_waits_total", "counter",
      "Waits on the condition variables of the name.", offsetof(struct dm_stats, cond_waits) },
};

/* One histogram (of the snapshot's copy): its _count is its +Inf bucket. */
static void put_hist(struct out *o, const char *metric, const struct dm_hist *h,
                     const char *name, const char *pid)
{
    uint64_t cum = 0;
    for (int i = 0; i <= DM_STATS_BUCKETS; i++) {
        cum += h->bucket[i];
        put(o, "%s_bucket", metric);
        put_labels(o, name, pid);
        if (i < DM_STATS_BUCKETS)
            put(o, ",le=\"%g\"} %llu\n", (double)dm_stats_bounds_ns[i] / 1e9,
                (unsigned long long)cum);
        else
            put(o, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    put(o, "%s_sum", metric);
    put_labels(o, name, pid);
    put(o, "} %.9f\n", (double)h->sum_ns / 1e9);
    put(o, "%s_count", metric);
    put_labels(o, name, pid);
    put(o, "} %llu\n", (unsigned long long)cum);
}

static void format(struct out *o, const struct snapshot *s, const char *pid)
{
    put_family(o, "dmutex_info", "gauge", "The libdmutex version of this process.");
    put(o, "dmutex_info{");
    if (pid)
        put(o, "pid=\"%s\",", pid);
    put(o, "version=\"%s\"} 1\n", DMUTEX_VERSION);
    put_family(o, "dmutex_names", "gauge",
               "Lock and condition variable names this process has a record of: the mapped "
               "ones, and per-object names whose objects are not destroyed yet (or were "
               "destroyed right after an unlock whose release reply is not read yet).");
    put(o, "dmutex_names");
    if (pid)
        put(o, "{pid=\"%s\"}", pid);
    put(o, " %zu\n", s->live);
    for (size_t k = 0; k < sizeof scalars / sizeof scalars[0]; k++) {
        put_family(o, scalars[k].metric, scalars[k].type, scalars[k].help);
        for (size_t i = 0; i < s->n && !o->err; i++) {
            if (!s->rows[i].is_lock)
                continue;
            const struct dm_stats *st = &s->rows[i].st;
            uint64_t v = scalars[k].off == CALLS ? dm_stats_count(&st->wait)
                : *(const uint64_t *)((const char *)st + scalars[k].off);
            put(o, "%s", scalars[k].metric);
            put_labels(o, s->rows[i].name, pid);
            put(o, "} %llu\n", (unsigned long long)v);
        }
    }
    put_family(o, "dmutex_wait_seconds", "histogram",
               "Time from a lock call to holding the mutex and the cluster lock.");
    for (size_t i = 0; i < s->n && !o->err; i++)
        if (s->rows[i].is_lock)
            put_hist(o, "dmutex_wait_seconds", &s->rows[i].st.wait, s->rows[i].name, pid);
    put_family(o, "dmutex_hold_seconds", "histogram",
               "Time from holding a mutex to its unlock (or to a condition wait on it).");
    for (size_t i = 0; i < s->n && !o->err; i++)
        if (s->rows[i].is_lock)
            put_hist(o, "dmutex_hold_seconds", &s->rows[i].st.hold, s->rows[i].name, pid);
    for (size_t k = 0; k < sizeof cond_scalars / sizeof cond_scalars[0]; k++) {
        put_family(o, cond_scalars[k].metric, cond_scalars[k].type, cond_scalars[k].help);
        for (size_t i = 0; i < s->n && !o->err; i++) {
            if (!s->rows[i].is_cond)
                continue;
            put(o, "%s", cond_scalars[k].metric);
            put_labels(o, s->rows[i].name, pid);
            put(o, "} %llu\n", (unsigned long long)*(const uint64_t *)
                ((const char *)&s->rows[i].st + cond_scalars[k].off));
        }
    }
    put(o, "# EOF\n");
    flush(o);
}

/* ---- the file -------------------------------------------------------------- */

/* The path with %p replaced by `pid`; 0, or -1 when too long (the config
 * refused such a path already). */
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

/* A file beside `path`: ".NAME" + suffix in its directory. 0, or -1 when
 * too long. */
static int side_path(char *out, size_t len, const char *path, const char *suffix)
{
    const char *slash = strrchr(path, '/');
    int n = snprintf(out, len, "%.*s.%s%s", (int)(slash - path + 1), path, slash + 1, suffix);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

static void report(const char *path, int err, const char *what)
{
    if (!failing)
        dm_error("metrics: %s: %s (%s); the program runs on, and this is reported again only "
                 "after a write succeeds", path, what, strerror(err));
    failing = 1;
}

/* May this process write `path` (no %p)? It may while it holds the lock
 * file beside it (flock, kept until the process ends, its pid written in
 * it); another process holding it is said once (by a process that has
 * locked a mapped mutex: not by a helper that never did); a file system without
 * locks is said once and the file written anyway, as a process did before
 * there was a lock file. The writing thread only. */
static int claim(const char *path)
{
    if (per_process || claimed)
        return 1;
    char lock[DM_METRICS_PATH_MAX + 64];
    if (side_path(lock, sizeof lock, path, ".lock") != 0) {
        report(path, ENAMETOOLONG, "the lock file's path is too long");
        return 0;
    }
    if (claim_fd < 0) {
        int fd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EACCES)  /* another user's: flock needs no right to write */
            fd = open(lock, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            report(path, errno, "cannot open its lock file beside it");
            return 0;
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            report(path, EINVAL, "its lock file is not a regular file");
            return 0;
        }
        claim_fd = fd;
    }
    if (flock(claim_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            /* Said by a process that locked (it has counts to lose), not
             * by every program it runs that never does (a helper's exit). */
            if (!claim_warned && __atomic_load_n(&started, __ATOMIC_ACQUIRE)) {
                char who[32] = "";
                ssize_t n = pread(claim_fd, who, sizeof who - 1, 0);
                who[n > 0 ? n : 0] = '\0';
                who[strcspn(who, "\n")] = '\0';
                dm_warn("metrics: %s is written by process %s (it holds %s); this process "
                        "writes none while that one runs (put %%p in the file name for one "
                        "file per process)", path, who[0] ? who : "(unknown)", lock);
                claim_warned = 1;
            }
            return 0;
        }
        dm_warn("metrics: %s: cannot lock %s (%s): another process writing the same file "
                "would not be noticed", path, lock, strerror(errno));
        claimed = 1;
        return 1;
    }
    char me[32];
    int n = snprintf(me, sizeof me, "%ld\n", (long)getpid());
    if (ftruncate(claim_fd, 0) != 0 || pwrite(claim_fd, me, (size_t)n, 0) != n)
        dm_debug("metrics: %s: cannot write the pid into %s", path, lock);
    if (claim_warned)
        dm_info("metrics: %s: the process that wrote it is gone; this one writes it now", path);
    claimed = 1;
    return 1;
}

/* The temporary file beside `path`, made new: whatever is at its name (a
 * file of a process that had this pid, a FIFO, a symbolic link) is
 * removed, never opened or followed. */
static int open_tmp(const char *tmp)
{
    for (int tries = 0;; tries++) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                      0644);
        if (fd >= 0 || errno != EEXIST || tries == 1)
            return fd;
        if (unlink(tmp) != 0 && errno != ENOENT)
            return -1;
    }
}

/* The file's path (%p expanded) and this process's pid, if it is to
 * write it now: 1, else 0. The writing thread only. */
struct target {
    char pid[24];
    char path[DM_METRICS_PATH_MAX + 64];
};

static int write_may(struct target *t)
{
    if (!may_write)
        return 0;
    snprintf(t->pid, sizeof t->pid, "%ld", (long)getpid());
    if (expand_path(t->path, sizeof t->path, t->pid) != 0) {
        report(path_tmpl, ENAMETOOLONG, "the path is too long");
        return 0;
    }
    return claim(t->path);
}

/* Writes the snapshot to t->path by a rename over it. The writing thread
 * only, after write_may; no lock held. */
static void write_file(const struct target *t, const struct snapshot *s)
{
    const char *path = t->path, *pid = t->pid;
    char tmp[DM_METRICS_PATH_MAX + 64];
    struct out o = { .fd = -1 };
    if (side_path(tmp, sizeof tmp, path, "") != 0 ||
        strlen(tmp) + strlen(pid) + 5 >= sizeof tmp) {
        report(path, ENAMETOOLONG, "the path is too long");
        return;
    }
    snprintf(tmp + strlen(tmp), sizeof tmp - strlen(tmp), ".%s.tmp", pid);
    if (s->short_of_memory) {
        report(path, ENOMEM, "out of memory for the list of names");
        return;
    }
    o.fd = open_tmp(tmp);
    if (o.fd < 0) {
        report(path, errno, "cannot create the temporary file beside it");
        return;
    }
    __atomic_store_n(&out_fd, o.fd, __ATOMIC_RELAXED);
    format(&o, s, per_process ? pid : NULL);
    __atomic_store_n(&out_fd, -1, __ATOMIC_RELAXED);
    if (close(o.fd) != 0 && !o.err) {
        o.err = errno;
        o.what = "cannot write the temporary file";
    }
    if (!o.err && rename(tmp, path) != 0) {
        o.err = errno;
        o.what = "cannot rename the temporary file over it";
    }
    if (o.err) {
        unlink(tmp);
        report(path, o.err, o.what);
        return;
    }
    if (failing)
        dm_info("metrics: %s: written again", path);
    failing = 0;
}

static void write_now(void)
{
    struct target t;
    if (!write_may(&t))
        return;
    struct snapshot s;
    snapshot_take(&s);
    write_file(&t, &s);
    snapshot_free(&s);
}

/* Takes the right to write (mu held; released while writing). */
static void begin_write(void)
{
    writing = 1;
    dm_unlock(&mu);
}

static void end_write(void)
{
    dm_lock(&mu);
    writing = 0;
    dm_cv_broadcast(&cv);
}

static void *writer_main(void *arg)
{
    (void)arg;
    dm_lock(&mu);
    if (!stopping && !per_process) {
        /* Claim a shared file now: the process that locks first has it,
         * not the one that writes first. */
        begin_write();
        struct target t;
        write_may(&t);
        end_write();
    }
    while (!stopping) {
        struct timespec next;
        dm_deadline_in(&next, interval_ms);
        while (!stopping && !dm_ts_passed(&next))
            dm_cv_timedwait(&cv, &mu, &next);
        if (stopping)
            break;
        begin_write();
        write_now();
        end_write();
    }
    dm_unlock(&mu);
    return NULL;
}

void dm_metrics_start(void)
{
    if (__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        return;
    dm_lock(&mu);
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
    dm_unlock(&mu);
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

/* Each process's summary is its own: a fork child's counts start at the
 * fork (stats are zeroed there), and it says so first. A name listed
 * with nothing to count (mapped, but no lock call of this process
 * returned holding it, whether the program never locked it or its calls
 * never reached the shim) is said to be that, not a row of zeros. */
static void summary(const struct snapshot *s)
{
    if (s->n) {
        char host[256] = "?";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        dm_log(DM_LOG_INFO, "exit: %s:%ld %s, process id %s (owner ids %s:<thread>)", host,
               (long)getpid(), program_invocation_short_name, dm_store_process_id(),
               dm_store_process_id());
    }
    if (child_of && s->n)
        dm_log(DM_LOG_INFO, "exit: this process is a fork child of %d: its counts start at "
               "the fork", (int)child_of);
    for (size_t i = 0; i < s->n; i++) {
        const struct dm_stats *st = &s->rows[i].st;
        if (s->rows[i].is_cond && st->cond_signals == 0 && st->cond_waits == 0)
            dm_log(DM_LOG_INFO, "exit: cond %s: never signalled nor waited on by this process",
                   s->rows[i].name);
        else if (s->rows[i].is_cond)
            dm_log(DM_LOG_INFO, "exit: cond %s: %llu signals (%llu reached no other process), "
                   "%llu waits", s->rows[i].name, (unsigned long long)st->cond_signals,
                   (unsigned long long)st->cond_lost, (unsigned long long)st->cond_waits);
        if (!s->rows[i].is_lock)
            continue;
        if (dm_stats_count(&st->wait) == 0) {
            char errors[48] = "";
            if (st->redis_errors)
                snprintf(errors, sizeof errors, " (%llu redis errors)",
                         (unsigned long long)st->redis_errors);
            dm_log(DM_LOG_INFO, "exit: lock %s: never locked by this process%s", s->rows[i].name,
                   errors);
            continue;
        }
        char p50[32];
        median_words(&st->wait, p50, sizeof p50);
        dm_log(DM_LOG_INFO, "exit: lock %s: %llu lock calls, %llu cluster acquisitions "
               "(%llu handed over), %llu contended, wait p50 %s max %.3fms, hold max %.3fms, "
               "%llu renewals, %llu leases lost, %llu expired after unlock, %llu redis errors",
               s->rows[i].name,
               (unsigned long long)dm_stats_count(&st->wait), (unsigned long long)st->acquisitions,
               (unsigned long long)st->handoffs, (unsigned long long)st->contended, p50,
               (double)st->wait.max_ns / 1e6, (double)st->hold.max_ns / 1e6,
               (unsigned long long)st->renewals, (unsigned long long)st->leases_lost,
               (unsigned long long)st->expired_after_unlock, (unsigned long long)st->redis_errors);
    }
}

/* At exit the writer may be inside a write that does not end (a hung
 * file system), and mu may never come free (exit() called from a signal
 * handler that interrupted dm_metrics_start in this very thread). The
 * exit does not wait longer than this: no last write then (the previous
 * interval's file stays). */
#define DM_METRICS_EXIT_WAIT_MS 2000

void dm_metrics_exit(void)
{
    struct timespec dl;
    dm_deadline_in(&dl, DM_METRICS_EXIT_WAIT_MS);
    int cs;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cs);    /* write(2) is a cancellation point */
    int r = dm_lock_clock(&mu, CLOCK_MONOTONIC, &dl);
    int mine = 0;
    if (r == 0) {
        stopping = 1;
        if (cv_ready)
            dm_cv_broadcast(&cv);
        while (writing && r == 0)
            r = cv_ready ? dm_cv_timedwait(&cv, &mu, &dl) : ETIMEDOUT;
        if (!writing) {
            writing = 1;        /* for good: nothing is written after this one */
            mine = 1;
        }
        dm_unlock(&mu);
    }
    if (!mine && may_write)
        dm_warn("metrics: exit: the writer did not let go within %d ms (%s): no last write "
                "of %s", DM_METRICS_EXIT_WAIT_MS, strerror(r ? r : ETIMEDOUT), path_tmpl);
    struct target t;
    int write = mine && write_may(&t);
    if (write || dm_log_level >= DM_LOG_INFO) {
        struct snapshot s;
        snapshot_take(&s);      /* no lock: the summary even when the writer is stuck */
        if (dm_log_level >= DM_LOG_INFO)
            summary(&s);
        if (write)
            write_file(&t, &s);
        snapshot_free(&s);
    }
    pthread_setcancelstate(cs, NULL);
}

void dm_metrics_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&mu, phase);
    if (phase == DM_FORK_PREPARE)
        forking_pid = getpid();
    if (phase != DM_FORK_CHILD)
        return;
    child_of = forking_pid;
    /* The writer thread, its write in progress and the lock file are the
     * parent's (the parent's lock stays the parent's: closing this copy
     * does not let go of it). The child starts its own writer (at its
     * first round trip) only when it has a file of its own. */
    if (cv_ready)
        dm_cond_init_monotonic(&cv);
    int fd = __atomic_load_n(&out_fd, __ATOMIC_RELAXED);
    if (fd >= 0)
        close(fd);
    out_fd = -1;
    if (claim_fd >= 0)
        close(claim_fd);
    claim_fd = -1;
    claimed = 0;
    claim_warned = 0;
    started = 0;
    writing = 0;
    failing = 0;
    if (!per_process)
        may_write = 0;
}
