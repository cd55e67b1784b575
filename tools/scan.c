/* dmutex scan: which mutex variables does a program (and its libraries)
 * define, and what config entries would map them. Reads the files from
 * disk, never runs them.
 *
 * Debug info (libdw) is the sure source: a variable whose type is, or
 * contains, pthread_mutex_t or a std:: mutex is listed with the offset of
 * every mutex inside it. Without debug info the symbol table (libelf) still
 * has names and sizes, and a data object of sizeof(pthread_mutex_t) bytes
 * (or a multiple) with a lock-like name is a good guess. The config entries
 * name symbols the way shim/symbols.c resolves them: "sym", or
 * "file.c:sym" for a file-static, plus offset and object. */
#include "cli.h"
#include "elfsyms.h"

#include <ctype.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MUTEX_SIZE     sizeof(pthread_mutex_t)  /* 40 on x86-64 and aarch64 glibc */
#define MAX_PER_VAR    64       /* mutexes listed per variable; the rest are counted */
#define MAX_DEPTH      32       /* nesting of struct/array types followed */
#define PATH_LEN       256      /* "member[3].lock" suffix of one mutex */

enum how { HOW_DWARF, HOW_GUESS, HOW_WEAK };
static const char *const how_names[] = { "dwarf", "guess", "weak" };

/* A defined data symbol of one file, with the STT_FILE before it (locals). */
struct esym {
    const char *name;
    const char *file;
    GElf_Addr value;
    GElf_Xword size;
    int local;
};

struct file {
    const char *path;           /* as given */
    const char *label;          /* file name, for the table */
    const char *object;         /* config object, NULL for the program */
    struct dm_elf e;
    Dwarf *dw;                  /* NULL: no debug info */
    const char *section;        /* ".symtab", ".dynsym" or NULL */
    struct esym *syms;          /* data objects, sorted by address */
    size_t nsyms;
    GElf_Addr *known;           /* addresses debug info describes, sorted */
    size_t nknown, capknown;
    GElf_Addr *copies;          /* targets of copy relocations, sorted */
    size_t ncopies;
    int has_files;              /* the symbol table names source files */
};

/* One mutex found: a row of the table and an entry of the config. */
struct row {
    const struct file *f;
    enum how how;
    char *symbol;               /* as the config writes it */
    char *display;              /* MUTEX column: "inventory.lock", "slots[2]" */
    char *base;                 /* proposed lock name before making names unique */
    char *name;                 /* lock name */
    const char *source;         /* STT_FILE of a file-static, else NULL */
    const char *stem_from;      /* what disambiguates a clashing name */
    const char *type;
    const char *note;           /* why a guess is a guess */
    int ambiguous;              /* its symbol names several variables */
    GElf_Addr addr;             /* of the symbol, to tell variables apart */
    GElf_Xword size;
    long offset;                /* -1: unknown */
    long more;                  /* mutexes of this variable not listed after this row */
};

struct scan {
    int all, config_only;
    struct file *files;
    size_t nfiles;
    struct row *rows;
    size_t nrows, caprows;
};

/* A mutex inside a variable's type, relative to its start. */
struct hit {
    long offset;
    char path[PATH_LEN];
    const char *type;
};

