/* test_config: the config file contract of shim/config.h, one behaviour per
 * test. Good files are checked field by field, defaults included; bad ones
 * by the exact "label:LINE:" prefix and a word naming what is wrong. No
 * Redis, no preload: config is pure parsing. Runs from the repository root
 * (tests/run.sh), where the sample configs are. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "config_keys.h"
#include "harness.h"

static struct dm_config cfg;
static char err[DM_ERR_MAX];

static int teardown(void **state)
{
    (void)state;
    dm_config_free(&cfg);
    return 0;
}

/* Loads `text` as "t.cfg" into cfg and insists that it succeeds. */
static void load_ok(const char *text)
{
    err[0] = '\0';
    int rc = dm_config_load_string(text, "t.cfg", &cfg, err, sizeof err);
    if (rc != 0)
        print_error("unexpected error: %s\n", err);
    assert_int_equal(rc, 0);
}

/* Loads `text` and insists on an error starting with `prefix` (e.g.
 * "t.cfg:3: ") and containing every word of the NULL-terminated list.
 * Also checks that a failed load leaves nothing behind. */
static void expect_error_words(const char *text, const char *prefix, ...)
{
    err[0] = '\0';
    int rc = dm_config_load_string(text, "t.cfg", &cfg, err, sizeof err);
    if (rc != -1) {
        print_error("expected an error starting %s, got success\n", prefix);
        fail();
    }
    if (strncmp(err, prefix, strlen(prefix)) != 0) {
        print_error("expected prefix \"%s\", got \"%s\"\n", prefix, err);
        fail();
    }
    va_list ap;
    va_start(ap, prefix);
    for (const char *w; (w = va_arg(ap, const char *));) {
        if (!strstr(err, w)) {
            print_error("expected \"%s\" in \"%s\"\n", w, err);
            fail();
        }
    }
    va_end(ap);
    assert_null(cfg.path);
    assert_null(cfg.mutexes);
    assert_int_equal(cfg.nmutexes, 0);
    assert_null(cfg.redis.unix_path);
    assert_null(cfg.redis.password);
    assert_true(strlen(err) < sizeof err);
}
#define expect_error(text, prefix, ...) expect_error_words(text, prefix, __VA_ARGS__, (const char *)NULL)

static char *write_temp(const char *data, size_t len)
{
    char *path = strdup("/tmp/dmutex-test-config-XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

static void assert_defaults(const struct dm_config *c)
{
    assert_string_equal(c->redis.host, "127.0.0.1");
    assert_int_equal(c->redis.port, 6379);
    assert_null(c->redis.unix_path);
    assert_null(c->redis.username);
    assert_null(c->redis.password);
    assert_int_equal(c->redis.db, 0);
    assert_int_equal(c->redis.connect_timeout_ms, DM_CONNECT_TIMEOUT_MS);
    assert_int_equal(c->redis.command_timeout_ms, DM_COMMAND_TIMEOUT_MS);
    assert_string_equal(c->ns, "dmutex");
    assert_int_equal(c->lease_ms, 30000);
    assert_int_equal(c->renew_ms, 10000);
    assert_int_equal(c->lease_margin_ms, 3000);
    assert_int_equal(c->lock_delay_ms, 0);
    assert_int_equal(c->on_lease_lost, DM_LOST_ABORT);
    assert_int_equal(c->on_redis_down, DM_DOWN_BLOCK);
}

static void assert_mutex(const struct dm_object_config *m, const char *symbol, const char *object,
                         const char *init_site, const char *name, long offset, long index,
                         int required, int fair, int cache, int line)
{
    if (symbol)
        assert_string_equal(m->symbol, symbol);
    else
        assert_null(m->symbol);
    if (object)
        assert_string_equal(m->object, object);
    else
        assert_null(m->object);
    if (init_site)
        assert_string_equal(m->init_site, init_site);
    else
        assert_null(m->init_site);
    assert_string_equal(m->name, name);
    assert_int_equal(m->offset, offset);
    assert_int_equal(m->index, index);
    assert_int_equal(m->required, required);
    assert_int_equal(m->fair, fair);
    assert_int_equal(m->cache, cache);
    assert_int_equal(m->line, line);
}

/* ---- good configs ------------------------------------------------------ */

static void test_defaults_fill_every_documented_value(void **state)
{
    (void)state;
    dm_config_defaults(&cfg);
    assert_defaults(&cfg);
    assert_null(cfg.path);
    assert_null(cfg.mutexes);
    assert_int_equal(cfg.nmutexes, 0);
}

static void test_empty_config_gives_every_default(void **state)
{
    (void)state;
    load_ok("");
    assert_defaults(&cfg);
    assert_string_equal(cfg.path, "t.cfg");
    assert_int_equal(cfg.nmutexes, 0);
}

static void test_comments_only_config_gives_every_default(void **state)
{
    (void)state;
    load_ok("# nothing\n// here\n/* at\n all */\n");
    assert_defaults(&cfg);
}

static void test_minimal_config_maps_one_symbol_with_entry_defaults(void **state)
{
    (void)state;
    load_ok("mutexes = ( { symbol = \"stock_lock\"; } );\n");
    assert_defaults(&cfg);
    assert_int_equal(cfg.nmutexes, 1);
    assert_mutex(&cfg.mutexes[0], "stock_lock", NULL, NULL, "stock_lock", 0, -1, 1, 1, 0, 1);
}

/* conds: the keys of a mutex entry, kept apart from the mutexes. */
static void test_conds_read_symbol_and_init_site_entries(void **state)
{
    (void)state;
    load_ok("mutexes = ( { symbol = \"q_lock\"; name = \"queue\"; } );\n"
            "conds = (\n"
            "  { symbol = \"not_empty\"; name = \"queue\"; },\n"
            "  { symbol = \"conds\"; index = 2; object = \"libq.so\"; required = false; },\n"
            "  { init_site = \"chan_new\"; name = \"chan\"; }\n"
            ");\n");
    assert_int_equal(cfg.nmutexes, 1);
    assert_int_equal(cfg.mutexes[0].cond, 0);
    assert_int_equal(cfg.nconds, 3);
    assert_mutex(&cfg.conds[0], "not_empty", NULL, NULL, "queue", 0, -1, 1, 1, 0, 3);
    assert_mutex(&cfg.conds[1], "conds", "libq.so", NULL, "conds", 0, 2, 0, 1, 0, 4);
    assert_mutex(&cfg.conds[2], NULL, NULL, "chan_new", "chan", 0, -1, 1, 1, 0, 5);
    for (size_t i = 0; i < cfg.nconds; i++)
        assert_int_equal(cfg.conds[i].cond, 1);
}

/* rwlocks: the keys of a mutex entry, kept apart; a config of rwlocks
 * alone needs no mutexes list. */
static void test_rwlocks_read_symbol_and_init_site_entries(void **state)
{
    (void)state;
    load_ok("rwlocks = (\n"
            "  { symbol = \"routes_lock\"; },\n"
            "  { init_site = \"table_new\"; name = \"tables\"; }\n"
            ");\n");
    assert_int_equal(cfg.nmutexes, 0);
    assert_int_equal(cfg.nrwlocks, 2);
    assert_mutex(&cfg.rwlocks[0], "routes_lock", NULL, NULL, "routes_lock", 0, -1, 1, 1, 0, 2);
    assert_mutex(&cfg.rwlocks[1], NULL, NULL, "table_new", "tables", 0, -1, 1, 1, 0, 3);
    for (size_t i = 0; i < cfg.nrwlocks; i++)
        assert_int_equal(cfg.rwlocks[i].rw, 1);
    char err[256];
    assert_int_equal(dm_config_check_mutexes(&cfg, err, sizeof err), 0);
}

static const char full_config[] =
    "redis = { host = \"redis.example\"; port = 6380; username = \"app\"; password = \"pw\";\n"  /* 1 */
    "          db = 3; connect_timeout_ms = 250; command_timeout_ms = 750; };\n"                /* 2 */
    "namespace = \"prod:orders\";\n"                                                             /* 3 */
    "lease_ms = 9000;\n"                                                                         /* 4 */
    "renew_ms = 2000;\n"                                                                         /* 5 */
    "lease_margin_ms = 800;\n"                                                                   /* 6 */
    "lock_delay_ms = 500;\n"                                                                     /* 7 */
    "on_lease_lost = \"warn\";\n"                                                                /* 8 */
    "on_redis_down = \"error\";\n"                                                               /* 9 */
    "mutexes = (\n"                                                                              /* 10 */
    "  { symbol = \"stock_lock\"; },\n"                                                          /* 11 */
    "  { symbol = \"ledger_lock\"; object = \"libledger.so\"; name = \"ledger\"; },\n"           /* 12 */
    "  { symbol = \"slots\"; offset = 80; name = \"slot2\"; },\n"                                /* 13 */
    "  { symbol = \"locks\"; index = 3; name = \"lock3\"; },\n"                                  /* 14 */
    "  { symbol = \"util.c:cache_lock\"; name = \"cache\"; },\n"                                 /* 15 */
    "  { init_site = \"account_new\"; name = \"account\"; },\n"                                  /* 16 */
    "  { symbol = \"opt_lock\"; required = false; fair = false; cache = true; }\n"               /* 17 */
    ");\n";

static void test_full_config_reads_every_key(void **state)
{
    (void)state;
    load_ok(full_config);
    assert_string_equal(cfg.redis.host, "redis.example");
    assert_int_equal(cfg.redis.port, 6380);
    assert_null(cfg.redis.unix_path);
    assert_string_equal(cfg.redis.username, "app");
    assert_string_equal(cfg.redis.password, "pw");
    assert_int_equal(cfg.redis.db, 3);
    assert_int_equal(cfg.redis.connect_timeout_ms, 250);
    assert_int_equal(cfg.redis.command_timeout_ms, 750);
    assert_string_equal(cfg.ns, "prod:orders");
    assert_int_equal(cfg.lease_ms, 9000);
    assert_int_equal(cfg.renew_ms, 2000);
    assert_int_equal(cfg.lease_margin_ms, 800);
    assert_int_equal(cfg.lock_delay_ms, 500);
    assert_int_equal(cfg.on_lease_lost, DM_LOST_WARN);
    assert_int_equal(cfg.on_redis_down, DM_DOWN_ERROR);
    assert_int_equal(cfg.nmutexes, 7);
    assert_mutex(&cfg.mutexes[0], "stock_lock", NULL, NULL, "stock_lock", 0, -1, 1, 1, 0, 11);
    assert_mutex(&cfg.mutexes[1], "ledger_lock", "libledger.so", NULL, "ledger", 0, -1, 1, 1, 0, 12);
    assert_mutex(&cfg.mutexes[2], "slots", NULL, NULL, "slot2", 80, -1, 1, 1, 0, 13);
    assert_mutex(&cfg.mutexes[3], "locks", NULL, NULL, "lock3", 0, 3, 1, 1, 0, 14);
    assert_mutex(&cfg.mutexes[4], "util.c:cache_lock", NULL, NULL, "cache", 0, -1, 1, 1, 0, 15);
    assert_mutex(&cfg.mutexes[5], NULL, NULL, "account_new", "account", 0, -1, 1, 1, 0, 16);
    assert_mutex(&cfg.mutexes[6], "opt_lock", NULL, NULL, "opt_lock", 0, -1, 0, 0, 1, 17);
}

static void test_lease_ms_derives_renew_and_margin_defaults(void **state)
{
    (void)state;
    load_ok("lease_ms = 900;\n");
    assert_int_equal(cfg.lease_ms, 900);
    assert_int_equal(cfg.renew_ms, 300);
    assert_int_equal(cfg.lease_margin_ms, 90);
    assert_int_equal(cfg.lock_delay_ms, 0);
}

static void test_smallest_lease_keeps_valid_defaults(void **state)
{
    (void)state;
    load_ok("lease_ms = 100;\n");
    assert_int_equal(cfg.renew_ms, 33);
    assert_int_equal(cfg.lease_margin_ms, 10);
}

static void test_largest_values_at_the_limits_are_accepted(void **state)
{
    (void)state;
    load_ok("lease_ms = 3600000; lock_delay_ms = 600000; lease_margin_ms = 1799999; renew_ms = 10;\n"
            "redis = { port = 65535; db = 1000000; connect_timeout_ms = 600000; command_timeout_ms = 1; };\n"
            "mutexes = ( { symbol = \"a\"; offset = 1073741824; }, { symbol = \"b\"; index = 16777216; } );\n");
    assert_int_equal(cfg.lease_margin_ms, 1799999);
    assert_int_equal(cfg.lock_delay_ms, 600000);
    assert_int_equal(cfg.redis.port, 65535);
    assert_int_equal(cfg.redis.db, 1000000);
    assert_int_equal(cfg.mutexes[0].offset, 1L << 30);
    assert_int_equal(cfg.mutexes[1].index, 1L << 24);
}

static void test_int64_and_hex_integers_are_accepted(void **state)
{
    (void)state;
    load_ok("lease_ms = 20000L; redis = { port = 0x18eb; };\n");
    assert_int_equal(cfg.lease_ms, 20000);
    assert_int_equal(cfg.redis.port, 6379);
}

static void test_colon_assignment_and_no_final_semicolon_are_libconfig_syntax(void **state)
{
    (void)state;
    load_ok("lease_ms : 20000\nnamespace = \"x\"");
    assert_int_equal(cfg.lease_ms, 20000);
    assert_string_equal(cfg.ns, "x");
}

static void test_protocol_defaults_to_dmutex_and_setnx_is_unfair(void **state)
{
    (void)state;
    load_ok("mutexes = (\n { symbol = \"a\"; },\n { symbol = \"b\"; name = \"audit\"; "
            "protocol = \"setnx\"; },\n { symbol = \"c\"; name = \"audit\"; protocol = \"setnx\"; "
            "fair = false; },\n { symbol = \"d\"; protocol = \"dmutex\"; }\n);\n");
    assert_int_equal(cfg.mutexes[0].protocol, DM_PROTOCOL_DMUTEX);
    assert_int_equal(cfg.mutexes[0].fair, 1);
    assert_int_equal(cfg.mutexes[1].protocol, DM_PROTOCOL_SETNX);
    assert_int_equal(cfg.mutexes[1].fair, 0);       /* a SET NX lock has no queue */
    assert_int_equal(cfg.mutexes[2].protocol, DM_PROTOCOL_SETNX);
    assert_int_equal(cfg.mutexes[3].protocol, DM_PROTOCOL_DMUTEX);
    assert_int_equal(dm_config_check_protocols(&cfg, err, sizeof err), 0);
}

static void test_setnx_protocol_is_refused_with_etcd(void **state)
{
    (void)state;
    load_ok("etcd = { endpoints = ( \"http://127.0.0.1:2379\" ); };\n"
            "mutexes = (\n { symbol = \"a\"; },\n { symbol = \"b\"; name = \"audit\";\n"
            "   protocol = \"setnx\"; }\n);\n");
    assert_int_equal(dm_config_check_protocols(&cfg, err, sizeof err), -1);
    const char *words[] = { "t.cfg:4: ", "protocol = \"setnx\" is a Redis lock", "key \"audit\"",
                            "the store is etcd", "use protocol = \"dmutex\"" };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strstr(err, words[i]))
            fail_msg("expected \"%s\" in \"%s\"", words[i], err);
    dm_config_free(&cfg);
    load_ok("mutexes = ( { symbol = \"b\"; protocol = \"setnx\"; } );\n");
    assert_int_equal(dm_config_check_protocols(&cfg, err, sizeof err), 0);
    assert_int_equal(dm_config_set_redis_url(&cfg, "etcd://127.0.0.1:2379", err, sizeof err), 0);
    assert_int_equal(dm_config_check_protocols(&cfg, err, sizeof err), -1);   /* DMUTEX_ETCD */
    assert_non_null(strstr(err, "t.cfg:1: "));
}

static void test_redisson_protocol_is_loaded_unfair_and_refused_with_etcd(void **state)
{
    (void)state;
    load_ok("mutexes = (\n { symbol = \"a\"; name = \"stock\"; protocol = \"redisson\"; },\n"
            " { symbol = \"b\"; name = \"stock\"; protocol = \"redisson\"; fair = false; }\n);\n");
    assert_int_equal(cfg.mutexes[0].protocol, DM_PROTOCOL_REDISSON);
    assert_int_equal(cfg.mutexes[0].fair, 0);       /* Redisson's RLock has no queue */
    assert_int_equal(cfg.mutexes[1].protocol, DM_PROTOCOL_REDISSON);
    assert_int_equal(dm_config_check_protocols(&cfg, err, sizeof err), 0);
    assert_int_equal(dm_config_set_redis_url(&cfg, "etcd://127.0.0.1:2379", err, sizeof err), 0);
    assert_int_equal(dm_config_check_protocols(&cfg, err, sizeof err), -1);
    const char *words[] = { "t.cfg:2: ", "protocol = \"redisson\" is a Redis lock",
                            "a hash at the key \"stock\"", "the store is etcd" };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strstr(err, words[i]))
            fail_msg("expected \"%s\" in \"%s\"", words[i], err);
}

