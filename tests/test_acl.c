/* test_acl: `dmutex acl` prints the ACL SETUSER line of the least-privilege
 * user a config needs. A user made from exactly that line (run by the
 * test on its own server) keeps a counter exact across processes under
 * the shim, including the SELECT of a db and the EVAL that follows a
 * flushed script cache; it is refused a key outside the namespace and
 * FLUSHALL. A user missing one right of the line gets NOPERM naming what
 * is missing, and the lock call fails: never a lock without exclusion. */
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

#include "lock.h"
#include "config.h"
#include "harness.h"
#include "redis.h"

#define LOCKPROG        TH_BUILD "/tests/progs/lockprog"
#define DMUTEX_CLI      TH_BUILD "/dmutex"
#define SUITE_ALARM_S   180
#define RUN_MS          60000L
#define LEASE_MS        3000L
#define NS              "aclapp"
#define USER            "lockuser"
#define PASSWORD        "acl-Pw0rd"
#define DB              "1"
#define WORDS_MAX       80

#define CNT_PROCS       3
#define CNT_THREADS     3
#define CNT_ITERS       20
#define CNT_HOLD_US     "500"

static struct th_redis rs;
static redisContext *rc;

static int group_setup(void **state)
{
    (void)state;
    th_group_start(&rs, &rc, SUITE_ALARM_S, NULL);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_group_stop(&rs, &rc);
    return 0;
}

static int cleanup(void **state)
{
    (void)state;
    th_test_cleanup();
    freeReplyObject(th_cmd(rc, "ACL DELUSER %s", USER));
    return 0;
}

/* The application's config: user and password, a namespace, db 1. */
static char *app_config(const char *extra)
{
    return th_keep_file(th_write_file(".cfg",
        "redis = { host = \"%s\"; port = %d; username = \"%s\"; password = \"%s\"; db = %s; };\n"
        "namespace = \"%s\";\nlease_ms = %ld;\n%s\n"
        "mutexes = ( { symbol = \"counter_lock\"; name = \"acl_counter\"; required = false; },\n"
        "            { symbol = \"held_lock\"; name = \"acl_held\"; required = false; } );\n",
        rs.addr, rs.port, USER, PASSWORD, DB, NS, LEASE_MS, extra ? extra : ""));
}

/* `dmutex acl -c cfg` (plus `opt`, or NULL): its one line, malloc'ed. */
static char *acl_line(const char *cfg, const char *opt)
{
    char *out = th_out_file();
    char *argv[] = { DMUTEX_CLI, "acl", "-c", (char *)cfg, (char *)opt, NULL };
    char *text = th_finish(th_child(argv, NULL, out), out, 0, RUN_MS);
    char *nl = strchr(text, '\n');
    assert_non_null(nl);
    *nl = 0;
    assert_true(strncmp(text, "ACL SETUSER ", 12) == 0);
    return text;
}

/* Runs the line's words on the test's admin connection,
 * leaving out the word `drop` (NULL: none) and replacing `from` by `to`. */
static void run_acl_line(char *line, const char *drop, const char *from, const char *to)
{
    const char *argv[WORDS_MAX];
    int argc = 0;
    for (char *w = strtok(line, " "); w && argc < WORDS_MAX; w = strtok(NULL, " ")) {
        if (drop && strcmp(w, drop) == 0)
            continue;
        argv[argc++] = from && strcmp(w, from) == 0 ? to : w;
    }
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_STATUS)
        fail_msg("ACL SETUSER: %s", r->type == REDIS_REPLY_ERROR ? r->str : "not OK");
    freeReplyObject(r);
}

/* A connection as the user. */
static redisContext *as_user(void)
{
    redisContext *c = th_redis_connect(&rs);
    redisReply *r = th_cmd(c, "AUTH %s %s", USER, PASSWORD);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    return c;
}

static void assert_noperm(redisContext *c, const char *cmd, const char *word)
{
    redisReply *r = th_cmd(c, cmd);
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, "NOPERM", 6) != 0 || !strstr(r->str, word))
        fail_msg("%s as %s: expected NOPERM about %s, got %s", cmd, USER, word,
                 r->type == REDIS_REPLY_ERROR ? r->str : "a reply");
    freeReplyObject(r);
}

static const struct th_counters counters = { CNT_PROCS, CNT_THREADS, CNT_ITERS, CNT_HOLD_US,
                                              RUN_MS };

/* CNT_PROCS counter processes at once under the shim with `cfg`, none
 * refused anything; returns the final count. */
