/* test_rwlocks: cluster-wide read-write locks (rwlocks entries).
 *
 * First the protocol in process (shim/redis/lock.h with DM_ACQ_READ, no
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "checker.h"
#include "lock.h"
#include "config.h"
#include "harness.h"

#define RWPROG          TH_BUILD "/tests/progs/rwprog"
#define GROUP_ALARM_S   300
#define LEASE_MS        1000L   /* the in-process protocol tests' lease */
#define PROG_LEASE_MS   2000L   /* the programs' (cfg_text) */
#define SLACK_MS        5000L   /* how late a result may be on a loaded machine */
#define RUN_MS          60000L  /* a scenario's programs end by then */
#define POLL_MS         5
#define MIX_WRITES      "40"    /* per machine */
#define MIX_READERS     "4"     /* reader threads per machine */
#define MIX_READS       "60"    /* per reader thread */
#define MIX_HOLD_US     "3000"
#define STREAM_MS       "15000" /* the reader stream of the starvation test */
#define STREAM_HOLD_US  "300000"
#define STARVE_HOLDS    5       /* a writer under that stream waits at most this many holds */
#define STARVE_WRITERS  3       /* one after the other, each within the bound */
#define TIMED_MS        700
#define KILLED_SLACK_MS 700     /* a writer gets in this soon after a killed holder's lease */

static struct th_checker chk;
static struct th_net net;
static struct th_redis ls, ds;          /* the lock server, the data server */
static redisContext *lc, *dc;
static struct dm_config cfg;            /* the in-process tests' (dm_store_init keeps it) */
static char shim_path[PATH_MAX], prog_path[PATH_MAX];
static char prefix[32];
static int tseq;

static const char cfg_text[] =
    "lease_ms = 2000;\n"
    "rwlocks = (\n"
    "  { symbol = \"routes_lock\"; },\n"
    "  { init_site = \"rw_new\"; name = \"rw_heap\"; }\n"
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

/* rwprog MODE ARGS... (NULL-terminated) on machine `ns` (NULL: here),
 * under the shim with the group's config (shim 0: without it), output to
 * `out`. */
static pid_t prog_on(const char *ns, int shim, const char *out, const char *mode, va_list ap)
{
    static char *cfgf;
    if (!cfgf)
        cfgf = th_write_file(".cfg", "%s", cfg_text);   /* the group's: removed at its end */
    static struct th_shim_env e;
    char **env = shim ? th_shim_env(&e, cfgf, ls.url, "info") : NULL;
    const char *args[16] = { mode, ds.addr, ds.port_text, prefix };
    int k = 4;
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && k < 15;)
        args[k++] = a;
    args[k] = NULL;
    if (ns && net.up)
        return th_checker_prog(&chk, NULL, &net, ns, env, prog_path, args, out);
    char *argv[17] = { prog_path };
    for (int i = 0; i <= k; i++)
        argv[i + 1] = (char *)args[i];
    return th_child(argv, env, out);
}

static pid_t prog(const char *ns, const char *out, const char *mode, ...)
{
    va_list ap;
    va_start(ap, mode);
    pid_t p = prog_on(ns, 1, out, mode, ap);
    va_end(ap);
    return p;
}

static pid_t prog_unshimmed(const char *out, const char *mode, ...)
{
    va_list ap;
    va_start(ap, mode);
    pid_t p = prog_on(NULL, 0, out, mode, ap);
    va_end(ap);
    return p;
}

static const char *machine(int i)
{
    return net.up ? net.ns[i] : NULL;
}

static char *finish(pid_t p, const char *out)
{
    return th_finish(p, out, 0, RUN_MS);
}

static long long data_int(const char *what)
{
    return th_cmd_int(dc, "GET %s:%s", prefix, what);
}

/* ---- the protocol, in process --------------------------------------------- */

static struct dm_rlock *rw_lock_get(const char *name)
{
    struct dm_rlock *l = th_lock_get(name);
    dm_rlock_rwlock(l);
    return l;
}

static int acquire(struct dm_rlock *l, const char *who, int flags, long ms,
                   struct dm_grant *g)
{
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, ms);
    return dm_rlock_acquire(l, who, &dl, flags, g);
}

struct writer_arg {
    struct dm_rlock *l;
    char who[DM_OWNER_MAX];
    struct dm_grant g;
    int rc;
    int idx;
};

static void *writer_thread(void *p)
{
    struct writer_arg *w = p;
    w->rc = acquire(w->l, w->who, 0, 30000, &w->g);
    return NULL;
}

