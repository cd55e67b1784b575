/* soakcheck: the checker of `make soak`. Reads one run's directory (the
 * nemesis's log of processes and faults, every worker's log of its
 * critical sections, the fenced resource's log of writes), merges them on
 * CLOCK_MONOTONIC and prints a report; exit 0 when nothing in it is a
 * defect, 1 when something is, 2 when the logs cannot be read. Written
 * apart from tests/checker.c on purpose: it shares no code or reasoning
 * with the suite it is meant to judge.
 *
 * What it looks for, and how each finding is classed (docs/testing.md,
 * "The soak", says the same for readers of a report):
 *
 * overlap   two critical sections of one lock, [enter, exit] each (a
 *           section whose process died ends at the death), that intersect.
 *           documented when the nemesis log explains it:
 *             stop   one of the two processes was SIGSTOPped, between its
 *                    lock call and the overlap, for at least lease_ms -
 *                    renew_ms (a stop that long outlasts the lease after
 *                    the last renewal before it: nothing can renew then)
 *             local  on_redis_down = "local" and one of the two lock calls
 *                    ran while its machine could not reach the store
 *             warn   on_lease_lost = "warn" and the earlier holder's
 *                    machine was cut off, or the server stalled, for at
 *                    least lease_ms - margin - renew during its section
 *           otherwise a defect: a restart that lost the data, a stop
 *           right after a handover shorter than the lease, a short stall
 *           explain nothing (issue 25 made each of them safe).
 * tokens    by enter time, a section whose token is below one of a section
 *           that had already exited (a regression), or equal to another
 *           process's (a repeated grant); classed as overlaps are.
 * fence     writes the resource rejected (stale token): documented when
 *           the section that wrote it is in a documented overlap.
 * aborts    a worker killed by SIGABRT (the shim's lost-lease abort). Inside
 *           its section (last record enter, or exit before its unlock
 *           returned) and after a fault that can lose a lease (its own
 *           stop of lease - renew, its machine cut off or the server
 *           stalled for lease - margin - renew, or such faults back to
 *           back as long, data lost): expected. A
 *           "stall" is what the nemesis marks stall=all: with Redis the
 *           server paused, asleep, stopped or restarting; with etcd a
 *           fault of the leader, or of a member while another is out
 *           (the majority lost), or a restart of the whole cluster.
 *           Inside without such a fault, or outside its section: a defect
 *           (an unexpected abort).
 * waits     the longest lock call; the part of it no fault explains (a
 *           fault's time plus a lease and a settling time after it) is a
 *           starvation defect past -w (fair modes only).
 * also      crashes (any other signal, an exit status not 0), workers the
 *           nemesis found hung at the end, unlock errors no fault
 *           explains, lock errors the mode never returns.
 *
 *   soakcheck [-t TOL_MS] [-w STARVE_MS] [-v] DIR */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000LL
#define MAX_LOCKS 16
#define EPERM_ 1
#define EAGAIN_ 11
#define EBUSY_ 16
#define ETIMEDOUT_ 110
#define SIGKILL_ 9
#define SIGABRT_ 6

/* ---- growable arrays ----------------------------------------------------- */

#define VEC(T) struct { T *v; size_t n, cap; }
#define PUSH(a, x) do { if ((a).n == (a).cap) { (a).cap = (a).cap ? 2 * (a).cap : 256; \
    (a).v = realloc((a).v, (a).cap * sizeof *(a).v); if (!(a).v) { perror("soakcheck"); exit(2); } } \
    (a).v[(a).n++] = (x); } while (0)

/* ---- what the logs hold -------------------------------------------------- */

struct fault {
    int id;
    char kind[32], host[32], cut[32];
    long long begin, end;
    int target, stall, loss, ended;
    long dur;
};
struct proc {
    int pid;
    char host[32];
    long long start, death, last;
    int died, sig, code, hang, killed, done;
    char log[4096];           /* its worker log; the shim's words are in .err beside it */
};
struct section {
    int lock, pid, tid, op;   /* op: 0 lock, 1 timed, 2 try */
    long long want, enter, exit, unlocked, end;
    unsigned long long token;
    int rc;                   /* the unlock's */
    int cls;                  /* worst class of an overlap it is in: 0 none, 1 doc, 2 defect */
    int beside;               /* defect overlaps found with it as the earlier section */
};
struct fail { int lock, pid, tid, op, rc; long long want, at; };
struct write { int rej, lock, pid, tid; unsigned long long token, highest; long long at, sent; };

static VEC(struct fault) faults;
static VEC(struct proc) procs;
static VEC(struct section) secs;
static VEC(struct fail) fails;
static VEC(struct write) writes;
static char lock_names[MAX_LOCKS][32];
static int nlocks;

/* the run's settings (the nemesis's config line) */
static char mode[32] = "?", down[16] = "block", lost[16] = "abort", store[16] = "redis";
static long lease = 2000, renew = 666, margin = 200, run_s, fair = 1, sentinel;
static long long t0, t_end, last_record;
static unsigned long long seed;
static long tol_ms = 100, starve_ms = -1;
static int verbose;

static int lock_id(const char *name)
{
    for (int i = 0; i < nlocks; i++)
        if (strcmp(lock_names[i], name) == 0)
            return i;
    if (nlocks == MAX_LOCKS) {
        fprintf(stderr, "soakcheck: more than %d locks\n", MAX_LOCKS);
        exit(2);
    }
    snprintf(lock_names[nlocks], sizeof lock_names[0], "%s", name);
    return nlocks++;
}

/* pid -> proc index: open addressing */
#define PHASH 65536
static int phash[PHASH];
static struct proc *proc_of(int pid, int make)
{
    unsigned h = (unsigned)pid * 2654435761u % PHASH;
    while (phash[h]) {
        if (procs.v[phash[h] - 1].pid == pid)
            return &procs.v[phash[h] - 1];
        h = (h + 1) % PHASH;
    }
    if (!make)
        return NULL;
    struct proc p = { .pid = pid, .death = -1 };
    PUSH(procs, p);
    phash[h] = (int)procs.n;
    return &procs.v[procs.n - 1];
}

/* A pid the system gave out again (a long run starts hundreds of workers)
 * names another process: each one after the first is told apart as
 * PID + UID_STEP * N, and that is the pid printed for it. */
#define UID_STEP 10000000
static int pid_reused;

static int uid_now(int pid)
{
    int uid = pid;
    while (proc_of(uid + UID_STEP, 0))
        uid += UID_STEP;
    return uid;
}

