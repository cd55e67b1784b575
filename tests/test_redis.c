/* test_redis: the Redis layer (shim/redis/redis.h) on its own, and the
 * watchdog's renewal rounds over it. Every call returns its reply or NULL
 * and leaves the cause on the connection, as hiredis does: no server ->
 * DM_REDIS_NOCONN naming the address; an error reply -> DM_REDIS_REPLY_ERROR
 * with the server's words; a script the server forgot -> EVAL, invisible to
 * the caller (or DM_REDIS_NOSCRIPT in a pipeline, which cannot retry); a
 * server that stops answering -> DM_REDIS_IO once the command timeout has
 * passed. The watchdog renews every hold of a round and declares lost the
 * one the server no longer has. Runs its own redis-server (harness). */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <hiredis/sds.h>

#include "lock.h"
#include "config.h"
#include "harness.h"
#include "net.h"
#include "redis.h"
#include "util.h"
#include "watchdog.h"

#define CMD_TIMEOUT_MS  300L    /* the layer's command timeout in this group */
#define LEASE_MS        1500L
#define SLACK_MS        3000L   /* how late an event may be on a loaded machine */
#define NHOLDS          3
#define SUITE_ALARM_S   180
#define FSERVER         TH_BUILD "/tests/progs/faultserver"
#define STORM_US        200     /* a signal to the storm's thread this often */
#define SLOW_ACCEPT_MS  1500L   /* the proxy's accept queue stays full this long */
#define LONG_CONNECT_MS 20000L  /* connect timeout of the slow-accept tests */
#define TRICKLE_MS      20L     /* the trickling server: one byte this often */

static struct th_redis rs;
static redisContext *rc;
static struct dm_config cfg;
static char addr[80];

/* Points the layer at port `port` of the test's server address, with an
 * empty pool. */
static void point_at(int port)
{
    dm_redis_atfork(DM_FORK_CHILD);        /* forgets pooled connections, sends nothing */
    cfg.redis.port = port;
    dm_redis_setup(&cfg.redis);
    snprintf(addr, sizeof addr, "%s:%d", rs.addr, port);
}

/* A loopback port nothing listens on (bound, then closed). */
static int dead_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t len = sizeof sa;
    assert_true(s >= 0);
    assert_int_equal(inet_pton(AF_INET, rs.addr, &sa.sin_addr), 1);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &len), 0);
    close(s);
    return ntohs(sa.sin_port);
}

/* Starts faultserver with these arguments after the mode and PORTFILE;
 * returns its port, its output file in *out. */
static int fault_server(char **out, const char *mode, ...)
{
    char *portfile = th_keep_file(th_write_file(".port", "%s", ""));
    unlink(portfile);
    char *argv[12] = { FSERVER, (char *)mode, portfile };
    int n = 3;
    va_list ap;
    va_start(ap, mode);
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < 11)
        argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    *out = th_out_file();
    th_child(argv, NULL, *out);
    th_wait_for(portfile, "\n", SLACK_MS);
    char *pt = th_read_file(portfile);
    int port = atoi(pt);
    free(pt);
    return port;
}

static void assert_has(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("\"%s\" does not say \"%s\"", text, needle);
}

static int group_setup(void **state)
{
    (void)state;
    th_group_start(&rs, &rc, SUITE_ALARM_S, NULL);
    th_cluster_config(&cfg, &rs, CMD_TIMEOUT_MS, LEASE_MS);
    cfg.on_lease_lost = DM_LOST_WARN;
    dm_store_init(&cfg, &dm_redis_store);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    cfg.redis.password = NULL;
    point_at(rs.port);
    freeReplyObject(th_cmd(rc, "FLUSHALL"));
    /* FLUSHALL took the harness's declaration too: without it every lock
     * new to this young server would wait out a lease (acquire.lua). */
    th_redis_declare_fresh(&rs, DM_NAMESPACE_DEFAULT);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kill(rs.pid, SIGCONT);          /* a failed stop test must not leave it stopped */
    th_test_cleanup();
    return 0;
}

