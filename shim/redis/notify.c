/* notify: one thread reads the subscriber connection with poll(2) and is
 * woken through an eventfd when a waiter wants a new channel or a channel
 * is dropped; hiredis is used as a parser over that socket, its bytes
 * moved by net (dm_net_read/write: plain send/recv, or TLS), so one
 * thread alone ever touches the context.
 * Every state change is announced on one condition variable
 * (CLOCK_MONOTONIC); waiters check their own channel's count. A lost
 * connection bumps every count, is remade with backoff, and every wanted
 * channel is subscribed again.
 *
 * Channels are reference counted and live in a hash table that grows and
 * shrinks with their number, so a process with many short-lived names
 * neither leaks them nor scans long chains. Work for the subscriber thread
 * (a SUBSCRIBE to send, a dropped channel to UNSUBSCRIBE and free) goes on
 * one list, so that a wake-up costs what changed, not the table's size. */
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
#include "real.h"
#include "redis.h"
#include "util.h"

#define DM_NOTIFY_PING_MS      5000     /* idle time before a PING checks the link */
#define DM_NOTIFY_BACKOFF_MIN  50
#define DM_NOTIFY_BACKOFF_MAX  2000
#define DM_NOTIFY_LOG_EVERY_MS 5000
#define DM_NOTIFY_MSG_MAX      160      /* bytes of a message kept per channel */

/* UNSUBSCRIBING: an UNSUBSCRIBE was sent and its reply is awaited; until
 * then a "subscribe" reply of the name is an old one. */
enum chan_state { CHAN_IDLE, CHAN_WANTED, CHAN_SENT, CHAN_SUBSCRIBED, CHAN_UNSUBSCRIBING };

/* A channel without references is `dead`: if the server may know it, it
 * stays in the table until the subscriber thread has sent its UNSUBSCRIBE
 * and seen the reply, then the thread frees it. So there is never more
 * than one record of a name, and replies to a dropped record's commands
 * cannot be taken for a new one's; a dm_notify_chan of the name meanwhile
 * takes the dead record back. */
struct dm_chan {
    struct dm_hnode node;               /* first: the table of channels (util.h) */
    struct dm_chan *work_next;   /* the work list, when on_work */
    char *last;                         /* made at the first message */
    size_t last_len;
    unsigned long seq;
    dm_notify_fn fn;
    void *fn_arg;
    size_t len;
    unsigned refs;
    unsigned char state;                /* enum chan_state */
    unsigned char on_work;
    unsigned char dead;
    unsigned char resubscribe;          /* wanted again while UNSUBSCRIBING */
    unsigned char again;                /* subscribed again after a loss or a move: the
                                         * count moves once more when it is confirmed */
    int slot;                           /* Redis Cluster: the slot of the name; -1 otherwise */
    int sub_node;                       /* the connection (S)SUBSCRIBE went on (0 without a cluster) */
    char name[];
};

static pthread_mutex_t nmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ncv;
static int ncv_ready;
static struct dm_htab chans;
static struct dm_chan *work, **work_tail = &work;
static struct dm_chan *calling;  /* whose handler the thread is running */
static pthread_t sub_thread;
static int thread_running;
static int wake_fd = -1;
static unsigned long received;
static redisContext *sub_ctx[DM_REDIS_NODES_MAX];  /* the thread's, for the fork child */
static unsigned char link_down[DM_REDIS_NODES_MAX]; /* nmu: the node's last connect failed */
static struct dm_timer *timers;          /* armed ones, unordered (few: one per lingering hold) */
static struct dm_timer *timer_running;   /* whose fn the thread is calling */
static long long sleeps_until;  /* the thread's next wake (ns) while it sleeps in poll; 0: awake */
/* A channel was subscribed (atomic): without a cluster, the one connection
 * is made then and kept. Timers alone (a thread started for them) need none. */
static int subs_used;
static void (*image_fn)(void);          /* dm_notify_on_image_end's */
static unsigned long image_asked, image_done;   /* atomic */

/* Call with nmu held. */
static void cv_init_locked(void)
{
    if (ncv_ready)
        return;
    dm_cond_init_monotonic(&ncv);
    ncv_ready = 1;
}

static struct dm_chan *find_locked(const char *s, size_t len, size_t h)
{
    for (struct dm_hnode *x = dm_htab_chain(&chans, h); x; x = x->next) {
        struct dm_chan *ch = (struct dm_chan *)x;
        chans.probes++;
        if (x->hash == h && ch->len == len && memcmp(ch->name, s, len) == 0)
            return ch;
    }
    return NULL;
}

