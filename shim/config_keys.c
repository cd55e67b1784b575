/* config_keys: every key of a config file, declared once. The table says
 * what config.c parses and how, what dm_config_defaults sets, and what
 * config/REFERENCE.md's key tables say (tests/config_reference.test.sh
 * compares them with `dmutex config-keys`). Only the keys whose rules
 * reach beyond one value are DM_CFG_HAND: config.c reads those by hand.
 *
 * A derived default is written as dflt_div: renew_ms = lease_ms / 3 is
 * { .dflt_div = DM_RENEW_DIVISOR }, applied after lease_ms (which comes
 * first in the table) and printed as `lease_ms / 3`. */
#include "config_impl.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

/* Defaults live in static storage: dm_config_free frees a string only when
 * it is not one of these, so defaults never need allocating or freeing. */
static char default_host[] = DM_REDIS_HOST_DEFAULT;
static char default_ns[] = DM_NAMESPACE_DEFAULT;

static const char *const lease_lost_values[] = { "abort", "warn", NULL };
static const char *const redis_down_values[] = { "block", "error", "local", NULL };
static const char *const protocol_values[] = { "dmutex", "setnx", "redisson", NULL };

const char *dm_config_protocol_name(int protocol)
{
    return protocol >= 0 && protocol < (int)(sizeof protocol_values / sizeof *protocol_values) - 1
           ? protocol_values[protocol] : "?";
}

/* An ENUM key writes its value as an int. */
static_assert(sizeof(enum dm_on_lease_lost) == sizeof(int), "enum is an int");
static_assert(sizeof(enum dm_on_redis_down) == sizeof(int), "enum is an int");
static_assert(DM_LOST_ABORT == 0 && DM_LOST_WARN == 1, "lease_lost_values order");
static_assert(sizeof(enum dm_protocol) == sizeof(int), "enum is an int");
static_assert(DM_PROTOCOL_DMUTEX == 0 && DM_PROTOCOL_SETNX == 1 && DM_PROTOCOL_REDISSON == 2,
              "protocol_values order");
static_assert(DM_DOWN_BLOCK == 0 && DM_DOWN_ERROR == 1 && DM_DOWN_LOCAL == 2,
              "redis_down_values order");

#define TOP(f)      DM_GROUP_TOP, .offset = offsetof(struct dm_config, f)
#define REDIS(f)    DM_GROUP_REDIS, .offset = offsetof(struct dm_redis_config, f)
#define MUTEX(f)    DM_GROUP_MUTEX, .offset = offsetof(struct dm_object_config, f)
#define TLS(f)      DM_GROUP_TLS, .offset = offsetof(struct dm_tls_config, f)
#define METRICS(f)  DM_GROUP_METRICS, .offset = offsetof(struct dm_metrics_config, f)
#define ETCD(f)     DM_GROUP_ETCD, .offset = offsetof(struct dm_redis_config, f)
#define NO_FIELD(g) g, .offset = DM_CFG_NO_FIELD

