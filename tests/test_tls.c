/* test_tls: dmutex over TLS (shim/redis/net.c) against redis-servers started
 * with --tls-port only, using certificates the group makes with the
 * openssl command (tests/tls-certs.sh): mutual TLS keeps a counter exact
 * across processes (locks, notices and renewals all over TLS); every way a
 * certificate can be wrong is its own error naming the cause and the
 * address, is DM_REDIS_TLS and never "no connection", so
 * on_redis_down = "local" never locks alone because of it. The counter
 * itself is kept on a plain server (the group's). */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "harness.h"
#include "redis.h"

#define LOCKPROG        TH_BUILD "/tests/progs/lockprog"
#define FORKPROG        TH_BUILD "/tests/progs/forkprog"
#define SSLPROG         TH_BUILD "/tests/progs/sslprog"
#define FORK_THREADS    "3"
#define FORK_COUNT      "30"    /* each child makes its own TLS session */
#define FORK_RUNS       20      /* the parents' first handshakes are where a fork
                                 * could catch a lock of OpenSSL held: ~1 run in 7
                                 * without the fork handler's guard */
#define EXIT_LEASE_MS   60000L  /* a hold released at exit, not expired */
#define DMUTEX_CLI      TH_BUILD "/dmutex"
#define SUITE_ALARM_S   240
#define RUN_MS          60000L  /* a run that must end by itself */
#define CMD_TIMEOUT_MS  2000L
#define LEASE_MS        900L    /* renewals every 300 ms: a hold of 3 s renews ~10 times */
#define HOLD_MS         3000L
#define BLOCKED_MS      2500L   /* how long a process must stay without a local grant */

/* counter: processes x threads x iterations, each section holding HOLD_US */
#define CNT_PROCS       3
#define CNT_THREADS     3
#define CNT_ITERS       20
#define CNT_HOLD_US     "500"

static struct th_redis data;    /* plain: the counter's value */
static redisContext *rc;
static struct th_redis mtls;    /* TLS, client certificates required */
static struct th_redis other;   /* TLS, a certificate for other.example */
static struct th_redis expired; /* TLS, a certificate that expired in 2020 */
static char certs[128];

static const char *cert(const char *file)
{
    static char path[8][256];
    static unsigned next;
    char *p = path[next++ % 8];
    snprintf(p, sizeof path[0], "%s/%s", certs, file);
    return p;
}

static void start_tls(struct th_redis *r, const char *crt, const char *key, const char *auth)
{
    const char *extra[] = { "--tls-cert-file", cert(crt), "--tls-key-file", cert(key),
                            "--tls-ca-cert-file", cert("ca.crt"), "--tls-auth-clients", auth,
                            NULL };
    th_redis_start_tls(r, extra);
}

static int group_setup(void **state)
{
    (void)state;
    th_group_start(&data, &rc, SUITE_ALARM_S, NULL);
    snprintf(certs, sizeof certs, "/tmp/dmutex-test-tls.XXXXXX");
    if (!mkdtemp(certs))
        fail_msg("mkdtemp: %s", strerror(errno));
    char cmd[300];
    snprintf(cmd, sizeof cmd, "tests/tls-certs.sh %s", certs);
    if (system(cmd) != 0)
        fail_msg("%s failed", cmd);
    start_tls(&mtls, "server.crt", "server.key", "yes");
    start_tls(&other, "other.crt", "other.key", "no");
    start_tls(&expired, "expired.crt", "expired.key", "no");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_redis_stop(&mtls);
    th_redis_stop(&other);
    th_redis_stop(&expired);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", certs);
    if (system(cmd) != 0)
        fprintf(stderr, "test_tls: could not remove %s\n", certs);
    th_group_stop(&data, &rc);
    return 0;
}

static int cleanup(void **state)
{
    (void)state;
    th_test_cleanup();
    return 0;
}

/* ---- in process: the connection layer's errors ---------------------------- */

static struct dm_config cfg;
static char addr[80];

/* The layer pointed at TLS server `r` with these files (NULL: none),
 * an empty pool. */
