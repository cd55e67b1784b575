/* Test data for test_symbols: libsymlib.so, linked into the test program.
 * symlib_copied_lock is named directly by the program, so the program gets
 * a copy relocation and the live mutex is the program's copy. */
#include <pthread.h>

pthread_mutex_t symlib_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t symlib_copied_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t symlib_static_lock = PTHREAD_MUTEX_INITIALIZER;

void *symlib_lock_addr(void) { return &symlib_lock; }
void *symlib_static_lock_addr(void) { return &symlib_static_lock; }
void *symlib_copied_lock_addr(void) { return &symlib_copied_lock; }
