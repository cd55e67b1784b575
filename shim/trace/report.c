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
 *              call: a C++ std::mutex): one row for all of them
 * A file-static's name starts with its file ("a.c:lock"); rows that would
 * still share a name get "@object", then ".N": two mutexes never get one
 * name. The mutexes of an object being dlclosed are identified before it
 * goes (dm_trace_report_unloading) and their rows kept.
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
#include <link.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
    char key[1024];                 /* what is aggregated: one config entry but its name */
    char what[700];                 /* identification, for people */
    char entry[1400];               /* the config entry, "" when none (made once names are unique) */
    char name[NAME_LEN + 1];
    char object[256];               /* "" for the executable */
    int is_heap;
    int late;                       /* its init site is in an object dlopen brought: the shim
                                     * maps init_site entries only in objects loaded at start */
    uint64_t mutexes, locks, contended, wait_ns, wait_max_ns, hold_max_ns, threads;
    uint64_t hist[DM_TRACE_HIST];   /* in ticks, as the slot's */
    uint64_t n[3];                  /* a cond's or rwlock's counts (trace.h) */
};

/* What a row names: a mutex, a condition variable or an rwlock. */
struct obj_kind {
    const char *list;               /* its config list */
    size_t size;                    /* of its pthread type: offset -> index */
    const char *init;               /* its init function */
    const char *c11_init;           /* C11's (<threads.h>), the same to the shim; NULL: none */
    const char *inits;              /* all of them, for those never given to one */
    const char *types;              /* said of a symbol of exactly that size */
    const char *never;              /* said of the unknown row of those never given to init */
    int nuses;                      /* n[0 .. nuses-1] are uses (what --min-locks counts) */
};

static const struct obj_kind kind_mutex = {
    "mutexes", MUTEX_SIZE, "pthread_mutex_init", "mtx_init", "pthread_mutex_init or mtx_init",
    " (std::mutex / pthread_mutex_t / mtx_t)",
    "a std::mutex, or PTHREAD_MUTEX_INITIALIZER outside a variable", 0,
};
static const struct obj_kind kind_cond = {
    "conds", sizeof(pthread_cond_t), "pthread_cond_init", "cnd_init",
    "pthread_cond_init or cnd_init", " (std::condition_variable / pthread_cond_t / cnd_t)",
    "a std::condition_variable, or PTHREAD_COND_INITIALIZER outside a variable", 3,
};
static const struct obj_kind kind_rwlock = {
    "rwlocks", sizeof(pthread_rwlock_t), "pthread_rwlock_init", NULL, "pthread_rwlock_init",
    " (std::shared_mutex / pthread_rwlock_t)",
    "a std::shared_mutex, or PTHREAD_RWLOCK_INITIALIZER outside a variable", 2,
};

/* ns per tick for this report (dm_trace_ns_per_tick, under report_mu). */
static double tick_ns = 1.0;

static uint64_t ticks_to_ns(uint64_t t)
{
    double ns = (double)t * tick_ns;
    return ns >= 1.8e19 ? UINT64_MAX : (uint64_t)ns;
}

static pthread_mutex_t report_mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t forking_pid;               /* who forked last (fork's prepare, under report_mu) */
static pid_t child_of;                  /* a fork child: its parent's pid; 0: not one */
static int program_image;               /* this image is the traced program's (DMUTEX_TRACE_ROOT
                                           at start): its fork children too, not a helper's */

/* Rows of mutexes whose object was dlclosed, identified before it went
 * (under report_mu); the same for conds and rwlocks. */
static struct row *gone;
static size_t ngone, gone_cap;
enum { GONE_CONDS, GONE_RWLOCKS };
static struct gone_objs {
    struct row *rows;
    size_t n, cap;
} gone_objs[2];

/* The code segments of the objects loaded at start (the constructor's view):
 * an init site outside them is in a library dlopen brought, which
 * init_site entries cannot name (the shim resolves them at start only). */
#define START_SEGS 1024
static struct { uintptr_t lo, hi; } start_segs[START_SEGS];
static int nstart_segs;

static int note_start_segs(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    for (int i = 0; i < info->dlpi_phnum && nstart_segs < START_SEGS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;               /* init sites are code: one segment an object, mostly */
        start_segs[nstart_segs].lo = info->dlpi_addr + ph->p_vaddr;
        start_segs[nstart_segs].hi = start_segs[nstart_segs].lo + ph->p_memsz;
        nstart_segs++;
    }
    return 0;
}