static void test_name_defaults_to_symbol_without_file_qualifier(void **state)
{
    (void)state;
    load_ok("mutexes = ( { symbol = \"src/util.c:cache_lock\"; } );\n");
    assert_string_equal(cfg.mutexes[0].symbol, "src/util.c:cache_lock");
    assert_string_equal(cfg.mutexes[0].name, "cache_lock");
}

static void test_name_defaults_to_init_site(void **state)
{
    (void)state;
    load_ok("mutexes = ( { init_site = \"account_new\"; object = \"libacct.so.1\"; } );\n");
    assert_mutex(&cfg.mutexes[0], NULL, "libacct.so.1", "account_new", "account_new", 0, -1, 1, 1, 0, 1);
}

static void test_address_entries_keep_address_build_id_and_name(void **state)
{
    (void)state;
    load_ok("mutexes = ( { address = 0x4c40; build_id = \"3F1Aab\"; name = \"books\"; },\n"
            "            { init_site_address = 0x1a2b; object = \"libx.so\"; name = \"acct\"; } );\n");
    assert_mutex(&cfg.mutexes[0], NULL, NULL, NULL, "books", 0, -1, 1, 1, 0, 1);
    assert_int_equal(cfg.mutexes[0].address, 0x4c40);
    assert_int_equal(cfg.mutexes[0].init_site_address, -1);
    assert_string_equal(cfg.mutexes[0].build_id, "3F1Aab");
    assert_mutex(&cfg.mutexes[1], NULL, "libx.so", NULL, "acct", 0, -1, 1, 1, 0, 2);
    assert_int_equal(cfg.mutexes[1].address, -1);
    assert_int_equal(cfg.mutexes[1].init_site_address, 0x1a2b);
    assert_null(cfg.mutexes[1].build_id);
}

static void test_mangled_cpp_and_local_static_symbols_are_accepted(void **state)
{
    (void)state;
    load_ok("mutexes = ( { symbol = \"_ZN5store4lockE\"; },\n"
            "            { symbol = \"lock.1234\"; },\n"
            "            { symbol = \"a-b_c+d.cc:_ZL4lock\"; },\n"
            "            { symbol = \"$weird\"; name = \"weird\"; } );\n");
    assert_int_equal(cfg.nmutexes, 4);
    assert_string_equal(cfg.mutexes[1].name, "lock.1234");
    assert_string_equal(cfg.mutexes[2].name, "_ZL4lock");
    assert_string_equal(cfg.mutexes[3].name, "weird");
}

static void test_name_uses_every_allowed_character(void **state)
{
    (void)state;
    load_ok("namespace = \"a-Z_0.9:/@\";\n"
            "mutexes = ( { symbol = \"a\"; name = \"svc@host:/x.y-z_0\"; } );\n");
    assert_string_equal(cfg.ns, "a-Z_0.9:/@");
    assert_string_equal(cfg.mutexes[0].name, "svc@host:/x.y-z_0");
}

static void test_name_of_200_bytes_is_accepted(void **state)
{
    (void)state;
    char text[400], name[DM_NAME_MAX + 1];
    memset(name, 'n', DM_NAME_MAX);
    name[DM_NAME_MAX] = '\0';
    snprintf(text, sizeof text, "mutexes = ( { symbol = \"s\"; name = \"%s\"; } );", name);
    load_ok(text);
    assert_string_equal(cfg.mutexes[0].name, name);
}

static void test_empty_mutex_list_is_fine(void **state)
{
    (void)state;
    load_ok("mutexes = ();\n");
    assert_int_equal(cfg.nmutexes, 0);
    dm_config_free(&cfg);
    load_ok("mutexes = [];\n");
    assert_int_equal(cfg.nmutexes, 0);
}

static void test_same_symbol_with_different_offset_index_or_object_is_not_a_duplicate(void **state)
{
    (void)state;
    load_ok("mutexes = ( { symbol = \"s\"; }, { symbol = \"s\"; offset = 40; name = \"s40\"; },\n"
            "  { symbol = \"s\"; index = 1; name = \"s1\"; },\n"
            "  { symbol = \"s\"; object = \"liba.so\"; },\n"
            "  { init_site = \"s\"; } );\n");
    assert_int_equal(cfg.nmutexes, 5);
}

static void test_unix_socket_replaces_host(void **state)
{
    (void)state;
    load_ok("redis = { unix = \"/run/redis/redis.sock\"; db = 2; };\n");
    assert_null(cfg.redis.host);
    assert_string_equal(cfg.redis.unix_path, "/run/redis/redis.sock");
    assert_int_equal(cfg.redis.db, 2);
}

static void test_password_env_is_resolved_into_password(void **state)
{
    (void)state;
    setenv("DMUTEX_TEST_PW", "s3cret", 1);
    load_ok("redis = { username = \"u\"; password_env = \"DMUTEX_TEST_PW\"; };\n");
    unsetenv("DMUTEX_TEST_PW");
    assert_string_equal(cfg.redis.username, "u");
    assert_string_equal(cfg.redis.password, "s3cret");
}

static void test_every_policy_value_is_read(void **state)
{
    (void)state;
    load_ok("on_lease_lost = \"abort\"; on_redis_down = \"block\";");
    assert_int_equal(cfg.on_lease_lost, DM_LOST_ABORT);
    assert_int_equal(cfg.on_redis_down, DM_DOWN_BLOCK);
    dm_config_free(&cfg);
    load_ok("on_lease_lost = \"warn\"; on_redis_down = \"local\";");
    assert_int_equal(cfg.on_lease_lost, DM_LOST_WARN);
    assert_int_equal(cfg.on_redis_down, DM_DOWN_LOCAL);
}

static void test_null_label_is_named_string(void **state)
{
    (void)state;
    assert_int_equal(dm_config_load_string("x = 1;", NULL, &cfg, err, sizeof err), -1);
    assert_true(strncmp(err, "(string):1: ", 12) == 0);
}

/* ---- files ------------------------------------------------------------- */

static void test_demo_cfg_loads(void **state)
{
    (void)state;
    int rc = dm_config_load("config/demo.cfg", &cfg, err, sizeof err);
    if (rc)
        print_error("%s\n", err);
    assert_int_equal(rc, 0);
    assert_string_equal(cfg.path, "config/demo.cfg");
    assert_string_equal(cfg.redis.host, "127.0.0.1");
    assert_int_equal(cfg.redis.port, 6379);
    assert_int_equal(cfg.nmutexes, 1);
    assert_string_equal(cfg.mutexes[0].symbol, "stock_lock");
    assert_string_equal(cfg.mutexes[0].name, "stock_lock");
}

static void test_example_cfg_loads_with_every_key(void **state)
{
    (void)state;
    int rc = dm_config_load("config/example.cfg", &cfg, err, sizeof err);
    if (rc)
        print_error("%s\n", err);
    assert_int_equal(rc, 0);
    assert_defaults(&cfg);
    assert_int_equal(cfg.nmutexes, 7);
}

/* config/example.cfg is "every key, with its default": each key of the
 * loader's table (shim/config_keys.c) is written in it (as `key =`, maybe
 * commented out), and every scalar top-level and redis key it sets holds
 * the table's default. */
static void test_example_cfg_names_every_key_of_the_table_at_its_default(void **state)
{
    (void)state;
    FILE *f = fopen("config/example.cfg", "r");
    assert_non_null(f);
    static char text[64 * 1024];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    for (int id = 0; id < DM_NKEYS; id++) {
        const char *name = dm_config_keys[id].name;
        int found = 0;
        for (const char *s = strstr(text, name); s && !found; s = strstr(s + 1, name)) {
            const char *e = s + strlen(name);
            while (*e == ' ')
                e++;
            found = (s == text || strchr(" \t\n{#", s[-1])) && *e == '=';
        }
        if (!found)
            print_error("config/example.cfg does not write key %s\n", name);
        assert_true(found);
    }

    struct dm_config dflt;
    dm_config_defaults(&dflt);
    assert_int_equal(dm_config_load("config/example.cfg", &cfg, err, sizeof err), 0);
    for (int id = 0; id < DM_NKEYS; id++) {
        const struct dm_config_key *k = &dm_config_keys[id];
        if (k->group == DM_GROUP_MUTEX || k->offset == DM_CFG_NO_FIELD)
            continue;
        const char *got = k->group == DM_GROUP_TOP ? (const char *)&cfg
                        : k->group == DM_GROUP_TLS ? (const char *)&cfg.redis.tls
                        : k->group == DM_GROUP_METRICS ? (const char *)&cfg.metrics
                                                   : (const char *)&cfg.redis;
        const char *want = k->group == DM_GROUP_TOP ? (const char *)&dflt
                         : k->group == DM_GROUP_TLS ? (const char *)&dflt.redis.tls
                         : k->group == DM_GROUP_METRICS ? (const char *)&dflt.metrics
                                                    : (const char *)&dflt.redis;
        got += k->offset;
        want += k->offset;
        switch (k->type) {
        case DM_CFG_INT:
        case DM_CFG_BOOL:
        case DM_CFG_ENUM:
            if (*(const int *)got != *(const int *)want)
                print_error("config/example.cfg: %s = %d, the default is %d\n", k->name,
                            *(const int *)got, *(const int *)want);
            assert_int_equal(*(const int *)got, *(const int *)want);
            break;
        case DM_CFG_LONG:
            if (*(const long *)got != *(const long *)want)
                print_error("config/example.cfg: %s = %ld, the default is %ld\n", k->name,
                            *(const long *)got, *(const long *)want);
            assert_int_equal(*(const long *)got, *(const long *)want);
            break;
        case DM_CFG_NAME:
        case DM_CFG_HAND:
            if (k->dflt_str)
                assert_string_equal(*(char *const *)got, k->dflt_str);
            break;
        }
    }
}

static void test_load_from_file_reports_lines_with_its_path(void **state)
{
    (void)state;
    static const char text[] = "# comment\n\nlease_ms = 20;\n";
    char *path = write_temp(text, sizeof text - 1);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s:3: lease_ms = 20: must be between 100 and 3600000", path);
    assert_int_equal(dm_config_load(path, &cfg, err, sizeof err), -1);
    assert_string_equal(err, prefix);
    unlink(path);
    free(path);
}

static void test_load_from_file_sets_path(void **state)
{
    (void)state;
    static const char text[] = "mutexes = ( { symbol = \"a\"; } );\n";
    char *path = write_temp(text, sizeof text - 1);
    assert_int_equal(dm_config_load(path, &cfg, err, sizeof err), 0);
    assert_string_equal(cfg.path, path);
    assert_int_equal(cfg.nmutexes, 1);
    unlink(path);
    free(path);
}

static void test_missing_file_says_cannot_read_and_why(void **state)
{
    (void)state;
    assert_int_equal(dm_config_load("/nonexistent/dmutex.cfg", &cfg, err, sizeof err), -1);
    assert_string_equal(err, "/nonexistent/dmutex.cfg: cannot read: No such file or directory");
    assert_null(cfg.path);
}

static void test_directory_says_cannot_read(void **state)
{
    (void)state;
    assert_int_equal(dm_config_load("/tmp", &cfg, err, sizeof err), -1);
    assert_string_equal(err, "/tmp: cannot read: Is a directory");
}

static void test_nul_byte_in_file_names_its_line(void **state)
{
    (void)state;
    static const char text[] = "lease_ms = 1000;\nnamespace = \"a\0b\";\n";
    char *path = write_temp(text, sizeof text - 1);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s:2: ", path);
    assert_int_equal(dm_config_load(path, &cfg, err, sizeof err), -1);
    assert_true(strncmp(err, prefix, strlen(prefix)) == 0);
    assert_non_null(strstr(err, "NUL"));
    unlink(path);
    free(path);
}

static void test_truncated_file_is_a_syntax_error(void **state)
{
    (void)state;
    static const char text[] = "redis = { host = \"127.0.0.1\";\n  port = 63";
    char *path = write_temp(text, sizeof text - 1);
    assert_int_equal(dm_config_load(path, &cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "syntax error"));
    unlink(path);
    free(path);
}

/* ---- syntax and structure ---------------------------------------------- */

/* A wrong DMUTEX_CONFIG may name a key file or a binary: its bytes must
 * not end up in a log. */
