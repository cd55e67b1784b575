/* cpos: cond answers on the listed cond cv; run with and without the shim, diff. */
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
static pthread_mutex_t lm;
static long ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000 + t.tv_nsec / 1000000; }
static struct timespec in_ms(clockid_t c, long m) { struct timespec t; clock_gettime(c, &t); t.tv_sec += m / 1000; t.tv_nsec += (m % 1000) * 1000000; if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; } return t; }
static const char *e(int r) { static char b[4][32]; static int i; i = (i + 1) % 4; snprintf(b[i], 32, "%s", r == 0 ? "0" : r == EINVAL ? "EINVAL" : r == ETIMEDOUT ? "ETIMEDOUT" : r == EPERM ? "EPERM" : r == EBUSY ? "EBUSY" : r == EDEADLK ? "EDEADLK" : "other"); return b[i]; }
static void tw(const char *what, pthread_mutex_t *m, int clockw, clockid_t c, struct timespec t, long expect_ms)
{
    pthread_mutex_lock(m);
    long t0 = ms();
    int r = clockw ? pthread_cond_clockwait(&cv, m, c, &t) : pthread_cond_timedwait(&cv, m, &t);
    long w = ms() - t0;
    int held = pthread_mutex_trylock(m);
    if (held == 0) pthread_mutex_unlock(m);
    pthread_mutex_unlock(m);
    printf("%-45s %s %s held-after %s\n", what, e(r), (w >= expect_ms - 5 && w <= expect_ms + 300) ? "on-time" : "OFF-TIME", e(held));
    if (!(w >= expect_ms - 5 && w <= expect_ms + 300)) fprintf(stderr, "  %s took %ld ms, expected %ld\n", what, w, expect_ms);
}
static int cleaned;
static void cleanup(void *a) { int r = pthread_mutex_trylock(a); cleaned = r == 0 ? 1 : r == EDEADLK || r == EBUSY ? 2 : 3; pthread_mutex_unlock(a); }
static volatile int waiting;
static void *canc(void *a)
{
    pthread_mutex_t *m = a;
    pthread_mutex_lock(m);
    pthread_cleanup_push(cleanup, m);
    waiting = 1;
    for (;;) pthread_cond_wait(&cv, m);
    pthread_cleanup_pop(0);
    return NULL;
}
int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_mutexattr_t ma; pthread_mutexattr_init(&ma); pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutex_init(&lm, &ma);
    tw("realtime cond, timedwait 200", &lm, 0, 0, in_ms(CLOCK_REALTIME, 200), 200);
    tw("realtime cond, clockwait MONO 200", &lm, 1, CLOCK_MONOTONIC, in_ms(CLOCK_MONOTONIC, 200), 200);
    { struct timespec p = in_ms(CLOCK_REALTIME, 0); p.tv_sec -= 1; tw("realtime cond, timedwait past", &lm, 0, 0, p, 0); }
    struct timespec bad = in_ms(CLOCK_REALTIME, 100); bad.tv_nsec = 1000000000;
    tw("timedwait nsec 1e9", &lm, 0, 0, bad, 0);
    tw("clockwait CPUTIME", &lm, 1, CLOCK_PROCESS_CPUTIME_ID, in_ms(CLOCK_REALTIME, 100), 0);
    struct timespec nn = in_ms(CLOCK_REALTIME, 100); nn.tv_nsec = -1;
    tw("timedwait nsec -1", &lm, 0, 0, nn, 0);
    tw("timedwait nsec -1, mapped mutex", &cm, 0, 0, nn, 0);
    struct timespec neg = { -1, 0 };
    tw("timedwait tv_sec=-1", &lm, 0, 0, neg, 0);
    pthread_condattr_t ca; pthread_condattr_init(&ca); pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_destroy(&cv);
    printf("init monotonic cond %s\n", e(pthread_cond_init(&cv, &ca)));
    tw("mono cond, timedwait MONO 200", &lm, 0, 0, in_ms(CLOCK_MONOTONIC, 200), 200);
    tw("mono cond, clockwait REALTIME 200", &lm, 1, CLOCK_REALTIME, in_ms(CLOCK_REALTIME, 200), 200);
    tw("mono cond, mapped mutex, timedwait 200", &cm, 0, 0, in_ms(CLOCK_MONOTONIC, 200), 200);
    /* wait without holding an errorcheck mutex */
    struct timespec t = in_ms(CLOCK_MONOTONIC, 100);
    printf("%-45s %s\n", "timedwait, errorcheck mutex not held", e(pthread_cond_timedwait(&cv, &lm, &t)));
    pthread_t th;
    pthread_create(&th, NULL, canc, &lm);
    while (!waiting) usleep(1000);
    usleep(100000);
    pthread_cancel(th);
    void *rv; pthread_join(th, &rv);
    printf("cancelled %d cleanup-held %d\n", rv == PTHREAD_CANCELED, cleaned);
    waiting = 0; cleaned = 0;
    pthread_create(&th, NULL, canc, &cm);
    while (!waiting) usleep(1000);
    usleep(100000);
    pthread_cancel(th);
    pthread_join(th, &rv);
    printf("mapped mutex: cancelled %d cleanup-held %d\n", rv == PTHREAD_CANCELED, cleaned);
    printf("lock cm after %s\n", e(pthread_mutex_trylock(&cm)));
    pthread_cond_broadcast(&cv);
    printf("destroy after broadcast %s\n", e(pthread_cond_destroy(&cv)));
    return 0;
}
