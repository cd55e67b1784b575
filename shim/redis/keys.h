/* keys: the one source of the Redis key layout of a lock. Every key and
 * channel of lock NAME in namespace NS is built here from (NS, NAME), and
 * the holder marker the scripts leave in NS:{NAME}:holder is decoded here.
 * The shim (lock.c), `dmutex ls` and the tests use it; the scripts
 * (shim/redis/lua/) document their KEYS[] against it and docs/design.md maps it.
 * No I/O, no allocation, no state: any thread, any time, also in a fork
 * child. */
#ifndef DM_KEYS_H
#define DM_KEYS_H

#include <stddef.h>
#include <stdint.h>

/* Every name a lock has. All carry the hash tag {NAME}: one Redis Cluster
 * slot per lock, as the scripts need. */
enum dm_key {
    DM_KEY_LOCK,        /* NS:{NAME}           hash owner -> hold count, PEXPIRE = lease */
    DM_KEY_TOKEN,       /* NS:{NAME}:token     fencing counter, INCR per grant */
    DM_KEY_HOLDER,      /* NS:{NAME}:holder    how the last grant ended (dm_keys_holder_decode) */
    DM_KEY_LOST,        /* NS:{NAME}:lost      tokens of grants that expired */
    DM_KEY_VOID,        /* NS:{NAME}:void      acquire requests given up */
    DM_KEY_RELEASED,    /* NS:{NAME}:released  channel: release notices */
    DM_KEY_QUEUE,       /* NS:{NAME}:queue     fair waiters, oldest first */
    DM_KEY_QTIME,       /* NS:{NAME}:qtime     their deadlines */
    DM_KEY_WANT,        /* NS:{NAME}:want      channel: "a process wants it" */
    DM_KEY_FORCED,      /* NS:{NAME}:forced    the last forced release (dmutex unlock
                           --force): who, when, whose hold, which tokens */
    DM_KEY_COND,        /* NS:{NAME}:cond      channel: a condition variable's signal or
                           broadcast (conds entries; NAME is the cond's name) */
    DM_KEY_READERS,     /* NS:{NAME}:readers   zset: an rwlock's read holders, owner ->
                           lease deadline (server ms); PEXPIRE = the lease */
    DM_KEY_RGRANT,      /* NS:{NAME}:rgrant    hash: read holder -> "<req> #<tok>", the
                           request and token of its read grant */
    DM_KEY_WAIT,        /* NS:{NAME}:w:        channel prefix: + process id, a fair
                           handover to that process (dm_keys_wait_channel) */
    DM_KEY_EPOCH,       /* NS:{NAME}:epoch     the run_id of the server run on which
                           the lock's data was last found continuous (acquire.lua,
                           "Restarts") */
    DM_KEY_COUNT
};

/* What follows "NS:{NAME}" in key `k` ("" for the lock itself). */
const char *dm_keys_suffix(enum dm_key k);

/* How many tokens of expired grants NS:{NAME}:lost keeps: acquire.lua
 * and force.lua are given it. Expiries are at most a few per lease (see
 * acquire.lua), so this many are plenty. */
#define DM_KEYS_LOST_KEEP "48"     /* a script argument: decimal text */

/* The short name of key `k` ("lock", "token", ..., "w" for the handover
 * channel prefix), as `dmutex keys` takes it; dm_keys_kind_parse is the
 * reverse: 0 with *k set, or -1 for no such name. */
const char *dm_keys_kind(enum dm_key k);
int dm_keys_kind_parse(const char *s, enum dm_key *k);

/* release.lua's KEYS[1..6], in its order: lock.c passes them so, and
 * `dmutex keys --release` prints them so for the shell tests. An rwlock's
 * release (and acquire, cancel) adds DM_KEY_READERS and DM_KEY_RGRANT
 * after the mutex's keys (acquire.lua's header). */
enum { DM_KEYS_RELEASE_N = 6 };
extern const enum dm_key dm_keys_release[DM_KEYS_RELEASE_N];

/* Writes key `k` of lock `name` in namespace `ns` into buf, snprintf-style
 * (truncated but NUL-terminated when len is too small; buf may be NULL
 * when len is 0). Returns the length of the whole key, without its NUL. */