/* Waits until `member` (an owner) heads the write queue of `l`. */
static void wait_queued(struct dm_rlock *l, const char *owner)
{
    long long end = th_now_ms() + SLACK_MS;
    for (;;) {
        redisReply *r = th_cmd(lc, "LINDEX %s 0", th_key(l->name, DM_KEY_QUEUE));
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
    struct dm_rlock *l = rw_lock_get("rw_share");
    char a[DM_OWNER_MAX], b[DM_OWNER_MAX], d[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    dm_store_owner(b, 2);
    dm_store_owner(d, 4);
    struct dm_grant ga, gb, gd;
    assert_int_equal(acquire(l, a, DM_ACQ_READ, TH_GRANT_MS, &ga), 0);
    assert_int_equal(acquire(l, b, DM_ACQ_READ | DM_ACQ_TRY, TH_GRANT_MS, &gb), 0);
    assert_true(gb.token > ga.token);                   /* every grant a token of its own */
    assert_int_equal(th_cmd_int(lc, "ZCARD %s", th_key(l->name, DM_KEY_READERS)), 2);
    char c[DM_OWNER_MAX];
    dm_store_owner(c, 3);
    assert_int_equal(acquire(l, c, DM_ACQ_TRY, TH_GRANT_MS, &gd), EBUSY);

    /* static: a failed assertion leaves the thread running on it */
    static struct writer_arg w;
    w = (struct writer_arg){ .l = l };
    dm_store_owner(w.who, 3);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer_thread, &w), 0);
    wait_queued(l, w.who);
    /* A writer waits: a new reader is refused though readers hold. */
    assert_int_equal(acquire(l, d, DM_ACQ_READ | DM_ACQ_TRY, TH_GRANT_MS, &gd), EBUSY);
    assert_int_equal(dm_rlock_release(l, a, ga.token), 0);
    assert_int_equal(dm_rlock_release(l, b, gb.token), 0);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    assert_true(w.g.token > gb.token);
    assert_int_equal(acquire(l, d, DM_ACQ_READ | DM_ACQ_TRY, TH_GRANT_MS, &gd), EBUSY);
    assert_int_equal(dm_rlock_release(l, w.who, w.g.token), 0);
    assert_int_equal(acquire(l, d, DM_ACQ_READ | DM_ACQ_TRY, TH_GRANT_MS, &gd), 0);
    assert_int_equal(dm_rlock_release(l, d, gd.token), 0);
    dm_rlock_put(l);
}

/* Waits until the write queue of `l` has `n` waiters. */
static void wait_queue_len(struct dm_rlock *l, long long n)
{
    long long end = th_now_ms() + SLACK_MS;
    while (th_cmd_int(lc, "LLEN %s", th_key(l->name, DM_KEY_QUEUE)) < n) {
        if (th_now_ms() > end)
            fail_msg("the queue of %s never had %lld waiters", l->name, n);
        usleep(POLL_MS * 1000);
    }
}

#define FIFO_WRITERS 3

static int fifo_order[FIFO_WRITERS], fifo_n;

static void *fifo_writer(void *p)
{
    struct writer_arg *w = p;
    w->rc = acquire(w->l, w->who, 0, 30000, &w->g);
    if (w->rc == 0) {
        fifo_order[__atomic_fetch_add(&fifo_n, 1, __ATOMIC_RELAXED)] = w->idx;
        dm_rlock_release(w->l, w->who, w->g.token);
    }
    return NULL;
}

/* Writers queued behind a reader get the lock in the order they queued
 * (FIFO, as a fair mutex's waiters), each with a bigger token. */
static void test_writers_queued_behind_a_reader_get_it_in_order(void **s)
{
    (void)s;
    struct dm_rlock *l = rw_lock_get("rw_fifo");
    char r[DM_OWNER_MAX];
    dm_store_owner(r, 1);
    struct dm_grant gr;
    assert_int_equal(acquire(l, r, DM_ACQ_READ, TH_GRANT_MS, &gr), 0);
    static struct writer_arg w[FIFO_WRITERS];  /* static: see above */
    pthread_t t[FIFO_WRITERS];
    fifo_n = 0;
    for (int i = 0; i < FIFO_WRITERS; i++) {
        w[i] = (struct writer_arg){ .l = l, .idx = i };
        dm_store_owner(w[i].who, 10 + i);
        assert_int_equal(pthread_create(&t[i], NULL, fifo_writer, &w[i]), 0);
        wait_queue_len(l, i + 1);
    }
    assert_int_equal(dm_rlock_release(l, r, gr.token), 0);
    for (int i = 0; i < FIFO_WRITERS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < FIFO_WRITERS; i++) {
        assert_int_equal(w[i].rc, 0);
        assert_int_equal(fifo_order[i], i);
        if (i > 0)
            assert_true(w[i].g.token > w[i - 1].g.token);
    }
    dm_rlock_put(l);
}

static void test_read_release_is_idempotent_and_an_expired_read_hold_is_lost(void **s)
{
    (void)s;
    struct dm_rlock *l = rw_lock_get("rw_release");
    char a[DM_OWNER_MAX], b[DM_OWNER_MAX], c[DM_OWNER_MAX];
    dm_store_owner(a, 1);
    dm_store_owner(b, 2);
    dm_store_owner(c, 3);
    struct dm_grant ga, gb, gc;
    assert_int_equal(acquire(l, a, DM_ACQ_READ, TH_GRANT_MS, &ga), 0);
    assert_int_equal(dm_rlock_release(l, a, ga.token), 0);
    assert_int_equal(dm_rlock_release(l, a, ga.token), 0);   /* a retry: released */
    /* b's read hold is never renewed: it expires, and a writer gets in. */
    assert_int_equal(acquire(l, b, DM_ACQ_READ, TH_GRANT_MS, &gb), 0);
    long long t0 = th_now_ms();
    assert_int_equal(acquire(l, c, 0, LEASE_MS + SLACK_MS, &gc), 0);
    assert_true(th_now_ms() - t0 >= LEASE_MS / 2);
    assert_int_equal(dm_rlock_release(l, b, gb.token), EPERM);
    assert_int_equal(dm_rlock_release(l, b, gb.token), EPERM);
    assert_int_equal(dm_rlock_release(l, c, gc.token), 0);
    dm_rlock_put(l);
}

