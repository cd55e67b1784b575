/* redis: connections to the server (hiredis; with Sentinel, to the primary
 * sentinel.c names; with Redis Cluster, a pool per node and each lock's
 * calls on the primary of its slot, MOVED/ASK followed: slots.c), AUTH
 * and SELECT, timeouts, the scripts (SCRIPT LOAD once, EVALSHA, EVAL on
 * NOSCRIPT), and turning replies into errors with words. Knows nothing of
 * pthread_mutex_t or of what the scripts mean. */
#ifndef DM_REDIS_H
#define DM_REDIS_H

#include <hiredis/hiredis.h>
#include <stddef.h>

#include "config.h"
#include "net.h"
#include "util.h"

#define DM_REDIS_NODES_MAX 64    /* Redis Cluster: nodes a process keeps (slots.h) */

enum dm_script { DM_SCRIPT_ACQUIRE, DM_SCRIPT_RELEASE, DM_SCRIPT_RENEW, DM_SCRIPT_CANCEL,
                 /* the setnx protocol's (partner.c, renew.c) */
                 DM_SCRIPT_SETNX_ACQUIRE, DM_SCRIPT_SETNX_RELEASE, DM_SCRIPT_SETNX_RENEW,
                 /* the redisson protocol's (partner.c, renew.c) */
                 DM_SCRIPT_REDISSON_ACQUIRE, DM_SCRIPT_REDISSON_RELEASE, DM_SCRIPT_REDISSON_RENEW,
                 DM_SCRIPT_COUNT };

/* What became of the last call on a connection, as in hiredis's
 * err/errstr: a call returns its reply or NULL, and the cause stays on the
 * connection until its next call. Only DM_REDIS_NOCONN says for sure that
 * nothing reached the server; after DM_REDIS_IO a request was sent and no
 * reply came (a timeout, a closed connection): it may have run, or may
 * still run later. */
enum dm_redis_err {
    DM_REDIS_OK,
    DM_REDIS_NOCONN,        /* no connection could be made (refused, unreachable, connect timeout) */
    DM_REDIS_IO,            /* request sent, no reply: ambiguous; the connection is dead */
    DM_REDIS_REPLY_ERROR,   /* the server answered an error (WRONGTYPE, OOM, NOPERM...) */
    DM_REDIS_NOSCRIPT,      /* a pipelined EVALSHA the server does not know */
    DM_REDIS_BAD_REPLY,     /* a reply of a shape the caller does not expect */
    DM_REDIS_TLS,           /* the TCP connection was made, TLS failed: a certificate
                             * not trusted, expired or for another name, a client
                             * certificate refused, not a TLS port. Nothing was sent;
                             * never "no connection" (on_redis_down = "local" does not
                             * lock alone because of a bad certificate) */
    DM_REDIS_WRONG_NODE,    /* Sentinel: the node is not the primary (READONLY,
                               LOADING, MASTERDOWN, or ROLE): nothing ran; the
                               primary is asked of the sentinels again. Redis
                               Cluster: MOVED/ASK not followed to the end (the
                               redirections ran out, or the node named could not
                               be reached), TRYAGAIN, CLUSTERDOWN: nothing ran */
};

/* A connection's error kept past dm_redis_put, for a caller that reports
 * it later (a pooled connection is another thread's once it is back). */
struct dm_redis_error {
    enum dm_redis_err err;
    char errstr[DM_ERR_MAX];
};

/* A reply nobody waited for (dm_redis_script_nowait): fn(arg, r, why) is
 * called once by the thread that reads it, with the reply (an error reply
 * included: NOSCRIPT, READONLY...; freed after fn returns), or with r NULL
 * and the cause in why when it will never be read (the connection broke or
 * was closed first). fn must not use the connection it came on; it may
 * take others from the pool. Never called in a fork child. */
typedef void (*dm_redis_late_fn)(void *arg, redisReply *r, const struct dm_redis_error *why);
#define DM_REDIS_LATE_MAX 16     /* unread replies a connection carries at most */
struct dm_redis_late {
    dm_redis_late_fn fn;
    void *arg;
};

/* A connection: pooled (dm_redis_get/put) or a thread's own (the watchdog's
 * and the subscriber's: dm_redis_connect/close). `errstr` names the Redis
 * address and, when the server answered, its words. */
