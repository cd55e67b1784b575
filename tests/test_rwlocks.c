/* test_rwlocks: cluster-wide read-write locks (rwlocks entries).
 *
 * First the protocol in process (shim/cluster.h with DM_ACQ_READ, no
 * LD_PRELOAD): readers share, a writer waits for them and, queued, keeps
 * new readers out; releases are idempotent and an expired read hold is
 * lost. Then real processes under the shim (tests/progs/rwprog, its header
 * lists the scenarios): writers on two network-namespace "machines" update
 * two keys of a data server together under the write lock while readers on
 * both check under the read lock that the keys are equal; a writer under a
 * continuous stream of readers; trylock and timed variants across
 * processes; recursion and EDEADLK as glibc; a holder killed; fork; an
 * unmapped rwlock; init_site heap rwlocks.
 *
 * Bounds are one-sided and generous (a slow, noisy 2-core machine). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
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

#include "checker.h"
#include "cluster.h"
#include "config.h"
#include "harness.h"

#define GROUP_ALARM_S   300
#define LEASE_MS        1000L   /* the in-process protocol tests' lease */
#define SLACK_MS        5000L   /* how late a result may be on a loaded machine */
#define POLL_MS         5

static struct th_checker chk;
static struct th_net net;
static struct th_redis ls, ds;          /* the lock server, the data server */
static redisContext *lc, *dc;
static struct dm_config cfg;            /* the in-process tests' (dm_cluster_init keeps it) */

/* ---- the protocol, in process --------------------------------------------- */

static struct dm_cluster_lock *rw_lock_get(const char *name)
{
    struct dm_cluster_lock *l = th_lock_get(name);
    dm_cluster_lock_rwlock(l);
    return l;
}

static int acquire(struct dm_cluster_lock *l, const char *who, int flags, long ms,
                   struct dm_grant *g)
{
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, ms);
    return dm_cluster_acquire(l, who, &dl, flags, g);
}

struct writer_arg {
    struct dm_cluster_lock *l;
    char who[DM_OWNER_MAX];
    struct dm_grant g;
    int rc;
};

static void *writer_thread(void *p)
{
    struct writer_arg *w = p;
    w->rc = acquire(w->l, w->who, 0, 30000, &w->g);
    return NULL;
}

/* Waits until `member` (an owner) heads the write queue of `l`. */
static void wait_queued(struct dm_cluster_lock *l, const char *owner)
{
    long long end = th_now_ms() + SLACK_MS;
    for (;;) {
        redisReply *r = th_cmd(lc, "LINDEX %s 0", l->keys[DM_KEY_QUEUE]);
        int ok = r->type == REDIS_REPLY_STRING && strncmp(r->str, owner, strlen(owner)) == 0;
        freeReplyObject(r);
        if (ok)
            return;
        if (th_now_ms() > end)
            fail_msg("%s never queued on %s", owner, l->name);
        usleep(POLL_MS * 1000);
    }
}

static void test_readers_share_and_a_queued_writer_keeps_new_readers_out(void **s)
{
    (void)s;
    struct dm_cluster_lock *l = rw_lock_get("rw_share");
    char a[DM_OWNER_MAX], b[DM_OWNER_MAX], d[DM_OWNER_MAX];
    dm_cluster_owner(a, 1);
    dm_cluster_owner(b, 2);
    dm_cluster_owner(d, 4);
    struct dm_grant ga, gb, gd;
    assert_int_equal(acquire(l, a, DM_ACQ_READ, TH_GRANT_MS, &ga), 0);
    assert_int_equal(acquire(l, b, DM_ACQ_READ | DM_ACQ_TRY, TH_GRANT_MS, &gb), 0);
    assert_true(gb.token > ga.token);                   /* every grant a token of its own */
    assert_int_equal(th_cmd_int(lc, "ZCARD %s", l->keys[DM_KEY_READERS]), 2);
    char c[DM_OWNER_MAX];
    dm_cluster_owner(c, 3);
    assert_int_equal(acquire(l, c, DM_ACQ_TRY, TH_GRANT_MS, &gd), EBUSY);

    struct writer_arg w = { .l = l };
    dm_cluster_owner(w.who, 3);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer_thread, &w), 0);
    wait_queued(l, w.who);
    /* A writer waits: a new reader is refused though readers hold. */
    assert_int_equal(acquire(l, d, DM_ACQ_READ | DM_ACQ_TRY, TH_GRANT_MS, &gd), EBUSY);
    assert_int_equal(dm_cluster_release(l, a, ga.token), 0);
    assert_int_equal(dm_cluster_release(l, b, gb.token), 0);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    assert_true(w.g.token > gb.token);
    assert_int_equal(acquire(l, d, DM_ACQ_READ | DM_ACQ_TRY, TH_GRANT_MS, &gd), EBUSY);
    assert_int_equal(dm_cluster_release(l, w.who, w.g.token), 0);
    assert_int_equal(acquire(l, d, DM_ACQ_READ | DM_ACQ_TRY, TH_GRANT_MS, &gd), 0);
    assert_int_equal(dm_cluster_release(l, d, gd.token), 0);
    dm_cluster_lock_put(l);
}

static void test_read_release_is_idempotent_and_an_expired_read_hold_is_lost(void **s)
{
    (void)s;
    struct dm_cluster_lock *l = rw_lock_get("rw_release");
    char a[DM_OWNER_MAX], b[DM_OWNER_MAX], c[DM_OWNER_MAX];
    dm_cluster_owner(a, 1);
    dm_cluster_owner(b, 2);
    dm_cluster_owner(c, 3);
    struct dm_grant ga, gb, gc;
    assert_int_equal(acquire(l, a, DM_ACQ_READ, TH_GRANT_MS, &ga), 0);
    assert_int_equal(dm_cluster_release(l, a, ga.token), 0);
    assert_int_equal(dm_cluster_release(l, a, ga.token), 0);   /* a retry: released */
    /* b's read hold is never renewed: it expires, and a writer gets in. */
    assert_int_equal(acquire(l, b, DM_ACQ_READ, TH_GRANT_MS, &gb), 0);
    long long t0 = th_now_ms();
    assert_int_equal(acquire(l, c, 0, LEASE_MS + SLACK_MS, &gc), 0);
    assert_true(th_now_ms() - t0 >= LEASE_MS / 2);
    assert_int_equal(dm_cluster_release(l, b, gb.token), EPERM);
    assert_int_equal(dm_cluster_release(l, b, gb.token), EPERM);
    assert_int_equal(dm_cluster_release(l, c, gc.token), 0);
    dm_cluster_lock_put(l);
}

/* ---- fixtures ------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    th_machines_group_start(&chk, &net, GROUP_ALARM_S, "test_rwlocks",
                            "both \"machines\" run on this one");
    th_redis_start(&ls, net.up ? net.host_ip : NULL, NULL);
    th_redis_start(&ds, net.up ? net.host_ip : NULL, NULL);
    lc = th_redis_connect(&ls);
    dc = th_redis_connect(&ds);
    th_cluster_config(&cfg, &ls, DM_COMMAND_TIMEOUT_MS, LEASE_MS);
    dm_cluster_init(&cfg);
    return 0;
}

static int group_teardown(void **state)
{
    th_redis_drop(&ls, &lc);
    th_redis_drop(&ds, &dc);
    return th_machines_group_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_readers_share_and_a_queued_writer_keeps_new_readers_out,
                               th_machines_test_setup),
        cmocka_unit_test_setup(test_read_release_is_idempotent_and_an_expired_read_hold_is_lost,
                               th_machines_test_setup),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