static void point_at(const struct th_redis *r, const char *ca, const char *crt, const char *key,
                     const char *server_name)
{
    dm_redis_atfork(DM_FORK_CHILD);        /* forgets pooled connections, sends nothing */
    dm_config_free(&cfg);
    dm_config_defaults(&cfg);
    cfg.redis.host = strdup(r->addr);
    cfg.redis.port = r->port;
    cfg.redis.connect_timeout_ms = CMD_TIMEOUT_MS;
    cfg.redis.command_timeout_ms = CMD_TIMEOUT_MS;
    cfg.redis.tls.enabled = 1;
    cfg.redis.tls.ca = ca ? strdup(ca) : NULL;
    cfg.redis.tls.cert = crt ? strdup(crt) : NULL;
    cfg.redis.tls.key = key ? strdup(key) : NULL;
    cfg.redis.tls.server_name = server_name ? strdup(server_name) : NULL;
    dm_redis_setup(&cfg.redis);
    snprintf(addr, sizeof addr, "%s:%d", r->addr, r->port);
}

static void assert_has(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("\"%s\" does not say \"%s\"", text, needle);
}

/* Connects and insists on a TLS error whose message has `cause` and the
 * address. */
static void expect_tls_error(const char *cause)
{
    struct dm_conn conn;
    int rc1 = dm_redis_connect(&conn);
    if (rc1 == 0)
        fail_msg("connected to %s, expected \"%s\"", addr, cause);
    if (conn.err != DM_REDIS_TLS)
        fail_msg("error kind %d (want DM_REDIS_TLS %d): %s", conn.err, DM_REDIS_TLS, conn.errstr);
    assert_null(conn.c);
    assert_has(conn.errstr, cause);
    assert_has(conn.errstr, addr);
}

/* The right CA, name and client certificate: a working connection, and a
 * command over it. */
static void test_mutual_tls_connects_and_runs_commands(void **state)
{
    (void)state;
    point_at(&mtls, cert("ca.crt"), cert("client.crt"), cert("client.key"), NULL);
    struct dm_conn *conn = dm_redis_get();
    if (!conn->c)
        fail_msg("%s", conn->errstr);
    redisReply *r = dm_redis_command(conn, "SET %s %s", "tls:probe", "v");
    assert_non_null(r);
    freeReplyObject(r);
    r = dm_redis_command(conn, "GET %s", "tls:probe");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, "v");
    freeReplyObject(r);
    dm_redis_put(conn);
}

/* A pooled TLS connection whose server was restarted: the next command
 * on it fails as a lost reply (DM_REDIS_IO), the connection is dropped,
 * and the one after that is a new session that works. */
static void test_restarted_server_is_a_lost_reply_then_a_new_session(void **state)
{
    (void)state;
    point_at(&mtls, cert("ca.crt"), cert("client.crt"), cert("client.key"), NULL);
    struct dm_conn *conn = dm_redis_get();
    if (!conn->c)
        fail_msg("%s", conn->errstr);
    dm_redis_put(conn);
    th_redis_kill(&mtls);
    const char *extra[] = { "--tls-cert-file", cert("server.crt"), "--tls-key-file",
                            cert("server.key"), "--tls-ca-cert-file", cert("ca.crt"),
                            "--tls-auth-clients", "yes", NULL };
    th_redis_restart(&mtls, extra);
    conn = dm_redis_get();
    assert_non_null(conn->c);           /* the pooled one, its server gone */
    redisReply *r = dm_redis_command(conn, "PING");
    assert_null(r);
    assert_int_equal(conn->err, DM_REDIS_IO);   /* on the connection: not pooled again */
    dm_redis_put(conn);
    conn = dm_redis_get();
    if (!conn->c)
        fail_msg("after the restart: %s", conn->errstr);
    r = dm_redis_command(conn, "PING");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    dm_redis_put(conn);
}

static void test_wrong_ca_says_the_certificate_is_not_trusted(void **state)
{
    (void)state;
    point_at(&mtls, cert("ca2.crt"), cert("client.crt"), cert("client.key"), NULL);
    expect_tls_error("the server's certificate is not signed by a trusted CA");
    expect_tls_error("ca2.crt");
}

static void test_wrong_name_says_the_certificate_is_for_another_name(void **state)
{
    (void)state;
    point_at(&other, cert("ca.crt"), NULL, NULL, NULL);
    expect_tls_error("the server's certificate is not for the name");
    expect_tls_error("checked \"127.0.0.1\"");
    /* server_name says which name the certificate must be for. */
    point_at(&other, cert("ca.crt"), NULL, NULL, "other.example");
    struct dm_conn conn;
    if (dm_redis_connect(&conn) != 0)
        fail_msg("with server_name = other.example: %s", conn.errstr);
    dm_redis_close(&conn);
    point_at(&mtls, cert("ca.crt"), cert("client.crt"), cert("client.key"), "other.example");
    expect_tls_error("checked \"other.example\"");
}

