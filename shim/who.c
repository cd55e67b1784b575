/* who: the process's record for the tools (see who.h). The record is
 * text, one item per line, fields split by tabs (a tab or newline inside a
 * name becomes '?'):
 *
 *   dmutex-who 1
 *   id      <process id> (the owner ids of its holds are "<id>:<seq>")
 *   who     <host>:<pid> <program>
 *   start   <CLOCK_REALTIME ms of the record's first write>
 *   lease   <lease_ms> <renew_ms>
 *   thread  <seq> <tid> <thread name>
 *   hold    <seq> <since ms> <r: a read hold, w: else> <lock name>
 *   wait    <seq> <since ms> <lock name>
 *
 * A reader skips a line it does not know, so the format can grow. */
#include "who.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "real.h"
#include "util.h"

/* The threads a record names: those that took a lock and still hold,
 * wait, or live. More than this many at once and the rest are shown by
 * their seq only. */
#define WHO_THREADS_MAX 4096

struct who_thread {
    unsigned long seq;
    long tid;
};

static pthread_mutex_t whomu = PTHREAD_MUTEX_INITIALIZER;
static struct dm_who_wait *waits;       /* newest first */
static size_t nwaits;
static struct who_thread *threads;
static size_t nthreads, cap_threads;
static unsigned gen = 1;                /* bumped in a fork child: threads register anew */
static __thread unsigned tl_gen;
static long long written_until;         /* CLOCK_MONOTONIC ms: the store has our record till
                                           then (a lease after the last good write, less the
                                           margin); 0: none */
static int idle_told;                   /* describe(IDLE) said since the last write */
static int pending;                     /* a write is asked for: no record yet, a new thread */
static int dirty;                       /* a listed wait ended */
static long long last_write_ms;         /* CLOCK_MONOTONIC: the last write tried */
static long long start_ms;              /* CLOCK_REALTIME of the first write */
static void (*kick_fn)(void);

static long long real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dm_who_set_kick(void (*kick)(void))
{
    __atomic_store_n(&kick_fn, kick, __ATOMIC_RELEASE);
}

static void kick(void)
{
    void (*fn)(void) = __atomic_load_n(&kick_fn, __ATOMIC_ACQUIRE);
    if (fn)
        fn();
}

/* whomu held. */
static void thread_add_locked(unsigned long seq, long tid)
{
    for (size_t i = 0; i < nthreads; i++)
        if (threads[i].seq == seq) {
            threads[i].tid = tid;
            return;
        }
    if (nthreads == cap_threads) {
        if (cap_threads >= WHO_THREADS_MAX)
            return;
        size_t c = cap_threads ? cap_threads * 2 : 16;
        struct who_thread *t = realloc(threads, c * sizeof *t);
        if (!t)
            return;     /* shown by its seq */
        threads = t;
        cap_threads = c;
    }
    threads[nthreads].seq = seq;
    threads[nthreads].tid = tid;
    nthreads++;
    pending = 1;
}

void dm_who_wait_begin(struct dm_who_wait *w, const char *name, unsigned long seq)
{
    w->name = name;
    w->seq = seq;
    w->since_ms = real_ms();
    w->since_mono_ms = dm_now_ms();
    w->listed = 0;
    long tid = 0;
    if (tl_gen != __atomic_load_n(&gen, __ATOMIC_RELAXED))
        tid = (long)syscall(SYS_gettid);    /* once per thread (and per fork child) */
    dm_lock(&whomu);
    int was = pending;
    if (tid) {
        thread_add_locked(seq, tid);
        tl_gen = gen;
    }
    if (w->since_mono_ms >= written_until)
        pending = 1;        /* no record (any more): the tools would see a bare id */
    int ask = pending && !was;
    w->prev = NULL;
    w->next = waits;
    if (waits)
        waits->prev = w;
    waits = w;
    nwaits++;
    dm_unlock(&whomu);
    if (ask)
        kick();
}