/* ---- processes under the shim ---------------------------------------------- */

/* The test: on each machine a writer updates PREFIX:a and PREFIX:b
 * together under the write lock while readers check under the read lock
 * that they are equal. No torn read, no writer finding a reader inside,
 * both counters exact; readers of both processes were inside together. */
static void test_two_machines_readers_never_see_a_torn_write_and_share_the_lock(void **s)
{
    (void)s;
    char *out[2];
    pid_t p[2];
    for (int i = 0; i < 2; i++) {
        out[i] = th_out_file();
        p[i] = prog(machine(i), out[i], "mix", MIX_WRITES, MIX_READERS, MIX_READS, MIX_HOLD_US,
                    NULL);
    }
    long maxprocs = 0, maxreaders = 0, maxinside = 0;
    for (int i = 0; i < 2; i++) {
        char *text = finish(p[i], out[i]);
        th_assert_has(text, "torn 0 inwrite 0 ");
        long long mp = th_field_after(text, "maxprocs "), mr = th_field_after(text, "maxreaders ");
        long long mi = th_field_after(text, "maxinside ");
        maxprocs = mp > maxprocs ? mp : maxprocs;
        maxreaders = mr > maxreaders ? mr : maxreaders;
        maxinside = mi > maxinside ? mi : maxinside;
        free(text);
    }
    long long writes = 2 * atol(MIX_WRITES);
    assert_int_equal(data_int("a"), writes);
    assert_int_equal(data_int("b"), writes);
    measured("%lld writes, %ld reads on two machines: 0 torn reads; at most %ld readers inside "
             "together (%ld processes, %ld readers of one process)", writes,
             2 * atol(MIX_READERS) * atol(MIX_READS), maxinside, maxprocs, maxreaders);
    assert_true(maxprocs >= 2);         /* readers of both processes overlapped */
}

/* A continuous stream of readers on both machines (their read holds
 * overlap, so without writer preference the read hold would never drop):
 * each of a few writers in turn gets in within a few read-hold times (one
 * hold, the drain, is what it costs; the rest is slack for a loaded
 * machine), long before the stream ends. A reader let in past a queued
 * writer, by the script or by the shim, makes some writer wait for the
 * readers of both processes to pause together: seconds, or the stream. */
static void test_writer_is_not_starved_by_a_stream_of_readers(void **s)
{
    (void)s;
    char *out[2];
    pid_t p[2];
    for (int i = 0; i < 2; i++) {
        out[i] = th_out_file();
        p[i] = prog(machine(i), out[i], "stream", STREAM_MS, "4", STREAM_HOLD_US, NULL);
    }
    for (int i = 0; i < 2; i++)
        th_wait_for(out[i], "reading", RUN_MS);
    long long hold_ms = atol(STREAM_HOLD_US) / 1000, worst = 0;
    char waits[128] = "";
    for (int w = 0; w < STARVE_WRITERS; w++) {
        char *wout = th_out_file();
        char *text = finish(prog(machine(w % 2), wout, "write1", NULL), wout);
        long long waited = th_field_after(text, "waited ");
        th_assert_has(text, "rc 0");
        free(text);
        worst = waited > worst ? waited : worst;
        snprintf(waits + strlen(waits), sizeof waits - strlen(waits), "%s%lld", w ? ", " : "",
                 waited);
    }
    for (int i = 0; i < 2; i++)
        free(finish(p[i], out[i]));
    measured("%d writers under a stream of 8 readers on two machines (each holding %lld ms) "
             "waited %s ms", STARVE_WRITERS, hold_ms, waits);
    if (worst > STARVE_HOLDS * hold_ms)
        fail_msg("a writer waited %lld ms: more than %d read holds of %lld ms", worst,
                 STARVE_HOLDS, hold_ms);
}

/* Another process's try: EBUSY while a writer holds (for readers and
 * writers), and for a writer while a reader holds; a reader shares. */
