/* test_conds: cluster-wide condition variables (conds entries), with real
 * processes under the shim: a bounded queue kept in a data server, fed and
 * drained by processes on two network-namespace "machines"; broadcast,
 * the lost-wake-up window, timeouts, clocks, cancellation, the
 * subscriber's reconnect and an unlisted cond. The program is
 * tests/progs/condprog (its header lists the scenarios).
 *
 * Every wait in the programs is a 30 s timed wait that fails the program
 * on a timeout: a wake-up that only a poll or a timeout would bring fails
 * the test. Bounds are one-sided and generous. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "checker.h"
#include "harness.h"

#define CONDPROG      TH_BUILD "/tests/progs/condprog"
#define GROUP_ALARM_S 240
#define RUN_MS        25000L    /* a scenario's programs end by then (their waits are 30 s) */
#define QUEUE_ITEMS   200       /* per producer */
#define QUEUE_CAP     3
#define WORK_US       "1500"    /* mean work per item outside the lock, both sides */
#define GAP_MS        1500      /* DMUTEX_TEST_COND_GAP_MS of the lost-wake-up test */
#define SHORT_WAIT_MS 2000      /* the unlisted cond's wait, which must time out */
#define TIMEOUT_MS    700       /* the timed waits nobody signals */
#define SLACK_MS      5000      /* how late a timed wait may return on a busy machine */
#define MUTE_TIMEOUT_MS 4000L   /* command_timeout_ms against the server that never answers */
#define QUIET_WAIT    "4000"    /* the sleeping waiter's timed wait (ms) */
#define QUIET_MS      2000      /* how long it is watched for traffic */
#define LAT_MAX       4096

static struct th_checker chk;
static struct th_net net;
static struct th_redis ls, ds;          /* the lock server, the data server */
static redisContext *lc, *dc;
static char shim_path[PATH_MAX], prog_path[PATH_MAX];
static char prefix[32];
static int tseq;

static const char cfg_text[] =
    "mutexes = ( { symbol = \"q_lock\"; name = \"cq_lock\"; },\n"
    "  { symbol = \"ec_lock\"; name = \"cq_ec\"; }, { symbol = \"rc_lock\"; name = \"cq_rc\"; },\n"
    "  { symbol = \"rb_lock\"; name = \"cq_rb\"; }, { symbol = \"rb2_lock\"; name = \"cq_rb2\"; } );\n"
    "conds = (\n"
    "  { symbol = \"not_empty\"; name = \"cq_ne\"; },\n"
    "  { symbol = \"not_full\"; name = \"cq_nf\"; },\n"
    "  { symbol = \"mono_cond\"; name = \"cq_mono\"; },\n"
    "  { init_site = \"chan_new\"; name = \"cq_chan\"; }\n"
    ");\n";

static void measured(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void measured(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("measured: %s\n", buf);
    fflush(stdout);
}

/* condprog MODE ARGS... (NULL-terminated) on machine `ns` (NULL: here),
 * under the shim with the group's config, output to `out`, with extra
 * environment entries `extra` (NULL-terminated, or NULL). */
static const char *cfg_path;    /* NULL: the group's config */
static const char *redis_url;   /* NULL: the lock server */
static int no_shim;             /* run it as a plain program: glibc's answers */

static pid_t prog(const char *ns, const char *out, const char *const *extra, const char *mode, ...)
{
    static char *cfg;
    if (!cfg)
        cfg = th_write_file(".cfg", "%s", cfg_text);    /* the group's: removed at its end */
    static struct th_shim_env e;
    static char *plain[] = { NULL };
    char **env = no_shim ? (extra ? (char **)extra : plain)
                         : th_shim_env_extra(&e, cfg_path ? cfg_path : cfg,
                                             redis_url ? redis_url : ls.url, "info", extra);
    const char *args[16] = { mode, ds.addr, ds.port_text, prefix };
    int k = 4;
    va_list ap;
    va_start(ap, mode);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && k < 15;)
        args[k++] = a;
    va_end(ap);
    args[k] = NULL;
    if (ns && net.up)
        return th_checker_prog(&chk, NULL, &net, ns, env, prog_path, args, out);
    char *argv[17] = { prog_path };
    for (int i = 0; i <= k; i++)
        argv[i + 1] = (char *)args[i];
    return th_child(argv, env, out);
}

