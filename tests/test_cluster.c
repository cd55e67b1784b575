/* test_cluster: the lock protocol of shim/redis/lock.h against a real
 * redis-server, with no LD_PRELOAD: grants and fencing tokens, waiting on
 * release notices, reentrancy, idempotent and refused releases, owner-dead
 * detection, deadlines, lock delay, script cache loss, wrong key types and
 * an unreachable server. Owners are made with dm_rlock_owner and distinct
 * sequence numbers, as the shim does for distinct threads; every test uses
 * its own lock name, so one test's leftovers cannot decide another's.
 *
 * Timing assertions are one-sided or generous (DESIGN: the suite runs on a
 * slow, noisy 2-core machine): "not before the deadline, and within
 * SLACK_MS after it". Leases are short (LEASE_MS) to keep the suite fast. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lock.h"
#include "config.h"
#include "harness.h"
#include "keys.h"
#include "lua_scripts.h"
#include "notify.h"
#include "redis.h"

#define LEASE_MS        1000L   /* the lease of most tests */
#define LONG_LEASE_MS   10000L  /* longer than DM_WAIT_CAP_MS: only a notice wakes early */
#define SLACK_MS        2000L   /* how late a timed result may be on a loaded machine */
#define NOTICE_MAX_MS   500L    /* a notice wakes a waiter far sooner than DM_WAIT_CAP_MS */
#define EXPIRE_WAIT_MS  (LEASE_MS + 3000L)
#define POLL_MS         5
#define SUITE_ALARM_S   120     /* a hung test ends the program instead of the CI job */

static struct th_redis rs;
static redisContext *rc;        /* the test's own connection, for inspection */
static struct dm_config cfg;    /* dm_store_init keeps a pointer: tests adjust fields */

/* ---- helpers -------------------------------------------------------------- */

/* Waits until the lock's hash is gone from the server (its lease ran out). */
static void wait_expired(struct dm_rlock *l)
{
    long long end = th_now_ms() + EXPIRE_WAIT_MS;
    while (th_cmd_int(rc, "EXISTS %s", th_key(l->name, DM_KEY_LOCK)) != 0) {
        if (th_now_ms() > end)
            fail_msg("%s still exists %ld ms after a %ld ms lease", th_key(l->name, DM_KEY_LOCK), EXPIRE_WAIT_MS, LEASE_MS);
        usleep(POLL_MS * 1000);
    }
}

/* Runs a shim/lua script by hand, as its header comment says a user can:
 * redis-cli --eval FILE KEYS , ARGS. Returns the reply's lines, joined by
 * spaces ("1 1 0"), in a static buffer. */
static const char *cli_eval(const char *script, const char *keys, const char *args)
{
    static char out[512];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "redis-cli -h %s -p %d --eval shim/redis/lua/%s.lua %s , %s",
             rs.addr, rs.port, script, keys, args);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t n = 0;
    char line[256];
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        n += (size_t)snprintf(out + n, sizeof out - n, "%s%s", n ? " " : "", line);
        if (n >= sizeof out)
            break;
    }
    int st = pclose(f);
    if (st != 0)
        fail_msg("%s: exit status %d", cmd, st);
    return out;
}

/* Starts capturing what the shim logs (fd 2) into a file; returns its path. */
static char *capture_stderr(int *saved)
{
    char *path = th_write_file(".log", "%s", "");
    int fd = open(path, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    fflush(stderr);
    *saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    return path;
}

static char *end_capture(int saved, char *path)
{
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char *text = th_read_file(path);
    unlink(path);
    free(path);
    assert_non_null(text);
    return text;
}

/* An acquire by h->a whose log (an unreachable server's messages) is
 * captured and dropped, so that the test's output stays readable. */
static int acquire_quietly(struct th_hold *h, const struct timespec *dl, int flags)
{
    int saved;
    char *path = capture_stderr(&saved);
    int r = dm_rlock_acquire(h->l, h->a, dl, flags, &h->g);
    free(end_capture(saved, path));
    return r;
}

/* This process's handover channel of l (records keep no key strings). */
static const char *wait_channel_of(const struct dm_rlock *l)
{
    static _Thread_local char buf[4][DM_RLOCK_KEY_MAX];
    static _Thread_local unsigned next;
    char *p = buf[next++ % 4];
    dm_rlock_key(l, DM_KEY_WAIT, p, DM_RLOCK_KEY_MAX);
    return p;
}

/* ---- fixtures ------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    th_group_start(&rs, &rc, SUITE_ALARM_S, NULL);
    th_cluster_config(&cfg, &rs, DM_COMMAND_TIMEOUT_MS, LEASE_MS);
    dm_store_init(&cfg, &dm_redis_store);
    return 0;
}

/* Every test starts from the same policy, whatever the last one changed. */
static int reset_policy(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LEASE_MS);
    cfg.lock_delay_ms = 0;
    cfg.on_redis_down = DM_DOWN_BLOCK;
    return 0;
}

/* The server is killed for a test of an unreachable Redis, and back after. */
static int server_down(void **state)
{
    reset_policy(state);
    th_redis_kill(&rs);
    return 0;
}

static int server_back(void **state)
{
    reset_policy(state);
    redisFree(rc);
    th_redis_restart(&rs, NULL);
    rc = th_redis_connect(&rs);
    return 0;
}

/* ---- grants and fencing --------------------------------------------------- */

static void test_grant_gives_a_token_and_each_grant_increments_it(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("grant");
    assert_true(h.t > 0);
    assert_int_equal(h.g.owner_dead, 0);
    assert_int_equal(h.g.local_only, 0);
    assert_int_equal(th_cmd_int(rc, "HGET %s %s", th_key(h.l->name, DM_KEY_LOCK), h.a), 1);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    uint64_t t2 = th_grant(h.l, h.b, &h.g);
    assert_int_equal(t2, h.t + 1);
    assert_int_equal(dm_rlock_release(h.l, h.b, t2), 0);
    uint64_t t3 = th_grant(h.l, h.a, &h.g);
    assert_int_equal(t3, t2 + 1);
    assert_int_equal(dm_rlock_release(h.l, h.a, t3), 0);
}

/* A restart without persistence loses the counter: the next token must
 * still be larger than every token handed out before (fencing). */
static void test_token_counter_lost_restarts_from_server_time(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("tokenlost");
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    redisReply *r = th_cmd(rc, "TIME");
    uint64_t now_us = (uint64_t)strtoull(r->element[0]->str, NULL, 10) * 1000000 +
                      strtoull(r->element[1]->str, NULL, 10);
    freeReplyObject(r);
    assert_true(h.t <= now_us);                    /* the first grant seeded from the clock */
    freeReplyObject(th_cmd(rc, "SET %s 0", th_key(h.l->name, DM_KEY_TOKEN)));
    freeReplyObject(th_cmd(rc, "DEL %s", th_key(h.l->name, DM_KEY_TOKEN)));     /* what a restart loses */
    usleep(2000);
    uint64_t t2 = th_grant(h.l, h.a, &h.g);
    assert_true(t2 > h.t);
    assert_int_equal(th_cmd_int(rc, "GET %s", th_key(h.l->name, DM_KEY_TOKEN)), (long long)t2);
    assert_int_equal(dm_rlock_release(h.l, h.a, t2), 0);
}

static void test_try_by_another_owner_is_ebusy_while_held(void **state)
{
    (void)state;
    struct dm_grant g2;
    struct th_hold h = th_hold_by_a("try");
    long long t0 = th_now_ms();
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &g2), EBUSY);
    assert_true(th_now_ms() - t0 < SLACK_MS);      /* one attempt, no waiting */
    assert_int_equal(th_cmd_int(rc, "HEXISTS %s %s", th_key(h.l->name, DM_KEY_LOCK), h.b), 0);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &g2), 0);
    assert_int_equal(dm_rlock_release(h.l, h.b, g2.token), 0);
}

struct waiter {
    struct dm_rlock *l;
    char owner[DM_OWNER_MAX];
    int rc;
    struct dm_grant g;
    long long done_ms;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, LONG_LEASE_MS);
    w->rc = dm_rlock_acquire(w->l, w->owner, &dl, 0, &w->g);
    w->done_ms = th_now_ms();
    return NULL;
}

/* The release is sent right after the waiter's second attempt failed, when
 * it has just begun a sleep of DM_WAIT_CAP_MS (the holder's lease is longer
 * than that): only the release notice can wake it within NOTICE_MAX_MS. */
static void test_waiter_is_woken_by_the_release_notice(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    struct th_hold h = th_hold_by_a("notice");

    struct waiter w = { .l = h.l, .rc = -1 };
    dm_store_owner(w.owner, 2);
    long long base = th_script_calls(rc);
    unsigned long notices = dm_notify_received();
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);

    /* First attempt, subscription, second attempt: then it sleeps. */
    long long end = th_now_ms() + SLACK_MS * 2;
    while (th_script_calls(rc) < base + 2) {
        if (th_now_ms() > end)
            fail_msg("the waiter made %lld attempts, expected 2", th_script_calls(rc) - base);
        usleep(1000);
    }
    redisReply *r = th_cmd(rc, "PUBSUB NUMSUB %s", th_key(h.l->name, DM_KEY_RELEASED));
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->element[1]->integer, 1);
    freeReplyObject(r);
    assert_int_equal(w.rc, -1);                     /* still waiting */

    long long released = th_now_ms();
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    struct timespec jd = th_deadline_in(CLOCK_REALTIME, LONG_LEASE_MS + SLACK_MS);
    if (pthread_timedjoin_np(th, NULL, &jd) != 0)
        fail_msg("the waiter did not return");
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.g.token, h.t + 1);
    long long lat = w.done_ms - released;
    if (lat > NOTICE_MAX_MS)
        fail_msg("the waiter got the lock %lld ms after the release (a notice wakes it at once; "
                 "its sleep was %d ms)", lat, DM_WAIT_CAP_MS);
    assert_true(dm_notify_received() > notices);
    assert_int_equal(dm_rlock_release(h.l, w.owner, w.g.token), 0);
}

/* The shim counts nested holds in the process and asks Redis only for the
 * outermost: a second grant to the same owner is a retry (its first reply
 * was lost), which keeps the hold's token and adds no count that one
 * release would not clear. */
static void test_reentrant_grant_keeps_the_token_and_one_release_frees_it(void **state)
{
    (void)state;
    struct dm_grant g2;
    struct th_hold h = th_hold_by_a("reentrant");
    uint64_t t2 = th_grant(h.l, h.a, &g2);
    assert_int_equal(t2, h.t);
    assert_int_equal(g2.owner_dead, 0);
    assert_int_equal(th_cmd_int(rc, "INCRBY %s 0", th_key(h.l->name, DM_KEY_TOKEN)), h.t);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &g2), EBUSY);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &g2), 0);
    assert_int_equal(g2.token, h.t + 1);
    assert_int_equal(dm_rlock_release(h.l, h.b, g2.token), 0);
}

/* ---- release ------------------------------------------------------------ */

static void test_retried_release_of_the_same_hold_returns_0(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("retry");
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)), 0);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);   /* its first reply was "lost" */
    /* ...and the retry freed nothing that was not its own: a later hold
     * survives a late retry, which still knows its own release (it was not
     * a lost hold: test_replies covers the cases). */
    uint64_t tb = th_grant(h.l, h.b, &h.g);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    assert_int_equal(th_cmd_int(rc, "HGET %s %s", th_key(h.l->name, DM_KEY_LOCK), h.b), 1);
    assert_int_equal(dm_rlock_release(h.l, h.b, tb), 0);
}

static void test_release_by_a_non_owner_is_eperm_and_keeps_the_lock(void **state)
{
    (void)state;
    struct dm_grant g2;
    struct th_hold h = th_hold_by_a("nonowner");
    assert_int_equal(dm_rlock_release(h.l, h.b, h.t), EPERM);
    assert_int_equal(th_cmd_int(rc, "HGET %s %s", th_key(h.l->name, DM_KEY_LOCK), h.a), 1);
    assert_true(th_cmd_int(rc, "PTTL %s", th_key(h.l->name, DM_KEY_LOCK)) > 0);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &g2), EBUSY);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
}

static void test_release_after_the_lease_expired_is_eperm(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("lost");
    wait_expired(h.l);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), EPERM);
}

