/* report: what libdmutex-trace.so prints for `dmutex trace`. Each mutex
 * the process locked is named the way a config entry would name it, the
 * most certain way first:
 *   symbol     a data symbol of its loaded object (.symtab, else .dynsym)
 *              covers it: the symbol, with offset (or index, in an array
 *              of pthread_mutex_t) inside it                      (sure)
 *   init_site  a heap mutex: the function whose pthread_mutex_init call
 *              initialised it (every mutex of that function, one row) (sure)
 *   address    no symbol: its address in the object, or the return
 *              address of its init call, with the object's build-id
 *                                         (weak: address of this build only)
 *   unknown    neither (a stack mutex, a heap one never initialised by a
 *              call)
 * Rows are sorted by contention, then locks. The text goes to stderr,
 * then a `mutexes = ( ... );` block of the picked rows (--top, --min-locks:
 * DMUTEX_TRACE_TOP, DMUTEX_TRACE_MIN_LOCKS); the same as JSON to
 * DMUTEX_TRACE_JSON (the traced program's own pid, DMUTEX_TRACE_ROOT,
 * writes that file; any other process, a fork child, FILE.<pid>.json).
 * Identification reads symbol tables through the shim's symbols module.
 * Condition variables and rwlocks the process used are named the same
 * way (pthread_cond_init / pthread_rwlock_init for init_site, an index
 * in an array of pthread_cond_t / pthread_rwlock_t) and reported after
 * the mutexes, each with its own table and `conds = ( ... );` /
 * `rwlocks = ( ... );` block (and "conds" / "rwlocks" in the JSON). */
/* Paths and symbol names are cut to the report's buffers on purpose. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "real.h"
#include "symbols.h"
#include "trace.h"

#define MUTEX_SIZE 40               /* sizeof(pthread_mutex_t) == sizeof(std::mutex), x86-64 */
#define TOP_DEFAULT 10
#define NAME_LEN 200

enum certainty { C_SYMBOL, C_INIT_SITE, C_ADDRESS, C_UNKNOWN };
static const char *const certainty_names[] = {
    [C_SYMBOL] = "symbol", [C_INIT_SITE] = "init_site",
    [C_ADDRESS] = "address", [C_UNKNOWN] = "unknown",
};
static const char *const certainty_notes[] = {
    [C_SYMBOL] = "sure", [C_INIT_SITE] = "sure",
    [C_ADDRESS] = "weak: address of this build only", [C_UNKNOWN] = "cannot be mapped",
};

struct row {
    enum certainty c;
    char key[1024];                 /* what is aggregated: one config entry */
    char what[700];                 /* identification, for people */
    char entry[1024];               /* the config entry, "" when none */
    char name[NAME_LEN + 1];
    char object[256];               /* "" for the executable */
    int is_heap;
    uint64_t mutexes, locks, contended, wait_ns, wait_max_ns, hold_max_ns, threads;
    uint64_t hist[DM_TRACE_HIST];
    uint64_t n[3];                  /* a cond's or rwlock's counts (trace.h) */
};

/* What a row names: a mutex, a condition variable or an rwlock. */
struct obj_kind {
    const char *list;               /* its config list */
    size_t size;                    /* of its pthread type: offset -> index */
    const char *init;               /* its init function */
    const char *types;              /* said of a symbol of exactly that size */
};

static const struct obj_kind kind_mutex = {
    "mutexes", MUTEX_SIZE, "pthread_mutex_init", " (std::mutex / pthread_mutex_t)",
};
static const struct obj_kind kind_cond = {
    "conds", sizeof(pthread_cond_t), "pthread_cond_init",
    " (std::condition_variable / pthread_cond_t)",
};
static const struct obj_kind kind_rwlock = {
    "rwlocks", sizeof(pthread_rwlock_t), "pthread_rwlock_init",
    " (std::shared_mutex / pthread_rwlock_t)",
};

static pthread_mutex_t report_mu = PTHREAD_MUTEX_INITIALIZER;

