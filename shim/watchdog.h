/* watchdog: two threads per process. The renewal thread keeps the leases
 * of held store locks alive: when a hold is due (renew_ms after its last
 * renewal) it renews every due hold in one round (store.h: renew). The deadline
 * thread (no I/O) decides, on CLOCK_MONOTONIC, when a hold is lost: the server
 * says it is gone, or no renewal has succeeded for lease - margin. A lost
 * hold is logged with name, owner and fencing token, counted, and then
 * on_lease_lost applies: abort (the process ends before the server-side
 * lease can run out and another machine enter) or warn (the holder's unlock
 * returns EPERM). Knows nothing of pthread_mutex_t, nor of Redis. */
#ifndef DM_WATCHDOG_H
#define DM_WATCHDOG_H

#include <stdint.h>

#include "store.h"

/* A held cluster lock. The caller owns the memory, which must stay valid
 * for the life of the process (holds are reused, never freed). */
struct dm_hold {
    struct dm_store_lock *lock;
    char owner[DM_OWNER_MAX];
    uint64_t token;
    unsigned long wait_id;      /* the grant's request: "<owner>|<wait_id>" (dm_grant) */
    unsigned char read;         /* an rwlock's read hold (DM_ACQ_READ): renewed in its
                                   readers set; set before dm_watchdog_add */
    unsigned char idle;         /* the holder's (atomic, seq_cst): nobody is inside (a
                                   cached hold, or a batch's lingering one): its loss
                                   puts nothing at risk and aborts nothing. The holder
                                   clears it before it looks at `lost` to let a thread
                                   in; declare_lost sets `lost` before it reads it */
    long long since_real_ms;    /* CLOCK_REALTIME ms of the grant (the record, who.h);
                                   set before dm_watchdog_add */
    /* watchdog's, under its mutex: */
    unsigned gen;               /* bumped by every add, so a late reply for an old hold is ignored */
    long long renewed_ms;       /* monotonic ms at which the last good renewal was sent */
    long lease_ms;              /* the lease that renewal set */
    int registered;
    int lost;
    unsigned long snap_round;   /* the last renewal round that read it */
    struct dm_hold *prev, *next;
};

/* Starts watching `h` (lock, owner, token filled in). `asked_ms` is the
 * monotonic time its lease runs from (no later than the server's: when the
 * acquire that got it was sent, or a handover's moment, dm_grant), `lease_ms`
 * the lease the server gave it; one shorter than the config's (handed
 * over by a process with a shorter lease_ms) is renewed at a third of it. Starts the thread on first
 * use. Returns 0, or an errno from pthread_create when either thread
 * cannot start: then `h` is not watched, and must not be held. */
int dm_watchdog_add(struct dm_hold *h, long long asked_ms, long lease_ms);

/* What the process's record (who.c) lists of a hold: copies. */
struct dm_hold_info {
    char *name;
    char *owner;
    long long since_ms;         /* CLOCK_REALTIME ms of its grant */
    unsigned long long token;
    long lease_ms;              /* the lease its grant or last renewal set */
    int read;
};

/* The holds watched now (lost ones left out), copied into *out: their
 * count, or -1 out of memory; free with dm_watchdog_infos_free. count:
 * how many are watched (no lock, no I/O). */
long dm_watchdog_infos(struct dm_hold_info **out);
void dm_watchdog_infos_free(struct dm_hold_info *v, size_t n);
size_t dm_watchdog_count(void);

/* Waits until no renewal round in flight still reads `h` (a round works on
 * a snapshot of the holds, outside the mutex): call it, after
 * dm_watchdog_remove, before the memory of `h` is freed or reused. */
void dm_watchdog_forget(struct dm_hold *h);

/* Stops watching `h`; returns 1 if it had been found lost (warn mode) or is
 * past its loss deadline (then declared lost here, on_lease_lost applying). */
int dm_watchdog_remove(struct dm_hold *h);

/* When the lease of `h` as last renewed could first run out by itself, on
 * our clock: no earlier than this the server can have let it expire (it
 * set the lease after the request was sent). */
long long dm_watchdog_lease_end(struct dm_hold *h);

/* Has the watchdog found `h` lost (warn mode), or is it past its loss
 * deadline (a process stopped past its lease: before the deadline thread
 * has looked)? Nobody may join it. No I/O, no lock. */
int dm_watchdog_is_lost(struct dm_hold *h);

/* Counts a hold found lost by someone else (its release was refused). */
void dm_watchdog_note_lost(void);

/* Holds found lost since the process started. */
unsigned long dm_watchdog_lost_count(void);

/* Fork: wmu is held across fork(); the child watches nothing (the holds
 * and both threads are the parent's). */
void dm_watchdog_atfork(enum dm_fork_phase phase);

#endif
