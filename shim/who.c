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
 *   hold    <seq> <since ms> <r: a read hold, w: else> <lock name> <token> <lease ms>
 *   wait    <seq> <since ms> <lock name>
 *
 * A reader skips a line it does not know, and fields after those it knows,
 * so the format can grow. Host and program are cut to WHO_FIELD_MAX bytes,
 * and control bytes become '?'. */
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
#include "watchdog.h"

/* The threads a record names: those that took a lock and still hold,
 * wait, or live. More than this many at once and the rest are shown by
 * their seq only. */
#define WHO_THREADS_MAX 4096

/* The longest host or program name a record keeps (setproctitle-style
 * programs can make argv[0] kilobytes long). */
#define WHO_FIELD_MAX 128

struct who_thread {
    unsigned long seq;
    long tid;
    int fresh;          /* registered since the last write: listed in the next */
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
static unsigned fails;                  /* writes failed in a row: the next waits longer */
/* who's own thread: a write never delays the renewal thread's rounds (a
 * record's node may be down, or slow, while the locks' is fine). */
static pthread_cond_t whocv;
static int cv_ready, running, closing, writing;
static int start_failed;                /* pthread_create refused: no records (logged once) */
/* A wait is listed when it has lasted the gap, but its begin wakes nobody
 * (a context switch per lock call): while lock calls come, the thread
 * looks every gap; once none came for a renewal interval it sleeps till
 * its next write, and the next begin wakes it (sleeping_long). */
static long long last_activity_ms;
static int sleeping_long;

static long long real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *who_main(void *arg);

/* whomu held: wakes who's thread, starting it the first time. */
static void kick_locked(void)
{
    if (!cv_ready) {
        dm_cond_init_monotonic(&whocv);
        cv_ready = 1;
    }
    if (!running && !closing && !start_failed) {
        int rc = dm_thread_start(NULL, who_main, NULL);
        if (rc == 0) {
            running = 1;
        } else {
            start_failed = 1;
            dm_warn("cannot start the thread that writes this process's record for dmutex "
                    "ls (%s): its holds show as bare owner ids; locking is not affected",
                    strerror(rc));
        }
    }
    dm_cv_signal(&whocv);
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
    threads[nthreads].fresh = 1;
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
    last_activity_ms = w->since_mono_ms;
    if (ask || sleeping_long || (!running && !start_failed)) {
        sleeping_long = 0;
        kick_locked();      /* the first lock starts the thread: it lists waits as they last */
    }
    dm_unlock(&whomu);
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
    if (ask)
        kick_locked();
    dm_unlock(&whomu);
}


/* whomu held: when the next write is due (CLOCK_MONOTONIC ms; LLONG_MAX:
 * none), with nholds holds watched now. */
static long long due_locked(long long now_ms, size_t nholds)
{
    const struct dm_config *cfg = dm_store_config();
    long gap = DM_WHO_LIST_AFTER_MS(cfg->renew_ms);
    /* After failures, longer: a server that refuses the record is not
     * asked every gap. */
    long retry = fails ? (fails < 8 ? gap << fails : cfg->renew_ms) : gap;
    if (retry > cfg->renew_ms)
        retry = cfg->renew_ms > gap ? cfg->renew_ms : gap;
    long long due = LLONG_MAX;
    int busy = nholds > 0 || nwaits > 0;
    if (pending || dirty)
        due = last_write_ms + retry;
    /* Kept while in use; written again soon when it expired meanwhile (the
     * process was stopped, or a write failed). */
    long long keep = written_until > now_ms ? last_write_ms + cfg->renew_ms : last_write_ms + retry;
    if (busy && keep < due)
        due = keep;
    /* The oldest wait not listed yet, once it is old enough. */
    for (struct dm_who_wait *w = waits; w; w = w->next)
        if (!w->listed) {
            long long at = w->since_mono_ms + gap;
            if (at < last_write_ms + retry)
                at = last_write_ms + retry;
            if (at < due)
                due = at;
        }
    if (!busy && written_until > now_ms && !idle_told && !dirty && !pending)
        due = now_ms;                               /* say it is idle: no I/O */
    return due;
}

/* `s` with control bytes (tabs, newlines, escapes) as '?', at most max
 * bytes of it: one field of one line. */
static void put_field_max(char **p, char *end, const char *s, size_t max)
{
    for (size_t i = 0; *s && *p < end - 1 && i < max; s++, (*p)++, i++)
        **p = ((unsigned char)*s < 0x20 || *s == 0x7f) ? '?' : *s;
}

static void put_field(char **p, char *end, const char *s)
{
    put_field_max(p, end, s, (size_t)-1);
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

/* What a write lists, copied under whomu and formatted without it (the
 * threads' names are read from /proc: no lock call waits for that). */
struct snap_wait {
    unsigned long seq;
    long long since_ms;
    char *name;
};

struct snapshot {
    struct who_thread *named;   /* the threads a hold or a listed wait names */
    size_t nnamed;
    struct who_thread *others;  /* the rest of the table, to forget the ended */
    size_t nothers;
    struct snap_wait *waits;
    size_t nwaits;
    long long start_ms;
};

static void snapshot_free(struct snapshot *sn)
{
    for (size_t i = 0; i < sn->nwaits; i++)
        free(sn->waits[i].name);
    free(sn->waits);
    free(sn->named);
    free(sn->others);
}

static int holds_seq(const struct dm_hold_info *holds, size_t n, unsigned long seq)
{
    for (size_t j = 0; j < n; j++) {
        unsigned long s;
        if (seq_of_owner(holds[j].owner, &s) == 0 && s == seq)
            return 1;
    }
    return 0;
}

/* whomu held: the snapshot of a write; -1 out of memory. Marks the waits
 * it lists as listed. */
static int snapshot_take_locked(const struct dm_hold_info *holds, size_t n, struct snapshot *sn)
{
    const struct dm_config *cfg = dm_store_config();
    memset(sn, 0, sizeof *sn);
    if (!start_ms)
        start_ms = real_ms();
    sn->start_ms = start_ms;
    sn->named = calloc(nthreads ? nthreads : 1, sizeof *sn->named);
    sn->others = calloc(nthreads ? nthreads : 1, sizeof *sn->others);
    sn->waits = calloc(nwaits ? nwaits : 1, sizeof *sn->waits);
    if (!sn->named || !sn->others || !sn->waits) {
        snapshot_free(sn);
        return -1;
    }
    long long now = dm_now_ms();
    for (struct dm_who_wait *w = waits; w; w = w->next) {
        if (now - w->since_mono_ms < DM_WHO_LIST_AFTER_MS(cfg->renew_ms))
            continue;       /* a round trip's, most likely: listed when it lasts */
        struct snap_wait *sw = &sn->waits[sn->nwaits];
        if (!(sw->name = strdup(w->name)))
            continue;
        sw->seq = w->seq;
        sw->since_ms = w->since_ms;
        w->listed = 1;
        sn->nwaits++;
    }
    /* Named: by a hold, by any wait (a young one's thread is about to
     * hold), or new since the last write (its first lock's grant may come
     * between two writes). */
    for (size_t i = 0; i < nthreads; i++) {
        int used = threads[i].fresh || holds_seq(holds, n, threads[i].seq);
        for (struct dm_who_wait *w = waits; w && !used; w = w->next)
            used = w->seq == threads[i].seq;
        threads[i].fresh = 0;
        if (used)
            sn->named[sn->nnamed++] = threads[i];
        else
            sn->others[sn->nothers++] = threads[i];
    }
    return 0;
}

/* The record's text from a snapshot, malloc'ed; NULL out of memory. No
 * lock: reads the named threads' names; `ended` gets the table's threads
 * that have ended and that nothing names (to forget), *nended of them. */
static char *build(const struct dm_hold_info *holds, size_t n, const struct snapshot *sn,
                   struct who_thread *ended, size_t *nended)
{
    const struct dm_config *cfg = dm_store_config();
    size_t room = 1024 + (n + sn->nwaits) * (DM_NAME_MAX + 64) + sn->nnamed * 64;
    char *text = malloc(room), *p = text, *end = text + room;
    *nended = 0;
    if (!text)
        return NULL;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    put_fmt(&p, end, "%s\nid\t%s\nwho\t", DM_WHO_MAGIC, dm_store_process_id());
    put_field_max(&p, end, host, WHO_FIELD_MAX);
    put_fmt(&p, end, ":%ld ", (long)getpid());
    put_field_max(&p, end, program_invocation_short_name, WHO_FIELD_MAX);
    put_fmt(&p, end, "\nstart\t%lld\nlease\t%ld\t%ld\n", sn->start_ms, cfg->lease_ms,
            cfg->renew_ms);
    /* Only the threads a hold or a wait names: the record stays as small
     * as what the process holds and waits for. */
    for (size_t i = 0; i < sn->nnamed; i++) {
        char name[64];
        thread_name(sn->named[i].tid, name, sizeof name);
        put_fmt(&p, end, "thread\t%lu\t%ld\t", sn->named[i].seq, sn->named[i].tid);
        put_field(&p, end, name[0] ? name : "-");     /* "-": the thread ended */
        put_fmt(&p, end, "\n");
    }
    /* The others are forgotten once they end (signal 0: no /proc read). */
    for (size_t i = 0; i < sn->nothers; i++)
        if (syscall(SYS_tgkill, (long)getpid(), sn->others[i].tid, 0) != 0 && errno == ESRCH)
            ended[(*nended)++] = sn->others[i];
    for (size_t j = 0; j < n; j++) {
        unsigned long s;
        if (seq_of_owner(holds[j].owner, &s) != 0)
            continue;
        put_fmt(&p, end, "hold\t%lu\t%lld\t%c\t", s, holds[j].since_ms, holds[j].read ? 'r' : 'w');
        put_field(&p, end, holds[j].name);
        put_fmt(&p, end, "\t%llu\t%ld\n", holds[j].token, holds[j].lease_ms);
    }
    for (size_t k = 0; k < sn->nwaits; k++) {
        put_fmt(&p, end, "wait\t%lu\t%lld\t", sn->waits[k].seq, sn->waits[k].since_ms);
        put_field(&p, end, sn->waits[k].name);
        put_fmt(&p, end, "\n");
    }
    *p = 0;
    return text;
}

/* whomu held: forgets the threads that ended (unless registered again). */
static void forget_locked(const struct who_thread *ended, size_t nended)
{
    size_t kept = 0;
    for (size_t i = 0; i < nthreads; i++) {
        int gone = 0;
        for (size_t k = 0; k < nended && !gone; k++)
            gone = ended[k].seq == threads[i].seq && ended[k].tid == threads[i].tid;
        if (!gone)
            threads[kept++] = threads[i];
    }
    nthreads = kept;
}

/* whomu held, a write due: makes it (dropping whomu for the store's I/O). */
static void write_locked(size_t nholds)
{
    const struct dm_config *cfg = dm_store_config();
    long long now = dm_now_ms();
    int busy = nholds > 0 || nwaits > 0;
    if (!busy && !dirty && !pending) {
        /* Idle: nothing to write; the record expires by itself. */
        idle_told = 1;
        dm_unlock(&whomu);
        dm_store->describe(NULL, DM_DESCRIBE_IDLE);
        dm_lock(&whomu);
        return;
    }
    dm_unlock(&whomu);
    struct dm_hold_info *holds = NULL;
    long n = dm_watchdog_infos(&holds);
    dm_lock(&whomu);
    last_write_ms = now;
    struct snapshot sn;
    if (n < 0 || snapshot_take_locked(holds, (size_t)n, &sn) != 0) {
        if (n >= 0)
            dm_watchdog_infos_free(holds, (size_t)n);
        fails++;            /* out of memory: again after the gap */
        return;
    }
    int was_pending = pending, was_dirty = dirty;
    pending = dirty = 0;
    writing = 1;
    dm_unlock(&whomu);
    struct who_thread *ended = calloc(sn.nothers ? sn.nothers : 1, sizeof *ended);
    size_t nended = 0;
    char *text = ended ? build(holds, (size_t)n, &sn, ended, &nended) : NULL;
    dm_watchdog_infos_free(holds, (size_t)n);
    snapshot_free(&sn);
    int r = text ? dm_store->describe(text, DM_DESCRIBE_WRITE) : -1;
    free(text);
    dm_lock(&whomu);
    forget_locked(ended, nended);
    free(ended);
    writing = 0;
    dm_cv_broadcast(&whocv);
    if (r != 0) {
        /* Again after a longer gap while the process still holds or
         * waits; an idle one stops asking (its record expires). */
        if (busy) {
            pending |= was_pending || !text;
            dirty |= was_dirty;
        }
        fails++;
    } else {
        written_until = now + cfg->lease_ms - cfg->lease_margin_ms;
        idle_told = 0;
        fails = 0;
    }
}

static void *who_main(void *arg)
{
    (void)arg;
    dm_lock(&whomu);
    while (!closing) {
        long long now = dm_now_ms();
        size_t nh = dm_watchdog_count();
        long long due = due_locked(now, nh);
        if (now >= due) {
            write_locked(nh);
            continue;
        }
        long long d = due - now;
        long gap = DM_WHO_LIST_AFTER_MS(dm_store_config()->renew_ms);
        if (d > gap && now - last_activity_ms < dm_store_config()->renew_ms)
            d = gap;                /* lock calls come: a wait may need listing */
        else if (d > gap)
            sleeping_long = 1;      /* the next wait_begin wakes it */
        if (d > 3600 * 1000LL)
            d = 3600 * 1000LL;
        struct timespec ts;
        dm_deadline_in(&ts, (long)d);
        dm_cv_timedwait(&whocv, &whomu, &ts);
        sleeping_long = 0;
    }
    running = 0;
    dm_cv_broadcast(&whocv);
    dm_unlock(&whomu);
    return NULL;
}

void dm_who_exit(void)
{
    dm_lock(&whomu);
    closing = 1;
    int was = written_until != 0 || writing;
    if (cv_ready) {
        dm_cv_broadcast(&whocv);
        /* A write in flight would land after the delete: let it end
         * (bounded: the exit does not wait for a stuck server). */
        struct timespec ts;
        dm_deadline_in(&ts, DM_DESCRIBE_DELETE_MS);
        while (writing && dm_cv_timedwait(&whocv, &whomu, &ts) == 0) {
        }
    }
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
    fails = 0;
    last_activity_ms = 0;
    sleeping_long = 0;
    running = writing = 0;      /* the thread is the parent's */
    start_failed = 0;
    cv_ready = 0;
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
    unsigned long long token;   /* holds: the grant's; 0 unknown */
    long lease_ms;              /* holds: the lease it was set; 0 unknown */
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

/* A number of ms a record gives, kept to a sane range (a record is text
 * anyone with the namespace's rights can write). */
static long ms_field(const char *s)
{
    long v = strtol(s, NULL, 10);
    return v < 0 ? 0 : v > 86400000L * 365 ? 86400000L * 365 : v;
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
    /* control bytes (an escape sequence in a thread's name) never reach a
     * terminal: '?' */
    for (char *p = r->buf; *p; p++)
        if (((unsigned char)*p < 0x20 && *p != '\t' && *p != '\n') || *p == 0x7f)
            *p = '?';
    char *save = NULL;
    char *l = strtok_r(r->buf, "\n", &save);
    if (!l || strcmp(l, DM_WHO_MAGIC) != 0) {
        rec_free(r);
        return -1;
    }
    while ((l = strtok_r(NULL, "\n", &save))) {
        char *f[8];
        int nf = fields(l, f, 8);
        if (strcmp(f[0], "id") == 0 && nf >= 2) {
            r->id = f[1];
        } else if (strcmp(f[0], "who") == 0 && nf >= 2) {
            r->who = f[1];
        } else if (strcmp(f[0], "lease") == 0 && nf >= 3) {
            r->lease_ms = ms_field(f[1]);
            r->renew_ms = ms_field(f[2]);
        } else if (strcmp(f[0], "thread") == 0 && nf >= 4) {
            r->th[r->nth].seq = strtoul(f[1], NULL, 10);
            r->th[r->nth++].name = f[3];
        } else if (strcmp(f[0], "hold") == 0 && nf >= 5) {
            struct rec_item *it = &r->holds[r->nholds++];
            it->seq = strtoul(f[1], NULL, 10);
            it->since_ms = strtoll(f[2], NULL, 10);
            it->read = f[3][0] == 'r';
            it->lock = f[4];
            it->token = nf >= 6 ? strtoull(f[5], NULL, 10) : 0;
            it->lease_ms = nf >= 7 ? ms_field(f[6]) : 0;
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

/* The record whose process id starts owner ("<id>:<seq>", a setnx token
 * "<id>:<seq>|<call>" too), and the seq. */
static struct rec *rec_of(struct rec *recs, size_t n, const char *owner, unsigned long *seq)
{
    size_t olen = strcspn(owner, "|");
    const char *c = memrchr(owner, ':', olen);
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
            if (strcmp(r->th[i].name, "-") == 0)
                snprintf(buf, len, "%s (thread %lu, ended)", r->who, seq);
            else
                snprintf(buf, len, "%s (%s)", r->who, r->th[i].name);
            return;
        }
    snprintf(buf, len, "%s (thread %lu)", r->who, seq);
}

/* Every record that parses; one per process id (a second text claiming
 * an id already seen is dropped: the store's key names the process). */
static size_t parse_all(char *const *texts, size_t ntexts, struct rec **out)
{
    struct rec *recs = calloc(ntexts ? ntexts : 1, sizeof *recs);
    size_t n = 0;
    for (size_t i = 0; recs && i < ntexts; i++) {
        if (rec_parse(texts[i], &recs[n]) != 0)
            continue;
        int dup = 0;
        for (size_t k = 0; k < n && !dup; k++)
            dup = strcmp(recs[k].id, recs[n].id) == 0;
        if (dup)
            rec_free(&recs[n]);
        else
            n++;
    }
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

/* The items of every record on lock `name` (waits, or read holds) into a
 * new array of *n, oldest first by each process's clock. */
static struct dm_lock_waiter *gather(struct rec *recs, size_t nrec, const char *name, int reads,
                                     size_t *n)
{
    size_t cnt = 0;
    for (size_t k = 0; k < nrec; k++) {
        size_t m = reads ? recs[k].nholds : recs[k].nwaits;
        const struct rec_item *its = reads ? recs[k].holds : recs[k].waits;
        for (size_t j = 0; j < m; j++)
            cnt += (!reads || its[j].read) && strcmp(its[j].lock, name) == 0;
    }
    *n = 0;
    if (cnt == 0)
        return NULL;
    struct dm_lock_waiter *v = calloc(cnt, sizeof *v);
    for (size_t k = 0; v && k < nrec; k++) {
        size_t m = reads ? recs[k].nholds : recs[k].nwaits;
        const struct rec_item *its = reads ? recs[k].holds : recs[k].waits;
        for (size_t j = 0; j < m; j++) {
            if ((reads && !its[j].read) || strcmp(its[j].lock, name) != 0)
                continue;
            char buf[512], own[DM_OWNER_MAX + 24];
            describe(&recs[k], its[j].seq, buf, sizeof buf);
            snprintf(own, sizeof own, "%s:%lu", recs[k].id, its[j].seq);
            struct dm_lock_waiter *w = &v[*n];
            w->who = strdup(buf);
            w->owner = strdup(own);
            w->since_ms = its[j].since_ms;
            if (!w->who || !w->owner) {
                free(w->who);
                free(w->owner);
                continue;
            }
            (*n)++;
        }
    }
    if (v)
        qsort(v, *n, sizeof *v, by_since);
    return v;
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
            /* The record's line of this very grant (its token: a later
             * grant of the name to the same thread is not it). */
            const struct rec_item *it = NULL;
            unsigned long long tok = row->token ? strtoull(row->token, NULL, 10) : 0;
            for (size_t k = 0; k < r->nholds; k++)
                if (r->holds[k].seq == seq && !r->holds[k].read &&
                    strcmp(r->holds[k].lock, row->name) == 0 &&
                    (row->protocol || (tok && r->holds[k].token == tok)))
                    it = &r->holds[k];
            /* The lease last set: the record's for its grant (a handover
             * sets the releaser's), the store's when it knows (etcd), else,
             * for a grant younger than the record, the holder's own unless
             * the lease left is longer (handed over: not known). */
            long long set = row->lease_granted_ms > 0 ? row->lease_granted_ms
                          : it && it->lease_ms > 0 ? it->lease_ms
                          : row->lease_ms >= 0 && row->lease_ms <= r->lease_ms ? r->lease_ms : 0;
            if (row->lease_ms >= 0 && set > 0) {
                row->renewed_ago_ms = set - row->lease_ms;
                if (row->renewed_ago_ms < 0)
                    row->renewed_ago_ms = 0;
            }
            if (it)
                row->since_ms = it->since_ms;
            else if (row->renewed_ago_ms >= 0)
                row->since_ms = now_ms - row->renewed_ago_ms;   /* granted when the lease was set */
        }
        row->waiting = gather(recs, nrec, row->name, 0, &row->nwaiting);
        if (row->readers > 0 && !row->owner)
            row->reading = gather(recs, nrec, row->name, 1, &row->nreading);
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
