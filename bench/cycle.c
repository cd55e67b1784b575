/* cycle: the benchmark's C worker, an ordinary pthread program that knows
 * nothing of dmutex. It locks the global `bench_lock`; the benchmark makes
 * that mutex cluster-wide the way a user would, with LD_PRELOAD and a config
 * mapping `bench_lock`. The peers' workers (bench/peers/) do exactly the same
 * steps with their own lock libraries, so one driver can run them all.
 *
 *   cycle ping HOST PORT N
 *       N PINGs on one hiredis connection: {"ping_ns": [median, mean]}
 *   cycle pairs HOST PORT SECONDS TIMED
 *       lock+unlock pairs of bench_lock for SECONDS after one warm-up pair:
 *       {"n": pairs, "ns": elapsed, "median_ns": m, "ping_ns": [median, mean]};
 *       TIMED=0 skips the per-pair clock reads (and the median) for
 *       sub-microsecond pairs. TIMED=1 also times a PING before each pair on
 *       this process's own hiredis connection, so that both see the same
 *       machine load ("ns" then includes the PINGs).
 *   cycle run HOST PORT KEY HOLD_US
 *       The contended worker. Warm-up cycles for 0.3 s, then "ready";
 *       waits for "go DEADLINE_NS" (CLOCK_MONOTONIC) on stdin and repeats
 *       lock; INCR KEY; sleep HOLD_US; unlock until the deadline. Prints
 *       {"acq": [[t0, t1, t2, t3], ...], "fail": 0}: per acquisition the time
 *       lock was called, returned, unlock was called and returned (ns,
 *       monotonic, so comparable across the processes of one machine). Then waits for
 *       end of file on stdin, so the driver reads the server's counters
 *       before anything this process does at exit. */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define CHECK_EVERY 1024        /* untimed pairs between two clock reads */
#define WARMUP_NS 300000000LL   /* warm-up cycles before "ready", as the peers' workers */

pthread_mutex_t bench_lock = PTHREAD_MUTEX_INITIALIZER;

static void die(const char *what)
{
    fprintf(stderr, "cycle: %s\n", what);
    exit(1);
}

static long long median(long long *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_ll);
    return v[n / 2];
}

static void lock_or_die(void)
{
    if (pthread_mutex_lock(&bench_lock) != 0)
        die("pthread_mutex_lock failed");
}

static void unlock_or_die(void)
{
    if (pthread_mutex_unlock(&bench_lock) != 0)
        die("pthread_mutex_unlock failed");
}

static long long ping_once(redisContext *c)
{
    long long t = now_ns();
    redisReply *r = redisCommand(c, "PING");
    t = now_ns() - t;
    if (!r)
        die("PING failed");
    freeReplyObject(r);
    return t;
}

static int cmd_ping(const char *host, int port, long n)
{
    redisContext *c = connect_or_die("cycle", host, port);
    long long *d = malloc((size_t)n * sizeof *d), sum = 0;
    if (!d)
        die("out of memory");
    for (long i = 0; i < n; i++)
        sum += d[i] = ping_once(c);
    printf("{\"ping_ns\": [%lld, %lld]}\n", median(d, (size_t)n), sum / n);
    redisFree(c);
    return 0;
}

static int cmd_pairs(const char *host, int port, double seconds, int timed)
{
    redisContext *c = timed ? connect_or_die("cycle", host, port) : NULL;
    lock_or_die();              /* warm-up: connections, scripts, a cached lock */
    unlock_or_die();
    size_t cap = timed ? 1 << 16 : 0, n = 0;
    long long *d = timed ? malloc(cap * sizeof *d) : NULL;
    long long *p = timed ? malloc(cap * sizeof *p) : NULL, psum = 0;
    long long start = now_ns(), end = start + (long long)(seconds * 1e9), t = start;
    while (t < end) {
        if (timed) {
            if (n == cap) {
                cap *= 2;
                if (!(d = realloc(d, cap * sizeof *d)) || !(p = realloc(p, cap * sizeof *p)))
                    die("out of memory");
            }
            psum += p[n] = ping_once(c);
            long long t0 = now_ns();
            lock_or_die();
            unlock_or_die();
            t = now_ns();
            d[n++] = t - t0;
        } else {
            for (int i = 0; i < CHECK_EVERY; i++) {
                lock_or_die();
                unlock_or_die();
            }
            n += CHECK_EVERY;
            t = now_ns();
        }
    }
    long long pmean = timed && n ? psum / (long long)n : 0;
    printf("{\"n\": %zu, \"ns\": %lld, \"median_ns\": %lld, \"ping_ns\": [%lld, %lld]}\n",
           n, t - start, timed ? median(d, n) : 0, timed ? median(p, n) : 0, pmean);
    return 0;
}

struct acq { long long t0, t1, t2, t3; };

static void one_cycle(redisContext *c, const char *key, long hold_us, struct acq *a)
{
    a->t0 = now_ns();
    lock_or_die();
    a->t1 = now_ns();
    redisReply *r = redisCommand(c, "INCR %s", key);
    if (!r || r->type != REDIS_REPLY_INTEGER)
        die("INCR failed");
    freeReplyObject(r);
    if (hold_us > 0) {
        struct timespec ts = { hold_us / 1000000, (hold_us % 1000000) * 1000 };
        nanosleep(&ts, NULL);
    }
    a->t2 = now_ns();
    unlock_or_die();
    a->t3 = now_ns();
}

static int cmd_run(const char *host, int port, const char *key, long hold_us)
{
    redisContext *c = connect_or_die("cycle", host, port);
    struct acq warm;
    long long warm_end = now_ns() + WARMUP_NS;
    do
        one_cycle(c, key, 0, &warm);
    while (now_ns() < warm_end);
    printf("ready\n");
    fflush(stdout);
    char line[128];
    long long deadline;
    if (!fgets(line, sizeof line, stdin) || sscanf(line, "go %lld", &deadline) != 1)
        die("expected \"go DEADLINE_NS\" on stdin");
    size_t cap = 1 << 14, n = 0;
    struct acq *a = malloc(cap * sizeof *a);
    if (!a)
        die("out of memory");
    while (now_ns() < deadline) {
        if (n == cap && !(a = realloc(a, (cap *= 2) * sizeof *a)))
            die("out of memory");
        one_cycle(c, key, hold_us, &a[n++]);
    }
    fputs("{\"fail\": 0, \"acq\": [", stdout);
    for (size_t i = 0; i < n; i++)
        printf("%s[%lld,%lld,%lld,%lld]", i ? "," : "", a[i].t0, a[i].t1, a[i].t2, a[i].t3);
    fputs("]}\n", stdout);
    fflush(stdout);
    while (fgets(line, sizeof line, stdin))
        ;
    redisFree(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "ping") == 0)
        return cmd_ping(argv[2], atoi(argv[3]), atol(argv[4]) > 0 ? atol(argv[4]) : 1);
    if (argc == 6 && strcmp(argv[1], "pairs") == 0)
        return cmd_pairs(argv[2], atoi(argv[3]), atof(argv[4]), atoi(argv[5]));
    if (argc == 6 && strcmp(argv[1], "run") == 0)
        return cmd_run(argv[2], atoi(argv[3]), argv[4], atol(argv[5]));
    fprintf(stderr, "usage: cycle ping HOST PORT N\n"
                    "       cycle pairs HOST PORT SECONDS TIMED\n"
                    "       cycle run HOST PORT KEY HOLD_US\n");
    return 2;
}