struct dm_chan *dm_notify_chan(const char *channel)
{
    size_t len = strlen(channel);
    size_t h = dm_hash_bytes(channel, len);
    dm_lock(&nmu);
    cv_init_locked();
    struct dm_chan *ch = find_locked(channel, len, h);
    if (ch) {
        ch->refs++;
        ch->dead = 0;
    } else if ((ch = calloc(1, sizeof *ch + len + 1)) != NULL) {
        memcpy(ch->name, channel, len + 1);
        ch->len = len;
        ch->slot = dm_redis_slot(channel);
        ch->refs = 1;
        if (dm_htab_add(&chans, &ch->node, h) != 0) {
            free(ch);
            ch = NULL;
        }
    }
    dm_unlock(&nmu);
    return ch;
}

static void unlink_locked(struct dm_chan *ch)
{
    dm_htab_del(&chans, &ch->node);
}

static void chan_free(struct dm_chan *ch)
{
    free(ch->last);
    free(ch);
}

static void work_push_locked(struct dm_chan *ch)
{
    if (ch->on_work)
        return;
    ch->on_work = 1;
    ch->work_next = NULL;
    *work_tail = ch;
    work_tail = &ch->work_next;
}

static void wake_thread(void)
{
    uint64_t one = 1;
    ssize_t n = write(wake_fd, &one, sizeof one);
    (void)n;
}

/* Waits until the subscriber thread is not inside ch's handler, unless the
 * caller is that very thread (a handler dropping its own channel). */
static void handler_quiesce_locked(struct dm_chan *ch)
{
    while (calling == ch && !(thread_running && pthread_equal(pthread_self(), sub_thread)))
        dm_cv_wait(&ncv, &nmu);
}

void dm_notify_chan_put(struct dm_chan *ch)
{
    if (!ch)
        return;
    dm_lock(&nmu);
    if (ch->refs == 1) {
        /* Ours is the last reference: it keeps the record alive while a
         * call of the handler in progress ends. */
        ch->fn = NULL;
        ch->fn_arg = NULL;
        handler_quiesce_locked(ch);
    }
    if (--ch->refs > 0) {
        dm_unlock(&nmu);
        return;
    }
    ch->dead = 1;
    ch->resubscribe = 0;
    if (ch->on_work || ch->state == CHAN_UNSUBSCRIBING) {
        /* The thread will see it dead: when popping it, or at the reply. */
    } else if (ch->state == CHAN_SENT || ch->state == CHAN_SUBSCRIBED) {
        work_push_locked(ch);
        wake_thread();
    } else {
        unlink_locked(ch);
        chan_free(ch);
    }
    dm_unlock(&nmu);
}

/* The connection is gone, and every subscription with it: a dead record
 * needs no UNSUBSCRIBE any more, a live one is subscribed again if it was
 * or is wanted. nmu held; frees dead records off the work list. */
static void chan_reset(struct dm_chan *ch)
{
    ch->seq++;
    if (ch->dead) {
        ch->state = CHAN_IDLE;
        if (!ch->on_work) {
            unlink_locked(ch);
            chan_free(ch);
        }
        return;
    }
    if (ch->state == CHAN_UNSUBSCRIBING && !ch->resubscribe)
        ch->state = CHAN_IDLE;
    ch->resubscribe = 0;
    if (ch->state != CHAN_IDLE) {
        ch->state = CHAN_WANTED;
        ch->again = 1;
        work_push_locked(ch);
    }
}

/* fn on every record; fn may unlink and free the one it is given (the
 * table keeps its size meanwhile). nmu held. */
static void for_each_chan(void (*fn)(struct dm_chan *))
{
    chans.no_shrink = 1;
    for (size_t b = 0; b < chans.n; b++)
        for (struct dm_hnode *x = chans.b[b], *nx; x; x = nx) {
            nx = x->next;
            fn((struct dm_chan *)x);
        }
    chans.no_shrink = 0;
}

/* Redis Cluster: sharded pub/sub. A lock's notices go to the shard that
 * owns its slot (SPUBLISH), so each channel is subscribed (SSUBSCRIBE) on
 * the connection to the primary of its slot: one connection per node this
 * thread needs, all polled by this one thread. Without a cluster there is
 * one connection (node 0) and plain SUBSCRIBE, as there always was. */
struct sub {
    struct dm_conn conn;        /* conn.c NULL: not connected */
    long long last_rx;
    int ping_out;
    int wanted;                 /* a channel waits for this connection */
    long long retry_ms;         /* no connect before this (backoff) */
    struct dm_backoff backoff;
};
static struct sub subs[DM_REDIS_NODES_MAX];     /* the subscriber thread's */
static long long resend_ms;     /* cluster: no (S)SUBSCRIBE before this (after a redirection) */

