/* heap: an init_site rwlock (rw_new) read-locked, destroyed while read-held (glibc: 0),
 * then unlocked and freed; a second process's writer then waits. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
__attribute__((noinline)) pthread_rwlock_t *rw_new(void)
{
    pthread_rwlock_t *l = malloc(sizeof *l);
    pthread_rwlock_init(l, NULL);
    return l;
}
static long ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000 + t.tv_nsec / 1000000; }
int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_rwlock_t *l = rw_new();
    if (!strcmp(argv[1], "destroy-held")) {
        printf("rdlock %d\n", pthread_rwlock_rdlock(l));
        printf("destroy while read-held %d\n", pthread_rwlock_destroy(l));
        printf("unlock %d\n", pthread_rwlock_unlock(l));
        free(l);
        printf("freed; living on %s s\n", argv[2]);
        sleep(atoi(argv[2]));
        return 0;
    }
    if (!strcmp(argv[1], "wr")) {
        long t0 = ms();
        struct timespec d; clock_gettime(CLOCK_REALTIME, &d); d.tv_sec += atoi(argv[2]);
        int r = pthread_rwlock_timedwrlock(l, &d);
        printf("wr %d after %ld ms\n", r, ms() - t0);
        if (!r) pthread_rwlock_unlock(l);
        return 0;
    }

    if (!strcmp(argv[1], "reuse")) {     /* freed without destroy; same memory initialised elsewhere */
        pthread_rwlock_wrlock(l); pthread_rwlock_unlock(l);
        free(l);
        pthread_rwlock_t *m = NULL;
        for (int i = 0; i < 1000 && m != l; i++)
            m = malloc(sizeof *m);      /* the others leak: a test */
        printf("same address %d\n", m == l);
        pthread_rwlock_init(m, NULL);      /* from main: not an init_site */
        printf("marker\n"); fflush(stdout);
        sleep(1);
        for (int i = 0; i < 5; i++) { pthread_rwlock_wrlock(m); pthread_rwlock_unlock(m); }
        printf("done\n");
        return 0;
    }
    return 2;
}
