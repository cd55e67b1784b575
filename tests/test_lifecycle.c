/* test_lifecycle: a mapped mutex through the life events of a process.
 *
 * Process A (tests/progs/lifeprog.c, an ordinary pthread program) has a
 * thread T bring its mapped mutex to one STATE, then one EVENT happens;
 * process B (lifeprog too) contends for the same lock name. Every critical
 * section reports to the exclusion checker (tests/checker.h), which counts
 * overlapping sections. The matrix:
 *
 *   STATE of T at the event:
 *     held    inside its section, reporting every few ms till the process ends
 *     lock    waiting in pthread_mutex_lock (B holds)
 *     timed   waiting in pthread_mutex_timedlock (B holds)
 *     cond    waiting in pthread_cond_wait (B holds the mutex meanwhile)
 *     cached  a cached hold (config cache = true), nobody inside
 *   EVENT:
 *     exit, _exit, abort from main; exec of itself in a no-op mode; a
 *     signal handler in T calling exit or _exit        - every state
 *     pthread_cancel of T; T's own pthread_exit; fork;  - the states where
 *     dlclose of the plugin holding the mutex              they mean something
 *   and a process that cannot start the watchdog thread (cgroup pids.max).
 *
 * Every cell asserts: no overlap seen by the checker; no hang (A ends, or
 * the event completes, within a bound: a hung cell is killed and fails);
 * the next contender gets the lock within lease + slack after A is gone or
 * let go; and one lease after everything ended no key of the lock is left
 * but the fencing counter (a :holder marker only with a TTL).
 *
 * Lease 2 s; bounds are one-sided and generous (a slow, shared machine).
 * One test while working on it: DM_LIFE_FILTER='*cancel*'
 * build/tests/test_lifecycle (a cmocka glob on the names). */
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "checker.h"
#include "harness.h"

#define LIFE            TH_BUILD "/tests/progs/lifeprog"
#define PLUGIN          TH_BUILD "/tests/progs/liblifeplug.so"

#define LEASE_MS        2000L   /* the lock's lease in every config here */
#define SLACK_MS        2500L   /* how late an event may be on a loaded machine */
#define RUN_MS          15000L  /* longest a step that should finish may take */
#define SETTLE_MS       500L    /* after a cancel, before B lets go: time for a wrong shim to run ahead */
#define KEY_MARGIN_MS   300L    /* past a lease, before looking for left keys */
#define PROMPT_MS       (LEASE_MS / 2)  /* "promptly": well before a lease ends */
#define LONG_LEASE_MS   10000L  /* where a leaked hold must stand out: it lasts this long */
#define SUITE_ALARM_S   600
#define POLL_US         2000
#define CGROUP_PIDS     "/sys/fs/cgroup/pids"

static struct th_checker chk;
static struct th_redis rs;              /* the lock server of the current test */
static redisContext *rc;
static char shim_path[PATH_MAX], life_path[PATH_MAX], plugin_path[PATH_MAX];
static char name[48];                   /* the lock name of the current test */
static char pname[64];                  /* and of its plugin's mutex */
static char cgroup_dir[PATH_MAX];       /* the watchdog test's cgroup, while it exists */

/* ---- processes ------------------------------------------------------------ */

static char *config(const char *extra, long lease_ms)
{
    return th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\nprograms = [ \"lifeprog\" ];\n"
        "mutexes = ( { symbol = \"life_lock\"; name = \"%s\"; %s },\n"
        "            { symbol = \"plug_lock\"; object = \"liblifeplug.so\"; name = \"%s\"; } );\n",
        lease_ms, name, extra ? extra : "", pname));
}

/* lifeprog ARGS... (NULL-terminated) with the shim and `cfg`, output to
 * `out`, reporting to the checker under the test's prefix. */
static pid_t life(const char *cfg, const char *out, ...)
{
    static struct th_shim_env e;
    va_list ap;
    va_start(ap, out);
    pid_t pid = th_checker_progv(&chk, NULL, NULL, NULL, th_shim_env(&e, cfg, rs.url, NULL),
                                 life_path, out, ap);
    va_end(ap);
    return pid;
}

/* A must end by itself with exit status `code` (or by signal `sig`). */
static long long expect_end(pid_t pid, const char *out, const char *what, int code, int sig)
{
    long long gone = 0;
    int st = th_wait_end(pid, RUN_MS, &gone, NULL);
    char *text = th_read_output(out);
    if (st == -1)
        fail_msg("hang: %s: pid %d still running %ld ms later; output:\n%s", what, (int)pid,
                 RUN_MS, text);
    if (sig ? !(WIFSIGNALED(st) && WTERMSIG(st) == sig)
            : !(WIFEXITED(st) && WEXITSTATUS(st) == code))
        fail_msg("wrong rc: %s: pid %d ended with status 0x%x (exit %d, signal %d), expected "
                 "%s %d; output:\n%s", what, (int)pid, st, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
                 WIFSIGNALED(st) ? WTERMSIG(st) : 0, sig ? "signal" : "exit", sig ? sig : code,
                 text);
    free(text);
    return gone;
}

/* The number after `needle` in the file `out`, waiting for it. */
static long long wait_num(const char *out, const char *needle, long timeout_ms)
{
    th_wait_for(out, needle, timeout_ms);
    char *text = th_read_output(out);
    long long v = th_field_after(text, needle);
    free(text);
    return v;
}