#define DM_NOTIFY_RESEND_MS 100 /* a SSUBSCRIBE refused (MOVED, TRYAGAIN) is sent again after this */

static const char *sub_cmd(int dead)
{
    if (dm_redis_cluster())
        return dead ? "SUNSUBSCRIBE" : "SSUBSCRIBE";
    return dead ? "UNSUBSCRIBE" : "SUBSCRIBE";
}

/* Appends the SUBSCRIBEs and UNSUBSCRIBEs the work list asks for, each on
 * the connection of its channel's node, and frees the dead records the
 * server never knew. A channel whose node is not connected (or not known
 * yet) stays on the list, its node marked wanted. */
static void do_work_locked(void)
{
    struct dm_chan *ch, *later = NULL, **later_tail = &later;
    int cluster = dm_redis_cluster();
    long long now = dm_now_ms();
    while ((ch = work) != NULL) {
        work = ch->work_next;
        if (!work)
            work_tail = &work;
        ch->on_work = 0;
        if (ch->dead) {
            redisContext *c = subs[ch->sub_node].conn.c;
            if ((ch->state == CHAN_SENT || ch->state == CHAN_SUBSCRIBED) && c) {
                const char *argv[2] = { sub_cmd(1), ch->name };
                size_t lens[2] = { strlen(argv[0]), ch->len };
                dm_net_append_argv(c, 2, argv, lens);
                ch->state = CHAN_UNSUBSCRIBING;
            } else if (ch->state != CHAN_UNSUBSCRIBING) {
                unlink_locked(ch);
                chan_free(ch);
            }
            continue;
        }
        if (ch->state != CHAN_WANTED)
            continue;
        int node = cluster ? dm_redis_node_cached(ch->slot) : 0;
        if (node >= 0 && subs[node].conn.c && !(cluster && now < resend_ms)) {
            const char *argv[2] = { sub_cmd(0), ch->name };
            size_t lens[2] = { strlen(argv[0]), ch->len };
            dm_net_append_argv(subs[node].conn.c, 2, argv, lens);
            ch->sub_node = node;
            ch->state = CHAN_SENT;
            continue;
        }
        if (node >= 0)
            subs[node].wanted = 1;
        else
            dm_redis_slots_stale();     /* no node known for its slot: ask the map */
        ch->on_work = 1;
        ch->work_next = NULL;
        *later_tail = ch;
        later_tail = &ch->work_next;
    }
    if (later) {
        *work_tail = later;
        work_tail = later_tail;
    }
}

/* Cluster: a refusal of a SSUBSCRIBE sent on node's connection (MOVED,
 * ASK, TRYAGAIN, CLUSTERDOWN: the replies do not say which channel), or
 * the node telling that a channel's slot left it (an sunsubscribe nobody
 * asked for): those channels are subscribed again where the map says,
 * after a short while, and their waiters woken (a notice may have gone to
 * the new owner meanwhile). nmu held. */
static void resubscribe_locked(struct dm_chan *ch)
{
    ch->seq++;
    ch->again = 1;
    ch->state = CHAN_WANTED;
    work_push_locked(ch);
    resend_ms = dm_now_ms() + DM_NOTIFY_RESEND_MS;
}

static void refused_locked(int node, const char *msg)
{
    if (!dm_redis_redirected(msg))
        dm_redis_slots_stale();
    dm_debug("subscriber connection to node %d: %s; subscribing again", node, msg);
    chans.no_shrink = 1;
    for (size_t b = 0; b < chans.n; b++)
        for (struct dm_hnode *x = chans.b[b]; x; x = x->next) {
            struct dm_chan *ch = (struct dm_chan *)x;
            if (!ch->dead && ch->sub_node == node && ch->state == CHAN_SENT)
                resubscribe_locked(ch);
        }
    chans.no_shrink = 0;
}

/* Cluster: the map changed: a channel subscribed on a node that no longer
 * owns its slot is subscribed again on the new owner (its old
 * subscription is left to the old node, whose replies for it are ignored
 * from now on). nmu held. */
static void follow_map_locked(void)
{
    chans.no_shrink = 1;
    for (size_t b = 0; b < chans.n; b++)
        for (struct dm_hnode *x = chans.b[b], *nx; x; x = nx) {
            nx = x->next;
            struct dm_chan *ch = (struct dm_chan *)x;
            if (ch->state != CHAN_SENT && ch->state != CHAN_SUBSCRIBED &&
                ch->state != CHAN_UNSUBSCRIBING)
                continue;
            int owner = dm_redis_node_cached(ch->slot);
            if (owner < 0 || owner == ch->sub_node)
                continue;
            if (ch->dead || (ch->state == CHAN_UNSUBSCRIBING && !ch->resubscribe)) {
                ch->state = CHAN_IDLE;
                if (ch->dead && !ch->on_work) {
                    unlink_locked(ch);
                    chan_free(ch);
                }
                continue;
            }
            ch->resubscribe = 0;
            ch->seq++;
            ch->again = 1;
            ch->state = CHAN_WANTED;
            work_push_locked(ch);
        }
    chans.no_shrink = 0;
}

