/* fuzz_config: libFuzzer target for the config module. Feeds each input to
 * dm_config_load_string (and, when it holds a NUL byte, to dm_config_load
 * through a memfd, since only a file can carry one), and its first line to
 * dm_config_set_redis_url. Beyond "no crash, no leak, no UB" it checks the
 * contract: an error is "label:LINE: ..." and leaves nothing allocated; a
 * success satisfies every range and character rule of config/REFERENCE.md.
 *
 *   make fuzz            (FUZZ_SECONDS=180)      make fuzz-short   (20 s) */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"

#define LABEL "fuzz.cfg"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_config: contract broken: %s\n", what);
        abort();
    }
}

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > DM_NAME_MAX)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_.:/@-", *s))
            return 0;
    return 1;
}

static void check_error(int rc, const struct dm_config *cfg, const char *err, const char *label)
{
    check(rc == -1, "load returns 0 or -1");
    check(strlen(err) < DM_ERR_MAX, "error fits the buffer");
    check(strncmp(err, label, strlen(label)) == 0, "error starts with the label");
    check(cfg->path == NULL && cfg->mutexes == NULL && cfg->nmutexes == 0
          && cfg->redis.unix_path == NULL && cfg->redis.username == NULL
          && cfg->redis.password == NULL, "a failed load holds nothing");
}

static void check_loaded(const struct dm_config *c)
{
    const struct dm_redis_config *r = &c->redis;
    check((r->host == NULL) != (r->unix_path == NULL), "exactly one of host and unix");
    check(r->unix_path || (r->port >= 1 && r->port <= 65535), "port range");
    check(r->db >= 0 && r->db <= 1000000, "db range");
    check(r->connect_timeout_ms >= 1 && r->connect_timeout_ms <= 600000, "connect timeout range");
    check(r->command_timeout_ms >= 1 && r->command_timeout_ms <= 600000, "command timeout range");
    check(!r->username || r->password, "username only with a password");
    check(!r->password || *r->password, "password not empty");
    check(name_ok(c->ns), "namespace characters");
    check(c->lease_ms >= 100 && c->lease_ms <= 3600000, "lease range");
    check(c->lease_margin_ms >= 1 && c->lease_margin_ms * 2 < c->lease_ms, "margin range");
    check(c->renew_ms >= 10 && c->renew_ms * 2 <= c->lease_ms - c->lease_margin_ms, "renew range");
    check(c->lock_delay_ms >= 0 && c->lock_delay_ms <= c->lease_ms && c->lock_delay_ms <= 600000,
          "lock delay range");
    check(c->on_lease_lost == DM_LOST_ABORT || c->on_lease_lost == DM_LOST_WARN, "on_lease_lost");
    check(c->on_redis_down <= DM_DOWN_LOCAL, "on_redis_down");
    check((c->nmutexes == 0) == (c->mutexes == NULL), "mutex array matches its count");
    check((c->nprograms == 0) == (c->programs == NULL), "programs array matches its count");
    for (size_t i = 0; i < c->nprograms; i++)
        check(c->programs[i] && *c->programs[i] && !strchr(c->programs[i], '/'),
              "programs are file names");
    for (size_t i = 0; i < c->nmutexes; i++) {
        const struct dm_object_config *m = &c->mutexes[i];
        check((m->symbol == NULL) != (m->init_site == NULL), "symbol xor init_site");
        check(m->name && name_ok(m->name), "lock name characters");
        check(!m->object || (*m->object && *(strrchr(m->object, '/') ? strrchr(m->object, '/') + 1
                                                                     : m->object) &&
                             strlen(m->object) <= (strchr(m->object, '/') ? 4096u : 255u)),
              "object is a file name or a path to a file");
        check(m->offset >= 0 && m->offset <= (1L << 30), "offset range");
        check(m->index == -1 || (m->index >= 0 && m->index <= (1L << 24)), "index range");
        check(m->offset == 0 || m->index == -1, "offset xor index");
        check(m->symbol || (m->offset == 0 && m->index == -1), "offset/index only with symbol");
        check(m->line >= 1, "entry has a line");
        for (size_t j = 0; j < i; j++) {
            const struct dm_object_config *o = &c->mutexes[j];
            int same = ((!m->object && !o->object) || (m->object && o->object && !strcmp(m->object, o->object)))
                       && ((!m->symbol && !o->symbol) || (m->symbol && o->symbol && !strcmp(m->symbol, o->symbol)))
                       && ((!m->init_site && !o->init_site)
                           || (m->init_site && o->init_site && !strcmp(m->init_site, o->init_site)))
                       && m->offset == o->offset && m->index == o->index;
            check(!same, "no duplicate entries");
        }
    }
}

static void fuzz_file(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz.cfg", MFD_CLOEXEC);
    if (fd < 0)
        return;
    if (write(fd, data, size) == (ssize_t)size) {
        char path[64], err[DM_ERR_MAX];
        struct dm_config cfg;
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        int rc = dm_config_load(path, &cfg, err, sizeof err);
        if (rc == 0) {
            check_loaded(&cfg);
            dm_config_free(&cfg);
        } else {
            check_error(rc, &cfg, err, path);
        }
    }
    close(fd);
}

static void fuzz_url(const char *text)
{
    size_t n = strcspn(text, "\n");
    char *url = strndup(text, n);
    if (!url)
        return;
    struct dm_config cfg;
    char err[DM_ERR_MAX];
    dm_config_defaults(&cfg);
    int rc = dm_config_set_redis_url(&cfg, url, err, sizeof err);
    check(rc == 0 || rc == -1, "url returns 0 or -1");
    if (rc == 0) {
        check((cfg.redis.host == NULL) != (cfg.redis.unix_path == NULL), "url: host xor unix");
        check(cfg.redis.unix_path || (cfg.redis.port >= 1 && cfg.redis.port <= 65535), "url: port");
        check(cfg.redis.db >= 0 && cfg.redis.db <= 1000000, "url: db");
    } else {
        check(*err && strlen(err) < DM_ERR_MAX, "url: error says something");
    }
    dm_config_free(&cfg);
    free(url);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';

    struct dm_config cfg;
    char err[DM_ERR_MAX];
    int rc = dm_config_load_string(text, LABEL, &cfg, err, sizeof err);
    if (rc == 0) {
        check_loaded(&cfg);
        dm_config_free(&cfg);
    } else {
        check_error(rc, &cfg, err, LABEL ":");
    }
    if (memchr(data, '\0', size))
        fuzz_file(data, size);
    fuzz_url(text);
    free(text);
    return 0;
}
