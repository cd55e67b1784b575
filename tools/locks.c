/* locks: the tools' session with the store (see locks.h). */
#include "locks.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "config.h"
#include "store.h"

struct dm_locks_conn {
    struct dm_config cfg;
    const char *ns;
};

int dm_locks_connect(const char *cmd, const char *cfg_path, const char *url, const char *ns,
                     struct dm_locks_conn **out)
{
    struct dm_locks_conn *lc = calloc(1, sizeof *lc);
    if (!lc) {
        fprintf(stderr, "dmutex %s: out of memory\n", cmd);
        return 1;
    }
    if (cfg_path) {
        if (dm_cli_load_config(cfg_path, &lc->cfg) != 0) {
            free(lc);
            return DM_EX_CONFIG;
        }
    } else {
        dm_config_defaults(&lc->cfg);
    }
    char what[64];
    snprintf(what, sizeof what, "dmutex %s: ", cmd);
    if (url && *url && dm_cli_set_redis_url(&lc->cfg, what, url) != 0) {
        dm_config_free(&lc->cfg);
        free(lc);
        return 2;
    }
    lc->ns = ns ? ns : lc->cfg.ns;
    dm_store_init(&lc->cfg, DM_STORE_OF(&lc->cfg));
    char err[DM_ERR_MAX];
    if (dm_store->admin_connect(err, sizeof err) != 0) {
        fprintf(stderr, "dmutex %s: %s\n", cmd, err);
        dm_config_free(&lc->cfg);
        free(lc);
        return 1;
    }
    *out = lc;
    return 0;
}

const char *dm_locks_ns(struct dm_locks_conn *lc) { return lc->ns; }

int dm_locks_read(struct dm_locks_conn *lc, struct dm_lock_row **rows, size_t *n, char *err,
                  size_t errlen)
{
    return dm_store->admin_list(lc->ns, rows, n, err, errlen);
}

void dm_locks_disconnect(struct dm_locks_conn *lc)
{
    if (!lc)
        return;
    dm_store->admin_disconnect();
    dm_config_free(&lc->cfg);
    free(lc);
}
