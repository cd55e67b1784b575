/* Test program for tests/scan.test.sh: does a config that `dmutex scan`
 * wrote for this very program map what it should? Loads CONFIG with the
 * shim's config module, resolves every mutex entry (then every cond and
 * rwlock entry)
 * with the symbols module, as the shim would at start, and checks each
 * known variable's address. Prints "resolved NAME" or "FAILED NAME: why"
 * per entry, then "RESOLVED n of m, CHECKED k" for the mutexes and
 * "CONDS RESOLVED n of m, CHECKED k", "RWLOCKS RESOLVED n of m, CHECKED k";
 * exits 1 on any failure. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "sym_data.h"
#include "sym_sync.h"
#include "symbols.h"

struct known {
    const char *symbol;
    long offset;
    void *addr;
};

/* Resolves the n entries of one list (objects of `size` bytes) and checks
 * those of a known variable; counts into *ok and *checked. */
static void resolve_list(const struct dm_object_config *entries, size_t n, long size,
                         const struct known *known, size_t nknown, size_t *ok, size_t *checked)
{
    char err[DM_ERR_MAX];
    for (size_t i = 0; i < n; i++) {
        const struct dm_object_config *c = &entries[i];
        long off = c->index >= 0 ? c->index * size : c->offset;
        uintptr_t addr;
        if (!c->symbol)
            continue;
        if (dm_symbols_find(c->object, c->symbol, off, (size_t)size, NULL, &addr, err,
                            sizeof err)) {
            printf("FAILED %s: %s\n", c->name, err);
            continue;
        }
        int right = 1;
        for (size_t k = 0; k < nknown; k++) {
            if (strcmp(known[k].symbol, c->symbol) == 0 && known[k].offset == off) {
                (*checked)++;
                right = addr == (uintptr_t)known[k].addr;
            }
        }
        if (!right) {
            printf("FAILED %s: resolved to %#lx, the variable is elsewhere\n", c->name,
                   (unsigned long)addr);
            continue;
        }
        printf("resolved %s\n", c->name);
        (*ok)++;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: sym_resolve CONFIG\n");
        return 2;
    }
    const long m = (long)sizeof(pthread_mutex_t);
    const struct known known[] = {
        { "sym_global_lock", 0, &sym_global_lock },
        { "sym_a.c:cache_lock", 0, sym_a_cache_lock() },
        { "sym_b.c:cache_lock", 0, sym_b_cache_lock() },
        { "sym_a.c:only_in_a_lock", 0, sym_a_only_lock() },
        { "sym_a.c:fn_lock", 0, sym_fn_lock() },
        { "sym_inventory", (long)offsetof(struct sym_inventory, lock), &sym_inventory.lock },
        { "sym_slots", 0, &sym_slots[0] },
        { "sym_slots", m, &sym_slots[1] },
        { "sym_slots", 2 * m, &sym_slots[2] },
        { "sym_slots", 3 * m, &sym_slots[3] },
        { "sym_cxx_global_lock", 0, sym_cxx_lock() },
        { "sym_cxx_recursive", 0, sym_cxx_recursive_lock() },
        { "_ZN3app7ns_lockE", 0, sym_cxx_ns_lock() },
        { "symlib_lock", 0, symlib_lock_addr() },
        { "symlib.c:symlib_static_lock", 0, symlib_static_lock_addr() },
        { "symlib_copied_lock", 0, &symlib_copied_lock },
        { "sym_queue", (long)offsetof(struct sym_queue, lock), &sym_queue.lock },
    };
    const long c = (long)sizeof(pthread_cond_t);
    const struct known known_conds[] = {
        { "sym_ready_cond", 0, &sym_ready_cond },
        { "sym_wake_cond", 0, &sym_wake_cond[0] },
        { "sym_wake_cond", c, &sym_wake_cond[1] },
        { "sym_wake_cond", 2 * c, &sym_wake_cond[2] },
        { "sym_queue", (long)offsetof(struct sym_queue, not_empty), &sym_queue.not_empty },
        { "sym_queue", (long)offsetof(struct sym_queue, not_full), &sym_queue.not_full },
        { "sym_sync.c:sym_static_cv", 0, sym_static_cv_addr() },
        { "sym_cxx_cv", 0, sym_cxx_cv_addr() },
    };
    const long rw = (long)sizeof(pthread_rwlock_t);
    const struct known known_rwlocks[] = {
        { "sym_routes_rwlock", 0, &sym_routes_rwlock },
        { "sym_table_lock", 0, &sym_table_lock },
        { "sym_cxx_shared_mutex", 0, sym_cxx_shared_mutex_addr() },
    };

    struct dm_config cfg;
    char err[DM_ERR_MAX];
    dm_config_defaults(&cfg);
    if (dm_config_load(argv[1], &cfg, err, sizeof err) != 0) {
        printf("FAILED config: %s\n", err);
        return 1;
    }
    size_t ok = 0, checked = 0, cond_ok = 0, cond_checked = 0, rw_ok = 0, rw_checked = 0;
    resolve_list(cfg.mutexes, cfg.nmutexes, m, known, sizeof known / sizeof known[0], &ok,
                 &checked);
    resolve_list(cfg.conds, cfg.nconds, c, known_conds,
                 sizeof known_conds / sizeof known_conds[0], &cond_ok, &cond_checked);
    resolve_list(cfg.rwlocks, cfg.nrwlocks, rw, known_rwlocks,
                 sizeof known_rwlocks / sizeof known_rwlocks[0], &rw_ok, &rw_checked);
    printf("RESOLVED %zu of %zu, CHECKED %zu\n", ok, cfg.nmutexes, checked);
    printf("CONDS RESOLVED %zu of %zu, CHECKED %zu\n", cond_ok, cfg.nconds, cond_checked);
    printf("RWLOCKS RESOLVED %zu of %zu, CHECKED %zu\n", rw_ok, cfg.nrwlocks, rw_checked);
    int rc = ok == cfg.nmutexes && cond_ok == cfg.nconds && rw_ok == cfg.nrwlocks ? 0 : 1;
    dm_config_free(&cfg);
    dm_symbols_flush();
    return rc;
}