static void test_expired_certificate_says_expired(void **state)
{
    (void)state;
    point_at(&expired, cert("ca.crt"), NULL, NULL, NULL);
    expect_tls_error("the server's certificate has expired");
}

static void test_client_certificate_refused_says_so(void **state)
{
    (void)state;
    point_at(&mtls, cert("ca.crt"), NULL, NULL, NULL);
    expect_tls_error("client certificate");
    expect_tls_error("none given");
    point_at(&mtls, cert("ca.crt"), cert("client2.crt"), cert("client2.key"), NULL);
    expect_tls_error("client certificate");
    expect_tls_error("client2.crt");
}

/* A plain-TCP server where TLS is configured: an error, never a silent
 * plain-text connection. */
static void test_plain_server_is_not_taken_for_a_tls_one(void **state)
{
    (void)state;
    point_at(&data, cert("ca.crt"), NULL, NULL, NULL);
    cfg.redis.connect_timeout_ms = 500;     /* it waits in silence until then */
    expect_tls_error("TLS port");
}

static void test_unreadable_certificate_file_is_named(void **state)
{
    (void)state;
    point_at(&mtls, cert("ca.crt"), cert("nonexistent.crt"), cert("client.key"), NULL);
    expect_tls_error("nonexistent.crt");
}

/* ---- processes under the shim --------------------------------------------- */

/* A config for TLS server `r` with the given tls group body. */
static char *tls_config(const struct th_redis *r, const char *tls, const char *more)
{
    return th_keep_file(th_write_file(".cfg",
        "redis = { host = \"%s\"; port = %d; command_timeout_ms = %ld;\n"
        "          tls = { %s }; };\n"
        "lease_ms = %ld;\n%s\n"
        "mutexes = ( { symbol = \"counter_lock\"; name = \"tls_counter\"; required = false; },\n"
        "            { symbol = \"held_lock\"; name = \"tls_held\"; required = false; } );\n",
        r->addr, r->port, CMD_TIMEOUT_MS, tls, LEASE_MS, more ? more : ""));
}

static const char *mutual(void)
{
    static char body[1024];
    snprintf(body, sizeof body, "ca = \"%s\"; cert = \"%s\"; key = \"%s\";", cert("ca.crt"),
             cert("client.crt"), cert("client.key"));
    return body;
}

/* CNT_PROCS counter processes at once under the shim with `cfg`; returns
 * the final count. */
static long long run_counters(const char *cfgfile, const char *key, char *const *more_env)
{
    static const struct th_counters counters = { CNT_PROCS, CNT_THREADS, CNT_ITERS, CNT_HOLD_US,
                                                 RUN_MS };
    struct th_shim_env e;
    char **env = th_shim_env_extra(&e, cfgfile, NULL, NULL, (const char *const *)more_env);
    return th_run_counters(rc, &data, key, env, &counters, NULL);
}

/* The lock's fencing counter on the TLS server: grants made there. */
static long long tls_token(const char *name)
{
    point_at(&mtls, cert("ca.crt"), cert("client.crt"), cert("client.key"), NULL);
    struct dm_conn *conn = dm_redis_get();
    if (!conn->c)
        fail_msg("%s", conn->errstr);
    redisReply *r = dm_redis_command(conn, "GET %s", th_key(name, DM_KEY_TOKEN));
    assert_non_null(r);
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    dm_redis_put(conn);
    return v;
}

static void test_counter_is_exact_over_mutual_tls(void **state)
{
    (void)state;
    long long before = tls_token("tls_counter");
    char *cfgfile = tls_config(&mtls, mutual(), NULL);
    long long n = run_counters(cfgfile, "tls:count", NULL);
    assert_int_equal(n, CNT_PROCS * CNT_THREADS * CNT_ITERS);
    /* The grants were made by the TLS server: its fencing counter moved. */
    assert_true(tls_token("tls_counter") > before);
}

/* DMUTEX_REDIS=rediss://... with the files from DMUTEX_TLS_*, over a
 * config without a tls group. */