static void test_syntax_error_echoes_no_bytes_of_the_file(void **state)
{
    (void)state;
    static const char text[] = "\x7f" "ELF\x02\x01 secretline-one KEEPOUT\n"
                               "root:$6$saltsalt$S3CRETHASH:19000:0:99999:7:::\n";
    char *path = write_temp(text, sizeof text - 1);
    assert_int_equal(dm_config_load(path, &cfg, err, sizeof err), -1);
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s:1: ", path);
    if (strncmp(err, prefix, strlen(prefix)) != 0 || strstr(err, "KEEPOUT") ||
        strstr(err, "secretline") || strstr(err, "ELF") || strstr(err, "S3CRET"))
        fail_msg("the message names the file and line and shows none of its bytes: %s", err);
    unlink(path);
    free(path);
    expect_error("root:$6$saltsalt$S3CRETHASH:19000:0:99999:7:::\n", "t.cfg:1: ", "syntax error");
    assert_null(strstr(err, "S3CRET"));
    /* A long number in garbage: the pre-scan's range check names neither. */
    expect_error("card pin = 12345678901234567890 KEEPOUT\n", "t.cfg:1: ", "out of range");
    if (strstr(err, "1234567890") || strstr(err, "pin"))
        fail_msg("the message shows bytes of the file: %s", err);
}

/* ---- mutexes must be written, even empty ---------------------------------- */

static void test_empty_file_fails_the_mutexes_check(void **state)
{
    (void)state;
    load_ok("");
    assert_int_equal(dm_config_check_mutexes(&cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "t.cfg: "));
    assert_non_null(strstr(err, "no settings"));
    assert_non_null(strstr(err, "mutexes = ();"));
    dm_config_free(&cfg);
    load_ok("# only a comment\n");
    assert_int_equal(dm_config_check_mutexes(&cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "no settings"));
}

static void test_config_without_mutexes_fails_the_mutexes_check(void **state)
{
    (void)state;
    load_ok("lease_ms = 5000;\nredis = { port = 7000; };\n");
    assert_int_equal(dm_config_check_mutexes(&cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "t.cfg: no mutexes list"));
    assert_non_null(strstr(err, "mutexes = ();"));
}

static void test_explicitly_empty_mutexes_passes_the_mutexes_check(void **state)
{
    (void)state;
    load_ok("lease_ms = 5000;\nmutexes = ();\n");
    assert_int_equal(cfg.nmutexes, 0);
    assert_int_equal(dm_config_check_mutexes(&cfg, err, sizeof err), 0);
    dm_config_free(&cfg);
    load_ok("mutexes = ( { symbol = \"a\"; } );\n");
    assert_int_equal(dm_config_check_mutexes(&cfg, err, sizeof err), 0);
}

/* ---- programs first ---------------------------------------------------------- */

/* A process `programs` does not list is told so before anything else is
 * checked: here a password_env naming an unset variable and a bad key. */
static void test_programs_decide_before_anything_else_is_checked(void **state)
{
    (void)state;
    static const char text[] = "programs = [\"app\"];\n"
                               "redis = { password_env = \"DM_TEST_UNSET_PW_VAR\"; };\n"
                               "lease_ms = 1;\nno_such_key = 1;\n";
    unsetenv("DM_TEST_UNSET_PW_VAR");
    char *path = write_temp(text, sizeof text - 1);
    assert_int_equal(dm_config_load_for(path, "helper", &cfg, err, sizeof err), DM_CONFIG_NOT_FOR);
    assert_int_equal(cfg.nprograms, 1);
    assert_string_equal(cfg.path, path);
    dm_config_free(&cfg);
    /* The program itself gets every error. */
    assert_int_equal(dm_config_load_for(path, "app", &cfg, err, sizeof err), -1);
    assert_non_null(strstr(err, "no_such_key"));
    /* Unknown program (NULL): as if listed. */
    assert_int_equal(dm_config_load_for(path, NULL, &cfg, err, sizeof err), -1);
    unlink(path);
    free(path);
}

static void test_programs_listing_the_program_loads_the_rest(void **state)
{
    (void)state;
    static const char text[] = "programs = [\"app\", \"other\"];\nmutexes = ( { symbol = \"a\"; } );\n";
    char *path = write_temp(text, sizeof text - 1);
    assert_int_equal(dm_config_load_for(path, "other", &cfg, err, sizeof err), 0);
    assert_int_equal(cfg.nmutexes, 1);
    dm_config_free(&cfg);
    /* Without programs, every process is one the config is for. */
    assert_int_equal(dm_config_load_string("mutexes = ();", "t.cfg", &cfg, err, sizeof err), 0);
    unlink(path);
    free(path);
}

/* ---- secrets in URLs ------------------------------------------------------------ */

static void test_redact_url_hides_the_password_only(void **state)
{
    (void)state;
    static const struct {
        const char *url, *shown;
    } cases[] = {
        { "redis://app:s3cret@db.example:6380/2", "redis://app:***@db.example:6380/2" },
        { "redis://s3cret@db.example", "redis://***@db.example" },
        { "redis://a:p@ss:w@rd@h:1", "redis://a:***@h:1" },
        { "http://u:s3cret@h/", "http://u:***@h/" },
        { "u:s3cret@h:6379", "u:***@h:6379" },
        { "redis://h:6379/0", "redis://h:6379/0" },
        { "unix:///run/redis.sock?db=1", "unix:///run/redis.sock?db=1" },
        /* Unescaped '/', '?' and '#' in a password end no authority early. */
        { "redis://u:se/cret@h:1/0", "redis://u:***@h:1/0" },
        { "redis://u:se?cr#et@h", "redis://u:***@h" },
        { "redis://:a/b@h", "redis://:***@h" },
    };
    char out[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dm_config_redact_url(cases[i].url, out, sizeof out);
        assert_string_equal(out, cases[i].shown);
    }
}

/* Every URL error that quotes the URL quotes it without its password. */
static void test_url_errors_never_show_the_password(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "redis://app:s3cretPW@127.0.0.1:99999/",
        "redis://app:s3cretPW@127.0.0.1:6379/x",
        "redis://app:s3cretPW@/",
        "rediss://app:s3cretPW@h:99999",
        "http://app:s3cretPW@h:6379",
        "app:s3cretPW@h:6379",
        "redis://app:s3cretPW@h:6379/0#frag",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dm_config_defaults(&cfg);
        assert_int_equal(dm_config_set_redis_url(&cfg, bad[i], err, sizeof err), -1);
        if (strstr(err, "s3cretPW"))
            fail_msg("%s: the message shows the password: %s", bad[i], err);
        dm_config_free(&cfg);
    }
}

static void test_include_inside_a_string_is_just_text(void **state)
{
    (void)state;
    load_ok("namespace = \"a\";\n# @include \"x\"\n");
}

static void test_deep_nesting_is_an_error_not_a_crash(void **state)
{
    (void)state;
    size_t depth = 100000;
    char *text = malloc(depth * 2 + 16);
    assert_non_null(text);
    char *p = text + sprintf(text, "a = ");
    memset(p, '(', depth);
    memset(p + depth, ')', depth);
    strcpy(p + 2 * depth, ";");
    expect_error(text, "t.cfg:1: ", "memory exhausted");
    free(text);
}

/* ---- numbers ----------------------------------------------------------- */

static void test_renew_ms_must_leave_time_for_two_renewals(void **state)
{
    (void)state;
    /* lease 30000 - margin 3000 = 27000: at most 13500 */
    load_ok("renew_ms = 13500;");
    dm_config_free(&cfg);
    expect_error("lease_ms = 30000;\nrenew_ms = 13501;", "t.cfg:2: ",
                 "renew_ms = 13501", "13500", "two renewals");
}

/* ---- redis ------------------------------------------------------------- */

static void test_password_and_password_env_exclude_each_other(void **state)
{
    (void)state;
    setenv("DMUTEX_TEST_PW", "x", 1);
    expect_error("redis = { password = \"a\";\n password_env = \"DMUTEX_TEST_PW\"; };", "t.cfg:2: ",
                 "redis.password", "password_env");
    unsetenv("DMUTEX_TEST_PW");
}

static void test_password_env_naming_an_unset_variable_is_an_error(void **state)
{
    (void)state;
    unsetenv("DMUTEX_TEST_UNSET");
    expect_error("redis = {\n password_env = \"DMUTEX_TEST_UNSET\"; };", "t.cfg:2: ",
                 "password_env", "DMUTEX_TEST_UNSET", "not set");
}

static void test_password_env_naming_an_empty_variable_is_an_error(void **state)
{
    (void)state;
    setenv("DMUTEX_TEST_PW", "", 1);
    expect_error("redis = { password_env = \"DMUTEX_TEST_PW\"; };", "t.cfg:1: ", "is empty");
    unsetenv("DMUTEX_TEST_PW");
}

static void test_unix_path_longer_than_sun_path_is_refused(void **state)
{
    (void)state;
    char text[400], path[200];
    memset(path, 'p', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = '\0';
    snprintf(text, sizeof text, "redis = { unix = \"%s\"; };", path);
    expect_error(text, "t.cfg:1: ", "redis.unix", "199 bytes", "107");
}

/* ---- mutex entries ------------------------------------------------------ */

static void test_name_longer_than_200_bytes_is_refused(void **state)
{
    (void)state;
    char text[400], name[DM_NAME_MAX + 2];
    memset(name, 'n', DM_NAME_MAX + 1);
    name[DM_NAME_MAX + 1] = '\0';
    snprintf(text, sizeof text, "mutexes = ( { symbol = \"s\"; name = \"%s\"; } );", name);
    expect_error(text, "t.cfg:1: ", "name = \"nnnn", "201 bytes", "200");
}

static void test_object_must_be_a_file_name_or_path(void **state)
{
    (void)state;
    load_ok("mutexes = ( { symbol = \"a\"; object = \"/usr/lib/liba.so\"; } );");
    assert_string_equal(cfg.mutexes[0].object, "/usr/lib/liba.so");
    dm_config_free(&cfg);
    expect_error("mutexes = ( { symbol = \"a\"; object = \"/usr/lib/\"; } );", "t.cfg:1: ",
                 "object", "not a file name");
    expect_error("mutexes = ( { symbol = \"a\"; object = \"lib a.so\"; } );", "t.cfg:1: ", "object", "space");
    expect_error("mutexes = ( { symbol = \"a\"; object = \"lib\\ta.so\"; } );", "t.cfg:1: ", "object", "0x09");
    expect_error("mutexes = ( { symbol = \"a\"; object = \"\"; } );", "t.cfg:1: ", "object", "empty");
    expect_error("mutexes = ( { symbol = \"a\"; object = \"..\"; } );", "t.cfg:1: ", "object", "not a file name");
}

static void test_programs_lists_executable_names(void **state)
{
    (void)state;
    load_ok("programs = [\"stock\", \"app\"];\n");
    assert_int_equal(cfg.nprograms, 2);
    assert_string_equal(cfg.programs[0], "stock");
    assert_string_equal(cfg.programs[1], "app");
}

static void test_object_longer_than_255_bytes_is_refused(void **state)
{
    (void)state;
    char text[600], obj[257];
    memset(obj, 'o', 256);
    obj[256] = '\0';
    snprintf(text, sizeof text, "mutexes = ( { symbol = \"a\"; object = \"%s\"; } );", obj);
    expect_error(text, "t.cfg:1: ", "object", "256 bytes", "255");
}

/* Each string key with a 10 kB value: a short message, not a crash, not a
 * value cut silently. */
static void test_ten_kilobyte_strings_give_a_clear_error(void **state)
{
    (void)state;
    static const char *const forms[] = {
        "namespace = \"%s\";",
        "redis = { host = \"%s\"; };",
        "redis = { unix = \"/%s\"; };",
        "redis = { username = \"%s\"; password = \"p\"; };",
        "redis = { password_env = \"%s\"; };",
        "mutexes = ( { symbol = \"%s\"; } );",
        "mutexes = ( { symbol = \"f.c:%s\"; } );",
        "mutexes = ( { init_site = \"%s\"; } );",
        "mutexes = ( { symbol = \"a\"; object = \"%s\"; } );",
        "mutexes = ( { symbol = \"a\"; name = \"%s\"; } );",
        "on_redis_down = \"%s\";",
        "%s = 1;",
    };
    size_t n = 10 * 1024;
    char *big = malloc(n + 1), *text = malloc(n + 100);
    assert_non_null(big);
    assert_non_null(text);
    memset(big, 'x', n);
    big[n] = '\0';
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        snprintf(text, n + 100, forms[i], big);
        expect_error(text, "t.cfg:1: ", "xxxx");
        if (i < sizeof forms / sizeof forms[0] - 2)
            assert_non_null(strstr(err, "bytes"));
    }
    free(big);
    free(text);
}

/* ---- the error buffer and ownership ------------------------------------ */

static void test_error_buffer_is_bounded_and_terminated(void **state)
{
    (void)state;
    char small[16];
    memset(small, 'Z', sizeof small);
    assert_int_equal(dm_config_load_string("lease_ms = -5;", "t.cfg", &cfg, small, sizeof small), -1);
    assert_int_equal(strlen(small), sizeof small - 1);
    assert_true(strncmp(small, "t.cfg:1: ", 9) == 0);
    assert_int_equal(dm_config_load_string("lease_ms = -5;", "t.cfg", &cfg, NULL, 0), -1);
}

static void test_failed_load_leaves_defaults_and_free_is_harmless(void **state)
{
    (void)state;
    assert_int_equal(dm_config_load_string(full_config, "t.cfg", &cfg, err, sizeof err), 0);
    dm_config_free(&cfg);
    assert_int_equal(dm_config_load_string("mutexes = ( { symbol = \"a\"; }, { symbol = \"1\"; } );",
                                           "t.cfg", &cfg, err, sizeof err), -1);
    assert_defaults(&cfg);
    assert_null(cfg.mutexes);
    dm_config_free(&cfg);
    dm_config_free(&cfg);
    assert_defaults(&cfg);
}

static void test_free_resets_to_defaults(void **state)
{
    (void)state;
    load_ok(full_config);
    dm_config_free(&cfg);
    assert_defaults(&cfg);
    assert_null(cfg.path);
    assert_int_equal(cfg.nmutexes, 0);
}

/* ---- DMUTEX_REDIS URLs -------------------------------------------------- */

static void url_ok(const char *url)
{
    err[0] = '\0';
    int rc = dm_config_set_redis_url(&cfg, url, err, sizeof err);
    if (rc)
        print_error("%s: %s\n", url, err);
    assert_int_equal(rc, 0);
}

static void url_bad(const char *url, const char *word)
{
    dm_config_defaults(&cfg);
    err[0] = '\0';
    int rc = dm_config_set_redis_url(&cfg, url, err, sizeof err);
    if (rc != -1 || !strstr(err, word)) {
        print_error("%s: expected an error with \"%s\", got rc %d \"%s\"\n", url, word, rc, err);
        fail();
    }
    assert_defaults(&cfg);      /* unchanged */
}

static void test_url_host_port_and_db(void **state)
{
    (void)state;
    dm_config_defaults(&cfg);
    url_ok("redis://10.1.2.3:6390/4");
    assert_string_equal(cfg.redis.host, "10.1.2.3");
    assert_int_equal(cfg.redis.port, 6390);
    assert_int_equal(cfg.redis.db, 4);
    assert_null(cfg.redis.unix_path);
    assert_null(cfg.redis.password);
}

