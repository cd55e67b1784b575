/* cva: cond attacks. Predicate in shared memory (SHMF), guarded by the mapped mutex cm. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
struct shm { long items, produced, consumed; };
static struct shm *S;
static long ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000 + t.tv_nsec / 1000000; }
int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    int fd = open(getenv("SHMF"), O_RDWR | O_CREAT, 0600);
    ftruncate(fd, 4096);
    S = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const char *mode = argv[1];
    if (!strcmp(mode, "consume")) {      /* consume N [TIMEOUT_MS]: untimed waits (or timed) */
        int n = atoi(argv[2]);
        long to = argc > 3 ? atol(argv[3]) : 0;
        long spur = 0, tmo = 0, maxw = 0;
        for (int i = 0; i < n; i++) {
            pthread_mutex_lock(&cm);
            while (S->items == 0) {
                long t0 = ms();
                int r;
                if (to) {
                    struct timespec d; clock_gettime(CLOCK_REALTIME, &d);
                    d.tv_sec += to / 1000; d.tv_nsec += (to % 1000) * 1000000;
                    if (d.tv_nsec >= 1000000000) { d.tv_sec++; d.tv_nsec -= 1000000000; }
                    r = pthread_cond_timedwait(&cv, &cm, &d);
                    long w = ms() - t0;
                    if (r == ETIMEDOUT) { tmo++; if (w > to + 500 || w < to - 5) printf("timedwait late/early: %ld ms for %ld\n", w, to); }
                    else if (r) printf("timedwait %d\n", r);
                } else {
                    r = pthread_cond_wait(&cv, &cm);
                    if (r) printf("wait %d\n", r);
                }
                long w = ms() - t0; if (w > maxw) maxw = w;
                spur++;
            }
            S->items--; S->consumed++;
            pthread_mutex_unlock(&cm);
        }
        printf("consumer %d done: wakeups %ld timeouts %ld max wait %ld ms\n", getpid(), spur, tmo, maxw);
        return 0;
    }
    if (!strcmp(mode, "produce")) {      /* produce N GAP_MS [broadcast] */
        int n = atoi(argv[2]), gap = atoi(argv[3]);
        int bc = argc > 4;
        for (int i = 0; i < n; i++) {
            pthread_mutex_lock(&cm);
            S->items++; S->produced++;
            bc ? pthread_cond_broadcast(&cv) : pthread_cond_signal(&cv);
            pthread_mutex_unlock(&cm);
            if (gap) usleep(gap * 1000);
        }
        printf("producer %d done\n", getpid());
        return 0;
    }

    if (!strcmp(mode, "tw")) {           /* tw TO_MS COUNT CLOCK(r|m): timed waits, local mutex */
        static pthread_mutex_t lm = PTHREAD_MUTEX_INITIALIZER;
        long to = atol(argv[2]); int n = atoi(argv[3]);
        clockid_t ck = argv[4][0] == 'm' ? CLOCK_MONOTONIC : CLOCK_REALTIME;
        long worst = 0; int late = 0;
        for (int i = 0; i < n; i++) {
            pthread_mutex_lock(&lm);
            struct timespec d; clock_gettime(ck, &d);
            d.tv_sec += to / 1000; d.tv_nsec += (to % 1000) * 1000000;
            if (d.tv_nsec >= 1000000000) { d.tv_sec++; d.tv_nsec -= 1000000000; }
            long t0 = ms();
            int r = pthread_cond_clockwait(&cv, &lm, ck, &d);
            long w = ms() - t0;
            pthread_mutex_unlock(&lm);
            if (r == ETIMEDOUT && w > worst) worst = w;
            if (r == ETIMEDOUT && w > to + 200) { late++; printf("late: %ld ms (deadline %ld) at %ld\n", w, to, ms()); }
            if (r != ETIMEDOUT && r != 0) printf("rc %d\n", r);
        }
        printf("tw done worst %ld late %d\n", worst, late);
        return 0;
    }

    if (!strcmp(mode, "mloop")) {        /* mloop SECONDS HOLD_MS GAP_MS: lock cm, note inside, unlock */
        long end = ms() + atol(argv[2]) * 1000; int hold = atoi(argv[3]), gap = atoi(argv[4]);
        volatile int *in = (volatile int *)((char *)S + 2048);
        long bad = 0, n = 0;
        while (ms() < end) {
            int r = pthread_mutex_lock(&cm);
            if (r) { printf("lock %d\n", r); continue; }
            if (__atomic_add_fetch(in, 1, 0) != 1) { bad++; printf("entered beside another holder at %ld\n", ms()); }
            usleep(hold * 1000);
            __atomic_sub_fetch(in, 1, 0);
            r = pthread_mutex_unlock(&cm);
            if (r) printf("unlock %d at %ld\n", r, ms());
            n++;
            usleep(gap * 1000);
        }
        printf("mloop pid %d bad %ld n %ld\n", getpid(), bad, n);
        return 0;
    }
    return 2;
}