static struct proc *proc_spawned(int pid)
{
    int uid = pid;
    if (proc_of(pid, 0)) {
        uid = uid_now(pid) + UID_STEP;
        pid_reused = 1;
    }
    return proc_of(uid, 1);
}

/* The process a worker log belongs to: the one the nemesis spawned with it. */
static struct proc *proc_of_log(const char *path, int pid)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (size_t i = 0; i < procs.n; i++) {
        const char *b = strrchr(procs.v[i].log, '/') ? strrchr(procs.v[i].log, '/') + 1
                                                    : procs.v[i].log;
        if (procs.v[i].log[0] && strcmp(b, base) == 0 && procs.v[i].pid % UID_STEP == pid)
            return &procs.v[i];
    }
    return proc_of(uid_now(pid), 1);
}

/* The process with this pid that ran at time ns. */
static int uid_at(int pid, long long ns)
{
    for (int uid = pid; proc_of(uid, 0); uid += UID_STEP) {
        const struct proc *p = proc_of(uid, 0);
        if (p->start <= ns && (p->death < 0 || ns <= p->death))
            return uid;
    }
    return uid_now(pid);
}

/* (pid, tid) -> the section in progress, or -1 */
#define THASH 262144
static struct { int pid, tid; long cur; long long want; int op, lock; } thash[THASH];
static int thash_used[THASH];
static long *thread_slot(int pid, int tid, long long **want, int **op, int **lock)
{
    unsigned h = ((unsigned)pid * 2654435761u + (unsigned)tid * 40503u) % THASH;
    while (thash_used[h] && !(thash[h].pid == pid && thash[h].tid == tid))
        h = (h + 1) % THASH;
    if (!thash_used[h]) {
        thash_used[h] = 1;
        thash[h].pid = pid;
        thash[h].tid = tid;
        thash[h].cur = -1;
        thash[h].want = -1;
    }
    *want = &thash[h].want;
    *op = &thash[h].op;
    *lock = &thash[h].lock;
    return &thash[h].cur;
}

/* ---- reading --------------------------------------------------------------- */

static char *field(char **p)
{
    char *s = *p;
    while (*s == ' ')
        s++;
    if (!*s)
        return NULL;
    char *e = s;
    while (*e && *e != ' ' && *e != '\n')
        e++;
    if (*e)
        *e++ = '\0';
    *p = e;
    return s;
}

static void kv(const char *tok, const char *key, char *out, size_t n)
{
    size_t k = strlen(key);
    if (strncmp(tok, key, k) == 0 && tok[k] == '=')
        snprintf(out, n, "%s", tok + k + 1);
}

static struct fault *fault_by_id(int id)
{
    for (size_t i = faults.n; i-- > 0;)
        if (faults.v[i].id == id)
            return &faults.v[i];
    return NULL;
}

static int read_nemesis(const char *dir)
{
    char path[4096], line[2048];
    snprintf(path, sizeof path, "%s/nemesis.log", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "soakcheck: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int have_config = 0;
    while (fgets(line, sizeof line, f)) {
        char *p = line, *t = field(&p), *what = field(&p);
        if (!t || !what)
            continue;
        long long ns = atoll(t);
        if (strcmp(what, "config") == 0) {
            have_config = 1;
            char *tok, v[64];
            while ((tok = field(&p))) {
                v[0] = '\0';
                kv(tok, "mode", mode, sizeof mode);
                kv(tok, "on_redis_down", down, sizeof down);
                kv(tok, "on_lease_lost", lost, sizeof lost);
                kv(tok, "store", store, sizeof store);
                kv(tok, "lease_ms", v, sizeof v); if (v[0]) { lease = atol(v); v[0] = 0; }
                kv(tok, "renew_ms", v, sizeof v); if (v[0]) { renew = atol(v); v[0] = 0; }
                kv(tok, "margin_ms", v, sizeof v); if (v[0]) { margin = atol(v); v[0] = 0; }
                kv(tok, "run_s", v, sizeof v); if (v[0]) { run_s = atol(v); v[0] = 0; }
                kv(tok, "fair", v, sizeof v); if (v[0]) { fair = atol(v); v[0] = 0; }
                kv(tok, "sentinel", v, sizeof v); if (v[0]) { sentinel = atol(v); v[0] = 0; }
                kv(tok, "seed", v, sizeof v); if (v[0]) { seed = strtoull(v, NULL, 10); v[0] = 0; }
                kv(tok, "t0", v, sizeof v); if (v[0]) { t0 = atoll(v); v[0] = 0; }
                kv(tok, "end", v, sizeof v); if (v[0]) { t_end = atoll(v); v[0] = 0; }
            }
        } else if (strcmp(what, "spawn") == 0) {
            char *pid = field(&p), *host = field(&p), *log = field(&p);
            if (pid && host) {
                struct proc *pr = proc_spawned(atoi(pid));
                snprintf(pr->host, sizeof pr->host, "%s", host);
                if (log)
                    snprintf(pr->log, sizeof pr->log, "%s", log);
                pr->start = ns;
            }
        } else if (strcmp(what, "died") == 0) {
            char *pid = field(&p), *how = field(&p), *n = field(&p);
            if (pid && how && n) {
                struct proc *pr = proc_of(uid_now(atoi(pid)), 1);
                pr->died = 1;
                pr->death = ns;
                if (strcmp(how, "signal") == 0)
                    pr->sig = atoi(n);
                else
                    pr->code = atoi(n);
            }
        } else if (strcmp(what, "hang") == 0) {
            char *pid = field(&p);
            if (pid)
                proc_of(uid_now(atoi(pid)), 1)->hang = 1;
        } else if (strcmp(what, "fault") == 0) {
            char *id = field(&p), *phase = field(&p), *kind = field(&p);
            if (!id || !phase || !kind)
                continue;
            if (strcmp(phase, "begin") == 0) {
                struct fault fl = { .id = atoi(id), .begin = ns, .end = -1, .target = -1 };
                snprintf(fl.kind, sizeof fl.kind, "%s", kind);
                char *tok, v[64];
                while ((tok = field(&p))) {
                    v[0] = '\0';
                    kv(tok, "host", fl.host, sizeof fl.host);
                    kv(tok, "cut", fl.cut, sizeof fl.cut);
                    kv(tok, "target", v, sizeof v); if (v[0]) { fl.target = uid_now(atoi(v)); v[0] = 0; }
                    kv(tok, "dur", v, sizeof v); if (v[0]) { fl.dur = atol(v); v[0] = 0; }
                    kv(tok, "stall", v, sizeof v); if (v[0]) { fl.stall = 1; v[0] = 0; }
                    kv(tok, "loss", v, sizeof v); if (v[0]) { fl.loss = 1; v[0] = 0; }
                }
                PUSH(faults, fl);
            } else if (strcmp(phase, "end") == 0 || strcmp(phase, "skip") == 0) {
                struct fault *fl = fault_by_id(atoi(id));
                if (fl && fl->end < 0) {
                    fl->end = ns;
                    fl->ended = 1;
                }
            }
        }
    }
    fclose(f);
    if (!have_config) {
        fprintf(stderr, "soakcheck: %s has no config line\n", path);
        return -1;
    }
    return 0;
}

static int op_of(const char *s)
{
    return strcmp(s, "lock") == 0 ? 0 : strcmp(s, "timed") == 0 ? 1 : 2;
}

static int read_worker(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "soakcheck: %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n'))
            continue;   /* the record a kill cut short */
        char *p = line, *t = field(&p), *kind = field(&p), *pid_s = field(&p);
        if (!t || !kind || !pid_s)
            continue;
        long long ns = atoll(t);
        struct proc *pr = proc_of_log(path, atoi(pid_s));
        int pid = pr->pid;
        if (strcmp(pr->log, path) != 0)
            snprintf(pr->log, sizeof pr->log, "%s", path);   /* where it is now */
        if (ns > pr->last)
            pr->last = ns;
        if (ns > last_record)
            last_record = ns;
        if (strcmp(kind, "start") == 0) {
            char *host = field(&p);
            if (host && !pr->host[0])
                snprintf(pr->host, sizeof pr->host, "%s", host);
            continue;
        }
        if (strcmp(kind, "done") == 0) {
            pr->done = 1;
            continue;
        }
        char *tid_s = field(&p), *lock_s = field(&p), *arg = field(&p);
        if (!tid_s || !lock_s || !arg)
            continue;
        int tid = atoi(tid_s), lock = lock_id(lock_s);
        long long *want;
        int *op, *wlock;
        long *cur = thread_slot(pid, tid, &want, &op, &wlock);
        if (strcmp(kind, "want") == 0) {
            *want = ns;
            *op = op_of(arg);
            *wlock = lock;
        } else if (strcmp(kind, "enter") == 0) {
            struct section s = { .lock = lock, .pid = pid, .tid = tid, .op = *op,
                                 .want = *want >= 0 ? *want : ns, .enter = ns, .exit = -1,
                                 .unlocked = -1, .token = strtoull(arg, NULL, 10) };
            PUSH(secs, s);
            *cur = (long)secs.n - 1;
            *want = -1;
        } else if (strcmp(kind, "exit") == 0) {
            if (*cur >= 0)
                secs.v[*cur].exit = ns;
        } else if (strcmp(kind, "unlocked") == 0) {
            if (*cur >= 0) {
                secs.v[*cur].unlocked = ns;
                secs.v[*cur].rc = atoi(arg);
            }
            *cur = -1;
        } else if (strcmp(kind, "fail") == 0) {
            struct fail fl = { .lock = lock, .pid = pid, .tid = tid, .op = *op, .rc = atoi(arg),
                               .want = *want >= 0 ? *want : ns, .at = ns };
            PUSH(fails, fl);
            *want = -1;
        }
    }
    fclose(f);
    return 0;
}