/* Handles one pushed reply from node's connection; nmu held. */
static void on_reply(redisReply *r, int node)
{
    int cluster = dm_redis_cluster();
    if (r->type == REDIS_REPLY_ERROR && cluster) {
        refused_locked(node, r->str);
        dm_cv_broadcast(&ncv);
        return;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
        r->element[0]->type != REDIS_REPLY_STRING)
        return;
    const char *kind = r->element[0]->str;
    if (kind[0] == 's' && cluster)
        kind++;     /* smessage, ssubscribe, sunsubscribe: as their plain forms */
    redisReply *chname = r->element[1];
    if (chname->type != REDIS_REPLY_STRING)
        return;
    struct dm_chan *ch = find_locked(chname->str, chname->len,
                                            dm_hash_bytes(chname->str, chname->len));
    if (!ch)
        return;
    if (strcmp(kind, "message") == 0 && r->elements >= 3 &&
        r->element[2]->type == REDIS_REPLY_STRING) {
        redisReply *m = r->element[2];
        if (!ch->last)
            ch->last = malloc(DM_NOTIFY_MSG_MAX);
        if (ch->last) {
            size_t n = m->len < DM_NOTIFY_MSG_MAX ? m->len : DM_NOTIFY_MSG_MAX - 1;
            memcpy(ch->last, m->str, n);
            ch->last[n] = 0;
            ch->last_len = m->len;
        }
        ch->seq++;
        received++;
        if (ch->fn) {
            /* The contexts are this thread's alone: safe to let go of nmu.
             * `calling` makes a put or set_handler of this channel from
             * another thread wait for the call; the handler may drop its
             * own channel, so ch is not touched after the call. */
            dm_notify_fn fn = ch->fn;
            void *arg = ch->fn_arg;
            calling = ch;
            dm_cv_broadcast(&ncv);
            dm_unlock(&nmu);
            fn(arg, m->str, m->len);
            dm_lock(&nmu);
            calling = NULL;
        }
    } else if (ch->sub_node != node) {
        /* a reply about a subscription left on a node the slot moved from */
    } else if (strcmp(kind, "subscribe") == 0) {
        if (ch->state == CHAN_SENT) {
            ch->state = CHAN_SUBSCRIBED;
            /* A waiter that read the count between the loss (or the move)
             * and now slept on a channel nobody delivered to: a notice
             * sent meanwhile is lost, so its count moves now too. */
            if (ch->again) {
                ch->again = 0;
                ch->seq++;
            }
        }
    } else if (strcmp(kind, "unsubscribe") == 0 && ch->state == CHAN_UNSUBSCRIBING) {
        if (ch->dead) {
            unlink_locked(ch);
            chan_free(ch);
        } else if (ch->resubscribe) {
            ch->resubscribe = 0;
            ch->state = CHAN_WANTED;
            work_push_locked(ch);       /* sent at the top of the thread's loop */
        } else {
            ch->state = CHAN_IDLE;
        }
    } else if (strcmp(kind, "unsubscribe") == 0 && cluster &&
               (ch->state == CHAN_SUBSCRIBED || ch->state == CHAN_SENT)) {
        /* The node unsubscribed us itself: the slot was migrated away. */
        dm_redis_slots_stale();
        if (ch->dead) {
            ch->state = CHAN_IDLE;
            if (!ch->on_work) {
                unlink_locked(ch);
                chan_free(ch);
            }
        } else {
            resubscribe_locked(ch);
        }
    }
    dm_cv_broadcast(&ncv);
}

/* The connection of `node` is gone, and every subscription on it: its
 * channels are reset (chan_reset), the others stay. nmu held. */
static int reset_node;
static void chan_reset_node(struct dm_chan *ch)
{
    if (ch->sub_node == reset_node)
        chan_reset(ch);
}

