/* release: releases written without waiting for their reply (an unlock
 * of a name nobody waits for returns after one write) and the thread that
 * reads the replies left unread: a verdict acted on, anything else retried
 * as a release always is; the flush at exec and exit. Knows the lock
 * protocol through lock_impl.h (rl_release_write, rl_release_waited)
 * and of Redis only the pool's flush (dm_redis_flush*): no reply, no key,
 * no script. */
#include "lock.h"
#include "lock_impl.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "real.h"
#include "redis.h"
#include "util.h"

/* A release sent without waiting, until its reply is read. It holds a
 * reference to the record, so a name destroyed meanwhile stays until
 * then. Listed (under rl_locks_mu) so that a fork child, which never reads
 * the parent's replies, gives those references back and frees them. */
struct late_release {
    struct rl_late late;                /* first: the reply comes back through it */
    struct dm_rlock *l;
    uint64_t token;
    dm_store_lost_fn lost;
    long long lease_end_ms;             /* the hold's lease could end by itself from then */
    struct late_release *prev, *next;   /* late_list, under rl_locks_mu */
    /* Its reply's verdict, recorded by whichever thread read it, acted on
     * by the reader (verdicts_settle). */
    struct late_release *vnext;         /* `verdicts` */
    long verdict;                       /* release.lua's answer, or -1 */
    int noreply;
    char why[128];                      /* -1: what came instead (the debug line) */
    char owner[DM_OWNER_MAX];
    char request[DM_MEMBER_MAX];        /* "<owner>|<wait id>": ARGV[8], every retry too */
};
static struct late_release *late_list;
/* Replies read by a thread other than the reader: a stack (atomic head),
 * taken whole by the reader. A fork child drops it with late_list. */
static struct late_release *verdicts;

/* ---- the release reader ----------------------------------------------------
 * A release written without waiting must not stay unread for long: the
 * server may have answered NOSCRIPT (its scripts flushed) or closed the
 * connection without running it, and a process that idles after its
 * unlock makes no next call on that connection. This thread reads the
 * replies that stay unread on an idle pooled connection for one to two
 * ticks (DM_RELEASE_READ_MS), and every reply at once when the process
 * image is about to end (exec, _exit: dm_rlock_flush_bounded). A reply
 * that needs more than counting (a retry, a lost hold's report, which in
 * abort mode ends the process) is acted on here whoever read it (a pooled
 * connection's next user reads what is pending on it first): the reading
 * thread only records the verdict (late_release_done) and wakes this one,
 * which settles it (verdicts_settle), so that one name's late reply never
 * lengthens or aborts another name's lock call; a "released" is settled
 * by the thread that read it. It ticks while releases are unread or were
 * written in the last DM_RELEASE_QUIET_TICKS ticks, then sleeps until the
 * next release wakes it (an eventfd write, the one system call an unlock
 * may add, only after such a quiet spell). Started by the first release
 * written without waiting; a release is waited for when it cannot start. */
#define DM_RELEASE_READ_MS 20       /* a tick of the reader */
#define DM_RELEASE_QUIET_TICKS 50   /* ticks without a release before it sleeps for good */
#define DM_FLUSH_STEP_MS 1          /* a flush waiting for other threads' readers looks again */
static pthread_mutex_t reader_mu = PTHREAD_MUTEX_INITIALIZER;  /* its start, its fds */
static int reader_state;            /* 0 not started, 1 running, -1 cannot start (atomic) */
static int reader_efd = -1;         /* eventfd: wakes the reader */
static int reader_asleep;           /* sleeping with no timeout: wake it (atomic) */
static long releases_pending;       /* written, reply not read yet (atomic) */
static unsigned long releases_written;      /* ever (atomic): the reader's activity */
static unsigned long flush_asked, flush_done;  /* dm_rlock_flush_bounded (atomic) */

static void reader_wake(void)
{
    uint64_t one = 1;
    ssize_t w = write(__atomic_load_n(&reader_efd, __ATOMIC_ACQUIRE), &one, sizeof one);
    (void)w;    /* EAGAIN: the counter is full, it wakes anyway */
}

static __thread int in_reader;      /* the calling thread is the reader */
static void verdicts_settle(void);