static void test_counter_is_exact_with_a_rediss_url_and_the_environment(void **state)
{
    (void)state;
    char *cfgfile = th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\nmutexes = ( { symbol = \"counter_lock\"; name = \"tls_counter2\"; } );\n",
        LEASE_MS));
    static char url[128], ca[300], crt[300], key[300];
    snprintf(url, sizeof url, "DMUTEX_REDIS=%s", mtls.url);
    snprintf(ca, sizeof ca, "DMUTEX_TLS_CA=%s", cert("ca.crt"));
    snprintf(crt, sizeof crt, "DMUTEX_TLS_CERT=%s", cert("client.crt"));
    snprintf(key, sizeof key, "DMUTEX_TLS_KEY=%s", cert("client.key"));
    char *more[] = { url, ca, crt, key, NULL };
    long long n = run_counters(cfgfile, "tls:count2", more);
    assert_int_equal(n, CNT_PROCS * CNT_THREADS * CNT_ITERS);

    /* dmutex ls reads the same URL and files. */
    char *out = th_out_file();
    char *argv[] = { DMUTEX_CLI, "ls", "-r", mtls.url, NULL };
    char *env[] = { ca, crt, key, NULL };
    char *text = th_finish(th_child(argv, env, out), out, 0, RUN_MS);
    th_assert_has(text, "tls_counter2");
    free(text);
}

/* dmutex run -r rediss://... passes the URL on (the files from
 * DMUTEX_TLS_*): the program locks over TLS. */
static void test_dmutex_run_takes_a_rediss_url(void **state)
{
    (void)state;
    char *cfgfile = th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\nmutexes = ( { symbol = \"held_lock\"; name = \"tls_run\"; } );\n",
        LEASE_MS));
    static char ca[300], crt[300], key[300];
    snprintf(ca, sizeof ca, "DMUTEX_TLS_CA=%s", cert("ca.crt"));
    snprintf(crt, sizeof crt, "DMUTEX_TLS_CERT=%s", cert("client.crt"));
    snprintf(key, sizeof key, "DMUTEX_TLS_KEY=%s", cert("client.key"));
    char *env[] = { ca, crt, key, NULL };
    long long before = tls_token("tls_run");
    char *out = th_out_file();
    char *argv[] = { DMUTEX_CLI, "run", "-c", cfgfile, "-r", mtls.url, "--", LOCKPROG, "lock", NULL };
    char *text = th_finish(th_child(argv, env, out), out, 0, RUN_MS);
    th_assert_has(text, "locked 0");
    free(text);
    assert_true(tls_token("tls_run") > before);
}

/* A hold longer than three leases survives on renewals sent over TLS
 * (on_lease_lost = "abort": a failed renewal would kill the holder). */
static void test_renewals_keep_a_long_hold_over_tls(void **state)
{
    (void)state;
    char *cfgfile = tls_config(&mtls, mutual(), NULL);
    char *go = th_go_file();
    char *out = th_out_file();
    char *argv[] = { LOCKPROG, "hold", go, NULL };
    struct th_shim_env e;
    pid_t pid = th_child(argv, th_shim_env(&e, cfgfile, NULL, NULL), out);
    th_wait_for(out, "locked 0", RUN_MS);
    usleep(HOLD_MS * 1000);
    th_touch(go);
    char *text = th_finish(pid, out, 0, RUN_MS);
    th_assert_has(text, "unlocked 0");
    free(text);
}

/* The key `k` of lock `name` on the TLS server (NULL: no such key). */
static char *tls_get(const char *name, enum dm_key k)
{
    point_at(&mtls, cert("ca.crt"), cert("client.crt"), cert("client.key"), NULL);
    struct dm_conn *conn = dm_redis_get();
    if (!conn->c)
        fail_msg("%s", conn->errstr);
    redisReply *r = dm_redis_command(conn, "GET %s", th_key(name, k));
    assert_non_null(r);
    char *v = r->type == REDIS_REPLY_STRING ? strdup(r->str) : NULL;
    freeReplyObject(r);
    dm_redis_put(conn);
    return v;
}

/* Runs prog [arg] go under the shim, held_lock mapped as `name` over
 * mutual TLS: it locks, and returns from main holding the lock once told
 * to. Fails the test unless it ends by itself and the shim released the
 * hold at exit; returns its output. */
