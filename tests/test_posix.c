/* test_posix: the pthread behaviours a real program relies on, on mapped
 * mutexes, shown at process level (issue 3). Every test writes a config of
 * its own (lock names are unique per test), runs helper programs with
 * build/libdmutex.so preloaded against a private redis-server, and checks
 * their output, their exit status and the server's keys and statistics.
 * The programs know nothing of dmutex: tests/progs/posixprog.c (mutex
 * types, robust, condvars, fork, exit, init_site, struct members),
 * tests/posix/psx_host.c (file-statics, a linked library, a dlopen'ed
 * plugin), tests/posix/psx_cxx.cc (std::mutex) and tests/progs/api_weak.c
 * (the explicit API, declared weak).
 *
 * Exclusion is always shown by a Redis counter that critical sections
 * update non-atomically (GET, sleep, SET): lost updates show as a short
 * count, and where practical the same run without the shim (or without the
 * mapping) is shown to lose updates, so the checker can fail.
 *
 * Timing assertions are one-sided or generous (a slow, noisy 2-core
 * machine); a lease that must run out is short. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define POSIXPROG       TH_BUILD "/tests/progs/posixprog"
#define API_WEAK        TH_BUILD "/tests/progs/api_weak"
#define STALEPROG       TH_BUILD "/tests/progs/staleprog"
#define PSX_HOST        TH_BUILD "/tests/posix/psx_host"
#define PSX_CXX         TH_BUILD "/tests/posix/psx_cxx"
#define EX_CONFIG       78
#define SHORT_LEASE_MS  2000L
#define LONG_LEASE_MS   30000L
#define SLACK_MS        2500L   /* how late a timed result may be on a loaded machine */
#define RUN_MS          30000L  /* longest a program that should finish may run */
#define QUIET_MS        1000L   /* how long "nothing happens" is watched */
#define POLL_US         5000
#define MAX_ARGS        16
#define SUITE_ALARM_S   420

/* The counter: PROCS processes x THREADS threads x ITERS sections. */
#define PROCS           3
#define THREADS         "3"
#define ITERS           "20"
#define HOLD_US         "1000"
#define EXPECTED        (PROCS * 3 * 20)
#define LOSS_TRIES      3       /* runs without the shim allowed to show a lost update */
#define LOSS_HOLD_US    "5000"  /* longer sections there, so that slow-starting processes overlap */

static struct th_redis rs;
static redisContext *rc;
static char shim_path[PATH_MAX];

/* A config with `lease` and the entries of `mutexes = ( ... )`. */
/* The environment of a program under the shim with `cfg` (and DMUTEX_LOG
 * = `log` when not NULL). Static storage: valid until the next call. */
static char **shim_env_log(const char *cfg, const char *log)
{
    static struct th_shim_env e;
    return th_shim_env(&e, cfg, rs.url, log);
}

static char **shim_env(const char *cfg)
{
    return shim_env_log(cfg, NULL);
}

static char *no_env[] = { NULL };

/* Spawns the NULL-terminated argument list (program first) with `env`. */
static pid_t run(char **env, const char *out, ...)
{
    char *argv[MAX_ARGS + 1];
    int n = 0;
    va_list ap;
    va_start(ap, out);
    for (char *a; n < MAX_ARGS && (a = va_arg(ap, char *)) != NULL;)
        argv[n++] = a;
    va_end(ap);
    argv[n] = NULL;
    pid_t pid = th_child(argv, env, out);
    return pid;
}

/* posixprog PORT KEY MODE MUTEX [ARGS...] under the shim with `cfg`. */
#define PP(cfg, out, key, mode, mutex, ...) \
    run(shim_env(cfg), out, POSIXPROG, rs.port_text, key, mode, mutex, ##__VA_ARGS__, NULL)

/* Waits for a child that must end by itself with `want_status`; returns
 * its output. */
static char *finish(pid_t pid, const char *out, int want_status)
{
    return th_finish(pid, out, want_status, RUN_MS);
}

static void finish_ok(pid_t pid, const char *out)
{
    free(finish(pid, out, 0));
}

static void stop(pid_t pid)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    th_forget(pid);
}

static int file_has(const char *path, const char *needle)
{
    char *text = th_read_file(path);
    int found = text && strstr(text, needle);
    free(text);
    return found;
}

static long long lock_exists(const char *name)
{
    return th_cmd_int(rc, "EXISTS %s", th_key(name, DM_KEY_LOCK));
}

/* The one owner ("<process id>:<thread seq>") holding lock `name` into
 * buf; fails unless exactly one holds it. */
static void lock_owner(const char *name, char *buf, size_t len)
{
    redisReply *r = th_cmd(rc, "HKEYS %s", th_key(name, DM_KEY_LOCK));
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1)
        fail_msg("lock %s has %zu owners, expected 1", name,
                 r->type == REDIS_REPLY_ARRAY ? r->elements : 0);
    snprintf(buf, len, "%s", r->element[0]->str);
    freeReplyObject(r);
}

static void wait_lock_gone(const char *name, long timeout_ms)
{
    long long end = th_now_ms() + timeout_ms;
    while (lock_exists(name)) {
        if (th_now_ms() > end)
            fail_msg("lock %s still held after %ld ms", name, timeout_ms);
        usleep(POLL_US);
    }
}

/* ---- the counter ------------------------------------------------------------ */

/* Runs `procs` copies of argv (whose KEY is `key`) at once with `env`;
 * each must exit 0 having said "done". Returns the final count. */
static long long run_counter(int procs, char **env, const char *key, char *const argv[])
{
    freeReplyObject(th_cmd(rc, "DEL %s", key));
    pid_t pid[PROCS + 2];
    char *out[PROCS + 2];
    assert_true(procs <= PROCS + 2);
    for (int i = 0; i < procs; i++) {
        out[i] = th_out_file();
        pid[i] = th_child(argv, env, out[i]);
    }
    for (int i = 0; i < procs; i++) {
        char *text = finish(pid[i], out[i], 0);
        th_assert_has(text, "done ");
        free(text);
    }
    return th_cmd_int(rc, "GET %s", key);
}

static void assert_exact(int procs, char **env, const char *key, char *const argv[],
                         long long expected)
{
    long long n = run_counter(procs, env, key, argv);
    if (n != expected)
        fail_msg("%s %s %s: counted %lld of %lld sections: exclusion failed",
                 argv[0], argv[3], argv[4], n, expected);
}

/* The same programs without the shim lose updates: the checker can fail. */
static void assert_loses(int procs, const char *key, char *const argv[], long long expected)
{
    char *slow[MAX_ARGS + 1];
    int k;
    for (k = 0; k < MAX_ARGS && argv[k]; k++)
        slow[k] = strcmp(argv[k], HOLD_US) == 0 ? LOSS_HOLD_US : argv[k];
    slow[k] = NULL;
    long long n = 0;
    for (int i = 0; i < LOSS_TRIES; i++) {
        n = run_counter(procs, no_env, key, slow);
        if (n < expected)
            return;
    }
    fail_msg("%d runs of %s %s without the shim all counted %lld: the checker sees no race",
             LOSS_TRIES, argv[3], argv[4], n);
}

/* posixprog's counter argv on mutex `m`. Static storage per slot. */
static char **pp_count_argv(int slot, const char *key, const char *m)
{
    static char *argv[4][10];
    char **a = argv[slot];
    a[0] = POSIXPROG; a[1] = rs.port_text; a[2] = (char *)key; a[3] = "count"; a[4] = (char *)m;
    a[5] = THREADS; a[6] = ITERS; a[7] = HOLD_US; a[8] = NULL;
    return a;
}

/* ---- fixtures ------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    /* Under make test-asan (DM_TEST_PRELOAD) the ASan runtime's dlopen
     * comes first and calls the shim's from libasan: the caller ld.so and
     * the shim take the RUNPATH of is libasan's, not psx_host's, and a
     * plugin psx_host finds through $ORIGIN/plugins is not found (nor is
     * it with libasan preloaded alone, without the shim). There the
     * plugin's directory is given as LD_LIBRARY_PATH instead. */
    char plugins[PATH_MAX];
    if (getenv("DM_TEST_PRELOAD") && realpath(TH_BUILD "/tests/posix/plugins", plugins))
        setenv("LD_LIBRARY_PATH", plugins, 1);
    return th_shim_group_start(&rs, &rc, SUITE_ALARM_S, shim_path);
}

