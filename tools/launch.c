/* launch: what the verbs that start a program under the shim share (run,
 * check, trace): where the shim is, and the environment it needs. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "dmutex.h"

int dm_cli_find_lib(const char *cmd, const char *env_name, const char *file,
                    const char *installed_from_bin, const char *hint, char *out, size_t len)
{
    const char *env = getenv(env_name);
    if (env && *env) {
        if (!realpath(env, out)) {
            fprintf(stderr, "dmutex %s: %s=%s: %s\n", cmd, env_name, env, strerror(errno));
            return -1;
        }
        return 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) {
        fprintf(stderr, "dmutex %s: /proc/self/exe: %s\n", cmd, strerror(errno));
        return -1;
    }
    self[n] = 0;
    const char *dir = dirname(self);
    snprintf(out, len, "%s/%s", dir, file);
    if (access(out, R_OK) == 0)
        return 0;
    int beside_errno = errno;
    char installed[PATH_MAX];
    snprintf(installed, sizeof installed, "%s/%s", dir, installed_from_bin);
    if (access(installed, R_OK) == 0) {
        snprintf(out, len, "%s", installed);
        return 0;
    }
    fprintf(stderr, "dmutex %s: %s: %s, nor %s (set %s to %s)\n", cmd, out,
            strerror(beside_errno), installed, env_name, hint);
    return -1;
}

/* Installed (make install): BINDIR/dmutex -> LIBDIR/SONAME. The soname
 * link, not the file it points to: a child that inherits LD_PRELOAD after
 * an upgrade must find the new library, not a removed file (ld.so would
 * run it without the shim, only warning). */
int dm_cli_find_shim(char *out, size_t len)
{
    char soname[PATH_MAX];
    snprintf(soname, sizeof soname, "%s/libdmutex.so.%d", DM_LIBDIR_FROM_BINDIR,
             DMUTEX_VERSION_MAJOR);
    return dm_cli_find_lib("run", "DMUTEX_LIB", "libdmutex.so", soname, "the shim's path", out,
                           len);
}

int dm_cli_preload_env(const char *cmd, const char *cfg_path, const char *redis,
                       const char *level)
{
    struct dm_config cfg;
    char err[DM_ERR_MAX];
    if (dm_cli_load_config(cfg_path, &cfg) != 0)
        return DM_EX_CONFIG;
    if (dm_config_check_mutexes(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, "dmutex: %s\n", err);
        dm_config_free(&cfg);
        return DM_EX_CONFIG;
    }
    char what[64];
    snprintf(what, sizeof what, "dmutex %s: -r ", cmd);
    if (redis && dm_cli_set_redis_url(&cfg, what, redis) != 0) {
        dm_config_free(&cfg);
        return DM_EX_CONFIG;
    }
    dm_config_free(&cfg);

    char shim[PATH_MAX], abs_cfg[PATH_MAX];
    if (dm_cli_find_shim(shim, sizeof shim) != 0)
        return 127;
    if (!realpath(cfg_path, abs_cfg)) {
        fprintf(stderr, "dmutex %s: %s: %s\n", cmd, cfg_path, strerror(errno));
        return DM_EX_CONFIG;
    }
    const char *old = getenv("LD_PRELOAD");
    char *preload;
    if (asprintf(&preload, "%s%s%s", shim, old && *old ? " " : "", old ? old : "") < 0)
        return 127;
    setenv("LD_PRELOAD", preload, 1);
    free(preload);
    setenv("DMUTEX_CONFIG", abs_cfg, 1);
    if (redis)
        setenv("DMUTEX_REDIS", redis, 1);
    if (level)
        setenv("DMUTEX_LOG", level, 1);
    return 0;
}

