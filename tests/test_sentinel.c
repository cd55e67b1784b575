/* test_sentinel: Redis Sentinel and replica-acknowledged grants, against
 * real servers: a primary, two replicas and three sentinels (redis-server
 * --sentinel, Debian's redis-sentinel package) on free ports, with a fast
 * down-after-milliseconds so that a failover takes seconds.
 *
 * - In process (the cluster layer, no LD_PRELOAD): a primary demoted
 *   behind the shim's back answers READONLY; the shim asks the sentinels
 *   again and the lock call, and a hold's renewals, go on on the new
 *   primary.
 * - min_replicas without Sentinel: with no replica to acknowledge, a lock
 *   call never returns a grant and leaves the lock free; a fair handover
 *   made while the only replica is cut off is not entered until it is back;
 *   a timed lock and a trylock do not wait replica_timeout_ms past their
 *   deadline (the grant's WAIT is cut to it); a grant whose WAIT is
 *   answered after the sentinels moved the primary does not count.
 * - `dmutex ls -r redis-sentinel://...` with a master name no sentinel
 *   knows fails with a message naming the name and each sentinel, and a
 *   program's trylock refuses the same way (EBUSY, the words logged);
 *   with the right name `dmutex ls` and `dmutex run -r` work.
 * - A first sentinel that names a replica (a stale view) does not hold a
 *   lock call back: the next sentinel is asked.
 * - Processes on two network-namespace "machines" (tests/checker.h; on
 *   loopback when namespaces cannot be made) increment a non-atomic
 *   counter kept on the checker server under one mapped mutex while the
 *   primary is SIGKILLed mid-run, right after both replicas were stalled
 *   and cut off for a moment (so that the last grants surely reached no
 *   replica), and a long holder asked for the lock during that moment and
 *   stays inside across the failover. min_replicas = 1: no overlap,
 *   counter exact, every fenced write accepted (tokens monotonic), every
 *   process done, no hold lost (but the long holder's may be, when the
 *   sentinels left the primary without a replica for most of the time its
 *   renewals were retried, as a second failover can, and its log says so).
 *   min_replicas = 0: the same run, its overlaps, lost
 *   updates, stale tokens and the long holder's window measured and
 *   printed ("measured:"), not asserted away.
 *
 * The sentinels and the data nodes bind the bridge's host address when
 * the machines exist (both machines and this process reach it, and the
 * sentinels name the primary by that address), else 127.0.0.1. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "checker.h"
#include "lock.h"
#include "config.h"
#include "harness.h"
#include "progs/fdio.h"
#include "redis.h"
#include "sentinel.h"
#include "watchdog.h"

#define WORKER          TH_BUILD "/tests/progs/faultworker"
#define DMUTEX_CLI      TH_BUILD "/dmutex"
#define LOCKPROG        TH_BUILD "/tests/progs/lockprog"
#define FSERVER         TH_BUILD "/tests/progs/faultserver"
#define SLOW_ACCEPT_MS  "1500"  /* the proxy's accept queue stays full this long */
#define MASTER          "mymaster"
#define DOWN_AFTER_MS   1000L   /* sentinel down-after-milliseconds */
#define FAILOVER_MS     3000L   /* sentinel failover-timeout: a failed election is retried after twice this */
#define QUORUM_WAIT_MS  30000L  /* sentinels finding each other and the replicas */
#define SYNC_WAIT_MS    15000L
#define RUN_MS          120000L /* longest a worker that must finish may run */
#define POLL_US         5000
#define RESEND_LEASE_MS 30000L  /* the lease of a hold the failover brings back */
#define SUITE_ALARM_S   400
#define NPROC           4       /* worker processes, half on each machine */
#define NTHREAD         "2"
#define SECTIONS        "120"   /* per thread */
#define HOLD_US         "2000"
#define HOLD_ACROSS_MS  15000L  /* the long holder stays inside this long after the kill:
                                   past the 10 s lease of a hold the new primary kept */
#define RETRY_FROM_MS   3333L   /* the holder's first renewal: a third of its 10 s lease;
                                   retried from then until its loss at lease - margin */
#define STALL_MS        700     /* replicas stopped before the kill: longer than
                                   replica_timeout_ms, shorter than DOWN_AFTER_MS */

static struct th_checker chk;
static struct th_net net;
static char worker_path[PATH_MAX], lockprog_path[PATH_MAX], fserver_path[PATH_MAX];

struct topo {
    struct th_redis primary, replica[3], sentinel[3];
    int nsentinels;
    const char *bind;
};

static void measured(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void measured(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("measured: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

static const char *bind_addr(void)
{
    return net.up ? net.host_ip : "127.0.0.1";
}

/* ---- the topology ------------------------------------------------------- */

/* Waits until `r` has `n` replicas online. */
static void wait_replicas(const struct th_redis *r, int n)
{
    long long end = th_now_ms() + SYNC_WAIT_MS;
    for (;;) {
        redisContext *c = th_redis_connect(r);
        redisReply *rep = th_cmd(c, "INFO replication");
        int online = 0;
        for (const char *p = rep->str; (p = strstr(p, "state=online")) != NULL; p++)
            online++;
        freeReplyObject(rep);
        redisFree(c);
        if (online >= n)
            return;
        if (th_now_ms() > end)
            fail_msg("%d replicas of %s:%d online after %ld ms, %d expected", online, r->addr,
                     r->port, SYNC_WAIT_MS, n);
        usleep(POLL_US * 10);
    }
}

/* A sentinel's view: does it know `replicas` replicas of MASTER and can
 * it authorise a failover (CKQUORUM)? */
static int sentinel_ready(const struct th_redis *s, size_t replicas)
{
    redisContext *c = th_redis_connect(s);
    redisReply *q = th_cmd(c, "SENTINEL CKQUORUM %s", MASTER);
    redisReply *r = th_cmd(c, "SENTINEL REPLICAS %s", MASTER);
    int ok = q->type == REDIS_REPLY_STATUS && r->type == REDIS_REPLY_ARRAY &&
             r->elements >= replicas;
    freeReplyObject(q);
    freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* Primary, `nrep` replicas of it, `nsent` sentinels (quorum: a majority). */
static void topo_start(struct topo *t, int nrep, int nsent)
{
    memset(t, 0, sizeof *t);
    t->bind = bind_addr();
    const char *fast[] = { "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
                           NULL };
    th_redis_start(&t->primary, t->bind, fast);
    char port[16];
    snprintf(port, sizeof port, "%d", t->primary.port);
    const char *rep[] = { "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
                          "--replicaof", t->primary.addr, port, NULL };
    for (int i = 0; i < nrep; i++)
        th_redis_start(&t->replica[i], t->bind, rep);
    if (nrep)
        wait_replicas(&t->primary, nrep);
    t->nsentinels = nsent;
    for (int i = 0; i < nsent; i++)
        th_sentinel_start(&t->sentinel[i], t->bind, MASTER, t->primary.addr, t->primary.port,
                          nsent / 2 + 1, DOWN_AFTER_MS, FAILOVER_MS);
    long long end = th_now_ms() + QUORUM_WAIT_MS;
    for (int i = 0; i < nsent; i++)
        while (!sentinel_ready(&t->sentinel[i], (size_t)nrep)) {
            if (th_now_ms() > end)
                fail_msg("sentinel %d did not see its quorum and %d replicas in %ld ms", i,
                         nrep, QUORUM_WAIT_MS);
            usleep(POLL_US * 20);
        }
}

static void topo_stop(struct topo *t)
{
    for (int i = 0; i < 3; i++)
        th_redis_stop(&t->sentinel[i]);
    for (int i = 0; i < 3; i++)
        th_redis_stop(&t->replica[i]);
    th_redis_stop(&t->primary);
}

/* "h:p", "h:p", ... of the sentinels, for a config. */
static void sentinel_list(const struct topo *t, char *buf, size_t len)
{
    size_t o = 0;
    for (int i = 0; i < t->nsentinels && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s\"%s\"", i ? ", " : "", t->sentinel[i].url);
}

/* The address a sentinel gives for MASTER now, as "host:port". */
static void sentinel_says(const struct th_redis *s, char *buf, size_t len)
{
    redisContext *c = th_redis_connect(s);
    redisReply *r = th_cmd(c, "SENTINEL get-master-addr-by-name %s", MASTER);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        snprintf(buf, len, "%s:%s", r->element[0]->str, r->element[1]->str);
    else
        snprintf(buf, len, "?");
    freeReplyObject(r);
    redisFree(c);
}

/* The replicas the data node at `addr` ("host:port") has online; -1 when
 * it cannot be asked (not a node of t, or dead). */
static int online_replicas(const struct topo *t, const char *addr)
{
    const char *colon = strrchr(addr, ':');
    int port = colon ? atoi(colon + 1) : 0;
    for (int i = 0; i < 2; i++) {
        if (t->replica[i].port != port)
            continue;
        redisContext *c = redisConnect(t->replica[i].addr, port);
        if (!c || c->err) {
            if (c)
                redisFree(c);
            return -1;
        }
        redisReply *r = redisCommand(c, "INFO replication");
        int n = -1;
        if (r && r->type == REDIS_REPLY_STRING) {
            n = 0;
            for (const char *p = r->str; (p = strstr(p, "state=online")) != NULL; p++)
                n++;
        }
        if (r)
            freeReplyObject(r);
        redisFree(c);
        return n;
    }
    return -1;
}

/* ---- fixtures ------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (th_built_paths(WORKER, worker_path, LOCKPROG, lockprog_path, FSERVER, fserver_path,
                       NULL) != 0)
        return -1;
    th_machines_group_start(&chk, &net, SUITE_ALARM_S, "test_sentinel",
                            "the failover runs on loopback");
    return 0;
}

static struct topo cur;          /* the current test's servers: teardown stops them */

static int teardown(void **state)
{
    (void)state;
    th_test_cleanup();
    topo_stop(&cur);
    return 0;
}

/* ==== a sentinel the test controls ============================================
 * For the READONLY test the shim must learn of the switch from the old
 * primary's replies alone: a real sentinel would announce it (and the shim
 * would rightly follow the notice first). This one answers
 * get-master-addr-by-name with whatever fake_primary says, confirms
 * SUBSCRIBE and never publishes. */

static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static char fake_host[64];
static int fake_port, fake_listen_fd = -1, fake_listen_port;

static void fake_send(int fd, const char *s)
{
    fd_write_all(fd, s, strlen(s));
}

static void *fake_conn_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    redisReader *rd = redisReaderCreate();
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        redisReaderFeed(rd, buf, (size_t)n);
        void *r;
        while (redisReaderGetReply(rd, &r) == REDIS_OK && r) {
            redisReply *q = r;
            const char *cmd = q->type == REDIS_REPLY_ARRAY && q->elements > 0 ? q->element[0]->str : "";
            char out[256];
            if (strcasecmp(cmd, "SENTINEL") == 0 && q->elements == 3) {
                pthread_mutex_lock(&fake_mu);
                char port[16];
                snprintf(port, sizeof port, "%d", fake_port);
                if (strcmp(q->element[2]->str, MASTER) == 0)
                    snprintf(out, sizeof out, "*2\r\n$%zu\r\n%s\r\n$%zu\r\n%s\r\n",
                             strlen(fake_host), fake_host, strlen(port), port);
                else
                    snprintf(out, sizeof out, "$-1\r\n");
                pthread_mutex_unlock(&fake_mu);
            } else if (strcasecmp(cmd, "SUBSCRIBE") == 0) {
                snprintf(out, sizeof out, "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n");
            } else if (strcasecmp(cmd, "PING") == 0) {
                snprintf(out, sizeof out, "*2\r\n$4\r\npong\r\n$0\r\n\r\n");
            } else {
                snprintf(out, sizeof out, "-ERR the fake sentinel does not know %s\r\n", cmd);
            }
            fake_send(fd, out);
            freeReplyObject(r);
        }
    }
    redisReaderFree(rd);
    close(fd);
    return NULL;
}

static void *fake_accept_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(fake_listen_fd, NULL, NULL);
        if (fd < 0)
            return NULL;
        pthread_t t;
        pthread_create(&t, NULL, fake_conn_main, (void *)(intptr_t)fd);
        pthread_detach(t);
    }
}