/* Waits for a line of A's or B's; fails with `why` (hang, overlap, ...)
 * and the output when it does not come. Returns when it was seen. */
static long long expect_line(const char *out, const char *needle, long timeout_ms,
                             const char *why)
{
    long long end = th_now_ms() + timeout_ms;
    for (;;) {
        char *t = th_read_output(out);
        if (strstr(t, needle)) {
            free(t);
            return th_now_ms();
        }
        if (th_now_ms() > end)
            fail_msg("%s: no \"%s\" within %ld ms; output:\n%s", why, needle, timeout_ms, t);
        free(t);
        usleep(POLL_US);
    }
}

/* ---- the lock server ------------------------------------------------------ */

static long long owners(const char *lname)
{
    return th_cmd_int(rc, "HLEN %s", th_key(lname, DM_KEY_LOCK));
}

/* One lease after the end, only the fencing counter and the epoch may be
 * left (both kept for good, acquire.lua) and a :holder marker that has a
 * TTL. */
static void assert_no_leftover_keys(const char *lname, long long ended)
{
    long long wait = ended + LEASE_MS + KEY_MARGIN_MS - th_now_ms();
    if (wait > 0)
        usleep((useconds_t)wait * 1000);
    redisReply *r = th_cmd(rc, "KEYS %s*", th_key(lname, DM_KEY_LOCK));
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    const char *token = th_key(lname, DM_KEY_TOKEN), *holder = th_key(lname, DM_KEY_HOLDER);
    const char *epoch = th_key(lname, DM_KEY_EPOCH);
    for (size_t i = 0; i < r->elements; i++) {
        const char *k = r->element[i]->str;
        if (strcmp(k, token) == 0 || strcmp(k, epoch) == 0)
            continue;
        if (strcmp(k, holder) == 0 && th_cmd_int(rc, "PTTL %s", k) > 0)
            continue;
        char *dump = NULL;
        redisReply *t = th_cmd(rc, "TYPE %s", k);
        long long ttl = th_cmd_int(rc, "PTTL %s", k);
        if (asprintf(&dump, "leaked key: %s (type %s, pttl %lld) one lease after the end",
                     k, t->str, ttl) < 0)
            dump = NULL;
        freeReplyObject(t);
        freeReplyObject(r);
        fail_msg("%s", dump ? dump : "leaked key");
    }
    freeReplyObject(r);
}

/* After A is gone or let go at `since`: contender c (a "hold" without
 * -g, output in `out`) gets the lock within lease + slack and ends.
 * Returns when it got in. */
static long long contender_in(pid_t c, const char *out, long long since)
{
    expect_line(out, "inside ", LEASE_MS + SLACK_MS + RUN_MS,
                "hang: the next contender never got the lock");
    long long in = wait_num(out, "inside ", 0);
    expect_end(c, out, "the next contender", 0, 0);
    if (in - since > LEASE_MS + SLACK_MS)
        fail_msg("hang: the next contender got lock %s %lld ms after A was gone or let go "
                 "(lease %ld ms)", name, in - since, LEASE_MS);
    return in;
}

/* The same with a new contender. */
static long long next_contender(const char *cfg, long long since)
{
    char *out = th_out_file();
    return contender_in(life(cfg, out, "hold", NULL), out, since);
}

/* ---- the matrix ------------------------------------------------------------- */

enum { ENDS, ENDS_ABORT, EXECS };       /* how an event ends A */

static int event_kind(const char *event)
{
    if (strcmp(event, "abort") == 0)
        return ENDS_ABORT;
    if (strcmp(event, "exec") == 0)
        return EXECS;
    return ENDS;
}

static int releases_at_exit(const char *event)
{
    return strcmp(event, "exit") == 0 || strcmp(event, "sigexit") == 0;
}