static void sub_lost(int node)
{
    struct sub *s = &subs[node];
    static long log_last;
    if (s->conn.err != DM_REDIS_IO) {
        s->conn.err = DM_REDIS_IO;
        snprintf(s->conn.errstr, sizeof s->conn.errstr, "%s",
                 s->conn.c->errstr[0] ? s->conn.c->errstr : "closed");
    }
    dm_log_every(&log_last, DM_NOTIFY_LOG_EVERY_MS, DM_LOG_WARN,
                 "subscriber connection to redis at %s lost (%s); reconnecting",
                 dm_redis_conn_addr(&s->conn), s->conn.errstr);
    dm_lock(&nmu);
    sub_ctx[node] = NULL;
    dm_redis_close(&s->conn);
    reset_node = node;
    for_each_chan(chan_reset_node);     /* wake everyone: a notice may be lost */
    dm_cv_broadcast(&ncv);
    dm_unlock(&nmu);
}

/* Connects node's connection, unless its backoff says wait. 0 or -1. */
static int sub_connect(int node)
{
    struct sub *s = &subs[node];
    static long log_last;
    if (dm_now_ms() < s->retry_ms)
        return -1;
    int rc = dm_redis_cluster() ? dm_redis_connect_node(&s->conn, node)
                                : dm_redis_connect(&s->conn);
    if (rc != 0) {
        dm_log_every(&log_last, DM_NOTIFY_LOG_EVERY_MS, DM_LOG_WARN,
                     "release notices unavailable (%s); waiters retry on their own",
                     s->conn.errstr);
        s->retry_ms = dm_now_ms() + dm_backoff_next(&s->backoff);
        dm_lock(&nmu);
        link_down[node] = 1;            /* a subscription waits for nothing meanwhile */
        dm_cv_broadcast(&ncv);
        dm_unlock(&nmu);
        return -1;
    }
    dm_backoff_reset(&s->backoff);
    s->last_rx = dm_now_ms();
    s->ping_out = 0;
    s->wanted = 0;
    dm_lock(&nmu);
    sub_ctx[node] = s->conn.c;
    link_down[node] = 0;
    dm_unlock(&nmu);
    return 0;
}

/* Writes what is queued on node's connection, and a PING after a quiet
 * while; 0, or -1: the connection is broken (the cause on it). */
static int sub_flush(struct sub *s)
{
    redisContext *c = s->conn.c;
    int done = 0;
    while (!done)
        if (dm_net_write(c, s->conn.tls, &done) != REDIS_OK)
            return -1;
    long long idle = dm_now_ms() - s->last_rx;
    if (idle >= DM_NOTIFY_PING_MS && !s->ping_out) {
        redisAppendCommand(c, "PING");
        done = 0;
        while (!done)
            if (dm_net_write(c, s->conn.tls, &done) != REDIS_OK)
                return -1;
        s->ping_out = 1;
    }
    if (s->ping_out && idle >= DM_NOTIFY_PING_MS + 2 * DM_COMMAND_TIMEOUT_MS) {
        s->conn.err = DM_REDIS_IO;
        snprintf(s->conn.errstr, sizeof s->conn.errstr, "no answer to PING");
        return -1;
    }
    return 0;
}

/* Reads what node's connection has and handles every reply; 0 or -1. */
static int sub_read(int node)
{
    struct sub *s = &subs[node];
    redisContext *c = s->conn.c;
    if (dm_net_read(c, s->conn.tls) != REDIS_OK)
        return -1;
    s->last_rx = dm_now_ms();
    s->ping_out = 0;
    redisReply *r;
    dm_lock(&nmu);
    while (redisGetReplyFromReader(c, (void **)&r) == REDIS_OK && r) {
        on_reply(r, node);
        freeReplyObject(r);
    }
    dm_unlock(&nmu);
    return c->err ? -1 : 0;
}

/* Without a cluster: the one connection is made at the first subscription
 * and kept (remade after a loss) from then on. */
static int keep_one(void)
{
    return __atomic_load_n(&subs_used, __ATOMIC_RELAXED);
}

/* The thread's sleep: timeout_ms, or less to the earliest armed timer.
 * Notes when it wakes, so that an earlier arm meanwhile wakes it. */
static struct timespec sleep_for_locked_timers(int timeout_ms)
{
    long long now = dm_now_ns(), until = now + (long long)timeout_ms * 1000000LL;
    dm_lock(&nmu);
    for (struct dm_timer *t = timers; t; t = t->next)
        if (t->at_ns < until)
            until = t->at_ns;
    if (until < now)
        until = now;
    sleeps_until = until;
    dm_unlock(&nmu);
    long long d = until - now;
    return (struct timespec){ (time_t)(d / 1000000000LL), (long)(d % 1000000000LL) };
}

/* An exec or _exit asked for the image-end function (no lock is taken
 * by the asker: it may be a signal handler). */
static void image_end_run(void)
{
    unsigned long asked = __atomic_load_n(&image_asked, __ATOMIC_ACQUIRE);
    if (asked == __atomic_load_n(&image_done, __ATOMIC_ACQUIRE))
        return;
    if (image_fn)
        image_fn();
    __atomic_store_n(&image_done, asked, __ATOMIC_RELEASE);
}