static const char *machine(int i)
{
    return net.up ? net.ns[i] : NULL;
}

static char *finish(pid_t p, const char *out)
{
    return th_finish(p, out, 0, RUN_MS);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Adds the "lat US" lines of `text` to lat[]. */
static void collect_lat(const char *text, long long *lat, int *n)
{
    for (const char *p = strstr(text, "lat "); p && *n < LAT_MAX; p = strstr(p + 1, "lat "))
        if (p == text || p[-1] == '\n')
            lat[(*n)++] = atoll(p + 4);
}

/* Waits until `channel` has `n` subscribers on the lock server. */
static void wait_numsub(const char *channel, long long n)
{
    long long t0 = th_now_ms();
    while (th_numsub(lc, channel) != n) {
        if (th_now_ms() - t0 > RUN_MS)
            fail_msg("%s never had %lld subscribers (%lld)", channel, n, th_numsub(lc, channel));
        usleep(10000);
    }
}

/* ---- fixtures ------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (th_built_paths(TH_SHIM, shim_path, CONDPROG, prog_path, NULL) != 0)
        return -1;
    th_machines_group_start(&chk, &net, GROUP_ALARM_S, "test_conds",
                            "the queue runs on this machine only");
    /* Both servers where the machines reach them. */
    th_redis_start(&ls, net.up ? net.host_ip : NULL, NULL);
    th_redis_start(&ds, net.up ? net.host_ip : NULL, NULL);
    lc = th_redis_connect(&ls);
    dc = th_redis_connect(&ds);
    return 0;
}

/* The Redis Cluster of the one test that needs it: stopped by the next
 * test's setup or the group's end, so a failed test leaves no URL behind. */
static struct th_rcluster rk;
static int rk_up;

static void rcluster_down(void)
{
    redis_url = NULL;
    if (rk_up)
        th_rcluster_stop(&rk);
    rk_up = 0;
}

static int group_teardown(void **state)
{
    rcluster_down();
    th_redis_drop(&ls, &lc);
    th_redis_drop(&ds, &dc);
    return th_machines_group_teardown(state);
}

static int test_setup(void **state)
{
    snprintf(prefix, sizeof prefix, "t%d", ++tseq);
    rcluster_down();
    cfg_path = NULL;
    no_shim = 0;
    return th_machines_test_setup(state);
}

/* ---- the bounded queue ----------------------------------------------------- */

/* Two producers and two consumers, one of each per machine, on not_full
 * and not_empty with a mapped mutex: every item is taken exactly once and
 * nobody waits out a 30 s timeout. Prints the wake-up latency from a
 * signal in one process to the return of a waiter in another. */
static void test_queue_on_two_machines_consumes_every_item_once_without_timeouts(void **s)
{
    (void)s;
    char items[16], total[16], cap[16];
    snprintf(items, sizeof items, "%d", QUEUE_ITEMS);
    snprintf(total, sizeof total, "%d", 2 * QUEUE_ITEMS);
    snprintf(cap, sizeof cap, "%d", QUEUE_CAP);
    char *out[4];
    pid_t p[4];
    long long t0 = th_now_ms();
    for (int i = 0; i < 2; i++) {
        out[i] = th_out_file();
        p[i] = prog(machine(i), out[i], NULL, "consume", total, WORK_US, NULL);
    }
    for (int i = 0; i < 2; i++) {
        out[2 + i] = th_out_file();
        p[2 + i] = prog(machine(i), out[2 + i], NULL, "produce", items, cap, WORK_US, NULL);
    }
    static long long lat[LAT_MAX];
    int nlat = 0;
    long consumed = 0;
    for (int i = 0; i < 4; i++) {
        char *text = finish(p[i], out[i]);
        if (strstr(text, "dup "))
            fail_msg("an item was taken twice:\n%s", text);
        if (i < 2)
            consumed += (long)th_field_after(text, "consumed ");
        else
            th_assert_has(text, "produced ");
        collect_lat(text, lat, &nlat);
        free(text);
    }
    long long took = th_now_ms() - t0;
    assert_int_equal(consumed, 2 * QUEUE_ITEMS);
    char key[64];
    snprintf(key, sizeof key, "%s:seen", prefix);
    assert_int_equal(th_cmd_int(dc, "SCARD %s", key), 2 * QUEUE_ITEMS);
    snprintf(key, sizeof key, "%s:q", prefix);
    assert_int_equal(th_cmd_int(dc, "LLEN %s", key), 0);
    assert_true(nlat > 0);
    qsort(lat, (size_t)nlat, sizeof lat[0], cmp_ll);
    measured("queue of %d items (cap %d), 2 producers + 2 consumers on %s: %lld ms; "
             "cross-process wake-up latency over %d wake-ups: p50 %.2f ms, p99 %.2f ms, "
             "max %.2f ms", 2 * QUEUE_ITEMS, QUEUE_CAP,
             net.up ? "two machines" : "one machine", took, nlat, lat[nlat / 2] / 1000.0,
             lat[(nlat * 99) / 100] / 1000.0, lat[nlat - 1] / 1000.0);
}

