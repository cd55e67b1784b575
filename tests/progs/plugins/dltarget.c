/* libdltarget.so: a plugin whose global mutex test_shim maps by config
 * (object = "libdltarget.so"). dlprog loads and unloads it in a loop, so
 * every load makes the shim resolve the mutex anew. */
#include <pthread.h>

pthread_mutex_t target_lock = PTHREAD_MUTEX_INITIALIZER;

int target_enter(void) { return pthread_mutex_lock(&target_lock); }
int target_leave(void) { return pthread_mutex_unlock(&target_lock); }
