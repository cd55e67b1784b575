/* redis: connections to the server (hiredis), AUTH and SELECT, timeouts,
 * the scripts (SCRIPT LOAD once, EVALSHA, EVAL on NOSCRIPT), and turning
 * replies into errors with words. Knows nothing of pthread_mutex_t or of
 * what the scripts mean. */
#ifndef DM_REDIS_H
#define DM_REDIS_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "config.h"

enum dm_script { DM_SCRIPT_ACQUIRE, DM_SCRIPT_RELEASE, DM_SCRIPT_RENEW, DM_SCRIPT_CANCEL,
                 DM_SCRIPT_COUNT };

/* A pooled connection. */
struct dm_conn {
    redisContext *c;
    struct dm_conn *next;
};

/* Remembers the server's settings (the config outlives every connection). */
void dm_redis_setup(const struct dm_redis_config *cfg);

/* "host:port" or the unix socket path, for messages. */
const char *dm_redis_addr(void);

/* A new connection with connect and command timeouts set, authenticated
 * and on the configured db. NULL with `err` saying why. Blocking, bounded
 * by the connect timeout plus two command timeouts. */
redisContext *dm_redis_connect(char *err, size_t errlen);

/* A connection from the process's pool, connecting if none is idle. NULL
 * with `err` when the server cannot be reached. Give it back with
 * dm_redis_put; `broken` (an I/O error happened on it) closes it instead. */
struct dm_conn *dm_redis_get(char *err, size_t errlen);
void dm_redis_put(struct dm_conn *conn, int broken);

/* Runs one script: EVALSHA, falling back to EVAL with the body when the
 * server does not know it (NOSCRIPT: restarted, flushed, failed over).
 * Returns the reply (caller frees) or NULL with `err` set; *broken is set
 * when the connection can no longer be used (I/O error or timeout). An
 * error reply (WRONGTYPE, OOM, NOPERM, READONLY...) is NULL with the
 * server's words in `err` and *broken = 0. */
redisReply *dm_redis_script(redisContext *c, enum dm_script s, int nkeys, int nargs,
                            const char *const *args, int *broken, char *err, size_t errlen);

/* Pipelining: queue a script call without reading its reply... */
int dm_redis_append_script(redisContext *c, enum dm_script s, int nkeys, int nargs,
                           const char *const *args);
/* ...and read one queued reply. Same return convention as dm_redis_script,
 * except that NOSCRIPT is not retried here (later replies are still in the
 * pipe): *noscript is set, and the caller re-runs that call on its own with
 * dm_redis_script once the pipe is drained. */
redisReply *dm_redis_pipeline_reply(redisContext *c, enum dm_script s, int *broken,
                                    int *noscript, char *err, size_t errlen);

/* In a fork child: forget the parent's connections without talking on
 * them (their sockets are closed, the server keeps the parent's). */
void dm_redis_atfork_prepare(void);
void dm_redis_atfork_parent(void);
void dm_redis_atfork_child(void);

#endif
