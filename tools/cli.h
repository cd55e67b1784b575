/* The dmutex command: one binary, a few verbs (tools/dmutex.c's table:
 * run | check | ls | top | unlock | fresh | scan | trace | acl).
 * Each verb is a function taking the arguments after the verb name
 * (argv[0] is the verb) and returning the process exit status. */
#ifndef DM_CLI_H
#define DM_CLI_H

#include <stddef.h>

/* Where `make install` puts the libraries, from the directory it puts
 * dmutex in (tools/install.mk builds the installed dmutex with its
 * LIBDIR): run's usage text, launch's and trace's search. */
#ifndef DM_LIBDIR_FROM_BINDIR
#define DM_LIBDIR_FROM_BINDIR "../lib"
#endif
/* And `dmutex trace`'s library (PKGLIBDIR: LIBDIR itself by default, a
 * directory of dmutex's own in the Debian packages). */
#ifndef DM_TRACEDIR_FROM_BINDIR
#define DM_TRACEDIR_FROM_BINDIR DM_LIBDIR_FROM_BINDIR
#endif

int dm_cli_run(int argc, char **argv);     /* tools/run.c */
int dm_cli_ls(int argc, char **argv);      /* tools/ls.c */
int dm_cli_scan(int argc, char **argv);    /* tools/scan.c */
int dm_cli_acl(int argc, char **argv);     /* tools/acl.c */

/* Shared by the verbs (tools/cli.c). Points cfg at the Redis URL `url`
 * (DMUTEX_REDIS syntax); when it cannot, says "<what><url with its
 * password hidden>: <why>" on stderr and returns -1. */
struct dm_config;
int dm_cli_set_redis_url(struct dm_config *cfg, const char *what, const char *url);
int dm_cli_check(int argc, char **argv);   /* tools/check.c */
int dm_cli_unlock(int argc, char **argv);  /* tools/unlock.c */
int dm_cli_top(int argc, char **argv);     /* tools/top.c */
int dm_cli_trace(int argc, char **argv);   /* tools/trace.c */
int dm_cli_fresh(int argc, char **argv);   /* tools/fresh.c */

/* tools/launch.c: a library of dmutex's: $env_name if set, else `file`
 * beside this executable, else `installed_from_bin` where `make install` put it (a
 * path from the executable's directory: DM_LIBDIR_FROM_BINDIR "/" ...).
 * 0, or -1 with a message naming `cmd` and, as the fix, "set ENV_NAME to
 * <hint>". */
int dm_cli_find_lib(const char *cmd, const char *env_name, const char *file,
                    const char *installed_from_bin, const char *hint, char *out, size_t len);
/* tools/launch.c: the shim to preload (0, or -1 with a message). */
int dm_cli_find_shim(char *out, size_t len);

/* tools/launch.c: checks CONFIG (syntax, keys, values, -r URL) and sets
 * the environment a program under the shim needs (LD_PRELOAD,
 * DMUTEX_CONFIG, DMUTEX_REDIS, DMUTEX_LOG; NULL: left alone). 0, or the
 * exit status with a message printed; `cmd` names the command in it. */
int dm_cli_preload_env(const char *cmd, const char *cfg_path, const char *redis,
                       const char *level);

/* tools/check.c: runs PROGRAM (argv[0] searched in PATH) with DMUTEX_CHECK
 * = mode ("1" prints the mapping, "quiet" only errors) in the environment
 * dm_cli_preload_env set, and returns 0 (would start), 78 (would stop:
 * the shim printed why), 127 (cannot be run) or 1 (cannot be checked). */
int dm_cli_check_child(const char *mode, char **prog_argv, const char *cmd);

/* tools/check.c: does a preload of `lib` by path reach PROGRAM (argv[0],
 * searched in PATH as execvp would)? 1: yes, or cannot tell (execve
 * will say why); 0: no, and why says so (statically linked, 32-bit,
 * set-user-ID, set-group-ID, file capabilities; `verb`: what cannot be
 * done, "checked", "traced"); -1: not found. */
int dm_cli_preload_reaches(const char *prog, const char *lib, const char *verb, char *why,
                           size_t len);

/* The verbs that run a PROGRAM under a config (run, check): says which of
 * the two is missing, with the verb's usage, on stderr; 0 or -1. */
int dm_cli_need_config_and_program(const char *cmd, const char *cfg_path, int has_program,
                                   const char *usage);

/* Loads the config file `path` into cfg; when it cannot, says
 * "dmutex: <why>" on stderr and returns -1 (exit with DM_EX_CONFIG). */
int dm_cli_load_config(const char *path, struct dm_config *cfg);

#endif