void dm_trace_report_prepare(void)
{
    dm_real.mutex_lock(&report_mu);
}

void dm_trace_report_release(void)
{
    dm_real.mutex_unlock(&report_mu);
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* A C++ name for people, through the program's own libstdc++ when it has
 * one (a C program has no C++ names to show). */
static void demangle(const char *sym, char *out, size_t len)
{
    snprintf(out, len, "%s", sym);
    if (strncmp(sym, "_Z", 2) != 0)
        return;
    char *(*cxa)(const char *, char *, size_t *, int *) =
        (char *(*)(const char *, char *, size_t *, int *))dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!cxa)
        return;
    int st = -1;
    char *d = cxa(sym, NULL, NULL, &st);
    if (d && st == 0)
        snprintf(out, len, "%s", d);
    free(d);
}

/* A valid lock name (the shim's rules) made from `from`: other bytes
 * become '_', cut to the limit. */
static void lock_name(const char *from, char *out)
{
    size_t n = 0;
    for (const char *p = from; *p && n < NAME_LEN; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
            || strchr("_.:/@-", c);
        out[n++] = ok ? c : '_';
    }
    out[n] = '\0';
    char why[128];
    if (!dm_config_name_ok(out, why, sizeof why))
        snprintf(out, NAME_LEN + 1, "mutex");
}

static void object_clause(const struct dm_symbols_where *w, char *out, size_t len)
{
    if (w->is_exe)
        out[0] = '\0';
    else
        snprintf(out, len, " object = \"%s\";", base_name(w->path));
}

/* Names the mutex (cond, rwlock: k) of slot s (address m) as a config
 * entry would. */