struct dm_conn {
    redisContext *c;                /* NULL: not connected */
    struct dm_net *tls;             /* the TLS session on c; NULL: plain */
    enum dm_redis_err err;
    char errstr[DM_ERR_MAX];
    struct dm_conn *next;           /* the pool's idle stack */
    unsigned long gen;              /* Sentinel: the primary's generation at connect;
                                     * Redis Cluster: the node index's epoch (slots.h) */
    int node;                       /* Redis Cluster: the node's index (slots.h); 0 otherwise */
    char run_id[48];                /* the server's run_id (INFO server at connect); "":
                                     * not known (INFO refused): acquire.lua then makes
                                     * no restart check */
    int nlate;                      /* requests sent whose replies nobody read yet, */
    struct dm_redis_late late[DM_REDIS_LATE_MAX];   /* oldest first (dm_redis_script_nowait) */
    unsigned long late_done;        /* replies due that were read or dropped, ever */
    unsigned long late_seen;        /* late_done + 1 at the last dm_redis_flush_older
                                     * that found replies due; 0: none */
};

void dm_redis_error_keep(struct dm_redis_error *e, const struct dm_conn *conn);

/* Remembers the server's settings (the config outlives every connection). */
void dm_redis_setup(const struct dm_redis_config *cfg);

/* "host:port" or the unix socket path, for messages. */
const char *dm_redis_addr(void);

/* Connects `conn` (not pooled: the caller owns it): connect and command
 * timeouts set, authenticated, on the configured db, scripts loaded.
 * Returns 0, or -1 with conn->c NULL and conn->err saying why:
 * DM_REDIS_NOCONN only when the socket could not be connected; once it is,
 * the server is there, and an error it answers to AUTH, SELECT or SCRIPT
 * LOAD (WRONGPASS, NOPERM, max clients, LOADING) is DM_REDIS_REPLY_ERROR,
 * and one of them left unanswered past the command timeout DM_REDIS_IO.
 * With TLS, a handshake that fails or a session the server ends at once
 * (a refused client certificate) is DM_REDIS_TLS, the cause in errstr.
 * Blocking, bounded by the connect timeout (TCP and the TLS handshake)
 * plus four command timeouts. */
int dm_redis_connect(struct dm_conn *conn);

/* Closes conn's context (sending nothing) and sets conn->c to NULL; the
 * error stays. A closed or never connected conn is fine. With Sentinel, a
 * connection closed after DM_REDIS_IO or DM_REDIS_WRONG_NODE makes the
 * next connect ask the sentinels again. */
void dm_redis_close(struct dm_conn *conn);

/* The time one reply may take on conn, instead of the configured command
 * timeout (the watchdog's rounds must end before the next is due). */
void dm_redis_set_timeout(struct dm_conn *conn, long ms);

/* One command of the caller's own (dmutex ls, unlock), hiredis's format:
 * the reply (caller frees), or NULL with conn->err set as dm_redis_script
 * sets it: DM_REDIS_IO (no reply), DM_REDIS_REPLY_ERROR (the error reply,
 * freed; the command's name and the server's words in errstr, a NOPERM
 * with a hint), DM_REDIS_WRONG_NODE (Sentinel: READONLY, LOADING,
 * MASTERDOWN: nothing ran), or on a conn that is not connected the error
 * its connect left. */
