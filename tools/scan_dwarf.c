/* scan_dwarf: the debug-info walk of `dmutex scan` (libdw). Every
 * variable with a static address whose type is, or contains, a
 * pthread_mutex_t, a C11 mtx_t or a std:: mutex (a pthread_cond_t, cnd_t
 * or std::condition_variable; a pthread_rwlock_t or std::shared_mutex)
 * becomes rows (dm_scan_add_hits), one per object with its kind, offset
 * and member path; the addresses it saw go to f->known so the
 * symbol-table guesses skip them. A lock of a kind the shim does not
 * interpose (dm_scan_foreign_types: GLib's, a spin lock) is no row, and
 * nothing inside it is looked at (a GStaticMutex's unused
 * pthread_mutex_t); a note on stderr says why, the only thing printed.
 * dm_scan_dwarf_at answers `dmutex check`: which lock is at an address. */
#include "scan.h"

#include <dwarf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int type_of(Dwarf_Die *die, Dwarf_Die *type)
{
    Dwarf_Attribute attr;
    return dwarf_attr_integrate(die, DW_AT_type, &attr) && dwarf_formref_die(&attr, type) ? 0 : -1;
}

/* The pthread types by their typedef names, and C11's (glibc's mtx_t is
 * a pthread_mutex_t and its cnd_t a pthread_cond_t, and the shim
 * interposes mtx_* and cnd_*). */
static const struct { const char *name; enum kind kind; } pthread_types[] = {
    { "pthread_mutex_t", KIND_MUTEX },
    { "pthread_cond_t", KIND_COND },
    { "pthread_rwlock_t", KIND_RWLOCK },
    { "mtx_t", KIND_MUTEX },
    { "cnd_t", KIND_COND },
};

#define GLIB_FUTEX_MUTEX "GLib locks it with a futex of its own (g_mutex_lock), never " \
                         "through pthread_mutex_lock or mtx_lock"
#define GLIB_FUTEX_COND  "GLib waits and wakes on it with a futex of its own (g_cond_wait, " \
                         "g_cond_signal), never through pthread_cond_* or cnd_*"
#define GLIB_HEAP_MUTEX  "GLib locks a pthread_mutex_t it allocates on the heap, which the " \
                         "variable only points to: no symbol names that mutex"
#define GLIB_HEAP_RWLOCK "GLib locks a pthread_rwlock_t it allocates on the heap, which the " \
                         "variable only points to: no symbol names that rwlock"
#define GLIB_STATIC      "a deprecated GLib lock: GLib locks the GMutex it points to, with a " \
                         "futex of its own; its pthread_mutex_t member is unused (kept for " \
                         "ABI compatibility)"

const struct foreign_type dm_scan_foreign_types[] = {
    { "GMutex", "GMutex", GLIB_FUTEX_MUTEX },
    { "_GMutex", "GMutex", GLIB_FUTEX_MUTEX },
    { "GCond", "GCond", GLIB_FUTEX_COND },
    { "_GCond", "GCond", GLIB_FUTEX_COND },
    { "GRecMutex", "GRecMutex", GLIB_HEAP_MUTEX },
    { "_GRecMutex", "GRecMutex", GLIB_HEAP_MUTEX },
    { "GRWLock", "GRWLock", GLIB_HEAP_RWLOCK },
    { "_GRWLock", "GRWLock", GLIB_HEAP_RWLOCK },
    { "GStaticMutex", "GStaticMutex", GLIB_STATIC },
    { "GStaticRecMutex", "GStaticRecMutex", GLIB_STATIC },
    { "_GStaticRecMutex", "GStaticRecMutex", GLIB_STATIC },
    { "GStaticRWLock", "GStaticRWLock", GLIB_STATIC },
    { "_GStaticRWLock", "GStaticRWLock", GLIB_STATIC },
    { "pthread_spinlock_t", "pthread_spinlock_t",
      "a spin lock: pthread_spin_lock and pthread_spin_unlock are not interposed" },
    { NULL, NULL, NULL },
};

