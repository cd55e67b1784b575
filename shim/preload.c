/* preload: the exported symbols and nothing else. Each pthread_* entry
 * point (and each C11 mtx_* and cnd_* one, the same over glibc's mtx_t
 * and cnd_t) is a few lines: probe the registry; on a miss (every unmapped
 * mutex, every unlisted condition variable) tail-call glibc through the
 * table in real.c; on a hit hand off to mapped. pthread_mutex_init,
 * pthread_cond_init and pthread_rwlock_init also ask startup whether their
 * caller is an init_site function (one load when there are none). A cond
 * wait probes the cond first (a listed one is cluster-wide, whatever its
 * mutex), then the mutex. dlopen/dlclose and the explicit API
 * (dmutex_name, dmutex_token, dmutex_rwlock_token) are thin exports over
 * startup and mapped. Nothing includes this module: it has no header, and
 * no other module calls the symbols it exports (the shim's own locks go to
 * glibc through real.h: tests/internal_locks.test.sh). Does no I/O
 * and knows nothing of Redis, of the program's symbols or of the config
 * (but whether a lock name is valid, for dmutex_name): those are startup's
 * and the modules under it. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <threads.h>
#include <unistd.h>

#include "config.h"
#include "dmutex.h"
#include "log.h"
#include "mapped.h"
#include "real.h"
#include "registry.h"
#include "startup.h"

#define DM_EXPORT __attribute__((visibility("default")))
/* The passthrough of the hottest entry points (about 30 bytes: the filter
 * probe and the jump to glibc) starts a 64-byte cache line, so that it
 * never straddles two, whatever the layout of the rest of the library
 * (a build where pthread_mutex_lock's fell across a line measured 0.5 ns
 * more per unmapped lock+unlock: x1.21 against x1.13 for an interposer
 * that checks nothing). */
#define DM_HOT __attribute__((aligned(64)))

/* ---- the exported entry points ---------------------------------------- */

DM_EXPORT DM_HOT int pthread_mutex_lock(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_lock(m);
    return dm_mapped_lock(e, m, DM_LOCK, CLOCK_REALTIME, NULL);
}

DM_EXPORT DM_HOT int pthread_mutex_unlock(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_unlock(m);
    return dm_mapped_unlock(e, m);
}

DM_EXPORT DM_HOT int pthread_mutex_trylock(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_trylock(m);
    return dm_mapped_lock(e, m, DM_TRYLOCK, CLOCK_REALTIME, NULL);
}

DM_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_timedlock(m, t);
    return dm_mapped_lock(e, m, DM_TIMEDLOCK, CLOCK_REALTIME, t);
}

DM_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_clocklock(m, c, t);
    return dm_mapped_lock(e, m, DM_TIMEDLOCK, c, t);
}

DM_EXPORT int pthread_mutex_consistent(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_consistent(m);
    return dm_mapped_consistent(e, m);
}

DM_EXPORT int pthread_mutex_destroy(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_destroy(m);
    return dm_mapped_destroy(e, m);
}

/* What an init of a mutex finds at its address: a static entry (a config
 * symbol or address), initialised again: returned. Or a heap mutex's (or
 * a heap cond's or rwlock's) that memory freed without its destroy left
 * behind: removed, for the mutex made here is a new one, mapped only if
 * its own init site says so (NULL). */
static struct dm_entry *init_entry(void *m)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return NULL;
    if (e->kind == DM_ENTRY_MUTEX && !e->heap)
        return e;
    if (dm_mapped_entry_heap(e))
        dm_mapped_remove(m);
    return NULL;
}

/* A mutex pthread_mutex_init or mtx_init just made at m, called from
 * `caller`: mapped when the caller is an init_site function. */
static void init_site_map(void *m, uintptr_t caller)
{
    const struct dm_init_site *site = dm_startup_init_site(caller);
    if (site) {
        int rc = dm_mapped_add(m, site->name, site->flags);
        if (rc != 0)
            dm_error("mutex %p from %s() not mapped: %s", m, site->name, strerror(rc));
    }
}

