/* resend: releases a failover may undo. With Sentinel or Redis Cluster a
 * record keeps its last unlocks' releases for a lease
 * (dm_rlock_release_hold), and a thread of their own sends them again
 * when the primary moves. Knows the lock protocol through lock_impl.h
 * (the records' table, rl_release_waited), and of Redis where the primary
 * is (its generation, a slot's node and epoch, the switch hook). */
#include "lock.h"
#include "lock_impl.h"

#include <errno.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "real.h"
#include "redis.h"
#include "util.h"

/* ---- releases a failover may undo (Sentinel, Redis Cluster) --------------
 * The primary answers a release before its replicas have it (replication
 * is asynchronous; min_replicas WAITs for grants, not for releases), and
 * a failover then promotes a replica on which the hold is still there:
 * everyone waits for the rest of its lease (9.3 s of a 10 s lease in 8 of
 * 14 failover runs here). So a record keeps the releases of its last
 * DM_KEPT_PER_LOCK unlocks (dm_rlock_release_hold: each names the lock
 * call it ends) for a lease, and when the primary moves, a thread of its
 * own (started at the first one kept) sends every one still in its lease
 * again to the new primary. The server decides: release.lua answers a
 * release it already ran as done and changes nothing, and one whose hold
 * the same thread was granted again since (same owner, same token: a
 * later lock call) leaves that grant alone, since it names its own call.
 * Entries stay until their lease is over, so a second failover sends them
 * again too. Why the last 2 are enough with min_replicas = the number of
 * replicas (deploying.md's safe setting): every grant is acknowledged by
 * all of them before its holder enters, and replication is one ordered
 * stream, so a release followed by any acknowledged grant of the lock
 * reached every replica; only the process's last release of each lock
 * can be missing. With fewer (or 0) a lock released more often than that
 * within the replication lag may stand for its lease, as before. Per
 * record, so that a busy lock cannot push another's out;
 * with the record, so that a name destroyed takes its own with it (its
 * hold then stands on a new primary that lacks the release until its
 * lease ends, as before). Not an rwlock's (a read release ignores the
 * request). A process that exits takes its kept releases with it.
 * With Redis Cluster the same, for each slot's primary: a round follows
 * every change of the slot map the process sees (dm_redis_on_switch: a
 * call that met MOVED or a node gone, notify's refresh), each release
 * sent to the node that owns its slot now. A resharding makes such a
 * round too; its releases are answered as done. */
#define DM_KEPT_PER_LOCK 2
struct dm_kept_release {
    uint64_t token;
    long long until_ms;                 /* 0: a free slot */
    int node;                           /* Redis Cluster: the node its slot was on when it was
                                           kept or last sent again (-1: Sentinel: every move) */
    unsigned long epoch;                /* that node index's epoch (a new address: moved) */
    char owner[DM_OWNER_MAX];
    char request[DM_MEMBER_MAX];        /* "<owner>|<wait id>" */
};
struct dm_kept {                        /* l->kept */
    unsigned next;
    struct dm_kept_release r[DM_KEPT_PER_LOCK];
};
static pthread_mutex_t resend_mu = PTHREAD_MUTEX_INITIALIZER;  /* resend_state */
static int resend_state;            /* 0 no thread yet, 1 running, -1 cannot start */
/* A move: resend_asked goes up and the semaphore wakes the thread. No
 * lock: the hook is called from threads that may hold their own (notify's
 * thread holds its mutex when a MOVED answers a subscription), and a
 * fork's prepare handlers take resend_mu before those. */
static unsigned long resend_asked;      /* moves seen (atomic) */
static unsigned long resend_done;       /* moves handled (the thread's) */
static sem_t resend_sem;
static unsigned long resend_rounds;     /* rounds finished (atomic): for tests */

static void resend_switch(void)
{
    __atomic_add_fetch(&resend_asked, 1, __ATOMIC_SEQ_CST);
    sem_post(&resend_sem);
}

struct resend_job {
    struct dm_rlock *l;          /* a reference */
    struct dm_kept_release r;
};
/* The round being sent (rl_locks_mu): a fork child, which has no resender,
 * gives back the references of the jobs not done (the one being sent
 * included) and frees the list. */
static struct resend_job *round_jobs;
static size_t round_n, round_done;

/* What made a resend round, for its log lines. */
static const char *moved_what(void)
{
    return rl_cfg->redis.ncluster > 0 ? "the cluster's slot map changed" : "the primary moved";
}

/* Redis Cluster: the node that owns l's slot in the map now, and that
 * index's epoch; -1 without a cluster (Sentinel: one primary). */
static int slot_node(const struct dm_rlock *l, unsigned long *epoch)
{
    *epoch = 0;
    if (rl_cfg->redis.ncluster == 0)
        return -1;
    int node = dm_redis_node_cached(l->slot);
    if (node >= 0)
        *epoch = dm_redis_node_epoch(node);
    return node;
}

/* A kept release to send again: still in its lease, and (Redis Cluster)
 * its slot on another node than when it was kept or last sent. */
