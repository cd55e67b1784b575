/* scan_files: the files of `dmutex scan` and the candidates their symbol
 * tables give: opening each (shim/elfsyms), its data symbols, copy
 * relocations and soname; the rows a variable becomes, named the way
 * shim/symbols.c resolves them; and the guesses for what debug info does
 * not describe. Prints only notes and "out of memory"; the table and the
 * config are scan.c's. */
#include "scan.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *dm_scan_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "dmutex scan: out of memory\n");
        exit(1);
    }
    return p;
}

char *dm_scan_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(dm_scan_xmalloc(n), s, n);
}

char *dm_scan_xprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) {
        fprintf(stderr, "dmutex scan: out of memory\n");
        exit(1);
    }
    va_end(ap);
    return s;
}

const char *dm_scan_base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* ---- reading a file ------------------------------------------------------- */

static int by_addr(const void *a, const void *b)
{
    const struct esym *x = a, *y = b;
    return (x->value > y->value) - (x->value < y->value);
}

int dm_scan_cmp_addr(const void *a, const void *b)
{
    GElf_Addr x = *(const GElf_Addr *)a, y = *(const GElf_Addr *)b;
    return (x > y) - (x < y);
}

/* The data objects of the file's symbol table, sorted by address. */
static void read_symbols(struct file *f)
{
    struct dm_elf_syms w;
    if (dm_elf_syms_begin(f->e.elf, &w) != 0)
        return;                 /* f->section stays NULL: nothing to map */
    f->section = w.section;
    f->syms = dm_scan_xmalloc(w.count * sizeof *f->syms);
    struct dm_elf_sym s;
    while (f->nsyms < w.count && dm_elf_syms_next(&w, &s)) {
        int type = GELF_ST_TYPE(s.info);
        if (s.shndx == SHN_ABS || (type != STT_OBJECT && type != STT_COMMON))
            continue;
        f->syms[f->nsyms++] = (struct esym){
            .name = s.name, .file = s.file, .value = s.value, .size = s.size,
            .local = GELF_ST_BIND(s.info) == STB_LOCAL,
        };
    }
    f->has_files = w.has_files;
    qsort(f->syms, f->nsyms, sizeof *f->syms, by_addr);
}

static GElf_Word copy_reloc_type(GElf_Half machine)
{
    switch (machine) {
    case EM_X86_64: return R_X86_64_COPY;
    case EM_386: return R_386_COPY;
    case EM_AARCH64: return R_AARCH64_COPY;
    case EM_ARM: return R_ARM_COPY;
    case EM_PPC: return R_PPC_COPY;
    case EM_PPC64: return R_PPC64_COPY;
    case EM_RISCV: return R_RISCV_COPY;
    case EM_S390: return R_390_COPY;
    default: return 0;
    }
}

/* Where the program holds copies of library globals (copy relocations):
 * those variables belong to their library, which is where to map them. */
static void read_copies(struct file *f, GElf_Half machine)
{
    GElf_Word copy = copy_reloc_type(machine);
    Elf_Scn *scn = NULL;
    GElf_Shdr shdr;
    size_t cap = 0;
    while (copy && (scn = elf_nextscn(f->e.elf, scn)) != NULL) {
        if (!gelf_getshdr(scn, &shdr) || shdr.sh_entsize == 0 ||
            (shdr.sh_type != SHT_RELA && shdr.sh_type != SHT_REL))
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        for (size_t i = 0; data && i < shdr.sh_size / shdr.sh_entsize; i++) {
            GElf_Addr where;
            GElf_Xword info;
            GElf_Rela rela;
            GElf_Rel rel;
            if (shdr.sh_type == SHT_RELA && gelf_getrela(data, (int)i, &rela)) {
                where = rela.r_offset;
                info = rela.r_info;
            } else if (shdr.sh_type == SHT_REL && gelf_getrel(data, (int)i, &rel)) {
                where = rel.r_offset;
                info = rel.r_info;
            } else {
                continue;
            }
            if (GELF_R_TYPE(info) != copy)
                continue;
            if (f->ncopies == cap) {
                cap = cap ? 2 * cap : 16;
                f->copies = realloc(f->copies, cap * sizeof *f->copies);
                if (!f->copies) {
                    fprintf(stderr, "dmutex scan: out of memory\n");
                    exit(1);
                }
            }
            f->copies[f->ncopies++] = where;
        }
    }
    qsort(f->copies, f->ncopies, sizeof *f->copies, dm_scan_cmp_addr);
}

