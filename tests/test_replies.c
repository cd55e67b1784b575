/* test_replies: the lock protocol of shim/redis/lock.h when a reply is lost,
 * late or an error. A reply that never came says nothing about whether the
 * request ran (or will: a paused server runs it when the pause ends), and
 * an error reply is a refusal, not an outage. Checked: an error reply never
 * lets a waiter lock "locally" next to the holder; a retried release
 * recognises itself whatever happened since; an abandoned acquire (trylock,
 * timed lock, on_redis_down = "error") leaves no grant behind, not even
 * when a late copy of it runs after the abandon; and the matrix: acquire,
 * release and cancel each with the reply dropped, delayed past the command
 * timeout, or replaced by an error, under contention.
 *
 * Faults come from tests/progs/faultserver in "reply" mode, a proxy in
 * front of a real redis-server that acts on the Nth call of one script.
 * Two layers. The cluster API driven in this process (no LD_PRELOAD):
 * contention from a second thread with its own owner, exclusion checked
 * with a counter of owners inside; renewals by the watchdog
 * (shim/watchdog.c) of a hold kept past a renewal period while the other
 * owner waits. And real processes: two tests/progs/faultworker processes
 * with the shim preloaded and on_lease_lost = "abort", each section
 * reported to the exclusion checker (tests/checker.h), for acquire, release
 * and renew (a plain lock never sends a cancel: that one is in-process). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <limits.h>
#include <sys/wait.h>

#include "checker.h"
#include "lock.h"
#include "config.h"
#include "harness.h"
#include "lua_scripts.h"
#include "redis.h"
#include "watchdog.h"

#define FSERVER         TH_BUILD "/tests/progs/faultserver"
#define WORKER          TH_BUILD "/tests/progs/faultworker"
#define RUN_MS          30000L  /* longest a worker that should finish may run */
#define LEASE_MS        2000L
#define CMD_TIMEOUT_MS  300L    /* the shim's command timeout in this group */
#define LATE_MS         1200L   /* a delayed call reaches the server this late */
#define PAUSE_MS        3000L   /* CLIENT PAUSE of the pause tests */
#define SLACK_MS        3000L   /* how late an event may be on a loaded machine */
#define ROUNDS          12      /* lock/unlock per thread in a contention run */
#define HOLD_US         3000
#define SUITE_ALARM_S   170

static struct th_redis rs;
static redisContext *rc;
static struct dm_config cfg;
static int proxy_port;
static struct th_checker chk;
static char shim_path[PATH_MAX], worker_path[PATH_MAX];

/* The shim talks to the real server from now on (a fresh pool). */
static void direct(void)
{
    dm_redis_atfork(DM_FORK_CHILD);        /* forgets pooled connections, sends nothing */
    cfg.redis.port = rs.port;
}

/* Starts a proxy to port `to` acting on call `nth` ("N", or "N+": that one
 * and every later one) of `script`; returns its port. */
static int proxy_to(int to, const char *script, const char *action, const char *nth,
                    char **outp)
{
    char *portfile = th_keep_file(th_write_file(".port", "%s", ""));
    unlink(portfile);
    char port[16];
    snprintf(port, sizeof port, "%d", to);
    *outp = th_out_file();
    char *argv[] = { FSERVER, "reply", portfile, rs.addr, port, (char *)script,
                     (char *)action, (char *)nth, NULL };
    th_child(argv, NULL, *outp);
    th_wait_for(portfile, "\n", SLACK_MS);
    char *pt = th_read_file(portfile);
    int p = atoi(pt);
    free(pt);
    return p;
}

/* Starts the proxy acting on the nth call of `script`; the shim talks to it. */
static void proxy(const char *script, const char *action, int nth, char **outp)
{
    char *portfile = th_keep_file(th_write_file(".port", "%s", ""));
    unlink(portfile);
    char port[16], n[16];
    snprintf(port, sizeof port, "%d", rs.port);
    snprintf(n, sizeof n, "%d", nth);
    *outp = th_out_file();
    char *argv[] = { FSERVER, "reply", portfile, rs.addr, port, (char *)script,
                     (char *)action, n, NULL };
    th_child(argv, NULL, *outp);
    th_wait_for(portfile, "\n", SLACK_MS);
    char *pt = th_read_file(portfile);
    proxy_port = atoi(pt);
    free(pt);
    dm_redis_atfork(DM_FORK_CHILD);
    cfg.redis.port = proxy_port;
}

