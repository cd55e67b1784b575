/* rwa: rwlock attacks. Shared state in files under /dev/shm (cross-process
 * check of exclusion): a writer sets inw=1 for its section, readers check. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;

struct shm { volatile int writers, readers; volatile long bad, wdone, rdone; };
static struct shm *S;
static void shm_open_(void)
{
    int fd = open(getenv("SHMF"), O_RDWR | O_CREAT, 0600);
    ftruncate(fd, 4096);
    S = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}
static long ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000 + t.tv_nsec / 1000000; }
static int dur; static long mine;
static void *reader(void *a)
{
    (void)a;
    long end = ms() + dur;
    while (ms() < end) {
        int r = pthread_rwlock_rdlock(&rw);
        if (r) { printf("rdlock %d\n", r); continue; }
        __atomic_add_fetch(&S->readers, 1, 0);
        if (__atomic_load_n(&S->writers, 0)) { __atomic_add_fetch(&S->bad, 1, 0); }
        usleep(rand() % 3000);
        if (__atomic_load_n(&S->writers, 0)) { __atomic_add_fetch(&S->bad, 1, 0); }
        __atomic_sub_fetch(&S->readers, 1, 0);
        __atomic_add_fetch(&S->rdone, 1, 0);
        pthread_rwlock_unlock(&rw);
        usleep(rand() % 1000);
    }
    return NULL;
}
static void *writer(void *a)
{
    (void)a;
    long end = ms() + dur;
    while (ms() < end) {
        int r = pthread_rwlock_wrlock(&rw);
        if (r) { printf("wrlock %d\n", r); continue; }
        if (__atomic_add_fetch(&S->writers, 1, 0) != 1 || __atomic_load_n(&S->readers, 0))
            __atomic_add_fetch(&S->bad, 1, 0);
        usleep(rand() % 3000);
        if (__atomic_load_n(&S->readers, 0)) __atomic_add_fetch(&S->bad, 1, 0);
        __atomic_sub_fetch(&S->writers, 1, 0);
        __atomic_add_fetch(&S->wdone, 1, 0); __atomic_add_fetch(&mine, 1, 0);
        pthread_rwlock_unlock(&rw);
        usleep(rand() % 5000);
    }
    return NULL;
}
static int hold_ms; static long enter_bad, errs;
static void *rloop(void *a)
{
    (void)a;
    long end = ms() + dur;
    while (ms() < end) {
        int r = pthread_rwlock_rdlock(&rw);
        if (r) { __atomic_add_fetch(&errs, 1, 0); usleep(1000); continue; }
        if (__atomic_load_n(&S->writers, 0)) { __atomic_add_fetch(&enter_bad, 1, 0); printf("reader entered beside a writer at %ld\n", ms()); }
        __atomic_add_fetch(&S->readers, 1, 0);
        usleep(hold_ms * 1000);
        __atomic_sub_fetch(&S->readers, 1, 0);
        __atomic_add_fetch(&S->rdone, 1, 0);
        r = pthread_rwlock_unlock(&rw);
        if (r) { __atomic_add_fetch(&errs, 1, 0); printf("unlock %d at %ld\n", r, ms()); }
    }
    return NULL;
}
static void *wloop(void *a)
{
    (void)a;
    long end = ms() + dur;
    while (ms() < end) {
        int r = pthread_rwlock_wrlock(&rw);
        if (r) { __atomic_add_fetch(&errs, 1, 0); usleep(1000); continue; }
        if (__atomic_load_n(&S->readers, 0) || __atomic_load_n(&S->writers, 0)) { __atomic_add_fetch(&enter_bad, 1, 0); printf("writer entered beside r%d w%d at %ld\n", S->readers, S->writers, ms()); }
        __atomic_add_fetch(&S->writers, 1, 0);
        usleep(hold_ms * 1000);
        __atomic_sub_fetch(&S->writers, 1, 0);
        __atomic_add_fetch(&S->wdone, 1, 0); __atomic_add_fetch(&mine, 1, 0);
        r = pthread_rwlock_unlock(&rw);
        if (r) { __atomic_add_fetch(&errs, 1, 0); printf("wunlock %d at %ld\n", r, ms()); }
        usleep(getenv("WGAP") ? atoi(getenv("WGAP")) * 1000 : 20000);
    }
    return NULL;
}

struct slot { volatile int pid, readers, writers; };
static struct slot *SL, *me_slot;
static int alive(int pid)
{
    char p[64], b[256]; snprintf(p, sizeof p, "/proc/%d/stat", pid);
    FILE *f = fopen(p, "r"); if (!f) return 0;
    int ok = fgets(b, sizeof b, f) != NULL; fclose(f);
    if (!ok) return 0;
    char *c = strrchr(b, ')'); return c && c[2] != 'Z' && c[2] != 'X';
}
static long s_bad, s_mine_r, s_mine_w;
static int conflict(int write)
{
    for (int i = 0; i < 32; i++) {
        struct slot *s = &SL[i];
        if (!s->pid) continue;
        int r = s->readers, w = s->writers;
        if (s == me_slot) { if (write ? (r || w) : w) return 1; continue; }
        if ((write ? (r || w) : w) && alive(s->pid)) { printf("conflict with pid %d r%d w%d (I %s) at %ld\n", s->pid, r, w, write ? "write" : "read", ms()); return 1; }
    }
    return 0;
}
static void *sreader(void *a)
{
    (void)a; long end = ms() + dur;
    while (ms() < end) {
        if (pthread_rwlock_rdlock(&rw)) { usleep(1000); continue; }
        if (conflict(0)) __atomic_add_fetch(&s_bad, 1, 0);
        __atomic_add_fetch(&me_slot->readers, 1, 0);
        usleep(hold_ms * 1000);
        __atomic_sub_fetch(&me_slot->readers, 1, 0);
        s_mine_r++;
        pthread_rwlock_unlock(&rw);
    }
    return NULL;
}
static void *swriter(void *a)
{
    (void)a; long end = ms() + dur;
    while (ms() < end) {
        if (pthread_rwlock_wrlock(&rw)) { usleep(1000); continue; }
        if (conflict(1)) __atomic_add_fetch(&s_bad, 1, 0);
        __atomic_add_fetch(&me_slot->writers, 1, 0);
        usleep(hold_ms * 1000);
        __atomic_sub_fetch(&me_slot->writers, 1, 0);
        s_mine_w++;
        pthread_rwlock_unlock(&rw);
        usleep(rand() % 20000);
    }
    return NULL;
}
static pthread_mutex_t m2 = PTHREAD_MUTEX_INITIALIZER;
static volatile int t1_reading;
static void *dl_t1(void *a)
{
    (void)a;
    pthread_rwlock_rdlock(&rw);
    t1_reading = 1;
    pthread_mutex_lock(&m2);          /* held by main until its rdlock is done */
    pthread_mutex_unlock(&m2);
    pthread_rwlock_unlock(&rw);
    return NULL;
}
int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    const char *mode = argv[1];
    srand(getpid());
    if (!strcmp(mode, "mix")) {          /* mix SECONDS NREADERS NWRITERS */
        shm_open_();
        dur = atoi(argv[2]) * 1000;
        int nr = atoi(argv[3]), nw = atoi(argv[4]);
        pthread_t t[64];
        int n = 0;
        for (int i = 0; i < nr; i++) pthread_create(&t[n++], NULL, reader, NULL);
        for (int i = 0; i < nw; i++) pthread_create(&t[n++], NULL, writer, NULL);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        printf("pid %d bad %ld wdone %ld rdone %ld\n", getpid(), S->bad, S->wdone, S->rdone);
        return 0;
    }

    if (!strcmp(mode, "wr")) {           /* wr HOLD_MS: wrlock, "got", hold, unlock */
        long t0 = ms();
        int r = pthread_rwlock_wrlock(&rw);
        printf("wr got %d after %ld ms\n", r, ms() - t0);
        usleep(atoi(argv[2]) * 1000);
        printf("wr unlock %d\n", pthread_rwlock_unlock(&rw));
        return 0;
    }
    if (!strcmp(mode, "dl")) {           /* reader-preference deadlock */
        pthread_t t;
        pthread_mutex_lock(&m2);
        pthread_create(&t, NULL, dl_t1, NULL);
        while (!t1_reading) usleep(1000);
        printf("t1 reads; waiting %s ms for a remote writer to queue\n", argv[2]);
        usleep(atoi(argv[2]) * 1000);
        long t0 = ms();
        int r = pthread_rwlock_rdlock(&rw);   /* glibc default kind: granted at once */
        printf("t2 rdlock %d after %ld ms\n", r, ms() - t0);
        pthread_rwlock_unlock(&rw);
        pthread_mutex_unlock(&m2);
        pthread_join(t, NULL);
        printf("done\n");
        return 0;
    }

    if (!strcmp(mode, "rloop") || !strcmp(mode, "wloop")) {   /* SECONDS NTHREADS HOLD_MS */
        shm_open_();
        dur = atoi(argv[2]) * 1000;
        hold_ms = atoi(argv[4]);
        pthread_t t[64];
        int n = atoi(argv[3]);
        for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, mode[0] == 'r' ? rloop : wloop, NULL);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        printf("mine %ld pid %d %s enter_bad %ld wdone %ld rdone %ld errs %ld\n", mine, getpid(), mode, enter_bad, S->wdone, S->rdone, errs);
        return 0;
    }

    if (!strcmp(mode, "sloop")) {        /* sloop SECONDS NREADERS NWRITERS HOLD_MS */
        shm_open_();
        SL = (struct slot *)((char *)S + 1024);
        for (int i = 0; i < 32; i++) if (__sync_bool_compare_and_swap(&SL[i].pid, 0, getpid())) { me_slot = &SL[i]; break; }
        dur = atoi(argv[2]) * 1000; hold_ms = atoi(argv[5]);
        int nr = atoi(argv[3]), nw = atoi(argv[4]), n = 0;
        pthread_t t[64];
        for (int i = 0; i < nr; i++) pthread_create(&t[n++], NULL, sreader, NULL);
        for (int i = 0; i < nw; i++) pthread_create(&t[n++], NULL, swriter, NULL);
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        printf("sloop pid %d bad %ld reads %ld writes %ld\n", getpid(), s_bad, s_mine_r, s_mine_w);
        return 0;
    }

    if (!strcmp(mode, "rd1")) {
        int a = pthread_rwlock_rdlock(&rw), b = pthread_rwlock_unlock(&rw);
        printf("rd1 %d %d\n", a, b);
        return 0;
    }

    if (!strcmp(mode, "down")) {         /* answers while redis is down */
        struct timespec d; clock_gettime(CLOCK_REALTIME, &d); d.tv_sec += 1;
        long t0 = ms(); int r = pthread_rwlock_timedwrlock(&rw, &d);
        printf("timedwrlock 1s %d after %ld ms\n", r, ms() - t0); if (!r) pthread_rwlock_unlock(&rw);
        clock_gettime(CLOCK_REALTIME, &d); d.tv_sec += 1;
        t0 = ms(); r = pthread_rwlock_timedrdlock(&rw, &d);
        printf("timedrdlock 1s %d after %ld ms\n", r, ms() - t0); if (!r) pthread_rwlock_unlock(&rw);
        t0 = ms(); r = pthread_rwlock_tryrdlock(&rw);
        printf("tryrdlock %d after %ld ms\n", r, ms() - t0); if (!r) pthread_rwlock_unlock(&rw);
        t0 = ms(); r = pthread_rwlock_trywrlock(&rw);
        printf("trywrlock %d after %ld ms\n", r, ms() - t0); if (!r) pthread_rwlock_unlock(&rw);
        if (argc > 2) {
            t0 = ms(); r = pthread_rwlock_rdlock(&rw);
            printf("rdlock %d after %ld ms\n", r, ms() - t0); if (!r) printf("unlock %d\n", pthread_rwlock_unlock(&rw));
            t0 = ms(); r = pthread_rwlock_wrlock(&rw);
            printf("wrlock %d after %ld ms\n", r, ms() - t0); if (!r) printf("unlock %d\n", pthread_rwlock_unlock(&rw));
        }
        return 0;
    }
    return 2;
}