static int read_fence(const char *dir)
{
    char path[4096], line[512];
    snprintf(path, sizeof path, "%s/fence.log", dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;   /* no write at all */
    while (fgets(line, sizeof line, f)) {
        char *p = line, *t = field(&p), *kind = field(&p), *lock = field(&p), *tok = field(&p),
             *hi = field(&p), *pid = field(&p), *tid = field(&p), *sent = field(&p);
        if (!sent)
            continue;
        struct write w = { .rej = strcmp(kind, "rej") == 0, .lock = lock_id(lock),
                           .token = strtoull(tok, NULL, 10), .highest = strtoull(hi, NULL, 10),
                           .pid = uid_at(atoi(pid), atoll(t)), .tid = atoi(tid), .at = atoll(t),
                           .sent = atoll(sent) };
        PUSH(writes, w);
    }
    fclose(f);
    return 0;
}

/* ---- reporting helpers ----------------------------------------------------- */

static double rel(long long ns) { return (double)(ns - t0) / 1e9; }

static long defects;
static void defect(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void defect(const char *fmt, ...)
{
    defects++;
    va_list ap;
    va_start(ap, fmt);
    printf("  DEFECT: ");
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

static const char *host_of(int pid)
{
    struct proc *p = proc_of(pid, 0);
    return p && p->host[0] ? p->host : "?";
}

static long long fend(const struct fault *f) { return f->end >= 0 ? f->end : t_end; }
static long fdur_ms(const struct fault *f) { return (long)((fend(f) - f->begin) / MS); }
static int is_stop(const struct fault *f) { return strncmp(f->kind, "stop-", 5) == 0; }
static int cuts(const struct fault *f, const char *host)
{
    return f->cut[0] && (strcmp(f->cut, "all") == 0 || strcmp(f->cut, host) == 0);
}

/* The faults within [a, b], as "kind@+s(dur ms)" words, for a defect's line. */
static const char *faults_near(long long a, long long b)
{
    static char buf[600];
    buf[0] = '\0';
    size_t n = 0;
    for (size_t i = 0; i < faults.n && n < sizeof buf - 60; i++) {
        const struct fault *f = &faults.v[i];
        if (f->begin > b || fend(f) < a)
            continue;
        char who[48] = "";
        if (f->target > 0)
            snprintf(who, sizeof who, " pid %d", f->target);
        else if (f->host[0])
            snprintf(who, sizeof who, " %s", f->host);
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s#%d@+%.3fs(%ld ms%s)", n ? ", " : "",
                              f->kind, f->id, rel(f->begin), fdur_ms(f), who);
    }
    return n ? buf : "none";
}

/* A stop of pid that began in [from, to] and lasted at least min_ms; its
 * duration in ms, or -1. */
static long stop_of(int pid, long long from, long long to, long min_ms)
{
    long best = -1;
    for (size_t i = 0; i < faults.n; i++) {
        const struct fault *f = &faults.v[i];
        if (!is_stop(f) || f->target != pid || f->begin < from || f->begin > to)
            continue;
        long d = fdur_ms(f);
        if (d >= min_ms && d > best)
            best = d;
    }
    return best;
}

/* A fault that cut host off from the store (or all) or stalled it,
 * overlapping [from, to], lasting at least min_ms. */
static const struct fault *cut_or_stall(const char *host, long long from, long long to,
                                        long min_ms, int stall_too)
{
    for (size_t i = 0; i < faults.n; i++) {
        const struct fault *f = &faults.v[i];
        if (f->begin > to || fend(f) < from)
            continue;
        if ((cuts(f, host) || (stall_too && f->stall)) && fdur_ms(f) >= min_ms)
            return f;
    }
    return NULL;
}

static const struct fault *loss_near(long long from, long long to)
{
    for (size_t i = 0; i < faults.n; i++) {
        const struct fault *f = &faults.v[i];
        if (f->loss && f->begin <= to && fend(f) + lease * MS >= from)
            return f;
    }
    return NULL;
}

/* ---- classification -------------------------------------------------------- */

enum cls { C_NONE, C_STOP, C_LOCAL, C_WARN, C_DEFECT };
static const char *const cls_name[] = { "", "documented (stop past the lease)",
    "documented (on_redis_down = local, the store unreachable)",
    "documented (on_lease_lost = warn, cut off or stalled)", "defect" };

/* Whether x's grant can be the stale one of the two: not a newer token
 * than y's (0, a local hold, says nothing). */
static int stale(const struct section *x, const struct section *y)
{
    return x->token == 0 || y->token == 0 || x->token <= y->token;
}

static enum cls classify(const struct section *a, const struct section *b, long long win,
                         char *why, size_t n)
{
    long need = lease - renew - tol_ms;
    const struct section *ab[2] = { a, b };
    for (int i = 0; i < 2; i++) {
        const struct section *x = ab[i];
        if (!stale(x, ab[1 - i]))
            continue;    /* a stop explains the older grant only */
        long d = stop_of(x->pid, x->want - tol_ms * MS, win, need);
        if (d >= 0) {
            snprintf(why, n, "pid %d was stopped %ld ms (>= lease - renew = %ld ms)", x->pid, d,
                     lease - renew);
            return C_STOP;
        }
    }
    if (strcmp(down, "local") == 0)
        for (int i = 0; i < 2; i++) {
            const struct section *x = ab[i];
            const struct fault *f = cut_or_stall(host_of(x->pid), x->want,
                                                 x->enter + tol_ms * MS, 0, 0);
            if (f || x->token == 0) {
                snprintf(why, n, "pid %d locked while %s", x->pid,
                         f ? f->kind : "without a token (local)");
                return C_LOCAL;
            }
        }
    if (strcmp(lost, "warn") == 0) {
        const struct fault *f = cut_or_stall(host_of(a->pid), a->want, win,
                                             lease - margin - renew - tol_ms, 1);
        if (f) {
            snprintf(why, n, "pid %d's lease ran out under %s #%d (%ld ms)", a->pid, f->kind,
                     f->id, fdur_ms(f));
            return C_WARN;
        }
    }
    const struct fault *f = loss_near(a->want - lease * MS, win);
    if (f) {
        snprintf(why, n, "%s #%d at +%.3fs lost the data: no grant may follow within a lease; "
                 "faults around: %s", f->kind, f->id, rel(f->begin),
                 faults_near(win - lease * MS, win + 100 * MS));
        return C_DEFECT;
    }
    long d = stop_of(a->pid, a->want - tol_ms * MS, win, renew - tol_ms);
    long e = stop_of(b->pid, b->want - tol_ms * MS, win, renew - tol_ms);
    if (d >= 0 || e >= 0)
        snprintf(why, n, "pid %d stopped %ld ms: longer than renew_ms (%ld), shorter than "
                 "lease - renew; faults around: %s", d >= 0 ? a->pid : b->pid, d >= 0 ? d : e,
                 renew, faults_near(win - lease * MS, win + 100 * MS));
    else
        snprintf(why, n, "faults around: %s", faults_near(win - lease * MS, win + 100 * MS));
    return C_DEFECT;
}

static void sec_mark(struct section *s, enum cls c)
{
    int v = c == C_NONE ? 0 : c == C_DEFECT ? 2 : 1;
    if (v > s->cls)
        s->cls = v;
}

/* ---- the checks ------------------------------------------------------------ */

static long n_overlap[6], n_token[6], n_tokenless;
static long n_rej_doc, n_rej_defect;

static int by_lock_enter(const void *x, const void *y)
{
    const struct section *a = x, *b = y;
    if (a->lock != b->lock)
        return a->lock - b->lock;
    return a->enter < b->enter ? -1 : a->enter > b->enter;
}

static void check_overlaps(void)
{
    VEC(long) active = { 0 };
    int lock = -1;
    for (size_t i = 0; i < secs.n; i++) {
        struct section *b = &secs.v[i];
        if (b->lock != lock) {
            active.n = 0;
            lock = b->lock;
        }
        size_t k = 0;
        for (size_t j = 0; j < active.n; j++)
            if (secs.v[active.v[j]].end > b->enter)
                active.v[k++] = active.v[j];
        active.n = k;
        for (size_t j = 0; j < active.n; j++) {
            struct section *a = &secs.v[active.v[j]];
            char why[700];
            enum cls c = classify(a, b, b->enter, why, sizeof why);
            n_overlap[c]++;
            sec_mark(a, c);
            sec_mark(b, c);
            long long w_end = a->end < b->end ? a->end : b->end;
            if (c == C_DEFECT && a->beside++ > 0)
                defects++;      /* listed once per earlier section */
            else if (c == C_DEFECT)
                defect("overlap on %s: pid %d (%s) token %llu inside +%.3fs..+%.3fs, "
                       "pid %d (%s) token %llu entered +%.3fs (%.1f ms together): %s",
                       lock_names[b->lock], a->pid, host_of(a->pid), a->token, rel(a->enter),
                       rel(a->end), b->pid, host_of(b->pid), b->token, rel(b->enter),
                       (double)(w_end - b->enter) / 1e6, why);
            else if (verbose)
                printf("  overlap on %s: pid %d / pid %d at +%.3fs: %s: %s\n", lock_names[b->lock],
                       a->pid, b->pid, rel(b->enter), cls_name[c], why);
        }
        PUSH(active, (long)i);
    }
    free(active.v);
    for (size_t i = 0; i < secs.n; i++)
        if (secs.v[i].beside > 1)
            printf("    (pid %d's section on %s at +%.3fs: %d sections in all entered beside it)\n",
                   secs.v[i].pid, lock_names[secs.v[i].lock], rel(secs.v[i].enter),
                   secs.v[i].beside);
}

static int by_end(const void *x, const void *y)
{
    const struct section *a = *(struct section *const *)x, *b = *(struct section *const *)y;
    if (a->lock != b->lock)
        return a->lock - b->lock;
    return a->end < b->end ? -1 : a->end > b->end;
}

/* By enter time, each section's token against the highest of the sections
 * of its lock that had ended before it entered. */
static void check_tokens(void)
{
    struct section **ends = malloc(secs.n * sizeof *ends);
    size_t n = 0;
    for (size_t i = 0; i < secs.n; i++) {
        if (secs.v[i].token == 0) {
            n_tokenless++;
            if (strcmp(down, "local") != 0)
                defect("section without a token: pid %d (%s) on %s at +%.3fs",
                       secs.v[i].pid, host_of(secs.v[i].pid), lock_names[secs.v[i].lock],
                       rel(secs.v[i].enter));
            continue;
        }
        ends[n++] = &secs.v[i];
    }
    qsort(ends, n, sizeof *ends, by_end);
    size_t e = 0;
    int lock = -1;
    const struct section *top = NULL;
    for (size_t i = 0; i < secs.n; i++) {
        struct section *b = &secs.v[i];
        if (b->lock != lock) {
            lock = b->lock;
            top = NULL;
            while (e < n && ends[e]->lock < lock)
                e++;
        }
        while (e < n && ends[e]->lock == lock && ends[e]->end <= b->enter) {
            if (!top || ends[e]->token > top->token)
                top = ends[e];
            e++;
        }
        if (b->token == 0 || !top)
            continue;
        int regress = b->token < top->token;
        int repeat = b->token == top->token && b->pid != top->pid;
        if (!regress && !repeat)
            continue;
        char why[700];
        enum cls c = classify(top, b, b->enter, why, sizeof why);
        n_token[c]++;
        sec_mark(b, c);
        if (c == C_DEFECT)
            defect("%s on %s: pid %d (%s) entered +%.3fs with token %llu, after pid "
                   "%d (%s) left +%.3fs with token %llu: %s",
                   regress ? "token regression" : "repeated token", lock_names[lock], b->pid,
                   host_of(b->pid), rel(b->enter), b->token, top->pid, host_of(top->pid),
                   rel(top->end), top->token, why);
    }
    free(ends);
}

static int by_pid_tid_enter(const void *x, const void *y)
{
    const struct section *a = *(struct section *const *)x, *b = *(struct section *const *)y;
    if (a->pid != b->pid)
        return a->pid - b->pid;
    if (a->tid != b->tid)
        return a->tid - b->tid;
    return a->enter < b->enter ? -1 : a->enter > b->enter;
}

static void check_fence(void)
{
    struct section **by = malloc((secs.n + 1) * sizeof *by);
    for (size_t i = 0; i < secs.n; i++)
        by[i] = &secs.v[i];
    qsort(by, secs.n, sizeof *by, by_pid_tid_enter);
    for (size_t i = 0; i < writes.n; i++) {
        const struct write *w = &writes.v[i];
        if (!w->rej)
            continue;
        /* the last section of (pid, tid) that entered before the write */
        size_t lo = 0, hi = secs.n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            const struct section *s = by[mid];
            int before = s->pid < w->pid || (s->pid == w->pid && (s->tid < w->tid ||
                         (s->tid == w->tid && s->enter <= w->sent)));
            if (before)
                lo = mid + 1;
            else
                hi = mid;
        }
        const struct section *s = lo ? by[lo - 1] : NULL;
        if (s && (s->pid != w->pid || s->tid != w->tid))
            s = NULL;
        int c = s ? s->cls : 2;
        if (s && c == 0 && s->token == 0 && strcmp(down, "local") == 0)
            c = 1;
        if (c == 1)
            n_rej_doc++;
        else
            n_rej_defect++;
        if (c == 0 || (c == 2 && !s))
            defect("the fence rejected pid %d (%s) on %s at +%.3fs: token %llu < %llu, in no "
                   "overlap the logs show", w->pid, host_of(w->pid), lock_names[w->lock],
                   rel(w->at), w->token, w->highest);
    }
    free(by);
}

/* A process's section in progress at its death: the last one of any of
 * its threads that has no unlocked record; NULL if none. */
static const struct section *inside_at_death(int pid)
{
    const struct section *found = NULL;
    for (size_t i = 0; i < secs.n; i++) {
        const struct section *s = &secs.v[i];
        if (s->pid == pid && s->unlocked < 0 && (!found || s->enter > found->enter))
            found = s;
    }
    return found;
}

/* The hold the shim's abort message names (its lock and fencing token, in
 * the worker's .err file): the section of pid that had it, or NULL. */
static int abort_at_release;    /* the last abort_for's message: "lost while held: at unlock" */
static char abort_name[64];     /* the lock it names, "" none */
static char abort_other[200];   /* the last line of .err that is not the shim's: glibc's words */
static long abort_renewed_ms;   /* its "last renewal succeeded N ms ago", or -1 */
static long long abort_granted; /* the first section of that hold (a cached one serves many) */
static const struct section *aborted_for(const struct proc *p)
{
    char path[4200], line[1024], name[64] = "";
    abort_at_release = 0;
    abort_name[0] = '\0';
    abort_renewed_ms = -1;
    abort_other[0] = '\0';
    unsigned long long token = 0;
    size_t n = strlen(p->log);
    if (n < 4)
        return NULL;
    snprintf(path, sizeof path, "%.*s.err", (int)(n - 4), p->log);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "dmutex[", 7) != 0) {
            snprintf(abort_other, sizeof abort_other, "%.*s", (int)strcspn(line, "\n"), line);
            continue;
        }
        char *ab = strstr(line, "aborting"), *own = strstr(line, " (owner "),
             *tok = strstr(line, "fencing token ");
        if (!ab || !own || !tok)
            continue;
        char *l = own;
        while (l > line && strncmp(l, "lock ", 5) != 0)
            l--;
        if (strncmp(l, "lock ", 5) != 0)
            continue;
        snprintf(name, sizeof name, "%.*s", (int)(own - l - 5), l + 5);
        token = strtoull(tok + 14, NULL, 10);
        abort_at_release = strstr(line, "lost while held: at unlock") != NULL;
        char *ago = strstr(line, "last renewal succeeded ");
        abort_renewed_ms = ago ? atol(ago + 23) : -1;
    }
    fclose(f);
    snprintf(abort_name, sizeof abort_name, "%s", name);
    if (!name[0])
        return NULL;
    const struct section *found = NULL;
    abort_granted = -1;
    for (size_t i = 0; i < secs.n; i++) {
        const struct section *s = &secs.v[i];
        if (s->pid != p->pid || s->token != token || strcmp(lock_names[s->lock], name) != 0 ||
            s->enter > p->death)
            continue;
        if (!found || s->enter > found->enter)
            found = s;
        if (abort_granted < 0 || s->want < abort_granted)
            abort_granted = s->want;
    }
    return found;
}