static void test_connect_without_a_server_is_noconn_naming_the_address(void **state)
{
    (void)state;
    point_at(dead_port());
    struct dm_conn conn;
    assert_int_equal(dm_redis_connect(&conn), -1);
    assert_null(conn.c);
    assert_int_equal(conn.err, DM_REDIS_NOCONN);
    assert_has(conn.errstr, addr);

    /* The pool says the same, and a script call on it sends nothing. */
    struct dm_conn *p = dm_redis_get();
    assert_non_null(p);
    assert_null(p->c);
    assert_int_equal(p->err, DM_REDIS_NOCONN);
    assert_has(p->errstr, addr);
    const char *args[] = { "k", "o", "1000" };
    assert_null(dm_redis_script(p, DM_SCRIPT_RENEW, 1, 3, args));
    assert_int_equal(p->err, DM_REDIS_NOCONN);
    dm_redis_put(p);
}

/* The server answered: an error, not "no connection could be made", which
 * alone lets on_redis_down = "local" lock a process by itself. */
static void test_auth_refused_is_a_reply_error_with_the_servers_words(void **state)
{
    (void)state;
    cfg.redis.password = "not-the-password";    /* the server has none */
    point_at(rs.port);
    struct dm_conn conn;
    assert_int_equal(dm_redis_connect(&conn), -1);
    assert_null(conn.c);
    assert_int_equal(conn.err, DM_REDIS_REPLY_ERROR);
    assert_has(conn.errstr, addr);
    assert_has(conn.errstr, "AUTH: ");
    /* Past "AUTH: " come the server's own words, not ours. */
    assert_true(strlen(strstr(conn.errstr, "AUTH: ")) > strlen("AUTH: "));
}

static void test_error_reply_is_reply_error_with_the_servers_words(void **state)
{
    (void)state;
    freeReplyObject(th_cmd(rc, "SET rt:string x"));
    struct dm_conn *p = dm_redis_get();
    assert_non_null(p->c);
    const char *args[] = { "rt:string", "someone", "1000" };
    assert_null(dm_redis_script(p, DM_SCRIPT_RENEW, 1, 3, args));
    assert_int_equal(p->err, DM_REDIS_REPLY_ERROR);
    assert_has(p->errstr, "WRONGTYPE");
    assert_has(p->errstr, addr);
    assert_has(p->errstr, "renew.lua");
    /* An error reply leaves the connection usable, and the next call's
     * success clears the error. */
    const char *ok_args[] = { "rt:absent", "someone", "1000" };
    redisReply *r = dm_redis_script(p, DM_SCRIPT_RENEW, 1, 3, ok_args);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    assert_int_equal(p->err, DM_REDIS_OK);
    assert_string_equal(p->errstr, "");
    dm_redis_put(p);
}

/* release.lua on a lock name whose key is not a lock (the user's own
 * key, of any type): refused with the key and its type named, and the key
 * is left as it was. */
static void test_a_release_refuses_a_lock_key_of_another_type(void **state)
{
    (void)state;
    const char *types[][2] = { { "SET", "a string" }, { "RPUSH", "a list" }, { "SADD", "a set" } };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        freeReplyObject(th_cmd(rc, "DEL rt:{t}"));
        freeReplyObject(th_cmd(rc, "%s rt:{t} x", types[i][0]));
        struct dm_conn *p = dm_redis_get();
        assert_non_null(p->c);
        const char *args[] = { "rt:{t}", "rt:{t}:holder", "rt:{t}:token", "rt:{t}:queue",
                               "rt:{t}:qtime", "rt:{t}:lost",
                               "me:1", "7", "rt:{t}:released", "1000", "rt:{t}:wait:", "500" };
        assert_null(dm_redis_script(p, DM_SCRIPT_RELEASE, 6, 12, args));
        assert_int_equal(p->err, DM_REDIS_REPLY_ERROR);
        char want[64];
        snprintf(want, sizeof want, "WRONGTYPE rt:{t} holds %s, not a dmutex lock", types[i][1]);
        assert_has(p->errstr, want);
        dm_redis_put(p);
        assert_int_equal(th_cmd_int(rc, "EXISTS rt:{t}"), 1);
    }
    redisReply *r = th_cmd(rc, "TYPE rt:{t}");
    assert_string_equal(r->str, "set");
    freeReplyObject(r);
}

