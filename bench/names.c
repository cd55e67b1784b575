/* names: the cost of many mapped names (issue 14, memory per name). An
 * ordinary pthread program that names each object's heap mutex with the
 * public dmutex_name() (include/dmutex.h), as a program with per-object locks
 * would; run it with libdmutex.so preloaded (bench/names.sh does).
 *
 * Each timed pair is preceded by a PING on the program's own hiredis
 * connection to the same server, timed too: the pair's median over the
 * PING's cancels some of a shared machine's load swings. The calling
 * thread's CPU time per pair (CLOCK_THREAD_CPUTIME_ID: the shim's own work,
 * no waiting for Redis) is the figure that load moves least.
 *
 *   names PORT live N... for each N: N objects, each with its own mutex
 *                        named "<run>-<i>"; RSS per idle name; the median
 *                        lock+unlock of names picked at random among the N
 *                        live ones; then every mutex destroyed.
 *   names PORT churn TOTAL  TOTAL times: make an object, name its mutex, lock,
 *                        unlock, destroy, free; RSS at ten checkpoints.
 *
 * Prints one JSON object per line. Targets (the performance issue):
 * lock+unlock with 100,000 live names at most 1.2 times that with 10, and
 * at most 1 KB of RSS per idle name; churn RSS flat. Whether memory comes
 * back after destroy is reported as measured, whatever the shim does. */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dmutex.h"

#pragma weak dmutex_name

#define SAMPLES     2000    /* timed lock+unlock pairs per N */
#define WARMUP      200     /* untimed pairs first: connections, scripts */
#define CHECKPOINTS 10      /* churn: RSS readings over the run */
#define WARMUP_NAMES 10     /* a first, unreported run of this many names */

struct object {
    long id;
    pthread_mutex_t lock;
    char payload[24];       /* what an object would hold besides its lock */
};

static double clock_us(clockid_t clk)
{
    return (double)clock_ns(clk) / 1e3;
}

static double now_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}

static redisContext *ping_ctx;

static double ping_us(void)
{
    double s = now_us();
    redisReply *r = redisCommand(ping_ctx, "PING");
    if (!r) {
        fprintf(stderr, "names: PING failed: %s\n", ping_ctx->errstr);
        exit(1);
    }
    freeReplyObject(r);
    return now_us() - s;
}

/* Resident set size in bytes, from /proc/self/statm. */
static long rss_bytes(void)
{
    long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2)
        resident = 0;
    if (f)
        fclose(f);
    return resident * sysconf(_SC_PAGESIZE);
}

static unsigned long long rnd_state = 88172645463325252ULL;

static unsigned long rnd(unsigned long n)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return (unsigned long)(rnd_state % n);
}

static struct object *object_alloc(long i)
{
    struct object *o = calloc(1, sizeof *o);
    if (!o) {
        fprintf(stderr, "names: out of memory at object %ld\n", i);
        exit(1);
    }
    o->id = i;
    pthread_mutex_init(&o->lock, NULL);
    return o;
}

static void object_name(struct object *o, const char *run)
{
    char name[64];
    snprintf(name, sizeof name, "%s-%ld", run, o->id);
    int rc = dmutex_name(&o->lock, name);
    if (rc != 0) {
        fprintf(stderr, "names: dmutex_name(%s) = %s\n", name, strerror(rc));
        exit(1);
    }
}

static void pair(struct object *o)
{
    if (pthread_mutex_lock(&o->lock) != 0 || pthread_mutex_unlock(&o->lock) != 0) {
        fprintf(stderr, "names: lock+unlock of object %ld failed\n", o->id);
        exit(1);
    }
}