/* One lock call of owner 1 under on_redis_down = "error", which must end
 * in EAGAIN (deadline NULL: no limit). */
static void assert_eagain(struct dm_rlock *l, const struct timespec *deadline)
{
    cfg.on_redis_down = DM_DOWN_ERROR;
    char a[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    struct dm_grant g;
    assert_int_equal(dm_rlock_acquire(l, a, deadline, 0, &g), EAGAIN);
}

/* The lock is free on the server, and a new locker sees no dead owner. */
static void assert_free_and_clean(struct dm_rlock *l)
{
    if (th_cmd_int(rc, "EXISTS %s", th_key(l->name, DM_KEY_LOCK)) != 0) {
        redisReply *r = th_cmd(rc, "GET %s", th_key(l->name, DM_KEY_HOLDER));
        fail_msg("%s is still held (holder marker %s)", th_key(l->name, DM_KEY_LOCK),
                 r->type == REDIS_REPLY_STRING ? r->str : "none");
    }
    char b[DM_OWNER_MAX];
    dm_store_owner(b, 900);
    struct dm_grant g;
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, SLACK_MS);
    assert_int_equal(dm_rlock_acquire(l, b, &dl, DM_ACQ_TRY, &g), 0);
    assert_int_equal(g.owner_dead, 0);
    assert_int_equal(dm_rlock_release(l, b, g.token), 0);
}

/* A hold by another process, made by hand. */
static void held_elsewhere(struct dm_rlock *l, long ms)
{
    freeReplyObject(th_cmd(rc, "HSET %s elsewhere:1 1", th_key(l->name, DM_KEY_LOCK)));
    freeReplyObject(th_cmd(rc, "PEXPIRE %s %ld", th_key(l->name, DM_KEY_LOCK), ms));
}

/* ---- fixtures ------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (th_built_paths(TH_SHIM, shim_path, WORKER, worker_path, NULL) != 0)
        return -1;
    th_group_start(&rs, &rc, SUITE_ALARM_S, NULL);
    th_checker_start(&chk);
    th_cluster_config(&cfg, &rs, CMD_TIMEOUT_MS, LEASE_MS);
    dm_store_init(&cfg, &dm_redis_store);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    th_group_stop(&rs, &rc);
    th_checker_stop(&chk);
    return 0;
}

static int setup(void **state)
{
    (void)state;
    cfg.on_redis_down = DM_DOWN_BLOCK;
    cfg.on_lease_lost = DM_LOST_ABORT;
    cfg.redis.command_timeout_ms = CMD_TIMEOUT_MS;
    th_checker_next(&chk);
    direct();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    freeReplyObject(th_cmd(rc, "CLIENT UNPAUSE"));
    th_test_cleanup();
    direct();
    return 0;
}

/* ---- an error reply is not an outage (on_redis_down = "local") ------------- */

static void test_error_reply_never_locks_locally_next_to_the_holder(void **state)
{
    (void)state;
    struct dm_rlock *l = th_lock_get("err_local");
    held_elsewhere(l, 10 * LEASE_MS);
    char *out;
    proxy("acquire", "error:OOM command not allowed when used memory > 'maxmemory'.", 1, &out);
    cfg.on_redis_down = DM_DOWN_LOCAL;
    char a[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    struct dm_grant g;
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, 800);
    long long t0 = th_now_ms();
    int r = dm_rlock_acquire(l, a, &dl, 0, &g);
    print_message("measured: error reply, on_redis_down = \"local\", timed lock (800 ms) "
                  "while held elsewhere: %s after %lld ms\n", strerror(r), th_now_ms() - t0);
    if (r == 0)
        fail_msg("acquire returned 0 (local_only %d) while another process holds the lock",
                 g.local_only);
    assert_int_equal(r, ETIMEDOUT);
    char *text = th_read_file(out);
    th_assert_has(text, "replaced by an error");
    free(text);
}

static void test_error_reply_gives_eagain_under_on_redis_down_error(void **state)
{
    (void)state;
    struct dm_rlock *l = th_lock_get("err_eagain");
    char *out;
    proxy("acquire", "error:NOPERM this user has no permissions to run the 'evalsha' command", 1,
          &out);
    assert_eagain(l, NULL);
    /* The call ran on the server (the proxy replaced its answer): the
     * grant it made is given back, not left for a lease. */
    direct();
    assert_free_and_clean(l);
}