/* ---- owner dead ---------------------------------------------------------- */

static void test_grant_after_a_lease_expired_reports_owner_dead(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("dead");
    wait_expired(h.l);
    uint64_t tb = th_grant(h.l, h.b, &h.g);
    assert_int_equal(h.g.owner_dead, 1);
    assert_int_equal(h.g.forced, 0);                /* expired, not forced */
    assert_int_equal(tb, h.t + 1);
    assert_int_equal(dm_rlock_release(h.l, h.b, tb), 0);
}

static void test_grant_after_a_clean_release_reports_no_owner_dead(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("clean");
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    h.g.owner_dead = -1;
    uint64_t tb = th_grant(h.l, h.b, &h.g);
    assert_int_equal(h.g.owner_dead, 0);
    assert_int_equal(dm_rlock_release(h.l, h.b, tb), 0);
    /* Also once the memory of that release (kept a lease long) is gone. */
    usleep((LEASE_MS + 200) * 1000);
    h.g.owner_dead = -1;
    tb = th_grant(h.l, h.a, &h.g);
    assert_int_equal(h.g.owner_dead, 0);
    assert_int_equal(dm_rlock_release(h.l, h.a, tb), 0);
}

/* dmutex unlock --force (force.lua, as tools/unlock.c runs it) of a hold
 * named `name`: 1 when it ran and forced it. */
static int force_release(struct dm_rlock *l)
{
    char keep[24];
    snprintf(keep, sizeof keep, "%ld", cfg.lease_ms);
    static const enum dm_key kk[] = { DM_KEY_LOCK, DM_KEY_HOLDER, DM_KEY_TOKEN, DM_KEY_QUEUE,
                                      DM_KEY_QTIME, DM_KEY_LOST, DM_KEY_FORCED,
                                      DM_KEY_RELEASED, DM_KEY_WAIT };
    char k[sizeof kk / sizeof kk[0]][TH_KEY_MAX];
    for (size_t i = 0; i < sizeof kk / sizeof kk[0]; i++)
        snprintf(k[i], sizeof k[i], "%s", th_key(l->name, kk[i]));
    const char *argv[] = { "EVAL", dm_lua_force, "7", k[0], k[1], k[2], k[3], k[4], k[5], k[6],
                           "1", "test_cluster", k[7], keep, k[8], keep, DM_KEYS_LOST_KEEP };
    redisReply *r = redisCommandArgv(rc, (int)(sizeof argv / sizeof argv[0]), argv, NULL);
    assert_non_null(r);
    int forced = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->integer == 1;
    freeReplyObject(r);
    return forced;
}

/* A forced release says the holder is dead (the operator knows it): the
 * next holder hears it as after an expiry (EOWNERDEAD for a robust
 * mutex), but told as forced, not expired (its log says so), whether the
 * lock was handed to a queued fair waiter or freed with nobody waiting. */
static void test_a_forced_release_reports_owner_dead_to_the_next_holder(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    struct th_hold h = th_hold_by_a("forced");
    dm_rlock_mode(h.l, 1, 0, 0);

    struct waiter w = { .l = h.l, .rc = -1 };
    dm_store_owner(w.owner, 2);
    long long base = th_script_calls(rc);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    /* Queued, subscribed, queued again: it sleeps until its handover
     * message. (One sent before it subscribed is missed: its next attempt
     * then finds the lock its own, and cannot tell a forced handover from
     * a release's; docs/semantics.md.) */
    long long end = th_now_ms() + SLACK_MS * 4;
    while (th_script_calls(rc) < base + 2 ||
           th_cmd_int(rc, "LLEN %s", th_key(h.l->name, DM_KEY_QUEUE)) < 1) {
        if (th_now_ms() > end)
            fail_msg("the fair waiter did not queue");
        usleep(1000);
    }
    assert_int_equal(force_release(h.l), 1);
    struct timespec jd = th_deadline_in(CLOCK_REALTIME, LONG_LEASE_MS + SLACK_MS);
    if (pthread_timedjoin_np(th, NULL, &jd) != 0)
        fail_msg("the waiter did not return");
    assert_int_equal(w.rc, 0);
    assert_true(w.g.token > h.t + 1);               /* past the force's own token */
    assert_int_equal(w.g.owner_dead, 1);            /* handed over by a force */
    assert_int_equal(w.g.forced, 1);
    assert_int_equal(dm_rlock_release(h.l, w.owner, w.g.token), 0);

    /* With nobody waiting: freed, and the next grant says so too. */
    h.g.owner_dead = -1;
    uint64_t ta = th_grant(h.l, h.a, &h.g);
    assert_int_equal(h.g.owner_dead, 0);            /* after a clean release */
    assert_int_equal(force_release(h.l), 1);
    uint64_t tb = th_grant(h.l, h.b, &h.g);
    assert_int_equal(h.g.owner_dead, 1);
    assert_int_equal(h.g.forced, 1);
    assert_true(tb > ta + 1);
    assert_int_equal(dm_rlock_release(h.l, h.b, tb), 0);
}

/* lock_delay_ms applies after a forced release as after an expiry, and
 * the grant after the delay still says forced. */
static void test_lock_delay_after_a_forced_release_still_reports_it_forced(void **state)
{
    (void)state;
    const long delay = 600;
    cfg.lock_delay_ms = delay;
    struct th_hold h = th_hold_by_a("forcedelay");
    assert_int_equal(force_release(h.l), 1);
    long long t0 = th_now_ms();
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &h.g), EBUSY);
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, delay + SLACK_MS);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, &dl, 0, &h.g), 0);
    if (th_now_ms() - t0 < delay - 50)
        fail_msg("granted %lld ms after the force; lock_delay_ms = %ld", th_now_ms() - t0, delay);
    assert_int_equal(h.g.owner_dead, 1);
    assert_int_equal(h.g.forced, 1);
    assert_int_equal(dm_rlock_release(h.l, h.b, h.g.token), 0);
}

/* ---- deadlines and delays ------------------------------------------------ */

static void test_acquire_with_a_deadline_times_out_not_before_it(void **state)
{
    (void)state;
    struct dm_grant g2;
    /* A long lease, so the hold outlives the deadline. */
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    struct th_hold h = th_hold_by_a("deadline");
    const long wait = 700;
    long long t0 = th_now_ms();
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, wait);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, &dl, 0, &g2), ETIMEDOUT);
    long long took = th_now_ms() - t0;
    if (took < wait || took > wait + SLACK_MS)
        fail_msg("ETIMEDOUT after %lld ms, deadline was %ld ms", took, wait);
    assert_int_equal(th_cmd_int(rc, "HEXISTS %s %s", th_key(h.l->name, DM_KEY_LOCK), h.b), 0);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
}

static void test_lock_delay_holds_off_a_grant_after_an_expiry(void **state)
{
    (void)state;
    const long delay = 1500;
    cfg.lock_delay_ms = delay;
    struct th_hold h = th_hold_by_a("delay");
    wait_expired(h.l);
    /* The first attempt after the expiry starts the delay... */
    long long t0 = th_now_ms();
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &h.g), EBUSY);
    /* ...and nobody gets the lock until it has passed. */
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, delay + SLACK_MS);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, &dl, 0, &h.g), 0);
    long long took = th_now_ms() - t0;
    if (took < delay - 50 || took > delay + SLACK_MS)
        fail_msg("granted %lld ms after the expiry was noticed; lock_delay_ms = %ld", took, delay);
    assert_int_equal(h.g.owner_dead, 1);
    assert_int_equal(dm_rlock_release(h.l, h.b, h.g.token), 0);
}

static void test_lock_delay_does_not_apply_after_a_clean_release(void **state)
{
    (void)state;
    cfg.lock_delay_ms = 1500;
    struct th_hold h = th_hold_by_a("nodelay");
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &h.g), 0);
    assert_int_equal(dm_rlock_release(h.l, h.b, h.g.token), 0);
}

/* ---- the server's side ---------------------------------------------------- */

static void test_wrong_key_type_fails_with_a_message_naming_the_key(void **state)
{
    (void)state;
    cfg.on_redis_down = DM_DOWN_ERROR;
    struct dm_rlock *l = th_lock_get("wrongtype");
    freeReplyObject(th_cmd(rc, "SET %s not-a-lock", th_key(l->name, DM_KEY_LOCK)));
    char a[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    struct dm_grant g;
    int saved;
    char *path = capture_stderr(&saved);
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, 5000);
    int r = dm_rlock_acquire(l, a, &dl, 0, &g);
    char *log = end_capture(saved, path);
    assert_int_equal(r, EAGAIN);
    if (!strstr(log, th_key(l->name, DM_KEY_LOCK)) || !strstr(log, "WRONGTYPE") || !strstr(log, "wrongtype"))
        fail_msg("the log does not name the key %s and its type: \"%s\"", th_key(l->name, DM_KEY_LOCK), log);
    free(log);
    /* The key is the user's: left alone. */
    redisReply *v = th_cmd(rc, "GET %s", th_key(l->name, DM_KEY_LOCK));
    assert_string_equal(v->str, "not-a-lock");
    freeReplyObject(v);
    freeReplyObject(th_cmd(rc, "DEL %s", th_key(l->name, DM_KEY_LOCK)));
}

static void test_script_flush_between_calls_is_survived(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("flush");
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &h.g), EBUSY);
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)), 0);
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    uint64_t tb = th_grant(h.l, h.b, &h.g);
    assert_int_equal(tb, h.t + 1);
    assert_int_equal(dm_rlock_release(h.l, h.b, tb), 0);
}

/* ---- release without waiting (dm_rlock_release_nowait) ------------------ */

static int lost_calls, lost_expired;

static void count_lost(struct dm_store_lock *l, const char *owner, uint64_t token,
                       enum dm_gone how)
{
    (void)l, (void)owner, (void)token;
    lost_calls++;
    lost_expired = (int)how;
}

/* A hold of `name` by "a" under a long lease, for a release sent without
 * waiting; the count of lost-hold calls starts from 0. */
static struct th_hold nowait_hold(const char *name)
{
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    lost_calls = 0;
    return th_hold_by_a(name);
}

/* The release of h took effect (the lock is free) and found nothing lost;
 * h's record goes. */
static void nowait_freed(struct th_hold *h)
{
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h->l->name, DM_KEY_LOCK)), 0);
    assert_int_equal(lost_calls, 0);
    dm_rlock_put(h->l);
}

/* The release is written and the call returns: it does not wait for the
 * server, which runs it later (here: once a pause ends). */
static void test_release_nowait_returns_while_the_server_is_paused_and_runs_later(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("nowait_pause");
    freeReplyObject(th_cmd(rc, "CLIENT PAUSE 60000 WRITE"));
    int r = dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost);
    long long held = th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK));
    freeReplyObject(th_cmd(rc, "CLIENT UNPAUSE"));
    assert_int_equal(r, 0);
    assert_int_equal(held, 1);      /* not run yet: the call did not wait for it */
    dm_rlock_flush();
    nowait_freed(&h);
}

/* The reply of a release sent without waiting is read before the next
 * command on its connection, in order: the next acquire (the pool hands
 * the same connection back) gets its own reply and finds the lock free. */
static void test_release_nowait_reply_is_read_before_the_next_command(void **state)
{
    (void)state;
    lost_calls = 0;
    struct th_hold h = th_hold_by_a("nowait_next");
    for (int i = 0; i < 50; i++) {
        assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost), 0);
        assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &h.g), 0);
        assert_int_equal(h.g.token, h.t + 1);
        assert_int_equal(dm_rlock_release(h.l, h.b, h.g.token), 0);
        assert_int_equal(dm_rlock_acquire(h.l, h.a, NULL, DM_ACQ_TRY, &h.g), 0);
        assert_int_equal(h.g.token, h.t + 2);
        h.t = h.g.token;
    }
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    dm_rlock_flush();
    assert_int_equal(lost_calls, 0);
    dm_rlock_put(h.l);
}

/* An unlock's release may be overtaken by the same owner's next acquire
 * on another connection: that acquire finds the lock still the owner's
 * and grants it again, same token. The older release must leave that
 * grant alone (release.lua: it names its request). */