static long n_abort_exp, n_abort_inside, n_abort_outside, n_killed, n_crash, n_hang;

/* When pid's lock call on the lock named began, if one was still in
 * progress at its end (a want with no enter or fail after it), or -1:
 * a hold granted to a thread that had not returned from its lock call. */
static long long pending_want(int pid, const char *lock)
{
    long long first = -1;
    for (size_t h = 0; h < THASH; h++)
        if (thash_used[h] && thash[h].pid == pid && thash[h].want >= 0 &&
            strcmp(lock_names[thash[h].lock], lock) == 0 &&
            (first < 0 || thash[h].want < first))
            first = thash[h].want;
    return first;
}
static long n_unlock_err, n_unlock_exp;

/* The longest time within [from, to] when pid could not renew: its own
 * stops, its host cut off and the store's stalls, merged where they touch
 * within tol_ms (a stall that ends as the process is stopped is one outage to it), in
 * ms; first the ids of the first and last fault of that run. */
static long outage_ms(int pid, const char *host, long long from, long long to, int *first,
                      int *last)
{
    long best = 0;
    for (size_t i = 0; i < faults.n; i++) {
        const struct fault *f = &faults.v[i];
        if (!(f->stall || cuts(f, host) || (is_stop(f) && f->target == pid)) ||
            f->begin > to || fend(f) < from)
            continue;
        /* the run that starts with f: extend it while another touches it */
        long long b = f->begin, e = fend(f);
        int lastid = f->id;
        for (int grew = 1; grew;) {
            grew = 0;
            for (size_t j = 0; j < faults.n; j++) {
                const struct fault *g = &faults.v[j];
                if ((g->stall || cuts(g, host) || (is_stop(g) && g->target == pid)) &&
                    g->begin >= b && g->begin <= e + tol_ms * MS && fend(g) > e) {
                    e = fend(g);
                    lastid = g->id;
                    grew = 1;
                }
            }
        }
        if ((e - b) / MS > best) {
            best = (long)((e - b) / MS);
            *first = f->id;
            *last = lastid;
        }
    }
    return best;
}