/* ---- targeted scenarios --------------------------------------------------- */

/* A broadcast in one process wakes the waiters of three others. */
static void test_broadcast_wakes_every_waiter_in_three_processes(void **s)
{
    (void)s;
    char *out[3];
    pid_t w[3];
    for (int i = 0; i < 3; i++) {
        out[i] = th_out_file();
        w[i] = prog(machine(i % 2), out[i], NULL, "waitgo", NULL);
    }
    char *gout = th_out_file();
    pid_t g = prog(NULL, gout, NULL, "go", "3", "broadcast", NULL);
    char *text = finish(g, gout);
    long long sent = th_field_after(text, "sent ");
    free(text);
    for (int i = 0; i < 3; i++) {
        text = finish(w[i], out[i]);
        long long woken = th_field_after(text, "woken ");
        measured("broadcast -> waiter %d back: %lld ms", i, woken - sent);
        free(text);
    }
}

/* With Redis Cluster the waiters subscribe with SSUBSCRIBE on the node of
 * the cond channel's slot: a signal must be a SPUBLISH sent there (a plain
 * PUBLISH reaches no shard subscriber, and the waiters slept to their 30 s
 * timeout). */
static void test_broadcast_on_a_redis_cluster_wakes_every_waiter(void **s)
{
    (void)s;
    th_rcluster_start(&rk, 2000);
    rk_up = 1;
    redis_url = rk.url;
    char *out[3];
    pid_t w[3];
    for (int i = 0; i < 3; i++) {
        out[i] = th_out_file();
        w[i] = prog(NULL, out[i], NULL, "waitgo", NULL);
    }
    char *gout = th_out_file();
    pid_t g = prog(NULL, gout, NULL, "go", "3", "broadcast", NULL);
    char *text = finish(g, gout);
    long long sent = th_field_after(text, "sent ");
    free(text);
    for (int i = 0; i < 3; i++) {
        text = finish(w[i], out[i]);
        measured("Redis Cluster: broadcast -> waiter %d back: %lld ms", i,
                 th_field_after(text, "woken ") - sent);
        free(text);
    }
    g = prog(NULL, gout = th_out_file(), NULL, "timeout", "300", "realtime", NULL);
    text = finish(g, gout);     /* a timed wait with nobody signalling still times out */
    th_assert_has(text, "rc ETIMEDOUT");
    free(text);
    rcluster_down();
}

/* A signal sent right after the waiter gave its cluster hold back, before
 * it sleeps (the waiter pauses GAP_MS there), still wakes it: the waiter
 * counted the channel before it let go. */
static void test_signal_in_the_window_after_the_cluster_release_is_not_lost(void **s)
{
    (void)s;
    char gap[48];
    snprintf(gap, sizeof gap, "DMUTEX_TEST_COND_GAP_MS=%d", GAP_MS);
    const char *extra[] = { gap, NULL };
    char *wout = th_out_file(), *gout = th_out_file();
    pid_t w = prog(machine(0), wout, extra, "waitgo", NULL);
    pid_t g = prog(machine(1), gout, NULL, "go", "1", "signal", NULL);
    char *text = finish(g, gout);
    long long sent = th_field_after(text, "sent ");
    free(text);
    text = finish(w, wout);
    long long woken = th_field_after(text, "woken ");
    free(text);
    measured("signal sent in the waiter's %d ms gap: the waiter was back %lld ms later",
             GAP_MS, woken - sent);
    /* The signal came inside the gap (the waiter cannot be back before
     * its gap ends), and it woke the waiter long before its timeout. */
    if (woken - sent < GAP_MS / 2)
        fail_msg("the signal came %lld ms before the waiter was back: not inside the "
                 "%d ms gap, the test did not test the window", woken - sent, GAP_MS);
}

