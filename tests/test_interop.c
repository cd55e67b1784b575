/* test_interop: the partner protocols (docs/interop.md) against the real
 * partner clients, started here: for setnx, redis-py's Lock (Debian's
 * python3-redis, tests/progs/setnx_partner.py) and redlock 5 with one
 * server (npm, in bench/node_modules as `make bench` installs it;
 * tests/progs/setnx_partner.js); for redisson, node-redisson 1.0.4 (npm,
 * the same bench/node_modules; tests/progs/redisson_partner.js), each
 * sharing one lock name with dmutex-mapped C programs (tests/progs/counter,
 * tests/progs/interprog) on the group's own redis-server. The store's half
 * is driven in process too: the key a grant writes, a release or renewal
 * that finds the key gone or another's, a key of another type at each
 * protocol's name. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "checker.h"
#include "config.h"
#include "harness.h"
#include "lock.h"
#include "store.h"

#define CMD_TIMEOUT_MS  500L
#define LEASE_MS        600L    /* the programs' lease: a section of 2 s outlives 3 of them */
#define SLACK_MS        1500L   /* how late an event may be on a loaded machine */
#define RUN_MS          30000L  /* a partner or counter process ends within this */
#define SUITE_ALARM_S   120
#define PARTNER_PY      "tests/progs/setnx_partner.py"
#define PARTNER_JS      "tests/progs/setnx_partner.js"
#define REDISSON_JS     "tests/progs/redisson_partner.js"
#define WAKE_LEASE_MS   5000L   /* a waker's lease: a waiter woken by a timeout would show it */
#define WAKE_ROUNDS     3
#define INTERPROG       TH_BUILD "/tests/progs/interprog"
#define PYTHON          "/usr/bin/python3"     /* Debian's, with python3-redis */
#define LATENCY_ROUNDS  5

static struct th_redis rs;
static redisContext *rc;
static struct dm_config cfg;
static char shim[4096], interprog[4096], counter[4096];
static char node[4096];

/* `prog` on PATH, into out; 0, or -1. */
static int on_path(const char *prog, char *out, size_t len)
{
    const char *path = getenv("PATH");
    for (const char *p = path; p && *p;) {
        size_t n = strcspn(p, ":");
        snprintf(out, len, "%.*s/%s", (int)n, p, prog);
        if (access(out, X_OK) == 0)
            return 0;
        p += n + (p[n] == ':');
    }
    return -1;
}

static int group_setup(void **state)
{
    (void)state;
    if (th_built_paths(TH_SHIM, shim, INTERPROG, interprog, TH_COUNTER, counter, (char *)NULL) < 0)
        return -1;
    if (system(PYTHON " -c 'import redis' 2>/dev/null") != 0) {
        fprintf(stderr, "test_interop: %s cannot import redis: run tools/deps.sh "
                "(Debian's python3-redis)\n", PYTHON);
        return -1;
    }
    if (on_path("node", node, sizeof node) < 0) {
        fprintf(stderr, "test_interop: no node on PATH: run tools/deps.sh\n");
        return -1;
    }
    /* redlock and node-redisson as `make bench` installs them (bench/run.sh):
     * the pinned bench/package-lock.json, npm's own client. */
    struct stat st;
    if ((stat("bench/node_modules/redlock/package.json", &st) != 0 ||
         stat("bench/node_modules/node-redisson/package.json", &st) != 0) &&
        system("npm ci --prefix bench --no-audit --no-fund --loglevel=error >&2") != 0) {
        fprintf(stderr, "test_interop: npm ci --prefix bench failed: redlock or node-redisson "
                "is not there\n");
        return -1;
    }
    th_group_start(&rs, &rc, SUITE_ALARM_S, NULL);
    th_cluster_config(&cfg, &rs, CMD_TIMEOUT_MS, LEASE_MS);
    cfg.on_lease_lost = DM_LOST_WARN;
    dm_store_init(&cfg, &dm_redis_store);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cfg.on_redis_down = DM_DOWN_BLOCK;
    th_test_cleanup();
    return 0;
}

/* ---- in process: the store's half ------------------------------------------ */

/* A record of `name` speaking the setnx protocol. */
static struct dm_rlock *setnx_lock(const char *name)
{
    struct dm_rlock *l = th_lock_get(name);
    assert_int_equal(dm_redis_store.lock_protocol(&l->pub, DM_PROTOCOL_SETNX), 0);
    return l;
}

static int acquire(struct dm_rlock *l, const char *owner, int flags, struct dm_grant *g)
{
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, TH_GRANT_MS);
    return dm_redis_store.acquire(&l->pub, owner, &dl, flags, g);
}

static enum dm_renewal renew_one(struct dm_rlock *l, const char *owner)
{
    struct dm_renew h = { &l->pub, owner, 0 };
    enum dm_renewal res = DM_RENEW_UNKNOWN;
    long long sent;
    dm_redis_store.renew(&h, 1, &res, &sent);
    return res;
}

static void test_a_setnx_grant_is_the_bare_name_holding_its_token(void **state)
{
    (void)state;
    struct dm_rlock *l = setnx_lock("sx_grant");
    char owner[DM_OWNER_MAX], token[DM_OWNER_MAX + 24];
    dm_store_owner(owner, 1);
    struct dm_grant g;
    assert_int_equal(acquire(l, owner, 0, &g), 0);
    assert_int_equal(g.token, 0);           /* no fencing token on this protocol */
    assert_int_equal(g.lease_ms, LEASE_MS);
    snprintf(token, sizeof token, "%s|%lu", owner, g.wait_id);
    redisReply *r = th_cmd(rc, "GET sx_grant");
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    assert_string_equal(r->str, token);
    freeReplyObject(r);
    long long pttl = th_cmd_int(rc, "PTTL sx_grant");
    assert_true(pttl > 0 && pttl <= LEASE_MS);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("sx_grant", DM_KEY_LOCK)), 0);
    /* Another owner (another process's hold) is refused; the holder's
     * renewal keeps it. */
    char other[DM_OWNER_MAX];
    dm_store_owner(other, 2);
    struct dm_grant g2;
    assert_int_equal(acquire(l, other, DM_ACQ_TRY, &g2), EBUSY);
    assert_int_equal(renew_one(l, owner), DM_RENEW_OK);
    assert_int_equal(dm_redis_store.release_hold(&l->pub, owner, g.token, g.wait_id), 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS sx_grant"), 0);
    dm_redis_store.lock_put(&l->pub);
}