static void test_flushed_script_falls_back_to_eval(void **state)
{
    (void)state;
    struct dm_conn *p = dm_redis_get();
    assert_non_null(p->c);
    freeReplyObject(th_cmd(rc, "HSET rt:lock owner1 1"));
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    freeReplyObject(th_cmd(rc, "CONFIG RESETSTAT"));
    const char *args[] = { "rt:lock", "owner1", "5000" };
    redisReply *r = dm_redis_script(p, DM_SCRIPT_RENEW, 1, 3, args);
    if (!r)
        fail_msg("renew after SCRIPT FLUSH failed: %s", p->errstr);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 1);
    freeReplyObject(r);
    assert_int_equal(p->err, DM_REDIS_OK);
    assert_true(th_info_num(rc, "commandstats", "cmdstat_eval:calls=") >= 1);
    assert_true(th_cmd_int(rc, "PTTL rt:lock") > LEASE_MS);

    /* In a pipeline the layer cannot retry (later replies are queued
     * behind it): it says NOSCRIPT and the caller re-runs the call. */
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    assert_int_equal(dm_redis_append_script(p, DM_SCRIPT_RENEW, 1, 3, args), 0);
    assert_null(dm_redis_pipeline_reply(p, DM_SCRIPT_RENEW));
    assert_int_equal(p->err, DM_REDIS_NOSCRIPT);
    r = dm_redis_script(p, DM_SCRIPT_RENEW, 1, 3, args);
    assert_non_null(r);
    freeReplyObject(r);
    dm_redis_put(p);
}

static void test_stopped_server_is_io_after_the_command_timeout(void **state)
{
    (void)state;
    struct dm_conn *p = dm_redis_get();
    assert_non_null(p->c);
    const char *args[] = { "rt:lock", "owner1", "5000" };
    assert_int_equal(kill(rs.pid, SIGSTOP), 0);
    long long t0 = th_now_ms();
    redisReply *r = dm_redis_script(p, DM_SCRIPT_RENEW, 1, 3, args);
    long long took = th_now_ms() - t0;
    kill(rs.pid, SIGCONT);
    if (r)
        freeReplyObject(r);
    assert_null(r);
    assert_int_equal(p->err, DM_REDIS_IO);
    assert_has(p->errstr, addr);
    /* One-sided: the layer waited for the timeout, not less. */
    if (took < CMD_TIMEOUT_MS * 9 / 10)
        fail_msg("gave up after %lld ms, before the command timeout (%ld ms)", took,
                 CMD_TIMEOUT_MS);
    dm_redis_put(p);                /* closed, not pooled */

    /* The next connection from the pool is a working one. */
    p = dm_redis_get();
    assert_non_null(p->c);
    r = dm_redis_script(p, DM_SCRIPT_RENEW, 1, 3, args);
    if (!r)
        fail_msg("the pool gave back a dead connection: %s", p->errstr);
    freeReplyObject(r);
    dm_redis_put(p);
}

static void test_watchdog_renews_every_hold_and_declares_a_deleted_one_lost(void **state)
{
    (void)state;
    struct dm_rlock *l[NHOLDS];
    struct dm_hold h[NHOLDS];
    memset(h, 0, sizeof h);
    for (int i = 0; i < NHOLDS; i++) {
        char name[32];
        snprintf(name, sizeof name, "rt-hold-%d", i);
        l[i] = dm_rlock_get(name);
        assert_non_null(l[i]);
        dm_store_owner(h[i].owner, 700 + (unsigned long)i);
        struct dm_grant g;
        long long asked = th_now_ms();
        assert_int_equal(dm_rlock_acquire(l[i], h[i].owner, NULL, DM_ACQ_TRY, &g), 0);
        h[i].lock = &l[i]->pub;
        h[i].token = g.token;
        assert_int_equal(dm_watchdog_add(&h[i], asked, g.lease_ms), 0);
    }
    unsigned long lost_before = dm_watchdog_lost_count();

    /* Two leases: without renewals every key would be gone. */
    usleep(2 * LEASE_MS * 1000);
    for (int i = 0; i < NHOLDS; i++) {
        assert_int_equal(dm_watchdog_is_lost(&h[i]), 0);
        if (th_cmd_int(rc, "EXISTS %s", th_key(l[i]->name, DM_KEY_LOCK)) != 1)
            fail_msg("%s expired: the watchdog did not renew it", th_key(l[i]->name, DM_KEY_LOCK));
    }

    /* The server loses one: the next round says so, for that one only. */
    freeReplyObject(th_cmd(rc, "DEL %s", th_key(l[1]->name, DM_KEY_LOCK)));
    long long t0 = th_now_ms();
    while (!dm_watchdog_is_lost(&h[1]) && th_now_ms() - t0 < LEASE_MS + SLACK_MS)
        usleep(20 * 1000);
    assert_int_equal(dm_watchdog_is_lost(&h[1]), 1);
    assert_int_equal(dm_watchdog_lost_count(), lost_before + 1);
    assert_int_equal(dm_watchdog_is_lost(&h[0]), 0);
    assert_int_equal(dm_watchdog_is_lost(&h[2]), 0);

    for (int i = 0; i < NHOLDS; i++) {
        dm_watchdog_remove(&h[i]);
        dm_rlock_release(l[i], h[i].owner, h[i].token);
        dm_rlock_put(l[i]);
    }
}