DM_EXPORT int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    struct dm_entry *e = init_entry(m);
    if (e)
        return dm_mapped_init_mutex(e, m, a);
    if (__builtin_expect(dm_startup_ninit_sites == 0, 1))
        return dm_real.mutex_init(m, a);
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.mutex_init(m, a);
    if (r == 0)
        init_site_map(m, caller);
    return r;
}

DM_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce != NULL, 0))
        return dm_mapped_cond_cluster_wait(ce, c, m, 0, CLOCK_REALTIME, NULL);
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.cond_wait(c, m);
    return dm_mapped_cond_wait(e, c, m, 0, CLOCK_REALTIME, NULL);
}

DM_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                     const struct timespec *t)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce != NULL, 0))
        return dm_mapped_cond_cluster_wait(ce, c, m, 1, DM_COND_CLOCK_OF_COND, t);
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.cond_timedwait(c, m, t);
    return dm_mapped_cond_wait(e, c, m, 1, CLOCK_REALTIME, t);
}

DM_EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t k,
                                     const struct timespec *t)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce != NULL, 0))
        return dm_mapped_cond_cluster_wait(ce, c, m, 1, k, t);
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.cond_clockwait(c, m, k, t);
    return dm_mapped_cond_wait(e, c, m, 1, k, t);
}

DM_EXPORT int pthread_cond_signal(pthread_cond_t *c)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce == NULL, 1))
        return dm_real.cond_signal(c);
    return dm_mapped_cond_signal(ce, c, 0);
}

DM_EXPORT int pthread_cond_broadcast(pthread_cond_t *c)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce == NULL, 1))
        return dm_real.cond_broadcast(c);
    return dm_mapped_cond_signal(ce, c, 1);
}

DM_EXPORT int pthread_cond_destroy(pthread_cond_t *c)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce == NULL, 1))
        return dm_real.cond_destroy(c);
    return dm_mapped_cond_destroy(ce, c);
}

/* What an init of a cond finds at its address: a heap one's entry (or a
 * heap mutex's or rwlock's) that memory freed without its destroy left
 * behind is removed, the init decides afresh by its caller; a static
 * one's stays (glibc's init is all it needs). */
static void cond_init_entry(void *c)
{
    struct dm_entry *e = dm_registry_lookup(c);
    if (__builtin_expect(e != NULL, 0) && dm_mapped_entry_heap(e))
        dm_mapped_remove(c);
}

/* A cond pthread_cond_init or cnd_init just made at c, called from
 * `caller`: listed when the caller is a conds init_site function. */
static void cond_site_map(void *c, uintptr_t caller)
{
    const struct dm_init_site *site = dm_startup_cond_site(caller);
    if (site) {
        int rc = dm_mapped_add_cond(c, site->name, DM_MAP_HEAP);
        if (rc != 0)
            dm_error("condition variable %p from %s() not mapped: %s", c, site->name,
                     strerror(rc));
    }
}

DM_EXPORT int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
    cond_init_entry(c);
    if (__builtin_expect(dm_startup_ncond_sites == 0, 1))
        return dm_real.cond_init(c, a);
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.cond_init(c, a);
    if (r == 0)
        cond_site_map(c, caller);
    return r;
}

/* ---- C11 <threads.h> -----------------------------------------------------
 * glibc's mtx_t is a pthread_mutex_t and its cnd_t a pthread_cond_t (the
 * same size and alignment, real.h asserts it): each mtx_* and cnd_* call
 * glibc's internal pthread function of the same name, which the entry
 * points above never see. So they are interposed here as what they are:
 * a mapped mtx_t is a mapped mutex, a listed cnd_t a listed cond, with
 * the pthread call's result turned into the C11 one as glibc turns it
 * (dm_real_thrd). The passthrough is the pthread one's: the filter probe,
 * then glibc's own C11 function. mtx_init's and cnd_init's caller is the
 * init_site of what they make, as pthread_mutex_init's is. */

DM_EXPORT DM_HOT int mtx_lock(mtx_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mtx_lock(m);
    return dm_real_thrd(dm_mapped_lock(e, (pthread_mutex_t *)m, DM_LOCK, CLOCK_REALTIME, NULL));
}