/* ---- a retried release recognises itself ------------------------------------ */

/* Runs release.lua by hand, as the first try of a release whose reply the
 * shim never saw. */
static long long release_by_hand(struct dm_rlock *l, const char *who, uint64_t tok)
{
    char t[24];
    snprintf(t, sizeof t, "%llu", (unsigned long long)tok);
    char kb[DM_KEY_COUNT][TH_KEY_MAX];
    const char *k[DM_KEY_COUNT];
    for (int i = 0; i < DM_KEY_COUNT; i++)
        k[i] = strcpy(kb[i], th_key(l->name, (enum dm_key)i));
#ifdef DM_TEST_OLD_RELEASE    /* the release.lua of before the lost list */
    redisReply *r = th_cmd(rc, "EVAL %s 5 %s %s %s %s %s %s %s %s %ld %s %ld", dm_lua_release,
                           k[DM_KEY_LOCK], k[DM_KEY_HOLDER], k[DM_KEY_TOKEN], k[DM_KEY_QUEUE], k[DM_KEY_QTIME],
                           who, t, k[DM_KEY_RELEASED], LEASE_MS, k[DM_KEY_WAIT], LEASE_MS / 3);
#else
    redisReply *r = th_cmd(rc, "EVAL %s 6 %s %s %s %s %s %s %s %s %s %ld %s %ld", dm_lua_release,
                           k[DM_KEY_LOCK], k[DM_KEY_HOLDER], k[DM_KEY_TOKEN], k[DM_KEY_QUEUE], k[DM_KEY_QTIME],
                           k[DM_KEY_LOST], who, t, k[DM_KEY_RELEASED], LEASE_MS, k[DM_KEY_WAIT],
                           LEASE_MS / 3);
#endif
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    freeReplyObject(r);
    return v;
}

static void test_retried_release_after_the_next_grant_is_not_a_lost_hold(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("rel_retry");
    struct dm_grant gb;
    assert_int_equal(release_by_hand(h.l, h.a, h.t), 1);         /* ran; reply lost */
    th_grant(h.l, h.b, &gb);                                     /* the next owner */
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);      /* the retry */
    assert_int_equal(th_cmd_int(rc, "HGET %s %s", th_key(h.l->name, DM_KEY_LOCK), h.b), 1);   /* b's hold intact */
    assert_int_equal(dm_rlock_release(h.l, h.b, gb.token), 0);
    /* ...and after a third grant, and its release, still. */
    th_grant(h.l, h.b, &gb);
    assert_int_equal(dm_rlock_release(h.l, h.b, gb.token), 0);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
}

static void test_release_of_an_expired_hold_is_lost_even_after_the_next_grant(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("rel_lost");
    struct dm_grant gb;
    freeReplyObject(th_cmd(rc, "DEL %s", th_key(h.l->name, DM_KEY_LOCK)));     /* its lease ran out */
    th_grant(h.l, h.b, &gb);
    assert_int_equal(gb.owner_dead, 1);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), EPERM);
    assert_int_equal(dm_rlock_release(h.l, h.b, gb.token), 0);
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), EPERM);
    /* Bounded: the lost list keeps a few dozen tokens for a lease. */
    long long n = th_cmd_int(rc, "LLEN %s", th_key(h.l->name, DM_KEY_LOST));
    assert_true(n >= 1 && n <= 48);
    long long ttl = th_cmd_int(rc, "PTTL %s", th_key(h.l->name, DM_KEY_LOST));
    assert_true(ttl > 0 && ttl <= LEASE_MS);
}

/* A grant whose reply came back too late to trust is asked for again
 * (acquire is idempotent), but what it found stands: its previous holder
 * died holding the lock, so the grant the retry gets says so too, and a
 * robust mutex's next locker gets EOWNERDEAD. Beside a CPU hog the reply
 * of such a grant took 2.9 s of a 2 s lease and test_posix's robust locker
 * got 0 (then EINVAL from pthread_mutex_consistent). The call reaches the
 * server a lease late here, read within the command timeout. */
