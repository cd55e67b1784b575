/* util: monotonic time, deadlines, sleep, backoff, monotonic condition
 * variables, fork handling of a mutex, the hash table (util.h says what
 * each does). Every wait in the shim is measured on CLOCK_MONOTONIC. */
#include "util.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "real.h"       /* the one shim header below util: its own locks go to glibc */

#define DM_NS_PER_S  1000000000L
#define DM_NS_PER_MS 1000000L

long long dm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

long long dm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / DM_NS_PER_MS;
}

void dm_deadline_in(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * DM_NS_PER_MS;
    if (ts->tv_nsec >= DM_NS_PER_S) {
        ts->tv_sec++;
        ts->tv_nsec -= DM_NS_PER_S;
    }
}

void dm_deadline_at(struct timespec *ts, long long at_ms)
{
    ts->tv_sec = at_ms / 1000;
    ts->tv_nsec = (at_ms % 1000) * DM_NS_PER_MS;
}

int dm_ts_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

int dm_ts_passed(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return !dm_ts_before(&now, deadline);
}

long dm_remaining_ms(const struct timespec *deadline)
{
    if (!deadline)
        return -1;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long ms = (deadline->tv_sec - now.tv_sec) * 1000LL +
                   (deadline->tv_nsec - now.tv_nsec) / DM_NS_PER_MS;
    if (ms <= 0 && dm_ts_before(&now, deadline))
        ms = 1;     /* less than a millisecond left: one more short wait */
    return ms < 0 ? 0 : (long)ms;
}

struct timeval dm_ms_timeval(long ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    return tv;
}

void dm_sleep_ms(long ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = { ms / 1000, (ms % 1000) * DM_NS_PER_MS };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

int dm_wait_fd(int fd, short events, long long deadline_ms)
{
    for (;;) {
        long long left = deadline_ms - dm_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = { fd, events, 0 };
        int n = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

int dm_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t dummy;
    int rc = pthread_create(t ? t : &dummy, &a, fn, arg);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int dm_cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    int rc = pthread_condattr_init(&a);
    if (rc != 0)
        return rc;
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    rc = dm_cv_init(cv, &a);
    pthread_condattr_destroy(&a);
    return rc;
}

static __thread uint64_t jitter_state;
static uint64_t jitter_base;

void dm_jitter_seed(uint64_t seed)
{
    __atomic_store_n(&jitter_base, seed | 1, __ATOMIC_RELAXED);
}

size_t dm_fmt_u64(char *buf, uint64_t v)
{
    char tmp[DM_FMT_U64_MAX];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = 0;
    return n;
}

size_t dm_fmt_long(char *buf, long v)
{
    if (v >= 0)
        return dm_fmt_u64(buf, (uint64_t)v);
    buf[0] = '-';
    return 1 + dm_fmt_u64(buf + 1, -(uint64_t)v);
}

long dm_jitter(long n)
{
    if (jitter_state == 0) {
        if (__atomic_load_n(&jitter_base, __ATOMIC_RELAXED) == 0) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            dm_jitter_seed((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^
                           ((uint64_t)getpid() << 40));
        }
        jitter_state = __atomic_add_fetch(&jitter_base, 0x9E3779B97F4A7C15ULL,
                                          __ATOMIC_RELAXED) | 1;
    }
    jitter_state ^= jitter_state << 13;
    jitter_state ^= jitter_state >> 7;
    jitter_state ^= jitter_state << 17;
    return n > 0 ? (long)(jitter_state % (uint64_t)n) : 0;
}

void dm_backoff_grow(struct dm_backoff *b)
{
    b->cur_ms = b->cur_ms * 2 > b->max_ms ? b->max_ms : b->cur_ms * 2;
}

long dm_backoff_next(struct dm_backoff *b)
{
    long d = b->cur_ms / 2 + dm_jitter(b->cur_ms / 2 + 1);
    dm_backoff_grow(b);
    return d;
}

void dm_backoff_reset(struct dm_backoff *b)
{
    b->cur_ms = b->min_ms;
}

size_t dm_hash_bytes(const char *s, size_t len)
{
    size_t h = 5381;
    for (size_t i = 0; i < len; i++)
        h = h * 33 + (unsigned char)s[i];
    return h ^ (h >> 17);
}

struct dm_hnode *dm_htab_chain(const struct dm_htab *t, size_t hash)
{
    return t->n ? t->b[hash & (t->n - 1)] : NULL;
}

/* Rebuilds with n buckets; keeps the old ones out of memory. */
static int htab_resize(struct dm_htab *t, size_t n)
{
    struct dm_hnode **nb = calloc(n, sizeof *nb);
    if (!nb)
        return -1;
    for (size_t i = 0; i < t->n; i++)
        for (struct dm_hnode *x = t->b[i], *nx; x; x = nx) {
            nx = x->next;
            x->next = nb[x->hash & (n - 1)];
            nb[x->hash & (n - 1)] = x;
        }
    free(t->b);
    t->b = nb;
    t->n = n;
    return 0;
}

int dm_htab_add(struct dm_htab *t, struct dm_hnode *x, size_t hash)
{
    if (!t->n && htab_resize(t, DM_HTAB_MIN) != 0)
        return -1;
    if (t->count + 1 > t->n)
        htab_resize(t, t->n * 2);
    x->hash = hash;
    x->next = t->b[hash & (t->n - 1)];
    t->b[hash & (t->n - 1)] = x;
    t->count++;
    return 0;
}

void dm_htab_del(struct dm_htab *t, struct dm_hnode *x)
{
    struct dm_hnode **p = &t->b[x->hash & (t->n - 1)];
    while (*p != x)
        p = &(*p)->next;
    *p = x->next;
    t->count--;
    if (!t->no_shrink && t->n > DM_HTAB_MIN && t->count < t->n / DM_HTAB_SHRINK_AT)
        htab_resize(t, t->n / 2);
}

struct dm_htab_stats dm_htab_stats(const struct dm_htab *t, pthread_mutex_t *mu)
{
    dm_lock(mu);
    struct dm_htab_stats st = { t->count, t->probes };
    dm_unlock(mu);
    return st;
}

int dm_hooks_add(struct dm_hooks *h, void (*fn)(void))
{
    for (int i = 0; i < DM_HOOKS_MAX; i++) {
        void (*none)(void) = NULL;
        if (__atomic_compare_exchange_n(&h->fn[i], &none, fn, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE) || none == fn)
            return 0;
    }
    return -1;
}

void dm_hooks_call(struct dm_hooks *h)
{
    for (int i = 0; i < DM_HOOKS_MAX; i++) {
        void (*fn)(void) = __atomic_load_n(&h->fn[i], __ATOMIC_ACQUIRE);
        if (fn)
            fn();
    }
}

void dm_fork_mutex(pthread_mutex_t *mu, enum dm_fork_phase phase)
{
    if (phase == DM_FORK_PREPARE) {
        dm_lock(mu);
    } else if (phase == DM_FORK_PARENT) {
        dm_unlock(mu);
    } else {
        pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
        memcpy(mu, &fresh, sizeof fresh);
    }
}
