/* slots: which node of a Redis Cluster owns a slot (redis.cluster): the
 * slot of a key (CRC16 of its hash tag, 16384 slots, as Redis computes
 * it), the slot map from a CLUSTER SLOTS reply, the nodes it names, and
 * the MOVED/ASK redirections. No I/O: redis.c asks a node and hands the
 * reply here, and tells this module when a node answered MOVED. Knows
 * nothing of the scripts, the pool or pthread_mutex_t. */
#ifndef DM_SLOTS_H
#define DM_SLOTS_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "config.h"
#include "util.h"

#define DM_SLOTS_COUNT      16384   /* Redis Cluster's hash slots */
#define DM_SLOTS_NODES_MAX  64      /* node addresses a process keeps at once */
#define DM_SLOTS_HOST_MAX   256     /* bytes of a node's host, with the NUL */
#define DM_SLOTS_REFRESH_MIN_MS 100 /* a storm of MOVED asks for the map once per this */

/* Remembers the config (the seeds become nodes 0..n-1); no I/O. */
void dm_slots_setup(const struct dm_redis_config *cfg);

/* Does the config name a cluster? */
int dm_slots_enabled(void);

/* The slot of `key` (len bytes): CRC16 (XMODEM) of the part between the
 * first '{' and the next '}' when that part is not empty, else of the
 * whole key; modulo 16384. */
unsigned dm_slots_keyslot(const char *key, size_t len);

/* The node that owns `slot` in the map, or -1 when the map does not know
 * it (never asked yet, or a node went away): the caller asks a node for
 * CLUSTER SLOTS and gives the answer to dm_slots_update. */
int dm_slots_node_of(unsigned slot);

/* Should the map be asked for again (a MOVED since the last update, or
 * never asked)? Rate-limited: at most once per DM_SLOTS_REFRESH_MIN_MS. */
int dm_slots_want_refresh(void);

/* A node could not be reached or stopped answering: its slots may have a
 * new primary (a failover), which no node would tell with a MOVED while
 * the old one is gone: the next dm_slots_want_refresh says yes. */
void dm_slots_stale(void);

/* Replaces the map with a CLUSTER SLOTS reply (each node by its
 * preferred endpoint, or by the "ip" of its metadata when that is "?":
 * cluster-preferred-endpoint-type hostname without a hostname announced;
 * a node of no known address leaves its slots unknown). 0, or -1 (a reply of
 * another shape: the map is kept). The map's generation moves when an
 * owner changes. */
int dm_slots_update(const redisReply *r);

/* The map's generation: moves whenever a slot changes owner (a MOVED, an
 * update with another owner). A long-lived connection per node (notify)
 * compares it to re-check what it subscribed where. */
unsigned long dm_slots_gen(void);

/* Adds `fn` to the hooks called (with no lock held, from the thread that
 * changed it) each time the slot map changes: a failover, a resharding, a
 * node's new address. Up to two (0; -1 when both are taken); adding one
 * twice adds it once. */
int dm_slots_on_change(void (*fn)(void));

/* A redirection error reply: "MOVED <slot> <host>:<port>" or "ASK <slot>
 * <host>:<port>". Returns 1 and fills *ask (1 for ASK), *slot and *node
 * (the node's index, added to the table if new; -1 when the table is
 * full or the reply names no node: "?:PORT", which asks for a refresh),
 * or 0 when msg is not one. A MOVED also moves the slot in the map
 * (an ASK does not: the migration is not over) and asks for a refresh. */
int dm_slots_redirect(const char *msg, int *ask, unsigned *slot, int *node);

/* Parses the address part of a redirection without touching the table:
 * for tests. 1 or 0 as dm_slots_redirect. */
int dm_slots_parse_redirect(const char *msg, int *ask, unsigned *slot, char *host,
                            size_t hostlen, int *port);

/* The epoch of index `node`: moves when the index is given another
 * address (a full table reuses an index no slot names; seeds never). A
 * connection made at one epoch is to an address the index may no longer
 * have (redis and notify drop it). */
unsigned long dm_slots_node_epoch(int node);

/* Node `node`'s address into host/port; -1 when there is no such node. */
int dm_slots_node_addr(int node, char *host, size_t hostlen, int *port);

/* How many nodes the table holds (seeds and every node a map named). */
int dm_slots_nnodes(void);

/* Every node the map names as a primary of some slot, into out[0..max):
 * returns how many (dmutex ls scans each). */
int dm_slots_primaries(int *out, int max);

/* Around fork (startup's one pthread_atfork, in its lock order): the
 * module's mutex is held across fork(); the child keeps the map. */
void dm_slots_atfork(enum dm_fork_phase phase);

#endif
