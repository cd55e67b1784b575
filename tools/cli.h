/* The dmutex command: one binary, a few verbs (dmutex run | ls | scan | acl).
 * Each verb is a function taking the arguments after the verb name
 * (argv[0] is the verb) and returning the process exit status. */
#ifndef DM_CLI_H
#define DM_CLI_H

int dm_cli_run(int argc, char **argv);     /* tools/dmutex.c */
int dm_cli_ls(int argc, char **argv);      /* tools/ls.c */
int dm_cli_scan(int argc, char **argv);    /* tools/scan.c */
int dm_cli_acl(int argc, char **argv);     /* tools/acl.c */

/* Shared by the verbs (tools/cli.c). Points cfg at the Redis URL `url`
 * (DMUTEX_REDIS syntax); when it cannot, says "<what><url with its
 * password hidden>: <why>" on stderr and returns -1. */
struct dm_config;
int dm_cli_set_redis_url(struct dm_config *cfg, const char *what, const char *url);

/* Loads the config file `path` into cfg; when it cannot, says
 * "dmutex: <why>" on stderr and returns -1 (exit with DM_EX_CONFIG). */
int dm_cli_load_config(const char *path, struct dm_config *cfg);

#endif