static int loaded_at_start(uintptr_t a)
{
    for (int i = 0; i < nstart_segs; i++)
        if (a >= start_segs[i].lo && a < start_segs[i].hi)
            return 1;
    return 0;
}

/* stderr as the program started with it: st_dev/st_ino, 0: none. */
static int err_known;
static dev_t err_dev;
static ino_t err_ino;

/* Is this process the one `dmutex trace` ran (DMUTEX_TRACE_ROOT)? */
static int is_root(void)
{
    const char *root = secure_getenv("DMUTEX_TRACE_ROOT");
    return root && atol(root) == (long)getpid();
}

void dm_trace_report_start(void)
{
    struct stat st;
    if (fstat(STDERR_FILENO, &st) == 0) {
        err_known = 1;
        err_dev = st.st_dev;
        err_ino = st.st_ino;
    }
    dl_iterate_phdr(note_start_segs, NULL);
    program_image = is_root();
}

/* Is fd 2 still the file the program started with? A program that
 * closed it may have opened a file of its own there (a data file, a
 * socket): the text report must not land in it. */
static int stderr_is_ours(void)
{
    struct stat st;
    return err_known && fstat(STDERR_FILENO, &st) == 0 && st.st_dev == err_dev
        && st.st_ino == err_ino;
}

void dm_trace_report_prepare(void)
{
    dm_real.mutex_lock(&report_mu);
    forking_pid = getpid();
}

void dm_trace_report_release(void)
{
    dm_real.mutex_unlock(&report_mu);
}