struct hits {
    struct hit v[MAX_PER_VAR];
    size_t n;                   /* kept */
    long total;                 /* found, kept or not */
};

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "dmutex scan: out of memory\n");
        exit(1);
    }
    return p;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *xprintf(const char *fmt, ...)
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

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* ---- usage ---------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
"Usage: dmutex scan [--all] [--config] PROGRAM [LIBRARY...]\n"
"\n"
"List the pthread mutexes that PROGRAM and the given shared LIBRARYs hold in\n"
"variables, and print the config entries that would map them. The files are\n"
"read from disk, not run; give each library whose mutexes you want to see.\n"
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
"          std::mutex, std::recursive_mutex or std::timed_mutex.\n"
"  guess   no debug info for it, but it is a data object of exactly %zu bytes\n"
"          (sizeof(pthread_mutex_t)), or an array of them, with a lock-like\n"
"          name: it contains \"mutex\", \"mtx\" or \"lock\" (not as in block or\n"
"          clock), or ends in \"_m\".\n"
"  weak    (only with --all) a %zu-byte multiple without such a name, or a\n"
"          lock-like name of another size; their entries are commented out.\n"
"\n"
"After the table comes a mutexes = ( ... ); block ready to paste into the\n"
"dmutex config. A file-static is written \"file.c:sym\"; an entry of a\n"
"library carries object = \"its soname\"; lock names are made unique.\n"
"Build with -g for sure answers; a stripped file shows only exported symbols.\n"
"\n"
"Options:\n"
"  --all        also list weak candidates\n"
"  --config     print only the mutexes = ( ... ); block\n"
"  -h, --help   print this help and exit\n"
"\n"
"Exit status: 0 when every file was read (even if no mutex was found), 1 when\n"
"a file cannot be read or is not a program or library, 2 on a usage error.\n"
"\n"
"Examples:\n"
"  dmutex scan ./stock\n"
"  dmutex scan --config /usr/bin/app /usr/lib/libledger.so.1 >> app.cfg\n",
            MUTEX_SIZE, MUTEX_SIZE);
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

/* ---- reading a file ------------------------------------------------------- */

static int by_addr(const void *a, const void *b)
{
    const struct esym *x = a, *y = b;
    return (x->value > y->value) - (x->value < y->value);
}

static int cmp_addr(const void *a, const void *b)
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
    f->syms = xmalloc(w.count * sizeof *f->syms);
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
    qsort(f->copies, f->ncopies, sizeof *f->copies, cmp_addr);
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

static int open_file(struct file *f, const char *path, int is_program)
{
    f->path = path;
    f->label = base_name(path);
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

static void close_file(struct file *f)
{
    if (f->dw)
        dwarf_end(f->dw);
    dm_elf_close(&f->e);
    free(f->syms);
    free(f->known);
    free(f->copies);
}

/* The symbol at `addr`: the global if there is one, else a local. */
static const struct esym *symbol_at(const struct file *f, GElf_Addr addr)
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
    return bsearch(&addr, f->known, f->nknown, sizeof *f->known, cmp_addr) != NULL;
}

