/* notify: one thread reads the subscriber connection with poll(2) and is
 * woken through an eventfd when a waiter wants a new channel; hiredis is
 * used as a parser over that socket (redisBufferRead/Write), so one thread
 * alone ever touches the context. Every state change is announced on one
 * condition variable (CLOCK_MONOTONIC); waiters check their own channel's
 * count. A lost connection bumps every count, is remade with backoff, and
 * every wanted channel is subscribed again. */
#include "notify.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "redis.h"

#define DM_NOTIFY_BUCKETS      256
#define DM_NOTIFY_PING_MS      5000     /* idle time before a PING checks the link */
#define DM_NOTIFY_BACKOFF_MIN  50
#define DM_NOTIFY_BACKOFF_MAX  2000
#define DM_NOTIFY_LOG_EVERY_MS 5000
#define DM_NOTIFY_MSG_MAX      160      /* bytes of a message kept per channel */

enum chan_state { CHAN_IDLE, CHAN_WANTED, CHAN_SENT, CHAN_SUBSCRIBED };

struct dm_notify_chan {
    char *name;
    size_t len;
    enum chan_state state;
    unsigned long seq;
    char last[DM_NOTIFY_MSG_MAX];
    size_t last_len;
    dm_notify_fn fn;
    void *fn_arg;
    struct dm_notify_chan *next;
};

static pthread_mutex_t nmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ncv;
static int ncv_ready;
static struct dm_notify_chan *buckets[DM_NOTIFY_BUCKETS];
static int thread_running;
static int wake_fd = -1;
static unsigned long received;
static int connected;
static redisContext *sub_ctx;     /* the subscriber thread's, for the fork child */

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static void deadline_ts(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static size_t hash(const char *s, size_t len)
{
    size_t h = 5381;
    for (size_t i = 0; i < len; i++)
        h = h * 33 + (unsigned char)s[i];
    return h % DM_NOTIFY_BUCKETS;
}

/* Call with nmu held. */
static void cv_init_locked(void)
{
    if (ncv_ready)
        return;
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&ncv, &a);
    pthread_condattr_destroy(&a);
    ncv_ready = 1;
}

struct dm_notify_chan *dm_notify_chan(const char *channel)
{
    size_t len = strlen(channel);
    size_t b = hash(channel, len);
    pthread_mutex_lock(&nmu);
    cv_init_locked();
    struct dm_notify_chan *ch;
    for (ch = buckets[b]; ch; ch = ch->next)
        if (ch->len == len && memcmp(ch->name, channel, len) == 0)
            break;
    if (!ch && (ch = calloc(1, sizeof *ch)) != NULL) {
        if ((ch->name = strdup(channel)) == NULL) {
            free(ch);
            ch = NULL;
        } else {
            ch->len = len;
            ch->next = buckets[b];
            buckets[b] = ch;
        }
    }
    pthread_mutex_unlock(&nmu);
    return ch;
}

static void for_each_chan(void (*fn)(struct dm_notify_chan *))
{
    for (int b = 0; b < DM_NOTIFY_BUCKETS; b++)
        for (struct dm_notify_chan *ch = buckets[b]; ch; ch = ch->next)
            fn(ch);
}

static void chan_reset(struct dm_notify_chan *ch)
{
    if (ch->state != CHAN_IDLE)
        ch->state = CHAN_WANTED;
    ch->seq++;
}

static struct dm_notify_chan *find_locked(const char *s, size_t len)
{
    for (struct dm_notify_chan *ch = buckets[hash(s, len)]; ch; ch = ch->next)
        if (ch->len == len && memcmp(ch->name, s, len) == 0)
            return ch;
    return NULL;
}

static int send_wanted(redisContext *c)
{
    int n = 0;
    for (int b = 0; b < DM_NOTIFY_BUCKETS; b++)
        for (struct dm_notify_chan *ch = buckets[b]; ch; ch = ch->next)
            if (ch->state == CHAN_WANTED) {
                const char *argv[2] = { "SUBSCRIBE", ch->name };
                size_t lens[2] = { 9, ch->len };
                redisAppendCommandArgv(c, 2, argv, lens);
                ch->state = CHAN_SENT;
                n++;
            }
    return n;
}