redisReply *dm_redis_command(struct dm_conn *conn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The same with an argument vector (binary-safe: a script body); `what`
 * names the command in errstr (NULL: argv[0]). */
redisReply *dm_redis_command_argv(struct dm_conn *conn, const char *what, int argc,
                                  const char **argv);
/* Pipelining a caller's own commands: queue one without reading its
 * reply (0, or -1: not connected, or out of memory, conn->err DM_REDIS_IO:
 * the pipe can no longer be used)... */
int dm_redis_append_command(struct dm_conn *conn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* ...and read the next queued reply, with dm_redis_command's convention.
 * After DM_REDIS_REPLY_ERROR the pipe is still in step (read the rest);
 * after DM_REDIS_IO it is not. */
redisReply *dm_redis_pipeline_next(struct dm_conn *conn);
/* Sentinel: is conn connected to a node that the sentinels have replaced
 * as the primary since (a long-lived connection drops and remakes it)?
 * Redis Cluster: is its node's index given another address since (a full
 * table of nodes reuses indexes)? Always 0 otherwise. */
int dm_redis_conn_stale(const struct dm_conn *conn);

/* fn() is called (from another thread, no lock held) when a primary may
 * have moved. Sentinel: the primary's address changes (see
 * dm_sentinel_on_switch). Redis Cluster: the slot map changes (a
 * failover, a resharding; see dm_slots_on_change), as the process finds
 * out: at a call that meets MOVED or a node gone, or notify's refresh. */
void dm_redis_on_switch(void (*fn)(void));

/* Bumped each time a primary may have moved (the Sentinel primary's
 * generation, Redis Cluster's slot map generation; 0 with one server).
 * No lock, no I/O. */
unsigned long dm_redis_primary_gen(void);

/* Sentinel: is conn's node still the primary (ROLE)? A script that only
 * reads answers from whatever data a node has, and a demoted primary may
 * have none while it resyncs: a verdict such as "the hold is gone" is
 * trusted only once the same connection says ROLE master after it. */
enum dm_is_primary {
    DM_PRIMARY_YES,         /* always without Sentinel, with no round trip */
    DM_PRIMARY_NO,          /* conn->err DM_REDIS_WRONG_NODE; the primary is asked of
                             * the sentinels again */
    DM_PRIMARY_UNKNOWN,     /* no answer or an error (conn->err says which) */
};
enum dm_is_primary dm_redis_is_primary(struct dm_conn *conn);

/* WAIT n timeout_ms on conn: how many replicas acknowledged every write
 * this connection made so far (>= 0), or -1 with conn->err set (no reply:
 * DM_REDIS_IO; an error reply). Blocks up to timeout_ms plus a command
 * timeout. */
long dm_redis_wait(struct dm_conn *conn, int n, long timeout_ms);

/* A connection from the process's pool, connecting if none is idle. Never
 * NULL: when no usable connection could be made its c is NULL and err
 * says why (see dm_redis_connect). Give it back with dm_redis_put in every case: one
 * whose last call ended in DM_REDIS_IO, or that never connected, is
 * closed and freed instead of pooled. */
struct dm_conn *dm_redis_get(void);
void dm_redis_put(struct dm_conn *conn);

/* Redis Cluster: a pooled connection to the primary of `slot` (from the
 * slot map, asked of the nodes with CLUSTER SLOTS when it does not know
 * the slot or a MOVED said it changed), with dm_redis_get's conventions;
 * a slot no node is known for gives a conn with c NULL and err
 * DM_REDIS_WRONG_NODE. Without a cluster (or slot < 0): dm_redis_get(). */
struct dm_conn *dm_redis_get_slot(int slot);
/* The same, but a new connection, not one of the idle ones: a retry after
 * a pooled one turned out dead (a server restart leaves every idle one
 * stale). It goes back to the pool with dm_redis_put. */
struct dm_conn *dm_redis_get_slot_new(int slot);
/* The same for a lock's key: its slot is the key's (every key and channel
 * of a lock shares the hash tag {NAME}). */
struct dm_conn *dm_redis_get_key(const char *key);
/* Redis Cluster: a pooled connection to node `node` itself (slots.h's
 * index), for a caller that groups its work per node (the watchdog's
 * renewal rounds, dmutex ls). */
struct dm_conn *dm_redis_get_node(int node);
/* Redis Cluster: the node that owns `slot` now (the map asked for when it
 * does not know), or -1: none known. 0 without a cluster. */
int dm_redis_node_of(int slot);
/* Is this a cluster config? */
int dm_redis_cluster(void);
/* Redis Cluster, for a long-lived connection per node (notify): connects
 * conn to node `node` itself (dm_redis_connect's conventions). */
int dm_redis_connect_node(struct dm_conn *conn, int node);
/* Redis Cluster: asks the nodes for the slot map when slots.c wants it
 * asked for again (a node lost, a MOVED). */
void dm_redis_refresh_if_wanted(void);
/* Redis Cluster: the nodes the map names as primaries (out[0..max)), after
 * asking the nodes for the map; how many, or -1 with err set. */
int dm_redis_primaries(int *out, int max, char *err, size_t errlen);
/* The node that owns `slot` in the map as it is (no I/O; -1: unknown, 0
 * without a cluster). */
int dm_redis_node_cached(int slot);
/* The epoch of node index `node` (moves when the index is given another
 * address; 0 without a cluster): a node is its index and epoch. */
unsigned long dm_redis_node_epoch(int node);
/* Is `msg` (an error reply) a MOVED or ASK? A MOVED moves the slot in the
 * map. */
int dm_redis_redirected(const char *msg);
/* A node was lost: the map is asked for again. */
void dm_redis_slots_stale(void);
/* The map's generation: moves when a slot changes owner. */
unsigned long dm_redis_slots_gen(void);
/* The slot of a key (dm_slots_keyslot), or -1 without a cluster. */
int dm_redis_slot(const char *key);
/* "host:port" of conn's node (the configured server without a cluster),
 * for messages; the buffer is the calling thread's. */
const char *dm_redis_conn_addr(const struct dm_conn *conn);

/* Runs one script: EVALSHA, falling back to EVAL with the body when the
 * server does not know it (NOSCRIPT: restarted, flushed, failed over).
 * Returns the reply (caller frees) or NULL with conn->err set: DM_REDIS_IO
 * (the connection can no longer be used), DM_REDIS_REPLY_ERROR (the
 * server's words in errstr), or, on a conn that is not connected, the
 * error its connect left. */
redisReply *dm_redis_script(struct dm_conn *conn, enum dm_script s, int nkeys, int nargs,
                            const char *const *args);
/* Redis Cluster: dm_redis_script follows a MOVED (the map is updated and
 * the script sent at once to the node named: nothing ran) and an ASK
 * (ASKING, then the script, on the node named, once; the map is kept),
 * at most DM_REDIS_REDIRECTS_MAX times. conn then is a connection to the
 * node that answered (it goes back to that node's pool): a WAIT after the
 * script runs where the script ran. */
#define DM_REDIS_REDIRECTS_MAX 5

/* Sends one script call and returns without its reply (a release from
 * unlock): the reply is read before the connection's next command (every
 * call of this module on conn reads the replies still due on it first, in
 * order; a script call is written before they are read, so the two share
 * one round trip), when the connection is closed (fn gets NULL), or by
 * dm_redis_flush; fn(arg, ...) then says what became of it. 0 once the
 * request is written; -1 (fn will not be called) when it could not be:
 * not connected, or the write failed (conn->err DM_REDIS_IO: the request
 * may have gone out in part). With DM_REDIS_LATE_MAX replies due already,
 * the oldest are read first. */
int dm_redis_script_nowait(struct dm_conn *conn, enum dm_script s, int nkeys, int nargs,
                           const char *const *args, dm_redis_late_fn fn, void *arg);

/* A connection of the caller's own (dm_redis_connect), subscribed to
 * `channel` (SUBSCRIBE): a fair waiter reads its handover on it itself,
 * woken by the message with no other thread in between. 0, or -1 with
 * conn->err set (close it). */
int dm_redis_subscribe(struct dm_conn *conn, const char *channel);

/* The next message on a conn dm_redis_subscribe made, waiting up to
 * timeout_ms (poll(2): the connection stays usable after a timeout):
 * 1 with its payload in buf (NUL-terminated, cut to len), 0 when none
 * came in time, -1 when the connection failed (conn->err set: close it;
 * messages may have been lost). Other replies are skipped. */
int dm_redis_next_message(struct dm_conn *conn, long timeout_ms, char *buf, size_t len);

/* Reads every reply still due on the pool's idle connections (their fns
 * run in the calling thread): the exit path, so that a release written by
 * an unlock is known to have run, or retried, before the process ends. */
void dm_redis_flush(void);

/* dm_redis_flush for the replies that waited long: those of each idle
 * connection whose oldest reply due was already due at the previous call
 * (no reply of it read since); the others are noted for the next
 * call. A reply due on an idle connection is so read within two calls
 * (rlock's release reader calls it periodically). Returns how many
 * idle connections still have replies due. */
int dm_redis_flush_older(void);

/* Pipelining: queue a script call without reading its reply (0, or -1
 * out of memory)... */
int dm_redis_append_script(struct dm_conn *conn, enum dm_script s, int nkeys, int nargs,
                           const char *const *args);
/* ...and read one queued reply. Same convention as dm_redis_script, except
 * that NOSCRIPT is not retried here (later replies are still in the pipe):
 * conn->err is DM_REDIS_NOSCRIPT, and the caller re-runs that call on its
 * own with dm_redis_script once the pipe is drained. */
redisReply *dm_redis_pipeline_reply(struct dm_conn *conn, enum dm_script s);

/* In a fork child: forget the parent's connections without talking on
 * them (their sockets are closed, the server keeps the parent's). */
void dm_redis_atfork(enum dm_fork_phase phase);

#endif
