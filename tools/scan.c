/* dmutex scan: which mutex variables does a program (and its libraries)
 * define, and what config entries would map them. Reads the files from
 * disk, never runs them. Condition variables and rwlocks are found the
 * same way and printed as `conds` and `rwlocks` entries.
 *
 * Debug info (libdw) is the sure source: a variable whose type is, or
 * contains, pthread_mutex_t, C11's mtx_t or a std:: mutex (pthread_cond_t,
 * cnd_t, std::condition_variable; pthread_rwlock_t, std::shared_mutex) is
 * listed with the offset of every one inside it; a lock of a kind the shim
 * does not interpose (GLib's, a spin lock) is left out with a note. Without debug info the symbol
 * table (libelf) still has names and sizes, and a data object of
 * sizeof(pthread_mutex_t) bytes (or a multiple) with a lock-like name is a
 * good guess (sizeof(pthread_cond_t) with a cond-like name,
 * sizeof(pthread_rwlock_t) with an rwlock-like one). The config entries
 * name symbols the way shim/symbols.c resolves them: "sym", or
 * "file.c:sym" for a file-static, plus offset and object.
 *
 * This file is the command and its output (the table, the config block);
 * finding the candidates is scan_files.c (files, symbol tables, guesses)
 * and scan_dwarf.c (debug info), through scan.h. */
#include "cli.h"
#include "scan.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const how_names[] = { "dwarf", "guess", "weak" };
/* The config list of each kind, which is also its plural in messages. */
static const char *const kind_lists[KIND_COUNT] = { "mutexes", "conds", "rwlocks" };

/* ---- usage ---------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
"Usage: dmutex scan [--all] [--config] PROGRAM [LIBRARY...]\n"
"\n"
"List the pthread mutexes that PROGRAM and the given shared LIBRARYs hold in\n"
"variables, and print the config entries that would map them. The files are\n"
"read from disk, not run; give each library whose mutexes you want to see.\n"
"Condition variables (pthread_cond_t, std::condition_variable) and rwlocks\n"
"(pthread_rwlock_t, std::shared_mutex) are listed too, as conds and rwlocks\n"
"entries, and C11 <threads.h> mtx_t and cnd_t as mutexes and conds.\n"
"Locks of kinds the shim does not interpose (GLib's GMutex, GRecMutex, GCond,\n"
"GRWLock and the deprecated GStatic ones; pthread_spinlock_t) are not\n"
"listed: a note on stderr names each and says why.\n"
"\n"
"Found are global and file-static variables, function-scope statics, mutexes\n"
"inside global structs (each member, with its offset) and arrays (each\n"
"element). A mutex allocated on the heap is not a variable: map it with an\n"
"init_site entry instead.\n"
"\n"
"Each mutex is listed with its name, the symbol and offset to map it by, the\n"
"size of that symbol, its object, its source file if it is a file-static, its\n"
"type, and how sure the scan is:\n"
"\n"
"  dwarf   debug info says the variable is, or contains, a pthread_mutex_t,\n"
"          mtx_t, std::mutex, std::recursive_mutex or std::timed_mutex (a\n"
"          pthread_cond_t, cnd_t or std::condition_variable; a\n"
"          pthread_rwlock_t, std::shared_mutex or std::shared_timed_mutex).\n"
"  guess   no debug info for it, but it is a data object of exactly %zu bytes\n"
"          (sizeof(pthread_mutex_t)), or an array of them, with a lock-like\n"
"          name: it contains \"mutex\", \"mtx\" or \"lock\" (not as in block or\n"
"          clock), or ends in \"_m\". A cond (TYPE \"? (cond)\"): %zu bytes\n"
"          (sizeof(pthread_cond_t)) or a multiple, named with \"cond\" (not as\n"
"          in second) or the word \"cv\". An rwlock (TYPE \"? (rwlock)\"): %zu\n"
"          bytes (sizeof(pthread_rwlock_t)) or a multiple, named with\n"
"          \"rwlock\", \"rw_lock\", \"rwmutex\", \"rw_mutex\" or \"shared_mutex\",\n"
"          or a lock-like name whose size is no multiple of %zu.\n"
"  weak    (only with --all) a %zu-byte multiple without such a name, or a\n"
"          lock-like or cond-like name of another size; their entries are\n"
"          commented out.\n"
"\n"
"After the table come the mutexes = ( ... ); block, then conds = ( ... );\n"
"and rwlocks = ( ... ); when there are any, ready to paste into the dmutex\n"
"config. A file-static is written \"file.c:sym\"; an entry of a\n"
"library carries object = \"its soname\"; lock names are made unique.\n"
"Build with -g for sure answers; a stripped file shows only exported symbols.\n"
"\n"
"Options:\n"
"  --all        also list weak candidates\n"
"  --config     print only the config blocks (mutexes, conds, rwlocks)\n"
"  -h, --help   print this help and exit\n"
"\n"
"Exit status: 0 when every file was read (even if no mutex was found), 1 when\n"
"a file cannot be read or is not a program or library, 2 on a usage error.\n"
"\n"
"Examples:\n"
"  dmutex scan ./stock\n"
"  dmutex scan --config /usr/bin/app /usr/lib/libledger.so.1 >> app.cfg\n",
            MUTEX_SIZE, COND_SIZE, RWLOCK_SIZE, MUTEX_SIZE, MUTEX_SIZE);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dmutex scan: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nUsage: dmutex scan [--all] [--config] PROGRAM [LIBRARY...]\n"
                    "Try 'dmutex scan --help' for more.\n");
    return 2;
}

/* ---- output --------------------------------------------------------------------- */

