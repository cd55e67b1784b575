/* config: a libconfig file -> a validated struct dm_config. Every error
 * names FILE:LINE and what is wrong. Knows nothing of pthread or Redis
 * (it only carries the server's address and credentials). */
#ifndef DM_CONFIG_H
#define DM_CONFIG_H

#include <stddef.h>

#define DM_EX_CONFIG              78      /* sysexits.h EX_CONFIG */
#define DM_LEASE_DEFAULT_MS       30000L
#define DM_CONNECT_TIMEOUT_MS     1000L
#define DM_COMMAND_TIMEOUT_MS     1000L
#define DM_NAMESPACE_DEFAULT      "dmutex"
#define DM_REDIS_HOST_DEFAULT     "127.0.0.1"
#define DM_REDIS_PORT_DEFAULT     6379
#define DM_NAME_MAX               200     /* bytes of a mutex name */
#define DM_ERR_MAX                512     /* size of an error buffer */
#define DM_FAIR_DEFAULT           1       /* FIFO handover unless fair = false */
#define DM_SENTINEL_PORT_DEFAULT  26379
#define DM_SENTINELS_MAX          16      /* addresses in redis.sentinels */
#define DM_CLUSTER_SEEDS_MAX      16      /* addresses in redis.cluster */
#define DM_REPLICA_TIMEOUT_MS     1000L   /* replica_timeout_ms default (at most renew_ms) */
#define DM_METRICS_INTERVAL_MS    10000L  /* metrics.interval_ms default */
#define DM_METRICS_INTERVAL_MIN_MS 10L
#define DM_METRICS_INTERVAL_MAX_MS 3600000L /* an hour */
/* metrics.file's limits: the file system's (NAME_MAX 255, PATH_MAX 4096
 * with its NUL) for the temporary file shim/metrics.c writes beside it,
 * ".NAME.PID.tmp" (the longest of its side files), with %p counted as the
 * longest pid. Checked when the config (or DMUTEX_METRICS) is read. */
#define DM_METRICS_PID_DIGITS     10      /* a pid_t, as %p and ".PID.tmp" write it */
#define DM_METRICS_TMP_EXTRA      (1 + 1 + DM_METRICS_PID_DIGITS + 4)   /* ".", ".PID.tmp" */
#define DM_METRICS_NAME_MAX       (255 - DM_METRICS_TMP_EXTRA)          /* after the last '/' */
#define DM_METRICS_PATH_MAX       (4095 - DM_METRICS_TMP_EXTRA)         /* the whole path */

enum dm_on_lease_lost { DM_LOST_ABORT, DM_LOST_WARN };
/* A mutex entry's lock on the wire (protocol = "..."; docs/interop.md):
 * dmutex's own keys, the SET NX string lock other languages' clients
 * take at the bare name, or Redisson's RLock hash at the bare name. */
enum dm_protocol { DM_PROTOCOL_DMUTEX, DM_PROTOCOL_SETNX, DM_PROTOCOL_REDISSON };
/* Its name as the config writes it ("dmutex", "setnx", "redisson"). No I/O. */
const char *dm_config_protocol_name(int protocol);
enum dm_on_redis_down { DM_DOWN_BLOCK, DM_DOWN_ERROR, DM_DOWN_LOCAL };

/* TLS to the server (redis.tls, or a rediss:// URL; etcd.tls, https://
 * endpoints or an etcds:// URL). */
struct dm_tls_config {
    int enabled;                /* 0: plain TCP */
    char *ca;                   /* CA file or directory (PEM); NULL: the system's CAs */
    char *cert;                 /* client certificate chain (PEM); NULL: none */
    char *key;                  /* its private key (PEM); NULL: in the cert file */
    char *server_name;          /* the name checked and sent (SNI); NULL: the host */
    int verify;                 /* check the server's certificate and name, default 1 */
    int line;                   /* line of the tls group in the file (path of struct
                                   dm_config); 0: TLS came from a rediss:// or etcds://
                                   URL, or from https:// endpoints alone */
};

/* One sentinel's address. */
struct dm_endpoint {
    char *host;
    int port;
};

struct dm_redis_config {
    char *host;                 /* NULL when unix_path is set */
    int port;
    char *unix_path;            /* NULL for TCP */
    char *username;             /* NULL: AUTH with password only */
    char *password;             /* NULL: no AUTH (password_env is resolved here) */
    int db;                     /* SELECT when non-zero */
    long connect_timeout_ms;
    long command_timeout_ms;
    struct dm_tls_config tls;
    /* Sentinel (shim/redis/sentinel.c): with sentinels, host/port/unix are unused
     * and the primary of `master` is asked of the sentinels. */
    struct dm_endpoint *sentinels;
    size_t nsentinels;          /* 0: no Sentinel, host/port or unix as given */
    char *master;               /* the name the sentinels monitor */
    char *sentinel_username;    /* NULL: AUTH the sentinels with the password only */
    char *sentinel_password;    /* NULL: no AUTH to the sentinels */
    /* Redis Cluster (shim/redis/slots.c): with seeds, host/port/unix are unused;
     * the slot map is asked of the seeds and every node it names gets the
     * same credentials and TLS settings; db is 0. */
    struct dm_endpoint *cluster;
    size_t ncluster;            /* 0: not a cluster */
};

