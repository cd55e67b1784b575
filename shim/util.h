/* util: the small helpers every threaded module needs, defined once:
 * monotonic time in milliseconds, deadlines on CLOCK_MONOTONIC, sleeping,
 * capped exponential backoff with jitter, and condition variables that
 * wait on CLOCK_MONOTONIC. The bottom layer: includes no shim header, does
 * no I/O, never allocates, never logs. */
#ifndef DM_UTIL_H
#define DM_UTIL_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC (not wall time: a clock step never
 * shortens or stretches a lease or a wait). */
long long dm_now_ms(void);

/* *ts = now + ms on CLOCK_MONOTONIC: the absolute deadline of a timed wait
 * on a dm_cond_init_monotonic condition variable. */
void dm_deadline_in(struct timespec *ts, long ms);

/* *ts = the instant `at_ms` (a dm_now_ms value) as a timespec. */
void dm_deadline_at(struct timespec *ts, long long at_ms);

/* Milliseconds left before `deadline` (CLOCK_MONOTONIC): -1 for no
 * deadline (NULL), 0 once it has passed, and 1 when less than a
 * millisecond is left (one more short wait, not a rounding to "passed"). */
long dm_remaining_ms(const struct timespec *deadline);

/* Is a strictly earlier than b? Has `deadline` (CLOCK_MONOTONIC) passed? */
int dm_ts_before(const struct timespec *a, const struct timespec *b);
int dm_ts_passed(const struct timespec *deadline);

/* Sleeps `ms` in full: a signal handler interrupting it does not cut it
 * short. ms <= 0 returns at once. */
void dm_sleep_ms(long ms);

/* pthread_cond_init with a CLOCK_MONOTONIC condattr; returns its result. */
int dm_cond_init_monotonic(pthread_cond_t *cv);

/* A random number in [0, n) (0 for n <= 0), for backoff jitter: per-thread
 * state drawn from a process-wide seed, so that processes (and threads)
 * retrying together spread out. dm_jitter_seed sets that seed (cluster
 * gives its random process id, again in a fork child); unseeded, the
 * first draw seeds from the pid and the clock. */
long dm_jitter(long n);
void dm_jitter_seed(uint64_t seed);

/* Capped exponential backoff: each dm_backoff_next returns a delay in
 * [cur/2, cur] (jittered) and doubles cur up to max; dm_backoff_grow only
 * doubles; dm_backoff_reset goes back to min after a success. */
struct dm_backoff {
    long cur_ms, min_ms, max_ms;
};
#define DM_BACKOFF_INIT(min, max) { (min), (min), (max) }
long dm_backoff_next(struct dm_backoff *b);
void dm_backoff_grow(struct dm_backoff *b);
void dm_backoff_reset(struct dm_backoff *b);

#endif