static void test_release_nowait_overtaken_by_a_new_grant_of_the_owner_leaves_it(void **state)
{
    (void)state;
    lost_calls = 0;
    struct th_hold h = th_hold_by_a("nowait_overtaken");
    unsigned long first = h.g.wait_id;
    struct dm_grant g2;
    assert_int_equal(dm_rlock_acquire(h.l, h.a, NULL, DM_ACQ_TRY, &g2), 0);   /* ran first */
    assert_int_equal(g2.token, h.t);
    assert_true(g2.wait_id != first);
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, first, 0, count_lost), 0);
    dm_rlock_flush();
    assert_int_equal(th_cmd_int(rc, "HGET %s %s", th_key(h.l->name, DM_KEY_LOCK), h.a), 1);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &g2), EBUSY);
    assert_int_equal(lost_calls, 0);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)), 0);
    dm_rlock_put(h.l);
}

/* An unlock's waited release names its lock call too (Sentinel keeps it,
 * and sends it again after a failover, when the same thread may have
 * locked again on the new primary: same owner, same token). Sent after
 * that later grant, it leaves it alone; the plain release would end it. */
static void test_release_hold_names_its_request_and_leaves_a_later_grant(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("hold_request");
    unsigned long first = h.g.wait_id;
    struct dm_grant g2;
    assert_int_equal(dm_rlock_acquire(h.l, h.a, NULL, DM_ACQ_TRY, &g2), 0);
    assert_int_equal(g2.token, h.t);
    unsigned long second = g2.wait_id;
    assert_true(second != first);
    assert_int_equal(dm_rlock_release_hold(h.l, h.a, h.t, first), 0);
    assert_int_equal(th_cmd_int(rc, "HGET %s %s", th_key(h.l->name, DM_KEY_LOCK), h.a), 1);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &g2), EBUSY);
    assert_int_equal(dm_rlock_release_hold(h.l, h.a, h.t, second), 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)), 0);
    dm_rlock_put(h.l);
}

/* NOSCRIPT to a release nobody waited for: it did not run, and is sent
 * again (EVAL) by the thread that reads the reply. */
static void test_release_nowait_after_script_flush_is_sent_again(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("nowait_flush");
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost), 0);
    dm_rlock_flush();
    nowait_freed(&h);
}

/* A release answered NOSCRIPT is sent again by the thread that reads the
 * reply, which is the owner's next acquire: that acquire went out first
 * (one round trip), ran first and granted the lock again under the same
 * token. The retry must name the first one's request, as the first did,
 * and leave that grant alone (review r1: two holders). */
static void test_release_nowait_retried_after_noscript_leaves_the_owners_next_grant(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("nowait_noscript_regrant");
    unsigned long first = h.g.wait_id;
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    struct dm_grant g2;
    /* acquire.lua known again (by hand: the shim's own NOSCRIPT would load
     * release.lua too); release.lua stays unknown */
    freeReplyObject(th_cmd(rc, "SCRIPT LOAD %s", dm_lua_acquire));
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, first, 0, count_lost), 0);
    struct timespec dl;
    dm_deadline_in(&dl, SLACK_MS);          /* a lock: a trylock reads the release first */
    assert_int_equal(dm_rlock_acquire(h.l, h.a, &dl, 0, &g2), 0);
    assert_int_equal(g2.token, h.t);        /* granted again: the release had not run */
    dm_rlock_flush();
    assert_int_equal(th_cmd_int(rc, "HGET %s %s", th_key(h.l->name, DM_KEY_LOCK), h.a), 1);
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &h.g), EBUSY);
    assert_int_equal(lost_calls, 0);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)), 0);
    dm_rlock_put(h.l);
}

/* After the server lost its scripts, the first acquire's NOSCRIPT loads
 * release.lua again too: a release an unlock then writes without waiting
 * runs at once, not answered NOSCRIPT with nobody reading it until the
 * connection's next use, which an exec'ing or _exit'ing process never
 * makes (review r10, r2 flush-_exit: held until the lease). */
static void test_noscript_of_an_acquire_loads_the_release_script_too(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("noscript_loads_release");
    freeReplyObject(th_cmd(rc, "SCRIPT FLUSH"));
    struct dm_grant g2;
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &g2), EBUSY);
    th_reset_stats(rc);
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost), 0);
    /* ran, without anyone reading its reply: the lock is gone */
    long long end = th_now_ms() + SLACK_MS;
    while (th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)) == 1 && th_now_ms() < end)
        usleep(1000);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)), 0);
    dm_rlock_flush();
    assert_int_equal(lost_calls, 0);
    dm_rlock_put(h.l);
}

/* A connection dropped with a release written and its reply unread: the
 * release may or may not have run; it is sent again (and recognises
 * itself if it ran). */
static void test_release_nowait_on_a_dropped_connection_is_sent_again(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("nowait_dropped");
    freeReplyObject(th_cmd(rc, "CLIENT PAUSE 60000 WRITE"));
    int r = dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost);
    freeReplyObject(th_cmd(rc, "CLIENT KILL TYPE normal SKIPME yes"));
    freeReplyObject(th_cmd(rc, "CLIENT UNPAUSE"));
    assert_int_equal(r, 0);
    int saved;
    char *path = capture_stderr(&saved);
    dm_rlock_flush();
    free(end_capture(saved, path));
    nowait_freed(&h);
}

/* The server closed the pooled connection while it sat idle (its
 * `timeout`, a restart, CLIENT KILL): a release written into it would be
 * lost with nobody reading its reply until that connection's next use,
 * which an idle process never makes, and the lock would stay held for its
 * lease (review r6 idle, r7). The release is waited for on another
 * connection instead: the lock is free when the call returns. */
static void test_release_nowait_on_a_connection_the_server_closed_waits_for_it(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("nowait_closed_idle");
    freeReplyObject(th_cmd(rc, "CLIENT KILL TYPE normal SKIPME yes"));
    int saved;
    char *path = capture_stderr(&saved);
    int r = dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost);
    free(end_capture(saved, path));
    assert_int_equal(r, 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)), 0);
    dm_rlock_flush();
    assert_int_equal(lost_calls, 0);
    dm_rlock_put(h.l);
}

static void reply_ignored(void *arg, redisReply *r, const struct dm_redis_error *why)
{
    (void)arg, (void)r, (void)why;
}

/* A trylock by another thread after an unlock returned finds the lock
 * free, even when the unlock's release, written without waiting, has not
 * run yet (here: queued behind a BLPOP that blocks its connection, as a
 * busy connection would keep its reply unread): the trylock reads the
 * name's unread releases first (review r9: EBUSY now and then, which
 * POSIX does not allow for a mutex nobody holds). */
static void test_trylock_after_a_release_without_waiting_finds_the_lock_free(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("nowait_then_try");
    struct dm_conn *c1 = dm_redis_get_slot(h.l->slot);
    assert_non_null(c1->c);
    assert_int_equal(c1->nlate, 0);
    assert_int_equal(redisAppendCommand(c1->c, "BLPOP dmutex:{nowait_then_try}:never 0"), REDIS_OK);
    int done = 0;
    while (!done)
        assert_int_equal(redisBufferWrite(c1->c, &done), REDIS_OK);
    c1->late[c1->nlate].fn = reply_ignored;
    c1->late[c1->nlate].arg = NULL;
    c1->nlate++;
    dm_redis_put(c1);
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost), 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)), 1);   /* not run */
    int saved;
    char *path = capture_stderr(&saved);
    int r = dm_rlock_acquire(h.l, h.b, NULL, DM_ACQ_TRY, &h.g);
    free(end_capture(saved, path));
    assert_int_equal(r, 0);
    assert_int_equal(dm_rlock_release(h.l, h.b, h.g.token), 0);
    dm_rlock_flush();
    assert_int_equal(lost_calls, 0);
    dm_rlock_put(h.l);
}

/* A reply that says the hold was gone (its lease ran out) is a lost hold,
 * told to the caller's function by the thread that reads it. */
static void test_release_nowait_of_an_expired_hold_reports_it_lost(void **state)
{
    (void)state;
    lost_calls = 0;
    struct th_hold h = th_hold_by_a("nowait_lost");
    wait_expired(h.l);
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost), 0);
    dm_rlock_flush();
    assert_int_equal(lost_calls, 1);
    assert_int_equal(lost_expired, 1);      /* the reply came after the lease's end */
    dm_rlock_put(h.l);
}

/* A hold the server no longer has before its lease could have ended
 * (deleted: a DEL, an eviction, a restart that lost it) is told apart
 * from one that expired after the unlock: the caller hears "not expired". */
static void test_release_nowait_of_a_deleted_hold_reports_it_lost_not_expired(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("nowait_gone");
    freeReplyObject(th_cmd(rc, "DEL %s", th_key(h.l->name, DM_KEY_LOCK)));
    long long end = th_now_ms() + LONG_LEASE_MS;
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, end, count_lost), 0);
    dm_rlock_flush();
    assert_int_equal(lost_calls, 1);
    assert_int_equal(lost_expired, 0);
    dm_rlock_put(h.l);
}

/* A late reply's verdict is acted on by the release reader, never inside
 * an unrelated call: the next user of the pooled connection (here another
 * name's trylock, in this thread) reads the pending "not held" first, and
 * the lost hold's report (which ends the process in abort mode) and any
 * retry must not run inside that trylock. Before, they ran in whichever
 * thread read the reply. */
static pthread_t lost_in;

static void note_lost_thread(struct dm_store_lock *l, const char *owner, uint64_t token,
                             enum dm_gone how)
{
    lost_in = pthread_self();
    count_lost(l, owner, token, how);
}

static void test_a_late_verdict_is_acted_on_by_the_reader_not_the_next_call(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("verdict_lost");
    freeReplyObject(th_cmd(rc, "DEL %s", th_key(h.l->name, DM_KEY_LOCK)));
    long long end = th_now_ms() + LONG_LEASE_MS;
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, end, note_lost_thread),
                     0);
    struct dm_rlock *other = th_lock_get("verdict_other");
    struct dm_grant g;
    assert_int_equal(dm_rlock_acquire(other, h.b, NULL, DM_ACQ_TRY, &g), 0);
    assert_int_equal(dm_rlock_release(other, h.b, g.token), 0);
    dm_rlock_flush();
    assert_int_equal(lost_calls, 1);
    if (pthread_equal(lost_in, pthread_self()))
        fail_msg("the lost hold was reported inside another name's lock call");
    dm_rlock_put(other);
    dm_rlock_put(h.l);
}

/* A hold lost with the server's data (here: the lock's keys and its epoch
 * gone, as after a restart without persistence, the counter kept as an
 * older snapshot keeps it), the lock granted to nobody since: the release
 * says so (ESTALE; to the caller's function DM_GONE_WITH_DATA), apart
 * from a hold deleted while the server kept its data (EPERM, above). Once
 * the server granted the lock again in its run, the epoch names that run
 * and the same loss is no longer told apart. */
static void test_release_of_a_hold_lost_with_the_servers_data_says_so(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("gone_data");
    freeReplyObject(th_cmd(rc, "DEL %s %s %s", th_key(h.l->name, DM_KEY_LOCK),
                           th_key(h.l->name, DM_KEY_HOLDER), th_key(h.l->name, DM_KEY_EPOCH)));
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), ESTALE);
    struct th_hold g = nowait_hold("gone_data2");
    freeReplyObject(th_cmd(rc, "DEL %s %s %s", th_key(g.l->name, DM_KEY_LOCK),
                           th_key(g.l->name, DM_KEY_HOLDER), th_key(g.l->name, DM_KEY_EPOCH)));
    long long end = th_now_ms() + LONG_LEASE_MS;
    assert_int_equal(dm_rlock_release_nowait(g.l, g.a, g.t, g.g.wait_id, end, count_lost), 0);
    dm_rlock_flush();
    assert_int_equal(lost_calls, 1);
    assert_int_equal(lost_expired, DM_GONE_WITH_DATA);
    /* the epoch of this run, as any grant of the run sets it: a lost hold */
    struct th_hold k = nowait_hold("gone_data3");
    freeReplyObject(th_cmd(rc, "DEL %s %s", th_key(k.l->name, DM_KEY_LOCK),
                           th_key(k.l->name, DM_KEY_HOLDER)));
    assert_int_equal(dm_rlock_release(k.l, k.a, k.t), EPERM);
    dm_rlock_put(h.l);
    dm_rlock_put(g.l);
    dm_rlock_put(k.l);
}