static void test_a_grant_too_late_to_trust_keeps_its_dead_holder(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("late_dead");
    freeReplyObject(th_cmd(rc, "DEL %s", th_key(h.l->name, DM_KEY_LOCK)));     /* a died */
    cfg.redis.command_timeout_ms = LEASE_MS + SLACK_MS;
    char *out;
    char act[32];
    snprintf(act, sizeof act, "delay:%ld", LEASE_MS);
    proxy("acquire", act, 1, &out);
    struct dm_grant g;
    long long t0 = th_now_ms();
    assert_int_equal(dm_rlock_acquire(h.l, h.b, NULL, 0, &g), 0);
    long long took = th_now_ms() - t0;
    char *text = th_read_file(out);
    th_assert_has(text, "reply: delay sent");
    free(text);
    if (took < LEASE_MS - cfg.lease_margin_ms)
        fail_msg("granted after %lld ms: the late grant was not the one kept", took);
    if (!g.owner_dead)
        fail_msg("the grant after a late one (%lld ms) forgot that its holder died", took);
    assert_int_equal(dm_rlock_release(h.l, h.b, g.token), 0);
}

/* A late copy of an old release (its connection was stalled) must not end
 * the same owner's newer hold. */
static void test_late_copy_of_an_old_release_leaves_a_newer_hold_alone(void **state)
{
    (void)state;
    struct th_hold h = th_hold_by_a("rel_late");
    struct dm_grant g2;
    assert_int_equal(dm_rlock_release(h.l, h.a, h.t), 0);
    th_grant(h.l, h.a, &g2);
    assert_int_equal(release_by_hand(h.l, h.a, h.t), 1);
    assert_int_equal(th_cmd_int(rc, "HGET %s %s", th_key(h.l->name, DM_KEY_LOCK), h.a), 1);
    assert_int_equal(dm_rlock_release(h.l, h.a, g2.token), 0);
}

/* ---- an abandoned acquire leaves no grant ---------------------------------- */

static void pause_then(struct dm_rlock *l, int flags, long deadline_ms, int expect)
{
    char a[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    struct dm_grant g;
    long long t0 = th_now_ms();
    freeReplyObject(th_cmd(rc, "CLIENT PAUSE %ld WRITE", PAUSE_MS));
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, deadline_ms);
    int r = dm_rlock_acquire(l, a, &dl, flags, &g);
    long long took = th_now_ms() - t0;
    assert_int_equal(r, expect);
    print_message("measured: CLIENT PAUSE %ld WRITE, %s (deadline %ld ms, command timeout "
                  "%ld ms): returned %s after %lld ms\n", PAUSE_MS,
                  flags & DM_ACQ_TRY ? "trylock" : "timed lock", deadline_ms, CMD_TIMEOUT_MS,
                  strerror(r), took);
    if (took > deadline_ms + 3 * CMD_TIMEOUT_MS + SLACK_MS)
        fail_msg("the call returned after %lld ms (deadline %ld ms)", took, deadline_ms);
    while (th_now_ms() - t0 < PAUSE_MS + 500)
        usleep(20000);
    assert_free_and_clean(l);
}

static void test_trylock_during_client_pause_leaves_the_lock_free(void **state)
{
    (void)state;
    pause_then(th_lock_get("pause_try"), DM_ACQ_TRY, 500, EBUSY);
}

static void test_timedlock_during_client_pause_leaves_the_lock_free(void **state)
{
    (void)state;
    pause_then(th_lock_get("pause_timed"), 0, 500, ETIMEDOUT);
}

static void test_fair_timedlock_during_client_pause_leaves_the_lock_free(void **state)
{
    (void)state;
    struct dm_rlock *l = th_lock_get("pause_fair");
    dm_rlock_mode(l, 1, 0, 0);
    pause_then(l, 0, 500, ETIMEDOUT);
}

/* The acquire reaches the server after the trylock has given up and its
 * abandon (on a new connection) has run: the late copy must grant nothing. */