/* etcd = { endpoints = ( "http://host:port", ... ); } (shim/etcd/): with
 * endpoints, the store is etcd, not Redis; the redis group's timeouts
 * (connect_timeout_ms, command_timeout_ms) are the store's, written in the
 * etcd group. https:// endpoints (every one, or none) mean TLS: with the
 * etcd.tls group's settings, or the system's CAs without one. */
#define DM_ETCD_ENDPOINTS_MAX     16
#define DM_ETCD_PORT_DEFAULT      2379
struct dm_etcd_config {
    struct dm_endpoint *endpoints;
    size_t nendpoints;          /* 0: the store is Redis */
    char *username;             /* NULL: no authentication */
    char *password;             /* with username (password_env resolved here) */
    struct dm_tls_config tls;   /* enabled: every member over TLS */
};

/* metrics = { file; interval_ms; } (shim/metrics.c). */
struct dm_metrics_config {
    char *file;                 /* the .prom file; "%p" is the pid; NULL: no metrics file */
    long interval_ms;           /* rewritten this often, and at exit */
};

/* One entry of `mutexes`, `conds` or `rwlocks`: the object it names and
 * the lock name it maps it to. */
struct dm_object_config {
    char *symbol;               /* "sym" or "file.c:sym"; NULL for init_site entries */
    char *object;               /* file name of the executable or library; NULL: the executable */
    char *init_site;            /* function name; NULL for symbol entries */
    char *name;                 /* lock name; defaults to symbol (without "file.c:") or init_site */
    long address;               /* address entry: file-relative address of the mutex, -1: none */
    long init_site_address;     /* the return address of one init call, -1: none */
    char *build_id;             /* hex build-id the object must have (address entries), or NULL */
    long offset;                /* bytes into the symbol, default 0 */
    long index;                 /* element of a mutex array, -1 when not given */
    int required;               /* default 1: not found is an error */
    int fair;                   /* FIFO handover, default DM_FAIR_DEFAULT (on) */
    int cache;                  /* keep the cluster lock across local cycles, default 0 */
    int protocol;               /* enum dm_protocol, default DM_PROTOCOL_DMUTEX (mutexes only) */
    int line;                   /* line of the entry in the file */
    int cond;                   /* an entry of `conds`: a pthread_cond_t (no fair, cache) */
    int rw;                     /* an entry of `rwlocks`: a pthread_rwlock_t (no fair, cache) */
};

struct dm_config {
    char *path;                 /* the file read, for messages */
    struct dm_redis_config redis;
    struct dm_etcd_config etcd;
    char *ns;                   /* key namespace, default "dmutex" */
    long lease_ms;              /* default DM_LEASE_DEFAULT_MS */
    long renew_ms;              /* default lease_ms / 3 */
    long lease_margin_ms;       /* default lease_ms / 10 */
    long lock_delay_ms;         /* default 0 */
    enum dm_on_lease_lost on_lease_lost;    /* default abort */
    enum dm_on_redis_down on_redis_down;    /* default block */
    long batch_ms;              /* a contended grant serves this process so long (0: one lock) */
    long batch_hold_us;         /* ... after critical sections shorter than this only */
    int min_replicas;           /* a grant counts once this many replicas have it (WAIT) */
    long replica_timeout_ms;    /* how long WAIT waits for them */
    struct dm_metrics_config metrics;
    struct dm_object_config *mutexes;
    size_t nmutexes;
    struct dm_object_config *conds;  /* cluster-wide condition variables: the same keys */
    size_t nconds;                  /* as a mutex entry but fair and cache */
    struct dm_object_config *rwlocks;    /* cluster-wide read-write locks: the same keys */
    size_t nrwlocks;                    /* as a mutex entry but fair and cache */
    char **programs;            /* executables (file names) the config is for; */
    size_t nprograms;           /* none: every process that loads the shim */
    int mutexes_line;           /* line of the `mutexes` key, 0: not written */
    int settings;               /* top-level settings in the file, 0: empty */
};

/* What dm_config_load_for returns for a program `programs` does not list. */
#define DM_CONFIG_NOT_FOR         1

/* Fills `cfg` with the defaults (no mutexes, Redis at 127.0.0.1:6379). */
void dm_config_defaults(struct dm_config *cfg);