static char *exit_holding(const char *prog, const char *arg, const char *name)
{
    char *cfgfile = th_keep_file(th_write_file(".cfg",
        "redis = { host = \"%s\"; port = %d; tls = { %s }; };\nlease_ms = %ld;\n"
        "mutexes = ( { symbol = \"held_lock\"; name = \"%s\"; } );\n",
        mtls.addr, mtls.port, mutual(), EXIT_LEASE_MS, name));
    char *go = th_go_file();
    char *out = th_out_file();
    char *argv[] = { (char *)prog, (char *)(arg ? arg : go), arg ? go : NULL, NULL };
    struct th_shim_env e;
    pid_t pid = th_child(argv, th_shim_env(&e, cfgfile, NULL, NULL), out);
    th_wait_for(out, "locked 0", RUN_MS);
    th_touch(go);
    char *text = th_finish(pid, out, 0, RUN_MS);
    char *holder = tls_get(name, DM_KEY_HOLDER);
    if (!holder || holder[0] != '=')
        fail_msg("the hold was not released at exit: holder \"%s\"", holder ? holder : "(none)");
    free(holder);
    return text;
}

/* A process that returns from main holding a lock releases it from the
 * shim's destructor, over TLS: OpenSSL is still usable then (the shim
 * initialises it without an atexit cleanup). */
static void test_exit_releases_a_hold_over_tls(void **state)
{
    (void)state;
    free(exit_holding(LOCKPROG, "hold-exit", "tls_exit"));
}

/* A program that initialises the same OpenSSL itself, the default way
 * (which registers OpenSSL's cleanup at exit), has an error of its own on
 * its thread's OpenSSL error queue when it locks (the lock's connection
 * and handshake run on that thread: the error must still be there after),
 * and exits holding a lock:
 * the shim's destructor still releases it over TLS (the shim initialised
 * OpenSSL first, at start, without that cleanup). */
static void test_exit_release_survives_the_programs_own_openssl(void **state)
{
    (void)state;
    char *text = exit_holding(SSLPROG, NULL, "tls_sslprog");
    th_assert_has(text, "own error queue kept");   /* the lock's handshake left it alone */
    th_assert_has(text, "own SSL_CTX made");
    free(text);
}

/* Fork children of a process whose threads lock over TLS make their own
 * sessions and never use (or shut down) the parent's: every child locks
 * and exits, none hangs on a lock of OpenSSL that a parent thread held at
 * the fork. */
static void test_fork_children_lock_over_their_own_tls_sessions(void **state)
{
    (void)state;
    char *cfgfile = th_keep_file(th_write_file(".cfg",
        "redis = { host = \"%s\"; port = %d; tls = { %s }; };\nlease_ms = %ld;\n"
        "mutexes = ( { symbol = \"fork_lock\"; name = \"tls_fork\"; },\n"
        "            { init_site = \"heap_mutex_new\"; name = \"tls_heap\"; } );\n",
        mtls.addr, mtls.port, mutual(), EXIT_LEASE_MS));
    char *argv[] = { FORKPROG, FORK_THREADS, FORK_COUNT, NULL };
    struct th_shim_env e;
    for (int i = 0; i < FORK_RUNS; i++) {
        char *out = th_out_file();
        char *text = th_finish(th_child(argv, th_shim_env(&e, cfgfile, NULL, NULL), out), out, 0,
                               RUN_MS);
        th_assert_has(text, "forks " FORK_COUNT " ok");
        free(text);
    }
}

/* on_redis_down = "local" locks alone only when no connection can be
 * made: a certificate that does not verify is not that. The process keeps
 * retrying (and says why) instead of entering without exclusion. */
static void test_bad_certificate_never_locks_locally(void **state)
{
    (void)state;
    static char body[512];
    snprintf(body, sizeof body, "ca = \"%s\";", cert("ca2.crt"));
    char *cfgfile = tls_config(&other, body, "on_redis_down = \"local\";");
    char *out = th_out_file();
    char *argv[] = { LOCKPROG, "lock", NULL };
    struct th_shim_env e;
    pid_t pid = th_child(argv, th_shim_env(&e, cfgfile, NULL, "warn"), out);
    long long waited = th_wait_for(out, "not signed by a trusted CA", RUN_MS);
    assert_true(waited >= 0);
    usleep(BLOCKED_MS * 1000);
    char *text = th_read_output(out);
    if (strstr(text, "locked "))
        fail_msg("locked with a certificate that does not verify:\n%s", text);
    th_assert_has(text, "ca2.crt");
    free(text);
    kill(pid, SIGKILL);
}