/* Handles one pushed reply; nmu held. */
static void on_reply(redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    redisReply *chname = r->element[1];
    if (chname->type != REDIS_REPLY_STRING)
        return;
    struct dm_notify_chan *ch = find_locked(chname->str, chname->len);
    if (!ch)
        return;
    if (strcmp(kind, "message") == 0 && r->elements >= 3 &&
        r->element[2]->type == REDIS_REPLY_STRING) {
        redisReply *m = r->element[2];
        size_t n = m->len < sizeof ch->last ? m->len : sizeof ch->last - 1;
        memcpy(ch->last, m->str, n);
        ch->last[n] = 0;
        ch->last_len = m->len;
        ch->seq++;
        received++;
        if (ch->fn) {
            /* The context is this thread's alone: safe to let go of nmu. */
            dm_notify_fn fn = ch->fn;
            void *arg = ch->fn_arg;
            pthread_cond_broadcast(&ncv);
            pthread_mutex_unlock(&nmu);
            fn(arg, m->str, m->len);
            pthread_mutex_lock(&nmu);
            return;
        }
    } else if (strcmp(kind, "subscribe") == 0) {
        ch->state = CHAN_SUBSCRIBED;
    }
    pthread_cond_broadcast(&ncv);
}

static void *notify_main(void *arg)
{
    (void)arg;
    redisContext *c = NULL;
    long backoff = DM_NOTIFY_BACKOFF_MIN;
    static long log_last;
    long long last_rx = 0;
    int ping_out = 0;
    char err[DM_ERR_MAX];

    for (;;) {
        if (!c) {
            c = dm_redis_connect(err, sizeof err);
            if (!c) {
                dm_log_every(&log_last, DM_NOTIFY_LOG_EVERY_MS, DM_LOG_WARN,
                             "release notices unavailable (%s); waiters retry on their own", err);
                struct pollfd p = { wake_fd, POLLIN, 0 };
                poll(&p, 1, (int)(backoff / 2 + random() % (backoff / 2 + 1)));
                backoff = backoff * 2 > DM_NOTIFY_BACKOFF_MAX ? DM_NOTIFY_BACKOFF_MAX : backoff * 2;
                continue;
            }
            backoff = DM_NOTIFY_BACKOFF_MIN;
            last_rx = now_ms();
            ping_out = 0;
            pthread_mutex_lock(&nmu);
            sub_ctx = c;
            connected = 1;
            pthread_mutex_unlock(&nmu);
        }

        pthread_mutex_lock(&nmu);
        send_wanted(c);
        pthread_mutex_unlock(&nmu);
        int done = 0, broken = 0;
        while (!done && !broken)
            if (redisBufferWrite(c, &done) != REDIS_OK)
                broken = 1;

        long long idle = now_ms() - last_rx;
        if (!broken && idle >= DM_NOTIFY_PING_MS && !ping_out) {
            redisAppendCommand(c, "PING");
            done = 0;
            while (!done && !broken)
                if (redisBufferWrite(c, &done) != REDIS_OK)
                    broken = 1;
            ping_out = 1;
        }
        if (!broken && ping_out && idle >= DM_NOTIFY_PING_MS + 2 * DM_COMMAND_TIMEOUT_MS) {
            snprintf(c->errstr, sizeof c->errstr, "no answer to PING");
            broken = 1;
        }

        if (!broken) {
            struct pollfd p[2] = { { c->fd, POLLIN, 0 }, { wake_fd, POLLIN, 0 } };
            int timeout = DM_NOTIFY_PING_MS / 2;
            if (poll(p, 2, timeout) < 0 && errno != EINTR)
                broken = 1;
            if (p[1].revents & POLLIN) {
                uint64_t v;
                ssize_t n = read(wake_fd, &v, sizeof v);
                (void)n;
            }
            if (!broken && (p[0].revents & (POLLIN | POLLERR | POLLHUP))) {
                if (redisBufferRead(c) != REDIS_OK) {
                    broken = 1;
                } else {
                    last_rx = now_ms();
                    ping_out = 0;
                    redisReply *r;
                    pthread_mutex_lock(&nmu);
                    while (redisGetReplyFromReader(c, (void **)&r) == REDIS_OK && r) {
                        on_reply(r);
                        freeReplyObject(r);
                    }
                    pthread_mutex_unlock(&nmu);
                    if (c->err)
                        broken = 1;
                }
            }
        }

        if (broken) {
            dm_log_every(&log_last, DM_NOTIFY_LOG_EVERY_MS, DM_LOG_WARN,
                         "subscriber connection to redis at %s lost (%s); reconnecting",
                         dm_redis_addr(), c->errstr[0] ? c->errstr : "closed");
            pthread_mutex_lock(&nmu);
            sub_ctx = NULL;
            redisFree(c);
            c = NULL;
            connected = 0;
            for_each_chan(chan_reset);      /* wake everyone: a notice may be lost */
            pthread_cond_broadcast(&ncv);
            pthread_mutex_unlock(&nmu);
        }
    }
    return NULL;
}

