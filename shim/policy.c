/* policy: see policy.h. */
#include "policy.h"

enum dm_step dm_policy_on_failure(const struct dm_failure *f)
{
    if (f->fail == DM_FAIL_WRONG_NODE && !f->rediscovered)
        return DM_STEP_REDISCOVER;
    /* EBUSY alone would pass a refusing server (NOPERM, READONLY,
     * WRONGTYPE...) off as a busy lock, forever: the caller logs why. */
    if (f->trylock)
        return DM_STEP_EBUSY;
    if (f->down == DM_DOWN_ERROR)
        return DM_STEP_EAGAIN;
    if (f->down == DM_DOWN_LOCAL && f->fail == DM_FAIL_NOCONN)
        return DM_STEP_LOCAL;
    /* A withdrawal that just failed is not tried again past the deadline. */
    if (f->left_ms == 0)
        return DM_STEP_ETIMEDOUT;
    /* A stale connection fails fast: withdraw at once. */
    if (f->fail == DM_FAIL_NOREPLY && !f->withdrawing)
        return DM_STEP_WITHDRAW;
    return DM_STEP_BACKOFF;
}