/* Timed waits nobody signals end with ETIMEDOUT by their deadline,
 * holding the mutex and its cluster hold (a fencing token) again. */
static void timed_scenario(void **s)
{
    const char *clk = *s;
    char ms[16];
    snprintf(ms, sizeof ms, "%d", TIMEOUT_MS);
    char *out = th_out_file();
    pid_t p = prog(NULL, out, NULL, "timeout", ms, clk, NULL);
    char *text = finish(p, out);
    th_assert_has(text, "rc ETIMEDOUT ");
    long long el = th_field_after(text, "elapsed ");
    long long tok = th_field_after(text, "token ");
    measured("%s timed wait of %d ms: returned after %lld ms", clk, TIMEOUT_MS, el);
    if (el < TIMEOUT_MS - 1 || el > TIMEOUT_MS + SLACK_MS)
        fail_msg("a %d ms %s wait returned after %lld ms:\n%s", TIMEOUT_MS, clk, el, text);
    if (tok <= 0)
        fail_msg("no cluster hold after the wait returned:\n%s", text);
    free(text);
}

/* A timed wait whose subscription cannot be made (a server that accepts
 * connections and never answers, command timeout 4 s) still returns by its
 * deadline: the subscription is cut to the time the wait has. */
static void test_timedwait_returns_by_its_deadline_when_redis_does_not_answer(void **s)
{
    (void)s;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 16), 0);   /* never accepted: connects succeed, replies never come */
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    char url[64], ms[16];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", ntohs(a.sin_port));
    snprintf(ms, sizeof ms, "%d", TIMEOUT_MS);
    cfg_path = th_keep_file(th_write_file(".cfg", "redis = { command_timeout_ms = %ld; };\n%s",
                                          MUTE_TIMEOUT_MS, cfg_text));
    redis_url = url;
    char *out = th_out_file();
    pid_t p = prog(NULL, out, NULL, "timeout", ms, "plain", NULL);
    cfg_path = NULL;
    redis_url = NULL;
    char *text = finish(p, out);
    close(fd);
    th_assert_has(text, "rc ETIMEDOUT ");
    long long el = th_field_after(text, "elapsed ");
    measured("a %d ms timed wait, Redis silent (command timeout %ld ms): returned after %lld ms",
             TIMEOUT_MS, MUTE_TIMEOUT_MS, el);
    if (el >= MUTE_TIMEOUT_MS)
        fail_msg("the wait returned after %lld ms, the command timeout, not its %d ms deadline",
                 el, TIMEOUT_MS);
    free(text);
}

/* A waiter asleep sends nothing: no poll of any kind reaches the server
 * while it sleeps (its subscription is one idle connection). */
static void test_a_sleeping_waiter_sends_no_command(void **s)
{
    (void)s;
    char *out = th_out_file();
    pid_t p = prog(NULL, out, NULL, "timeout", QUIET_WAIT, "realtime", NULL);
    wait_numsub(th_key("cq_ne", DM_KEY_COND), 1);
    usleep(200000);
    long long before = th_info_num(lc, "stats", "total_commands_processed:");
    usleep(QUIET_MS * 1000);
    long long after = th_info_num(lc, "stats", "total_commands_processed:");
    /* The first INFO counts itself once processed. */
    measured("commands from a sleeping waiter in %d ms: %lld", QUIET_MS, after - before - 1);
    if (after - before > 1)
        fail_msg("%lld commands reached the server while the waiter slept", after - before - 1);
    char *text = finish(p, out);
    th_assert_has(text, "rc ETIMEDOUT ");
    free(text);
}

/* A thread cancelled inside a cluster cond wait runs its cleanup handler
 * holding the mutex, cluster hold included, and the handler's unlock
 * releases both: the process locks it again afterwards. */