void dm_who_wait_end(struct dm_who_wait *w)
{
    dm_lock(&whomu);
    if (w->prev)
        w->prev->next = w->next;
    else
        waits = w->next;
    if (w->next)
        w->next->prev = w->prev;
    nwaits--;
    int ask = w->listed && !dirty;
    if (w->listed)
        dirty = 1;          /* the record says it waits: say it does not, soon */
    dm_unlock(&whomu);
    if (ask)
        kick();
}

void dm_who_postpone(void)
{
    dm_lock(&whomu);
    last_write_ms = dm_now_ms();
    dm_unlock(&whomu);
}

long long dm_who_due(long long now_ms, size_t nholds)
{
    const struct dm_config *cfg = dm_store_config();
    long gap = DM_WHO_LIST_AFTER_MS(cfg->renew_ms);
    dm_lock(&whomu);
    long long due = LLONG_MAX;
    int busy = nholds > 0 || nwaits > 0;
    if (pending || dirty)
        due = last_write_ms + gap;
    if (busy && written_until > now_ms && last_write_ms + cfg->renew_ms < due)
        due = last_write_ms + cfg->renew_ms;        /* kept while in use */
    /* The oldest wait not listed yet, once it is old enough. */
    for (struct dm_who_wait *w = waits; w; w = w->next)
        if (!w->listed) {
            long long at = w->since_mono_ms + gap;
            if (at < last_write_ms + gap)
                at = last_write_ms + gap;
            if (at < due)
                due = at;
        }
    if (!busy && written_until > now_ms && !idle_told && !dirty)
        due = now_ms;                               /* say it is idle: no I/O */
    dm_unlock(&whomu);
    return due;
}

/* `s` with tabs and newlines as '?': one field of one line. */
static void put_field(char **p, char *end, const char *s)
{
    for (; *s && *p < end - 1; s++, (*p)++)
        **p = (*s == '\t' || *s == '\n' || *s == '\r') ? '?' : *s;
}