static int kept_due(const struct dm_rlock *l, const struct dm_kept_release *k)
{
    if (k->until_ms == 0)
        return 0;
    if (k->node < 0)
        return 1;
    unsigned long epoch;
    return slot_node(l, &epoch) != k->node || epoch != k->epoch;
}

/* rl_locks_mu held: frees the kept lists whose releases are all past their
 * lease (the record stays: a name used once keeps no list for good). */
static void kept_sweep_locked(long long now)
{
    for (size_t b = 0; b < rl_locks.n; b++)
        for (struct dm_rlock *l = (struct dm_rlock *)rl_locks.b[b]; l;
             l = (struct dm_rlock *)l->node.next) {
            if (!l->kept)
                continue;
            int live = 0;
            for (int i = 0; i < DM_KEPT_PER_LOCK; i++) {
                struct dm_kept_release *k = &l->kept->r[i];
                if (k->until_ms != 0 && k->until_ms <= now)
                    k->until_ms = 0;
                live |= k->until_ms != 0;
            }
            if (!live) {
                free(l->kept);
                l->kept = NULL;
                rl_kept_lists--;
            }
        }
}

/* rl_locks_mu held: every kept release due (kept_due), with a reference to
 * its record each (*n of them, malloc'd; NULL: none or no memory). */
static struct resend_job *resend_jobs_locked(size_t *n, long long now)
{
    kept_sweep_locked(now);
    size_t count = 0;
    for (size_t b = 0; b < rl_locks.n; b++)
        for (struct dm_rlock *l = (struct dm_rlock *)rl_locks.b[b]; l;
             l = (struct dm_rlock *)l->node.next)
            for (int i = 0; l->kept && i < DM_KEPT_PER_LOCK; i++)
                count += kept_due(l, &l->kept->r[i]);
    *n = 0;
    struct resend_job *jobs = count ? malloc(count * sizeof *jobs) : NULL;
    if (!jobs) {
        if (count)
            dm_error("redis: %s, and there is no memory to send its %zu kept release(s) "
                     "again: a hold the new primary kept stands until its lease ends",
                     moved_what(), count);
        return NULL;
    }
    for (size_t b = 0; b < rl_locks.n; b++)
        for (struct dm_rlock *l = (struct dm_rlock *)rl_locks.b[b]; l;
             l = (struct dm_rlock *)l->node.next)
            for (int i = 0; l->kept && i < DM_KEPT_PER_LOCK && *n < count; i++) {
                struct dm_kept_release *k = &l->kept->r[i];
                if (!kept_due(l, k))
                    continue;
                l->refs++;
                jobs[*n].l = l;
                jobs[*n].r = *k;
                /* where it goes now (-1: Sentinel): a move meanwhile makes it due */
                jobs[*n].r.node = slot_node(l, &jobs[*n].r.epoch);
                (*n)++;
            }
    return jobs;
}

/* rl_locks_mu held: the kept release `r` of l (if it is still kept) was sent
 * again to r's node (the slot's owner when the round took it up). */
static void kept_sent_locked(struct dm_rlock *l, const struct dm_kept_release *r)
{
    for (int i = 0; r->node >= 0 && l->kept && i < DM_KEPT_PER_LOCK; i++) {
        struct dm_kept_release *k = &l->kept->r[i];
        if (k->until_ms != 0 && k->token == r->token && strcmp(k->request, r->request) == 0) {
            k->node = r->node;
            k->epoch = r->epoch;
        }
    }
}

/* Sleeps until a move is asked for; while releases are kept, at most a
 * lease, so that their lists are freed once past it. */
static void resend_sleep(void)
{
    dm_lock(&rl_locks_mu);
    int any = rl_kept_lists > 0;
    dm_unlock(&rl_locks_mu);
    int r;
    if (any) {
        struct timespec until;
        dm_deadline_in(&until, rl_cfg->lease_ms);
        while ((r = sem_clockwait(&resend_sem, CLOCK_MONOTONIC, &until)) != 0 && errno == EINTR)
            ;
    } else {
        while ((r = sem_wait(&resend_sem)) != 0 && errno == EINTR)
            ;
    }
}