static void test_a_setnx_renewal_finding_the_key_gone_or_anothers_is_lost(void **state)
{
    (void)state;
    struct dm_rlock *l = setnx_lock("sx_lost");
    char owner[DM_OWNER_MAX];
    dm_store_owner(owner, 1);
    struct dm_grant g;
    assert_int_equal(acquire(l, owner, 0, &g), 0);
    freeReplyObject(th_cmd(rc, "SET sx_lost someone-else PX 10000"));  /* taken over */
    assert_int_equal(renew_one(l, owner), DM_RENEW_LOST);
    assert_int_equal(dm_redis_store.release_hold(&l->pub, owner, g.token, g.wait_id), EPERM);
    redisReply *r = th_cmd(rc, "GET sx_lost");
    assert_string_equal(r->str, "someone-else");     /* never deleted by us */
    freeReplyObject(r);
    freeReplyObject(th_cmd(rc, "DEL sx_lost"));
    assert_int_equal(acquire(l, owner, 0, &g), 0);
    freeReplyObject(th_cmd(rc, "DEL sx_lost"));       /* expired, evicted */
    assert_int_equal(renew_one(l, owner), DM_RENEW_LOST);
    assert_int_equal(dm_redis_store.release_hold(&l->pub, owner, g.token, g.wait_id), EPERM);
    dm_redis_store.lock_put(&l->pub);
}

static void test_a_hash_at_a_setnx_name_is_never_granted(void **state)
{
    (void)state;
    struct dm_rlock *l = setnx_lock("sx_hash");
    char owner[DM_OWNER_MAX];
    dm_store_owner(owner, 1);
    freeReplyObject(th_cmd(rc, "HSET sx_hash 8f3c:1 1"));   /* a Redisson RLock's layout */
    struct dm_grant g;
    assert_int_equal(acquire(l, owner, DM_ACQ_TRY, &g), EBUSY);
    cfg.on_redis_down = DM_DOWN_ERROR;
    assert_int_equal(acquire(l, owner, 0, &g), EAGAIN);
    assert_int_equal(th_cmd_int(rc, "HGET sx_hash 8f3c:1"), 1);    /* left as it was */
    freeReplyObject(th_cmd(rc, "DEL sx_hash"));
    dm_redis_store.lock_put(&l->pub);
}

/* A record of `name` speaking the redisson protocol. */
static struct dm_rlock *redisson_lock(const char *name)
{
    struct dm_rlock *l = th_lock_get(name);
    assert_int_equal(dm_redis_store.lock_protocol(&l->pub, DM_PROTOCOL_REDISSON), 0);
    return l;
}

static void test_a_redisson_grant_is_one_field_of_the_hash_at_the_bare_name(void **state)
{
    (void)state;
    struct dm_rlock *l = redisson_lock("rs_grant");
    char owner[DM_OWNER_MAX], field[DM_OWNER_MAX + 24];
    dm_store_owner(owner, 1);
    struct dm_grant g;
    assert_int_equal(acquire(l, owner, 0, &g), 0);
    assert_int_equal(g.token, 0);           /* no fencing token on this protocol */
    assert_int_equal(g.lease_ms, LEASE_MS);
    snprintf(field, sizeof field, "%s|%lu", owner, g.wait_id);
    assert_int_equal(th_cmd_int(rc, "HLEN rs_grant"), 1);
    assert_int_equal(th_cmd_int(rc, "HGET rs_grant %s", field), 1);    /* the count: 1 */
    long long pttl = th_cmd_int(rc, "PTTL rs_grant");
    assert_true(pttl > 0 && pttl <= LEASE_MS);
    assert_int_equal(th_cmd_int(rc, "EXISTS %s", th_key("rs_grant", DM_KEY_LOCK)), 0);
    char other[DM_OWNER_MAX];
    dm_store_owner(other, 2);
    struct dm_grant g2;
    assert_int_equal(acquire(l, other, DM_ACQ_TRY, &g2), EBUSY);
    assert_int_equal(renew_one(l, owner), DM_RENEW_OK);
    /* The release deletes the hash and says so where Redisson's waiters
     * listen: "0" on redisson_lock__channel:{NAME}. */
    redisContext *sub = redisConnect(rs.addr, rs.port);
    assert_true(sub && !sub->err);
    freeReplyObject(redisCommand(sub, "SUBSCRIBE redisson_lock__channel:{rs_grant}"));
    assert_int_equal(dm_redis_store.release_hold(&l->pub, owner, g.token, g.wait_id), 0);
    assert_int_equal(th_cmd_int(rc, "EXISTS rs_grant"), 0);
    redisReply *m = NULL;
    assert_int_equal(redisGetReply(sub, (void **)&m), REDIS_OK);
    assert_int_equal(m->type, REDIS_REPLY_ARRAY);
    assert_int_equal(m->elements, 3);
    assert_string_equal(m->element[0]->str, "message");
    assert_string_equal(m->element[1]->str, "redisson_lock__channel:{rs_grant}");
    assert_string_equal(m->element[2]->str, "0");
    freeReplyObject(m);
    redisFree(sub);
    dm_redis_store.lock_put(&l->pub);
}

