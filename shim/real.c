/* real: resolves the table of glibc's functions (see real.h). Runs from
 * inside interposed calls, possibly before any constructor of the shim:
 * no allocation, no lock, no other module but log. */
#include "real.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

/* The resolvers that the table starts with. */
static int first_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{ dm_real_resolve(); return dm_real.mutex_init(m, a); }
static int first_mutex_destroy(pthread_mutex_t *m)
{ dm_real_resolve(); return dm_real.mutex_destroy(m); }
static int first_mutex_lock(pthread_mutex_t *m)
{ dm_real_resolve(); return dm_real.mutex_lock(m); }
static int first_mutex_trylock(pthread_mutex_t *m)
{ dm_real_resolve(); return dm_real.mutex_trylock(m); }
static int first_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{ dm_real_resolve(); return dm_real.mutex_timedlock(m, t); }
static int first_mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{ dm_real_resolve(); return dm_real.mutex_clocklock(m, c, t); }
static int first_mutex_unlock(pthread_mutex_t *m)
{ dm_real_resolve(); return dm_real.mutex_unlock(m); }
static int first_mutex_consistent(pthread_mutex_t *m)
{ dm_real_resolve(); return dm_real.mutex_consistent(m); }
static int first_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{ dm_real_resolve(); return dm_real.cond_wait(c, m); }
static int first_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t)
{ dm_real_resolve(); return dm_real.cond_timedwait(c, m, t); }
static int first_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t k,
                                const struct timespec *t)
{ dm_real_resolve(); return dm_real.cond_clockwait(c, m, k, t); }
static int first_cond_signal(pthread_cond_t *c)
{ dm_real_resolve(); return dm_real.cond_signal(c); }
static int first_cond_broadcast(pthread_cond_t *c)
{ dm_real_resolve(); return dm_real.cond_broadcast(c); }
static int first_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{ dm_real_resolve(); return dm_real.cond_init(c, a); }
static int first_cond_destroy(pthread_cond_t *c)
{ dm_real_resolve(); return dm_real.cond_destroy(c); }
static void *first_dlopen(const char *file, int flags)
{ dm_real_resolve(); return dm_real.dlopen(file, flags); }
static int first_dlclose(void *handle)
{ dm_real_resolve(); return dm_real.dlclose(handle); }
static int first_rwlock_init(pthread_rwlock_t *l, const pthread_rwlockattr_t *a)
{ dm_real_resolve(); return dm_real.rwlock_init(l, a); }
static int first_rwlock_rdlock(pthread_rwlock_t *l)
{ dm_real_resolve(); return dm_real.rwlock_rdlock(l); }
static int first_rwlock_tryrdlock(pthread_rwlock_t *l)
{ dm_real_resolve(); return dm_real.rwlock_tryrdlock(l); }
static int first_rwlock_timedrdlock(pthread_rwlock_t *l, const struct timespec *t)
{ dm_real_resolve(); return dm_real.rwlock_timedrdlock(l, t); }
static int first_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{ dm_real_resolve(); return dm_real.rwlock_clockrdlock(l, c, t); }
static int first_rwlock_wrlock(pthread_rwlock_t *l)
{ dm_real_resolve(); return dm_real.rwlock_wrlock(l); }
static int first_rwlock_trywrlock(pthread_rwlock_t *l)
{ dm_real_resolve(); return dm_real.rwlock_trywrlock(l); }
static int first_rwlock_timedwrlock(pthread_rwlock_t *l, const struct timespec *t)
{ dm_real_resolve(); return dm_real.rwlock_timedwrlock(l, t); }
static int first_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t c, const struct timespec *t)
{ dm_real_resolve(); return dm_real.rwlock_clockwrlock(l, c, t); }
static int first_rwlock_destroy(pthread_rwlock_t *l)
{ dm_real_resolve(); return dm_real.rwlock_destroy(l); }
static int first_rwlock_unlock(pthread_rwlock_t *l)
{ dm_real_resolve(); return dm_real.rwlock_unlock(l); }
static int first_mtx_init(mtx_t *m, int type)
{ dm_real_resolve(); return dm_real.mtx_init(m, type); }
static int first_mtx_lock(mtx_t *m)
{ dm_real_resolve(); return dm_real.mtx_lock(m); }
static int first_mtx_trylock(mtx_t *m)
{ dm_real_resolve(); return dm_real.mtx_trylock(m); }
static int first_mtx_timedlock(mtx_t *m, const struct timespec *t)
{ dm_real_resolve(); return dm_real.mtx_timedlock(m, t); }
static int first_mtx_unlock(mtx_t *m)
{ dm_real_resolve(); return dm_real.mtx_unlock(m); }
static void first_mtx_destroy(mtx_t *m)
{ dm_real_resolve(); dm_real.mtx_destroy(m); }
static int first_cnd_init(cnd_t *c)
{ dm_real_resolve(); return dm_real.cnd_init(c); }
static int first_cnd_signal(cnd_t *c)
{ dm_real_resolve(); return dm_real.cnd_signal(c); }
static int first_cnd_broadcast(cnd_t *c)
{ dm_real_resolve(); return dm_real.cnd_broadcast(c); }
static int first_cnd_wait(cnd_t *c, mtx_t *m)
{ dm_real_resolve(); return dm_real.cnd_wait(c, m); }
static int first_cnd_timedwait(cnd_t *c, mtx_t *m, const struct timespec *t)
{ dm_real_resolve(); return dm_real.cnd_timedwait(c, m, t); }
static void first_cnd_destroy(cnd_t *c)
{ dm_real_resolve(); dm_real.cnd_destroy(c); }
static int first_execve(const char *f, char *const a[], char *const e[])
{ dm_real_resolve(); return dm_real.execve(f, a, e); }
static int first_execvpe(const char *f, char *const a[], char *const e[])
{ dm_real_resolve(); return dm_real.execvpe(f, a, e); }
static int first_fexecve(int fd, char *const a[], char *const e[])
{ dm_real_resolve(); return dm_real.fexecve(fd, a, e); }
__attribute__((noreturn)) static void first_exit_now(int status)
{ dm_real_resolve(); dm_real.exit_now(status); }

