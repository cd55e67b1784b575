/* twin_a.c and twin_b.c: two files of psx_host with a file-static mutex of
 * the same name, so that the bare symbol "cache_lock" is ambiguous and
 * "twin_a.c:cache_lock" is not. */
#include <pthread.h>

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

int twin_a_enter(void *arg) { (void)arg; return pthread_mutex_lock(&cache_lock); }
int twin_a_leave(void *arg) { (void)arg; return pthread_mutex_unlock(&cache_lock); }
