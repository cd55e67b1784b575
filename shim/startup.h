/* startup: what the shim does once, and again when the loader changes the
 * process. The constructor (config, program selection, symbol mapping,
 * the one fork registration), the destructor (exit), the re-mapping after
 * dlopen/dlclose and the table of init_site functions that preload's
 * pthread_mutex_init consults. Sits under preload and over mapped and
 * everything it configures; preload is its only user. */
#ifndef DM_STARTUP_H
#define DM_STARTUP_H

#include <stddef.h>
#include <stdint.h>

/* A function named by an init_site entry: a mutex pthread_mutex_init'ed
 * from [start, end) is mapped under `name` with `flags` (DM_MAP_*). */
struct dm_init_site {
    uintptr_t start, end;
    const char *name;
    int flags;
};

/* How many init_site functions there are: 0 (every process without
 * init_site entries) is the one load pthread_mutex_init's fast path makes.
 * Set by the constructor, never changed afterwards, read without a lock.
 * Hidden, so that the load is PC-relative, not through the GOT. */
extern size_t dm_startup_ninit_sites __attribute__((visibility("hidden")));

/* The init_site function whose code contains `caller`, or NULL. */
const struct dm_init_site *dm_startup_init_site(uintptr_t caller);

/* The same for pthread_cond_init and the init_site entries of conds. */
extern size_t dm_startup_ncond_sites __attribute__((visibility("hidden")));
const struct dm_init_site *dm_startup_cond_site(uintptr_t caller);

/* The same for pthread_rwlock_init and the init_site entries of rwlocks. */
extern size_t dm_startup_nrw_sites __attribute__((visibility("hidden")));
const struct dm_init_site *dm_startup_rw_site(uintptr_t caller);

/* 1 once the constructor has configured the shim for this program (it is
 * among the config's `programs`), 0 before or when it is not. */
int dm_startup_configured(void);

/* dlopen/dlclose for the exported wrappers: the real call, searched along
 * the RUNPATH of `caller` (the program's code that called dlopen) for a
 * bare name, then the config entries of the objects that came or went are
 * mapped or unmapped. Call with no lock of the shim held (the loader's
 * locks come first). */
void *dm_startup_dlopen(const char *file, int flags, const void *caller);
int dm_startup_dlclose(void *handle);

/* The process image is about to end without exit(3) (an exec, _exit,
 * _Exit): the releases that unlocks wrote without waiting are read first
 * (dm_rlock_flush_bounded), so that each one has run or been retried.
 * Nothing in a vfork child (it shares the parent's memory and
 * connections) or in a process the config is not for. */
void dm_startup_image_ends(void);

#endif
