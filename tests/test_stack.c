/* test_stack: mapped calls on threads with small stacks.
 *
 * glibc lets a program run threads on PTHREAD_STACK_MIN (16 KiB on
 * x86-64, of which its thread descriptor and the static TLS of every
 * loaded library take a part) and many use 32-64 KiB. tests/progs/stackprog
 * runs mapped mutex, listed cond and rwlock calls on such a thread: lock,
 * trylock, timedlock, a contended fair handover from another process, a
 * cond wait woken by another thread, signals, read and write holds, with
 * DMUTEX_LOG=debug; after a SCRIPT FLUSH (NOSCRIPT), a lease lost under
 * on_lease_lost = "warn", Redis killed (each on_redis_down) and names and
 * a namespace of the longest length. The program fills its stack with a
 * pattern first and reports the lowest byte that changed; each case
 * checks that it ended by itself (no overflow: a crash is a signal; an
 * overflow that jumps the guard page may corrupt or hang instead, and the
 * case fails by its time limit) and that the calls took at most
 * STACK_BOUND bytes below the thread's entry ("measured:" lines give each
 * figure, and the program's lines each op's). docs/semantics.md states
 * the bound. */
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define STACKPROG     TH_BUILD "/tests/progs/stackprog"
#define GROUP_ALARM_S 600
#define RUN_MS        120000L   /* a case's program ends by then (the down cases wait for timeouts) */
#define WAIT_MS       30000L    /* ... and reaches a "wait:" op, or queues, by then */
/* What the mapped calls of a case may take of the thread's stack, from
 * the thread's entry (stackprog's own frames and its fill margin, about
 * 1.5 KiB, included): docs/semantics.md's figures. Measured on the 2-core
 * dev VM (glibc 2.36, x86-64), 2026-11-23: 7.4 KB at most (the first
 * call, which connects), 10.5 KB with 200-byte names in a 200-byte
 * namespace (each key of a script call is 400 bytes then); before the
 * stack was counted, 27 KB (a 16 KiB read buffer, three nested 4 KB key
 * frames). */
#define STACK_BOUND      (9 * 1024L)
#define STACK_BOUND_LONG (12 * 1024L)   /* names and namespace of DM_NAME_MAX bytes */
#define LONG_NAME     200       /* DM_NAME_MAX: names and the namespace */

static struct th_redis srv;
static redisContext *rc;
static char shim_path[PATH_MAX], prog_path[PATH_MAX];

static int group_setup(void **state)
{
    (void)state;
    if (th_built_paths(STACKPROG, prog_path, NULL) != 0)
        return -1;
    return th_shim_group_start(&srv, &rc, GROUP_ALARM_S, shim_path);
}

static int group_teardown(void **state)
{
    (void)state;
    th_group_stop(&srv, &rc);
    return 0;
}

/* What a case runs: the config's extra lines, the stack (KiB, 0:
 * PTHREAD_STACK_MIN), the ops, and at each "wait:NAME" op the action. */
struct stack_case {
    const char *label;
    const char *cfg;            /* top-level lines before the lists */
    const char *ns;             /* the namespace the keys are in (NULL: dmutex) */
    int long_names;
    long kib;
    const char *ops[40];
};

static const char *const all_calls[] = {
    "lock", "unlock", "try", "unlock", "timed", "unlock", "cond", "signal", "condwake",
    "rd", "rwun", "wr", "rwun", "rdtry", "rwun", "wrtry", "rwun", "rdtimed", "rwun",
    "wrtimed", "rwun", NULL
};

static char *config_for(const struct stack_case *k)
{
    char name[3][LONG_NAME + 1];
    const char *base[3] = { "stack_lock", "stack_cond", "stack_rw" };
    for (int i = 0; i < 3; i++) {
        snprintf(name[i], sizeof name[i], "%s", base[i]);
        if (k->long_names) {
            size_t n = strlen(name[i]);
            memset(name[i] + n, 'x', LONG_NAME - n);
            name[i][LONG_NAME] = 0;
        }
    }
    return th_keep_file(th_write_file(".cfg",
        "lease_ms = 3000;\n%s\n"
        "mutexes = ( { symbol = \"stack_lock\"; name = \"%s\"; } );\n"
        "conds = ( { symbol = \"stack_cond\"; name = \"%s\"; } );\n"
        "rwlocks = ( { symbol = \"stack_rw\"; name = \"%s\"; } );\n",
        k->cfg ? k->cfg : "", name[0], name[1], name[2]));
}