#define T(f) cmocka_unit_test_teardown(f, cleanup)

/* ---- Sentinel over TLS ------------------------------------------------------
 * A primary, two replicas and three sentinels, every one on a TLS port only
 * (port 0; the replicas and the sentinels reach the data nodes with
 * tls-replication yes): the shim asks the sentinels, hears +switch-master
 * and reaches the data nodes over TLS with the one redis.tls group. */

#define MASTER          "mymaster"
#define SEN_DOWN_MS     1000L   /* down-after-milliseconds: a failover takes seconds */
#define SEN_FAILOVER_MS 3000L
#define SEN_READY_MS    30000L  /* replicas synced, sentinels seeing their quorum */
#define SEN_PROCS       3
#define SEN_THREADS     "2"
#define SEN_ITERS       "100"
#define SEN_HOLD_US     "5000"
#define SEN_KILL_AT     30      /* sections counted before the primary is killed */
#define SEN_RUN_MS      150000L

struct tls_topo {
    struct th_redis primary, replica[2], sentinel[3];
};
static struct tls_topo st;

/* redis-cli over TLS to r (the client certificate, the group's CA):
 * its --raw output, in a static buffer ("" when it failed). */
static const char *tls_cli(const struct th_redis *r, const char *args)
{
    static char out[8192];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "redis-cli --tls --cacert '%s' --cert '%s' --key '%s' -h %s -p %d "
             "--raw %s 2>&1", cert("ca.crt"), cert("client.crt"), cert("client.key"), r->addr,
             r->port, args);
    out[0] = 0;
    FILE *f = popen(cmd, "r");
    if (!f)
        return out;
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    pclose(f);
    return out;
}

/* The server options of a TLS data node; `replicaof` its primary or NULL. */
static void start_tls_node(struct th_redis *r, const struct th_redis *replicaof)
{
    char port[16];
    snprintf(port, sizeof port, "%d", replicaof ? replicaof->port : 0);
    const char *extra[] = { "--tls-cert-file", cert("server.crt"), "--tls-key-file",
                            cert("server.key"), "--tls-ca-cert-file", cert("ca.crt"),
                            "--tls-auth-clients", "no", "--tls-replication", "yes",
                            "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
                            replicaof ? "--replicaof" : NULL, replicaof ? replicaof->addr : NULL,
                            port, NULL };
    th_redis_start_tls(r, extra);
}

/* A TLS-only sentinel monitoring `m`, its certificate `crt`/`key`. */
static void start_tls_sentinel(struct th_redis *r, const struct th_redis *m, const char *crt,
                               const char *key)
{
    static char lines[4][300];
    snprintf(lines[0], sizeof lines[0], "tls-cert-file %s", cert(crt));
    snprintf(lines[1], sizeof lines[1], "tls-key-file %s", cert(key));
    snprintf(lines[2], sizeof lines[2], "tls-ca-cert-file %s", cert("ca.crt"));
    snprintf(lines[3], sizeof lines[3], "tls-auth-clients no");
    const char *tls[] = { lines[0], lines[1], lines[2], lines[3], "tls-replication yes", NULL };
    th_sentinel_start_tls(r, MASTER, m->addr, m->port, 2, SEN_DOWN_MS, SEN_FAILOVER_MS, tls);
}

static void tls_topo_start(void)
{
    memset(&st, 0, sizeof st);
    start_tls_node(&st.primary, NULL);
    for (int i = 0; i < 2; i++)
        start_tls_node(&st.replica[i], &st.primary);
    long long end = th_now_ms() + SEN_READY_MS;
    while (!strstr(tls_cli(&st.primary, "INFO replication"), "connected_slaves:2")) {
        if (th_now_ms() > end)
            fail_msg("the TLS replicas did not attach: %s", tls_cli(&st.primary, "INFO replication"));
        usleep(100000);
    }
    for (int i = 0; i < 3; i++)
        start_tls_sentinel(&st.sentinel[i], &st.primary, "server.crt", "server.key");
    for (int i = 0; i < 3; i++) {
        for (;;) {
            char q[200];
            snprintf(q, sizeof q, "%s", tls_cli(&st.sentinel[i], "SENTINEL CKQUORUM " MASTER));
            const char *m = tls_cli(&st.sentinel[i], "SENTINEL master " MASTER);
            const char *ns = strstr(m, "num-slaves\n");
            if (strncmp(q, "OK", 2) == 0 && ns && atoi(ns + strlen("num-slaves\n")) >= 2)
                break;
            if (th_now_ms() > end)
                fail_msg("TLS sentinel %d not ready: %s", i, q);
            usleep(100000);
        }
    }
}