static int is_copy(const struct file *f, GElf_Addr addr)
{
    return bsearch(&addr, f->copies, f->ncopies, sizeof *f->copies, cmp_addr) != NULL;
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
        return xstrdup(s->name);
    size_t full = strlen(s->name), len = numbered_len(s->name);
    for (size_t i = 0; i < f->nsyms && len < full; i++) {
        const struct esym *o = &f->syms[i];
        if (o != s && o->local && o->file && strcmp(o->file, s->file) == 0 &&
            numbered_len(o->name) == len && strncmp(o->name, s->name, len) == 0)
            len = full;         /* "lock" would be ambiguous in that file */
    }
    return xprintf("%s:%.*s", s->file, (int)len, s->name);
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
    char *s = xstrdup(path), *w = s;
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
static void add_hits(struct scan *sc, const struct file *f, enum how how,
                     const struct esym *s, const char *display_name,
                     const char *base_name_, GElf_Xword size, const struct hits *h,
                     const char *note)
{
    for (size_t i = 0; i < h->n; i++) {
        struct row *r = add_row(sc);
        char *suffix = name_suffix(h->v[i].path);
        r->f = f;
        r->how = how;
        r->symbol = s ? config_symbol(f, s) : xstrdup(display_name);
        r->display = xprintf("%s%s", display_name, h->v[i].path);
        r->base = xprintf("%s%s", base_name_, suffix);
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

/* ---- debug info ------------------------------------------------------------ */

static void hit(struct hits *h, long offset, const char *path, const char *type)
{
    h->total++;
    if (h->n == MAX_PER_VAR)
        return;
    struct hit *x = &h->v[h->n++];
    x->offset = offset;
    snprintf(x->path, sizeof x->path, "%s", path);
    x->type = type;
}

static int type_of(Dwarf_Die *die, Dwarf_Die *type)
{
    Dwarf_Attribute attr;
    return dwarf_attr_integrate(die, DW_AT_type, &attr) && dwarf_formref_die(&attr, type) ? 0 : -1;
}

static const char *const std_mutexes[][2] = {
    { "mutex", "std::mutex" },
    { "recursive_mutex", "std::recursive_mutex" },
    { "timed_mutex", "std::timed_mutex" },
    { "recursive_timed_mutex", "std::recursive_timed_mutex" },
};

/* "std::mutex" when `die` is one of the std:: mutex classes (directly in
 * std, or in an inline namespace of it), else NULL. */
static const char *std_mutex(Dwarf_Die *die)
{
    const char *name = dwarf_diename(die);
    const char *which = NULL;
    for (size_t i = 0; name && i < sizeof std_mutexes / sizeof std_mutexes[0]; i++)
        if (strcmp(name, std_mutexes[i][0]) == 0)
            which = std_mutexes[i][1];
    if (!which)
        return NULL;
    Dwarf_Die *scopes = NULL;
    int n = dwarf_getscopes_die(die, &scopes);
    int in_std = 0;
    for (int i = 1; i < n && i <= 2 && !in_std; i++) {
        const char *ns = dwarf_diename(&scopes[i]);
        if (dwarf_tag(&scopes[i]) != DW_TAG_namespace)
            break;
        in_std = ns && strcmp(ns, "std") == 0;
    }
    free(scopes);
    return in_std ? which : NULL;
}

static long member_offset(Dwarf_Die *member)
{
    Dwarf_Attribute attr;
    Dwarf_Word off = 0;
    if (!dwarf_attr(member, DW_AT_data_member_location, &attr))
        return 0;               /* a union member */
    if (dwarf_formudata(&attr, &off) == 0)
        return (long)off;
    Dwarf_Op *ops;
    size_t n;
    if (dwarf_getlocation(&attr, &ops, &n) == 0 && n == 1 && ops[0].atom == DW_OP_plus_uconst)
        return (long)ops[0].number;
    return -1;
}

static void find_mutexes(Dwarf_Die *type, long base, const char *path, struct hits *h,
                         int depth);

static void find_in_array(Dwarf_Die *array, long base, const char *path, struct hits *h,
                          int depth)
{
    Dwarf_Die elem, child;
    Dwarf_Word elem_size;
    if (type_of(array, &elem) != 0 || dwarf_aggregate_size(&elem, &elem_size) != 0 ||
        elem_size == 0)
        return;
    long dims[8];
    int ndims = 0;
    long count = 1;
    if (dwarf_child(array, &child) == 0) {
        do {
            if (dwarf_tag(&child) != DW_TAG_subrange_type || ndims == 8)
                continue;
            Dwarf_Attribute attr;
            Dwarf_Word v;
            long d = 0;
            if (dwarf_attr(&child, DW_AT_count, &attr) && dwarf_formudata(&attr, &v) == 0)
                d = (long)v;
            else if (dwarf_attr(&child, DW_AT_upper_bound, &attr) &&
                     dwarf_formudata(&attr, &v) == 0 && (Dwarf_Sword)v >= 0)
                d = (long)v + 1;
            dims[ndims++] = d;
            count *= d;
        } while (dwarf_siblingof(&child, &child) == 0);
    }
    if (ndims == 0 || count <= 0)
        return;                 /* flexible or unknown bound */

    /* Rows of one element (elements of an inner dimension are whole
     * arrays here, so the element type is the innermost one). */
    struct hits *inner = xmalloc(sizeof *inner);
    inner->n = 0;
    inner->total = 0;
    find_mutexes(&elem, 0, "", inner, depth + 1);
    for (long i = 0; i < count && inner->total > 0; i++) {
        char idx[PATH_LEN] = "";
        long rest = i;
        for (int d = ndims - 1; d >= 0; d--) {
            char one[32], tmp[PATH_LEN];
            snprintf(one, sizeof one, "[%ld]", rest % dims[d]);
            rest /= dims[d];
            if (snprintf(tmp, sizeof tmp, "%s%s", one, idx) >= (int)sizeof tmp)
                break;          /* absurdly deep: keep the indexes that fit */
            memcpy(idx, tmp, sizeof idx);
        }
        for (size_t k = 0; k < inner->n; k++) {
            char p[PATH_LEN];
            if (snprintf(p, sizeof p, "%s%s%s", path, idx, inner->v[k].path) >= (int)sizeof p)
                continue;       /* a member path longer than PATH_LEN: not listed */
            hit(h, base + i * (long)elem_size + inner->v[k].offset, p, inner->v[k].type);
        }
        h->total += inner->total - (long)inner->n;
    }
    free(inner);
}

/* Adds every mutex that a value of type `type` at `base` holds. */
static void find_mutexes(Dwarf_Die *type, long base, const char *path, struct hits *h,
                         int depth)
{
    Dwarf_Die die = *type, next, child;
    for (int hops = 0; depth < MAX_DEPTH && hops < MAX_DEPTH; hops++) {
        const char *name = dwarf_diename(&die);
        const char *std;
        switch (dwarf_tag(&die)) {
        case DW_TAG_typedef:
            if (name && strcmp(name, "pthread_mutex_t") == 0) {
                hit(h, base, path, "pthread_mutex_t");
                return;
            }
            /* fall through */
        case DW_TAG_const_type:
        case DW_TAG_volatile_type:
        case DW_TAG_atomic_type:
            if (type_of(&die, &next) != 0)
                return;
            die = next;
            continue;
        case DW_TAG_array_type:
            find_in_array(&die, base, path, h, depth);
            return;
        case DW_TAG_structure_type:
        case DW_TAG_class_type:
        case DW_TAG_union_type:
            if ((std = std_mutex(&die)) != NULL) {
                hit(h, base, path, std);
                return;
            }
            if (dwarf_child(&die, &child) != 0)
                return;
            do {
                int tag = dwarf_tag(&child);
                if ((tag != DW_TAG_member && tag != DW_TAG_inheritance) ||
                    dwarf_hasattr(&child, DW_AT_declaration))
                    continue;           /* a static member lives elsewhere */
                long off = member_offset(&child);
                if (off < 0 || type_of(&child, &next) != 0)
                    continue;
                char p[PATH_LEN];
                const char *mname = dwarf_diename(&child);
                if (tag == DW_TAG_member && mname)
                    snprintf(p, sizeof p, "%s.%s", path, mname);
                else
                    snprintf(p, sizeof p, "%s", path);      /* base class, anonymous */
                find_mutexes(&next, base + off, p, h, depth + 1);
            } while (dwarf_siblingof(&child, &child) == 0);
            return;
        default:
            return;             /* scalars, pointers, enums, functions */
        }
    }
}

/* The static address of a variable, from a location that is just that. */
static int static_address(Dwarf_Die *var, GElf_Addr *addr)
{
    Dwarf_Attribute attr;
    Dwarf_Op *ops;
    size_t n;
    if (!dwarf_attr(var, DW_AT_location, &attr) || dwarf_getlocation(&attr, &ops, &n) != 0 ||
        n != 1)
        return -1;
    if (ops[0].atom == DW_OP_addr) {
        *addr = ops[0].number;
        return 0;
    }
    if (ops[0].atom == DW_OP_addrx || ops[0].atom == DW_OP_GNU_addr_index) {
        Dwarf_Attribute res;
        Dwarf_Addr a;
        if (dwarf_getlocation_attr(&attr, &ops[0], &res) == 0 && dwarf_formaddr(&res, &a) == 0) {
            *addr = a;
            return 0;
        }
    }
    return -1;                  /* on the stack, thread-local, or computed */
}

/* "app::ns_lock" for a C++ variable in a namespace, else its plain name. */
static char *qualified_name(Dwarf_Die *var)
{
    Dwarf_Die decl = *var, *scopes = NULL;
    Dwarf_Attribute attr;
    if (dwarf_attr(var, DW_AT_specification, &attr))
        dwarf_formref_die(&attr, &decl);
    const char *name = dwarf_diename(&decl);
    if (!name)
        return NULL;
    int n = dwarf_getscopes_die(&decl, &scopes);
    char *q = xstrdup(name);
    for (int i = 1; i < n; i++) {
        int tag = dwarf_tag(&scopes[i]);
        const char *s = dwarf_diename(&scopes[i]);
        if (!s || (tag != DW_TAG_namespace && tag != DW_TAG_structure_type &&
                   tag != DW_TAG_class_type))
            continue;
        char *nq = xprintf("%s::%s", s, q);
        free(q);
        q = nq;
    }
    free(scopes);
    return q;
}

static void remember(struct file *f, GElf_Addr addr)
{
    if (f->nknown == f->capknown) {
        f->capknown = f->capknown ? 2 * f->capknown : 256;
        GElf_Addr *k = realloc(f->known, f->capknown * sizeof *k);
        if (!k) {
            fprintf(stderr, "dmutex scan: out of memory\n");
            exit(1);
        }
        f->known = k;
    }
    f->known[f->nknown++] = addr;
}

static void variable(struct scan *sc, struct file *f, Dwarf_Die *var)
{
    GElf_Addr addr;
    Dwarf_Die type;
    if (static_address(var, &addr) != 0)
        return;
    for (size_t i = 0; i < f->nknown; i++)
        if (f->known[i] == addr)
            return;             /* the same variable, seen again (inlined) */
    remember(f, addr);
    if (type_of(var, &type) != 0)
        return;
    struct hits *h = xmalloc(sizeof *h);
    h->n = 0;
    h->total = 0;
    find_mutexes(&type, 0, "", h, 0);
    if (h->total > 0) {
        const struct esym *s = symbol_at(f, addr);
        char *qname = qualified_name(var);
        const char *display = qname ? qname : s ? s->name : "?";
        Dwarf_Word size = s ? s->size : 0;
        if (!s)
            dwarf_aggregate_size(&type, &size);
        /* A static's lock name is its source name; a C++ global's, its
         * qualified name; a C global's, the symbol. */
        add_hits(sc, f, HOW_DWARF, s, display, display, size, h, NULL);
        free(qname);
    }
    free(h);
}

static void walk(struct scan *sc, struct file *f, Dwarf_Die *die, int depth)
{
    Dwarf_Die child;
    if (depth > MAX_DEPTH || dwarf_child(die, &child) != 0)
        return;
    do {
        switch (dwarf_tag(&child)) {
        case DW_TAG_variable:
            variable(sc, f, &child);
            break;
        case DW_TAG_subprogram:         /* function-scope statics */
        case DW_TAG_lexical_block:
        case DW_TAG_namespace:
        case DW_TAG_module:
            walk(sc, f, &child, depth + 1);
            break;
        default:
            break;
        }
    } while (dwarf_siblingof(&child, &child) == 0);
}

static void scan_dwarf(struct scan *sc, struct file *f)
{
    Dwarf_Off off = 0, next;
    size_t hsize;
    while (dwarf_nextcu(f->dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
        Dwarf_Die cu;
        if (dwarf_offdie(f->dw, off + hsize, &cu))
            walk(sc, f, &cu, 0);
        off = next;
    }
    qsort(f->known, f->nknown, sizeof *f->known, cmp_addr);
}

/* ---- guesses ----------------------------------------------------------------- */

/* contains mutex, mtx or lock (but not block/clock), or ends in _m */
static int lockish(const char *name)
{
    size_t len = numbered_len(name);
    char *s = xprintf("%.*s", (int)len, name);
    for (char *p = s; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    int yes = strstr(s, "mutex") || strstr(s, "mtx") ||
              (len >= 2 && strcmp(s + len - 2, "_m") == 0);
    for (const char *p = s; !yes && (p = strstr(p, "lock")) != NULL; p++)
        yes = p == s || (p[-1] != 'b' && p[-1] != 'c');
    free(s);
    return yes;
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

static void scan_guesses(struct scan *sc, struct file *f)
{
    for (size_t i = 0; i < f->nsyms; i++) {
        const struct esym *s = &f->syms[i];
        if (s->size == 0 || is_known(f, s->value))
            continue;
        if (is_copy(f, s->value)) {
            if (lockish(s->name) && s->size % MUTEX_SIZE == 0 && !defined_elsewhere(sc, f, s->name))
                fprintf(stderr, "dmutex scan: note: %s holds a copy of the library "
                        "global %s (copy relocation): scan that library to list it\n",
                        f->path, s->name);
            continue;
        }
        if (symbol_at(f, s->value) != s)
            continue;           /* an alias: list each address once */
        int named = lockish(s->name);
        int fits = s->size % MUTEX_SIZE == 0;
        enum how how;
        const char *note;
        if (named && fits) {
            how = HOW_GUESS;
            note = "guess: no debug info; size and name";
        } else if (sc->all && fits) {
            how = HOW_WEAK;
            note = "weak: size fits, the name is not lock-like";
        } else if (sc->all && named && s->size > MUTEX_SIZE) {
            how = HOW_WEAK;
            note = "weak: a lock-like name, but where is its mutex?";
        } else {
            continue;
        }

        struct hits *h = xmalloc(sizeof *h);
        h->n = 0;
        h->total = 0;
        /* A guess lists every element; a weak candidate, one row. */
        long n = fits ? (long)(s->size / MUTEX_SIZE) : 1;
        if (how == HOW_WEAK)
            hit(h, fits ? 0 : -1, "", !fits ? "? (struct?)" : n > 1 ? "? (array?)" : "?");
        for (long k = 0; how == HOW_GUESS && k < n; k++) {
            char p[32] = "";
            if (n > 1)
                snprintf(p, sizeof p, "[%ld]", k);
            hit(h, k * (long)MUTEX_SIZE, p, "?");
        }
        char *src = xprintf("%.*s", (int)numbered_len(s->name), s->name);
        add_hits(sc, f, how, s, s->local ? src : s->name, s->local ? src : s->name,
                 s->size, h, note);
        free(src);
        free(h);
    }
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
    const char *b = base_name(file);
    size_t n = strcspn(b, ".");
    return xprintf("%.*s", (int)(n ? n : strlen(b)), b);
}

/* Lock names must differ: a clash (the same static in two files, the same
 * global in two objects) is prefixed with the file's or object's stem, and
 * numbered if that is not enough. */
static void unique_names(struct scan *sc)
{
    for (size_t i = 0; i < sc->nrows; i++)
        sc->rows[i].name = xstrdup(sc->rows[i].base);
    for (size_t i = 0; i < sc->nrows; i++) {
        int clash = 0;
        for (size_t j = 0; j < sc->nrows && !clash; j++)
            clash = j != i && strcmp(sc->rows[i].base, sc->rows[j].base) == 0;
        if (clash && sc->rows[i].stem_from) {
            char *st = stem(sc->rows[i].stem_from);
            free(sc->rows[i].name);
            sc->rows[i].name = xprintf("%s_%s", st, sc->rows[i].base);
            free(st);
        }
    }
    for (size_t i = 0; i < sc->nrows; i++) {
        int seq = 1;
        for (size_t j = 0; j < i; j++) {
            if (strcmp(sc->rows[i].name, sc->rows[j].name) == 0) {
                char *n = xprintf("%s_%d", sc->rows[i].base, ++seq);
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
        printf("  # ... %ld more mutexes in %s are not listed: add them by offset\n",
               r->more, r->symbol);
}

static void print_config(const struct scan *sc)
{
    size_t last = sc->nrows;
    for (size_t i = 0; i < sc->nrows; i++)
        if (sc->rows[i].how != HOW_WEAK && !sc->rows[i].ambiguous)
            last = i;
    printf("mutexes = (\n");
    for (size_t i = 0; i < sc->nrows; i++)
        print_entry(&sc->rows[i], i == last);
    printf(");\n");
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
    sc.files = xmalloc(sc.nfiles * sizeof *sc.files);
    int rc = 0;
    for (size_t i = 0; i < sc.nfiles; i++) {
        memset(&sc.files[i], 0, sizeof sc.files[i]);
        sc.files[i].e.fd = -1;
    }
    for (size_t i = 0; i < sc.nfiles && rc == 0; i++)
        if (open_file(&sc.files[i], argv[optind + (int)i], i == 0) != 0)
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
            scan_dwarf(&sc, f);
        else if (f->section)
            fprintf(stderr, "dmutex scan: note: %s has no debug info: mutexes are "
                    "guessed from size and name (build with -g to be sure)\n", f->path);
        scan_guesses(&sc, f);
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
        close_file(&sc.files[i]);
    free(sc.files);
    return rc;
}