/* Under make test-asan (DM_TEST_PRELOAD) a fork child that goes on can
 * hang in ASan's allocator: gcc 12's runtime does not take its allocator
 * locks across fork() as glibc's malloc does, so a child forked while a
 * thread of the parent (one of the shim's) was refilling its cache waits
 * for ever (seen: both children of fork-count hung in calloc). That is no
 * finding about the shim: as test_shim's fork test, such a test does not
 * run there. A child that execs at once (test_exec_child_...) does. */
static void skip_fork_under_asan(void)
{
    if (getenv("DM_TEST_PRELOAD"))
        skip();
}

/* ==== 1. mutex types ======================================================== */

static void test_normal_mutex_by_static_initializer_and_by_init_excludes(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t1_norm\"; },\n"
                                       "{ symbol = \"attr_lock\"; name = \"t1_attr\"; }");
    assert_exact(PROCS, shim_env(cfg), "c1:norm", pp_count_argv(0, "c1:norm", "norm"), EXPECTED);
    assert_exact(PROCS, shim_env(cfg), "c1:attr", pp_count_argv(0, "c1:attr", "anorm"), EXPECTED);
    assert_loses(PROCS, "c1:plain", pp_count_argv(0, "c1:plain", "norm"), EXPECTED);
}

/* Both kinds of recursive mutex: PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP and
 * pthread_mutex_init with PTHREAD_MUTEX_RECURSIVE. */
static void test_recursive_nested_locks_cost_no_round_trip_and_hold_ends_with_outermost(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"rec_lock\"; name = \"t2_rec\"; },\n"
                                      "{ symbol = \"attr_lock\"; name = \"t2_arec\"; }");
    const char *ms[] = { "rec", "arec" }, *names[] = { "t2_rec", "t2_arec" };
    for (int i = 0; i < 2; i++) {
        const char *key = th_key(names[i], DM_KEY_LOCK);
        char *out = th_out_file();
        th_reset_stats(rc);
        char *text = finish(PP(cfg, out, key, "recursive", ms[i], "6"), out, 0);
        /* still held after 5 inner unlocks, free after the outermost */
        th_assert_has(text, "recursive 0 1 0 0");
        free(text);
        assert_int_equal(th_script_calls(rc), 2);        /* one acquire, one release */
    }
    /* Sections that lock twice still exclude across processes. */
    assert_exact(PROCS, shim_env(cfg), "c2:rec", pp_count_argv(0, "c2:rec", "rec"), EXPECTED);
    assert_exact(PROCS, shim_env(cfg), "c2:arec", pp_count_argv(0, "c2:arec", "arec"), EXPECTED);
}

static void test_errorcheck_relock_gives_edeadlk_without_redis_traffic(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"err_lock\"; name = \"t3_err\"; },\n"
                                      "{ symbol = \"attr_lock\"; name = \"t3_aerr\"; }");
    const char *ms[] = { "err", "aerr" }, *names[] = { "t3_err", "t3_aerr" };
    for (int i = 0; i < 2; i++) {
        char *out = th_out_file();
        th_reset_stats(rc);
        char *text = finish(PP(cfg, out, "x", "errcheck", ms[i], "relock"), out, 0);
        th_assert_has(text, "errcheck relock 0 EDEADLK 0");
        free(text);
        assert_int_equal(th_script_calls(rc), 2);        /* the outer lock and unlock only */
        assert_int_equal(lock_exists(names[i]), 0);
    }
}

static void test_errorcheck_unlock_by_non_holder_gives_eperm_without_redis_traffic(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"err_lock\"; name = \"t4_err\"; },\n"
                                      "{ symbol = \"attr_lock\"; name = \"t4_aerr\"; }");
    const char *ms[] = { "err", "aerr" }, *names[] = { "t4_err", "t4_aerr" };
    for (int i = 0; i < 2; i++) {
        /* another thread unlocks while this one holds it */
        char *out = th_out_file();
        th_reset_stats(rc);
        char *text = finish(PP(cfg, out, "x", "errcheck", ms[i], "foreign"), out, 0);
        th_assert_has(text, "errcheck foreign 0 EPERM 0");
        free(text);
        assert_int_equal(th_script_calls(rc), 2);
        assert_int_equal(lock_exists(names[i]), 0);
        /* nobody holds it */
        out = th_out_file();
        th_reset_stats(rc);
        text = finish(PP(cfg, out, "x", "errcheck", ms[i], "unheld"), out, 0);
        th_assert_has(text, "errcheck unheld - EPERM -");
        free(text);
        assert_int_equal(th_script_calls(rc), 0);
    }
}

/* lock, destroy (EBUSY), unlock, destroy, init, lock, unlock: glibc says
 * EBUSY for a held normal mutex itself, not for a robust one; after
 * destroy and init the mutex is still mapped and works as new. */
static void test_destroy_of_held_mapped_mutex_gives_ebusy_and_reinit_starts_clean(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t5_norm\"; },\n"
                                      "{ symbol = \"attr_lock\"; name = \"t5_attr\"; }");
    const char *ms[] = { "norm", "aerr", "arobust" };
    const char *names[] = { "t5_norm", "t5_attr", "t5_attr" };
    for (int i = 0; i < 3; i++) {
        char *out = th_out_file();
        th_reset_stats(rc);
        char *text = finish(PP(cfg, out, "x", "destroy", ms[i]), out, 0);
        if (!strstr(text, "destroy 0 EBUSY 0 0 0 0 0"))
            fail_msg("%s: expected \"destroy 0 EBUSY 0 0 0 0 0\", got:\n%s", ms[i], text);
        free(text);
        assert_int_equal(th_script_calls(rc), 4);        /* two holds: still mapped after init */
        assert_int_equal(lock_exists(names[i]), 0);
    }
}

/* ==== 2. robust owners across machines ========================================= */

/* Starts a process holding the robust attr_lock until it is killed. */
static pid_t robust_holder(const char *cfg)
{
    char *out = th_out_file();
    pid_t pid = PP(cfg, out, "x", "robust-hold", "arobust");
    th_wait_for(out, "locked 0", RUN_MS);
    return pid;
}

static void test_robust_lock_after_sigkilled_holder_gives_eownerdead(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"attr_lock\"; name = \"t6_rob\"; },\n"
                                       "{ symbol = \"norm_lock\"; name = \"t6_norm\"; }");
    pid_t holder = robust_holder(cfg);
    /* the control: a normal mutex whose holder dies is just free again */
    char *nout = th_out_file(), *never = th_go_file();
    pid_t nholder = PP(cfg, nout, "x", "hold", "norm", never);
    th_wait_for(nout, "locked 0", RUN_MS);

    char *out = th_out_file(), *out2 = th_out_file();
    pid_t waiter = PP(cfg, out, "x", "robust-lock", "arobust", "consistent");
    pid_t nwaiter = PP(cfg, out2, "x", "lock", "norm");
    th_wait_blocked(rc, "t6_rob", RUN_MS);
    th_wait_blocked(rc, "t6_norm", RUN_MS);
    stop(holder);
    stop(nholder);

    char *text = finish(waiter, out, 0);
    th_assert_has(text, "lock EOWNERDEAD\nconsistent 0\nunlock 0\nrelock 0\nunlock 0\n");
    free(text);
    text = finish(nwaiter, out2, 0);
    th_assert_has(text, "locked 0 ");
    free(text);
    /* made consistent and released: the next process finds it clean */
    out = th_out_file();
    text = finish(PP(cfg, out, "x", "lock", "arobust"), out, 0);
    th_assert_has(text, "locked 0 ");
    free(text);
}

static void test_unlock_without_consistent_makes_notrecoverable(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"attr_lock\"; name = \"t7_rob\"; }");
    pid_t holder = robust_holder(cfg);
    char *out = th_out_file();
    pid_t waiter = PP(cfg, out, "x", "robust-lock", "arobust", "noconsistent");
    th_wait_blocked(rc, "t7_rob", RUN_MS);
    stop(holder);
    char *text = finish(waiter, out, 0);
    /* as glibc within one process: the thread that queued meanwhile, a
     * relock and a trylock all see ENOTRECOVERABLE; destroy and init at
     * the same address start clean */
    th_assert_has(text, "lock EOWNERDEAD\nunlock 0\nwaiter ENOTRECOVERABLE\n"
                     "relock ENOTRECOVERABLE\ntrylock ENOTRECOVERABLE\n"
                     "destroy 0\ninit 0\nreinit-lock 0\nreinit-unlock 0\n");
    free(text);
    assert_int_equal(lock_exists("t7_rob"), 0);
}

