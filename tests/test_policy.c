/* test_policy: what a failed store call means for a lock call
 * (shim/policy.c), held without a server: every kind of failure under
 * every on_redis_down, for a trylock and a waiting lock, before and past
 * the deadline. docs/failures.md tells a user the same rules: a trylock
 * returns EBUSY, "error" EAGAIN, "local" locks alone only when nothing
 * reached the server, "block" waits until the deadline, and a request
 * with no reply is withdrawn before anything else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "policy.h"

static const enum dm_fail fails[] = { DM_FAIL_NOCONN, DM_FAIL_NOREPLY, DM_FAIL_REFUSED,
                                      DM_FAIL_WRONG_NODE, DM_FAIL_OTHER };
static const enum dm_on_redis_down downs[] = { DM_DOWN_BLOCK, DM_DOWN_ERROR, DM_DOWN_LOCAL };
#define N(a) (sizeof a / sizeof a[0])

static enum dm_step step(enum dm_fail fail, int trylock, enum dm_on_redis_down down,
                         int withdrawing, int rediscovered, long left_ms)
{
    struct dm_failure f = { fail, trylock, down, withdrawing, rediscovered, left_ms };
    return dm_policy_on_failure(&f);
}

/* A wrong node has run nothing: asked again at once, once, whatever the
 * call and the policy; the second time it is a failure like the others. */
static void test_a_wrong_node_is_asked_again_at_once_once(void **s)
{
    (void)s;
    for (size_t d = 0; d < N(downs); d++)
        for (int t = 0; t < 2; t++) {
            assert_int_equal(step(DM_FAIL_WRONG_NODE, t, downs[d], 0, 0, -1), DM_STEP_REDISCOVER);
            assert_int_not_equal(step(DM_FAIL_WRONG_NODE, t, downs[d], 0, 1, -1),
                                 DM_STEP_REDISCOVER);
        }
}

/* A trylock never waits and never locks alone: EBUSY on any failure. */
static void test_a_trylock_returns_ebusy_on_any_failure(void **s)
{
    (void)s;
    for (size_t f = 0; f < N(fails); f++)
        for (size_t d = 0; d < N(downs); d++)
            for (int w = 0; w < 2; w++)
                assert_int_equal(step(fails[f], 1, downs[d], w, 1, -1), DM_STEP_EBUSY);
}

/* on_redis_down = "error": EAGAIN on any failure, deadline or not. */
static void test_error_mode_returns_eagain_on_any_failure(void **s)
{
    (void)s;
    for (size_t f = 0; f < N(fails); f++)
        for (long left = -1; left <= 1; left++)
            assert_int_equal(step(fails[f], 0, DM_DOWN_ERROR, 0, 1, left), DM_STEP_EAGAIN);
}

/* on_redis_down = "local": this process alone only when no connection
 * could be made. A server that answers (an error reply, a refused
 * certificate) or may have run the request is no reason to. */
static void test_local_mode_locks_alone_only_when_nothing_reached_the_server(void **s)
{
    (void)s;
    assert_int_equal(step(DM_FAIL_NOCONN, 0, DM_DOWN_LOCAL, 0, 0, -1), DM_STEP_LOCAL);
    assert_int_equal(step(DM_FAIL_NOCONN, 0, DM_DOWN_LOCAL, 1, 0, 0), DM_STEP_LOCAL);
    assert_int_equal(step(DM_FAIL_REFUSED, 0, DM_DOWN_LOCAL, 0, 0, -1), DM_STEP_BACKOFF);
    assert_int_equal(step(DM_FAIL_OTHER, 0, DM_DOWN_LOCAL, 0, 0, -1), DM_STEP_BACKOFF);
    assert_int_equal(step(DM_FAIL_NOREPLY, 0, DM_DOWN_LOCAL, 0, 0, -1), DM_STEP_WITHDRAW);
    assert_int_equal(step(DM_FAIL_WRONG_NODE, 0, DM_DOWN_LOCAL, 0, 1, -1), DM_STEP_BACKOFF);
}

/* "block" (and "local" for what reached the server) waits: past the
 * deadline it gives up, a withdrawal that failed included. */
static void test_a_waiting_lock_times_out_past_its_deadline(void **s)
{
    (void)s;
    for (size_t f = 0; f < N(fails); f++)
        for (int w = 0; w < 2; w++)
            assert_int_equal(step(fails[f], 0, DM_DOWN_BLOCK, w, 1, 0), DM_STEP_ETIMEDOUT);
    assert_int_equal(step(DM_FAIL_REFUSED, 0, DM_DOWN_LOCAL, 0, 1, 0), DM_STEP_ETIMEDOUT);
}

/* A request with no reply may still run: withdrawn at once (a stale
 * connection fails fast), and a failed withdrawal waits the backoff
 * before it is tried again; anything else waits the backoff. */
static void test_an_unanswered_request_is_withdrawn_at_once_else_backoff(void **s)
{
    (void)s;
    assert_int_equal(step(DM_FAIL_NOREPLY, 0, DM_DOWN_BLOCK, 0, 0, -1), DM_STEP_WITHDRAW);
    assert_int_equal(step(DM_FAIL_NOREPLY, 0, DM_DOWN_BLOCK, 0, 0, 500), DM_STEP_WITHDRAW);
    assert_int_equal(step(DM_FAIL_NOREPLY, 0, DM_DOWN_BLOCK, 1, 0, -1), DM_STEP_BACKOFF);
    assert_int_equal(step(DM_FAIL_NOCONN, 0, DM_DOWN_BLOCK, 0, 0, -1), DM_STEP_BACKOFF);
    assert_int_equal(step(DM_FAIL_REFUSED, 0, DM_DOWN_BLOCK, 0, 0, 500), DM_STEP_BACKOFF);
    assert_int_equal(step(DM_FAIL_OTHER, 0, DM_DOWN_BLOCK, 0, 0, -1), DM_STEP_BACKOFF);
    assert_int_equal(step(DM_FAIL_WRONG_NODE, 0, DM_DOWN_BLOCK, 0, 1, -1), DM_STEP_BACKOFF);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_wrong_node_is_asked_again_at_once_once),
        cmocka_unit_test(test_a_trylock_returns_ebusy_on_any_failure),
        cmocka_unit_test(test_error_mode_returns_eagain_on_any_failure),
        cmocka_unit_test(test_local_mode_locks_alone_only_when_nothing_reached_the_server),
        cmocka_unit_test(test_a_waiting_lock_times_out_past_its_deadline),
        cmocka_unit_test(test_an_unanswered_request_is_withdrawn_at_once_else_backoff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