/* One cell where the event ends A's process (or its image). */
static void run_ending_cell(const char *state, const char *event)
{
    int waits = strcmp(state, "lock") == 0 || strcmp(state, "timed") == 0;
    int cond = strcmp(state, "cond") == 0, held = strcmp(state, "held") == 0;
    int cached = strcmp(state, "cached") == 0;
    char *cfg = config(cached ? "cache = true;" : "", LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file();
    char *goa = th_go_file(), *gob = th_go_file(), *go2 = th_go_file();
    pid_t a = 0, b = 0, next = 0;
    const char *next_out = NULL;

    if (waits) {
        b = life(cfg, bout, "hold", "-g", gob, NULL);
        th_wait_for(bout, "inside ", RUN_MS);
    }
    a = life(cfg, aout, "life", "-S", state, "-E", event, "-g", goa, "-G", go2, NULL);
    char a_owner[128] = "";
    if (held) {
        th_wait_for(aout, "inside ", RUN_MS);
        redisReply *r = th_cmd(rc, "HKEYS %s", th_key(name, DM_KEY_LOCK));
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 1)
            snprintf(a_owner, sizeof a_owner, "%s", r->element[0]->str);
        freeReplyObject(r);
        next = b = life(cfg, bout, "hold", NULL);
        next_out = bout;
        th_wait_listeners(rc, name, 1, RUN_MS);
    } else if (waits) {
        th_wait_for(aout, "locking", RUN_MS);
        th_wait_listeners(rc, name, 1, RUN_MS);
    } else if (cond) {
        th_wait_for(aout, "waiting", RUN_MS);
        b = life(cfg, bout, "hold", "-g", gob, NULL);
        th_wait_for(bout, "inside ", RUN_MS);
    } else {
        th_wait_for(aout, "cached", RUN_MS);
        assert_int_equal(owners(name), 1);
    }

    th_touch(goa);
    long long gone;
    char what[96];
    snprintf(what, sizeof what, "A after %s in state %s", event, state);
    switch (event_kind(event)) {
    case ENDS_ABORT:
        gone = expect_end(a, aout, what, 0, SIGABRT);
        break;
    case EXECS:
        gone = th_wait_for(aout, "exec'd", RUN_MS);     /* the old image is gone */
        th_checker_forget(&chk, a);
        expect_end(a, aout, what, 0, 0);
        break;
    default:
        gone = expect_end(a, aout, what, 0, 0);
        break;
    }
    if (held && strcmp(event, "exit") == 0 &&
        th_cmd_int(rc, "HEXISTS %s %s", th_key(name, DM_KEY_LOCK), a_owner) == 0)
        fail_msg("overlap: exit() from main released lock %s (owner %s) while thread T was "
                 "still inside its section (the checker counts %lld overlaps)", name, a_owner,
                 th_checker_get(&chk, 0, "overlaps"));
    th_checker_forget(&chk, a);

    if (cached && releases_at_exit(event)) {
        /* Nobody was inside: exit gives the cached hold back at once. */
        long long end = gone + PROMPT_MS;
        while (owners(name) != 0 && th_now_ms() < end)
            usleep(POLL_US);
        if (owners(name) != 0)
            fail_msg("a cached hold with nobody inside was not released at %s: lock %s still "
                     "held %lld ms after A was gone", event, name, th_now_ms() - gone);
    }

    long long let_go = gone;
    if (waits || cond) {
        th_touch(gob);
        let_go = wait_num(bout, "unlocked 0 ", RUN_MS);
        expect_end(b, bout, "B", 0, 0);
        if (let_go < gone)
            let_go = gone;
    }
    long long in = next ? contender_in(next, next_out, let_go) : next_contender(cfg, let_go);
    if (held && strcmp(event, "exit") == 0 && in < gone)
        fail_msg("overlap: exit() from main while T was inside released lock %s: B entered "
                 "%lld ms before A's process was gone", name, gone - in);
    th_checker_assert_no_overlap(&chk, 0);
    printf("measured: %s in state %s: the contender entered %lld ms after A %s\n", event, state,
           in - let_go, let_go > gone ? "and B let go" : "was gone");
    fflush(stdout);
    assert_no_leftover_keys(name, gone > in ? gone : in);
}

#define CELL(st, ev, fn)                                                          \
    static void fn(void **s)                                                      \
    {                                                                             \
        (void)s;                                                                  \
        run_ending_cell(st, ev);                                                  \
    }

/* exit() from main */
CELL("held", "exit", test_exit_with_a_thread_inside_keeps_the_hold_until_the_process_is_gone)
CELL("lock", "exit", test_exit_while_a_thread_waits_in_lock_leaves_nothing_behind)
CELL("timed", "exit", test_exit_while_a_thread_waits_in_timedlock_leaves_nothing_behind)
CELL("cond", "exit", test_exit_while_a_thread_waits_in_cond_wait_leaves_nothing_behind)
CELL("cached", "exit", test_exit_releases_a_cached_hold_with_nobody_inside_promptly)
/* _exit */
CELL("held", "_exit", test__exit_inside_lets_the_hold_expire_within_a_lease)
CELL("lock", "_exit", test__exit_while_waiting_in_lock_leaves_nothing_behind)
CELL("timed", "_exit", test__exit_while_waiting_in_timedlock_leaves_nothing_behind)
CELL("cond", "_exit", test__exit_while_waiting_in_cond_wait_leaves_nothing_behind)
CELL("cached", "_exit", test__exit_with_a_cached_hold_lets_it_expire_within_a_lease)
/* abort */
CELL("held", "abort", test_abort_inside_lets_the_hold_expire_within_a_lease)
CELL("lock", "abort", test_abort_while_waiting_in_lock_leaves_nothing_behind)
CELL("timed", "abort", test_abort_while_waiting_in_timedlock_leaves_nothing_behind)
CELL("cond", "abort", test_abort_while_waiting_in_cond_wait_leaves_nothing_behind)
CELL("cached", "abort", test_abort_with_a_cached_hold_lets_it_expire_within_a_lease)
/* exec */
CELL("held", "exec", test_exec_while_holding_the_new_image_holds_nothing_and_the_old_hold_expires)
CELL("lock", "exec", test_exec_while_a_thread_waits_in_lock_leaves_nothing_behind)
CELL("timed", "exec", test_exec_while_a_thread_waits_in_timedlock_leaves_nothing_behind)
CELL("cond", "exec", test_exec_while_a_thread_waits_in_cond_wait_leaves_nothing_behind)
CELL("cached", "exec", test_exec_with_a_cached_hold_lets_it_expire_within_a_lease)
/* a signal handler in T calls exit */
CELL("held", "sigexit", test_signal_handler_exit_of_the_holder_gives_the_lock_up)
CELL("lock", "sigexit", test_signal_handler_exit_while_waiting_in_lock_does_not_hang)
CELL("timed", "sigexit", test_signal_handler_exit_while_waiting_in_timedlock_does_not_hang)
CELL("cond", "sigexit", test_signal_handler_exit_while_waiting_in_cond_wait_does_not_hang)
CELL("cached", "sigexit", test_signal_handler_exit_releases_a_cached_hold_promptly)
/* a signal handler in T calls _exit */
CELL("held", "sig_exit", test_signal_handler__exit_of_the_holder_lets_the_hold_expire)
CELL("lock", "sig_exit", test_signal_handler__exit_while_waiting_in_lock_leaves_nothing_behind)
CELL("timed", "sig_exit", test_signal_handler__exit_while_waiting_in_timedlock_leaves_nothing_behind)
CELL("cond", "sig_exit", test_signal_handler__exit_while_waiting_in_cond_wait_leaves_nothing_behind)
CELL("cached", "sig_exit", test_signal_handler__exit_with_a_cached_hold_lets_it_expire)

