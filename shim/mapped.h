/* mapped: what a mapped mutex means (docs/semantics.md). Sits under the
 * exported symbols (preload) and the start-up (startup), over cluster: the
 * process's shared hold of each lock name (one cluster lock per name and
 * process, whatever number of its threads hold mutexes of the name), the
 * order of the two levels, recursion, error checks, robust owners,
 * condition variables, cancellation, fork and exit. Its files: mapped.c
 * (names, holds, mutexes), mapped_rw.c (rwlocks), mapped_cond.c (listed
 * conds), sharing mapped_impl.h. */
#ifndef DM_MAPPED_H
#define DM_MAPPED_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "config.h"
#include "registry.h"
#include "util.h"

struct dm_name;
struct dm_cond_name;

/* What a registry entry maps: every entry starts with its kind, so that a
 * condition variable's or an rwlock's address is never taken for a
 * mutex's. */
enum dm_entry_kind { DM_ENTRY_MUTEX, DM_ENTRY_COND, DM_ENTRY_RWLOCK };

/* One mapped address. */
struct dm_entry {
    int kind;                   /* DM_ENTRY_MUTEX */
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

/* One listed condition variable (conds). */
struct dm_cond_entry {
    int kind;                   /* DM_ENTRY_COND */
    const void *addr;
    struct dm_cond_name *cn;    /* its name: channel, subscription */
    int heap;                   /* made by init_site: removed by destroy */
    struct dm_cond_entry *next_free;
};

/* One mapped read-write lock (rwlocks). Its name's hold (struct dm_name,
 * shared code with mutexes) is the process's read or write hold. */
struct dm_rw_entry {
    int kind;                   /* DM_ENTRY_RWLOCK */
    const void *addr;
    struct dm_name *nm;
    unsigned long writer;       /* thread seq holding it for writing through the shim (atomic) */
    unsigned long readers;      /* read locks of it held through the shim (atomic): destroy's EBUSY */
    int heap;                   /* made by init_site: removed by destroy */
    struct dm_rw_entry *next_free;
};

/* The mapped mutex at `m`, or NULL (unmapped, or a condition variable's
 * address): one filter load for every unmapped one. */
static inline struct dm_entry *dm_mapped_find(const void *m)
{
    struct dm_entry *e = dm_registry_lookup(m);
    return __builtin_expect(e == NULL, 1) || e->kind != DM_ENTRY_MUTEX ? NULL : e;
}

/* The listed condition variable at `c`, or NULL. */
static inline struct dm_cond_entry *dm_mapped_find_cond(const void *c)
{
    struct dm_cond_entry *e = dm_registry_lookup(c);
    return __builtin_expect(e == NULL, 1) || e->kind != DM_ENTRY_COND ? NULL : e;
}

/* The mapped rwlock at `l`, or NULL. */
static inline struct dm_rw_entry *dm_mapped_find_rwlock(const void *l)
{
    struct dm_rw_entry *e = dm_registry_lookup(l);
    return __builtin_expect(e == NULL, 1) || e->kind != DM_ENTRY_RWLOCK ? NULL : e;
}

/* Is registry entry `e` (any kind) a heap one (init_site, dmutex_name),
 * which a destroy unmaps and a new init of its memory decides afresh? */
static inline int dm_mapped_entry_heap(const void *e)
{
    switch (*(const int *)e) {
    case DM_ENTRY_COND:
        return ((const struct dm_cond_entry *)e)->heap;
    case DM_ENTRY_RWLOCK:
        return ((const struct dm_rw_entry *)e)->heap;
    default:
        return ((const struct dm_entry *)e)->heap;
    }
}

/* Sets up from a loaded config (no I/O, no threads): called by the
 * constructor. */
void dm_mapped_init(const struct dm_config *cfg);

#define DM_MAP_HEAP  1      /* init_site or dmutex_name: destroy unmaps it */
#define DM_MAP_FAIR  2      /* fair mode for its name */
#define DM_MAP_CACHE 4      /* lock caching for its name */
/* Its name's lock on the wire, enum dm_protocol in two bits: a partner's
 * (setnx, redisson) is not fair and not cached. */
#define DM_MAP_PROTOCOL(p)     ((p) << 3)
#define DM_MAP_PROTOCOL_OF(f)  (((f) >> 3) & 3)

/* Maps `addr` under lock name `name` (DM_MAP_* flags) and adds it to the
 * registry. Returns 0, EEXIST (already mapped under another name, the
 * name is an rwlock's, or it is mapped already with the other protocol),
 * ENOTSUP (the store cannot speak DM_MAP_PROTOCOL's protocol), or ENOMEM. */
int dm_mapped_add(const void *addr, const char *name, int flags);

/* Maps condition variable `addr` under cond name `name` (DM_MAP_HEAP or
 * 0). Returns 0, EEXIST (the address is mapped otherwise), or ENOMEM. No
 * I/O: the cond's channel is subscribed at its first wait. */
int dm_mapped_add_cond(const void *addr, const char *name, int flags);

/* Maps rwlock `addr` under lock name `name` (DM_MAP_HEAP or 0). Returns 0,
 * EEXIST (the address is mapped otherwise, or the name is a mutex's), or
 * ENOMEM. No I/O. */
int dm_mapped_add_rwlock(const void *addr, const char *name, int flags);

/* Unmaps an entry, mutex, rwlock or condition variable (pthread_mutex_destroy or
 * pthread_cond_destroy of a heap one, dlclose); the name's record is freed
 * with its last entry. */
void dm_mapped_remove(const void *addr);

enum dm_lock_mode { DM_LOCK, DM_TRYLOCK, DM_TIMEDLOCK };

int dm_mapped_lock(struct dm_entry *e, pthread_mutex_t *m, enum dm_lock_mode mode,
                   clockid_t clk, const struct timespec *abstime);
int dm_mapped_unlock(struct dm_entry *e, pthread_mutex_t *m);
int dm_mapped_consistent(struct dm_entry *e, pthread_mutex_t *m);
int dm_mapped_destroy(struct dm_entry *e, pthread_mutex_t *m);
int dm_mapped_init_mutex(struct dm_entry *e, pthread_mutex_t *m, const pthread_mutexattr_t *a);
/* What dm_mapped_init_mutex does before glibc's init: the entry's holder,
 * depth and robust state start afresh. mtx_init of a mapped mtx_t calls it,
 * then glibc's mtx_init (which picks the pthread type from the C11 one). */
void dm_mapped_reinit(struct dm_entry *e);

/* cond_wait family: `abstime` NULL for pthread_cond_wait. */
int dm_mapped_cond_wait(struct dm_entry *e, pthread_cond_t *c, pthread_mutex_t *m,
                        int timed, clockid_t clk, const struct timespec *abstime);

/* A listed condition variable (docs/semantics.md). A wait subscribes to
 * the cond's channel (once), notes its count, gives back the mutex's
 * cluster hold (a mapped m) and the real mutex, sleeps until the count
 * moves (a local signal, a message, the subscriber's reconnect) or the
 * deadline passes, then takes the real mutex and the hold back. `m` may
 * be mapped or not. `timed` with clockwait: clk is the caller's clock;
 * timedwait passes DM_COND_CLOCK_OF_COND (the cond's own, from glibc's
 * layout). Cancellable as glibc's: the mutex and its hold are taken back
 * before the program's cleanup handlers run. */
#define DM_COND_CLOCK_OF_COND ((clockid_t)-1)
int dm_mapped_cond_cluster_wait(struct dm_cond_entry *ce, pthread_cond_t *c, pthread_mutex_t *m,
                                int timed, clockid_t clk, const struct timespec *abstime);

/* Signal (broadcast = 0) or broadcast: glibc's own for waiters that went
 * through glibc, the cond's local waiters at once, then one PUBLISH on
 * the cond's channel for every other process. */
int dm_mapped_cond_signal(struct dm_cond_entry *ce, pthread_cond_t *c, int broadcast);

/* pthread_cond_destroy of a listed cond: glibc's, and a heap one is
 * unmapped (its name's channel unsubscribed with the last). */
int dm_mapped_cond_destroy(struct dm_cond_entry *ce, pthread_cond_t *c);

/* A cluster-wide rwlock (docs/semantics.md, "Read-write locks"): the
 * real rwlock first (its kind and glibc's recursion and EDEADLK rules
 * honoured locally), then the name's process hold, shared by the
 * process's readers (the first takes the cluster read hold, the last
 * gives it back) or taken for writing. `write`: wrlock family; `mode` and
 * clk/abstime as for mutexes (timedrdlock passes CLOCK_REALTIME). */
int dm_mapped_rwlock(struct dm_rw_entry *e, pthread_rwlock_t *l, int write,
                     enum dm_lock_mode mode, clockid_t clk, const struct timespec *abstime);
int dm_mapped_rwunlock(struct dm_rw_entry *e, pthread_rwlock_t *l);
int dm_mapped_rwdestroy(struct dm_rw_entry *e, pthread_rwlock_t *l);
int dm_mapped_rwinit(struct dm_rw_entry *e, pthread_rwlock_t *l, const pthread_rwlockattr_t *a);

/* Fencing token of the calling thread's hold of e, 0 if it holds none. */
uint64_t dm_mapped_token(struct dm_entry *e);

/* Fencing token of the calling thread's hold of rwlock e: its write
 * grant's, or (a reader) the process's read grant's; 0 if it holds none. */
uint64_t dm_mapped_rwtoken(struct dm_rw_entry *e);

/* fork: prepare takes the name table's lock, parent and child let go (the
 * child also forgets every hold: they are the parent's). */
void dm_mapped_atfork(enum dm_fork_phase phase);

/* Process exit: releases the cluster holds that no thread is inside (kept
 * by lock caching) and stops caching. Holds with a thread inside stay until
 * the process is gone and their lease ends them. */
void dm_mapped_release_all(void);

/* The image ends (exec, _exit; possibly in a signal handler): the holds no
 * thread is inside (cached, or lingering in a batch) are given back by
 * notify's thread, waited for a bounded time. Async-signal-safe: atomics,
 * one write(2), nanosleep. */
void dm_mapped_image_ends(void);

#endif