/* A fault that can make this process lose a hold during [from, to]. */
static int lease_loser(int pid, long long from, long long to, char *why, size_t n)
{
    long d = stop_of(pid, from, to, lease - renew - tol_ms);
    if (d >= 0) {
        snprintf(why, n, "stopped %ld ms", d);
        return 1;
    }
    const struct fault *f = cut_or_stall(host_of(pid), from, to, lease - margin - renew - tol_ms, 1);
    if (f) {
        snprintf(why, n, "%s #%d (%ld ms)", f->kind, f->id, fdur_ms(f));
        return 1;
    }
    f = loss_near(from, to);
    if (f) {
        snprintf(why, n, "%s #%d lost the data", f->kind, f->id);
        return 1;
    }
    int a = 0, b = 0;
    long u = outage_ms(pid, host_of(pid), from, to, &a, &b);
    if (u >= lease - margin - renew - tol_ms) {
        snprintf(why, n, "faults #%d..#%d back to back (%ld ms)", a, b, u);
        return 1;
    }
    return 0;
}

/* Releases the shim found expired after their unlock (a warning, no
 * abort: the section had ended inside the lease), counted from every
 * worker's .err file. */
static long n_expired_after;
static void count_expired_after(void)
{
    char path[4200], line[1024];
    for (size_t i = 0; i < procs.n; i++) {
        size_t n = strlen(procs.v[i].log);
        if (n < 4)
            continue;
        snprintf(path, sizeof path, "%.*s.err", (int)(n - 4), procs.v[i].log);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        while (fgets(line, sizeof line, f))
            n_expired_after += strncmp(line, "dmutex[", 7) == 0 &&
                               strstr(line, "the hold expired after unlock") != NULL;
        fclose(f);
    }
}

