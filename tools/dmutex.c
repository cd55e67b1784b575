/* dmutex: the command. `dmutex run` starts a program with the shim
 * preloaded; `ls` shows the locks on a server; `scan` lists the mutexes of
 * a binary. This file is the dispatcher and `run`. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "config_keys.h"
#include "dmutex.h"
#include "keys.h"

/* Where `make install` puts the shim, from the directory it puts dmutex
 * in (tools/install.mk builds the installed dmutex with its LIBDIR). */
#ifndef DM_LIBDIR_FROM_BINDIR
#define DM_LIBDIR_FROM_BINDIR "../lib"
#endif

static const char usage_text[] =
    "usage: dmutex COMMAND [ARGS]\n"
    "\n"
    "Make chosen pthread mutexes of an unmodified program cluster-wide.\n"
    "\n"
    "commands:\n"
    "  run -c CONFIG [-r REDIS_URL] [-l LEVEL] [--] PROGRAM [ARGS...]\n"
    "        check CONFIG, then run PROGRAM with libdmutex.so preloaded\n"
    "  check -c CONFIG [-r REDIS_URL] [--] PROGRAM [ARGS...]\n"
    "        resolve CONFIG against PROGRAM and its libraries without running it\n"
    "  ls [-c CONFIG | -r REDIS_URL] [-n NAMESPACE] [--json]\n"
    "        list the locks on the server: holder, remaining lease, fencing token\n"
    "  top [-c CONFIG | -r REDIS_URL] [--namespace NS] [-d SECONDS] [-n ITERATIONS]\n"
    "        live view of the locks: holder, waiters, lease, token, acquisitions/s\n"
    "  unlock -c CONFIG [-r REDIS_URL] [--force] NAME\n"
    "        release a lock whose holder is dead; --force: even while its lease lives\n"
    "  fresh [-c CONFIG | -r REDIS_URL] [-n NAMESPACE]\n"
    "        declare a new server that lost no lock data: no wait of a lease after its start\n"
    "  scan PROGRAM [LIBRARY...]\n"
    "        list the mutex, cond and rwlock variables of a binary, with config entries\n"
    "  trace [-o FILE.json] [-i SECONDS] [--top N] [--min-locks N] [--] PROGRAM [ARGS...]\n"
    "        run PROGRAM; report each mutex, cond and rwlock it uses, with config entries\n"
    "  acl -c CONFIG [--user NAME]\n"
    "        print the ACL SETUSER line of the least-privilege Redis user CONFIG needs\n"
    "  help  this text\n"
    "  --version\n"
    "        print the version of dmutex\n"
    "\n"
    "`dmutex COMMAND -h` describes a command. Environment: DMUTEX_CONFIG,\n"
    "DMUTEX_REDIS (redis://[user:pass@]host:port/db, rediss://... for TLS,\n"
    "unix:///path or redis-sentinel://[user:pass@]host:port[,host:port...]/master[/db],\n"
    "rediss-sentinel://... for TLS), DMUTEX_TLS_CA/CERT/KEY (with rediss://), DMUTEX_LOG\n"
    "(error|warn|info|debug). See README.md and config/REFERENCE.md.\n";

static const char run_usage[] =
    "usage: dmutex run -c CONFIG [-r REDIS_URL] [-l LEVEL] [--] PROGRAM [ARGS...]\n"
    "\n"
    "Checks CONFIG (syntax, keys, values) and, as `dmutex check` does, against\n"
    "PROGRAM and its libraries (quietly: only errors are printed, all of them),\n"
    "then replaces itself with PROGRAM,\n"
    "run with LD_PRELOAD=libdmutex.so (the one beside this dmutex binary, else\n"
    "the installed " DM_LIBDIR_FROM_BINDIR "/libdmutex.so.MAJOR from it, or $DMUTEX_LIB)\n"
    "and DMUTEX_CONFIG=CONFIG. The mutexes CONFIG names become cluster-wide;\n"
    "everything else passes straight through to glibc.\n"
    "\n"
    "  -c, --config FILE     the config file (required)\n"
    "  -r, --redis URL       override the server (sets DMUTEX_REDIS)\n"
    "  -l, --log LEVEL       error, warn (default), info or debug (DMUTEX_LOG)\n"
    "  -h, --help            this text\n"
    "\n"
    "Exit status: PROGRAM's; 78 if CONFIG is wrong (the message names\n"
    "FILE:LINE); 2 for a usage error; 127 if PROGRAM cannot be run.\n";

/* The shim beside this executable (build/dmutex -> build/libdmutex.so),
 * else where `make install` put it relative to the executable. */
