/* real: the table of glibc's own functions behind the interposed ones, and
 * their resolution. Next to the bottom of the shim: it includes nothing of
 * the shim but log.h (log includes nothing). Every module that must call
 * glibc underneath the exported symbols goes through dm_real: preload's
 * passthrough, mapped's real locks, startup's loader calls, net's dlopen of
 * libssl, and every module's own locks (dm_lock and friends, below). */
#ifndef DM_REAL_H
#define DM_REAL_H

#include <errno.h>
#include <pthread.h>
#include <threads.h>
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
    int (*cond_signal)(pthread_cond_t *);
    int (*cond_broadcast)(pthread_cond_t *);
    int (*cond_init)(pthread_cond_t *, const pthread_condattr_t *);
    int (*cond_destroy)(pthread_cond_t *);
    void *(*dlopen)(const char *, int);
    int (*dlclose)(void *);
    /* the rwlock calls (preload hands unlisted rwlocks to them; libdmutex-trace.so records them) */
    int (*rwlock_init)(pthread_rwlock_t *, const pthread_rwlockattr_t *);
    int (*rwlock_rdlock)(pthread_rwlock_t *);
    int (*rwlock_tryrdlock)(pthread_rwlock_t *);
    int (*rwlock_timedrdlock)(pthread_rwlock_t *, const struct timespec *);
    int (*rwlock_clockrdlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
    int (*rwlock_wrlock)(pthread_rwlock_t *);
    int (*rwlock_trywrlock)(pthread_rwlock_t *);
    int (*rwlock_timedwrlock)(pthread_rwlock_t *, const struct timespec *);
    int (*rwlock_clockwrlock)(pthread_rwlock_t *, clockid_t, const struct timespec *);
    int (*rwlock_destroy)(pthread_rwlock_t *);
    int (*rwlock_unlock)(pthread_rwlock_t *);
    /* C11 <threads.h>: glibc's mtx_* and cnd_* call its internal pthread
     * functions, never the exported ones, so they are interposed too
     * (preload hands unmapped ones to these; libdmutex-trace.so records them) */
    int (*mtx_init)(mtx_t *, int);
    int (*mtx_lock)(mtx_t *);
    int (*mtx_trylock)(mtx_t *);
    int (*mtx_timedlock)(mtx_t *, const struct timespec *);
    int (*mtx_unlock)(mtx_t *);
    void (*mtx_destroy)(mtx_t *);
    int (*cnd_init)(cnd_t *);
    int (*cnd_signal)(cnd_t *);
    int (*cnd_broadcast)(cnd_t *);
    int (*cnd_wait)(cnd_t *, mtx_t *);
    int (*cnd_timedwait)(cnd_t *, mtx_t *, const struct timespec *);
    void (*cnd_destroy)(cnd_t *);
    /* the calls that end the process image (preload reads the releases
     * still unread first; the exec family's other members are built on these) */
    int (*execve)(const char *, char *const[], char *const[]);
    int (*execvpe)(const char *, char *const[], char *const[]);
    int (*fexecve)(int, char *const[], char *const[]);
    void (*exit_now)(int) __attribute__((noreturn));     /* _exit */
};

/* Each member starts as a resolver that fills the whole table with
 * dlsym(RTLD_NEXT) / dlvsym and then calls through, so a pthread call that
 * comes before the shim's constructor (another library's constructor)
 * still works, and the fast path never tests for NULL. Hidden, so that the
 * passthrough path reaches it with one PC-relative load, not through the
 * GOT. */
extern struct dm_real dm_real __attribute__((visibility("hidden")));

/* Fills the table now (the constructor calls it; racing callers store the
 * same values). A function glibc does not have ends the process with
 * DM_REAL_EX_MISSING before anything could run unprotected. */
void dm_real_resolve(void);

/* The shim's own mutexes, conds and rwlocks. Every module but the
 * interposers (preload, trace/record) locks its own state through these,
 * never through the pthread names: those bind, at run time, to the shim's
 * own exported wrappers, which would look each internal lock up among the
 * program's mapped mutexes (a stale mapped address, a heap mutex freed
 * without destroy, would make an internal mutex a cluster lock) and run
 * the shim inside itself. tests/internal_locks.test.sh holds every object
 * of shim/ to it. */
static inline int dm_lock(pthread_mutex_t *m) { return dm_real.mutex_lock(m); }
static inline int dm_unlock(pthread_mutex_t *m) { return dm_real.mutex_unlock(m); }
static inline int dm_lock_clock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{ return dm_real.mutex_clocklock(m, c, t); }
static inline int dm_mutex_destroy(pthread_mutex_t *m) { return dm_real.mutex_destroy(m); }
static inline int dm_cv_init(pthread_cond_t *c, const pthread_condattr_t *a)
{ return dm_real.cond_init(c, a); }
static inline int dm_cv_destroy(pthread_cond_t *c) { return dm_real.cond_destroy(c); }
static inline int dm_cv_wait(pthread_cond_t *c, pthread_mutex_t *m) { return dm_real.cond_wait(c, m); }
static inline int dm_cv_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t)
{ return dm_real.cond_timedwait(c, m, t); }
static inline int dm_cv_signal(pthread_cond_t *c) { return dm_real.cond_signal(c); }
static inline int dm_cv_broadcast(pthread_cond_t *c) { return dm_real.cond_broadcast(c); }
static inline int dm_rw_init(pthread_rwlock_t *l, const pthread_rwlockattr_t *a)
{ return dm_real.rwlock_init(l, a); }
static inline int dm_rw_rdlock(pthread_rwlock_t *l) { return dm_real.rwlock_rdlock(l); }
static inline int dm_rw_wrlock(pthread_rwlock_t *l) { return dm_real.rwlock_wrlock(l); }
static inline int dm_rw_unlock(pthread_rwlock_t *l) { return dm_real.rwlock_unlock(l); }

/* A pthread-level result (0 or an errno value) as a C11 <threads.h> call
 * returns it, the way glibc's own mtx_* and cnd_* turn the result of the
 * pthread function each one calls into theirs (thrd_err_map in glibc's
 * sysdeps/pthread/thrd_priv.h): EBUSY is thrd_busy, ETIMEDOUT
 * thrd_timedout, ENOMEM thrd_nomem, anything else (EAGAIN of
 * on_redis_down = "error", EPERM, EOWNERDEAD) thrd_error. */
static inline int dm_real_thrd(int err)
{
    switch (err) {
    case 0:
        return thrd_success;
    case EBUSY:
        return thrd_busy;
    case ETIMEDOUT:
        return thrd_timedout;
    case ENOMEM:
        return thrd_nomem;
    default:
        return thrd_error;
    }
}

_Static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t) &&
               _Alignof(mtx_t) == _Alignof(pthread_mutex_t),
               "glibc's mtx_t is a pthread_mutex_t: the shim maps one as the other");
_Static_assert(sizeof(cnd_t) == sizeof(pthread_cond_t) &&
               _Alignof(cnd_t) == _Alignof(pthread_cond_t),
               "glibc's cnd_t is a pthread_cond_t: the shim lists one as the other");

/* The exit status of a process whose glibc lacks one of the functions:
 * the same as a config error (config.h's DM_EX_CONFIG, sysexits.h
 * EX_CONFIG), checked where both are known (startup.c). */
#define DM_REAL_EX_MISSING 78

#endif
