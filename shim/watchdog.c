/* watchdog: the renewal thread. Each round snapshots the watched holds
 * (lock, owner, generation) under the mutex, has the store renew them all
 * in one round (store.h's renew: for Redis one pipeline, shim/redis/renew.c),
 * then applies the verdicts to holds that are still the same generation. The
 * time of a successful renewal is the time its round was *sent*, so the
 * client's idea of the lease never runs past the server's. Loss deadlines
 * are watched by a second thread that does no I/O: a renewal round can
 * block for a connect timeout plus several command timeouts (a server whose
 * packets are dropped), longer than the margin, and the holder must still
 * stop before the server-side lease runs out. */
#include "watchdog.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "real.h"
#include "util.h"

static pthread_mutex_t wmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wcv;              /* the renewal thread waits here */
static pthread_cond_t dcv;              /* the deadline thread waits here */
static int wcv_ready;
static long long deadline_wake_ms;      /* when the deadline thread will look next */
static struct dm_hold *holds;           /* doubly linked, newest first */
static size_t nholds;
static pthread_cond_t round_cv;         /* a renewal round has been applied */
static unsigned long rounds_started, rounds_done;
static int running;                     /* the renewal thread */
static int deadline_running;            /* the deadline thread */
static long long wd_wake_ms = LLONG_MAX; /* when the renewal thread will look next */
static unsigned long lost_count;

struct snap {
    struct dm_hold *h;
    unsigned gen;
    char owner[DM_OWNER_MAX];
};

static void cv_init_locked(void)
{
    if (wcv_ready)
        return;
    dm_cond_init_monotonic(&wcv);
    dm_cond_init_monotonic(&dcv);
    dm_cond_init_monotonic(&round_cv);
    wcv_ready = 1;
}

/* wmu held. */
static void declare_lost(struct dm_hold *h, const char *why, long long now)
{
    const struct dm_config *cfg = dm_store_config();
    __atomic_store_n(&h->lost, 1, __ATOMIC_SEQ_CST);   /* read without wmu: is_lost */
    __atomic_add_fetch(&lost_count, 1, __ATOMIC_RELAXED);
    dm_stats_add(&dm_store_counts(h->lock)->leases_lost, 1);
    if (__atomic_load_n(&h->idle, __ATOMIC_SEQ_CST)) {
        /* Kept with nobody inside (the process was stopped, or Redis
         * unreachable): nothing ran under it. The next lock takes it anew. */
        dm_warn("lock %s (owner %s, fencing token %llu): the lease of a hold nobody was "
                "inside (kept by lock caching or a batch) ran out: %s; given up, the next "
                "lock asks %s again", h->lock->name, h->owner,
                (unsigned long long)h->token, why, dm_store->name);
        return;
    }
    dm_error("lost the lease of lock %s (owner %s, fencing token %llu) while held: %s; "
             "last renewal succeeded %lld ms ago (lease %ld ms); "
             "lost leases in this process: %lu%s",
             h->lock->name, h->owner, (unsigned long long)h->token, why,
             now - h->renewed_ms, cfg->lease_ms, lost_count,
             cfg->on_lease_lost == DM_LOST_ABORT
                 ? "; aborting before another process can enter (on_lease_lost = \"abort\")"
                 : "; continuing (on_lease_lost = \"warn\"): its unlock will return EPERM");
    if (cfg->on_lease_lost == DM_LOST_ABORT)
        abort();
}

/* "no renewal succeeded in time (etcd unreachable or stuck)", in buf */
static const char *no_renewal_words(char *buf, size_t len)
{
    snprintf(buf, len, "no renewal succeeded in time (%s unreachable or stuck)", dm_store->name);
    return buf;
}

static void check_deadlines_locked(long long now)
{
    const struct dm_config *cfg = dm_store_config();
    char why[96];
    for (struct dm_hold *h = holds; h; h = h->next)
        if (!h->lost && now - h->renewed_ms > h->lease_ms - cfg->lease_margin_ms)
            declare_lost(h, no_renewal_words(why, sizeof why), now);
}

