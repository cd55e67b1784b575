/* policy: what a failed store call means for a lock call, decided without
 * I/O, so that on_redis_down's rules can be held to by a test without a
 * server (tests/test_policy.c). The lock protocol (lock.c) turns the
 * store's error into a struct dm_failure, asks, and acts: logs, withdraws
 * what may still run, sleeps, returns. Knows the config's on_redis_down,
 * nothing of Redis. */
#ifndef DM_POLICY_H
#define DM_POLICY_H

#include "config.h"

/* What is known of a failed call. */
enum dm_fail {
    DM_FAIL_NOCONN,     /* nothing reached the store: no connection could be made */
    DM_FAIL_NOREPLY,    /* sent, no reply: it may have run, or may run later */
    DM_FAIL_REFUSED,    /* the store answered an error (it is there, and refuses) */
    DM_FAIL_WRONG_NODE, /* not the primary, or not the slot's node: nothing ran */
    DM_FAIL_OTHER,      /* nothing ran, but the store was reached (TLS refused...) */
};

struct dm_failure {
    enum dm_fail fail;
    int trylock;                        /* a trylock: never waits */
    enum dm_on_redis_down down;         /* the config's on_redis_down */
    int withdrawing;                    /* the call that failed withdrew an unanswered request */
    int rediscovered;                   /* a wrong node was already asked again at once */
    long left_ms;                       /* of the call's deadline: 0 past it, -1 none */
};

/* What the lock call does next. */
enum dm_step {
    DM_STEP_REDISCOVER,     /* attempt again at once: the next connection finds the node */
    DM_STEP_WITHDRAW,       /* withdraw the unanswered request at once, then go on */
    DM_STEP_BACKOFF,        /* wait the backoff's next delay (at most left_ms), then go on */
    DM_STEP_EBUSY,          /* give up: a trylock's EBUSY, whatever the failure */
    DM_STEP_EAGAIN,         /* give up: on_redis_down = "error" */
    DM_STEP_LOCAL,          /* give up the cluster hold: this process only ("local") */
    DM_STEP_ETIMEDOUT,      /* give up: the deadline passed */
};

/* The rules, in order: a wrong node is asked again at once, once; a
 * trylock returns EBUSY; "error" returns EAGAIN; "local" locks this
 * process alone only when nothing reached the store (an error reply or a
 * refused certificate is no reason to); past the deadline, ETIMEDOUT; a
 * request with no reply is withdrawn at once; anything else waits the
 * backoff. */
enum dm_step dm_policy_on_failure(const struct dm_failure *f);

#endif