/* The checker sees what lifeprog does: with life_lock not mapped, A's
 * section and B's overlap, and it must say so. */
static void test_checker_sees_overlaps_when_the_mutex_is_not_mapped(void **s)
{
    (void)s;
    char *cfg = th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\nprograms = [ \"lifeprog\" ];\n"
        "mutexes = ( { symbol = \"plug_lock\"; object = \"liblifeplug.so\"; name = \"%s\"; } );\n",
        LEASE_MS, pname));
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file();
    pid_t a = life(cfg, aout, "life", "-S", "held", "-E", "exit", "-g", goa, NULL);
    th_wait_for(aout, "inside ", RUN_MS);
    pid_t b = life(cfg, bout, "hold", NULL);
    expect_end(b, bout, "B", 0, 0);
    th_touch(goa);
    expect_end(a, aout, "A", 0, 0);
    if (th_checker_get(&chk, 0, "overlaps") == 0)
        fail_msg("two processes inside an unmapped mutex at once, and the checker saw no overlap");
}

/* ---- cancel and pthread_exit ------------------------------------------------ */

/* pthread_cancel of T blocked in a lock call (not a cancellation point):
 * the call completes when B lets go, T is cancelled at its next
 * cancellation point inside the section, its cleanup handler unlocks, and
 * the mutex still works in A afterwards. */