const struct dm_config_key dm_config_keys[DM_NKEYS] = {
    /* ---- top level ---- */
    [DM_K_REDIS] = { "redis", NO_FIELD(DM_GROUP_TOP), .type = DM_CFG_HAND,
        .doc_type = "group", .doc_default = "see below", .doc_range = "",
        .doc = "the Redis server" },
    [DM_K_ETCD] = { "etcd", NO_FIELD(DM_GROUP_TOP), .type = DM_CFG_HAND,
        .doc_type = "group", .doc_default = "none: Redis", .doc_range = "",
        .doc = "the etcd cluster, instead of Redis (excludes `redis`)" },
    [DM_K_NAMESPACE] = { "namespace", TOP(ns), .type = DM_CFG_NAME, .dflt_str = default_ns,
        .doc = "first part of every Redis key" },
    [DM_K_LEASE] = { "lease_ms", TOP(lease_ms), .type = DM_CFG_LONG,
        .lo = DM_LEASE_MIN_MS, .hi = DM_LEASE_MAX_MS, .dflt = DM_LEASE_DEFAULT_MS,
        .doc = "how long a held lock survives on the server without renewal" },
    [DM_K_RENEW] = { "renew_ms", TOP(renew_ms), .type = DM_CFG_LONG, .cross = 1,
        .lo = DM_RENEW_MIN_MS, .dflt_div = DM_RENEW_DIVISOR,
        .doc_range = ">= 10, and `2 * renew_ms <= lease_ms - lease_margin_ms`",
        .doc = "how often a holder renews its lease" },
    [DM_K_MARGIN] = { "lease_margin_ms", TOP(lease_margin_ms), .type = DM_CFG_LONG, .cross = 1,
        .lo = 1, .dflt_div = DM_MARGIN_DIVISOR,
        .doc_range = "1 .. less than `lease_ms / 2`",
        .doc = "safety margin before the server-side expiry" },
    [DM_K_LOCK_DELAY] = { "lock_delay_ms", TOP(lock_delay_ms), .type = DM_CFG_LONG, .cross = 1,
        .lo = 0, .hi = DM_LOCK_DELAY_MAX_MS, .dflt = 0,
        .doc_range = "0..`lease_ms`, at most 600000",
        .doc = "wait after an expired lease before granting the lock again" },
    [DM_K_ON_LEASE_LOST] = { "on_lease_lost", TOP(on_lease_lost), .type = DM_CFG_ENUM,
        .values = lease_lost_values, .dflt = DM_LOST_ABORT,
        .doc = "what a holder does when its lease may be lost" },
    [DM_K_ON_STORE_DOWN] = { "on_store_down", TOP(on_redis_down), .type = DM_CFG_ENUM,
        .values = redis_down_values, .dflt = DM_DOWN_BLOCK,
        .doc = "what lock does while the store (Redis or etcd) is unreachable" },
    [DM_K_ON_REDIS_DOWN] = { "on_redis_down", TOP(on_redis_down), .type = DM_CFG_ENUM,
        .values = redis_down_values, .dflt = DM_DOWN_BLOCK,
        .doc = "the old name of `on_store_down` (either, not both)" },
    [DM_K_BATCH] = { "batch_ms", TOP(batch_ms), .type = DM_CFG_LONG,
        .lo = 0, .hi = DM_BATCH_MAX_MS, .dflt = DM_BATCH_DEFAULT_MS,
        .doc = "while other processes queue for a mutex this process holds, its threads may lock "
               "it again without a round trip for this long after the grant (a batch), before "
               "it goes to the next process in line; 0: every lock call queues anew. For fair "
               "mutexes (not `fair = false`, `cache` or rwlocks)" },
    [DM_K_BATCH_HOLD] = { "batch_hold_us", TOP(batch_hold_us), .type = DM_CFG_LONG,
        .lo = 0, .hi = DM_BATCH_HOLD_MAX_US, .dflt = DM_BATCH_HOLD_DEFAULT_US,
        .doc = "a batch goes on after an unlock only when the critical section it ended (from "
               "the lock that found nobody of the process inside) was shorter than this; a "
               "longer one's unlock hands the lock on at once, as with `batch_ms = 0`" },
    [DM_K_MUTEXES] = { "mutexes", NO_FIELD(DM_GROUP_TOP), .type = DM_CFG_HAND,
        .doc_type = "list of groups", .doc_default = "`()`", .doc_range = "",
        .doc = "the mutexes to make cluster-wide" },
    [DM_K_CONDS] = { "conds", NO_FIELD(DM_GROUP_TOP), .type = DM_CFG_HAND,
        .doc_type = "list of groups", .doc_default = "`()`", .doc_range = "",
        .doc = "the condition variables to make cluster-wide: entries with the keys of a "
               "mutex entry but `fair` and `cache`, naming `pthread_cond_t`s (or C11 `cnd_t`s)" },
    [DM_K_RWLOCKS] = { "rwlocks", NO_FIELD(DM_GROUP_TOP), .type = DM_CFG_HAND,
        .doc_type = "list of groups", .doc_default = "`()`", .doc_range = "",
        .doc = "the read-write locks to make cluster-wide: entries with the keys of a "
               "mutex entry but `fair` and `cache`, naming `pthread_rwlock_t`s" },
    [DM_K_PROGRAMS] = { "programs", NO_FIELD(DM_GROUP_TOP), .type = DM_CFG_HAND,
        .doc_type = "list of strings", .doc_default = "every process",
        .doc_range = "executable file names, no `/`",
        .doc = "the programs the config is for; any other process that loads the shim (a "
               "shell started by `system()`, a helper the program execs, which inherit "
               "`LD_PRELOAD`) maps nothing and runs untouched" },
    [DM_K_MIN_REPLICAS] = { "min_replicas", TOP(min_replicas), .type = DM_CFG_INT,
        .lo = 0, .hi = DM_MIN_REPLICAS_MAX, .dflt = 0,
        .doc = "a grant (and a handover, and a renewal) counts only once this many replicas "
               "acknowledged it (`WAIT`); one that is not acknowledged in time is released "
               "and retried. 0: replication is asynchronous, a failover can lose a grant" },
    [DM_K_REPLICA_TIMEOUT] = { "replica_timeout_ms", TOP(replica_timeout_ms), .type = DM_CFG_LONG,
        .cross = 1, .lo = DM_TIMEOUT_MIN_MS, .hi = DM_TIMEOUT_MAX_MS, .dflt = DM_REPLICA_TIMEOUT_MS,
        .doc_default = "1000, at most `renew_ms`", .doc_range = "1..`renew_ms`",
        .doc = "how long a grant or renewal waits for `min_replicas` acknowledgements" },
    [DM_K_METRICS] = { "metrics", NO_FIELD(DM_GROUP_TOP), .type = DM_CFG_HAND,
        .doc_type = "group", .doc_default = "none: no metrics file", .doc_range = "see below",
        .doc = "write per-lock metrics (Prometheus text format) to a file, for node_exporter's "
               "textfile collector" },

    /* ---- the redis group ---- */
    [DM_K_HOST] = { "host", REDIS(host), .type = DM_CFG_HAND, .dflt_str = default_host,
        .doc_type = "string", .doc_range = "1..255 bytes, no whitespace, control characters or `/`",
        .doc = "host name or IP address (IPv6 without brackets: `\"::1\"`)" },
    [DM_K_PORT] = { "port", REDIS(port), .type = DM_CFG_INT, .lo = 1, .hi = DM_PORT_MAX,
        .dflt = DM_REDIS_PORT_DEFAULT, .not_with = "unix", .doc = "TCP port" },
    [DM_K_UNIX] = { "unix", REDIS(unix_path), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "1..107 bytes, no control characters",
        .doc = "path of a unix socket, instead of host and port" },
    [DM_K_USERNAME] = { "username", REDIS(username), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "1..255 bytes, no whitespace",
        .doc = "ACL user for `AUTH user password` (Redis 6+)" },
    [DM_K_PASSWORD] = { "password", REDIS(password), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "not empty",
        .doc = "password for `AUTH`" },
    [DM_K_PASSWORD_ENV] = { "password_env", NO_FIELD(DM_GROUP_REDIS), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none",
        .doc_range = "an environment variable name `[A-Za-z_][A-Za-z0-9_]*`",
        .doc = "read the password from this variable" },
    [DM_K_DB] = { "db", REDIS(db), .type = DM_CFG_INT, .lo = 0, .hi = DM_REDIS_DB_MAX, .dflt = 0,
        .doc = "database to `SELECT` (when not 0)" },
    [DM_K_CONNECT_TIMEOUT] = { "connect_timeout_ms", REDIS(connect_timeout_ms), .type = DM_CFG_LONG,
        .lo = DM_TIMEOUT_MIN_MS, .hi = DM_TIMEOUT_MAX_MS, .dflt = DM_CONNECT_TIMEOUT_MS,
        .doc = "time allowed to connect" },
    [DM_K_COMMAND_TIMEOUT] = { "command_timeout_ms", REDIS(command_timeout_ms), .type = DM_CFG_LONG,
        .lo = DM_TIMEOUT_MIN_MS, .hi = DM_TIMEOUT_MAX_MS, .dflt = DM_COMMAND_TIMEOUT_MS,
        .doc = "time allowed for one command's reply" },
    [DM_K_SENTINELS] = { "sentinels", NO_FIELD(DM_GROUP_REDIS), .type = DM_CFG_HAND,
        .doc_type = "list of strings", .doc_default = "none",
        .doc_range = "1..16 of `\"host:port\"` (port default 26379; IPv6 as `\"[::1]:26379\"`)",
        .doc = "Redis Sentinel: ask these for the primary of `master` instead of using "
               "host/port/unix (which it excludes)" },
    [DM_K_MASTER] = { "master", REDIS(master), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "1..255 bytes, no whitespace",
        .doc = "the name the sentinels monitor (`sentinel monitor NAME ...`); required with "
               "`sentinels`" },
    [DM_K_SENTINEL_USERNAME] = { "sentinel_username", REDIS(sentinel_username), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "1..255 bytes, no whitespace",
        .doc = "ACL user for `AUTH` to the sentinels; needs a sentinel password" },
    [DM_K_SENTINEL_PASSWORD] = { "sentinel_password", REDIS(sentinel_password), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "not empty",
        .doc = "password for `AUTH` to the sentinels (the data nodes use `password`)" },
    [DM_K_SENTINEL_PASSWORD_ENV] = { "sentinel_password_env", NO_FIELD(DM_GROUP_REDIS),
        .type = DM_CFG_HAND, .doc_type = "string", .doc_default = "none",
        .doc_range = "an environment variable name `[A-Za-z_][A-Za-z0-9_]*`",
        .doc = "read the sentinels' password from this variable; not with `sentinel_password`" },
    [DM_K_CLUSTER] = { "cluster", NO_FIELD(DM_GROUP_REDIS), .type = DM_CFG_HAND,
        .doc_type = "list of strings", .doc_default = "none",
        .doc_range = "1..16 of `\"host:port\"` (port default 6379; IPv6 as `\"[::1]:7000\"`)",
        .doc = "Redis Cluster: seed nodes to ask for the slot map (`CLUSTER SLOTS`); each "
               "lock goes to the primary of its slot. Excludes host/port/unix/sentinels; "
               "`db` must be 0" },

    /* ---- a mutex entry ---- */
    [DM_K_SYMBOL] = { "symbol", MUTEX(symbol), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "", .doc_range = "see below",
        .doc = "a global or file-static variable: a `pthread_mutex_t` (a C11 `mtx_t`, a "
               "`std::mutex`), or a struct or array holding one" },
    [DM_K_OBJECT] = { "object", MUTEX(object), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "the executable", .doc_range = "see below",
        .doc = "file name or full path of the executable or library that holds it, e.g. "
               "`\"libledger.so\"`" },
    [DM_K_NAME] = { "name", MUTEX(name), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "see below",
        .doc_range = "1..200 bytes of `[A-Za-z0-9_.:/@-]`",
        .doc = "the cluster-wide lock name" },
    [DM_K_OFFSET] = { "offset", MUTEX(offset), .type = DM_CFG_LONG, .lo = 0, .hi = DM_OFFSET_MAX,
        .dflt = 0, .doc = "bytes into the symbol where the mutex (in a `conds` entry, the condition variable) is (symbol entries only)" },
    [DM_K_INDEX] = { "index", MUTEX(index), .type = DM_CFG_LONG, .lo = 0, .hi = DM_INDEX_MAX,
        .dflt = -1, .doc_default = "none",
        .doc = "element of an array of mutexes (symbol entries only; not with `offset`)" },
    [DM_K_INIT_SITE] = { "init_site", MUTEX(init_site), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "", .doc_range = "see below",
        .doc = "a function: every mutex `pthread_mutex_init` (or C11's `mtx_init`) is called on "
               "from inside it (heap mutexes)" },
    [DM_K_REQUIRED] = { "required", MUTEX(required), .type = DM_CFG_BOOL, .dflt = 1,
        .doc = "a symbol or function that is not found stops the program; `false`: skip it" },
    [DM_K_FAIR] = { "fair", MUTEX(fair), .type = DM_CFG_BOOL, .dflt = DM_FAIR_DEFAULT,
        .doc = "hand the lock to waiters in arrival order, across machines (one round trip "
               "from release to the next holder, no herd, no starvation); `false`: waiters "
               "wake on a release notice and race, as Redisson's RLock (faster when one "
               "process takes the lock in bursts, but it can starve the others)" },
    [DM_K_CACHE] = { "cache", MUTEX(cache), .type = DM_CFG_BOOL, .dflt = 0,
        .doc = "keep the cluster lock across local lock/unlock cycles until another process "
               "asks for it" },
    [DM_K_PROTOCOL] = { "protocol", MUTEX(protocol), .type = DM_CFG_ENUM,
        .values = protocol_values, .dflt = DM_PROTOCOL_DMUTEX,
        .doc = "the lock on the wire: `\"dmutex\"`, dmutex's own keys (every feature); "
               "`\"setnx\"`, the lock other languages' clients take (redis-py `Lock`, redlock, "
               "redsync, Jedis `SET NX PX`): a string at the bare `name` holding the holder's "
               "token, no namespace; `\"redisson\"`, Redisson's `RLock` (Java Redisson, "
               "node-redisson): a hash at the bare `name`, one field per holder, released with "
               "a publish on `redisson_lock__channel:{name}`; neither with `fair = true`, "
               "`cache` or etcd, and no fencing token (docs/interop.md)" },
    [DM_K_ADDRESS] = { "address", MUTEX(address), .type = DM_CFG_LONG, .lo = 0,
        .hi = DM_ADDRESS_MAX, .dflt = -1, .doc_default = "none",
        .doc = "a mutex by its address in `object` (from its load base, as `dmutex trace` prints "
               "it), for a stripped binary with no symbol covering it: weak, the address of one "
               "build only (give `build_id`); needs `name`" },
    [DM_K_INIT_SITE_ADDRESS] = { "init_site_address", MUTEX(init_site_address), .type = DM_CFG_LONG,
        .lo = 0, .hi = DM_ADDRESS_MAX, .dflt = -1, .doc_default = "none",
        .doc = "heap mutexes initialised by the `pthread_mutex_init` (or `mtx_init`) call that returns to this "
               "address in `object` (as `dmutex trace` prints it), for a stripped function: weak, "
               "one build only (give `build_id`); needs `name`" },
    [DM_K_BUILD_ID] = { "build_id", MUTEX(build_id), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "2..128 hex digits",
        .doc = "with `address` or `init_site_address`: the GNU build-id `object` must have "
               "(else the program stops: the address would name something else)" },

    /* ---- TLS: redis.tls and etcd.tls, a group of the redis or the etcd group ---- */
    [DM_K_TLS] = { "tls", NO_FIELD(DM_GROUP_REDIS), .type = DM_CFG_HAND,
        .doc_type = "group", .doc_default = "none: plain TCP", .doc_range = "see below",
        .doc = "connect with TLS (OpenSSL); `tls = {};` trusts the system's CAs" },
    [DM_K_TLS_CA] = { "ca", TLS(ca), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "the system's CAs", .doc_range = "a file or directory path",
        .doc = "CA certificates (PEM) the server's certificate must be signed by" },
    [DM_K_TLS_CERT] = { "cert", TLS(cert), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "a file path",
        .doc = "client certificate chain (PEM), for servers that ask for one (Redis's "
               "`tls-auth-clients yes`, etcd's `--client-cert-auth`)" },
    [DM_K_TLS_KEY] = { "key", TLS(key), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "the `cert` file", .doc_range = "a file path; needs `cert`",
        .doc = "the client certificate's private key (PEM, not encrypted)" },
    [DM_K_TLS_SERVER_NAME] = { "server_name", TLS(server_name), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "the host (`redis.host`, each endpoint's)",
        .doc_range = "1..255 bytes, no whitespace",
        .doc = "the name (or IP address) the server's certificate must be for; also sent as SNI" },
    [DM_K_TLS_VERIFY] = { "verify", TLS(verify), .type = DM_CFG_BOOL, .dflt = 1,
        .doc = "check the server's certificate and name; `false` encrypts without knowing "
               "who the server is (tests only)" },

    /* ---- metrics ---- */
    /* (doc_range: DM_METRICS_NAME_MAX, checked below) */
    [DM_K_METRICS_FILE] = { "file", METRICS(file), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "",
        .doc_range = "an absolute path; `%p`: the pid; a file name of at most 239 bytes",
        .doc = "the file written (replaced by a rename: a reader never sees half of it); a "
               "`%p` in it is the process id, so processes of one program (and fork children) "
               "each write their own: without `%p` one process at a time writes it (the "
               "holder of the lock file `.NAME.lock` beside it) and a fork child writes none. "
               "`DMUTEX_METRICS` overrides it" },
    [DM_K_METRICS_INTERVAL] = { "interval_ms", METRICS(interval_ms), .type = DM_CFG_LONG,
        .lo = DM_METRICS_INTERVAL_MIN_MS, .hi = DM_METRICS_INTERVAL_MAX_MS,
        .dflt = DM_METRICS_INTERVAL_MS,
        .doc = "how often the file is rewritten (and once more at exit)" },

    /* ---- the etcd group ---- */
    [DM_K_ETCD_ENDPOINTS] = { "endpoints", NO_FIELD(DM_GROUP_ETCD), .type = DM_CFG_HAND,
        .doc_type = "list of strings", .doc_default = "required",
        .doc_range = "1..16 of `\"http://host:port\"`, or all `\"https://host:port\"` (TLS) (port default "
                     "2379; IPv6 as `\"http://[::1]:2379\"`)",
        .doc = "the members of the etcd cluster (their client URLs); a call goes to the one "
               "that answered last, then to each other in turn" },
    [DM_K_ETCD_USERNAME] = { "username", NO_FIELD(DM_GROUP_ETCD), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "1..255 bytes, no whitespace",
        .doc = "etcd user (etcd's authentication on: `etcdctl auth enable`); `dmutex acl` prints "
               "the role a least-privilege user needs" },
    [DM_K_ETCD_PASSWORD] = { "password", NO_FIELD(DM_GROUP_ETCD), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none", .doc_range = "not empty",
        .doc = "its password" },
    [DM_K_ETCD_PASSWORD_ENV] = { "password_env", NO_FIELD(DM_GROUP_ETCD), .type = DM_CFG_HAND,
        .doc_type = "string", .doc_default = "none",
        .doc_range = "an environment variable name `[A-Za-z_][A-Za-z0-9_]*`",
        .doc = "read the password from this variable" },
    [DM_K_ETCD_CONNECT_TIMEOUT] = { "connect_timeout_ms", ETCD(connect_timeout_ms), .type = DM_CFG_LONG,
        .lo = DM_TIMEOUT_MIN_MS, .hi = DM_TIMEOUT_MAX_MS, .dflt = DM_CONNECT_TIMEOUT_MS,
        .doc = "time allowed to connect to a member" },
    [DM_K_ETCD_COMMAND_TIMEOUT] = { "command_timeout_ms", ETCD(command_timeout_ms), .type = DM_CFG_LONG,
        .lo = DM_TIMEOUT_MIN_MS, .hi = DM_TIMEOUT_MAX_MS, .dflt = DM_COMMAND_TIMEOUT_MS,
        .doc = "time allowed for one member's answer, before the next member is asked" },
    [DM_K_ETCD_TLS] = { "tls", NO_FIELD(DM_GROUP_ETCD), .type = DM_CFG_HAND,
        .doc_type = "group", .doc_default = "none: as the endpoints say", .doc_range = "see below",
        .doc = "TLS to every member (OpenSSL), with the keys of `redis.tls`; not with `http://` "
               "endpoints (`https://` ones without it mean `tls = {};`: the system's CAs)" },
};
_Static_assert(DM_METRICS_NAME_MAX == 239, "metrics.file's doc_range says 239 bytes");