static int by_row(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    if (x->f != y->f)
        return x->f < y->f ? -1 : 1;
    if (x->how != y->how)
        return (int)x->how - (int)y->how;
    int c = strcmp(x->symbol, y->symbol);
    if (c)
        return c;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

static char *stem(const char *file)
{
    const char *b = dm_scan_base_name(file);
    size_t n = strcspn(b, ".");
    return dm_scan_xprintf("%.*s", (int)(n ? n : strlen(b)), b);
}

/* Lock names must differ: a clash (the same static in two files, the same
 * global in two objects) is prefixed with the file's or object's stem, and
 * numbered if that is not enough. */
static void unique_names(struct scan *sc)
{
    for (size_t i = 0; i < sc->nrows; i++)
        sc->rows[i].name = dm_scan_xstrdup(sc->rows[i].base);
    for (size_t i = 0; i < sc->nrows; i++) {
        int clash = 0;
        for (size_t j = 0; j < sc->nrows && !clash; j++)
            clash = j != i && strcmp(sc->rows[i].base, sc->rows[j].base) == 0;
        if (clash && sc->rows[i].stem_from) {
            char *st = stem(sc->rows[i].stem_from);
            free(sc->rows[i].name);
            sc->rows[i].name = dm_scan_xprintf("%s_%s", st, sc->rows[i].base);
            free(st);
        }
    }
    for (size_t i = 0; i < sc->nrows; i++) {
        int seq = 1;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(sc->rows[i].name, sc->rows[j].name) == 0) {
                char *n = dm_scan_xprintf("%s_%d", sc->rows[i].base, ++seq);
                free(sc->rows[i].name);
                sc->rows[i].name = n;
                j = (size_t)-1;     /* look again from the top */
            }
        }
    }
}

/* The same config symbol for two different variables of one file: two
 * file-statics of one name where the file names are gone. */
static void mark_ambiguous(struct scan *sc)
{
    for (size_t i = 0; i < sc->nrows; i++)
        for (size_t j = i + 1; j < sc->nrows; j++)
            if (sc->rows[i].f == sc->rows[j].f && sc->rows[i].addr != sc->rows[j].addr &&
                strcmp(sc->rows[i].symbol, sc->rows[j].symbol) == 0)
                sc->rows[i].ambiguous = sc->rows[j].ambiguous = 1;
}

static void print_quoted(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        putchar(*s);
    }
    putchar('"');
}

static void print_entry(const struct row *r, int last)
{
    int off = r->offset >= 0;
    int active = r->how != HOW_WEAK && !r->ambiguous;
    printf("%s{ symbol = ", active ? "  " : "  # ");
    print_quoted(r->symbol);
    printf(";");
    if (r->f->object) {
        printf(" object = ");
        print_quoted(r->f->object);
        printf(";");
    }
    if (!off)
        printf(" offset = ?;");
    else if (r->offset > 0)
        printf(" offset = %ld;", r->offset);
    if (r->source || strcmp(r->name, r->symbol) != 0) {
        printf(" name = ");
        print_quoted(r->name);
        printf(";");
    }
    printf(" }%s", last || !active ? "" : ",");
    if (r->ambiguous)
        printf("   # ambiguous: several file-statics are named %s and %s has no file "
               "names in its symbol table (strip -g removes them)", r->symbol, r->f->label);
    else if (r->note)
        printf("   # %s", r->note + (r->how == HOW_WEAK ? strlen("weak: ") : 0));
    putchar('\n');
    if (r->more > 0)
        printf("  # ... %ld more %s in %s are not listed: add them by offset\n",
               r->more, r->kind == KIND_MUTEX ? "mutexes" : "objects", r->symbol);
}

/* One list of the config: `mutexes`, `conds` or `rwlocks`, the rows of
 * that kind; none when there are no such rows. */
static void print_list(const struct scan *sc, enum kind kind)
{
    size_t last = sc->nrows, n = 0;
    for (size_t i = 0; i < sc->nrows; i++) {
        if (sc->rows[i].kind != kind)
            continue;
        n++;
        if (sc->rows[i].how != HOW_WEAK && !sc->rows[i].ambiguous)
            last = i;
    }
    if (!n)
        return;
    printf("%s = (\n", kind_lists[kind]);
    for (size_t i = 0; i < sc->nrows; i++)
        if (sc->rows[i].kind == kind)
            print_entry(&sc->rows[i], i == last);
    printf(");\n");
}

static void print_config(const struct scan *sc)
{
    for (int k = 0; k < KIND_COUNT; k++)
        print_list(sc, (enum kind)k);
}

