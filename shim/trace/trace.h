/* trace: what libdmutex-trace.so records for `dmutex trace`, shared by its
 * two files: record.c (the interposed pthread_* entry points, C11's mtx_*
 * and cnd_* beside them, and the table
 * they fill) and report.c (the report: rows identified as config entries
 * would name them, text and JSON). Not part of libdmutex.so: the trace
 * library is preloaded instead of the shim, maps nothing, talks to no
 * Redis, and links the shim's core (libdmcore.a: real, symbols, elfsyms,
 * config's name rules, log) for what it shares with it. */
#ifndef DM_TRACE_H
#define DM_TRACE_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* The table: fixed size, open addressed by mutex address, never freed, no
 * allocation. A full table is counted (dm_trace_untracked), not fatal. */
#define DM_TRACE_SLOTS_LOG2     14
#define DM_TRACE_SLOTS          (1u << DM_TRACE_SLOTS_LOG2)
#define DM_TRACE_PROBES         64      /* slots tried before a mutex counts as untracked */
#define DM_TRACE_HIST           40      /* hold-time buckets: [2^b, 2^(b+1)) ticks, the last open */
#define DM_TRACE_THREAD_BITS    64      /* distinct threads told apart per mutex */

/* One mutex. The key is set once (compare-and-swap); the counters are
 * written only by the thread that holds the mutex (plain relaxed loads and
 * stores, no locked instruction on the hot path), and read racily by the
 * report.
 *
 * A heap or stack address is used again by other mutexes: when an
 * address with counts is initialised again from another call site, its
 * counts are retired (added with locked instructions: init is not the hot
 * path) into the slot keyed DM_TRACE_RETIRED(the old init site), one per
 * init site, and its own slot starts over with the new site. So the
 * counts of a mutex made by b_new() at an address an a_new() mutex had
 * before are b_new's, not a_new's. (A destroy retires nothing: a global
 * destroyed at exit keeps its counts, and its address names it.) */
#define DM_TRACE_RETIRED(site)  ((uintptr_t)(site) | 1)    /* odd: never a mutex's address */
#define DM_TRACE_IS_RETIRED(key) (((key) & 1) != 0)

struct dm_trace_slot {
    _Atomic uintptr_t key;              /* the mutex's address, 0: free; odd: retired counts */
    _Atomic uintptr_t init_site;        /* return address of its pthread_mutex_init (or
                                         * mtx_init), 0: none */
    _Atomic uintptr_t first;            /* retired: the address of the first mutex retired into it */
    _Atomic uint64_t folded;            /* retired: how many mutexes' counts it holds */
    _Atomic uint64_t locks;             /* acquisitions (cond-wait re-acquisitions included) */
    _Atomic uint64_t contended;         /* acquisitions that found it held */
    _Atomic uint64_t wait_ticks, wait_max_ticks;    /* times in ticks: dm_trace_ns_per_tick */
    _Atomic uint64_t hold_max_ticks;
    _Atomic uint64_t threads;           /* bit (thread number % 64) of each thread that locked it */
    _Atomic uint64_t hold_start;        /* the holder's, in ticks; meaningful while depth > 0 */
    _Atomic uint32_t depth;             /* recursive holds of the holder */
    _Atomic uint32_t c11;               /* the init was C11's mtx_init (a mtx_t) */
    _Atomic uint32_t hist[DM_TRACE_HIST];
};

extern struct dm_trace_slot dm_trace_table[DM_TRACE_SLOTS];
extern _Atomic uint64_t dm_trace_untracked;    /* acquisitions of mutexes with no slot */

/* Condition variables and rwlocks: a table each, open addressed by the
 * object's address like the mutexes', never freed, no allocation. Several
 * threads write one slot at once (readers of one rwlock, signallers and
 * waiters of one cond), so the counters are relaxed atomic adds: one more
 * locked instruction beside the one the call itself makes on the object. */
#define DM_TRACE_OBJ_SLOTS_LOG2 12
#define DM_TRACE_OBJ_SLOTS      (1u << DM_TRACE_OBJ_SLOTS_LOG2)

enum {                                  /* dm_trace_obj.n[] of a cond */
    DM_TRACE_COND_WAITS, DM_TRACE_COND_SIGNALS, DM_TRACE_COND_BROADCASTS,
};
enum {                                  /* dm_trace_obj.n[] of an rwlock */
    DM_TRACE_RW_READS, DM_TRACE_RW_WRITES, DM_TRACE_RW_CONTENDED,
};

/* An object address initialised again from another call site holds
 * another object, as a mutex's does: its counts are retired into the slot
 * keyed DM_TRACE_RETIRED(the old init site) of the same table. */
