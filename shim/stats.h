/* stats: the counters of one lock name in this process, as the metrics
 * file (shim/metrics.c) and the exit summary show them. One struct
 * dm_stats per name, allocated by cluster when the name first counts
 * something (dm_cluster_lock_counts) and held by its struct
 * dm_cluster_stats, which outlives the name's record (the record points at
 * it; a name destroyed and made again counts on, cluster.h says for how
 * long); each fact is counted by the module that
 * knows it (mapped: lock calls, waits, holds, contention, the held gauge;
 * cluster: grants, handovers, failed Redis calls; watchdog: renewals,
 * losses; for a condition variable's name, mapped: signals and waits,
 * cluster: signals lost). Every update is one relaxed atomic add (or a rarely taken
 * compare-and-swap for a maximum): no lock and, after a name's first count, no
 * allocation, so that the
 * mapped path stays within its budget. A reader sees each counter whole,
 * not all of them at one instant. The bottom layer, beside util: includes
 * no shim header, does no I/O. docs/deploying.md ("Metrics") says what
 * each one counts. */
#ifndef DM_STATS_H
#define DM_STATS_H

#include <stdint.h>
#include <string.h>

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

#endif