void dm_notify_on_image_end(void (*fn)(void))
{
    image_fn = fn;
}

void dm_notify_image_ends(long max_ms)
{
    if (!image_fn || !__atomic_load_n(&thread_running, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&wake_fd, __ATOMIC_ACQUIRE) < 0 ||
        pthread_equal(pthread_self(), sub_thread))
        return;
    unsigned long want = __atomic_add_fetch(&image_asked, 1, __ATOMIC_ACQ_REL);
    wake_thread();
    for (long waited = 0; waited < max_ms; waited++) {
        if ((long)(__atomic_load_n(&image_done, __ATOMIC_ACQUIRE) - want) >= 0)
            return;
        struct timespec ts = { 0, 1000000L };
        nanosleep(&ts, NULL);
    }
}

/* Calls the timers that are due, one at a time, without nmu. */
static void timers_run(void)
{
    dm_lock(&nmu);
    sleeps_until = 0;
    for (;;) {
        long long now = dm_now_ns();
        struct dm_timer **pp = &timers;
        while (*pp && (*pp)->at_ns > now)
            pp = &(*pp)->next;
        struct dm_timer *due = *pp;
        if (!due)
            break;
        *pp = due->next;
        due->armed = 0;
        timer_running = due;
        dm_unlock(&nmu);
        due->fn(due->arg);
        dm_lock(&nmu);
        timer_running = NULL;
        dm_cv_broadcast(&ncv);
    }
    dm_unlock(&nmu);
}

