/* interprog: a program whose `shared_lock` test_interop maps with the
 * setnx protocol (or dmutex's), to share it with other clients' locks.
 * Knows nothing of dmutex. Times are CLOCK_MONOTONIC ms, which the
 * partner scripts (tests/progs/setnx_partner.py, .js) print too.
 *
 *   interprog hold MS     lock, "locked RC T", hold MS, unlock, "unlocked RC T"
 *   interprog lock        lock, "locked RC T", unlock, "unlocked RC T"
 *   interprog trylock     trylock, "trylock RC T", unlock if it succeeded
 *
 * Prints "main" first. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "prog.h"

pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;

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
    long hold = strcmp(mode, "hold") == 0 && argc > 2 ? atol(argv[2]) : 0;
    if (strcmp(mode, "lock") != 0 && !hold) {
        say("usage: interprog hold MS | lock | trylock");
        return 2;
    }
    int rc = pthread_mutex_lock(&shared_lock);
    say("locked %s %lld", ename(rc), now_ms());
    if (rc != 0)
        return 1;
    if (hold)
        usleep((useconds_t)hold * 1000);
    rc = pthread_mutex_unlock(&shared_lock);
    say("unlocked %s %lld", ename(rc), now_ms());
    return 0;
}
