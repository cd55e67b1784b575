/* symbols: config names -> addresses in the loaded ELF objects of this
 * process: which object a name means, the rules that pick one symbol, the
 * load bias (PIE executables and libraries), the cache. Reading a symbol
 * table is elfsyms'. Knows nothing of Redis or of the config syntax. */
#ifndef DM_SYMBOLS_H
#define DM_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

/* Finds the data object `symbol` ("sym", or "file.c:sym" to pick the
 * file-static of one translation unit) in the loaded object whose file name
 * (basename) is `object`, or in the main executable when `object` is NULL.
 * `need` bytes starting `offset` bytes into the symbol must lie inside it;
 * `what` names them for messages ("a pthread_cond_t": the caller's words,
 * said with the size; NULL: the size alone).
 *
 * Returns 0 and sets *addr; ENOENT when the object is not loaded or has no
 * such symbol; ERANGE when `need` bytes at `offset` do not fit in it (so
 * it holds no object of that size there: a lock of another, smaller kind,
 * say); EINVAL when it is not a data object (thread-local, sizeless) or
 * the offset is negative;
 * ENOTUNIQ when several file-statics match (err lists them as file.c:sym).
 * On any error, err holds a sentence naming symbol and object.
 * `object` matches a loaded file's full path or file name, "libfoo.so" also "libfoo.so.1.2"; two files: ENOTUNIQ.
 * Unqualified "sym": the one global, else the one file-static (or gcc's function-static "sym.N"). */
int dm_symbols_find(const char *object, const char *symbol, long offset,
                    size_t need, const char *what, uintptr_t *addr, char *err, size_t errlen);

/* The [start, end) address range of function `func` in `object` (NULL: the
 * executable), for init_site mapping. Same errors as dm_symbols_find. */
int dm_symbols_function(const char *object, const char *func,
                        uintptr_t *start, uintptr_t *end, char *err, size_t errlen);

/* Is an object matching `object` (the rules of dm_symbols_find) loaded
 * now? 1 or 0; an ambiguous name counts as loaded. NULL: the executable.
 * When it is loaded, *bias is its load bias (0 when ambiguous): a changed
 * bias means it was unloaded and loaded again elsewhere. */
int dm_symbols_bias(const char *object, uintptr_t *bias);

/* Hex of a GNU build-id (up to 64 bytes) and its NUL. */
#define DM_BUILD_ID_MAX 129

/* `need` bytes at `vaddr` in the loaded object `object` (the rules of
 * dm_symbols_find; NULL: the executable): vaddr is an address as the
 * file's own headers give it (st_value style, the load bias not added), of
 * code (`code`: in an executable segment) or data (a writable one). With
 * `build_id` (hex), the object must be that build: an address means
 * nothing in another one. Returns 0 and *addr; ENOENT (not loaded),
 * ESTALE (another build, or one without a build-id), EINVAL (outside the
 * object's segments, or not code / data), ENOMEM; err says which. */
int dm_symbols_at(const char *object, uintptr_t vaddr, size_t need, int code,
                  const char *build_id, uintptr_t *addr, char *err, size_t errlen);

/* What is at a run-time address: its loaded object, the file-relative
 * address, the object's build-id, and the data symbol (or, with `code`,
 * the function) covering it, if the object's symbol table has one. For
 * `dmutex trace`, naming a mutex as a config entry would. */
struct dm_symbols_where {
    char path[4096];            /* the object's file (the executable's real path) */
    int is_exe;
    uintptr_t vaddr;            /* addr minus the load bias */
    char build_id[DM_BUILD_ID_MAX];     /* "" when the object has none */
    char section[16];           /* ".symtab", ".dynsym", "" (no table could be read) */
    char symbol[512];           /* "" when no symbol covers it; as in the table (mangled) */
    char file[256];             /* a local's STT_FILE, else "" */
    uintptr_t sym_value, sym_size;
    int sym_local;
};

/* 0 and *w; ENOENT when no loaded object holds addr; ENOMEM. Takes the
 * loader's lock and reads files: not for a signal handler. */
int dm_symbols_where(uintptr_t addr, int code, struct dm_symbols_where *w);

/* Fork, for startup's handlers only: hold the cache lock across fork(),
 * release it in parent and child. */
void dm_symbols_atfork_prepare(void);
void dm_symbols_atfork_release(void);

/* Drops any cached symbol tables (after dlclose, or to free memory once
 * start-up resolution is done). */
void dm_symbols_flush(void);

#endif
