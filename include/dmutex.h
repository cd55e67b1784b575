/* dmutex.h: the explicit API, for programs that can change a line.
 *
 * Both functions are exported by libdmutex.so. A program that must also run
 * without the shim declares them weak and checks for NULL:
 *
 *     #include "dmutex.h"
 *     #pragma weak dmutex_name
 *     #pragma weak dmutex_token
 *     ...
 *     if (dmutex_name)
 *         dmutex_name(&acct->lock, "account");
 *
 * (see tests/progs/api_weak.c). */
#ifndef DMUTEX_H
#define DMUTEX_H

#include <pthread.h>
#include <stdint.h>

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
 * the cluster, to send along with writes that a resource can check. 0 when
 * `m` is not mapped or the caller does not hold it. */
uint64_t dmutex_token(pthread_mutex_t *m);

#ifdef __cplusplus
}
#endif

#endif
