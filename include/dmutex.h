/* dmutex.h: the explicit API, for programs that can change a line.
 *
 * The functions are exported by libdmutex.so. A program that must also run
 * without the shim declares them weak and checks for NULL:
 *
 *     #include "dmutex.h"
 *     #pragma weak dmutex_name
 *     #pragma weak dmutex_token
 *     #pragma weak dmutex_rwlock_token
 *     ...
 *     if (dmutex_name)
 *         dmutex_name(&acct->lock, "account");
 *
 * (see tests/progs/api_weak.c). */
#ifndef DMUTEX_H
#define DMUTEX_H

#include <pthread.h>
#include <stdint.h>

/* The version of dmutex: of this header, the library (whose soname is
 * libdmutex.so.MAJOR) and the dmutex command. The one place it is written:
 * the Makefile reads these three lines for the soname and dmutex.pc. 0.x:
 * the config file, the command and this API may still change between
 * minor versions (MAJOR moves to 1 once they are promised stable). */
#define DMUTEX_VERSION_MAJOR 0
#define DMUTEX_VERSION_MINOR 9
#define DMUTEX_VERSION_PATCH 0
#define DMUTEX_VERSION_STR_(x) #x
#define DMUTEX_VERSION_STR(x) DMUTEX_VERSION_STR_(x)
/* "MAJOR.MINOR.PATCH" */
#define DMUTEX_VERSION DMUTEX_VERSION_STR(DMUTEX_VERSION_MAJOR) "." \
    DMUTEX_VERSION_STR(DMUTEX_VERSION_MINOR) "." DMUTEX_VERSION_STR(DMUTEX_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* Maps the mutex at `m` to the cluster lock `name` (the same rules as a
 * config name), from now until pthread_mutex_destroy. Call it while no
 * thread holds `m`. Returns 0, EINVAL for a bad name or a NULL mutex,
 * EEXIST when `m` is already mapped under another name, ENOMEM, or ENOSYS
 * when the shim has no config (nothing can be mapped). */
int dmutex_name(pthread_mutex_t *m, const char *name);

/* The fencing token of the calling thread's current hold of the mapped
 * mutex `m`: a number that grows with every grant of that lock anywhere in
 * the cluster, to send along with writes that a resource can check. The
 * threads sharing their process's grant see the same one, in one critical
 * section or in several of one batch (batch_ms). 0 when `m` is not mapped
 * or the caller does not hold it. */
uint64_t dmutex_token(pthread_mutex_t *m);

/* The fencing token of the calling thread's current hold of the rwlock `l`
 * listed in rwlocks: a writer's is its write grant's, above every grant of
 * that lock before it anywhere in the cluster; a reader's is the grant of
 * its process's read hold, which the process's readers share. 0 when `l`
 * is not listed or the caller does not hold it. */
uint64_t dmutex_rwlock_token(pthread_rwlock_t *l);

#ifdef __cplusplus
}
#endif

#endif