int dm_config_is_default(const char *s)
{
    return s == default_host || s == default_ns;
}

void dm_config_keys_defaults(enum dm_key_group group, void *base, const struct dm_config *cfg)
{
    for (int id = 0; id < DM_NKEYS; id++) {
        const struct dm_config_key *k = &dm_config_keys[id];
        if (k->group != group || k->offset == DM_CFG_NO_FIELD)
            continue;
        char *field = (char *)base + k->offset;
        long lease = cfg ? cfg->lease_ms : DM_LEASE_DEFAULT_MS;
        long v = k->dflt_div ? lease / k->dflt_div : k->dflt;
        switch (k->type) {
        case DM_CFG_INT:
        case DM_CFG_BOOL:
        case DM_CFG_ENUM:
            *(int *)field = (int)v;
            break;
        case DM_CFG_LONG:
            *(long *)field = v;
            break;
        case DM_CFG_NAME:
        case DM_CFG_HAND:
            if (k->dflt_str)
                *(char **)field = (char *)k->dflt_str;
            break;
        }
    }
}

static const char *type_words(const struct dm_config_key *k)
{
    switch (k->type) {
    case DM_CFG_INT:
    case DM_CFG_LONG: return "integer";
    case DM_CFG_BOOL: return "boolean";
    case DM_CFG_ENUM:
    case DM_CFG_NAME: return "string";
    case DM_CFG_HAND: break;
    }
    return k->doc_type;
}