static void *reader_main(void *arg)
{
    (void)arg;
    in_reader = 1;
    unsigned long seen = 0;
    int quiet = 0;
    for (;;) {
        int timeout = DM_RELEASE_READ_MS;
        if (quiet >= DM_RELEASE_QUIET_TICKS) {
            /* Dekker with the writer: it counts its release pending, then
             * looks at reader_asleep; here the other way round. */
            __atomic_store_n(&reader_asleep, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&releases_pending, __ATOMIC_SEQ_CST) == 0 &&
                __atomic_load_n(&flush_asked, __ATOMIC_SEQ_CST) ==
                    __atomic_load_n(&flush_done, __ATOMIC_SEQ_CST))
                timeout = -1;
        }
        struct pollfd p = { reader_efd, POLLIN, 0 };
        int woken = poll(&p, 1, timeout) > 0;
        __atomic_store_n(&reader_asleep, 0, __ATOMIC_SEQ_CST);
        uint64_t v;
        if (woken && read(reader_efd, &v, sizeof v) < 0)
            v = 0;      /* EAGAIN: another read took it */
        verdicts_settle();
        unsigned long asked = __atomic_load_n(&flush_asked, __ATOMIC_ACQUIRE);
        if (asked != __atomic_load_n(&flush_done, __ATOMIC_RELAXED)) {
            dm_redis_flush();
            __atomic_store_n(&flush_done, asked, __ATOMIC_RELEASE);
        } else {
            dm_redis_flush_older();
        }
        verdicts_settle();
        unsigned long w = __atomic_load_n(&releases_written, __ATOMIC_RELAXED);
        if (w != seen || __atomic_load_n(&releases_pending, __ATOMIC_ACQUIRE) > 0)
            quiet = 0;
        else if (quiet < DM_RELEASE_QUIET_TICKS)
            quiet++;
        seen = w;
    }
    return NULL;
}

/* 1 once the reader runs (started here the first time), 0 when it cannot. */
static int reader_ready(void)
{
    int st = __atomic_load_n(&reader_state, __ATOMIC_ACQUIRE);
    if (st != 0)
        return st > 0;
    dm_lock(&reader_mu);
    if ((st = reader_state) == 0) {
        int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        __atomic_store_n(&reader_efd, fd, __ATOMIC_RELEASE);   /* before the thread reads it */
        int rc = fd < 0 ? errno : dm_thread_start(NULL, reader_main, NULL);
        if (rc == 0) {
            st = 1;
        } else {
            __atomic_store_n(&reader_efd, -1, __ATOMIC_RELEASE);
            if (fd >= 0)
                close(fd);
            dm_warn("cannot start the release reader thread (%s): every release is waited "
                    "for", strerror(rc));
            st = -1;
        }
        __atomic_store_n(&reader_state, st, __ATOMIC_RELEASE);
    }
    dm_unlock(&reader_mu);
    return st > 0;
}