static void test_late_copy_of_an_abandoned_acquire_grants_nothing(void **state)
{
    (void)state;
    struct dm_rlock *l = th_lock_get("late_acq");
    char *out;
    char act[32];
    snprintf(act, sizeof act, "delay:%ld", LATE_MS);
    proxy("acquire", act, 1, &out);
    char a[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    struct dm_grant g;
    long long t0 = th_now_ms();
    assert_int_equal(dm_rlock_acquire(l, a, NULL, DM_ACQ_TRY, &g), EBUSY);
    print_message("measured: trylock whose acquire reached the server %ld ms late: EBUSY "
                  "after %lld ms\n", LATE_MS, th_now_ms() - t0);
    th_wait_for(out, "reply: delay sent", LATE_MS + SLACK_MS);
    usleep(200000);
    assert_true(th_now_ms() - t0 >= LATE_MS);
    direct();
    assert_free_and_clean(l);
    /* The void entry is bounded: one member, gone after a lease. */
    assert_int_equal(th_cmd_int(rc, "ZCARD %s", th_key(l->name, DM_KEY_VOID)), 1);
    long long ttl = th_cmd_int(rc, "PTTL %s", th_key(l->name, DM_KEY_VOID));
    assert_true(ttl > 0 && ttl <= LEASE_MS);
}

/* An acquire ran but its reply was lost; its withdrawal found the grant
 * and released it, and that release (with its retries) reached the server
 * late, after the owner's next request had been granted the same hold
 * again (same owner, same token: the lock was still its own). The late
 * copies name the withdrawn request, so they leave the new grant alone;
 * naming none, they deleted it, and another process could enter while
 * the owner was inside (found by review with a proxy that delivered a
 * partition's bytes late). */
static void test_late_release_of_a_withdrawn_grant_leaves_the_next_grant_alone(void **state)
{
    (void)state;
    /* a lease that outlasts the late copies: nothing renews it here */
    th_cluster_lease(&cfg, 8 * LATE_MS);
    struct dm_rlock *l = th_lock_get("withdrawn_rel");
    char *rout, *aout;
    char act[32];
    snprintf(act, sizeof act, "delay:%ld", 2 * LATE_MS);
    int late = proxy_to(rs.port, "release", act, "1+", &rout);    /* every release late */
    int drop = proxy_to(late, "acquire", "drop", "1", &aout);     /* the first reply lost */
    dm_redis_atfork(DM_FORK_CHILD);
    cfg.redis.port = drop;
    char a[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    struct dm_grant g;
    long long t0 = th_now_ms();
    assert_int_equal(dm_rlock_acquire(l, a, NULL, 0, &g), 0);
    long long took = th_now_ms() - t0;
    /* every late copy has reached the server */
    long long end = th_now_ms() + 2 * LATE_MS + 3 * SLACK_MS;
    for (;;) {
        char *text = th_read_output(rout);
        int sent = 0;
        for (const char *p = text; (p = strstr(p, "reply: delay sent")) != NULL; p++)
            sent++;
        int held = 0;
        for (const char *p = text; (p = strstr(p, "reply: delay held")) != NULL; p++)
            held++;
        free(text);
        if (held > 0 && sent == held)
            break;
        if (th_now_ms() > end)
            fail_msg("the proxy's late releases were not all sent (%d of %d)", sent, held);
        usleep(20000);
    }
    usleep(200000);
    direct();
    print_message("measured: acquire's reply dropped, its withdrawal's release and retries "
                  "delivered %ld ms late: the lock call returned after %lld ms with token "
                  "%llu\n", 2 * LATE_MS, took, (unsigned long long)g.token);
    if (th_cmd_int(rc, "HGET %s %s", th_key(l->name, DM_KEY_LOCK), a) != 1)
        fail_msg("the late copy of the withdrawn grant's release ended the owner's next "
                 "hold (token %llu): the lock is free while the owner is inside",
                 (unsigned long long)g.token);
    assert_int_equal(dm_rlock_release(l, a, g.token), 0);
    assert_free_and_clean(l);
    th_cluster_lease(&cfg, LEASE_MS);
}

static void test_dropped_acquire_reply_under_on_redis_down_error_leaves_no_grant(void **state)
{
    (void)state;
    struct dm_rlock *l = th_lock_get("drop_eagain");
    char *out;
    proxy("acquire", "drop", 1, &out);
    assert_eagain(l, NULL);
    direct();
    assert_free_and_clean(l);
}

/* A fair waiter already queued whose next attempt gets no reply, under
 * on_redis_down = "error": it returns EAGAIN out of the queue, so that the
 * holder's release cannot hand the lock to nobody. */
static void test_queued_fair_waiter_giving_up_with_eagain_leaves_the_queue(void **state)
{
    (void)state;
    struct dm_rlock *l = th_lock_get("fair_eagain");
    dm_rlock_mode(l, 1, 0, 0);
    held_elsewhere(l, 10 * LEASE_MS);
    char *out;
    proxy("acquire", "drop", 2, &out);      /* the 1st queues it, the 2nd is lost */
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, SLACK_MS);
    assert_eagain(l, &dl);
    char *text = th_read_file(out);
    th_assert_has(text, "reply: dropped");
    free(text);
    assert_int_equal(th_cmd_int(rc, "LLEN %s", th_key(l->name, DM_KEY_QUEUE)), 0);
    assert_int_equal(th_cmd_int(rc, "ZCARD %s", th_key(l->name, DM_KEY_QTIME)), 0);
    freeReplyObject(th_cmd(rc, "DEL %s", th_key(l->name, DM_KEY_LOCK)));
}

/* ---- the matrix: each script's reply dropped, late, or an error ------------ */

struct runner {
    struct dm_rlock *l;
    unsigned long seq;
    long wait_ms;               /* deadline of each lock call */
    int sections, timeouts, lost, errors;
};

static int inside;

static void *run(void *arg)
{
    struct runner *r = arg;
    char who[DM_OWNER_MAX];
    dm_store_owner(who, r->seq);
    for (int i = 0; i < ROUNDS; i++) {
        struct dm_grant g;
        struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, r->wait_ms);
        int rc2 = dm_rlock_acquire(r->l, who, &dl, 0, &g);
        if (rc2 == ETIMEDOUT) {
            r->timeouts++;
            continue;
        }
        if (rc2 != 0) {
            r->errors++;
            continue;
        }
        if (__atomic_add_fetch(&inside, 1, __ATOMIC_SEQ_CST) != 1)
            r->errors += 1000;  /* overlap */
        r->sections++;
        usleep(HOLD_US);
        __atomic_sub_fetch(&inside, 1, __ATOMIC_SEQ_CST);
        int rr = dm_rlock_release(r->l, who, g.token);
        if (rr == EPERM)
            r->lost++;
        else if (rr != 0)
            r->errors++;
    }
    return NULL;
}