static void test_try_variants_are_ebusy_across_processes(void **s)
{
    (void)s;
    const char *mode[2] = { "wr", "rd" };
    const char *want_rd[2] = { "rc EBUSY", "rc 0" };
    for (int m = 0; m < 2; m++) {
        char *go = th_go_file(), *hout = th_out_file();
        pid_t h = prog(machine(0), hout, "hold", mode[m], go, NULL);
        th_wait_for(hout, "held 0", RUN_MS);
        char *o1 = th_out_file(), *o2 = th_out_file();
        char *rd = finish(prog(machine(1), o1, "try", "rd", NULL), o1);
        char *wr = finish(prog(machine(1), o2, "try", "wr", NULL), o2);
        th_assert_has(rd, want_rd[m]);
        th_assert_has(wr, "rc EBUSY");
        if (m == 1) {
            /* dmutex ls shows the read hold */
            char cmd[512], line[512], all[4096] = "";
            snprintf(cmd, sizeof cmd, TH_BUILD "/dmutex ls -r %s 2>&1", ls.url);
            FILE *f = popen(cmd, "r");
            assert_non_null(f);
            while (fgets(line, sizeof line, f))
                if (strncmp(line, "routes_lock ", 12) == 0)
                    snprintf(all, sizeof all, "%s", line);
            pclose(f);
            th_assert_has(all, " read ");
            th_assert_has(all, " 1 reader ");
            /* and names the reader, from its process's record (written by
             * its own thread soon after the lock) */
            char want[128], got[8192] = "";
            snprintf(want, sizeof want, "    reading ");
            char host[256] = "";
            gethostname(host, sizeof host - 1);
            char who[300];
            snprintf(who, sizeof who, "%s:%ld ", host, (long)h);
            for (int i = 0; i < 50 && !(strstr(got, want) && strstr(got, who)); i++) {
                if (i)
                    usleep(100000);
                th_sh_out(got, sizeof got, TH_BUILD "/dmutex ls -r %s 2>&1", ls.url);
            }
            if (!strstr(got, want) || !strstr(got, who))
                fail_msg("dmutex ls does not name the reader %s:\n%s", who, got);
        }
        free(rd);
        free(wr);
        th_touch(go);
        char *ht = finish(h, hout);
        th_assert_has(ht, "unlocked 0");
        free(ht);
    }
}

/* Timed and clock variants held off by another process return ETIMEDOUT
 * by their deadline (not before it). */
static void test_timed_and_clock_variants_time_out_by_the_deadline(void **s)
{
    (void)s;
    char *go = th_go_file(), *hout = th_out_file();
    pid_t h = prog(machine(0), hout, "hold", "wr", go, NULL);
    th_wait_for(hout, "held 0", RUN_MS);
    const char *variants[4][2] = { { "rd", "realtime" }, { "rd", "monotonic" },
                                   { "wr", "realtime" }, { "wr", "monotonic" } };
    char ms[16];
    snprintf(ms, sizeof ms, "%d", TIMED_MS);
    for (int i = 0; i < 4; i++) {
        char *o = th_out_file();
        char *text = finish(prog(machine(1), o, "timed", variants[i][0], ms, variants[i][1], NULL), o);
        th_assert_has(text, "rc ETIMEDOUT");
        long long el = th_field_after(text, "elapsed ");
        if (el < TIMED_MS - 1 || el > TIMED_MS + SLACK_MS)
            fail_msg("%s %s: ETIMEDOUT after %lld ms for a %d ms deadline", variants[i][0],
                     variants[i][1], el, TIMED_MS);
        free(text);
    }
    th_touch(go);
    free(finish(h, hout));
}

/* A writer that timed out behind a reader leaves the queue: a new reader
 * gets in at once, not when the writer's queue entry would have expired
 * (DM_QUEUE_TTL_MS later). */
static void test_timed_out_writer_no_longer_keeps_readers_out(void **s)
{
    (void)s;
    char *go = th_go_file(), *hout = th_out_file();
    pid_t h = prog(machine(0), hout, "hold", "rd", go, NULL);
    th_wait_for(hout, "held 0", RUN_MS);
    char ms[16];
    snprintf(ms, sizeof ms, "%d", TIMED_MS);
    char *o = th_out_file();
    char *text = finish(prog(machine(1), o, "timed", "wr", ms, "monotonic", NULL), o);
    th_assert_has(text, "rc ETIMEDOUT");
    free(text);
    assert_int_equal(th_cmd_int(lc, "LLEN dmutex:{routes_lock}:queue"), 0);
    char *o2 = th_out_file();
    text = finish(prog(machine(1), o2, "try", "rd", NULL), o2);
    th_assert_has(text, "rc 0");
    free(text);
    th_touch(go);
    free(finish(h, hout));
}

/* Recursive read locking, a reader's wrlock and a writer's relock: the
 * same results with the shim as glibc's alone. */
static void test_recursion_and_self_deadlock_answer_as_glibc(void **s)
{
    (void)s;
    char *o1 = th_out_file(), *o2 = th_out_file();
    char *with = finish(prog(NULL, o1, "glibc", NULL), o1);
    char *without = finish(prog_unshimmed(o2, "glibc", NULL), o2);
    /* the shim's log lines aside */
    char a[2048] = "", b[2048] = "";
    for (char *t = strtok(with, "\n"); t; t = strtok(NULL, "\n"))
        if (!strstr(t, "dmutex["))
            snprintf(a + strlen(a), sizeof a - strlen(a), "%s\n", t);
    for (char *t = strtok(without, "\n"); t; t = strtok(NULL, "\n"))
        snprintf(b + strlen(b), sizeof b - strlen(b), "%s\n", t);
    assert_string_equal(a, b);
    th_assert_has(a, "rd again 0");
    th_assert_has(a, "wr again EDEADLK");
    th_assert_has(a, "clockwr monotonic 0");
    th_assert_has(a, "clockwr cputime EINVAL");
    th_assert_has(a, "tryrd with a writer waiting EBUSY");     /* the kind, honoured */
    th_assert_has(a, "rd past the reader limit EAGAIN");
    th_assert_has(a, "clockwr past deadline 0");           /* tried once, as glibc */
    free(with);
    free(without);
}

