/* test_shim: whole programs with build/libdmutex.so preloaded, against a
 * real redis-server: what a user of an unmodified program relies on. The
 * programs (tests/progs/lockprog.c, tests/progs/counter.c) know nothing of
 * dmutex; each test writes a config mapping their globals under a lock name
 * of its own, runs them, and checks their output, their exit status and the
 * server's statistics. Children still running when a test ends (it failed)
 * are killed by the teardown.
 *
 * Timing assertions are one-sided or generous (the suite runs on a slow,
 * noisy 2-core machine); leases are short where a test waits for one. */
#include <errno.h>
#include <limits.h>
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <cmocka.h>

#include "harness.h"

#define LOCKPROG        TH_BUILD "/tests/progs/lockprog"
#define FORKPROG        TH_BUILD "/tests/progs/forkprog"
#define DLPROG          TH_BUILD "/tests/progs/dlprog"
#define PLUGINS         TH_BUILD "/tests/progs/plugins"
#define DMUTEX_CLI      TH_BUILD "/dmutex"
#define SECUREPROG      TH_BUILD "/tests/progs/secureprog"
#define FSERVER         TH_BUILD "/tests/progs/faultserver"
#define SLOW_ACCEPT_MS  "1500"  /* the proxy's accept queue stays full this long */
#define NOBODY_ID       "65534"
#define EX_CONFIG       78
#define SHORT_LEASE_MS  2000L   /* for tests that wait for a lease to run out */
#define LONG_LEASE_MS   30000L  /* for holders that must not lose theirs on a slow machine */
#define SLACK_MS        2500L   /* how late a timed result may be on a loaded machine */
#define RUN_MS          20000L  /* longest a program that should finish may run */
#define LOOP_RUN_MS     90000L  /* the same for the fork and dlopen loops */
/* forkprog: churning threads x forks; enough forks to catch a lock held at
 * fork on the old code nearly every run */
#define FORK_THREADS    "3"
#define FORK_COUNT      "3000"
#define DL_ITERS        "10000" /* dlprog: plugin loads while another thread loads */
#define SECRET_PW       "s3cretPw0rd"
#define POLL_US         5000
#define SUITE_ALARM_S   180     /* a hung test ends the program instead of the CI job */

/* counter: processes x threads x iterations, each section holding HOLD_US */
#define CNT_PROCS       3
#define CNT_THREADS     4
#define CNT_ITERS       25
#define CNT_HOLD_US     "1000"
#define CNT_TRIES       3       /* runs without the shim allowed to show a lost update */

static struct th_redis rs;
static struct th_redis late;    /* a second server, for a test that starts it late */
static redisContext *rc;
static char shim_path[PATH_MAX];

/* A config with `lease` and the given entries of `mutexes = ( ... )`. */
/* The environment of a program run under the shim with `cfg`, talking to
 * the server at `port`. Static storage: valid until the next call. */
static char **shim_env(const char *cfg, int port)
{
    static struct th_shim_env e;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    return th_shim_env(&e, cfg, url, NULL);
}

/* lockprog MODE [ARG] under the shim with `cfg`. */
static pid_t lockprog(const char *cfg, int port, const char *out, const char *mode, const char *arg)
{
    char *argv[] = { LOCKPROG, (char *)mode, (char *)arg, NULL };
    return th_child(argv, shim_env(cfg, port), out);
}

/* Waits for a child that must end by itself within RUN_MS and exit with
 * `want` (0, or 78 for a config error); returns its output (caller frees). */
static char *finish(pid_t pid, const char *out, int want)
{
    return th_finish(pid, out, want, RUN_MS);
}

/* lockprog says "main" on a line of its own as soon as main runs. */
static int main_ran(const char *text)
{
    return strncmp(text, "main\n", 5) == 0 || strstr(text, "\nmain\n") != NULL;
}

/* A loopback port with nothing listening. */
static int closed_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t len = sizeof sa;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_true(s >= 0);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&sa, &len), 0);
    close(s);
    return ntohs(sa.sin_port);
}

/* ---- fixtures ------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    return th_shim_group_start(&rs, &rc, SUITE_ALARM_S, shim_path);
}

static int cleanup(void **state)
{
    (void)state;
    th_test_cleanup();
    if (late.dir[0])
        th_redis_stop(&late);
    return 0;
}

/* ---- (a) exclusion -------------------------------------------------------- */

/* Runs CNT_PROCS counter processes at once (with `env`, or plain) on `key`
 * and returns the final count. */
static long long run_counters(const char *key, char **env)
{
    static const struct th_counters counters = { CNT_PROCS, CNT_THREADS, CNT_ITERS, CNT_HOLD_US,
                                                 RUN_MS };
    return th_run_counters(rc, &rs, key, env, &counters, NULL);
}

static void test_mapped_mutex_keeps_a_counter_exact_across_processes(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"counter_lock\"; name = \"a_counter\"; }");
    long long n = run_counters("a:count", shim_env(cfg, rs.port));
    assert_int_equal(n, CNT_PROCS * CNT_THREADS * CNT_ITERS);
}

/* The checker itself: the same run without the shim loses updates, so an
 * exact count above means exclusion, not luck. */
static void test_without_the_shim_the_counter_loses_updates(void **state)
{
    (void)state;
    char *plain[] = { NULL };
    long long n = 0;
    for (int i = 0; i < CNT_TRIES; i++) {
        n = run_counters("a:plain", plain);
        if (n < CNT_PROCS * CNT_THREADS * CNT_ITERS)
            return;
    }
    fail_msg("%d runs without the shim all counted exactly %lld: the checker cannot see a race",
             CNT_TRIES, n);
}

/* ---- (b) unmapped ---------------------------------------------------------- */

static void test_unmapped_mutex_makes_no_redis_traffic(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS,
                       "{ symbol = \"held_lock\"; name = \"b_held\"; },\n"
                       "{ symbol = \"no_such_mutex_b\"; required = false; }");
    char *out = th_out_file();
    th_reset_stats(rc);
    char *text = finish(lockprog(cfg, rs.port, out, "unmapped", "1000"), out, 0);
    th_assert_has(text, "unmapped 0");
    free(text);
    assert_int_equal(th_info_num(rc, "stats", "total_connections_received:"), 0);
    assert_int_equal(th_script_calls(rc), 0);
}

/* ---- (c) (d) contention between processes ------------------------------------- */

static void test_trylock_is_ebusy_while_another_process_holds_the_mutex(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"c_try\"; }");
    char *hout = th_out_file(), *go = th_go_file();
    pid_t holder = lockprog(cfg, rs.port, hout, "hold", go);
    th_wait_for(hout, "locked 0", RUN_MS);

    char *out = th_out_file();
    char *text = finish(lockprog(cfg, rs.port, out, "trylock", NULL), out, 0);
    th_assert_has(text, "trylock EBUSY");
    assert_true(th_field_after(text, "trylock EBUSY ") < SLACK_MS);   /* no waiting */
    free(text);

    th_touch(go);
    text = finish(holder, hout, 0);
    th_assert_has(text, "unlocked 0");
    free(text);
    out = th_out_file();
    text = finish(lockprog(cfg, rs.port, out, "trylock", NULL), out, 0);
    th_assert_has(text, "trylock 0");
    free(text);
}