static void apply(struct snap *s, enum dm_renewal res, long long sent)
{
    struct dm_hold *h = s->h;
    if (!h->registered || h->gen != s->gen || h->lost)
        return;
    if (res != DM_RENEW_OK && res != DM_RENEW_LOST) {
        dm_stats_add(&dm_store_counts(h->lock)->redis_errors, 1);
        return;     /* not a verdict on the hold */
    }
    if (res == DM_RENEW_OK) {
        dm_stats_add(&dm_store_counts(h->lock)->renewals, 1);
        /* The lease first: is_lost reads renewed_ms, then lease_ms. */
        __atomic_store_n(&h->lease_ms, dm_store_config()->lease_ms, __ATOMIC_RELAXED);
        __atomic_store_n(&h->renewed_ms, sent, __ATOMIC_RELEASE);
    }
    else
        declare_lost(h, "the server no longer has the hold (expired, deleted, or "
                        "lost by a restart or failover)", dm_now_ms());
}

/* The deadline thread: sleeps until the earliest loss deadline (or a
 * change to the holds) and declares the late ones lost. Never blocks on
 * anything but wmu, which nobody holds across I/O. */
static void *deadline_main(void *arg)
{
    (void)arg;
    const struct dm_config *cfg = dm_store_config();
    dm_lock(&wmu);
    for (;;) {
        long long now = dm_now_ms();
        check_deadlines_locked(now);
        long long wake = now + cfg->renew_ms;
        for (struct dm_hold *h = holds; h; h = h->next) {
            long long dl = h->renewed_ms + h->lease_ms - cfg->lease_margin_ms + 1;
            if (!h->lost && dl < wake)
                wake = dl;
        }
        struct timespec ts;
        long long d = wake > now ? wake - now : 1;
        dm_deadline_in(&ts, (long)d);
        deadline_wake_ms = now + d;
        dm_cv_timedwait(&dcv, &wmu, &ts);
    }
    return NULL;
}

/* When `h` should be renewed: a renewal period after the last good one;
 * a hold with a shorter lease than ours (handed over by a process with a
 * shorter lease_ms) at a third of that lease. */
static long long due_ms(const struct dm_hold *h, const struct dm_config *cfg)
{
    long period = h->lease_ms < cfg->lease_ms ? h->lease_ms / 3 : cfg->renew_ms;
    return h->renewed_ms + period;
}

/* The renewal thread: sleeps until the first hold is due, then renews
 * every hold in one round (the store's renew) on a snapshot taken under
 * wmu, and applies the verdicts to the holds still of the same generation. */