static void matrix(const char *script, const char *action, int fair)
{
    char name[64];
    snprintf(name, sizeof name, "mx_%s_%.5s_%d", script, action, fair);
    struct dm_rlock *l = th_lock_get(name);
    dm_rlock_mode(l, fair, 0, 0);
    char *out;
    /* The 3rd call of a script both threads send: after both have started
     * contending. A cancel is rarer (a fair waiter timing out): the first. */
    proxy(script, action, strcmp(script, "cancel") == 0 ? 1 : 3, &out);
    struct runner r[2] = {
        { .l = l, .seq = 1, .wait_ms = 10000 },
        /* cancel is only sent by a fair waiter that times out */
        { .l = l, .seq = 2, .wait_ms = strcmp(script, "cancel") == 0 ? 2 : 10000 },
    };
    pthread_t t[2];
    long long t0 = th_now_ms();
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, run, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    long long took = th_now_ms() - t0;
    char *text = th_read_file(out);
    int acted = strstr(text, "reply: ") != NULL;
    free(text);
    print_message("measured: %s %s fair=%d: %d+%d sections, %d timeouts, %lld ms\n", script, action, fair,
                  r[0].sections, r[1].sections, r[1].timeouts, took);
    if (!acted)
        fail_msg("the proxy never saw a %s call to act on", script);
    assert_int_equal(r[0].errors + r[1].errors, 0);     /* no overlap, no failed call */
    assert_int_equal(r[0].lost + r[1].lost, 0);         /* no healthy hold taken for lost */
    assert_int_equal(r[0].sections, ROUNDS);
    if (took > ROUNDS * 2 * 500L + 2 * LEASE_MS + SLACK_MS)
        fail_msg("%lld ms for %d sections: something waited for a lease", took, 2 * ROUNDS);
    /* Nothing left beyond one lease: the lock is free now and no key of it
     * outlives a lease (or the fair queue's own two deadlines). */
    direct();
    assert_free_and_clean(l);
    const char *const keys[] = { th_key(l->name, DM_KEY_LOCK), th_key(l->name, DM_KEY_HOLDER),
                                 th_key(l->name, DM_KEY_QUEUE), th_key(l->name, DM_KEY_QTIME),
                                 th_key(l->name, DM_KEY_LOST), th_key(l->name, DM_KEY_VOID) };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        long long ttl = th_cmd_int(rc, "PTTL %s", keys[i]);
        if (ttl == -1 || ttl > (LEASE_MS > 2 * DM_QUEUE_TTL_MS ? LEASE_MS : 2 * DM_QUEUE_TTL_MS))
            fail_msg("%s has a TTL of %lld ms", keys[i], ttl);
    }
}