/* The server's run_id, as INFO server says it (a connection reads it so). */
static void server_run_id(char *buf, size_t len)
{
    redisReply *r = th_cmd(rc, "INFO server");
    const char *p = r->type == REDIS_REPLY_STRING ? strstr(r->str, "run_id:") : NULL;
    assert_non_null(p);
    snprintf(buf, len, "%.40s", p + 7);
    freeReplyObject(r);
}

/* The test server no longer declared `dmutex fresh` (NS:intact gone), so
 * the restart check treats it as any server; returns what redeclare puts
 * back. */
static char *undeclare(void)
{
    char intact[TH_KEY_MAX];
    snprintf(intact, sizeof intact, "%s%s", DM_NAMESPACE_DEFAULT, DM_KEYS_INTACT_SUFFIX);
    redisReply *iv = th_cmd(rc, "GET %s", intact);
    char *kept = iv->type == REDIS_REPLY_STRING ? strdup(iv->str) : NULL;
    freeReplyObject(iv);
    freeReplyObject(th_cmd(rc, "DEL %s", intact));
    return kept;
}

static void redeclare(char *kept)
{
    if (kept) {
        char intact[TH_KEY_MAX];
        snprintf(intact, sizeof intact, "%s%s", DM_NAMESPACE_DEFAULT, DM_KEYS_INTACT_SUFFIX);
        freeReplyObject(th_cmd(rc, "SET %s %s", intact, kept));
    }
    free(kept);
}

/* Older data came back (the lock's epoch names another run) and the hold
 * of a, granted since, is gone; b is then granted the lock anew (the
 * server is up for more than the lease and not declared: no wait), which
 * raises the counter. a's release must say "lost", not "released" (as
 * "my token is not above the counter" used to say: the raised counter is
 * above every token of older runs; found by review). */
static void test_release_of_a_hold_lost_before_a_raised_counter_is_lost(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LEASE_MS);
    struct th_hold h = th_owners("floor");
    h.t = th_grant(h.l, h.a, &h.g);
    char *kept = undeclare();
    /* what came back predates a's grant: an older epoch and counter, no hold */
    freeReplyObject(th_cmd(rc, "SET %s oldrun", th_key(h.l->name, DM_KEY_EPOCH)));
    freeReplyObject(th_cmd(rc, "SET %s %llu", th_key(h.l->name, DM_KEY_TOKEN),
                           (unsigned long long)h.t - 1));
    freeReplyObject(th_cmd(rc, "DEL %s %s", th_key(h.l->name, DM_KEY_LOCK),
                           th_key(h.l->name, DM_KEY_HOLDER)));
    struct dm_grant gb;
    uint64_t tb = th_grant(h.l, h.b, &gb);
    int r = dm_rlock_release(h.l, h.a, h.t);
    redeclare(kept);
    assert_true(tb > h.t);
    assert_int_equal(r, EPERM);
    assert_int_equal(dm_rlock_release(h.l, h.b, tb), 0);
    dm_rlock_put(h.l);
}

/* The other side: a release whose first copy ran (its reply lost), sent
 * again after a failover that kept the data (the epoch names another run)
 * and a grant to another process that raised the counter: its token is in
 * the data that came through, so it is "released" still, never "lost"
 * (an abort of a process outside its section; found by review). */
static void test_a_retried_release_across_a_failover_that_kept_it_is_released(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LEASE_MS);
    struct th_hold h = th_owners("floor_kept");
    h.t = th_grant(h.l, h.a, &h.g);
    char *kept = undeclare();
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);     /* ran; say its reply was lost */
    freeReplyObject(th_cmd(rc, "SET %s oldrun", th_key(h.l->name, DM_KEY_EPOCH)));
    struct dm_grant gb;
    uint64_t tb = th_grant(h.l, h.b, &gb);                      /* raises the counter */
    int r = dm_rlock_release(h.l, h.a, h.t);                  /* the retry */
    redeclare(kept);
    assert_true(tb > h.t + 1);      /* the counter was raised */
    assert_int_equal(r, 0);
    assert_int_equal(dm_rlock_release(h.l, h.b, tb), 0);
    dm_rlock_put(h.l);
}

/* force.lua's handover leaves an epoch that names the run it ran on as it
 * is (a confirming re-grant keeps the handover's token) and marks any
 * other "-" (release.lua's handover_marks_epoch). */
static void test_a_forced_handover_leaves_this_runs_epoch_alone(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    char run[48];
    server_run_id(run, sizeof run);
    for (int known = 1; known >= 0; known--) {
        struct th_hold h = th_owners(known ? "fepoch1" : "fepoch0");
        h.t = th_grant(h.l, h.a, &h.g);
        char epoch[TH_KEY_MAX];
        snprintf(epoch, sizeof epoch, "%s", th_key(h.l->name, DM_KEY_EPOCH));
        redisReply *e = th_cmd(rc, "GET %s", epoch);
        assert_int_equal(e->type, REDIS_REPLY_STRING);
        assert_string_equal(e->str, run);       /* the grant's check set it */
        freeReplyObject(e);
        /* a queued waiter for the force to hand to, by hand */
        freeReplyObject(th_cmd(rc, "RPUSH %s %s|9", th_key(h.l->name, DM_KEY_QUEUE), h.b));
        freeReplyObject(th_cmd(rc, "ZADD %s %lld %s|9", th_key(h.l->name, DM_KEY_QTIME),
                               (long long)time(NULL) * 1000 + 60000, h.b));
        char keep[24];
        snprintf(keep, sizeof keep, "%ld", cfg.lease_ms);
        static const enum dm_key kk[] = { DM_KEY_LOCK, DM_KEY_HOLDER, DM_KEY_TOKEN,
                                          DM_KEY_QUEUE, DM_KEY_QTIME, DM_KEY_LOST,
                                          DM_KEY_FORCED, DM_KEY_EPOCH, DM_KEY_RELEASED,
                                          DM_KEY_WAIT };
        char k[sizeof kk / sizeof kk[0]][TH_KEY_MAX];
        for (size_t i = 0; i < sizeof kk / sizeof kk[0]; i++)
            snprintf(k[i], sizeof k[i], "%s", th_key(h.l->name, kk[i]));
        const char *argv[] = { "EVAL", dm_lua_force, "8", k[0], k[1], k[2], k[3], k[4], k[5],
                               k[6], k[7], "1", "test_cluster", k[8], keep, k[9], keep,
                               DM_KEYS_LOST_KEEP, "", known ? run : "" };
        redisReply *r = redisCommandArgv(rc, (int)(sizeof argv / sizeof argv[0]), argv, NULL);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        assert_int_equal(r->element[0]->integer, 1);
        freeReplyObject(r);
        e = th_cmd(rc, "GET %s", epoch);
        assert_int_equal(e->type, REDIS_REPLY_STRING);
        assert_string_equal(e->str, known ? run : "-");
        freeReplyObject(e);
        freeReplyObject(th_cmd(rc, "DEL %s %s %s %s", k[0], k[1], k[3], k[4]));
        dm_rlock_put(h.l);
    }
}

/* A re-grant the restart check refuses (the hold came by a handover that
 * marked the epoch "-", the server up for less than a lease) leaves the
 * holder marker naming the caller's hold, so that its withdrawal gives it
 * back at once; writing "?<ms>" over it stranded the hold for a lease
 * (found by review). */
#define YOUNGER_THAN_LEASE_MS 600000L     /* a lease this group's server is younger than */
static void test_a_refused_regrant_leaves_the_holds_marker(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, YOUNGER_THAN_LEASE_MS);
    struct th_hold h = th_owners("regrant_kept");
    h.t = th_grant(h.l, h.a, &h.g);
    char *kept = undeclare();
    freeReplyObject(th_cmd(rc, "SET %s -", th_key(h.l->name, DM_KEY_EPOCH)));
    redisReply *m0 = th_cmd(rc, "GET %s", th_key(h.l->name, DM_KEY_HOLDER));
    char *marker = m0->type == REDIS_REPLY_STRING ? strdup(m0->str) : NULL;
    freeReplyObject(m0);
    /* the same owner asks again (a retry): refused, this server being
     * younger than the lease; the marker must stay its hold's */
    struct dm_grant g;
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, 300);
    int r = dm_rlock_acquire(h.l, h.a, &dl, 0, &g);
    assert_int_equal(r, ETIMEDOUT);
    redisReply *m1 = th_cmd(rc, "GET %s", th_key(h.l->name, DM_KEY_HOLDER));
    int question = m1->type == REDIS_REPLY_STRING && m1->str[0] == '?';
    freeReplyObject(m1);
    redeclare(kept);
    free(marker);
    if (question)
        fail_msg("the refused re-grant wrote a \"?\" marker over the hold's");
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    th_cluster_lease(&cfg, LEASE_MS);
    dm_rlock_put(h.l);
}

/* A fork child never reads its parent's reply (nor blocks for it): the
 * parent's connections are forgotten, and the parent reads it. */
static void test_fork_child_never_reads_the_parents_release_reply(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("nowait_fork");
    freeReplyObject(th_cmd(rc, "CLIENT PAUSE 60000 WRITE"));
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost), 0);
    dm_redis_atfork(DM_FORK_PREPARE);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dm_redis_atfork(DM_FORK_CHILD);
        dm_rlock_flush();     /* nothing due here: returns at once, server paused */
        _exit(lost_calls);
    }
    dm_redis_atfork(DM_FORK_PARENT);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    long long held = th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK));
    freeReplyObject(th_cmd(rc, "CLIENT UNPAUSE"));
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(held, 1);
    dm_rlock_flush();
    nowait_freed(&h);
}

struct refs_check {
    struct dm_rlock *l;
    unsigned refs;
};

/* In the child: the record's references are back to what they were
 * before the release, no reply counts as unread, none was read. */
static int child_freed_releases(void *arg)
{
    const struct refs_check *c = arg;
    return c->l->refs == c->refs && c->l->releases_unread == 0 && lost_calls == 0 ? 0 : 1;
}

/* A fork child never reads the parent's release replies, and gives back
 * what they hold in it: each one's reference to its name's record (a
 * record per fork and name leaked before) and its memory. */
static void test_fork_child_frees_what_the_parents_unread_releases_hold(void **state)
{
    (void)state;
    struct th_hold h = nowait_hold("nowait_fork_refs");
    unsigned refs = h.l->refs;
    freeReplyObject(th_cmd(rc, "CLIENT PAUSE 60000 WRITE"));
    assert_int_equal(dm_rlock_release_nowait(h.l, h.a, h.t, h.g.wait_id, 0, count_lost), 0);
    assert_int_equal(h.l->refs, refs + 1);
    struct refs_check c = { h.l, refs };
    int st = th_fork_with_handlers(child_freed_releases, &c);
    freeReplyObject(th_cmd(rc, "CLIENT UNPAUSE"));
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    dm_rlock_flush();
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key(h.l->name, DM_KEY_LOCK)), 0);
    assert_int_equal(h.l->refs, refs);
    assert_int_equal(lost_calls, 0);
    dm_rlock_put(h.l);
}

/* ---- a fair waiter reads its own handover --------------------------------- */

static sem_t stall_go;
static int stall_entered;

static void stall_handler(void *arg, const char *msg, size_t len)
{
    (void)arg, (void)msg, (void)len;
    __atomic_store_n(&stall_entered, 1, __ATOMIC_RELEASE);
    sem_wait(&stall_go);
}

/* Waits (bounded) until a fair waiter of l is subscribed to its own wait
 * channel and its attempt after subscribing has run (th_reset_stats
 * before it started): only a message can tell it now. */
static void wait_direct_waiter(const struct dm_rlock *l)
{
    long long end = th_now_ms() + SLACK_MS * 5;
    while ((th_numsub(rc, wait_channel_of(l)) < 1 || th_script_calls(rc) < 2) &&
           th_now_ms() < end)
        usleep(1000);
    /* A handover in the same server millisecond as that attempt cannot be
     * told from one older than it: the waiter checks it by one more
     * attempt, as it should, which is not what these tests look at (1 run
     * in 4 of the epoch test). The next millisecond tells them apart. */
    usleep(3000);
}

struct direct_waiter {
    struct th_hold *h;
    int r;
    struct dm_grant g;
};