static void print_table(const struct scan *sc)
{
    static const char *const head[] = { "MUTEX", "SYMBOL", "OFFSET", "SIZE", "OBJECT",
                                        "SOURCE", "TYPE", "HOW" };
    enum { NCOL = 8 };
    int w[NCOL];
    for (int c = 0; c < NCOL; c++)
        w[c] = (int)strlen(head[c]);
    char num[2][32];
    for (size_t i = 0; i < sc->nrows; i++) {
        const struct row *r = &sc->rows[i];
        snprintf(num[0], sizeof num[0], "%ld", r->offset);
        snprintf(num[1], sizeof num[1], "%llu", (unsigned long long)r->size);
        const char *cell[NCOL] = { r->display, r->symbol, r->offset >= 0 ? num[0] : "?",
                                   num[1], r->f->label, r->source ? r->source : "-",
                                   r->type, how_names[r->how] };
        for (int c = 0; c < NCOL; c++)
            if ((int)strlen(cell[c]) > w[c])
                w[c] = (int)strlen(cell[c]);
    }
    printf("%-*s  %-*s  %*s  %*s  %-*s  %-*s  %-*s  %s\n", w[0], head[0], w[1], head[1],
           w[2], head[2], w[3], head[3], w[4], head[4], w[5], head[5], w[6], head[6], head[7]);
    for (size_t i = 0; i < sc->nrows; i++) {
        const struct row *r = &sc->rows[i];
        snprintf(num[0], sizeof num[0], "%ld", r->offset);
        snprintf(num[1], sizeof num[1], "%llu", (unsigned long long)r->size);
        printf("%-*s  %-*s  %*s  %*s  %-*s  %-*s  %-*s  %s\n", w[0], r->display,
               w[1], r->symbol, w[2], r->offset >= 0 ? num[0] : "?", w[3], num[1],
               w[4], r->f->label, w[5], r->source ? r->source : "-", w[6], r->type,
               how_names[r->how]);
        if (r->more > 0)
            printf("  ... and %ld more in %s\n", r->more, r->symbol);
    }
}

static void free_rows(struct scan *sc)
{
    for (size_t i = 0; i < sc->nrows; i++) {
        free(sc->rows[i].symbol);
        free(sc->rows[i].display);
        free(sc->rows[i].base);
        free(sc->rows[i].name);
    }
    free(sc->rows);
}

int dm_cli_scan(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "all", no_argument, NULL, 'a' },
        { "config", no_argument, NULL, 'c' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    struct scan sc = { 0 };
    int opt;
    optind = 0;                 /* the dispatcher may have used getopt */
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'a': sc.all = 1; break;
        case 'c': sc.config_only = 1; break;
        case 'h': usage(stdout); return 0;
        default:
            if (optopt)
                return usage_error("unknown option '-%c'", optopt);
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return usage_error("no PROGRAM given");
    if (elf_version(EV_CURRENT) == EV_NONE) {
        fprintf(stderr, "dmutex scan: libelf is older than this program\n");
        return 1;
    }

    sc.nfiles = (size_t)(argc - optind);
    sc.files = dm_scan_xmalloc(sc.nfiles * sizeof *sc.files);
    int rc = 0;
    for (size_t i = 0; i < sc.nfiles; i++) {
        memset(&sc.files[i], 0, sizeof sc.files[i]);
        sc.files[i].e.fd = -1;
    }
    for (size_t i = 0; i < sc.nfiles && rc == 0; i++)
        if (dm_scan_open(&sc.files[i], argv[optind + (int)i], i == 0) != 0)
            rc = 1;

    for (size_t i = 0; i < sc.nfiles && rc == 0; i++) {
        struct file *f = &sc.files[i];
        if (!f->section)
            fprintf(stderr, "dmutex scan: note: %s has no symbol table; nothing in it "
                    "can be mapped\n", f->path);
        else if (strcmp(f->section, ".dynsym") == 0)
            fprintf(stderr, "dmutex scan: note: %s is stripped (no .symtab): only its "
                    "exported symbols are visible, and no file-static can be mapped\n",
                    f->path);
        if (f->dw)
            dm_scan_dwarf(&sc, f);
        else if (f->section)
            fprintf(stderr, "dmutex scan: note: %s has no debug info: mutexes are "
                    "guessed from size and name (build with -g to be sure)\n", f->path);
        dm_scan_guesses(&sc, f);
    }

    if (rc == 0) {
        qsort(sc.rows, sc.nrows, sizeof *sc.rows, by_row);
        unique_names(&sc);
        mark_ambiguous(&sc);
        if (sc.nrows == 0) {
            fprintf(stderr, "dmutex scan: no mutex variables found%s\n",
                    sc.all ? "" : " (--all also lists weak candidates)");
        } else if (sc.config_only) {
            print_config(&sc);
        } else {
            print_table(&sc);
            printf("\n# Paste into the dmutex config (weak candidates are commented out):\n");
            print_config(&sc);
        }
    }
    free_rows(&sc);
    for (size_t i = 0; i < sc.nfiles; i++)
        dm_scan_close(&sc.files[i]);
    free(sc.files);
    return rc;
}

