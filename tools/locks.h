/* locks: the tools' session with the store (store.h's admin_* calls): the
 * config, the namespace and the store's connection, for `dmutex ls`,
 * `top`, `unlock` and `fresh`. `dmutex ls` prints the locks once, `dmutex
 * top` again and again and derives rates from the tokens. */
#ifndef DM_LOCKS_H
#define DM_LOCKS_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"
#include "store.h"

/* The session: from -c CONFIG (NULL: the defaults), a URL (NULL or "":
 * the config's) and a namespace (NULL: the config's); the store picked
 * (dm_store_init) and its connection made. Prints the error as "dmutex
 * CMD: ..." and returns its exit status (78 config, 2 URL, 1 server), or 0
 * with *out set. */
struct dm_locks_conn;
int dm_locks_connect(const char *cmd, const char *cfg_path, const char *url, const char *ns,
                     struct dm_locks_conn **out);
const char *dm_locks_ns(struct dm_locks_conn *lc);
void dm_locks_disconnect(struct dm_locks_conn *lc);

/* Every lock of the session's namespace, sorted by name (the store's
 * admin_list), with what the processes' records say of their holders and
 * waiters (admin_who, dm_who_join): 0 with *rows (free with
 * dm_store_rows_free) and *n, or -1 with err set. */
int dm_locks_read(struct dm_locks_conn *lc, struct dm_lock_row **rows, size_t *n, char *err,
                  size_t errlen);

/* "host:pid program (thread)" of owner id `owner` as its process's record
 * says, into buf; "" when there is none (or the read failed). */
void dm_locks_who(struct dm_locks_conn *lc, const char *owner, char *buf, size_t len);

/* Is a holder alive as far as the store can tell: 1 its lease was renewed
 * within its renewal interval (and a slack, DM_WHO_ALIVE_SLACK_MS), 0 not,
 * -1 unknown (no record). */
int dm_locks_alive(const struct dm_lock_row *l);

/* The lines below a lock's row in `ls` and `top`: the holder's owner id
 * and last renewal, a partner's token, the read holders and the waiting
 * processes, indented. */
void dm_locks_print_details(FILE *out, const struct dm_lock_row *l);

/* s with control bytes as '?' (a name from the server on a terminal), into
 * buf; returns buf. */
const char *dm_locks_safe(const char *s, char *buf, size_t len);

/* "12s", "3m04s", "2h05m", "3d04h": how long ago CLOCK_REALTIME ms `since`
 * was, into buf ("-" for -1). */
const char *dm_locks_ago(long long since_ms, char *buf, size_t len);

#endif