static void test_a_redisson_renewal_finding_the_field_gone_is_lost(void **state)
{
    (void)state;
    struct dm_rlock *l = redisson_lock("rs_lost");
    char owner[DM_OWNER_MAX];
    dm_store_owner(owner, 1);
    struct dm_grant g;
    assert_int_equal(acquire(l, owner, 0, &g), 0);
    freeReplyObject(th_cmd(rc, "DEL rs_lost"));                 /* expired, and then */
    freeReplyObject(th_cmd(rc, "HSET rs_lost 8f3c:9d2e 1"));     /* a partner took it */
    assert_int_equal(renew_one(l, owner), DM_RENEW_LOST);
    assert_int_equal(dm_redis_store.release_hold(&l->pub, owner, g.token, g.wait_id), EPERM);
    assert_int_equal(th_cmd_int(rc, "HGET rs_lost 8f3c:9d2e"), 1);     /* never deleted by us */
    freeReplyObject(th_cmd(rc, "DEL rs_lost"));
    assert_int_equal(acquire(l, owner, 0, &g), 0);
    freeReplyObject(th_cmd(rc, "DEL rs_lost"));
    assert_int_equal(renew_one(l, owner), DM_RENEW_LOST);
    assert_int_equal(dm_redis_store.release_hold(&l->pub, owner, g.token, g.wait_id), EPERM);
    dm_redis_store.lock_put(&l->pub);
}

static void test_a_string_at_a_redisson_name_is_never_granted(void **state)
{
    (void)state;
    struct dm_rlock *l = redisson_lock("rs_str");
    char owner[DM_OWNER_MAX];
    dm_store_owner(owner, 1);
    freeReplyObject(th_cmd(rc, "SET rs_str partner-token"));    /* a SET NX lock's layout */
    struct dm_grant g;
    assert_int_equal(acquire(l, owner, DM_ACQ_TRY, &g), EBUSY);
    cfg.on_redis_down = DM_DOWN_ERROR;
    assert_int_equal(acquire(l, owner, 0, &g), EAGAIN);
    redisReply *r = th_cmd(rc, "GET rs_str");
    assert_string_equal(r->str, "partner-token");       /* left as it was */
    freeReplyObject(r);
    freeReplyObject(th_cmd(rc, "DEL rs_str"));
    dm_redis_store.lock_put(&l->pub);
}

/* ---- processes: the partners and dmutex-mapped programs ------------------------ */

static char *setnx_config(const char *symbol, const char *name, const char *top)
{
    char entry[256];
    snprintf(entry, sizeof entry, "  { symbol = \"%s\"; name = \"%s\"; protocol = \"setnx\"; }",
             symbol, name);
    return th_config_top(LEASE_MS, top, entry);
}

static pid_t partner_py(const char *out, const char *name, const char *mode, const char *a,
                        const char *b, const char *c)
{
    char *argv[] = { PYTHON, PARTNER_PY, rs.port_text, (char *)name, (char *)mode, (char *)a,
                     (char *)b, (char *)c, NULL };
    return th_child(argv, NULL, out);
}

static pid_t partner_js(const char *out, const char *name, const char *mode, const char *a,
                        const char *b, const char *c)
{
    char *argv[] = { node, PARTNER_JS, rs.port_text, (char *)name, (char *)mode, (char *)a,
                     (char *)b, (char *)c, NULL };
    return th_child(argv, NULL, out);
}

static pid_t interprog_run(const char *out, const char *cfgfile, const char *mode, const char *arg,
                           const char *log)
{
    static struct th_shim_env e;
    char **env = th_shim_env(&e, cfgfile, rs.url, log);
    char *argv[] = { interprog, (char *)mode, (char *)arg, NULL };
    return th_child(argv, env, out);
}

static void assert_lacks(const char *text, const char *needle)
{
    if (strstr(text, needle))
        fail_msg("output says \"%s\":\n%s", needle, text);
}

/* Two dmutex-mapped counter processes (two threads each), a redis-py and
 * a redlock process, one non-atomic counter under one lock name: exact. */
static void test_counter_is_exact_with_redis_py_redlock_and_dmutex_on_one_name(void **state)
{
    (void)state;
    const int procs = 2, threads = 2, iters = 40, partner_iters = 40;
    static struct th_shim_env e;
    char **env = th_shim_env(&e, setnx_config("counter_lock", "interop_ctr", ""), rs.url, "warn");
    char t[16], n[16], pn[16];
    snprintf(t, sizeof t, "%d", threads);
    snprintf(n, sizeof n, "%d", iters);
    snprintf(pn, sizeof pn, "%d", partner_iters);
    freeReplyObject(th_cmd(rc, "DEL interop_ctr interop_n"));
    char *cargv[] = { counter, rs.addr, rs.port_text, "interop_n", t, n, "200", NULL };
    pid_t pid[4];
    char *out[4];
    for (int i = 0; i < 4; i++)
        out[i] = th_out_file();
    for (int i = 0; i < procs; i++)
        pid[i] = th_child(cargv, env, out[i]);
    pid[2] = partner_py(out[2], "interop_ctr", "count", "interop_n", pn, "200");
    pid[3] = partner_js(out[3], "interop_ctr", "count", "interop_n", pn, "200");
    for (int i = 0; i < 4; i++) {
        char *text = th_finish(pid[i], out[i], 0, RUN_MS);
        char done[32];
        snprintf(done, sizeof done, "done %d", i < procs ? threads * iters : partner_iters);
        th_assert_has(text, done);
        assert_lacks(text, "WRONGTYPE");
        assert_lacks(text, "redis error");
        assert_lacks(text, "error:");
        free(text);
    }
    assert_int_equal(th_cmd_int(rc, "GET interop_n"), procs * threads * iters + 2 * partner_iters);
    assert_int_equal(th_cmd_int(rc, "EXISTS interop_ctr"), 0);
}

