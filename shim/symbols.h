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
 * `need` bytes starting `offset` bytes into the symbol must lie inside it.
 *
 * Returns 0 and sets *addr; ENOENT when the object is not loaded or has no
 * such symbol; EINVAL when the symbol is too small or not a data object;
 * ENOTUNIQ when several file-statics match (err lists them as file.c:sym).
 * On any error, err holds a sentence naming symbol and object.
 * `object` matches a loaded file's full path or file name, "libfoo.so" also "libfoo.so.1.2"; two files: ENOTUNIQ.
 * Unqualified "sym": the one global, else the one file-static (or gcc's function-static "sym.N"). */
int dm_symbols_find(const char *object, const char *symbol, long offset,
                    size_t need, uintptr_t *addr, char *err, size_t errlen);

/* The [start, end) address range of function `func` in `object` (NULL: the
 * executable), for init_site mapping. Same errors as dm_symbols_find. */
int dm_symbols_function(const char *object, const char *func,
                        uintptr_t *start, uintptr_t *end, char *err, size_t errlen);

/* Is an object matching `object` (the rules of dm_symbols_find) loaded
 * now? 1 or 0; an ambiguous name counts as loaded. NULL: the executable. */
int dm_symbols_loaded(const char *object);

/* The same, and when it is loaded, its load bias (0 when ambiguous): a
 * changed bias means it was unloaded and loaded again elsewhere. */
int dm_symbols_bias(const char *object, uintptr_t *bias);

/* Fork, for startup's handlers only: hold the cache lock across fork(),
 * release it in parent and child. */
void dm_symbols_atfork_prepare(void);
void dm_symbols_atfork_release(void);

/* Drops any cached symbol tables (after dlclose, or to free memory once
 * start-up resolution is done). */
void dm_symbols_flush(void);

#endif
