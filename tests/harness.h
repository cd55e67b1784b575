/* harness: what every test needs to run real components. Starts its own
 * redis-server on a free loopback port in a private directory (never the
 * system service, never a fixed port), writes config files, and spawns
 * programs with the shim preloaded. Paths are relative to the repository
 * root, where `make test` runs. */
#ifndef DM_HARNESS_H
#define DM_HARNESS_H

#include <hiredis/hiredis.h>
#include <sys/types.h>
#include <time.h>

#include "lock.h"
#include "keys.h"

#define TH_BUILD "build"
#define TH_SHIM  TH_BUILD "/libdmutex.so"

struct th_redis {
    pid_t pid;
    int port;
    char dir[128];              /* private working directory */
    char addr[64];              /* bind address, default 127.0.0.1 */
    char url[96];               /* redis://addr:port (rediss:// with TLS), for DMUTEX_REDIS */
    int tls;                    /* port is a TLS port, the only one (--port 0) */
    char port_text[8];          /* the port in decimal, for a program's argv */
};

/* Every server started here and not yet stopped or killed is remembered,
 * so that a fatal signal (th_group_start) kills it too. */

/* Starts redis-server on a free port of `bind_addr` (NULL: 127.0.0.1) with
 * extra "--option value" arguments (NULL-terminated list, or NULL) and
 * waits until it answers PING. Aborts the test program if it cannot. */
void th_redis_start(struct th_redis *r, const char *bind_addr, const char *const *extra);

/* Declares the server new, with no lock data lost, for namespace `ns`
 * (`dmutex fresh`): locks new to it are granted at once, not a lease after
 * its start. Every start (not a restart, th_redis_restart) of a plain
 * server does it for the default namespace. Best effort: a server that
 * wants a password is left as it is. */
void th_redis_declare_fresh(const struct th_redis *r, const char *ns);

/* Same, with TLS only: `port` is --tls-port (plain --port 0); `extra`
 * brings the certificate options (--tls-cert-file ...). It is up once its
 * TLS port accepts connections (the harness speaks no TLS). */
void th_redis_start_tls(struct th_redis *r, const char *const *extra);

/* Stops it (SIGTERM, then SIGKILL after a second) and removes its directory. */
void th_redis_stop(struct th_redis *r);
/* Frees the connection *c to it (NULL: none) and sets *c to NULL, stops
 * it, and zeroes *r: ready for the next th_redis_start. */
void th_redis_drop(struct th_redis *r, redisContext **c);

/* Starts a Redis Sentinel (redis-server --sentinel, Debian's redis-sentinel
 * package) on a free port of `bind_addr` (NULL: 127.0.0.1), monitoring
 * `master` at mhost:mport with this quorum, down-after-milliseconds and
 * failover-timeout; waits until it answers PING. r->url is "addr:port",
 * as redis.sentinels lists it. Stop or kill it as any server. */
void th_sentinel_start(struct th_redis *r, const char *bind_addr, const char *master,
                       const char *mhost, int mport, int quorum, long down_ms, long failover_ms);

/* The same on 127.0.0.1 with TLS only: `port 0`, the port is its
 * tls-port, `tls` the config lines that go with it ("tls-cert-file F",
 * "tls-replication yes": how it reaches the data nodes...; NULL-terminated).
 * Up once the port accepts connections (the harness speaks no TLS). */
void th_sentinel_start_tls(struct th_redis *r, const char *master, const char *mhost, int mport,
                           int quorum, long down_ms, long failover_ms, const char *const *tls);

/* ---- Redis Cluster ----------------------------------------------------------
 * TH_RCLUSTER_PRIMARIES primaries, each with one replica, on free loopback
 * ports (each node's cluster bus on another free port), made one cluster
 * with `redis-cli --cluster create`; up once every node says
 * cluster_state:ok and agrees on the slot map. */
#define TH_RCLUSTER_PRIMARIES 3
#define TH_RCLUSTER_NODES     (2 * TH_RCLUSTER_PRIMARIES)
struct th_rcluster {
    struct th_redis node[TH_RCLUSTER_NODES];
    char url[400];              /* redis-cluster://h:p,h:p,... (every node) */
    long node_timeout_ms;
};
void th_rcluster_start(struct th_rcluster *k, long node_timeout_ms);
void th_rcluster_stop(struct th_rcluster *k);
/* Waits (up to timeout_ms) until every running node says cluster_state:ok
 * and all name the same primary for every slot; 0, or -1 after the time. */
