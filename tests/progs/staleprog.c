/* staleprog: a program that frees a mapped heap mutex without destroying
 * it, after which the shim allocates its own record of another name in that
 * memory (tests/test_posix.c, "stale address").
 *
 *   staleprog PREFIX
 *
 * 1. A heap mutex S is named PREFIX"stale" (dmutex_name), locked and
 *    unlocked once, then its memory is given up without
 *    pthread_mutex_destroy: the shim still has S's address mapped.
 * 2. The program's calloc hands that memory to the next record of a name
 *    the shim allocates (its size is sizeof(struct dm_name)), placed so that
 *    the record's own mutex `mu` is at S's address; a mutex F is named
 *    PREFIX"fresh", which allocates that record.
 * 3. F is locked, its fencing token read (dmutex_token, which takes the
 *    record's `mu`), F unlocked.
 *
 * The shim's own mutex is not the program's: locking it must not take the
 * cluster lock of PREFIX"stale". The test counts the scripts the server
 * ran: two sections, four calls. Prints "stale trap=T token=K" (T: 1 when
 * the shim took the prepared memory, K: F's token, nonzero). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../shim/mapped_impl.h"

extern void *__libc_calloc(size_t, size_t);

static void *_Atomic trap;      /* handed to the next calloc of a record */

/* Exported (-rdynamic), so the shim's calls bind here. */
void *calloc(size_t n, size_t size)
{
    if (n == 1 && size == sizeof(struct dm_name)) {
        void *b = __atomic_exchange_n(&trap, NULL, __ATOMIC_ACQ_REL);
        if (b) {
            memset(b, 0, size);
            return b;
        }
    }
    return __libc_calloc(n, size);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: staleprog PREFIX\n");
        return 2;
    }
    int (*name_fn)(pthread_mutex_t *, const char *);
    uint64_t (*token_fn)(pthread_mutex_t *);
    *(void **)&name_fn = dlsym(RTLD_DEFAULT, "dmutex_name");
    *(void **)&token_fn = dlsym(RTLD_DEFAULT, "dmutex_token");
    if (!name_fn || !token_fn) {
        fprintf(stderr, "staleprog: no dmutex_name (run it under the shim)\n");
        return 2;
    }
    char stale[96], fresh[96];
    snprintf(stale, sizeof stale, "%sstale", argv[1]);
    snprintf(fresh, sizeof fresh, "%sfresh", argv[1]);

    /* Room for a record; S where the record's mutex goes. The memory is
     * never given back to malloc: the program keeps it to hand over. */
    struct dm_name *room = __libc_calloc(1, sizeof *room);
    pthread_mutex_t *s = &room->mu;
    if (!room || pthread_mutex_init(s, NULL) || name_fn(s, stale) ||
        pthread_mutex_lock(s) || pthread_mutex_unlock(s)) {
        fprintf(stderr, "staleprog: cannot name and lock %s\n", stale);
        return 1;
    }
    /* "freed" without pthread_mutex_destroy */
    __atomic_store_n(&trap, room, __ATOMIC_RELEASE);

    pthread_mutex_t *f = malloc(sizeof *f);
    if (!f || pthread_mutex_init(f, NULL) || name_fn(f, fresh)) {
        fprintf(stderr, "staleprog: cannot name %s\n", fresh);
        return 1;
    }
    int taken = __atomic_load_n(&trap, __ATOMIC_ACQUIRE) == NULL;
    if (pthread_mutex_lock(f)) {
        fprintf(stderr, "staleprog: cannot lock %s\n", fresh);
        return 1;
    }
    unsigned long long token = token_fn(f);
    pthread_mutex_unlock(f);
    printf("stale trap=%d token=%llu\n", taken, token);
    fflush(stdout);
    return 0;
}