static void *notify_main(void *arg)
{
    (void)arg;
    int cluster = dm_redis_cluster();
    unsigned long map_gen = dm_redis_slots_gen();
    for (int i = 0; i < DM_REDIS_NODES_MAX; i++)
        subs[i].backoff = (struct dm_backoff)DM_BACKOFF_INIT(DM_NOTIFY_BACKOFF_MIN,
                                                              DM_NOTIFY_BACKOFF_MAX);

    for (;;) {
        /* Connections a channel waits for (without a cluster: the one). */
        for (int i = 0; i < DM_REDIS_NODES_MAX; i++)
            if ((subs[i].wanted || (!cluster && i == 0 && keep_one())) && !subs[i].conn.c)
                sub_connect(i);
        if (cluster) {
            dm_redis_refresh_if_wanted();
            unsigned long g = dm_redis_slots_gen();
            if (g != map_gen) {
                map_gen = g;
                dm_lock(&nmu);
                follow_map_locked();
                dm_cv_broadcast(&ncv);
                dm_unlock(&nmu);
            }
        }
        for (int i = 0; cluster && i < DM_REDIS_NODES_MAX; i++)
            if (dm_redis_conn_stale(&subs[i].conn)) {
                /* its node's index has another address now */
                subs[i].conn.err = DM_REDIS_IO;
                snprintf(subs[i].conn.errstr, sizeof subs[i].conn.errstr,
                         "the node's address was reused for another node");
                sub_lost(i);
            }
        if (!cluster && subs[0].conn.c && dm_redis_conn_stale(&subs[0].conn)) {
            /* Sentinel: the primary moved; subscribe on the new one. */
            subs[0].conn.err = DM_REDIS_IO;
            snprintf(subs[0].conn.errstr, sizeof subs[0].conn.errstr,
                     "the sentinels named a new primary");
            sub_lost(0);
            continue;
        }
        dm_lock(&nmu);
        do_work_locked();
        int pending = work != NULL;
        dm_unlock(&nmu);

        struct pollfd p[DM_REDIS_NODES_MAX + 1];
        int who[DM_REDIS_NODES_MAX + 1], np = 0, buffered = 0;
        p[np] = (struct pollfd){ wake_fd, POLLIN, 0 };
        who[np++] = -1;
        for (int i = 0; i < DM_REDIS_NODES_MAX; i++) {
            if (!subs[i].conn.c)
                continue;
            if (sub_flush(&subs[i]) != 0) {
                sub_lost(i);
                continue;
            }
            /* Bytes a TLS session already holds are not on the socket:
             * poll(2) would sleep on them. */
            buffered |= dm_net_buffered(subs[i].conn.tls);
            p[np] = (struct pollfd){ subs[i].conn.c->fd, POLLIN, 0 };
            who[np++] = i;
        }
        int timeout = buffered ? 0 : DM_NOTIFY_PING_MS / 2;
        /* Work that waits (a node to connect, a refused SSUBSCRIBE, the
         * backoff of a failed connect) is looked at again soon. */
        if (pending && timeout > DM_NOTIFY_RESEND_MS)
            timeout = DM_NOTIFY_RESEND_MS;
        for (int i = 0; i < DM_REDIS_NODES_MAX; i++)
            if ((subs[i].wanted || (!cluster && i == 0 && keep_one())) && !subs[i].conn.c) {
                long long w = subs[i].retry_ms - dm_now_ms();
                if (w < 0)
                    w = 0;
                if (w < timeout)
                    timeout = (int)w;
            }
        /* ppoll: a lingering hold's timer is a fraction of a millisecond. */
        struct timespec ts = sleep_for_locked_timers(timeout);
        int polled = ppoll(p, (nfds_t)np, &ts, NULL);
        image_end_run();
        timers_run();
        if (polled < 0 && errno != EINTR)
            continue;
        if (p[0].revents & POLLIN) {
            uint64_t v;
            ssize_t n = read(wake_fd, &v, sizeof v);
            (void)n;
        }
        for (int k = 1; k < np; k++) {
            int i = who[k];
            if (!subs[i].conn.c)
                continue;
            if (buffered && dm_net_buffered(subs[i].conn.tls))
                p[k].revents |= POLLIN;
            if ((p[k].revents & (POLLIN | POLLERR | POLLHUP)) && sub_read(i) != 0)
                sub_lost(i);
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
    int rc = dm_thread_start(&sub_thread, notify_main, NULL);
    if (rc == 0) {
        thread_running = 1;
        dm_redis_on_switch(wake_thread);    /* Sentinel: a new primary wakes the thread */
    }
    return rc;
}

/* The node whose connection carries ch's subscription (0 without a
 * cluster, or when no node is known for its slot yet). nmu held. */
static int chan_node_locked(const struct dm_chan *ch)
{
    int node = dm_redis_cluster() ? dm_redis_node_cached(ch->slot) : 0;
    return node >= 0 && node < DM_REDIS_NODES_MAX ? node : 0;
}

int dm_notify_timer_arm(struct dm_timer *t, long long at_ns,
                        void (*fn)(void *arg), void *arg)
{
    int wake = 0;
    dm_lock(&nmu);
    cv_init_locked();
    int rc = start_thread_locked();
    if (rc == 0) {
        if (!t->armed) {
            t->fn = fn;
            t->arg = arg;
            t->at_ns = at_ns;
            t->armed = 1;
            t->next = timers;
            timers = t;
        } else if (at_ns < t->at_ns) {
            t->at_ns = at_ns;
        }
        /* Asleep past it: wake the thread to sleep less (awake, it looks
         * at the timers before it sleeps again). */
        wake = sleeps_until != 0 && t->at_ns < sleeps_until;
    }
    dm_unlock(&nmu);
    if (wake)
        wake_thread();
    return rc;
}

void dm_notify_timer_cancel(struct dm_timer *t)
{
    dm_lock(&nmu);
    if (t->armed) {
        struct dm_timer **pp = &timers;
        while (*pp != t)
            pp = &(*pp)->next;
        *pp = t->next;
        t->armed = 0;
    }
    while (timer_running == t && !(thread_running && pthread_equal(pthread_self(), sub_thread)))
        dm_cv_wait(&ncv, &nmu);
    dm_unlock(&nmu);
}

int dm_notify_subscribe(struct dm_chan *ch, long timeout_ms)
{
    dm_lock(&nmu);
    if (ch->state == CHAN_SUBSCRIBED) {
        dm_unlock(&nmu);
        return 0;
    }
    int rc = start_thread_locked();
    if (rc != 0) {
        dm_unlock(&nmu);
        dm_warn("cannot start the subscriber thread: %s", strerror(rc));
        return rc;
    }
    __atomic_store_n(&subs_used, 1, __ATOMIC_RELAXED);
    if (ch->state == CHAN_IDLE) {
        ch->state = CHAN_WANTED;
        work_push_locked(ch);
    } else if (ch->state == CHAN_UNSUBSCRIBING) {
        ch->resubscribe = 1;
    }
    wake_thread();
    struct timespec dl;
    dm_deadline_in(&dl, timeout_ms);
    /* The connection that would carry it failed to connect last time:
     * nothing to wait for (the thread keeps trying on its own). */
    while (ch->state != CHAN_SUBSCRIBED && !link_down[chan_node_locked(ch)]) {
        if (dm_cv_timedwait(&ncv, &nmu, &dl) == ETIMEDOUT)
            break;
    }
    rc = ch->state == CHAN_SUBSCRIBED ? 0 : link_down[chan_node_locked(ch)] ? EAGAIN : ETIMEDOUT;
    dm_unlock(&nmu);
    return rc;
}

int dm_notify_is_subscribed(struct dm_chan *ch)
{
    dm_lock(&nmu);
    int yes = ch->state == CHAN_SUBSCRIBED;
    dm_unlock(&nmu);
    return yes;
}

unsigned long dm_notify_seq(struct dm_chan *ch)
{
    dm_lock(&nmu);
    unsigned long s = ch->seq;
    dm_unlock(&nmu);
    return s;
}

int dm_notify_wait(struct dm_chan *ch, unsigned long seen, long timeout_ms)
{
    struct timespec dl;
    dm_deadline_in(&dl, timeout_ms);
    int rc = 0;
    dm_lock(&nmu);
    while (ch->seq == seen) {
        if (dm_cv_timedwait(&ncv, &nmu, &dl) == ETIMEDOUT) {
            rc = ch->seq == seen ? ETIMEDOUT : 0;
            break;
        }
    }
    dm_unlock(&nmu);
    return rc;
}

void dm_notify_bump(struct dm_chan *ch)
{
    dm_lock(&nmu);
    ch->seq++;
    cv_init_locked();
    dm_cv_broadcast(&ncv);
    dm_unlock(&nmu);
}

static void wait_cancelled(void *arg)
{
    (void)arg;
    dm_unlock(&nmu);
}

int dm_notify_wait_until(struct dm_chan *ch, unsigned long seen,
                         const struct timespec *deadline)
{
    volatile int rc = 0;        /* set between the cleanup's setjmp and its pop */
    dm_lock(&nmu);
    cv_init_locked();
    pthread_cleanup_push(wait_cancelled, NULL);
    while (ch->seq == seen) {
        if (!deadline) {
            dm_cv_wait(&ncv, &nmu);
        } else if (dm_cv_timedwait(&ncv, &nmu, deadline) == ETIMEDOUT) {
            rc = ch->seq == seen ? ETIMEDOUT : 0;
            break;
        }
    }
    pthread_cleanup_pop(1);
    return rc;
}

size_t dm_notify_last(struct dm_chan *ch, char *buf, size_t len)
{
    dm_lock(&nmu);
    size_t n = ch->last ? ch->last_len : 0;
    if (len > 0) {
        size_t c = n < len - 1 ? n : len - 1;
        if (c > DM_NOTIFY_MSG_MAX - 1)
            c = DM_NOTIFY_MSG_MAX - 1;
        if (c)
            memcpy(buf, ch->last, c);
        buf[c] = 0;
    }
    dm_unlock(&nmu);
    return n;
}

void dm_notify_set_handler(struct dm_chan *ch, dm_notify_fn fn, void *arg)
{
    dm_lock(&nmu);
    ch->fn = fn;
    ch->fn_arg = arg;
    handler_quiesce_locked(ch);
    dm_unlock(&nmu);
}

unsigned long dm_notify_received(void)
{
    return __atomic_load_n(&received, __ATOMIC_RELAXED);
}

struct dm_htab_stats dm_notify_stats(void)
{
    return dm_htab_stats(&chans, &nmu);
}

static void chan_forget(struct dm_chan *ch)
{
    ch->on_work = 0;
    ch->resubscribe = 0;
    ch->state = CHAN_IDLE;
    if (ch->dead) {
        unlink_locked(ch);
        chan_free(ch);
    }
}

/* Fork: startup's prepare handler holds nmu across fork() (see the lock
 * order in startup.c); the parent lets go, the child makes it anew. */
void dm_notify_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&nmu, phase);
    if (phase != DM_FORK_CHILD)
        return;
    ncv_ready = 0;
    cv_init_locked();
    thread_running = 0;
    calling = NULL;     /* the thread that ran it is not in the child */
    for (struct dm_timer *t = timers; t; t = t->next)
        t->armed = 0;   /* the records are mapped's: it forgets its holds too */
    timers = NULL;
    timer_running = NULL;
    sleeps_until = 0;
    subs_used = 0;
    image_done = image_asked;
    /* The parent's subscriber socket and eventfd are shared with the child:
     * close them here (the context's memory belonged to a thread that does
     * not exist in the child and is left alone). */
    for (int i = 0; i < DM_REDIS_NODES_MAX; i++) {
        if (sub_ctx[i])
            close(sub_ctx[i]->fd);
        sub_ctx[i] = NULL;
        link_down[i] = 0;
        memset(&subs[i], 0, sizeof subs[i]);     /* the contexts' memory is left alone */
    }
    resend_ms = 0;
    if (wake_fd >= 0) {
        close(wake_fd);
        wake_fd = -1;
    }
    /* Nothing is subscribed in the child: dead records are freed, the
     * others wait to be wanted. */
    work = NULL;
    work_tail = &work;
    for_each_chan(chan_forget);
}