static void test_url_host_alone_means_port_6379_db_0(void **state)
{
    (void)state;
    load_ok("redis = { host = \"a\"; port = 7000; db = 5; };");
    url_ok("redis://cache.local");
    assert_string_equal(cfg.redis.host, "cache.local");
    assert_int_equal(cfg.redis.port, 6379);
    assert_int_equal(cfg.redis.db, 0);
    url_ok("redis://cache.local:7001/");
    assert_int_equal(cfg.redis.port, 7001);
}

static void test_url_user_and_password(void **state)
{
    (void)state;
    dm_config_defaults(&cfg);
    url_ok("redis://app:pa:ss@h:1/2");
    assert_string_equal(cfg.redis.username, "app");
    assert_string_equal(cfg.redis.password, "pa:ss");
    assert_string_equal(cfg.redis.host, "h");
}

static void test_url_password_only(void **state)
{
    (void)state;
    dm_config_defaults(&cfg);
    url_ok("redis://:secret@h");
    assert_null(cfg.redis.username);
    assert_string_equal(cfg.redis.password, "secret");
    url_ok("redis://secret2@h");
    assert_null(cfg.redis.username);
    assert_string_equal(cfg.redis.password, "secret2");
}

static void test_url_credentials_are_percent_decoded(void **state)
{
    (void)state;
    dm_config_defaults(&cfg);
    url_ok("redis://us%40er:p%2Fw%3a@h");
    assert_string_equal(cfg.redis.username, "us@er");
    assert_string_equal(cfg.redis.password, "p/w:");
}

static void test_url_without_credentials_keeps_the_files(void **state)
{
    (void)state;
    setenv("DMUTEX_TEST_PW", "fromenv", 1);
    load_ok("redis = { username = \"u\"; password_env = \"DMUTEX_TEST_PW\"; };");
    unsetenv("DMUTEX_TEST_PW");
    url_ok("redis://other:6400");
    assert_string_equal(cfg.redis.username, "u");
    assert_string_equal(cfg.redis.password, "fromenv");
    assert_string_equal(cfg.redis.host, "other");
}

static void test_url_ipv6_host_in_brackets(void **state)
{
    (void)state;
    dm_config_defaults(&cfg);
    url_ok("redis://[::1]:6381/1");
    assert_string_equal(cfg.redis.host, "::1");
    assert_int_equal(cfg.redis.port, 6381);
    assert_int_equal(cfg.redis.db, 1);
}

static void test_url_unix_socket_with_and_without_db(void **state)
{
    (void)state;
    load_ok("redis = { host = \"a\"; db = 3; };");
    url_ok("unix:///run/redis.sock");
    assert_null(cfg.redis.host);
    assert_string_equal(cfg.redis.unix_path, "/run/redis.sock");
    assert_int_equal(cfg.redis.db, 0);
    url_ok("unix:///tmp/r.sock?db=7");
    assert_string_equal(cfg.redis.unix_path, "/tmp/r.sock");
    assert_int_equal(cfg.redis.db, 7);
    url_ok("redis://back:1");
    assert_null(cfg.redis.unix_path);
    assert_string_equal(cfg.redis.host, "back");
}

static void test_url_scheme_is_case_insensitive(void **state)
{
    (void)state;
    dm_config_defaults(&cfg);
    url_ok("REDIS://h:2");
    assert_string_equal(cfg.redis.host, "h");
}

/* rediss:// is redis:// with TLS on; the files come from DMUTEX_TLS_*,
 * else stay the config's. */
static void test_url_rediss_turns_tls_on_with_files_from_the_environment(void **state)
{
    (void)state;
    unsetenv("DMUTEX_TLS_CA");
    unsetenv("DMUTEX_TLS_CERT");
    unsetenv("DMUTEX_TLS_KEY");
    load_ok("redis = { tls = { ca = \"/etc/file-ca.pem\"; }; };\nmutexes = ();\n");
    url_ok("rediss://app:pw@h:6380/2");
    assert_int_equal(cfg.redis.tls.enabled, 1);
    assert_string_equal(cfg.redis.host, "h");
    assert_int_equal(cfg.redis.port, 6380);
    assert_int_equal(cfg.redis.db, 2);
    assert_string_equal(cfg.redis.password, "pw");
    assert_string_equal(cfg.redis.tls.ca, "/etc/file-ca.pem");
    assert_null(cfg.redis.tls.cert);
    setenv("DMUTEX_TLS_CA", "/env/ca.pem", 1);
    setenv("DMUTEX_TLS_CERT", "/env/client.pem", 1);
    setenv("DMUTEX_TLS_KEY", "/env/client.key", 1);
    url_ok("REDISS://h");
    assert_int_equal(cfg.redis.port, 6379);
    assert_string_equal(cfg.redis.tls.ca, "/env/ca.pem");
    assert_string_equal(cfg.redis.tls.cert, "/env/client.pem");
    assert_string_equal(cfg.redis.tls.key, "/env/client.key");
    unsetenv("DMUTEX_TLS_CA");
    unsetenv("DMUTEX_TLS_CERT");
    unsetenv("DMUTEX_TLS_KEY");
    dm_config_free(&cfg);
}

/* A plain URL (redis://, unix://, redis-sentinel://) over a config whose
 * redis.tls group asks for TLS is an error naming both, and leaves the
 * config as it was: before, DMUTEX_REDIS=redis://... silently turned TLS
 * off, and a systems library must not downgrade to plain text because of
 * an environment variable. */
static void test_plain_url_over_a_tls_config_is_an_error_naming_both(void **state)
{
    (void)state;
    static const char *const plain[] = { "redis://app:s3cretPW@h:6380/2", "unix:///run/r.sock",
                                         "redis-sentinel://s1:26379,s2:26379/mymaster" };
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        load_ok("mutexes = ();\n"
                "redis = { host = \"tls.internal\";\n"
                "          tls = { ca = \"/etc/ca.pem\"; }; };\n");
        err[0] = '\0';
        if (dm_config_set_redis_url(&cfg, plain[i], err, sizeof err) != -1)
            fail_msg("%s over a config with redis.tls was accepted", plain[i]);
        /* The file and the line of the redis.tls group, as every config
         * error names them: the user must find what contradicts the URL. */
        if (strncmp(err, "t.cfg:3: ", 9) != 0)
            fail_msg("\"%s\" does not start with the config's FILE:LINE \"t.cfg:3: \"", err);
        const char *words[] = { "redis.tls", "plain text",
                                i == 2 ? "rediss-sentinel://" : i == 1 ? "unix" : "rediss://" };
        for (size_t w = 0; w < 3; w++)
            if (!strstr(err, words[w]))
                fail_msg("\"%s\" does not say \"%s\"", err, words[w]);
        if (strstr(err, "s3cretPW"))
            fail_msg("the password shows: %s", err);
        assert_int_equal(cfg.redis.tls.enabled, 1);
        assert_string_equal(cfg.redis.host, "tls.internal");
        assert_int_equal(cfg.redis.nsentinels, 0);
        dm_config_free(&cfg);
    }
}

/* redis.tls: present means TLS, verify on by default; its rules. */
static void test_redis_tls_group_and_its_rules(void **state)
{
    (void)state;
    load_ok("mutexes = ();\n");
    assert_int_equal(cfg.redis.tls.enabled, 0);
    assert_int_equal(cfg.redis.tls.verify, 1);
    dm_config_free(&cfg);
    load_ok("redis = { tls = {}; };\nmutexes = ();\n");
    assert_int_equal(cfg.redis.tls.enabled, 1);
    assert_int_equal(cfg.redis.tls.verify, 1);
    assert_null(cfg.redis.tls.ca);
    dm_config_free(&cfg);
    load_ok("redis = { host = \"r.internal\"; tls = { ca = \"/a/ca.pem\"; cert = \"/a/c.pem\";\n"
            "  key = \"/a/c.key\"; server_name = \"redis.internal\"; verify = false; }; };\n"
            "mutexes = ();\n");
    assert_int_equal(cfg.redis.tls.enabled, 1);
    assert_int_equal(cfg.redis.tls.verify, 0);
    assert_string_equal(cfg.redis.tls.ca, "/a/ca.pem");
    assert_string_equal(cfg.redis.tls.cert, "/a/c.pem");
    assert_string_equal(cfg.redis.tls.key, "/a/c.key");
    assert_string_equal(cfg.redis.tls.server_name, "redis.internal");
    dm_config_free(&cfg);
    expect_error("redis = {\n tls = { cafile = \"x\"; }; };\nmutexes = ();\n", "t.cfg:2: ",
                 "unknown key \"cafile\" in the redis.tls group", "valid keys: ca, cert, key");
    expect_error("redis = { tls = {\n key = \"k\"; }; };\nmutexes = ();\n", "t.cfg:2: ",
                 "redis.tls.key needs redis.tls.cert");
    expect_error("redis = { unix = \"/r.sock\";\n tls = {}; };\nmutexes = ();\n", "t.cfg:2: ",
                 "redis.tls has no meaning with redis.unix");
    expect_error("redis = { tls = {\n verify = 1; }; };\nmutexes = ();\n", "t.cfg:2: ",
                 "redis.tls.verify must be true or false");
    expect_error("redis = {\n tls = true; };\nmutexes = ();\n", "t.cfg:2: ",
                 "redis.tls must be a group");
    expect_error("redis = { tls = {\n server_name = \"a b\"; }; };\nmutexes = ();\n",
                 "t.cfg:2: ", "redis.tls.server_name", "not allowed");
}

/* metrics = { file; interval_ms; }: read, and DMUTEX_METRICS's path by
 * the rules of metrics.file (its refusals are rows of refusals[]). */
static void test_metrics_group_and_its_rules(void **state)
{
    (void)state;
    load_ok("mutexes = ();\n");
    assert_null(cfg.metrics.file);
    assert_int_equal(cfg.metrics.interval_ms, DM_METRICS_INTERVAL_MS);
    dm_config_free(&cfg);
    load_ok("metrics = { file = \"/run/app/dmutex-%p.prom\"; interval_ms = 250; };\n"
            "mutexes = ();\n");
    assert_string_equal(cfg.metrics.file, "/run/app/dmutex-%p.prom");
    assert_int_equal(cfg.metrics.interval_ms, 250);
    assert_int_equal(dm_config_set_metrics_file(&cfg, "/tmp/m.prom", err, sizeof err), 0);
    assert_string_equal(cfg.metrics.file, "/tmp/m.prom");
    assert_int_equal(dm_config_set_metrics_file(&cfg, "m.prom", err, sizeof err), -1);
    assert_non_null(strstr(err, "must be an absolute path"));
    assert_int_equal(dm_config_set_metrics_file(&cfg, "/tmp/m-%d.prom", err, sizeof err), -1);
    assert_non_null(strstr(err, "the only % sequence is %p"));
    assert_string_equal(cfg.metrics.file, "/tmp/m.prom");
    dm_config_free(&cfg);
}

/* ---- Sentinel and replica acknowledgements ------------------------------ */

static void test_sentinel_keys_load_with_default_port_and_credentials(void **state)
{
    (void)state;
    setenv("DM_TEST_SENTINEL_PW", "sentinel-secret", 1);
    load_ok("redis = { sentinels = ( \"10.0.0.1:26380\", \"s2\", \"[::1]:26381\" );\n"
            "  master = \"mymaster\"; sentinel_username = \"watch\";\n"
            "  sentinel_password_env = \"DM_TEST_SENTINEL_PW\"; password = \"data\"; db = 2; };\n"
            "min_replicas = 1; replica_timeout_ms = 400;");
    assert_int_equal(cfg.redis.nsentinels, 3);
    assert_string_equal(cfg.redis.sentinels[0].host, "10.0.0.1");
    assert_int_equal(cfg.redis.sentinels[0].port, 26380);
    assert_string_equal(cfg.redis.sentinels[1].host, "s2");
    assert_int_equal(cfg.redis.sentinels[1].port, 26379);
    assert_string_equal(cfg.redis.sentinels[2].host, "::1");
    assert_int_equal(cfg.redis.sentinels[2].port, 26381);
    assert_string_equal(cfg.redis.master, "mymaster");
    assert_string_equal(cfg.redis.sentinel_username, "watch");
    assert_string_equal(cfg.redis.sentinel_password, "sentinel-secret");
    assert_string_equal(cfg.redis.password, "data");
    assert_int_equal(cfg.redis.db, 2);
    assert_int_equal(cfg.min_replicas, 1);
    assert_int_equal(cfg.replica_timeout_ms, 400);
    unsetenv("DM_TEST_SENTINEL_PW");
}

static void test_min_replicas_defaults_to_0_and_its_timeout_to_at_most_renew_ms(void **state)
{
    (void)state;
    load_ok("mutexes = ();");
    assert_int_equal(cfg.min_replicas, 0);
    assert_int_equal(cfg.replica_timeout_ms, DM_REPLICA_TIMEOUT_MS);
    assert_int_equal(cfg.redis.nsentinels, 0);
    assert_null(cfg.redis.master);
    dm_config_free(&cfg);
    load_ok("lease_ms = 2000; min_replicas = 1;");
    assert_int_equal(cfg.replica_timeout_ms, 666);
}

static void test_sentinel_config_errors_name_the_key_and_line(void **state)
{
    (void)state;
    expect_error_words("redis = {\n sentinels = ( \"a:1\" ); host = \"h\"; master = \"m\"; };",
                       "t.cfg:2: ", "sentinels", "host", "exclude", NULL);
    expect_error_words("redis = {\n port = 7000;\n sentinels = ( \"a:1\" ); master = \"m\"; };",
                       "t.cfg:3: ", "sentinels", "port", "exclude", NULL);
    expect_error_words("redis = {\n sentinels = ( \"a:1\" ); };", "t.cfg:2: ", "needs redis.master",
                       NULL);
    expect_error_words("redis = {\n master = \"m\"; };", "t.cfg:2: ", "redis.master",
                       "without redis.sentinels", NULL);
    expect_error_words("redis = { master = \"m\";\n sentinels = ( \"a:0\" ); };", "t.cfg:2: ",
                       "sentinels[0]", "port", NULL);
    expect_error_words("redis = { master = \"m\";\n sentinels = ( \"::1\" ); };", "t.cfg:2: ",
                       "sentinels[0]", "brackets", NULL);
    expect_error_words("redis = { master = \"m\";\n sentinels = ( 26379 ); };", "t.cfg:2: ",
                       "sentinels[0]", "string", NULL);
    expect_error_words("redis = { master = \"m\";\n sentinels = (); };", "t.cfg:2: ",
                       "1 to 16", NULL);
    expect_error_words("redis = { master = \"m\"; sentinels = ( \"a\" );\n "
                       "sentinel_username = \"u\"; };", "t.cfg:2: ", "sentinel_username",
                       "sentinel_password", NULL);
    expect_error_words("redis = { master = \"m\"; sentinels = ( \"a\" );\n "
                       "sentinel_password_env = \"DM_TEST_UNSET_PW\"; };", "t.cfg:2: ",
                       "DM_TEST_UNSET_PW", "not set", NULL);
    expect_error_words("lease_ms = 2000; min_replicas = 1;\nreplica_timeout_ms = 700;", "t.cfg:2: ",
                       "replica_timeout_ms = 700", "renew_ms = 666", NULL);
    expect_error_words("min_replicas = -1;", "t.cfg:1: ", "min_replicas", NULL);
}

