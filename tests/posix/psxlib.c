/* libpsxlib.so: a library psx_host is linked with (found through the
 * host's RUNPATH $ORIGIN), holding a global mutex and a file-static one.
 * The library locks them itself, as a library does. */
#include <pthread.h>

pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lib_static_lock = PTHREAD_MUTEX_INITIALIZER;

int psxlib_enter(void *arg) { (void)arg; return pthread_mutex_lock(&lib_lock); }
int psxlib_leave(void *arg) { (void)arg; return pthread_mutex_unlock(&lib_lock); }
int psxlib_static_enter(void *arg) { (void)arg; return pthread_mutex_lock(&lib_static_lock); }
int psxlib_static_leave(void *arg) { (void)arg; return pthread_mutex_unlock(&lib_static_lock); }
