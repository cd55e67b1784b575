/* wconn: a fair mutex waiter reads its handover on a connection of its own,
 * subscribed to its wait channel (dm_redis_subscribe): the message wakes
 * the waiting thread itself, where the subscriber thread's would take two
 * wake-ups (that thread, then the waiter); lock.c says which waits
 * (direct_wait). Between two waits the connection stays subscribed in the
 * record (l->wconn), at most DM_WCONNS_KEPT of them per process, so a
 * name waited on again costs no SUBSCRIBE; one that breaks is dropped
 * and the wait makes a new one after its next attempt.
 *
 * Each is a client of the server (maxclients) and a descriptor of the
 * process, so a process has at most DM_WCONNS_MAX of them, waiting or
 * kept: a wait beyond that, or one whose connection cannot be made
 * (maxclients, EMFILE, out of memory), waits on notify's channel instead
 * (one wake-up more), never fails. They are listed in `wconns` so that a
 * fork child closes every one, those of waits in progress included.
 *
 * The records keep theirs in a slot of their own (lock.h's struct
 * dm_rlock, wconn); a slot is only ever changed through these. */
#ifndef DM_WCONN_H
#define DM_WCONN_H

#include "redis.h"

/* The connection in *slot, taken for one wait; NULL: none. */
struct dm_conn *dm_wconn_take(struct dm_conn **slot);
/* Keeps a wait's connection (still subscribed) in *slot for the next wait
 * of the name, or closes it (broken, one kept already, or enough kept). */
void dm_wconn_keep(struct dm_conn **slot, struct dm_conn *wc);
/* A new connection subscribed to `channel` (lock `name`'s wait channel of
 * this process; the name for the debug line); NULL when DM_WCONNS_MAX are
 * open already or it cannot be made. */
struct dm_conn *dm_wconn_new(const char *channel, const char *name);
/* Closes one (NULL: nothing) and takes it off the process's list. */
void dm_wconn_close(struct dm_conn *wc);
/* A fork child's: the parent's connections closed unread and unsent to. */
void dm_wconn_fork_child(void);

#endif