/* ---- signals during a connect and a round trip ---------------------------- */

/* A connect that takes a while (the server's accept queue is full, so the
 * SYN is sent again a second later) while the thread gets a signal every
 * STORM_US: the server is there all along, so the connect must succeed
 * and on_redis_down = "local" must not lock this process alone. Before,
 * hiredis's connect took the EINTR of its poll(2) for an I/O error: "no
 * connection", and a local lock next to whoever held it in Redis. */
static void test_signals_during_a_connect_are_no_outage(void **state)
{
    (void)state;
    char *out;
    char port[16], ms[16];
    snprintf(port, sizeof port, "%d", rs.port);
    snprintf(ms, sizeof ms, "%ld", SLOW_ACCEPT_MS);
    int proxy = fault_server(&out, "slow-accept", rs.addr, port, ms, NULL);
    long saved_cto = cfg.redis.connect_timeout_ms;
    enum dm_on_redis_down saved_down = cfg.on_redis_down;
    cfg.redis.connect_timeout_ms = LONG_CONNECT_MS;
    cfg.on_redis_down = DM_DOWN_LOCAL;
    point_at(proxy);
    struct dm_rlock *l = dm_rlock_get("rt-storm-connect");
    assert_non_null(l);
    char who[DM_OWNER_MAX];
    dm_store_owner(who, 801);
    struct dm_grant g;
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, LONG_CONNECT_MS);
    long long t0 = th_now_ms();
    th_storm_start(STORM_US);
    int r = dm_rlock_acquire(l, who, &dl, 0, &g);
    long hits = th_storm_stop();
    long long took = th_now_ms() - t0;
    cfg.redis.connect_timeout_ms = saved_cto;
    cfg.on_redis_down = saved_down;
    print_message("measured: a connect under a signal storm (%ld signals): %s after %lld ms, "
                  "local_only %d\n", hits, strerror(r), took, r == 0 && g.local_only);
    if (r == 0 && g.local_only)
        fail_msg("the lock was taken locally (\"no connection\") while the server was "
                 "reachable: the connect took a signal for an outage");
    assert_int_equal(r, 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(l->name, DM_KEY_LOCK)), 1);
    char *text = th_read_file(out);
    th_assert_has(text, "accepting");       /* the connect did wait for the queue */
    free(text);
    assert_true(hits > 0);
    assert_int_equal(dm_rlock_release(l, who, g.token), 0);
    dm_rlock_put(l);
}

/* The server lost its scripts and the connection broke before they were
 * sent again: the NOSCRIPT reply was freed, then freed a second time when
 * the pipelined EVAL + SCRIPT LOAD found the connection gone (glibc:
 * "free(): double free detected in tcache 2"; the soak's workers died of
 * it after a SCRIPT FLUSH or a restart, then a stall). Now: an I/O error,
 * nothing freed twice. */
static void test_noscript_then_a_broken_connection_is_io_not_a_double_free(void **state)
{
    (void)state;
    char *out;
    point_at(fault_server(&out, "noscript", NULL));
    struct dm_conn *p = dm_redis_get();
    if (!p->c)
        fail_msg("no connection to the fake server: %s", p->errstr);
    const char *args[] = { "k", "o", "1000" };
    redisReply *r = dm_redis_script(p, DM_SCRIPT_RENEW, 1, 3, args);
    if (r)
        freeReplyObject(r);
    assert_null(r);
    assert_int_equal(p->err, DM_REDIS_IO);
    char *text = th_read_file(out);
    th_assert_has(text, "noscript EVALSHA");    /* the EVALSHA did meet NOSCRIPT */
    free(text);
    dm_redis_put(p);
}

/* A reply that trickles in, a byte every TRICKLE_MS: each byte used to
 * restart the socket's timeout (SO_RCVTIMEO bounds one recv, not the
 * request), so a 300 ms command took as long as the server kept sending
 * (20 s here). One deadline per request now. */
