/* test_c11: C11 <threads.h> mutexes and condition variables under the
 * shim. glibc's mtx_* and cnd_* call its internal pthread functions, not
 * the exported ones, so before the shim interposed them a mapped mtx_t was
 * reported mapped and never locked through Redis (two processes lost about
 * half of their counter updates) and a listed cnd_t's signal never left
 * its process. The program is tests/progs/c11prog (its header lists the
 * modes): mtx_* and cnd_* only, on two network-namespace "machines" where
 * the test needs two processes.
 *
 * Every result is a C11 one (thrd_success, thrd_busy, thrd_timedout,
 * thrd_error), each checked against what glibc's own mtx_* would return
 * for the pthread result the shim gives. No bound here depends on the
 * machine's speed: a wait that must be woken is a 30 s one that fails
 * the program when it times out. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
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

#define C11PROG       TH_BUILD "/tests/progs/c11prog"
#define GROUP_ALARM_S 240
#define RUN_MS        60000L    /* a scenario's programs end by then (their waits are 30 s) */
#define THREADS       "2"
#define ITERS         "100"     /* per thread */
#define HOLD_US       "300"     /* read-modify-write inside the lock: an overlap loses an update */
#define TRY_MS        "300"     /* the timed lock of a mutex another process holds */

static struct th_checker chk;
static struct th_net net;
static struct th_redis ls, ds;          /* the lock server, the data server */
static redisContext *lc, *dc;
static char shim_path[PATH_MAX], prog_path[PATH_MAX];
static char prefix[32];
static int tseq;

static const char cfg_text[] =
    "mutexes = ( { symbol = \"c11_lock\"; }, { symbol = \"rec_lock\"; name = \"c11_rec\"; },\n"
    "  { init_site = \"box_new\"; name = \"c11_box\"; } );\n"
    "conds = ( { symbol = \"ready\"; name = \"c11_ready\"; },\n"
    "  { init_site = \"box_new\"; name = \"c11_box_cond\"; } );\n";

static const char *cfg_path;    /* NULL: the group's config */
static const char *redis_url;   /* NULL: the lock server */

/* c11prog MODE ARGS... (NULL-terminated) on machine `ns` (NULL: here),
 * under the shim with the group's config (cfg_path, redis_url), output
 * to `out`. */
static pid_t prog(const char *ns, const char *out, const char *mode, ...)
{
    static char *cfg;
    if (!cfg)
        cfg = th_write_file(".cfg", "%s", cfg_text);    /* the group's: removed at its end */
    static struct th_shim_env e;
    char **env = th_shim_env(&e, cfg_path ? cfg_path : cfg, redis_url ? redis_url : ls.url,
                             "info");
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

/* ---- fixtures ------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (th_built_paths(TH_SHIM, shim_path, C11PROG, prog_path, NULL) != 0)
        return -1;
    th_machines_group_start(&chk, &net, GROUP_ALARM_S, "test_c11",
                            "both processes run on this machine");
    /* Both servers where the machines reach them. */
    th_redis_start(&ls, net.up ? net.host_ip : NULL, NULL);
    th_redis_start(&ds, net.up ? net.host_ip : NULL, NULL);
    lc = th_redis_connect(&ls);
    dc = th_redis_connect(&ds);
    return 0;
}

static int group_teardown(void **state)
{
    th_redis_drop(&ls, &lc);
    th_redis_drop(&ds, &dc);
    return th_machines_group_teardown(state);
}

static int test_setup(void **state)
{
    snprintf(prefix, sizeof prefix, "t%d", ++tseq);
    cfg_path = NULL;
    redis_url = NULL;
    return th_machines_test_setup(state);
}

/* ---- exclusion -------------------------------------------------------------- */

/* One process per machine, each THREADS threads of ITERS read-modify-write
 * sections of a counter in the data server under the mtx_t of `mode`
 * (count: c11_lock, mtx_plain; count-rec: rec_lock, mtx_recursive, locked
 * twice per section; count-heap: a box_new() box's, an init_site): every
 * update is kept. Without the shim's mtx_lock (glibc's alone) the two
 * processes lost 99 of 200 updates. */
static void count_scenario(void **s)
{
    const char *mode = *s;
    char *out[2];
    pid_t p[2];
    for (int i = 0; i < 2; i++) {
        out[i] = th_out_file();
        p[i] = prog(machine(i), out[i], mode, THREADS, ITERS, HOLD_US, NULL);
    }
    long long want = 0;
    for (int i = 0; i < 2; i++) {
        char *text = finish(p[i], out[i]);
        want += th_field_after(text, "done ");
        free(text);
    }
    assert_int_equal(want, 2 * atoi(THREADS) * atoi(ITERS));
    char key[64];
    snprintf(key, sizeof key, "%s:n", prefix);
    long long got = th_cmd_int(dc, "GET %s", key);
    if (got != want)
        fail_msg("%s: %lld of %lld counter updates kept: the mtx_t did not exclude the other "
                 "%s", mode, got, want, net.up ? "machine" : "process");
}

/* ---- condition variables ---------------------------------------------------- */

/* A waiter on one machine and a signaller on the other: the cnd_signal (a
 * cnd_broadcast; of a box_new() cond, an init_site) wakes it, and every
 * call answers thrd_success. */
static void wake_scenario(void **s)
{
    const char *how = *s;
    int heap = strstr(how, "heap") != NULL;
    const char *call = strstr(how, "broadcast") ? "broadcast" : "signal";
    char *wout = th_out_file(), *gout = th_out_file();
    pid_t w = prog(machine(0), wout, "waitgo", heap ? "heap" : NULL, NULL);
    pid_t g = prog(machine(1), gout, "go", "1", call, heap ? "heap" : NULL, NULL);
    char *text = finish(g, gout);
    th_assert_has(text, "sent thrd_success");
    free(text);
    text = finish(w, wout);
    th_assert_has(text, "woken thrd_success");
    free(text);
}