static void *watchdog_main(void *arg)
{
    (void)arg;
    const struct dm_config *cfg = dm_store_config();
    struct snap *snaps = NULL;
    struct dm_renew *reqs = NULL;
    size_t cap = 0;
    /* After a round, the next one waits at least this long, so a server
     * that fails every renewal is not hammered. */
    long min_gap = cfg->renew_ms / 4 > 0 ? cfg->renew_ms / 4 : 1;
    long long last_round = 0;

    dm_lock(&wmu);
    for (;;) {
        /* Sleep until the first hold is due (one round renews them all). */
        for (;;) {
            long long now = dm_now_ms();
            check_deadlines_locked(now);
            long long wake = LLONG_MAX;
            for (struct dm_hold *h = holds; h; h = h->next)
                if (!h->lost && due_ms(h, cfg) < wake)
                    wake = due_ms(h, cfg);
            if (wake != LLONG_MAX && wake < last_round + min_gap)
                wake = last_round + min_gap;
            if (now >= wake)
                break;
            wd_wake_ms = wake;
            long long d = wake - now < cfg->renew_ms ? wake - now : cfg->renew_ms;
            struct timespec ts;
            dm_deadline_in(&ts, (long)d);
            dm_cv_timedwait(&wcv, &wmu, &ts);
        }
        wd_wake_ms = LLONG_MAX;
        last_round = dm_now_ms();

        if (nholds > cap) {
            size_t ncap = nholds * 2;
            struct snap *ns = realloc(snaps, ncap * sizeof *ns);
            if (ns)
                snaps = ns;
            struct dm_renew *nr = ns ? realloc(reqs, ncap * sizeof *nr) : NULL;
            if (nr)
                reqs = nr;
            if (!ns || !nr)
                continue;
            cap = ncap;
        }
        size_t n = 0;
        unsigned long round = ++rounds_started;
        for (struct dm_hold *h = holds; h; h = h->next) {
            if (h->lost)
                continue;
            h->snap_round = round;  /* its memory must outlive this round */
            snaps[n].h = h;
            snaps[n].gen = h->gen;
            /* The owner is copied: h's may change under wmu once the
             * round runs without it. */
            memcpy(snaps[n].owner, h->owner, sizeof h->owner);
            reqs[n].lock = h->lock;
            reqs[n].owner = snaps[n].owner;
            reqs[n].read = h->read;
            n++;
        }
        dm_unlock(&wmu);

        long long sent = dm_now_ms();
        enum dm_renewal *res = n > 0 ? calloc(n, sizeof *res) : NULL;
        if (res)
            dm_store->renew(reqs, n, res, &sent);

        dm_lock(&wmu);
        /* Without memory for the verdicts, a failed store call each. */
        for (size_t i = 0; i < n; i++)
            apply(&snaps[i], res ? res[i] : DM_RENEW_UNKNOWN, sent);
        free(res);
        rounds_done = round;
        dm_cv_broadcast(&round_cv);
    }
    return NULL;
}

/* wmu held. */
static void unlink_locked(struct dm_hold *h)
{
    if (!h->registered)
        return;
    if (h->prev)
        h->prev->next = h->next;
    else
        holds = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->registered = 0;
    __atomic_store_n(&nholds, nholds - 1, __ATOMIC_RELAXED);
}

int dm_watchdog_add(struct dm_hold *h, long long asked_ms, long lease_ms)
{
    int rc = 0;
    dm_lock(&wmu);
    cv_init_locked();
    __atomic_store_n(&h->lease_ms, lease_ms, __ATOMIC_RELAXED);
    __atomic_store_n(&h->renewed_ms, asked_ms, __ATOMIC_RELEASE);
    /* Wake a thread only when this hold needs it sooner than it will look
     * anyway: a lock/unlock cycle must not cost two context switches. */
    const struct dm_config *cfg = dm_store_config();
    if (due_ms(h, cfg) < wd_wake_ms)
        dm_cv_signal(&wcv);
    if (asked_ms + lease_ms - cfg->lease_margin_ms < deadline_wake_ms)
        dm_cv_signal(&dcv);
    h->gen++;
    __atomic_store_n(&h->lost, 0, __ATOMIC_RELEASE);
    h->registered = 1;
    h->prev = NULL;
    h->next = holds;
    if (holds)
        holds->prev = h;
    holds = h;
    __atomic_store_n(&nholds, nholds + 1, __ATOMIC_RELAXED);
    if (!running || !deadline_running) {
        /* Both threads or no hold: without the renewal thread the lease
         * runs out under the critical section, and without the deadline
         * thread a stuck renewal round hides the loss past the lease. */
        if (!running && (rc = dm_thread_start(NULL, watchdog_main, NULL)) == 0)
            running = 1;
        if (rc == 0 && !deadline_running &&
            (rc = dm_thread_start(NULL, deadline_main, NULL)) == 0)
            deadline_running = 1;
        if (rc != 0) {
            unlink_locked(h);
            dm_error("cannot start the lease %s thread: %s", running ? "deadline" : "renewal",
                     strerror(rc));
        }
    }
    dm_unlock(&wmu);
    return rc;
}

size_t dm_watchdog_count(void)
{
    return __atomic_load_n(&nholds, __ATOMIC_RELAXED);
}