static void cancel_while_waiting(void **s)
{
    const char *state = *s;         /* the setting main gives (TH_CASE) */
    char *cfg = config("", LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file(), *gob = th_go_file();
    pid_t b = life(cfg, bout, "hold", "-g", gob, NULL);
    th_wait_for(bout, "inside ", RUN_MS);
    pid_t a = life(cfg, aout, "life", "-S", state, "-E", "cancel", "-g", goa, NULL);
    th_wait_for(aout, "locking", RUN_MS);
    th_wait_listeners(rc, name, 1, RUN_MS);
    th_touch(goa);
    th_wait_for(aout, "event cancel", RUN_MS);
    usleep(SETTLE_MS * 1000);
    char *text = th_read_output(aout);
    if (strstr(text, "lock returned 0"))
        fail_msg("overlap: the lock call returned while B held the lock, after a cancel:\n%s",
                 text);
    free(text);
    th_touch(gob);
    wait_num(bout, "unlocked 0 ", RUN_MS);
    expect_end(b, bout, "B", 0, 0);
    /* In order: the lock call completes normally once B lets go, the
     * cancel lands at the next cancellation point (inside), the cleanup
     * handler unlocks, and A's main thread locks and unlocks again. */
    static const struct { const char *line, *missing; } steps[] = {
        { "lock returned 0 ", "the lock call did not complete normally when B let go "
                              "(cancelled inside the shim?)" },
        { "cleanup inside", "the cancel did not land inside the section" },
        { "cleanup unlocked 0 ", "the cleanup handler did not unlock" },
        { "joined", "hang: the cancelled thread was not joined" },
        { "relocked 0 ", "hang: A's main thread could not lock the mutex again" },
        { "reunlocked 0 ", "A's main thread did not unlock it" },
    };
    long long end = th_now_ms() + LEASE_MS + SLACK_MS;
    for (;;) {
        text = th_read_output(aout);
        int done = strstr(text, "reunlocked ") != NULL;
        free(text);
        if (done || th_now_ms() > end)
            break;
        usleep(POLL_US);
    }
    text = th_read_output(aout);
    char why[1024] = "";
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (!strstr(text, steps[i].line))
            snprintf(why + strlen(why), sizeof why - strlen(why), "- %s (no \"%s\")\n",
                     steps[i].missing, steps[i].line);
    if (why[0])
        fail_msg("pthread_cancel of a thread blocked in %s, %ld ms after B let go:\n%s"
                 "output of A:\n%s", state, LEASE_MS + SLACK_MS, why, text);
    free(text);
    long long gone = expect_end(a, aout, "A after the cancel", 0, 0);
    long long in = next_contender(cfg, gone);
    th_checker_assert_no_overlap(&chk, 0);
    assert_no_leftover_keys(name, in);
}

/* pthread_cancel in pthread_cond_wait: glibc takes the mutex again before
 * the cleanup handler runs; it must be the cluster lock too (B holds it). */
static void test_cancel_in_cond_wait_runs_the_cleanup_with_the_lock_held_cluster_wide(void **s)
{
    (void)s;
    char *cfg = config("", LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file(), *gob = th_go_file();
    pid_t a = life(cfg, aout, "life", "-S", "cond", "-E", "cancel", "-g", goa, NULL);
    th_wait_for(aout, "waiting", RUN_MS);
    pid_t b = life(cfg, bout, "hold", "-g", gob, NULL);
    th_wait_for(bout, "inside ", RUN_MS);
    th_touch(goa);
    th_wait_for(aout, "event cancel", RUN_MS);
    usleep(SETTLE_MS * 1000);
    char *text = th_read_output(aout);
    if (strstr(text, "cleanup inside"))
        fail_msg("overlap: the cancelled cond_wait's cleanup handler ran while B held lock %s "
                 "(%lld overlaps):\n%s", name, th_checker_get(&chk, 0, "overlaps"), text);
    free(text);
    th_touch(gob);
    expect_end(b, bout, "B", 0, 0);
    expect_line(aout, "cleanup unlocked 0", LEASE_MS + SLACK_MS,
                "hang: the cancelled cond_wait's cleanup handler did not run and unlock");
    expect_line(aout, "relocked 0 ", LEASE_MS + SLACK_MS,
                "hang: A's main thread could not lock the mutex again after the cancel");
    expect_line(aout, "reunlocked 0 ", RUN_MS, "A's main thread could not unlock");
    long long gone = expect_end(a, aout, "A after the cancel", 0, 0);
    long long in = next_contender(cfg, gone);
    th_checker_assert_no_overlap(&chk, 0);
    assert_no_leftover_keys(name, in);
}

/* The holder cancelled inside its section: its cleanup handler unlocks,
 * the lock goes to B at once, and A's main locks again. */
static void test_cancel_inside_with_a_cleanup_handler_unlocks_and_the_mutex_still_works(void **s)
{
    (void)s;
    char *cfg = config("", LONG_LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file();
    pid_t a = life(cfg, aout, "life", "-S", "held", "-E", "cancel", "-g", goa, NULL);
    th_wait_for(aout, "inside ", RUN_MS);
    pid_t b = life(cfg, bout, "hold", NULL);
    th_wait_listeners(rc, name, 1, RUN_MS);
    th_touch(goa);
    long long out = wait_num(aout, "cleanup unlocked 0 ", RUN_MS);
    long long in = wait_num(bout, "inside ", LONG_LEASE_MS + SLACK_MS);
    if (in - out > LONG_LEASE_MS / 2)
        fail_msg("B got lock %s %lld ms after the cleanup handler unlocked it: the unlock did "
                 "not release the cluster lock (lease %ld ms)", name, in - out, LONG_LEASE_MS);
    th_wait_for(aout, "relocked 0 ", LEASE_MS + SLACK_MS);
    long long gone = expect_end(a, aout, "A after the cancel", 0, 0);
    expect_end(b, bout, "B", 0, 0);
    th_checker_assert_no_overlap(&chk, 0);
    assert_no_leftover_keys(name, gone);
}

/* A thread that ends holding a normal mutex without a cleanup that
 * unlocks (pthread_exit, or a cancel): the mutex stays locked in A as in
 * glibc, and A's exit, where nobody is inside any more, releases the
 * cluster hold as it releases the exiting thread's: A's owner is gone
 * from the lock when A is (the lease is 10 s), and B, queued, has it. */
static void ended_holding(void **s)
{
    const char *event = *s;         /* the setting main gives (TH_CASE) */
    char *cfg = config("", LONG_LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file();
    pid_t a = life(cfg, aout, "life", "-S", "held", "-E", event, "-n", "-g", goa, NULL);
    th_wait_for(aout, "inside ", RUN_MS);
    char a_owner[128] = "";
    redisReply *r = th_cmd(rc, "HKEYS %s", th_key(name, DM_KEY_LOCK));
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1)
        snprintf(a_owner, sizeof a_owner, "%s", r->element[0]->str);
    freeReplyObject(r);
    assert_true(a_owner[0] != 0);
    pid_t b = life(cfg, bout, "hold", NULL);
    th_wait_listeners(rc, name, 1, RUN_MS);
    th_touch(goa);
    th_wait_for(aout, "joined", RUN_MS);
    expect_end(a, aout, "A after T ended holding", 0, 0);
    char *text = th_read_output(aout);
    th_assert_has(text, strcmp(event, "cancel") == 0 ? "cleanup keeps the mutex locked"
                                                      : "pthread_exit inside");
    free(text);
    if (th_cmd_int(rc, "HEXISTS %s %s", th_key(name, DM_KEY_LOCK), a_owner))
        fail_msg("A's hold of lock %s (owner %s) outlived A: the exit kept the hold of a "
                 "thread that had ended as if it were inside (pttl %lld ms)", name, a_owner,
                 th_cmd_int(rc, "PTTL %s", th_key(name, DM_KEY_LOCK)));
    long long in = wait_num(bout, "inside ", RUN_MS);
    expect_end(b, bout, "B", 0, 0);
    th_checker_assert_no_overlap(&chk, 0);
    assert_no_leftover_keys(name, in);
}

/* ---- fork ------------------------------------------------------------------ */

static void test_fork_while_holding_the_child_holds_nothing_and_the_parent_keeps_the_hold(void **s)
{
    (void)s;
    char *cfg = config("", LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file(), *go2 = th_go_file();
    pid_t a = life(cfg, aout, "life", "-S", "held", "-E", "fork", "-g", goa, "-G", go2, NULL);
    th_wait_for(aout, "inside ", RUN_MS);
    char owner[128];
    redisReply *r = th_cmd(rc, "HKEYS %s", th_key(name, DM_KEY_LOCK));
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    snprintf(owner, sizeof owner, "%s", r->element[0]->str);
    freeReplyObject(r);
    pid_t b = life(cfg, bout, "hold", NULL);
    th_wait_listeners(rc, name, 1, RUN_MS);
    th_touch(goa);
    th_wait_for(aout, "child status ", RUN_MS);
    char *text = th_read_output(aout);
    th_assert_has(text, "child timedlock ETIMEDOUT");
    th_assert_has(text, "child status 0");
    free(text);
    /* The child's exit gave nothing back: the parent still holds, B waits. */
    r = th_cmd(rc, "HKEYS %s", th_key(name, DM_KEY_LOCK));
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 || strcmp(r->element[0]->str, owner))
        fail_msg("after the fork child ended, lock %s is no longer held by the parent (%s)",
                 name, owner);
    freeReplyObject(r);
    text = th_read_output(bout);
    if (strstr(text, "inside "))
        fail_msg("overlap: B entered while the parent held lock %s:\n%s", name, text);
    free(text);
    th_touch(go2);
    long long out = wait_num(aout, "unlocked 0 ", RUN_MS);
    long long gone = expect_end(a, aout, "the parent", 0, 0);
    long long in = wait_num(bout, "inside ", LEASE_MS + SLACK_MS);
    if (in < out)
        fail_msg("overlap: B entered lock %s %lld ms before the parent unlocked", name, out - in);
    expect_end(b, bout, "B", 0, 0);
    th_checker_assert_no_overlap(&chk, 0);
    assert_no_leftover_keys(name, gone);
}

/* ---- dlclose ------------------------------------------------------------------ */

/* Opened twice, closed once while held: the plugin stays, and so do the
 * mapping and the exclusion (the unlock releases the cluster lock). */
static void test_dlclose_of_a_plugin_opened_twice_keeps_its_mutex_mapped_while_held(void **s)
{
    (void)s;
    char *cfg = config("", LONG_LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file();
    pid_t a = life(cfg, aout, "dlkeep", "-p", plugin_path, "-g", goa, NULL);
    th_wait_for(aout, "dlclosed 0", RUN_MS);
    assert_int_equal(owners(pname), 1);
    pid_t b = life(cfg, bout, "hold", "-p", plugin_path, NULL);
    th_wait_listeners(rc, pname, 1, RUN_MS);
    th_touch(goa);
    long long out = wait_num(aout, "unlocked 0 ", RUN_MS);
    long long in = wait_num(bout, "inside ", LONG_LEASE_MS + SLACK_MS);
    if (in - out > LONG_LEASE_MS / 2)
        fail_msg("B got lock %s %lld ms after A unlocked it: the unlock after dlclose did not "
                 "release the cluster lock", pname, in - out);
    long long gone = expect_end(a, aout, "A", 0, 0);
    expect_end(b, bout, "B", 0, 0);
    th_checker_assert_no_overlap(&chk, 1);
    assert_no_leftover_keys(pname, gone > in ? gone : in);
}

/* Unloaded after the hold ended: the mapping goes; a new dlopen maps the
 * mutex again (wherever it lands) and it excludes again. */
static void test_dlclose_then_dlopen_again_maps_the_plugin_mutex_again(void **s)
{
    (void)s;
    char *cfg = config("", LONG_LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file(), *go2 = th_go_file();
    pid_t a = life(cfg, aout, "dlagain", "-p", plugin_path, "-g", goa, "-G", go2, NULL);
    th_wait_for(aout, "reloaded", RUN_MS);
    char *text = th_read_output(aout);
    th_assert_has(text, "unloaded 0 gone");
    free(text);
    assert_int_equal(owners(pname), 0);
    th_touch(goa);
    th_wait_for(aout, "inside again", RUN_MS);
    if (owners(pname) != 1)
        fail_msg("after a new dlopen, locking plug_lock took no cluster lock %s", pname);
    pid_t b = life(cfg, bout, "hold", "-p", plugin_path, NULL);
    th_wait_listeners(rc, pname, 1, RUN_MS);
    th_touch(go2);
    long long out = wait_num(aout, "unlocked 0 ", RUN_MS);
    long long in = wait_num(bout, "inside ", LONG_LEASE_MS + SLACK_MS);
    if (in < out)
        fail_msg("overlap: B entered lock %s before A unlocked it", pname);
    long long gone = expect_end(a, aout, "A", 0, 0);
    expect_end(b, bout, "B", 0, 0);
    th_checker_assert_no_overlap(&chk, 1);
    assert_no_leftover_keys(pname, gone > in ? gone : in);
}

/* ---- the watchdog cannot start ----------------------------------------------- */

static void cgroup_remove(void)
{
    if (!cgroup_dir[0])
        return;
    char procs[PATH_MAX + 16];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", cgroup_dir);
    /* Anything left in it goes back to the root before the rmdir. */
    th_sh("for p in $(cat '%s' 2>/dev/null); do kill -9 $p 2>/dev/null;"
          " echo $p > " CGROUP_PIDS "/cgroup.procs 2>/dev/null; done", procs);
    if (rmdir(cgroup_dir) != 0)
        fprintf(stderr, "test_lifecycle: could not remove %s: %s\n", cgroup_dir, strerror(errno));
    cgroup_dir[0] = 0;
}

/* `lifeprog once -g GO [-G GO2]` in a cgroup of its own whose pids.max
 * is `tasks` (the wrapper moves itself in and execs lifeprog: one task);
 * skips the test where cgroups cannot be written. */
static pid_t once_in_cgroup(int tasks, const char *out, const char *go, const char *go2)
{
    if (geteuid() != 0 || access(CGROUP_PIDS "/cgroup.procs", W_OK) != 0) {
        printf("test_lifecycle: no writable %s: skipped\n", CGROUP_PIDS);
        skip();
    }
    /* Sweep cgroups of earlier runs whose test process is gone. */
    th_sh("for d in " CGROUP_PIDS "/dmutex-life-*; do [ -d \"$d\" ] || continue;"
          " p=${d##*-}; [ -d /proc/$p ] || rmdir \"$d\" 2>/dev/null; done");
    snprintf(cgroup_dir, sizeof cgroup_dir, CGROUP_PIDS "/dmutex-life-%d", (int)getpid());
    if (mkdir(cgroup_dir, 0755) != 0 && errno != EEXIST)
        fail_msg("mkdir %s: %s", cgroup_dir, strerror(errno));
    assert_int_equal(th_sh("echo %d > %s/pids.max", tasks, cgroup_dir), 0);
    char *cfg = config("", LEASE_MS);
    char script[PATH_MAX * 4];
    snprintf(script, sizeof script, "echo $$ > %s/cgroup.procs && exec %s once -g %s%s%s",
             cgroup_dir, life_path, go, go2 ? " -G " : "", go2 ? go2 : "");
    static struct th_shim_env e;
    char **env = th_shim_env(&e, cfg, rs.url, NULL);
    char *argv[] = { "/bin/sh", "-c", script, NULL };
    return th_child(argv, env, out);
}

/* pids.max = the process's own thread count: the first mapped lock that
 * needs the watchdog thread cannot start it. It must fail (EAGAIN), say
 * why, and leave no hold behind - not run on with a lease nobody renews. */
static void test_lock_fails_with_eagain_when_the_watchdog_thread_cannot_start(void **s)
{
    (void)s;
    char *out = th_out_file(), *go = th_go_file();
    pid_t a = once_in_cgroup(1, out, go, NULL);
    th_wait_for(out, "\nlock ", RUN_MS);     /* lifeprog's line, not the shim's "lock NAME:" */
    long long held = owners(name);
    char *text = th_read_output(out);
    th_touch(go);
    expect_end(a, out, "lifeprog once", 0, 0);
    cgroup_remove();
    if (!strstr(text, "lock EAGAIN"))
        fail_msg("wrong rc: the lock that could not start the watchdog thread should return "
                 "EAGAIN; output:\n%s", text);
    if (held != 0)
        fail_msg("leaked key: lock %s is held in Redis although the lock call failed", name);
    th_assert_has(text, name);
    th_assert_has(text, strerror(EAGAIN));
    free(text);
    assert_no_leftover_keys(name, th_now_ms() - LEASE_MS);
}

/* Room for the record's writer and the watchdog's two threads but not the
 * next: the unlock's release
 * reader cannot start. The unlock then waits for its release (said once,
 * with the cause): here the server lost its scripts just before, and a
 * release written without waiting would sit answered NOSCRIPT with nobody
 * to read it while the process idles, the lock held for its lease. Waited
 * for, it is sent again as EVAL, and the lock is free when unlock returns,
 * the process still alive; the program sees nothing else. */
static void test_unlock_waits_for_its_release_when_the_reader_thread_cannot_start(void **s)
{
    (void)s;
    char *out = th_out_file(), *go = th_go_file(), *go2 = th_go_file();
    /* main, the record's writer (who.c, at the first lock), watchdog, lease
     * deadline */
    pid_t a = once_in_cgroup(4, out, go, go2);
    th_wait_for(out, "\nlock ", RUN_MS);
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    th_touch(go);
    th_wait_for(out, "\nunlock ", RUN_MS);
    long long held = owners(name);
    char *text = th_read_output(out);
    th_touch(go2);
    expect_end(a, out, "lifeprog once", 0, 0);
    cgroup_remove();
    th_assert_has(text, "lock 0");
    th_assert_has(text, "unlock 0");
    th_assert_has(text, "cannot start the release reader thread");
    th_assert_has(text, strerror(EAGAIN));
    if (held != 0)
        fail_msg("lock %s still held in Redis after unlock returned (release not waited for):\n%s",
                 name, text);
    free(text);
}

/* ---- fixtures ------------------------------------------------------------------ */

/* A fatal signal: the harness kills children and servers; the test's
 * cgroup goes too. */
static void cgroup_remove_now(void)
{
    if (cgroup_dir[0])
        rmdir(cgroup_dir);
}

static int group_setup(void **state)
{
    (void)state;
    /* The lock server is each test's (setup), not the group's. */
    th_group_start(NULL, NULL, SUITE_ALARM_S, cgroup_remove_now);
    if (th_built_paths(TH_SHIM, shim_path, LIFE, life_path, PLUGIN, plugin_path, NULL) != 0)
        return -1;
    th_checker_start(&chk);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_group_stop(NULL, NULL);
    th_checker_stop(&chk);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    th_checker_next(&chk);
    snprintf(name, sizeof name, "life_%s", chk.prefix);
    snprintf(pname, sizeof pname, "%sp", name);
    th_redis_start(&rs, NULL, NULL);
    rc = th_redis_connect(&rs);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_test_cleanup();
    cgroup_remove();
    th_redis_drop(&rs, &rc);
    return 0;
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_checker_sees_overlaps_when_the_mutex_is_not_mapped),
        T(test_exit_with_a_thread_inside_keeps_the_hold_until_the_process_is_gone),
        T(test_exit_while_a_thread_waits_in_lock_leaves_nothing_behind),
        T(test_exit_while_a_thread_waits_in_timedlock_leaves_nothing_behind),
        T(test_exit_while_a_thread_waits_in_cond_wait_leaves_nothing_behind),
        T(test_exit_releases_a_cached_hold_with_nobody_inside_promptly),
        T(test__exit_inside_lets_the_hold_expire_within_a_lease),
        T(test__exit_while_waiting_in_lock_leaves_nothing_behind),
        T(test__exit_while_waiting_in_timedlock_leaves_nothing_behind),
        T(test__exit_while_waiting_in_cond_wait_leaves_nothing_behind),
        T(test__exit_with_a_cached_hold_lets_it_expire_within_a_lease),
        T(test_abort_inside_lets_the_hold_expire_within_a_lease),
        T(test_abort_while_waiting_in_lock_leaves_nothing_behind),
        T(test_abort_while_waiting_in_timedlock_leaves_nothing_behind),
        T(test_abort_while_waiting_in_cond_wait_leaves_nothing_behind),
        T(test_abort_with_a_cached_hold_lets_it_expire_within_a_lease),
        T(test_exec_while_holding_the_new_image_holds_nothing_and_the_old_hold_expires),
        T(test_exec_while_a_thread_waits_in_lock_leaves_nothing_behind),
        T(test_exec_while_a_thread_waits_in_timedlock_leaves_nothing_behind),
        T(test_exec_while_a_thread_waits_in_cond_wait_leaves_nothing_behind),
        T(test_exec_with_a_cached_hold_lets_it_expire_within_a_lease),
        T(test_signal_handler_exit_of_the_holder_gives_the_lock_up),
        T(test_signal_handler_exit_while_waiting_in_lock_does_not_hang),
        T(test_signal_handler_exit_while_waiting_in_timedlock_does_not_hang),
        T(test_signal_handler_exit_while_waiting_in_cond_wait_does_not_hang),
        T(test_signal_handler_exit_releases_a_cached_hold_promptly),
        T(test_signal_handler__exit_of_the_holder_lets_the_hold_expire),
        T(test_signal_handler__exit_while_waiting_in_lock_leaves_nothing_behind),
        T(test_signal_handler__exit_while_waiting_in_timedlock_leaves_nothing_behind),
        T(test_signal_handler__exit_while_waiting_in_cond_wait_leaves_nothing_behind),
        T(test_signal_handler__exit_with_a_cached_hold_lets_it_expire),
        TH_CASE(test_cancel_while_blocked_in_lock_completes_the_lock_and_the_mutex_still_works,
                cancel_while_waiting, "lock", setup, teardown),
        TH_CASE(test_cancel_while_blocked_in_timedlock_completes_the_lock_and_the_mutex_still_works,
                cancel_while_waiting, "timed", setup, teardown),
        T(test_cancel_in_cond_wait_runs_the_cleanup_with_the_lock_held_cluster_wide),
        T(test_cancel_inside_with_a_cleanup_handler_unlocks_and_the_mutex_still_works),
        TH_CASE(test_pthread_exit_holding_without_cleanup_releases_the_hold_at_exit,
                ended_holding, "pthread_exit", setup, teardown),
        TH_CASE(test_cancel_holding_without_cleanup_releases_the_hold_at_exit,
                ended_holding, "cancel", setup, teardown),
        T(test_fork_while_holding_the_child_holds_nothing_and_the_parent_keeps_the_hold),
        T(test_dlclose_of_a_plugin_opened_twice_keeps_its_mutex_mapped_while_held),
        T(test_dlclose_then_dlopen_again_maps_the_plugin_mutex_again),
        T(test_lock_fails_with_eagain_when_the_watchdog_thread_cannot_start),
        T(test_unlock_waits_for_its_release_when_the_reader_thread_cannot_start),
    };
    const char *only = getenv("DM_LIFE_FILTER");    /* a cmocka glob on the names */
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
