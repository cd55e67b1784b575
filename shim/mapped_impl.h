/* mapped_impl: what the files of the mapped layer share (mapped.c: the
 * names, mutexes, thread end, fork and exit; mapped_hold.c: the process's
 * hold of a name; mapped_rw.c: listed rwlocks; mapped_cond.c: listed
 * conds). Not for other modules: they see
 * mapped.h.
 *
 * A lock name's record. tests/progs/staleprog.c includes it too, to place
 * a program's stale mapped mutex where the shim's next record's `mu` will
 * be (tests/test_posix.c, "stale address").
 *
 * The functions below are the files' own (the shim builds with
 * -fvisibility=hidden: none is exported): those named after what they
 * work on (name_, hold_, tl_, cond_) keep the names they had as statics,
 * the others take mapped_. */
#ifndef DM_MAPPED_IMPL_H
#define DM_MAPPED_IMPL_H

#include <pthread.h>
#include <time.h>

#include "config.h"
#include "mapped.h"
#include "store.h"
#include "util.h"
#include "watchdog.h"

enum name_state { NAME_FREE, NAME_ACQUIRING, NAME_HELD, NAME_RELEASING };

struct dm_name {
    struct dm_hnode node;               /* first: the table of names (util.h) */
    struct dm_store_lock *cl;
    pthread_mutex_t mu;                 /* guards what follows; never held across I/O */
    pthread_cond_t cv;                  /* every state change (CLOCK_MONOTONIC) */
    unsigned long users;                /* mutexes of the name held through the shim */
    int held;                           /* HELD with a cluster hold (not on_redis_down = "local") */
    int want;                           /* another process waits: release when users reach 0 */
    long long want_ms;                  /* since when (CLOCK_MONOTONIC ms) */
    int want_subscribed;
    int yield_logged;
    unsigned long refs;                 /* entries mapped to the name */
    unsigned long exiting;              /* users nobody is inside: an rwlock's shares of
                                           threads that ended; at exit also the
                                           exiting thread's and ended holders' mutexes */
    int exit_released;                  /* at exit: released on their behalf */
    unsigned char fair, cache;          /* what the entries asked for */
    unsigned char robust;               /* a robust mutex of the name was locked (atomic) */
    unsigned char rw;                   /* an rwlock's name (its entries are dm_rw_entry) */
    int write;                          /* rw: the hold (ACQUIRING, HELD) is for writing */
    enum name_state state;              /* among the ints: no padding (docs/decisions.md,
                                           "an idle name costs under 1 KB") */
    unsigned long wwait;                /* rw: local writers waiting for the read hold to drain */
    long long batch_end_ns;             /* HELD: a contended grant's batch ends (0: no
                                           batch; batch_ms = 0: at the grant) */
    long long left_ns;                  /* a lingering hold: its last unlock */
    long long busy_ns;                  /* HELD: its users last went from 0 to 1 (the
                                           grant; a join, while a batch runs) */
    long long handed_ns;                /* its last hold, batched or wanted, was given back */
    struct dm_timer linger;      /* gives a lingering hold back (the store's thread) */
    struct dm_hold hold;                /* the process's hold, while HELD */
};

/* ---- mapped_hold.c: the thread ------------------------------------------ */

/* The re-entrancy guard: set while the shim works, so that the locks and
 * waits of its own (and of the libraries it calls) go to glibc. */
extern __thread int in_shim __attribute__((visibility("hidden")));
/* This lock call found the mutex, rwlock or name taken (stats). */
extern __thread int tl_contended __attribute__((visibility("hidden")));

/* The shim's own work, cancellation off: pthread_mutex_lock is no
 * cancellation point, and a thread cancelled inside the shim's bookkeeping
 * would leave a name or a connection locked. */
static inline void shim_enter(int *cs)
{
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, cs);
    in_shim++;
}

static inline void shim_leave(int cs)
{
    in_shim--;
    pthread_setcancelstate(cs, NULL);
}