/* A hold kept past several renewals, one of whose replies is dropped, late
 * or an error, while another owner waits for the lock: the waiter must not
 * get in, the hold must not be taken for lost, and its release must work. */
static void renew_matrix(void **s)
{
    const char *action = *s;         /* the setting main gives (TH_CASE) */
    char name[64];
    snprintf(name, sizeof name, "mx_renew_%.5s", action);
    struct dm_rlock *l = th_lock_get(name);
    char *out;
    proxy("renew", action, 1, &out);
    cfg.on_lease_lost = DM_LOST_WARN;
    static struct dm_hold h;
    memset(&h, 0, sizeof h);
    h.lock = &l->pub;
    dm_store_owner(h.owner, 1);
    struct dm_grant g;
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, SLACK_MS);
    assert_int_equal(dm_rlock_acquire(l, h.owner, &dl, 0, &g), 0);
    h.token = g.token;
    assert_int_equal(dm_watchdog_add(&h, g.sent_ms, g.lease_ms), 0);
    char b[DM_OWNER_MAX];
    dm_store_owner(b, 2);
    struct dm_grant gb;
    dl = th_deadline_in(CLOCK_MONOTONIC, LEASE_MS + LEASE_MS / 2);    /* past the lease the hold started with */
    int r = dm_rlock_acquire(l, b, &dl, 0, &gb);
    if (r == 0)
        fail_msg("a waiter got the lock while its holder renewed it (token %llu)",
                 (unsigned long long)gb.token);
    assert_int_equal(r, ETIMEDOUT);
    char *text = th_read_file(out);
    th_assert_has(text, "reply: ");
    free(text);
    assert_int_equal(dm_watchdog_remove(&h), 0);    /* not lost */
    assert_int_equal(dm_rlock_release(l, h.owner, h.token), 0);
    direct();
    assert_free_and_clean(l);
}

#define MX(script, action, fair)                                                \
    static void test_##script##_##action##_under_contention(void **state)       \
    {                                                                           \
        (void)state;                                                            \
        matrix(#script, action##_ACT, fair);                                    \
    }
#define drop_ACT  "drop"
#define delay_ACT "delay:600"
#define error_ACT "error:ERR injected by faultserver"
MX(acquire, drop, 0)
MX(acquire, delay, 0)
MX(acquire, error, 0)
MX(release, drop, 0)
MX(release, delay, 0)
MX(release, error, 0)
MX(cancel, drop, 1)
MX(cancel, delay, 1)
MX(cancel, error, 1)

/* ---- the same between processes, with the exclusion checker ---------------- */

/* Two faultworker processes through the proxy, `n` sections each of
 * `hold_us`, on a lease of LEASE_MS and on_lease_lost = "abort": none may
 * fail a lock or an unlock or abort (a release taken for a lost hold would),
 * the checker must see no overlap, and the lock must be left free. */
static void procs(const char *script, const char *action, int nth, const char *n,
                  const char *hold_us)
{
    char name[64];
    snprintf(name, sizeof name, "px_%s_%.5s", script, action);
    char *out;
    proxy(script, action, nth, &out);
    char *cfgf = th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld; on_lease_lost = \"abort\";\n"
        "redis = { connect_timeout_ms = 500; command_timeout_ms = %ld; };\n"
        "mutexes = ( { symbol = \"fault_lock\"; name = \"%s\"; } );\n",
        LEASE_MS, CMD_TIMEOUT_MS, name));
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", proxy_port);
    struct th_shim_env e;
    char **env = th_shim_env(&e, cfgf, url, NULL);
    char *argv[] = { worker_path, "loop", "-t", "1", "-n", (char *)n, "-u", (char *)hold_us,
                     "-s", chk.sock, "-k", chk.prefix, NULL };
    pid_t p[2];
    char *o[2];
    long long t0 = th_now_ms();
    for (int i = 0; i < 2; i++) {
        o[i] = th_out_file();
        p[i] = th_child(argv, env, o[i]);
    }
    for (int i = 0; i < 2; i++) {
        int st = th_wait(p[i], RUN_MS);
        th_forget(p[i]);
        char *text = th_read_file(o[i]);
        if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("worker %d ended with status 0x%x (%s); output:\n%s", i, st,
                     st == -1 ? "hung" : WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exit",
                     text);
        char want[64];
        snprintf(want, sizeof want, "done %s 0 0", n);
        th_assert_has(text, want);
        free(text);
    }
    long long took = th_now_ms() - t0;
    char *ptext = th_read_file(out);
    int acted = strstr(ptext, "reply: ") != NULL;
    free(ptext);
    print_message("measured: 2 processes, %s reply %s: %lld sections, %lld overlaps, %lld ms\n",
                  script, action, th_checker_get(&chk, 0, "sections"),
                  th_checker_get(&chk, 0, "overlaps"), took);
    if (!acted)
        fail_msg("the proxy never saw a %s call to act on", script);
    th_checker_assert_no_overlap(&chk, 0);
    assert_int_equal(th_checker_get(&chk, 0, "sections"), 2 * atol(n));
    direct();
    assert_free_and_clean(th_lock_get(name));
}

