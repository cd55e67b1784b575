/* table: what the trace library's two sides share, at its bottom: the
 * tables record.c fills and report.c reads and zeroes, the thread's
 * "these calls are the tracer's own" flag, and the clock of the hot path
 * (trace.h's now_ticks) with its calibration. Calls nothing of the
 * shim's. */
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "trace.h"

#define STORE(x, v) atomic_store_explicit(&(x), (v), memory_order_relaxed)

struct dm_trace_slot dm_trace_table[DM_TRACE_SLOTS];
_Atomic uint64_t dm_trace_untracked;
struct dm_trace_obj dm_trace_conds[DM_TRACE_OBJ_SLOTS];
struct dm_trace_obj dm_trace_rwlocks[DM_TRACE_OBJ_SLOTS];
_Atomic uint64_t dm_trace_untracked_conds, dm_trace_untracked_rwlocks;

__thread int dm_trace_quiet;

int dm_trace_self_quiet(int on)
{
    int was = dm_trace_quiet;
    dm_trace_quiet = on;
    return was;
}

/* rdtsc from the start where there is one (a lock before the constructor
 * is timed in the same unit); the constructor turns it off where the TSC
 * is not invariant. */
#if defined(__x86_64__)
int dm_trace_use_tsc = 1;
#else
int dm_trace_use_tsc = 0;
#endif
static uint64_t calib_ticks, calib_ns;  /* the constructor's reading of both clocks */

static int tsc_invariant(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return 0;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d >> 8) & 1;
#else
    return 0;
#endif
}

void dm_trace_clock_start(void)
{
    if (!tsc_invariant())
        dm_trace_use_tsc = 0;
    calib_ticks = now_ticks();
    calib_ns = dm_trace_clock_ns();
}

#define CALIBRATION_NS 2000000ull   /* at least this long between the two readings */

double dm_trace_ns_per_tick(void)
{
    if (!dm_trace_use_tsc)
        return 1.0;
    uint64_t n;
    while ((n = dm_trace_clock_ns()) - calib_ns < CALIBRATION_NS) {
        /* a young process: wait for a ratio worth the name */
    }
    uint64_t t = now_ticks();
    if (t <= calib_ticks)
        return 1.0;
    return (double)(n - calib_ns) / (double)(t - calib_ticks);
}

void dm_trace_slot_zero(struct dm_trace_slot *s)
{
    STORE(s->locks, 0);
    STORE(s->contended, 0);
    STORE(s->wait_ticks, 0);
    STORE(s->wait_max_ticks, 0);
    STORE(s->hold_max_ticks, 0);
    STORE(s->threads, 0);
    STORE(s->folded, 0);
    for (int b = 0; b < DM_TRACE_HIST; b++)
        STORE(s->hist[b], 0);
}

void dm_trace_obj_zero(struct dm_trace_obj *o)
{
    for (int k = 0; k < 3; k++)
        STORE(o->n[k], 0);
    STORE(o->wait_ticks, 0);
    STORE(o->wait_max_ticks, 0);
    STORE(o->threads, 0);
    STORE(o->folded, 0);
}
