/* store: what every backend shares: the backend in use, the config, this
 * process's id (owner ids are "<process id>:<seq>"), and how a release's
 * verdict reads against the hold's lease end. */
#include "store.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

const struct dm_store_ops *dm_store;
static const struct dm_config *store_cfg;
static char process_id[33];

static void new_process_id(void)
{
    unsigned char r[16];
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = getrandom(r + got, sizeof r - got, 0);
        if (n <= 0) {
            /* getrandom cannot fail on Linux >= 3.17 with a seeded pool;
             * if it does, mix what identifies this process uniquely. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid() << 40;
            for (size_t i = got; i < sizeof r; i++, x = x * 6364136223846793005ULL + 1)
                r[i] = (unsigned char)(x >> 56);
            break;
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof r; i++)
        snprintf(process_id + 2 * i, 3, "%02x", r[i]);
    /* Processes retrying together spread out by their own ids. */
    dm_jitter_seed(strtoull(process_id + 16, NULL, 16));
}

void dm_store_init(const struct dm_config *cfg, const struct dm_store_ops *ops)
{
    store_cfg = cfg;
    new_process_id();
    dm_store = ops;
    ops->init(cfg);
}

const struct dm_config *dm_store_config(void)
{
    return store_cfg;
}

const char *dm_store_process_id(void)
{
    return process_id;
}

void dm_store_owner(char *buf, unsigned long seq)
{
    snprintf(buf, DM_OWNER_MAX, "%s:%lu", process_id, seq);
}

enum dm_gone dm_store_gone_how(int released, long long lease_end_ms)
{
    return released == ESTALE ? DM_GONE_WITH_DATA
         : dm_now_ms() >= lease_end_ms ? DM_GONE_EXPIRED : DM_GONE_LOST;
}

void dm_store_atfork(enum dm_fork_phase phase)
{
    if (phase == DM_FORK_CHILD)
        new_process_id();       /* before the store's handlers: they name it */
    if (dm_store)
        dm_store->atfork(phase);
}

void dm_store_rows_free(struct dm_lock_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(rows[i].name);
        free(rows[i].owner);
        free(rows[i].holds);
        free(rows[i].token);
        free(rows[i].node);
        free(rows[i].who);
        for (size_t j = 0; j < rows[i].nwaiting; j++) {
            free(rows[i].waiting[j].owner);
            free(rows[i].waiting[j].who);
        }
        free(rows[i].waiting);
        for (size_t j = 0; j < rows[i].nreading; j++) {
            free(rows[i].reading[j].owner);
            free(rows[i].reading[j].who);
        }
        free(rows[i].reading);
    }
    free(rows);
}
