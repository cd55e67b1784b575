/* Test data for test_symbols: libsymdl.so, loaded with dlopen at run time. */
#include <pthread.h>

pthread_mutex_t symdl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t symdl_static_lock = PTHREAD_MUTEX_INITIALIZER;

void *symdl_lock_addr(void) { return &symdl_lock; }
void *symdl_static_lock_addr(void) { return &symdl_static_lock; }