/* A partner holder killed with its lock: dmutex gets in once its TTL
 * has run out on the server, not before. */
static void test_a_killed_partner_holders_lock_is_taken_after_its_ttl(void **state)
{
    (void)state;
    const long ttl = 1500;
    char ttl_s[16];
    snprintf(ttl_s, sizeof ttl_s, "%ld", ttl);
    char *pout = th_out_file(), *out = th_out_file();
    pid_t p = partner_py(pout, "interop_ttl", "hold", ttl_s, NULL, NULL);
    th_wait_for(pout, "held ", SLACK_MS * 4);
    char *text = th_read_output(pout);
    long long held = th_field_after(text, "held ");
    free(text);
    kill(p, SIGKILL);
    th_wait(p, SLACK_MS);
    th_forget(p);
    assert_true(th_cmd_int(rc, "PTTL interop_ttl") > 0);   /* still the dead partner's */
    pid_t c = interprog_run(out, setnx_config("shared_lock", "interop_ttl", ""), "lock", NULL,
                            "warn");
    text = th_finish(c, out, 0, RUN_MS);
    long long locked = th_field_after(text, "locked 0 ");
    print_message("partner's TTL %ld ms; dmutex got the lock %lld ms after the partner's grant\n",
                  ttl, locked - held);
    /* The key's expiry runs from the SET, which was before "held". */
    assert_true(locked - held >= ttl - 50);
    assert_true(locked - held <= ttl + SLACK_MS);
    free(text);
}

/* A section 3 leases long: dmutex's renewal keeps the key, and polling
 * partners (redis-py and redlock, an attempt every 2 ms) get it only
 * after the unlock. */