/* Starts the fake sentinel on 127.0.0.1 (once per test program). */
static void fake_sentinel_start(void)
{
    if (fake_listen_fd >= 0)
        return;
    fake_listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    assert_int_equal(bind(fake_listen_fd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(fake_listen_fd, 16), 0);
    assert_int_equal(getsockname(fake_listen_fd, (struct sockaddr *)&sa, &len), 0);
    fake_listen_port = ntohs(sa.sin_port);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, fake_accept_main, NULL), 0);
    pthread_detach(t);
}

static void fake_sentinel_names(const struct th_redis *r)
{
    pthread_mutex_lock(&fake_mu);
    snprintf(fake_host, sizeof fake_host, "%s", r->addr);
    fake_port = r->port;
    pthread_mutex_unlock(&fake_mu);
}

/* ==== in process: READONLY from a demoted primary ============================ */

static struct dm_config cfg;     /* dm_store_init keeps a pointer to it */
static struct dm_endpoint one_sentinel;

/* `from` is demoted to a replica of `to`, which is promoted, behind the
 * shim's back: the (fake) sentinel names `to` from then on but sends no
 * +switch-master notice. */
static void switch_behind_the_back(const struct th_redis *from, const struct th_redis *to)
{
    redisContext *f = th_redis_connect(from), *n = th_redis_connect(to);
    freeReplyObject(th_cmd(n, "REPLICAOF NO ONE"));
    freeReplyObject(th_cmd(f, "REPLICAOF %s %d", to->addr, to->port));
    fake_sentinel_names(to);
    redisFree(f);
    redisFree(n);
}

/* Only the old primary's replies can tell the shim of the switch. A lock
 * call on a pooled connection to it gets READONLY and must ask the
 * sentinel again and be granted on the new primary (before: READONLY was
 * an error reply, retried on the same node until the deadline). Then a
 * hold taken on the new primary survives that one's demotion in turn: its
 * renewals follow to the next primary. */
static void test_readonly_from_a_demoted_primary_rediscovers_and_grants_on_the_new_one(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 0);
    fake_sentinel_start();
    fake_sentinel_names(&t->primary);
    const long lease = 3000;
    th_cluster_config(&cfg, &t->primary, 500, lease);
    one_sentinel.host = "127.0.0.1";
    one_sentinel.port = fake_listen_port;
    cfg.redis.sentinels = &one_sentinel;
    cfg.redis.nsentinels = 1;
    cfg.redis.master = (char *)MASTER;
    cfg.on_lease_lost = DM_LOST_WARN;
    dm_store_init(&cfg, &dm_redis_store);

    /* 1. A lock call: a pooled connection to the primary, then the switch. */
    struct dm_rlock *l1 = dm_rlock_get("ro_held"), *l2 = dm_rlock_get("ro_new");
    struct dm_grant g;
    char owner2[DM_OWNER_MAX];
    dm_store_owner(owner2, 2);
    assert_int_equal(dm_rlock_acquire(l2, owner2, NULL, DM_ACQ_TRY, &g), 0);
    assert_int_equal(dm_rlock_release(l2, owner2, g.token), 0);
    switch_behind_the_back(&t->primary, &t->replica[0]);
    long long t0 = th_now_ms();
    struct timespec dl;
    dm_deadline_in(&dl, 5000);
    int rc = dm_rlock_acquire(l2, owner2, &dl, 0, &g);
    long long took = th_now_ms() - t0;
    if (rc != 0)
        fail_msg("the lock call after the demotion returned %d (%s) after %lld ms: READONLY "
                 "was not taken for a wrong node", rc, strerror(rc), took);
    redisContext *neu = th_redis_connect(&t->replica[0]);
    assert_int_equal(th_cmd_int(neu, "HEXISTS %s %s", th_key("ro_new", DM_KEY_LOCK), owner2), 1);
    assert_int_equal(dm_rlock_release(l2, owner2, g.token), 0);

    /* 2. A hold on the new primary, which is demoted in turn. */
    wait_replicas(&t->replica[0], 1);
    static struct dm_hold h;
    h.lock = &l1->pub;
    dm_store_owner(h.owner, 1);
    assert_int_equal(dm_rlock_acquire(l1, h.owner, NULL, 0, &g), 0);
    h.token = g.token;
    assert_int_equal(dm_watchdog_add(&h, g.sent_ms, g.lease_ms), 0);
    /* The hold reaches the replica (the old primary, now replicating the
     * new one) before the switch back: a fixed sleep was too short under
     * load, and the replica was promoted without the hold. */
    redisContext *rep = th_redis_connect(&t->primary);
    long long until = th_now_ms() + RUN_MS;
    while (th_cmd_int(rep, "HEXISTS %s %s", th_key("ro_held", DM_KEY_LOCK), h.owner) != 1) {
        if (th_now_ms() > until)
            fail_msg("the hold never reached the replica");
        usleep(10000);
    }
    redisFree(rep);
    switch_behind_the_back(&t->replica[0], &t->primary);
    /* Two renewal periods later it is neither lost nor expired there. */
    usleep((useconds_t)(2 * (lease / 3) + 500) * 1000);
    assert_false(dm_watchdog_is_lost(&h));
    redisContext *old = th_redis_connect(&t->primary);
    long long pttl = th_cmd_int(old, "PTTL %s", th_key("ro_held", DM_KEY_LOCK));
    measured("READONLY from a demoted primary: the next lock call asked the sentinels again and "
             "was granted on the new primary after %lld ms; a hold on a primary demoted in turn "
             "was renewed on the next one (PTTL %lld of %ld ms)", took, pttl, lease);
    assert_true(pttl > lease / 3);
    dm_watchdog_remove(&h);
    dm_watchdog_forget(&h);
    assert_int_equal(dm_rlock_release(l1, h.owner, h.token), 0);
    dm_rlock_put(l1);
    dm_rlock_put(l2);
    redisFree(old);
    redisFree(neu);
    topo_stop(t);
}

/* ==== in process: a renewal's WAIT answered after the primary moved ========== */

#define RENEW_ACK_MS    6000L   /* replica_timeout_ms: the renewal's WAIT outlives the move */

/* Waits for the release resender to finish a round after `before`. */
static void wait_resend_round(unsigned long before)
{
    long long end = th_now_ms() + RUN_MS;
    while (dm_rlock_resend_rounds() == before) {
        if (th_now_ms() > end)
            fail_msg("the release resender never ran after the primary moved");
        usleep(POLL_US);
    }
}

/* The fake sentinel's cluster config: `t`'s primary found through it,
 * `lease` ms, on_lease_lost = "warn". */
static void fake_sentinel_cluster(const struct topo *t, long lease)
{
    fake_sentinel_start();
    fake_sentinel_names(&t->primary);
    th_cluster_config(&cfg, &t->primary, 500, lease);
    one_sentinel.host = "127.0.0.1";
    one_sentinel.port = fake_listen_port;
    cfg.redis.sentinels = &one_sentinel;
    cfg.redis.nsentinels = 1;
    cfg.redis.master = (char *)MASTER;
    cfg.on_lease_lost = DM_LOST_WARN;
    dm_store_init(&cfg, &dm_redis_store);
}

