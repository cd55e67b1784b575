/* locks: what the server holds for the locks of one namespace, read once.
 * `dmutex ls` prints it, `dmutex top` prints it again and again and derives
 * rates from the tokens. Read-only: never changes a key. */
#ifndef DM_LOCKS_H
#define DM_LOCKS_H

#include <stddef.h>
#include <hiredis/hiredis.h>

struct dm_lock_row {
    char *name;             /* the lock name */
    const char *state;      /* "held", "free", "expired", "delayed", "forced", "read"
                               (an rwlock held by `readers` read holders) */
    char *owner;            /* the holder's owner id while held, else NULL */
    char *holds;            /* its hold count (decimal, from the server), else NULL */
    long long lease_ms;     /* ms left on the lease, -1 when none */
    char *token;            /* the fencing counter (decimal), NULL when absent */
    long long waiters;      /* fair queue length */
    long long listening;    /* subscribers of the release channel */
    long long readers;      /* an rwlock's read holders the server has (state "read"; an
                               expired one counts until the next acquire drops it) */
    char *node;             /* Redis Cluster: "host:port" of the node that holds its
                               keys (the primary of its slot); NULL otherwise */
};

/* The connection the other commands share: from -c CONFIG (NULL: the
 * defaults), a URL (NULL or "": the config's) and a namespace (NULL: the
 * config's). Prints the error as "dmutex CMD: ..." and returns its exit
 * status (78 config, 2 URL, 1 server), or 0 with the connection made, *ns set
 * (valid until dm_locks_disconnect). */
struct dm_locks_conn;
int dm_locks_connect(const char *cmd, const char *cfg_path, const char *url, const char *ns,
                     struct dm_locks_conn **out);
/* The connection (plain, TLS or Sentinel's primary: redis and net). */
struct dm_conn *dm_locks_conn(struct dm_locks_conn *lc);
const char *dm_locks_ns(struct dm_locks_conn *lc);
const struct dm_config *dm_locks_config(struct dm_locks_conn *lc);
void dm_locks_disconnect(struct dm_locks_conn *lc);

/* Every lock of namespace `ns` (every name ever granted has a token key),
 * sorted by name. With a cluster, every primary is scanned and each lock
 * read on the node of its slot (conn is unused then). 0 with *rows (caller frees with dm_locks_free) and *n,
 * or -1 with err set (a connection error, an error reply, no memory). */
int dm_locks_read(struct dm_conn *conn, const char *ns, struct dm_lock_row **rows, size_t *n,
                  char *err, size_t errlen);
void dm_locks_free(struct dm_lock_row *rows, size_t n);

/* Key `k` of lock `nm`, malloc'ed (NULL out of memory). */
char *dm_locks_key(const char *ns, const char *nm, int k);

#endif
