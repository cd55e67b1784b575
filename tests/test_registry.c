/* test_registry: the address -> entry table the passthrough path probes
 * (shim/registry.h), on its own: no shim, no Redis. Addresses are made up
 * (8-byte aligned numbers, never dereferenced), each test in its own range,
 * because the registry is one table per process and the tests share it. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "harness.h"
#include "registry.h"

#define MUTEX_STRIDE   40               /* sizeof(pthread_mutex_t): neighbours in an array */
#define GROW_N         20000            /* far beyond the first table (64 slots) */
#define RACE_KEPT      256              /* addresses a reader must always find */
#define RACE_ADDED     50000            /* added meanwhile: many grows */
#define RACE_BOUND_MS  120000           /* generous: the machine is shared and slow */

/* The i-th made-up mutex of range `base`, and a value that names it. */
static const void *addr_of(uintptr_t base, size_t i)
{
    return (const void *)(base + i * MUTEX_STRIDE);
}

static void *value_of(uintptr_t base, size_t i)
{
    return (void *)(base + i * MUTEX_STRIDE + 1);
}

static int filter_says_maybe(const void *addr)
{
    return dm_registry_filter[dm_registry_filter_index((uintptr_t)addr)] != 0;
}

/* ---- add, lookup, remove ------------------------------------------------- */

static void test_add_then_lookup_finds_the_value_and_nothing_else(void **state)
{
    (void)state;
    const uintptr_t base = 0x10000000;
    size_t before = dm_registry_count();
    assert_int_equal(dm_registry_add(addr_of(base, 0), value_of(base, 0)), 0);
    assert_ptr_equal(dm_registry_lookup(addr_of(base, 0)), value_of(base, 0));
    assert_null(dm_registry_lookup(addr_of(base, 1)));
    assert_int_equal(dm_registry_count(), before + 1);
    /* Adding again replaces the value, and counts once. */
    assert_int_equal(dm_registry_add(addr_of(base, 0), value_of(base, 7)), 0);
    assert_ptr_equal(dm_registry_lookup(addr_of(base, 0)), value_of(base, 7));
    assert_int_equal(dm_registry_count(), before + 1);
    assert_ptr_equal(dm_registry_remove(addr_of(base, 0)), value_of(base, 7));
    assert_int_equal(dm_registry_count(), before);
}

static void test_remove_returns_the_value_once_and_the_address_is_gone(void **state)
{
    (void)state;
    const uintptr_t base = 0x20000000;
    for (size_t i = 0; i < 8; i++)
        assert_int_equal(dm_registry_add(addr_of(base, i), value_of(base, i)), 0);
    assert_ptr_equal(dm_registry_remove(addr_of(base, 3)), value_of(base, 3));
    assert_null(dm_registry_remove(addr_of(base, 3)));
    assert_null(dm_registry_lookup(addr_of(base, 3)));
    /* Its neighbours (perhaps probed past its tombstone) are still there. */
    for (size_t i = 0; i < 8; i++)
        if (i != 3)
            assert_ptr_equal(dm_registry_lookup(addr_of(base, i)), value_of(base, i));
    /* And it can come back. */
    assert_int_equal(dm_registry_add(addr_of(base, 3), value_of(base, 3)), 0);
    assert_ptr_equal(dm_registry_lookup(addr_of(base, 3)), value_of(base, 3));
    for (size_t i = 0; i < 8; i++)
        assert_ptr_equal(dm_registry_remove(addr_of(base, i)), value_of(base, i));
}

static void test_null_and_the_reserved_keys_are_refused(void **state)
{
    (void)state;
    assert_int_equal(dm_registry_add((const void *)DM_REGISTRY_EMPTY, (void *)1), EINVAL);
    assert_int_equal(dm_registry_add((const void *)DM_REGISTRY_DELETED, (void *)1), EINVAL);
    assert_null(dm_registry_lookup(NULL));
}

/* ---- growth --------------------------------------------------------------- */

static void test_grows_far_past_its_first_table_and_loses_nothing(void **state)
{
    (void)state;
    const uintptr_t base = 0x30000000;
    size_t before = dm_registry_count();
    for (size_t i = 0; i < GROW_N; i++)
        assert_int_equal(dm_registry_add(addr_of(base, i), value_of(base, i)), 0);
    assert_int_equal(dm_registry_count(), before + GROW_N);
    for (size_t i = 0; i < GROW_N; i++)
        if (dm_registry_lookup(addr_of(base, i)) != value_of(base, i))
            fail_msg("address %zu of %d lost after growing", i, GROW_N);
    /* Remove every other one: the rest stay, the removed are gone. */
    for (size_t i = 0; i < GROW_N; i += 2)
        assert_ptr_equal(dm_registry_remove(addr_of(base, i)), value_of(base, i));
    for (size_t i = 0; i < GROW_N; i++) {
        const void *want = i % 2 ? value_of(base, i) : NULL;
        if (dm_registry_lookup(addr_of(base, i)) != want)
            fail_msg("address %zu: wrong answer after removing every other one", i);
    }
    /* Adding again over the tombstones works (and may rebuild the table). */
    for (size_t i = 0; i < GROW_N; i += 2)
        assert_int_equal(dm_registry_add(addr_of(base, i), value_of(base, i)), 0);
    for (size_t i = 0; i < GROW_N; i++)
        assert_ptr_equal(dm_registry_lookup(addr_of(base, i)), value_of(base, i));
    for (size_t i = 0; i < GROW_N; i++)
        dm_registry_remove(addr_of(base, i));
    assert_int_equal(dm_registry_count(), before);
}