static void *direct_waiter_main(void *arg)
{
    struct direct_waiter *w = arg;
    struct timespec dl;
    dm_deadline_in(&dl, 20000);
    w->r = dm_rlock_acquire(w->h->l, w->h->b, &dl, 0, &w->g);
    return NULL;
}

/* A fair handover reaches its waiter with no other thread in between: it
 * arrives while the subscriber thread (notify) is stuck in a handler, and
 * is taken as a handover (the claim lease), not found by a later attempt
 * (which would give a full lease). */
static void test_fair_waiter_reads_its_handover_without_the_subscriber_thread(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    struct th_hold h = th_owners("direct");
    dm_rlock_mode(h.l, 1, 0, 0);
    h.t = th_grant(h.l, h.a, &h.g);
    sem_init(&stall_go, 0, 0);
    __atomic_store_n(&stall_entered, 0, __ATOMIC_RELAXED);
    struct dm_chan *stall = dm_notify_chan("dmutex:{direct}:stall");
    assert_non_null(stall);
    dm_notify_set_handler(stall, stall_handler, NULL);
    assert_int_equal(dm_notify_subscribe(stall, SLACK_MS), 0);
    freeReplyObject(th_cmd(rc, "PUBLISH dmutex:{direct}:stall x"));
    long long end = th_now_ms() + SLACK_MS;
    while (!__atomic_load_n(&stall_entered, __ATOMIC_ACQUIRE) && th_now_ms() < end)
        usleep(1000);
    assert_true(__atomic_load_n(&stall_entered, __ATOMIC_ACQUIRE));     /* notify is stuck */

    struct direct_waiter w = { .h = &h, .r = -1 };
    pthread_t th;
    th_reset_stats(rc);
    assert_int_equal(pthread_create(&th, NULL, direct_waiter_main, &w), 0);
    /* Released once the waiter is subscribed and its second attempt (the
     * first after subscribing) has run: only a message can tell it now. */
    end = th_now_ms() + SLACK_MS * 5;
    while ((th_numsub(rc, wait_channel_of(h.l)) < 1 || th_script_calls(rc) < 2) &&
           th_now_ms() < end)
        usleep(1000);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    pthread_join(th, NULL);
    sem_post(&stall_go);
    dm_notify_set_handler(stall, NULL, NULL);
    dm_notify_chan_put(stall);
    assert_int_equal(w.r, 0);
    assert_int_equal(w.g.token, h.t + 1);
    assert_int_equal(w.g.lease_ms, cfg.lease_ms);       /* a handover has the whole lease */
    assert_int_equal(dm_rlock_release(h.l, h.b, w.g.token), 0);
    dm_rlock_put(h.l);
}

/* A handover notice that comes late, after the waiter's next attempt was
 * answered "held by another" (the soak: a machine cut off just as the
 * lock was handed to its waiter; the notice, retransmitted by TCP when
 * the link came back 3 s later, reached the waiter after its attempt
 * found the hold expired and taken by another; the waiter entered with
 * the old token beside the new holder). A copy of it is published here
 * while A holds: its server time is before the waiter's last attempt ran,
 * so it is no handover of this wait, and the waiter must go on waiting
 * until A's release hands it the lock. */
static void test_a_handover_notice_older_than_the_last_attempt_is_not_taken(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    struct th_hold h = th_owners("stalenotice");
    dm_rlock_mode(h.l, 1, 0, 0);
    h.t = th_grant(h.l, h.a, &h.g);
    struct direct_waiter w = { .h = &h, .r = -1 };
    pthread_t th;
    th_reset_stats(rc);
    assert_int_equal(pthread_create(&th, NULL, direct_waiter_main, &w), 0);
    /* subscribed, and its attempt after subscribing answered */
    wait_direct_waiter(h.l);
    assert_int_equal(th_numsub(rc, wait_channel_of(h.l)), 1);
    redisReply *q = th_cmd(rc, "LINDEX %s 0", th_key(h.l->name, DM_KEY_QUEUE));
    assert_int_equal(q->type, REDIS_REPLY_STRING);
    redisReply *t = th_cmd(rc, "TIME");
    long long srv = atoll(t->element[0]->str) * 1000 + atoll(t->element[1]->str) / 1000;
    freeReplyObject(t);
    /* as release.lua words it: "<member> <token> @<server ms>:<lease>",
     * from a second before now: before the waiter's last attempt ran */
    char msg[256];
    snprintf(msg, sizeof msg, "%s %llu @%lld:%ld", q->str, (unsigned long long)h.t + 7,
             srv - 1000, cfg.lease_ms);
    freeReplyObject(th_cmd(rc, "PUBLISH %s %s", wait_channel_of(h.l), msg));
    freeReplyObject(q);
    usleep(SLACK_MS * 1000);
    int r = __atomic_load_n(&w.r, __ATOMIC_ACQUIRE);
    if (r != -1)
        fail_msg("the waiter returned %d with token %llu while A holds token %llu: it took a "
                 "handover notice older than its last attempt", r,
                 (unsigned long long)w.g.token, (unsigned long long)h.t);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    pthread_join(th, NULL);
    assert_int_equal(w.r, 0);
    assert_int_equal(w.g.token, h.t + 1);       /* A's real handover */
    assert_int_equal(dm_rlock_release(h.l, h.b, w.g.token), 0);
    dm_rlock_put(h.l);
}

/* A handover is a grant that makes no restart check: on a lock whose
 * epoch names another run (restored from older data) it marks the epoch
 * "-", so that a hold the new holder then loses is no longer taken for
 * one lost with the data and granted to nobody since (EPERM, not ESTALE;
 * found by review: a handover or a re-grant left the old epoch, and a
 * release beside it only warned). */
static void test_a_handover_on_an_epoch_of_another_run_marks_it_unknown(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    struct th_hold h = th_owners("epochdash");
    dm_rlock_mode(h.l, 1, 0, 0);
    h.t = th_grant(h.l, h.a, &h.g);
    struct direct_waiter w = { .h = &h, .r = -1 };
    pthread_t th;
    th_reset_stats(rc);
    assert_int_equal(pthread_create(&th, NULL, direct_waiter_main, &w), 0);
    wait_direct_waiter(h.l);
    char epoch[TH_KEY_MAX];
    snprintf(epoch, sizeof epoch, "%s", th_key(h.l->name, DM_KEY_EPOCH));
    freeReplyObject(th_cmd(rc, "SET %s oldrun", epoch));
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);      /* hands it to b */
    pthread_join(th, NULL);
    assert_int_equal(w.r, 0);
    redisReply *e = th_cmd(rc, "GET %s", epoch);
    assert_int_equal(e->type, REDIS_REPLY_STRING);
    assert_string_equal(e->str, "-");
    freeReplyObject(e);
    freeReplyObject(th_cmd(rc, "DEL %s %s", th_key(h.l->name, DM_KEY_LOCK),
                           th_key(h.l->name, DM_KEY_HOLDER)));
    assert_int_equal(dm_rlock_release(h.l, h.b, w.g.token), EPERM);
    dm_rlock_put(h.l);
}

/* This process's TCP sockets connected to the test server, the test's own
 * inspection connection (rc) left out. */
static int sockets_to_server(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int fd = atoi(e->d_name);
        struct sockaddr_in a;
        socklen_t len = sizeof a;
        if (e->d_name[0] == '.' || fd == dirfd(d) || fd == rc->fd)
            continue;
        if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 && a.sin_family == AF_INET &&
            ntohs(a.sin_port) == rs.port)
            n++;
    }
    closedir(d);
    return n;
}

static int sockets_to_server_arg(void *arg)
{
    (void)arg;
    return sockets_to_server();
}

/* What a fork child keeps of the server: its sockets after the fork
 * handlers ran (notify's subscriber connection is the parent's too: not
 * closed by these two). */
static int child_sockets(void)
{
    int st = th_fork_with_handlers(sockets_to_server_arg, NULL);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* A fork while a fair waiter waits on its own subscribed connection: the
 * child closes that connection too (the waiting thread is the parent's),
 * as it closes the pooled ones (review r3: the child kept it open,
 * subscribed to the parent's channel). */
static void test_fork_child_closes_a_fair_waiters_own_connection(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    struct th_hold h = th_owners("wconn_fork");
    dm_rlock_mode(h.l, 1, 0, 0);
    h.t = th_grant(h.l, h.a, &h.g);
    int before = child_sockets();
    struct direct_waiter w = { .h = &h, .r = -1 };
    pthread_t th;
    th_reset_stats(rc);
    assert_int_equal(pthread_create(&th, NULL, direct_waiter_main, &w), 0);
    wait_direct_waiter(h.l);
    assert_int_equal(th_numsub(rc, wait_channel_of(h.l)), 1);
    int during = child_sockets();
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    pthread_join(th, NULL);
    assert_int_equal(w.r, 0);
    assert_int_equal(during, before);
    assert_int_equal(dm_rlock_release(h.l, h.b, w.g.token), 0);
    dm_rlock_put(h.l);
}

#define MANY_WAITS 10

/* Fair waits on many names, one after another, each handed over: the
 * connections they subscribed stay open for a few names only (review r4:
 * one per name, up to 32, filled the server's maxclients). */
static void test_fair_waits_on_many_names_keep_few_connections(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    struct th_hold h[MANY_WAITS];
    for (int i = 0; i < MANY_WAITS; i++) {
        char name[32];
        snprintf(name, sizeof name, "wconn_many%d", i);
        h[i] = th_owners(name);
        dm_rlock_mode(h[i].l, 1, 0, 0);
        h[i].t = th_grant(h[i].l, h[i].a, &h[i].g);
    }
    /* Each wait ends by its handover, once the waiter is on its own
     * connection (not by a deadline, which a loaded machine could pass
     * before the connection is made). */
    for (int i = 0; i < MANY_WAITS; i++) {
        struct direct_waiter w = { .h = &h[i], .r = -1 };
        pthread_t th;
        th_reset_stats(rc);
        assert_int_equal(pthread_create(&th, NULL, direct_waiter_main, &w), 0);
        wait_direct_waiter(h[i].l);
        assert_int_equal(dm_rlock_release(h[i].l, h[i].a, h[i].t), 0);
        pthread_join(th, NULL);
        assert_int_equal(w.r, 0);
        assert_int_equal(dm_rlock_release(h[i].l, h[i].b, w.g.token), 0);
    }
    int kept = 0;
    for (int i = 0; i < MANY_WAITS; i++)
        kept += th_numsub(rc, wait_channel_of(h[i].l)) > 0;
    assert_true(kept >= 1);     /* the last name's, at least: kept for its next wait */
    assert_true(kept <= 2);
    for (int i = 0; i < MANY_WAITS; i++)
        dm_rlock_put(h[i].l);
}

/* A fair waiter that cannot connect a connection of its own (the server
 * at maxclients) waits on the process's subscriber instead and is handed
 * the lock by message (its claim lease), not found by polling a second
 * later (review r4b/r4c: it slept and polled). */
static void test_fair_waiter_without_a_connection_of_its_own_takes_the_handover(void **state)
{
    (void)state;
    th_cluster_lease(&cfg, LONG_LEASE_MS);
    struct th_hold h = th_owners("wconn_none");
    dm_rlock_mode(h.l, 1, 0, 0);
    h.t = th_grant(h.l, h.a, &h.g);
    /* notify's connection made now, while the server takes clients */
    struct dm_chan *other = dm_notify_chan("dmutex:{wconn_none}:other");
    assert_non_null(other);
    assert_int_equal(dm_notify_subscribe(other, SLACK_MS), 0);
    redisReply *r = th_cmd(rc, "INFO clients");
    const char *cc = strstr(r->str, "connected_clients:");
    assert_non_null(cc);
    long clients = atol(cc + strlen("connected_clients:"));
    freeReplyObject(r);
    freeReplyObject(th_cmd(rc, "CONFIG SET maxclients %ld", clients));
    struct direct_waiter w = { .h = &h, .r = -1 };
    pthread_t th;
    th_reset_stats(rc);
    assert_int_equal(pthread_create(&th, NULL, direct_waiter_main, &w), 0);
    wait_direct_waiter(h.l);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    pthread_join(th, NULL);
    freeReplyObject(th_cmd(rc, "CONFIG SET maxclients 10000"));
    dm_notify_chan_put(other);
    assert_int_equal(w.r, 0);
    assert_int_equal(w.g.token, h.t + 1);
    assert_int_equal(w.g.lease_ms, cfg.lease_ms);       /* a handover has the whole lease */
    assert_int_equal(dm_rlock_release(h.l, h.b, w.g.token), 0);
    dm_rlock_put(h.l);
}

/* The scripts answer as their header comments say, run the way those
 * comments tell a user to run them by hand (not fair, no lock caching). */
/* The KEYS[] of lock "byhand" as a script's header lists them, quoted for
 * the shell; and release's ARGV, which names two of its channels. */
static const char *bh_keys(const enum dm_key *k, size_t n)
{
    static char out[4][512];
    static unsigned next;
    char *buf = out[next++ % 4];
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && used < sizeof out[0]; i++)
        used += (size_t)snprintf(buf + used, sizeof out[0] - used, "%s'%s'", i ? " " : "",
                                 th_key("byhand", k[i]));
    return buf;
}
#define BH_LIST(...) bh_keys((const enum dm_key[]){ __VA_ARGS__ }, \
                             sizeof (const enum dm_key[]){ __VA_ARGS__ } / sizeof (enum dm_key))
#define BH_KEYS BH_LIST(DM_KEY_LOCK, DM_KEY_TOKEN, DM_KEY_HOLDER, DM_KEY_QUEUE, DM_KEY_QTIME, \
                        DM_KEY_LOST, DM_KEY_VOID)