static void test_timedlock_times_out_at_its_deadline_while_held_elsewhere(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"d_timed\"; }");
    char *hout = th_out_file(), *go = th_go_file();
    pid_t holder = lockprog(cfg, rs.port, hout, "hold", go);
    th_wait_for(hout, "locked 0", RUN_MS);

    const long wait = 1000;
    char arg[16];
    snprintf(arg, sizeof arg, "%ld", wait);
    char *out = th_out_file();
    char *text = finish(lockprog(cfg, rs.port, out, "timedlock", arg), out, 0);
    long long took = th_field_after(text, "timedlock ETIMEDOUT ");
    /* The program measures on CLOCK_MONOTONIC, its deadline is on
     * CLOCK_REALTIME: a millisecond of rounding either way. */
    if (took < wait - 1 || took > wait + SLACK_MS)
        fail_msg("ETIMEDOUT after %lld ms for a %ld ms deadline", took, wait);
    free(text);
    th_touch(go);
    free(finish(holder, hout, 0));
}

/* ---- (e) (f) a holder that dies or exits ---------------------------------------- */

static void test_killed_holder_frees_the_lock_after_its_lease(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"held_lock\"; name = \"e_killed\"; }");
    char *hout = th_out_file();
    pid_t holder = lockprog(cfg, rs.port, hout, "hold-forever", NULL);
    th_wait_for(hout, "locked 0", RUN_MS);
    char *out = th_out_file();
    pid_t waiter = lockprog(cfg, rs.port, out, "lock", NULL);
    th_wait_blocked(rc, "e_killed", RUN_MS);

    long long killed = th_now_ms();
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    th_forget(holder);
    /* Nobody renews the lease now: what is left of it is exact. */
    long long left = th_cmd_int(rc, "PTTL %s", th_key("e_killed", DM_KEY_LOCK));
    if (left <= 0)
        fail_msg("the killed holder's lock has no lease left (PTTL %lld): it was not held", left);
    long long got = th_wait_for(out, "locked 0", SHORT_LEASE_MS + SLACK_MS);
    long long took = got - killed;
    if (took < left - 5 || took > left + SLACK_MS)      /* 5 ms: rounding to ms */
        fail_msg("the waiter got the lock %lld ms after the holder was killed; "
                 "its lease had %lld ms left", took, left);
    free(finish(waiter, out, 0));
}

static void test_exit_while_holding_releases_the_lock(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"f_exit\"; }");
    char *hout = th_out_file(), *go = th_go_file();
    pid_t holder = lockprog(cfg, rs.port, hout, "hold-exit", go);
    th_wait_for(hout, "locked 0", RUN_MS);
    char *out = th_out_file();
    pid_t waiter = lockprog(cfg, rs.port, out, "lock", NULL);
    th_wait_blocked(rc, "f_exit", RUN_MS);

    long long t0 = th_now_ms();
    th_touch(go);
    long long got = th_wait_for(out, "locked 0", 5000);
    assert_true(got - t0 < 5000);           /* the lease (30 s) did not have to run out */
    char *text = finish(holder, hout, 0);
    th_assert_has(text, "returning");
    free(text);
    free(finish(waiter, out, 0));
}

/* ---- (g) config errors ------------------------------------------------------- */

static void test_bad_config_exits_78_before_main_naming_file_and_line(void **state)
{
    (void)state;
    char *cfg = th_keep_file(th_write_file(".cfg", "lease_ms = 2000;\nrenew_ms = \"often\";\n"
                                        "mutexes = ( { symbol = \"held_lock\"; } );\n"));
    char *out = th_out_file();
    char *text = finish(lockprog(cfg, rs.port, out, "trylock", NULL), out, EX_CONFIG);
    char where[PATH_MAX + 8];
    snprintf(where, sizeof where, "%s:2:", cfg);
    th_assert_has(text, where);
    if (main_ran(text))
        fail_msg("main ran despite the config error:\n%s", text);
    free(text);
}

static void test_missing_required_symbol_exits_78_naming_it(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"no_such_mutex_g\"; }");
    char *out = th_out_file();
    char *text = finish(lockprog(cfg, rs.port, out, "trylock", NULL), out, EX_CONFIG);
    th_assert_has(text, "no_such_mutex_g");
    if (main_ran(text))
        fail_msg("main ran despite the missing symbol:\n%s", text);
    free(text);
}

/* A program the config is for runs other programs (a shell, a helper):
 * they inherit LD_PRELOAD and DMUTEX_CONFIG, lack the program's symbols,
 * and must run untouched when `programs` names only the program. */
static void test_process_not_in_programs_runs_untouched(void **state)
{
    (void)state;
    char *argv[] = { "/bin/sh", "-c", "echo child-ran", NULL };
    char *cfg = th_keep_file(th_write_file(".cfg", "programs = [\"lockprog\"];\n"
                                           "mutexes = ( { symbol = \"counter_lock\"; } );\n"));
    char *out = th_out_file();
    char *text = finish(th_child(argv, shim_env(cfg, rs.port), out), out, 0);
    th_assert_has(text, "child-ran");
    free(text);
    /* The same config without `programs` stops the shell: the check is real. */
    char *strict = th_config(SHORT_LEASE_MS, "{ symbol = \"counter_lock\"; }");
    out = th_out_file();
    text = finish(th_child(argv, shim_env(strict, rs.port), out), out, EX_CONFIG);
    th_assert_has(text, "counter_lock");
    th_assert_has(text, "programs");
    free(text);
}

static void test_unset_dmutex_config_exits_78_with_a_clear_message(void **state)
{
    (void)state;
    struct th_shim_env e;
    char **env = th_shim_env(&e, NULL, NULL, NULL);
    char *argv[] = { LOCKPROG, "trylock", NULL };
    char *out = th_out_file();
    char *text = finish(th_child(argv, env, out), out, EX_CONFIG);
    th_assert_has(text, "DMUTEX_CONFIG");
    th_assert_has(text, "not set");
    if (main_ran(text))
        fail_msg("main ran without a config:\n%s", text);
    free(text);
}

static void test_bad_dmutex_redis_url_exits_78_naming_it(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"held_lock\"; name = \"g_url\"; }");
    char **env = shim_env(cfg, rs.port);
    static char bad[] = "DMUTEX_REDIS=http://127.0.0.1:1/";
    env[2] = bad;
    char *argv[] = { LOCKPROG, "trylock", NULL };
    char *out = th_out_file();
    char *text = finish(th_child(argv, env, out), out, EX_CONFIG);
    th_assert_has(text, "DMUTEX_REDIS=http://127.0.0.1:1/");
    if (main_ran(text))
        fail_msg("main ran with a bad DMUTEX_REDIS:\n%s", text);
    free(text);
}

/* ---- (h) Redis unreachable ---------------------------------------------------- */

static void test_lock_keeps_retrying_and_logs_while_redis_is_unreachable(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"held_lock\"; name = \"h_lock\"; }");
    int port = closed_port();
    char *out = th_out_file();
    pid_t pid = lockprog(cfg, port, out, "lock", NULL);
    th_wait_for(out, "waiting for redis", RUN_MS);
    sleep(2);
    assert_int_equal(waitpid(pid, NULL, WNOHANG), 0);      /* still trying */
    char *text = th_read_file(out);
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    th_assert_has(text, addr);
    th_assert_has(text, "h_lock");
    if (strstr(text, "locked"))
        fail_msg("lock returned with Redis unreachable:\n%s", text);
    free(text);
}

/* The outage ends: the blocked lock gets the lock without the program
 * doing anything. */
static void test_lock_blocked_by_an_outage_succeeds_once_redis_answers(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"held_lock\"; name = \"h_back\"; }");
    th_redis_start(&late, NULL, NULL);
    th_redis_kill(&late);                   /* its port is now closed */
    char *out = th_out_file();
    pid_t pid = lockprog(cfg, late.port, out, "lock", NULL);
    th_wait_for(out, "waiting for redis", RUN_MS);
    th_redis_restart(&late, NULL);
    long long up = th_now_ms();
    /* Retries back off to at most DM_BACKOFF_MAX_MS (2 s). */
    long long got = th_wait_for(out, "locked 0", 2000 + SLACK_MS);
    assert_true(got - up <= 2000 + SLACK_MS);
    free(finish(pid, out, 0));
}