static void check_processes(void)
{
    count_expired_after();
    for (size_t i = 0; i < procs.n; i++) {
        struct proc *p = &procs.v[i];
        if (p->hang) {
            n_hang++;
            defect("pid %d (%s) still ran %.1f s after the end and was killed (hung): last "
                   "record +%.3fs", p->pid, p->host, (double)(p->death - t_end) / 1e9, rel(p->last));
            continue;
        }
        if (!p->died)
            continue;
        if (p->sig == SIGKILL_) {
            n_killed++;
            int by_nemesis = 0;
            for (size_t j = 0; j < faults.n; j++)
                if (faults.v[j].target == p->pid && strncmp(faults.v[j].kind, "kill-", 5) == 0)
                    by_nemesis = 1;
            if (!by_nemesis)
                defect("pid %d (%s) was killed (SIGKILL) at +%.3fs, not by the nemesis",
                       p->pid, p->host, rel(p->death));
            continue;
        }
        if (p->sig == SIGABRT_) {
            /* the section of the hold the abort was for, when the message
             * names it; else any section the process was in */
            const struct section *s = aborted_for(p);
            const struct section *was = s;
            if (!s && abort_other[0]) {
                /* not the shim's lost-lease abort: glibc's (a double free...) */
                n_crash++;
                defect("crash: pid %d (%s) aborted at +%.3fs saying \"%s\" (not the shim's "
                       "lost-lease abort); last record +%.3fs; faults around: %s", p->pid,
                       p->host, rel(p->death), abort_other, rel(p->last),
                       faults_near(p->death - 2 * lease * MS, p->death));
                continue;
            }
            if (s && s->unlocked >= 0 && s->unlocked < p->death)
                s = NULL;     /* that hold's section was over */
            else if (!s)
                s = inside_at_death(p->pid);
            char why[300];
            long long in_lock = !s && !was && abort_name[0] ? pending_want(p->pid, abort_name) : -1;
            if (in_lock >= 0) {
                /* granted, its thread not back from the lock call yet: the
                 * hold was the process's, judged as one inside */
                if (lease_loser(p->pid, in_lock - lease * MS, p->death, why, sizeof why)) {
                    n_abort_exp++;
                    if (verbose)
                        printf("  abort of pid %d at +%.3fs in its lock call: %s\n", p->pid,
                               rel(p->death), why);
                    continue;
                }
                n_abort_inside++;
                defect("abort of pid %d (%s) at +%.3fs for a hold of %s granted to its lock call "
                       "(since +%.3fs) with no fault that loses a lease; last renewal %ld ms "
                       "before; faults around: %s", p->pid, p->host, rel(p->death), abort_name,
                       rel(in_lock), abort_renewed_ms,
                       faults_near(in_lock - lease * MS, p->death));
                continue;
            }
            if (s && lease_loser(p->pid, s->want - lease * MS, p->death, why, sizeof why)) {
                n_abort_exp++;
                if (verbose)
                    printf("  abort of pid %d at +%.3fs inside: %s\n", p->pid, rel(p->death), why);
                continue;
            }
            /* what met its release, for the message: a stall, cut, restart or
             * data loss since the hold was granted */
            long long since = was ? (abort_granted < was->end - lease * MS ? abort_granted
                                                                          : was->end - lease * MS) : 0;
            const struct fault *stall = was ? cut_or_stall(p->host, since, p->death, 0, 1) : NULL;
            if (was && !stall)
                stall = loss_near(since, p->death);
            for (size_t j = 0; was && !stall && j < faults.n; j++) {
                const struct fault *f = &faults.v[j];
                if ((strcmp(f->kind, "client-kill") == 0 || strstr(f->kind, "restart") ||
                     strstr(f->kind, "-kill")) &&
                    f->begin <= p->death && fend(f) >= since)
                    stall = f;
            }
            if (s) {
                n_abort_inside++;
                defect("abort of pid %d (%s) at +%.3fs inside its section on %s (entered "
                       "+%.3fs, %s; last renewal %ld ms before) with no fault that loses a "
                       "lease; faults around: %s",
                       p->pid, p->host, rel(p->death), lock_names[s->lock], rel(s->enter),
                       s->exit >= 0 ? "in its unlock" : "before its exit", abort_renewed_ms,
                       faults_near(s->want - lease * MS, p->death));
            } else {
                n_abort_outside++;
                char held[400] = "";
                if (was)
                    snprintf(held, sizeof held, " for its hold of %s (token %llu) whose section "
                             "ended +%.3fs%s%s%s", lock_names[was->lock], was->token,
                             rel(was->end), abort_at_release ? ", its release answered 'not held'" : "",
                             stall ? " after " : "", stall ? stall->kind : "");
                defect("unexpected abort of pid %d (%s) at +%.3fs, outside its section%s "
                       "(last record +%.3fs); faults around: %s", p->pid, p->host, rel(p->death),
                       held, rel(p->last), faults_near(p->death - 2 * lease * MS, p->death));
            }
            continue;
        }
        if (p->sig || p->code) {
            n_crash++;
            defect("pid %d (%s) ended at +%.3fs with %s %d", p->pid, p->host, rel(p->death),
                   p->sig ? "signal" : "exit status", p->sig ? p->sig : p->code);
        }
    }
    for (size_t i = 0; i < secs.n; i++) {
        const struct section *s = &secs.v[i];
        if (s->unlocked < 0 || s->rc == 0)
            continue;
        char why[300];
        if (s->rc == EPERM_ && (s->cls == 1 || lease_loser(s->pid, s->want - lease * MS,
                                                           s->unlocked, why, sizeof why))) {
            n_unlock_exp++;
            continue;
        }
        n_unlock_err++;
        defect("unlock of %s by pid %d (%s) at +%.3fs returned %d; faults around: %s",
               lock_names[s->lock], s->pid, host_of(s->pid), rel(s->unlocked), s->rc,
               faults_near(s->want - lease * MS, s->unlocked));
    }
}