static void put_fmt(char **p, char *end, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put_fmt(char **p, char *end, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(*p, (size_t)(end - *p), fmt, ap);
    va_end(ap);
    if (n > 0)
        *p += n < end - *p ? n : end - *p - 1;
}

/* The name of thread tid (its comm), or "" when it has ended. */
static void thread_name(long tid, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/comm", tid);
    buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = 0;
}

static int seq_of_owner(const char *owner, unsigned long *seq)
{
    const char *c = strrchr(owner, ':');
    if (!c)
        return -1;
    *seq = strtoul(c + 1, NULL, 10);
    return 0;
}

/* whomu held: the record's text, malloc'ed; NULL out of memory. */
static char *build_locked(const struct dm_who_hold *holds, size_t n)
{
    const struct dm_config *cfg = dm_store_config();
    size_t room = 512 + (n + nwaits) * (DM_NAME_MAX + 64) + nthreads * 64;
    char *text = malloc(room), *p = text, *end = text + room;
    if (!text)
        return NULL;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    if (!start_ms)
        start_ms = real_ms();
    put_fmt(&p, end, "%s\nid\t%s\nwho\t", DM_WHO_MAGIC, dm_store_process_id());
    put_field(&p, end, host);
    put_fmt(&p, end, ":%ld ", (long)getpid());
    put_field(&p, end, program_invocation_short_name);
    put_fmt(&p, end, "\nstart\t%lld\nlease\t%ld\t%ld\n", start_ms, cfg->lease_ms, cfg->renew_ms);
    /* Threads: those named by a hold or a wait, and those still alive;
     * the table keeps only these. */
    size_t kept = 0;
    for (size_t i = 0; i < nthreads; i++) {
        char name[64];
        thread_name(threads[i].tid, name, sizeof name);
        int used = !!name[0];
        for (size_t j = 0; j < n && !used; j++) {
            unsigned long s;
            used = seq_of_owner(holds[j].owner, &s) == 0 && s == threads[i].seq;
        }
        for (struct dm_who_wait *w = waits; w && !used; w = w->next)
            used = w->seq == threads[i].seq;
        if (!used)
            continue;       /* ended, and named by nothing: forgotten */
        threads[kept++] = threads[i];
        put_fmt(&p, end, "thread\t%lu\t%ld\t", threads[i].seq, threads[i].tid);
        put_field(&p, end, name[0] ? name : "(ended)");
        put_fmt(&p, end, "\n");
    }
    nthreads = kept;
    for (size_t j = 0; j < n; j++) {
        unsigned long s;
        if (seq_of_owner(holds[j].owner, &s) != 0)
            continue;
        put_fmt(&p, end, "hold\t%lu\t%lld\t%c\t", s, holds[j].since_ms, holds[j].read ? 'r' : 'w');
        put_field(&p, end, holds[j].name);
        put_fmt(&p, end, "\n");
    }
    long long now = dm_now_ms();
    for (struct dm_who_wait *w = waits; w; w = w->next) {
        if (now - w->since_mono_ms < DM_WHO_LIST_AFTER_MS(cfg->renew_ms))
            continue;       /* a round trip's, most likely: listed when it lasts */
        w->listed = 1;
        put_fmt(&p, end, "wait\t%lu\t%lld\t", w->seq, w->since_ms);
        put_field(&p, end, w->name);
        put_fmt(&p, end, "\n");
    }
    *p = 0;
    return text;
}

void dm_who_write(const struct dm_who_hold *holds, size_t n)
{
    const struct dm_config *cfg = dm_store_config();
    long long now = dm_now_ms();
    dm_lock(&whomu);
    int busy = n > 0 || nwaits > 0;
    if (!busy && !dirty && !pending) {
        /* Idle: nothing to write; the record expires by itself. */
        int tell = !idle_told && written_until > now;
        idle_told = 1;
        dm_unlock(&whomu);
        if (tell)
            dm_store->describe(NULL, DM_DESCRIBE_IDLE);
        return;
    }
    char *text = build_locked(holds, n);
    last_write_ms = now;
    int was_pending = pending, was_dirty = dirty;
    pending = dirty = 0;
    dm_unlock(&whomu);
    if (!text) {
        dm_lock(&whomu);    /* out of memory: again after the gap */
        pending |= was_pending;
        dirty |= was_dirty;
        dm_unlock(&whomu);
        return;
    }
    int r = dm_store->describe(text, DM_DESCRIBE_WRITE);
    free(text);
    dm_lock(&whomu);
    if (r != 0) {
        pending |= was_pending || busy;
        dirty |= was_dirty;
    } else {
        written_until = now + cfg->lease_ms - cfg->lease_margin_ms;
        idle_told = 0;
    }
    dm_unlock(&whomu);
}

void dm_who_exit(void)
{
    dm_lock(&whomu);
    int was = written_until != 0;
    written_until = 0;
    pending = dirty = 0;
    idle_told = 1;
    dm_unlock(&whomu);
    if (was && dm_store)
        dm_store->describe(NULL, DM_DESCRIBE_DELETE);
}

void dm_who_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&whomu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    /* The parent's waits and threads are not the child's; its record is
     * the parent's (a new process id here). */
    waits = NULL;
    nwaits = 0;
    nthreads = 0;
    written_until = 0;
    idle_told = 0;
    pending = dirty = 0;
    last_write_ms = start_ms = 0;
    gen++;
}

/* ---- the tools' side ---- */

struct rec_thread {
    unsigned long seq;
    const char *name;
};

struct rec_item {
    unsigned long seq;
    long long since_ms;
    const char *lock;
    int read;
};

/* One parsed record: pointers into a copy of its text. */
struct rec {
    char *buf;
    const char *id;     /* the process id: the records' owner ids start with it */
    const char *who;
    long lease_ms, renew_ms;
    struct rec_thread *th;
    size_t nth;
    struct rec_item *holds, *waits;
    size_t nholds, nwaits;
};