/* Waits until the replica `neu` has `owner`'s hold of `key`, then cuts it
 * off its primary (REPLICAOF NO ONE): it keeps that hold, and nothing the
 * primary does afterwards reaches it. Returns a connection to `neu`. */
static redisContext *cut_off_holding(const struct th_redis *neu, const char *key,
                                     const char *owner)
{
    redisContext *n = th_redis_connect(neu);
    long long until = th_now_ms() + RUN_MS;
    while (th_cmd_int(n, "HEXISTS %s %s", key, owner) != 1) {
        if (th_now_ms() > until)
            fail_msg("the grant never reached the replica");
        usleep(2000);
    }
    freeReplyObject(th_cmd(n, "REPLICAOF NO ONE"));
    return n;
}

/* `old` becomes a replica of `neu`, as a failover demotes it (the fake
 * sentinel is the caller's to move). */
static void demote_to(const struct th_redis *old, const struct th_redis *neu)
{
    redisContext *o = th_redis_connect(old);
    freeReplyObject(th_cmd(o, "REPLICAOF %s %d", neu->addr, neu->port));
    redisFree(o);
}

/* The failover as the resend tests make it: `old` demoted to a replica of
 * `neu` and the (fake) sentinel naming `neu`; then a trylock and unlock of
 * `via` by `owner` finds the new primary (READONLY from old) and calls the
 * hooks. Returns when the switch was made (ms), once the resender's round
 * has run. */
static long long fail_over_by_a_lock_call(const struct th_redis *old, const struct th_redis *neu,
                                          struct dm_rlock *via, const char *owner)
{
    demote_to(old, neu);
    unsigned long r0 = dm_rlock_resend_rounds();
    fake_sentinel_names(neu);
    long long t0 = th_now_ms();
    struct dm_grant g;
    assert_int_equal(dm_rlock_acquire(via, owner, NULL, DM_ACQ_TRY, &g), 0);
    assert_int_equal(dm_rlock_release(via, owner, g.token), 0);
    wait_resend_round(r0);
    return t0;
}

/* `neu` is cut off from `old` (REPLICAOF NO ONE) while it has A's grant;
 * A's release is then answered by `old` only; `old` is made a replica of
 * `neu` and the (fake) sentinel names `neu`, with no +switch-master notice:
 * A's own next lock call finds the new primary (and calls the hooks), and
 * is granted the hold `neu` kept again (same owner, same token) while the
 * resender sends A's kept release to `neu`. That release names the lock
 * call it ended, so it must leave the new grant alone: before (a release
 * naming no call), it freed the hold under its holder in 3-7 of 8 rounds,
 * and another owner's trylock got in (the review's reproduction). */
static void test_a_release_sent_again_leaves_the_same_threads_new_grant(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 0);
    const long lease = 20000;
    fake_sentinel_cluster(t, lease);
    struct th_redis *nodes[2] = { &t->primary, &t->replica[0] };
    int cur_p = 0, freed = 0, regranted = 0, fresh = 0;
    const int rounds = 8;
    for (int round = 0; round < rounds; round++) {
        struct th_redis *old = nodes[cur_p], *neu = nodes[1 - cur_p];
        char name[32];
        snprintf(name, sizeof name, "rev_rg_%d", round);
        const char *key = th_key(name, DM_KEY_LOCK);
        struct dm_rlock *l = dm_rlock_get(name);
        char owner[DM_OWNER_MAX];
        dm_store_owner(owner, 1);
        struct dm_grant g;
        wait_replicas(old, 1);
        assert_int_equal(dm_rlock_acquire(l, owner, NULL, 0, &g), 0);
        uint64_t t1 = g.token;
        redisContext *n = cut_off_holding(neu, key, owner);     /* neu keeps the hold */
        assert_int_equal(dm_rlock_release_hold(l, owner, t1, g.wait_id), 0);   /* answered by old only */
        redisContext *o = th_redis_connect(old);
        assert_int_equal(th_cmd_int(o, "EXISTS %s", key), 0);
        redisFree(o);
        demote_to(old, neu);
        unsigned long r0 = dm_rlock_resend_rounds();
        fake_sentinel_names(neu);
        /* A locks again at once: READONLY from old, the sentinel names neu. */
        struct timespec dl;
        dm_deadline_in(&dl, 5000);
        assert_int_equal(dm_rlock_acquire(l, owner, &dl, 0, &g), 0);
        uint64_t t2 = g.token;
        wait_resend_round(r0);
        long long held = th_cmd_int(n, "HEXISTS %s %s", key, owner);
        if (t2 == t1)
            regranted++;
        else
            fresh++;
        if (!held) {
            freed++;
            char other[DM_OWNER_MAX];
            dm_store_owner(other, 99);      /* another process's thread, as the server sees it */
            struct dm_grant g2;
            int rc2 = dm_rlock_acquire(l, other, NULL, DM_ACQ_TRY, &g2);
            printf("round %d: while A is inside (token %llu), another owner's trylock returns %d "
                   "(token %llu)\n", round, (unsigned long long)t2, rc2,
                   rc2 == 0 ? (unsigned long long)g2.token : 0ULL);
            if (rc2 == 0)
                dm_rlock_release(l, other, g2.token);
        }
        if (held)
            assert_int_equal(dm_rlock_release(l, owner, t2), 0);
        dm_rlock_put(l);
        redisFree(n);
        cur_p = 1 - cur_p;
    }
    measured("%d rounds: %d re-granted under the old token, %d fresh; %d holds freed under "
             "their holder by the re-sent release", rounds, regranted, fresh, freed);
    assert_int_equal(freed, 0);
}


/* Two threads (owners) of this process take turns on one lock just before
 * the primary dies: A's release, B's grant and B's release all miss the
 * replica, which has A's hold. Every kept release is sent again and the
 * server decides: A's frees A's hold, B's finds nothing of B's. (A first
 * version skipped a lock granted again since, B's grant, which the new
 * primary never saw: A's hold stood for the rest of its lease.) */
static void test_every_kept_release_is_sent_again_the_server_decides(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 0);
    const long lease = 20000;
    fake_sentinel_cluster(t, lease);
    struct th_redis *old = &t->primary, *neu = &t->replica[0];
    const char *key = th_key("rev_sk", DM_KEY_LOCK);
    struct dm_rlock *l = dm_rlock_get("rev_sk"), *y = dm_rlock_get("rev_sk_y");
    char a[DM_OWNER_MAX], b[DM_OWNER_MAX], c[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    dm_store_owner(b, 2);
    dm_store_owner(c, 3);
    struct dm_grant ga, gb;
    assert_int_equal(dm_rlock_acquire(l, a, NULL, 0, &ga), 0);
    redisContext *n = cut_off_holding(neu, key, a);
    assert_int_equal(dm_rlock_release_hold(l, a, ga.token, ga.wait_id), 0);
    assert_int_equal(dm_rlock_acquire(l, b, NULL, 0, &gb), 0);
    assert_int_equal(dm_rlock_release_hold(l, b, gb.token, gb.wait_id), 0);
    long long t0 = fail_over_by_a_lock_call(old, neu, y, c);   /* any lock call does */
    long long held = th_cmd_int(n, "HEXISTS %s %s", key, a);
    long long pttl = th_cmd_int(n, "PTTL %s", key);
    measured("after the resender's round (%lld ms after the switch) the new primary %s A's "
             "hold (PTTL %lld of %ld)",
             th_now_ms() - t0, held ? "STILL HAS" : "no longer has", pttl, lease);
    redisFree(n);
    dm_rlock_put(l);
    dm_rlock_put(y);
    assert_int_equal(held, 0);
}


/* A cold lock's release misses the replica; then the process releases a
 * hot lock 256 times (all within the lease) before the primary dies: the
 * cold lock's release is still sent again (a first version kept the last
 * 256 releases of the process, and the hot lock pushed it out). */
static void test_a_busy_lock_does_not_push_another_locks_release_out(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 0);
    const long lease = 20000;
    fake_sentinel_cluster(t, lease);
    struct th_redis *old = &t->primary, *neu = &t->replica[0];
    const char *key = th_key("rev_cold", DM_KEY_LOCK);
    struct dm_rlock *l = dm_rlock_get("rev_cold"), *h = dm_rlock_get("rev_hot");
    char a[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    struct dm_grant g;
    assert_int_equal(dm_rlock_acquire(l, a, NULL, 0, &g), 0);
    redisContext *n = cut_off_holding(neu, key, a);
    assert_int_equal(dm_rlock_release_hold(l, a, g.token, g.wait_id), 0);
    long long h0 = th_now_ms();
    for (int i = 0; i < 256; i++) {
        assert_int_equal(dm_rlock_acquire(h, a, NULL, 0, &g), 0);
        assert_int_equal(dm_rlock_release_hold(h, a, g.token, g.wait_id), 0);
    }
    long long hot_ms = th_now_ms() - h0;
    fail_over_by_a_lock_call(old, neu, h, a);
    long long held = th_cmd_int(n, "HEXISTS %s %s", key, a);
    long long pttl = th_cmd_int(n, "PTTL %s", key);
    measured("256 hot releases in %lld ms; after the resender's round the new primary %s the cold "
             "lock's hold (PTTL %lld of %ld)", hot_ms, held ? "STILL HAS" : "no longer has", pttl,
             lease);
    redisFree(n);
    dm_rlock_put(l);
    dm_rlock_put(h);
    assert_int_equal(held, 0);
}


struct release_call {
    struct dm_rlock *l;
    const char *owner;
    uint64_t token;
    unsigned long wait_id;
    int rc;
};

static void *release_call_main(void *arg)
{
    struct release_call *r = arg;
    r->rc = dm_rlock_release_hold(r->l, r->owner, r->token, r->wait_id);
    return NULL;
}