static void tls_topo_stop(void)
{
    for (int i = 0; i < 3; i++)
        th_redis_stop(&st.sentinel[i]);
    for (int i = 0; i < 2; i++)
        th_redis_stop(&st.replica[i]);
    th_redis_stop(&st.primary);
}

static int tls_topo_teardown(void **state)
{
    cleanup(state);
    tls_topo_stop();
    return 0;
}

/* The sentinels, the replication and the data nodes all on TLS ports only:
 * SEN_PROCS counter processes keep the count exact while the primary is
 * SIGKILLed mid-run, and follow the failover (min_replicas = 1). Before:
 * the sentinels were asked in plain text, which a TLS port never answers:
 * no lock. Then dmutex run -r rediss-sentinel://... (the files from
 * DMUTEX_TLS_*, over a config without a tls group) locks on the new
 * primary. */
static void test_sentinels_replication_and_nodes_all_on_tls_survive_a_failover(void **state)
{
    (void)state;
    tls_topo_start();
    char list[512];
    size_t o = 0;
    for (int i = 0; i < 3; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s\"%s\"", i ? ", " : "",
                              st.sentinel[i].url);
    char *cfgfile = th_keep_file(th_write_file(".cfg",
        "lease_ms = 3000; min_replicas = 1; replica_timeout_ms = 1000;\n"
        "redis = { sentinels = ( %s ); master = \"%s\";\n"
        "          connect_timeout_ms = 1000; command_timeout_ms = 1000;\n"
        "          tls = { %s }; };\n"
        "mutexes = ( { symbol = \"counter_lock\"; name = \"tls_sen\"; } );\n",
        list, MASTER, mutual()));
    const char *key = "tls:sen";
    freeReplyObject(th_cmd(rc, "DEL %s", key));
    struct th_shim_env e;
    char **env = th_shim_env(&e, cfgfile, NULL, NULL);
    char port[16];
    snprintf(port, sizeof port, "%d", data.port);
    char *argv[] = { TH_COUNTER, data.addr, port, (char *)key, SEN_THREADS, SEN_ITERS,
                     SEN_HOLD_US, NULL };
    pid_t pid[SEN_PROCS];
    char *out[SEN_PROCS];
    for (int i = 0; i < SEN_PROCS; i++) {
        out[i] = th_out_file();
        pid[i] = th_child(argv, env, out[i]);
    }
    long long end = th_now_ms() + SEN_RUN_MS, n;
    for (;;) {
        redisReply *r = th_cmd(rc, "GET %s", key);
        n = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        freeReplyObject(r);
        if (n >= SEN_KILL_AT)
            break;
        if (th_now_ms() > end) {
            char *text = th_read_output(out[0]);
            fail_msg("only %lld sections over the TLS sentinels' primary:\n%s", n, text);
        }
        usleep(20000);
    }
    char was[80];
    snprintf(was, sizeof was, "%d", st.primary.port);
    th_redis_kill(&st.primary);
    const int total = SEN_PROCS * atoi(SEN_THREADS) * atoi(SEN_ITERS);
    char done[32];
    snprintf(done, sizeof done, "done %d", atoi(SEN_THREADS) * atoi(SEN_ITERS));
    if (n >= total)
        fail_msg("the run was over (%lld sections) before the primary was killed", n);
    for (int i = 0; i < SEN_PROCS; i++) {
        char *text = th_finish(pid[i], out[i], 0, SEN_RUN_MS);
        th_assert_has(text, done);
        free(text);
    }
    /* The sections after the kill were granted by the new primary. */
    assert_int_equal(th_cmd_int(rc, "GET %s", key), total);
    const char *now = tls_cli(&st.sentinel[0], "SENTINEL get-master-addr-by-name " MASTER);
    if (strstr(now, was))
        fail_msg("the sentinels still name the killed primary: %s", now);

    /* dmutex run -r rediss-sentinel://... */
    char *plaincfg = th_keep_file(th_write_file(".cfg",
        "lease_ms = 3000;\nmutexes = ( { symbol = \"held_lock\"; name = \"tls_sen_run\"; } );\n"));
    char url[600];
    snprintf(url, sizeof url, "rediss-sentinel://%s,%s,%s/%s", st.sentinel[0].url,
             st.sentinel[1].url, st.sentinel[2].url, MASTER);
    static char ca[300], crt[300], ck[300];
    snprintf(ca, sizeof ca, "DMUTEX_TLS_CA=%s", cert("ca.crt"));
    snprintf(crt, sizeof crt, "DMUTEX_TLS_CERT=%s", cert("client.crt"));
    snprintf(ck, sizeof ck, "DMUTEX_TLS_KEY=%s", cert("client.key"));
    char *renv[] = { ca, crt, ck, NULL };
    char *rout = th_out_file();
    char *rargv[] = { DMUTEX_CLI, "run", "-c", plaincfg, "-r", url, "--", LOCKPROG, "lock", NULL };
    char *text = th_finish(th_child(rargv, renv, rout), rout, 0, RUN_MS);
    th_assert_has(text, "locked 0");
    free(text);
}

