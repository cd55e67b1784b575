/* wconn: a fair mutex waiter's own subscribed connection, and the
 * process's few of them (wconn.h). Knows connections and channels, not
 * the records that keep one between waits. */
#include "wconn.h"

#include <stdlib.h>

#include "log.h"

#define DM_WCONNS_MAX 4
#define DM_WCONNS_KEPT 2
static int wconns_kept;         /* records holding one (atomic) */
static struct dm_conn *wconns[DM_WCONNS_MAX];   /* atomic slots: NULL, WCONN_BUSY, or one */
#define WCONN_BUSY ((struct dm_conn *)&wconns)   /* a slot taken, its connection not made yet */

void dm_wconn_close(struct dm_conn *wc)
{
    if (!wc)
        return;
    /* Off the list first: a fork child must not free it a second time. */
    for (int i = 0; i < DM_WCONNS_MAX; i++) {
        struct dm_conn *x = wc;
        if (__atomic_compare_exchange_n(&wconns[i], &x, NULL, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            break;
    }
    dm_redis_close(wc);
    free(wc);
}

struct dm_conn *dm_wconn_take(struct dm_conn **slot)
{
    struct dm_conn *wc = __atomic_exchange_n(slot, NULL, __ATOMIC_ACQ_REL);
    if (wc)
        __atomic_sub_fetch(&wconns_kept, 1, __ATOMIC_RELAXED);
    return wc;
}

void dm_wconn_keep(struct dm_conn **slot, struct dm_conn *wc)
{
    if (!wc)
        return;
    struct dm_conn *none = NULL;
    if (wc->c && wc->err == DM_REDIS_OK &&
        __atomic_add_fetch(&wconns_kept, 1, __ATOMIC_RELAXED) <= DM_WCONNS_KEPT) {
        if (__atomic_compare_exchange_n(slot, &none, wc, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return;
    } else if (wc->c && wc->err == DM_REDIS_OK) {
        /* counted above, not kept */
    } else {
        dm_wconn_close(wc);
        return;
    }
    __atomic_sub_fetch(&wconns_kept, 1, __ATOMIC_RELAXED);
    dm_wconn_close(wc);
}

struct dm_conn *dm_wconn_new(const char *channel, const char *name)
{
    int slot = -1;
    for (int i = 0; i < DM_WCONNS_MAX && slot < 0; i++) {
        struct dm_conn *x = NULL;
        if (__atomic_compare_exchange_n(&wconns[i], &x, WCONN_BUSY, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED))
            slot = i;
    }
    if (slot < 0)
        return NULL;
    struct dm_conn *wc = calloc(1, sizeof *wc);
    if (!wc) {
        __atomic_store_n(&wconns[slot], NULL, __ATOMIC_RELEASE);
        return NULL;
    }
    /* Listed before it connects: a fork child closes what it finds. */
    __atomic_store_n(&wconns[slot], wc, __ATOMIC_RELEASE);
    if (dm_redis_connect(wc) != 0 || dm_redis_subscribe(wc, channel) != 0) {
        dm_debug("lock %s: %s; waiting on the process's subscriber instead", name,
                 wc->errstr);
        dm_wconn_close(wc);
        return NULL;
    }
    return wc;
}

void dm_wconn_fork_child(void)
{
    for (int i = 0; i < DM_WCONNS_MAX; i++) {
        /* Subscribed to the parent's channel, on the parent's socket (the
         * waiting thread is the parent's): closed unread and unsent to (no
         * TLS goodbye). */
        struct dm_conn *wc = wconns[i];
        if (wc && wc != WCONN_BUSY) {
            if (wc->c)
                redisFree(wc->c);
            free(wc);
        }
        wconns[i] = NULL;
    }
    __atomic_store_n(&wconns_kept, 0, __ATOMIC_RELAXED);
}