/* ---- the filter ----------------------------------------------------------- */

static void test_the_filter_never_says_no_for_a_mapped_address(void **state)
{
    (void)state;
    const uintptr_t base = 0x40000000;
    /* More addresses than filter bytes: every byte pattern is exercised. */
    enum { N = DM_REGISTRY_FILTER_SIZE * 2 };
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(dm_registry_add(addr_of(base, i), value_of(base, i)), 0);
        if (!filter_says_maybe(addr_of(base, i)))
            fail_msg("the filter says no for mapped address %zu", i);
    }
    for (size_t i = 0; i < N; i++)
        if (!filter_says_maybe(addr_of(base, i)))
            fail_msg("the filter says no for address %zu after later adds", i);
    for (size_t i = 0; i < N; i++)
        dm_registry_remove(addr_of(base, i));
}

#define COUNT_BASE 0x50000000

/* dm_registry_foreach's callback: counts the entries of COUNT_BASE's range
 * (checking their values) and all entries. */
static void count_entry(const void *addr, void *value, void *arg)
{
    size_t *seen = arg;
    uintptr_t a = (uintptr_t)addr;
    if (a >= COUNT_BASE && a < COUNT_BASE + 100 * MUTEX_STRIDE) {
        assert_ptr_equal(value, (void *)(a + 1));
        seen[0]++;
    }
    seen[1]++;
}

static void test_count_and_foreach_see_exactly_the_live_entries(void **state)
{
    (void)state;
    const uintptr_t base = COUNT_BASE;
    size_t before = dm_registry_count();
    for (size_t i = 0; i < 100; i++)
        assert_int_equal(dm_registry_add(addr_of(base, i), value_of(base, i)), 0);
    for (size_t i = 0; i < 100; i += 4)
        dm_registry_remove(addr_of(base, i));
    assert_int_equal(dm_registry_count(), before + 75);
    size_t seen[2] = { 0, 0 };       /* entries of this range, all entries */
    dm_registry_foreach(count_entry, seen);
    assert_int_equal(seen[0], 75);
    assert_int_equal(seen[1], before + 75);
    for (size_t i = 0; i < 100; i++)
        dm_registry_remove(addr_of(base, i));
}

/* ---- readers during writes ---------------------------------------------------
 * Readers take no lock: while another thread adds (and the table is copied
 * into bigger ones again and again), a reader must still find every address
 * that was mapped before, and every address whose add has returned. */

struct race {
    uintptr_t kept_base, added_base;
    size_t added;                       /* adds that have returned (atomic) */
    int started, done;                  /* atomic */
    size_t lookups, misses;
    char why[160];
};

static void *reader(void *p)
{
    struct race *r = p;
    __atomic_store_n(&r->started, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) {
        size_t n = __atomic_load_n(&r->added, __ATOMIC_ACQUIRE);
        for (size_t i = 0; i < RACE_KEPT; i++, r->lookups++)
            if (dm_registry_lookup(addr_of(r->kept_base, i)) != value_of(r->kept_base, i)) {
                if (!r->misses++)
                    snprintf(r->why, sizeof r->why, "kept address %zu not found", i);
            }
        /* The newest adds, and a spread of older ones. */
        for (size_t k = 0; k < 64 && k < n; k++, r->lookups++) {
            size_t i = k < 32 ? n - 1 - k : (k * 7919) % n;
            if (dm_registry_lookup(addr_of(r->added_base, i)) != value_of(r->added_base, i)) {
                if (!r->misses++)
                    snprintf(r->why, sizeof r->why, "address %zu not found after its add "
                             "returned (%zu added)", i, n);
            }
        }
    }
    return NULL;
}

static void test_lookups_during_concurrent_adds_find_every_published_address(void **state)
{
    (void)state;
    struct race r = { .kept_base = 0x60000000, .added_base = 0x70000000 };
    for (size_t i = 0; i < RACE_KEPT; i++)
        assert_int_equal(dm_registry_add(addr_of(r.kept_base, i), value_of(r.kept_base, i)), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, reader, &r), 0);
    while (!__atomic_load_n(&r.started, __ATOMIC_ACQUIRE))
        sched_yield();
    long long end = th_now_ms() + RACE_BOUND_MS;
    for (size_t i = 0; i < RACE_ADDED && th_now_ms() < end; i++) {
        assert_int_equal(dm_registry_add(addr_of(r.added_base, i), value_of(r.added_base, i)), 0);
        __atomic_store_n(&r.added, i + 1, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&r.done, 1, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    if (r.misses)
        fail_msg("%zu of %zu lookups missed: first: %s", r.misses, r.lookups, r.why);
    assert_true(r.lookups > 0);
    size_t n = r.added;
    for (size_t i = 0; i < n; i++)
        dm_registry_remove(addr_of(r.added_base, i));
    for (size_t i = 0; i < RACE_KEPT; i++)
        dm_registry_remove(addr_of(r.kept_base, i));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_then_lookup_finds_the_value_and_nothing_else),
        cmocka_unit_test(test_remove_returns_the_value_once_and_the_address_is_gone),
        cmocka_unit_test(test_null_and_the_reserved_keys_are_refused),
        cmocka_unit_test(test_grows_far_past_its_first_table_and_loses_nothing),
        cmocka_unit_test(test_the_filter_never_says_no_for_a_mapped_address),
        cmocka_unit_test(test_count_and_foreach_see_exactly_the_live_entries),
        cmocka_unit_test(test_lookups_during_concurrent_adds_find_every_published_address),
    };
    return cmocka_run_group_tests(tests, th_group_setup, th_group_teardown);
}