/* A release is on its way to the old primary (still a primary, slow:
 * CLIENT PAUSE WRITE) when the process learns of the new one; the
 * resender's round runs at once, before that release is answered and
 * kept. The old primary then answers it "done": the release notices the
 * move it straddled and asks for one more round, which sends it to the
 * new primary. Before (the review's reproduction, 3 of 3 runs): never
 * sent again, the hold stood on the new primary for its lease. */
static void test_a_release_answered_by_the_old_primary_after_the_round_is_sent_again(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 0);
    const long lease = 20000;
    fake_sentinel_cluster(t, lease);
    cfg.redis.command_timeout_ms = 5000;    /* the release waits out the pause on the old one */
    struct th_redis *old = &t->primary, *neu = &t->replica[0];
    const char *key = th_key("fly", DM_KEY_LOCK);
    struct dm_rlock *l = dm_rlock_get("fly"), *w = dm_rlock_get("fly_warm");
    char a[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    struct dm_grant g;
    /* the resender thread and its hook, as after any earlier unlock */
    assert_int_equal(dm_rlock_acquire(w, a, NULL, 0, &g), 0);
    assert_int_equal(dm_rlock_release_hold(w, a, g.token, g.wait_id), 0);
    assert_int_equal(dm_rlock_acquire(l, a, NULL, 0, &g), 0);
    redisContext *n = cut_off_holding(neu, key, a);
    redisContext *o = th_redis_connect(old);
    freeReplyObject(th_cmd(o, "CLIENT PAUSE 2000 WRITE"));
    struct release_call rel = { l, a, g.token, g.wait_id, -1 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_call_main, &rel), 0);
    usleep(150000);     /* the release is written, waiting on the paused old primary */
    unsigned long r0 = dm_rlock_resend_rounds();
    fake_sentinel_names(neu);
    dm_sentinel_stale(dm_sentinel_gen());
    struct dm_primary p;
    char err[512];
    int answered;
    assert_int_equal(dm_sentinel_primary(&p, err, sizeof err, &answered), 0);  /* the hooks */
    wait_resend_round(r0);
    unsigned long r1 = dm_rlock_resend_rounds();
    pthread_join(th, NULL);
    assert_int_equal(rel.rc, 0);
    assert_int_equal(th_cmd_int(o, "EXISTS %s", key), 0);   /* the old primary ran it */
    wait_resend_round(r1);
    long long held = th_cmd_int(n, "HEXISTS %s %s", key, a);
    measured("a release the old primary answered after the resender's round: the new primary %s "
             "the hold after the round it asked for", held ? "STILL HAS" : "no longer has");
    redisFree(o);
    redisFree(n);
    dm_rlock_put(l);
    dm_rlock_put(w);
    assert_int_equal(held, 0);
}

/* Per-object names: each record is put after one lock/unlock; its kept
 * release goes with it (a first version's ring held a reference to each
 * of the last 256 records for a lease). */
static void test_kept_releases_keep_no_record_alive(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 0, 0);
    fake_sentinel_cluster(t, 2000);
    size_t before = dm_rlock_stats().count;
    char a[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "rev_obj_%d", i);
        struct dm_rlock *l = dm_rlock_get(name);
        struct dm_grant g;
        assert_int_equal(dm_rlock_acquire(l, a, NULL, 0, &g), 0);
        assert_int_equal(dm_rlock_release_hold(l, a, g.token, g.wait_id), 0);
        dm_rlock_put(l);
    }
    size_t after = dm_rlock_stats().count;
    measured("records before %zu, after 300 names were made, used once, released (kept for a "
             "failover) and put: %zu", before, after);
    assert_int_equal(after, before);
}

/* A fork while the resender's round is sending. The round holds a
 * reference to each record it sends a release of; the child has no
 * resender, so those references are the child's to give back (before:
 * each such record stayed in the child for good, a name destroyed
 * meanwhile included). Here the new primary is paused (CLIENT PAUSE
 * WRITE), so the round blocks on its first release; the records' own
 * references are put, the round's alone keep them; then the fork. */
#define FORK_ROUND_NAMES 3

struct try_lock {
    struct dm_rlock *l;
    const char *owner;
    struct dm_grant g;
    int rc;
};

static void *try_lock_main(void *arg)
{
    struct try_lock *t = arg;
    t->rc = dm_rlock_acquire(t->l, t->owner, NULL, DM_ACQ_TRY, &t->g);
    return NULL;
}

/* In the child: 0 when it has *want records, else 10 + how many more. */
static int child_counts_records(void *want)
{
    size_t n = dm_rlock_stats().count, w = *(size_t *)want;
    return n == w ? 0 : 10 + (int)(n - w);
}

static void test_a_fork_during_a_resend_round_leaves_the_child_none_of_its_references(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 0);
    fake_sentinel_cluster(t, 20000);
    struct th_redis *old = &t->primary, *neu = &t->replica[0];
    size_t base = dm_rlock_stats().count;
    char a[DM_OWNER_MAX], c[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    dm_store_owner(c, 2);
    struct dm_rlock *ls[FORK_ROUND_NAMES];
    for (int i = 0; i < FORK_ROUND_NAMES; i++) {
        char name[32];
        snprintf(name, sizeof name, "fround_%d", i);
        ls[i] = dm_rlock_get(name);
        struct dm_grant g;
        assert_int_equal(dm_rlock_acquire(ls[i], a, NULL, 0, &g), 0);
        assert_int_equal(dm_rlock_release_hold(ls[i], a, g.token, g.wait_id), 0);
    }
    /* The failover, the new primary paused: the lock call that finds it
     * (a thread of its own: it waits for the pause too) starts the round. */
    redisContext *n = th_redis_connect(neu);
    freeReplyObject(th_cmd(n, "REPLICAOF NO ONE"));
    demote_to(old, neu);
    freeReplyObject(th_cmd(n, "CLIENT PAUSE 60000 WRITE"));
    unsigned long r0 = dm_rlock_resend_rounds();
    fake_sentinel_names(neu);
    struct try_lock tl = { dm_rlock_get("fround_via"), c, { 0 }, -1 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, try_lock_main, &tl), 0);
    long long end = th_now_ms() + RUN_MS;
    for (int i = 0; i < FORK_ROUND_NAMES; i++)
        while (__atomic_load_n(&ls[i]->refs, __ATOMIC_ACQUIRE) < 2) {
            if (th_now_ms() > end)
                fail_msg("the resender's round never took up record %d", i);
            usleep(1000);
        }
    for (int i = 0; i < FORK_ROUND_NAMES; i++)
        dm_rlock_put(ls[i]);             /* the round's references keep them */
    assert_int_equal(dm_rlock_stats().count, base + FORK_ROUND_NAMES + 1);
    size_t want = base + 1;                     /* fround_via's, the test's own */
    int st = th_fork_with_handlers(child_counts_records, &want);
    freeReplyObject(th_cmd(n, "CLIENT UNPAUSE"));
    redisFree(n);
    pthread_join(th, NULL);
    if (tl.rc == 0)
        assert_int_equal(dm_rlock_release(tl.l, c, tl.g.token), 0);
    wait_resend_round(r0);
    measured("a fork while the resender's round waited for a paused new primary: the child "
             "kept %d of the round's %d records (exit status %d)",
             WIFEXITED(st) && WEXITSTATUS(st) >= 10 ? WEXITSTATUS(st) - 10 : 0,
             FORK_ROUND_NAMES, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    /* In the parent, the round ends and gives its references back. */
    end = th_now_ms() + RUN_MS;
    while (dm_rlock_stats().count != base + 1) {
        if (th_now_ms() > end)
            fail_msg("%zu records after the round, expected %zu",
                     dm_rlock_stats().count, base + 1);
        usleep(1000);
    }
    dm_rlock_put(tl.l);
    assert_int_equal(dm_rlock_stats().count, base);
}

/* How many clients of r are blocked in a WAIT now (CLIENT LIST: flags
 * with b, cmd=wait; cmd= alone is the last command, done or not). */
static long long blocked_clients(const struct th_redis *r)
{
    redisContext *c = th_redis_connect(r);
    redisReply *rep = th_cmd(c, "CLIENT LIST");
    long long n = 0;
    for (char *line = strtok(rep->str, "\n"); line; line = strtok(NULL, "\n")) {
        const char *f = strstr(line, " flags=");
        if (f && strstr(line, " cmd=wait") && strcspn(f + 7, " b") < strcspn(f + 7, " "))
            n++;
    }
    freeReplyObject(rep);
    redisFree(c);
    return n;
}

/* The watchdog's round WAITs once for its renewals (min_replicas). A WAIT
 * that the old primary's replica answers after the sentinels moved the
 * primary must not count, as for a grant (lock.c): the new primary may
 * not have the renewal, and the holder's loss deadline must not run from
 * it. Here the replica is stopped while the first round's WAIT is pending,
 * the sentinel then names the replica (the process learns of the move:
 * generation + 1; as a replica it never takes the renewals either, so no
 * later round counts), and the replica resumes and acknowledges. The hold's
 * last good renewal must stay the grant (before: the stale round counted,
 * moving it forward by a renewal period). */
