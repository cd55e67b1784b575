/* scan: what `dmutex scan` (tools/scan.c, the command and its output)
 * shares with the finding of candidates: tools/scan_files.c reads each
 * file (symbol table through shim/elfsyms, copy relocations, soname),
 * turns what is found into rows and guesses from the symbol table;
 * tools/scan_dwarf.c walks the debug info (libdw). Rows are the list of
 * candidates: scan.c sorts, names and prints them. Out of memory, every
 * function here prints and exits (a command, not a library). */
#ifndef DM_SCAN_H
#define DM_SCAN_H

#include <elfutils/libdw.h>
#include <gelf.h>
#include <pthread.h>
#include <stddef.h>

#include "elfsyms.h"

#define MUTEX_SIZE     sizeof(pthread_mutex_t)  /* 40 on x86-64 and aarch64 glibc */
#define COND_SIZE      sizeof(pthread_cond_t)   /* 48 */
#define RWLOCK_SIZE    sizeof(pthread_rwlock_t) /* 56 on x86-64 and aarch64 glibc */
#define MAX_PER_VAR    64       /* objects listed per variable; the rest are counted */
#define MAX_DEPTH      32       /* nesting of struct/array types followed */
#define PATH_LEN       256      /* "member[3].lock" suffix of one mutex */

enum how { HOW_DWARF, HOW_GUESS, HOW_WEAK };

/* What a row is, and so which config list its entry goes to: `mutexes`,
 * `conds` or `rwlocks`. */
enum kind { KIND_MUTEX, KIND_COND, KIND_RWLOCK, KIND_COUNT };

/* A defined data symbol of one file, with the STT_FILE before it (locals). */
struct esym {
    const char *name;
    const char *file;
    GElf_Addr value;
    GElf_Xword size;
    int local;
};

/* One file of the scan, open while the scan runs. */
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

/* One mutex, cond or rwlock found: a row of the table and an entry of the
 * config. */
struct row {
    const struct file *f;
    enum how how;
    enum kind kind;
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

/* A mutex (cond, rwlock) inside a variable's type, relative to its start. */
struct hit {
    long offset;
    char path[PATH_LEN];
    const char *type;
    enum kind kind;
};

/* A lock of a kind the shim does not interpose (dm_scan_foreign_types),
 * found inside a variable's type: not a row. */
struct foreign_hit {
    long offset;
    char path[PATH_LEN];
    const struct foreign_type *t;
};

struct hits {
    struct hit v[MAX_PER_VAR];
    size_t n;                   /* kept */
    long total;                 /* found, kept or not */
    struct foreign_hit foreign; /* the first lock of another kind, when nforeign > 0 */
    long nforeign;              /* locks of other kinds found */
};

/* The lock types debug info may show that the shim does not interpose:
 * a variable of one (or a member of one) is never a row of `dmutex scan`,
 * which says why in a note, and `dmutex check` refuses an entry that
 * names one. The shim interposes the pthread calls (std:: locks are
 * pthread ones underneath) and C11's mtx_* and cnd_*; GLib locks its own
 * types with futexes of its own, or through a pthread lock it allocates
 * (no symbol names it), and a spin lock through pthread_spin_*. */
struct foreign_type {
    const char *name;           /* the typedef, or the struct or union tag */
    const char *type;           /* as messages name it */
    const char *why;            /* why mapping it would exclude nothing */
};
extern const struct foreign_type dm_scan_foreign_types[];

/* Allocation that cannot fail: prints "out of memory" and exits. */
void *dm_scan_xmalloc(size_t n);
char *dm_scan_xstrdup(const char *s);
char *dm_scan_xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *dm_scan_base_name(const char *path);

/* Opens `path` (the first file is the program unless it is a library
 * scanned alone), reads its symbols, copy relocations and debug info
 * handle. Prints why and returns -1 when it is not a program or library;
 * dm_scan_close is right either way (f zeroed, f->e.fd = -1 before). */
int dm_scan_open(struct file *f, const char *path, int is_program);
void dm_scan_close(struct file *f);

/* The data symbol at `addr`: the global if there is one, else a local; NULL. */
const struct esym *dm_scan_symbol_at(const struct file *f, GElf_Addr addr);
int dm_scan_cmp_addr(const void *a, const void *b);

/* Records a mutex (cond, rwlock: `kind`) at `offset` of a variable
 * (counted past MAX_PER_VAR). */
void dm_scan_hit(struct hits *h, long offset, const char *path, const char *type,
                 enum kind kind);

/* Adds the rows of one variable (symbol `s`, or NULL when only debug info
 * knows it): its hits, at most MAX_PER_VAR of them. */
void dm_scan_add_hits(struct scan *sc, const struct file *f, enum how how,
                      const struct esym *s, const char *display_name,
                      const char *base_name_, GElf_Xword size, const struct hits *h,
                      const char *note);

/* Rows for the variables of `f` debug info describes (scan_dwarf.c); sorts
 * f->known, the addresses it described. */
void dm_scan_dwarf(struct scan *sc, struct file *f);

/* What debug info says is at an address of a file, for `dmutex check`:
 * the variable with a static address that covers it, and inside it the
 * innermost lock whose bytes cover it. */
struct dwarf_at {
    GElf_Addr vaddr;            /* asked: an address of the file (load bias removed) */
    int found;                  /* a variable covers it */
    char var[PATH_LEN];         /* its name, then the member path down to the lock */
    const char *type;           /* that lock's type ("pthread_mutex_t", "std::mutex",
                                 * "GMutex"); NULL: no lock covers vaddr */
    enum kind kind;             /* of an interposed type */
    const struct foreign_type *foreign;     /* else what it is */
    long into;                  /* vaddr minus the lock's first byte */
};

/* Fills at[i] for each at[i].vaddr (i < n) in one walk of f's debug info
 * (f->dw: the caller checks there is some). */
void dm_scan_dwarf_at(struct file *f, struct dwarf_at *at, size_t n);

/* Rows guessed from the symbol table for the data objects debug info did
 * not describe (with sc->all, the weak ones too). */
void dm_scan_guesses(struct scan *sc, struct file *f);

#endif