static void identify_as(const struct obj_kind *k, uintptr_t m, uintptr_t site, struct row *r)
{
    struct dm_symbols_where w;
    char obj[300], shown[600];
    if (dm_symbols_where(m, 0, &w) == 0) {
        object_clause(&w, obj, sizeof obj);
        snprintf(r->object, sizeof r->object, "%s", w.is_exe ? "" : base_name(w.path));
        if (w.symbol[0]) {
            uintptr_t off = w.vaddr - w.sym_value;
            char sym[800];
            snprintf(sym, sizeof sym, "%s%s%s", w.file, w.file[0] ? ":" : "", w.symbol);
            demangle(w.symbol, shown, sizeof shown);
            const char *kind = w.sym_size == k->size ? k->types : "";
            char where[64] = "", at[64] = "";
            if (w.sym_size > k->size && w.sym_size % k->size == 0 && off % k->size == 0) {
                snprintf(where, sizeof where, "[%" PRIuPTR "]", off / k->size);
                snprintf(at, sizeof at, " index = %" PRIuPTR ";", off / k->size);
            } else if (off) {
                snprintf(where, sizeof where, "+%" PRIuPTR, off);
                snprintf(at, sizeof at, " offset = %" PRIuPTR ";", off);
            }
            char base[NAME_LEN + 1], nm[NAME_LEN + 64];
            lock_name(shown, base);
            if (where[0] == '[')
                snprintf(nm, sizeof nm, "%s.%" PRIuPTR, base, off / k->size);
            else if (off)
                snprintf(nm, sizeof nm, "%s.at%" PRIuPTR, base, off);
            else
                snprintf(nm, sizeof nm, "%s", base);
            lock_name(nm, r->name);
            r->c = C_SYMBOL;
            snprintf(r->what, sizeof r->what, "%s%s in %s (%s)%s", shown, where,
                     base_name(w.path), w.section, kind);
            snprintf(r->entry, sizeof r->entry, "{ symbol = \"%s\";%s%s name = \"%s\"; }",
                     sym, obj, at, r->name);
            snprintf(r->key, sizeof r->key, "%s", r->entry);
            return;
        }
        /* In an object, no symbol: its address, this build's. */
        char nm[NAME_LEN + 1];
        snprintf(nm, sizeof nm, "%s_%" PRIxPTR, base_name(w.path), w.vaddr);
        lock_name(nm, r->name);
        r->c = C_ADDRESS;
        snprintf(r->what, sizeof r->what, "%s+%#" PRIxPTR " (no symbol covers it%s)",
                 base_name(w.path), w.vaddr,
                 w.section[0] ? "" : "; no symbol table");
        snprintf(r->entry, sizeof r->entry, "{ address = %#" PRIxPTR ";%s%s%s%s name = \"%s\"; }",
                 w.vaddr, obj, w.build_id[0] ? " build_id = \"" : "", w.build_id,
                 w.build_id[0] ? "\";" : "", r->name);
        snprintf(r->key, sizeof r->key, "%s", r->entry);
        return;
    }
    r->is_heap = 1;
    if (site && dm_symbols_where(site, 1, &w) == 0) {
        object_clause(&w, obj, sizeof obj);
        snprintf(r->object, sizeof r->object, "%s", w.is_exe ? "" : base_name(w.path));
        if (w.symbol[0] && !w.file[0] && strchr(w.symbol, '.') == NULL) {
            demangle(w.symbol, shown, sizeof shown);
            lock_name(shown, r->name);
            r->c = C_INIT_SITE;
            snprintf(r->what, sizeof r->what, "heap, %s in %s (%s+%#" PRIxPTR ")",
                     k->init, shown, base_name(w.path), w.vaddr);
            snprintf(r->entry, sizeof r->entry, "{ init_site = \"%s\";%s name = \"%s\"; }",
                     w.symbol, obj, r->name);
            snprintf(r->key, sizeof r->key, "%s", r->entry);
            return;
        }
        char nm[NAME_LEN + 1];
        snprintf(nm, sizeof nm, "%s_init_%" PRIxPTR, base_name(w.path), w.vaddr);
        lock_name(nm, r->name);
        r->c = C_ADDRESS;
        snprintf(r->what, sizeof r->what, "heap, %s called from %s+%#" PRIxPTR
                 " (%s)", k->init, base_name(w.path), w.vaddr,
                 w.symbol[0] ? "a file-static function: init_site names globals only"
                             : "no symbol covers the call");
        snprintf(r->entry, sizeof r->entry,
                 "{ init_site_address = %#" PRIxPTR ";%s%s%s%s name = \"%s\"; }",
                 w.vaddr, obj, w.build_id[0] ? " build_id = \"" : "", w.build_id,
                 w.build_id[0] ? "\";" : "", r->name);
        snprintf(r->key, sizeof r->key, "%s", r->entry);
        return;
    }
    r->c = C_UNKNOWN;
    snprintf(r->name, sizeof r->name, "-");
    char never[64];
    snprintf(never, sizeof never, "never initialised by %s", k->init);
    snprintf(r->what, sizeof r->what, "%#" PRIxPTR " (heap or stack, %s)", m,
             site ? "initialised from outside any loaded object" : never);
    snprintf(r->key, sizeof r->key, "unknown %#" PRIxPTR, m);
}

static void identify(uintptr_t m, uintptr_t site, struct row *r)
{
    identify_as(&kind_mutex, m, site, r);
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct row *)a)->key, ((const struct row *)b)->key);
}

static int by_contention(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    if (x->contended != y->contended)
        return x->contended < y->contended ? 1 : -1;
    if (x->wait_ns != y->wait_ns)
        return x->wait_ns < y->wait_ns ? 1 : -1;
    if (x->locks != y->locks)
        return x->locks < y->locks ? 1 : -1;
    return strcmp(x->key, y->key);
}

/* The upper bound of the bucket holding the 99th percentile hold. */
static uint64_t p99_ns(const struct row *r)
{
    uint64_t total = 0;
    for (int b = 0; b < DM_TRACE_HIST; b++)
        total += r->hist[b];
    if (!total)
        return 0;
    uint64_t above = 0, allowed = total / 100;
    for (int b = DM_TRACE_HIST - 1; b >= 0; b--) {
        above += r->hist[b];
        if (above > allowed) {
            uint64_t hi = b >= 63 ? UINT64_MAX : (2ull << b);
            return hi < r->hold_max_ns ? hi : r->hold_max_ns;
        }
    }
    return 0;
}