static void test_trylock_is_ebusy_while_redis_is_unreachable(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"held_lock\"; name = \"h_try\"; }");
    char *out = th_out_file();
    char *text = finish(lockprog(cfg, closed_port(), out, "trylock", NULL), out, 0);
    th_assert_has(text, "trylock EBUSY");
    free(text);
}

static void test_timedlock_times_out_while_redis_is_unreachable(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"held_lock\"; name = \"h_timed\"; }");
    const long wait = 800;
    char *out = th_out_file();
    char *text = finish(lockprog(cfg, closed_port(), out, "timedlock", "800"), out, 0);
    long long took = th_field_after(text, "timedlock ETIMEDOUT ");
    if (took < wait - 1 || took > wait + SLACK_MS)
        fail_msg("ETIMEDOUT after %lld ms for a %ld ms deadline:\n%s", took, wait, text);
    free(text);
}

/* ---- (h2) connections the server closes: never SIGPIPE ------------------------ */

#define CHURN_KILLS     60      /* rounds of CLIENT KILL while the program locks */
#define CHURN_GAP_US    15000   /* between two rounds: the pool is refilled meanwhile */

/* lockprog churn (SIGPIPE at its default disposition) on a unix socket
 * while the test closes its connections, the pooled ones and the
 * subscriber's, over and over, then restarts the server: on a unix socket
 * the shim's next write to a connection the server closed fails with
 * EPIPE at once, which write(2) turns into a SIGPIPE that kills the
 * program (hiredis's own write, before). The program must live, every
 * lock call must follow on_redis_down: "block" returns 0 every time,
 * "error" 0 or EAGAIN. The restarted server has lost the hold a lock
 * cycle may have had at the kill: on_lease_lost = "warn" (an abort there
 * is the shim doing its job, not this test's subject). */
static void churn_under_kills(const char *policy)
{
    char sock[80];
    snprintf(sock, sizeof sock, "/tmp/dmutex-test-sigpipe-%d.sock", (int)getpid());
    const char *extra[] = { "--unixsocket", sock, "--unixsocketperm", "700", NULL };
    th_redis_start(&late, NULL, extra);
    redisContext *k = th_redis_connect(&late);
    char *cfg = th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\non_redis_down = \"%s\";\n"
                                           "on_lease_lost = \"warn\";\n"
                                           "mutexes = ( { symbol = \"held_lock\"; "
                                           "name = \"h_pipe\"; } );\n", LONG_LEASE_MS, policy));
    static struct th_shim_env e;
    char url[120];
    snprintf(url, sizeof url, "unix://%s", sock);
    char *out = th_out_file(), *go = th_go_file();
    char *argv[] = { LOCKPROG, "churn", go, NULL };
    pid_t pid = th_child(argv, th_shim_env(&e, cfg, url, NULL), out);
    th_wait_for(out, "main", RUN_MS);
    for (int i = 0; i < CHURN_KILLS; i++) {
        freeReplyObject(th_cmd(k, "CLIENT KILL TYPE normal"));
        freeReplyObject(th_cmd(k, "CLIENT KILL TYPE pubsub"));
        usleep(CHURN_GAP_US);
    }
    redisFree(k);
    th_redis_kill(&late);
    usleep(CHURN_GAP_US * 10);      /* lock calls meet the closed socket */
    th_redis_restart(&late, extra);
    /* A restart without persistence keeps the lock off for a lease
     * (acquire.lua, "Restarts"): not what this test is about, so the new
     * run is declared to have lost nothing, which lifts that wait. */
    th_redis_declare_fresh(&late, DM_NAMESPACE_DEFAULT);
    usleep(CHURN_GAP_US * 10);
    th_touch(go);
    char *text = finish(pid, out, 0);     /* a SIGPIPE fails here, with the output */
    long long n = th_field_after(text, "churn ");
    if (n < CHURN_KILLS)
        fail_msg("only %lld lock cycles during %d rounds of kills:\n%s", n, CHURN_KILLS, text);
    if (strcmp(policy, "block") == 0)
        th_assert_has(text, " 0 0\n");                  /* no lock call failed */
    else if (!strstr(text, " 0 0\n") && !strstr(text, " EAGAIN\n"))
        fail_msg("a lock call failed with something else than EAGAIN:\n%s", text);
    free(text);
    unlink(sock);
}

static void test_server_closing_connections_never_kills_the_program_block(void **state)
{
    (void)state;
    churn_under_kills("block");
}

static void test_server_closing_connections_never_kills_the_program_error(void **state)
{
    (void)state;
    churn_under_kills("error");
}

/* ---- (i) (j) (k) mutex types ---------------------------------------------------- */

static void test_recursive_nested_locks_cost_no_extra_round_trip(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"rec_lock\"; name = \"i_rec\"; }");
    char *out = th_out_file(), *go = th_go_file();
    th_reset_stats(rc);
    char *argv[] = { LOCKPROG, "recursive", "10", go, NULL };
    pid_t pid = th_child(argv, shim_env(cfg, rs.port), out);
    /* After the 10 inner unlocks the outermost hold is still the cluster's. */
    th_wait_for(out, "outer", RUN_MS);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("i_rec", DM_KEY_LOCK)), 1);
    th_touch(go);
    char *text = finish(pid, out, 0);
    th_assert_has(text, "recursive 0");
    free(text);
    assert_int_equal(th_script_calls(rc), 2);        /* one acquire, one release */
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("i_rec", DM_KEY_LOCK)), 0);
}

static void test_errorcheck_relock_is_edeadlk_without_redis_traffic(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"err_lock\"; name = \"j_relock\"; }");
    char *out = th_out_file();
    th_reset_stats(rc);
    char *text = finish(lockprog(cfg, rs.port, out, "errcheck", "relock"), out, 0);
    th_assert_has(text, "errcheck relock 0 EDEADLK 0");
    free(text);
    assert_int_equal(th_script_calls(rc), 2);        /* the outer lock and unlock only */
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("j_relock", DM_KEY_LOCK)), 0);
}

static void test_errorcheck_unlock_by_another_thread_is_eperm_without_redis_traffic(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"err_lock\"; name = \"j_foreign\"; }");
    char *out = th_out_file();
    th_reset_stats(rc);
    char *text = finish(lockprog(cfg, rs.port, out, "errcheck", "foreign"), out, 0);
    th_assert_has(text, "errcheck foreign 0 EPERM 0");
    free(text);
    assert_int_equal(th_script_calls(rc), 2);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("j_foreign", DM_KEY_LOCK)), 0);
}

/* For a normal mutex glibc already says EBUSY; for a robust one it does
 * not look, and only the shim knows the mutex is held. */
static void test_destroy_of_a_held_mapped_mutex_is_ebusy(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"k_normal\"; },\n"
                                      "{ symbol = \"robust_lock\"; name = \"k_robust\"; }");
    const char *types[] = { "normal", "robust" };
    for (int i = 0; i < 2; i++) {
        char *out = th_out_file();
        char *text = finish(lockprog(cfg, rs.port, out, "destroy-held", types[i]), out, 0);
        char want[64];
        snprintf(want, sizeof want, "destroy-held %s EBUSY 0 0", types[i]);
        th_assert_has(text, want);
        free(text);
        /* The refused destroy left the hold intact, and unlock released it. */
        char lname[64];
        snprintf(lname, sizeof lname, "k_%s", types[i]);
        assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(lname, DM_KEY_LOCK)), 0);
    }
}

/* ---- (i) fork and dlopen against the shim's own locks -------------------------- */