struct dm_real dm_real = {
    first_mutex_init, first_mutex_destroy, first_mutex_lock, first_mutex_trylock,
    first_mutex_timedlock, first_mutex_clocklock, first_mutex_unlock,
    first_mutex_consistent, first_cond_wait, first_cond_timedwait, first_cond_clockwait,
    first_cond_signal, first_cond_broadcast, first_cond_init, first_cond_destroy,
    first_dlopen, first_dlclose,
    first_rwlock_init, first_rwlock_rdlock, first_rwlock_tryrdlock, first_rwlock_timedrdlock,
    first_rwlock_clockrdlock, first_rwlock_wrlock, first_rwlock_trywrlock,
    first_rwlock_timedwrlock, first_rwlock_clockwrlock,
    first_rwlock_destroy, first_rwlock_unlock,
    first_mtx_init, first_mtx_lock, first_mtx_trylock, first_mtx_timedlock, first_mtx_unlock,
    first_mtx_destroy, first_cnd_init, first_cnd_signal, first_cnd_broadcast, first_cnd_wait,
    first_cnd_timedwait, first_cnd_destroy,
    first_execve, first_execvpe, first_fexecve, first_exit_now,
};

static void *must_sym(const char *name, const char *version)
{
    void *p = version ? dlvsym(RTLD_NEXT, name, version) : NULL;
    if (!p)
        p = dlsym(RTLD_NEXT, name);
    if (!p) {
        dm_error("cannot find the real %s: %s", name, dlerror());
        /* not _exit: the shim's own, whose real one may be what is missing */
        syscall(SYS_exit_group, DM_REAL_EX_MISSING);
    }
    return p;
}

