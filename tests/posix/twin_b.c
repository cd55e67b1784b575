/* See twin_a.c: the other file-static named cache_lock. */
#include <pthread.h>

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

int twin_b_enter(void *arg) { (void)arg; return pthread_mutex_lock(&cache_lock); }
int twin_b_leave(void *arg) { (void)arg; return pthread_mutex_unlock(&cache_lock); }