static long n_fail_rc[4];   /* EBUSY, ETIMEDOUT, EAGAIN, other */
static void check_fails(void)
{
    for (size_t i = 0; i < fails.n; i++) {
        const struct fail *f = &fails.v[i];
        int slot = f->rc == EBUSY_ ? 0 : f->rc == ETIMEDOUT_ ? 1 : f->rc == EAGAIN_ ? 2 : 3;
        n_fail_rc[slot]++;
        int ok = (f->rc == EBUSY_ && f->op == 2) || (f->rc == ETIMEDOUT_ && f->op == 1) ||
                 (f->rc == EAGAIN_ && strcmp(down, "error") == 0);
        if (!ok)
            defect("%s of %s by pid %d (%s) at +%.3fs returned %d, which this mode never "
                   "returns", f->op == 0 ? "lock" : f->op == 1 ? "timedlock" : "trylock",
                   lock_names[f->lock], f->pid, host_of(f->pid), rel(f->at), f->rc);
    }
}

/* The part of [a, b] that no fault explains: a fault's time, then a lease
 * and a settling time after it. */
static long long unexplained(long long a, long long b)
{
    long long settle = (sentinel ? 10000 : 2000) * MS + lease * MS;
    long long total = 0, t = a;
    while (t < b) {
        long long next_free = t;
        for (size_t i = 0; i < faults.n; i++) {
            const struct fault *f = &faults.v[i];
            if (f->begin <= next_free && fend(f) + settle > next_free)
                next_free = fend(f) + settle;
        }
        if (next_free > t) {
            t = next_free;
            continue;
        }
        long long next_fault = b;
        for (size_t i = 0; i < faults.n; i++)
            if (faults.v[i].begin > t && faults.v[i].begin < next_fault)
                next_fault = faults.v[i].begin;
        total += next_fault - t;
        t = next_fault;
    }
    return total;
}