static void human(uint64_t ns, char *out, size_t len)
{
    if (ns < 1000)
        snprintf(out, len, "%" PRIu64 "ns", ns);
    else if (ns < 1000000)
        snprintf(out, len, "%.1fus", ns / 1e3);
    else if (ns < 1000000000)
        snprintf(out, len, "%.1fms", ns / 1e6);
    else
        snprintf(out, len, "%.2fs", ns / 1e9);
}

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    long n = strtol(v, &end, 10);
    return *end || n < 0 ? dflt : n;
}

/* The rows worth a config entry: sure or weak identifications with
 * enough locks, the first `top` of them. */
static int picked(const struct row *r, size_t rank, long top, long min_locks)
{
    return r->c != C_UNKNOWN && (long)rank < top && r->locks >= (uint64_t)min_locks;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void program_name(char *out, size_t len)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    snprintf(out, len, "%s", n > 0 ? base_name(exe) : "?");
}

static void write_text(FILE *f, const char *why, const char *prog, struct row *rows, size_t n,
                       size_t nmutex, uint64_t untracked, long top, long min_locks)
{
    fprintf(f, "\ndmutex trace: pid %d (%s), %s report: %zu mutexes locked, %zu rows",
            (int)getpid(), prog, why, nmutex, n);
    if (untracked)
        fprintf(f, "; %" PRIu64 " acquisitions not tracked (the table of %u mutexes is full)",
                untracked, DM_TRACE_SLOTS);
    fprintf(f, "\n%3s  %-9s %10s %10s %10s %10s %10s %10s %7s  %s\n", "#", "certainty",
            "locks", "contended", "wait", "wait max", "hold max", "hold p99", "threads",
            "identification");
    for (size_t i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        char w[16], wm[16], hm[16], hp[16];
        human(r->wait_ns, w, sizeof w);
        human(r->wait_max_ns, wm, sizeof wm);
        human(r->hold_max_ns, hm, sizeof hm);
        human(p99_ns(r), hp, sizeof hp);
        fprintf(f, "%3zu  %-9s %10" PRIu64 " %10" PRIu64 " %10s %10s %10s %10s %7" PRIu64 "  %s",
                i + 1, certainty_names[r->c], r->locks, r->contended, w, wm, hm, hp,
                r->threads, r->what);
        if (r->mutexes > 1)
            fprintf(f, " [%" PRIu64 " mutexes]", r->mutexes);
        fputc('\n', f);
    }
    fprintf(f, "# config entries for pid %d (%s): the first %ld rows with >= %ld locks\n",
            (int)getpid(), prog, top, min_locks);
    fprintf(f, "mutexes = (\n");
    size_t k = 0, last = 0;
    for (size_t i = 0; i < n; i++)
        if (picked(&rows[i], i, top, min_locks))
            last = i;
    for (size_t i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        if (!picked(r, i, top, min_locks))
            continue;
        fprintf(f, "  %s%s  # %s (%s): %" PRIu64 " locks, %" PRIu64 " contended, %" PRIu64
                " threads\n", r->entry, i == last ? "" : ",", certainty_names[r->c],
                certainty_notes[r->c], r->locks, r->contended, r->threads);
        k++;
    }
    fprintf(f, ");\n");
    if (!k)
        fprintf(f, "# (no mutex passed --top %ld / --min-locks %ld)\n", top, min_locks);
}

/* ---- condition variables and rwlocks ---------------------------------- */

/* The rows of one of record.c's object tables, for its section of the
 * report. n[0 .. nuses-1] are uses (what --min-locks counts). */
struct objs {
    const struct obj_kind *k;
    const char *what;               /* "condition variables used", "rwlocks locked" */
    const char *cols[3];            /* the headers of n[0..2] */
    int nuses;
    struct row *rows;
    size_t n, nobj;
    uint64_t untracked;
};