DM_EXPORT DM_HOT int mtx_unlock(mtx_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mtx_unlock(m);
    return dm_real_thrd(dm_mapped_unlock(e, (pthread_mutex_t *)m));
}

DM_EXPORT DM_HOT int mtx_trylock(mtx_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mtx_trylock(m);
    return dm_real_thrd(dm_mapped_lock(e, (pthread_mutex_t *)m, DM_TRYLOCK, CLOCK_REALTIME, NULL));
}

DM_EXPORT int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict t)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mtx_timedlock(m, t);
    return dm_real_thrd(dm_mapped_lock(e, (pthread_mutex_t *)m, DM_TIMEDLOCK, CLOCK_REALTIME, t));
}

DM_EXPORT void mtx_destroy(mtx_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1)) {
        dm_real.mtx_destroy(m);
        return;
    }
    (void)dm_mapped_destroy(e, (pthread_mutex_t *)m);  /* glibc's ignores the result too */
}

DM_EXPORT int mtx_init(mtx_t *m, int type)
{
    struct dm_entry *e = init_entry(m);
    if (e) {
        dm_mapped_reinit(e);
        return dm_real.mtx_init(m, type);
    }
    if (__builtin_expect(dm_startup_ninit_sites == 0, 1))
        return dm_real.mtx_init(m, type);
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.mtx_init(m, type);
    if (r == thrd_success)
        init_site_map(m, caller);
    return r;
}

DM_EXPORT int cnd_wait(cnd_t *c, mtx_t *m)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce != NULL, 0))
        return dm_real_thrd(dm_mapped_cond_cluster_wait(ce, (pthread_cond_t *)c,
                                                        (pthread_mutex_t *)m, 0, CLOCK_REALTIME,
                                                        NULL));
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.cnd_wait(c, m);
    return dm_real_thrd(dm_mapped_cond_wait(e, (pthread_cond_t *)c, (pthread_mutex_t *)m, 0,
                                            CLOCK_REALTIME, NULL));
}

/* A cnd_t's deadline is on CLOCK_REALTIME (cnd_init gives it no condattr):
 * the cond's own clock, as pthread_cond_timedwait reads it. */
DM_EXPORT int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m,
                            const struct timespec *restrict t)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce != NULL, 0))
        return dm_real_thrd(dm_mapped_cond_cluster_wait(ce, (pthread_cond_t *)c,
                                                        (pthread_mutex_t *)m, 1,
                                                        DM_COND_CLOCK_OF_COND, t));
    struct dm_entry *e = dm_mapped_find(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.cnd_timedwait(c, m, t);
    return dm_real_thrd(dm_mapped_cond_wait(e, (pthread_cond_t *)c, (pthread_mutex_t *)m, 1,
                                            CLOCK_REALTIME, t));
}

DM_EXPORT int cnd_signal(cnd_t *c)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce == NULL, 1))
        return dm_real.cnd_signal(c);
    return dm_real_thrd(dm_mapped_cond_signal(ce, (pthread_cond_t *)c, 0));
}

DM_EXPORT int cnd_broadcast(cnd_t *c)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce == NULL, 1))
        return dm_real.cnd_broadcast(c);
    return dm_real_thrd(dm_mapped_cond_signal(ce, (pthread_cond_t *)c, 1));
}

DM_EXPORT void cnd_destroy(cnd_t *c)
{
    struct dm_cond_entry *ce = dm_mapped_find_cond(c);
    if (__builtin_expect(ce == NULL, 1)) {
        dm_real.cnd_destroy(c);
        return;
    }
    (void)dm_mapped_cond_destroy(ce, (pthread_cond_t *)c);
}

DM_EXPORT int cnd_init(cnd_t *c)
{
    cond_init_entry(c);
    if (__builtin_expect(dm_startup_ncond_sites == 0, 1))
        return dm_real.cnd_init(c);
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.cnd_init(c);
    if (r == thrd_success)
        cond_site_map(c, caller);
    return r;
}

/* ---- read-write locks --------------------------------------------------- */

