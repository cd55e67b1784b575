/* stats: the table of every lock name's counters (struct dm_name_stats,
 * stats.h), which outlive the name's record, and the walk of them that
 * metrics makes without a lock. Called with the records' table mutex held
 * (rlock's locks_mu): the walk is the only access from outside it. Knows
 * nothing of Redis or of the records that point at the counters. */
#include "stats.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

/* Every name's counters (struct dm_name_stats), under the records' table
 * mutex (the caller's): a table by name; the list readers walk without the lock (the head is
 * atomic); the names gone that keep theirs, oldest first; those unlinked,
 * freed once no walk is on (`walkers`, atomic). */
static struct dm_htab counters;
static struct dm_name_stats *counters_list;
static struct dm_name_stats *kept_first, *kept_last;
static size_t kept_n;
static struct dm_name_stats *unlinked;
static unsigned long walkers;

/* What a count goes to when its counters could not be allocated. */
static struct dm_stats counts_sink;

struct dm_stats *dm_name_stats_make(struct dm_name_stats *c)
{
    struct dm_stats *st = calloc(1, sizeof *st), *none = NULL;
    if (!st) {
        static int logged;
        if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
            dm_error("lock %s: out of memory for its counters; its counts are lost until "
                     "there is memory", c->name);
        return &counts_sink;
    }
    if (__atomic_compare_exchange_n(&c->st, &none, st, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return st;
    free(st);           /* another thread's first count was first */
    return none;
}

static void kept_remove(struct dm_name_stats *c)
{
    *(c->kept_prev ? &c->kept_prev->kept_next : &kept_first) = c->kept_next;
    *(c->kept_next ? &c->kept_next->kept_prev : &kept_last) = c->kept_prev;
    c->kept_next = c->kept_prev = NULL;
    kept_n--;
}

/* Frees what was unlinked once no walk may see it. A walker counts itself
 * (seq_cst) before it reads the head; here the unlinking stores come
 * before the count is read: with the fences between, a walk the count
 * misses started after them and cannot reach what they unlinked. */
static void counters_reap(void)
{
    if (!unlinked)
        return;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&walkers, __ATOMIC_RELAXED) != 0)
        return;         /* the next put or get frees them */
    while (unlinked) {
        struct dm_name_stats *c = unlinked;
        unlinked = c->kept_next;
        free(c->st);
        free(c);
    }
}

/* Out of the table and the list (a walk on it goes on to the next); freed
 * by counters_reap. */
static void counters_unlink(struct dm_name_stats *c)
{
    dm_htab_del(&counters, &c->node);
    __atomic_store_n(c->prev ? &c->prev->next : &counters_list, c->next, __ATOMIC_RELEASE);
    if (c->next)
        c->next->prev = c->prev;
    c->kept_next = unlinked;
    unlinked = c;
}

/* The name's last record is gone: its counters stay if it counted
 * anything (the oldest kept ones go past DM_NAME_STATS_KEPT_MAX). */
void dm_name_stats_drop(struct dm_name_stats *c)
{
    __atomic_store_n(&c->live, 0, __ATOMIC_RELAXED);
    const struct dm_stats *st = __atomic_load_n(&c->st, __ATOMIC_ACQUIRE);
    if (!st || !dm_stats_any(st)) {
        counters_unlink(c);
    } else {
        c->kept_prev = kept_last;
        *(kept_last ? &kept_last->kept_next : &kept_first) = c;
        kept_last = c;
        if (++kept_n > DM_NAME_STATS_KEPT_MAX) {
            struct dm_name_stats *old = kept_first;
            kept_remove(old);
            counters_unlink(old);
        }
    }
    counters_reap();
}

/* The counters of `name` (hash h): those it kept, or new ones (filled
 * before the list's readers can see them). NULL out of memory. */
struct dm_name_stats *dm_name_stats_get(const char *name, size_t h)
{
    counters_reap();
    for (struct dm_hnode *x = dm_htab_chain(&counters, h); x; x = x->next) {
        struct dm_name_stats *c = (struct dm_name_stats *)x;
        if (x->hash == h && strcmp(c->name, name) == 0) {
            if (c == kept_first || c->kept_prev)
                kept_remove(c);
            __atomic_store_n(&c->live, 1, __ATOMIC_RELAXED);
            return c;
        }
    }
    size_t nl = strlen(name);
    struct dm_name_stats *c = calloc(1, offsetof(struct dm_name_stats, name) + nl + 1);
    if (!c)
        return NULL;
    memcpy(c->name, name, nl + 1);
    if (dm_htab_add(&counters, &c->node, h) != 0) {
        free(c);
        return NULL;
    }
    c->live = 1;
    c->next = counters_list;
    if (counters_list)
        counters_list->prev = c;
    __atomic_store_n(&counters_list, c, __ATOMIC_RELEASE);
    return c;
}

const struct dm_name_stats *dm_name_stats_begin(void)
{
    __atomic_fetch_add(&walkers, 1, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return __atomic_load_n(&counters_list, __ATOMIC_ACQUIRE);
}

const struct dm_name_stats *dm_name_stats_next(const struct dm_name_stats *c)
{
    return __atomic_load_n(&c->next, __ATOMIC_ACQUIRE);
}

void dm_name_stats_end(void)
{
    __atomic_fetch_sub(&walkers, 1, __ATOMIC_RELEASE);
}

void dm_name_stats_fork_child(void)
{
    /* The child counts from zero: the names gone keep nothing, and no
     * walk is on (the writer thread is the parent's). */
    __atomic_store_n(&walkers, 0, __ATOMIC_RELAXED);
    for (struct dm_name_stats *c = counters_list; c; c = c->next)
        if (c->st)
            dm_stats_reset(c->st);
    while (kept_first) {
        struct dm_name_stats *c = kept_first;
        kept_remove(c);
        counters_unlink(c);
    }
    counters_reap();
}