static void test_a_renewal_wait_answered_after_the_primary_moved_does_not_count(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 0);
    fake_sentinel_start();
    fake_sentinel_names(&t->primary);
    const long lease = 3000;        /* as the READONLY test's: one watchdog thread per process */
    dm_redis_atfork(DM_FORK_CHILD); /* no pooled connection of an earlier test */
    th_cluster_config(&cfg, &t->primary, 500, lease);
    one_sentinel.host = "127.0.0.1";
    one_sentinel.port = fake_listen_port;
    cfg.redis.sentinels = &one_sentinel;
    cfg.redis.nsentinels = 1;
    cfg.redis.master = (char *)MASTER;
    cfg.on_lease_lost = DM_LOST_WARN;
    cfg.min_replicas = 1;
    cfg.replica_timeout_ms = RENEW_ACK_MS;
    dm_store_init(&cfg, &dm_redis_store);

    static struct dm_hold h;
    struct dm_rlock *l = dm_rlock_get("rw_held");
    struct dm_grant g;
    h.lock = &l->pub;
    dm_store_owner(h.owner, 1);
    assert_int_equal(dm_rlock_acquire(l, h.owner, NULL, 0, &g), 0);
    h.token = g.token;
    kill(t->replica[0].pid, SIGSTOP);
    assert_int_equal(dm_watchdog_add(&h, g.sent_ms, g.lease_ms), 0);
    long long end = th_now_ms() + lease;
    while (blocked_clients(&t->primary) < 1) {  /* the first round's WAIT */
        if (th_now_ms() > end)
            fail_msg("no renewal WAIT pending on the primary within %ld ms", lease);
        usleep(POLL_US);
    }
    long long before = __atomic_load_n(&h.renewed_ms, __ATOMIC_ACQUIRE);
    unsigned long gen = dm_sentinel_gen();
    fake_sentinel_names(&t->replica[0]);
    dm_sentinel_stale(gen);
    struct dm_primary p;
    char why[DM_ERR_MAX];
    int answered;
    assert_int_equal(dm_sentinel_primary(&p, why, sizeof why, &answered), 0);
    assert_int_equal(p.port, t->replica[0].port);
    assert_true(dm_sentinel_gen() != gen);
    kill(t->replica[0].pid, SIGCONT);
    end = th_now_ms() + RENEW_ACK_MS;
    while (blocked_clients(&t->primary) > 0) {
        if (th_now_ms() > end)
            fail_msg("the renewal's WAIT still pending %ld ms after the replica resumed",
                     RENEW_ACK_MS);
        usleep(POLL_US);
    }
    usleep(200 * 1000);             /* the round takes in its WAIT's answer */
    long long after = __atomic_load_n(&h.renewed_ms, __ATOMIC_ACQUIRE);
    if (after != before)
        fail_msg("a renewal acknowledged after the primary moved counted: the last good "
                 "renewal moved from %lld to %lld", before, after);
    dm_watchdog_remove(&h);
    dm_watchdog_forget(&h);
    dm_rlock_put(l);
    topo_stop(t);
}

/* ==== a master name the sentinels do not know ================================ */

static void test_wrong_master_name_is_a_clear_error_for_ls_and_for_a_lock(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 0, 1);
    char url[1024], out_ls[64];
    snprintf(url, sizeof url, "redis-sentinel://%s/nosuchmaster", t->sentinel[0].url);
    char *out = th_out_file();
    snprintf(out_ls, sizeof out_ls, "%s", out);
    char *argv[] = { DMUTEX_CLI, "ls", "-r", url, NULL };
    char *text = th_finish(th_child(argv, NULL, out_ls), out_ls, 1, RUN_MS);
    th_assert_has(text, "does not know master \"nosuchmaster\"");
    th_assert_has(text, t->sentinel[0].url);
    free(text);

    /* The right name: ls works through the sentinel. */
    char *out2 = th_out_file();
    snprintf(url, sizeof url, "redis-sentinel://%s/%s", t->sentinel[0].url, MASTER);
    char *argv2[] = { DMUTEX_CLI, "ls", "-r", url, NULL };
    text = th_finish(th_child(argv2, NULL, out2), out2, 0, RUN_MS);
    th_assert_has(text, "(no locks in namespace dmutex at");
    th_assert_has(text, "(primary of " MASTER ")");
    free(text);

    /* A program under the shim: its trylock is refused, with the words. */
    char list[128];
    sentinel_list(t, list, sizeof list);
    char *cfgf = th_keep_file(th_write_file(".cfg", "redis = { sentinels = ( %s ); "
                                            "master = \"nosuchmaster\"; };\n"
                                            "mutexes = ( { symbol = \"fault_lock\"; name = \"w_m\"; } );\n",
                                            list));
    char *wout = th_out_file();
    struct th_shim_env e;
    char **env = th_shim_env(&e, cfgf, NULL, NULL);
    char *wargv[] = { worker_path, "once", "try", "-s", chk.sock, "-k", chk.prefix, NULL };
    text = th_finish(th_child(wargv, env, wout), wout, 0, RUN_MS);
    th_assert_has(text, "try EBUSY");
    th_assert_has(text, "does not know master \"nosuchmaster\"");
    free(text);

    /* dmutex run -r with the right name overrides the file's: locked. */
    char *rout = th_out_file();
    char *rargv[] = { DMUTEX_CLI, "run", "-c", cfgf, "-r", url, "--", worker_path, "once", "lock",
                      "-s", chk.sock, "-k", chk.prefix, NULL };
    text = th_finish(th_child(rargv, NULL, rout), rout, 0, RUN_MS);
    th_assert_has(text, "lock 0 ");
    th_assert_has(text, "fenced ok");
    th_assert_has(text, "unlocked 0 ");
    free(text);
    topo_stop(t);
}

/* ==== min_replicas without Sentinel ========================================== */

/* faultworker `rest` (NULL-terminated) on this machine with the shim,
 * `cfgf` and the lock server `url`; its output in *out. */
static pid_t local_prog(const char *cfgf, const char *url, char **out, const char *const *rest)
{
    static struct th_shim_env e;
    *out = th_out_file();
    return th_checker_prog(&chk, NULL, &net, NULL, th_shim_env(&e, cfgf, url, NULL), worker_path,
                           rest, *out);
}

/* The first sentinel of the list names a replica (a stale view), the
 * second the real primary. The node named turns out not to be the primary,
 * so the shim must ask the next sentinel, not the same one again: a lock
 * call gets in (before: the first was asked forever, ETIMEDOUT). */
static void test_a_sentinel_that_names_a_replica_does_not_hold_the_process_back(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 1);
    fake_sentinel_start();
    fake_sentinel_names(&t->replica[0]);
    char *cfgf = th_keep_file(th_write_file(".cfg", "redis = { sentinels = ( "
                                            "\"127.0.0.1:%d\", \"%s\" ); master = \"%s\"; };\n"
                                            "mutexes = ( { symbol = \"fault_lock\"; "
                                            "name = \"stale_s\"; } );\n",
                                            fake_listen_port, t->sentinel[0].url, MASTER));
    char *out;
    const char *timed[] = { "once", "timed:20000", NULL };
    pid_t w = local_prog(cfgf, NULL, &out, timed);
    char *text = th_finish(w, out, 0, RUN_MS);
    th_assert_has(text, "timed:20000 0 ");
    th_assert_has(text, "fenced ok");
    free(text);
}

/* lockprog storm-hold (a SIGALRM every 200 us, no SA_RESTART) with
 * on_redis_down = "local" and its only sentinel behind a proxy whose
 * accept queue is full for a while: the sentinel's connect takes a second
 * or more under the signals. The sentinel is there all along, so the hold
 * must be the primary's, never a local one. Before, hiredis's connect took
 * the EINTR of its poll(2) for a failure: "no sentinel answered", and the
 * program locked alone. */
static void test_signals_during_a_sentinel_connect_never_make_a_local_hold(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 0, 1);
    char *portfile = th_keep_file(th_write_file(".port", "%s", ""));
    unlink(portfile);
    char *pout = th_out_file();
    char *fargv[] = { fserver_path, "slow-accept", portfile, t->sentinel[0].addr,
                      t->sentinel[0].port_text, SLOW_ACCEPT_MS, NULL };
    th_child(fargv, NULL, pout);
    th_wait_for(portfile, "\n", RUN_MS);
    char *pt = th_read_file(portfile);
    int proxy = atoi(pt);
    free(pt);
    char *cfgf = th_keep_file(th_write_file(".cfg", "on_redis_down = \"local\";\n"
                                            "redis = { sentinels = ( \"127.0.0.1:%d\" ); "
                                            "master = \"%s\"; connect_timeout_ms = 20000; };\n"
                                            "mutexes = ( { symbol = \"held_lock\"; "
                                            "name = \"storm_s\"; } );\n", proxy, MASTER));
    static struct th_shim_env e;
    char *out = th_out_file(), *go = th_go_file();
    char *argv[] = { lockprog_path, "storm-hold", go, NULL };
    pid_t p = th_child(argv, th_shim_env(&e, cfgf, NULL, NULL), out);
    th_wait_for(out, "locked ", RUN_MS);
    char *text = th_read_file(out);
    if (strstr(text, "this process only") || !strstr(text, "locked 0"))
        fail_msg("the lock under signals was not Redis's:\n%s", text);
    free(text);
    redisContext *c = th_redis_connect(&t->primary);
    assert_int_equal(th_cmd_int(c, "EXISTS %s", th_key("storm_s", DM_KEY_LOCK)), 1);
    redisFree(c);
    th_touch(go);
    text = th_finish(p, out, 0, RUN_MS);
    th_assert_has(text, "unlocked 0");
    if (th_field_after(text, "signals ") == 0)
        fail_msg("no signal arrived:\n%s", text);
    free(text);
    text = th_read_file(pout);
    th_assert_has(text, "accepting");       /* the connect did wait for the queue */
    free(text);
}

/* No replica can acknowledge: a lock call never returns a grant; each one
 * it got was given back (the lock is free after), and the words say why. */
