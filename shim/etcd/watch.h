/* watch: etcd watches, each a stream on its own connection read by its
 * own thread (a cond's signals, a queue's new keys), and the one-off wait
 * of a queued process for the deletion of the key before it, in the
 * waiting thread. */
#ifndef DM_ETCD_WATCH_H
#define DM_ETCD_WATCH_H

#include "json.h"
#include "util.h"

/* Called in the watch's thread for each event (ev: the event's node in
 * j), and with ev = -1 after the stream was interrupted (events may have
 * been missed). */
typedef void (*dm_watch_fn)(void *arg, const struct dm_json *j, int ev);

struct dm_watch;
/* A watch of key (prefix: every key starting with it); not started. NULL
 * out of memory. */
struct dm_watch *dm_watch_new(const char *key, int prefix, dm_watch_fn fn, void *arg);
/* Starts its thread (once) and waits until etcd has created the watch:
 * 0, ETIMEDOUT after timeout_ms (it goes on trying), or pthread_create's
 * error. */
int dm_watch_start(struct dm_watch *w, long timeout_ms);
/* Stops the watch: on return no call of fn is in progress or to come. Not
 * from fn. NULL is ignored. */
void dm_watch_free(struct dm_watch *w);
/* Around fork: the child's watches have no thread; each starts again. */
void dm_watch_atfork(enum dm_fork_phase phase);

/* Waits until the key (base64) made at revision `made`, which existed at
 * revision from - 1, is deleted: 0 deleted, ETIMEDOUT at deadline_ms, EIO
 * the stream failed (look again). */
int dm_watch_deleted(const char *key64, long long made, long long from, long long deadline_ms);

#endif