#define BH_RELEASE_KEYS BH_LIST(DM_KEY_LOCK, DM_KEY_HOLDER, DM_KEY_TOKEN, DM_KEY_QUEUE, \
                                DM_KEY_QTIME, DM_KEY_LOST)
#define BH_CANCEL_KEYS BH_LIST(DM_KEY_LOCK, DM_KEY_QUEUE, DM_KEY_QTIME, DM_KEY_TOKEN, \
                               DM_KEY_HOLDER, DM_KEY_VOID)
#define BH_ACQ(who, delay) who " 30000 " delay " 0 '" who "|1' 3000 '' " DM_KEYS_LOST_KEEP

static const char *bh_rel(const char *who, const char *tok)
{
    static char out[512];
    snprintf(out, sizeof out, "%s %s '%s' 30000 '%s' 10000", who, tok,
             th_key("byhand", DM_KEY_RELEASED), th_key("byhand", DM_KEY_WAIT));
    return out;
}
#define BH_REL(who, tok) bh_rel(who, tok)

static void test_lua_scripts_run_by_hand_reply_as_documented(void **state)
{
    (void)state;
    char lk[128];
    snprintf(lk, sizeof lk, "'%s'", th_key("byhand", DM_KEY_LOCK));

    /* An existing counter counts on by one (a missing one starts from the
     * server clock: test_token_counter_lost_restarts_from_server_time). */
    freeReplyObject(th_cmd(rc, "SET %s 100", th_key("byhand", DM_KEY_TOKEN)));
    assert_string_equal(cli_eval("acquire", BH_KEYS, BH_ACQ("me:1", "0")), "1 101 0");
    /* again: the owner held it already (the 4th element, acquire.lua) */
    assert_string_equal(cli_eval("acquire", BH_KEYS, BH_ACQ("me:1", "0")), "1 101 0 1");
    const char *held = cli_eval("acquire", BH_KEYS, BH_ACQ("you:1", "0"));
    long pttl = -1;
    if (sscanf(held, "0 %ld", &pttl) != 1 || pttl <= 0 || pttl > 30000)
        fail_msg("acquire by another owner replied \"%s\", expected \"0 <pttl>\"", held);

    assert_string_equal(cli_eval("renew", lk, "me:1 30000"), "1");
    assert_string_equal(cli_eval("renew", lk, "you:1 30000"), "0");

    assert_string_equal(cli_eval("release", BH_RELEASE_KEYS, BH_REL("you:1", "101")), "0");
    assert_string_equal(cli_eval("release", BH_RELEASE_KEYS, BH_REL("me:1", "101")), "1");
    assert_string_equal(cli_eval("release", BH_RELEASE_KEYS, BH_REL("me:1", "101")), "1"); /* retry */
    assert_string_equal(cli_eval("renew", lk, "me:1 30000"), "0");

    assert_string_equal(cli_eval("acquire", BH_KEYS, BH_ACQ("you:1", "0")), "1 102 0");

    /* An expired hold: the next grant reports the owner dead. */
    freeReplyObject(th_cmd(rc, "DEL %s", th_key("byhand", DM_KEY_LOCK)));
    assert_string_equal(cli_eval("acquire", BH_KEYS, BH_ACQ("me:1", "0")), "1 103 1");
    /* With a lock delay, the first attempt after an expiry is held off. */
    freeReplyObject(th_cmd(rc, "DEL %s", th_key("byhand", DM_KEY_LOCK)));
    held = cli_eval("acquire", BH_KEYS, BH_ACQ("you:1", "5000"));
    if (sscanf(held, "0 %ld", &pttl) != 1 || pttl <= 0 || pttl > 5000)
        fail_msg("acquire during the lock delay replied \"%s\", expected \"0 <ms>\"", held);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("byhand", DM_KEY_LOCK)), 0);

    /* cancel (abandon): a request that got the hold reports it; another
     * request of the same owner does not; a voided request grants nothing. */
    freeReplyObject(th_cmd(rc, "DEL %s", th_key("byhand", DM_KEY_HOLDER)));
    assert_string_equal(cli_eval("acquire", BH_KEYS, BH_ACQ("me:1", "0")), "1 104 0");
    assert_string_equal(cli_eval("cancel", BH_CANCEL_KEYS, "me:1 'me:1|9' 0"), "0 0");
    assert_string_equal(cli_eval("cancel", BH_CANCEL_KEYS, "me:1 'me:1|1' 0"), "1 104");
    assert_string_equal(cli_eval("release", BH_RELEASE_KEYS, BH_REL("me:1", "104")), "1");
    assert_string_equal(cli_eval("cancel", BH_CANCEL_KEYS, "you:1 'you:1|1' 5000"), "0 0");
    held = cli_eval("acquire", BH_KEYS, BH_ACQ("you:1", "0"));
    if (sscanf(held, "0 %ld", &pttl) != 1)
        fail_msg("acquire of a voided request replied \"%s\", expected \"0 <ms>\"", held);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("byhand", DM_KEY_LOCK)), 0);
}

/* ---- Redis unreachable ----------------------------------------------------- */

static void test_try_is_ebusy_when_redis_is_unreachable(void **state)
{
    (void)state;
    struct th_hold h = th_owners("down_try");
    long long t0 = th_now_ms();
    assert_int_equal(dm_rlock_acquire(h.l, h.a, NULL, DM_ACQ_TRY, &h.g), EBUSY);
    assert_int_equal(dm_rlock_acquire(h.l, h.a, NULL, DM_ACQ_TRY, &h.g), EBUSY);
    assert_true(th_now_ms() - t0 < SLACK_MS);
}

static void test_deadline_gives_etimedout_when_redis_is_unreachable(void **state)
{
    (void)state;
    struct th_hold h = th_owners("down_deadline");
    const long wait = 800;
    long long t0 = th_now_ms();
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, wait);
    int r = acquire_quietly(&h, &dl, 0);
    assert_int_equal(r, ETIMEDOUT);
    long long took = th_now_ms() - t0;
    if (took < wait || took > wait + SLACK_MS)
        fail_msg("ETIMEDOUT after %lld ms, deadline was %ld ms", took, wait);
}

static void test_on_redis_down_error_gives_eagain_when_unreachable(void **state)
{
    (void)state;
    struct th_hold h = th_owners("down_error");
    cfg.on_redis_down = DM_DOWN_ERROR;
    long long t0 = th_now_ms();
    int r = acquire_quietly(&h, NULL, 0);
    assert_int_equal(r, EAGAIN);
    assert_true(th_now_ms() - t0 < SLACK_MS);
}

/* ---- names: interned, reference counted, freed -------------------------- */

#define MANY_NAMES      100000  /* the performance issue's "100,000 names" */
#define CHURN_SUB_EVERY 100     /* of the cycles, these subscribe channels too */
#define CHURN_SLACK_B   (256 * 1024L)   /* heap growth allowed over all cycles:
                                           a leak of even 8 bytes a name is 800 KB */
#define MAX_AVG_PROBES  3       /* chain steps per lookup at most, on average */
#define UNSUB_WAIT_MS   5000L   /* for the subscriber thread's UNSUBSCRIBEs to land */

static size_t heap_in_use(void)
{
    return mallinfo2().uordblks;
}

/* Channels of the server whose name matches `pattern`. */
static long long server_channels(const char *pattern)
{
    redisReply *r = th_cmd(rc, "PUBSUB CHANNELS %s", pattern);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    long long n = (long long)r->elements;
    freeReplyObject(r);
    return n;
}

static void wait_no_channels(const char *pattern)
{
    long long end = th_now_ms() + UNSUB_WAIT_MS;
    long long n;
    while ((n = server_channels(pattern)) != 0) {
        if (th_now_ms() > end)
            fail_msg("%lld channels matching %s still subscribed %ld ms after their last put",
                     n, pattern, UNSUB_WAIT_MS);
        usleep(POLL_MS * 1000);
    }
}

/* Names PREFIX0..PREFIX<n-1>: a lock record each (ls) and a channel
 * "dmutex:{PREFIXi}:x" each (cs), as many live names; names_put drops one
 * reference of each. */
static void names_get(const char *prefix, int n, struct dm_rlock **ls,
                      struct dm_chan **cs)
{
    char name[48];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s%d", prefix, i);
        ls[i] = th_lock_get(name);
        snprintf(name, sizeof name, "dmutex:{%s%d}:x", prefix, i);
        assert_non_null(cs[i] = dm_notify_chan(name));
    }
}

static void names_put(int n, struct dm_rlock **ls, struct dm_chan **cs)
{
    for (int i = 0; i < n; i++) {
        dm_rlock_put(ls[i]);
        dm_notify_chan_put(cs[i]);
    }
}

/* One name used and dropped: made, its channels subscribed now and then
 * (as a waiter would), put. */
static void churn_one(int i)
{
    char name[32];
    snprintf(name, sizeof name, "churn%d", i);
    struct dm_rlock *l = th_lock_get(name);
    if (i % CHURN_SUB_EVERY == 0) {
        struct dm_chan *ch = dm_rlock_chan(l);
        assert_non_null(ch);
        assert_int_equal(dm_notify_subscribe(ch, SLACK_MS), 0);
        ch = dm_rlock_wchan(l);
        assert_non_null(ch);
        assert_int_equal(dm_notify_subscribe(ch, SLACK_MS), 0);
    }
    dm_rlock_put(l);
}

/* A program that names each object's mutex (dmutex_name, heap mutexes)
 * makes and drops names all its life: the records, their key strings, their
 * channels and the server's subscriptions must go with the last put. */
static void test_get_put_of_many_distinct_names_leaves_memory_and_subscriptions_flat(void **state)
{
    (void)state;
    size_t locks0 = dm_rlock_stats().count, chans0 = dm_notify_stats().count;
    for (int i = 0; i < CHURN_SUB_EVERY * 10; i++)        /* tables and pools warmed */
        churn_one(i);
    size_t before = heap_in_use();
    for (int i = CHURN_SUB_EVERY * 10; i < MANY_NAMES; i++)
        churn_one(i);
    size_t after = heap_in_use();
    if (after > before + CHURN_SLACK_B)
        fail_msg("the heap grew by %zu bytes over %d names made and dropped",
                 after - before, MANY_NAMES);
    assert_int_equal(dm_rlock_stats().count, locks0);
    char pat[128];
    snprintf(pat, sizeof pat, "%s*", th_key("churn*", DM_KEY_LOCK));
    wait_no_channels(pat);
    /* Dropped channels are freed once the server confirmed their UNSUBSCRIBE. */
    long long end = th_now_ms() + UNSUB_WAIT_MS;
    while (dm_notify_stats().count != chans0) {
        if (th_now_ms() > end)
            fail_msg("%zu channel records left, expected %zu", dm_notify_stats().count, chans0);
        usleep(POLL_MS * 1000);
    }
}