void dm_trace_report_child(void)
{
    child_of = forking_pid;
    free(gone);
    gone = NULL;
    ngone = gone_cap = 0;
    for (int i = 0; i < 2; i++) {
        free(gone_objs[i].rows);
        gone_objs[i] = (struct gone_objs){ 0 };
    }
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
static void identify_as(const struct obj_kind *k, uintptr_t m, uintptr_t site, int c11,
                        struct row *r)
{
    const char *init = c11 && k->c11_init ? k->c11_init : k->init;
    struct dm_symbols_where w;
    char obj[300], shown[600];
    if (dm_symbols_where(m, 0, &w) == 0) {
        object_clause(&w, obj, sizeof obj);
        snprintf(r->object, sizeof r->object, "%s", w.is_exe ? "" : base_name(w.path));
        if (w.symbol[0]) {
            uintptr_t off = w.vaddr - w.sym_value;
            char sym[800], dem[600];
            snprintf(sym, sizeof sym, "%s%s%s", w.file, w.file[0] ? ":" : "", w.symbol);
            /* A file-static is named with its file: two files' `lock`
             * are two mutexes (conds, rwlocks), so two names. */
            demangle(w.symbol, dem, sizeof dem);
            snprintf(shown, sizeof shown, "%s%s%s", w.file, w.file[0] ? ":" : "", dem);
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
            snprintf(r->key, sizeof r->key, "{ symbol = \"%s\";%s%s", sym, obj, at);
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
        snprintf(r->key, sizeof r->key, "{ address = %#" PRIxPTR ";%s%s%s%s",
                 w.vaddr, obj, w.build_id[0] ? " build_id = \"" : "", w.build_id,
                 w.build_id[0] ? "\";" : "");
        return;
    }
    r->is_heap = 1;
    if (site && dm_symbols_where(site, 1, &w) == 0) {
        r->late = !loaded_at_start(site);
        object_clause(&w, obj, sizeof obj);
        snprintf(r->object, sizeof r->object, "%s", w.is_exe ? "" : base_name(w.path));
        if (w.symbol[0] && !w.file[0] && strchr(w.symbol, '.') == NULL) {
            demangle(w.symbol, shown, sizeof shown);
            lock_name(shown, r->name);
            r->c = C_INIT_SITE;
            snprintf(r->what, sizeof r->what, "heap, %s in %s (%s+%#" PRIxPTR ")",
                     init, shown, base_name(w.path), w.vaddr);
            snprintf(r->key, sizeof r->key, "{ init_site = \"%s\";%s", w.symbol, obj);
            return;
        }
        char nm[NAME_LEN + 1];
        snprintf(nm, sizeof nm, "%s_init_%" PRIxPTR, base_name(w.path), w.vaddr);
        lock_name(nm, r->name);
        r->c = C_ADDRESS;
        snprintf(r->what, sizeof r->what, "heap, %s called from %s+%#" PRIxPTR
                 " (%s)", init, base_name(w.path), w.vaddr,
                 w.symbol[0] ? "a file-static function: init_site names globals only"
                             : "no symbol covers the call");
        snprintf(r->key, sizeof r->key, "{ init_site_address = %#" PRIxPTR ";%s%s%s%s",
                 w.vaddr, obj, w.build_id[0] ? " build_id = \"" : "", w.build_id,
                 w.build_id[0] ? "\";" : "");
        return;
    }
    /* One row for all of a kind: their addresses name nothing a config
     * could use, and a C++ program's heap std::mutexes (never given to
     * pthread_mutex_init) are thousands. */
    r->c = C_UNKNOWN;
    snprintf(r->name, sizeof r->name, "-");
    if (site)
        snprintf(r->what, sizeof r->what,
                 "heap or stack, initialised from outside any loaded object");
    else
        snprintf(r->what, sizeof r->what,
                 "heap or stack, never initialised by %s (%s): no entry names it", k->inits,
                 k->never);
    snprintf(r->key, sizeof r->key, "unknown %d", site != 0);
}

static void identify(uintptr_t m, uintptr_t site, int c11, struct row *r)
{
    identify_as(&kind_mutex, m, site, c11, r);
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

/* The upper bound of the bucket holding the 99th percentile hold, in ns. */
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
            uint64_t hi = b >= 63 ? UINT64_MAX : ticks_to_ns(2ull << b);
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
    const char *v = secure_getenv(name);
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
    return r->c != C_UNKNOWN && !r->late && (long)rank < top && r->locks >= (uint64_t)min_locks;
}

#define LATE_NOTE "not mappable: an init site in a library loaded by dlopen (init_site " \
                  "entries are resolved at start)"

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
    if (child_of)
        fprintf(f, "; a fork child of %d: its counts start at the fork", (int)child_of);
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
        if (r->late)
            fprintf(f, " (%s)", LATE_NOTE);
        fputc('\n', f);
    }
    fprintf(f, "# config entries for pid %d (%s): the first %ld rows with >= %ld locks\n"
            "# (protocol dmutex, each: add protocol = \"setnx\" to an entry whose lock other\n"
            "# clients take as a SET NX lock under its name: docs/interop.md)\n",
            (int)getpid(), prog, top, min_locks);
    fprintf(f, "mutexes = (\n");
    size_t k = 0, last = 0;
    for (size_t i = 0; i < n; i++)
        if (picked(&rows[i], i, top, min_locks))
            last = i;
    for (size_t i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        if (r->late && r->c != C_UNKNOWN && (long)i < top && r->locks >= (uint64_t)min_locks) {
            /* shown, commented out: pasted, it would stop the program */
            fprintf(f, "  # %s  # %s: %" PRIu64 " locks, %" PRIu64 " contended\n", r->entry,
                    LATE_NOTE, r->locks, r->contended);
            continue;
        }
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
 * report. */
struct objs {
    const struct obj_kind *k;
    const char *what;               /* "condition variables used", "rwlocks locked" */
    const char *cols[3];            /* the headers of n[0..2] */
    struct row *rows;
    size_t n, nobj;
    uint64_t untracked;
};

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
        int late = r->late && r->c != C_UNKNOWN && (long)i < top
            && r->locks >= (uint64_t)min_locks;
        if (late)       /* shown, commented out: pasted, it would stop the program */
            fprintf(f, "  # %s  # %s", r->entry, LATE_NOTE);
        else if (picked(r, i, top, min_locks))
            fprintf(f, "  %s%s  # %s (%s)", r->entry, i == last ? "" : ",",
                    certainty_names[r->c], certainty_notes[r->c]);
        else
            continue;
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
        if (r->late)
            fprintf(f, " (%s)", LATE_NOTE);
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
                r->late ? LATE_NOTE : certainty_notes[r->c]);
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
    fprintf(f, "{\n  \"pid\": %d,\n", (int)getpid());
    if (child_of)
        fprintf(f, "  \"fork_child_of\": %d,\n", (int)child_of);
    fprintf(f, "  \"program\": ");
    json_str(f, prog);
    fprintf(f, ",\n  \"reason\": ");
    json_str(f, why);
    fprintf(f, ",\n  \"mutexes_locked\": %zu,\n  \"untracked_acquisitions\": %" PRIu64
            ",\n  \"rows\": [", nmutex, untracked);
    for (size_t i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        fprintf(f, "%s\n    {\"rank\": %zu, \"certainty\": \"%s\", \"note\": \"%s\", "
                "\"identification\": ", i ? "," : "", i + 1, certainty_names[r->c],
                r->late ? LATE_NOTE : certainty_notes[r->c]);
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
    if (is_root()) {
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
    const char *file = secure_getenv("DMUTEX_TRACE_JSON");
    if (!file || !*file)
        return;
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    json_path(file, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "we");
    if (!f) {
        dprintf(STDERR_FILENO, "dmutex trace: %s: %s\n", path, strerror(errno));
        return;
    }
    write_json(f, why, prog, rows, n, nmutex, untracked, top, min_locks, objs, nobjs);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        dprintf(STDERR_FILENO, "dmutex trace: %s: %s\n", path, strerror(errno));
        unlink(tmp);
    }
}

/* A row for slot s (its counts, identified), or -1 when it has none. */
static int row_of_slot(struct dm_trace_slot *s, struct row *t)
{
    uintptr_t key = atomic_load(&s->key);
    uint64_t locks = atomic_load(&s->locks);
    if (!key || !locks)
        return -1;
    memset(t, 0, sizeof *t);
    int retired = DM_TRACE_IS_RETIRED(key);
    identify(retired ? atomic_load(&s->first) : key, atomic_load(&s->init_site),
             (int)atomic_load(&s->c11), t);
    t->mutexes = retired ? atomic_load(&s->folded) : 1;
    t->locks = locks;
    t->contended = atomic_load(&s->contended);
    t->wait_ns = ticks_to_ns(atomic_load(&s->wait_ticks));
    t->wait_max_ns = ticks_to_ns(atomic_load(&s->wait_max_ticks));
    t->hold_max_ns = ticks_to_ns(atomic_load(&s->hold_max_ticks));
    t->threads = atomic_load(&s->threads);     /* a bitmap until counted */
    for (int b = 0; b < DM_TRACE_HIST; b++)
        t->hist[b] = atomic_load(&s->hist[b]);
    return 0;
}

/* A row for slot s of an object table of kind k, or -1 when it has no
 * uses. */
static int row_of_obj(const struct obj_kind *k, struct dm_trace_obj *s, struct row *t)
{
    uintptr_t key = atomic_load(&s->key);
    uint64_t n[3], uses = 0;
    for (int i = 0; i < 3; i++)
        n[i] = atomic_load(&s->n[i]);
    for (int i = 0; i < k->nuses; i++)
        uses += n[i];
    if (!key || !uses)
        return -1;
    memset(t, 0, sizeof *t);
    int retired = DM_TRACE_IS_RETIRED(key);
    identify_as(k, retired ? atomic_load(&s->first) : key, atomic_load(&s->init_site),
                (int)atomic_load(&s->c11), t);
    t->mutexes = retired ? atomic_load(&s->folded) : 1;
    t->locks = uses;
    memcpy(t->n, n, sizeof n);
    t->wait_ns = ticks_to_ns(atomic_load(&s->wait_ticks));
    t->wait_max_ns = ticks_to_ns(atomic_load(&s->wait_max_ticks));
    t->threads = atomic_load(&s->threads);     /* a bitmap until counted */
    if (k == &kind_rwlock)
        t->contended = n[DM_TRACE_RW_CONTENDED];
    return 0;
}

/* Adds r's counts to t's, of the same entry (a mutex's, a cond's, an
 * rwlock's). Heap mutexes of one init_site are several mutexes; a
 * variable's rows are one mutex's (seen again after its object was loaded
 * again). */
static void merge_row(struct row *t, const struct row *r)
{
    if (r->is_heap)
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
    for (int k = 0; k < 3; k++)
        t->n[k] += r->n[k];
}

/* Room for one more row in *rows (n used of *cap); NULL: out of memory. */
static struct row *row_add(struct row **rows, size_t *n, size_t *cap)
{
    if (*n == *cap) {
        size_t c2 = *cap ? *cap * 2 : 64;
        struct row *more = realloc(*rows, c2 * sizeof **rows);
        if (!more)
            return NULL;
        *rows = more;
        *cap = c2;
    }
    return &(*rows)[(*n)++];
}

struct seg_ctx {
    uintptr_t base;
    const char *name;
    uintptr_t lo[16], hi[16];
    int n;
};

static int visit_segs(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct seg_ctx *c = data;
    if (info->dlpi_addr != c->base || strcmp(info->dlpi_name ? info->dlpi_name : "", c->name))
        return 0;
    for (int i = 0; i < info->dlpi_phnum && c->n < 16; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        c->lo[c->n] = info->dlpi_addr + ph->p_vaddr;
        c->hi[c->n] = c->lo[c->n] + ph->p_memsz;
        c->n++;
    }
    return 1;
}

static int in_segs(const struct seg_ctx *c, uintptr_t a)
{
    for (int i = 0; i < c->n; i++)
        if (a >= c->lo[i] && a < c->hi[i])
            return 1;
    return 0;
}

/* Keeps row t of an object being unloaded in *rows, merged by entry: an
 * object loaded and unloaded in a loop adds no row per round. 0, or -1
 * when out of memory. */
static int keep_gone(struct row **rows, size_t *n, size_t *cap, const struct row *t)
{
    size_t k = 0;
    while (k < *n && strcmp((*rows)[k].key, t->key) != 0)
        k++;
    if (k < *n) {
        merge_row(&(*rows)[k], t);
        return 0;
    }
    struct row *r = row_add(rows, n, cap);
    if (!r)
        return -1;
    *r = *t;
    return 0;
}

/* The conds (rwlocks) of an object being unloaded: kept in *g, their
 * slots zeroed. */
static void unloading_objs(const struct seg_ctx *c, const struct obj_kind *k,
                           struct dm_trace_obj *table, struct gone_objs *g)
{
    for (unsigned i = 0; i < DM_TRACE_OBJ_SLOTS; i++) {
        struct dm_trace_obj *s = &table[i];
        uintptr_t key = atomic_load(&s->key);
        if (!key)
            continue;
        uintptr_t at = DM_TRACE_IS_RETIRED(key) ? atomic_load(&s->first) : key;
        if (!in_segs(c, at) && !in_segs(c, atomic_load(&s->init_site)))
            continue;
        struct row t;
        if (row_of_obj(k, s, &t) != 0)
            continue;
        if (keep_gone(&g->rows, &g->n, &g->cap, &t) != 0)
            break;
        dm_trace_obj_zero(s);
    }
}

void dm_trace_report_unloading(void *handle)
{
    struct link_map *lm = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return;
    struct seg_ctx c = { .base = lm->l_addr, .name = lm->l_name ? lm->l_name : "" };
    int was_quiet = dm_trace_self_quiet(1);
    dl_iterate_phdr(visit_segs, &c);
    if (c.n) {
        dm_real.mutex_lock(&report_mu);
        tick_ns = dm_trace_ns_per_tick();
        for (unsigned i = 0; i < DM_TRACE_SLOTS; i++) {
            struct dm_trace_slot *s = &dm_trace_table[i];
            uintptr_t key = atomic_load(&s->key);
            if (!key || !atomic_load(&s->locks))
                continue;
            uintptr_t at = DM_TRACE_IS_RETIRED(key) ? atomic_load(&s->first) : key;
            if (!in_segs(&c, at) && !in_segs(&c, atomic_load(&s->init_site)))
                continue;
            struct row t;
            row_of_slot(s, &t);
            if (keep_gone(&gone, &ngone, &gone_cap, &t) != 0)
                break;
            dm_trace_slot_zero(s);
        }
        unloading_objs(&c, &kind_cond, dm_trace_conds, &gone_objs[GONE_CONDS]);
        unloading_objs(&c, &kind_rwlock, dm_trace_rwlocks, &gone_objs[GONE_RWLOCKS]);
        dm_real.mutex_unlock(&report_mu);
    }
    dm_trace_self_quiet(was_quiet);
}

void dm_trace_report_unloaded(void)
{
    int was_quiet = dm_trace_self_quiet(1);
    dm_symbols_flush();
    dm_trace_self_quiet(was_quiet);
}

static int by_name(const void *a, const void *b)
{
    const struct row *x = *(const struct row *const *)a, *y = *(const struct row *const *)b;
    int d = strcmp(x->name, y->name);
    return d ? d : strcmp(x->key, y->key);
}

/* Sorts p[0..n) by name; 1 when two rows share one. */
static int names_sorted(struct row **p, size_t n)
{
    qsort(p, n, sizeof *p, by_name);
    for (size_t i = 1; i < n; i++)
        if (p[i]->c != C_UNKNOWN && strcmp(p[i]->name, p[i - 1]->name) == 0)
            return 1;
    return 0;
}

/* Every row's name unique (different mutexes under one name would be one
 * cluster-wide lock): the rows that share a name get "@object" (the
 * executable's own name for it), then, if that is not enough, ".2", ".3"
 * in the order of their entries; then each row's entry is made. */
static void unique_names(struct row *rows, size_t n, const char *prog)
{
    struct row **p = malloc((n ? n : 1) * sizeof *p);
    if (p) {
        for (size_t i = 0; i < n; i++)
            p[i] = &rows[i];
        for (int pass = 0; pass < 2 && names_sorted(p, n); pass++) {
            for (size_t i = 0; i < n;) {
                size_t j = i + 1;
                while (j < n && strcmp(p[j]->name, p[i]->name) == 0)
                    j++;
                for (size_t k = i; j - i > 1 && k < j && p[k]->c != C_UNKNOWN; k++) {
                    char nm[NAME_LEN * 2 + 32];
                    if (pass == 0)
                        snprintf(nm, sizeof nm, "%s@%s", p[k]->name,
                                 p[k]->object[0] ? p[k]->object : prog);
                    else
                        snprintf(nm, sizeof nm, "%.*s.%zu", NAME_LEN - 24, p[k]->name,
                                 k - i + 1);
                    lock_name(nm, p[k]->name);
                }
                i = j;
            }
        }
        free(p);
    }
    for (size_t i = 0; i < n; i++)
        if (rows[i].c != C_UNKNOWN)
            snprintf(rows[i].entry, sizeof rows[i].entry, "%s name = \"%s\"; }", rows[i].key,
                     rows[i].name);
}

/* The rows of one of record.c's object tables (conds, rwlocks) as the
 * mutexes' are made: one per object (and per retired slot, and per row of
 * an unloaded object: g), merged by entry, names unique within the block,
 * sorted by contention. Under report_mu, tick_ns set. */
static void collect_objs(struct objs *o, struct dm_trace_obj *table, const struct gone_objs *g,
                         uint64_t untracked, const char *prog)
{
    size_t cap = 0;
    o->untracked = untracked;
    for (unsigned i = 0; i < DM_TRACE_OBJ_SLOTS; i++) {
        struct row t;
        if (row_of_obj(o->k, &table[i], &t) != 0)
            continue;
        struct row *r = row_add(&o->rows, &o->n, &cap);
        if (!r)
            break;          /* out of memory: report what fits */
        *r = t;
    }
    for (size_t i = 0; i < g->n; i++) {
        struct row *r = row_add(&o->rows, &o->n, &cap);
        if (!r)
            break;
        *r = g->rows[i];
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
        merge_row(t, r);
    }
    o->n = kept;
    for (size_t i = 0; i < o->n; i++) {
        o->nobj += o->rows[i].mutexes;
        o->rows[i].threads = (uint64_t)__builtin_popcountll(o->rows[i].threads);
    }
    unique_names(o->rows, o->n, prog);
    if (o->n)
        qsort(o->rows, o->n, sizeof *o->rows, by_contention);
}

/* Has any object of `table` been used (a time to convert)? */
static int objs_used(struct dm_trace_obj *table)
{
    for (unsigned i = 0; i < DM_TRACE_OBJ_SLOTS; i++)
        if (atomic_load(&table[i].key) && (atomic_load(&table[i].n[0])
                                           || atomic_load(&table[i].n[1])
                                           || atomic_load(&table[i].n[2])))
            return 1;
    return 0;
}

/* One row per mutex (and per retired slot, and per row of an unloaded
 * object), then rows of one config entry merged: sorted by key, so a
 * report of many mutexes stays n log n. *n rows (NULL: none, or out of
 * memory before the first), *nmutex the mutexes they count. report_mu held. */
static struct row *collect_rows(size_t *nout, size_t *nmutex_out)
{
    struct row *rows = NULL;
    size_t n = 0, cap = 0, nmutex = 0;
    for (unsigned i = 0; i < DM_TRACE_SLOTS; i++) {
        struct row t;
        if (row_of_slot(&dm_trace_table[i], &t) != 0)
            continue;
        struct row *r = row_add(&rows, &n, &cap);
        if (!r)
            break;          /* out of memory: report what fits */
        *r = t;
    }
    for (size_t i = 0; i < ngone; i++) {
        struct row *r = row_add(&rows, &n, &cap);
        if (!r)
            break;
        *r = gone[i];
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
        merge_row(t, r);
    }
    n = kept;
    for (size_t i = 0; i < n; i++) {
        nmutex += rows[i].mutexes;
        rows[i].threads = (uint64_t)__builtin_popcountll(rows[i].threads);
    }
    *nout = n;
    *nmutex_out = nmutex;
    return rows;
}

/* text, one write(2) at a time until it is all out (or stderr fails). */
static void write_stderr(const char *text, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t w = write(STDERR_FILENO, text + off, len - off);
        if (w <= 0 && errno != EINTR)
            break;
        if (w > 0)
            off += (size_t)w;
    }
}