static pid_t spawn(const char *cfg, const char *url, long kib, const char *go,
                   const char *const *ops, const char *out)
{
    static struct th_shim_env e;
    char **env = th_shim_env(&e, cfg, url, "debug");
    char kb[24];
    snprintf(kb, sizeof kb, "%ld", kib);
    char *argv[48] = { prog_path, kb, (char *)go };
    int n = 3;
    for (int i = 0; ops[i] && n < 47; i++)
        argv[n++] = (char *)ops[i];
    argv[n] = NULL;
    return th_child(argv, env, out);
}

/* The file a "wait:NAME" op waits for. */
static char *go_file(const char *go, const char *name)
{
    char *p = malloc(strlen(go) + strlen(name) + 2);
    assert_non_null(p);
    sprintf(p, "%s-%s", go, name);
    return th_keep_file(p);
}

/* Checks a finished program's output: it ran every op and its calls took
 * at most STACK_BOUND below the thread's entry. */
static void check_stack(const char *label, long bound, const char *text)
{
    th_assert_has(text, "used ");
    long long used = th_field_after(text, "used ");
    long long entry = th_field_after(strstr(text, "used "), "entry ");
    long long size = th_field_after(strstr(text, "used "), " of ");
    long long base = th_field_after(text, "baseline ") - th_field_after(text, "entry ");
    printf("measured: %s (stack %lld bytes): mapped calls %lld bytes below the thread's "
           "entry (a plain lock/unlock %lld), %lld of the stack in all\n",
           label, size, used - entry, base, used);
    if (used - entry > bound)
        fail_msg("%s: the calls took %lld bytes of stack, more than %ld:\n%s", label,
                 used - entry, bound, text);
}

static void run_case(void **state)
{
    const struct stack_case *k = *state;
    char *cfg = config_for(k);
    char *out = th_out_file();
    char *go = th_go_file();
    pid_t p = spawn(cfg, srv.url, k->kib, go, k->ops, out);
    char *text = th_finish(p, out, 0, RUN_MS);
    for (int i = 0; k->ops[i]; i++) {
        char want[64];
        snprintf(want, sizeof want, "\n%s ", k->ops[i]);
        if (strncmp(k->ops[i], "wait:", 5) != 0)
            th_assert_has(text, want);
    }
    check_stack(k->label, k->long_names ? STACK_BOUND_LONG : STACK_BOUND, text);
    free(text);
}

static void test_calls_on_a_pthread_stack_min_thread(void **state)
{
    static struct stack_case k = { .label = "every call, PTHREAD_STACK_MIN", .kib = 0 };
    memcpy(k.ops, all_calls, sizeof all_calls);
    *state = &k;
    run_case(state);
}

static void test_calls_on_a_32_kib_thread(void **state)
{
    static struct stack_case k = { .label = "every call, 32 KiB", .kib = 32 };
    memcpy(k.ops, all_calls, sizeof all_calls);
    *state = &k;
    run_case(state);
}

static void test_calls_with_the_longest_names_and_namespace(void **state)
{
    static char cfgl[LONG_NAME + 32];
    static struct stack_case k = { .label = "every call, 200-byte names and namespace",
                                   .long_names = 1, .kib = 0 };
    char ns[LONG_NAME + 1];
    memset(ns, 'n', LONG_NAME);
    ns[LONG_NAME] = 0;
    snprintf(cfgl, sizeof cfgl, "namespace = \"%s\";", ns);
    k.cfg = cfgl;
    memcpy(k.ops, all_calls, sizeof all_calls);
    *state = &k;
    run_case(state);
}

/* A holder process (a large stack) keeps the fair mutex until the small
 * thread of another process waits in the queue: the handover reaches it
 * on its own subscribed connection. */
static void test_fair_handover_on_a_pthread_stack_min_thread(void **state)
{
    (void)state;
    struct stack_case k = { .cfg = NULL };
    char *cfg = config_for(&k);
    char *hout = th_out_file(), *wout = th_out_file();
    char *go = th_go_file();
    const char *hold[] = { "lock", "wait:h", "unlock", NULL };
    const char *take[] = { "lock", "unlock", "lock", "unlock", NULL };
    pid_t h = spawn(cfg, srv.url, 256, go, hold, hout);
    th_wait_for(hout, "waiting h", WAIT_MS);
    pid_t w = spawn(cfg, srv.url, 0, go, take, wout);
    th_wait_blocked(rc, "stack_lock", WAIT_MS);
    th_touch(go_file(go, "h"));
    free(th_finish(h, hout, 0, RUN_MS));
    char *text = th_finish(w, wout, 0, RUN_MS);
    th_assert_has(text, "\nlock 0 stack ");
    check_stack("fair handover, PTHREAD_STACK_MIN", STACK_BOUND, text);
    free(text);
}