static void test_cancel_in_a_cluster_wait_runs_the_cleanup_holding_the_mutex(void **s)
{
    (void)s;
    char *out = th_out_file();
    pid_t p = prog(NULL, out, NULL, "cancel", NULL);
    char *text = finish(p, out);
    th_assert_has(text, "unlock 0");
    th_assert_has(text, "joined cancelled");
    th_assert_has(text, "relocked 0 ");
    if (th_field_after(text, "cleanup token ") <= 0)
        fail_msg("the cleanup handler ran without the cluster hold:\n%s", text);
    if (th_field_after(text, "relocked 0 token ") <= 0)
        fail_msg("the lock after the cancel has no cluster hold:\n%s", text);
    free(text);
    assert_int_equal(th_cmd_int(lc, "EXISTS %s", th_key("cq_lock", DM_KEY_LOCK)), 0);
}

/* The subscriber connection is killed while a waiter sleeps: after the
 * reconnect the waiter wakes (spuriously) instead of sleeping through a
 * signal sent during the gap. */
static void test_waiters_wake_after_the_subscriber_reconnects(void **s)
{
    (void)s;
    char *out = th_out_file();
    pid_t p = prog(NULL, out, NULL, "spurious", NULL);
    th_wait_for(out, "waiting", RUN_MS);
    /* Subscribed before it let go of the mutex: the channel is there. */
    wait_numsub(th_key("cq_ne", DM_KEY_COND), 1);
    usleep(200000);
    long long t0 = th_now_ms();
    freeReplyObject(th_cmd(lc, "CLIENT KILL TYPE pubsub"));
    char *text = finish(p, out);
    th_assert_has(text, "wake 0 ");
    measured("a waiter woke %lld ms after its subscriber connection was killed",
             th_now_ms() - t0);
    free(text);
}

/* A mapped mutex with an unlisted cond stays process-local: another
 * process's signal does not reach the waiter (it times out), no PUBLISH
 * is sent, and the waiter says so once at info level. */
static void test_unlisted_cond_with_a_mapped_mutex_stays_local(void **s)
{
    (void)s;
    char wait[48];
    snprintf(wait, sizeof wait, "CONDPROG_WAIT_MS=%d", SHORT_WAIT_MS);
    const char *extra[] = { wait, NULL };
    /* Nothing may be published on any cond channel. */
    redisContext *sub = th_redis_connect(&ls);
    freeReplyObject(th_cmd(sub, "PSUBSCRIBE %s", th_key("*", DM_KEY_COND)));
    char *wout = th_out_file(), *gout = th_out_file();
    pid_t w = prog(NULL, wout, extra, "waitgo-local", NULL);
    pid_t g = prog(NULL, gout, NULL, "go", "1", "signal-local", NULL);
    free(finish(g, gout));
    char *text = th_finish(w, wout, 3, RUN_MS);
    th_assert_has(text, "timeout go");
    th_assert_has(text, "is not in conds");
    free(text);
    redisReply *m = NULL;
    if (redisGetReply(sub, (void **)&m) == REDIS_OK && m)
        fail_msg("a message on a cond channel: %s",
                 m->type == REDIS_REPLY_ARRAY && m->elements > 3 ? m->element[3]->str : "?");
    redisFree(sub);
}

/* A listed cond waited on with an unmapped mutex still wakes on another
 * process's signal (the mutex itself stays process-local). */
static void test_listed_cond_with_an_unmapped_mutex_is_woken_from_another_process(void **s)
{
    (void)s;
    char *out = th_out_file(), *gout = th_out_file();
    pid_t p = prog(machine(0), out, NULL, "waitgo-plain", NULL);
    th_wait_for(out, "waiting", RUN_MS);
    /* The mutex does not exclude the signaller: let the waiter reach its
     * sleep (subscribed, then counted) before the signal. */
    wait_numsub(th_key("cq_ne", DM_KEY_COND), 1);
    usleep(300000);
    pid_t g = prog(machine(1), gout, NULL, "go", "1", "signal", NULL);
    free(finish(g, gout));
    char *text = finish(p, out);
    th_assert_has(text, "woken ");
    free(text);
}