static void test_min_replicas_without_a_replica_never_grants_and_leaves_the_lock_free(void **s)
{
    (void)s;
    th_redis_start(&cur.primary, NULL, NULL);
    char *cfgf = th_keep_file(th_write_file(".cfg", "lease_ms = 3000; min_replicas = 1; "
                                            "replica_timeout_ms = 300;\n"
                                            "mutexes = ( { symbol = \"fault_lock\"; "
                                            "name = \"mr_none\"; } );\n"));
    char *out;
    const char *timed[] = { "once", "timed:1500", NULL };
    pid_t w = local_prog(cfgf, cur.primary.url, &out, timed);
    char *text = th_finish(w, out, 0, RUN_MS);
    th_assert_has(text, "timed:1500 ETIMEDOUT");
    th_assert_has(text, "only 0 of min_replicas = 1 replicas acknowledged the grant");
    free(text);
    const char *try[] = { "once", "try", NULL };
    w = local_prog(cfgf, cur.primary.url, &out, try);
    text = th_finish(w, out, 0, RUN_MS);
    th_assert_has(text, "try EBUSY");
    free(text);
    redisContext *c = th_redis_connect(&cur.primary);
    assert_int_equal(th_cmd_int(c, "EXISTS %s", th_key("mr_none", DM_KEY_LOCK)), 0);
    redisFree(c);
}

/* The process's own measure of a "once" call: "<op> <errno name> <ms>". */
static long once_ms(const char *text, const char *op_err)
{
    const char *p = strstr(text, op_err);
    if (!p)
        fail_msg("no \"%s\" in:\n%s", op_err, text);
    return atol(p + strlen(op_err));
}

#define LONG_ACK_MS     9000L   /* replica_timeout_ms far past the deadline */
#define TIMED_MS        1500L
#define ACK_SLACK_MS    4500L   /* a loaded machine; still well under LONG_ACK_MS */

/* A grant's WAIT is cut to the caller's deadline: a timed lock returns
 * ETIMEDOUT by it, and a trylock EBUSY soon, not after replica_timeout_ms. */
static void test_timed_and_try_lock_do_not_wait_replica_timeout_past_the_deadline(void **s)
{
    (void)s;
    th_redis_start(&cur.primary, NULL, NULL);
    char *cfgf = th_keep_file(th_write_file(".cfg", "lease_ms = 30000; min_replicas = 1; "
                                            "replica_timeout_ms = %ld;\n"
                                            "mutexes = ( { symbol = \"fault_lock\"; "
                                            "name = \"mr_dl\"; } );\n", LONG_ACK_MS));
    char *out, op[32];
    snprintf(op, sizeof op, "timed:%ld", TIMED_MS);
    const char *timed[] = { "once", op, NULL };
    pid_t w = local_prog(cfgf, cur.primary.url, &out, timed);
    char *text = th_finish(w, out, 0, RUN_MS);
    char key[48];
    snprintf(key, sizeof key, "%s ETIMEDOUT ", op);
    long took = once_ms(text, key);
    if (took > TIMED_MS + ACK_SLACK_MS)
        fail_msg("timedlock of %ld ms with replica_timeout_ms = %ld returned after %ld ms",
                 TIMED_MS, LONG_ACK_MS, took);
    free(text);
    const char *try[] = { "once", "try", NULL };
    w = local_prog(cfgf, cur.primary.url, &out, try);
    text = th_finish(w, out, 0, RUN_MS);
    took = once_ms(text, "try EBUSY ");
    if (took > ACK_SLACK_MS)
        fail_msg("trylock with replica_timeout_ms = %ld returned after %ld ms", LONG_ACK_MS, took);
    free(text);
    redisContext *c = th_redis_connect(&cur.primary);
    assert_int_equal(th_cmd_int(c, "EXISTS %s", th_key("mr_dl", DM_KEY_LOCK)), 0);
    redisFree(c);
}

#define ACROSS_ACK_MS   8000L   /* replica_timeout_ms: the WAIT outlives the failover */
#define ACROSS_OUT_MS   3000L   /* A must stay out this long after P is back */
#define NOBODY_PORT     "1"     /* an announced port nobody listens on */

/* A grant's WAIT still pending on the old primary when the sentinels move
 * it: a replica they cannot reach (it announces a port nobody listens on:
 * on the old primary's side of a partition) re-attaches to the old primary
 * when it is back and acknowledges the grant. The new primary never had
 * it and has granted the lock to B: A must not enter while B is inside
 * (before: WAIT 1 answered 1, both inside). */
static void test_a_wait_answered_after_the_failover_does_not_count(void **s)
{
    (void)s;
    struct topo *t = &cur;
    memset(t, 0, sizeof *t);
    t->bind = bind_addr();
    const char *fast[] = { "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
                           NULL };
    th_redis_start(&t->primary, t->bind, fast);
    char port[16];
    snprintf(port, sizeof port, "%d", t->primary.port);
    const char *rep[] = { "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
                          "--replicaof", t->primary.addr, port, NULL };
    const char *hidden[] = { "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1",
                             "--replicaof", t->primary.addr, port,
                             "--replica-announce-port", NOBODY_PORT, NULL };
    th_redis_start(&t->replica[0], t->bind, rep);
    th_redis_start(&t->replica[1], t->bind, hidden);
    th_redis_start(&t->replica[2], t->bind, rep);   /* the new primary's replica */
    wait_replicas(&t->primary, 3);
    t->nsentinels = 3;
    for (int i = 0; i < 3; i++)
        th_sentinel_start(&t->sentinel[i], t->bind, MASTER, t->primary.addr, t->primary.port, 2,
                          DOWN_AFTER_MS, FAILOVER_MS);
    long long end = th_now_ms() + QUORUM_WAIT_MS;
    for (int i = 0; i < 3; i++)
        while (!sentinel_ready(&t->sentinel[i], 2)) {
            if (th_now_ms() > end)
                fail_msg("sentinel %d not ready in %ld ms", i, QUORUM_WAIT_MS);
            usleep(POLL_US * 20);
        }
    char list[256];
    sentinel_list(t, list, sizeof list);
    char *cfgf = th_keep_file(th_write_file(".cfg", "on_lease_lost = \"warn\"; min_replicas = 1; "
                                            "replica_timeout_ms = %ld;\n"
                                            "redis = { sentinels = ( %s ); master = \"%s\"; "
                                            "connect_timeout_ms = 500; command_timeout_ms = 500; };\n"
                                            "mutexes = ( { symbol = \"fault_lock\"; "
                                            "name = \"wx\"; } );\n", ACROSS_ACK_MS, list, MASTER));
    for (int i = 0; i < 3; i++)
        kill(t->replica[i].pid, SIGSTOP);
    redisContext *c = th_redis_connect(&t->primary);
    th_cmd_int(c, "CLIENT KILL TYPE replica");
    redisFree(c);
    char *aout, *bout, *goa = th_go_file(), *gob = th_go_file();
    const char *ha[] = { "once", "lock", "-g", goa, NULL };
    pid_t a = local_prog(cfgf, NULL, &aout, ha);
    /* A's grant is made and its WAIT pending (a fixed 500 ms was too
     * short for a slow start under load: A then asked after the move). */
    end = th_now_ms() + RUN_MS;
    while (blocked_clients(&t->primary) < 1) {
        if (th_now_ms() > end)
            fail_msg("A's grant never reached its WAIT");
        usleep(POLL_US);
    }
    kill(t->primary.pid, SIGSTOP);
    kill(t->replica[0].pid, SIGCONT);
    kill(t->replica[2].pid, SIGCONT);
    char was[2048], now[2048];
    snprintf(was, sizeof was, "%s:%d", t->primary.addr, t->primary.port);
    end = th_now_ms() + RUN_MS;
    do {
        if (th_now_ms() > end)
            fail_msg("the sentinels did not move the primary from %s", was);
        usleep(POLL_US * 10);
        sentinel_says(&t->sentinel[0], now, sizeof now);
    } while (strcmp(now, was) == 0 || strcmp(now, "?") == 0);
    const char *hb[] = { "once", "lock", "-g", gob, NULL };
    pid_t b = local_prog(cfgf, NULL, &bout, hb);
    th_wait_for(bout, "inside ", RUN_MS);
    /* What is tested is a WAIT answered after A learned of the move: wait
     * for A's +switch-master (its sentinel may hear of the new epoch a
     * hello period after the others). A process that has not heard of it
     * yet is the window docs/deploying.md states. */
    th_wait_for(aout, "(+switch-master)", RUN_MS);
    kill(t->primary.pid, SIGCONT);
    kill(t->replica[1].pid, SIGCONT);
    usleep(ACROSS_OUT_MS * 1000);
    char *at = th_read_output(aout);
    if (strstr(at, "inside "))
        fail_msg("A entered on a grant the old primary's replica acknowledged after the "
                 "failover, while B holds the lock on the new primary:\n%s", at);
    free(at);
    th_touch(gob);
    free(th_finish(b, bout, 0, RUN_MS));
    th_wait_for(aout, "inside ", RUN_MS);
    th_touch(goa);
    free(th_finish(a, aout, 0, RUN_MS));
    th_checker_assert_no_overlap(&chk, 0);
    assert_int_equal(th_checker_get(&chk, 0, "rejects"), 0);
}

/* A fair handover is written by the releaser; the receiver may enter only
 * once a replica has it too. With the replica cut off, the waiter is
 * handed the lock but must not enter until the replica is back. */