/* A holder killed with SIGKILL (a reader, then a writer) releases nothing:
 * its lease ends its hold, and a writer elsewhere gets in then. */
static void test_killed_holder_frees_the_lock_when_its_lease_ends(void **s)
{
    (void)s;
    const char *mode[2] = { "rd", "wr" };
    for (int m = 0; m < 2; m++) {
        char *go = th_go_file(), *hout = th_out_file();
        pid_t h = prog(machine(0), hout, "hold", mode[m], go, NULL);
        th_wait_for(hout, "held 0", RUN_MS);
        kill(h, SIGKILL);
        th_wait(h, RUN_MS);
        th_forget(h);
        char *o = th_out_file();
        char deadline[16];
        snprintf(deadline, sizeof deadline, "%ld", PROG_LEASE_MS + 3 * SLACK_MS);
        char *text = finish(prog(machine(1), o, "timed", "wr", deadline, "monotonic", NULL), o);
        th_assert_has(text, "rc 0");
        long long el = th_field_after(text, "elapsed ");
        measured("a writer got in %lld ms after a %s holder was killed (lease %ld ms)", el,
                 mode[m], PROG_LEASE_MS);
        free(text);
        /* The lease ends the dead hold, and the writer asks again then: not
         * a wait cap (1 s) later. */
        if (el > PROG_LEASE_MS + KILLED_SLACK_MS)
            fail_msg("a writer got in %lld ms after a %s holder was killed: more than the "
                     "lease (%ld ms) + %d ms", el, mode[m], PROG_LEASE_MS, KILLED_SLACK_MS);
    }
}

/* A read hold whose entry is deleted on the server is lost as a mutex's
 * hold is: a writer elsewhere gets in; the reader's process aborts
 * (on_lease_lost = "abort", the default) or, with "warn", logs the loss
 * and its unlock answers EPERM. The holder runs here with a config of its
 * own; the writer on the other machine. */
static void test_lost_read_hold_aborts_or_is_reported_at_unlock(void **s)
{
    (void)s;
    const char *policy[2] = { "abort", "warn" };
    for (int i = 0; i < 2; i++) {
        char *cfgf = th_keep_file(th_write_file(".cfg", "on_lease_lost = \"%s\";\n%s", policy[i],
                                                 cfg_text));
        struct th_shim_env e;
        char **env = th_shim_env(&e, cfgf, ls.url, "info");
        char *go = th_go_file(), *hout = th_out_file();
        char *argv[] = { prog_path, "hold", ds.addr, ds.port_text, prefix, "rd", go, NULL };
        pid_t h = th_child(argv, env, hout);
        th_wait_for(hout, "held 0", RUN_MS);
        freeReplyObject(th_cmd(lc, "DEL dmutex:{routes_lock}:readers"));
        char *o = th_out_file();
        char *text = finish(prog(machine(1), o, "try", "wr", NULL), o);
        th_assert_has(text, "rc 0");
        free(text);
        th_wait_for(hout, "lost the lease of lock routes_lock", RUN_MS);
        if (i == 0) {
            int st = th_wait(h, RUN_MS);
            th_forget(h);
            assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
            continue;
        }
        th_touch(go);
        char *ht = finish(h, hout);
        th_assert_has(ht, "unlocked EPERM");
        free(ht);
    }
}

/* A fork child is a process of its own: its write lock keeps the parent
 * out, and its end lets the parent in. */
static void test_fork_child_holds_the_lock_against_its_parent(void **s)
{
    (void)s;
    char *o = th_out_file();
    char *text = finish(prog(machine(0), o, "fork", NULL), o);
    th_assert_has(text, "parent EBUSY EBUSY");
    th_assert_has(text, "child 0");
    th_assert_has(text, "parent after 0");
    free(text);
}

/* A fork child of a reader: the parent's share is glibc's alone there
 * (its unlock is glibc's answer), the child's own locks are a process's
 * of their own: a write is refused while the parent reads, a read shares
 * with it, and its wrlock gets in once the parent has unlocked. */
static void test_fork_child_of_a_reader_holds_no_share_of_the_parent(void **s)
{
    (void)s;
    char *o = th_out_file();
    char *text = finish(prog(machine(0), o, "forkrd", NULL), o);
    th_assert_has(text, "child unlock 0 trywr EBUSY tryrd 0");
    th_assert_has(text, "parent unlock 0");
    th_assert_has(text, "child wr 0");
    th_assert_has(text, "child 0");
    free(text);
}

/* A process's readers share one cluster read hold: 8 threads inside at
 * once cost one acquire and one release, not 8 of each. */
static void test_local_readers_share_one_round_trip(void **s)
{
    (void)s;
    const int n = 8;
    th_reset_stats(lc);
    char *o = th_out_file();
    char *text = finish(prog(machine(0), o, "share", "8", NULL), o);
    th_assert_has(text, "shared 8");
    free(text);
    long long calls = th_script_calls(lc);
    measured("%d readers inside at once in one process: %lld script calls", n, calls);
    /* acquire + release; a renewal round on a very slow machine at most */
    if (calls < 2 || calls > 3)
        fail_msg("%d local readers made %lld script calls (want 2: one hold)", n, calls);
}