/* glibc's own robust case within one process: a thread ends holding the
 * mutex. The next locker gets EOWNERDEAD (once the dead thread's lease has
 * run out, as for a dead process), and other processes find the mutex
 * clean after it is made consistent. */
static void test_thread_exiting_with_robust_mutex_gives_eownerdead_to_next_locker(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"attr_lock\"; name = \"t7b_rob\"; }");
    char *out = th_out_file();
    char *text = finish(PP(cfg, out, "x", "robust-thread-exit", "arobust"), out, 0);
    th_assert_has(text, "thread locked 0\nthread gone\nlock EOWNERDEAD\nconsistent 0\nunlock 0\n");
    free(text);
    assert_int_equal(lock_exists("t7b_rob"), 0);
    out = th_out_file();
    text = finish(PP(cfg, out, "x", "lock", "arobust"), out, 0);
    th_assert_has(text, "locked 0 ");
    free(text);
}

/* ==== 3. condition variables ================================================ */

/* A waits on a condvar with the mapped norm_lock; meanwhile another
 * process takes the mutex (A must have released the cluster hold); then C
 * holds it while A is signalled: A returns only after C unlocks, holding
 * the cluster lock again. */
static void cond_scenario(const char *kind, const char *name)
{
    char entry[128];
    snprintf(entry, sizeof entry, "{ symbol = \"norm_lock\"; name = \"%s\"; }", name);
    const char *key = th_key(name, DM_KEY_LOCK);
    char *cfg = th_config(SHORT_LEASE_MS, entry);
    char *shared = th_out_file(), *signal_go = th_go_file();
    pid_t a = PP(cfg, shared, key, "cond", "norm", (char *)kind, signal_go);
    th_wait_for(shared, "waiting", RUN_MS);

    /* A's wait ends in 60 s: B can only finish this soon if A let go. */
    char *bout = th_out_file();
    char *text = finish(PP(cfg, bout, "x", "lock", "norm"), bout, 0);
    th_assert_has(text, "locked 0");
    free(text);
    if (file_has(shared, "woke"))
        fail_msg("the waiter woke without a signal");

    char *c_go = th_go_file();
    pid_t c = PP(cfg, shared, "x", "hold", "norm", c_go);
    th_wait_for(shared, "locked 0", RUN_MS);
    th_touch(signal_go);
    usleep(QUIET_MS * 1000);
    if (file_has(shared, "woke"))
        fail_msg("the waiter returned while another process held the mutex:\n%s",
                 th_read_file(shared));
    th_touch(c_go);
    finish_ok(c, shared);
    text = finish(a, shared, 0);
    const char *unlocking = strstr(text, "unlocking"), *woke = strstr(text, "woke 0 exists=1");
    if (!unlocking || !woke || woke < unlocking)
        fail_msg("expected \"woke 0 exists=1\" after the holder's \"unlocking\":\n%s", text);
    th_assert_has(text, "unlocked 0");
    free(text);
    assert_int_equal(lock_exists(name), 0);
}

static void test_other_process_acquires_while_waiter_in_cond_wait(void **state)
{
    (void)state;
    cond_scenario("wait", "t8_wait");
}

static void test_other_process_acquires_while_waiter_in_cond_timedwait(void **state)
{
    (void)state;
    cond_scenario("timedwait", "t9_timed");
}

static void test_other_process_acquires_while_waiter_in_cond_clockwait(void **state)
{
    (void)state;
    cond_scenario("clockwait", "t10_clock");
}

/* The timed wait of `wait` ms runs out while another process holds the
 * mutex: it must end with ETIMEDOUT only after that one unlocks, holding
 * the mutex again. The holder must lock before the deadline, which a busy
 * machine can miss (the wait then ends first, and the holder locks after
 * it): such a run shows nothing, and 0 asks for one with a longer wait. */
#define HELD_WAIT_MAX_MS 16000L

static int cond_timeout_while_held(long wait)
{
    char warg[24];
    snprintf(warg, sizeof warg, "%ld", wait);
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t11_held\"; }");
    char *shared = th_out_file(), *go = th_go_file();
    pid_t a = PP(cfg, shared, th_key("t11_held", DM_KEY_LOCK), "cond-timeout", "norm", "timedwait", warg);
    th_wait_for(shared, "waiting", RUN_MS);
    long long t0 = th_now_ms();
    pid_t c = PP(cfg, shared, "x", "hold", "norm", go);
    th_wait_for(shared, "locked 0", RUN_MS);
    char *text = th_read_file(shared);
    const char *to = strstr(text, "timeout"), *locked = strstr(text, "locked 0");
    if (to && to < locked) {
        print_message("the holder locked after the %ld ms wait had ended: once more\n", wait);
        free(text);
        th_touch(go);
        finish_ok(c, shared);
        free(finish(a, shared, 0));
        return 0;
    }
    free(text);
    long long left = t0 + wait + QUIET_MS - th_now_ms();
    if (left > 0)
        usleep((useconds_t)left * 1000);
    if (file_has(shared, "timeout"))
        fail_msg("the timed wait returned while another process held the mutex:\n%s",
                 th_read_file(shared));
    th_touch(go);
    finish_ok(c, shared);
    text = finish(a, shared, 0);
    const char *unlocking = strstr(text, "unlocking");
    to = strstr(text, "timeout ETIMEDOUT");
    if (!unlocking || !to || to < unlocking)
        fail_msg("expected ETIMEDOUT after the holder's \"unlocking\":\n%s", text);
    th_assert_has(text, "exists=1");
    free(text);
    return 1;
}

static void test_cond_timedwait_keeps_deadline_and_etimedout(void **state)
{
    (void)state;
    const long wait = 1000;
    char warg[16];
    snprintf(warg, sizeof warg, "%ld", wait);
    const char *kinds[] = { "timedwait", "clockwait", "clockwait-rt" };
    const char *names[] = { "t11_timed", "t11_clock", "t11_clockrt" };
    pid_t pid[3];
    char *out[3];
    for (int i = 0; i < 3; i++) {
        char entry[128];
        snprintf(entry, sizeof entry, "{ symbol = \"norm_lock\"; name = \"%s\"; }", names[i]);
        const char *key = th_key(names[i], DM_KEY_LOCK);
        char *cfg = th_config(SHORT_LEASE_MS, entry);
        out[i] = th_out_file();
        pid[i] = PP(cfg, out[i], key, "cond-timeout", "norm", (char *)kinds[i], warg);
    }
    for (int i = 0; i < 3; i++) {
        char *text = finish(pid[i], out[i], 0);
        long long took = th_field_after(text, "timeout ETIMEDOUT ");
        if (took < wait - 1 || took > wait + SLACK_MS)
            fail_msg("%s: ETIMEDOUT after %lld ms for a %ld ms deadline:\n%s", kinds[i], took,
                     wait, text);
        th_assert_has(text, "exists=1");       /* returned holding the mutex again */
        th_assert_has(text, "unlocked 0");
        free(text);
    }

    /* Another process holds the mutex when the deadline passes: the wait
     * still ends with ETIMEDOUT, after re-acquiring. */
    for (long held_wait = wait;; held_wait *= 2) {
        if (cond_timeout_while_held(held_wait))
            break;
        if (held_wait >= HELD_WAIT_MAX_MS)
            fail_msg("the holder never locked before a %ld ms wait ran out", held_wait);
    }
}

static void test_cond_on_unmapped_mutex_passes_through(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t12_norm\"; }");
    char *out = th_out_file();
    th_reset_stats(rc);
    char *text = finish(PP(cfg, out, "x", "cond-plain", "plain"), out, 0);
    th_assert_has(text, "cond-plain 0 ETIMEDOUT ETIMEDOUT");
    free(text);
    assert_int_equal(th_info_num(rc, "stats", "total_connections_received:"), 0);
    assert_int_equal(th_script_calls(rc), 0);
}

/* ==== 4. fork ============================================================== */