/* The soname a library is loaded by, which is what its dlpi_name ends in. */
static const char *soname(Elf *elf)
{
    GElf_Shdr shdr;
    Elf_Scn *scn = dm_elf_section(elf, SHT_DYNAMIC, &shdr);
    Elf_Data *data = scn ? elf_getdata(scn, NULL) : NULL;
    if (!data || shdr.sh_entsize == 0)
        return NULL;
    for (size_t i = 0; i < shdr.sh_size / shdr.sh_entsize; i++) {
        GElf_Dyn dyn;
        if (gelf_getdyn(data, (int)i, &dyn) && dyn.d_tag == DT_SONAME)
            return elf_strptr(elf, shdr.sh_link, dyn.d_un.d_val);
    }
    return NULL;
}

static int has_interp(Elf *elf)
{
    size_t n;
    if (elf_getphdrnum(elf, &n) != 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_INTERP)
            return 1;
    }
    return 0;
}

int dm_scan_open(struct file *f, const char *path, int is_program)
{
    f->path = path;
    f->label = dm_scan_base_name(path);
    switch (dm_elf_open(&f->e, path)) {
    case DM_ELF_OPENED:
        break;
    case DM_ELF_SYSTEM:
        fprintf(stderr, "dmutex scan: %s: %s\n", path, strerror(f->e.err));
        return -1;
    case DM_ELF_NOT_REGULAR:
        fprintf(stderr, "dmutex scan: %s: not a regular file\n", path);
        return -1;
    case DM_ELF_NOT_ELF:
    case DM_ELF_LIBELF:
        fprintf(stderr, "dmutex scan: %s: not an ELF file\n", path);
        return -1;
    }
    GElf_Ehdr eh;
    if (!gelf_getehdr(f->e.elf, &eh)) {
        fprintf(stderr, "dmutex scan: %s: not an ELF file\n", path);
        return -1;
    }
    if (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) {
        fprintf(stderr, "dmutex scan: %s: %s, not a program or shared library; "
                "scan the linked file\n", path,
                eh.e_type == ET_REL ? "an object file" : eh.e_type == ET_CORE ?
                "a core dump" : "an ELF file of unknown type");
        return -1;
    }
    /* The program is the first file, unless it is a library scanned alone. */
    int library = !is_program || (eh.e_type == ET_DYN && !has_interp(f->e.elf));
    if (library) {
        const char *so = soname(f->e.elf);
        f->object = so && *so ? so : f->label;
    }
    read_symbols(f);
    read_copies(f, eh.e_machine);
    f->dw = dwarf_begin_elf(f->e.elf, DWARF_C_READ, NULL);
    return 0;
}

void dm_scan_close(struct file *f)
{
    if (f->dw)
        dwarf_end(f->dw);
    dm_elf_close(&f->e);
    free(f->syms);
    free(f->known);
    free(f->copies);
}

/* The symbol at `addr`: the global if there is one, else a local. */
const struct esym *dm_scan_symbol_at(const struct file *f, GElf_Addr addr)
{
    size_t lo = 0, hi = f->nsyms;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->syms[mid].value < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct esym *best = NULL;
    for (size_t i = lo; i < f->nsyms && f->syms[i].value == addr; i++)
        if (!best || (best->local && !f->syms[i].local))
            best = &f->syms[i];
    return best;
}

static int is_known(const struct file *f, GElf_Addr addr)
{
    return bsearch(&addr, f->known, f->nknown, sizeof *f->known, dm_scan_cmp_addr) != NULL;
}

static int is_copy(const struct file *f, GElf_Addr addr)
{
    return bsearch(&addr, f->copies, f->ncopies, sizeof *f->copies, dm_scan_cmp_addr) != NULL;
}

/* ---- rows ------------------------------------------------------------------ */

/* gcc's name for a function-scope static: "name.N". */
static size_t numbered_len(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name || !dot[1])
        return strlen(name);
    for (const char *p = dot + 1; *p; p++)
        if (!isdigit((unsigned char)*p))
            return strlen(name);
    return (size_t)(dot - name);
}

/* How the config names symbol `s`: "sym", or "file.c:sym" for a local.
 * A function-static "lock.0" is written "file.c:lock" when no other local
 * of that file answers to "lock", as symbols.c resolves it. */
static char *config_symbol(const struct file *f, const struct esym *s)
{
    if (!s->local || !s->file)
        return dm_scan_xstrdup(s->name);
    size_t full = strlen(s->name), len = numbered_len(s->name);
    for (size_t i = 0; i < f->nsyms && len < full; i++) {
        const struct esym *o = &f->syms[i];
        if (o != s && o->local && o->file && strcmp(o->file, s->file) == 0 &&
            numbered_len(o->name) == len && strncmp(o->name, s->name, len) == 0)
            len = full;         /* "lock" would be ambiguous in that file */
    }
    return dm_scan_xprintf("%s:%.*s", s->file, (int)len, s->name);
}