/* A fork child of a process whose waiter was subscribed has no
 * subscription of its own: its first wait subscribes, and a signal from
 * another process wakes it. */
static void test_fork_child_waits_with_its_own_subscription(void **s)
{
    (void)s;
    char *out = th_out_file(), *gout = th_out_file();
    pid_t p = prog(NULL, out, NULL, "fork-waitgo", NULL);
    pid_t g = prog(NULL, gout, NULL, "go", "1", "signal", NULL);
    free(finish(g, gout));
    char *text = finish(p, out);
    th_assert_has(text, "parent wait ETIMEDOUT");
    th_assert_has(text, "woken ");
    th_assert_has(text, "child 0");
    free(text);
}

/* Heap conds of an init_site: a broadcast from another process's heap
 * cond of the same name wakes the waiter; destroying the waiter's cond
 * (its name's last) unsubscribes the channel. */
static void test_init_site_conds_are_cluster_wide_and_destroy_unsubscribes(void **s)
{
    (void)s;
    char *out = th_out_file(), *gout = th_out_file(), *go = th_go_file();
    pid_t p = prog(machine(0), out, NULL, "heap-waitgo", go, NULL);
    pid_t g = prog(machine(1), gout, NULL, "go", "1", "heap", NULL);
    free(finish(g, gout));
    th_wait_for(out, "destroyed 0", RUN_MS);
    wait_numsub(th_key("cq_chan", DM_KEY_COND), 0);
    th_touch(go);
    char *text = finish(p, out);
    th_assert_has(text, "woken ");
    free(text);
}

/* ---- faults and edge cases (the review of issue 12) ------------------------ */

/* The signaller's pooled connection is closed by the server (CLIENT KILL,
 * as an idle timeout or a restart would) before its next signal: the
 * PUBLISH finds it dead and is sent again on a new connection, so the
 * waiter of another process wakes (before: the signal was dropped and the
 * waiter slept to its timeout). */
static void test_signal_after_the_pooled_connection_was_closed_still_wakes_the_waiter(void **s)
{
    (void)s;
    const char *extra[] = { "CONDPROG_WAIT_MS=15000", NULL };
    char *wout = th_out_file(), *sout = th_out_file(), *go = th_go_file();
    pid_t w = prog(NULL, wout, extra, "waitgo", NULL);
    th_wait_for(wout, "waiting", RUN_MS);
    wait_numsub(th_key("cq_ne", DM_KEY_COND), 1);
    usleep(300000);
    pid_t g = prog(NULL, sout, NULL, "signal-after", go, NULL);
    th_wait_for(sout, "first", RUN_MS);
    freeReplyObject(th_cmd(lc, "CLIENT KILL TYPE normal"));    /* not this one (SKIPME) */
    th_touch(go);
    char *text = finish(g, sout);
    if (strstr(text, "the signal reached no other process"))
        fail_msg("the signal was lost:\n%s", text);
    free(text);
    text = finish(w, wout);
    th_assert_has(text, "woken ");
    free(text);
}

/* A heap cond destroyed and freed right after its broadcast, while its
 * waiter (held in DMUTEX_TEST_COND_GAP_MS between letting go of the
 * mutex and its sleep) has yet to look at the cond's channel: the waiter
 * holds a reference to it, so it reads no freed memory. Under make
 * test-asan the use after free was reported (the child exited 1); here
 * the waiter must come back and the program end cleanly. */
static void test_heap_cond_destroyed_right_after_broadcast_keeps_its_channel_for_the_waiter(void **s)
{
    (void)s;
    const char *extra[] = { "DMUTEX_TEST_COND_GAP_MS=300", NULL };
    char *out = th_out_file();
    pid_t p = prog(NULL, out, extra, "heap-destroy", "3", NULL);
    char *text = finish(p, out);
    th_assert_has(text, "destroyed 0");
    th_assert_has(text, "joined 3");
    if (strstr(text, "AddressSanitizer"))
        fail_msg("%s", text);
    free(text);
}

/* glibc's answers, and the shim's: a wait on an error-checking, recursive
 * or robust mutex the thread does not hold is EPERM at once, mapped or
 * not (before: the shim waited out the 2 s and said ETIMEDOUT). */