static long long run_counters(const char *cfg, const char *key)
{
    struct th_shim_env e;
    return th_run_counters(rc, &rs, key, th_shim_env(&e, cfg, NULL, NULL), &counters, "NOPERM");
}

/* The line names exactly the namespace's keys and channels, the hashed
 * password (no secret), and no command class wider than it needs. */
static void test_acl_line_has_the_namespace_and_no_secret(void **state)
{
    (void)state;
    char *line = acl_line(app_config(NULL), NULL);
    th_assert_has(line, "ACL SETUSER " USER " reset on #");
    th_assert_has(line, " ~" NS ":* &" NS ":* -@all ");
    th_assert_has(line, " +evalsha ");
    th_assert_has(line, " +subscribe ");
    if (strstr(line, PASSWORD) || strstr(line, "+@") || strstr(line, "allkeys") ||
        strstr(line, "allchannels") || strstr(line, "+flushall") || strstr(line, "+keys"))
        fail_msg("too wide or shows the password: %s", line);
    free(line);
    line = acl_line(app_config(NULL), "--plain-password");
    th_assert_has(line, " on >" PASSWORD " ~");
    free(line);
    /* SELECT is the one command a config decides: needed for db 1 (the
     * app config's), not given for db 0 (it would reach every database). */
    line = acl_line(app_config(NULL), NULL);
    th_assert_has(line, " +select ");
    free(line);
    char *db0 = th_keep_file(th_write_file(".cfg",
        "redis = { host = \"%s\"; port = %d; username = \"%s\"; password = \"%s\"; };\n"
        "namespace = \"%s\";\nmutexes = ();\n", rs.addr, rs.port, USER, PASSWORD, NS));
    line = acl_line(db0, NULL);
    if (strstr(line, "+select"))
        fail_msg("db 0 needs no SELECT, the line grants it: %s", line);
    free(line);
}

/* The user of the line runs the whole scenario: counter exact (db 1:
 * SELECT; scripts; notices), and the EVAL fallback after SCRIPT FLUSH. */
static void test_user_from_the_acl_line_keeps_the_counter_exact(void **state)
{
    (void)state;
    char *cfg = app_config(NULL);
    char *line = acl_line(cfg, NULL);
    run_acl_line(line, NULL, NULL, NULL);
    free(line);
    long long n = run_counters(cfg, "aclcount");
    assert_int_equal(n, CNT_PROCS * CNT_THREADS * CNT_ITERS);

    /* In process, as the same user: a script the server forgot comes back
     * through EVAL, which the user may run too. */
    struct dm_config c;
    char err[DM_ERR_MAX];
    assert_int_equal(dm_config_load(cfg, &c, err, sizeof err), 0);
    dm_store_init(&c, &dm_redis_store);
    struct dm_conn *conn = dm_redis_get();
    if (!conn->c)
        fail_msg("%s", conn->errstr);
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    char key[128];
    snprintf(key, sizeof key, "%s:{acl_probe}", NS);
    const char *args[] = { key, "owner-x", "1000" };
    redisReply *r = dm_redis_script(conn, DM_SCRIPT_RENEW, 1, 3, args);
    if (!r)
        fail_msg("renew.lua after SCRIPT FLUSH: %s", conn->errstr);
    freeReplyObject(r);
    dm_redis_put(conn);
    dm_redis_atfork(DM_FORK_CHILD);    /* forget the pool: the config goes away */
    dm_config_free(&c);
}

static void test_user_from_the_acl_line_is_refused_the_rest(void **state)
{
    (void)state;
    char *line = acl_line(app_config(NULL), NULL);
    run_acl_line(line, NULL, NULL, NULL);
    free(line);
    freeReplyObject(th_cmd(rc, "SET outside:key secret"));
    redisContext *c = as_user();
    assert_noperm(c, "GET outside:key", "key");
    assert_noperm(c, "FLUSHALL", "flushall");
    assert_noperm(c, "KEYS *", "keys");
    assert_noperm(c, "PUBLISH outside:chan x", "channel");
    redisFree(c);
    assert_int_equal(th_cmd_int(rc, "EXISTS outside:key"), 1);
}

/* lockprog `lock` under the shim with on_redis_down = "error": the
 * refused lock returns EAGAIN, and the log has the server's words. */
static char *refused_lock(const char *cfg)
{
    char *out = th_out_file();
    char *argv[] = { LOCKPROG, "lock", NULL };
    struct th_shim_env e;
    char *text = th_finish(th_child(argv, th_shim_env(&e, cfg, NULL, NULL), out), out, 0, RUN_MS);
    th_assert_has(text, "locked EAGAIN");
    return text;
}