/* The reference table's default cell of `k`. */
static void default_words(const struct dm_config_key *k, char *out, size_t len)
{
    if (k->doc_default)
        snprintf(out, len, "%s", k->doc_default);
    else if (k->dflt_div)
        snprintf(out, len, "`%s / %ld`", dm_config_keys[DM_K_LEASE].name, k->dflt_div);
    else if (k->type == DM_CFG_BOOL)
        snprintf(out, len, "%s", k->dflt ? "`true`" : "`false`");
    else if (k->type == DM_CFG_ENUM)
        snprintf(out, len, "`\"%s\"`", k->values[k->dflt]);
    else if (k->dflt_str)
        snprintf(out, len, "`\"%s\"`", k->dflt_str);
    else
        snprintf(out, len, "%ld", k->dflt);
}

/* The reference table's range cell of `k`. */
static void range_words(const struct dm_config_key *k, char *out, size_t len)
{
    out[0] = '\0';
    if (k->doc_range) {
        snprintf(out, len, "%s", k->doc_range);
    } else if (k->type == DM_CFG_ENUM) {
        size_t o = 0;
        for (const char *const *v = k->values; *v && o < len; v++)
            o += (size_t)snprintf(out + o, len - o, "%s`\"%s\"`", v == k->values ? "" : ", ", *v);
    } else if (k->type == DM_CFG_NAME) {
        snprintf(out, len, "1..%d bytes of `[A-Za-z0-9_.:/@-]`", DM_NAME_MAX);
    } else if (k->type == DM_CFG_INT || k->type == DM_CFG_LONG) {
        snprintf(out, len, "%ld..%ld", k->lo, k->hi);
    }
}

/* One cell and the bar after it; an empty cell is just "| |". */
static void cell(FILE *out, const char *s)
{
    fprintf(out, "%s%s |", *s ? " " : "", s);
}

void dm_config_keys_print(FILE *out, enum dm_key_group group)
{
    fputs("| key | type | default | range | meaning |\n|---|---|---|---|---|\n", out);
    for (int id = 0; id < DM_NKEYS; id++) {
        const struct dm_config_key *k = &dm_config_keys[id];
        char dflt[128], range[128];
        if (k->group != group)
            continue;
        default_words(k, dflt, sizeof dflt);
        range_words(k, range, sizeof range);
        fprintf(out, "| `%s` |", k->name);
        cell(out, type_words(k));
        cell(out, dflt);
        cell(out, range);
        cell(out, k->doc);
        fputc('\n', out);
    }
}
