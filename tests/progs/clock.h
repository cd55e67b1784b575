/* clock.h: monotonic milliseconds and absolute deadlines, the one copy
 * shared by the test programs (through prog.h) and the harness
 * (tests/harness.c). Static inline, libc only: a program that includes it
 * links nothing more. */
#ifndef DM_TEST_CLOCK_H
#define DM_TEST_CLOCK_H

#include <time.h>

/* Milliseconds on `clk`. */
static inline long long clock_ms(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* Milliseconds on CLOCK_MONOTONIC. */
static inline long long now_ms(void)
{
    return clock_ms(CLOCK_MONOTONIC);
}

/* An absolute time `ms` from now on `clk` (for timedlock, cond waits). */
static inline struct timespec deadline_in(clockid_t clk, long ms)
{
    struct timespec t;
    clock_gettime(clk, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

#endif
