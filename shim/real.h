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

/* The list, written once: the struct, its first resolvers and the lookup
 * (real.c) are generated from it. Each entry: how it returns (R: a value,
 * V: nothing, N: never), the type, the member, glibc's symbol, the symbol
 * version to ask for (NULL: the default), the parameters, the arguments. */
#define DM_REAL_FUNCS(X)                                                                           \
    X(R, int, mutex_init, "pthread_mutex_init", NULL,                                              \
      (pthread_mutex_t *m, const pthread_mutexattr_t *a), (m, a))                                  \
    X(R, int, mutex_destroy, "pthread_mutex_destroy", NULL, (pthread_mutex_t *m), (m))             \
    X(R, int, mutex_lock, "pthread_mutex_lock", NULL, (pthread_mutex_t *m), (m))                   \
    X(R, int, mutex_trylock, "pthread_mutex_trylock", NULL, (pthread_mutex_t *m), (m))             \
    X(R, int, mutex_timedlock, "pthread_mutex_timedlock", NULL,                                    \
      (pthread_mutex_t *m, const struct timespec *t), (m, t))                                      \
    X(R, int, mutex_clocklock, "pthread_mutex_clocklock", NULL,                                    \
      (pthread_mutex_t *m, clockid_t c, const struct timespec *t), (m, c, t))                      \
    X(R, int, mutex_unlock, "pthread_mutex_unlock", NULL, (pthread_mutex_t *m), (m))               \
    X(R, int, mutex_consistent, "pthread_mutex_consistent", NULL, (pthread_mutex_t *m), (m))       \
    /* The condvar functions exist in two ABIs on x86_64; a plain dlsym may                     \
     * hand back the old GLIBC_2.2.5 one, which uses another layout. */                           \
    X(R, int, cond_wait, "pthread_cond_wait", "GLIBC_2.3.2",                                       \
      (pthread_cond_t *c, pthread_mutex_t *m), (c, m))                                             \
    X(R, int, cond_timedwait, "pthread_cond_timedwait", "GLIBC_2.3.2",                             \
      (pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t), (c, m, t))                \
    X(R, int, cond_clockwait, "pthread_cond_clockwait", NULL,                                      \
      (pthread_cond_t *c, pthread_mutex_t *m, clockid_t k, const struct timespec *t),              \
      (c, m, k, t))                                                                                \
    X(R, int, cond_signal, "pthread_cond_signal", "GLIBC_2.3.2", (pthread_cond_t *c), (c))         \
    X(R, int, cond_broadcast, "pthread_cond_broadcast", "GLIBC_2.3.2", (pthread_cond_t *c), (c))   \
    X(R, int, cond_init, "pthread_cond_init", "GLIBC_2.3.2",                                       \
      (pthread_cond_t *c, const pthread_condattr_t *a), (c, a))                                    \
    X(R, int, cond_destroy, "pthread_cond_destroy", "GLIBC_2.3.2", (pthread_cond_t *c), (c))       \
    X(R, void *, dlopen, "dlopen", NULL, (const char *file, int flags), (file, flags))             \
    X(R, int, dlclose, "dlclose", NULL, (void *handle), (handle))                                  \
    /* the rwlock calls (preload hands unlisted rwlocks to them;                                  \
     * libdmutex-trace.so records them) */                                                        \
    X(R, int, rwlock_init, "pthread_rwlock_init", NULL,                                            \
      (pthread_rwlock_t *l, const pthread_rwlockattr_t *a), (l, a))                                \
    X(R, int, rwlock_rdlock, "pthread_rwlock_rdlock", NULL, (pthread_rwlock_t *l), (l))            \
    X(R, int, rwlock_tryrdlock, "pthread_rwlock_tryrdlock", NULL, (pthread_rwlock_t *l), (l))      \
    X(R, int, rwlock_timedrdlock, "pthread_rwlock_timedrdlock", NULL,                              \
      (pthread_rwlock_t *l, const struct timespec *t), (l, t))                                     \
    X(R, int, rwlock_clockrdlock, "pthread_rwlock_clockrdlock", NULL,                              \
      (pthread_rwlock_t *l, clockid_t c, const struct timespec *t), (l, c, t))                     \
    X(R, int, rwlock_wrlock, "pthread_rwlock_wrlock", NULL, (pthread_rwlock_t *l), (l))            \
    X(R, int, rwlock_trywrlock, "pthread_rwlock_trywrlock", NULL, (pthread_rwlock_t *l), (l))      \
    X(R, int, rwlock_timedwrlock, "pthread_rwlock_timedwrlock", NULL,                              \
      (pthread_rwlock_t *l, const struct timespec *t), (l, t))                                     \
    X(R, int, rwlock_clockwrlock, "pthread_rwlock_clockwrlock", NULL,                              \
      (pthread_rwlock_t *l, clockid_t c, const struct timespec *t), (l, c, t))                     \
    X(R, int, rwlock_destroy, "pthread_rwlock_destroy", NULL, (pthread_rwlock_t *l), (l))          \
    X(R, int, rwlock_unlock, "pthread_rwlock_unlock", NULL, (pthread_rwlock_t *l), (l))            \
    /* C11 <threads.h>: glibc's mtx_* and cnd_* call its internal pthread                         \
     * functions, never the exported ones, so they are interposed too (preload                    \
     * hands unmapped ones to these; libdmutex-trace.so records them). glibc                      \
     * 2.34 moved them from libpthread (GLIBC_2.28) into libc (GLIBC_2.34,                        \
     * the same code under both): the default version is the one a program                        \
     * linked today calls. */                                                                     \
    X(R, int, mtx_init, "mtx_init", NULL, (mtx_t *m, int type), (m, type))                         \
    X(R, int, mtx_lock, "mtx_lock", NULL, (mtx_t *m), (m))                                         \
    X(R, int, mtx_trylock, "mtx_trylock", NULL, (mtx_t *m), (m))                                   \
    X(R, int, mtx_timedlock, "mtx_timedlock", NULL, (mtx_t *m, const struct timespec *t), (m, t))  \
    X(R, int, mtx_unlock, "mtx_unlock", NULL, (mtx_t *m), (m))                                     \
    X(V, void, mtx_destroy, "mtx_destroy", NULL, (mtx_t *m), (m))                                  \
    X(R, int, cnd_init, "cnd_init", NULL, (cnd_t *c), (c))                                         \
    X(R, int, cnd_signal, "cnd_signal", NULL, (cnd_t *c), (c))                                     \
    X(R, int, cnd_broadcast, "cnd_broadcast", NULL, (cnd_t *c), (c))                               \
    X(R, int, cnd_wait, "cnd_wait", NULL, (cnd_t *c, mtx_t *m), (c, m))                            \
    X(R, int, cnd_timedwait, "cnd_timedwait", NULL,                                                \
      (cnd_t *c, mtx_t *m, const struct timespec *t), (c, m, t))                                   \
    X(V, void, cnd_destroy, "cnd_destroy", NULL, (cnd_t *c), (c))                                  \
    /* the calls that end the process image (preload reads the releases                           \
     * still unread first; the exec family's other members are built on                          \
     * these) */                                                                                  \
    X(R, int, execve, "execve", NULL, (const char *f, char *const a[], char *const e[]), (f, a, e)) \
    X(R, int, execvpe, "execvpe", NULL, (const char *f, char *const a[], char *const e[]),         \
      (f, a, e))                                                                                   \
    X(R, int, fexecve, "fexecve", NULL, (int fd, char *const a[], char *const e[]), (fd, a, e))    \
    X(N, void, exit_now, "_exit", NULL, (int status), (status))

/* How an entry's kind shows in a declaration and in a call's statement. */
#define DM_REAL_ATTR_R
#define DM_REAL_ATTR_V
#define DM_REAL_ATTR_N __attribute__((noreturn))
#define DM_REAL_RET_R  return
#define DM_REAL_RET_V
#define DM_REAL_RET_N

#define DM_REAL_MEMBER(kind, type, member, sym, ver, params, args) \
    type (*member) params DM_REAL_ATTR_##kind;
struct dm_real {
    DM_REAL_FUNCS(DM_REAL_MEMBER)
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