static const struct foreign_type *foreign_type(const char *name)
{
    for (const struct foreign_type *t = dm_scan_foreign_types; name && t->name; t++)
        if (strcmp(name, t->name) == 0)
            return t;
    return NULL;
}

static void foreign_hit(struct hits *h, long offset, const char *path,
                        const struct foreign_type *t)
{
    if (h->nforeign++ == 0) {
        h->foreign.offset = offset;
        snprintf(h->foreign.path, sizeof h->foreign.path, "%s", path);
        h->foreign.t = t;
    }
}

/* The std:: classes that are one of them, at offset 0 (libstdc++: a
 * std::condition_variable holds a pthread_cond_t, std::shared_mutex and
 * std::shared_timed_mutex a pthread_rwlock_t). */
static const struct { const char *name, *type; enum kind kind; } std_mutexes[] = {
    { "mutex", "std::mutex", KIND_MUTEX },
    { "recursive_mutex", "std::recursive_mutex", KIND_MUTEX },
    { "timed_mutex", "std::timed_mutex", KIND_MUTEX },
    { "recursive_timed_mutex", "std::recursive_timed_mutex", KIND_MUTEX },
    { "condition_variable", "std::condition_variable", KIND_COND },
    { "shared_mutex", "std::shared_mutex", KIND_RWLOCK },
    { "shared_timed_mutex", "std::shared_timed_mutex", KIND_RWLOCK },
};

/* "std::mutex" when `die` is one of the std:: classes above (directly in
 * std, or in an inline namespace of it), its kind in *kind; else NULL. */
static const char *std_mutex(Dwarf_Die *die, enum kind *kind)
{
    const char *name = dwarf_diename(die);
    const char *which = NULL;
    for (size_t i = 0; name && i < sizeof std_mutexes / sizeof std_mutexes[0]; i++)
        if (strcmp(name, std_mutexes[i].name) == 0) {
            which = std_mutexes[i].type;
            *kind = std_mutexes[i].kind;
        }
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
    struct hits *inner = dm_scan_xmalloc(sizeof *inner);
    inner->n = 0;
    inner->total = 0;
    inner->nforeign = 0;
    find_mutexes(&elem, 0, "", inner, depth + 1);
    if (inner->nforeign > 0) {
        char p[PATH_LEN];
        char idx[8 * 4 + 1] = "";
        for (int d = 0; d < ndims && d < 8; d++)
            strcat(idx, "[0]");
        snprintf(p, sizeof p, "%s%s%s", path, idx, inner->foreign.path);
        foreign_hit(h, base + inner->foreign.offset, p, inner->foreign.t);
        h->nforeign += inner->nforeign * count - 1;
    }
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
            dm_scan_hit(h, base + i * (long)elem_size + inner->v[k].offset, p, inner->v[k].type,
                        inner->v[k].kind);
        }
        h->total += inner->total - (long)inner->n;
    }
    free(inner);
}

/* Adds every mutex (cond, rwlock) that a value of type `type` at `base`
 * holds. */