/* A fork while other threads map and unmap init_site heap mutexes: the
 * child must not inherit the registry's writer lock (or any other lock of
 * the shim) held by a thread that does not exist in the child. Every child
 * locks a mapped mutex and exits; forkprog reports a child that hangs. */
static void test_fork_while_threads_map_heap_mutexes_never_hangs_the_child(void **state)
{
    (void)state;
    /* Under ASan (DM_TEST_PRELOAD) the child can hang in ASan's own
     * allocator lock, which gcc 12's runtime does not take across fork()
     * as glibc's malloc does: that would be no finding about the shim. */
    if (getenv("DM_TEST_PRELOAD"))
        skip();
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"fork_lock\"; name = \"i_fork\"; },\n"
                                      "{ init_site = \"heap_mutex_new\"; name = \"i_heap\"; }");
    char *argv[] = { FORKPROG, FORK_THREADS, FORK_COUNT, NULL };
    char *out = th_out_file();
    char *text = th_finish(th_child(argv, shim_env(cfg, rs.port), out), out, 0, LOOP_RUN_MS);
    th_assert_has(text, "forks " FORK_COUNT " ok");
    free(text);
}

/* One thread loads a plugin whose mutex the config maps (the shim resolves
 * it after each load) while another loads a plugin whose constructor, run
 * under the loader's lock, loads a third: the shim must never wait for the
 * loader while holding a lock the constructor's dlopen needs. */
static void test_dlopen_from_a_constructor_while_another_thread_maps_a_plugin(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    assert_non_null(realpath(PLUGINS, dir));
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"target_lock\"; object = \"libdltarget.so\"; "
                                      "name = \"i_plugin\"; }");
    char *argv[] = { DLPROG, dir, DL_ITERS, NULL };
    char *out = th_out_file();
    char *text = th_finish(th_child(argv, shim_env(cfg, rs.port), out), out, 0, LOOP_RUN_MS);
    th_assert_has(text, "dlprog done " DL_ITERS);
    free(text);
    /* The plugin's mutex was mapped: its lock name was granted. */
    assert_true(th_cmd_int(rc, "GET %s", th_key("i_plugin", DM_KEY_TOKEN)) >= 1);
}

/* ---- (j) start-up: which process, which file, what is said ------------------- */

/* A program the config is for (or a shell it runs) changes directory and
 * then runs a helper: the helper inherits a relative DMUTEX_CONFIG that no
 * longer names the file. The first process makes it absolute, so the helper
 * reads the same file and, not being among `programs`, runs untouched. */
static void test_helper_after_chdir_finds_a_relative_config(void **state)
{
    (void)state;
    char *cfg = th_keep_file(th_write_file(".cfg", "programs = [\"lockprog\"];\n"
                                           "mutexes = ( { symbol = \"counter_lock\"; } );\n"));
    char dir[PATH_MAX], script[PATH_MAX * 2 + 64];
    snprintf(dir, sizeof dir, "%s", cfg);
    *strrchr(dir, '/') = 0;
    snprintf(script, sizeof script, "cd / && /bin/echo helper-ran");
    char *argv[] = { "/bin/sh", "-c", script, NULL };
    char **env = shim_env(strrchr(cfg, '/') + 1, rs.port);     /* relative to dir */
    char *out = th_out_file();
    char here[PATH_MAX];
    assert_non_null(getcwd(here, sizeof here));
    assert_int_equal(chdir(dir), 0);
    pid_t pid = th_child(argv, env, out);
    assert_int_equal(chdir(here), 0);
    char *text = finish(pid, out, 0);
    th_assert_has(text, "helper-ran");
    free(text);
}

/* A helper the config is not for must not be stopped by what only the
 * program needs: here the variable password_env names, which the program
 * took out of its children's environment. The program itself still is. */
static void test_helper_without_the_password_variable_runs_untouched(void **state)
{
    (void)state;
    char *cfg = th_keep_file(th_write_file(".cfg", "programs = [\"lockprog\"];\n"
                                           "redis = { password_env = \"DM_TEST_NO_SUCH_PW\"; };\n"
                                           "mutexes = ( { symbol = \"held_lock\"; } );\n"));
    char *argv[] = { "/bin/echo", "helper-ran", NULL };
    char *out = th_out_file();
    char *text = finish(th_child(argv, shim_env(cfg, rs.port), out), out, 0);
    th_assert_has(text, "helper-ran");
    free(text);
    out = th_out_file();
    text = finish(lockprog(cfg, rs.port, out, "trylock", NULL), out, EX_CONFIG);
    th_assert_has(text, "DM_TEST_NO_SUCH_PW");
    if (main_ran(text))
        fail_msg("main ran without the password:\n%s", text);
    free(text);
}

/* An empty (or truncated) file maps nothing: almost always a mistake, so
 * the program is stopped; `mutexes = ();` says it is meant, and runs. */
static void test_config_without_mutexes_exits_78_unless_mutexes_is_written_empty(void **state)
{
    (void)state;
    char *cfg = th_keep_file(th_write_file(".cfg", "%s", ""));
    char *out = th_out_file();
    char *text = finish(lockprog(cfg, rs.port, out, "trylock", NULL), out, EX_CONFIG);
    th_assert_has(text, cfg);
    th_assert_has(text, "mutexes = ();");
    if (main_ran(text))
        fail_msg("main ran with an empty config:\n%s", text);
    free(text);

    cfg = th_keep_file(th_write_file(".cfg", "lease_ms = 5000;\n"));
    out = th_out_file();
    text = finish(lockprog(cfg, rs.port, out, "trylock", NULL), out, EX_CONFIG);
    th_assert_has(text, "no mutexes");
    free(text);

    cfg = th_keep_file(th_write_file(".cfg", "mutexes = ();\n"));
    char **env = shim_env(cfg, rs.port);
    static char info[] = "DMUTEX_LOG=info";
    char *envi[] = { env[0], env[1], env[2], info, NULL };
    char *argv[] = { LOCKPROG, "trylock", NULL };
    out = th_out_file();
    text = finish(th_child(argv, envi, out), out, 0);
    th_assert_has(text, "nothing mapped");
    if (!main_ran(text))
        fail_msg("main did not run with mutexes = ();:\n%s", text);
    free(text);
}

/* A password in a redis URL never reaches a message: not the shim's, not
 * `dmutex run -r`'s, not `dmutex ls -r`'s. */
static void test_bad_redis_url_messages_hide_the_password(void **state)
{
    (void)state;
    static char bad[] = "DMUTEX_REDIS=redis://app:" SECRET_PW "@127.0.0.1:99999/";
    const char *url = bad + strlen("DMUTEX_REDIS=");
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"held_lock\"; name = \"j_url\"; }");
    char **env = shim_env(cfg, rs.port);
    env[2] = bad;
    char *argv[] = { LOCKPROG, "trylock", NULL };
    char *out = th_out_file();
    char *text = finish(th_child(argv, env, out), out, EX_CONFIG);
    th_assert_has(text, "app:***@");
    if (strstr(text, SECRET_PW))
        fail_msg("the shim's message shows the password:\n%s", text);
    free(text);

    char *run[] = { DMUTEX_CLI, "run", "-c", cfg, "-r", (char *)url, "--", LOCKPROG, "trylock", NULL };
    char *plain[] = { NULL };
    out = th_out_file();
    text = finish(th_child(run, plain, out), out, EX_CONFIG);
    th_assert_has(text, "app:***@");
    if (strstr(text, SECRET_PW))
        fail_msg("dmutex run's message shows the password:\n%s", text);
    free(text);

    char *ls[] = { DMUTEX_CLI, "ls", "-r", (char *)url, NULL };
    out = th_out_file();
    text = finish(th_child(ls, plain, out), out, 2);
    th_assert_has(text, "app:***@");
    if (strstr(text, SECRET_PW))
        fail_msg("dmutex ls's message shows the password:\n%s", text);
    free(text);
}

