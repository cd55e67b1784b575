/* symbols: config names -> addresses in the ELF objects loaded in this
 * process. dl_iterate_phdr says which objects are loaded and where (load
 * bias); elfsyms reads each one's symbol table from its file (.symtab, or
 * .dynsym when the file is stripped). Symbol tables are read once per
 * object and cached, sorted by name, until dm_symbols_flush(), because the
 * shim may resolve a hundred names at start and more on every dlopen.
 *
 * Owns: the cache and the rules that turn "sym" / "file.c:sym" into one
 * symbol. Must not know about Redis, the config syntax or pthread_mutex_t
 * (the caller says how many bytes it needs). Never prints: every failure is
 * a sentence in the caller's err buffer. */
#include "symbols.h"

#include "elfsyms.h"
#include "real.h"

#include <dlfcn.h>
#include <errno.h>
#include <gelf.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#define SELF_EXE "/proc/self/exe"

/* One defined symbol, its name and the STT_FILE that precedes it (locals
 * only) pointing into the owning table's copy of the string table. */
struct sym {
    const char *name;
    const char *file;           /* NULL for globals and locals with no STT_FILE */
    GElf_Addr value;
    GElf_Xword size;
    unsigned char info;         /* bind and type, as in st_info */
    unsigned char other;        /* visibility */
    int absolute;               /* SHN_ABS: no load bias */
};

/* A cached symbol table, keyed by (dlpi_name, dlpi_addr): a library
 * unloaded and another loaded at the same place under the same name is the
 * one case that needs dm_symbols_flush(). */
struct table {
    struct table *next;
    char *key;                  /* dlpi_name ("" for the executable) */
    uintptr_t bias;             /* dlpi_addr */
    const char *section;        /* ".symtab" or ".dynsym" */
    char *strings;              /* copy of the string table */
    struct sym *syms;           /* sorted by name */
    size_t nsyms;
    int has_files;              /* any STT_FILE: strip -g removes them all */
};

/* A loaded object as dl_iterate_phdr showed it, copied out of the callback
 * so that no file is read while the loader's lock is held. */
#define MAX_SEGMENTS 16

struct object {
    char key[PATH_MAX];         /* dlpi_name */
    char path[PATH_MAX];        /* the file to read */
    char label[PATH_MAX];       /* how messages name it */
    uintptr_t bias;
    int is_exe;
    char build_id[DM_BUILD_ID_MAX];     /* hex of NT_GNU_BUILD_ID, "" when none */
    struct { uintptr_t vaddr, memsz; unsigned flags; } seg[MAX_SEGMENTS];   /* PT_LOAD */
    int nseg;
};

enum want { WANT_DATA, WANT_FUNC };

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static struct table *cache;
static int elf_ok;

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Appends to a NUL-terminated buffer; ends it with "..." when full. */
static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void append(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || len == 0)
        return;
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= len - used && len >= 4)
        memcpy(buf + len - 4, "...", 4);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* A fork while another thread reads a symbol table must not leave the
 * child with cache_lock held by a thread that does not exist there:
 * startup's fork handlers (the one place fork handling is registered, in
 * the one lock order) call these. */
void dm_symbols_atfork_prepare(void) { dm_lock(&cache_lock); }
void dm_symbols_atfork_release(void) { dm_unlock(&cache_lock); }

static void init(void)
{
    elf_ok = elf_version(EV_CURRENT) != EV_NONE;
}

static void free_table(struct table *t)
{
    free(t->key);
    free(t->strings);
    free(t->syms);
    free(t);
}

void dm_symbols_flush(void)
{
    pthread_once(&init_once, init);
    dm_lock(&cache_lock);
    struct table *t = cache;
    cache = NULL;
    dm_unlock(&cache_lock);
    while (t) {
        struct table *next = t->next;
        free_table(t);
        t = next;
    }
}

/* ---- which object ------------------------------------------------------ */

/* How well a loaded object's name matches the `object` the caller gave:
 * the full path, or the file name, or a versioned file name of a library
 * given without its version ("libfoo.so" for "libfoo.so.1.2"). */
