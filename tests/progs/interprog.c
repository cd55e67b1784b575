/* interprog: a program whose `shared_lock` (or recursive `nested_lock`)
 * test_interop maps with a partner protocol, setnx or redisson (or
 * dmutex's), to share it with other clients' locks.
 * Knows nothing of dmutex. Times are CLOCK_MONOTONIC ms, which the
 * partner scripts (tests/progs/setnx_partner.py, .js) print too.
 *
 *   interprog hold MS     lock, "locked RC T", hold MS, "unlocking T", unlock,
 *                         "unlocked RC T"
 *   interprog lock        lock, "locked RC T", unlock, "unlocked RC T"
 *   interprog trylock     trylock, "trylock RC T", unlock if it succeeded
 *   interprog nested MS   nested_lock twice ("locked RC T" after the first,
 *                         "nested RC T" after the second), hold MS,
 *                         unlock twice, "unlocked RC T"
 *
 * Prints "main" first. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "prog.h"

pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t nested_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static int nested(long hold)
{
    int rc = pthread_mutex_lock(&nested_lock);
    say("locked %s %lld", ename(rc), now_ms());
    if (rc != 0)
        return 1;
    rc = pthread_mutex_lock(&nested_lock);
    say("nested %s %lld", ename(rc), now_ms());
    if (rc != 0)
        return 1;
    usleep((useconds_t)hold * 1000);
    pthread_mutex_unlock(&nested_lock);
    say("unlocking %lld", now_ms());
    rc = pthread_mutex_unlock(&nested_lock);
    say("unlocked %s %lld", ename(rc), now_ms());
    return 0;
}

int main(int argc, char **argv)
{
    say("main");
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "trylock") == 0) {
        int rc = pthread_mutex_trylock(&shared_lock);
        say("trylock %s %lld", ename(rc), now_ms());
        if (rc == 0)
            pthread_mutex_unlock(&shared_lock);
        return 0;
    }
    if (strcmp(mode, "nested") == 0 && argc > 2)
        return nested(atol(argv[2]));
    long hold = strcmp(mode, "hold") == 0 && argc > 2 ? atol(argv[2]) : 0;
    if (strcmp(mode, "lock") != 0 && !hold) {
        say("usage: interprog hold MS | lock | trylock | nested MS");
        return 2;
    }
    int rc = pthread_mutex_lock(&shared_lock);
    say("locked %s %lld", ename(rc), now_ms());
    if (rc != 0)
        return 1;
    if (hold)
        usleep((useconds_t)hold * 1000);
    say("unlocking %lld", now_ms());    /* no grant elsewhere can come before this */
    rc = pthread_mutex_unlock(&shared_lock);
    say("unlocked %s %lld", ename(rc), now_ms());
    return 0;
}