static void test_url_sentinel_names_sentinels_master_db_and_credentials(void **state)
{
    (void)state;
    load_ok("redis = { host = \"a\"; port = 7000; password = \"file\"; };");
    url_ok("redis-sentinel://app:p%40ss@10.0.0.1:26380,10.0.0.2,[::1]:1/mymaster/3");
    assert_int_equal(cfg.redis.nsentinels, 3);
    assert_string_equal(cfg.redis.sentinels[0].host, "10.0.0.1");
    assert_int_equal(cfg.redis.sentinels[0].port, 26380);
    assert_int_equal(cfg.redis.sentinels[1].port, 26379);
    assert_string_equal(cfg.redis.sentinels[2].host, "::1");
    assert_string_equal(cfg.redis.master, "mymaster");
    assert_int_equal(cfg.redis.db, 3);
    assert_string_equal(cfg.redis.username, "app");
    assert_string_equal(cfg.redis.password, "p@ss");
    /* A plain URL afterwards names one node again: no sentinels left. */
    url_ok("redis://h:1");
    assert_int_equal(cfg.redis.nsentinels, 0);
    assert_null(cfg.redis.master);
    char shown[256];
    dm_config_redact_url("redis-sentinel://app:secret@h1:1,h2:2/m", shown, sizeof shown);
    assert_string_equal(shown, "redis-sentinel://app:***@h1:1,h2:2/m");
}

/* rediss-sentinel:// is redis-sentinel:// with TLS on (to the sentinels
 * and the data nodes): the files from DMUTEX_TLS_*, else the config's;
 * the config's TLS group is kept, so its verify and server_name apply. */
static void test_url_rediss_sentinel_turns_tls_on_for_sentinels_and_nodes(void **state)
{
    (void)state;
    unsetenv("DMUTEX_TLS_CA");
    unsetenv("DMUTEX_TLS_CERT");
    unsetenv("DMUTEX_TLS_KEY");
    load_ok("redis = { host = \"a\"; };");
    url_ok("rediss-sentinel://app:pw@s1:26380,s2/mymaster/1");
    assert_int_equal(cfg.redis.tls.enabled, 1);
    assert_int_equal(cfg.redis.tls.verify, 1);
    assert_int_equal(cfg.redis.nsentinels, 2);
    assert_string_equal(cfg.redis.sentinels[0].host, "s1");
    assert_int_equal(cfg.redis.sentinels[1].port, 26379);
    assert_string_equal(cfg.redis.master, "mymaster");
    assert_int_equal(cfg.redis.db, 1);
    assert_null(cfg.redis.tls.ca);
    dm_config_free(&cfg);
    load_ok("redis = { tls = { ca = \"/file/ca.pem\"; server_name = \"sentinels.internal\"; }; };");
    setenv("DMUTEX_TLS_CERT", "/env/client.pem", 1);
    url_ok("REDISS-SENTINEL://s1/m");
    assert_string_equal(cfg.redis.tls.ca, "/file/ca.pem");
    assert_string_equal(cfg.redis.tls.cert, "/env/client.pem");
    assert_string_equal(cfg.redis.tls.server_name, "sentinels.internal");
    unsetenv("DMUTEX_TLS_CERT");
    char shown[256];
    dm_config_redact_url("rediss-sentinel://app:secret@h1:1/m", shown, sizeof shown);
    assert_string_equal(shown, "rediss-sentinel://app:***@h1:1/m");
    dm_config_free(&cfg);
}

static void test_url_sentinel_bad_ones_say_what_is_wrong(void **state)
{
    (void)state;
    url_bad("redis-sentinel://h:26379", "master");
    url_bad("redis-sentinel://h:26379/", "master");
    url_bad("redis-sentinel://h:26379//1", "master");
    url_bad("redis-sentinel://h:0/m", "port");
    url_bad("redis-sentinel://h1,,h2/m", "sentinel 2");
    url_bad("redis-sentinel:///m", "sentinel 1");
    url_bad("redis-sentinel://h/m/x", "database number");
    url_bad("redis-sentinel://u:@h/m", "empty password");
}

/* ---- Redis Cluster ------------------------------------------------------ */

static void test_cluster_keys_load_seeds_with_default_port_and_credentials(void **state)
{
    (void)state;
    load_ok("redis = { cluster = ( \"10.0.0.1:7000\", \"n2\", \"[::1]:7001\" );\n"
            "  username = \"app\"; password = \"data\"; tls = {}; };");
    assert_int_equal(cfg.redis.ncluster, 3);
    assert_string_equal(cfg.redis.cluster[0].host, "10.0.0.1");
    assert_int_equal(cfg.redis.cluster[0].port, 7000);
    assert_string_equal(cfg.redis.cluster[1].host, "n2");
    assert_int_equal(cfg.redis.cluster[1].port, 6379);
    assert_string_equal(cfg.redis.cluster[2].host, "::1");
    assert_int_equal(cfg.redis.cluster[2].port, 7001);
    assert_string_equal(cfg.redis.username, "app");
    assert_string_equal(cfg.redis.password, "data");
    assert_int_equal(cfg.redis.tls.enabled, 1);
    assert_int_equal(cfg.redis.db, 0);
}

static void test_url_cluster_names_seeds_and_credentials(void **state)
{
    (void)state;
    load_ok("redis = { host = \"a\"; port = 7000; db = 4; password = \"file\"; };");
    url_ok("redis-cluster://app:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002");
    assert_int_equal(cfg.redis.ncluster, 3);
    assert_string_equal(cfg.redis.cluster[0].host, "10.0.0.1");
    assert_int_equal(cfg.redis.cluster[0].port, 7000);
    assert_int_equal(cfg.redis.cluster[1].port, 6379);
    assert_string_equal(cfg.redis.cluster[2].host, "::1");
    assert_int_equal(cfg.redis.db, 0);
    assert_string_equal(cfg.redis.username, "app");
    assert_string_equal(cfg.redis.password, "p@ss");
    /* A sentinel URL, then a plain one, each leave no cluster behind. */
    url_ok("redis-sentinel://s1/m");
    assert_int_equal(cfg.redis.ncluster, 0);
    url_ok("redis-cluster://n1:1/");
    assert_int_equal(cfg.redis.ncluster, 1);
    assert_int_equal(cfg.redis.nsentinels, 0);
    url_ok("redis://h:1");
    assert_int_equal(cfg.redis.ncluster, 0);
    char shown[256];
    dm_config_redact_url("redis-cluster://app:secret@h1:1,h2:2", shown, sizeof shown);
    assert_string_equal(shown, "redis-cluster://app:***@h1:1,h2:2");
}

static void test_url_cluster_bad_ones_say_what_is_wrong(void **state)
{
    (void)state;
    url_bad("redis-cluster://", "node 1");
    url_bad("redis-cluster://h:0", "port");
    url_bad("redis-cluster://h1,,h2", "node 2");
    url_bad("redis-cluster://h:7000/1", "database 0 only");
    url_bad("redis-cluster://h?x=1", "no path or query");
    url_bad("redis-cluster://u:@h", "empty password");
}

static void test_on_store_down_is_on_redis_down_under_its_store_neutral_name(void **state)
{
    (void)state;
    load_ok("on_store_down = \"error\";\nmutexes = ();\n");
    assert_int_equal(cfg.on_redis_down, DM_DOWN_ERROR);
    dm_config_free(&cfg);
    load_ok("on_redis_down = \"local\";\nmutexes = ();\n");
    assert_int_equal(cfg.on_redis_down, DM_DOWN_LOCAL);
    dm_config_free(&cfg);
    expect_error("on_redis_down = \"error\";\non_store_down = \"block\";\n", "t.cfg:2: ",
                 "on_store_down (line 2) and on_redis_down (line 1) are one setting");
}

static void test_etcd_group_selects_etcd_with_its_members_and_timeouts(void **state)
{
    (void)state;
    load_ok("etcd = { endpoints = ( \"http://10.0.0.1:2379\", \"10.0.0.2\", \"http://[::1]:32379/\" );\n"
            "  command_timeout_ms = 700; };\nmutexes = ();\n");
    assert_int_equal(cfg.etcd.nendpoints, 3);
    assert_string_equal(cfg.etcd.endpoints[0].host, "10.0.0.1");
    assert_int_equal(cfg.etcd.endpoints[0].port, 2379);
    assert_string_equal(cfg.etcd.endpoints[1].host, "10.0.0.2");
    assert_int_equal(cfg.etcd.endpoints[1].port, 2379);
    assert_string_equal(cfg.etcd.endpoints[2].host, "::1");
    assert_int_equal(cfg.etcd.endpoints[2].port, 32379);
    assert_int_equal(cfg.redis.command_timeout_ms, 700);
}

static void test_etcd_group_errors_name_the_cause(void **state)
{
    (void)state;
    expect_error("redis = { host = \"h\"; };\netcd = { endpoints = ( \"http://a:1\" ); };\n",
                 "t.cfg:2: ", "etcd (line 2) and redis (line 1) exclude each other");
    expect_error("etcd = { };\n", "t.cfg:1: ", "etcd.endpoints must name 1 to 16 members");
    expect_error("etcd = { endpoints = ( \"redis://a:1\" ); };\n", "t.cfg:1: ",
                 "starts with http://");
    expect_error("etcd = { endpoints = ( 5 ); };\n", "t.cfg:1: ", "must be a string");
    expect_error("etcd = { endpoints = ( \"a:1\" ); port = 3; };\n", "t.cfg:1: ",
                 "unknown key", "port");
    expect_error("etcd = { endpoints = ( \"a:1\" ); username = \"u\"; };\n", "t.cfg:1: ",
                 "etcd.username needs etcd.password or etcd.password_env");
    expect_error("etcd = { endpoints = ( \"a:1\" ); password = \"p\"; };\n", "t.cfg:1: ",
                 "etcd.password needs etcd.username");
    expect_error("etcd = { endpoints = ( \"a:1\" ); username = \"u\"; password_env = \"DM_NOT_SET_X\"; };\n",
                 "t.cfg:1: ", "environment variable DM_NOT_SET_X is not set");
    load_ok("etcd = { endpoints = ( \"a:1\" ); username = \"u\"; password = \"p\"; };\nmutexes = ();\n");
    assert_string_equal(cfg.etcd.username, "u");
    assert_string_equal(cfg.etcd.password, "p");
    dm_config_free(&cfg);
}

/* ---- etcd over TLS (etcd.tls, https:// endpoints, etcds://) ---- */

static void test_etcd_tls_https_endpoints_and_etcds_urls_and_their_errors(void **state)
{
    (void)state;
    /* https:// alone: TLS with the system's CAs, verified */
    load_ok("etcd = { endpoints = ( \"https://a:1\", \"https://b\" ); };\nmutexes = ();\n");
    assert_int_equal(cfg.etcd.tls.enabled, 1);
    assert_null(cfg.etcd.tls.ca);
    assert_int_equal(cfg.etcd.tls.verify, 1);
    assert_int_equal(cfg.etcd.endpoints[1].port, 2379);
    dm_config_free(&cfg);
    /* a tls group: its keys, as redis.tls's; bare host:port follows it */
    load_ok("etcd = { endpoints = ( \"a:1\" );\n tls = { ca = \"/c/ca.pem\"; cert = \"/c/c.pem\"; "
            "key = \"/c/k.pem\"; server_name = \"etcd.example\"; }; };\nmutexes = ();\n");
    assert_int_equal(cfg.etcd.tls.enabled, 1);
    assert_int_equal(cfg.etcd.tls.line, 2);
    assert_string_equal(cfg.etcd.tls.ca, "/c/ca.pem");
    assert_string_equal(cfg.etcd.tls.server_name, "etcd.example");
    assert_int_equal(cfg.redis.tls.enabled, 0);
    dm_config_free(&cfg);
    load_ok("etcd = { endpoints = ( \"http://a:1\" ); };\nmutexes = ();\n");
    assert_int_equal(cfg.etcd.tls.enabled, 0);
    dm_config_free(&cfg);
    expect_error("etcd = { endpoints = ( \"https://a:1\",\n \"http://b:2\" ); };\n", "t.cfg:2: ",
                 "etcd.endpoints[1]", "plain (http://)", "etcd.endpoints[0] is https://",
                 "https:// for all");
    expect_error("etcd = { endpoints = ( \"http://a:1\" );\n tls = { ca = \"/c/ca.pem\"; }; };\n",
                 "t.cfg:2: ", "etcd.tls asks for TLS", "etcd.endpoints[0] is http://",
                 "https://host:port");
    expect_error("etcd = { endpoints = ( \"a:1\" );\n tls = { key = \"/k\"; }; };\n", "t.cfg:2: ",
                 "etcd.tls.key needs etcd.tls.cert");
    expect_error("etcd = { endpoints = ( \"a:1\" );\n tls = { cafile = \"/k\"; }; };\n",
                 "t.cfg:2: ", "in the etcd.tls group", "ca");
    expect_error("etcd = { endpoints = ( \"a:1\" ); tls = 1; };\n", "t.cfg:1: ",
                 "etcd.tls must be a group");
    /* etcds://: TLS, the files from DMUTEX_TLS_*; etcd:// over a TLS
     * config is refused, naming the tls group's line */
    dm_config_defaults(&cfg);
    setenv("DMUTEX_TLS_CA", "/env/ca.pem", 1);
    assert_int_equal(dm_config_set_redis_url(&cfg, "etcds://a:1,b:2", err, sizeof err), 0);
    unsetenv("DMUTEX_TLS_CA");
    assert_int_equal(cfg.etcd.nendpoints, 2);
    assert_int_equal(cfg.etcd.tls.enabled, 1);
    assert_string_equal(cfg.etcd.tls.ca, "/env/ca.pem");
    dm_config_free(&cfg);
    url_bad("etcds://", "names no member (etcds://");
    load_ok("etcd = { endpoints = ( \"a:1\" );\n tls = { ca = \"/c/ca.pem\"; }; };\nmutexes = ();\n");
    err[0] = '\0';
    assert_int_equal(dm_config_set_redis_url(&cfg, "etcd://a:1", err, sizeof err), -1);
    assert_non_null(strstr(err, "t.cfg:2: "));
    assert_non_null(strstr(err, "is plain text, but the config asks for TLS"));
    assert_non_null(strstr(err, "use etcds://"));
    assert_int_equal(dm_config_set_redis_url(&cfg, "etcds://c:3", err, sizeof err), 0);
    assert_string_equal(cfg.etcd.tls.ca, "/c/ca.pem");     /* the group's, kept */
    assert_string_equal(cfg.etcd.endpoints[0].host, "c");
    dm_config_free(&cfg);
}