/* One broadcast wakes the waiters of two other processes, one per machine. */
static void test_cnd_broadcast_wakes_the_waiters_of_two_processes(void **s)
{
    (void)s;
    char *out[2];
    pid_t w[2];
    for (int i = 0; i < 2; i++) {
        out[i] = th_out_file();
        w[i] = prog(machine(i), out[i], "waitgo", NULL);
    }
    char *gout = th_out_file();
    char *text = finish(prog(NULL, gout, "go", "2", "broadcast", NULL), gout);
    th_assert_has(text, "sent thrd_success");
    free(text);
    for (int i = 0; i < 2; i++) {
        text = finish(w[i], out[i]);
        th_assert_has(text, "woken thrd_success");
        free(text);
    }
}

/* A cnd_timedwait nobody signals is thrd_timedout, and returns holding the
 * mtx_t's cluster hold again (a fencing token; 0 when mtx_lock never went
 * through the shim). */
static void test_cnd_timedwait_is_thrd_timedout_with_the_cluster_hold_again(void **s)
{
    (void)s;
    char *out = th_out_file();
    char *text = finish(prog(NULL, out, "timedwait", TRY_MS, NULL), out);
    th_assert_has(text, "timedwait thrd_timedout token ");
    if (th_field_after(text, "token ") <= 0)
        fail_msg("no cluster hold of c11_lock after its cnd_timedwait returned:\n%s", text);
    free(text);
}

/* ---- C11 return codes -------------------------------------------------------- */

/* While a process on the other machine holds c11_lock and rec_lock (twice:
 * mtx_recursive), mtx_trylock of each is thrd_busy and a timed lock
 * thrd_timedout; the holder's unlocks are thrd_success. */
static void test_trylock_is_thrd_busy_and_timedlock_thrd_timedout_while_another_process_holds(
    void **s)
{
    (void)s;
    char *hout = th_out_file(), *tout = th_out_file();
    char *go = th_go_file();
    pid_t h = prog(machine(0), hout, "hold", go, NULL);
    pid_t t = prog(machine(1), tout, "try", TRY_MS, NULL);
    char *text = finish(t, tout);
    th_touch(go);
    th_assert_has(text, "plain trylock thrd_busy\n");
    th_assert_has(text, "plain timedlock thrd_timedout\n");
    th_assert_has(text, "rec trylock thrd_busy\n");
    th_assert_has(text, "rec timedlock thrd_timedout\n");
    free(text);
    text = finish(h, hout);
    th_assert_has(text, "unlocked thrd_success thrd_success thrd_success");
    free(text);
}

/* on_redis_down = "error" and a server that refuses connections: mtx_lock
 * is thrd_error (the shim's EAGAIN, as glibc's thrd_err_map turns it),
 * never a lock taken without Redis. */
static void test_mtx_lock_is_thrd_error_when_redis_refuses_under_on_redis_down_error(void **s)
{
    (void)s;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);     /* not listening */
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", ntohs(a.sin_port));
    cfg_path = th_keep_file(th_write_file(".cfg", "on_redis_down = \"error\";\n%s", cfg_text));
    redis_url = url;
    char *out = th_out_file();
    char *text = finish(prog(NULL, out, "once", NULL), out);
    close(fd);
    th_assert_has(text, "lock thrd_error");
    free(text);
}

/* A heap mtx_t of an init_site is mapped (a cluster hold, a token); once
 * mtx_destroy'ed and initialised again by main, which is no init_site, it
 * is not (token 0). */
static void test_mtx_destroy_unmaps_a_heap_mtx_and_a_new_init_decides_afresh(void **s)
{
    (void)s;
    char *out = th_out_file();
    char *text = finish(prog(NULL, out, "destroy", NULL), out);
    th_assert_has(text, "heap token ");
    if (th_field_after(text, "heap token ") <= 0)
        fail_msg("the box_new() mtx_t was not mapped:\n%s", text);
    if (th_field_after(text, " after destroy ") != 0)
        fail_msg("the mtx_t main initialised again is still mapped:\n%s", text);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, th_test_teardown)
        TH_CASE(test_mtx_plain_counter_on_two_machines_loses_no_update, count_scenario,
                "count", test_setup, th_test_teardown),
        TH_CASE(test_mtx_recursive_counter_on_two_machines_loses_no_update, count_scenario,
                "count-rec", test_setup, th_test_teardown),
        TH_CASE(test_init_site_heap_mtx_counter_on_two_machines_loses_no_update, count_scenario,
                "count-heap", test_setup, th_test_teardown),
        TH_CASE(test_cnd_signal_wakes_a_waiter_on_the_other_machine, wake_scenario, "signal",
                test_setup, th_test_teardown),
        TH_CASE(test_cnd_broadcast_wakes_a_waiter_on_the_other_machine, wake_scenario,
                "broadcast", test_setup, th_test_teardown),
        TH_CASE(test_init_site_heap_cnd_signal_wakes_a_waiter_on_the_other_machine,
                wake_scenario, "signal heap", test_setup, th_test_teardown),
        T(test_cnd_broadcast_wakes_the_waiters_of_two_processes),
        T(test_cnd_timedwait_is_thrd_timedout_with_the_cluster_hold_again),
        T(test_trylock_is_thrd_busy_and_timedlock_thrd_timedout_while_another_process_holds),
        T(test_mtx_lock_is_thrd_error_when_redis_refuses_under_on_redis_down_error),
        T(test_mtx_destroy_unmaps_a_heap_mtx_and_a_new_init_decides_afresh),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
