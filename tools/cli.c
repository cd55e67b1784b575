/* What the verbs of the dmutex command share (tools/cli.h). */
#include <stdio.h>

#include "cli.h"
#include "config.h"

int dm_cli_set_redis_url(struct dm_config *cfg, const char *what, const char *url)
{
    char err[DM_ERR_MAX];
    if (dm_config_set_redis_url(cfg, url, err, sizeof err) == 0)
        return 0;
    char shown[DM_ERR_MAX];
    dm_config_redact_url(url, shown, sizeof shown);
    fprintf(stderr, "%s%s: %s\n", what, shown, err);
    return -1;
}

int dm_cli_need_config_and_program(const char *cmd, const char *cfg_path, int has_program,
                                   const char *usage)
{
    if (!cfg_path) {
        fprintf(stderr, "dmutex %s: -c CONFIG is required\n\n%s", cmd, usage);
        return -1;
    }
    if (!has_program) {
        fprintf(stderr, "dmutex %s: no PROGRAM given\n\n%s", cmd, usage);
        return -1;
    }
    return 0;
}

int dm_cli_load_config(const char *path, struct dm_config *cfg)
{
    char err[DM_ERR_MAX];
    if (dm_config_load(path, cfg, err, sizeof err) == 0)
        return 0;
    fprintf(stderr, "dmutex: %s\n", err);
    return -1;
}