static void test_forked_child_and_parent_exclude_on_shared_counter(void **state)
{
    (void)state;
    skip_fork_under_asan();
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t13_fork\"; }");
    /* one parent, two children: 3 processes of 3 threads */
    char *argv[] = { POSIXPROG, rs.port_text, "c13:fork", "fork-count", "norm", "2", THREADS, ITERS,
                     HOLD_US, NULL };
    assert_exact(1, shim_env(cfg), "c13:fork", argv, EXPECTED);
    assert_loses(1, "c13:fork", argv, EXPECTED);
}

/* The canonical way to fork while threads use a mutex: pthread_atfork
 * handlers lock it before fork and unlock it in parent and child. The
 * child's unlock must not end the parent's hold, and every process keeps
 * excluding: children are forked while the parent's threads run. */
static void test_atfork_handlers_fork_while_threads_hold_the_mutex(void **state)
{
    (void)state;
    skip_fork_under_asan();
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t13_atfork\"; }");
    char *argv[] = { POSIXPROG, rs.port_text, "c13:atfork", "atfork-count", "norm", "2", THREADS,
                     ITERS, HOLD_US, NULL };
    assert_exact(1, shim_env(cfg), "c13:atfork", argv, EXPECTED);
    assert_loses(1, "c13:atfork", argv, EXPECTED);
}

static void test_exec_child_with_shim_excludes_like_any_process(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t14_exec\"; }");
    char *argv[] = { POSIXPROG, rs.port_text, "c14:exec", "exec-count", "norm", "2", THREADS, ITERS,
                     HOLD_US, NULL };
    assert_exact(1, shim_env(cfg), "c14:exec", argv, EXPECTED);
    assert_loses(1, "c14:exec", argv, EXPECTED);
}

/* The parent holds the lock across two forks. A child that used the shim
 * and exited normally did not release the parent's hold; with a child
 * alive, the parent keeps renewing (its hold outlives a lease); and once
 * the parent is stopped, its hold expires: no child renews it. */
static void test_child_never_touches_parent_hold(void **state)
{
    (void)state;
    skip_fork_under_asan();
    char *cfg_a = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t15_a\"; },\n"
                                         "{ symbol = \"other_lock\"; name = \"t15_other\"; }");
    char *cfg_b = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t15_b\"; },\n"
                                         "{ symbol = \"other_lock\"; name = \"t15_other\"; }");
    char *out_a = th_out_file(), *out_b = th_out_file(), *go_a = th_go_file(), *go_b = th_go_file();
    pid_t a = PP(cfg_a, out_a, "x", "fork-hold", "norm", go_a);
    pid_t b = PP(cfg_b, out_b, "x", "fork-hold", "norm", go_b);
    th_wait_for(out_a, "child1 exited 0", RUN_MS);
    th_wait_for(out_b, "child1 exited 0", RUN_MS);
    char owner_a[128], owner_b[128], now[128];
    lock_owner("t15_a", owner_a, sizeof owner_a);
    lock_owner("t15_b", owner_b, sizeof owner_b);
    th_wait_for(out_a, "waiting", RUN_MS);
    th_wait_for(out_b, "waiting", RUN_MS);

    /* b's parent stops: only a child could keep its hold alive now. */
    long long t0 = th_now_ms();
    kill(b, SIGSTOP);
    wait_lock_gone("t15_b", SHORT_LEASE_MS + SLACK_MS);
    long long left = t0 + SHORT_LEASE_MS + QUIET_MS - th_now_ms();
    if (left > 0)
        usleep((useconds_t)left * 1000);
    /* a's parent runs: its hold has outlived a lease, same owner */
    lock_owner("t15_a", now, sizeof now);
    assert_string_equal(now, owner_a);
    char *text = th_read_file(out_b);
    long long child2 = th_field_after(text, "child2 ");
    free(text);
    if (child2 > 0)
        kill((pid_t)child2, SIGKILL);
    stop(b);

    th_touch(go_a);
    text = finish(a, out_a, 0);
    th_assert_has(text, "child1 done 0");
    th_assert_has(text, "parent-unlocked 0");       /* not EPERM: never lost */
    free(text);
    assert_int_equal(lock_exists("t15_a"), 0);
}

/* A child holds a lock of its own past several lease periods: its hold
 * has a new process id, and its own watchdog renews it. */
static void test_forked_child_gets_new_id_and_renews_its_own_hold(void **state)
{
    (void)state;
    skip_fork_under_asan();
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t16_parent\"; },\n"
                                       "{ symbol = \"other_lock\"; name = \"t16_child\"; }");
    char *out = th_out_file(), hold[16];
    snprintf(hold, sizeof hold, "%ld", 2 * SHORT_LEASE_MS + 500);
    pid_t pid = PP(cfg, out, "x", "fork-identity", "norm", hold);
    th_wait_for(out, "child-locked 0", RUN_MS);
    char parent[128], child[128];
    lock_owner("t16_parent", parent, sizeof parent);
    lock_owner("t16_child", child, sizeof child);
    const char *pc = strchr(parent, ':'), *cc = strchr(child, ':');
    assert_non_null(pc);
    assert_non_null(cc);
    if (pc - parent == cc - child && strncmp(parent, child, (size_t)(pc - parent)) == 0)
        fail_msg("child owner %s has the parent's process id (%s)", child, parent);
    char *text = finish(pid, out, 0);
    th_assert_has(text, "child-unlocked 0");       /* renewed, never lost */
    th_assert_has(text, "child exited 0");
    th_assert_has(text, "parent-unlocked 0");
    free(text);
    assert_int_equal(lock_exists("t16_parent"), 0);
    assert_int_equal(lock_exists("t16_child"), 0);
}

/* ==== 5. exit ============================================================== */

/* exit() or a return from main by the thread that holds the mutex ends
 * its critical section: the hold is released at once. */
static void test_exit_releases_waiter_wakes_before_lease(void **state)
{
    (void)state;
    const char *hows[] = { "exit", "return" };
    for (int i = 0; i < 2; i++) {
        char entry[128], name[32];
        snprintf(name, sizeof name, "t17_%s", hows[i]);
        snprintf(entry, sizeof entry, "{ symbol = \"norm_lock\"; name = \"%s\"; }", name);
        char *cfg = th_config(LONG_LEASE_MS, entry);
        char *hout = th_out_file(), *go = th_go_file(), *out = th_out_file();
        pid_t holder = PP(cfg, hout, "x", "exit-hold", "norm", (char *)hows[i], go);
        th_wait_for(hout, "locked 0", RUN_MS);
        pid_t waiter = PP(cfg, out, "x", "lock", "norm");
        th_wait_blocked(rc, name, RUN_MS);
        long long t0 = th_now_ms();
        th_touch(go);
        long long got = th_wait_for(out, "locked 0", RUN_MS);
        if (got - t0 > 5000)
            fail_msg("%s: the waiter got the lock %lld ms after the holder ended (lease %ld ms)",
                     hows[i], got - t0, LONG_LEASE_MS);
        finish_ok(holder, hout);
        finish_ok(waiter, out);
    }
}

/* Main returns while another thread is inside its critical section: that
 * thread runs until the process is really gone, so the hold is not
 * released at exit; the lease ends it after the process is gone. */
static void test_exit_with_another_thread_inside_keeps_the_hold_until_the_process_is_gone(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t17_thread\"; }");
    char *hout = th_out_file(), *go = th_go_file(), *out = th_out_file();
    pid_t holder = PP(cfg, hout, "x", "exit-hold", "norm", "thread", go);
    th_wait_for(hout, "locked 0", RUN_MS);
    pid_t waiter = PP(cfg, out, "x", "lock", "norm");
    th_wait_blocked(rc, "t17_thread", RUN_MS);
    th_touch(go);
    int st = th_wait(holder, RUN_MS);
    th_forget(holder);
    long long gone = th_now_ms();
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    long long got = th_wait_for(out, "locked 0", RUN_MS);
    /* The last renewal was at most a renewal period (lease / 3) before the
     * process ended: the lease runs at least the rest. */
    if (got - gone < SHORT_LEASE_MS / 2)
        fail_msg("the waiter got the lock %lld ms after the holder's process ended: its "
                 "thread inside was not waited for (lease %ld ms)", got - gone, SHORT_LEASE_MS);
    if (got - gone > SHORT_LEASE_MS + SLACK_MS)
        fail_msg("the waiter got the lock %lld ms after the holder's process ended "
                 "(lease %ld ms)", got - gone, SHORT_LEASE_MS);
    finish_ok(waiter, out);
}

