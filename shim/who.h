/* who: what a process tells the tools about itself. While the process
 * holds or waits on anything, the store keeps one record under the
 * process's id: who it is ("host:pid program"), its lease and renewal
 * interval, the threads that took a lock (seq, tid, name), and what each
 * hold and wait is on, since when. `dmutex ls`, `top` and `unlock` join
 * the records to the locks (dm_who_join), so a holder shows as
 * "host:pid program (thread)" rather than a random id.
 *
 * No lock call writes it. A lock call only links its wait on a list
 * (around the store's acquire) and, when the process has no record (its
 * first lock, or the first after the last one expired) or a thread of it
 * takes a lock for the first time, asks for a write.
 * who's own thread (never the renewal thread: a slow write must not delay
 * a renewal) writes the record when asked; lists a wait once
 * it has lasted DM_WHO_LIST_AFTER_MS (an uncontended grant's round trip is
 * no wait worth a write); rewrites it soon after a listed wait ended, and
 * once per renewal interval while anything is held or waited on. An idle
 * process writes nothing: its record expires a lease after the last write
 * (as a dead process's does), and goes at once at exit. The store's
 * describe does the I/O. */
#ifndef DM_WHO_H
#define DM_WHO_H

#include <stddef.h>

#include "store.h"

/* A thread inside the store's acquire (waiting, or on the round trip of
 * an uncontended grant), on that thread's stack. */
struct dm_who_wait {
    const char *name;           /* the lock's name: lives as long as the wait */
    unsigned long seq;          /* the thread's owner seq */
    long long since_ms;         /* CLOCK_REALTIME ms it began */
    long long since_mono_ms;    /* the same on CLOCK_MONOTONIC */
    int listed;                 /* in the record as last written (who's mutex) */
    struct dm_who_wait *prev, *next;
};

/* Around the store's acquire of lock `name` by the thread whose owner seq
 * is `seq`: links w (and the thread, the first time) and asks for a write
 * when the process has no record yet. end: unlinks; a wait the record
 * lists asks for a rewrite. */
void dm_who_wait_begin(struct dm_who_wait *w, const char *name, unsigned long seq);
void dm_who_wait_end(struct dm_who_wait *w);

/* At exit, with nothing held: the record is deleted now (one store call,
 * bounded by its timeouts). */
void dm_who_exit(void);

/* Fork: who's mutex is held across fork(); the child has no record, no
 * waits, and only the forking thread. */
void dm_who_atfork(enum dm_fork_phase phase);

/* ---- for the tools ---- */

/* Fills what the records (texts[0..ntexts), each one process's record as
 * the store keeps it) say about each row's holder and waiters: who,
 * since, how long ago its lease was renewed, and the waiting processes.
 * now_ms: CLOCK_REALTIME ms. A row whose holder has no record keeps NULLs
 * (an older shim, a record not written yet, or a holder whose record
 * expired: it renews nothing). Out of memory, fields stay NULL. */
void dm_who_join(struct dm_lock_row *rows, size_t n, char *const *texts, size_t ntexts,
                 long long now_ms);

/* "host:pid program (thread)" of owner id `owner` from the records, into
 * buf ("" when none says); for `unlock`'s refusal. */
void dm_who_describe_owner(char *buf, size_t len, const char *owner, char *const *texts,
                           size_t ntexts);

/* A holder is alive as far as the store can tell when its lease was
 * renewed no longer ago than its renewal interval and this slack (a round
 * late by a slow reply, etcd's whole-second TTLs). */
#define DM_WHO_ALIVE_SLACK_MS(renew_ms) ((renew_ms) / 2 + 1000)

/* A wait is listed once it has lasted this long (renew_ms: the config's),
 * and a rewrite waits at least as long after the last write. */
#define DM_WHO_LIST_AFTER_MS(renew_ms) ((renew_ms) / 4 < 1000 ? ((renew_ms) / 4 > 0 ? (renew_ms) / 4 : 1) : 1000)

/* The record's first line: the format's name and version. */
#define DM_WHO_MAGIC "dmutex-who 1"

#endif
