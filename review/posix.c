/* posix: single-process rwlock answers; run with and without the shim and diff. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static const char *e(int r) { static char b[8][32]; static int i; i = (i + 1) % 8; snprintf(b[i], 32, "%s", r == 0 ? "0" : r == EDEADLK ? "EDEADLK" : r == EBUSY ? "EBUSY" : r == EINVAL ? "EINVAL" : r == ETIMEDOUT ? "ETIMEDOUT" : r == EPERM ? "EPERM" : r == EAGAIN ? "EAGAIN" : "other"); if (r && !strcmp(b[i], "other")) snprintf(b[i], 32, "%d", r); return b[i]; }
static struct timespec in_ms(clockid_t c, long ms) { struct timespec t; clock_gettime(c, &t); t.tv_sec += ms / 1000; t.tv_nsec += (ms % 1000) * 1000000; if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; } return t; }
static volatile int phase;
static void *reader(void *a) { (void)a; pthread_rwlock_rdlock(&rw); phase = 1; while (phase != 2) usleep(1000); pthread_rwlock_unlock(&rw); phase = 3; return NULL; }
static void *writer_t(void *a) { (void)a; pthread_rwlock_wrlock(&rw); phase = 1; while (phase != 2) usleep(1000); pthread_rwlock_unlock(&rw); phase = 3; return NULL; }
#define P(name, expr) printf("%-40s %s\n", name, e(expr))
int main(void)
{
    struct timespec t;
    P("wrlock", pthread_rwlock_wrlock(&rw));
    P(" rdlock by writer", pthread_rwlock_rdlock(&rw));
    P(" tryrdlock by writer", pthread_rwlock_tryrdlock(&rw));
    P(" wrlock by writer", pthread_rwlock_wrlock(&rw));
    P(" trywrlock by writer", pthread_rwlock_trywrlock(&rw));
    t = in_ms(CLOCK_REALTIME, 50);
    P(" timedrdlock by writer", pthread_rwlock_timedrdlock(&rw, &t));
    P(" timedwrlock by writer", pthread_rwlock_timedwrlock(&rw, &t));
    t.tv_nsec = 1000000000;
    P(" timedwrlock by writer bad nsec", pthread_rwlock_timedwrlock(&rw, &t));
    P(" destroy while write-held", pthread_rwlock_destroy(&rw));
    P("unlock", pthread_rwlock_unlock(&rw));
    P("rdlock", pthread_rwlock_rdlock(&rw));
    P(" rdlock again", pthread_rwlock_rdlock(&rw));
    P(" trywrlock by reader", pthread_rwlock_trywrlock(&rw));
    t = in_ms(CLOCK_MONOTONIC, 100);
    P(" clockwrlock by reader 100ms", pthread_rwlock_clockwrlock(&rw, CLOCK_MONOTONIC, &t));
    P(" unlock", pthread_rwlock_unlock(&rw));
    P(" unlock", pthread_rwlock_unlock(&rw));
    t = in_ms(CLOCK_REALTIME, 0); t.tv_nsec = 1000000000;
    P("timedrdlock nsec=1e9 (free)", pthread_rwlock_timedrdlock(&rw, &t));
    t.tv_nsec = -1;
    P("timedwrlock nsec=-1 (free)", pthread_rwlock_timedwrlock(&rw, &t));
    t = in_ms(CLOCK_REALTIME, 0);
    P("clockrdlock CPUTIME clock (free)", pthread_rwlock_clockrdlock(&rw, CLOCK_PROCESS_CPUTIME_ID, &t));
    t.tv_sec -= 100;
    P("timedwrlock past (free)", pthread_rwlock_timedwrlock(&rw, &t));
    P(" unlock", pthread_rwlock_unlock(&rw));
    t.tv_sec = -5; t.tv_nsec = 0;
    P("timedrdlock tv_sec=-5 (free)", pthread_rwlock_timedrdlock(&rw, &t));
    P(" unlock", pthread_rwlock_unlock(&rw));
    t.tv_sec = 0x7fffffffffffffffL; t.tv_nsec = 0;
    P("timedwrlock LONG_MAX (free)", pthread_rwlock_timedwrlock(&rw, &t));
    P(" unlock", pthread_rwlock_unlock(&rw));
    pthread_t th;
    phase = 0; pthread_create(&th, NULL, reader, NULL); while (!phase) usleep(1000);
    t = in_ms(CLOCK_REALTIME, -10);
    P("other reads: timedwrlock past", pthread_rwlock_timedwrlock(&rw, &t));
    t = in_ms(CLOCK_REALTIME, 100);
    P("other reads: timedwrlock 100ms", pthread_rwlock_timedwrlock(&rw, &t));
    P("other reads: tryrdlock", pthread_rwlock_tryrdlock(&rw));
    P(" unlock", pthread_rwlock_unlock(&rw));
    P("other reads: destroy", pthread_rwlock_destroy(&rw));
    phase = 2; pthread_join(th, NULL);
    P("init after destroy", pthread_rwlock_init(&rw, NULL));
    phase = 0; pthread_create(&th, NULL, writer_t, NULL); while (!phase) usleep(1000);
    P("other writes: tryrdlock", pthread_rwlock_tryrdlock(&rw));
    t = in_ms(CLOCK_REALTIME, 100);
    P("other writes: timedrdlock 100ms", pthread_rwlock_timedrdlock(&rw, &t));
    phase = 2; pthread_join(th, NULL);
    P("after: trywrlock", pthread_rwlock_trywrlock(&rw));
    P(" unlock", pthread_rwlock_unlock(&rw));
    pthread_rwlockattr_t a; pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    P("init PREFER_WRITER_NONRECURSIVE", pthread_rwlock_init(&rw, &a));
    P(" rdlock", pthread_rwlock_rdlock(&rw));
    P(" rdlock again", pthread_rwlock_rdlock(&rw));
    P(" unlock", pthread_rwlock_unlock(&rw));
    P(" unlock", pthread_rwlock_unlock(&rw));
    P(" destroy", pthread_rwlock_destroy(&rw));
    return 0;
}
