/* util: the small helpers every threaded module needs, defined once:
 * monotonic time in milliseconds, deadlines on CLOCK_MONOTONIC, sleeping,
 * capped exponential backoff with jitter, condition variables that wait on
 * CLOCK_MONOTONIC, a module mutex's fork handling, the start of the shim's
 * own threads, and the intrusive hash table of named records. Just above
 * the bottom (log, then real: util.c locks through real.h): this header
 * includes no shim header; util does no I/O, never logs, and allocates
 * only the hash table's buckets (and the stacks of the threads it starts). */
#ifndef DM_UTIL_H
#define DM_UTIL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/time.h>
#include <time.h>

/* Milliseconds on CLOCK_MONOTONIC (not wall time: a clock step never
 * shortens or stretches a lease or a wait). */
long long dm_now_ms(void);
/* CLOCK_MONOTONIC in nanoseconds. */
long long dm_now_ns(void);

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

/* `ms` as a struct timeval (hiredis's connect and command timeouts). */
struct timeval dm_ms_timeval(long ms);

/* Sleeps `ms` in full: a signal handler interrupting it does not cut it
 * short. ms <= 0 returns at once. */
void dm_sleep_ms(long ms);

/* Waits with poll(2) for `events` on fd until deadline_ms (dm_now_ms's
 * clock), a signal restarting the wait for the time left. 1 ready, 0 timed
 * out, -1 a poll error (errno). */
int dm_wait_fd(int fd, short events, long long deadline_ms);

/* Starts fn(arg) on a detached thread with every signal blocked in it
 * (signals are the program's: they must reach its own threads, never
 * the shim's), the caller's mask left as it was; *t (NULL: not wanted)
 * is the thread. Returns pthread_create's result. */
int dm_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

/* pthread_cond_init with a CLOCK_MONOTONIC condattr; returns its result. */
int dm_cond_init_monotonic(pthread_cond_t *cv);

/* A random number in [0, n) (0 for n <= 0), for backoff jitter: per-thread
 * state drawn from a process-wide seed, so that processes (and threads)
 * retrying together spread out. dm_jitter_seed sets that seed (cluster
 * gives its random process id, again in a fork child); unseeded, the
 * first draw seeds from the pid and the clock. */
long dm_jitter(long n);
void dm_jitter_seed(uint64_t seed);

/* v in decimal into buf (at least DM_FMT_U64_MAX bytes), NUL-terminated;
 * returns its length. snprintf's "%" PRIu64 / "%ld" without the format
 * parsing: the arguments of every script call are built with these. */
#define DM_FMT_U64_MAX 21
size_t dm_fmt_u64(char *buf, uint64_t v);
size_t dm_fmt_long(char *buf, long v);

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

/* The three moments of fork() for a module's state (startup's one
 * pthread_atfork calls each module in its lock order). */
enum dm_fork_phase { DM_FORK_PREPARE, DM_FORK_PARENT, DM_FORK_CHILD };

/* The usual handling of a module's mutex around fork(): prepare takes it
 * (so the child never sees what it guards half changed), the parent lets
 * go, the child makes it anew (the thread that took it is the child's,
 * but a fresh mutex needs no owner). */
void dm_fork_mutex(pthread_mutex_t *mu, enum dm_fork_phase phase);

/* A few callbacks a module calls when something it knows moved (sentinel:
 * the primary's address; slots: the slot map), from whichever thread
 * found out, with none of the module's own locks held. A callback must
 * take no lock at all (an atomic, a write to an eventfd, sem_post): its
 * caller may hold others (notify's thread holds its mutex when a MOVED
 * answers a subscription). Each added once (a slot taken with an atomic
 * exchange: no mutex, so a hook may be added from anywhere), never
 * removed. */
#define DM_HOOKS_MAX 2
struct dm_hooks {
    void (*fn[DM_HOOKS_MAX])(void);
};
/* 0 (also when fn is in already), or -1 when every slot is taken. */
int dm_hooks_add(struct dm_hooks *h, void (*fn)(void));
void dm_hooks_call(struct dm_hooks *h);

/* An intrusive chained hash table, for the records a process keeps by name
 * (rlock's records, notify's channels, mapped's names). A record embeds a
 * struct dm_hnode as its FIRST member (so a node is the record); the
 * caller locks, walks a chain to compare its own keys, and frees. The
 * table grows by doubling when it is full and halves below 1/8 full, never
 * under DM_HTAB_MIN buckets; out of memory it keeps its size (chains get
 * longer, nothing breaks). */
struct dm_hnode {
    struct dm_hnode *next;
    size_t hash;
};
struct dm_htab {
    struct dm_hnode **b;
    size_t n;                   /* buckets, a power of two; 0 before the first add */
    size_t count;
    unsigned long probes;       /* chain steps of all lookups (the caller counts), for tests */
    int no_shrink;              /* a walk that may remove is on */
};
#define DM_HTAB_MIN      64
#define DM_HTAB_SHRINK_AT 8

/* djb2 of the bytes, with the high bits folded in. */
size_t dm_hash_bytes(const char *s, size_t len);
/* The chain of `hash` (NULL for an empty table). */
struct dm_hnode *dm_htab_chain(const struct dm_htab *t, size_t hash);
/* Adds x with `hash` at the head of its chain: 0, or -1 out of memory
 * (nothing added). */
int dm_htab_add(struct dm_htab *t, struct dm_hnode *x, size_t hash);
/* Unlinks x (it must be in the table). */
void dm_htab_del(struct dm_htab *t, struct dm_hnode *x);
/* A table's record count and lookup steps so far, read under its mutex
 * (tests check that records are freed and chains stay short). */
struct dm_htab_stats {
    size_t count;
    unsigned long probes;
};
struct dm_htab_stats dm_htab_stats(const struct dm_htab *t, pthread_mutex_t *mu);

#endif
