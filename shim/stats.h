/* stats: the counters of one lock name in this process, as the metrics
 * file (shim/metrics.c) and the exit summary show them. One struct
 * dm_stats per name, allocated when the name first counts something
 * (store.h's dm_store_counts) and held by its struct
 * dm_name_stats, which outlives the name's record (the record points at
 * it; a name destroyed and made again counts on, for as long as the struct
 * says); each fact is counted by the module that knows it (mapped: lock
 * calls, waits, holds, contention, the held gauge; cluster: grants,
 * handovers, failed Redis calls; watchdog: renewals, losses; for a
 * condition variable's name, mapped: signals and waits, cluster: signals
 * lost). Every update is one relaxed atomic add (or a rarely taken
 * compare-and-swap for a maximum): no lock and, after a name's first
 * count, no allocation, so that the mapped path stays within its budget.
 * A reader sees each counter whole, not all of them at one instant.
 * stats.c keeps the table of every name's counters (struct dm_name_stats,
 * below). Near the bottom: the header includes util alone (stats.c log
 * too), and nothing here does I/O. docs/deploying.md ("Metrics") says what
 * each one counts. */
#ifndef DM_STATS_H
#define DM_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util.h"

/* Upper bounds of the histogram buckets of waits and holds, in ns: 100 us
 * to 10 s, 1-2.5-5 per decade; a last bucket (+Inf) takes the rest. */
#define DM_STATS_BUCKETS 16
static const uint64_t dm_stats_bounds_ns[DM_STATS_BUCKETS] = {
    100000ULL, 250000ULL, 500000ULL,
    1000000ULL, 2500000ULL, 5000000ULL,
    10000000ULL, 25000000ULL, 50000000ULL,
    100000000ULL, 250000000ULL, 500000000ULL,
    1000000000ULL, 2500000000ULL, 5000000000ULL,
    10000000000ULL,
};

/* One histogram: per-bucket counts (not cumulative: the writer adds them
 * up, so _count always equals the +Inf bucket), the sum and the largest
 * value seen, in ns. */
struct dm_hist {
    uint64_t bucket[DM_STATS_BUCKETS + 1];
    uint64_t sum_ns;
    uint64_t max_ns;
};

struct dm_stats {
    uint64_t contended;         /* mapped: lock calls that found the mutex or the lock taken */
    uint64_t acquisitions;      /* cluster: grants of the cluster lock to this process */
    uint64_t handoffs;          /* cluster: of those, fair handovers from a releasing holder */
    uint64_t redis_errors;      /* cluster, watchdog: Redis calls that failed for the name */
    uint64_t renewals;          /* watchdog: lease renewals that succeeded */
    uint64_t leases_lost;       /* watchdog, mapped: holds found lost while held */
    uint64_t expired_after_unlock;  /* mapped: releases that found the hold expired
                                       after the unlock (a late release: nothing ran
                                       unprotected) */
    uint64_t held;              /* mapped: 1 while the process holds the cluster lock */
    struct dm_hist wait;        /* mapped: lock call -> holding the mutex; its count is
                                   the lock calls that returned holding it (one add less
                                   on the mapped path than a counter of their own) */
    struct dm_hist hold;        /* mapped: holding -> unlock (or a condition wait) */
    /* A listed condition variable's name (conds), never a lock's counters: */
    uint64_t cond_signals;      /* mapped: pthread_cond_signal and broadcast calls */
    uint64_t cond_waits;        /* mapped: cluster-wide waits */
    uint64_t cond_lost;         /* cluster: signals whose PUBLISH reached no other process */
};

/* The number of observations of h. */
static inline uint64_t dm_stats_count(const struct dm_hist *h)
{
    uint64_t n = 0;
    for (int i = 0; i <= DM_STATS_BUCKETS; i++)
        n += __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED);
    return n;
}

/* Has anything been counted in s (a relaxed read of each field)? */
static inline int dm_stats_any(const struct dm_stats *s)
{
    const uint64_t *w = (const uint64_t *)s;
    for (size_t i = 0; i < sizeof *s / sizeof *w; i++)
        if (__atomic_load_n(&w[i], __ATOMIC_RELAXED) != 0)
            return 1;
    return 0;
}

static inline void dm_stats_add(uint64_t *counter, uint64_t n)
{
    __atomic_add_fetch(counter, n, __ATOMIC_RELAXED);
}

static inline void dm_stats_set(uint64_t *gauge, uint64_t v)
{
    __atomic_store_n(gauge, v, __ATOMIC_RELAXED);
}