/* Runs `prog` as user nobody (real and effective, unless `prog` is
 * set-user-ID) with the shim's environment for `cfg`; returns its output. */
static char *run_as_nobody(const char *prog, const char *cfg, const char *shim, int want)
{
    char *argv[] = { "/usr/bin/setpriv", "--reuid=" NOBODY_ID, "--regid=" NOBODY_ID,
                     "--clear-groups", (char *)prog, (char *)shim, NULL };
    static char conf[PATH_MAX + 16], pw[] = "DM_TEST_SECURE_PW=frompath", info[] = "DMUTEX_LOG=info";
    snprintf(conf, sizeof conf, "DMUTEX_CONFIG=%s", cfg);
    char *env[] = { conf, pw, info, NULL };
    char *out = th_out_file();
    chmod(out, 0666);
    return finish(th_child(argv, env, out), out, want);
}

/* In a set-user-ID process (AT_SECURE) the environment belongs to whoever
 * started it: DMUTEX_CONFIG (and every DMUTEX_* and password_env variable)
 * is ignored, and the program is stopped rather than run unprotected. The
 * same program without the set-user-ID bit reads the same config. Needs
 * root (to make a set-user-ID-root copy), setpriv, and a temp directory
 * that allows set-user-ID; skipped otherwise. */
static void test_set_user_id_process_ignores_the_environment(void **state)
{
    (void)state;
    /* Under ASan (DM_TEST_PRELOAD) the runtime must be preloaded first,
     * which the loader refuses a set-user-ID process. */
    if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0 || getenv("DM_TEST_PRELOAD"))
        skip();
    char dir[] = "/tmp/dm-secure-XXXXXX";
    assert_non_null(mkdtemp(dir));
    chmod(dir, 0755);
    char prog[PATH_MAX], plain[PATH_MAX], shim[PATH_MAX], cfgp[PATH_MAX], cmd[PATH_MAX * 8];
    snprintf(prog, sizeof prog, "%s/secureprog", dir);
    snprintf(plain, sizeof plain, "%s/plainprog", dir);
    snprintf(shim, sizeof shim, "%s/libdmutex.so", dir);
    snprintf(cfgp, sizeof cfgp, "%s/secure.cfg", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s && cp %s %s && cp %s %s && chmod 4755 %s && chmod 755 %s",
             SECUREPROG, prog, SECUREPROG, plain, shim_path, shim, prog, plain);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(cfgp, "w");
    assert_non_null(f);
    fprintf(f, "redis = { password_env = \"DM_TEST_SECURE_PW\"; };\nmutexes = ();\n");
    fclose(f);
    chmod(cfgp, 0644);

    char *text = run_as_nobody(plain, cfgp, shim, 0);
    th_assert_has(text, "secure 0");
    th_assert_has(text, "nothing mapped");
    th_assert_has(text, "loaded");
    free(text);

    text = run_as_nobody(prog, cfgp, shim, EX_CONFIG);
    if (strstr(text, "secure 1") == NULL) {
        free(text);
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
        skip();                 /* a nosuid file system: cannot be tested here */
    }
    th_assert_has(text, "AT_SECURE");
    th_assert_has(text, "ignored");
    if (strstr(text, "loaded") || strstr(text, "secure.cfg"))
        fail_msg("the set-user-ID process read the config its environment named:\n%s", text);
    free(text);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- signals ----------------------------------------------------------------- */

/* lockprog storm-hold (a SIGALRM every 200 us, no SA_RESTART) with
 * on_redis_down = "local", through a proxy whose accept queue is full for
 * a while: its first lock connects for a second or more under the signals.
 * The server is there all along, so the hold must be Redis's (the key is
 * there, another process's trylock is EBUSY), never a local one. Before,
 * hiredis's connect took the EINTR of its poll(2) for a failure: "cannot
 * connect", and the program locked alone next to any holder. */
static void test_signals_during_the_connect_never_make_a_local_hold(void **state)
{
    (void)state;
    char *portfile = th_keep_file(th_write_file(".port", "%s", ""));
    unlink(portfile);
    char *pout = th_out_file();
    char *fargv[] = { FSERVER, "slow-accept", portfile, rs.addr, rs.port_text, SLOW_ACCEPT_MS,
                      NULL };
    th_child(fargv, NULL, pout);
    th_wait_for(portfile, "\n", RUN_MS);
    char *pt = th_read_file(portfile);
    int proxy = atoi(pt);
    free(pt);
    char *cfg = th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\non_redis_down = \"local\";\n"
                                           "redis = { connect_timeout_ms = 20000; };\n"
                                           "mutexes = ( { symbol = \"held_lock\"; "
                                           "name = \"s_storm\"; } );\n", LONG_LEASE_MS));
    char *hout = th_out_file(), *go = th_go_file();
    pid_t holder = lockprog(cfg, proxy, hout, "storm-hold", go);
    th_wait_for(hout, "locked ", RUN_MS);
    char *text = th_read_file(hout);
    if (strstr(text, "this process only") || !strstr(text, "locked 0"))
        fail_msg("the lock under signals was not Redis's:\n%s", text);
    free(text);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("s_storm", DM_KEY_LOCK)), 1);
    char *out = th_out_file();
    text = finish(lockprog(cfg, rs.port, out, "trylock", NULL), out, 0);
    th_assert_has(text, "trylock EBUSY");
    free(text);
    th_touch(go);
    text = finish(holder, hout, 0);
    th_assert_has(text, "unlocked 0");
    if (th_field_after(text, "signals ") == 0)
        fail_msg("no signal arrived:\n%s", text);
    free(text);
    text = th_read_file(pout);
    th_assert_has(text, "accepting");       /* the connect did wait for the queue */
    free(text);
}

/* ---- (f) batches: a contended grant serves its process for batch_ms ------ */

#define BATCH_TOKEN0    1000    /* the token counter's start (not 0: INCR to 1 seeds it) */
#define CHURN_MS        1500    /* how long two processes churn on one lock */

/* Two lockprog churn processes (the first in `mode0`, the second in
 * `mode1`: churn or churn-hold) on held_lock under lock name `name` with
 * `cfg` for CHURN_MS; returns the lock calls they made and sets *grants to
 * the grants the server made meanwhile (the fencing tokens drawn). The
 * second must end (it exits); the first is left running when mode0 is
 * churn-idle. */
static long long churn_two(const char *cfg, const char *name, const char *mode0,
                           const char *mode1, long long *grants, pid_t *first,
                           char **first_out)
{
    const char *tok = th_key(name, DM_KEY_TOKEN);
    assert_int_equal(th_cmd_int(rc, "INCRBY %s %d", tok, BATCH_TOKEN0), BATCH_TOKEN0);
    /* The lock's epoch names this server run, as after an earlier grant
     * here: its first grant then draws from the counter set above rather
     * than raising it to the server's clock (acquire.lua, "Restarts"). */
    redisReply *info = th_cmd(rc, "INFO server");
    const char *id = info->type == REDIS_REPLY_STRING ? strstr(info->str, "run_id:") : NULL;
    assert_non_null(id);
    char run_id[48];
    snprintf(run_id, sizeof run_id, "%.40s", id + 7);
    freeReplyObject(th_cmd(rc, "SET %s %s", th_key(name, DM_KEY_EPOCH), run_id));
    freeReplyObject(info);
    char *out0 = th_out_file(), *out1 = th_out_file(), *stop = th_go_file();
    pid_t p0 = lockprog(cfg, rs.port, out0, mode0, stop);
    pid_t p1 = lockprog(cfg, rs.port, out1, mode1, stop);
    usleep(CHURN_MS * 1000);
    th_touch(stop);
    char *t1 = finish(p1, out1, 0);
    th_wait_for(out0, "churn ", RUN_MS);
    char *t0 = th_read_output(out0);
    long long n0 = th_field_after(t0, "churn "), n1 = th_field_after(t1, "churn ");
    th_assert_has(t0, " 0 0\n");      /* no lock call failed */
    th_assert_has(t1, " 0 0\n");
    assert_true(n0 > 0 && n1 > 0);     /* both got the lock */
    *grants = th_cmd_int(rc, "GET %s", tok) - BATCH_TOKEN0;
    free(t1);
    if (first) {
        *first = p0;
        *first_out = t0;
    } else {
        free(finish(p0, out0, 0));
        free(t0);
    }
    return n0 + n1;
}

