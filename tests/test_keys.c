/* test_keys: the key layout of shim/redis/keys.h, the one place it is built.
 * Each key and channel of a lock is checked against the layout the
 * scripts' headers and docs/design.md's key table document, and the holder
 * marker against the three forms acquire.lua and release.lua write. No
 * Redis: keys.c is pure string work. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "keys.h"

static void test_every_key_of_a_lock_carries_the_name_as_hash_tag(void **s)
{
    (void)s;
    static const char *const want[DM_KEY_COUNT] = {
        [DM_KEY_LOCK] = "ns:{a b}",
        [DM_KEY_TOKEN] = "ns:{a b}:token",
        [DM_KEY_HOLDER] = "ns:{a b}:holder",
        [DM_KEY_LOST] = "ns:{a b}:lost",
        [DM_KEY_VOID] = "ns:{a b}:void",
        [DM_KEY_RELEASED] = "ns:{a b}:released",
        [DM_KEY_QUEUE] = "ns:{a b}:queue",
        [DM_KEY_QTIME] = "ns:{a b}:qtime",
        [DM_KEY_WANT] = "ns:{a b}:want",
        [DM_KEY_FORCED] = "ns:{a b}:forced",
        [DM_KEY_COND] = "ns:{a b}:cond",
        [DM_KEY_READERS] = "ns:{a b}:readers",
        [DM_KEY_RGRANT] = "ns:{a b}:rgrant",
        [DM_KEY_WAIT] = "ns:{a b}:w:",
        [DM_KEY_EPOCH] = "ns:{a b}:epoch",
    };
    char buf[64];
    for (int k = 0; k < DM_KEY_COUNT; k++) {
        assert_non_null(want[k]);
        size_t n = dm_keys_build(buf, sizeof buf, "ns", "a b", (enum dm_key)k);
        assert_string_equal(buf, want[k]);
        assert_int_equal(n, strlen(want[k]));
        assert_int_equal(dm_keys_build(NULL, 0, "ns", "a b", (enum dm_key)k), n);
        assert_int_equal(dm_keys_len("ns", "a b", (enum dm_key)k), n);
    }
}

static void test_wait_channel_is_the_prefix_and_the_process_id(void **s)
{
    (void)s;
    char buf[64];
    assert_int_equal(dm_keys_wait_channel(buf, sizeof buf, "dmutex", "x", "0123abcd"), 21);
    assert_string_equal(buf, "dmutex:{x}:w:0123abcd");
}

static void test_a_short_buffer_is_truncated_terminated_and_told_the_length(void **s)
{
    (void)s;
    char buf[8];
    memset(buf, 'z', sizeof buf);
    assert_int_equal(dm_keys_build(buf, sizeof buf, "dmutex", "name", DM_KEY_HOLDER), 20);
    assert_string_equal(buf, "dmutex:");
}

static void test_pattern_matches_one_key_of_every_lock(void **s)
{
    (void)s;
    char buf[64];
    dm_keys_build(buf, sizeof buf, "dmutex", "*", DM_KEY_TOKEN);
    assert_string_equal(buf, "dmutex:{*}:token");
    dm_keys_build(buf, sizeof buf, "ns", "*", DM_KEY_LOCK);
    assert_string_equal(buf, "ns:{*}");
}

static void test_name_is_read_back_from_a_key_of_its_namespace_only(void **s)
{
    (void)s;
    const char *name;
    size_t len;
    const char *k = "dmutex:{a:{b}}:token";
    assert_int_equal(dm_keys_name(k, strlen(k), "dmutex", DM_KEY_TOKEN, &name, &len), 1);
    assert_int_equal(len, 5);
    assert_memory_equal(name, "a:{b}", 5);
    k = "dmutex:{}:token";
    assert_int_equal(dm_keys_name(k, strlen(k), "dmutex", DM_KEY_TOKEN, &name, &len), 1);
    assert_int_equal(len, 0);
    static const char *const not[] = { "other:{x}:token", "dmutex:{x}:holder", "dmutex:{x}",
                                       "dmutex:x}:token", "dmutex:{x:token", "dmutexx:{x}:token",
                                       "dmutex" };
    for (size_t i = 0; i < sizeof not / sizeof not[0]; i++)
        assert_int_equal(dm_keys_name(not[i], strlen(not[i]), "dmutex", DM_KEY_TOKEN,
                                      &name, &len), 0);
}

static void test_holder_marker_of_a_grant_names_request_owner_and_token(void **s)
{
    (void)s;
    struct dm_holder h;
    const char *m = "0123abcd:7|42 #1700000000000123";
    assert_int_equal(dm_keys_holder_decode(m, &h), 0);
    assert_int_equal(h.state, DM_HOLDER_GRANTED);
    assert_ptr_equal(h.request, m);
    assert_int_equal(h.request_len, strlen("0123abcd:7|42"));
    assert_int_equal(h.owner_len, strlen("0123abcd:7"));
    assert_true(h.token == 1700000000000123ULL);
}

static void test_holder_marker_of_a_release_and_of_a_seen_expiry(void **s)
{
    (void)s;
    struct dm_holder h;
    assert_int_equal(dm_keys_holder_decode("=57", &h), 0);
    assert_int_equal(h.state, DM_HOLDER_RELEASED);
    assert_true(h.token == 57);
    assert_int_equal(dm_keys_holder_decode("!1700000000123", &h), 0);
    assert_int_equal(h.state, DM_HOLDER_EXPIRY_SEEN);
    assert_true(h.seen_ms == 1700000000123LL);
}

static void test_holder_marker_of_a_forced_release_names_token_and_who(void **s)
{
    (void)s;
    struct dm_holder h;
    assert_int_equal(dm_keys_holder_decode("~58 ops@host pid 9", &h), 0);
    assert_int_equal(h.state, DM_HOLDER_FORCED);
    assert_true(h.token == 58);
    assert_string_equal(h.by, "ops@host pid 9");
    assert_int_equal(dm_keys_holder_decode("~x ops", &h), -1);
    assert_int_equal(h.state, DM_HOLDER_FORCED);
}

/* lock_delay_ms after a forced release: the delay's marker keeps that the
 * end was forced, so the grant after it can say so. */