/* Lookups by name cost the same with 100,000 live names as with one:
 * counted in chain steps, not time (the machine is noisy). */
static void test_get_of_many_live_names_takes_constant_probe_steps(void **state)
{
    (void)state;
    struct dm_rlock **ls = calloc(MANY_NAMES, sizeof *ls);
    struct dm_chan **cs = calloc(MANY_NAMES, sizeof *cs);
    assert_non_null(ls);
    assert_non_null(cs);
    names_get("live", MANY_NAMES, ls, cs);
    char name[40];
    unsigned long lp = dm_rlock_stats().probes, np = dm_notify_stats().probes;
    for (int i = 0; i < MANY_NAMES; i++) {
        snprintf(name, sizeof name, "live%d", i);
        assert_ptr_equal(dm_rlock_get(name), ls[i]);
        snprintf(name, sizeof name, "dmutex:{live%d}:x", i);
        assert_ptr_equal(dm_notify_chan(name), cs[i]);
    }
    unsigned long lsteps = dm_rlock_stats().probes - lp, nsteps = dm_notify_stats().probes - np;
    if (lsteps > (unsigned long)MAX_AVG_PROBES * MANY_NAMES ||
        nsteps > (unsigned long)MAX_AVG_PROBES * MANY_NAMES)
        fail_msg("%d lookups among %d live names took %lu (locks) and %lu (channels) chain "
                 "steps; expected at most %d each on average",
                 MANY_NAMES, MANY_NAMES, lsteps, nsteps, MAX_AVG_PROBES);
    size_t locks = dm_rlock_stats().count;
    names_put(MANY_NAMES, ls, cs);                      /* one of two references */
    assert_int_equal(dm_rlock_stats().count, locks);   /* still referenced */
    names_put(MANY_NAMES, ls, cs);
    assert_int_equal(dm_rlock_stats().count, locks - MANY_NAMES);
    free(ls);
    free(cs);
}

/* A name dropped and made again at once: the old record's UNSUBSCRIBE must
 * not undo the new record's SUBSCRIBE of the same channel. */
static void test_name_made_again_after_put_stays_subscribed(void **state)
{
    (void)state;
    for (int i = 0; i < 50; i++) {
        struct dm_rlock *l = th_lock_get("again");
        struct dm_chan *ch = dm_rlock_chan(l);
        assert_non_null(ch);
        assert_int_equal(dm_notify_subscribe(ch, SLACK_MS), 0);
        dm_rlock_put(l);
    }
    struct dm_rlock *l = th_lock_get("again");
    assert_int_equal(dm_notify_subscribe(dm_rlock_chan(l), SLACK_MS), 0);
    /* Replies come in order: a PING answered after the subscription means
     * every earlier UNSUBSCRIBE of it has been applied by the server. */
    usleep(100 * 1000);
    assert_int_equal(th_numsub(rc, th_key(l->name, DM_KEY_RELEASED)), 1);
    unsigned long seq = dm_notify_seq(l->chan);
    freeReplyObject(th_cmd(rc, "PUBLISH %s hello", th_key(l->name, DM_KEY_RELEASED)));
    assert_int_equal(dm_notify_wait(l->chan, seq, SLACK_MS), 0);
    dm_rlock_put(l);
    char pat[128];
    snprintf(pat, sizeof pat, "%s*", th_key("again", DM_KEY_LOCK));
    wait_no_channels(pat);
}

#define HANDLER_ROUNDS  40
#define HANDLER_HOLD_US 300     /* a handler call long enough to be caught in */
#define PUBLISH_EVERY_US 1000

struct hstate {
    int closed;                 /* set right after the put returned */
    int calls;
    int late;                   /* calls that began after closed */
};

static void stress_handler(void *arg, const char *msg, size_t len)
{
    (void)msg;
    (void)len;
    struct hstate *st = arg;
    if (__atomic_load_n(&st->closed, __ATOMIC_ACQUIRE))
        __atomic_add_fetch(&st->late, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&st->calls, 1, __ATOMIC_RELAXED);
    usleep(HANDLER_HOLD_US);
    if (__atomic_load_n(&st->closed, __ATOMIC_ACQUIRE))
        __atomic_add_fetch(&st->late, 1, __ATOMIC_RELAXED);  /* still running after put */
}

struct publisher {
    const char *channel;
    int stop;
};

static void *publisher_main(void *arg)
{
    struct publisher *p = arg;
    redisContext *c = th_redis_connect(&rs);
    /* Slower than the handler: a backlog would delay the subscriptions. */
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        freeReplyObject(th_cmd(c, "PUBLISH %s x", p->channel));
        usleep(PUBLISH_EVERY_US);
    }
    redisFree(c);
    return NULL;
}

/* A handler's argument may be freed as soon as put (or set_handler(NULL))
 * returns: no call may be in progress then or begin afterwards, with
 * messages pouring in. */
static void test_handler_is_never_called_after_put_returns(void **state)
{
    (void)state;
    struct publisher pub = { "dmutex:{hstress}:x", 0 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, publisher_main, &pub), 0);
    static struct hstate st[HANDLER_ROUNDS];
    int total = 0;
    for (int i = 0; i < HANDLER_ROUNDS; i++) {
        struct dm_chan *ch = dm_notify_chan(pub.channel);
        assert_non_null(ch);
        dm_notify_set_handler(ch, stress_handler, &st[i]);
        assert_int_equal(dm_notify_subscribe(ch, SLACK_MS), 0);
        long long end = th_now_ms() + SLACK_MS;
        while (__atomic_load_n(&st[i].calls, __ATOMIC_ACQUIRE) < 3 && th_now_ms() < end)
            usleep(200);
        if (i % 2) {
            /* set_handler(NULL) waits the same way; the put then has none. */
            dm_notify_set_handler(ch, NULL, NULL);
            __atomic_store_n(&st[i].closed, 1, __ATOMIC_RELEASE);
            dm_notify_chan_put(ch);
        } else {
            dm_notify_chan_put(ch);
            __atomic_store_n(&st[i].closed, 1, __ATOMIC_RELEASE);
        }
        total += st[i].calls;
    }
    usleep(50 * 1000);          /* time for any late call to show */
    __atomic_store_n(&pub.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    for (int i = 0; i < HANDLER_ROUNDS; i++)
        if (st[i].late)
            fail_msg("round %d: the handler ran %d times after %s returned", i, st[i].late,
                     i % 2 ? "set_handler(NULL)" : "its channel's put");
    assert_true(total >= HANDLER_ROUNDS);   /* the stress did call handlers */
    wait_no_channels("dmutex:{hstress}*");
}

static struct dm_chan *self_ch;
static int self_puts;

static void self_put_handler(void *arg, const char *msg, size_t len)
{
    (void)arg;
    (void)msg;
    (void)len;
    if (__atomic_add_fetch(&self_puts, 1, __ATOMIC_ACQ_REL) == 1)
        dm_notify_chan_put(self_ch);        /* must not wait for itself */
}

/* A handler may drop its own channel (as a name destroyed from a want
 * handler would): no deadlock, and the channel is unsubscribed. */
static void test_handler_may_put_its_own_channel(void **state)
{
    (void)state;
    const char *name = "dmutex:{selfput}:x";
    self_ch = dm_notify_chan(name);
    assert_non_null(self_ch);
    dm_notify_set_handler(self_ch, self_put_handler, NULL);
    assert_int_equal(dm_notify_subscribe(self_ch, SLACK_MS), 0);
    freeReplyObject(th_cmd(rc, "PUBLISH %s a", name));
    wait_no_channels("dmutex:{selfput}*");
    assert_int_equal(__atomic_load_n(&self_puts, __ATOMIC_ACQUIRE), 1);
    /* The subscriber thread still serves others. */
    struct dm_chan *ch = dm_notify_chan("dmutex:{selfput2}:x");
    assert_int_equal(dm_notify_subscribe(ch, SLACK_MS), 0);
    dm_notify_chan_put(ch);
}

/* A fork child has a new process id, hence a new wait channel: it must be
 * made under the child's id and work, and names still come and go. */
static void test_fork_child_waits_on_its_own_channel(void **state)
{
    (void)state;
    struct dm_rlock *l = th_lock_get("forked");
    assert_int_equal(dm_notify_subscribe(dm_rlock_wchan(l), SLACK_MS), 0);
    char parent_id[64];
    snprintf(parent_id, sizeof parent_id, "%s", dm_store_process_id());
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dm_store_atfork(DM_FORK_CHILD);
        int bad = 0;
        char wait_channel[DM_RLOCK_KEY_MAX];
        dm_rlock_key(l, DM_KEY_WAIT, wait_channel, sizeof wait_channel);
        if (strcmp(parent_id, dm_store_process_id()) == 0 ||
            !strstr(wait_channel, dm_store_process_id()))
            bad |= 1;
        struct dm_chan *w = dm_rlock_wchan(l);
        redisContext *c = redisConnect(rs.addr, rs.port);
        redisReply *r = NULL;
        if (!w || dm_notify_subscribe(w, SLACK_MS) != 0 || !c || c->err ||
            !(r = redisCommand(c, "PUBSUB NUMSUB %s", wait_channel)) ||
            r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->integer != 1)
            bad |= 2;
        struct dm_rlock *o = dm_rlock_get("forked-child");
        if (!o || dm_notify_subscribe(dm_rlock_chan(o), SLACK_MS) != 0)
            bad |= 4;
        dm_rlock_put(o);
        _exit(bad);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) != 0)
        fail_msg("fork child: %s%s%s", WEXITSTATUS(st) & 1 ? "the wait channel was not remade " : "",
                 WEXITSTATUS(st) & 2 ? "its own wait channel is not subscribed " : "",
                 WEXITSTATUS(st) & 4 ? "a new name did not subscribe" : "");
    char wait_channel[DM_RLOCK_KEY_MAX];
    dm_rlock_key(l, DM_KEY_WAIT, wait_channel, sizeof wait_channel);
    assert_int_equal(th_numsub(rc, wait_channel), 1);           /* the parent's is untouched */
    dm_rlock_put(l);
    char pat[128];
    snprintf(pat, sizeof pat, "%s*", th_key("forked", DM_KEY_LOCK));
    wait_no_channels(pat);
}

#define FORK_LIVE       1000    /* names the parent keeps */
#define FORK_CHURN      5000    /* names a thread makes and drops, growing and shrinking the tables */
#define FORK_ROUNDS     100

struct fork_churn {
    int stop;
    unsigned long cycles;
};

