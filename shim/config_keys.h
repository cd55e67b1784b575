/* config_keys.h: the table of every config key (shim/config_keys.c), for
 * the config module, the tests and `dmutex config-keys`. */
#ifndef DM_CONFIG_KEYS_H
#define DM_CONFIG_KEYS_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"

/* Every key of the file is declared once in dm_config_keys[], in the order
 * messages list them ("valid keys: ...") and REFERENCE.md's tables show
 * them. From it come: the unknown-key check, the defaults, the parsing of
 * every scalar key (type, bounds, the "must be between" and "must be
 * \"a\" or \"b\"" messages, the target field) and the reference tables
 * (`dmutex config-keys`, checked against config/REFERENCE.md). Keys of type
 * DM_CFG_HAND are only named and documented here; config.c reads them by
 * hand because their rules involve other keys or more than a value. */
enum dm_key_group { DM_GROUP_TOP, DM_GROUP_REDIS, DM_GROUP_MUTEX,
                    DM_GROUP_TLS,       /* redis.tls, etcd.tls: struct dm_tls_config */
                    DM_GROUP_METRICS,   /* metrics: struct dm_metrics_config */
                    DM_GROUP_ETCD };    /* etcd: its timeouts are struct dm_redis_config's
                                           (the store's), its endpoints by hand */

enum dm_cfg_type {
    DM_CFG_INT,         /* int field, lo..hi */
    DM_CFG_LONG,        /* long field, lo..hi (milliseconds, bytes) */
    DM_CFG_BOOL,        /* int field, true or false */
    DM_CFG_ENUM,        /* enum field: the index of the string in values[] */
    DM_CFG_NAME,        /* char * field: a lock name (dm_config_name_ok) */
    DM_CFG_HAND,        /* read by hand in config.c */
};

/* The target field's offset when a key has none (groups, lists). */
#define DM_CFG_NO_FIELD ((size_t)-1)

struct dm_config_key {
    const char *name;
    enum dm_key_group group;        /* whose struct `offset` is into: dm_config, */
    enum dm_cfg_type type;          /* dm_redis_config or dm_object_config */
    size_t offset;
    long lo, hi;                    /* INT, LONG: the bounds */
    int cross;                      /* 1: the bounds depend on other keys and are
                                     * checked by hand after every key is read */
    long dflt;                      /* INT, LONG, BOOL, ENUM default */
    long dflt_div;                  /* non-zero: the default is lease_ms / dflt_div */
    const char *dflt_str;           /* NAME, HAND: default string, static storage */
    const char *const *values;      /* ENUM: the names, NULL-terminated */
    const char *not_with;           /* a sibling key that leaves this one no meaning */
    const char *doc_type;           /* the reference table's words, when they */
    const char *doc_default;        /* cannot be made from the fields above */
    const char *doc_range;
    const char *doc;                /* what the key means */
};

/* Indexes into dm_config_keys[], in table order. */
enum dm_key_id {
    DM_K_REDIS, DM_K_NAMESPACE, DM_K_LEASE, DM_K_RENEW, DM_K_MARGIN, DM_K_LOCK_DELAY,
    DM_K_ON_LEASE_LOST, DM_K_ON_STORE_DOWN, DM_K_ON_REDIS_DOWN, DM_K_BATCH, DM_K_BATCH_HOLD, DM_K_MUTEXES, DM_K_CONDS, DM_K_RWLOCKS, DM_K_PROGRAMS,
    DM_K_MIN_REPLICAS, DM_K_REPLICA_TIMEOUT, DM_K_METRICS,
    DM_K_HOST, DM_K_PORT, DM_K_UNIX, DM_K_USERNAME, DM_K_PASSWORD, DM_K_PASSWORD_ENV,
    DM_K_DB, DM_K_CONNECT_TIMEOUT, DM_K_COMMAND_TIMEOUT,
    DM_K_SENTINELS, DM_K_MASTER, DM_K_SENTINEL_USERNAME, DM_K_SENTINEL_PASSWORD,
    DM_K_SENTINEL_PASSWORD_ENV, DM_K_CLUSTER,
    DM_K_SYMBOL, DM_K_OBJECT, DM_K_NAME, DM_K_OFFSET, DM_K_INDEX, DM_K_INIT_SITE,
    DM_K_REQUIRED, DM_K_FAIR, DM_K_CACHE, DM_K_PROTOCOL, DM_K_ADDRESS, DM_K_INIT_SITE_ADDRESS, DM_K_BUILD_ID,
    DM_K_TLS, DM_K_TLS_CA, DM_K_TLS_CERT, DM_K_TLS_KEY, DM_K_TLS_SERVER_NAME, DM_K_TLS_VERIFY,
    DM_K_METRICS_FILE, DM_K_METRICS_INTERVAL,
    DM_K_ETCD, DM_K_ETCD_ENDPOINTS, DM_K_ETCD_USERNAME, DM_K_ETCD_PASSWORD, DM_K_ETCD_PASSWORD_ENV,
    DM_K_ETCD_CONNECT_TIMEOUT, DM_K_ETCD_COMMAND_TIMEOUT, DM_K_ETCD_TLS,
    DM_NKEYS
};

extern const struct dm_config_key dm_config_keys[DM_NKEYS];

/* Sets every field of `group` in `base` to its table default. Derived
 * defaults follow the lease_ms already in `cfg` (NULL: the default lease). */
void dm_config_keys_defaults(enum dm_key_group group, void *base, const struct dm_config *cfg);

/* The reference table of `group` in Markdown, as config/REFERENCE.md
 * holds it: | key | type | default | range | meaning |. */
void dm_config_keys_print(FILE *out, enum dm_key_group group);

#endif
