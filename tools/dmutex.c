/* dmutex: the command, one binary of a few verbs (the table below; each
 * verb in its own file, cli.h). This file is the dispatcher, the usage
 * text and two verbs for the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "config_keys.h"
#include "dmutex.h"
#include "store.h"

/* `dmutex config-keys top|redis|mutex|tls|metrics|etcd` (not in the usage text): the key
 * table of config/REFERENCE.md for that group, printed from the table the
 * loader itself uses, so that tests/config_reference.test.sh can hold the
 * reference to it. */
static int config_keys(int argc, char **argv)
{
    static const char *const groups[] = {
        [DM_GROUP_TOP] = "top", [DM_GROUP_REDIS] = "redis", [DM_GROUP_MUTEX] = "mutex",
        [DM_GROUP_TLS] = "tls", [DM_GROUP_METRICS] = "metrics", [DM_GROUP_ETCD] = "etcd",
    };
    for (size_t g = 0; argc == 2 && g < sizeof groups / sizeof groups[0]; g++) {
        if (strcmp(argv[1], groups[g]) == 0) {
            dm_config_keys_print(stdout, (enum dm_key_group)g);
            return fflush(stdout) == 0 ? 0 : 1;
        }
    }
    fputs("usage: dmutex config-keys top|redis|mutex|tls|metrics|etcd\n", stderr);
    return 2;
}

/* `dmutex keys ...` (not in the usage text): the store's names of a
 * lock's keys, so that the shell tests spell no key by hand (the Redis
 * store's: `dmutex keys NS NAME KIND...`, `dmutex keys --release NS NAME`,
 * shim/redis/admin.c). No config, no connection. */
static int keys_verb(int argc, char **argv)
{
    return dm_redis_store.admin_keys(argc, argv);
}

/* `dmutex url-forms` (not in the usage text): every URL form a REDIS_URL
 * may take, one a line (DM_URL_LIST), for the man pages (tools/mkman.sh),
 * so that they list what the parser takes. */
static int url_forms(int argc, char **argv)
{
    (void)argv;
    if (argc != 1) {
        fputs("usage: dmutex url-forms\n", stderr);
        return 2;
    }
    fputs(DM_URL_FORMS, stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* The verbs, in the order `dmutex help` lists them: one table for the
 * dispatch and the usage text. A verb without a summary is not listed
 * (config-keys, keys: for the tests; url-forms: for the man pages). */
static const struct verb {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *synopsis;       /* after the name */
    const char *summary;
} verbs[] = {
    { "run", dm_cli_run, "-c CONFIG [-r REDIS_URL] [-l LEVEL] [--] PROGRAM [ARGS...]",
      "check CONFIG, then run PROGRAM with libdmutex.so preloaded" },
    { "check", dm_cli_check, "-c CONFIG [-r REDIS_URL] [--] PROGRAM [ARGS...]",
      "resolve CONFIG against PROGRAM and its libraries without running it" },
    { "ls", dm_cli_ls, "[-c CONFIG | -r REDIS_URL] [-n NAMESPACE] [--json]",
      "list the locks on the server: holder, remaining lease, fencing token" },
    { "top", dm_cli_top, "[-c CONFIG | -r REDIS_URL] [-n NAMESPACE] [-d SECONDS] [-N ITERATIONS]",
      "live view of the locks: holder, waiters, lease, token, acquisitions/s" },
    { "unlock", dm_cli_unlock, "-c CONFIG [-r REDIS_URL] [-n NAMESPACE] [--force] NAME",
      "release a lock whose holder is dead; --force: even while its lease lives" },
    { "fresh", dm_cli_fresh, "[-c CONFIG] [-r REDIS_URL] [-n NAMESPACE] [--durable]",
      "declare a new server that lost no lock data: no wait of a lease after its start" },
    { "scan", dm_cli_scan, "PROGRAM [LIBRARY...]",
      "list the mutex, cond and rwlock variables of a binary, with config entries" },
    { "trace", dm_cli_trace, "[-o FILE.json] [-i SECONDS] [--top N] [--min-locks N] [--] PROGRAM [ARGS...]",
      "run PROGRAM; report each mutex, cond and rwlock it uses, with config entries" },
    { "acl", dm_cli_acl, "-c CONFIG [--user NAME]",
      "print the ACL SETUSER line of the least-privilege Redis user CONFIG needs" },
    { "config-keys", config_keys, NULL, NULL },
    { "keys", keys_verb, NULL, NULL },
    { "url-forms", url_forms, NULL, NULL },
};

static void usage(FILE *out)
{
    fputs("usage: dmutex COMMAND [ARGS]\n"
          "\n"
          "Make chosen pthread mutexes of an unmodified program cluster-wide.\n"
          "\n"
          "commands:\n", out);
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (verbs[i].summary)
            fprintf(out, "  %s %s\n        %s\n", verbs[i].name, verbs[i].synopsis,
                    verbs[i].summary);
    fputs("  help  this text\n"
          "  --version\n"
          "        print the version of dmutex\n"
          "\n"
          "`dmutex COMMAND -h` describes a command. Environment: DMUTEX_CONFIG,\n"
          "DMUTEX_REDIS (a REDIS_URL), DMUTEX_TLS_CA/CERT/KEY (with rediss://), DMUTEX_LOG\n"
          "(error|warn|info|debug). See README.md and config/REFERENCE.md.\n"
          "\n"
          DM_URL_HELP, out);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (strcmp(cmd, verbs[i].name) == 0)
            return verbs[i].fn(argc - 1, argv + 1);
    if (strcmp(cmd, "--version") == 0) {
        printf("dmutex %s\n", DMUTEX_VERSION);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "dmutex: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return 2;
}