#define DM_RW_ENTRY(name, call, write, mode, clk, t, ...)                       \
    DM_EXPORT int name(__VA_ARGS__)                                             \
    {                                                                           \
        struct dm_rw_entry *e = dm_mapped_find_rwlock(l);                       \
        if (__builtin_expect(e == NULL, 1))                                     \
            return call;                                                        \
        return dm_mapped_rwlock(e, l, write, mode, clk, t);                     \
    }

DM_RW_ENTRY(pthread_rwlock_rdlock, dm_real.rwlock_rdlock(l), 0, DM_LOCK, CLOCK_REALTIME, NULL,
            pthread_rwlock_t *l)
DM_RW_ENTRY(pthread_rwlock_tryrdlock, dm_real.rwlock_tryrdlock(l), 0, DM_TRYLOCK, CLOCK_REALTIME,
            NULL, pthread_rwlock_t *l)
DM_RW_ENTRY(pthread_rwlock_timedrdlock, dm_real.rwlock_timedrdlock(l, t), 0, DM_TIMEDLOCK,
            CLOCK_REALTIME, t, pthread_rwlock_t *l, const struct timespec *t)
DM_RW_ENTRY(pthread_rwlock_clockrdlock, dm_real.rwlock_clockrdlock(l, c, t), 0, DM_TIMEDLOCK, c, t,
            pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
DM_RW_ENTRY(pthread_rwlock_wrlock, dm_real.rwlock_wrlock(l), 1, DM_LOCK, CLOCK_REALTIME, NULL,
            pthread_rwlock_t *l)
DM_RW_ENTRY(pthread_rwlock_trywrlock, dm_real.rwlock_trywrlock(l), 1, DM_TRYLOCK, CLOCK_REALTIME,
            NULL, pthread_rwlock_t *l)
DM_RW_ENTRY(pthread_rwlock_timedwrlock, dm_real.rwlock_timedwrlock(l, t), 1, DM_TIMEDLOCK,
            CLOCK_REALTIME, t, pthread_rwlock_t *l, const struct timespec *t)
DM_RW_ENTRY(pthread_rwlock_clockwrlock, dm_real.rwlock_clockwrlock(l, c, t), 1, DM_TIMEDLOCK, c, t,
            pthread_rwlock_t *l, clockid_t c, const struct timespec *t)

DM_EXPORT int pthread_rwlock_unlock(pthread_rwlock_t *l)
{
    struct dm_rw_entry *e = dm_mapped_find_rwlock(l);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.rwlock_unlock(l);
    return dm_mapped_rwunlock(e, l);
}

DM_EXPORT int pthread_rwlock_destroy(pthread_rwlock_t *l)
{
    struct dm_rw_entry *e = dm_mapped_find_rwlock(l);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.rwlock_destroy(l);
    return dm_mapped_rwdestroy(e, l);
}

DM_EXPORT int pthread_rwlock_init(pthread_rwlock_t *l, const pthread_rwlockattr_t *a)
{
    struct dm_rw_entry *e = dm_registry_lookup(l);
    if (__builtin_expect(e != NULL, 0)) {
        if (e->kind == DM_ENTRY_RWLOCK && !e->heap)
            return dm_mapped_rwinit(e, l, a);
        /* A heap object freed without its destroy left its mapping behind:
         * decided afresh below. */
        if (dm_mapped_entry_heap(e))
            dm_mapped_remove(l);
    }
    if (__builtin_expect(dm_startup_nrw_sites == 0, 1))
        return dm_real.rwlock_init(l, a);
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.rwlock_init(l, a);
    const struct dm_init_site *site = r == 0 ? dm_startup_rw_site(caller) : NULL;
    if (site) {
        int rc = dm_mapped_add_rwlock(l, site->name, DM_MAP_HEAP);
        if (rc != 0)
            dm_error("rwlock %p from %s() not mapped: %s", (void *)l, site->name, strerror(rc));
    }
    return r;
}

/* ---- the explicit API --------------------------------------------------- */

DM_EXPORT int dmutex_name(pthread_mutex_t *m, const char *name)
{
    if (!dm_startup_configured())
        return ENOSYS;
    char why[160];
    if (!m || !name || !dm_config_name_ok(name, why, sizeof why))
        return EINVAL;
    return dm_mapped_add(m, name, DM_MAP_HEAP | (DM_FAIR_DEFAULT ? DM_MAP_FAIR : 0));
}

DM_EXPORT uint64_t dmutex_token(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_mapped_find(m);
    return e ? dm_mapped_token(e) : 0;
}

DM_EXPORT uint64_t dmutex_rwlock_token(pthread_rwlock_t *l)
{
    struct dm_rw_entry *e = dm_mapped_find_rwlock(l);
    return e ? dm_mapped_rwtoken(e) : 0;
}

/* ---- the loader ---------------------------------------------------------
 * The caller's address is taken here, in the exported symbol: it is the
 * program's code whose RUNPATH a bare name is searched along. */

DM_EXPORT void *dlopen(const char *file, int flags)
{
    return dm_startup_dlopen(file, flags, __builtin_return_address(0));
}

DM_EXPORT int dlclose(void *handle)
{
    return dm_startup_dlclose(handle);
}

/* ---- the end of the process image ---------------------------------------
 * The exec family, _exit and _Exit: the releases unlocks wrote without
 * waiting are read first (startup: by the store's reader thread, bounded),
 * so that a lock the process unlocked is free when the new image or the
 * parent looks, whatever the server answered. exit(3) reads them in the
 * destructor. glibc's own members call its internal execve, so each entry
 * point reads them once; the variadic ones are built on the vector ones,
 * as glibc builds them. */

extern char **environ;

DM_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    dm_startup_image_ends();
    return dm_real.execve(path, argv, envp);
}

