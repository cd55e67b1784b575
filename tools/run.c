/* run: `dmutex run`, a program started with the shim preloaded, after the
 * quiet form of `dmutex check`. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"

/* Where `make install` puts the shim, from the directory it puts dmutex
 * in (tools/install.mk builds the installed dmutex with its LIBDIR). */
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
    "  -r, --redis URL       override the server, a REDIS_URL (below; sets\n"
    "                        DMUTEX_REDIS)\n"
    "  -l, --log LEVEL       error, warn (default), info or debug (DMUTEX_LOG)\n"
    "  -h, --help            this text\n"
    "\n"
    DM_URL_HELP
    "\n"
    "Exit status: PROGRAM's; 78 if CONFIG is wrong (the message names\n"
    "FILE:LINE); 2 for a usage error; 127 if PROGRAM cannot be run.\n";

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

