/* notify: the one subscriber thread of a process and its connection (with
 * Redis Cluster, one per node: sharded pub/sub). A waiter subscribes to
 * its lock's release channel (once per name per process; the subscription
 * is kept while the channel has references), then sleeps until the
 * channel's notice count moves or its timeout passes. The same thread
 * runs one-shot timers (dm_notify_timer_arm) and the image-end function
 * (dm_notify_on_image_end). Knows nothing of the scripts or of what a
 * notice means. */
#ifndef DM_NOTIFY_H
#define DM_NOTIFY_H

#include <stddef.h>

#include "store.h"
#include "util.h"

/* struct dm_chan (store.h): a channel's record. */

/* The record of `channel`, made on first use (no I/O), with one more
 * reference: every call is matched by one dm_notify_chan_put. NULL on
 * ENOMEM. */
struct dm_chan *dm_notify_chan(const char *channel);

/* Drops a reference. The last one clears the handler, waits for a call of
 * it in progress in the subscriber thread (not when called from inside that
 * very handler), and forgets the channel: the subscriber thread sends
 * UNSUBSCRIBE and frees it. Past this call the handler is never called
 * again and `ch` must not be used. Must not be called holding a lock the
 * handler takes. NULL is ignored. */
void dm_notify_chan_put(struct dm_chan *ch);

/* Makes sure the channel is subscribed, starting the subscriber thread on
 * first need. Returns 0 once the server has confirmed the subscription, or
 * ETIMEDOUT after timeout_ms (server unreachable: the caller falls back to
 * timed retries), or EAGAIN at once when the subscriber's last connect to
 * the node failed (it keeps trying on its own). */
int dm_notify_subscribe(struct dm_chan *ch, long timeout_ms);

/* Is the channel subscribed right now (a waiter may then skip the extra
 * attempt that covers the time before its subscription)? */
int dm_notify_is_subscribed(struct dm_chan *ch);

/* The channel's notice count: read it before an acquire attempt, and wait
 * for it to move after the attempt fails. */
unsigned long dm_notify_seq(struct dm_chan *ch);

/* Sleeps until the count differs from `seen` (0) or timeout_ms passes
 * (ETIMEDOUT). The count also moves when the subscriber connection is lost
 * and again when the channel's subscription is confirmed anew (after a
 * loss, or a slot's move with a cluster), so that no waiter sleeps through
 * a notice it could not get, whenever it read the count. */
int dm_notify_wait(struct dm_chan *ch, unsigned long seen, long timeout_ms);

/* Moves the channel's count and wakes its waiters, as a message on it
 * would: a local signal of a condition variable (no I/O). */
void dm_notify_bump(struct dm_chan *ch);

/* Sleeps until the count differs from `seen` (0) or the CLOCK_MONOTONIC
 * `deadline` passes (ETIMEDOUT); NULL: no deadline. Unlike dm_notify_wait
 * it is a cancellation point, as the program's pthread_cond_wait it
 * stands for: a thread cancelled in it leaves with notify's lock given
 * back, and its cleanup handlers run as usual. */
int dm_notify_wait_until(struct dm_chan *ch, unsigned long seen,
                         const struct timespec *deadline);

/* Copies the channel's latest message into buf (NUL-terminated, cut to
 * len - 1 bytes) and returns its full length; 0 if none yet. */
size_t dm_notify_last(struct dm_chan *ch, char *buf, size_t len);

/* Calls fn(arg, message, length) in the subscriber thread for each message
 * on the channel, without notify's lock held. fn must not block for long:
 * every other channel waits meanwhile. The handler is the channel's, not
 * the caller's reference's. On return, a call of the previous handler in
 * progress in another thread has ended: after set_handler(ch, NULL, NULL)
 * the old handler is never called again. Must not be called holding a lock
 * the handler takes. */
typedef void (*dm_notify_fn)(void *arg, const char *msg, size_t len);
void dm_notify_set_handler(struct dm_chan *ch, dm_notify_fn fn, void *arg);

/* struct dm_timer (store.h): a one-shot call the subscriber thread
 * makes at a CLOCK_MONOTONIC time (mapped's lingering holds). */

/* Calls fn(arg) in the subscriber thread (without notify's lock) at
 * at_ns or soon after, starting the thread on first need; an armed timer
 * keeps the earlier of its time and at_ns. fn may arm it again. Returns 0,
 * or the error that kept the thread from starting (then nothing is armed). */
int dm_notify_timer_arm(struct dm_timer *t, long long at_ns,
                        void (*fn)(void *arg), void *arg);

/* Disarms t. On return a call of its fn in progress in another thread has
 * ended, and none will start. Must not be called holding a lock fn takes. */
void dm_notify_timer_cancel(struct dm_timer *t);

/* The function the subscriber thread runs when the process image ends
 * (exec, _exit: dm_notify_image_ends); set once, at start. */
void dm_notify_on_image_end(void (*fn)(void));

/* The image ends (exec, _exit, possibly in a signal handler that
 * interrupted anything): asks the subscriber thread, if it runs, to call
 * the image-end function, and waits for it at most max_ms. Only atomics,
 * one write(2) and nanosleep here. Returns at once in that thread itself. */
void dm_notify_image_ends(long max_ms);

/* Notices received by this process (all channels), for tests and stats. */
unsigned long dm_notify_received(void);

/* Channel records (those dropped but not yet unsubscribed included), and
 * the chain steps all lookups took so far:
 * for tests (no channel leaks, lookups stay O(1)). */
struct dm_htab_stats dm_notify_stats(void);

/* Around fork (startup's one pthread_atfork, in its lock order): prepare
 * takes notify's lock, so that the child never sees the channel table half
 * rebuilt; parent gives it back.
 * In a fork child: no thread, no connection, nothing subscribed. */
void dm_notify_atfork(enum dm_fork_phase phase);

#endif