/* While another process queues, a grant serves the holder's lock calls
 * for batch_ms (5 by default) before it goes on: far fewer grants than
 * lock calls, and both processes progress. */
static void test_contended_processes_lock_in_batches_not_one_grant_per_call(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"q_batch\"; }");
    long long grants, calls = churn_two(cfg, "q_batch", "churn", "churn", &grants, NULL,
                                        NULL);
    print_message("batches: %lld lock calls, %lld grants\n", calls, grants);
    assert_true(grants >= 2);           /* the lock went from one process to the other */
    assert_true(grants * 2 < calls);
}

/* batch_ms = 0: every lock call queues anew and is a grant of its own. */
static void test_batch_ms_0_makes_every_lock_call_a_grant(void **state)
{
    (void)state;
    char *cfg = th_config_top(LONG_LEASE_MS, "batch_ms = 0;\n",
                              "{ symbol = \"held_lock\"; name = \"q_nobatch\"; }");
    long long grants, calls = churn_two(cfg, "q_nobatch", "churn", "churn", &grants, NULL,
                                        NULL);
    assert_int_equal(grants, calls);
}

/* Critical sections of 3 ms (lockprog churn-hold), longer than
 * batch_hold_us (1000 by default): a batch does not go on after one, so
 * every lock call is a grant of its own, as with batch_ms = 0, and the
 * process that waited gets the lock at the next unlock (before, such a
 * batch kept it for 2 sections: about half as many grants as calls). */
static void test_a_batch_does_not_go_on_after_a_long_critical_section(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"q_long\"; }");
    long long grants, calls = churn_two(cfg, "q_long", "churn-hold", "churn-hold", &grants,
                                        NULL, NULL);
    print_message("3 ms sections: %lld lock calls, %lld grants\n", calls, grants);
    assert_int_equal(grants, calls);
}

/* batch_hold_us above the sections' 3 ms: the batch serves them again
 * (the second section of a 5 ms batch joins it). */
static void test_batch_hold_us_lets_a_batch_serve_longer_sections(void **state)
{
    (void)state;
    char *cfg = th_config_top(LONG_LEASE_MS, "batch_hold_us = 10000;\n",
                              "{ symbol = \"held_lock\"; name = \"q_longbatch\"; }");
    long long grants, calls = churn_two(cfg, "q_longbatch", "churn-hold", "churn-hold",
                                        &grants, NULL, NULL);
    print_message("3 ms sections, batch_hold_us = 10000: %lld lock calls, %lld grants\n",
                  calls, grants);
    assert_true(grants >= 2);
    assert_true(grants * 4 < calls * 3);
}

/* A process whose last unlock came while the other queued, and which then
 * stops locking but lives on (its watchdog would renew a kept hold
 * forever), gives the lock back within the linger: the other runs on. */
static void test_a_process_that_stops_locking_mid_batch_lets_the_waiter_in(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"q_linger\"; }");
    pid_t idle;
    char *idle_out;
    long long grants;
    churn_two(cfg, "q_linger", "churn-idle", "churn", &grants, &idle, &idle_out);
    free(idle_out);
    /* The churner exited (finish); the idle one holds nothing: a third
     * process locks at once, with the idle one still alive. */
    char *out = th_out_file();
    pid_t p = lockprog(cfg, rs.port, out, "lock", NULL);
    char *text = finish(p, out, 0);
    th_assert_has(text, "locked 0");
    free(text);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("q_linger", DM_KEY_LOCK)), 0);
    assert_int_equal(kill(idle, 0), 0);     /* still alive: it gave the lock back itself */
}

/* A process whose image ends (_exit, exec) right after an unlock that kept
 * its batch's hold for the next lock: the hold goes back before the image
 * does, so the other process goes on at once. Left to its lease, or to a
 * handed-over lock's claim (renew_ms), the lock would stay longer than the
 * run allows (RUN_MS). */
#define IMAGE_LEASE_MS  60000L
#define IMAGE_RENEW_MS  25000L
static void image_end_after_a_lingering_unlock(const char *mode, const char *name)
{
    /* programs: the exec'd /bin/true runs untouched. */
    char *cfg = th_keep_file(th_write_file(".cfg", "programs = [\"lockprog\"];\nlease_ms = %ld;\n"
                                           "renew_ms = %ld;\nmutexes = ( { symbol = "
                                           "\"held_lock\"; name = \"%s\"; } );\n",
                                           IMAGE_LEASE_MS, IMAGE_RENEW_MS, name));
    char *out0 = th_out_file(), *out1 = th_out_file(), *stop0 = th_go_file(),
         *stop1 = th_go_file();
    pid_t p0 = lockprog(cfg, rs.port, out0, mode, stop0);
    pid_t p1 = lockprog(cfg, rs.port, out1, "churn", stop1);
    usleep(CHURN_MS * 1000);
    th_touch(stop0);
    free(finish(p0, out0, 0));
    usleep(200 * 1000);             /* the churner's turn again, whatever the lock did */
    th_touch(stop1);
    char *text = finish(p1, out1, 0);
    th_assert_has(text, " 0 0\n");
    free(text);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(name, DM_KEY_LOCK)), 0);
}

static void test_exit_right_after_a_batch_unlock_gives_the_lock_back(void **state)
{
    (void)state;
    image_end_after_a_lingering_unlock("churn-_exit", "q_exit");
}

static void test_exec_right_after_a_batch_unlock_gives_the_lock_back(void **state)
{
    (void)state;
    image_end_after_a_lingering_unlock("churn-exec", "q_exec");
}

/* A process stopped (SIGSTOP) right after an unlock that kept its batch's
 * hold, past that hold's lease: nobody was inside, so the loss its
 * watchdog finds once it is continued is logged, not fatal (the default
 * on_lease_lost = "abort" is for a critical section that ran unprotected). */
static void test_a_process_stopped_while_its_batch_lingers_goes_on_when_continued(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"held_lock\"; name = \"q_stop\"; }");
    char *out0 = th_out_file(), *out1 = th_out_file(), *stop0 = th_go_file(),
         *stop1 = th_go_file();
    pid_t p0 = lockprog(cfg, rs.port, out0, "churn-stop", stop0);
    pid_t p1 = lockprog(cfg, rs.port, out1, "churn", stop1);
    usleep(CHURN_MS * 1000);
    th_touch(stop0);
    int st;
    assert_int_equal(waitpid(p0, &st, WUNTRACED), p0);
    assert_true(WIFSTOPPED(st));
    usleep((SHORT_LEASE_MS + 1000) * 1000);     /* its hold's lease runs out */
    kill(p0, SIGCONT);
    char *text = finish(p0, out0, 0);
    th_assert_has(text, "continued");
    free(text);
    th_touch(stop1);
    text = finish(p1, out1, 0);
    th_assert_has(text, " 0 0\n");
    free(text);
}

