/* sentinel: which node is the primary when the config names Redis
 * sentinels instead of a server (redis.sentinels, redis.master). Asks the
 * sentinels in turn (SENTINEL get-master-addr-by-name), remembers the
 * answer until someone says it is stale (a lost connection, a READONLY,
 * LOADING or MASTERDOWN reply, a node whose ROLE is not master), and hears
 * the sentinels' +switch-master notice in a small thread of its own.
 * Knows nothing of the scripts, the pool or pthread_mutex_t: redis.c asks
 * it for an address and tells it when an address turned out wrong. Its
 * connections' bytes move through net (TLS when the config has it). */
#ifndef DM_SENTINEL_H
#define DM_SENTINEL_H

#include <stddef.h>

#include "config.h"
#include "util.h"

#define DM_SENTINEL_HOST_MAX 256        /* bytes of a host name, with the NUL */

/* The primary as the sentinels named it. `gen` moves whenever the address
 * changes: a connection made under an older generation is to a node that
 * may no longer be the primary. */
struct dm_primary {
    char host[DM_SENTINEL_HOST_MAX];
    int port;
    unsigned long gen;
};

/* Remembers the config (it outlives every connection); no I/O, no thread. */
void dm_sentinel_setup(const struct dm_redis_config *cfg);

/* Does the config name sentinels? */
int dm_sentinel_enabled(void);

/* The primary: the address known now, or, when none is (first use, or
 * marked stale since), the answer of the first sentinel that knows the
 * master, asking them in turn. Blocking: at most one connect and one
 * command timeout per sentinel; threads that need an answer at the same
 * time wait for one round of questions. Starts the +switch-master thread
 * on first use (a failure to start it is logged; the address is still
 * re-discovered on errors). Returns 0, or -1 with `err` naming each
 * sentinel asked and what it said; *answered has DM_SENTINEL_ANSWERED when
 * at least one sentinel answered (the master is unknown to it: not an
 * outage), DM_SENTINEL_TLS_FAILED when TLS failed with at least one (a
 * certificate: not an outage either). */
#define DM_SENTINEL_ANSWERED    1
#define DM_SENTINEL_TLS_FAILED  2
int dm_sentinel_primary(struct dm_primary *out, char *err, size_t errlen, int *answered);

/* The node of generation `gen` is not the primary (any more), or could not
 * be reached: the next dm_sentinel_primary asks the sentinels again,
 * starting with the one after the sentinel that named it (a sentinel with
 * a stale view cannot hold the process back). A generation older than the
 * current one is ignored (already re-discovered). */
void dm_sentinel_stale(unsigned long gen);

/* The current generation (no lock, no I/O). */
unsigned long dm_sentinel_gen(void);

/* Adds `fn` to the hooks called (with no lock held) each time the
 * primary's address changes, from the +switch-master thread or from the
 * thread whose connect found the new primary first: a thread with a
 * long-lived connection wakes up to drop it (notify), releases the new
 * primary may lack are sent again (cluster). Up to two hooks (0; -1 when
 * both are taken); adding one twice adds it once. The +switch-master
 * thread calls them on its first answer too; a connect's first answer is
 * no move and calls none. */
int dm_sentinel_on_switch(void (*fn)(void));

/* "HOST:PORT (primary of NAME)", or "primary of NAME (sentinels H:P,...)"
 * before the first answer: for messages. */
void dm_sentinel_describe(char *buf, size_t len);

/* Fork (startup's fork_order, after redis: a leaf
 * lock). The child has no +switch-master thread; it starts again on use. */
void dm_sentinel_atfork(enum dm_fork_phase phase);

#endif