/* A thread ends holding the mutex (it returns from its start routine
 * after a timed condition wait, or calls pthread_exit), and the process
 * then exits: nobody is inside any more, so the exit releases the hold as
 * it does the exiting thread's. The key is gone once the process is, and
 * another process's trylock gets the lock (the lease is 30 s). */
static void ended_holder_scenario(const char *how, const char *name)
{
    char entry[128];
    snprintf(entry, sizeof entry, "{ symbol = \"norm_lock\"; name = \"%s\"; }", name);
    char *cfg = th_config(LONG_LEASE_MS, entry);
    char *out = th_out_file();
    char *text = finish(PP(cfg, out, "x", "ended-hold", "norm", (char *)how), out, 0);
    th_assert_has(text, "thread locked 0\n");
    if (strcmp(how, "return") == 0)
        th_assert_has(text, "thread timedwait ETIMEDOUT\n");
    th_assert_has(text, "thread gone\n");
    free(text);
    if (lock_exists(name))
        fail_msg("%s: lock %s is still held after its process exited (pttl %lld ms): the "
                 "hold of a thread that had ended was kept as if it were inside", how, name,
                 th_cmd_int(rc, "PTTL %s", th_key(name, DM_KEY_LOCK)));
    out = th_out_file();
    text = finish(PP(cfg, out, "x", "trylock", "norm"), out, 0);
    th_assert_has(text, "trylock 0\n");
    free(text);
}

static void test_exit_after_the_holder_returned_holding_releases_the_hold(void **state)
{
    (void)state;
    ended_holder_scenario("return", "t17_ended_ret");
}

static void test_exit_after_the_holder_called_pthread_exit_releases_the_hold(void **state)
{
    (void)state;
    ended_holder_scenario("pthread_exit", "t17_ended_pexit");
}

/* The same, with a second mutex of the name held (recursively, twice) by
 * a thread that is still inside when main returns: the hold stays until
 * the process is gone and its lease ends it. */
static void test_exit_after_a_holder_ended_keeps_the_hold_of_a_thread_still_inside(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS,
                          "{ symbol = \"norm_lock\"; name = \"t17_ended_in\"; },\n"
                          "{ symbol = \"rec_lock\"; name = \"t17_ended_in\"; }");
    char *out = th_out_file();
    char *text = finish(PP(cfg, out, "x", "ended-hold", "norm", "inside"), out, 0);
    th_assert_has(text, "inside 0 0\n");
    th_assert_has(text, "thread locked 0\n");
    th_assert_has(text, "thread gone\n");
    free(text);
    if (!lock_exists("t17_ended_in"))
        fail_msg("lock t17_ended_in was released at exit while a thread was inside rec_lock");
    out = th_out_file();
    text = finish(PP(cfg, out, "x", "trylock", "norm"), out, 0);
    th_assert_has(text, "trylock EBUSY\n");
    free(text);
}

/* ==== 6. naming ============================================================ */

static char **host_count_argv(const char *key, const char *which)
{
    static char *argv[10];
    argv[0] = PSX_HOST; argv[1] = rs.port_text; argv[2] = (char *)key; argv[3] = "count";
    argv[4] = (char *)which; argv[5] = THREADS; argv[6] = ITERS; argv[7] = HOLD_US;
    argv[8] = NULL;
    return argv;
}

static void test_library_global_and_static_exclude(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS,
                       "{ symbol = \"lib_lock\"; object = \"libpsxlib.so\"; name = \"t18_lib\"; },\n"
                       "{ symbol = \"lib_static_lock\"; object = \"libpsxlib.so\"; name = \"t18_st\"; }");
    assert_exact(PROCS, shim_env(cfg), "c18:lib", host_count_argv("c18:lib", "lib"), EXPECTED);
    assert_exact(PROCS, shim_env(cfg), "c18:st", host_count_argv("c18:st", "lib_static"), EXPECTED);
    assert_loses(PROCS, "c18:lib", host_count_argv("c18:lib", "lib"), EXPECTED);
}

static void test_dlopened_plugin_static_mutex_excludes(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"plug_lock\"; object = \"libpsxplug.so\";"
                                       " name = \"t19_plug\"; }");
    assert_exact(PROCS, shim_env(cfg), "c19:plug", host_count_argv("c19:plug", "plug"), EXPECTED);
    assert_loses(PROCS, "c19:plug", host_count_argv("c19:plug", "plug"), EXPECTED);
}

/* After dlclose, a mutex of the program's own at the address the plugin's
 * had is no longer mapped; a new dlopen maps the plugin's again. */
static void test_dlclose_unmaps(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"plug_lock\"; object = \"libpsxplug.so\";"
                                      " name = \"t20_plug\"; }");
    char *out = th_out_file();
    th_reset_stats(rc);
    pid_t pid = run(shim_env_log(cfg, "debug"), out, PSX_HOST, rs.port_text, "x", "dlclose", "20",
                    NULL);
    char *text = finish(pid, out, 0);
    th_assert_has(text, "dlclose unloaded=1 placed=1 0");
    th_assert_has(text, "unmapped plug_lock");
    free(text);
    /* one section per load: 2 x (acquire + release); the 20 locks between
     * made no traffic */
    assert_int_equal(th_script_calls(rc), 4);
}

/* The start-up line (DMUTEX_LOG=info) counts a config's entries of each
 * kind as they stand at start: mapped now, by init_site (their mutexes
 * are mapped as they are made), when dlopen loads their object, skipped
 * (required = false). Before, it said "1 mutexes mapped" for all four. */
static void test_startup_line_counts_entries_mapped_now_and_by_init_site(void **state)
{
    (void)state;
    char *cfg = th_config_top(SHORT_LEASE_MS,
                              "conds = ( { symbol = \"cv\"; name = \"t_su_cv\"; } );\n",
                              "{ symbol = \"norm_lock\"; name = \"t_su\"; },\n"
                              "{ init_site = \"account_new\"; name = \"t_su_heap\"; },\n"
                              "{ symbol = \"no_such_lock\"; name = \"t_su_x\"; required = false; },\n"
                              "{ symbol = \"plug_lock\"; object = \"libt_su_later.so\"; name = \"t_su_p\"; }");
    char *out = th_out_file();
    char *text = finish(run(shim_env_log(cfg, "info"), out, POSIXPROG, rs.port_text, "x",
                            "trylock", "norm", NULL), out, 0);
    th_assert_has(text, "trylock 0\n");
    th_assert_has(text, ": mutexes: 4 entries, 1 mapped now, 1 by init_site, 1 when dlopen "
                        "loads their object, 1 skipped (required = false); conds: 1 entry, "
                        "1 mapped now, 0 by init_site; redis at ");
    free(text);
}

static void test_heap_mutex_by_init_site_excludes(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ init_site = \"account_new\"; name = \"t21_acct\"; }");
    assert_exact(PROCS, shim_env(cfg), "c21:heap", pp_count_argv(0, "c21:heap", "heap"), EXPECTED);
    assert_loses(PROCS, "c21:heap", pp_count_argv(0, "c21:heap", "heap"), EXPECTED);
}

/* Two heap mutexes of one init_site share its name: a thread holding one
 * that locks the other re-enters the cluster lock (no deadlock, no second
 * acquire), and sections nesting both exclude across processes. */
static void test_init_site_nested_holds_are_reentrant(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ init_site = \"account_new\"; name = \"t22_acct\"; }");
    char *out = th_out_file();
    th_reset_stats(rc);
    char *text = finish(PP(cfg, out, "x", "nested-once", "heap"), out, 0);
    th_assert_has(text, "nested 0 0 0 0");
    free(text);
    assert_int_equal(th_script_calls(rc), 2);
    assert_int_equal(lock_exists("t22_acct"), 0);
    char *argv[] = { POSIXPROG, rs.port_text, "c22:nest", "nested-count", "heap", THREADS, ITERS,
                     HOLD_US, NULL };
    assert_exact(PROCS, shim_env(cfg), "c22:nest", argv, EXPECTED);
}

/* Many programs free a heap mutex without pthread_mutex_destroy. When
 * malloc hands that memory to a mutex initialised elsewhere, that one is
 * not an init_site mutex and must not be mapped. */