/* A process that locks and unlocks without pause keeps the lock no longer
 * than its batch: another process's one lock call gets through. */
static void test_a_churning_process_cannot_starve_another(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"q_starve\"; }");
    char *cout = th_out_file(), *stop = th_go_file();
    pid_t churner = lockprog(cfg, rs.port, cout, "churn", stop);
    usleep(300 * 1000);
    for (int i = 0; i < 3; i++) {
        char *out = th_out_file();
        pid_t p = lockprog(cfg, rs.port, out, "lock", NULL);
        char *text = finish(p, out, 0);
        th_assert_has(text, "locked 0");
        free(text);
    }
    th_touch(stop);
    char *text = finish(churner, cout, 0);
    th_assert_has(text, " 0 0\n");
    free(text);
}

/* The server's clock in ms (a queued waiter's deadline is on it). */
static long long server_ms(void)
{
    redisReply *r = th_cmd(rc, "TIME");
    long long ms = atoll(r->element[0]->str) * 1000 + atoll(r->element[1]->str) / 1000;
    freeReplyObject(r);
    return ms;
}

/* A waiter of another process, as acquire.lua queues one, alive until
 * `until` (server ms): the queue's head gets the lock at the next release. */
static void queue_waiter(const char *name, const char *member, long long until)
{
    th_cmd_int(rc, "RPUSH %s %s", th_key(name, DM_KEY_QUEUE), member);
    th_cmd_int(rc, "ZADD %s %lld %s", th_key(name, DM_KEY_QTIME), until, member);
}

#define GRACE_MS 20000  /* DMUTEX_TEST_HANDED_GRACE_MS: far past any call here */

/* lockprog MODE GO [MS] (handover, handover-lock) under the shim with the
 * grace after a handover widened to grace_ms; returns its pid once it
 * holds held_lock after a contended grant: a waiter queued by hand before
 * it, alive for a second, made it wait (a batch). */
static pid_t handover_prog(const char *cfg, const char *name, const char *out, const char *mode,
                           const char *go, const char *ms, long grace_ms)
{
    queue_waiter(name, "other:1|1", server_ms() + 1000);
    static struct th_shim_env e;
    static char grace[64];
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", rs.port);
    snprintf(grace, sizeof grace, "DMUTEX_TEST_HANDED_GRACE_MS=%ld", grace_ms);
    const char *extra[] = { grace, NULL };
    char *argv[] = { LOCKPROG, (char *)mode, (char *)go, (char *)ms, NULL };
    pid_t p = th_child(argv, th_shim_env_extra(&e, cfg, url, NULL, extra), out);
    th_wait_for(out, "locked 0", RUN_MS);
    usleep(20 * 1000);          /* past the 5 ms batch: its unlock gives the hold back */
    return p;
}

/* handover_prog's whole run when nothing happens between the handover
 * and the end: go at once, then its output (caller frees). */
static char *handover_output(const char *cfg, const char *name, const char *mode, const char *ms,
                             long grace_ms)
{
    char *out = th_out_file(), *go = th_go_file();
    pid_t p = handover_prog(cfg, name, out, mode, go, ms, grace_ms);
    th_touch(go);
    return finish(p, out, 0);
}

/* Right after its batch's unlock handed the lock to the next process in
 * line, a process waits a moment before it asks again (hold_acquire's
 * grace after a handover; widened here): a trylock meanwhile does not
 * wait, nor a timed lock whose deadline comes first (ETIMEDOUT at its
 * deadline, not after the grace). The next in line is a waiter queued in
 * Redis by hand. */
static void test_right_after_a_handover_trylock_and_an_earlier_deadline_do_not_wait(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"g_grace\"; }");
    const long wait = 300;
    char dl[16];
    snprintf(dl, sizeof dl, "%ld", wait);
    char *out = th_out_file(), *go = th_go_file();
    pid_t p = handover_prog(cfg, "g_grace", out, "handover", go, dl, GRACE_MS);
    queue_waiter("g_grace", "other:2|1", server_ms() + 10L * RUN_MS);
    th_touch(go);
    char *text = finish(p, out, 0);
    th_assert_has(text, "handover-try EBUSY");
    assert_true(th_field_after(text, "handover-try EBUSY ") < SLACK_MS);   /* not the grace */
    long long took = th_field_after(text, "handover-timed ETIMEDOUT ");
    if (took < wait - 1 || took > wait + SLACK_MS)
        fail_msg("ETIMEDOUT after %lld ms for a %ld ms deadline", took, wait);
    redisReply *r = th_cmd(rc, "HGETALL %s", th_key("g_grace", DM_KEY_LOCK));
    assert_int_equal(r->elements, 2);
    assert_string_equal(r->element[0]->str, "other:2");   /* handed over to it */
    freeReplyObject(r);
    free(text);
}

/* The same, but nobody queues any more when the batch ends: its release
 * leaves the lock free, and a timed lock whose deadline comes before the
 * grace's end takes it (POSIX: no timeout on a mutex it could take). */
static void test_right_after_a_batch_a_timed_lock_takes_the_lock_it_left_free(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"g_free\"; }");
    char *text = handover_output(cfg, "g_free", "handover", "300", GRACE_MS);
    th_assert_has(text, "handover-try 0");
    th_assert_has(text, "handover-timed 0");
    free(text);
}

/* batch_ms = 0: lockprog handover-lock gets a contended grant (a waiter
 * queued by hand before it), holds it `section_ms`, unlocks, which hands
 * the lock to a second waiter queued by hand meanwhile, and locks again
 * at once. Returns how long after the handover that lock call's request
 * was in the queue; the grace is widened to FIFO_GRACE_MS (so is the
 * section the grace needs, hold_release). */
#define FIFO_GRACE_MS 2000
static long long fifo_relock_after(const char *name, long section_ms)
{
    char entry[96];
    snprintf(entry, sizeof entry, "{ symbol = \"held_lock\"; name = \"%s\"; }", name);
    char *cfg = th_config_top(LONG_LEASE_MS, "batch_ms = 0;\n", entry);
    char *out = th_out_file(), *go = th_go_file();
    pid_t p = handover_prog(cfg, name, out, "handover-lock", go, NULL, FIFO_GRACE_MS);
    queue_waiter(name, "other:2|1", server_ms() + 10L * RUN_MS);
    usleep(section_ms * 1000);
    const char *lock = th_key(name, DM_KEY_LOCK), *qtime = th_key(name, DM_KEY_QTIME);
    th_touch(go);
    long long until = th_now_ms() + RUN_MS;
    while (th_cmd_int(rc, "HEXISTS %s other:2", lock) != 1) {   /* the handover */
        if (th_now_ms() > until)
            fail_msg("the unlock never handed the lock to the waiter queued by hand");
        usleep(1000);
    }
    long long handed = th_now_ms();
    until = handed + FIFO_GRACE_MS + RUN_MS;
    while (th_cmd_int(rc, "ZCARD %s", qtime) != 1) {            /* the next lock asked */
        if (th_now_ms() > until)
            fail_msg("the next lock call never asked");
        usleep(5000);
    }
    long long after = th_now_ms() - handed;
    kill(p, SIGKILL);           /* it waits for other:2, which never comes */
    th_wait_end(p, RUN_MS, NULL, NULL);
    return after;
}

/* batch_ms = 0: no batch, but the unlock of a contended grant's section
 * at least as long as the grace is still the handover it most likely is,
 * so the process's next lock call waits for the grace before its request:
 * sent at once, it reached the server with the release, whose handover
 * notice then left only after this request's script had run too
 * (handoffs at K = 2 with 2 ms holds: 130-170 us before, 95-125 us with
 * the grace, in interleaved runs on the dev VM). */