static long long longest_wait, longest_unexpl;
static const struct section *longest_sec;
static long n_starved;
static void check_waits(void)
{
    if (starve_ms < 0)
        starve_ms = 5 * lease > 15000 ? 5 * lease : 15000;
    for (size_t i = 0; i < secs.n; i++) {
        const struct section *s = &secs.v[i];
        long long w = s->enter - s->want;
        if (w > longest_wait) {
            longest_wait = w;
            longest_sec = s;
        }
        if (s->op != 0 || w < starve_ms * MS)
            continue;
        long long u = unexplained(s->want, s->enter);
        if (u > longest_unexpl)
            longest_unexpl = u;
        if (u >= starve_ms * MS && fair) {
            n_starved++;
            defect("starvation: pid %d (%s) waited %.1f s for %s (+%.3fs..+%.3fs), %.1f s "
                   "of it with no fault to explain it", s->pid, host_of(s->pid), (double)w / 1e9,
                   lock_names[s->lock], rel(s->want), rel(s->enter), (double)u / 1e9);
        }
    }
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "-t") == 0 && i + 1 < argc)
            tol_ms = atol(argv[++i]);
        else if (strcmp(argv[i], "-w") == 0 && i + 1 < argc)
            starve_ms = atol(argv[++i]);
        else if (strcmp(argv[i], "-v") == 0)
            verbose = 1;
        else
            break;
    }
    if (i != argc - 1) {
        fprintf(stderr, "usage: soakcheck [-t TOL_MS] [-w STARVE_MS] [-v] DIR\n");
        return 2;
    }
    const char *dir = argv[i];
    if (read_nemesis(dir) != 0)
        return 2;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "soakcheck: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    VEC(char *) names = { 0 };
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == 'w' && n > 4 && strcmp(e->d_name + n - 4, ".log") == 0)
            PUSH(names, strdup(e->d_name));
    }
    closedir(d);
    qsort(names.v, names.n, sizeof *names.v, by_name);
    for (size_t k = 0; k < names.n; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names.v[k]);
        if (read_worker(path) != 0)
            return 2;
    }
    read_fence(dir);
    if (!t_end)
        t_end = last_record;

    /* each section ends at its exit, else at its process's death, else at
     * the process's last record (the run ended around it) */
    for (size_t k = 0; k < secs.n; k++) {
        struct section *s = &secs.v[k];
        struct proc *p = proc_of(s->pid, 0);
        if (s->exit >= 0)
            s->end = s->exit;
        else if (p && p->died && p->death > s->enter)
            s->end = p->death;
        else
            s->end = p && p->last > s->enter ? p->last : s->enter;
    }
    qsort(secs.v, secs.n, sizeof *secs.v, by_lock_enter);

    printf("soak check of %s\n", dir);
    printf("mode %s, seed %llu, %ld s, store %s, lease %ld ms (renew %ld, margin %ld), "
           "on_redis_down %s, on_lease_lost %s\n", mode, seed, run_s, sentinel ? "Sentinel" : store,
           lease, renew, margin, down, lost);
    if (pid_reused)
        printf("(a pid the system gave out again is printed as PID + %d per reuse)\n", UID_STEP);
    printf("findings:\n");
    check_overlaps();
    check_tokens();
    check_fence();
    check_processes();
    check_fails();
    check_waits();
    if (!defects)
        printf("  none\n");

    printf("faults: %zu:", faults.n);
    {
        char seen[64][32];
        long cnt[64];
        int ns = 0;
        for (size_t k = 0; k < faults.n; k++) {
            int j = 0;
            while (j < ns && strcmp(seen[j], faults.v[k].kind) != 0)
                j++;
            if (j == ns && ns < 64) {
                snprintf(seen[ns], sizeof seen[0], "%s", faults.v[k].kind);
                cnt[ns++] = 0;
            }
            if (j < 64)
                cnt[j]++;
        }
        for (int j = 0; j < ns; j++)
            printf(" %s %ld%s", seen[j], cnt[j], j + 1 < ns ? "," : "");
        printf("\n");
    }
    long ndone = 0;
    for (size_t k = 0; k < procs.n; k++)
        ndone += procs.v[k].done;
    printf("processes: %zu (%ld ran to the end); critical sections: %zu", procs.n, ndone, secs.n);
    for (int l = 0; l < nlocks; l++) {
        long c = 0;
        for (size_t k = 0; k < secs.n; k++)
            c += secs.v[k].lock == l;
        printf("%s %s %ld", l ? "," : " (", lock_names[l], c);
    }
    printf("%s\n", nlocks ? ")" : "");
    printf("lock calls that failed: EBUSY %ld, ETIMEDOUT %ld, EAGAIN %ld, other %ld\n",
           n_fail_rc[0], n_fail_rc[1], n_fail_rc[2], n_fail_rc[3]);
    long ov_doc = n_overlap[C_STOP] + n_overlap[C_LOCAL] + n_overlap[C_WARN];
    printf("overlaps: %ld documented (stop %ld, local %ld, warn %ld), %ld defect\n", ov_doc,
           n_overlap[C_STOP], n_overlap[C_LOCAL], n_overlap[C_WARN], n_overlap[C_DEFECT]);
    long tk_doc = n_token[C_STOP] + n_token[C_LOCAL] + n_token[C_WARN];
    printf("tokens: %ld out of order documented, %ld defect; %ld sections without a token\n",
           tk_doc, n_token[C_DEFECT], n_tokenless);
    long nw = 0;
    for (size_t k = 0; k < writes.n; k++)
        nw += !writes.v[k].rej;
    printf("fence: %ld writes accepted, %ld rejected (%ld documented, %ld defect)\n", nw,
           n_rej_doc + n_rej_defect, n_rej_doc, n_rej_defect);
    printf("aborts: %ld expected (inside, after a fault that loses a lease), %ld unexpected "
           "(%ld outside the section, %ld inside with no such fault); killed by the nemesis %ld; "
           "crashes %ld; hung %ld\n", n_abort_exp, n_abort_outside + n_abort_inside,
           n_abort_outside, n_abort_inside, n_killed, n_crash, n_hang);
    printf("unlock errors: %ld after a fault that loses a lease, %ld otherwise\n", n_unlock_exp,
           n_unlock_err);
    printf("releases that found their hold expired after the unlock (warned, not aborted): %ld\n",
           n_expired_after);
    printf("longest wait: %.3f s", (double)longest_wait / 1e9);
    if (longest_sec)
        printf(" (pid %d on %s, +%.3fs)", longest_sec->pid, host_of(longest_sec->pid),
               rel(longest_sec->want));
    printf("; longest wait no fault explains: %.3f s (a defect from %ld ms%s): %ld\n",
           (double)longest_unexpl / 1e9, starve_ms, fair ? "" : ", not in this mode: not fair",
           n_starved);
    printf("verdict: %s (%ld defects)\n", defects ? "FAIL" : "PASS", defects);
    printf("summary mode=%s sections=%zu overlaps_documented=%ld overlaps_defect=%ld "
           "aborts_expected=%ld aborts_unexpected=%ld token_defects=%ld rejections=%ld "
           "expired_after_unlock=%ld longest_wait_ms=%lld starved=%ld defects=%ld\n",
           mode, secs.n, ov_doc, n_overlap[C_DEFECT], n_abort_exp, n_abort_outside + n_abort_inside,
           n_token[C_DEFECT], n_rej_doc + n_rej_defect, n_expired_after, longest_wait / MS,
           n_starved, defects);
    return defects ? 1 : 0;
}