static void collect_objs(struct objs *o, struct dm_trace_obj *table, uint64_t untracked)
{
    size_t cap = 0;
    o->untracked = untracked;
    for (unsigned i = 0; i < DM_TRACE_OBJ_SLOTS; i++) {
        struct dm_trace_obj *s = &table[i];
        uintptr_t key = atomic_load(&s->key);
        uint64_t n[3], uses = 0;
        for (int k = 0; k < 3; k++)
            n[k] = atomic_load(&s->n[k]);
        for (int k = 0; k < o->nuses; k++)
            uses += n[k];
        if (!key || !uses)
            continue;
        if (o->n == cap) {
            size_t c2 = cap ? cap * 2 : 64;
            struct row *more = realloc(o->rows, c2 * sizeof *o->rows);
            if (!more)
                break;          /* out of memory: report what fits */
            o->rows = more;
            cap = c2;
        }
        o->nobj++;
        struct row *t = &o->rows[o->n++];
        memset(t, 0, sizeof *t);
        identify_as(o->k, key, atomic_load(&s->init_site), t);
        t->mutexes = 1;
        t->locks = uses;
        memcpy(t->n, n, sizeof n);
        t->wait_ns = atomic_load(&s->wait_ns);
        t->wait_max_ns = atomic_load(&s->wait_max_ns);
        t->threads = atomic_load(&s->threads);     /* a bitmap until counted below */
        if (o->k == &kind_rwlock)
            t->contended = n[DM_TRACE_RW_CONTENDED];
    }
    if (o->n)
        qsort(o->rows, o->n, sizeof *o->rows, by_key);
    size_t kept = 0;
    for (size_t i = 0; i < o->n; i++) {
        struct row *t = kept ? &o->rows[kept - 1] : NULL, *r = &o->rows[i];
        if (!t || strcmp(t->key, r->key) != 0) {
            if (kept != i)
                o->rows[kept] = *r;
            kept++;
            continue;
        }
        t->mutexes += r->mutexes;
        t->locks += r->locks;
        t->contended += r->contended;
        for (int k = 0; k < 3; k++)
            t->n[k] += r->n[k];
        t->wait_ns += r->wait_ns;
        if (r->wait_max_ns > t->wait_max_ns)
            t->wait_max_ns = r->wait_max_ns;
        t->threads |= r->threads;
    }
    o->n = kept;
    for (size_t i = 0; i < o->n; i++)
        o->rows[i].threads = (uint64_t)__builtin_popcountll(o->rows[i].threads);
    if (o->n)
        qsort(o->rows, o->n, sizeof *o->rows, by_contention);
}

/* The `conds = ( ... );` (`rwlocks`) block of the picked rows, each entry
 * commented with its certainty (and its counts, for the text). */
static void write_obj_block(FILE *f, const struct objs *o, long top, long min_locks, int counts)
{
    fprintf(f, "%s = (\n", o->k->list);
    size_t last = 0;
    for (size_t i = 0; i < o->n; i++)
        if (picked(&o->rows[i], i, top, min_locks))
            last = i;
    for (size_t i = 0; i < o->n; i++) {
        const struct row *r = &o->rows[i];
        if (!picked(r, i, top, min_locks))
            continue;
        fprintf(f, "  %s%s  # %s (%s)", r->entry, i == last ? "" : ",",
                certainty_names[r->c], certainty_notes[r->c]);
        if (counts)
            fprintf(f, ": %" PRIu64 " %s, %" PRIu64 " %s, %" PRIu64 " %s, %" PRIu64 " threads",
                    r->n[0], o->cols[0], r->n[1], o->cols[1], r->n[2], o->cols[2], r->threads);
        fputc('\n', f);
    }
    fprintf(f, ");\n");
}

/* The section of one kind in the text report: nothing when the process
 * used none. */