static void test_holder_marker_of_a_delay_after_a_force_says_forced(void **s)
{
    (void)s;
    struct dm_holder h;
    assert_int_equal(dm_keys_holder_decode("!1700000000123 forced", &h), 0);
    assert_int_equal(h.state, DM_HOLDER_EXPIRY_SEEN);
    assert_true(h.seen_ms == 1700000000123LL);
    assert_int_equal(h.forced, 1);
    assert_int_equal(dm_keys_holder_decode("!1700000000123", &h), 0);
    assert_int_equal(h.forced, 0);
    assert_int_equal(dm_keys_holder_decode("!1700000000123 other", &h), -1);
    assert_int_equal(h.state, DM_HOLDER_EXPIRY_SEEN);
}

static void test_malformed_markers_keep_the_state_of_their_first_character(void **s)
{
    (void)s;
    struct dm_holder h;
    assert_int_equal(dm_keys_holder_decode("=", &h), -1);
    assert_int_equal(h.state, DM_HOLDER_RELEASED);
    assert_int_equal(dm_keys_holder_decode("!x", &h), -1);
    assert_int_equal(h.state, DM_HOLDER_EXPIRY_SEEN);
    static const char *const bad[] = { "", "me:1|1", "me:1|1 #", " #5", "me:1|1 #5x" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(dm_keys_holder_decode(bad[i], &h), -1);
        assert_int_equal(h.state, DM_HOLDER_GRANTED);
    }
}

/* Every kind has a distinct short name (dmutex keys) that reads back to
 * it, and its key ends with ":" + that name (the lock itself excepted). */
static void test_every_kind_has_a_name_that_reads_back(void **s)
{
    (void)s;
    for (int i = 0; i < DM_KEY_COUNT; i++) {
        enum dm_key k = DM_KEY_COUNT;
        assert_int_equal(dm_keys_kind_parse(dm_keys_kind((enum dm_key)i), &k), 0);
        assert_int_equal(k, i);
        if (i != DM_KEY_LOCK)
            assert_int_equal(strncmp(dm_keys_suffix(k) + 1, dm_keys_kind(k),
                                     strlen(dm_keys_kind(k))), 0);
    }
    enum dm_key k;
    assert_int_equal(dm_keys_kind_parse("tokens", &k), -1);
    assert_int_equal(dm_keys_kind_parse("", &k), -1);
}

/* release.lua's header: KEYS[1] lock, [2] holder, [3] token, [4] queue,
 * [5] qtime, [6] lost. */
static void test_release_keys_are_in_the_scripts_order(void **s)
{
    (void)s;
    static const enum dm_key want[] = { DM_KEY_LOCK, DM_KEY_HOLDER, DM_KEY_TOKEN,
                                        DM_KEY_QUEUE, DM_KEY_QTIME, DM_KEY_LOST };
    assert_int_equal(DM_KEYS_RELEASE_N, sizeof want / sizeof want[0]);
    for (int i = 0; i < DM_KEYS_RELEASE_N; i++)
        assert_int_equal(dm_keys_release[i], want[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test(f)
        T(test_every_key_of_a_lock_carries_the_name_as_hash_tag),
        T(test_wait_channel_is_the_prefix_and_the_process_id),
        T(test_a_short_buffer_is_truncated_terminated_and_told_the_length),
        T(test_pattern_matches_one_key_of_every_lock),
        T(test_name_is_read_back_from_a_key_of_its_namespace_only),
        T(test_holder_marker_of_a_grant_names_request_owner_and_token),
        T(test_holder_marker_of_a_forced_release_names_token_and_who),
        T(test_holder_marker_of_a_delay_after_a_force_says_forced),
        T(test_holder_marker_of_a_release_and_of_a_seen_expiry),
        T(test_malformed_markers_keep_the_state_of_their_first_character),
        T(test_every_kind_has_a_name_that_reads_back),
        T(test_release_keys_are_in_the_scripts_order),
#undef T
    };
    return cmocka_run_group_tests_name("keys", tests, NULL, NULL);
}