static void test_wait_with_a_checked_mutex_not_held_is_eperm_as_in_glibc(void **s)
{
    (void)s;
    for (int shim = 0; shim < 2; shim++) {
        no_shim = !shim;
        char *out = th_out_file();
        char *text = finish(prog(NULL, out, NULL, "eperm", NULL), out);
        th_assert_has(text, "eperm ec_lock EPERM");
        th_assert_has(text, "eperm rc_lock EPERM");
        th_assert_has(text, "eperm rb_lock EPERM");
        th_assert_has(text, "eperm ec_plain EPERM");
        free(text);
    }
    no_shim = 0;
}

/* Robust mapped mutexes through a cond wait (a listed cond: the cluster
 * wait; an unlisted one: glibc's wait between the shim's release and
 * re-join) answer as glibc's: a wait on one taken with EOWNERDEAD and not
 * made consistent makes it unrecoverable, and the wait returns
 * ENOTRECOVERABLE without it, the shim holding nothing of it (before: the
 * cluster wait said ETIMEDOUT with the name joined and the mutex not held;
 * the unlisted case answered right already and is kept as glibc's
 * check); a holder that
 * died during the wait gives EOWNERDEAD with the mutex held, and
 * pthread_mutex_consistent repairs it. */
static void robust_scenario(void **s)
{
    const char *cond = *s;
    cfg_path = th_keep_file(th_write_file(".cfg", "lease_ms = 2000;\n%s", cfg_text));
    static const char *const want[] = {
        "A lock EOWNERDEAD", "A wait ENOTRECOVERABLE", "A relock ENOTRECOVERABLE", "A token 0\n",
        "B wait EOWNERDEAD", "B consistent 0", "B unlock 0",
    };
    for (int shim = 0; shim < 2; shim++) {
        no_shim = !shim;
        char *out = th_out_file();
        char *text = finish(prog(NULL, out, NULL, "robust", cond, NULL), out);
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
            if (!strstr(text, want[i]))
                fail_msg("%s: no \"%s\" in:\n%s", shim ? "with the shim" : "glibc", want[i], text);
        free(text);
    }
    no_shim = 0;
    cfg_path = NULL;
}

/* Redis unreachable (a server that never answers, command timeout 4 s; or
 * a port nobody listens on): after the first failure, cond waits let go
 * of the program's mutex at once and signals return at once, for a
 * backoff, instead of a subscription or a PUBLISH timing out per call with
 * the mutex held (before: each wait held it for its 1.5 s deadline, each
 * signal to the silent server took 4 s). */
#define DOWN_ITERS   "4"
#define DOWN_WAIT_MS "1500"
#define DOWN_FAST_MS 1000       /* a call after the first failure takes less */
static void down_scenario(void **s)
{
    const char *kind = *s;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    if (strcmp(kind, "silent") == 0)
        assert_int_equal(listen(fd, 16), 0);    /* never accepted: no reply ever comes */
    /* else: bound, not listening: connections refused */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", ntohs(a.sin_port));
    cfg_path = th_keep_file(th_write_file(".cfg", "redis = { command_timeout_ms = %ld; };\n%s",
                                          MUTE_TIMEOUT_MS, cfg_text));
    redis_url = url;
    char *out = th_out_file();
    long long t0 = th_now_ms();
    pid_t p = prog(NULL, out, NULL, "down-loop", DOWN_ITERS, DOWN_WAIT_MS, NULL);
    char *text = finish(p, out);
    close(fd);
    cfg_path = NULL;
    redis_url = NULL;
    measured("redis %s, %s iterations of a %s ms wait and a signal: %lld ms",
             kind, DOWN_ITERS, DOWN_WAIT_MS, th_now_ms() - t0);
    for (int i = 2; i <= atoi(DOWN_ITERS); i++) {
        char key[32];
        snprintf(key, sizeof key, "iter %d held ", i);
        long long held = th_field_after(text, key);
        snprintf(key, sizeof key, "iter %d held %lld signal ", i, held);
        long long sig = th_field_after(text, key);
        if (held >= DOWN_FAST_MS || sig >= DOWN_FAST_MS)
            fail_msg("redis %s: iteration %d held the mutex %lld ms in its wait, its signal "
                     "took %lld ms:\n%s", kind, i, held, sig, text);
    }
    free(text);
}