int dm_cli_find_shim(char *out, size_t len)
{
    const char *env = getenv("DMUTEX_LIB");
    if (env && *env) {
        if (!realpath(env, out)) {
            fprintf(stderr, "dmutex run: DMUTEX_LIB=%s: %s\n", env, strerror(errno));
            return -1;
        }
        return 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0) {
        fprintf(stderr, "dmutex run: /proc/self/exe: %s\n", strerror(errno));
        return -1;
    }
    self[n] = 0;
    const char *dir = dirname(self);
    snprintf(out, len, "%s/libdmutex.so", dir);
    if (access(out, R_OK) == 0)
        return 0;
    int beside_errno = errno;
    /* Installed (make install): BINDIR/dmutex -> LIBDIR/SONAME. The soname
     * link, not the file it points to: a child that inherits LD_PRELOAD
     * after an upgrade must find the new library, not a removed file (ld.so
     * would run it without the shim, only warning). */
    char installed[PATH_MAX];
    snprintf(installed, sizeof installed, "%s/%s/libdmutex.so.%d", dir, DM_LIBDIR_FROM_BINDIR,
             DMUTEX_VERSION_MAJOR);
    if (access(installed, R_OK) == 0) {
        snprintf(out, len, "%s", installed);
        return 0;
    }
    fprintf(stderr, "dmutex run: %s: %s, nor %s (set DMUTEX_LIB to the shim's path)\n", out,
            strerror(beside_errno), installed);
    return -1;
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

int dm_cli_run(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "redis", required_argument, NULL, 'r' },
        { "log", required_argument, NULL, 'l' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *cfg_path = NULL, *redis = NULL, *level = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+c:r:l:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': cfg_path = optarg; break;
        case 'r': redis = optarg; break;
        case 'l': level = optarg; break;
        case 'h': fputs(run_usage, stdout); return 0;
        default: fputs(run_usage, stderr); return 2;
        }
    }
    if (dm_cli_need_config_and_program("run", cfg_path, optind < argc, run_usage) != 0)
        return 2;
    if (level && strcmp(level, "error") && strcmp(level, "warn") && strcmp(level, "info") &&
        strcmp(level, "debug")) {
        fprintf(stderr, "dmutex run: -l %s: not one of error, warn, info, debug\n", level);
        return 2;
    }

    int r = dm_cli_preload_env("run", cfg_path, redis, level);
    if (r != 0)
        return r;
    /* The check of `dmutex check`, quiet: every error of the config
     * against this program at once, before it runs (a real start stops at
     * the first). It costs one start of the program up to the shim's
     * constructor. A statically linked program cannot be checked (nor
     * reached by the shim): it runs as before. */
    r = dm_cli_check_child("quiet", argv + optind, "run");
    if (r == DM_EX_CONFIG || r == 127)
        return r;
    unsetenv("DMUTEX_CHECK");
    execvp(argv[optind], argv + optind);
    fprintf(stderr, "dmutex run: %s: %s\n", argv[optind], strerror(errno));
    return 127;
}

/* `dmutex config-keys top|redis|mutex|tls|metrics` (not in the usage text): the key
 * table of config/REFERENCE.md for that group, printed from the table the
 * loader itself uses, so that tests/config_reference.test.sh can hold the
 * reference to it. */
static int config_keys(int argc, char **argv)
{
    static const char *const groups[] = {
        [DM_GROUP_TOP] = "top", [DM_GROUP_REDIS] = "redis", [DM_GROUP_MUTEX] = "mutex",
        [DM_GROUP_TLS] = "tls", [DM_GROUP_METRICS] = "metrics",
    };
    for (size_t g = 0; argc == 2 && g < sizeof groups / sizeof groups[0]; g++) {
        if (strcmp(argv[1], groups[g]) == 0) {
            dm_config_keys_print(stdout, (enum dm_key_group)g);
            return fflush(stdout) == 0 ? 0 : 1;
        }
    }
    fputs("usage: dmutex config-keys top|redis|mutex|tls|metrics\n", stderr);
    return 2;
}

/* `dmutex keys NS NAME KIND...` and `dmutex keys --release NS NAME` (not
 * in the usage text): lock NAME's keys of those kinds (lock, token,
 * holder...), or release.lua's KEYS in its order, one per line, built by
 * shim/keys.c, so that the shell tests spell no key by hand. */
static int keys_verb(int argc, char **argv)
{
    int release = argc >= 2 && strcmp(argv[1], "--release") == 0;
    argc -= release;
    argv += release;
    int n = release ? DM_KEYS_RELEASE_N : argc - 3;
    if (argc < 3 || (release ? argc != 3 : n < 1)) {
        fputs("usage: dmutex keys NS NAME KIND... | dmutex keys --release NS NAME\n", stderr);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        enum dm_key k = release ? dm_keys_release[i] : DM_KEY_LOCK;
        if (!release && dm_keys_kind_parse(argv[3 + i], &k) != 0) {
            fprintf(stderr, "dmutex keys: no key kind '%s'\n", argv[3 + i]);
            return 2;
        }
        size_t len = dm_keys_build(NULL, 0, argv[1], argv[2], k) + 1;
        char *key = malloc(len);
        if (!key) {
            fputs("dmutex keys: out of memory\n", stderr);
            return 1;
        }
        dm_keys_build(key, len, argv[1], argv[2], k);
        puts(key);
        free(key);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0)
        return dm_cli_run(argc - 1, argv + 1);
    if (strcmp(cmd, "ls") == 0)
        return dm_cli_ls(argc - 1, argv + 1);
    if (strcmp(cmd, "check") == 0)
        return dm_cli_check(argc - 1, argv + 1);
    if (strcmp(cmd, "unlock") == 0)
        return dm_cli_unlock(argc - 1, argv + 1);
    if (strcmp(cmd, "top") == 0)
        return dm_cli_top(argc - 1, argv + 1);
    if (strcmp(cmd, "scan") == 0)
        return dm_cli_scan(argc - 1, argv + 1);
    if (strcmp(cmd, "trace") == 0)
        return dm_cli_trace(argc - 1, argv + 1);
    if (strcmp(cmd, "acl") == 0)
        return dm_cli_acl(argc - 1, argv + 1);
    if (strcmp(cmd, "fresh") == 0)
        return dm_cli_fresh(argc - 1, argv + 1);
    if (strcmp(cmd, "config-keys") == 0)
        return config_keys(argc - 1, argv + 1);
    if (strcmp(cmd, "keys") == 0)
        return keys_verb(argc - 1, argv + 1);
    if (strcmp(cmd, "--version") == 0) {
        printf("dmutex %s\n", DMUTEX_VERSION);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    fprintf(stderr, "dmutex: unknown command '%s'\n\n%s", cmd, usage_text);
    return 2;
}