static void test_heap_mutex_reused_by_another_init_is_unmapped(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ init_site = \"account_new\"; name = \"t23_acct\"; }");
    char *out = th_out_file();
    /* make test-asan: ASan keeps freed memory in quarantine, so that
     * malloc never hands it out again; without one it does, as glibc. */
    static char asan[1024];
    const char *extra[] = { NULL, NULL };
    if (getenv("DM_TEST_PRELOAD")) {
        const char *o = getenv("ASAN_OPTIONS");
        snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%squarantine_size_mb=0:"
                 "thread_local_quarantine_size_kb=0", o ? o : "", o && *o ? ":" : "");
        extra[0] = asan;
    }
    static struct th_shim_env e;
    th_reset_stats(rc);
    char *text = finish(run(th_shim_env_extra(&e, cfg, rs.url, NULL, extra), out, POSIXPROG,
                            rs.port_text, "x", "heap-reuse", "heap", "10", NULL), out, 0);
    th_assert_has(text, "reuse same=1 0");
    free(text);
    assert_int_equal(th_script_calls(rc), 2);        /* the account's one section only */
}

/* The stale address the other way round: a program frees a mapped heap
 * mutex without pthread_mutex_destroy, and the shim's next record of a name
 * lands in that memory (staleprog's calloc makes sure it does, with the
 * record's own mutex at the stale address). The shim locking its own
 * mutex there (dmutex_token does) must not take the cluster lock of the
 * stale name: the shim's internal locks go to glibc, not through the
 * exported pthread_mutex_lock (tests/internal_locks.test.sh). Before they
 * did, this run cost six script calls, the stale name taken and given
 * back once more. */
static void test_a_stale_mapped_address_never_captures_the_shims_own_mutex(void **state)
{
    (void)state;
    if (getenv("DM_TEST_PRELOAD")) {
        /* staleprog's calloc hands out glibc's memory (__libc_calloc), on
         * purpose: under make test-asan, ASan's free then finds a pointer
         * it never gave (a bad-free in libconfig's first free). */
        print_message("stale address: not run with %s preloaded\n", getenv("DM_TEST_PRELOAD"));
        skip();
    }
    char *cfg = th_keep_file(th_write_file(".cfg", "mutexes = ();\n"));
    char *out = th_out_file();
    th_reset_stats(rc);
    char *text = finish(run(shim_env(cfg), out, STALEPROG, "t23b_", NULL), out, 0);
    th_assert_has(text, "stale trap=1 ");
    if (strstr(text, "token=0\n"))
        fail_msg("the fresh name's holder read no token:\n%s", text);
    free(text);
    assert_int_equal(th_script_calls(rc), 4);        /* two sections, acquire and release each */
}

static void test_std_mutex_global_excludes(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS,
                       "{ symbol = \"counter_mutex\"; name = \"t24_global\"; },\n"
                       "{ symbol = \"_ZN4shop11stock_mutexE\"; name = \"t24_ns\"; }");
    const char *which[] = { "global", "ns" };
    for (int i = 0; i < 2; i++) {
        char *argv[] = { PSX_CXX, rs.port_text, "c24:cxx", (char *)which[i], THREADS, ITERS, HOLD_US,
                         NULL };
        assert_exact(PROCS, shim_env(cfg), "c24:cxx", argv, EXPECTED);
        if (i == 0)
            assert_loses(PROCS, "c24:cxx", argv, EXPECTED);
    }
}

static void test_struct_offset_and_array_index(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"shop\"; offset = 8; name = \"t25_shop\"; },\n"
                                       "{ symbol = \"slots\"; index = 2; name = \"t25_slot\"; }");
    assert_exact(PROCS, shim_env(cfg), "c25:shop", pp_count_argv(0, "c25:shop", "shop"), EXPECTED);
    assert_exact(PROCS, shim_env(cfg), "c25:slot", pp_count_argv(0, "c25:slot", "slot2"), EXPECTED);
    /* slots[1], next to the mapped element, is not mapped */
    char *out = th_out_file();
    th_reset_stats(rc);
    char *text = finish(PP(cfg, out, "c25:one", "count", "slot1", "1", "5", "0"), out, 0);
    free(text);
    assert_int_equal(th_script_calls(rc), 0);
    /* and the checker sees lost updates on it under the shim */
    long long n = 0;
    for (int i = 0; i < LOSS_TRIES; i++)
        if ((n = run_counter(PROCS, shim_env(cfg), "c25:one", pp_count_argv(0, "c25:one", "slot1")))
            < EXPECTED)
            break;
    if (n >= EXPECTED)
        fail_msg("the unmapped slots[1] counted exactly %lld %d times", n, LOSS_TRIES);
}

static void test_ambiguous_static_is_an_error_listing_candidates(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"cache_lock\"; }");
    char *out = th_out_file();
    char *text = finish(run(shim_env(cfg), out, PSX_HOST, rs.port_text, "x", "count", "twin_a",
                            "1", "1", "0", NULL), out, EX_CONFIG);
    th_assert_has(text, "ambiguous");
    th_assert_has(text, "twin_a.c");
    th_assert_has(text, "twin_b.c");
    if (strstr(text, "done"))
        fail_msg("the program ran despite the ambiguous name:\n%s", text);
    free(text);
}

static void test_file_qualified_static_excludes(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"twin_a.c:cache_lock\"; name = \"t27_a\"; }");
    assert_exact(PROCS, shim_env(cfg), "c27:a", host_count_argv("c27:a", "twin_a"), EXPECTED);
    /* twin_b.c's static of the same name stays unmapped */
    char *out = th_out_file();
    th_reset_stats(rc);
    free(finish(run(shim_env(cfg), out, PSX_HOST, rs.port_text, "c27:b", "count", "twin_b", "1", "5",
                    "0", NULL), out, 0));
    assert_int_equal(th_script_calls(rc), 0);
}

/* ==== 7. explicit API ======================================================= */

static void test_api_weak_runs_without_shim_and_maps_with_it(void **state)
{
    (void)state;
    char *argv[] = { API_WEAK, rs.port_text, "c28:api", THREADS, ITERS, HOLD_US, NULL };
    /* without the shim: the weak functions are NULL, the program runs */
    char *out = th_out_file();
    char *text = finish(run(no_env, out, API_WEAK, rs.port_text, "c28:one", "1", "3", "0", NULL),
                        out, 0);
    th_assert_has(text, "api absent\n");
    th_assert_has(text, "done 3\n");
    th_assert_has(text, "after 0\n");
    free(text);
    assert_loses(PROCS, "c28:api", argv, EXPECTED);
    /* with it: dmutex_name maps the heap mutex, with no config entry */
    char *cfg = th_config(SHORT_LEASE_MS, "");
    out = th_out_file();
    text = finish(run(shim_env(cfg), out, API_WEAK, rs.port_text, "c28:one", "1", "3", "0", NULL),
                  out, 0);
    th_assert_has(text, "api name=0\n");
    th_assert_has(text, "after 0\n");
    free(text);
    assert_exact(PROCS, shim_env(cfg), "c28:api", argv, EXPECTED);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = ((const long long *)a)[0], y = ((const long long *)b)[0];
    return x < y ? -1 : x > y;
}

/* 3 api_weak processes of 2 threads x 10 sections on the dmutex_name'd
 * `account` under `cfg`; each section records its fencing token and the
 * count it read. Fills rec[i] = { count, token, process } sorted by count
 * (the order of the holds: each section read a count of its own), and
 * returns the token counter from before the run. */