static void find_mutexes(Dwarf_Die *type, long base, const char *path, struct hits *h,
                         int depth)
{
    Dwarf_Die die = *type, next, child;
    for (int hops = 0; depth < MAX_DEPTH && hops < MAX_DEPTH; hops++) {
        const char *name = dwarf_diename(&die);
        const char *std;
        enum kind kind = KIND_MUTEX;
        switch (dwarf_tag(&die)) {
        case DW_TAG_typedef:
            for (size_t i = 0; name && i < sizeof pthread_types / sizeof pthread_types[0]; i++)
                if (strcmp(name, pthread_types[i].name) == 0) {
                    dm_scan_hit(h, base, path, pthread_types[i].name, pthread_types[i].kind);
                    return;
                }
            if (foreign_type(name)) {
                foreign_hit(h, base, path, foreign_type(name));
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
            if ((std = std_mutex(&die, &kind)) != NULL) {
                dm_scan_hit(h, base, path, std, kind);
                return;
            }
            if (foreign_type(name)) {
                foreign_hit(h, base, path, foreign_type(name));
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
    char *q = dm_scan_xstrdup(name);
    for (int i = 1; i < n; i++) {
        int tag = dwarf_tag(&scopes[i]);
        const char *s = dwarf_diename(&scopes[i]);
        if (!s || (tag != DW_TAG_namespace && tag != DW_TAG_structure_type &&
                   tag != DW_TAG_class_type))
            continue;
        char *nq = dm_scan_xprintf("%s::%s", s, q);
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
    struct hits *h = dm_scan_xmalloc(sizeof *h);
    h->n = 0;
    h->total = 0;
    h->nforeign = 0;
    find_mutexes(&type, 0, "", h, 0);
    if (h->nforeign > 0) {
        const struct esym *s = dm_scan_symbol_at(f, addr);
        char *qname = qualified_name(var);
        const char *var_name = qname ? qname : s ? s->name : "?";
        char more[64] = "";
        if (h->nforeign > 1)
            snprintf(more, sizeof more, " (and %ld more locks of other kinds in it)",
                     h->nforeign - 1);
        fprintf(stderr, "dmutex scan: note: %s%s in %s is a %s%s, not listed: %s, so no "
                "entry can make it cluster-wide\n", var_name, h->foreign.path, f->label,
                h->foreign.t->type, more, h->foreign.t->why);
        free(qname);
    }
    if (h->total > 0) {
        const struct esym *s = dm_scan_symbol_at(f, addr);
        char *qname = qualified_name(var);
        const char *display = qname ? qname : s ? s->name : "?";
        Dwarf_Word size = s ? s->size : 0;
        if (!s)
            dwarf_aggregate_size(&type, &size);
        /* A static's lock name is its source name; a C++ global's, its
         * qualified name; a C global's, the symbol. */
        dm_scan_add_hits(sc, f, HOW_DWARF, s, display, display, size, h, NULL);
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

void dm_scan_dwarf(struct scan *sc, struct file *f)
{
    Dwarf_Off off = 0, next;
    size_t hsize;
    while (dwarf_nextcu(f->dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
        Dwarf_Die cu;
        if (dwarf_offdie(f->dw, off + hsize, &cu))
            walk(sc, f, &cu, 0);
        off = next;
    }
    qsort(f->known, f->nknown, sizeof *f->known, dm_scan_cmp_addr);
}


/* ---- what is at an address (dmutex check) ---------------------------------- */

static void found_lock(struct dwarf_at *a, const char *path, const char *type, enum kind kind,
                       const struct foreign_type *foreign, long into)
{
    snprintf(a->var, sizeof a->var, "%s", path);
    a->type = type;
    a->kind = kind;
    a->foreign = foreign;
    a->into = into;
}

/* The innermost lock of a value of type `type` whose bytes cover `off`
 * into it, into *a (path: the value's name so far). 1 when one does. */
static int lock_at(Dwarf_Die *type, long off, const char *path, struct dwarf_at *a, int depth)
{
    Dwarf_Die die = *type, next, child;
    char p[PATH_LEN];
    snprintf(p, sizeof p, "%s", path);
    for (int hops = 0; depth < MAX_DEPTH && hops < MAX_DEPTH; hops++) {
        const char *name = dwarf_diename(&die);
        const char *std;
        enum kind kind = KIND_MUTEX;
        switch (dwarf_tag(&die)) {
        case DW_TAG_typedef:
            for (size_t i = 0; name && i < sizeof pthread_types / sizeof pthread_types[0]; i++)
                if (strcmp(name, pthread_types[i].name) == 0) {
                    found_lock(a, p, pthread_types[i].name, pthread_types[i].kind, NULL, off);
                    return 1;
                }
            if (foreign_type(name)) {
                found_lock(a, p, foreign_type(name)->type, KIND_MUTEX, foreign_type(name), off);
                return 1;
            }
            /* fall through */
        case DW_TAG_const_type:
        case DW_TAG_volatile_type:
        case DW_TAG_atomic_type:
            if (type_of(&die, &next) != 0)
                return 0;
            die = next;
            continue;
        case DW_TAG_array_type: {
            Dwarf_Word elem_size;
            if (type_of(&die, &next) != 0 || dwarf_aggregate_size(&next, &elem_size) != 0 ||
                elem_size == 0)
                return 0;
            long i = off / (long)elem_size;
            size_t len = strlen(p);
            snprintf(p + len, sizeof p - len, "[%ld]", i);
            off -= i * (long)elem_size;
            die = next;
            depth++;
            continue;
        }
        case DW_TAG_structure_type:
        case DW_TAG_class_type:
        case DW_TAG_union_type:
            if ((std = std_mutex(&die, &kind)) != NULL) {
                found_lock(a, p, std, kind, NULL, off);
                return 1;
            }
            if (foreign_type(name)) {
                found_lock(a, p, foreign_type(name)->type, KIND_MUTEX, foreign_type(name), off);
                return 1;
            }
            if (dwarf_child(&die, &child) != 0)
                return 0;
            do {
                int tag = dwarf_tag(&child);
                if ((tag != DW_TAG_member && tag != DW_TAG_inheritance) ||
                    dwarf_hasattr(&child, DW_AT_declaration))
                    continue;
                long mo = member_offset(&child);
                Dwarf_Word msize;
                if (mo < 0 || mo > off || type_of(&child, &next) != 0 ||
                    dwarf_aggregate_size(&next, &msize) != 0 || off >= mo + (long)msize)
                    continue;
                char q[PATH_LEN];
                const char *mname = dwarf_diename(&child);
                if (tag == DW_TAG_member && mname)
                    snprintf(q, sizeof q, "%s.%s", p, mname);
                else
                    snprintf(q, sizeof q, "%s", p);
                if (lock_at(&next, off - mo, q, a, depth + 1))
                    return 1;   /* a union's members overlap: the first that has one */
            } while (dwarf_siblingof(&child, &child) == 0);
            return 0;
        default:
            return 0;
        }
    }
    return 0;
}

static void at_variable(Dwarf_Die *var, struct dwarf_at *at, size_t n)
{
    GElf_Addr addr;
    Dwarf_Die type;
    Dwarf_Word size;
    if (static_address(var, &addr) != 0 || type_of(var, &type) != 0 ||
        dwarf_aggregate_size(&type, &size) != 0)
        return;
    for (size_t i = 0; i < n; i++) {
        if (at[i].found || at[i].vaddr < addr || at[i].vaddr >= addr + size)
            continue;
        at[i].found = 1;
        char *q = qualified_name(var);
        lock_at(&type, (long)(at[i].vaddr - addr), q ? q : "?", &at[i], 0);
        if (!at[i].type)
            snprintf(at[i].var, sizeof at[i].var, "%s", q ? q : "?");
        free(q);
    }
}

static void at_walk(Dwarf_Die *die, struct dwarf_at *at, size_t n, int depth)
{
    Dwarf_Die child;
    if (depth > MAX_DEPTH || dwarf_child(die, &child) != 0)
        return;
    do {
        switch (dwarf_tag(&child)) {
        case DW_TAG_variable:
            at_variable(&child, at, n);
            break;
        case DW_TAG_subprogram:
        case DW_TAG_lexical_block:
        case DW_TAG_namespace:
        case DW_TAG_module:
            at_walk(&child, at, n, depth + 1);
            break;
        default:
            break;
        }
    } while (dwarf_siblingof(&child, &child) == 0);
}

void dm_scan_dwarf_at(struct file *f, struct dwarf_at *at, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        at[i].found = 0;
        at[i].type = NULL;
        at[i].foreign = NULL;
        at[i].var[0] = 0;
        at[i].into = 0;
    }
    Dwarf_Off off = 0, next;
    size_t hsize;
    while (dwarf_nextcu(f->dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
        Dwarf_Die cu;
        if (dwarf_offdie(f->dw, off + hsize, &cu))
            at_walk(&cu, at, n, 0);
        off = next;
    }
}