static void test_with_batch_ms_0_a_handover_still_delays_the_next_request(void **state)
{
    (void)state;
    long long after = fifo_relock_after("g_fifo", FIFO_GRACE_MS + 500);
    print_message("asked %lld ms after the handover\n", after);
    if (after < FIFO_GRACE_MS / 2)
        fail_msg("the next lock call asked %lld ms after the handover, inside the grace", after);
}

/* The same after a short section: no grace (the new holder's section
 * would not outlast it either, and both processes could sit in one with
 * the lock free: K = 2 with empty sections lost a fifth of its
 * throughput to it, the review found). */
static void test_with_batch_ms_0_a_short_section_starts_no_grace(void **state)
{
    (void)state;
    long long after = fifo_relock_after("g_fifo_short", 0);
    print_message("asked %lld ms after the handover\n", after);
    if (after >= FIFO_GRACE_MS / 2)
        fail_msg("the next lock call waited %lld ms after a short section's handover", after);
}


/* Another thread's lock call waiting out the grace after a handover (here
 * widened to SIB_GRACE_MS) must not make a sibling mutex of the name busy:
 * nobody holds the name in Redis (the release left it free), nobody holds
 * sib_lock, so a trylock of it succeeds and so does a timed lock due long
 * before the grace's end. (The grace used to be slept with the name
 * ACQUIRING: the trylock got EBUSY and the timed lock ETIMEDOUT.) */
#define SIB_GRACE_MS 3000
static void test_a_lock_waiting_out_the_grace_leaves_a_sibling_mutex_free(void **state)
{
    (void)state;
    char *cfg = th_config_top(LONG_LEASE_MS, "batch_ms = 0;\n",
                              "{ symbol = \"held_lock\"; name = \"g_sib\"; },"
                              " { symbol = \"sib_lock\"; name = \"g_sib\"; }");
    char *text = handover_output(cfg, "g_sib", "handover-sibling", "1000", SIB_GRACE_MS);
    th_assert_has(text, "sibling-try 0");
    th_assert_has(text, "sibling-timed 0");
    th_assert_has(text, "relocked 0");
    free(text);
}

/* A child forked right after its parent's handover, inside the grace
 * that follows it (widened to GRACE_MS), handed nothing over: its first
 * lock of the name, free in Redis, is granted at once. (The child
 * inherited the parent's grace and slept through it.) */
static void test_a_child_forked_in_the_grace_locks_without_waiting_for_it(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"g_fork\"; }");
    char *out = th_out_file(), *go = th_go_file(), *go2 = th_go_file();
    pid_t p = handover_prog(cfg, "g_fork", out, "handover-fork", go, go2, GRACE_MS);
    th_touch(go);
    th_wait_for(out, "handed", RUN_MS);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("g_fork", DM_KEY_LOCK)), 0);   /* free */
    th_touch(go2);
    char *text = finish(p, out, 0);
    long long took = th_field_after(text, "child-locked 0 ");
    if (took < 0 || took > SLACK_MS)
        fail_msg("the child's lock took %lld ms (the parent's grace: %d ms):\n%s", took,
                 GRACE_MS, text);
    free(text);
}

/* pthread_mutex_lock is no cancellation point: a thread cancelled while
 * its lock waits out the grace (widened to CANCEL_GRACE_MS) gets the lock,
 * returns, and is cancelled at its next cancellation point; the name is
 * left as it should be, and the next lock call takes it. */
#define CANCEL_GRACE_MS 1500
static void test_a_lock_cancelled_in_the_grace_returns_and_leaves_the_name_usable(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"held_lock\"; name = \"g_cancel\"; }");
    char *text = handover_output(cfg, "g_cancel", "handover-cancel", NULL, CANCEL_GRACE_MS);
    th_assert_has(text, "thread-locked 0");
    th_assert_has(text, "cancelled YES");
    th_assert_has(text, "relocked 0");
    assert_true(th_field_after(text, "relocked 0 ") < SLACK_MS);
    free(text);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("g_cancel", DM_KEY_LOCK)), 0);
}

#define T(f) cmocka_unit_test_teardown(f, cleanup)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_mapped_mutex_keeps_a_counter_exact_across_processes),
        T(test_without_the_shim_the_counter_loses_updates),
        T(test_unmapped_mutex_makes_no_redis_traffic),
        T(test_trylock_is_ebusy_while_another_process_holds_the_mutex),
        T(test_timedlock_times_out_at_its_deadline_while_held_elsewhere),
        T(test_killed_holder_frees_the_lock_after_its_lease),
        T(test_exit_while_holding_releases_the_lock),
        T(test_bad_config_exits_78_before_main_naming_file_and_line),
        T(test_missing_required_symbol_exits_78_naming_it),
        T(test_process_not_in_programs_runs_untouched),
        T(test_unset_dmutex_config_exits_78_with_a_clear_message),
        T(test_bad_dmutex_redis_url_exits_78_naming_it),
        T(test_lock_keeps_retrying_and_logs_while_redis_is_unreachable),
        T(test_lock_blocked_by_an_outage_succeeds_once_redis_answers),
        T(test_trylock_is_ebusy_while_redis_is_unreachable),
        T(test_timedlock_times_out_while_redis_is_unreachable),
        T(test_server_closing_connections_never_kills_the_program_block),
        T(test_server_closing_connections_never_kills_the_program_error),
        T(test_recursive_nested_locks_cost_no_extra_round_trip),
        T(test_errorcheck_relock_is_edeadlk_without_redis_traffic),
        T(test_errorcheck_unlock_by_another_thread_is_eperm_without_redis_traffic),
        T(test_destroy_of_a_held_mapped_mutex_is_ebusy),
        T(test_fork_while_threads_map_heap_mutexes_never_hangs_the_child),
        T(test_dlopen_from_a_constructor_while_another_thread_maps_a_plugin),
        T(test_helper_after_chdir_finds_a_relative_config),
        T(test_helper_without_the_password_variable_runs_untouched),
        T(test_config_without_mutexes_exits_78_unless_mutexes_is_written_empty),
        T(test_bad_redis_url_messages_hide_the_password),
        T(test_set_user_id_process_ignores_the_environment),
        T(test_signals_during_the_connect_never_make_a_local_hold),
        T(test_contended_processes_lock_in_batches_not_one_grant_per_call),
        T(test_batch_ms_0_makes_every_lock_call_a_grant),
        T(test_a_batch_does_not_go_on_after_a_long_critical_section),
        T(test_batch_hold_us_lets_a_batch_serve_longer_sections),
        T(test_a_process_that_stops_locking_mid_batch_lets_the_waiter_in),
        T(test_a_churning_process_cannot_starve_another),
        T(test_exit_right_after_a_batch_unlock_gives_the_lock_back),
        T(test_exec_right_after_a_batch_unlock_gives_the_lock_back),
        T(test_a_process_stopped_while_its_batch_lingers_goes_on_when_continued),
        T(test_right_after_a_handover_trylock_and_an_earlier_deadline_do_not_wait),
        T(test_right_after_a_batch_a_timed_lock_takes_the_lock_it_left_free),
        T(test_with_batch_ms_0_a_handover_still_delays_the_next_request),
        T(test_with_batch_ms_0_a_short_section_starts_no_grace),
        T(test_a_lock_waiting_out_the_grace_leaves_a_sibling_mutex_free),
        T(test_a_child_forked_in_the_grace_locks_without_waiting_for_it),
        T(test_a_lock_cancelled_in_the_grace_returns_and_leaves_the_name_usable),
    };
    return cmocka_run_group_tests(tests, group_setup, th_group_teardown);
}