/* Splits line `l` at tabs into f[0..max); returns the count. */
static int fields(char *l, char **f, int max)
{
    int n = 0;
    f[n++] = l;
    for (char *p = l; *p && n < max; p++)
        if (*p == '\t') {
            *p = 0;
            f[n++] = p + 1;
        }
    return n;
}

static void rec_free(struct rec *r)
{
    free(r->buf);
    free(r->th);
    free(r->holds);
    free(r->waits);
}

/* Parses text; 0, or -1 (not a record of ours, or out of memory). */
static int rec_parse(const char *text, struct rec *r)
{
    memset(r, 0, sizeof *r);
    size_t lines = 1;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    r->buf = strdup(text);
    r->th = calloc(lines, sizeof *r->th);
    r->holds = calloc(lines, sizeof *r->holds);
    r->waits = calloc(lines, sizeof *r->waits);
    if (!r->buf || !r->th || !r->holds || !r->waits) {
        rec_free(r);
        return -1;
    }
    char *save = NULL;
    char *l = strtok_r(r->buf, "\n", &save);
    if (!l || strcmp(l, DM_WHO_MAGIC) != 0) {
        rec_free(r);
        return -1;
    }
    while ((l = strtok_r(NULL, "\n", &save))) {
        char *f[6];
        int nf = fields(l, f, 6);
        if (strcmp(f[0], "id") == 0 && nf >= 2) {
            r->id = f[1];
        } else if (strcmp(f[0], "who") == 0 && nf >= 2) {
            r->who = f[1];
        } else if (strcmp(f[0], "lease") == 0 && nf >= 3) {
            r->lease_ms = strtol(f[1], NULL, 10);
            r->renew_ms = strtol(f[2], NULL, 10);
        } else if (strcmp(f[0], "thread") == 0 && nf >= 4) {
            r->th[r->nth].seq = strtoul(f[1], NULL, 10);
            r->th[r->nth++].name = f[3];
        } else if (strcmp(f[0], "hold") == 0 && nf >= 5) {
            struct rec_item *it = &r->holds[r->nholds++];
            it->seq = strtoul(f[1], NULL, 10);
            it->since_ms = strtoll(f[2], NULL, 10);
            it->read = f[3][0] == 'r';
            it->lock = f[4];
        } else if (strcmp(f[0], "wait") == 0 && nf >= 4) {
            struct rec_item *it = &r->waits[r->nwaits++];
            it->seq = strtoul(f[1], NULL, 10);
            it->since_ms = strtoll(f[2], NULL, 10);
            it->lock = f[3];
        }
    }
    if (!r->id || !r->who) {
        rec_free(r);
        return -1;
    }
    return 0;
}

/* The record whose process id starts owner ("<id>:<seq>"), and the seq. */
static struct rec *rec_of(struct rec *recs, size_t n, const char *owner, unsigned long *seq)
{
    const char *c = strrchr(owner, ':');
    if (!c)
        return NULL;
    size_t idlen = (size_t)(c - owner);
    *seq = strtoul(c + 1, NULL, 10);
    for (size_t i = 0; i < n; i++)
        if (strlen(recs[i].id) == idlen && memcmp(recs[i].id, owner, idlen) == 0)
            return &recs[i];
    return NULL;
}

/* "host:pid program (thread)" of seq in r, into buf. */
static void describe(const struct rec *r, unsigned long seq, char *buf, size_t len)
{
    for (size_t i = 0; i < r->nth; i++)
        if (r->th[i].seq == seq) {
            snprintf(buf, len, "%s (%s)", r->who, r->th[i].name);
            return;
        }
    snprintf(buf, len, "%s (thread %lu)", r->who, seq);
}

