/* soakworker: the program `make soak` runs on its machines. An ordinary
 * pthread program: its two global mutexes, soak_a and soak_b, become
 * cluster-wide only through the config the soak writes (LD_PRELOAD of
 * build/libdmutex.so); it links nothing of the shim and takes the fencing
 * token through the public API (include/dmutex.h, declared weak: without
 * the shim every token is 0).
 *
 * Each thread loops until END: picks a lock and a lock call (lock,
 * timedlock, trylock), and around a critical section writes one record per
 * event to its log (-o, O_APPEND, one write(2) per line, no stdio buffer:
 * a SIGKILL loses at most the record being written):
 *
 *   NS want PID TID LOCK OP          a lock call begins (OP: lock|timed|try)
 *   NS enter PID TID LOCK TOKEN      it returned 0: inside, with this token
 *   NS exit PID TID LOCK TOKEN       leaving: the unlock comes next
 *   NS unlocked PID TID LOCK RC      the unlock returned RC (0, EPERM...)
 *   NS fail PID TID LOCK RC          the lock call returned RC, not inside
 *   NS start PID HOST                first line; NS done PID: last line
 *
 * NS is CLOCK_MONOTONIC in nanoseconds (one clock for every network
 * namespace of a machine: the checker merges the logs on it). Inside,
 * after the section's sleep, the thread writes to the fenced resource
 * (soakfence, -f): a write it rejects is logged there, not here.
 *
 *   soakworker -o LOG -H HOST -e END_NS -f FENCE_SOCK [-t THREADS]
 *              [-u MIN_US] [-U MAX_US] [-z THINK_US] [-s SEED] */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dmutex.h"
#pragma weak dmutex_token

#define MAX_THREADS 16
#define TIMED_MIN_MS 50          /* a timed lock's deadline: 50..1550 ms */
#define TIMED_SPAN_MS 1500
#define FAIL_PAUSE_US 20000      /* after a failed lock call */

pthread_mutex_t soak_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t soak_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t *const locks[] = { &soak_a, &soak_b };
static const char *const lock_names[] = { "soak_a", "soak_b" };
#define NLOCKS 2

static int log_fd = -1;
static const char *fence_path, *host = "?";
static long long end_ns;
static long min_us = 200, max_us = 3000, think_us = 5000;
static unsigned seed0;

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* One line, one write(2): lines of several threads never interleave. */
static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...)
{
    char line[256];
    int n = snprintf(line, sizeof line, "%lld ", mono_ns());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (write(log_fd, line, (size_t)n) != n)
        _exit(3);   /* a worker that cannot log is worthless to the checker */
}

static int fence_connect(void)
{
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", fence_path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        fprintf(stderr, "soakworker: fence %s: %s\n", fence_path, strerror(errno));
        _exit(3);
    }
    return fd;
}

/* The fenced write: the resource decides (and logs) whether it is stale. */
static void fence_write(int fd, int lock, uint64_t token, int tid)
{
    char msg[160], reply[64];
    int n = snprintf(msg, sizeof msg, "w %s %llu %d %d %lld", lock_names[lock],
                     (unsigned long long)token, (int)getpid(), tid, mono_ns());
    if (send(fd, msg, (size_t)n, MSG_NOSIGNAL) != n || recv(fd, reply, sizeof reply, 0) <= 0) {
        fprintf(stderr, "soakworker: fence write: %s\n", strerror(errno));
        _exit(3);
    }
}

static long pick(unsigned *s, long lo, long hi)
{
    return hi <= lo ? lo : lo + (long)(rand_r(s) % (unsigned)(hi - lo + 1));
}

static void *run(void *arg)
{
    int tid = (int)(intptr_t)arg;
    unsigned s = seed0 * 2654435761u + (unsigned)getpid() * 40503u + (unsigned)tid;
    int fd = fence_connect();
    while (mono_ns() < end_ns) {
        int lock = (int)pick(&s, 0, NLOCKS - 1);
        pthread_mutex_t *m = locks[lock];
        long r = pick(&s, 0, 99);
        const char *op = r < 75 ? "lock" : r < 90 ? "timed" : "try";
        record("want %d %d %s %s", (int)getpid(), tid, lock_names[lock], op);
        int rc;
        if (op[0] == 'l') {
            rc = pthread_mutex_lock(m);
        } else if (op[0] == 't' && op[1] == 'i') {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            long ms = pick(&s, TIMED_MIN_MS, TIMED_MIN_MS + TIMED_SPAN_MS);
            dl.tv_sec += ms / 1000;
            dl.tv_nsec += (ms % 1000) * 1000000L;
            if (dl.tv_nsec >= 1000000000L) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000L;
            }
            rc = pthread_mutex_timedlock(m, &dl);
        } else {
            rc = pthread_mutex_trylock(m);
        }
        if (rc != 0) {
            record("fail %d %d %s %d", (int)getpid(), tid, lock_names[lock], rc);
            usleep(op[1] == 'r' ? (useconds_t)pick(&s, 0, FAIL_PAUSE_US) : FAIL_PAUSE_US);
            continue;
        }
        uint64_t token = dmutex_token ? dmutex_token(m) : 0;
        record("enter %d %d %s %llu", (int)getpid(), tid, lock_names[lock],
               (unsigned long long)token);
        usleep((useconds_t)pick(&s, min_us, max_us));
        fence_write(fd, lock, token, tid);
        record("exit %d %d %s %llu", (int)getpid(), tid, lock_names[lock],
               (unsigned long long)token);
        rc = pthread_mutex_unlock(m);
        record("unlocked %d %d %s %d", (int)getpid(), tid, lock_names[lock], rc);
        if (think_us)
            usleep((useconds_t)pick(&s, 0, think_us));
    }
    close(fd);
    return NULL;
}

static int usage(void)
{
    fprintf(stderr, "usage: soakworker -o LOG -H HOST -e END_NS -f FENCE_SOCK [-t THREADS]"
                    " [-u MIN_US] [-U MAX_US] [-z THINK_US] [-s SEED]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *log_path = NULL;
    int nthreads = 2, ch;
    while ((ch = getopt(argc, argv, "o:H:e:f:t:u:U:z:s:")) != -1) {
        switch (ch) {
        case 'o': log_path = optarg; break;
        case 'H': host = optarg; break;
        case 'e': end_ns = atoll(optarg); break;
        case 'f': fence_path = optarg; break;
        case 't': nthreads = atoi(optarg); break;
        case 'u': min_us = atol(optarg); break;
        case 'U': max_us = atol(optarg); break;
        case 'z': think_us = atol(optarg); break;
        case 's': seed0 = (unsigned)strtoul(optarg, NULL, 10); break;
        default: return usage();
        }
    }
    if (!log_path || !fence_path || end_ns <= 0 || nthreads < 1 || nthreads > MAX_THREADS ||
        min_us < 0 || max_us < min_us || think_us < 0)
        return usage();
    log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
        fprintf(stderr, "soakworker: %s: %s\n", log_path, strerror(errno));
        return 3;
    }
    record("start %d %s", (int)getpid(), host);
    pthread_t t[MAX_THREADS];
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&t[i], NULL, run, (void *)(intptr_t)i) != 0) {
            fprintf(stderr, "soakworker: pthread_create failed\n");
            return 3;
        }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    record("done %d", (int)getpid());
    return 0;
}