enum { TOK_P = 3, TOK_N = 2 * 10 };
static long long token_run(const char *cfg, long long rec[TOK_P * TOK_N][3])
{
    freeReplyObject(th_cmd(rc, "DEL c29:tok"));
    long long base = th_cmd_int(rc, "GET %s", th_key("account", DM_KEY_TOKEN));
    pid_t pid[TOK_P];
    char *out[TOK_P];
    for (int i = 0; i < TOK_P; i++) {
        out[i] = th_out_file();
        pid[i] = run(shim_env(cfg), out[i], API_WEAK, rs.port_text, "c29:tok", "2", "10", "500",
                     NULL);
    }
    int n = 0;
    for (int i = 0; i < TOK_P; i++) {
        char *text = finish(pid[i], out[i], 0);
        th_assert_has(text, "api name=0\n");
        for (char *p = text; (p = strstr(p, "tok ")) != NULL; p++) {
            long long tok, cnt;
            if (sscanf(p, "tok %lld %lld", &tok, &cnt) == 2 && n < TOK_P * TOK_N) {
                rec[n][0] = cnt;
                rec[n][1] = tok;
                rec[n][2] = i;
                n++;
            }
        }
        free(text);
    }
    assert_int_equal(n, TOK_P * TOK_N);
    qsort(rec, (size_t)n, sizeof rec[0], cmp_ll);
    for (int i = 0; i < n; i++) {
        if (rec[i][0] != i)
            fail_msg("the sections read counts up to %lld out of order: %lld at %d (exclusion)",
                     rec[n - 1][0], rec[i][0], i);
        if (rec[i][1] <= base)
            fail_msg("token %lld is not above the %lld before the run", rec[i][1], base);
        if (i > 0 && rec[i][1] < rec[i - 1][1])
            fail_msg("the section after the one with token %lld has token %lld: tokens do not "
                     "follow the order of the holds", rec[i - 1][1], rec[i][1]);
    }
    assert_true(th_cmd_int(rc, "GET %s", th_key("account", DM_KEY_TOKEN)) >= rec[n - 1][1]);
    return base;
}

/* batch_ms = 0: every section is a grant of its own, with a token of its
 * own, growing with every grant whichever process gets it. */
static void test_dmutex_token_grows_across_processes(void **state)
{
    (void)state;
    char *cfg = th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\nbatch_ms = 0;\n"
                                           "mutexes = ();\n", SHORT_LEASE_MS));
    long long rec[TOK_P * TOK_N][3];
    token_run(cfg, rec);
    for (int i = 1; i < TOK_P * TOK_N; i++)
        if (rec[i][1] == rec[i - 1][1])
            fail_msg("token %lld given twice", rec[i][1]);
}

/* Batches (the default): sections of one process in one batch share its
 * grant's token; a token never passes from one process to another, and
 * tokens never go down in the order of the holds. */
static void test_dmutex_token_is_one_per_grant_with_batches(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "");
    long long rec[TOK_P * TOK_N][3];
    token_run(cfg, rec);
    for (int i = 1; i < TOK_P * TOK_N; i++)
        if (rec[i][1] == rec[i - 1][1] && rec[i][2] != rec[i - 1][2])
            fail_msg("token %lld held by two processes", rec[i][1]);
}

/* ==== 8. edges of the calls ================================================== */

/* Two mutexes mapped under one name: a thread holding both waits on one's
 * condition variable, and another thread of the process must be able to
 * lock that mutex to signal it, as without the shim. */
static void test_mutexes_sharing_a_name_let_a_cond_waiter_be_signalled(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t40_fam\"; },\n"
                                      "{ symbol = \"other_lock\"; name = \"t40_fam\"; }");
    char *out = th_out_file();
    pid_t p = PP(cfg, out, "x", "shared-cond", "norm");
    int st = th_wait(p, 10000);
    th_forget(p);
    char *text = th_read_file(out);
    if (st == -1)
        fail_msg("deadlock: the signaller never got the mutex the waiter waits on:\n%s", text);
    th_assert_has(text, "shared-cond 0 0");
    free(text);
    assert_int_equal(lock_exists("t40_fam"), 0);
}

/* Threads of one process keep a shared name busy with overlapping holds
 * (the process's hold never has zero users by itself): another process
 * that wants the name must still get it, within the shim's step-aside
 * bound, not when the first process stops. */
static void test_threads_sharing_a_name_do_not_starve_another_process(void **state)
{
    (void)state;
    const long hammer_ms = 12000;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"slots\"; index = 0; name = \"t44_fam\"; },\n"
                                      "{ symbol = \"slots\"; index = 1; name = \"t44_fam\"; },\n"
                                      "{ symbol = \"slots\"; index = 2; name = \"t44_fam\"; },\n"
                                      "{ symbol = \"slots\"; index = 3; name = \"t44_fam\"; }");
    char *hout = th_out_file(), *out = th_out_file();
    pid_t hammer = PP(cfg, hout, "x", "family-hammer", "slot1", "12000");
    th_wait_for(hout, "hammering", RUN_MS);
    usleep(500 * 1000);     /* the threads are at it */
    /* The other process maps one mutex of the name only: a plain waiter,
     * which must announce its want all the same. */
    char *one = th_config(LONG_LEASE_MS, "{ symbol = \"slots\"; index = 0; name = \"t44_fam\"; }");
    long long t0 = th_now_ms();
    pid_t other = PP(one, out, "x", "lock", "slot0");
    long long got = th_wait_for(out, "locked 0", RUN_MS);
    printf("measured: another process got a name 4 threads keep busy after %lld ms\n", got - t0);
    if (got - t0 > hammer_ms / 2)
        fail_msg("the other process waited %lld ms: it starved while the hammering process "
                 "kept the name (it stops after %ld ms)", got - t0, hammer_ms);
    finish_ok(other, out);
    char *text = finish(hammer, hout, 0);
    th_assert_has(text, "hammered ");
    free(text);
}

/* Heap mutexes of one init_site name made and destroyed by several threads
 * at once: the name's record is freed with its last mutex and made again
 * with the next, while other threads take and drop references. Cached too,
 * so the last destroy also gives a kept hold back. */
static void test_heap_mutexes_of_one_name_made_and_destroyed_by_many_threads(void **state)
{
    (void)state;
    const char *entries[] = {
        "{ init_site = \"account_new\"; name = \"t45_churn\"; }",
        "{ init_site = \"account_new\"; name = \"t45_cached\"; cache = true; }",
    };
    for (int i = 0; i < 2; i++) {
        char *cfg = th_config(LONG_LEASE_MS, entries[i]);
        char *out = th_out_file();
        char *text = finish(PP(cfg, out, "x", "heap-churn", "plain", "3000"), out, 0);
        th_assert_has(text, "churned ");
        free(text);
    }
    assert_int_equal(lock_exists("t45_churn"), 0);
    assert_int_equal(lock_exists("t45_cached"), 0);
}

/* Per-object names (dmutex_name), each held about a renewal period and
 * freed with its mutex: the watchdog may have a renewal round in flight that
 * read the freed name's hold. A short lease and on_lease_lost = "abort":
 * a stale verdict landing on another name's hold would abort a healthy
 * process. */
static void test_per_object_names_freed_while_their_renewal_is_in_flight(void **state)
{
    (void)state;
    char *cfg = th_keep_file(th_write_file(".cfg", "lease_ms = 150; renew_ms = 30; "
                                           "lease_margin_ms = 20; on_lease_lost = \"warn\";\n"
                                           "mutexes = ();\n"));
    /* 32 threads x 100 names, held up to 60 ms against a 30 ms renewal
     * period. The defect: a renewal round's "the server no longer has it"
     * for a freed name landing on the hold that reused its memory (the
     * shim before the fix said so in 2 of 3 runs). A loaded machine may
     * also miss a renewal deadline (lease - margin): that loss says "no
     * renewal succeeded in time", is real, and is not this defect; warn
     * mode lets the run go on to tell the two apart. */
    for (int round = 0; round < 3; round++) {
        char *out = th_out_file();
        char *text = finish(PP(cfg, out, "x", "name-churn", "plain", "32", "100", "60000"), out, 0);
        th_assert_has(text, "name-churn 0");
        if (strstr(text, "the server no longer has the hold"))
            fail_msg("a healthy hold was declared lost:\n%s", text);
        if (strstr(text, "lost the lease"))
            print_message("measured: a renewal deadline missed under load (not a failure)\n");
        free(text);
    }
}

/* Issue 11: at most 1 KB of RSS per idle name, of which the shim's heap
 * takes the most (the registry's slots are mmap'ed, a few dozen bytes a
 * name). Measured in heap bytes (mallinfo2 inside the program), which do
 * not depend on the machine's load: before records stopped keeping their
 * key strings and counters waited for a first count, an idle name took
 * about 1,600 bytes. */
#define NAME_HEAP_NAMES 10000
#define NAME_HEAP_MAX_B 768     /* heap per idle name; RSS adds the registry */

