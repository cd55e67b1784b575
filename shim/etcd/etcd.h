/* etcd: the etcd store's connection to the cluster and its process lease,
 * shared by its lock protocol (elock.c), its watches (watch.c) and the
 * tools' calls (admin.c). A call goes to the member that answered last,
 * then to each other in turn until its deadline; an answer without a
 * leader ("no leader", a member cut off from the others) moves on too.
 * Keys are bytes: this module writes them in base64 and reads them back.
 *
 * The layout of a lock's keys (namespace NS, lock NAME; neither can hold
 * '#'):
 *   NS#NAME#q#w<lease hex> a process's place in the queue, under its lease;
 *                          the oldest (create_revision) holds the lock, and
 *                          that revision is the fencing token. Value: the owner.
 *   NS#NAME#q#r<lease hex> an rwlock's reader: it holds once no writer's key
 *                          (q#w) is older than it; readers share.
 *   NS#NAME#m              how the last grant ended: "held <owner>",
 *                          "free <owner>", "forced <owner> by <who>"; no lease.
 *   NS#NAME#a<lease hex>   the guard of this process's enqueues of the lock,
 *                          under its lease: an enqueue runs only while the
 *                          key's mod_revision is the one the process saw
 *                          last, and moves it on, so that a copy of it held
 *                          up in a member runs at most once, and never after
 *                          a withdraw moved it too. Value: the owner.
 *   NS#NAME#c              a listed cond's signals: each put is one
 *                          "<process id> signal|broadcast".
 */
#ifndef DM_ETCD_H
#define DM_ETCD_H

#include <stddef.h>

#include "config.h"
#include "json.h"
#include "policy.h"
#include "store.h"

/* Room for a key: the namespace, '#', a name, "#q#", 16 hex digits. */
#define DM_ETCD_KEY_MAX (2 * DM_NAME_MAX + 32)

/* An answer: the text and the nodes over it. */
struct dm_etcd_reply {
    char *text;
    struct dm_json j;
    int status;             /* HTTP status */
    int resent;             /* an earlier member may have run the request: the
                               answer is to its copy sent again */
};
void dm_etcd_reply_free(struct dm_etcd_reply *r);

/* Keeps the config (no I/O). */
void dm_etcd_setup(const struct dm_config *cfg);
const struct dm_config *dm_etcd_cfg(void);

/* POSTs body (JSON) to path on the cluster until deadline_ms: 0 with *r
 * parsed (status 200), or an errno with *how (policy.h's kinds) and the
 * cause in why (why_len bytes). A member that is down, without a leader,
 * or says "unavailable" is left for the next. */
int dm_etcd_call(const char *path, const char *body, long long deadline_ms,
                 struct dm_etcd_reply *r, enum dm_fail *how, char *why, size_t why_len);

/* The Authorization header's value for a stream (watch.c) into buf (""
 * without authentication): 0, or -1 when authentication failed. */
int dm_etcd_auth(char *buf, size_t len);

/* The member a call went to last ("127.0.0.1:2379"), for log lines. */
const char *dm_etcd_where(void);

/* A fresh connection to the member a call reached last (for a stream:
 * the caller owns it), and moving on to the next member. */
struct dm_http;
void dm_etcd_member(struct dm_http *h);
void dm_etcd_member_next(void);

/* base64 of a key into out (DM_B64_LEN(strlen(key)) + 1 bytes). */
void dm_etcd_b64(const char *key, char *out);
/* The end of the range of keys starting with prefix (its last byte + 1),
 * in base64. */
void dm_etcd_prefix_end_b64(const char *prefix, char *out);

/* A lock's keys (the layout above). */
void dm_etcd_queue_prefix(char *buf, size_t len, const char *name);
void dm_etcd_queue_key(char *buf, size_t len, const char *name, long long lease, int read);
void dm_etcd_writers_prefix(char *buf, size_t len, const char *name);
void dm_etcd_marker_key(char *buf, size_t len, const char *name);
void dm_etcd_guard_key(char *buf, size_t len, const char *name, long long lease);
void dm_etcd_cond_key(char *buf, size_t len, const char *name);
/* The process's record for the tools (who.h): "NS##who#<process id>"
 * (an empty lock name: no lock's key), in namespace ns (NULL: the
 * config's); id "" makes the prefix of every process's. */
void dm_etcd_who_key(char *buf, size_t len, const char *ns, const char *process_id);

/* The process lease: its id (granting one first if there is none; 0 with
 * errno in *err when that failed) and when it was last renewed (sent_ms,
 * CLOCK_MONOTONIC ms, no later than the renewal reached etcd). A key put
 * under it adds a user (lease_use), and its end drops one (lease_unuse):
 * the store's thread keeps a used lease alive between the watchdog's
 * rounds. lease_renew: one keep-alive now: 1 renewed, 0 the lease is gone
 * (the next lease_get grants a new one), -1 no verdict. */
long long dm_etcd_lease_get(long long *sent_ms, int *err, long long deadline_ms);
void dm_etcd_lease_use(void);
void dm_etcd_lease_unuse(void);
int dm_etcd_lease_renew(long long id, long long *sent_ms);
/* Was this thread's last refused call refused for an unknown lease? And
 * forgetting lease id (it lapsed: the next lease_get grants another). */
int dm_etcd_last_lease_unknown(void);
void dm_etcd_lease_forget(long long id);
/* Revokes the process lease (at exit, nothing held): its keys go now. */
void dm_etcd_lease_revoke(void);
/* Is id the process's live lease? No I/O. */
int dm_etcd_lease_live(long long id);
/* The process lease's id now, 0 none; grants nothing. No I/O. */
long long dm_etcd_lease_current(void);
/* When lease id was last renewed (sent), 0 when it is not the live one.
 * No I/O. */
long long dm_etcd_lease_sent(long long id);
/* The store's thread: timers, the image's end, the lease between rounds. */
int dm_etcd_timer_arm(struct dm_timer *t, long long at_ns, void (*fn)(void *arg), void *arg);
void dm_etcd_timer_cancel(struct dm_timer *t);
void dm_etcd_on_image_end(void (*fn)(void));
void dm_etcd_image_ends(long max_ms);
void dm_etcd_atfork(enum dm_fork_phase phase);

#endif