static void test_renewal_keeps_a_long_section_from_polling_partners(void **state)
{
    (void)state;
    char *out = th_out_file(), *py = th_out_file(), *js = th_out_file();
    pid_t c = interprog_run(out, setnx_config("shared_lock", "interop_long", ""), "hold", "2000",
                            "warn");
    th_wait_for(out, "locked 0 ", SLACK_MS * 4);
    pid_t p1 = partner_py(py, "interop_long", "poll", "5000", "6000", NULL);
    pid_t p2 = partner_js(js, "interop_long", "poll", "5000", "6000", NULL);
    char *text = th_finish(c, out, 0, RUN_MS);
    long long locked = th_field_after(text, "locked 0 ");
    long long unlocked = th_field_after(text, "unlocked 0 ");
    long long unlocking = th_field_after(text, "unlocking ");
    assert_true(unlocked - locked >= 3 * LEASE_MS);
    assert_lacks(text, "lost");
    char *t1 = th_finish(p1, py, 0, RUN_MS), *t2 = th_finish(p2, js, 0, RUN_MS);
    long long g1 = th_field_after(t1, "got "), g2 = th_field_after(t2, "got ");
    print_message("section %lld ms (lease %ld ms); redis-py got it %lld ms and redlock %lld ms "
                  "after the unlock\n", unlocked - locked, LEASE_MS, g1 - unlocked, g2 - unlocked);
    /* never before the unlock began (its "unlocked" line comes after the
     * DEL, and a partner may be quicker to print) */
    assert_true(g1 >= unlocking);
    assert_true(g2 >= unlocking);
    free(text);
    free(t1);
    free(t2);
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* How soon a dmutex waiter gets a lock a partner released (it retries:
 * the partner publishes nothing), and one a dmutex process released (its
 * release notice wakes the waiter). Printed; bounded by the retry cap. */
static void test_a_dmutex_waiter_gets_a_released_lock_within_a_retry(void **state)
{
    (void)state;
    char *cfgfile = setnx_config("shared_lock", "interop_wake", "");
    long long from_partner[LATENCY_ROUNDS], from_dmutex[LATENCY_ROUNDS];
    for (int i = 0; i < LATENCY_ROUNDS; i++) {
        char *pout = th_out_file(), *out = th_out_file();
        pid_t p = partner_py(pout, "interop_wake", "hold", "10000", "400", NULL);
        th_wait_for(pout, "held ", SLACK_MS * 4);
        pid_t c = interprog_run(out, cfgfile, "lock", NULL, "warn");
        char *pt = th_finish(p, pout, 0, RUN_MS), *ct = th_finish(c, out, 0, RUN_MS);
        /* From just before the release: a grant can come before the
         * partner's "released" line, never before its release began. */
        from_partner[i] = th_field_after(ct, "locked 0 ") - th_field_after(pt, "releasing ");
        free(pt);
        free(ct);

        char *hout = th_out_file(), *wout = th_out_file();
        pid_t h = interprog_run(hout, cfgfile, "hold", "400", "warn");
        th_wait_for(hout, "locked 0 ", SLACK_MS * 4);
        pid_t w = interprog_run(wout, cfgfile, "lock", NULL, "warn");
        char *ht = th_finish(h, hout, 0, RUN_MS), *wt = th_finish(w, wout, 0, RUN_MS);
        from_dmutex[i] = th_field_after(wt, "locked 0 ") - th_field_after(ht, "unlocking ");
        free(ht);
        free(wt);
    }
    qsort(from_partner, LATENCY_ROUNDS, sizeof from_partner[0], cmp_ll);
    qsort(from_dmutex, LATENCY_ROUNDS, sizeof from_dmutex[0], cmp_ll);
    print_message("release -> dmutex waiter's grant over %d rounds: after a redis-py release "
                  "median %lld ms, max %lld ms; after a dmutex release median %lld ms, max "
                  "%lld ms\n", LATENCY_ROUNDS, from_partner[LATENCY_ROUNDS / 2],
                  from_partner[LATENCY_ROUNDS - 1], from_dmutex[LATENCY_ROUNDS / 2],
                  from_dmutex[LATENCY_ROUNDS - 1]);
    /* Retried (or woken), not left to the partner's 10 s TTL: bounds with
     * room for a loaded machine (the figures are the printed ones); and no
     * grant before the release began. */
    assert_true(from_partner[LATENCY_ROUNDS - 1] < 2000);
    assert_true(from_dmutex[LATENCY_ROUNDS - 1] < 2000);
    assert_true(from_partner[0] >= 0 && from_dmutex[0] >= 0);
}

/* A hash at a setnx entry's name (a dmutex- or Redisson-protocol lock):
 * the error names the key and both protocols, and the lock is only had
 * once the hash is gone. */
static void test_a_hash_at_a_setnx_name_is_an_error_naming_both_protocols(void **state)
{
    (void)state;
    freeReplyObject(th_cmd(rc, "HSET interop_hash 8f3c:1 1"));
    freeReplyObject(th_cmd(rc, "PEXPIRE interop_hash 800"));
    long long set = th_now_ms();
    char *out = th_out_file();
    pid_t c = interprog_run(out, setnx_config("shared_lock", "interop_hash", ""), "lock", NULL,
                            "warn");
    char *text = th_finish(c, out, 0, RUN_MS);
    th_assert_has(text, "key interop_hash is a hash");
    th_assert_has(text, "protocol = \"setnx\"");
    th_assert_has(text, "dmutex's layout or Redisson's RLock");
    assert_true(th_field_after(text, "locked 0 ") >= set + 800 - 50);
    free(text);
}

/* A SET NX string at a dmutex entry's key: WRONGTYPE, named. */
static void test_a_string_at_a_dmutex_key_is_an_error_naming_both_protocols(void **state)
{
    (void)state;
    th_redis_declare_fresh(&rs, DM_NAMESPACE_DEFAULT);
    freeReplyObject(th_cmd(rc, "SET %s partner-token PX 10000", th_key("interop_str", DM_KEY_LOCK)));
    char *out = th_out_file();
    char entry[] = "  { symbol = \"shared_lock\"; name = \"interop_str\"; }";
    pid_t c = interprog_run(out, th_config(LEASE_MS, entry), "trylock", NULL, "warn");
    char *text = th_finish(c, out, 0, RUN_MS);
    th_assert_has(text, "trylock EBUSY");
    th_assert_has(text, "WRONGTYPE dmutex:{interop_str} holds a string");
    th_assert_has(text, "protocol \"setnx\"");
    th_assert_has(text, "protocol = \"dmutex\"");
    free(text);
    freeReplyObject(th_cmd(rc, "DEL %s", th_key("interop_str", DM_KEY_LOCK)));
}

/* Another client takes the key over during a section (an operator's DEL
 * and a partner's SET NX): the renewal finds it another's, the lease is
 * lost (on_lease_lost = "warn": told, and unlock says EPERM; "abort": the
 * process stops). */
static void test_a_setnx_key_taken_over_is_a_lost_lease(void **state)
{
    (void)state;
    for (int abort_on = 0; abort_on < 2; abort_on++) {
        char name[32];
        snprintf(name, sizeof name, "interop_lost%d", abort_on);
        char *out = th_out_file();
        pid_t c = interprog_run(out, setnx_config("shared_lock", name, abort_on ? ""
                                : "on_lease_lost = \"warn\";\n"), "hold", "1500", "warn");
        th_wait_for(out, "locked 0 ", SLACK_MS * 4);
        freeReplyObject(th_cmd(rc, "SET %s partner-token PX 10000", name));
        int st = th_wait_end(c, RUN_MS, NULL, NULL);
        char *text = th_read_output(out);
        th_assert_has(text, "lost the lease of lock");
        if (abort_on) {
            if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
                fail_msg("expected an abort; status %d:\n%s", st, text);
        } else {
            th_assert_has(text, "unlocked EPERM");
        }
        redisReply *r = th_cmd(rc, "GET %s", name);
        assert_string_equal(r->str, "partner-token");    /* the release deleted nothing */
        freeReplyObject(r);
        free(text);
    }
}

/* `dmutex ls -c CFG --json`'s object of lock `name` (its line), or "". */
static void ls_row(const char *cfgfile, const char *name, char *row, size_t len)
{
    char out[16384], want[300];
    th_sh_out(out, sizeof out, TH_BUILD "/dmutex ls -c %s -r %s --json 2>&1", cfgfile, rs.url);
    snprintf(want, sizeof want, "{\"name\": \"%s\",", name);
    const char *at = strstr(out, want);
    snprintf(row, len, "%.*s", at ? (int)strcspn(at, "\n") : 0, at ? at : "");
}

/* Waits (5 s at most: the record is written by the holder's own thread,
 * soon after its lock) for ls's row of `name` to show the mapped process
 * c as its holder; fails naming the row otherwise. */
static void ls_until_held_by(const char *cfgfile, const char *name, pid_t c)
{
    char host[256] = "", want[600], row[4096];
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "\"who\": \"%s:%ld interprog (interprog)\"", host, (long)c);
    for (int i = 0; i < 50; i++) {
        ls_row(cfgfile, name, row, sizeof row);
        if (strstr(row, want))
            break;
        usleep(100000);
    }
    if (!strstr(row, want) || !strstr(row, "\"state\": \"held\""))
        fail_msg("dmutex ls: no %s in \"%s\"", want, row);
}

/* dmutex ls lists the config's setnx locks (no scan finds a bare key): a
 * partner's holder as the partner wrote it, a dmutex holder as its
 * process, a key of another type as "other". */