/* Call with nmu held. */
static int start_thread_locked(void)
{
    if (thread_running)
        return 0;
    if (wake_fd < 0 && (wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        return errno;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* signals are the program's */
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &a, notify_main, NULL);
    pthread_attr_destroy(&a);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0)
        thread_running = 1;
    return rc;
}

static void wake_thread(void)
{
    uint64_t one = 1;
    ssize_t n = write(wake_fd, &one, sizeof one);
    (void)n;
}

int dm_notify_subscribe(struct dm_notify_chan *ch, long timeout_ms)
{
    pthread_mutex_lock(&nmu);
    if (ch->state == CHAN_SUBSCRIBED) {
        pthread_mutex_unlock(&nmu);
        return 0;
    }
    int rc = start_thread_locked();
    if (rc != 0) {
        pthread_mutex_unlock(&nmu);
        dm_warn("cannot start the subscriber thread: %s", strerror(rc));
        return rc;
    }
    if (ch->state == CHAN_IDLE)
        ch->state = CHAN_WANTED;
    wake_thread();
    struct timespec dl;
    deadline_ts(&dl, timeout_ms);
    while (ch->state != CHAN_SUBSCRIBED) {
        if (pthread_cond_timedwait(&ncv, &nmu, &dl) == ETIMEDOUT)
            break;
    }
    rc = ch->state == CHAN_SUBSCRIBED ? 0 : ETIMEDOUT;
    pthread_mutex_unlock(&nmu);
    return rc;
}

int dm_notify_is_subscribed(struct dm_notify_chan *ch)
{
    pthread_mutex_lock(&nmu);
    int yes = ch->state == CHAN_SUBSCRIBED;
    pthread_mutex_unlock(&nmu);
    return yes;
}

unsigned long dm_notify_seq(struct dm_notify_chan *ch)
{
    pthread_mutex_lock(&nmu);
    unsigned long s = ch->seq;
    pthread_mutex_unlock(&nmu);
    return s;
}

int dm_notify_wait(struct dm_notify_chan *ch, unsigned long seen, long timeout_ms)
{
    struct timespec dl;
    deadline_ts(&dl, timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&nmu);
    while (ch->seq == seen) {
        if (pthread_cond_timedwait(&ncv, &nmu, &dl) == ETIMEDOUT) {
            rc = ch->seq == seen ? ETIMEDOUT : 0;
            break;
        }
    }
    pthread_mutex_unlock(&nmu);
    return rc;
}

size_t dm_notify_last(struct dm_notify_chan *ch, char *buf, size_t len)
{
    pthread_mutex_lock(&nmu);
    size_t n = ch->last_len;
    if (len > 0) {
        size_t c = n < len - 1 ? n : len - 1;
        if (c > sizeof ch->last - 1)
            c = sizeof ch->last - 1;
        memcpy(buf, ch->last, c);
        buf[c] = 0;
    }
    pthread_mutex_unlock(&nmu);
    return n;
}

void dm_notify_set_handler(struct dm_notify_chan *ch, dm_notify_fn fn, void *arg)
{
    pthread_mutex_lock(&nmu);
    ch->fn = fn;
    ch->fn_arg = arg;
    pthread_mutex_unlock(&nmu);
}

unsigned long dm_notify_received(void)
{
    return __atomic_load_n(&received, __ATOMIC_RELAXED);
}

static void chan_forget(struct dm_notify_chan *ch)
{
    ch->state = CHAN_IDLE;
}

/* Fork: preload's prepare handler holds nmu across fork() (see the lock
 * order in preload.c); the parent lets go, the child makes it anew. */
void dm_notify_atfork_prepare(void)
{
    pthread_mutex_lock(&nmu);
}

void dm_notify_atfork_parent(void)
{
    pthread_mutex_unlock(&nmu);
}

void dm_notify_atfork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&nmu, &fresh, sizeof fresh);
    ncv_ready = 0;
    cv_init_locked();
    thread_running = 0;
    connected = 0;
    /* The parent's subscriber socket and eventfd are shared with the child:
     * close them here (the context's memory belonged to a thread that does
     * not exist in the child and is left alone). */
    if (sub_ctx) {
        close(sub_ctx->fd);
        sub_ctx = NULL;
    }
    if (wake_fd >= 0) {
        close(wake_fd);
        wake_fd = -1;
    }
    for_each_chan(chan_forget);
}