void dm_trace_report(const char *why)
{
    int was_quiet = dm_trace_self_quiet(1);
    dm_real.mutex_lock(&report_mu);
    /* The ratio may wait up to 2 ms in a young process: only when there
     * is a time to convert (a helper that locked nothing ends at once). */
    int any = ngone > 0;
    for (unsigned i = 0; i < DM_TRACE_SLOTS && !any; i++)
        any = atomic_load(&dm_trace_table[i].locks) != 0;
    any = any || gone_objs[GONE_CONDS].n || gone_objs[GONE_RWLOCKS].n
        || objs_used(dm_trace_conds) || objs_used(dm_trace_rwlocks);
    tick_ns = any ? dm_trace_ns_per_tick() : 1.0;
    size_t n, nmutex;
    struct row *rows = collect_rows(&n, &nmutex);
    char prog[256];
    program_name(prog, sizeof prog);
    unique_names(rows, n, prog);
    if (n)
        qsort(rows, n, sizeof *rows, by_contention);

    long top = env_long("DMUTEX_TRACE_TOP", TOP_DEFAULT);
    long min_locks = env_long("DMUTEX_TRACE_MIN_LOCKS", 1);
    uint64_t untracked = atomic_load(&dm_trace_untracked);
    struct objs objs[] = {
        { .k = &kind_cond, .what = "condition variables used",
          .cols = { "waits", "signals", "broadcasts" } },
        { .k = &kind_rwlock, .what = "rwlocks locked",
          .cols = { "reads", "writes", "contended" } },
    };
    collect_objs(&objs[0], dm_trace_conds, &gone_objs[GONE_CONDS],
                 atomic_load(&dm_trace_untracked_conds), prog);
    collect_objs(&objs[1], dm_trace_rwlocks, &gone_objs[GONE_RWLOCKS],
                 atomic_load(&dm_trace_untracked_rwlocks), prog);
    /* A program the traced one ran (a shell, a helper) that locked
     * nothing (no mutex, cond or rwlock) says nothing at its exit: its
     * stderr may be read by the program that ran it. A fork child of the
     * traced program's image says it in one line (and its JSON): it is
     * the program itself, and silence read the same as a child the
     * tracer never reached. */
    int used = n || untracked;
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        used = used || objs[i].n || objs[i].untracked;
    int forked = child_of && program_image;
    int say = used || strcmp(why, "exit") != 0 || is_root() || forked;
    /* One write of the whole text, so that reports of several processes
     * sharing stderr do not interleave line by line. */
    char *text = NULL;
    size_t len = 0;
    FILE *m = say && stderr_is_ours() ? open_memstream(&text, &len) : NULL;
    if (m && !used && forked) {
        fprintf(m, "\ndmutex trace: pid %d (%s), %s report: no mutex, rwlock or condition "
                "variable used since the fork (a fork child of %d)\n", (int)getpid(), prog, why,
                (int)child_of);
    } else if (m) {
        write_text(m, why, prog, rows, n, nmutex, untracked, top, min_locks);
        for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
            write_objs_text(m, &objs[i], prog, top, min_locks);
    }
    if (m) {
        if (fclose(m) == 0)
            write_stderr(text, len);
        free(text);
    }
    if (say)
        write_json_file(why, prog, rows, n, nmutex, untracked, top, min_locks, objs,
                        sizeof objs / sizeof objs[0]);
    free(rows);
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        free(objs[i].rows);
    dm_real.mutex_unlock(&report_mu);
    dm_trace_self_quiet(was_quiet);
}