static void *resend_main(void *arg)
{
    (void)arg;
    for (;;) {
        unsigned long asked = __atomic_load_n(&resend_asked, __ATOMIC_SEQ_CST);
        if (asked == resend_done) {
            resend_sleep();
            dm_lock(&rl_locks_mu);
            kept_sweep_locked(dm_now_ms());
            dm_unlock(&rl_locks_mu);
            continue;
        }
        resend_done = asked;
        size_t n;
        dm_lock(&rl_locks_mu);
        struct resend_job *jobs = resend_jobs_locked(&n, dm_now_ms());
        round_jobs = jobs;
        round_n = n;
        round_done = 0;
        dm_unlock(&rl_locks_mu);
        size_t failed = 0;
        for (size_t i = 0; i < n; i++) {
            struct resend_job *j = &jobs[i];
            int lost = rl_release_waited(j->l, j->r.owner, j->r.token, j->r.request,
                                      j->r.until_ms, NULL) == EIO;
            failed += lost;
            /* Done and the reference given back in one step as a fork
             * sees them (rl_locks_mu). One that did not get through is sent
             * again at the next change of the map. */
            dm_lock(&rl_locks_mu);
            if (!lost)
                kept_sent_locked(j->l, &j->r);
            round_done = i + 1;
            int last = rl_lock_unref_locked(j->l);
            dm_unlock(&rl_locks_mu);
            if (last)
                rl_lock_free(j->l);
        }
        dm_lock(&rl_locks_mu);
        round_jobs = NULL;
        round_n = round_done = 0;
        free(jobs);
        dm_unlock(&rl_locks_mu);
        if (n > 0)
            dm_warn("redis: %s: %zu release(s) of the last lease sent again, in case a new "
                    "primary lacks them (%zu failed)", moved_what(), n, failed);
        __atomic_add_fetch(&resend_rounds, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

unsigned long dm_rlock_resend_rounds(void)
{
    return __atomic_load_n(&resend_rounds, __ATOMIC_ACQUIRE);
}

size_t dm_rlock_kept_lists(void)
{
    dm_lock(&rl_locks_mu);
    size_t n = rl_kept_lists;
    dm_unlock(&rl_locks_mu);
    return n;
}

/* Releases are kept for a failover with Sentinel and with Redis Cluster:
 * a replica promoted may lack them. */
static int resend_wanted(void)
{
    return rl_cfg->redis.nsentinels > 0 || rl_cfg->redis.ncluster > 0;
}

static void resend_keep(struct dm_rlock *l, const char *owner, uint64_t token,
                        const char *request, int node, unsigned long epoch)
{
    if (!resend_wanted())
        return;
    dm_lock(&resend_mu);
    if (resend_state == 0) {
        int rc = sem_init(&resend_sem, 0, 0) != 0 ? errno
                                                   : dm_thread_start(NULL, resend_main, NULL);
        resend_state = rc == 0 ? 1 : -1;
        if (rc != 0)
            dm_warn("cannot start the thread that sends releases again after a failover "
                    "(%s): a release the new primary lacks holds the lock until its lease "
                    "runs out", strerror(rc));
        else
            dm_redis_on_switch(resend_switch);
    }
    int running = resend_state > 0;
    dm_unlock(&resend_mu);
    if (!running)
        return;
    static int no_memory_said;          /* rl_locks_mu */
    dm_lock(&rl_locks_mu);
    /* The first list wakes the thread: it sleeps at most a lease while
     * lists are kept, to free them once past it. */
    if (!l->kept && (l->kept = calloc(1, sizeof *l->kept)) != NULL && rl_kept_lists++ == 0)
        sem_post(&resend_sem);
    struct dm_kept *kept = l->kept;
    if (kept) {
        struct dm_kept_release *k = &kept->r[kept->next];
        kept->next = (kept->next + 1) % DM_KEPT_PER_LOCK;
        k->token = token;
        k->until_ms = dm_now_ms() + rl_cfg->lease_ms;
        k->node = node;
        k->epoch = epoch;
        snprintf(k->owner, sizeof k->owner, "%s", owner);
        snprintf(k->request, sizeof k->request, "%s", request);
    } else if (!no_memory_said) {
        no_memory_said = 1;
        dm_warn("lock %s: no memory to keep its release for a failover (said once): a "
                "release a new primary lacks holds a lock until its lease runs out", l->name);
    }
    dm_unlock(&rl_locks_mu);
}

int dm_rlock_release_hold(struct dm_rlock *l, const char *owner, uint64_t token,
                            unsigned long wait_id)
{
    if (l->pub.rw)
        return dm_rlock_release(l, owner, token);
    char member[DM_MEMBER_MAX];
    rl_member_of(member, owner, wait_id);
    int done = 0;
    unsigned long gen = dm_redis_primary_gen();
    unsigned long epoch;
    int node = slot_node(l, &epoch);    /* where it goes: a move meanwhile makes it due */
    int r = rl_release_waited(l, owner, token, member, 0, &done);
    if (done) {
        resend_keep(l, owner, token, member, node, epoch);   /* out of rl_release_waited's frame of keys */
        /* The primary moved while this release was out: the old one may
         * have answered it after the resender's round (a live failover, a
         * partition), and nothing would send it again before the next
         * move. One more round (found by the review). */
        if (dm_redis_primary_gen() != gen && resend_wanted())
            resend_switch();
    }
    return r;
}

void dm_resend_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&resend_mu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    /* The thread that sends kept releases again is the parent's (the kept
     * lists went with rlock's child handler, before this one): the child
     * starts its own at its own first release. */
    resend_state = 0;       /* its semaphore made anew with the child's thread */
    resend_asked = resend_done = 0;
    /* A round the parent's resender was sending: the references of what
     * it had not done are the child's to give back. */
    struct resend_job *jobs = round_jobs;
    size_t from = round_done, to = round_n;
    round_jobs = NULL;
    round_n = round_done = 0;
    for (size_t i = from; jobs && i < to; i++)
        dm_rlock_put(jobs[i].l);
    free(jobs);
}