static size_t parse_all(char *const *texts, size_t ntexts, struct rec **out)
{
    struct rec *recs = calloc(ntexts ? ntexts : 1, sizeof *recs);
    size_t n = 0;
    for (size_t i = 0; recs && i < ntexts; i++)
        if (rec_parse(texts[i], &recs[n]) == 0)
            n++;
    *out = recs;
    return recs ? n : 0;
}

static void free_all(struct rec *recs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        rec_free(&recs[i]);
    free(recs);
}

static int by_since(const void *a, const void *b)
{
    const struct dm_lock_waiter *x = a, *y = b;
    return (x->since_ms > y->since_ms) - (x->since_ms < y->since_ms);
}

void dm_who_join(struct dm_lock_row *rows, size_t n, char *const *texts, size_t ntexts,
                 long long now_ms)
{
    struct rec *recs;
    size_t nrec = parse_all(texts, ntexts, &recs);
    for (size_t i = 0; i < n; i++) {
        struct dm_lock_row *row = &rows[i];
        row->since_ms = -1;
        row->renewed_ago_ms = -1;
        unsigned long seq;
        struct rec *r = row->owner ? rec_of(recs, nrec, row->owner, &seq) : NULL;
        if (r) {
            char buf[512];
            describe(r, seq, buf, sizeof buf);
            row->who = strdup(buf);
            row->renew_ms = r->renew_ms;
            long long granted = row->lease_granted_ms > 0 ? row->lease_granted_ms : r->lease_ms;
            if (row->lease_ms >= 0 && granted > 0) {
                row->renewed_ago_ms = granted - row->lease_ms;
                if (row->renewed_ago_ms < 0)
                    row->renewed_ago_ms = 0;
            }
            for (size_t k = 0; k < r->nholds; k++)
                if (r->holds[k].seq == seq && !r->holds[k].read &&
                    strcmp(r->holds[k].lock, row->name) == 0)
                    row->since_ms = r->holds[k].since_ms;
            /* Younger than the record's last write: granted when its lease
             * was last set, as no renewal round has run since. */
            if (row->since_ms < 0 && row->renewed_ago_ms >= 0)
                row->since_ms = now_ms - row->renewed_ago_ms;
        }
        size_t nw = 0;
        for (size_t k = 0; k < nrec; k++)
            for (size_t j = 0; j < recs[k].nwaits; j++)
                nw += strcmp(recs[k].waits[j].lock, row->name) == 0;
        if (nw == 0)
            continue;
        row->waiting = calloc(nw, sizeof *row->waiting);
        if (!row->waiting)
            continue;
        for (size_t k = 0; k < nrec; k++)
            for (size_t j = 0; j < recs[k].nwaits; j++) {
                const struct rec_item *it = &recs[k].waits[j];
                if (strcmp(it->lock, row->name) != 0)
                    continue;
                char buf[512], own[DM_OWNER_MAX + 24];
                describe(&recs[k], it->seq, buf, sizeof buf);
                snprintf(own, sizeof own, "%s:%lu", recs[k].id, it->seq);
                struct dm_lock_waiter *w = &row->waiting[row->nwaiting];
                w->who = strdup(buf);
                w->owner = strdup(own);
                w->since_ms = it->since_ms;
                if (!w->who || !w->owner) {
                    free(w->who);
                    free(w->owner);
                    continue;
                }
                row->nwaiting++;
            }
        qsort(row->waiting, row->nwaiting, sizeof *row->waiting, by_since);
    }
    free_all(recs, nrec);
}

void dm_who_describe_owner(char *buf, size_t len, const char *owner, char *const *texts,
                           size_t ntexts)
{
    struct rec *recs;
    size_t nrec = parse_all(texts, ntexts, &recs);
    unsigned long seq;
    struct rec *r = rec_of(recs, nrec, owner, &seq);
    buf[0] = 0;
    if (r)
        describe(r, seq, buf, len);
    free_all(recs, nrec);
}