static void test_etcd_url_names_the_members_and_a_redis_url_goes_back(void **state)
{
    (void)state;
    dm_config_defaults(&cfg);
    assert_int_equal(dm_config_set_redis_url(&cfg, "etcd://a:1,b,[::1]:3", err, sizeof err), 0);
    assert_int_equal(cfg.etcd.nendpoints, 3);
    assert_string_equal(cfg.etcd.endpoints[1].host, "b");
    assert_int_equal(cfg.etcd.endpoints[1].port, 2379);
    assert_string_equal(cfg.etcd.endpoints[2].host, "::1");
    assert_int_equal(dm_config_set_redis_url(&cfg, "redis://h:7", err, sizeof err), 0);
    assert_int_equal(cfg.etcd.nendpoints, 0);
    assert_int_equal(cfg.redis.port, 7);
    url_bad("etcd://", "names no member");
    url_bad("etcd://a:1/x", "has a path");
    url_bad("etcd://a:99999", "etcd URL");
}

static void test_url_bad_ones_say_what_is_wrong(void **state)
{
    (void)state;
    url_bad("", "empty");
    url_bad("127.0.0.1:6379", "must start with one of redis:// rediss:// unix:// redis-sentinel:// "
                              "rediss-sentinel:// redis-cluster:// etcd://");
    url_bad("http://h", "unknown scheme \"http\"");
    url_bad("redis://", "host");
    url_bad("redis://:6379", "host");
    url_bad("redis://h:0", "port");
    url_bad("redis://h:65536", "port");
    url_bad("redis://h:abc", "port");
    url_bad("redis://h:", "port");
    url_bad("redis://h/abc", "database number");
    url_bad("redis://h/1000001", "database number");
    url_bad("redis://h/1/2", "database number");
    url_bad("redis://h?x=1", "unexpected");
    url_bad("redis://u:@h", "empty password");
    url_bad("redis://u:%zz@h", "%-escape");
    url_bad("redis://u:%00@h", "%-escape");
    url_bad("redis://[::1", "host");
    url_bad("redis://[::1]x", "host");
    url_bad("redis://h h", "host");
    url_bad("unix://", "absolute socket path");
    url_bad("unix://run/redis.sock", "absolute socket path");
    url_bad("unix:///s?db=x", "?db=N");
    url_bad("unix:///s?foo=1", "?db=N");
}

static void test_url_unix_path_longer_than_sun_path_is_refused(void **state)
{
    (void)state;
    char url[300] = "unix:///";
    memset(url + 8, 'p', 200);
    url[208] = '\0';
    url_bad(url, "bytes");
}

/* ---- configs refused ----------------------------------------------------
 * One row a config that must not load: the test it belongs to, the text,
 * the start of the error ("file:line: ") and words the message must hold.
 * Each test named here runs its rows in order (test_refused); main lists
 * the names with R(). */
struct refusal {
    const char *test;
    const char *text, *prefix;
    const char *words[4];
};