size_t dm_keys_build(char *buf, size_t len, const char *ns, const char *name, enum dm_key k);

/* dm_keys_build(NULL, 0, ns, name, k) without formatting: the length of
 * key `k`, for a caller that sizes many keys at once. */
size_t dm_keys_len(const char *ns, const char *name, enum dm_key k);

/* The namespace's intact marker "NS:intact": set to a server's run_id
 * (`dmutex fresh`), it says that server lost no lock data since it
 * started, so a lock new to it is granted at once (acquire.lua,
 * "Restarts"). Same conventions as dm_keys_build. */
size_t dm_keys_intact(char *buf, size_t len, const char *ns);
#define DM_KEYS_INTACT_SUFFIX ":intact"

/* The record of process `process_id` for the tools (who.h):
 * "NS:who:{<process id>}", a string with the lease as its expiry; id "*"
 * makes the glob of every process's. Same conventions as dm_keys_build. */
size_t dm_keys_who(char *buf, size_t len, const char *ns, const char *process_id);

/* The handover channel of process `process_id` for lock `name`: the
 * DM_KEY_WAIT prefix followed by the id. Same conventions. */
size_t dm_keys_wait_channel(char *buf, size_t len, const char *ns, const char *name,
                            const char *process_id);

/* The redisson protocol's (docs/interop.md): Redisson's RLock `name` is a
 * hash at the bare name, released with a publish on this channel,
 * "redisson_lock__channel:{NAME}" (a name holding a '{' is used as it is,
 * as Redisson's prefixName does: its hash tag then picks the slot). Same
 * conventions as dm_keys_build. */
size_t dm_keys_redisson_channel(char *buf, size_t len, const char *name);
#define DM_KEYS_REDISSON_CHANNEL "redisson_lock__channel"

/* (The name "*" makes a glob of key `k` of every lock: "NS:{*}:token",
 * for SCAN MATCH, KEYS, PUBSUB CHANNELS.) */

/* Is `key` (klen bytes, need not be NUL-terminated) key `k` of a lock of
 * namespace `ns`? Then 1, with *name / *namelen the lock name inside
 * `key`; else 0. */
int dm_keys_name(const char *key, size_t klen, const char *ns, enum dm_key k,
                 const char **name, size_t *namelen);

/* The holder marker NS:{NAME}:holder, as acquire.lua's header documents it. */
enum dm_holder_state {
    DM_HOLDER_GRANTED,      /* "<req> #<tok>": granted to request <req>, not released;
                               with the lock hash gone its lease expired */
    DM_HOLDER_RELEASED,     /* "=<tok>": released cleanly */
    DM_HOLDER_EXPIRY_SEEN,  /* "!<ms>": an expiry seen at server time <ms> (lock delay);
                               "!<ms> forced": after a forced release (forced = 1) */
    DM_HOLDER_FORCED,       /* "~<tok> <who>": released by `dmutex unlock --force`,
                               which drew token <tok>; taken next as after an expiry */
    DM_HOLDER_KEPT_OFF,     /* "?<ms>": no grant before server time <ms> (seen_ms): the
                               lock's data was missing on a server up for less than a
                               lease (acquire.lua, "Restarts") */
};

struct dm_holder {
    enum dm_holder_state state;
    const char *request;    /* GRANTED: "<owner>|<wait id>", inside the marker */
    size_t request_len;
    size_t owner_len;       /* GRANTED: the owner, the request up to '|' */
    uint64_t token;         /* GRANTED, RELEASED and FORCED */
    long long seen_ms;      /* EXPIRY_SEEN; KEPT_OFF: until then */
    const char *by;         /* FORCED: who forced it, inside the marker */
    int forced;             /* EXPIRY_SEEN: the end it delays was a forced release */
};

/* Decodes `marker` (NUL-terminated) into *h, which points into it. The
 * state follows the first character, so *h->state is always set; returns
 * 0 when the rest is well formed, -1 when not (the other fields are then
 * zero or partial). */
int dm_keys_holder_decode(const char *marker, struct dm_holder *h);

#endif