/* The lock refused (EAGAIN, on_redis_down = "error") to a user made from
 * the printed line less `drop` (a right) or with key pattern `from`
 * replaced by `to`; the program's output, with each of `words` in it. */
static void refused_with(const char *drop, const char *from, const char *to,
                         const char *const *words)
{
    char *cfg = app_config("on_redis_down = \"error\";");
    char *line = acl_line(cfg, NULL);
    run_acl_line(line, drop, from, to);
    free(line);
    char *text = refused_lock(cfg);
    for (; *words; words++)
        th_assert_has(text, *words);
    free(text);
}

static void test_user_without_evalsha_gets_noperm_and_no_lock(void **state)
{
    (void)state;
    static const char *const words[] = { "NOPERM", "evalsha", "acl_held", NULL };
    refused_with("+evalsha", NULL, NULL, words);
}

/* A command a script calls (acquire.lua's HSET): Redis 7.0 refuses it
 * inside the script without NOPERM and without naming it; the log says
 * it is an ACL refusal and where to look. */
static void test_user_without_a_scripts_command_is_told_it_is_an_acl_refusal(void **state)
{
    (void)state;
    static const char *const words[] = {
        "acl_held", "an ACL refusal of a command the script calls", "ACL LOG", NULL };
    refused_with("+hset", NULL, NULL, words);
}

static void test_user_without_the_key_pattern_gets_noperm_and_no_lock(void **state)
{
    (void)state;
    static const char *const words[] = { "NOPERM", "key", NULL };
    refused_with(NULL, "~" NS ":*", "~other:*", words);
}

/* A setnx entry's lock is its bare name (docs/interop.md): the line lets
 * the user have that key too, and the counter under it stays exact. */
static void test_acl_line_has_each_setnx_entrys_bare_name(void **state)
{
    (void)state;
    char *cfg = th_keep_file(th_write_file(".cfg",
        "redis = { host = \"%s\"; port = %d; username = \"%s\"; password = \"%s\"; db = %s; };\n"
        "namespace = \"%s\";\nlease_ms = %ld;\n"
        "mutexes = ( { symbol = \"counter_lock\"; name = \"acl_sx\"; protocol = \"setnx\"; },\n"
        "            { symbol = \"held_lock\"; name = \"acl_sx\"; protocol = \"setnx\"; "
        "required = false; } );\n", rs.addr, rs.port, USER, PASSWORD, DB, NS, LEASE_MS));
    char *line = acl_line(cfg, NULL);
    th_assert_has(line, " ~" NS ":* &" NS ":* ~acl_sx -@all ");
    run_acl_line(line, NULL, NULL, NULL);
    free(line);
    assert_int_equal(run_counters(cfg, "acl_sx_count"), CNT_PROCS * CNT_THREADS * CNT_ITERS);
}

/* A redisson entry's lock is its bare name and its release channel
 * Redisson's (docs/interop.md): the line has both, and the counter under
 * it stays exact. */
static void test_acl_line_has_each_redisson_entrys_name_and_channel(void **state)
{
    (void)state;
    char *cfg = th_keep_file(th_write_file(".cfg",
        "redis = { host = \"%s\"; port = %d; username = \"%s\"; password = \"%s\"; db = %s; };\n"
        "namespace = \"%s\";\nlease_ms = %ld;\n"
        "mutexes = ( { symbol = \"counter_lock\"; name = \"acl_rs\"; protocol = \"redisson\"; } "
        ");\n", rs.addr, rs.port, USER, PASSWORD, DB, NS, LEASE_MS));
    char *line = acl_line(cfg, NULL);
    th_assert_has(line, " ~" NS ":* &" NS ":* ~acl_rs &redisson_lock__channel:{acl_rs} -@all ");
    run_acl_line(line, NULL, NULL, NULL);
    free(line);
    assert_int_equal(run_counters(cfg, "acl_rs_count"), CNT_PROCS * CNT_THREADS * CNT_ITERS);
}

#define T(f) cmocka_unit_test_teardown(f, cleanup)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_acl_line_has_the_namespace_and_no_secret),
        T(test_user_from_the_acl_line_keeps_the_counter_exact),
        T(test_user_from_the_acl_line_is_refused_the_rest),
        T(test_user_without_evalsha_gets_noperm_and_no_lock),
        T(test_user_without_the_key_pattern_gets_noperm_and_no_lock),
        T(test_user_without_a_scripts_command_is_told_it_is_an_acl_refusal),
        T(test_acl_line_has_each_setnx_entrys_bare_name),
        T(test_acl_line_has_each_redisson_entrys_name_and_channel),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
