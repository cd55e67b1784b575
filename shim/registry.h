/* registry: mutex address -> mapped entry. The one question the passthrough
 * path asks, so a lookup is a few loads: no lock, no malloc, no call. The
 * table is open-addressed and published through one atomic pointer; writers
 * (start-up, dlopen, init_site, dmutex_name) serialise among themselves,
 * insert in place while there is room, and publish a doubled copy when
 * there is not. Old tables are kept, never freed, because a reader may still
 * be walking one; their total size is bounded by the current table's.
 *
 * In front of the table sits a filter: one byte per slot of address bits,
 * non-zero when some mapped mutex hashes there. An unmapped mutex almost
 * always finds its byte zero: one load from a 4 KiB array that stays in
 * L1, and glibc is next. Bytes are set on add (before the key is
 * published) and never cleared: the filter never says "no" for a mapped
 * address, and a removed one only costs a table probe.
 * Knows nothing of Redis, config syntax or what an entry holds. */
#ifndef DM_REGISTRY_H
#define DM_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#define DM_REGISTRY_EMPTY   ((uintptr_t)0)
#define DM_REGISTRY_DELETED ((uintptr_t)1)

struct dm_registry_slot {
    uintptr_t key;              /* mutex address, EMPTY or DELETED */
    void *value;
};

struct dm_registry_table {
    size_t mask;                /* capacity - 1; capacity is a power of two */
    size_t used;                /* live + deleted slots (writer's count) */
    size_t live;
    struct dm_registry_table *older;    /* retired tables, for the record */
    struct dm_registry_slot slots[];
};

#define DM_REGISTRY_FILTER_SIZE 4096    /* bytes; a power of two */

/* NULL while nothing is mapped. */
extern struct dm_registry_table *dm_registry_current;
/* All zero while nothing is mapped: the one-load early exit. */
extern unsigned char dm_registry_filter[DM_REGISTRY_FILTER_SIZE];

static inline size_t dm_registry_filter_index(uintptr_t key)
{
    /* Mutexes are 8-byte aligned and 40 bytes long: neighbours in an array
     * land 5 bytes apart, distinct for 819 of them in a row. */
    return (size_t)(key >> 3) & (DM_REGISTRY_FILTER_SIZE - 1);
}

static inline size_t dm_registry_hash(uintptr_t key)
{
    /* Mutexes are at least 8-byte aligned; a Fibonacci multiply spreads the
     * rest over the high bits, which the shift brings down. */
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ULL) >> 32);
}

/* The entry mapped at `addr`, or NULL. Safe from any thread at any time. */
static inline void *dm_registry_lookup(const void *addr)
{
    uintptr_t key = (uintptr_t)addr;
    if (__builtin_expect(__atomic_load_n(&dm_registry_filter[dm_registry_filter_index(key)],
                                         __ATOMIC_RELAXED) == 0, 1))
        return NULL;
    struct dm_registry_table *t =
        __atomic_load_n(&dm_registry_current, __ATOMIC_ACQUIRE);
    if (!t)
        return NULL;
    for (size_t i = dm_registry_hash(key) & t->mask;; i = (i + 1) & t->mask) {
        uintptr_t k = __atomic_load_n(&t->slots[i].key, __ATOMIC_ACQUIRE);
        if (k == key)
            return __atomic_load_n(&t->slots[i].value, __ATOMIC_RELAXED);
        if (k == DM_REGISTRY_EMPTY)
            return NULL;
    }
}

/* Maps addr -> value (replacing any previous value). Returns 0 or ENOMEM. */
int dm_registry_add(const void *addr, void *value);

/* Unmaps addr; returns the value it had, or NULL. */
void *dm_registry_remove(const void *addr);

/* Calls fn for every live entry (writers are held off meanwhile). */
void dm_registry_foreach(void (*fn)(const void *addr, void *value, void *arg), void *arg);

/* Number of live entries. */
size_t dm_registry_count(void);

/* Fork (called only by startup's handlers, in their lock order): take the
 * writer lock before fork(); release it after, in parent and child. */
void dm_registry_atfork_prepare(void);
void dm_registry_atfork_release(void);

#endif