/* A process that exits (its main thread holding a read share) gives the
 * read hold back at exit: the readers set is empty at once, not after
 * the lease. */
static void test_exit_with_a_read_hold_releases_it(void **s)
{
    (void)s;
    char key[128];
    snprintf(key, sizeof key, "dmutex:{routes_lock}:readers");
    char *o = th_out_file();
    char *text = finish(prog(machine(0), o, "exitrd", NULL), o);
    th_assert_has(text, "held 0");
    free(text);
    assert_int_equal(th_cmd_int(lc, "ZCARD %s", key), 0);
}

/* A thread that ends holding the rwlock (it returns from its start
 * routine), for reading or for writing, in a process that then exits:
 * nobody is inside any more, so the exit gives the hold back at once; a
 * writer of another process gets it with a trylock. */
static void test_exit_after_a_holding_thread_ended_releases_its_hold(void **s)
{
    (void)s;
    const char *kinds[] = { "rd", "wr" };
    for (int i = 0; i < 2; i++) {
        char *o = th_out_file();
        char *text = finish(prog(machine(0), o, "ended", kinds[i], NULL), o);
        th_assert_has(text, "thread 0\nthread gone\n");
        free(text);
        long long readers = th_cmd_int(lc, "ZCARD %s", th_key("routes_lock", DM_KEY_READERS));
        long long writer = th_cmd_int(lc, "EXISTS %s", th_key("routes_lock", DM_KEY_LOCK));
        if (readers || writer)
            fail_msg("%s: %lld readers, %lld writer left of a process whose holding thread "
                     "had ended, after it exited", kinds[i], readers, writer);
        o = th_out_file();
        text = finish(prog(machine(1), o, "try", "wr", NULL), o);
        th_assert_has(text, "rc 0");
        free(text);
    }
}

/* pthread_rwlock_rdlock/wrlock are no cancellation points: a thread
 * cancelled while it waits for another process gets the lock, and its
 * cancellation acts at its next cancellation point, after its unlock; the
 * lock is then free here and in the cluster. */
static void test_cancel_during_a_cluster_wait_acts_after_the_lock(void **s)
{
    (void)s;
    const char *mode[2] = { "rd", "wr" };
    for (int m = 0; m < 2; m++) {
        char *go = th_go_file(), *hout = th_out_file();
        pid_t h = prog(machine(1), hout, "hold", "wr", go, NULL);
        th_wait_for(hout, "held 0", RUN_MS);
        char *o = th_out_file();
        char *text = finish(prog(machine(0), o, "cancel", mode[m], go, NULL), o);
        th_assert_has(text, "thread 0");
        th_assert_has(text, "cancelled 1");
        th_assert_has(text, "after 0");
        free(text);
        free(finish(h, hout));
    }
}

/* A read hold kept past several leases is renewed like a write hold: a
 * writer elsewhere stays out until the reader unlocks. */
static void test_read_hold_is_renewed_past_its_lease(void **s)
{
    (void)s;
    char *go = th_go_file(), *hout = th_out_file();
    pid_t h = prog(machine(0), hout, "hold", "rd", go, NULL);
    th_wait_for(hout, "held 0", RUN_MS);
    usleep((useconds_t)(3 * PROG_LEASE_MS * 1000));
    char *o = th_out_file();
    char *text = finish(prog(machine(1), o, "try", "wr", NULL), o);
    th_assert_has(text, "rc EBUSY");
    free(text);
    th_touch(go);
    char *ht = finish(h, hout);
    th_assert_has(ht, "unlocked 0");
    free(ht);
}

/* dmutex_rwlock_token: the token of the calling thread's hold, a write
 * grant's (each above every grant before it) or the process's read
 * grant's; 0 with nothing held or for an unlisted rwlock. The last grant's
 * token is the server's counter. */
static void test_rwlock_token_is_the_grant_of_the_callers_hold(void **s)
{
    (void)s;
    char *o = th_out_file();
    char *text = finish(prog(machine(0), o, "token", NULL), o);
    const char *p = strstr(text, "tokens ");
    if (!p)
        fail_msg("no tokens line: %s", text);
    unsigned long long t[6];
    assert_int_equal(sscanf(p, "tokens %llu %llu %llu %llu %llu %llu", &t[0], &t[1], &t[2], &t[3],
                            &t[4], &t[5]), 6);
    free(text);
    assert_int_equal(t[0], 0);
    assert_true(t[1] > 0);
    assert_int_equal(t[2], 0);
    assert_true(t[3] > t[1]);
    assert_true(t[4] > t[3]);
    assert_int_equal(t[5], 0);
    assert_int_equal(th_cmd_int(lc, "GET dmutex:{routes_lock}:token"), (long long)t[4]);
}

/* on_redis_down applies to rwlocks as to mutexes: with no server to
 * connect to, "block" waits (a timed lock's ETIMEDOUT), "error" is EAGAIN
 * at once, "local" locks the real rwlock alone; a try is EBUSY but with
 * "local". */