int th_rcluster_wait_ok(struct th_rcluster *k, long timeout_ms);
/* The index in k->node of the node that is now the primary of `slot`
 * (asked of any running node), or -1. */
int th_rcluster_owner(struct th_rcluster *k, int slot);
/* The node's cluster id (CLUSTER MYID) into id (41 bytes). */
void th_rcluster_id(struct th_redis *r, char *id);

/* SIGKILLs it, keeping its directory (for restart tests); restart reuses port and dir. */
void th_redis_kill(struct th_redis *r);
void th_redis_restart(struct th_redis *r, const char *const *extra);

/* A connected context (1 s timeouts); aborts on failure. Free with redisFree. */
redisContext *th_redis_connect(const struct th_redis *r);

/* Runs one command and returns its reply (caller frees); aborts on I/O error. */
redisReply *th_cmd(redisContext *c, const char *fmt, ...);
/* Integer value of a command's reply (integer, or string holding a number). */
long long th_cmd_int(redisContext *c, const char *fmt, ...);

/* Writes `text` (printf format) to a new temporary file and returns its
 * path (static storage per call site is not assumed: caller frees). */
char *th_write_file(const char *suffix, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Spawns argv[0] with the extra environment entries "K=V" (NULL-terminated)
 * added to this process's environment. stdout/stderr go to `out_path` when
 * not NULL (appended), else they are inherited. */
pid_t th_spawn(char *const argv[], char *const env[], const char *out_path);

/* Waits for pid at most timeout_ms; returns its wait status, or -1 after
 * SIGKILLing it on timeout. */
int th_wait(pid_t pid, long timeout_ms);

/* Waits for a child that must end by itself within timeout_ms with exit
 * status `want`; returns its output (caller frees). Fails the test,
 * showing the output, on a hang, a signal or another status. */
char *th_finish(pid_t pid, const char *out, int want, long timeout_ms);

/* Waits for a remembered child to end by itself within timeout_ms and
 * forgets it; returns its wait status (-1 if it had to be killed: a hang)
 * and when it was seen gone, on CLOCK_MONOTONIC and CLOCK_REALTIME in ms
 * (either may be NULL). Polls every millisecond: a death time is at most
 * that late. */
int th_wait_end(pid_t pid, long timeout_ms, long long *mono, long long *real);

/* ---- programs under the shim ---------------------------------------------- */

/* The environment entries of a program run under the shim: LD_PRELOAD
 * (after the libraries of DM_TEST_PRELOAD, e.g. the ASan runtime of make
 * test-asan), then DMUTEX_CONFIG=cfg, DMUTEX_REDIS=url and DMUTEX_LOG=log,
 * each left out when NULL. The strings live in *e; env is the
 * NULL-terminated list to hand to th_child. The shim is TH_SHIM as an
 * absolute path (a child may chdir); a missing one aborts. */
#define TH_ENV_EXTRA_MAX 8
struct th_shim_env {
    char preload[4096 + 64], config[4096 + 32], redis[160], log[48];
    char *env[5 + TH_ENV_EXTRA_MAX];
};
char **th_shim_env(struct th_shim_env *e, const char *cfg, const char *url, const char *log);
/* The same, then the entries of `extra` ("K=V", NULL-terminated, at most
 * TH_ENV_EXTRA_MAX; the strings are not copied). */
char **th_shim_env_extra(struct th_shim_env *e, const char *cfg, const char *url, const char *log,
                         const char *const *extra);

/* ---- the counter program ---------------------------------------------------
 * tests/progs/counter: threads that each increment a Redis key `iters`
 * times inside a mapped mutex (held hold_us), read-modify-write, so that
 * an exact final count means the processes excluded each other. */
#define TH_COUNTER TH_BUILD "/tests/progs/counter"
#define TH_COUNTER_PROCS_MAX 16
struct th_counters {
    int procs, threads, iters;
    const char *hold_us;        /* microseconds, as its argument */
    long run_ms;                /* each must end by itself within this */
};
/* DELs `key` through c, runs how->procs counters at once on it at `server`
 * with the environment env (th_child), and fails the test unless each
 * ends with status 0 within how->run_ms saying "done <threads x iters>"
 * and, when `never` is not NULL, without `never` in its output. Returns
 * the key's final value (GET through c). */
long long th_run_counters(redisContext *c, const struct th_redis *server, const char *key,
                          char *const *env, const struct th_counters *how, const char *never);
/* ---- a test group's fixtures ---------------------------------------------
 * What every group's setup and teardown repeat. */

/* Group setup: a fatal signal (abort, crash, the alarm of a hung test, an
 * interrupt, a closed output pipe) kills every remembered child and every
 * running server, calls `on_fatal` (NULL: nothing more; only
 * async-signal-safe work, e.g. taking network "machines" down) and dies of
 * the signal, leaving nothing running behind. Arms alarm(alarm_s) so a hung
 * test ends the program instead of the CI job. Children get exactly the
 * environment a test gives them (LD_PRELOAD, DMUTEX_CONFIG, DMUTEX_REDIS
 * and DMUTEX_LOG removed) and write no core (RLIMIT_CORE 0: the cells that
 * abort on purpose). When `server` is not NULL, starts it as the group's
 * redis-server (127.0.0.1, no extra options), and when `conn` is not NULL
 * connects *conn to it (the test's own connection, for inspection). */
void th_group_start(struct th_redis *server, redisContext **conn, unsigned alarm_s,
                    void (*on_fatal)(void));

/* Group teardown: th_test_cleanup, th_redis_drop(server, conn) (NULL, or
 * not running: nothing) and disarms the alarm. */
void th_group_stop(struct th_redis *server, redisContext **conn);

/* A cmocka test named `f` that runs the scenario `run` with *state = arg:
 * one scenario function, a named test for each of its settings. */
#define TH_CASE(f, run, arg, setup, teardown) { #f, run, setup, teardown, (void *)(arg) }

/* For a group setup: the absolute path of each built file the group runs,
 * given as pairs (path relative to the repository, char[PATH_MAX] to fill)
 * ending with NULL. When one is missing, says which on stderr and returns
 * -1 (the setup fails: "make test-build first"). */
int th_built_paths(const char *path, char *abs, ...);

/* The group setup of a group that runs programs under the shim against
 * its own server: the shim's absolute path into shim_path (PATH_MAX; -1
 * when it is not built, see th_built_paths), then th_group_start(server,
 * conn, alarm_s, NULL). */
int th_shim_group_start(struct th_redis *server, redisContext **conn, unsigned alarm_s,
                        char *shim_path);

/* cmocka fixtures. th_group_setup: th_group_start(NULL, NULL,
 * TH_GROUP_ALARM_S, NULL), for groups that need nothing else.
 * th_group_teardown: th_group_stop of what the last th_group_start started
 * (its server and connection, if any), for every group whose teardown
 * needs nothing else. th_test_teardown: th_test_cleanup, as a test's
 * teardown. */
#define TH_GROUP_ALARM_S 300
int th_group_setup(void **state);
int th_group_teardown(void **state);
int th_test_teardown(void **state);

/* A config file (remembered, removed by th_test_cleanup) with `lease_ms`
 * and the entries of `mutexes = ( ... );`. */
char *th_config(long lease_ms, const char *mutexes);
/* The same with more top-level settings, `top` ("batch_ms = 0;\n"), first. */
char *th_config_top(long lease_ms, const char *top, const char *mutexes);

/* For groups that drive the cluster layer in process (no LD_PRELOAD): the
 * config's defaults, pointed at `server`, with this command timeout and
 * lease (renewal lease/3, margin lease/10). The caller then
 * dm_store_init()s it. */
struct dm_config;
void th_cluster_config(struct dm_config *cfg, const struct th_redis *server,
                       long command_timeout_ms, long lease_ms);
/* Sets cfg's lease and what the config loader derives from it (renewal
 * lease/3, margin lease/10), as a config file with only lease_ms gives. */
void th_cluster_lease(struct dm_config *cfg, long lease_ms);

/* The lock protocol in process: a lock record of `name` (fails the test
 * when there is none); and a grant to `who` within TH_GRANT_MS, failing
 * the test otherwise, returning its token. */
#define TH_GRANT_MS 5000L
struct dm_rlock *th_lock_get(const char *name);
uint64_t th_grant(struct dm_rlock *l, const char *who, struct dm_grant *g);

/* fork() inside the store's fork handlers (dm_store_atfork: the Redis
 * store's, in startup's order), for tests that link the modules without
 * startup. The child runs fn(arg) once its handlers ran and exits with
 * what it returns; the parent's handlers run, and the child's wait status
 * is returned. */
int th_fork_with_handlers(int (*fn)(void *), void *arg);

/* What most protocol tests start from: lock `name` and two owners a and b
 * (as two threads of this process are); th_hold_by_a also grants it to a
 * (th_grant). */
struct th_hold {
    struct dm_rlock *l;
    char a[DM_OWNER_MAX], b[DM_OWNER_MAX];
    struct dm_grant g;          /* a's grant (th_hold_by_a), or scratch */
    uint64_t t;                 /* its token */
};
struct th_hold th_owners(const char *name);
struct th_hold th_hold_by_a(const char *name);

/* The part of every test's teardown: kill and reap the remembered
 * children, remove the remembered files. */
void th_test_cleanup(void);

/* ---- children and files a test group makes --------------------------------
 * Remembered so that a test's teardown (or a fatal signal) leaves nothing
 * behind: no process, no temporary file. Overflowing the lists fails the
 * test. */

/* th_spawn, and remember the child. */
pid_t th_child(char *const argv[], char *const env[], const char *out_path);
/* Remember a child started some other way; forget one that has ended. */
void th_remember(pid_t pid);
void th_forget(pid_t pid);
/* SIGCONT (a stopped child must die too), SIGKILL and reap every child. */
void th_kill_children(void);
/* SIGKILL every child, nothing else: for fatal-signal handlers. */
void th_kill_children_now(void);

/* Remember `path` (malloc'ed) for th_remove_files; returns it. */
char *th_keep_file(char *path);
/* An empty file for a child's output. */
char *th_out_file(void);
/* A path that does not exist yet: a child waits for it to appear. */
char *th_go_file(void);
/* Creates `path` (the go signal). */
void th_touch(const char *path);
/* Unlinks and frees every remembered file. */
void th_remove_files(void);

/* Polls the file `out` until it holds `needle`; returns when it was seen
 * (th_now_ms), or fails the test after timeout_ms, showing the file. */
long long th_wait_for(const char *out, const char *needle, long timeout_ms);

/* Fails the test, showing `text`, unless it contains `needle`. */
void th_assert_has(const char *text, const char *needle);
/* The number right after `prefix` in text ("trylock EBUSY 3" -> 3); fails
 * the test when prefix is not there. */
long long th_field_after(const char *text, const char *prefix);

/* A number from INFO `section` ("cmdstat_evalsha:calls=" -> N), 0 if absent. */
long long th_info_num(redisContext *c, const char *section, const char *field);
/* CONFIG RESETSTAT, and the lock protocol's calls since (every acquire,
 * release and renewal is one EVALSHA or EVAL). */
void th_reset_stats(redisContext *c);
long long th_script_calls(redisContext *c);

/* Subscribers of `channel` (0 when the server does not say). */
long long th_numsub(redisContext *c, const char *channel);
/* Waits until `n` processes wait for lock `name` (default namespace): they
 * listen on its release channel (plain waiters) or on their own handover
 * channel (fair and caching waiters), as a waiter does once its first
 * attempt failed. Returns when (th_now_ms); fails the test after
 * timeout_ms. */
long long th_wait_listeners(redisContext *c, const char *name, long long n, long timeout_ms);
/* Waits until somebody is blocked in a cluster acquire of lock `name`:
 * queued in Redis (fair mode, the default) or subscribed to its release
 * channel (fair = false); fails the test after timeout_ms. */
void th_wait_blocked(redisContext *c, const char *name, long timeout_ms);

/* ---- a signal storm ----------------------------------------------------------
 * th_storm_start: from now on the calling thread gets SIGUSR1 every
 * `every_us` (from a thread of the harness), its handler installed without
 * SA_RESTART, as a program's timer or profiler may be: every blocking call
 * of that thread (connect, poll, send, recv) keeps ending in EINTR.
 * th_storm_stop ends it and returns how many signals arrived. One storm
 * at a time. */
void th_storm_start(long every_us);
long th_storm_stop(void);

/* Milliseconds on CLOCK_MONOTONIC. */
long long th_now_ms(void);
/* An absolute time `ms` from now on `clk` (for timed waits). */
/* A TCP port free on IPv4 address addr now (bound and let go; dies if
 * none can be had). */
int th_free_port(const char *addr);
struct timespec th_deadline_in(clockid_t clk, long ms);

/* Reads a whole file into a malloc'ed NUL-terminated string (NULL if none). */
char *th_read_file(const char *path);
/* th_read_file of a child's output, which must exist (fails the test). */
char *th_read_output(const char *path);

/* Key or channel `k` of lock `name` in the default namespace ("dmutex"),
 * as shim/redis/keys.c builds it: th_key("x", DM_KEY_TOKEN) is "dmutex:{x}:token".
 * The string lives in one of TH_KEY_SLOTS buffers of the calling thread,
 * reused round robin, so one call may use that many; aborts if it does not
 * fit TH_KEY_MAX. */
#define TH_KEY_SLOTS 8
#define TH_KEY_MAX   512
const char *th_key(const char *name, enum dm_key k);

#endif