static void *fork_churn_main(void *arg)
{
    struct fork_churn *fc = arg;
    static struct dm_rlock *ls[FORK_CHURN];
    static struct dm_chan *cs[FORK_CHURN];
    char name[48];
    while (!__atomic_load_n(&fc->stop, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < FORK_CHURN; i++) {
            snprintf(name, sizeof name, "fchurn%d", i);
            ls[i] = dm_rlock_get(name);
            snprintf(name, sizeof name, "dmutex:{fchurn%d}:x", i);
            cs[i] = dm_notify_chan(name);
        }
        for (int i = 0; i < FORK_CHURN; i++) {
            dm_rlock_put(ls[i]);
            dm_notify_chan_put(cs[i]);
        }
        __atomic_add_fetch(&fc->cycles, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* A fork while another thread grows or shrinks the tables: the child must
 * find every record the parent had (the shim's pthread_atfork handlers
 * hold the tables' locks across fork; called here by hand, in the same
 * order). */
static void test_fork_during_table_resizes_leaves_the_child_consistent(void **state)
{
    (void)state;
    static struct dm_rlock *live[FORK_LIVE];
    static struct dm_chan *chans[FORK_LIVE];
    names_get("flive", FORK_LIVE, live, chans);
    char name[48];
    struct fork_churn fc = { 0, 0 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fork_churn_main, &fc), 0);
    int failed = 0;
    for (int r = 0; r < FORK_ROUNDS && !failed; r++) {
        usleep(1000 + (r % 7) * 300);
        dm_store_atfork(DM_FORK_PREPARE);
        pid_t pid = fork();
        if (pid == 0) {
            dm_store_atfork(DM_FORK_CHILD);
            int bad = 0;
            for (int i = 0; i < FORK_LIVE; i++) {
                snprintf(name, sizeof name, "flive%d", i);
                struct dm_rlock *l = dm_rlock_get(name);
                bad |= l != live[i];
                dm_rlock_put(l);
                snprintf(name, sizeof name, "dmutex:{flive%d}:x", i);
                struct dm_chan *c = dm_notify_chan(name);
                bad |= c != chans[i];
                dm_notify_chan_put(c);
            }
            _exit(bad);
        }
        dm_store_atfork(DM_FORK_PARENT);
        assert_true(pid > 0);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        failed = !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    __atomic_store_n(&fc.stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);
    if (failed)
        fail_msg("a fork child did not find the records its parent had");
    assert_true(fc.cycles > 0);
    names_put(FORK_LIVE, live, chans);
}

#define GAP_WAIT_MS     300     /* a timed wait while the subscriber cannot reconnect */
#define RESUB_MAX_MS    10000L  /* the subscriber's backoff (2 s at most) and a restart */

/* Between the loss of the subscriber connection and the confirmation of
 * the channel's new subscription no notice reaches this process. A waiter
 * that reads the channel's count in that gap (after the loss moved it)
 * must still wake: the count moves again once the subscription is
 * confirmed (before: it did not, and the waiter slept through a notice
 * published in the gap, to its deadline). Meanwhile a timed wait ends by
 * its deadline. The gap is held open by the server being down. */
static void test_count_read_before_the_resubscription_moves_when_it_is_confirmed(void **state)
{
    (void)state;
    const char *name = "dmutex:{regap}:cond";
    struct dm_chan *ch = dm_notify_chan(name);
    assert_non_null(ch);
    assert_int_equal(dm_notify_subscribe(ch, SLACK_MS), 0);
    unsigned long before = dm_notify_seq(ch);
    redisFree(rc);
    rc = NULL;
    th_redis_kill(&rs);
    long long t0 = th_now_ms();
    while (dm_notify_seq(ch) == before) {
        if (th_now_ms() - t0 > SLACK_MS)
            fail_msg("the subscriber did not see its connection go");
        usleep(POLL_MS * 1000);
    }
    unsigned long seen = dm_notify_seq(ch);     /* read in the gap */
    struct timespec dl;
    dm_deadline_in(&dl, GAP_WAIT_MS);
    t0 = th_now_ms();
    int r = dm_notify_wait_until(ch, seen, &dl);
    long long took = th_now_ms() - t0;
    assert_int_equal(r, ETIMEDOUT);
    if (took > GAP_WAIT_MS + SLACK_MS)
        fail_msg("a %d ms wait took %lld ms while the subscriber reconnects", GAP_WAIT_MS, took);
    th_redis_restart(&rs, NULL);
    rc = th_redis_connect(&rs);
    /* A notice now reaches nobody, unless the subscription is back already. */
    freeReplyObject(th_cmd(rc, "PUBLISH %s lost", name));
    t0 = th_now_ms();
    if (dm_notify_wait(ch, seen, RESUB_MAX_MS) != 0)
        fail_msg("the waiter slept %lld ms after the server came back (subscribers now: %lld)",
                 th_now_ms() - t0, th_numsub(rc, name));
    dm_notify_chan_put(ch);
}

#define RC_DROPPED      200     /* channels dropped just before the connection is killed */

/* The subscriber connection is lost while dropped channels wait for their
 * UNSUBSCRIBE to be sent or confirmed: they are freed (the server forgot
 * them with the connection), and the channel still in use is subscribed
 * again on the new one. */
static void test_connection_lost_while_dropping_channels_frees_them_and_resubscribes(void **state)
{
    (void)state;
    size_t base = dm_notify_stats().count;
    struct dm_chan *keep = dm_notify_chan("dmutex:{rc}:keep");
    assert_non_null(keep);
    assert_int_equal(dm_notify_subscribe(keep, SLACK_MS), 0);
    unsigned long seq = dm_notify_seq(keep);
    char name[48];
    for (int i = 0; i < RC_DROPPED; i++) {
        snprintf(name, sizeof name, "dmutex:{rc}:drop%d", i);
        struct dm_chan *ch = dm_notify_chan(name);
        assert_non_null(ch);
        assert_int_equal(dm_notify_subscribe(ch, SLACK_MS), 0);
    }
    for (int i = 0; i < RC_DROPPED; i++) {
        snprintf(name, sizeof name, "dmutex:{rc}:drop%d", i);
        struct dm_chan *ch = dm_notify_chan(name);     /* a second reference... */
        dm_notify_chan_put(ch);
        dm_notify_chan_put(ch);                               /* ...and the last */
    }
    freeReplyObject(th_cmd(rc, "CLIENT KILL TYPE pubsub"));
    long long end = th_now_ms() + UNSUB_WAIT_MS + SLACK_MS;
    while (dm_notify_stats().count != base + 1 || th_numsub(rc, "dmutex:{rc}:keep") != 1 ||
           !dm_notify_is_subscribed(keep)) {
        if (th_now_ms() > end)
            fail_msg("after the connection was lost: %zu channel records (expected %zu), "
                     "keep subscribed %lld times on the server, %s here",
                     dm_notify_stats().count, base + 1, th_numsub(rc, "dmutex:{rc}:keep"),
                     dm_notify_is_subscribed(keep) ? "subscribed" : "not subscribed");
        usleep(POLL_MS * 1000);
    }
    assert_true(dm_notify_seq(keep) != seq);     /* waiters were woken: a notice may be lost */
    assert_int_equal(server_channels("dmutex:{rc}:drop*"), 0);
    dm_notify_chan_put(keep);
    wait_no_channels("dmutex:{rc}*");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_grant_gives_a_token_and_each_grant_increments_it, reset_policy),
        cmocka_unit_test_setup(test_try_by_another_owner_is_ebusy_while_held, reset_policy),
        cmocka_unit_test_setup(test_waiter_is_woken_by_the_release_notice, reset_policy),
        cmocka_unit_test_setup(test_reentrant_grant_keeps_the_token_and_one_release_frees_it,
                               reset_policy),
        cmocka_unit_test_setup(test_retried_release_of_the_same_hold_returns_0, reset_policy),
        cmocka_unit_test_setup(test_release_by_a_non_owner_is_eperm_and_keeps_the_lock, reset_policy),
        cmocka_unit_test_setup(test_release_after_the_lease_expired_is_eperm, reset_policy),
        cmocka_unit_test_setup(test_grant_after_a_lease_expired_reports_owner_dead, reset_policy),
        cmocka_unit_test_setup(test_grant_after_a_clean_release_reports_no_owner_dead, reset_policy),
        cmocka_unit_test_setup(test_a_forced_release_reports_owner_dead_to_the_next_holder,
                               reset_policy),
        cmocka_unit_test_setup(test_acquire_with_a_deadline_times_out_not_before_it, reset_policy),
        cmocka_unit_test_setup(test_lock_delay_holds_off_a_grant_after_an_expiry, reset_policy),
        cmocka_unit_test_setup(test_lock_delay_does_not_apply_after_a_clean_release, reset_policy),
        cmocka_unit_test_setup(test_lock_delay_after_a_forced_release_still_reports_it_forced,
                               reset_policy),
        cmocka_unit_test_setup(test_wrong_key_type_fails_with_a_message_naming_the_key, reset_policy),
        cmocka_unit_test_setup(test_script_flush_between_calls_is_survived, reset_policy),
        cmocka_unit_test_setup(test_release_nowait_returns_while_the_server_is_paused_and_runs_later,
                               reset_policy),
        cmocka_unit_test_setup(test_release_nowait_reply_is_read_before_the_next_command,
                               reset_policy),
        cmocka_unit_test_setup(test_release_nowait_overtaken_by_a_new_grant_of_the_owner_leaves_it,
                               reset_policy),
        cmocka_unit_test_setup(test_release_hold_names_its_request_and_leaves_a_later_grant,
                               reset_policy),
        cmocka_unit_test_setup(test_release_nowait_after_script_flush_is_sent_again, reset_policy),
        cmocka_unit_test_setup(test_noscript_of_an_acquire_loads_the_release_script_too, reset_policy),
        cmocka_unit_test_setup(test_release_nowait_retried_after_noscript_leaves_the_owners_next_grant,
                               reset_policy),
        cmocka_unit_test_setup(test_release_nowait_on_a_dropped_connection_is_sent_again,
                               reset_policy),
        cmocka_unit_test_setup(test_release_nowait_on_a_connection_the_server_closed_waits_for_it,
                               reset_policy),
        cmocka_unit_test_setup(test_trylock_after_a_release_without_waiting_finds_the_lock_free,
                               reset_policy),
        cmocka_unit_test_setup(test_release_nowait_of_an_expired_hold_reports_it_lost, reset_policy),
        cmocka_unit_test_setup(test_a_late_verdict_is_acted_on_by_the_reader_not_the_next_call,
                               reset_policy),
        cmocka_unit_test_setup(test_release_of_a_hold_lost_with_the_servers_data_says_so,
                               reset_policy),
        cmocka_unit_test_setup(test_release_of_a_hold_lost_before_a_raised_counter_is_lost,
                               reset_policy),
        cmocka_unit_test_setup(test_a_retried_release_across_a_failover_that_kept_it_is_released,
                               reset_policy),
        cmocka_unit_test_setup(test_a_forced_handover_leaves_this_runs_epoch_alone,
                               reset_policy),
        cmocka_unit_test_setup(test_a_refused_regrant_leaves_the_holds_marker, reset_policy),
        cmocka_unit_test_setup(test_release_nowait_of_a_deleted_hold_reports_it_lost_not_expired,
                               reset_policy),
        cmocka_unit_test_setup(test_fork_child_never_reads_the_parents_release_reply, reset_policy),
        cmocka_unit_test_setup(test_fork_child_frees_what_the_parents_unread_releases_hold,
                               reset_policy),
        cmocka_unit_test_setup(test_a_handover_notice_older_than_the_last_attempt_is_not_taken,
                               reset_policy),
        cmocka_unit_test_setup(test_a_handover_on_an_epoch_of_another_run_marks_it_unknown,
                               reset_policy),
        cmocka_unit_test_setup(test_fair_waiter_reads_its_handover_without_the_subscriber_thread,
                               reset_policy),
        cmocka_unit_test_setup(test_fork_child_closes_a_fair_waiters_own_connection, reset_policy),
        cmocka_unit_test_setup(test_fair_waits_on_many_names_keep_few_connections, reset_policy),
        cmocka_unit_test_setup(test_fair_waiter_without_a_connection_of_its_own_takes_the_handover,
                               reset_policy),
        cmocka_unit_test_setup(test_lua_scripts_run_by_hand_reply_as_documented, reset_policy),
        cmocka_unit_test_setup(test_token_counter_lost_restarts_from_server_time, reset_policy),
        cmocka_unit_test_setup(test_get_put_of_many_distinct_names_leaves_memory_and_subscriptions_flat,
                               reset_policy),
        cmocka_unit_test_setup(test_get_of_many_live_names_takes_constant_probe_steps, reset_policy),
        cmocka_unit_test_setup(test_name_made_again_after_put_stays_subscribed, reset_policy),
        cmocka_unit_test_setup(test_handler_is_never_called_after_put_returns, reset_policy),
        cmocka_unit_test_setup(test_handler_may_put_its_own_channel, reset_policy),
        cmocka_unit_test_setup(test_fork_child_waits_on_its_own_channel, reset_policy),
        cmocka_unit_test_setup(test_fork_during_table_resizes_leaves_the_child_consistent,
                               reset_policy),
        cmocka_unit_test_setup(test_connection_lost_while_dropping_channels_frees_them_and_resubscribes,
                               reset_policy),
        cmocka_unit_test_setup(test_count_read_before_the_resubscription_moves_when_it_is_confirmed,
                               reset_policy),
        cmocka_unit_test_setup_teardown(test_try_is_ebusy_when_redis_is_unreachable,
                                        server_down, server_back),
        cmocka_unit_test_setup_teardown(test_deadline_gives_etimedout_when_redis_is_unreachable,
                                        server_down, server_back),
        cmocka_unit_test_setup_teardown(test_on_redis_down_error_gives_eagain_when_unreachable,
                                        server_down, server_back),
    };
    return cmocka_run_group_tests(tests, group_setup, th_group_teardown);
}