static void write_objs_text(FILE *f, const struct objs *o, const char *prog, long top,
                            long min_locks)
{
    if (!o->n && !o->untracked)
        return;
    fprintf(f, "dmutex trace: pid %d (%s): %zu %s, %zu rows", (int)getpid(), prog, o->nobj,
            o->what, o->n);
    if (o->untracked)
        fprintf(f, "; %" PRIu64 " calls not tracked (the table of %u is full)", o->untracked,
                DM_TRACE_OBJ_SLOTS);
    fprintf(f, "\n%3s  %-9s %10s %10s %10s %10s %10s %7s  %s\n", "#", "certainty", o->cols[0],
            o->cols[1], o->cols[2], "wait", "wait max", "threads", "identification");
    size_t k = 0;
    for (size_t i = 0; i < o->n; i++) {
        const struct row *r = &o->rows[i];
        char w[16], wm[16];
        human(r->wait_ns, w, sizeof w);
        human(r->wait_max_ns, wm, sizeof wm);
        fprintf(f, "%3zu  %-9s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10s %10s %7" PRIu64
                "  %s", i + 1, certainty_names[r->c], r->n[0], r->n[1], r->n[2], w, wm,
                r->threads, r->what);
        if (r->mutexes > 1)
            fprintf(f, " [%" PRIu64 " %s]", r->mutexes, o->k->list);
        fputc('\n', f);
        k += picked(r, i, top, min_locks);
    }
    fprintf(f, "# %s entries for pid %d (%s): the first %ld rows with >= %ld uses\n",
            o->k->list, (int)getpid(), prog, top, min_locks);
    write_obj_block(f, o, top, min_locks, 1);
    if (!k)
        fprintf(f, "# (no %s passed --top %ld / --min-locks %ld)\n", o->k->list, top,
                min_locks);
}

/* ,"conds": { ... } (or "rwlocks") in the JSON report. */
static void write_objs_json(FILE *f, const struct objs *o, long top, long min_locks)
{
    fprintf(f, ",\n  \"%s\": {\"used\": %zu, \"untracked_calls\": %" PRIu64 ", \"rows\": [",
            o->k->list, o->nobj, o->untracked);
    for (size_t i = 0; i < o->n; i++) {
        const struct row *r = &o->rows[i];
        fprintf(f, "%s\n    {\"rank\": %zu, \"certainty\": \"%s\", \"note\": \"%s\", "
                "\"identification\": ", i ? "," : "", i + 1, certainty_names[r->c],
                certainty_notes[r->c]);
        json_str(f, r->what);
        fprintf(f, ", \"object\": ");
        json_str(f, r->object);
        fprintf(f, ", \"heap\": %s, \"objects\": %" PRIu64, r->is_heap ? "true" : "false",
                r->mutexes);
        for (int k = 0; k < 3; k++)
            fprintf(f, ", \"%s\": %" PRIu64, o->cols[k], r->n[k]);
        fprintf(f, ", \"wait_total_ns\": %" PRIu64 ", \"wait_max_ns\": %" PRIu64
                ", \"threads\": %" PRIu64 ", \"name\": ", r->wait_ns, r->wait_max_ns,
                r->threads);
        json_str(f, r->c == C_UNKNOWN ? "" : r->name);
        fprintf(f, ", \"entry\": ");
        json_str(f, r->entry);
        fprintf(f, ", \"picked\": %s}", picked(r, i, top, min_locks) ? "true" : "false");
    }
    fprintf(f, "\n  ], \"config\": ");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (m) {
        write_obj_block(m, o, top, min_locks, 0);
        fclose(m);
    }
    json_str(f, buf ? buf : "");
    free(buf);
    fprintf(f, "}");
}