enum { MATCH_NONE, MATCH_PREFIX, MATCH_NAME };

static int match_object(const char *want, const char *path)
{
    if (strcmp(want, path) == 0 || strcmp(want, base_name(path)) == 0)
        return MATCH_NAME;
    size_t n = strlen(want);
    const char *base = base_name(path);
    if (n > 3 && strcmp(want + n - 3, ".so") == 0 &&
        strncmp(base, want, n) == 0 && base[n] == '.')
        return MATCH_PREFIX;
    return MATCH_NONE;
}

struct find_ctx {
    const char *want;           /* NULL: the executable */
    const char *exe_path;       /* readlink of /proc/self/exe */
    uintptr_t vdso;             /* AT_SYSINFO_EHDR, 0 if none */
    int first;                  /* the executable comes first */
    int best;                   /* MATCH_* of `found` */
    int count;                  /* objects matching at level `best` */
    struct object *found;
    char other[PATH_MAX];       /* a second match, for the ambiguity message */
};

static int is_vdso(const struct dl_phdr_info *info, uintptr_t vdso)
{
    if (!vdso)
        return 0;
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)vdso;
    return (uintptr_t)info->dlpi_phdr == vdso + eh->e_phoff;
}

/* The GNU build-id note of a loaded object, as hex, from its mapped
 * PT_NOTE segments (the loader keeps them mapped): "" when it has none. */
static void note_build_id(const struct dl_phdr_info *info, char *hex, size_t len)
{
    hex[0] = '\0';
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr);
        const char *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
            const char *name = p + sizeof *n;
            const unsigned char *desc = (const unsigned char *)name + ((n->n_namesz + 3) & ~3u);
            const char *next = (const char *)desc + ((n->n_descsz + 3) & ~3u);
            if (next > end)
                break;
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                size_t k = 0;
                for (size_t j = 0; j < n->n_descsz && k + 3 <= len; j++, k += 2)
                    snprintf(hex + k, 3, "%02x", desc[j]);
                return;
            }
            p = next;
        }
    }
}

/* Copies what an object record needs from the loader's view of it. */
static void object_fill(struct object *o, const struct dl_phdr_info *info, int is_exe,
                        const char *label)
{
    snprintf(o->key, sizeof o->key, "%s", is_exe ? "" : info->dlpi_name);
    snprintf(o->path, sizeof o->path, "%s", is_exe ? SELF_EXE : info->dlpi_name);
    snprintf(o->label, sizeof o->label, "%s", label);
    o->bias = info->dlpi_addr;
    o->is_exe = is_exe;
    note_build_id(info, o->build_id, sizeof o->build_id);
    o->nseg = 0;
    for (int i = 0; i < info->dlpi_phnum && o->nseg < MAX_SEGMENTS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        o->seg[o->nseg].vaddr = ph->p_vaddr;
        o->seg[o->nseg].memsz = ph->p_memsz;
        o->seg[o->nseg].flags = ph->p_flags;
        o->nseg++;
    }
}

/* The file behind a loaded object and how messages name it: 0 when it
 * has none (the vdso, the loader's own entries without a path). */
static int object_label(const struct dl_phdr_info *info, int first, const char *exe_path,
                        int *is_exe, const char **label)
{
    *is_exe = first && (!info->dlpi_name || !*info->dlpi_name);
    if (*is_exe)
        *label = exe_path;
    else if (info->dlpi_name && strchr(info->dlpi_name, '/'))
        *label = info->dlpi_name;       /* absolute, or relative as dlopen("./x.so") gave it */
    else
        return 0;                       /* no file behind it */
    return 1;
}

static int visit_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct find_ctx *c = data;
    int first = c->first;
    c->first = 0;
    if (is_vdso(info, c->vdso))
        return 0;

    int is_exe;
    const char *label;
    if (!object_label(info, first, c->exe_path, &is_exe, &label))
        return 0;

    int m;
    if (!c->want)
        m = is_exe ? MATCH_NAME : MATCH_NONE;
    else
        m = match_object(c->want, label);
    if (m == MATCH_NONE || m < c->best)
        return 0;
    if (m == c->best) {
        if (++c->count == 2)
            snprintf(c->other, sizeof c->other, "%s", label);
        return 0;
    }
    c->best = m;
    c->count = 1;
    object_fill(c->found, info, is_exe, label);
    return 0;
}

