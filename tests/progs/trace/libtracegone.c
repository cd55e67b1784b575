/* libtracegone.so: the plugin `trace_misc dlclose` loads, uses and
 * unloads before it exits. plug_lock is locked 7 times, one heap mutex
 * made by gone_new() 4 times, and g_twin (a global of the same name as
 * one in trace_misc) 2 times; plug_cond is signalled 3 times, a heap cond
 * made by gone_cond_new() 2 times, and rw_twin (an rwlock of the same
 * name as one in trace_misc) read-locked 2 times. Built again with TRACEGONE_REBUILT as
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
pthread_cond_t plug_cond = PTHREAD_COND_INITIALIZER;
pthread_rwlock_t rw_twin = PTHREAD_RWLOCK_INITIALIZER;

pthread_mutex_t *gone_new(void);
pthread_cond_t *gone_cond_new(void);
void gone_work(void);

__attribute__((noinline)) pthread_mutex_t *gone_new(void)
{
    pthread_mutex_t *m = malloc(sizeof *m);
    if (m)
        pthread_mutex_init(m, NULL);
    return m;
}

__attribute__((noinline)) pthread_cond_t *gone_cond_new(void)
{
    pthread_cond_t *c = malloc(sizeof *c);
    if (c)
        pthread_cond_init(c, NULL);
    return c;
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
    pthread_cond_t *c = gone_cond_new();
    if (!m || !c)
        abort();
    lock_n(&plug_lock, 7);
    lock_n(m, 4);
    lock_n(&g_twin, 2);
    pthread_mutex_destroy(m);
    free(m);
    for (int i = 0; i < 3; i++)
        pthread_cond_signal(&plug_cond);
    for (int i = 0; i < 2; i++) {
        pthread_cond_signal(c);
        pthread_rwlock_rdlock(&rw_twin);
        pthread_rwlock_unlock(&rw_twin);
    }
    pthread_cond_destroy(c);
    free(c);
}
