/* mapped: what a mapped mutex means (docs/semantics.md). Sits under the
 * exported symbols (preload) and the start-up (startup), over cluster: the
 * process's shared hold of each lock name (one cluster lock per name and
 * process, whatever number of its threads hold mutexes of the name), the
 * order of the two levels, recursion, error checks, robust owners,
 * condition variables, cancellation, fork and exit. */
#ifndef DM_MAPPED_H
#define DM_MAPPED_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "config.h"
#include "util.h"

struct dm_name;

/* One mapped address. */
struct dm_entry {
    const void *addr;
    struct dm_name *nm;
    unsigned long holder;       /* thread seq holding it through the shim, 0: none (atomic) */
    unsigned long depth;        /* recursive depth of that hold */
    int robust_state;           /* DM_ROBUST_* */
    int heap;                   /* made by init_site or dmutex_name: removed by destroy */
    int dead_pending;           /* robust: an EOWNERDEAD to report at the next lock */
    uint64_t since_ns;          /* when the holder got it (stats: hold time; atomic) */
    struct dm_entry *next_free;
};

enum { DM_ROBUST_OK, DM_ROBUST_INCONSISTENT, DM_ROBUST_NOTRECOVERABLE };

/* Sets up from a loaded config (no I/O, no threads): called by the
 * constructor. */
void dm_mapped_init(const struct dm_config *cfg);

#define DM_MAP_HEAP  1      /* init_site or dmutex_name: destroy unmaps it */
#define DM_MAP_FAIR  2      /* fair mode for its name */
#define DM_MAP_CACHE 4      /* lock caching for its name */

/* Maps `addr` under lock name `name` (DM_MAP_* flags) and adds it to the
 * registry. Returns 0, EEXIST (already mapped under another name), or
 * ENOMEM. */
int dm_mapped_add(const void *addr, const char *name, int flags);

/* Unmaps an entry (pthread_mutex_destroy of a heap mutex, dlclose); the
 * name's record is freed with its last mutex. */
void dm_mapped_remove(const void *addr);

enum dm_lock_mode { DM_LOCK, DM_TRYLOCK, DM_TIMEDLOCK };

int dm_mapped_lock(struct dm_entry *e, pthread_mutex_t *m, enum dm_lock_mode mode,
                   clockid_t clk, const struct timespec *abstime);
int dm_mapped_unlock(struct dm_entry *e, pthread_mutex_t *m);
int dm_mapped_consistent(struct dm_entry *e, pthread_mutex_t *m);
int dm_mapped_destroy(struct dm_entry *e, pthread_mutex_t *m);
int dm_mapped_init_mutex(struct dm_entry *e, pthread_mutex_t *m, const pthread_mutexattr_t *a);

/* cond_wait family: `abstime` NULL for pthread_cond_wait. */
int dm_mapped_cond_wait(struct dm_entry *e, pthread_cond_t *c, pthread_mutex_t *m,
                        int timed, clockid_t clk, const struct timespec *abstime);

/* Fencing token of the calling thread's hold of e, 0 if it holds none. */
uint64_t dm_mapped_token(struct dm_entry *e);

/* fork: prepare takes the name table's lock, parent and child let go (the
 * child also forgets every hold: they are the parent's). */
void dm_mapped_atfork(enum dm_fork_phase phase);

/* Process exit: releases the cluster holds that no thread is inside (kept
 * by lock caching) and stops caching. Holds with a thread inside stay until
 * the process is gone and their lease ends them. */
void dm_mapped_release_all(void);

#endif