/* The program's calls at a "wait:x" op, while the test changes the
 * server: flushes the scripts (NOSCRIPT: EVAL, release.lua loaded again),
 * deletes the lock's key (a lost lease under "warn"), or kills the server
 * (each on_redis_down). */
enum action { FLUSH_SCRIPTS, DROP_LEASE, KILL_SERVER };
struct server_case {
    const char *label;
    const char *cfg;
    enum action act;
    const char *ops[40];
};

static void server_scenario(void **state)
{
    const struct server_case *s = *state;
    struct th_redis own = { 0 };
    redisContext *oc = NULL;
    th_redis_start(&own, NULL, NULL);
    oc = th_redis_connect(&own);
    struct stack_case k = { .cfg = s->cfg };
    char *cfg = config_for(&k);
    char *out = th_out_file();
    char *go = th_go_file();
    pid_t p = spawn(cfg, own.url, 0, go, s->ops, out);
    th_wait_for(out, "waiting x", WAIT_MS);
    if (s->act == FLUSH_SCRIPTS)
        freeReplyObject(th_cmd(oc, "SCRIPT FLUSH"));
    else if (s->act == DROP_LEASE)
        freeReplyObject(th_cmd(oc, "DEL %s", th_key("stack_lock", DM_KEY_LOCK)));
    else
        th_redis_kill(&own);
    th_touch(go_file(go, "x"));
    char *text = th_finish(p, out, 0, RUN_MS);
    check_stack(s->label, STACK_BOUND, text);
    free(text);
    th_redis_drop(&own, &oc);
}

static struct server_case noscript = {
    "after SCRIPT FLUSH", NULL, FLUSH_SCRIPTS,
    { "lock", "unlock", "rd", "rwun", "signal", "wait:x", "lock", "unlock", "try", "unlock",
      "cond", "signal", "rd", "rwun", "wr", "rwun", NULL }
};
static struct server_case lost = {
    "a lease lost under on_lease_lost = warn", "on_lease_lost = \"warn\";", DROP_LEASE,
    { "lock", "wait:x", "unlock", "lock", "unlock", NULL }
};
static struct server_case down_error = {
    "Redis killed, on_redis_down = error", "on_redis_down = \"error\";", KILL_SERVER,
    { "lock", "wait:x", "unlock", "lock", "unlock", "try", "unlock", "timed", "unlock",
      "signal", "cond", "rdtry", "rwun", "wrtimed", "rwun", NULL }
};
static struct server_case down_block = {
    "Redis killed, on_redis_down = block", "on_redis_down = \"block\";", KILL_SERVER,
    { "lock", "wait:x", "unlock", "try", "timed", "signal", "rdtry", "rdtimed", "wrtimed", NULL }
};
static struct server_case down_local = {
    "Redis killed, on_redis_down = local", "on_redis_down = \"local\";", KILL_SERVER,
    { "lock", "wait:x", "unlock", "lock", "unlock", "try", "unlock", "timed", "unlock",
      "signal", "cond", "rd", "rwun", "wrtimed", "rwun", NULL }
};

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_teardown(f, th_test_teardown)
        T(test_calls_on_a_pthread_stack_min_thread),
        T(test_calls_on_a_32_kib_thread),
        T(test_calls_with_the_longest_names_and_namespace),
        T(test_fair_handover_on_a_pthread_stack_min_thread),
        TH_CASE(test_noscript_reload_on_a_pthread_stack_min_thread, server_scenario, &noscript,
                NULL, th_test_teardown),
        TH_CASE(test_lost_lease_warning_on_a_pthread_stack_min_thread, server_scenario, &lost,
                NULL, th_test_teardown),
        TH_CASE(test_redis_down_error_on_a_pthread_stack_min_thread, server_scenario,
                &down_error, NULL, th_test_teardown),
        TH_CASE(test_redis_down_block_on_a_pthread_stack_min_thread, server_scenario,
                &down_block, NULL, th_test_teardown),
        TH_CASE(test_redis_down_local_on_a_pthread_stack_min_thread, server_scenario,
                &down_local, NULL, th_test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