static void test_a_handover_counts_only_once_a_replica_has_it(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 0);
    char *cfgf = th_keep_file(th_write_file(".cfg", "lease_ms = 6000; min_replicas = 1; "
                                            "replica_timeout_ms = 300;\n"
                                            "mutexes = ( { symbol = \"fault_lock\"; "
                                            "name = \"mr_hand\"; } );\n"));
    char *aout, *bout, *go = th_go_file();
    const char *hold[] = { "once", "lock", "-g", go, NULL };
    pid_t a = local_prog(cfgf, t->primary.url, &aout, hold);
    th_wait_for(aout, "inside ", RUN_MS);
    const char *wait[] = { "once", "lock", NULL };
    pid_t b = local_prog(cfgf, t->primary.url, &bout, wait);
    redisContext *c = th_redis_connect(&t->primary);
    long long end = th_now_ms() + RUN_MS;
    while (th_cmd_int(c, "LLEN %s", th_key("mr_hand", DM_KEY_QUEUE)) < 1) {
        if (th_now_ms() > end)
            fail_msg("the waiter never queued");
        usleep(POLL_US);
    }
    kill(t->replica[0].pid, SIGSTOP);
    th_cmd_int(c, "CLIENT KILL TYPE replica");
    th_touch(go);                        /* A releases: the handover to B */
    char *at = th_finish(a, aout, 0, RUN_MS);
    th_assert_has(at, "unlocked 0");
    free(at);
    usleep(1500 * 1000);
    char *bt = th_read_output(bout);
    if (strstr(bt, "inside "))
        fail_msg("the waiter entered on a handover no replica had:\n%s", bt);
    free(bt);
    long long back = th_now_ms();
    kill(t->replica[0].pid, SIGCONT);
    long long entered = th_wait_for(bout, "inside ", RUN_MS);
    bt = th_finish(b, bout, 0, RUN_MS);
    th_assert_has(bt, "unlocked 0");
    free(bt);
    redisFree(c);
    measured("a handover while the only replica was cut off: the waiter did not enter for the "
             "1500 ms of the cut; it entered %lld ms after the replica came back",
             entered - back);
    topo_stop(t);
}

/* ==== failover under load ==================================================== */

struct run_result {
    long long sections, counter, overlaps, rejects, unlockerr, lost, not_acked, done;
    long long kill_to_switch, kill_to_resume;
    long long holder_inside, holder_lost, first_overlap;  /* ms after the kill, -1: never */
    int holder_fenced;      /* the long holder's write: 1 accepted, 0 rejected */
    int holder_unacked;     /* its log: renewals no replica acknowledged */
    long long bare_ms;      /* while its renewals were due: the named primary had no replica */
    long long retry_ms;     /* how long its renewals were due before its loss */
    int holder_why;         /* its loss says no renewal succeeded in time */
    char primaries[160];    /* every primary sentinel 1 named after the kill */
    int finished;
};

/* faultworker on machine i % 2 (this one without namespaces) with the
 * shim and `cfgf`, running `rest` (NULL-terminated) then the checker's
 * options. */
static pid_t start_prog(int i, const char *cfgf, const char *out, const char *const *rest)
{
    static struct th_shim_env e;
    return th_checker_prog(&chk, NULL, &net, net.up ? net.ns[i % 2] : NULL,
                           th_shim_env(&e, cfgf, NULL, NULL), worker_path, rest, out);
}

static pid_t start_worker(int i, const char *cfgf, const char *out)
{
    const char *rest[] = { "loop", "-c", "-t", NTHREAD, "-n", SECTIONS, "-u", HOLD_US, NULL };
    return start_prog(i, cfgf, out, rest);
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* A release the primary answered before its replica had it, then the
 * primary dies: the replica the sentinels promote still has the hold, with
 * the rest of its 30 s lease. The process that released it (alive, idle)
 * hears of the new primary and sends its release again, so the next
 * locker gets in at once. Before, it waited for the lease: some 25 s
 * after the switch here. */
static void test_a_release_the_new_primary_lacks_is_sent_again(void **s)
{
    (void)s;
    struct topo *t = &cur;
    topo_start(t, 1, 3);
    char list[256];
    sentinel_list(t, list, sizeof list);
    char *cfgf = th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\n"
        "redis = { sentinels = ( %s ); master = \"%s\";\n"
        "  connect_timeout_ms = 500; command_timeout_ms = 500; };\n"
        "mutexes = ( { symbol = \"fault_lock\"; name = \"s_resend\"; } );\n",
        RESEND_LEASE_MS, list, MASTER));
    char *aout = th_out_file(), *go = th_go_file(), *stay = th_go_file();
    const char *hold[] = { "once", "lock", "-g", go, "-G", stay, NULL };
    pid_t a = start_prog(0, cfgf, aout, hold);
    th_wait_for(aout, "inside ", RUN_MS);
    /* The grant is on the replica before it stops; the release is not. */
    const char *lock = th_key("s_resend", DM_KEY_LOCK);
    redisContext *rc = th_redis_connect(&t->replica[0]);
    long long end = th_now_ms() + RUN_MS;
    while (th_cmd_int(rc, "EXISTS %s", lock) != 1) {
        if (th_now_ms() > end)
            fail_msg("the grant never reached the replica");
        usleep(POLL_US);
    }
    redisFree(rc);
    char before[64];
    sentinel_says(&t->sentinel[0], before, sizeof before);
    kill(t->replica[0].pid, SIGSTOP);
    redisContext *pc = th_redis_connect(&t->primary);
    th_cmd_int(pc, "CLIENT KILL TYPE replica");
    th_touch(go);
    th_wait_for(aout, "unlocked 0", RUN_MS);
    assert_int_equal(th_cmd_int(pc, "EXISTS %s", lock), 0);
    redisFree(pc);
    th_redis_kill(&t->primary);
    kill(t->replica[0].pid, SIGCONT);
    rc = th_redis_connect(&t->replica[0]);
    long long kept = th_cmd_int(rc, "EXISTS %s", lock);
    redisFree(rc);
    if (kept != 1)
        fail_msg("the replica had the release after all: nothing to test");
    char named[64] = "";
    end = th_now_ms() + RUN_MS;
    do {
        if (th_now_ms() > end)
            fail_msg("the sentinels named no new primary (still %s)", named);
        usleep(POLL_US);
        sentinel_says(&t->sentinel[0], named, sizeof named);
    } while (strcmp(named, "?") == 0 || strcmp(named, before) == 0);
    long long switched = th_now_ms();
    char *bout = th_out_file();
    const char *take[] = { "once", "lock", NULL };
    pid_t b = start_prog(1, cfgf, bout, take);
    long long entered = th_wait_for(bout, "inside ", RUN_MS);
    char *bt = th_finish(b, bout, 0, RUN_MS);
    th_assert_has(bt, "unlocked 0");
    free(bt);
    th_touch(stay);
    char *at = th_finish(a, aout, 0, RUN_MS);
    th_assert_has(at, "stayed");
    if (entered - switched >= RESEND_LEASE_MS / 2)
        fail_msg("the next locker entered %lld ms after the switch to %s: the hold the new "
                 "primary had from before the release stood for its lease; the releaser's "
                 "log:\n%s", entered - switched, named, at);
    th_assert_has(at, "release(s) of the last lease sent again");
    free(at);
    measured("a release no replica had when the primary died: the next locker entered %lld ms "
             "after the sentinels named the new primary (lease %ld ms)",
             entered - switched, RESEND_LEASE_MS);
    topo_stop(t);
}

/* Workers on both machines; the primary SIGKILLed once a quarter of the
 * sections are done. */