static struct row *add_row(struct scan *sc)
{
    if (sc->nrows == sc->caprows) {
        sc->caprows = sc->caprows ? 2 * sc->caprows : 64;
        struct row *r = realloc(sc->rows, sc->caprows * sizeof *r);
        if (!r) {
            fprintf(stderr, "dmutex scan: out of memory\n");
            exit(1);
        }
        sc->rows = r;
    }
    struct row *r = &sc->rows[sc->nrows++];
    memset(r, 0, sizeof *r);
    return r;
}

/* "[2].lock" -> "_2.lock": brackets are not allowed in lock names. */
static char *name_suffix(const char *path)
{
    char *s = dm_scan_xstrdup(path), *w = s;
    for (const char *p = path; *p; p++) {
        if (*p == '[')
            *w++ = '_';
        else if (*p != ']')
            *w++ = *p;
    }
    *w = '\0';
    return s;
}

/* Adds the rows of one variable: its hits, at most MAX_PER_VAR of them. */
void dm_scan_add_hits(struct scan *sc, const struct file *f, enum how how,
                     const struct esym *s, const char *display_name,
                     const char *base_name_, GElf_Xword size, const struct hits *h,
                     const char *note)
{
    for (size_t i = 0; i < h->n; i++) {
        struct row *r = add_row(sc);
        char *suffix = name_suffix(h->v[i].path);
        r->f = f;
        r->how = how;
        r->kind = h->v[i].kind;
        r->symbol = s ? config_symbol(f, s) : dm_scan_xstrdup(display_name);
        r->display = dm_scan_xprintf("%s%s", display_name, h->v[i].path);
        r->base = dm_scan_xprintf("%s%s", base_name_, suffix);
        r->source = s && s->local ? s->file : NULL;
        r->stem_from = r->source ? r->source : f->object;
        r->type = h->v[i].type;
        r->note = note;
        r->size = size;
        r->addr = s ? s->value : 0;
        r->offset = h->v[i].offset;
        r->more = i + 1 == h->n ? h->total - (long)h->n : 0;
        free(suffix);
    }
}

/* ---- hits ------------------------------------------------------------------ */

void dm_scan_hit(struct hits *h, long offset, const char *path, const char *type,
                 enum kind kind)
{
    h->total++;
    if (h->n == MAX_PER_VAR)
        return;
    struct hit *x = &h->v[h->n++];
    x->offset = offset;
    snprintf(x->path, sizeof x->path, "%s", path);
    x->type = type;
    x->kind = kind;
}

/* ---- guesses ----------------------------------------------------------------- */