static void test_a_trickling_reply_ends_at_the_command_timeout(void **state)
{
    (void)state;
    char *out;
    char ms[16];
    snprintf(ms, sizeof ms, "%ld", TRICKLE_MS);
    point_at(fault_server(&out, "trickle", ms, NULL));
    struct dm_conn *p = dm_redis_get();
    if (!p->c)
        fail_msg("no connection to the trickling server: %s", p->errstr);
    long long t0 = th_now_ms();
    redisReply *r = dm_redis_command(p, "GET rt:trickle");
    long long took = th_now_ms() - t0;
    print_message("measured: a reply trickling a byte every %ld ms, command timeout %ld ms: "
                  "gave up after %lld ms\n", TRICKLE_MS, CMD_TIMEOUT_MS, took);
    if (r)
        freeReplyObject(r);
    assert_null(r);
    assert_int_equal(p->err, DM_REDIS_IO);
    assert_has(p->errstr, addr);
    if (took > CMD_TIMEOUT_MS + SLACK_MS)
        fail_msg("the command took %lld ms, its timeout is %ld ms", took, CMD_TIMEOUT_MS);
    char *text = th_read_file(out);
    th_assert_has(text, "trickle GET");
    free(text);
    dm_redis_put(p);
}

#define STOP_MS (CMD_TIMEOUT_MS + 2 * SLACK_MS)

static void *resume_later(void *arg)
{
    (void)arg;
    usleep(STOP_MS * 1000);
    kill(rs.pid, SIGCONT);
    return NULL;
}

/* The same with the server silent (stopped) and a signal every STORM_US:
 * each EINTR used to start the socket's timeout anew, so the command
 * waited as long as the signals kept coming. */
static void test_signals_during_a_round_trip_do_not_stretch_the_command_timeout(void **state)
{
    (void)state;
    struct dm_conn *p = dm_redis_get();
    assert_non_null(p->c);
    assert_int_equal(kill(rs.pid, SIGSTOP), 0);
    pthread_t resumer;          /* the server answers after STOP_MS: a late reply */
    assert_int_equal(pthread_create(&resumer, NULL, resume_later, NULL), 0);
    long long t0 = th_now_ms();
    th_storm_start(STORM_US);
    redisReply *r = dm_redis_command(p, "GET rt:storm");
    long hits = th_storm_stop();
    long long took = th_now_ms() - t0;
    pthread_join(resumer, NULL);
    print_message("measured: a stopped server, a signal every %d us (%ld signals), command "
                  "timeout %ld ms: gave up after %lld ms\n", STORM_US, hits,
                  CMD_TIMEOUT_MS, took);
    if (r)
        freeReplyObject(r);
    assert_null(r);
    assert_int_equal(p->err, DM_REDIS_IO);
    if (took > CMD_TIMEOUT_MS + SLACK_MS)
        fail_msg("the command took %lld ms under signals, its timeout is %ld ms", took,
                 CMD_TIMEOUT_MS);
    dm_redis_put(p);
}

/* A context whose err is set (a request timed out: its reply may still
 * come) is never written to or read again: a new request on it would be
 * answered by the old reply. */
static void test_a_failed_context_does_no_io(void **state)
{
    (void)state;
    struct dm_conn *p = dm_redis_get();
    assert_non_null(p->c);
    freeReplyObject(th_cmd(rc, "DEL rt:failed"));
    p->c->err = REDIS_ERR_IO;
    snprintf(p->c->errstr, sizeof p->c->errstr, "an earlier request timed out");
    const char *argv[] = { "INCR", "rt:failed" };
    assert_null(dm_net_command_argv(p->c, p->tls, 2, argv, NULL));
    assert_int_equal(p->c->err, REDIS_ERR_IO);
    assert_string_equal(p->c->errstr, "an earlier request timed out");
    int done = 0;
    assert_int_equal(dm_net_write(p->c, p->tls, &done), REDIS_ERR);
    assert_int_equal(dm_net_read(p->c, p->tls), REDIS_ERR);
    assert_string_equal(p->c->errstr, "an earlier request timed out");
    usleep(100000);
    assert_int_equal(th_cmd_int(rc, "EXISTS rt:failed"), 0);   /* nothing was sent */
    p->err = DM_REDIS_IO;
    dm_redis_put(p);                /* closed, not pooled */
}

/* Every command the layer sends is formatted by dm_net_append_argv (the
 * scripts' calls among them): the bytes hiredis would have written,
 * whatever the arguments hold (CR, LF, NUL, nothing, more than the
 * buffer's room), and the server reads them back unchanged. */
