/* dmutex acl: the least-privilege Redis ACL user a config needs, as one
 * `ACL SETUSER` line: only the commands dmutex sends, only the keys and
 * channels of the config's namespace. Redis 7 checks the commands a script
 * runs (EVAL, EVALSHA) against the calling user too, so the scripts'
 * redis.call()s are part of the list (tests/acl_commands.test.sh holds
 * this table to shim/redis/lua/ scripts). */
#include <getopt.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"

/* Every command the shim sends, and who sends it. A new command in the
 * shim or a script goes here too: without it the user this prints gets
 * NOPERM for it. */
static const char *const shim_commands[] = {
    /* redis.c: connecting */
    "auth", "select", "ping", "script|load",
    /* redis.c: the scripts (EVAL when the server lost the loaded one) */
    "evalsha", "eval",
    /* redis.c: with Sentinel, ROLE of the primary; with min_replicas, WAIT
     * (the sentinels themselves are asked by sentinel.c with their own user) */
    "role", "wait",
    /* notify.c: the subscriber connection (and its PING) */
    "subscribe", "unsubscribe",
    /* shim/redis/lua/: what the scripts call */
    "del", "get", "set", "incr", "type", "time", "pttl", "pexpire", "exists",
    "hexists", "hget", "hset", "hdel", "hkeys",
    "lindex", "llen", "lpop", "lpush", "lrange", "lrem", "ltrim", "rpush",
    "zadd", "zrem", "zremrangebyscore", "zscore",
    /* (an rwlock's read holders) */
    "zcard", "zcount", "zrange", "zrangebyscore",
    "publish",
    /* (redis.c: INFO server at connect, the server's run_id; acquire.lua:
     * INFO server, replication and persistence for a lock's first grant on
     * a server run: may a restart have lost its data?) */
    "info",
    NULL,
};

/* What the shim sends besides with redis.cluster (Redis Cluster): the
 * slot map (redis.c asks any node), ASKING before a command an ASK
 * redirection sent to a node importing the slot, and sharded pub/sub (the
 * scripts' SPUBLISH, notify's SSUBSCRIBE/SUNSUBSCRIBE). */
static const char *const cluster_commands[] = {
    "cluster|slots", "asking", "ssubscribe", "sunsubscribe", "spublish", NULL,
};

/* What `dmutex ls` sends besides (--ls; its GET, PTTL and LLEN are in the
 * list above): read-only. SCAN is not limited by key patterns: such a user
 * sees every key's name, not its value. */
static const char *const ls_commands[] = {
    "scan", "hgetall", "pubsub|numsub", NULL,
};

static const char usage_text[] =
    "usage: dmutex acl -c CONFIG [--user NAME] [--ls] [--commands] [--plain-password]\n"
    "\n"
    "Prints the ACL SETUSER line of the Redis user that CONFIG's processes need:\n"
    "the commands dmutex sends and nothing else, keys ~NS:* and channels &NS:*\n"
    "of the config's namespace NS, the key ~NAME of each protocol = \"setnx\" or\n"
    "\"redisson\" entry and the channel &redisson_lock__channel:{NAME} of each\n"
    "redisson entry. Run it on the server (redis-cli, as an admin).\n"
    "With an etcd config: the etcdctl lines of a role that may read and write\n"
    "the keys NS#... and nothing else, and of a user with it (etcd.username);\n"
    "run them as etcd's root user (etcdctl --user root ...).\n"
    "\n"
    "  -c, --config FILE     the application's config (namespace, user, password)\n"
    "  -u, --user NAME       the user's name (default: the config's redis.username)\n"
    "  -n, --namespace NS    instead of the config's namespace\n"
    "      --ls              also what `dmutex ls` needs (SCAN shows every key name)\n"
    "      --plain-password  the password as >PASSWORD (default: #SHA256 of it, so\n"
    "                        the line holds no secret); from redis.password or\n"
    "                        redis.password_env; without one the line sets none\n"
    "      --commands        print only the commands, one per line (those of\n"
    "                        every config: a cluster's too)\n"
    "  -h, --help            this text\n"
    "\n"
    "Exit status 0; 2 usage; 78 bad config.\n";