/* The name without gcc's ".N", in lower case (to be freed). */
static char *lower_name(const char *name)
{
    char *s = dm_scan_xprintf("%.*s", (int)numbered_len(name), name);
    for (char *p = s; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return s;
}

/* contains mutex, mtx or lock (but not block/clock), or ends in _m */
static int lockish(const char *name)
{
    char *s = lower_name(name);
    size_t len = strlen(s);
    int yes = strstr(s, "mutex") || strstr(s, "mtx") ||
              (len >= 2 && strcmp(s + len - 2, "_m") == 0);
    for (const char *p = s; !yes && (p = strstr(p, "lock")) != NULL; p++)
        yes = p == s || (p[-1] != 'b' && p[-1] != 'c');
    free(s);
    return yes;
}

/* contains rwlock, rw_lock, rwmutex, rw_mutex or shared_mutex */
static int rwlockish(const char *name)
{
    static const char *const words[] = { "rwlock", "rw_lock", "rwmutex", "rw_mutex",
                                         "shared_mutex" };
    char *s = lower_name(name);
    int yes = 0;
    for (size_t i = 0; !yes && i < sizeof words / sizeof words[0]; i++)
        yes = strstr(s, words[i]) != NULL;
    free(s);
    return yes;
}

/* contains cond (but not second), or cv as a word: cv, ready_cv, cv_done */
static int condish(const char *name)
{
    char *s = lower_name(name);
    int yes = 0;
    for (const char *p = s; !yes && (p = strstr(p, "cond")) != NULL; p++)
        yes = p < s + 2 || strncmp(p - 2, "se", 2) != 0;
    for (const char *p = s; !yes && (p = strstr(p, "cv")) != NULL; p++)
        yes = (p == s || !isalpha((unsigned char)p[-1])) && !isalpha((unsigned char)p[2]);
    free(s);
    return yes;
}

/* What the symbol table alone says of a data object, in the order the
 * names are most specific: an rwlock-like name of a pthread_rwlock_t's
 * size (or a multiple), a lock-like name of a mutex's, a cond-like name
 * of a pthread_cond_t's, a lock-like name of an rwlock's; with --all the
 * weak ones. Returns 0 when it is no candidate. */
struct guess {
    enum how how;
    enum kind kind;
    size_t elem;                /* the size of one object; 0: one row at offset ? */
    const char *note, *type;
};

static int guess(const struct scan *sc, const struct esym *s, struct guess *g)
{
    int lock = lockish(s->name), rw = rwlockish(s->name), cond = condish(s->name);
    int fits = s->size % MUTEX_SIZE == 0;
    int fits_cond = s->size % COND_SIZE == 0, fits_rw = s->size % RWLOCK_SIZE == 0;
    *g = (struct guess){ .how = HOW_GUESS, .kind = KIND_MUTEX, .elem = MUTEX_SIZE, .type = "?",
                         .note = "guess: no debug info; size and name" };
    if ((rw || lock) && fits_rw && (rw || !fits)) {
        g->kind = KIND_RWLOCK;
        g->elem = RWLOCK_SIZE;
        g->type = "? (rwlock)";
        g->note = "guess: no debug info; size (pthread_rwlock_t) and name";
    } else if (lock && fits) {
        /* a mutex, as above */
    } else if (cond && fits_cond) {
        g->kind = KIND_COND;
        g->elem = COND_SIZE;
        g->type = "? (cond)";
        g->note = "guess: no debug info; size (pthread_cond_t) and name";
    } else if (sc->all && fits) {
        g->how = HOW_WEAK;
        g->type = s->size > MUTEX_SIZE ? "? (array?)" : "?";
        g->note = "weak: size fits, the name is not lock-like";
    } else if (sc->all && lock && s->size > MUTEX_SIZE) {
        g->how = HOW_WEAK;
        g->elem = 0;
        g->type = "? (struct?)";
        g->note = "weak: a lock-like name, but where is its mutex?";
    } else if (sc->all && cond && s->size > COND_SIZE) {
        g->how = HOW_WEAK;
        g->kind = KIND_COND;
        g->elem = 0;
        g->type = "? (struct?)";
        g->note = "weak: a cond-like name, but where is its pthread_cond_t?";
    } else {
        return 0;
    }
    return 1;
}

/* Whether another file of the scan defines global `name` (its library). */
static int defined_elsewhere(const struct scan *sc, const struct file *f, const char *name)
{
    for (size_t i = 0; i < sc->nfiles; i++)
        for (size_t k = 0; &sc->files[i] != f && k < sc->files[i].nsyms; k++)
            if (!sc->files[i].syms[k].local && strcmp(sc->files[i].syms[k].name, name) == 0)
                return 1;
    return 0;
}

void dm_scan_guesses(struct scan *sc, struct file *f)
{
    for (size_t i = 0; i < f->nsyms; i++) {
        const struct esym *s = &f->syms[i];
        struct guess g;
        if (s->size == 0 || is_known(f, s->value) || !guess(sc, s, &g))
            continue;
        if (is_copy(f, s->value)) {
            if (g.how == HOW_GUESS && !defined_elsewhere(sc, f, s->name))
                fprintf(stderr, "dmutex scan: note: %s holds a copy of the library "
                        "global %s (copy relocation): scan that library to list it\n",
                        f->path, s->name);
            continue;
        }
        if (dm_scan_symbol_at(f, s->value) != s)
            continue;           /* an alias: list each address once */

        struct hits *h = dm_scan_xmalloc(sizeof *h);
        h->n = 0;
        h->total = 0;
        h->nforeign = 0;
        /* A guess lists every element; a weak candidate, one row. */
        long n = g.elem ? (long)(s->size / g.elem) : 1;
        if (g.how == HOW_WEAK)
            dm_scan_hit(h, g.elem ? 0 : -1, "", g.type, g.kind);
        for (long k = 0; g.how == HOW_GUESS && k < n; k++) {
            char p[32] = "";
            if (n > 1)
                snprintf(p, sizeof p, "[%ld]", k);
            dm_scan_hit(h, k * (long)g.elem, p, g.type, g.kind);
        }
        char *src = dm_scan_xprintf("%.*s", (int)numbered_len(s->name), s->name);
        dm_scan_add_hits(sc, f, g.how, s, s->local ? src : s->name, s->local ? src : s->name,
                 s->size, h, g.note);
        free(src);
        free(h);
    }
}