long dm_watchdog_infos(struct dm_hold_info **out)
{
    dm_lock(&wmu);
    size_t n = 0;
    struct dm_hold_info *v = calloc(nholds ? nholds : 1, sizeof *v);
    for (struct dm_hold *h = holds; v && h; h = h->next) {
        if (h->lost)
            continue;
        struct dm_hold_info *i = &v[n];
        i->name = strdup(h->lock->name);
        i->owner = strdup(h->owner);
        if (!i->name || !i->owner) {
            free(i->name);
            free(i->owner);
            continue;   /* out of memory: this one is left out */
        }
        i->since_ms = h->since_real_ms;
        i->token = h->token;
        i->lease_ms = h->lease_ms;
        i->read = h->read;
        n++;
    }
    dm_unlock(&wmu);
    *out = v;
    return v ? (long)n : -1;
}

void dm_watchdog_infos_free(struct dm_hold_info *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].owner);
    }
    free(v);
}

void dm_watchdog_forget(struct dm_hold *h)
{
    dm_lock(&wmu);
    cv_init_locked();
    while (h->snap_round > rounds_done)
        dm_cv_wait(&round_cv, &wmu);
    dm_unlock(&wmu);
}

int dm_watchdog_remove(struct dm_hold *h)
{
    dm_lock(&wmu);
    /* Past its loss deadline, not declared yet (the process was stopped
     * and the deadline thread has not run since): declared here, as that
     * thread would, before the release, whose answer can no longer be
     * trusted to say "lost" (the server's record of the loss lasts a lease). */
    long long now = dm_now_ms();
    char why[96];
    if (h->registered && !h->lost &&
        now - h->renewed_ms > h->lease_ms - dm_store_config()->lease_margin_ms)
        declare_lost(h, no_renewal_words(why, sizeof why), now);
    int lost = h->lost;
    unlink_locked(h);
    dm_unlock(&wmu);
    return lost;
}

long long dm_watchdog_lease_end(struct dm_hold *h)
{
    long long renewed = __atomic_load_n(&h->renewed_ms, __ATOMIC_ACQUIRE);
    return renewed + __atomic_load_n(&h->lease_ms, __ATOMIC_RELAXED);
}

/* Without wmu: asked on every lock and unlock of a held name (cache mode),
 * it must not serialise them on the watchdog's mutex. The flag is written
 * under wmu with release stores; a loss declared a moment later is seen by
 * the next call, as it would be with the mutex. A hold past its loss
 * deadline counts as lost before the deadline thread declares it: a
 * process stopped past its lease (SIGSTOP, a paused VM) resumes every
 * thread at once, and a lock call that ran first joined a hold the server
 * had already given to another process. The test is the deadline
 * thread's own (renewed_ms is stored last, with release). */
int dm_watchdog_is_lost(struct dm_hold *h)
{
    if (__atomic_load_n(&h->lost, __ATOMIC_ACQUIRE))
        return 1;
    long long renewed = __atomic_load_n(&h->renewed_ms, __ATOMIC_ACQUIRE);
    long lease = __atomic_load_n(&h->lease_ms, __ATOMIC_RELAXED);
    return dm_now_ms() - renewed > lease - dm_store_config()->lease_margin_ms;
}

void dm_watchdog_note_lost(void)
{
    __atomic_add_fetch(&lost_count, 1, __ATOMIC_RELAXED);
}

unsigned long dm_watchdog_lost_count(void)
{
    return __atomic_load_n(&lost_count, __ATOMIC_RELAXED);
}

/* Fork: startup's prepare handler holds wmu across fork() (see the lock
 * order in startup.c); the parent lets go, the child makes it anew. */
void dm_watchdog_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&wmu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    wcv_ready = 0;
    cv_init_locked();
    /* No round is in flight in the child: the renewal thread is the
     * parent's. */
    rounds_done = rounds_started;
    /* The parent's holds are the parent's: the child holds nothing. */
    for (struct dm_hold *h = holds; h;) {
        struct dm_hold *next = h->next;
        h->registered = 0;
        h->prev = h->next = NULL;
        h = next;
    }
    holds = NULL;
    nholds = 0;
    running = 0;
    deadline_running = 0;
    wd_wake_ms = LLONG_MAX;
}