struct dm_trace_obj {
    _Atomic uintptr_t key;              /* the object's address, 0: free; odd: retired counts */
    _Atomic uintptr_t init_site;        /* return address of its pthread_cond_init /
                                         * pthread_rwlock_init, 0: none */
    _Atomic uintptr_t first;            /* retired: the address of the first object retired */
    _Atomic uint64_t folded;            /* retired: how many objects' counts it holds */
    _Atomic uint64_t n[3];              /* the counts above */
    _Atomic uint64_t wait_ticks, wait_max_ticks;    /* cond: time in its waits; rwlock: contended
                                                     * waits; in ticks: dm_trace_ns_per_tick */
    _Atomic uint64_t threads;           /* bit (thread number % 64) of each thread that used it */
    _Atomic uint32_t c11;               /* the init was C11's cnd_init (a cnd_t) */
};

extern struct dm_trace_obj dm_trace_conds[DM_TRACE_OBJ_SLOTS];
extern struct dm_trace_obj dm_trace_rwlocks[DM_TRACE_OBJ_SLOTS];
extern _Atomic uint64_t dm_trace_untracked_conds;      /* calls on conds with no slot */
extern _Atomic uint64_t dm_trace_untracked_rwlocks;    /* acquisitions of rwlocks with no slot */

/* table.c: the thread's traced calls are the tracer's own (set by
 * dm_trace_self_quiet): they pass straight through. */
extern __thread int dm_trace_quiet;
extern int dm_trace_use_tsc;            /* table.c: now_ticks reads the TSC */

static inline uint64_t dm_trace_clock_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The clock of the hot path: TSC ticks (dm_trace_use_tsc), else ns of
 * CLOCK_MONOTONIC. */
static inline uint64_t now_ticks(void)
{
#if defined(__x86_64__)
    if (dm_trace_use_tsc)
        return __rdtsc();
#endif
    return dm_trace_clock_ns();
}

/* Time from `from` to `to`, 0 if the clock went back (a TSC read on
 * another core, or a unit change at the constructor). */
static inline uint64_t since(uint64_t from, uint64_t to)
{
    return to > from ? to - from : 0;
}

/* table.c: the constructor's reading of both clocks (and the TSC turned
 * off where it is not invariant). */
void dm_trace_clock_start(void);

/* table.c: what a tick of the times above is in ns. The times are read
 * with rdtsc where the CPU says its TSC is invariant (x86-64: a third of
 * the cost of clock_gettime on the hot path), else they are ns of
 * CLOCK_MONOTONIC and this is 1. Calibrated against CLOCK_MONOTONIC since
 * the constructor (a process younger than 2 ms waits until it is that old
 * for a precise ratio). */
double dm_trace_ns_per_tick(void);

/* table.c: zeroes s's counts (a fork child's start, or counts the
 * report took away); its key and init site stay. */
void dm_trace_slot_zero(struct dm_trace_slot *s);

/* table.c: zeroes o's counts (a fork child's start, or counts the report
 * took away at a dlclose); its key and init site stay. */
void dm_trace_obj_zero(struct dm_trace_obj *o);

/* report.c: writes the process's report (text on stderr, JSON to the -o
 * file) with `why` ("exit", "signal", "interval") in its header. Takes
 * the loader's lock and allocates: never from a signal handler or with a
 * traced mutex held. Serialised: one report at a time. */
void dm_trace_report(const char *why);

/* report.c: the constructor's part: notes which file stderr is, so that
 * a report never goes into a file the program opened later on fd 2. */
void dm_trace_report_start(void);

/* report.c: before dlclose(handle): the mutexes, conds and rwlocks of
 * that object (its variables, and heap ones its code initialised) are
 * identified now,
 * while its symbols can be read, and their counts kept with that
 * identification (an unloaded object's addresses name nothing, or later
 * another object's). */
void dm_trace_report_unloading(void *handle);

/* report.c: after a dlclose: the cached symbol tables are dropped, since
 * another file (the plugin rebuilt) may be loaded at the same place under
 * the same name, and a table cached for the old one would name its
 * addresses. */
void dm_trace_report_unloaded(void);

/* report.c: fork handlers (record.c registers them). A fork while another
 * thread writes a report must not leave the child with the report's lock
 * (and the symbol cache's, taken under it) held by a thread it does not
 * have: prepare waits for the report to end; parent and child release. */
void dm_trace_report_prepare(void);
void dm_trace_report_release(void);
void dm_trace_report_child(void);      /* the child's: also forgets the parent's unloaded rows */

/* table.c: the calling thread's traced calls pass straight through while
 * set (the report's own locking is not the program's). Returns the
 * previous setting. */
int dm_trace_self_quiet(int on);

#endif