static const struct refusal refusals[] = {
    /* Redis Cluster */
    { "test_cluster_config_errors_name_the_key_and_line",
      "redis = {\n cluster = ( \"a:1\" ); host = \"h\"; };", "t.cfg:2: ",
      { "redis.cluster", "redis.host", "exclude" } },
    { "test_cluster_config_errors_name_the_key_and_line",
      "redis = { port = 7000;\n cluster = ( \"a:1\" ); };", "t.cfg:2: ",
      { "redis.cluster", "redis.port", "exclude" } },
    { "test_cluster_config_errors_name_the_key_and_line",
      "redis = { unix = \"/s\";\n cluster = ( \"a:1\" ); };", "t.cfg:2: ",
      { "redis.cluster", "redis.unix", "exclude" } },
    { "test_cluster_config_errors_name_the_key_and_line",
      "redis = { sentinels = ( \"s\" ); master = \"m\";\n cluster = ( \"a:1\" ); };",
      "t.cfg:2: ", { "redis.cluster", "redis.sentinels", "exclude" } },
    { "test_cluster_config_errors_name_the_key_and_line",
      "redis = { cluster = ( \"a:1\" );\n db = 2; };", "t.cfg:2: ",
      { "redis.db = 2", "database 0 only" } },
    { "test_cluster_config_errors_name_the_key_and_line",
      "redis = {\n cluster = (); };", "t.cfg:2: ", { "1 to 16" } },
    { "test_cluster_config_errors_name_the_key_and_line",
      "redis = {\n cluster = ( 7000 ); };", "t.cfg:2: ", { "cluster[0]", "string" } },
    { "test_cluster_config_errors_name_the_key_and_line",
      "redis = {\n cluster = ( \"a:99999\" ); };", "t.cfg:2: ", { "cluster[0]", "port" } },
    /* syntax and structure */
    { "test_syntax_error_names_label_and_line",
      "lease_ms = 1000;\nredis = { port = 1 \n", "t.cfg:",
      { "syntax error" } },
    { "test_syntax_error_names_label_and_line",
      "lease_ms = 1000;\nmutexes = ( { symbol = \"a\" } } );\n", "t.cfg:2: ",
      { "syntax error", "not valid libconfig syntax" } },
    { "test_unterminated_string_names_the_line_it_starts_on",
      "lease_ms = 1000;\nnamespace = \"abc;\nlease_ms = 2;\n", "t.cfg:2: ",
      { "string", "never closed" } },
    { "test_unterminated_string_names_the_line_it_starts_on",
      "namespace = \"abc\\", "t.cfg:1: ",
      { "never closed" } },
    { "test_unterminated_comment_names_the_line_it_starts_on",
      "lease_ms = 1000;\n/* note\nlease_ms = 2;\n", "t.cfg:2: ",
      { "comment", "never closed" } },
    { "test_duplicate_key_is_an_error_with_its_line",
      "lease_ms = 1000;\nlease_ms = 2000;\n", "t.cfg:2: ",
      { "duplicate" } },
    { "test_unknown_top_level_key_names_key_and_line",
      "lease_ms = 1000;\n\nleese_ms = 5;\n", "t.cfg:3: ",
      { "unknown key \"leese_ms\"",
        "top level",
        "did you mean lease_ms",
        "valid keys: redis, namespace, lease_ms" } },
    { "test_unknown_redis_key_lists_valid_keys",
      "redis = {\n  host = \"h\";\n  hostname = \"h\";\n};\n", "t.cfg:3: ",
      { "\"hostname\"", "redis", "host, port, unix, username, password, password_env, db" } },
    { "test_unknown_mutex_key_names_key_and_line",
      "mutexes = (\n { symbol = \"a\"; },\n { symbol = \"b\";\n   nmae = \"x\"; }\n);\n", "t.cfg:4: ",
      { "unknown key \"nmae\"",
        "mutex entry",
        "did you mean name",
        "symbol, object, name, offset, index, init_site, required, fair, cache, protocol" } },
    { "test_redis_must_be_a_group",
      "redis = \"127.0.0.1:6379\";", "t.cfg:1: ",
      { "redis must be a group", "string" } },
    { "test_mutexes_must_be_a_list",
      "mutexes = { symbol = \"a\"; };", "t.cfg:1: ",
      { "mutexes must be a list" } },
    { "test_mutexes_must_be_a_list",
      "mutexes = \"a\";", "t.cfg:1: ",
      { "mutexes must be a list" } },
    /* libconfig dates a scalar by the token after it: keep ")" on its line */
    { "test_mutex_entry_must_be_a_group",
      "mutexes = (\n { symbol = \"a\"; },\n \"b\" );", "t.cfg:3: ",
      { "must be a group" } },
    { "test_mutex_entry_must_be_a_group",
      "mutexes = [ \"a\" ];", "t.cfg:1: ",
      { "must be a group" } },
    { "test_include_is_refused",
      "lease_ms = 1000;\n  @include \"/etc/passwd\"\n", "t.cfg:2: ",
      { "@include" } },
    { "test_nul_escape_in_a_string_is_refused",
      "lease_ms = 1000;\nnamespace = \"ab\\x00cd\";\n", "t.cfg:2: ",
      { "NUL" } },
    { "test_deep_nesting_inside_a_known_key_is_refused",
      "mutexes = ( ( ( { symbol = \"a\"; } ) ) );", "t.cfg:1: ",
      { "must be a group" } },
    { "test_deep_nesting_inside_a_known_key_is_refused",
      "redis = { host = { a = { b = 1; }; }; };", "t.cfg:1: ",
      { "redis.host must be a string" } },

    /* types */
    { "test_port_as_string_must_be_an_integer",
      "redis = {\n port = \"6379\"; };", "t.cfg:2: ",
      { "port must be an integer", "string" } },
    { "test_float_for_an_integer_key_is_refused",
      "lease_ms = 1e4;", "t.cfg:1: ",
      { "lease_ms must be an integer", "floating-point" } },
    { "test_booleans_must_be_true_or_false",
      "mutexes = ( { symbol = \"a\";\n required = 1; } );", "t.cfg:2: ",
      { "required must be true or false", "integer" } },
    { "test_booleans_must_be_true_or_false",
      "mutexes = ( { symbol = \"a\"; fair = \"yes\"; } );", "t.cfg:1: ",
      { "fair must be true or false" } },
    { "test_booleans_must_be_true_or_false",
      "mutexes = ( { symbol = \"a\"; cache = 0; } );", "t.cfg:1: ",
      { "cache must be true or false" } },
    { "test_strings_must_be_strings",
      "namespace = 5;", "t.cfg:1: ",
      { "namespace must be a string" } },
    { "test_strings_must_be_strings",
      "on_lease_lost = true;", "t.cfg:1: ",
      { "on_lease_lost must be a string", "boolean" } },
    { "test_strings_must_be_strings",
      "mutexes = ( { symbol = [ \"a\" ]; } );", "t.cfg:1: ",
      { "symbol must be a string", "array" } },
    { "test_strings_must_be_strings",
      "redis = { host = 127; };", "t.cfg:1: ",
      { "redis.host must be a string" } },

    /* numbers */
    { "test_lease_ms_out_of_range_names_value_and_limits",
      "# demo\n\n\n\n\n\nlease_ms = -5;\n", "t.cfg:7: ",
      { "lease_ms = -5: must be between 100 and 3600000" } },
    { "test_lease_ms_out_of_range_names_value_and_limits",
      "lease_ms = 99;", "t.cfg:1: ",
      { "lease_ms = 99" } },
    { "test_lease_ms_out_of_range_names_value_and_limits",
      "lease_ms = 3600001;", "t.cfg:1: ",
      { "lease_ms = 3600001" } },
    { "test_port_out_of_range_is_refused",
      "redis = { port = 0; };", "t.cfg:1: ",
      { "redis.port = 0: must be between 1 and 65535" } },
    { "test_port_out_of_range_is_refused",
      "redis = { port = 65536; };", "t.cfg:1: ",
      { "redis.port = 65536" } },
    { "test_db_out_of_range_is_refused",
      "redis = { db = -1; };", "t.cfg:1: ",
      { "redis.db = -1" } },
    { "test_db_out_of_range_is_refused",
      "redis = { db = 1000001; };", "t.cfg:1: ",
      { "redis.db = 1000001", "1000000" } },
    { "test_timeouts_out_of_range_are_refused",
      "redis = { connect_timeout_ms = 0; };", "t.cfg:1: ",
      { "redis.connect_timeout_ms = 0: must be between 1 and 600000" } },
    { "test_timeouts_out_of_range_are_refused",
      "redis = { command_timeout_ms = 600001; };", "t.cfg:1: ",
      { "redis.command_timeout_ms = 600001" } },
    { "test_renew_ms_below_ten_is_refused",
      "renew_ms = 9;", "t.cfg:1: ",
      { "renew_ms = 9: must be between 10 and" } },
    { "test_lease_margin_ms_must_be_under_half_the_lease",
      "lease_ms = 1000;\nlease_margin_ms = 500;", "t.cfg:2: ",
      { "lease_margin_ms = 500: must be between 1 and 499" } },
    { "test_lease_margin_ms_must_be_under_half_the_lease",
      "lease_margin_ms = 0;", "t.cfg:1: ",
      { "lease_margin_ms = 0" } },
    { "test_large_margin_with_default_renew_is_explained",
      "lease_ms = 30000;\nlease_margin_ms = 14000;", "t.cfg:2: ",
      { "lease_margin_ms = 14000", "renew_ms", "default", "8000" } },
    { "test_lock_delay_ms_out_of_range_is_refused",
      "lock_delay_ms = -1;", "t.cfg:1: ",
      { "lock_delay_ms = -1: must be between 0 and 30000" } },
    { "test_lock_delay_ms_out_of_range_is_refused",
      "lease_ms = 1000; lock_delay_ms = 1001;", "t.cfg:1: ",
      { "lock_delay_ms = 1001", "1000" } },
    { "test_lock_delay_ms_out_of_range_is_refused",
      "lease_ms = 3600000; lock_delay_ms = 600001;", "t.cfg:1: ",
      { "lock_delay_ms = 600001", "600000" } },
    { "test_offset_and_index_out_of_range_are_refused",
      "mutexes = ( { symbol = \"a\"; offset = -8; } );", "t.cfg:1: ",
      { "offset = -8: must be between 0 and 1073741824" } },
    { "test_offset_and_index_out_of_range_are_refused",
      "mutexes = ( { symbol = \"a\"; offset = 1073741825; } );", "t.cfg:1: ",
      { "offset = 1073741825" } },
    { "test_offset_and_index_out_of_range_are_refused",
      "mutexes = ( { symbol = \"a\"; index = 16777217; } );", "t.cfg:1: ",
      { "index = 16777217: must be between 0 and 16777216" } },
    { "test_offset_and_index_out_of_range_are_refused",
      "mutexes = ( { symbol = \"a\"; index = -1; } );", "t.cfg:1: ",
      { "index = -1" } },
    /* libconfig 1.5 would read 4294973675 as 6379 */
    { "test_integer_beyond_int_is_refused_not_truncated",
      "redis = {\n port = 4294973675; };", "t.cfg:2: ",
      { "port = 4294973675", "out of range" } },
    { "test_integer_beyond_int_is_refused_not_truncated",
      "lease_ms = 0x100007530;", "t.cfg:1: ",
      { "lease_ms = 0x100007530", "out of range" } },
    { "test_huge_integer_literals_are_refused",
      "lease_ms = 99999999999999999999999999999999999999;", "t.cfg:1: ",
      { "lease_ms", "out of range" } },
    { "test_huge_integer_literals_are_refused",
      "lease_ms = 99999999999999999999L;", "t.cfg:1: ",
      { "lease_ms", "out of range" } },
    { "test_huge_integer_literals_are_refused",
      "lease_ms = -99999999999999999999L;", "t.cfg:1: ",
      { "out of range" } },
    { "test_huge_integer_literals_are_refused",
      "x = [ 1,\n 0xFFFFFFFFFFFFFFFFFFL ];", "t.cfg:2: ",
      { "out of range" } },
    { "test_64_bit_values_beyond_the_range_are_refused",
      "lease_ms = 5000000000L;", "t.cfg:1: ",
      { "lease_ms = 5000000000: must be between 100" } },
    { "test_64_bit_values_beyond_the_range_are_refused",
      "mutexes = ( { symbol = \"a\"; offset = 9223372036854775807L; } );", "t.cfg:1: ",
      { "offset = 9223372036854775807" } },

    /* redis */
    { "test_host_and_unix_exclude_each_other",
      "redis = {\n host = \"h\";\n unix = \"/s\"; };", "t.cfg:3: ",
      { "redis.host", "redis.unix" } },
    { "test_port_with_unix_is_refused",
      "redis = { unix = \"/s\";\n port = 1; };", "t.cfg:2: ",
      { "redis.port", "redis.unix" } },
    { "test_password_env_must_be_a_variable_name",
      "redis = { password_env = \"MY PW\"; };", "t.cfg:1: ",
      { "password_env", "environment variable" } },
    { "test_username_needs_a_password",
      "redis = { username = \"u\"; };", "t.cfg:1: ",
      { "redis.username", "password" } },
    { "test_empty_password_is_refused",
      "redis = { password = \"\"; };", "t.cfg:1: ",
      { "redis.password", "empty" } },
    { "test_bad_host_is_refused",
      "redis = { host = \"\"; };", "t.cfg:1: ",
      { "redis.host", "empty" } },
    { "test_bad_host_is_refused",
      "redis = { host = \"a b\"; };", "t.cfg:1: ",
      { "redis.host = \"a b\"", "space" } },
    { "test_bad_host_is_refused",
      "redis = { host = \"/tmp/redis.sock\"; };", "t.cfg:1: ",
      { "redis.host", "redis.unix" } },
    { "test_bad_host_is_refused",
      "redis = { host = \"[::1]\"; };", "t.cfg:1: ",
      { "redis.host", "without brackets" } },

    /* mutex entries */
    { "test_mutex_entry_needs_symbol_or_init_site",
      "mutexes = (\n { symbol = \"a\"; },\n { name = \"x\";\n   fair = true; }\n);", "t.cfg:3: ",
      { "symbol", "init_site" } },
    { "test_mutex_entry_with_both_symbol_and_init_site_is_refused",
      "mutexes = (\n { symbol = \"a\";\n   init_site = \"f\"; }\n);", "t.cfg:2: ",
      { "both symbol (line 2) and init_site (line 3)" } },
    { "test_address_entry_excludes_symbol_and_init_site",
      "mutexes = (\n { symbol = \"a\";\n   address = 0x10; name = \"x\"; }\n);", "t.cfg:2: ",
      { "both symbol (line 2) and address (line 3)" } },
    { "test_address_entry_excludes_symbol_and_init_site",
      "mutexes = (\n { init_site_address = 0x10;\n   address = 0x10; name = \"x\"; }\n);", "t.cfg:2: ",
      { "both address (line 3) and init_site_address (line 2)" } },
    { "test_address_entry_needs_a_name",
      "mutexes = ( { address = 0x4c40; build_id = \"ab\"; } );", "t.cfg:1: ",
      { "address", "needs name" } },
    { "test_address_entry_needs_a_name",
      "mutexes = ( { init_site_address = 0x4c40; } );", "t.cfg:1: ",
      { "init_site_address", "needs name" } },
    { "test_address_must_not_be_negative",
      "mutexes = ( { address = -8; name = \"x\"; } );", "t.cfg:1: ",
      { "address" } },
    { "test_build_id_must_be_hex",
      "mutexes = ( { address = 0x40; name = \"x\";\n build_id = \"xyz1\"; } );", "t.cfg:2: ",
      { "build_id = \"xyz1\"", "hex" } },
    { "test_build_id_must_be_hex",
      "mutexes = ( { address = 0x40; name = \"x\";\n build_id = \"abc\"; } );", "t.cfg:2: ",
      { "build_id", "even number" } },
    { "test_build_id_only_goes_with_addresses",
      "mutexes = ( { symbol = \"a\";\n build_id = \"abcd\"; } );", "t.cfg:2: ",
      { "build_id only applies", "symbol" } },
    { "test_offset_and_index_only_go_with_symbol",
      "mutexes = ( { address = 0x40; name = \"x\";\n offset = 8; } );", "t.cfg:2: ",
      { "offset", "address" } },
    { "test_duplicate_address_entries_name_both_lines",
      "mutexes = (\n { address = 0x40; name = \"x\"; },\n { address = 0x40; name = \"y\"; }\n);",
      "t.cfg:3: ", { "repeats the one at line 2", "address = 0x40" } },
    { "test_offset_and_index_exclude_each_other",
      "mutexes = ( { symbol = \"a\"; offset = 8;\n index = 1; } );", "t.cfg:1: ",
      { "offset (line 1) and index (line 2)" } },
    { "test_offset_and_index_only_go_with_symbol",
      "mutexes = ( { init_site = \"f\";\n offset = 8; } );", "t.cfg:2: ",
      { "offset", "init_site" } },
    { "test_offset_and_index_only_go_with_symbol",
      "mutexes = ( { init_site = \"f\";\n index = 8; } );", "t.cfg:2: ",
      { "index", "init_site" } },
    { "test_name_with_forbidden_characters_is_refused",
      "mutexes = ( { symbol = \"a\";\n name = \"my lock\"; } );", "t.cfg:2: ",
      { "name = \"my lock\"", "space at byte 3" } },
    { "test_name_with_forbidden_characters_is_refused",
      "mutexes = ( { symbol = \"a\"; name = \"x{y}\"; } );", "t.cfg:1: ",
      { "name = \"x{y}\"", "'{'" } },
    { "test_name_with_forbidden_characters_is_refused",
      "mutexes = ( { symbol = \"a\"; name = \"x\ny\"; } );", "t.cfg:1: ",
      { "name = \"x\\x0ay\"", "0x0a" } },
    { "test_name_with_forbidden_characters_is_refused",
      "mutexes = ( { symbol = \"a\"; name = \"x\\x01\"; } );", "t.cfg:1: ",
      { "byte 0x01" } },
    { "test_name_with_forbidden_characters_is_refused",
      "mutexes = ( { symbol = \"a\"; name = \"caf\xc3\xa9\"; } );", "t.cfg:1: ",
      { "byte 0xc3" } },
    { "test_empty_name_is_refused",
      "mutexes = ( { symbol = \"a\"; name = \"\"; } );", "t.cfg:1: ",
      { "name = \"\"", "empty" } },
    { "test_namespace_uses_the_name_character_set",
      "namespace = \"my app\";", "t.cfg:1: ",
      { "namespace = \"my app\"", "space" } },
    { "test_namespace_uses_the_name_character_set",
      "namespace = \"{x}\";", "t.cfg:1: ",
      { "namespace", "'{'" } },
    { "test_namespace_uses_the_name_character_set",
      "namespace = \"\";", "t.cfg:1: ",
      { "namespace", "empty" } },
    { "test_symbol_must_be_an_identifier",
      "mutexes = ( { symbol = \"1lock\"; } );", "t.cfg:1: ",
      { "symbol = \"1lock\"", "start" } },
    { "test_symbol_must_be_an_identifier",
      "mutexes = ( { symbol = \"a b\"; } );", "t.cfg:1: ",
      { "symbol = \"a b\"", "space at byte 2" } },
    { "test_symbol_must_be_an_identifier",
      "mutexes = ( { symbol = \"\"; } );", "t.cfg:1: ",
      { "symbol", "empty" } },
    { "test_symbol_must_be_an_identifier",
      "mutexes = ( { symbol = \"ns::lock\"; } );", "t.cfg:1: ",
      { "symbol = \"ns::lock\"", "':'" } },
    { "test_symbol_file_qualifier_is_checked",
      "mutexes = ( { symbol = \":lock\"; } );", "t.cfg:1: ",
      { "symbol", "empty file qualifier" } },
    { "test_symbol_file_qualifier_is_checked",
      "mutexes = ( { symbol = \"util.c:\"; } );", "t.cfg:1: ",
      { "symbol", "no identifier" } },
    { "test_symbol_file_qualifier_is_checked",
      "mutexes = ( { symbol = \"my util.c:lock\"; } );", "t.cfg:1: ",
      { "file qualifier", "space" } },
    { "test_init_site_must_be_an_identifier",
      "mutexes = ( { init_site = \"new account\"; } );", "t.cfg:1: ",
      { "init_site", "space" } },
    { "test_init_site_must_be_an_identifier",
      "mutexes = ( { init_site = \"a.c:f\"; } );", "t.cfg:1: ",
      { "init_site", "':'" } },
    { "test_default_name_that_is_not_a_valid_name_asks_for_one",
      "mutexes = ( { symbol = \"lock$1\"; } );", "t.cfg:1: ",
      { "defaults to \"lock$1\"", "'$'", "set name" } },
    { "test_programs_must_be_nonempty_names_without_slash",
      "programs = [];\n", "t.cfg:1: ",
      { "programs", "empty" } },
    { "test_programs_must_be_nonempty_names_without_slash",
      "programs = \"stock\";\n", "t.cfg:1: ",
      { "programs", "list" } },
    { "test_programs_must_be_nonempty_names_without_slash",
      "\nprograms = [\"bin/stock\"];\n", "t.cfg:2: ",
      { "programs[0]", "'/'" } },
    { "test_programs_must_be_nonempty_names_without_slash",
      "programs = ( \"a\", 3 );\n", "t.cfg:1: ",
      { "programs[1]", "string" } },
    { "test_metrics_refusals_name_the_key_and_line",
      "\nmetrics = { interval_ms = 100; };\nmutexes = ();\n", "t.cfg:2: ",
      { "metrics needs file" } },
    { "test_metrics_refusals_name_the_key_and_line",
      "metrics = { file = \"/a.prom\";\n period = 100; };\nmutexes = ();\n", "t.cfg:2: ",
      { "unknown key \"period\" in the metrics group", "valid keys: file, interval_ms" } },
    { "test_metrics_refusals_name_the_key_and_line",
      "metrics = { file = \"/a.prom\";\n interval_ms = 5; };\nmutexes = ();\n", "t.cfg:2: ",
      { "metrics.interval_ms = 5: must be between 10 and 3600000" } },
    { "test_metrics_refusals_name_the_key_and_line",
      "metrics = {\n file = \"run/a.prom\"; };\nmutexes = ();\n", "t.cfg:2: ",
      { "metrics.file = \"run/a.prom\": must be an absolute path" } },
    { "test_metrics_refusals_name_the_key_and_line",
      "metrics = {\n file = \"/run/app/\"; };\nmutexes = ();\n", "t.cfg:2: ",
      { "names a directory" } },
    { "test_metrics_refusals_name_the_key_and_line",
      "metrics = {\n file = \"/run/%s.prom\"; };\nmutexes = ();\n", "t.cfg:2: ",
      { "the only % sequence is %p" } },
    { "test_metrics_refusals_name_the_key_and_line",
      "metrics = {\n file = 3; };\nmutexes = ();\n", "t.cfg:2: ",
      { "metrics.file must be a string" } },
    { "test_metrics_refusals_name_the_key_and_line",
      "\nmetrics = \"/a.prom\";\nmutexes = ();\n", "t.cfg:2: ",
      { "metrics must be a group" } },
    { "test_duplicate_symbol_entries_name_both_lines",
      "mutexes = (\n { symbol = \"a\"; },\n { symbol = \"b\"; },\n"
                 " { symbol = \"a\"; offset = 0; name = \"other\"; }\n);", "t.cfg:4: ",
      { "repeats the one at line 2", "symbol = \"a\"" } },
    { "test_duplicate_init_site_entries_name_both_lines",
      "mutexes = (\n { init_site = \"f\"; object = \"l.so\"; },\n"
                 " { init_site = \"f\"; object = \"l.so\"; name = \"g\"; }\n);", "t.cfg:3: ",
      { "repeats the one at line 2", "init_site = \"f\"" } },
    { "test_first_duplicate_in_file_order_is_reported",
      "mutexes = (\n { symbol = \"z\"; },\n { symbol = \"a\"; },\n { symbol = \"z\"; },\n"
                 " { symbol = \"a\"; },\n { symbol = \"a\"; }\n);", "t.cfg:4: ",
      { "line 2", "\"z\"" } },

    /* protocol (docs/interop.md) */
    { "test_protocol_is_dmutex_setnx_or_redisson",
      "mutexes = (\n { symbol = \"a\";\n   protocol = \"setx\"; }\n);", "t.cfg:3: ",
      { "protocol = \"setx\"", "\"dmutex\", \"setnx\" or \"redisson\"" } },
    { "test_redisson_entry_refuses_fair_true",
      "mutexes = (\n { symbol = \"a\"; name = \"stock\"; protocol = \"redisson\";\n"
      "   fair = true; }\n);", "t.cfg:3: ",
      { "fair = true with protocol = \"redisson\" (line 2)", "a Redisson RLock has no queue",
        "remove fair" } },
    { "test_redisson_entry_refuses_cache",
      "mutexes = (\n { symbol = \"a\"; protocol = \"redisson\";\n   cache = true; }\n);",
      "t.cfg:3: ", { "cache = true with protocol = \"redisson\" (line 2)", "never be given up",
                     "remove cache" } },
    { "test_one_name_has_one_protocol_setnx_or_redisson",
      "mutexes = (\n { symbol = \"a\"; name = \"n\"; protocol = \"redisson\"; },\n"
      " { symbol = \"b\"; name = \"n\"; protocol = \"setnx\"; }\n);", "t.cfg:3: ",
      { "protocol = \"setnx\"", "line 2", "protocol = \"redisson\"", "same protocol" } },
    { "test_setnx_entry_refuses_fair_true",
      "mutexes = (\n { symbol = \"a\"; protocol = \"setnx\";\n   fair = true; }\n);", "t.cfg:3: ",
      { "fair = true with protocol = \"setnx\" (line 2)", "no queue", "remove fair" } },
    { "test_setnx_entry_refuses_cache",
      "mutexes = (\n { symbol = \"a\"; protocol = \"setnx\";\n   cache = true; }\n);", "t.cfg:3: ",
      { "cache = true with protocol = \"setnx\" (line 2)", "never be given up", "remove cache" } },
    { "test_one_name_has_one_protocol",
      "mutexes = (\n { symbol = \"a\"; name = \"n\"; protocol = \"setnx\"; },\n"
      " { symbol = \"b\"; name = \"n\"; }\n);", "t.cfg:3: ",
      { "protocol = \"dmutex\"", "lock name \"n\"", "line 2, which has protocol = \"setnx\"",
        "the same protocol" } },
    { "test_protocol_only_applies_to_mutex_entries",
      "conds = (\n { symbol = \"c\";\n   protocol = \"setnx\"; }\n);", "t.cfg:3: ",
      { "protocol only applies to mutex entries", "condition variable" } },
    { "test_protocol_only_applies_to_mutex_entries",
      "rwlocks = (\n { symbol = \"r\";\n   protocol = \"dmutex\"; }\n);", "t.cfg:3: ",
      { "protocol only applies to mutex entries", "rwlock" } },

    /* conds */
    { "test_cond_entry_refuses_fair_and_cache",
      "conds = (\n { symbol = \"c\";\n   fair = true; }\n);", "t.cfg:3: ",
      { "fair only applies to mutex entries" } },
    { "test_cond_entry_refuses_fair_and_cache",
      "conds = ( { symbol = \"c\"; cache = false; } );", "t.cfg:1: ",
      { "cache only applies to mutex entries" } },
    { "test_cond_entry_refuses_unknown_keys",
      "conds = (\n { symbol = \"c\"; nmae = \"x\"; }\n);", "t.cfg:2: ",
      { "unknown key \"nmae\"", "in a cond entry", "did you mean name" } },
    { "test_cond_entry_needs_symbol_or_init_site",
      "conds = (\n { name = \"x\"; }\n);", "t.cfg:2: ",
      { "cond entry needs symbol", "condition variables" } },
    { "test_cond_entry_needs_symbol_or_init_site",
      "conds = ( { symbol = \"c\"; init_site = \"f\"; } );", "t.cfg:1: ",
      { "cond entry has both symbol" } },
    { "test_conds_must_be_a_list_of_groups",
      "conds = \"c\";", "t.cfg:1: ",
      { "conds must be a list" } },
    { "test_conds_must_be_a_list_of_groups",
      "conds = ( \"c\" );", "t.cfg:1: ",
      { "each entry of conds must be a group" } },
    { "test_duplicate_cond_entries_name_both_lines",
      "conds = (\n { symbol = \"c\"; },\n { symbol = \"c\"; name = \"d\"; }\n);", "t.cfg:3: ",
      { "cond entry repeats the one at line 2", "symbol = \"c\"" } },
    { "test_one_variable_cannot_be_a_mutex_and_a_cond",
      "mutexes = (\n { symbol = \"x\"; }\n);\nconds = (\n { symbol = \"x\"; }\n);", "t.cfg:5: ",
      { "line 2", "cannot be both" } },

    /* rwlocks */
    { "test_rwlock_entry_refuses_fair_and_cache",
      "rwlocks = (\n { symbol = \"r\";\n   fair = true; }\n);", "t.cfg:3: ",
      { "fair only applies to mutex entries", "rwlock" } },
    { "test_rwlock_entry_refuses_unknown_keys",
      "rwlocks = (\n { symbol = \"r\"; nmae = \"x\"; }\n);", "t.cfg:2: ",
      { "unknown key \"nmae\"", "in an rwlock entry" } },
    { "test_rwlock_entry_needs_symbol_or_init_site",
      "rwlocks = (\n { name = \"x\"; }\n);", "t.cfg:2: ",
      { "rwlock entry needs symbol", "rwlocks" } },
    { "test_duplicate_rwlock_entries_name_both_lines",
      "rwlocks = (\n { symbol = \"r\"; },\n { symbol = \"r\"; name = \"d\"; }\n);", "t.cfg:3: ",
      { "rwlock entry repeats the one at line 2" } },
    { "test_one_variable_cannot_be_a_mutex_and_an_rwlock",
      "mutexes = (\n { symbol = \"x\"; }\n);\nrwlocks = (\n { symbol = \"x\"; name = \"y\"; }\n);",
      "t.cfg:5: ", { "line 2", "cannot be both" } },
    { "test_a_lock_name_is_a_mutex_s_or_an_rwlock_s",
      "mutexes = (\n { symbol = \"x\"; name = \"n\"; }\n);\nrwlocks = (\n { symbol = \"y\"; name = \"n\"; }\n);",
      "t.cfg:5: ", { "lock name \"n\"", "mutex's or an rwlock's" } },

    /* policies */
    { "test_unknown_on_lease_lost_lists_the_choices",
      "on_lease_lost = \"panic\";", "t.cfg:1: ",
      { "on_lease_lost = \"panic\"", "\"abort\"", "\"warn\"" } },
    { "test_unknown_on_redis_down_lists_the_choices",
      "\non_redis_down = \"Block\";", "t.cfg:2: ",
      { "on_redis_down = \"Block\"", "\"block\", \"error\" or \"local\"" } },
};

