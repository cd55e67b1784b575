/* locks: the tools' session with the store (see locks.h). */
#include "locks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "config.h"
#include "store.h"
#include "who.h"

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
        /* The config stays: a store's own thread may still read it (the
         * Sentinel watcher asks for the master's name), and the command
         * ends now. Freed here, `ls -r redis-sentinel://H:P/nosuchmaster`
         * crashed 2 times in 1000. */
        return 1;
    }
    *out = lc;
    return 0;
}

const char *dm_locks_ns(struct dm_locks_conn *lc) { return lc->ns; }

static long long real_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void texts_free(char **t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(t[i]);
    free(t);
}

static int row_by_name(const void *a, const void *b)
{
    return strcmp(((const struct dm_lock_row *)a)->name, ((const struct dm_lock_row *)b)->name);
}

/* The config's partner-protocol locks (protocol = "setnx"): their keys are
 * the bare names, which no scan of the namespace finds; each name once. */
static int add_partners(struct dm_locks_conn *lc, struct dm_lock_row **rows, size_t *n,
                        char *err, size_t errlen)
{
    const struct dm_config *cfg = &lc->cfg;
    size_t extra = 0;
    for (size_t i = 0; i < cfg->nmutexes; i++)
        extra += cfg->mutexes[i].protocol != DM_PROTOCOL_DMUTEX;
    if (extra == 0)
        return 0;
    struct dm_lock_row *grown = realloc(*rows, (*n + extra) * sizeof *grown);
    if (!grown) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *rows = grown;
    for (size_t i = 0; i < cfg->nmutexes; i++) {
        const struct dm_object_config *m = &cfg->mutexes[i];
        if (m->protocol == DM_PROTOCOL_DMUTEX)
            continue;
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++)
            seen = cfg->mutexes[j].protocol != DM_PROTOCOL_DMUTEX &&
                   strcmp(cfg->mutexes[j].name, m->name) == 0;
        if (seen)
            continue;
        if (dm_store->admin_partner(m->name, m->protocol, &(*rows)[*n], err, errlen) != 0)
            return -1;
        (*n)++;
    }
    qsort(*rows, *n, sizeof **rows, row_by_name);
    return 0;
}

int dm_locks_read(struct dm_locks_conn *lc, struct dm_lock_row **rows, size_t *n, char *err,
                  size_t errlen)
{
    if (dm_store->admin_list(lc->ns, rows, n, err, errlen) != 0)
        return -1;
    if (add_partners(lc, rows, n, err, errlen) != 0) {
        dm_store_rows_free(*rows, *n);
        return -1;
    }
    char **texts = NULL;
    size_t nt = 0;
    if (dm_store->admin_who(lc->ns, &texts, &nt, err, errlen) != 0) {
        dm_store_rows_free(*rows, *n);
        return -1;
    }
    dm_who_join(*rows, *n, texts, nt, real_ms());
    texts_free(texts, nt);
    return 0;
}

void dm_locks_who(struct dm_locks_conn *lc, const char *owner, char *buf, size_t len)
{
    char **texts = NULL;
    size_t nt = 0;
    char err[DM_ERR_MAX];
    buf[0] = 0;
    if (dm_store->admin_who(lc->ns, &texts, &nt, err, sizeof err) != 0)
        return;
    dm_who_describe_owner(buf, len, owner, texts, nt);
    texts_free(texts, nt);
}

int dm_locks_alive(const struct dm_lock_row *l)
{
    if (!l->who || l->renewed_ago_ms < 0 || l->renew_ms <= 0)
        return -1;
    return l->renewed_ago_ms <= l->renew_ms + DM_WHO_ALIVE_SLACK_MS(l->renew_ms);
}

const char *dm_locks_ago(long long since_ms, char *buf, size_t len)
{
    if (since_ms < 0) {
        snprintf(buf, len, "-");
        return buf;
    }
    long long s = (real_ms() - since_ms) / 1000;
    if (s < 0)
        s = 0;      /* the holder's clock is ahead of ours */
    if (s < 60)
        snprintf(buf, len, "%llds", s);
    else if (s < 3600)
        snprintf(buf, len, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, len, "%lldh%02lldm", s / 3600, s % 3600 / 60);
    else
        snprintf(buf, len, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
    return buf;
}

void dm_locks_disconnect(struct dm_locks_conn *lc)
{
    if (!lc)
        return;
    dm_store->admin_disconnect();
    /* The config is not freed: the store's threads (the Sentinel watcher)
     * read it until the command ends, which it does now. */
}

const char *dm_locks_safe(const char *s, char *buf, size_t len)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < len; i++)
        buf[i] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    buf[i] = 0;
    return buf;
}

void dm_locks_print_details(FILE *out, const struct dm_lock_row *l)
{
    char ago[24], safe[600];
    if (l->owner && l->who && l->renewed_ago_ms >= 0)
        fprintf(out, "    holder %s: lease renewed %.1fs ago (renews every %.1fs)\n",
                dm_locks_safe(l->owner, safe, sizeof safe), (double)l->renewed_ago_ms / 1000,
                (double)l->renew_ms / 1000);
    else if (l->owner && l->who)
        fprintf(out, "    holder %s: when its lease was last renewed is not known (handed over "
                "with another process's lease, not renewed since)\n",
                dm_locks_safe(l->owner, safe, sizeof safe));
    if (l->protocol && strcmp(l->state, "other") == 0)
        fprintf(out, "    the key %s holds another type: not a %s lock (another protocol's "
                "under this name?); dmutex's lock calls refuse it\n",
                dm_locks_safe(l->name, safe, sizeof safe), l->protocol);
    else if (l->protocol && l->owner && !l->who)
        fprintf(out, "    holder %s %s, as its client wrote it (not a dmutex process)\n",
                strcmp(l->protocol, "redisson") == 0 ? "field" : "token",
                dm_locks_safe(l->owner, safe, sizeof safe));
    for (size_t k = 0; k < l->nreading; k++)
        fprintf(out, "    reading %s for %s (%s)\n", l->reading[k].who,
                dm_locks_ago(l->reading[k].since_ms, ago, sizeof ago), l->reading[k].owner);
    for (size_t k = 0; k < l->nwaiting; k++)
        fprintf(out, "    waiting %s for %s (%s)\n", l->waiting[k].who,
                dm_locks_ago(l->waiting[k].since_ms, ago, sizeof ago), l->waiting[k].owner);
}