static void write_json(FILE *f, const char *why, const char *prog, struct row *rows, size_t n,
                       size_t nmutex, uint64_t untracked, long top, long min_locks,
                       const struct objs *objs, size_t nobjs)
{
    fprintf(f, "{\n  \"pid\": %d,\n  \"program\": ", (int)getpid());
    json_str(f, prog);
    fprintf(f, ",\n  \"reason\": ");
    json_str(f, why);
    fprintf(f, ",\n  \"mutexes_locked\": %zu,\n  \"untracked_acquisitions\": %" PRIu64
            ",\n  \"rows\": [", nmutex, untracked);
    for (size_t i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        fprintf(f, "%s\n    {\"rank\": %zu, \"certainty\": \"%s\", \"note\": \"%s\", "
                "\"identification\": ", i ? "," : "", i + 1, certainty_names[r->c],
                certainty_notes[r->c]);
        json_str(f, r->what);
        fprintf(f, ", \"object\": ");
        json_str(f, r->object);
        fprintf(f, ", \"heap\": %s, \"mutexes\": %" PRIu64 ", \"locks\": %" PRIu64
                ", \"contended\": %" PRIu64 ", \"wait_total_ns\": %" PRIu64
                ", \"wait_max_ns\": %" PRIu64 ", \"hold_max_ns\": %" PRIu64
                ", \"hold_p99_ns\": %" PRIu64 ", \"threads\": %" PRIu64 ", \"name\": ",
                r->is_heap ? "true" : "false", r->mutexes, r->locks, r->contended, r->wait_ns,
                r->wait_max_ns, r->hold_max_ns, p99_ns(r), r->threads);
        json_str(f, r->c == C_UNKNOWN ? "" : r->name);
        fprintf(f, ", \"entry\": ");
        json_str(f, r->entry);
        fprintf(f, ", \"picked\": %s}", picked(r, i, top, min_locks) ? "true" : "false");
    }
    fprintf(f, "\n  ],\n  \"config\": ");
    /* The block of the text report, as one string. */
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (m) {
        fprintf(m, "mutexes = (\n");
        size_t last = 0;
        for (size_t i = 0; i < n; i++)
            if (picked(&rows[i], i, top, min_locks))
                last = i;
        for (size_t i = 0; i < n; i++)
            if (picked(&rows[i], i, top, min_locks))
                fprintf(m, "  %s%s  # %s (%s)\n", rows[i].entry, i == last ? "" : ",",
                        certainty_names[rows[i].c], certainty_notes[rows[i].c]);
        fprintf(m, ");\n");
        fclose(m);
    }
    json_str(f, buf ? buf : "");
    free(buf);
    for (size_t i = 0; i < nobjs; i++)
        write_objs_json(f, &objs[i], top, min_locks);
    fprintf(f, "\n}\n");
}

/* FILE for the traced program itself, FILE.<pid>.json (FILE's ".json"
 * replaced) for every other process: fork children, programs it runs. */
static void json_path(const char *file, char *out, size_t len)
{
    const char *root = getenv("DMUTEX_TRACE_ROOT");
    if (root && atol(root) == (long)getpid()) {
        snprintf(out, len, "%s", file);
        return;
    }
    size_t n = strlen(file);
    if (n > 5 && strcmp(file + n - 5, ".json") == 0)
        n -= 5;
    snprintf(out, len, "%.*s.%d.json", (int)n, file, (int)getpid());
}

static void write_json_file(const char *why, const char *prog, struct row *rows, size_t n,
                            size_t nmutex, uint64_t untracked, long top, long min_locks,
                            const struct objs *objs, size_t nobjs)
{
    const char *file = getenv("DMUTEX_TRACE_JSON");
    if (!file || !*file)
        return;
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    json_path(file, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f) {
        fprintf(stderr, "dmutex trace: %s: %s\n", tmp, strerror(errno));
        return;
    }
    write_json(f, why, prog, rows, n, nmutex, untracked, top, min_locks, objs, nobjs);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "dmutex trace: %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
}

