/* libtracegone.so: the plugin `trace_misc dlclose` loads, uses and
 * unloads before it exits. plug_lock is locked 7 times, one heap mutex
 * made by gone_new() 4 times, and g_twin (a global of the same name as
 * one in trace_misc) 2 times. Built again with TRACEGONE_REBUILT as
 * libtracegone2.so, the same plugin rebuilt: other addresses. */
#include <pthread.h>
#include <stdlib.h>

#ifndef TRACEGONE_REBUILT
pthread_mutex_t plug_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_twin = PTHREAD_MUTEX_INITIALIZER;
#else
/* libtracegone2.so, "the plugin rebuilt": the two swap places */
pthread_mutex_t g_twin = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t plug_lock = PTHREAD_MUTEX_INITIALIZER;
#endif

pthread_mutex_t *gone_new(void);
void gone_work(void);

__attribute__((noinline)) pthread_mutex_t *gone_new(void)
{
    pthread_mutex_t *m = malloc(sizeof *m);
    if (m)
        pthread_mutex_init(m, NULL);
    return m;
}

static void lock_n(pthread_mutex_t *m, int n)
{
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(m);
        pthread_mutex_unlock(m);
    }
}

void gone_work(void)
{
    pthread_mutex_t *m = gone_new();
    if (!m)
        abort();
    lock_n(&plug_lock, 7);
    lock_n(m, 4);
    lock_n(&g_twin, 2);
    pthread_mutex_destroy(m);
    free(m);
}