static int sha256_hex(const char *s, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL) != 1 || n != 32)
        return -1;
    for (unsigned i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    return 0;
}

/* With an etcd config: the etcdctl lines that make the user and a role
 * that may read and write the namespace's keys (NS#...) and nothing else;
 * leases need no permission. Run them as etcd's root user. */
static int etcd_lines(const struct dm_config *cfg, const char *cfg_path, const char *user,
                      const char *ns, int plain)
{
    char why[160];
    if (!user) {
        fprintf(stderr, "dmutex acl: %s sets no etcd.username: name the user with --user "
                "(and give the config that username and its password)\n", cfg_path);
        return 2;
    }
    if (!dm_config_name_ok(user, why, sizeof why)) {
        fprintf(stderr, "dmutex acl: user name \"%s\": use letters, digits and _ . : / @ -\n", user);
        return 2;
    }
    const char *pass = cfg->etcd.password;
    if (plain && pass && strpbrk(pass, " \t\r\n\"'\\")) {
        fprintf(stderr, "dmutex acl: the password holds a space, quote or backslash: leave "
                "out --plain-password (etcdctl user add then asks for it)\n");
        return 2;
    }
    printf("etcdctl role add 'dmutex-%s'\n", ns);
    printf("etcdctl role grant-permission 'dmutex-%s' --prefix=true readwrite '%s#'\n", ns, ns);
    if (plain && pass)
        printf("etcdctl user add '%s' --new-user-password='%s'\n", user, pass);
    else
        printf("etcdctl user add '%s'\n", user);
    printf("etcdctl user grant-role '%s' 'dmutex-%s'\n", user, ns);
    return fflush(stdout) == 0 ? 0 : 1;
}

