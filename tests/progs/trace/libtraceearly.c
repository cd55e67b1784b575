/* libtraceearly.so: a library whose constructor locks a mutex. The
 * loader runs it before the preloaded trace library's constructor, so
 * that thread's first lock comes before the tracer is set up. */
#include <pthread.h>

pthread_mutex_t early_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void early(void)
{
    pthread_mutex_lock(&early_lock);
    pthread_mutex_unlock(&early_lock);
}