void dm_rlock_flush_bounded(void)
{
    /* The reader itself (a lost hold's abort, whose SIGABRT handler
     * _exits) would wait for itself. */
    if (__atomic_load_n(&releases_pending, __ATOMIC_ACQUIRE) <= 0 ||
        __atomic_load_n(&reader_state, __ATOMIC_ACQUIRE) <= 0 || in_reader)
        return;
    long max_ms = (DM_RELEASE_TIMEOUTS + 1) * rl_cfg->redis.command_timeout_ms;
    unsigned long want = __atomic_add_fetch(&flush_asked, 1, __ATOMIC_SEQ_CST);
    reader_wake();
    long long end = dm_now_ms() + max_ms;
    /* The reader's flush, then those on connections other threads use
     * (read before their own replies) and any retry in progress. */
    while ((long)(__atomic_load_n(&flush_done, __ATOMIC_ACQUIRE) - want) < 0 ||
           __atomic_load_n(&releases_pending, __ATOMIC_ACQUIRE) > 0) {
        if (dm_now_ms() >= end) {
            dm_warn("%ld release(s) written without waiting still unconfirmed after %ld ms; "
                    "a lock they did not free frees itself when its lease (%ld ms) runs out",
                    __atomic_load_n(&releases_pending, __ATOMIC_RELAXED), max_ms,
                    rl_cfg->lease_ms);
            return;
        }
        struct timespec ts = { 0, DM_FLUSH_STEP_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* rl_locks_mu held. */
static void late_unlink(struct late_release *lr)
{
    if (lr->prev)
        lr->prev->next = lr->next;
    else
        late_list = lr->next;
    if (lr->next)
        lr->next->prev = lr->prev;
}

/* The verdict on a release sent by dm_rlock_release_nowait, in the
 * reader (a "released": in the thread that read it). Anything but a
 * verdict is retried as a release always is (it recognises its own
 * retry); "not held" is a lost hold. */
static void settle(struct late_release *lr)
{
    long v = lr->verdict;
    if (v != RELEASE_DONE && v != RELEASE_STILL_HELD && v != RELEASE_NOT_HELD &&
        v != RELEASE_GONE_WITH_DATA) {
        dm_debug("lock %s: the release sent at unlock got %s; sending it again", lr->l->name,
                 lr->why);
        if (lr->noreply)
            dm_stats_add(&dm_rlock_counts(lr->l)->redis_errors, 1);
        int rr = rl_release_waited(lr->l, lr->owner, lr->token, lr->request, 0, NULL);
        v = rr == EPERM ? RELEASE_NOT_HELD : rr == ESTALE ? RELEASE_GONE_WITH_DATA : RELEASE_DONE;
    }
    if ((v == RELEASE_NOT_HELD || v == RELEASE_GONE_WITH_DATA) && lr->lost)
        lr->lost(&lr->l->pub, lr->owner, lr->token,
                 v == RELEASE_GONE_WITH_DATA ? DM_GONE_WITH_DATA
                 : dm_now_ms() >= lr->lease_end_ms ? DM_GONE_EXPIRED : DM_GONE_LOST);
    __atomic_sub_fetch(&lr->l->releases_unread, 1, __ATOMIC_ACQ_REL);
    dm_lock(&rl_locks_mu);
    late_unlink(lr);
    dm_unlock(&rl_locks_mu);
    __atomic_sub_fetch(&releases_pending, 1, __ATOMIC_ACQ_REL);
    dm_rlock_put(lr->l);
    free(lr);
}

static __thread int settling;       /* the reader is settling a verdict */

/* The reader: every verdict recorded so far, oldest first. A reply read
 * during one of them (a retry's call reads what is pending first) waits
 * for the next round rather than nesting. */
static void verdicts_settle(void)
{
    struct late_release *got = __atomic_exchange_n(&verdicts, NULL, __ATOMIC_ACQUIRE), *fifo = NULL;
    while (got) {
        struct late_release *lr = got;
        got = lr->vnext;
        lr->vnext = fifo;
        fifo = lr;
    }
    settling = 1;
    while (fifo) {
        struct late_release *lr = fifo;
        fifo = lr->vnext;
        settle(lr);
    }
    settling = 0;
}

/* The reply of a release sent by dm_rlock_release_nowait, in the thread
 * that read it. "Released" (or a nested count) is settled here: nothing
 * but counts and a reference, so a trylock of the name that read it goes
 * on at once. Anything else (a retry, a lost hold's report) is recorded
 * for the reader, settled at once when that is the reader, outside a
 * settle of its own. */
static void late_release_done(struct rl_late *x, long v, const char *why, int noreply)
{
    struct late_release *lr = (struct late_release *)x;
    lr->verdict = v;
    lr->noreply = noreply;
    snprintf(lr->why, sizeof lr->why, "%s", why ? why : "");
    if (v == RELEASE_DONE || v == RELEASE_STILL_HELD) {
        settle(lr);
        return;
    }
    if (in_reader && !settling) {
        settling = 1;           /* a reply read by its retry waits for the next round */
        settle(lr);
        settling = 0;
        return;
    }
    lr->vnext = __atomic_load_n(&verdicts, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&verdicts, &lr->vnext, lr, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
    if (!in_reader)
        reader_wake();
}

/* dm_rlock_release_nowait's script, written without waiting for its
 * reply (lr: what the reply's reader needs, the record's reference
 * taken). 0 when written; else what rl_release_write said, and lr is the
 * caller's again. */
static int release_send(struct dm_rlock *l, const char *owner, uint64_t token,
                        const char *member, struct late_release *lr)
{
    __atomic_add_fetch(&l->releases_unread, 1, __ATOMIC_ACQ_REL);
    __atomic_add_fetch(&releases_pending, 1, __ATOMIC_SEQ_CST);
    int rc = rl_release_write(l, owner, token, member, &lr->late);
    if (rc == 0) {
        __atomic_add_fetch(&releases_written, 1, __ATOMIC_RELAXED);
        /* The reader sleeps for good only after a quiet spell: then, and
         * only then, this release wakes it. */
        if (__atomic_load_n(&reader_asleep, __ATOMIC_SEQ_CST) &&
            __atomic_exchange_n(&reader_asleep, 0, __ATOMIC_SEQ_CST))
            reader_wake();
        return 0;
    }
    __atomic_sub_fetch(&l->releases_unread, 1, __ATOMIC_ACQ_REL);
    __atomic_sub_fetch(&releases_pending, 1, __ATOMIC_ACQ_REL);
    return rc;
}

int dm_rlock_release_nowait(struct dm_rlock *l, const char *owner, uint64_t token,
                              unsigned long wait_id, long long lease_end_ms,
                              dm_store_lost_fn lost)
{
    /* Sentinel trusts "not held" only after ROLE on the same connection,
     * a cluster follows MOVED with the script again, and an rwlock's read
     * release is not told apart by its request: the reply first. */
    struct late_release *lr;
    if (l->pub.rw || rl_cfg->redis.nsentinels > 0 || rl_cfg->redis.ncluster > 0 || !reader_ready() ||
        (lr = malloc(sizeof *lr)) == NULL) {
        int r = dm_rlock_release_hold(l, owner, token, wait_id);
        if ((r == EPERM || r == ESTALE) && lost)
            lost(&l->pub, owner, token, dm_store_gone_how(r, lease_end_ms));
        return r;
    }
    lr->late.done = late_release_done;
    lr->l = l;
    lr->token = token;
    lr->lost = lost;
    lr->lease_end_ms = lease_end_ms;
    size_t on = strnlen(owner, sizeof lr->owner - 1);
    memcpy(lr->owner, owner, on);
    lr->owner[on] = 0;
    char member[DM_MEMBER_MAX];     /* the caller's: lr may be freed below */
    rl_member_of(member, owner, wait_id);
    memcpy(lr->request, member, strlen(member) + 1);
    dm_lock(&rl_locks_mu);
    l->refs++;
    lr->prev = NULL;
    lr->next = late_list;
    if (late_list)
        late_list->prev = lr;
    late_list = lr;
    dm_unlock(&rl_locks_mu);
    if (release_send(l, owner, token, member, lr) == 0)
        return 0;
    /* Not written, or written in part (it may have gone out whole all the
     * same): waited for now, named as any retry is. */
    dm_lock(&rl_locks_mu);
    late_unlink(lr);
    dm_unlock(&rl_locks_mu);
    dm_rlock_put(l);
    free(lr);
    int r = rl_release_waited(l, owner, token, member, 0, NULL);
    if ((r == EPERM || r == ESTALE) && lost)
        lost(&l->pub, owner, token, dm_store_gone_how(r, lease_end_ms));
    return r;
}

/* The idle pool's replies here; then those another thread reads (the
 * release reader may hold a connection, or be retrying a release it
 * read), waited for as long as a retried release may take. */
void dm_rlock_flush(void)
{
    /* The reader itself (an exit from a lost hold's abort handler) would
     * wait for the release it is settling: what is idle, once. */
    if (in_reader) {
        dm_redis_flush();
        return;
    }
    long long end = dm_now_ms() + (DM_RELEASE_TIMEOUTS + 1) * rl_cfg->redis.command_timeout_ms;
    for (;;) {
        dm_redis_flush();
        if (__atomic_load_n(&releases_pending, __ATOMIC_ACQUIRE) <= 0 || dm_now_ms() >= end)
            break;
        dm_sleep_ms(DM_FLUSH_STEP_MS);
    }
}

void dm_release_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&reader_mu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    /* The reader thread and its eventfd are the parent's (a write to it
     * would wake the parent's thread): the child starts its own. */
    if (reader_efd >= 0)
        close(reader_efd);
    reader_efd = -1;
    reader_state = 0;
    reader_asleep = 0;
    releases_pending = 0;
    flush_done = flush_asked;
    /* The releases the parent wrote without waiting are the parent's to
     * read (redis dropped them from the child's pool unread): their
     * references to the records are given back, their memory freed. */
    struct late_release *dead = late_list;
    late_list = NULL;
    verdicts = NULL;        /* each of them on late_list too */
    while (dead) {
        struct late_release *lr = dead;
        dead = lr->next;
        dm_rlock_put(lr->l);
        free(lr);
    }
}