DM_EXPORT int execv(const char *path, char *const argv[])
{
    dm_startup_image_ends();
    return dm_real.execve(path, argv, environ);
}

DM_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    dm_startup_image_ends();
    return dm_real.execvpe(file, argv, envp);
}

DM_EXPORT int execvp(const char *file, char *const argv[])
{
    dm_startup_image_ends();
    return dm_real.execvpe(file, argv, environ);
}

DM_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    dm_startup_image_ends();
    return dm_real.fexecve(fd, argv, envp);
}

/* The arguments of execl, execlp and execle after `arg0`, up to the NULL,
 * into a vector on the caller's stack (the count first: E2BIG past what
 * the kernel would take anyway). */
#define EXECL_ARGS(arg0, ap, argv, extra)                                   \
    size_t n_ = 1;                                                          \
    va_start(ap, arg0);                                                     \
    while (va_arg(ap, const char *) != NULL)                                \
        n_++;                                                               \
    va_end(ap);                                                             \
    if (n_ > 1024 * 1024) {                                                 \
        errno = E2BIG;                                                      \
        return -1;                                                          \
    }                                                                       \
    char *argv[n_ + 1];                                                     \
    argv[0] = (char *)(arg0);                                               \
    va_start(ap, arg0);                                                     \
    for (size_t i_ = 1; i_ <= n_; i_++)                                     \
        argv[i_] = va_arg(ap, char *);                                      \
    extra;                                                                  \
    va_end(ap)

DM_EXPORT int execl(const char *path, const char *arg0, ...)
{
    va_list ap;
    EXECL_ARGS(arg0, ap, argv, (void)0);
    return execv(path, argv);
}

DM_EXPORT int execlp(const char *file, const char *arg0, ...)
{
    va_list ap;
    EXECL_ARGS(arg0, ap, argv, (void)0);
    return execvp(file, argv);
}

DM_EXPORT int execle(const char *path, const char *arg0, ...)
{
    va_list ap;
    char **envp;
    EXECL_ARGS(arg0, ap, argv, envp = va_arg(ap, char **));
    return execve(path, argv, envp);
}

DM_EXPORT void _exit(int status)
{
    dm_startup_image_ends();
    dm_real.exit_now(status);
}

DM_EXPORT void _Exit(int status)
{
    dm_startup_image_ends();
    dm_real.exit_now(status);
}