static void exe_path(char *exe, size_t len)
{
    ssize_t n = readlink(SELF_EXE, exe, len - 1);
    if (n < 0)
        n = snprintf(exe, len, "%s", SELF_EXE);
    exe[n] = '\0';
}

static int find_object(const char *object, struct object *o, char *err, size_t errlen)
{
    char exe[PATH_MAX];
    exe_path(exe, sizeof exe);

    struct find_ctx c = {
        .want = object, .exe_path = exe, .vdso = getauxval(AT_SYSINFO_EHDR),
        .first = 1, .best = MATCH_NONE, .found = o,
    };
    dl_iterate_phdr(visit_object, &c);
    if (c.best == MATCH_NONE) {
        if (object)
            seterr(err, errlen, "object %s is not loaded (no loaded executable or "
                   "library has that file name)", object);
        else
            seterr(err, errlen, "the executable was not found among the loaded objects");
        return ENOENT;
    }
    if (c.count > 1) {
        seterr(err, errlen, "object %s is ambiguous: it matches both %s and %s; "
               "give the full path", object, o->label, c.other);
        return ENOTUNIQ;
    }
    return 0;
}

/* ---- reading a symbol table -------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct sym *)a)->name, ((const struct sym *)b)->name);
}

/* Copies the defined symbols the walk yields, and its string table, into
 * `t`: the file is closed once the table is read. */
static int read_symbols(struct dm_elf_syms *w, struct table *t)
{
    t->strings = malloc(w->strsize + 1);
    t->syms = calloc(w->count ? w->count : 1, sizeof *t->syms);
    if (!t->strings || !t->syms)
        return ENOMEM;
    memcpy(t->strings, w->strings, w->strsize);
    t->strings[w->strsize] = '\0';

    struct dm_elf_sym s;
    size_t n = 0;
    while (n < w->count && dm_elf_syms_next(w, &s)) {
        t->syms[n++] = (struct sym){
            .name = t->strings + (s.name - w->strings),
            .file = s.file ? t->strings + (s.file - w->strings) : NULL,
            .value = s.value, .size = s.size, .info = s.info, .other = s.other,
            .absolute = s.shndx == SHN_ABS,
        };
    }
    t->nsyms = n;
    t->has_files = w->has_files;
    qsort(t->syms, n, sizeof *t->syms, by_name);
    return 0;
}

static int load_table(const struct object *o, struct table **out, char *err, size_t errlen)
{
    if (!elf_ok) {
        seterr(err, errlen, "cannot read %s: libelf is older than this program", o->label);
        return EIO;
    }
    struct dm_elf e;
    enum dm_elf_open_result opened = dm_elf_open(&e, o->path);
    int rc = EIO;
    struct table *t = NULL;
    if (opened == DM_ELF_SYSTEM) {
        rc = e.err;
        seterr(err, errlen, "cannot read the symbols of %s: %s", o->label, strerror(rc));
        goto out;
    }
    t = calloc(1, sizeof *t);
    if (!t || opened != DM_ELF_OPENED) {
        rc = t ? EIO : ENOMEM;
        seterr(err, errlen, "cannot read the symbols of %s: %s", o->label,
               !t ? strerror(ENOMEM) : opened == DM_ELF_LIBELF ? elf_errmsg(-1) :
               opened == DM_ELF_NOT_REGULAR ? "not a regular file" : "not an ELF file");
        goto out;
    }
    struct dm_elf_syms w;
    rc = dm_elf_syms_begin(e.elf, &w);
    t->section = w.section;
    if (rc == ENOENT) {
        seterr(err, errlen, "%s has no symbol table (neither .symtab nor .dynsym)", o->label);
        goto out;
    }
    if (rc == 0)
        rc = read_symbols(&w, t);
    if (rc != 0) {
        seterr(err, errlen, "cannot read the %s of %s: %s", t->section, o->label,
               rc == ENOMEM ? strerror(rc) : elf_errmsg(-1));
        goto out;
    }
    t->key = strdup(o->key);
    t->bias = o->bias;
    if (!t->key) {
        rc = ENOMEM;
        seterr(err, errlen, "cannot read the symbols of %s: %s", o->label, strerror(rc));
        goto out;
    }
    *out = t;
    t = NULL;
    rc = 0;
out:
    dm_elf_close(&e);
    if (t)
        free_table(t);
    return rc;
}