static void test_commands_go_out_in_the_protocol_byte_for_byte(void **state)
{
    (void)state;
    static char big[70000];
    memset(big, 'x', sizeof big);
    const char *argv[] = { "SET", "rt:bin", "a\r\nb\0c", "", big };
    const size_t lens[] = { 3, 6, 6, 0, sizeof big };
    for (int argc = 0; argc <= 5; argc++) {
        struct dm_conn conn;
        assert_int_equal(dm_redis_connect(&conn), 0);
        char *want = NULL;
        long long n = redisFormatCommandArgv(&want, argc, argv, lens);
        assert_true(n > 0);
        assert_int_equal(dm_net_append_argv(conn.c, argc, argv, lens), REDIS_OK);
        assert_int_equal(sdslen(conn.c->obuf), (size_t)n);
        assert_memory_equal(conn.c->obuf, want, (size_t)n);
        free(want);
        dm_redis_close(&conn);
    }
    /* C strings (lens NULL), after bytes already waiting in the buffer */
    struct dm_conn conn;
    assert_int_equal(dm_redis_connect(&conn), 0);
    const char *ping[] = { "PING" };
    assert_int_equal(dm_net_append_argv(conn.c, 1, ping, NULL), REDIS_OK);
    assert_int_equal(dm_net_append_argv(conn.c, 3, argv, NULL), REDIS_OK);
    static const char both[] = "*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$6\r\nrt:bin\r\n$4\r\na\r\nb\r\n";
    assert_int_equal(sdslen(conn.c->obuf), sizeof both - 1);
    assert_memory_equal(conn.c->obuf, both, sizeof both - 1);
    sdsclear(conn.c->obuf);
    redisReply *r = dm_net_command_argv(conn.c, conn.tls, 5, argv, lens);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);   /* SET k v "" big: a syntax error */
    freeReplyObject(r);
    r = dm_net_command_argv(conn.c, conn.tls, 3, argv, lens);
    assert_non_null(r);
    assert_string_equal(r->str, "OK");
    freeReplyObject(r);
    dm_redis_close(&conn);
    r = th_cmd(rc, "GET rt:bin");
    assert_int_equal(r->len, 6);
    assert_memory_equal(r->str, "a\r\nb\0c", 6);
    freeReplyObject(r);
}

/* The script calls' numbers (tokens, leases, request ids) are written by
 * dm_fmt_u64 and dm_fmt_long: what "%" PRIu64 and "%ld" write. */
static void test_numbers_are_written_as_printf_writes_them(void **state)
{
    (void)state;
    const uint64_t u[] = { 0, 1, 9, 10, 99, 100, 4294967295u, 4294967296u, 1732400000123456u,
                           UINT64_MAX - 1, UINT64_MAX };
    for (size_t i = 0; i < sizeof u / sizeof *u; i++) {
        char got[DM_FMT_U64_MAX], want[32];
        size_t n = dm_fmt_u64(got, u[i]);
        snprintf(want, sizeof want, "%" PRIu64, u[i]);
        assert_string_equal(got, want);
        assert_int_equal(n, strlen(want));
    }
    const long l[] = { 0, -1, 1, 30000, -30000, LONG_MAX, LONG_MIN, LONG_MIN + 1 };
    for (size_t i = 0; i < sizeof l / sizeof *l; i++) {
        char got[DM_FMT_U64_MAX + 1], want[32];
        size_t n = dm_fmt_long(got, l[i]);
        snprintf(want, sizeof want, "%ld", l[i]);
        assert_string_equal(got, want);
        assert_int_equal(n, strlen(want));
    }
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_connect_without_a_server_is_noconn_naming_the_address),
        T(test_auth_refused_is_a_reply_error_with_the_servers_words),
        T(test_error_reply_is_reply_error_with_the_servers_words),
        T(test_a_release_refuses_a_lock_key_of_another_type),
        T(test_flushed_script_falls_back_to_eval),
        T(test_stopped_server_is_io_after_the_command_timeout),
        T(test_watchdog_renews_every_hold_and_declares_a_deleted_one_lost),
        T(test_signals_during_a_connect_are_no_outage),
        T(test_a_trickling_reply_ends_at_the_command_timeout),
        T(test_noscript_then_a_broken_connection_is_io_not_a_double_free),
        T(test_signals_during_a_round_trip_do_not_stretch_the_command_timeout),
        T(test_a_failed_context_does_no_io),
        T(test_commands_go_out_in_the_protocol_byte_for_byte),
        T(test_numbers_are_written_as_printf_writes_them),
    };
    return cmocka_run_group_tests(tests, group_setup, th_group_teardown);
}