void dm_real_resolve(void)
{
    /* Racing resolvers store the same values: no lock needed. */
    struct dm_real r;
    *(void **)&r.mutex_init = must_sym("pthread_mutex_init", NULL);
    *(void **)&r.mutex_destroy = must_sym("pthread_mutex_destroy", NULL);
    *(void **)&r.mutex_lock = must_sym("pthread_mutex_lock", NULL);
    *(void **)&r.mutex_trylock = must_sym("pthread_mutex_trylock", NULL);
    *(void **)&r.mutex_timedlock = must_sym("pthread_mutex_timedlock", NULL);
    *(void **)&r.mutex_clocklock = must_sym("pthread_mutex_clocklock", NULL);
    *(void **)&r.mutex_unlock = must_sym("pthread_mutex_unlock", NULL);
    *(void **)&r.mutex_consistent = must_sym("pthread_mutex_consistent", NULL);
    /* The condvar functions exist in two ABIs on x86_64; a plain dlsym may
     * hand back the old GLIBC_2.2.5 one, which uses another layout. */
    *(void **)&r.cond_wait = must_sym("pthread_cond_wait", "GLIBC_2.3.2");
    *(void **)&r.cond_timedwait = must_sym("pthread_cond_timedwait", "GLIBC_2.3.2");
    *(void **)&r.cond_clockwait = must_sym("pthread_cond_clockwait", NULL);
    *(void **)&r.cond_signal = must_sym("pthread_cond_signal", "GLIBC_2.3.2");
    *(void **)&r.cond_broadcast = must_sym("pthread_cond_broadcast", "GLIBC_2.3.2");
    *(void **)&r.cond_init = must_sym("pthread_cond_init", "GLIBC_2.3.2");
    *(void **)&r.cond_destroy = must_sym("pthread_cond_destroy", "GLIBC_2.3.2");
    *(void **)&r.dlopen = must_sym("dlopen", NULL);
    *(void **)&r.dlclose = must_sym("dlclose", NULL);
    *(void **)&r.rwlock_init = must_sym("pthread_rwlock_init", NULL);
    *(void **)&r.rwlock_rdlock = must_sym("pthread_rwlock_rdlock", NULL);
    *(void **)&r.rwlock_tryrdlock = must_sym("pthread_rwlock_tryrdlock", NULL);
    *(void **)&r.rwlock_timedrdlock = must_sym("pthread_rwlock_timedrdlock", NULL);
    *(void **)&r.rwlock_clockrdlock = must_sym("pthread_rwlock_clockrdlock", NULL);
    *(void **)&r.rwlock_wrlock = must_sym("pthread_rwlock_wrlock", NULL);
    *(void **)&r.rwlock_trywrlock = must_sym("pthread_rwlock_trywrlock", NULL);
    *(void **)&r.rwlock_timedwrlock = must_sym("pthread_rwlock_timedwrlock", NULL);
    *(void **)&r.rwlock_clockwrlock = must_sym("pthread_rwlock_clockwrlock", NULL);
    *(void **)&r.rwlock_destroy = must_sym("pthread_rwlock_destroy", NULL);
    *(void **)&r.rwlock_unlock = must_sym("pthread_rwlock_unlock", NULL);
    /* glibc 2.34 moved them from libpthread (GLIBC_2.28) into libc
     * (GLIBC_2.34, the same code under both): the default version is the
     * one a program linked today calls. */
    *(void **)&r.mtx_init = must_sym("mtx_init", NULL);
    *(void **)&r.mtx_lock = must_sym("mtx_lock", NULL);
    *(void **)&r.mtx_trylock = must_sym("mtx_trylock", NULL);
    *(void **)&r.mtx_timedlock = must_sym("mtx_timedlock", NULL);
    *(void **)&r.mtx_unlock = must_sym("mtx_unlock", NULL);
    *(void **)&r.mtx_destroy = must_sym("mtx_destroy", NULL);
    *(void **)&r.cnd_init = must_sym("cnd_init", NULL);
    *(void **)&r.cnd_signal = must_sym("cnd_signal", NULL);
    *(void **)&r.cnd_broadcast = must_sym("cnd_broadcast", NULL);
    *(void **)&r.cnd_wait = must_sym("cnd_wait", NULL);
    *(void **)&r.cnd_timedwait = must_sym("cnd_timedwait", NULL);
    *(void **)&r.cnd_destroy = must_sym("cnd_destroy", NULL);
    *(void **)&r.execve = must_sym("execve", NULL);
    *(void **)&r.execvpe = must_sym("execvpe", NULL);
    *(void **)&r.fexecve = must_sym("fexecve", NULL);
    *(void **)&r.exit_now = must_sym("_exit", NULL);
    void **dst = (void **)&dm_real;
    void **src = (void **)&r;
    for (size_t i = 0; i < sizeof r / sizeof(void *); i++)
        __atomic_store_n(&dst[i], src[i], __ATOMIC_RELEASE);
}