/* Reads and validates the file at `path` into `cfg`. Returns 0, or -1 with
 * `err` holding "FILE:LINE: what is wrong" (NUL-terminated, at most errlen
 * bytes). On error `cfg` holds nothing that needs freeing. */
int dm_config_load(const char *path, struct dm_config *cfg, char *err, size_t errlen);

/* Same, for the process whose executable's file name is `program` (NULL:
 * unknown, as if listed). `programs` is read before anything else: when it
 * does not list `program`, returns DM_CONFIG_NOT_FOR with nothing else
 * validated or resolved (not even password_env), cfg holding the defaults,
 * path and programs (free it with dm_config_free). So a helper the program
 * runs is never stopped by what only the program needs. Syntax errors and
 * a malformed `programs` still return -1. */
int dm_config_load_for(const char *path, const char *program, struct dm_config *cfg,
                       char *err, size_t errlen);

/* 0 when the config has a `mutexes` key (even `mutexes = ();`); else -1,
 * `err` saying that an empty file or one without `mutexes` is taken for a
 * truncated or wrong one, and how to map nothing on purpose. */
int dm_config_check_mutexes(const struct dm_config *cfg, char *err, size_t errlen);

/* 0 when every entry's protocol can be spoken by the store cfg names
 * now (after DMUTEX_REDIS and DMUTEX_ETCD: the setnx and redisson
 * protocols are Redis locks, not etcd's); else -1, `err` holding
 * "FILE:LINE: ..." of the first entry that cannot, and the fix. No I/O. */
int dm_config_check_protocols(const struct dm_config *cfg, char *err, size_t errlen);

/* `url` for a message: the password of user:password@ replaced by ***.
 * Every message that shows a redis URL shows it through this. */
void dm_config_redact_url(const char *url, char *out, size_t len);

/* Same, from a string (tests, fuzzing); `label` stands for the file name. */
int dm_config_load_string(const char *text, const char *label,
                          struct dm_config *cfg, char *err, size_t errlen);

/* Every URL dm_config_set_redis_url takes, written once: X(scheme, what
 * follows it). Every text that lists them is made from this list: the
 * usage texts of the dmutex command (DM_URL_HELP), the man pages (through
 * `dmutex url-forms`) and config_url.c's messages (DM_URL_SCHEMES); a new
 * scheme is one line here. A form has no run of two spaces (the man
 * pages' usage2man.awk would read it as a list item). */
#define DM_URL_LIST(X) \
    X("redis://", "[user:pass@]host[:port][/db]") \
    X("rediss://", "[user:pass@]host[:port][/db] (TLS: DMUTEX_TLS_CA/CERT/KEY)") \
    X("unix://", "/path[?db=N]") \
    X("redis-sentinel://", "[user:pass@]host[:port][,host[:port]...]/master[/db]") \
    X("rediss-sentinel://", "[user:pass@]host[:port][,host[:port]...]/master[/db] (TLS)") \
    X("redis-cluster://", "[user:pass@]host[:port][,host[:port]...]") \
    X("etcd://", "host[:port][,host[:port]...] (the locks in etcd)") \
    X("etcds://", "host[:port][,host[:port]...] (etcd over TLS: DMUTEX_TLS_CA/CERT/KEY)")
#define DM_URL_FORM_(scheme, rest) scheme rest "\n"
#define DM_URL_HELP_FORM_(scheme, rest) "  " scheme rest "\n"
#define DM_URL_SCHEME_(scheme, rest) " " scheme
/* One form a line, as written above. */
#define DM_URL_FORMS DM_URL_LIST(DM_URL_FORM_)
/* The paragraph each usage text that takes a REDIS_URL ends with. */
#define DM_URL_HELP "A REDIS_URL (-r, or $DMUTEX_REDIS) is one of:\n" DM_URL_LIST(DM_URL_HELP_FORM_)
/* " redis:// rediss:// ...": the schemes alone, for messages. */
#define DM_URL_SCHEMES DM_URL_LIST(DM_URL_SCHEME_)

/* Applies a DMUTEX_REDIS-style URL: one of DM_URL_LIST's forms.
 * Returns 0, or -1 with `err` naming what is wrong. */
int dm_config_set_redis_url(struct dm_config *cfg, const char *url, char *err, size_t errlen);

/* Applies DMUTEX_METRICS: the metrics file's path (as metrics.file).
 * Returns 0, or -1 with `err` naming what is wrong. */
int dm_config_set_metrics_file(struct dm_config *cfg, const char *path, char *err, size_t errlen);

void dm_config_free(struct dm_config *cfg);

/* Is `name` a valid lock name (1..DM_NAME_MAX bytes of [A-Za-z0-9_.:/@-])?
 * 1, or 0 with `why` saying what is wrong. Used for names given at run
 * time (dmutex_name) too. */
int dm_config_name_ok(const char *name, char *why, size_t len);

#endif