/* The calling thread's seq (from 1): what entries' holder fields hold. */
unsigned long mapped_self_seq(void);
/* The names this thread holds a share of: +1/-1 for one share. */
void tl_note(struct dm_name *nm, int delta);
/* Does this thread hold a share of nm (past the thread's table: any)? */
int tl_holds(struct dm_name *nm);
/* A thread that locked a mapped mutex or rwlock: its end is looked at
 * (mapped.c). */
void mapped_watch_thread_end(void);

/* The config (dm_mapped_init's), and whether the exit path ran (no more
 * caching). */
extern const struct dm_config *mapped_cfg __attribute__((visibility("hidden")));
extern int mapped_torn_down __attribute__((visibility("hidden")));
/* Does this thread hold anything of any name? */
int tl_holds_any(void);
/* The names this thread holds mutexes of, to tell a thread that keeps the
 * hold anyway from one that may step aside. Past DM_TL_NAMES the thread
 * counts as holding every name (it never steps aside: safe, if less fair).
 * Thread end, fork and exit (mapped.c) walk it. */
#define DM_TL_NAMES 8
struct tl_name { struct dm_name *nm; unsigned long n; };
extern __thread struct tl_name tl_names[DM_TL_NAMES] __attribute__((visibility("hidden")));
extern __thread unsigned long tl_overflow __attribute__((visibility("hidden")));

/* ---- mapped_hold.c: the process's hold of a name ------------------------- */

#define DM_YIELD             (-1)       /* name_join: step aside (internal) */

/* At start (mapped_names_init): the test hooks' environment. */
void mapped_hold_init(void);
/* clk's absolute time -> a CLOCK_MONOTONIC deadline (*none: too far
 * ahead to compute with; glibc waits for those). */
int mapped_to_monotonic(clockid_t clk, const struct timespec *abs, struct timespec *out, int *none);
/* Joins the process's hold of nm for this thread (see mapped_hold.c). */
int name_join_fast(struct dm_name *nm);
int name_join(struct dm_name *nm, unsigned long me, enum dm_lock_mode mode,
              const struct timespec *deadline, int *dead, int no_yield);
int name_wait_turn(struct dm_name *nm, const struct timespec *deadline);
int hold_lost_locked(struct dm_name *nm);
int hold_release(struct dm_name *nm);
int grace_wait_locked(struct dm_name *nm, enum dm_lock_mode mode, const struct timespec *deadline);
int name_take(struct dm_name *nm, unsigned long me, enum dm_lock_mode mode,
              const struct timespec *deadline, int *dead);
int name_leave(struct dm_name *nm);
/* name_leave under in_shim. */
int mapped_leave_quietly(struct dm_name *nm);

/* ---- mapped.c: mutexes and their waits ----------------------------------- */

int mapped_deadline_of(int timed, clockid_t clk, const struct timespec *abstime,
                       struct timespec *dl, struct timespec **dlp);
int mapped_is_robust(const pthread_mutex_t *m);
int mapped_foreign_unlock_ok(const pthread_mutex_t *m);
void hold_observe(struct dm_entry *e);

/* A mapped mutex's condition wait: what takes its share of the name back. */
struct cond_wait {
    struct dm_entry *e;
    pthread_mutex_t *m;
    unsigned long me, depth;
    int dead;                   /* the cluster grant found its last holder dead */
    int real_dead;              /* the real mutex came back EOWNERDEAD */
};
void cond_rejoin(struct cond_wait *w);

/* ---- mapped.c's parts of the layer's init, fork and removal -------------
 * (mapped_cond.c's dm_mapped_init, dm_mapped_atfork, dm_mapped_remove) */

void mapped_names_init(const struct dm_config *cfg);
/* dm_mapped_remove of a mutex's or an rwlock's entry (union named_entry),
 * already out of the registry. */
void mapped_named_remove(void *entry);
/* names_mu around fork; the child's names, entries and thread state made
 * anew (after the conds'). */
void mapped_names_fork_mutex(enum dm_fork_phase phase);
void mapped_names_fork_child(void);

#endif