static void test_on_redis_down_applies_to_rwlocks(void **s)
{
    (void)s;
    const struct { const char *mode, *args[4], *want; } cases[] = {
        { "block", { "timed", "wr", "300", "monotonic" }, "rc ETIMEDOUT" },
        { "block", { "try", "rd", NULL, NULL }, "rc EBUSY" },
        { "error", { "timed", "rd", "5000", "realtime" }, "rc EAGAIN" },
        { "error", { "try", "wr", NULL, NULL }, "rc EBUSY" },     /* a mutex's trylock too */
        { "local", { "timed", "rd", "5000", "monotonic" }, "rc 0" },
        { "local", { "timed", "wr", "5000", "realtime" }, "rc 0" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *cfgf = th_keep_file(th_write_file(".cfg", "on_redis_down = \"%s\";\n%s",
                                                 cases[i].mode, cfg_text));
        struct th_shim_env e;
        char **env = th_shim_env(&e, cfgf, "redis://127.0.0.1:1", "error");
        char *argv[12] = { prog_path, (char *)cases[i].args[0], ds.addr, ds.port_text, prefix };
        for (int k = 1; k < 4 && cases[i].args[k]; k++)
            argv[4 + k] = (char *)cases[i].args[k];
        char *o = th_out_file();
        char *text = finish(th_child(argv, env, o), o);
        if (!strstr(text, cases[i].want))
            fail_msg("on_redis_down = %s, %s %s: want \"%s\" in:\n%s", cases[i].mode,
                     cases[i].args[0], cases[i].args[1], cases[i].want, text);
        free(text);
    }
}

/* An unlisted rwlock goes straight to glibc: no script call at all. */
static void test_unmapped_rwlock_never_touches_redis(void **s)
{
    (void)s;
    th_reset_stats(lc);
    char *o = th_out_file();
    char *text = finish(prog(NULL, o, "plain", "2000", NULL), o);
    th_assert_has(text, "done");
    free(text);
    assert_int_equal(th_script_calls(lc), 0);
}

/* rwlocks made by an init_site function are mapped (a write lock drew a
 * fencing token of rw_heap), and destroy unmaps them. */
static void test_init_site_heap_rwlock_is_cluster_wide(void **s)
{
    (void)s;
    char key[128];
    snprintf(key, sizeof key, "dmutex:{rw_heap}:token");
    long long before = th_cmd_int(lc, "GET %s", key);
    char *o = th_out_file();
    char *text = finish(prog(NULL, o, "heap", NULL), o);
    th_assert_has(text, "heap 0 0 0");
    free(text);
    assert_true(th_cmd_int(lc, "GET %s", key) > before);
}

/* A heap rwlock destroyed while read-held: EBUSY, as while write-held, and
 * it stays mapped, so the unlock after it ends the cluster read hold (a
 * 0 there unmapped it under its reader: the unlock went to glibc alone
 * and the read hold stayed, renewed, until the process exited). */
static void test_destroy_of_a_read_held_heap_rwlock_is_ebusy(void **s)
{
    (void)s;
    char *o = th_out_file();
    char *text = finish(prog(NULL, o, "heaprd", NULL), o);
    th_assert_has(text, "heaprd 0 EBUSY 0 0");
    free(text);
}

/* Processes with different lease_ms share one readers set: a reader with
 * a short lease must not cut the set's expiry to its own, which dropped
 * the longer-leased readers with it (their holds live by their own
 * leases) and let a writer in beside them until their next renewal. */
static void test_a_short_lease_reader_keeps_the_longer_leased_readers(void **s)
{
    (void)s;
    const char *rw = "rwlocks = ( { symbol = \"routes_lock\"; } );\n";
    char *longf = th_keep_file(th_write_file(".cfg", "lease_ms = 10000;\n%s", rw));
    char *shortf = th_keep_file(th_write_file(".cfg", "lease_ms = 1000;\n%s", rw));
    struct th_shim_env el, es;
    char **envl = th_shim_env(&el, longf, ls.url, "info");
    char **envs = th_shim_env(&es, shortf, ls.url, "info");
    char *go = th_go_file(), *hout = th_out_file(), *sout = th_out_file(), *wout = th_out_file();
    char *hold[] = { prog_path, "hold", ds.addr, ds.port_text, prefix, "rd", go, NULL };
    pid_t h = th_child(hold, envl, hout);
    th_wait_for(hout, "held 0", RUN_MS);
    char *shortrd[] = { prog_path, "try", ds.addr, ds.port_text, prefix, "rd", NULL };
    char *text = th_finish(th_child(shortrd, envs, sout), sout, 0, RUN_MS);
    th_assert_has(text, "rc 0");
    free(text);
    /* The set lives as long as its longest lease: more than the short one. */
    assert_true(th_cmd_int(lc, "PTTL dmutex:{routes_lock}:readers") > 1000);
    usleep(1500 * 1000);    /* past the short lease, far from the long one */
    char *trywr[] = { prog_path, "try", ds.addr, ds.port_text, prefix, "wr", NULL };
    text = th_finish(th_child(trywr, envl, wout), wout, 0, RUN_MS);
    th_assert_has(text, "rc EBUSY");
    free(text);
    th_touch(go);
    text = finish(h, hout);
    th_assert_has(text, "unlocked 0");
    free(text);
}

/* A process stopped past its lease (SIGSTOP, a paused VM) is continued
 * with every thread at once: a lock call that runs before the watchdog's
 * deadline thread has looked must not join the process's hold, which the
 * server has already dropped (here a writer of another process got in
 * meanwhile). It did: tryrdlocks of threads that ran first answered 0. */
static void test_a_hold_past_its_lease_is_not_joined_after_a_stop(void **s)
{
    (void)s;
    char *cfgf = th_keep_file(th_write_file(".cfg", "on_lease_lost = \"warn\";\n%s", cfg_text));
    struct th_shim_env e;
    char **env = th_shim_env(&e, cfgf, ls.url, "info");
    char *go = th_go_file(), *hout = th_out_file();
    char *argv[] = { prog_path, "stopjoin", ds.addr, ds.port_text, prefix, go, NULL };
    pid_t h = th_child(argv, env, hout);
    th_wait_for(hout, "held 0", RUN_MS);
    kill(h, SIGSTOP);
    /* A writer elsewhere gets in once the stopped reader's lease is over. */
    int in = 0;
    for (long waited = 0; !in && waited < RUN_MS; waited += 200) {
        char *o = th_out_file();
        char *text = finish(prog(NULL, o, "try", "wr", NULL), o);
        in = strstr(text, "rc 0") != NULL;
        free(text);
        if (!in)
            usleep(200 * 1000);
    }
    assert_true(in);
    th_touch(go);
    kill(h, SIGCONT);
    char *text = finish(h, hout);
    th_assert_has(text, "joined 0 of 8");
    th_assert_has(text, "unlocked EPERM");
    free(text);
}

/* ---- fixtures ------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (th_built_paths(TH_SHIM, shim_path, RWPROG, prog_path, NULL) != 0)
        return -1;
    th_machines_group_start(&chk, &net, GROUP_ALARM_S, "test_rwlocks",
                            "both \"machines\" run on this one");
    th_redis_start(&ls, net.up ? net.host_ip : NULL, NULL);
    th_redis_start(&ds, net.up ? net.host_ip : NULL, NULL);
    lc = th_redis_connect(&ls);
    dc = th_redis_connect(&ds);
    th_cluster_config(&cfg, &ls, DM_COMMAND_TIMEOUT_MS, LEASE_MS);
    dm_store_init(&cfg, &dm_redis_store);
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
    return th_machines_test_setup(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_readers_share_and_a_queued_writer_keeps_new_readers_out,
                               th_machines_test_setup),
        cmocka_unit_test_setup(test_read_release_is_idempotent_and_an_expired_read_hold_is_lost,
                               th_machines_test_setup),
        cmocka_unit_test_setup(test_writers_queued_behind_a_reader_get_it_in_order,
                               th_machines_test_setup),
        cmocka_unit_test_setup_teardown(
            test_two_machines_readers_never_see_a_torn_write_and_share_the_lock, test_setup,
            th_test_teardown),
        cmocka_unit_test_setup_teardown(test_writer_is_not_starved_by_a_stream_of_readers,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_try_variants_are_ebusy_across_processes, test_setup,
                                        th_test_teardown),
        cmocka_unit_test_setup_teardown(test_timed_and_clock_variants_time_out_by_the_deadline,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_timed_out_writer_no_longer_keeps_readers_out,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_recursion_and_self_deadlock_answer_as_glibc,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_killed_holder_frees_the_lock_when_its_lease_ends,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_lost_read_hold_aborts_or_is_reported_at_unlock,
                                        test_setup,
                                        th_test_teardown),
        cmocka_unit_test_setup_teardown(test_fork_child_holds_the_lock_against_its_parent,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_fork_child_of_a_reader_holds_no_share_of_the_parent,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_local_readers_share_one_round_trip, test_setup,
                                        th_test_teardown),
        cmocka_unit_test_setup_teardown(test_exit_with_a_read_hold_releases_it, test_setup,
                                        th_test_teardown),
        cmocka_unit_test_setup_teardown(test_exit_after_a_holding_thread_ended_releases_its_hold,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_cancel_during_a_cluster_wait_acts_after_the_lock,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_read_hold_is_renewed_past_its_lease, test_setup,
                                        th_test_teardown),
        cmocka_unit_test_setup_teardown(test_rwlock_token_is_the_grant_of_the_callers_hold,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_on_redis_down_applies_to_rwlocks, test_setup,
                                        th_test_teardown),
        cmocka_unit_test_setup_teardown(test_unmapped_rwlock_never_touches_redis, test_setup,
                                        th_test_teardown),
        cmocka_unit_test_setup_teardown(test_init_site_heap_rwlock_is_cluster_wide, test_setup,
                                        th_test_teardown),
        cmocka_unit_test_setup_teardown(test_destroy_of_a_read_held_heap_rwlock_is_ebusy, test_setup,
                                        th_test_teardown),
        cmocka_unit_test_setup_teardown(test_a_short_lease_reader_keeps_the_longer_leased_readers,
                                        test_setup, th_test_teardown),
        cmocka_unit_test_setup_teardown(test_a_hold_past_its_lease_is_not_joined_after_a_stop,
                                        test_setup, th_test_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
