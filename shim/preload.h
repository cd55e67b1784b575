/* preload: the exported pthread_* symbols and the real functions behind
 * them. Every other module that must not go through the shim (the mapped
 * semantics calling glibc underneath) uses dm_real. */
#ifndef DM_PRELOAD_H
#define DM_PRELOAD_H

#include <pthread.h>
#include <time.h>

struct dm_real {
    int (*mutex_init)(pthread_mutex_t *, const pthread_mutexattr_t *);
    int (*mutex_destroy)(pthread_mutex_t *);
    int (*mutex_lock)(pthread_mutex_t *);
    int (*mutex_trylock)(pthread_mutex_t *);
    int (*mutex_timedlock)(pthread_mutex_t *, const struct timespec *);
    int (*mutex_clocklock)(pthread_mutex_t *, clockid_t, const struct timespec *);
    int (*mutex_unlock)(pthread_mutex_t *);
    int (*mutex_consistent)(pthread_mutex_t *);
    int (*cond_wait)(pthread_cond_t *, pthread_mutex_t *);
    int (*cond_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
    int (*cond_clockwait)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);
};

/* Each member starts as a resolver that fills the whole table with
 * dlsym(RTLD_NEXT) / dlvsym and then calls through, so a pthread call that
 * comes before the shim's constructor (another library's constructor)
 * still works, and the fast path never tests for NULL. */
extern struct dm_real dm_real;

#endif