/* The metrics file and the exit summary: a cluster cond wait ends a hold
 * of its mapped mutex as a glibc-bound wait does (dmutex_hold_seconds
 * counts it), and a cond's name is no lock: it has its own families
 * (before: cq_ne was listed with lock counters, and the wait was not
 * counted as the end of a hold). */
static void test_cond_names_have_their_own_metrics_and_waits_end_holds(void **s)
{
    (void)s;
    char *metrics = th_out_file();
    char env[PATH_MAX + 32];
    snprintf(env, sizeof env, "DMUTEX_METRICS=%s", metrics);
    const char *extra[] = { env, NULL };
    char *out = th_out_file();
    char *text = finish(prog(NULL, out, extra, "timeout", "300", "realtime", NULL), out);
    th_assert_has(text, "rc ETIMEDOUT");
    th_assert_has(text, "exit: lock cq_lock:");
    th_assert_has(text, "exit: cond cq_ne: 0 signals (0 reached no other process), 1 waits");
    if (strstr(text, "exit: lock cq_ne"))
        fail_msg("the cond's name is summed up as a lock:\n%s", text);
    free(text);
    text = th_read_output(metrics);
    th_assert_has(text, "dmutex_cond_waits_total{name=\"cq_ne\"} 1\n");
    th_assert_has(text, "dmutex_cond_signals_total{name=\"cq_ne\"} 0\n");
    th_assert_has(text, "dmutex_hold_seconds_count{name=\"cq_lock\"} 2\n");
    if (strstr(text, "dmutex_lock_calls_total{name=\"cq_ne\"}") ||
        strstr(text, "dmutex_hold_seconds_count{name=\"cq_ne\"}"))
        fail_msg("the cond's name has lock metrics:\n%s", text);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, th_test_teardown)
        T(test_queue_on_two_machines_consumes_every_item_once_without_timeouts),
        T(test_broadcast_wakes_every_waiter_in_three_processes),
        T(test_broadcast_on_a_redis_cluster_wakes_every_waiter),
        T(test_signal_in_the_window_after_the_cluster_release_is_not_lost),
        TH_CASE(test_timedwait_returns_etimedout_by_its_deadline, timed_scenario, "realtime",
                test_setup, th_test_teardown),
        TH_CASE(test_timedwait_with_a_monotonic_condattr_keeps_its_clock, timed_scenario,
                "monotonic", test_setup, th_test_teardown),
        TH_CASE(test_clockwait_monotonic_returns_etimedout_by_its_deadline, timed_scenario,
                "clockwait", test_setup, th_test_teardown),
        T(test_timedwait_returns_by_its_deadline_when_redis_does_not_answer),
        T(test_a_sleeping_waiter_sends_no_command),
        T(test_cancel_in_a_cluster_wait_runs_the_cleanup_holding_the_mutex),
        T(test_waiters_wake_after_the_subscriber_reconnects),
        T(test_unlisted_cond_with_a_mapped_mutex_stays_local),
        T(test_listed_cond_with_an_unmapped_mutex_is_woken_from_another_process),
        T(test_fork_child_waits_with_its_own_subscription),
        T(test_init_site_conds_are_cluster_wide_and_destroy_unsubscribes),
        T(test_signal_after_the_pooled_connection_was_closed_still_wakes_the_waiter),
        T(test_heap_cond_destroyed_right_after_broadcast_keeps_its_channel_for_the_waiter),
        T(test_wait_with_a_checked_mutex_not_held_is_eperm_as_in_glibc),
        TH_CASE(test_robust_mutex_errors_of_a_cluster_wait_are_glibcs, robust_scenario, "listed",
                test_setup, th_test_teardown),
        TH_CASE(test_robust_mutex_errors_of_an_unlisted_cond_wait_are_glibcs, robust_scenario,
                "local", test_setup, th_test_teardown),
        TH_CASE(test_cond_calls_fail_fast_while_redis_is_silent, down_scenario, "silent",
                test_setup, th_test_teardown),
        TH_CASE(test_cond_calls_fail_fast_while_redis_refuses_connections, down_scenario,
                "refused", test_setup, th_test_teardown),
        T(test_cond_names_have_their_own_metrics_and_waits_end_holds),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