static void failover_run(int min_replicas, struct run_result *res)
{
    memset(res, 0, sizeof *res);
    struct topo *t = &cur;
    topo_start(t, 2, 3);
    char list[256];
    sentinel_list(t, list, sizeof list);
    /* lease 10 s: renewals every 3.3 s, so a failover of a few seconds
     * leaves every hold its lease; on_lease_lost = "warn" so that a lost
     * hold is counted rather than ends its process. */
    char *cfgf = th_keep_file(th_write_file(".cfg",
        "lease_ms = 10000; on_lease_lost = \"warn\";\n"
        "min_replicas = %d; replica_timeout_ms = 500;\n"
        "redis = { sentinels = ( %s ); master = \"%s\";\n"
        "  connect_timeout_ms = 500; command_timeout_ms = 500; };\n"
        "mutexes = ( { symbol = \"fault_lock\"; name = \"s_fail%d\"; } );\n",
        min_replicas, list, MASTER, min_replicas));
    char *out[NPROC];
    pid_t p[NPROC];
    for (int i = 0; i < NPROC; i++) {
        out[i] = th_out_file();
        p[i] = start_worker(i, cfgf, out[i]);
    }
    long long total = (long long)NPROC * atoi(NTHREAD) * atoi(SECTIONS);
    long long end = th_now_ms() + RUN_MS;
    while (th_checker_get(&chk, 0, "sections") < total / 4) {
        if (th_now_ms() > end)
            fail_msg("no progress before the kill: %lld sections",
                     th_checker_get(&chk, 0, "sections"));
        usleep(POLL_US);
    }
    char before[64], after[64];
    sentinel_says(&t->sentinel[0], before, sizeof before);
    /* The replicas stop first, for less than the sentinels' down-after
     * time: the grants of that moment reach no replica before the primary
     * dies (asynchronous replication at its worst, made sure of). With min_replicas
     * they are not acknowledged, released and retried; without, they are
     * lost with the primary. */
    for (int i = 0; i < 2; i++)
        kill(t->replica[i].pid, SIGSTOP);
    /* Stopped, a replica's kernel would still take in the stream: the
     * primary drops their links too (they cannot reconnect while stopped). */
    redisContext *pc = th_redis_connect(&t->primary);
    long long dropped = th_cmd_int(pc, "CLIENT KILL TYPE replica");
    redisFree(pc);
    long long before_stall = th_checker_get(&chk, 0, "sections");
    /* A long holder asks for the lock now: without min_replicas its grant
     * reaches no replica, and it stays inside across the failover. */
    char *lout = th_out_file(), *go = th_go_file();
    const char *lrest[] = { "once", "lock", "-c", "-g", go, NULL };
    pid_t lp = start_prog(0, cfgf, lout, lrest);
    usleep(STALL_MS * 1000);
    long long at_kill = th_checker_get(&chk, 0, "sections");
    long long killed = th_now_ms();
    th_redis_kill(&t->primary);
    for (int i = 0; i < 2; i++)
        kill(t->replica[i].pid, SIGCONT);
    /* Until the long holder lets go: the sentinels' switch, the first
     * sections after the kill, and when the long holder is inside, when
     * its renewal finds its grant gone, and when another process enters
     * beside it. */
    long long switched = 0, resumed = 0, lost_at = 0, overlap_at = 0, inside_at = 0;
    long long last_poll = th_now_ms();
    char named[64] = "";
    snprintf(res->primaries, sizeof res->primaries, "%s", before);
    while (th_now_ms() < killed + HOLD_ACROSS_MS) {
        char now_named[64];
        sentinel_says(&t->sentinel[1], now_named, sizeof now_named);
        if (strcmp(now_named, "?") != 0 && strcmp(now_named, named) != 0) {
            snprintf(named, sizeof named, "%s", now_named);
            if (strcmp(named, before) != 0) {
                size_t o = strlen(res->primaries);
                snprintf(res->primaries + o, sizeof res->primaries - o, " -> %s", named);
            }
        }
        if (!switched && strcmp(named, before) != 0 && named[0]) {
            snprintf(after, sizeof after, "%s", named);
            switched = th_now_ms();
        }
        /* While the long holder is inside: did the primary have a replica
         * to acknowledge its renewals? */
        long long tnow = th_now_ms();
        if (inside_at && !lost_at && tnow >= inside_at + RETRY_FROM_MS &&
            (strcmp(named, before) == 0 || online_replicas(t, named) == 0))
            res->bare_ms += tnow - last_poll;   /* the dead primary, or one with no replica */
        last_poll = tnow;
        if (!resumed && th_checker_get(&chk, 0, "sections") > at_kill)
            resumed = th_now_ms();
        char *lt = th_read_output(lout);
        if (!inside_at && strstr(lt, "inside "))
            inside_at = th_now_ms();
        if (!lost_at && strstr(lt, "lost the lease"))
            lost_at = th_now_ms();
        free(lt);
        if (!overlap_at && th_checker_get(&chk, 0, "overlaps") > 0)
            overlap_at = th_now_ms();
        usleep(POLL_US);
    }
    res->kill_to_switch = switched ? switched - killed : -1;
    res->kill_to_resume = resumed ? resumed - killed : -1;
    th_touch(go);
    res->holder_lost = lost_at ? lost_at - killed : -1;
    res->first_overlap = overlap_at ? overlap_at - killed : -1;
    res->holder_inside = inside_at ? inside_at - killed : -1;
    int lst = th_wait_end(lp, RUN_MS, NULL, NULL);
    char *ltext = th_read_output(lout);
    if (lst == -1 || !WIFEXITED(lst) || WEXITSTATUS(lst) != 0) {
        res->finished = 0;
        printf("long holder (status 0x%x):\n%s\n", lst, ltext);
    }
    if (lost_at)        /* what its watchdog saw, for the reader of a failure */
        printf("long holder's log:\n%s\n", ltext);
    res->holder_fenced = strstr(ltext, "fenced ok") ? 1 : strstr(ltext, "fenced rejected") ? 0 : -1;
    res->holder_unacked = count_of(ltext, "replicas acknowledged it");
    res->holder_why = strstr(ltext, "no renewal succeeded in time") != NULL &&
                      strstr(ltext, "no longer has") == NULL;
    res->retry_ms = lost_at && inside_at ? lost_at - inside_at - RETRY_FROM_MS : 0;
    res->lost += count_of(ltext, "lost the lease") ? 1 : 0;
    res->done += strstr(ltext, "inside ") ? 1 : 0;
    free(ltext);
    res->finished = 1;
    for (int i = 0; i < NPROC; i++) {
        int st = th_wait_end(p[i], RUN_MS, NULL, NULL);
        char *text = th_read_output(out[i]);
        if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            res->finished = 0;
            printf("worker %d (status 0x%x):\n%s\n", i, st, text);
        }
        const char *d = strstr(text, "done ");
        if (d)
            res->done += strtoll(d + 5, NULL, 10);
        res->lost += count_of(text, "lost the lease") + count_of(text, "was lost while held");
        res->not_acked += count_of(text, "replicas acknowledged the grant");
        free(text);
    }
    res->sections = th_checker_get(&chk, 0, "sections");
    res->counter = th_checker_get(&chk, 0, "counter");
    res->overlaps = th_checker_get(&chk, 0, "overlaps");
    res->rejects = th_checker_get(&chk, 0, "rejects");
    res->unlockerr = th_checker_get(&chk, 0, "unlockerr");
    measured("replicas stopped and their %lld links dropped %d ms (%lld sections meanwhile), "
             "then the primary SIGKILLed, after %lld of %lld sections, "
             "%s, min_replicas = %d, %d processes "
             "x %s threads on %s: sentinels switched %s -> %s %lld ms after the kill; sections "
             "resumed %lld ms after it; %lld sections, counter %lld, %lld overlaps, %lld stale "
             "writes rejected by the fence, %lld lost holds, %lld grants released unacknowledged, "
             "every process finished: %s; the long holder (asked during the stall, inside "
             "until %ld ms after the kill) was inside %lld ms after the kill, its hold found "
             "lost %lld ms after it, another process entered beside it %lld ms after it (-1: "
             "never), its fenced write %s; primaries named: %s; while it was inside, the "
             "named primary had no replica online for %lld of the %lld ms its renewals were "
             "due",
             dropped, STALL_MS, at_kill - before_stall, at_kill, total,
             net.up ? "workers on two namespace machines" : "loopback", min_replicas, NPROC,
             NTHREAD, t->bind, before, after, res->kill_to_switch, res->kill_to_resume,
             res->sections, res->counter, res->overlaps, res->rejects, res->lost,
             res->not_acked, res->finished ? "yes" : "no", HOLD_ACROSS_MS, res->holder_inside,
             res->holder_lost, res->first_overlap,
             res->holder_fenced == 1 ? "accepted" : res->holder_fenced == 0 ? "rejected" : "not made",
             res->primaries, res->bare_ms, res->retry_ms);
    topo_stop(t);
}

static void test_failover_with_min_replicas_1_keeps_exclusion_counter_and_tokens(void **s)
{
    (void)s;
    struct run_result r;
    failover_run(1, &r);
    long long total = (long long)NPROC * atoi(NTHREAD) * atoi(SECTIONS) + 1;   /* + the long holder */
    assert_true(r.finished);
    assert_true(r.kill_to_switch > 0);
    assert_int_equal(r.done, total);
    assert_int_equal(r.sections, total);
    assert_int_equal(r.counter, total);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.rejects, 0);
    /* No hold is lost, but the long holder's may be when the failover left
     * the primary the sentinels named without a replica (or named the dead
     * one) for most of the time its renewals were retried (the sentinels'
     * own timing: a replica reconfigured late, or a second failover), its
     * log says they went unacknowledged and that it was lost for want of a
     * renewal (not found gone on the server), and nobody entered beside
     * it: min_replicas = 1 may not count a renewal only the primary has.
     * Its unlock then says EPERM (on_lease_lost = "warn"). */
    int want_lost = r.lost == 1 && r.holder_lost >= 0 && r.retry_ms > 0 &&
                    r.bare_ms * 5 >= r.retry_ms * 4 && r.holder_unacked > 0 && r.holder_why &&
                    r.first_overlap < 0;
    if (want_lost)
        printf("the long holder's hold was lost for want of a replica (above): expected\n");
    assert_int_equal(r.lost, want_lost);
    assert_int_equal(r.unlockerr, want_lost);
}

static void test_failover_with_min_replicas_0_is_measured(void **s)
{
    (void)s;
    struct run_result r;
    failover_run(0, &r);
    /* Asynchronous replication may lose a grant: what happened is printed
     * above, not asserted. Only that the run itself worked. */
    assert_true(r.kill_to_switch > 0);
    assert_true(r.sections > 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, th_machines_test_setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_readonly_from_a_demoted_primary_rediscovers_and_grants_on_the_new_one),
        T(test_a_renewal_wait_answered_after_the_primary_moved_does_not_count),
        T(test_wrong_master_name_is_a_clear_error_for_ls_and_for_a_lock),
        T(test_a_sentinel_that_names_a_replica_does_not_hold_the_process_back),
        T(test_signals_during_a_sentinel_connect_never_make_a_local_hold),
        T(test_min_replicas_without_a_replica_never_grants_and_leaves_the_lock_free),
        T(test_timed_and_try_lock_do_not_wait_replica_timeout_past_the_deadline),
        T(test_a_handover_counts_only_once_a_replica_has_it),
        T(test_a_wait_answered_after_the_failover_does_not_count),
        T(test_a_release_the_new_primary_lacks_is_sent_again),
        T(test_a_release_sent_again_leaves_the_same_threads_new_grant),
        T(test_every_kept_release_is_sent_again_the_server_decides),
        T(test_a_busy_lock_does_not_push_another_locks_release_out),
        T(test_kept_releases_keep_no_record_alive),
        T(test_a_fork_during_a_resend_round_leaves_the_child_none_of_its_references),
        T(test_a_release_answered_by_the_old_primary_after_the_round_is_sent_again),
        T(test_failover_with_min_replicas_1_keeps_exclusion_counter_and_tokens),
        T(test_failover_with_min_replicas_0_is_measured),
    };
    const char *only = getenv("DM_SENTINEL_FILTER");
    if (only && *only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, group_setup, th_machines_group_teardown);
}