static void test_refused(void **state)
{
    const char *test = *state;
    int rows = 0;
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        const struct refusal *r = &refusals[i];
        if (strcmp(r->test, test) != 0)
            continue;
        expect_error_words(r->text, r->prefix, r->words[0], r->words[1], r->words[2], r->words[3], (const char *)NULL);
        rows++;
    }
    if (rows == 0)
        fail_msg("no refusals[] row belongs to %s", test);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_teardown(name, teardown)
#define R(name) { #name, test_refused, NULL, teardown, (void *)#name }
        T(test_defaults_fill_every_documented_value),
        T(test_empty_config_gives_every_default),
        T(test_metrics_group_and_its_rules),
        T(test_comments_only_config_gives_every_default),
        T(test_minimal_config_maps_one_symbol_with_entry_defaults),
        T(test_full_config_reads_every_key),
        T(test_conds_read_symbol_and_init_site_entries),
        T(test_rwlocks_read_symbol_and_init_site_entries),
        T(test_protocol_defaults_to_dmutex_and_setnx_is_unfair),
        T(test_setnx_protocol_is_refused_with_etcd),
        T(test_redisson_protocol_is_loaded_unfair_and_refused_with_etcd),
        R(test_protocol_is_dmutex_setnx_or_redisson),
        R(test_redisson_entry_refuses_fair_true),
        R(test_redisson_entry_refuses_cache),
        R(test_one_name_has_one_protocol_setnx_or_redisson),
        R(test_setnx_entry_refuses_fair_true),
        R(test_setnx_entry_refuses_cache),
        R(test_one_name_has_one_protocol),
        R(test_protocol_only_applies_to_mutex_entries),
        R(test_cond_entry_refuses_fair_and_cache),
        R(test_cond_entry_refuses_unknown_keys),
        R(test_cond_entry_needs_symbol_or_init_site),
        R(test_conds_must_be_a_list_of_groups),
        R(test_duplicate_cond_entries_name_both_lines),
        R(test_one_variable_cannot_be_a_mutex_and_a_cond),
        T(test_lease_ms_derives_renew_and_margin_defaults),
        T(test_smallest_lease_keeps_valid_defaults),
        T(test_largest_values_at_the_limits_are_accepted),
        T(test_int64_and_hex_integers_are_accepted),
        T(test_colon_assignment_and_no_final_semicolon_are_libconfig_syntax),
        T(test_name_defaults_to_symbol_without_file_qualifier),
        T(test_name_defaults_to_init_site),
        T(test_address_entries_keep_address_build_id_and_name),
        T(test_mangled_cpp_and_local_static_symbols_are_accepted),
        T(test_name_uses_every_allowed_character),
        T(test_name_of_200_bytes_is_accepted),
        T(test_empty_mutex_list_is_fine),
        T(test_same_symbol_with_different_offset_index_or_object_is_not_a_duplicate),
        T(test_unix_socket_replaces_host),
        T(test_password_env_is_resolved_into_password),
        T(test_every_policy_value_is_read),
        T(test_null_label_is_named_string),
        T(test_demo_cfg_loads),
        T(test_example_cfg_loads_with_every_key),
        T(test_example_cfg_names_every_key_of_the_table_at_its_default),
        T(test_load_from_file_reports_lines_with_its_path),
        T(test_load_from_file_sets_path),
        T(test_missing_file_says_cannot_read_and_why),
        T(test_directory_says_cannot_read),
        T(test_nul_byte_in_file_names_its_line),
        T(test_truncated_file_is_a_syntax_error),
        R(test_syntax_error_names_label_and_line),
        T(test_syntax_error_echoes_no_bytes_of_the_file),
        T(test_empty_file_fails_the_mutexes_check),
        T(test_config_without_mutexes_fails_the_mutexes_check),
        T(test_explicitly_empty_mutexes_passes_the_mutexes_check),
        T(test_programs_decide_before_anything_else_is_checked),
        T(test_programs_listing_the_program_loads_the_rest),
        T(test_redact_url_hides_the_password_only),
        T(test_url_errors_never_show_the_password),
        R(test_unterminated_string_names_the_line_it_starts_on),
        R(test_unterminated_comment_names_the_line_it_starts_on),
        R(test_duplicate_key_is_an_error_with_its_line),
        R(test_unknown_top_level_key_names_key_and_line),
        R(test_unknown_redis_key_lists_valid_keys),
        R(test_unknown_mutex_key_names_key_and_line),
        R(test_redis_must_be_a_group),
        R(test_mutexes_must_be_a_list),
        R(test_mutex_entry_must_be_a_group),
        R(test_include_is_refused),
        T(test_include_inside_a_string_is_just_text),
        R(test_nul_escape_in_a_string_is_refused),
        T(test_deep_nesting_is_an_error_not_a_crash),
        R(test_deep_nesting_inside_a_known_key_is_refused),
        R(test_port_as_string_must_be_an_integer),
        R(test_float_for_an_integer_key_is_refused),
        R(test_booleans_must_be_true_or_false),
        R(test_strings_must_be_strings),
        R(test_lease_ms_out_of_range_names_value_and_limits),
        R(test_port_out_of_range_is_refused),
        R(test_db_out_of_range_is_refused),
        R(test_timeouts_out_of_range_are_refused),
        R(test_renew_ms_below_ten_is_refused),
        T(test_renew_ms_must_leave_time_for_two_renewals),
        R(test_lease_margin_ms_must_be_under_half_the_lease),
        R(test_large_margin_with_default_renew_is_explained),
        R(test_lock_delay_ms_out_of_range_is_refused),
        R(test_offset_and_index_out_of_range_are_refused),
        R(test_integer_beyond_int_is_refused_not_truncated),
        R(test_huge_integer_literals_are_refused),
        R(test_64_bit_values_beyond_the_range_are_refused),
        R(test_host_and_unix_exclude_each_other),
        R(test_port_with_unix_is_refused),
        T(test_password_and_password_env_exclude_each_other),
        T(test_password_env_naming_an_unset_variable_is_an_error),
        T(test_password_env_naming_an_empty_variable_is_an_error),
        R(test_password_env_must_be_a_variable_name),
        R(test_username_needs_a_password),
        R(test_empty_password_is_refused),
        R(test_bad_host_is_refused),
        T(test_unix_path_longer_than_sun_path_is_refused),
        R(test_mutex_entry_needs_symbol_or_init_site),
        R(test_mutex_entry_with_both_symbol_and_init_site_is_refused),
        R(test_offset_and_index_exclude_each_other),
        R(test_offset_and_index_only_go_with_symbol),
        R(test_name_with_forbidden_characters_is_refused),
        R(test_empty_name_is_refused),
        T(test_name_longer_than_200_bytes_is_refused),
        R(test_namespace_uses_the_name_character_set),
        R(test_symbol_must_be_an_identifier),
        R(test_symbol_file_qualifier_is_checked),
        R(test_init_site_must_be_an_identifier),
        R(test_default_name_that_is_not_a_valid_name_asks_for_one),
        T(test_object_must_be_a_file_name_or_path),
        T(test_programs_lists_executable_names),
        R(test_programs_must_be_nonempty_names_without_slash),
        T(test_object_longer_than_255_bytes_is_refused),
        T(test_ten_kilobyte_strings_give_a_clear_error),
        R(test_duplicate_symbol_entries_name_both_lines),
        R(test_duplicate_init_site_entries_name_both_lines),
        R(test_address_entry_excludes_symbol_and_init_site),
        R(test_address_entry_needs_a_name),
        R(test_address_must_not_be_negative),
        R(test_build_id_must_be_hex),
        R(test_build_id_only_goes_with_addresses),
        R(test_duplicate_address_entries_name_both_lines),
        R(test_first_duplicate_in_file_order_is_reported),
        R(test_unknown_on_lease_lost_lists_the_choices),
        R(test_unknown_on_redis_down_lists_the_choices),
        R(test_metrics_refusals_name_the_key_and_line),
        T(test_error_buffer_is_bounded_and_terminated),
        T(test_failed_load_leaves_defaults_and_free_is_harmless),
        T(test_free_resets_to_defaults),
        T(test_url_host_port_and_db),
        T(test_url_host_alone_means_port_6379_db_0),
        T(test_url_user_and_password),
        T(test_url_password_only),
        T(test_url_credentials_are_percent_decoded),
        T(test_url_without_credentials_keeps_the_files),
        T(test_url_ipv6_host_in_brackets),
        T(test_url_unix_socket_with_and_without_db),
        T(test_url_scheme_is_case_insensitive),
        T(test_url_rediss_turns_tls_on_with_files_from_the_environment),
        T(test_redis_tls_group_and_its_rules),
        T(test_plain_url_over_a_tls_config_is_an_error_naming_both),
        T(test_url_rediss_sentinel_turns_tls_on_for_sentinels_and_nodes),
        T(test_url_bad_ones_say_what_is_wrong),
        T(test_etcd_group_selects_etcd_with_its_members_and_timeouts),
        T(test_on_store_down_is_on_redis_down_under_its_store_neutral_name),
        T(test_etcd_group_errors_name_the_cause),
        T(test_etcd_url_names_the_members_and_a_redis_url_goes_back),
        T(test_etcd_tls_https_endpoints_and_etcds_urls_and_their_errors),
        T(test_sentinel_keys_load_with_default_port_and_credentials),
        T(test_min_replicas_defaults_to_0_and_its_timeout_to_at_most_renew_ms),
        T(test_sentinel_config_errors_name_the_key_and_line),
        T(test_url_sentinel_names_sentinels_master_db_and_credentials),
        T(test_url_sentinel_bad_ones_say_what_is_wrong),
        T(test_cluster_keys_load_seeds_with_default_port_and_credentials),
        T(test_url_cluster_names_seeds_and_credentials),
        T(test_url_cluster_bad_ones_say_what_is_wrong),
        R(test_cluster_config_errors_name_the_key_and_line),
        T(test_url_unix_path_longer_than_sun_path_is_refused),
#undef T
    };
    return cmocka_run_group_tests_name("config", tests, th_group_setup, th_group_teardown);
}