static void test_dmutex_ls_shows_setnx_locks_and_their_holders(void **state)
{
    (void)state;
    char *cfgfile = setnx_config("shared_lock", "interop_ls", "");
    char *pout = th_out_file(), row[4096];
    pid_t p = partner_py(pout, "interop_ls", "hold", "20000", NULL, NULL);
    th_wait_for(pout, "held ", SLACK_MS * 4);
    redisReply *v = th_cmd(rc, "GET interop_ls");
    assert_int_equal(v->type, REDIS_REPLY_STRING);
    char want[512];
    snprintf(want, sizeof want, "\"protocol\": \"setnx\", \"state\": \"held\", \"holder\": "
             "\"%s\", \"who\": null", v->str);
    freeReplyObject(v);
    ls_row(cfgfile, "interop_ls", row, sizeof row);
    if (!strstr(row, want))
        fail_msg("dmutex ls: no %s in \"%s\"", want, row);
    kill(p, SIGKILL);
    th_wait(p, SLACK_MS);
    th_forget(p);
    freeReplyObject(th_cmd(rc, "DEL interop_ls"));

    char *out = th_out_file();
    pid_t c = interprog_run(out, cfgfile, "hold", "4000", "warn");
    th_wait_for(out, "locked 0 ", SLACK_MS * 4);
    ls_until_held_by(cfgfile, "interop_ls", c);
    free(th_finish(c, out, 0, RUN_MS));
    ls_row(cfgfile, "interop_ls", row, sizeof row);
    if (!strstr(row, "\"protocol\": \"setnx\", \"state\": \"free\""))
        fail_msg("dmutex ls after the unlock: \"%s\"", row);
    freeReplyObject(th_cmd(rc, "HSET interop_ls 8f3c:1 1"));
    ls_row(cfgfile, "interop_ls", row, sizeof row);
    if (!strstr(row, "\"state\": \"other\""))
        fail_msg("dmutex ls with a hash at the setnx name: \"%s\"", row);
    freeReplyObject(th_cmd(rc, "DEL interop_ls"));
}

/* ---- the redisson protocol against node-redisson ------------------------------- */

static char *redisson_config(const char *symbol, const char *name, long lease_ms, const char *top)
{
    char entry[256];
    snprintf(entry, sizeof entry, "  { symbol = \"%s\"; name = \"%s\"; protocol = \"redisson\"; }",
             symbol, name);
    return th_config_top(lease_ms, top, entry);
}

static pid_t redisson_js(const char *out, const char *name, const char *mode, const char *a,
                         const char *b, const char *c)
{
    char *argv[] = { node, REDISSON_JS, rs.port_text, (char *)name, (char *)mode, (char *)a,
                     (char *)b, (char *)c, NULL };
    return th_child(argv, NULL, out);
}

/* Two dmutex-mapped counter processes (two threads each) and two
 * node-redisson processes (each section a reentrant hold: count 2 in its
 * field), one non-atomic counter under one lock name: exact. */
static void test_counter_is_exact_with_node_redisson_and_dmutex_on_one_name(void **state)
{
    (void)state;
    const int procs = 2, threads = 2, iters = 30, partner_iters = 30;
    static struct th_shim_env e;
    char **env = th_shim_env(&e, redisson_config("counter_lock", "rs_ctr", LEASE_MS, ""),
                             rs.url, "warn");
    char t[16], n[16], pn[16];
    snprintf(t, sizeof t, "%d", threads);
    snprintf(n, sizeof n, "%d", iters);
    snprintf(pn, sizeof pn, "%d", partner_iters);
    freeReplyObject(th_cmd(rc, "DEL rs_ctr rs_n"));
    char *cargv[] = { counter, rs.addr, rs.port_text, "rs_n", t, n, "200", NULL };
    pid_t pid[4];
    char *out[4];
    for (int i = 0; i < 4; i++)
        out[i] = th_out_file();
    for (int i = 0; i < procs; i++)
        pid[i] = th_child(cargv, env, out[i]);
    for (int i = procs; i < 4; i++)
        pid[i] = redisson_js(out[i], "rs_ctr", "count", "rs_n", pn, "200");
    for (int i = 0; i < 4; i++) {
        char *text = th_finish(pid[i], out[i], 0, RUN_MS);
        char done[32];
        snprintf(done, sizeof done, "done %d", i < procs ? threads * iters : partner_iters);
        th_assert_has(text, done);
        if (i >= procs)
            th_assert_has(text, "nested 2");        /* Redisson's own reentrancy */
        assert_lacks(text, "WRONGTYPE");
        assert_lacks(text, "redis error");
        assert_lacks(text, "error:");
        free(text);
    }
    assert_int_equal(th_cmd_int(rc, "GET rs_n"), procs * threads * iters + 2 * partner_iters);
    assert_int_equal(th_cmd_int(rc, "EXISTS rs_ctr"), 0);
}

/* A dmutex process's nested hold of a recursive mutex is one field of
 * count 1 on the wire (the nesting is counted in the process), and a
 * node-redisson waiter gets the lock only after the outer unlock. */
static void test_a_nested_dmutex_hold_is_one_field_of_count_one(void **state)
{
    (void)state;
    char *out = th_out_file(), *js = th_out_file();
    pid_t c = interprog_run(out, redisson_config("nested_lock", "rs_nest", LEASE_MS, ""),
                            "nested", "800", "warn");
    th_wait_for(out, "nested 0 ", SLACK_MS * 4);
    redisReply *r = th_cmd(rc, "HGETALL rs_nest");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);                   /* one field */
    assert_string_equal(r->element[1]->str, "1");       /* its count */
    freeReplyObject(r);
    pid_t p = redisson_js(js, "rs_nest", "wait", NULL, NULL, NULL);
    char *text = th_finish(c, out, 0, RUN_MS), *pt = th_finish(p, js, 0, RUN_MS);
    assert_true(th_field_after(pt, "got ") >= th_field_after(text, "unlocking "));
    free(text);
    free(pt);
}