void dm_trace_report(const char *why)
{
    int was_quiet = dm_trace_self_quiet(1);
    dm_real.mutex_lock(&report_mu);
    /* One row per mutex, then rows of one config entry merged: sorted by
     * key, so a report of many mutexes stays n log n. */
    struct row *rows = NULL;
    size_t n = 0, cap = 0, nmutex = 0;
    for (unsigned i = 0; i < DM_TRACE_SLOTS; i++) {
        struct dm_trace_slot *s = &dm_trace_table[i];
        uintptr_t key = atomic_load(&s->key);
        uint64_t locks = atomic_load(&s->locks);
        if (!key || !locks)
            continue;
        if (n == cap) {
            size_t c2 = cap ? cap * 2 : 64;
            struct row *more = realloc(rows, c2 * sizeof *rows);
            if (!more)
                break;          /* out of memory: report what fits */
            rows = more;
            cap = c2;
        }
        nmutex++;
        struct row *t = &rows[n++];
        memset(t, 0, sizeof *t);
        identify(key, atomic_load(&s->init_site), t);
        t->mutexes = 1;
        t->locks = locks;
        t->contended = atomic_load(&s->contended);
        t->wait_ns = atomic_load(&s->wait_ns);
        t->wait_max_ns = atomic_load(&s->wait_max_ns);
        t->hold_max_ns = atomic_load(&s->hold_max_ns);
        t->threads = atomic_load(&s->threads);     /* a bitmap until counted below */
        for (int b = 0; b < DM_TRACE_HIST; b++)
            t->hist[b] = atomic_load(&s->hist[b]);
    }
    if (n)
        qsort(rows, n, sizeof *rows, by_key);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        struct row *t = kept ? &rows[kept - 1] : NULL, *r = &rows[i];
        if (!t || strcmp(t->key, r->key) != 0) {
            if (kept != i)
                rows[kept] = *r;
            kept++;
            continue;
        }
        t->mutexes += r->mutexes;
        t->locks += r->locks;
        t->contended += r->contended;
        t->wait_ns += r->wait_ns;
        if (r->wait_max_ns > t->wait_max_ns)
            t->wait_max_ns = r->wait_max_ns;
        if (r->hold_max_ns > t->hold_max_ns)
            t->hold_max_ns = r->hold_max_ns;
        t->threads |= r->threads;
        for (int b = 0; b < DM_TRACE_HIST; b++)
            t->hist[b] += r->hist[b];
    }
    n = kept;
    for (size_t i = 0; i < n; i++)
        rows[i].threads = (uint64_t)__builtin_popcountll(rows[i].threads);
    if (n)
        qsort(rows, n, sizeof *rows, by_contention);

    char prog[256];
    program_name(prog, sizeof prog);
    long top = env_long("DMUTEX_TRACE_TOP", TOP_DEFAULT);
    long min_locks = env_long("DMUTEX_TRACE_MIN_LOCKS", 1);
    uint64_t untracked = atomic_load(&dm_trace_untracked);
    struct objs objs[] = {
        { .k = &kind_cond, .what = "condition variables used", .nuses = 3,
          .cols = { "waits", "signals", "broadcasts" } },
        { .k = &kind_rwlock, .what = "rwlocks locked", .nuses = 2,
          .cols = { "reads", "writes", "contended" } },
    };
    collect_objs(&objs[0], dm_trace_conds, atomic_load(&dm_trace_untracked_conds));
    collect_objs(&objs[1], dm_trace_rwlocks, atomic_load(&dm_trace_untracked_rwlocks));
    /* One write of the whole text, so that reports of several processes
     * sharing stderr do not interleave line by line. */
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (m) {
        write_text(m, why, prog, rows, n, nmutex, untracked, top, min_locks);
        for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
            write_objs_text(m, &objs[i], prog, top, min_locks);
        if (fclose(m) == 0) {
            for (size_t off = 0; off < len;) {
                ssize_t w = write(STDERR_FILENO, text + off, len - off);
                if (w <= 0 && errno != EINTR)
                    break;
                if (w > 0)
                    off += (size_t)w;
            }
        }
        free(text);
    }
    write_json_file(why, prog, rows, n, nmutex, untracked, top, min_locks, objs,
                    sizeof objs / sizeof objs[0]);
    free(rows);
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        free(objs[i].rows);
    dm_real.mutex_unlock(&report_mu);
    dm_trace_self_quiet(was_quiet);
}