static void test_an_idle_name_costs_the_shim_less_than_768_bytes_of_heap(void **state)
{
    (void)state;
    char *cfg = th_keep_file(th_write_file(".cfg", "mutexes = ();\n"));
    char *out = th_out_file();
    char n[24];
    snprintf(n, sizeof n, "%d", NAME_HEAP_NAMES);
    char *text = finish(PP(cfg, out, "x", "name-heap", "plain", n), out, 0);
    const char *at = strstr(text, "name-heap ");
    if (!at)
        fail_msg("no figure:\n%s", text);
    if (getenv("DM_TEST_PRELOAD")) {
        /* make test-asan: the heap is ASan's, whose mallinfo2 is all
         * zeros (and whose chunks carry redzones); the names were made
         * and freed under ASan all the same. */
        print_message("not measured with %s preloaded\n", getenv("DM_TEST_PRELOAD"));
        free(text);
        return;
    }
    long b = atol(at + strlen("name-heap "));
    print_message("measured: %ld bytes of heap per idle name\n", b);
    if (b <= 0 || b > NAME_HEAP_MAX_B)
        fail_msg("an idle name took %ld bytes of heap; at most %d", b, NAME_HEAP_MAX_B);
    free(text);
}

/* glibc lets another thread unlock a normal mutex. That thread ends the
 * holder's share before the real unlock: a third thread that takes the
 * mutex at once must not lose its own share (the process would keep the
 * cluster lock for ever).
 *
 * The work is bounded, not the time: XUNLOCK_ITERS hand-offs between two
 * threads cost two wake-ups each, which a CPU hog beside the run delays by
 * a scheduler slice or more (20,000 took 5 s on a quiet 2-core machine and
 * more than 30 s beside `stress-ng --cpu 2`). With the unlock ending the
 * share after the real unlock (the defect), 200 iterations left the lock
 * held in 2 of 3 runs and 2,000 in 7 of 7, quiet or loaded; 5,000 take a
 * few seconds beside the hog. XUNLOCK_GUARD_MS only ends a hang. */
#define XUNLOCK_ITERS    "5000"
#define XUNLOCK_GUARD_MS 240000L

static void test_unlock_by_another_thread_racing_a_third_locker_leaves_the_lock_free(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t46_xu\"; }");
    char *out = th_out_file();
    pid_t pid = PP(cfg, out, th_key("t46_xu", DM_KEY_LOCK), "xunlock", "norm", XUNLOCK_ITERS);
    char *text = th_finish(pid, out, 0, XUNLOCK_GUARD_MS);
    th_assert_has(text, "xunlock exists=0");
    free(text);
}

/* glibc waits for a deadline too far ahead to compute with; so must the
 * shim (it overflowed to "already past"). */
static void test_timedlock_with_a_far_future_deadline_waits_like_glibc(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t41_far\"; }");
    char *hout = th_out_file(), *go = th_go_file(), *out = th_out_file();
    pid_t holder = PP(cfg, hout, "x", "hold", "norm", go);
    th_wait_for(hout, "locked 0", RUN_MS);
    pid_t waiter = PP(cfg, out, "x", "far-timedlock", "norm");
    th_wait_blocked(rc, "t41_far", RUN_MS);
    usleep(QUIET_MS * 1000);
    th_touch(go);
    char *text = finish(waiter, out, 0);
    th_assert_has(text, "far 0 ");
    if (th_field_after(text, "far 0 ") < QUIET_MS)
        fail_msg("timedlock returned before the holder let go:\n%s", text);
    free(text);
    finish_ok(holder, hout);
}

static void test_clocklock_with_an_unsupported_clock_is_einval_without_a_round_trip(void **state)
{
    (void)state;
    char *cfg = th_config(LONG_LEASE_MS, "{ symbol = \"norm_lock\"; name = \"t42_clk\"; }");
    char *out = th_out_file();
    th_reset_stats(rc);
    char *text = finish(PP(cfg, out, "x", "clocklock-bad", "norm"), out, 0);
    th_assert_has(text, "clocklock-bad EINVAL");
    free(text);
    assert_int_equal(th_script_calls(rc), 0);
}

/* A robust mutex whose cluster holder died while this process waited on a
 * condition variable: the re-acquire reports EOWNERDEAD, as glibc's
 * pthread_cond_timedwait does for a holder that died locally. */
static void test_cond_wait_reacquire_reports_eownerdead_of_a_dead_holder(void **state)
{
    (void)state;
    char *cfg = th_config(SHORT_LEASE_MS, "{ symbol = \"attr_lock\"; name = \"t43_rob\"; }");
    char *wout = th_out_file(), *hout = th_out_file();
    pid_t waiter = PP(cfg, wout, "x", "cond-robust", "arobust", "1500");
    th_wait_for(wout, "waiting", RUN_MS);
    pid_t holder = PP(cfg, hout, "x", "robust-hold", "arobust");
    th_wait_for(hout, "locked 0", RUN_MS);
    stop(holder);
    char *text = finish(waiter, wout, 0);
    th_assert_has(text, "cond-robust EOWNERDEAD\nconsistent 0\nunlock 0\n");
    free(text);
    assert_int_equal(lock_exists("t43_rob"), 0);
}

#define T(f) cmocka_unit_test_teardown(f, th_test_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_normal_mutex_by_static_initializer_and_by_init_excludes),
        T(test_recursive_nested_locks_cost_no_round_trip_and_hold_ends_with_outermost),
        T(test_errorcheck_relock_gives_edeadlk_without_redis_traffic),
        T(test_errorcheck_unlock_by_non_holder_gives_eperm_without_redis_traffic),
        T(test_destroy_of_held_mapped_mutex_gives_ebusy_and_reinit_starts_clean),
        T(test_robust_lock_after_sigkilled_holder_gives_eownerdead),
        T(test_unlock_without_consistent_makes_notrecoverable),
        T(test_thread_exiting_with_robust_mutex_gives_eownerdead_to_next_locker),
        T(test_other_process_acquires_while_waiter_in_cond_wait),
        T(test_other_process_acquires_while_waiter_in_cond_timedwait),
        T(test_other_process_acquires_while_waiter_in_cond_clockwait),
        T(test_cond_timedwait_keeps_deadline_and_etimedout),
        T(test_cond_on_unmapped_mutex_passes_through),
        T(test_forked_child_and_parent_exclude_on_shared_counter),
        T(test_atfork_handlers_fork_while_threads_hold_the_mutex),
        T(test_exec_child_with_shim_excludes_like_any_process),
        T(test_child_never_touches_parent_hold),
        T(test_forked_child_gets_new_id_and_renews_its_own_hold),
        T(test_exit_releases_waiter_wakes_before_lease),
        T(test_exit_with_another_thread_inside_keeps_the_hold_until_the_process_is_gone),
        T(test_exit_after_the_holder_returned_holding_releases_the_hold),
        T(test_exit_after_the_holder_called_pthread_exit_releases_the_hold),
        T(test_exit_after_a_holder_ended_keeps_the_hold_of_a_thread_still_inside),
        T(test_library_global_and_static_exclude),
        T(test_dlopened_plugin_static_mutex_excludes),
        T(test_dlclose_unmaps),
        T(test_startup_line_counts_entries_mapped_now_and_by_init_site),
        T(test_heap_mutex_by_init_site_excludes),
        T(test_init_site_nested_holds_are_reentrant),
        T(test_heap_mutex_reused_by_another_init_is_unmapped),
        T(test_a_stale_mapped_address_never_captures_the_shims_own_mutex),
        T(test_std_mutex_global_excludes),
        T(test_struct_offset_and_array_index),
        T(test_ambiguous_static_is_an_error_listing_candidates),
        T(test_file_qualified_static_excludes),
        T(test_api_weak_runs_without_shim_and_maps_with_it),
        T(test_dmutex_token_grows_across_processes),
        T(test_dmutex_token_is_one_per_grant_with_batches),
        T(test_mutexes_sharing_a_name_let_a_cond_waiter_be_signalled),
        T(test_threads_sharing_a_name_do_not_starve_another_process),
        T(test_heap_mutexes_of_one_name_made_and_destroyed_by_many_threads),
        T(test_per_object_names_freed_while_their_renewal_is_in_flight),
        T(test_an_idle_name_costs_the_shim_less_than_768_bytes_of_heap),
        T(test_unlock_by_another_thread_racing_a_third_locker_leaves_the_lock_free),
        T(test_timedlock_with_a_far_future_deadline_waits_like_glibc),
        T(test_clocklock_with_an_unsupported_clock_is_einval_without_a_round_trip),
        T(test_cond_wait_reacquire_reports_eownerdead_of_a_dead_holder),
    };
    return cmocka_run_group_tests(tests, group_setup, th_group_teardown);
}