/* How soon a waiter gets a lock the other side released: a dmutex waiter
 * after a node-redisson unlock (its PUBLISH "0" on redisson_lock__channel:
 * {NAME} wakes dmutex's subscription), and a node-redisson waiter after a
 * dmutex unlock (redisson_release.lua's publish). The holder's lease is
 * long (node-redisson's 30 s; dmutex's WAKE_LEASE_MS), so a waiter that
 * only woke by a timeout would show it; printed, and bounded by a few
 * round trips. */
static void test_each_sides_waiter_is_woken_by_the_other_sides_release(void **state)
{
    (void)state;
    char *cfgfile = redisson_config("shared_lock", "rs_wake", WAKE_LEASE_MS, "");
    long long to_dmutex[WAKE_ROUNDS], to_node[WAKE_ROUNDS];
    for (int i = 0; i < WAKE_ROUNDS; i++) {
        char *pout = th_out_file(), *out = th_out_file();
        pid_t p = redisson_js(pout, "rs_wake", "hold", "400", NULL, NULL);
        th_wait_for(pout, "held ", SLACK_MS * 4);
        pid_t c = interprog_run(out, cfgfile, "lock", NULL, "warn");
        char *pt = th_finish(p, pout, 0, RUN_MS), *ct = th_finish(c, out, 0, RUN_MS);
        /* From the unlock call: its reply and a DEL of its latch come
         * before "released", and may well come after the waiter's grant. */
        to_dmutex[i] = th_field_after(ct, "locked 0 ") - th_field_after(pt, "unlocking ");
        free(pt);
        free(ct);

        char *hout = th_out_file(), *wout = th_out_file();
        /* Long enough for node to start and subscribe on a loaded machine. */
        pid_t h = interprog_run(hout, cfgfile, "hold", "1500", "warn");
        th_wait_for(hout, "locked 0 ", SLACK_MS * 4);
        pid_t w = redisson_js(wout, "rs_wake", "wait", NULL, NULL, NULL);
        char *ht = th_finish(h, hout, 0, RUN_MS), *wt = th_finish(w, wout, 0, RUN_MS);
        /* Waiting before the unlock: the wake is the release's, not its start. */
        assert_true(th_field_after(wt, "waiting ") < th_field_after(ht, "unlocked 0 "));
        to_node[i] = th_field_after(wt, "got ") - th_field_after(ht, "unlocking ");
        free(ht);
        free(wt);
    }
    qsort(to_dmutex, WAKE_ROUNDS, sizeof to_dmutex[0], cmp_ll);
    qsort(to_node, WAKE_ROUNDS, sizeof to_node[0], cmp_ll);
    print_message("release -> waiter's grant over %d rounds: node-redisson unlock -> dmutex "
                  "waiter median %lld ms, max %lld ms; dmutex unlock -> node-redisson waiter "
                  "median %lld ms, max %lld ms (holders' leases 30000 and %ld ms)\n",
                  WAKE_ROUNDS, to_dmutex[WAKE_ROUNDS / 2], to_dmutex[WAKE_ROUNDS - 1],
                  to_node[WAKE_ROUNDS / 2], to_node[WAKE_ROUNDS - 1], WAKE_LEASE_MS);
    /* Woken by the release, not by DM_WAIT_CAP_MS's retry (a median of
     * half of it) nor the leases: bounds with room for a loaded machine
     * (the figures are the printed ones); never before the unlock began. */
    assert_true(to_dmutex[WAKE_ROUNDS / 2] < DM_WAIT_CAP_MS / 4);
    assert_true(to_node[WAKE_ROUNDS / 2] < DM_WAIT_CAP_MS / 4);
    assert_true(to_node[WAKE_ROUNDS - 1] < WAKE_LEASE_MS / 2);
    assert_true(to_dmutex[0] >= 0 && to_node[0] >= 0);
}

/* A node-redisson holder killed with its lock (its watchdog gone with
 * it): dmutex gets in once the lease its watchdog last set has run out,
 * not before. */
static void test_a_killed_node_redisson_holders_lock_is_taken_after_its_lease(void **state)
{
    (void)state;
    char *pout = th_out_file(), *out = th_out_file();
    pid_t p = redisson_js(pout, "rs_kill", "hold", "60000", "1500", NULL);  /* lease 1.5 s */
    th_wait_for(pout, "held ", SLACK_MS * 4);
    kill(p, SIGKILL);
    th_wait(p, SLACK_MS);
    th_forget(p);
    long long killed = th_now_ms(), pttl = th_cmd_int(rc, "PTTL rs_kill");
    assert_true(pttl > 0 && pttl <= 1500);      /* still the dead holder's */
    pid_t c = interprog_run(out, redisson_config("shared_lock", "rs_kill", LEASE_MS, ""), "lock",
                            NULL, "warn");
    char *text = th_finish(c, out, 0, RUN_MS);
    long long locked = th_field_after(text, "locked 0 ");
    print_message("node-redisson holder killed with %lld ms of its 1500 ms lease left; dmutex "
                  "got the lock %lld ms later\n", pttl, locked - killed);
    assert_true(locked - killed >= pttl - 50);
    assert_true(locked - killed <= pttl + SLACK_MS);
    free(text);
}

/* A dmutex section of 2 s under a 600 ms lease, against a node-redisson
 * waiter whose own lease (lockWatchdogTimeout) is 1 s: dmutex's renewal
 * keeps the hash past both, and the waiter gets it only after the unlock. */