#define PX(script, action, nth, n, hold_us)                                     \
    static void test_procs_##script##_##action(void **state)                    \
    {                                                                           \
        (void)state;                                                            \
        procs(#script, action##_ACT, nth, n, hold_us);                          \
    }
/* The 5th acquire or release: both processes are running by then. A
 * section of 900 ms outlasts a renewal period (666 ms): the 1st renewal. */
PX(acquire, drop, 5, "15", "2000")
PX(acquire, delay, 5, "15", "2000")
PX(acquire, error, 5, "15", "2000")
PX(release, drop, 5, "15", "2000")
PX(release, delay, 5, "15", "2000")
PX(release, error, 5, "15", "2000")
PX(renew, drop, 1, "2", "900000")
PX(renew, delay, 1, "2", "900000")
PX(renew, error, 1, "2", "900000")

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_error_reply_never_locks_locally_next_to_the_holder),
        T(test_error_reply_gives_eagain_under_on_redis_down_error),
        T(test_retried_release_after_the_next_grant_is_not_a_lost_hold),
        T(test_release_of_an_expired_hold_is_lost_even_after_the_next_grant),
        T(test_a_grant_too_late_to_trust_keeps_its_dead_holder),
        T(test_late_copy_of_an_old_release_leaves_a_newer_hold_alone),
        T(test_trylock_during_client_pause_leaves_the_lock_free),
        T(test_timedlock_during_client_pause_leaves_the_lock_free),
        T(test_fair_timedlock_during_client_pause_leaves_the_lock_free),
        T(test_late_copy_of_an_abandoned_acquire_grants_nothing),
        T(test_dropped_acquire_reply_under_on_redis_down_error_leaves_no_grant),
        T(test_late_release_of_a_withdrawn_grant_leaves_the_next_grant_alone),
        T(test_queued_fair_waiter_giving_up_with_eagain_leaves_the_queue),
        T(test_acquire_drop_under_contention),
        T(test_acquire_delay_under_contention),
        T(test_acquire_error_under_contention),
        T(test_release_drop_under_contention),
        T(test_release_delay_under_contention),
        T(test_release_error_under_contention),
        TH_CASE(test_renew_drop_under_contention,
                renew_matrix, "drop", setup, teardown),
        TH_CASE(test_renew_delay_under_contention,
                renew_matrix, "delay:600", setup, teardown),
        TH_CASE(test_renew_error_under_contention,
                renew_matrix, "error:ERR injected by faultserver", setup, teardown),
        T(test_cancel_drop_under_contention),
        T(test_cancel_delay_under_contention),
        T(test_cancel_error_under_contention),
        T(test_procs_acquire_drop),
        T(test_procs_acquire_delay),
        T(test_procs_acquire_error),
        T(test_procs_release_drop),
        T(test_procs_release_delay),
        T(test_procs_release_error),
        T(test_procs_renew_drop),
        T(test_procs_renew_delay),
        T(test_procs_renew_error),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
