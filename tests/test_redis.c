/* test_redis: the Redis layer (shim/redis.h) on its own, and the
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
#include <netinet/in.h>
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

#include "cluster.h"
#include "config.h"
#include "harness.h"
#include "redis.h"
#include "watchdog.h"

#define CMD_TIMEOUT_MS  300L    /* the layer's command timeout in this group */
#define LEASE_MS        1500L
#define SLACK_MS        3000L   /* how late an event may be on a loaded machine */
#define NHOLDS          3
#define SUITE_ALARM_S   120

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
    dm_cluster_init(&cfg);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    cfg.redis.password = NULL;
    point_at(rs.port);
    freeReplyObject(th_cmd(rc, "FLUSHALL"));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kill(rs.pid, SIGCONT);          /* a failed stop test must not leave it stopped */
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
    struct dm_cluster_lock *l[NHOLDS];
    struct dm_hold h[NHOLDS];
    memset(h, 0, sizeof h);
    for (int i = 0; i < NHOLDS; i++) {
        char name[32];
        snprintf(name, sizeof name, "rt-hold-%d", i);
        l[i] = dm_cluster_lock_get(name);
        assert_non_null(l[i]);
        dm_cluster_owner(h[i].owner, 700 + (unsigned long)i);
        struct dm_grant g;
        long long asked = th_now_ms();
        assert_int_equal(dm_cluster_acquire(l[i], h[i].owner, NULL, DM_ACQ_TRY, &g), 0);
        h[i].lock = l[i];
        h[i].token = g.token;
        assert_int_equal(dm_watchdog_add(&h[i], asked, g.lease_ms), 0);
    }
    unsigned long lost_before = dm_watchdog_lost_count();

    /* Two leases: without renewals every key would be gone. */
    usleep(2 * LEASE_MS * 1000);
    for (int i = 0; i < NHOLDS; i++) {
        assert_int_equal(dm_watchdog_is_lost(&h[i]), 0);
        if (th_cmd_int(rc, "EXISTS %s", l[i]->keys[DM_KEY_LOCK]) != 1)
            fail_msg("%s expired: the watchdog did not renew it", l[i]->keys[DM_KEY_LOCK]);
    }

    /* The server loses one: the next round says so, for that one only. */
    freeReplyObject(th_cmd(rc, "DEL %s", l[1]->keys[DM_KEY_LOCK]));
    long long t0 = th_now_ms();
    while (!dm_watchdog_is_lost(&h[1]) && th_now_ms() - t0 < LEASE_MS + SLACK_MS)
        usleep(20 * 1000);
    assert_int_equal(dm_watchdog_is_lost(&h[1]), 1);
    assert_int_equal(dm_watchdog_lost_count(), lost_before + 1);
    assert_int_equal(dm_watchdog_is_lost(&h[0]), 0);
    assert_int_equal(dm_watchdog_is_lost(&h[2]), 0);

    for (int i = 0; i < NHOLDS; i++) {
        dm_watchdog_remove(&h[i]);
        dm_cluster_release(l[i], h[i].owner, h[i].token);
        dm_cluster_lock_put(l[i]);
    }
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_connect_without_a_server_is_noconn_naming_the_address),
        T(test_auth_refused_is_a_reply_error_with_the_servers_words),
        T(test_error_reply_is_reply_error_with_the_servers_words),
        T(test_flushed_script_falls_back_to_eval),
        T(test_stopped_server_is_io_after_the_command_timeout),
        T(test_watchdog_renews_every_hold_and_declares_a_deleted_one_lost),
    };
    return cmocka_run_group_tests(tests, group_setup, th_group_teardown);
}