static void test_a_dmutex_holders_lease_is_renewed_past_the_partners(void **state)
{
    (void)state;
    char *out = th_out_file(), *js = th_out_file();
    pid_t c = interprog_run(out, redisson_config("shared_lock", "rs_long", LEASE_MS, ""), "hold",
                            "2000", "warn");
    th_wait_for(out, "locked 0 ", SLACK_MS * 4);
    pid_t p = redisson_js(js, "rs_long", "wait", "1000", NULL, NULL);
    char *text = th_finish(c, out, 0, RUN_MS), *pt = th_finish(p, js, 0, RUN_MS);
    long long locked = th_field_after(text, "locked 0 ");
    long long unlocked = th_field_after(text, "unlocked 0 ");
    long long got = th_field_after(pt, "got ");
    print_message("section %lld ms (dmutex lease %ld ms, node-redisson's 1000 ms); the "
                  "node-redisson waiter got it %lld ms after the unlock\n", unlocked - locked,
                  LEASE_MS, got - unlocked);
    assert_true(unlocked - locked >= 3 * LEASE_MS);
    assert_lacks(text, "lost");
    assert_true(got >= th_field_after(text, "unlocking "));   /* not before the unlock began */
    free(text);
    free(pt);
}

/* A SET NX string at a redisson entry's name: the error names the key and
 * both protocols, and the lock is only had once the string is gone. */
static void test_a_string_at_a_redisson_name_is_an_error_naming_both_protocols(void **state)
{
    (void)state;
    freeReplyObject(th_cmd(rc, "SET rs_wrong partner-token PX 800"));
    long long set = th_now_ms();
    char *out = th_out_file();
    pid_t c = interprog_run(out, redisson_config("shared_lock", "rs_wrong", LEASE_MS, ""), "lock",
                            NULL, "warn");
    char *text = th_finish(c, out, 0, RUN_MS);
    th_assert_has(text, "key rs_wrong is a string, not the hash of a Redisson RLock");
    th_assert_has(text, "protocol = \"redisson\"");
    th_assert_has(text, "protocol \"setnx\"");
    assert_true(th_field_after(text, "locked 0 ") >= set + 800 - 50);
    free(text);
}

/* dmutex ls lists a redisson entry's lock: a node-redisson holder as its
 * field, with its hold count; a dmutex holder as its process. */
static void test_dmutex_ls_shows_redisson_locks_and_their_holders(void **state)
{
    (void)state;
    char *cfgfile = redisson_config("shared_lock", "rs_ls", LEASE_MS, "");
    char *pout = th_out_file(), row[4096], want[600];
    pid_t p = redisson_js(pout, "rs_ls", "hold", "60000", "30000", NULL);
    th_wait_for(pout, "held ", SLACK_MS * 4);
    redisReply *v = th_cmd(rc, "HGETALL rs_ls");
    assert_int_equal(v->type, REDIS_REPLY_ARRAY);
    assert_true(v->elements >= 2);
    snprintf(want, sizeof want, "\"protocol\": \"redisson\", \"state\": \"held\", \"holder\": "
             "\"%s\", \"who\": null", v->element[0]->str);
    freeReplyObject(v);
    ls_row(cfgfile, "rs_ls", row, sizeof row);
    if (!strstr(row, want) || !strstr(row, "\"holds\": 1,"))
        fail_msg("dmutex ls: no %s and holds 1 in \"%s\"", want, row);
    kill(p, SIGKILL);
    th_wait(p, SLACK_MS);
    th_forget(p);
    freeReplyObject(th_cmd(rc, "DEL rs_ls"));
    char *out = th_out_file();
    pid_t c = interprog_run(out, cfgfile, "hold", "4000", "warn");
    th_wait_for(out, "locked 0 ", SLACK_MS * 4);
    ls_until_held_by(cfgfile, "rs_ls", c);
    free(th_finish(c, out, 0, RUN_MS));
}

#define T(f) cmocka_unit_test_teardown(f, teardown)
int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_a_setnx_grant_is_the_bare_name_holding_its_token),
        T(test_a_setnx_renewal_finding_the_key_gone_or_anothers_is_lost),
        T(test_a_hash_at_a_setnx_name_is_never_granted),
        T(test_counter_is_exact_with_redis_py_redlock_and_dmutex_on_one_name),
        T(test_a_killed_partner_holders_lock_is_taken_after_its_ttl),
        T(test_renewal_keeps_a_long_section_from_polling_partners),
        T(test_a_dmutex_waiter_gets_a_released_lock_within_a_retry),
        T(test_a_hash_at_a_setnx_name_is_an_error_naming_both_protocols),
        T(test_a_string_at_a_dmutex_key_is_an_error_naming_both_protocols),
        T(test_a_setnx_key_taken_over_is_a_lost_lease),
        T(test_dmutex_ls_shows_setnx_locks_and_their_holders),
        T(test_a_redisson_grant_is_one_field_of_the_hash_at_the_bare_name),
        T(test_a_redisson_renewal_finding_the_field_gone_is_lost),
        T(test_a_string_at_a_redisson_name_is_never_granted),
        T(test_counter_is_exact_with_node_redisson_and_dmutex_on_one_name),
        T(test_a_nested_dmutex_hold_is_one_field_of_count_one),
        T(test_each_sides_waiter_is_woken_by_the_other_sides_release),
        T(test_a_killed_node_redisson_holders_lock_is_taken_after_its_lease),
        T(test_a_dmutex_holders_lease_is_renewed_past_the_partners),
        T(test_a_string_at_a_redisson_name_is_an_error_naming_both_protocols),
        T(test_dmutex_ls_shows_redisson_locks_and_their_holders),
    };
    return cmocka_run_group_tests(tests, group_setup, th_group_teardown);
}