int dm_cli_acl(int argc, char **argv)
{
    enum { OPT_LS = 256, OPT_PLAIN, OPT_COMMANDS };
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' },
        { "user", required_argument, NULL, 'u' },
        { "namespace", required_argument, NULL, 'n' },
        { "ls", no_argument, NULL, OPT_LS },
        { "plain-password", no_argument, NULL, OPT_PLAIN },
        { "commands", no_argument, NULL, OPT_COMMANDS },
        { "help", no_argument, NULL, 'h' },
        { 0, 0, 0, 0 },
    };
    const char *cfg_path = NULL, *user = NULL, *ns = NULL;
    int with_ls = 0, plain = 0, only_commands = 0, o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "+c:u:n:h", opts, NULL)) != -1) {
        switch (o) {
        case 'c': cfg_path = optarg; break;
        case 'u': user = optarg; break;
        case 'n': ns = optarg; break;
        case OPT_LS: with_ls = 1; break;
        case OPT_PLAIN: plain = 1; break;
        case OPT_COMMANDS: only_commands = 1; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: fputs(usage_text, stderr); return 2;
        }
    }
    if (optind != argc) {
        fputs(usage_text, stderr);
        return 2;
    }
    if (only_commands) {
        for (int i = 0; shim_commands[i]; i++)
            printf("%s\n", shim_commands[i]);
        for (int i = 0; cluster_commands[i]; i++)
            printf("%s\n", cluster_commands[i]);
        for (int i = 0; with_ls && ls_commands[i]; i++)
            printf("%s\n", ls_commands[i]);
        if (with_ls)
            printf("pubsub|shardnumsub\n");
        return 0;
    }
    if (!cfg_path) {
        fprintf(stderr, "dmutex acl: -c CONFIG is needed (its namespace and user)\n\n%s",
                usage_text);
        return 2;
    }
    struct dm_config cfg;
    if (dm_cli_load_config(cfg_path, &cfg) != 0)
        return DM_EX_CONFIG;
    char why[160];
    if (ns && !dm_config_name_ok(ns, why, sizeof why)) {
        fprintf(stderr, "dmutex acl: --namespace: %s\n", why);
        dm_config_free(&cfg);
        return 2;
    }
    if (!ns)
        ns = cfg.ns;
    if (cfg.etcd.nendpoints) {
        int rc = etcd_lines(&cfg, cfg_path, user ? user : cfg.etcd.username, ns, plain);
        dm_config_free(&cfg);
        return rc;
    }
    if (!user)
        user = cfg.redis.username;
    if (!user) {
        fprintf(stderr, "dmutex acl: %s sets no redis.username: name the user with --user "
                "(and give the config that username, or the processes log in as the "
                "default user)\n", cfg_path);
        dm_config_free(&cfg);
        return 2;
    }
    if (!dm_config_name_ok(user, why, sizeof why) || strchr(user, '@')) {
        fprintf(stderr, "dmutex acl: user name \"%s\": use letters, digits and _ . : / -\n", user);
        dm_config_free(&cfg);
        return 2;
    }
    char pw[80] = "";
    const char *pass = cfg.redis.password;
    if (pass && plain) {
        if (strpbrk(pass, " \t\r\n\"'\\")) {
            fprintf(stderr, "dmutex acl: the password holds a space, quote or backslash: "
                    "leave out --plain-password (the line then has its SHA-256)\n");
            dm_config_free(&cfg);
            return 2;
        }
    } else if (pass) {
        char hex[65];
        if (sha256_hex(pass, hex) != 0) {
            fprintf(stderr, "dmutex acl: cannot compute SHA-256\n");
            dm_config_free(&cfg);
            return 1;
        }
        snprintf(pw, sizeof pw, "#%s", hex);
    } else {
        fprintf(stderr, "dmutex acl: %s has no password (redis.password or "
                "redis.password_env): the line sets none; add >PASSWORD to it\n", cfg_path);
    }
    printf("ACL SETUSER %s reset on", user);
    if (pass)
        printf(plain ? " >%s" : " %s", plain ? pass : pw);
    printf(" ~%s:* &%s:*", ns, ns);
    /* A partner protocol's lock is the bare name, outside the namespace,
     * and a redisson one's release channel is Redisson's
     * (docs/interop.md); a name has only [A-Za-z0-9_.:/@-], no pattern
     * character. Each once (one name has one protocol). */
    for (size_t i = 0; i < cfg.nmutexes; i++) {
        const struct dm_object_config *m = &cfg.mutexes[i];
        int seen = m->protocol == DM_PROTOCOL_DMUTEX;
        for (size_t j = 0; j < i && !seen; j++)
            seen = strcmp(cfg.mutexes[j].name, m->name) == 0;
        if (seen)
            continue;
        printf(" ~%s", m->name);
        if (m->protocol == DM_PROTOCOL_REDISSON)    /* dm_keys_redisson_channel's, for a */
            printf(" &redisson_lock__channel:{%s}", m->name);   /* name without '{' */
    }
    printf(" -@all");
    for (int i = 0; shim_commands[i]; i++)
        if (cfg.redis.db != 0 || strcmp(shim_commands[i], "select") != 0)
            printf(" +%s", shim_commands[i]);       /* SELECT is sent for db != 0 only */
    for (int i = 0; cfg.redis.ncluster && cluster_commands[i]; i++)
        printf(" +%s", cluster_commands[i]);
    for (int i = 0; with_ls && ls_commands[i]; i++)
        printf(" +%s", ls_commands[i]);
    if (with_ls && cfg.redis.ncluster)
        printf(" +pubsub|shardnumsub");     /* ls counts a cluster's sharded subscribers */
    printf("\n");
    dm_config_free(&cfg);
    return fflush(stdout) == 0 ? 0 : 1;
}