static void live(long n, int run)
{
    int report = run > 0;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "live%d", run);
    struct object **objs = malloc((size_t)n * sizeof *objs);
    double *t = malloc(SAMPLES * sizeof *t), *pt = malloc(SAMPLES * sizeof *pt);
    double *ct = malloc(SAMPLES * sizeof *ct);
    if (!objs || !t || !pt || !ct) {
        fprintf(stderr, "names: out of memory for %ld objects\n", n);
        exit(1);
    }
    for (long i = 0; i < n; i++)
        objs[i] = object_alloc(i);
    long rss0 = rss_bytes();            /* the program's own objects: not counted */
    double m0 = now_us();
    for (long i = 0; i < n; i++)
        object_name(objs[i], prefix);
    double map_s = (now_us() - m0) / 1e6;
    for (int i = 0; i < WARMUP; i++)
        pair(objs[rnd((unsigned long)n)]);
    for (int i = 0; i < SAMPLES; i++) {
        struct object *o = objs[rnd((unsigned long)n)];
        pt[i] = ping_us();
        double c = clock_us(CLOCK_THREAD_CPUTIME_ID), s = now_us();
        pair(o);
        t[i] = now_us() - s;
        ct[i] = clock_us(CLOCK_THREAD_CPUTIME_ID) - c;
    }
    long rss1 = rss_bytes();
    qsort(t, SAMPLES, sizeof *t, cmp_double);
    qsort(pt, SAMPLES, sizeof *pt, cmp_double);
    qsort(ct, SAMPLES, sizeof *ct, cmp_double);
    for (long i = 0; i < n; i++) {
        pthread_mutex_destroy(&objs[i]->lock);
        free(objs[i]);
    }
    long rss2 = rss_bytes();
    /* After destroy the objects are freed too: what stays above rss0 is
     * the shim's (or memory malloc keeps for reuse). */
    if (report)
        printf("{\"mode\": \"live\", \"names\": %ld, \"pair_median_us\": %.1f, \"pair_p90_us\": %.1f, "
               "\"ping_median_us\": %.1f, \"pair_per_ping\": %.2f, \"pair_cpu_median_us\": %.2f, "
               "\"map_s\": %.2f, \"rss_per_name_b\": %.0f, "
               "\"rss_kept_after_destroy_per_name_b\": %.0f}\n",
               n, t[SAMPLES / 2], t[SAMPLES * 9 / 10], pt[SAMPLES / 2],
               t[SAMPLES / 2] / pt[SAMPLES / 2], ct[SAMPLES / 2], map_s,
               (double)(rss1 - rss0) / (double)n, (double)(rss2 - rss0) / (double)n);
    fflush(stdout);
    free(objs);
    free(t);
    free(pt);
    free(ct);
}

static void churn(long total)
{
    double t0 = now_us();
    long rss0 = 0, first = total / CHECKPOINTS;
    for (long i = 0; i < total; i++) {
        struct object *o = object_alloc(i);
        object_name(o, "churn");
        pair(o);
        pthread_mutex_destroy(&o->lock);
        free(o);
        if ((i + 1) % first == 0) {
            long rss = rss_bytes();
            if (i + 1 == first)
                rss0 = rss;         /* after the first tenth: pools warmed */
            printf("{\"mode\": \"churn\", \"names\": %ld, \"rss_kb\": %ld, "
                   "\"growth_per_name_b\": %.1f, \"elapsed_s\": %.2f}\n",
                   i + 1, rss / 1024, i + 1 == first ? 0.0 :
                   (double)(rss - rss0) / (double)(i + 1 - first), (now_us() - t0) / 1e6);
            fflush(stdout);
        }
    }
}

int main(int argc, char **argv)
{
    if (!dmutex_name) {
        fprintf(stderr, "names: libdmutex.so is not preloaded: nothing to measure\n");
        return 2;
    }
    int port = argc >= 2 ? atoi(argv[1]) : 0;
    if (argc >= 4 && port > 0 && strcmp(argv[2], "live") == 0) {
        ping_ctx = connect_or_die("names", "127.0.0.1", port);
        live(WARMUP_NAMES, 0);          /* connections, threads, pools: not reported */
        for (int i = 3; i < argc; i++) {
            long n = atol(argv[i]);
            if (n < 1) {
                fprintf(stderr, "names: bad N %s\n", argv[i]);
                return 2;
            }
            live(n, i - 2);
        }
        return 0;
    }
    if (argc == 4 && port > 0 && strcmp(argv[2], "churn") == 0 && atol(argv[3]) >= CHECKPOINTS) {
        churn(atol(argv[3]));
        return 0;
    }
    fprintf(stderr, "usage: names PORT live N... | names PORT churn TOTAL(>=%d)\n", CHECKPOINTS);
    return 2;
}