/* A sentinel whose certificate the client does not trust (a CA it does not
 * know): a TLS error naming the cause and the sentinel's address, kind
 * DM_REDIS_TLS (never "no connection": on_redis_down = "local" does not
 * lock alone because of it), and never a question in plain text. */
static void test_untrusted_sentinel_is_a_tls_error_naming_it(void **state)
{
    (void)state;
    memset(&st, 0, sizeof st);
    start_tls_sentinel(&st.sentinel[0], &mtls, "server.crt", "server.key");
    static struct dm_endpoint one;
    dm_redis_atfork(DM_FORK_CHILD);
    dm_config_free(&cfg);
    dm_config_defaults(&cfg);
    cfg.redis.connect_timeout_ms = CMD_TIMEOUT_MS;
    cfg.redis.command_timeout_ms = CMD_TIMEOUT_MS;
    cfg.redis.tls.enabled = 1;
    cfg.redis.tls.ca = strdup(cert("ca2.crt"));
    one.host = strdup(st.sentinel[0].addr);    /* the +switch-master thread's from now on */
    one.port = st.sentinel[0].port;
    cfg.redis.sentinels = &one;
    cfg.redis.nsentinels = 1;
    cfg.redis.master = (char *)MASTER;
    dm_redis_setup(&cfg.redis);
    struct dm_conn conn;
    assert_int_equal(dm_redis_connect(&conn), -1);
    if (conn.err != DM_REDIS_TLS)
        fail_msg("error kind %d (want DM_REDIS_TLS %d): %s", conn.err, DM_REDIS_TLS, conn.errstr);
    char where[80];
    snprintf(where, sizeof where, "sentinel %s:%d", one.host, one.port);
    assert_has(conn.errstr, where);
    assert_has(conn.errstr, "not signed by a trusted CA");
    assert_has(conn.errstr, "ca2.crt");
    /* The +switch-master thread started here reads cfg.redis for the rest
     * of the program: this test runs last, and leaves cfg alone. */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_mutual_tls_connects_and_runs_commands),
        T(test_restarted_server_is_a_lost_reply_then_a_new_session),
        T(test_wrong_ca_says_the_certificate_is_not_trusted),
        T(test_wrong_name_says_the_certificate_is_for_another_name),
        T(test_expired_certificate_says_expired),
        T(test_client_certificate_refused_says_so),
        T(test_plain_server_is_not_taken_for_a_tls_one),
        T(test_unreadable_certificate_file_is_named),
        T(test_counter_is_exact_over_mutual_tls),
        T(test_counter_is_exact_with_a_rediss_url_and_the_environment),
        T(test_dmutex_run_takes_a_rediss_url),
        T(test_renewals_keep_a_long_hold_over_tls),
        T(test_bad_certificate_never_locks_locally),
        T(test_exit_releases_a_hold_over_tls),
        T(test_exit_release_survives_the_programs_own_openssl),
        T(test_fork_children_lock_over_their_own_tls_sessions),
        cmocka_unit_test_teardown(test_sentinels_replication_and_nodes_all_on_tls_survive_a_failover,
                                  tls_topo_teardown),
        /* last: its +switch-master thread keeps the in-process config */
        cmocka_unit_test_teardown(test_untrusted_sentinel_is_a_tls_error_naming_it,
                                  tls_topo_teardown),
    };
    const char *only = getenv("DM_TLS_FILTER");     /* a cmocka glob on the names */
    if (only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