/* The cached table of `o`, read on first use. Called with cache_lock held. */
static int get_table(const struct object *o, struct table **out, char *err, size_t errlen)
{
    for (struct table *t = cache; t; t = t->next) {
        if (t->bias == o->bias && strcmp(t->key, o->key) == 0) {
            *out = t;
            return 0;
        }
    }
    int rc = load_table(o, out, err, errlen);
    if (rc == 0) {
        (*out)->next = cache;
        cache = *out;
    }
    return rc;
}

/* ---- choosing one symbol ----------------------------------------------- */

static int sym_kind(const struct sym *s)
{
    switch (GELF_ST_TYPE(s->info)) {
    case STT_OBJECT: case STT_COMMON: case STT_TLS:
        return WANT_DATA;
    case STT_FUNC: case STT_GNU_IFUNC:
        return WANT_FUNC;
    default:
        return -1;
    }
}

static int is_local(const struct sym *s)
{
    return GELF_ST_BIND(s->info) == STB_LOCAL;
}

/* The first symbol named `name` (all with that name follow it), or the end. */
static size_t lower_bound(const struct table *t, const char *name, size_t len)
{
    size_t lo = 0, hi = t->nsyms;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strncmp(t->syms[mid].name, name, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* gcc names a function-scope static "sym.N"; such a local answers to
 * "sym" when nothing is named exactly that. */
static int is_numbered(const char *name, const char *sym, size_t len)
{
    if (strncmp(name, sym, len) != 0 || name[len] != '.' || !name[len + 1])
        return 0;
    for (const char *p = name + len + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

/* How well a local's STT_FILE name answers the file the user wrote:
 * 2 exactly, 1 by file name ("util.c" for "src/util.c", or the reverse). */
static int file_score(const char *have, const char *want)
{
    if (!have)
        return 0;
    if (strcmp(have, want) == 0)
        return 2;
    if (strcmp(base_name(have), want) == 0)
        return 1;
    if (!strchr(have, '/') && strcmp(have, base_name(want)) == 0)
        return 1;
    return 0;
}

struct pick {
    const struct sym *c[64];    /* candidates, distinct addresses */
    size_t n;                   /* may exceed the array: counted, not kept */
};

static void pick_add(struct pick *p, const struct sym *s)
{
    for (size_t i = 0; i < p->n && i < 64; i++)
        if (p->c[i]->value == s->value && p->c[i]->size == s->size)
            return;             /* an alias of one already kept */
    if (p->n < 64)
        p->c[p->n] = s;
    p->n++;
}

enum filter { ONLY_GLOBAL, ONLY_LOCAL };

/* Collects symbols of the wanted kind named `sym` (or, when `numbered`,
 * named "sym.N"). With `file`, only locals of that file with the best score
 * count. `other_kind` learns whether a symbol of the other kind was seen. */
static void collect(const struct table *t, const char *sym, const char *file,
                    enum filter f, int numbered, enum want want,
                    struct pick *p, const struct sym **other_kind)
{
    size_t len = strlen(sym);
    int best_score = 1;
    p->n = 0;
    for (size_t i = lower_bound(t, sym, len); i < t->nsyms; i++) {
        const struct sym *s = &t->syms[i];
        if (strncmp(s->name, sym, len) != 0)
            break;
        if (numbered ? !is_numbered(s->name, sym, len) : s->name[len] != '\0')
            continue;
        if ((f == ONLY_LOCAL) != is_local(s))
            continue;
        int score = file ? file_score(s->file, file) : 0;
        if (file && score < best_score)
            continue;
        if (sym_kind(s) != (int)want) {
            if (!*other_kind)
                *other_kind = s;
            continue;
        }
        if (file && score > best_score) {
            best_score = score;
            p->n = 0;
        }
        pick_add(p, s);
    }
}

static void list_candidates(const struct pick *p, char *err, size_t errlen)
{
    for (size_t i = 0; i < p->n && i < 64; i++)
        append(err, errlen, "%s%s%s%s", i ? ", " : "",
               p->c[i]->file ? p->c[i]->file : "", p->c[i]->file ? ":" : "",
               p->c[i]->name);
    if (p->n > 64)
        append(err, errlen, " and %zu more", p->n - 64);
}

static const char *kind_name(const struct sym *s)
{
    switch (GELF_ST_TYPE(s->info)) {
    case STT_FUNC: return "a function";
    case STT_GNU_IFUNC: return "an indirect function";
    case STT_OBJECT: case STT_COMMON: return "a data object";
    case STT_TLS: return "a thread-local variable";
    case STT_NOTYPE: return "a symbol without a type";
    default: return "not a data object or function";
    }
}

/* Applies the rules of symbols.h to one table: "file.c:sym" is a local of
 * that file; "sym" is the one global, else the one local, else ambiguous. */
static int choose(const struct table *t, const struct object *o, const char *symbol,
                  enum want want, const struct sym **out, char *err, size_t errlen)
{
    const char *what = want == WANT_DATA ? "a data object" : "a function";
    const char *colon = strrchr(symbol, ':');
    char filebuf[PATH_MAX];
    const char *file = NULL, *sym = symbol;
    if (colon && colon != symbol && colon[1] != '\0' && colon[-1] != ':') {
        snprintf(filebuf, sizeof filebuf, "%.*s", (int)(colon - symbol), symbol);
        file = filebuf;
        sym = colon + 1;
    }

    struct pick p;
    const struct sym *other = NULL;
    if (file) {
        collect(t, sym, file, ONLY_LOCAL, 0, want, &p, &other);
        if (p.n == 0)
            collect(t, sym, file, ONLY_LOCAL, 1, want, &p, &other);
    } else {
        collect(t, sym, NULL, ONLY_GLOBAL, 0, want, &p, &other);
        if (p.n == 0)
            collect(t, sym, NULL, ONLY_LOCAL, 0, want, &p, &other);
        if (p.n == 0)
            collect(t, sym, NULL, ONLY_LOCAL, 1, want, &p, &other);
    }

    if (p.n == 1) {
        *out = p.c[0];
        return 0;
    }
    if (p.n > 1) {
        seterr(err, errlen, "symbol %s is ambiguous in %s: it matches %zu %s; "
               "write one of ", symbol, o->label, p.n,
               file ? "symbols of that file" : "file-statics");
        list_candidates(&p, err, errlen);
        if (!t->has_files)
            append(err, errlen, " (the symbol table has no file names, as after "
                   "strip -g, so they cannot be told apart)");
        return ENOTUNIQ;
    }
    if (other) {
        seterr(err, errlen, "symbol %s in %s is %s, not %s", symbol, o->label,
               kind_name(other), what);
        return EINVAL;
    }
    if (strcmp(t->section, ".dynsym") == 0)
        seterr(err, errlen, "symbol %s not found in %s (searched .dynsym only: the "
               "file has no .symtab, so file-statics are not visible)", symbol, o->label);
    else
        seterr(err, errlen, "symbol %s not found in %s (searched %s)", symbol, o->label,
               t->section);
    if (file) {
        collect(t, sym, NULL, ONLY_GLOBAL, 0, want, &p, &other);
        if (p.n > 0)
            append(err, errlen, "; %s is a global there: drop the \"%s:\"", sym, file);
        else if (!t->has_files)
            append(err, errlen, "; its symbol table has no file names (stripped with "
                   "strip -g?): write the symbol without \"%s:\"", file);
    }
    return ENOENT;
}

/* A library's global data may live in the executable: a non-PIE (or, on
 * x86-64, PIE) program that names it directly gets a copy relocation, and
 * from then on every user, the library included, uses the executable's
 * copy. The dynamic linker knows which copy is live; believe it when its
 * answer is the same size, and our own table otherwise. `name` is the
 * caller's string (a global's name is always written unqualified). Called
 * without cache_lock: dlsym takes the loader's lock, which a dlopen hook
 * calling us may already hold. */
/* The size of the executable's symbol `name` at run-time address p (0
 * when it has none there), from its own table: dladdr1 may answer another
 * symbol at that address instead (_edata and __bss_start share it when
 * the copy opens .bss). Takes cache_lock. */
static GElf_Xword exe_size_at(const char *name, uintptr_t p)
{
    struct object exe;
    if (find_object(NULL, &exe, NULL, 0) != 0)
        return 0;
    GElf_Xword size = 0;
    struct table *t;
    dm_lock(&cache_lock);
    if (get_table(&exe, &t, NULL, 0) == 0) {
        for (size_t i = lower_bound(t, name, strlen(name) + 1);
             i < t->nsyms && strcmp(t->syms[i].name, name) == 0; i++)
            if (!t->syms[i].absolute && t->bias + t->syms[i].value == p)
                size = t->syms[i].size;
    }
    dm_unlock(&cache_lock);
    return size;
}

static uintptr_t live_copy(const struct object *o, const char *name, const struct sym *s,
                           uintptr_t addr)
{
    int bind = GELF_ST_BIND(s->info);
    if (o->is_exe || (bind != STB_GLOBAL && bind != STB_WEAK) ||
        GELF_ST_VISIBILITY(s->other) != STV_DEFAULT || GELF_ST_TYPE(s->info) == STT_TLS)
        return addr;
    void *p = dlsym(RTLD_DEFAULT, name);
    if (!p || (uintptr_t)p == addr)
        return addr;
    Dl_info info;
    const ElfW(Sym) *es = NULL;
    if (!dladdr1(p, &info, (void **)&es, RTLD_DL_SYMENT) || !es)
        return addr;
    GElf_Xword size = info.dli_sname && strcmp(info.dli_sname, name) == 0
        ? es->st_size : exe_size_at(name, (uintptr_t)p);
    return size == s->size ? (uintptr_t)p : addr;
}

static int resolve(const char *object, const char *symbol, enum want want,
                   struct object *o, struct sym *out, uintptr_t *addr,
                   char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!symbol || !*symbol) {
        seterr(err, errlen, "an empty symbol name was given for object %s",
               object ? object : "(the executable)");
        return EINVAL;
    }
    pthread_once(&init_once, init);
    int rc = find_object(object, o, err, errlen);
    if (rc != 0)
        return rc;

    dm_lock(&cache_lock);
    struct table *t = NULL;
    const struct sym *s = NULL;
    rc = get_table(o, &t, err, errlen);
    if (rc == 0)
        rc = choose(t, o, symbol, want, &s, err, errlen);
    if (rc == 0) {
        *out = *s;              /* a copy, without pointers into a table */
        out->name = out->file = NULL;   /* that a flush may free */
    }
    dm_unlock(&cache_lock);
    if (rc != 0)
        return rc;

    *addr = (out->absolute ? 0 : o->bias) + (uintptr_t)out->value;
    return 0;
}

int dm_symbols_bias(const char *object, uintptr_t *bias)
{
    struct object *o = malloc(sizeof *o);
    if (!o)
        return 1;       /* cannot tell: the caller's lookup will say why */
    char err[8];
    int r = find_object(object, o, err, sizeof err);
    *bias = r == 0 ? o->bias : 0;
    free(o);
    return r == 0 || r == ENOTUNIQ;
}

/* resolve() with its object record on the heap (it is large): *o is
 * set whatever the result (NULL out of memory) and the caller frees it. */
static int resolve_new(const char *object, const char *symbol, enum want want,
                       struct object **o, struct sym *s, uintptr_t *addr,
                       char *err, size_t errlen)
{
    *o = malloc(sizeof **o);
    if (!*o) {
        seterr(err, errlen, "cannot look up %s: %s", symbol ? symbol : "", strerror(ENOMEM));
        return ENOMEM;
    }
    return resolve(object, symbol, want, *o, s, addr, err, errlen);
}

int dm_symbols_find(const char *object, const char *symbol, long offset,
                    size_t need, const char *what, uintptr_t *addr, char *err, size_t errlen)
{
    struct object *o;
    struct sym s;
    uintptr_t a;
    char needed[96];            /* "a pthread_cond_t (48 bytes)", or "48 bytes" */
    if (what)
        snprintf(needed, sizeof needed, "%s (%zu bytes)", what, need);
    else
        snprintf(needed, sizeof needed, "%zu bytes", need);
    int rc = resolve_new(object, symbol, WANT_DATA, &o, &s, &a, err, errlen);
    if (rc != 0)
        goto out;
    rc = EINVAL;
    if (GELF_ST_TYPE(s.info) == STT_TLS) {
        seterr(err, errlen, "%s in %s is thread-local (STT_TLS): every thread has its "
               "own copy, so it has no single address to map", symbol, o->label);
    } else if (s.size == 0) {
        seterr(err, errlen, "%s in %s has size 0 in %s (defined without a size, as in "
               "assembly), so %s cannot be checked to fit in it", symbol,
               o->label, base_name(o->label), needed);
    } else if (offset < 0) {
        seterr(err, errlen, "offset %ld into %s in %s is negative", offset, symbol,
               base_name(o->label));
    } else if ((GElf_Xword)offset > s.size || need > s.size - (GElf_Xword)offset) {
        rc = ERANGE;
        seterr(err, errlen, "%s in %s is %llu bytes: %s at offset %ld do%s not fit in it",
               symbol, base_name(o->label), (unsigned long long)s.size, needed, offset,
               what ? "es" : "");
    } else {
        *addr = live_copy(o, symbol, &s, a) + (uintptr_t)offset;
        rc = 0;
    }
out:
    free(o);
    return rc;
}

int dm_symbols_function(const char *object, const char *func,
                        uintptr_t *start, uintptr_t *end, char *err, size_t errlen)
{
    struct object *o;
    struct sym s;
    uintptr_t a;
    int rc = resolve_new(object, func, WANT_FUNC, &o, &s, &a, err, errlen);
    if (rc != 0)
        goto out;
    rc = EINVAL;
    if (GELF_ST_TYPE(s.info) == STT_GNU_IFUNC) {
        seterr(err, errlen, "%s in %s is an indirect function (STT_GNU_IFUNC): its "
               "symbol is the resolver, not the code that runs", func, o->label);
    } else if (s.size == 0) {
        seterr(err, errlen, "%s in %s has size 0 in its symbol table, so where it ends "
               "is unknown", func, o->label);
    } else {
        *start = a;
        *end = a + (uintptr_t)s.size;
        rc = 0;
    }
out:
    free(o);
    return rc;
}

/* ---- addresses: a build's own coordinates ------------------------------- */

int dm_symbols_at(const char *object, uintptr_t vaddr, size_t need, int code,
                  const char *build_id, uintptr_t *addr, char *err, size_t errlen)
{
    pthread_once(&init_once, init);
    struct object *o = malloc(sizeof *o);
    if (!o) {
        seterr(err, errlen, "cannot look up address 0x%lx: %s", (unsigned long)vaddr,
               strerror(ENOMEM));
        return ENOMEM;
    }
    int rc = find_object(object, o, err, errlen);
    if (rc != 0)
        goto out;
    const char *obj = base_name(o->label);
    if (build_id && strcasecmp(build_id, o->build_id) != 0) {
        rc = ESTALE;
        if (!o->build_id[0])
            seterr(err, errlen, "address 0x%lx in %s: the entry is for build-id %s, but %s "
                   "has no build-id, so it cannot be the same build (trace this build again)",
                   (unsigned long)vaddr, obj, build_id, obj);
        else
            seterr(err, errlen, "address 0x%lx in %s: the entry is for build-id %s, but the "
                   "loaded %s is build-id %s: an address holds for one build only "
                   "(trace this build again, or name it by symbol or init_site)",
                   (unsigned long)vaddr, obj, build_id, obj, o->build_id);
        goto out;
    }
    rc = EINVAL;
    for (int i = 0; i < o->nseg; i++) {
        if (vaddr < o->seg[i].vaddr || vaddr - o->seg[i].vaddr >= o->seg[i].memsz
            || need > o->seg[i].memsz - (vaddr - o->seg[i].vaddr))
            continue;
        unsigned want = code ? PF_X : PF_W;
        if (!(o->seg[i].flags & want)) {
            seterr(err, errlen, "address 0x%lx in %s is in a segment that is not %s",
                   (unsigned long)vaddr, obj, code ? "code (executable)" : "writable data");
            goto out;
        }
        *addr = o->bias + vaddr;
        rc = 0;
        goto out;
    }
    seterr(err, errlen, "address 0x%lx in %s is outside its loaded segments",
           (unsigned long)vaddr, obj);
out:
    free(o);
    return rc;
}

struct where_ctx {
    uintptr_t addr;
    const char *exe_path;
    uintptr_t vdso;
    int first;
    int found;
    struct object *o;
};

static int visit_where(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct where_ctx *c = data;
    int first = c->first;
    c->first = 0;
    if (c->found || is_vdso(info, c->vdso))
        return 0;
    int is_exe;
    const char *label;
    if (!object_label(info, first, c->exe_path, &is_exe, &label))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && c->addr >= start && c->addr - start < ph->p_memsz) {
            object_fill(c->o, info, is_exe, label);
            c->found = 1;
            return 1;
        }
    }
    return 0;
}

/* The symbol of `kind` covering vaddr in t, preferring a global (an alias
 * of a local names the same bytes in a way every build keeps). */
static const struct sym *covering(const struct table *t, uintptr_t vaddr, enum want kind)
{
    const struct sym *best = NULL;
    for (size_t i = 0; i < t->nsyms; i++) {
        const struct sym *s = &t->syms[i];
        if (s->absolute || sym_kind(s) != (int)kind || vaddr < s->value ||
            vaddr - s->value >= (s->size ? s->size : 1))
            continue;
        if (!best || (is_local(best) && !is_local(s)))
            best = s;
    }
    return best;
}

int dm_symbols_where(uintptr_t addr, int code, struct dm_symbols_where *w)
{
    pthread_once(&init_once, init);
    memset(w, 0, sizeof *w);
    struct object *o = malloc(sizeof *o);
    if (!o)
        return ENOMEM;
    char exe[PATH_MAX];
    exe_path(exe, sizeof exe);
    struct where_ctx c = {
        .addr = addr, .exe_path = exe, .vdso = getauxval(AT_SYSINFO_EHDR), .first = 1, .o = o,
    };
    dl_iterate_phdr(visit_where, &c);
    if (!c.found) {
        free(o);
        return ENOENT;
    }
    snprintf(w->path, sizeof w->path, "%s", o->label);
    w->is_exe = o->is_exe;
    w->vaddr = addr - o->bias;
    snprintf(w->build_id, sizeof w->build_id, "%s", o->build_id);

    dm_lock(&cache_lock);
    struct table *t = NULL;
    char err[8];
    if (get_table(o, &t, err, sizeof err) == 0) {
        snprintf(w->section, sizeof w->section, "%s", t->section);
        const struct sym *s = covering(t, w->vaddr, code ? WANT_FUNC : WANT_DATA);
        if (s) {
            snprintf(w->symbol, sizeof w->symbol, "%s", s->name);
            if (is_local(s) && s->file)
                snprintf(w->file, sizeof w->file, "%s", s->file);
            w->sym_value = s->value;
            w->sym_size = s->size;
            w->sym_local = is_local(s);
        }
    }
    dm_unlock(&cache_lock);
    free(o);
    return 0;
}