static inline uint64_t dm_stats_get(const uint64_t *counter)
{
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

/* Counts one observation of `ns` into h. */
static inline void dm_stats_observe(struct dm_hist *h, uint64_t ns)
{
    int i = 0;
    while (i < DM_STATS_BUCKETS && ns > dm_stats_bounds_ns[i])
        i++;
    __atomic_add_fetch(&h->bucket[i], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->sum_ns, ns, __ATOMIC_RELAXED);
    uint64_t max = __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED);
    while (ns > max && !__atomic_compare_exchange_n(&h->max_ns, &max, ns, 1, __ATOMIC_RELAXED,
                                                    __ATOMIC_RELAXED))
        ;
}

/* A consistent-enough copy for a reader (each field read whole). */
static inline void dm_stats_copy(struct dm_stats *out, const struct dm_stats *s)
{
    const uint64_t *from = (const uint64_t *)s;
    uint64_t *to = (uint64_t *)out;
    for (size_t i = 0; i < sizeof *s / sizeof(uint64_t); i++)
        to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
}

/* A fork child counts its own calls from zero (the parent's are the
 * parent's, in its own file). */
static inline void dm_stats_reset(struct dm_stats *s)
{
    memset(s, 0, sizeof *s);
}

/* The counters of one lock name: made with the name's first
 * record and kept when its last record is freed, so that a name made
 * again counts on from where it stood (a _total never goes down while the
 * process runs). The counters themselves (struct dm_stats, about 400
 * bytes) are allocated when the name first counts something
 * (dm_rlock_counts): a name that is only mapped costs this head
 * and its name. Of the names gone, those that counted something keep
 * theirs (about 500 bytes and the name each), the DM_NAME_STATS_KEPT_MAX
 * that went last; the others' go with their record. A reader walks them
 * without a lock (dm_name_stats_begin): one unlinked meanwhile is freed
 * only after every walk that may see it ended. Zeroed in a fork child
 * (it counts from zero), where the names gone are dropped. */
#define DM_NAME_STATS_KEPT_MAX 4096

struct dm_name_stats {
    struct dm_hnode node;           /* first: stats.c's table of them, by name */
    struct dm_name_stats *next;     /* the list readers walk, newest first (atomic) */
    struct dm_name_stats *prev;     /* the rest is stats.c's, under the records' table mutex */
    struct dm_name_stats *kept_next, *kept_prev; /* names gone that keep their
                                       counters, oldest first; once unlinked: the
                                       list to free */
    struct dm_stats *st;            /* NULL until the name first counts something; then
                                       set once (atomic) and freed with this */
    unsigned char live;             /* a record of the name exists (relaxed atomic) */
    unsigned char is_lock;  /* got as a lock (dm_rlock_get): metrics show its lock
                               counters (set once under the table mutex, read relaxed) */
    unsigned char is_cond;  /* got for a condition variable (dm_rlock_cond_get): its cond
                               counters (a name used for both is shown as both) */
    char name[];
};

/* The table (stats.c), called with the records' table mutex held. The
 * counters of `name` (hash h): those it kept, or new ones; NULL out of
 * memory. */
struct dm_name_stats *dm_name_stats_get(const char *name, size_t h);
/* The name's last record is gone: its counters stay if it counted
 * anything (the oldest kept ones go past DM_NAME_STATS_KEPT_MAX). */
void dm_name_stats_drop(struct dm_name_stats *c);
/* c's struct dm_stats, made on the first count (lock-free; any thread);
 * out of memory, a sink whose counts nobody reads (logged once). */
struct dm_stats *dm_name_stats_make(struct dm_name_stats *c);
/* A fork child's (the records' table mutex made anew): counts from zero,
 * the names gone dropped. */
void dm_name_stats_fork_child(void);

/* A reader's copy of c's counters (zero while it has none); returns
 * whether any is non-zero. */
static inline int dm_name_stats_copy(const struct dm_name_stats *c, struct dm_stats *out)
{
    const struct dm_stats *st = __atomic_load_n(&c->st, __ATOMIC_ACQUIRE);
    if (!st) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    dm_stats_copy(out, st);
    return dm_stats_any(out);
}

/* A walk of the counters of every name with a record, and of the names
 * gone that keep theirs (since the process's start, or its fork): the
 * metrics file and the exit summary. begin returns the first (newest),
 * next the one after; every one reached stays readable (never freed, its
 * name unchanged) until end. Takes no lock: names made meanwhile may be
 * missed, names dropped meanwhile may still be seen (live 0). Read the
 * counters with dm_stats_copy and `live` with a relaxed load. A walk holds
 * back the memory of names dropped during it: copy, end, then do I/O. */
const struct dm_name_stats *dm_name_stats_begin(void);
const struct dm_name_stats *dm_name_stats_next(const struct dm_name_stats *c);
void dm_name_stats_end(void);

#endif
