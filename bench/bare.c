/* bare: the cost of interposing itself, for the unmapped pair's context.
 * A preloaded library whose pthread_mutex_lock and pthread_mutex_unlock
 * check nothing and jump straight to glibc's (found with dlsym(RTLD_NEXT)):
 * what any LD_PRELOAD interposer of these calls costs a program before it
 * asks a single question about the mutex. `make bench` runs passthrough
 * under it beside the plain and the shim runs. Not a part of dmutex. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int (*next_lock)(pthread_mutex_t *);
static int (*next_unlock)(pthread_mutex_t *);

__attribute__((constructor)) static void bare_init(void)
{
    next_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    next_unlock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_unlock");
    if (!next_lock || !next_unlock) {
        fprintf(stderr, "bare: dlsym(RTLD_NEXT) found no pthread_mutex_lock/unlock\n");
        abort();
    }
}

__attribute__((visibility("default"))) int pthread_mutex_lock(pthread_mutex_t *m)
{
    return next_lock(m);
}

__attribute__((visibility("default"))) int pthread_mutex_unlock(pthread_mutex_t *m)
{
    return next_unlock(m);
}
