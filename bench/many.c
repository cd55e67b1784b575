/* many: the watchdog's load. Locks the first N mutexes of the global array
 * `many` (the benchmark maps each element under its own name), holds them
 * all for HOLD_MS while the shim's lease renewal runs, and reports the
 * process's CPU time over the hold: every thread's, the renewal thread's
 * included (getrusage RUSAGE_SELF).
 *
 *   many N HOLD_MS
 * prints {"locked_ms": t} once all are held (the driver starts counting the
 * server's renewals then), then {"cpu_ms": c, "wall_ms": w}, then unlocks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "bench.h"

#define MANY 10000

pthread_mutex_t many[MANY];

static double now_ms(void)
{
    return (double)now_ns() / 1e6;
}

static double cpu_ms(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

int main(int argc, char **argv)
{
    int n = argc == 3 ? atoi(argv[1]) : 0;
    long hold_ms = argc == 3 ? atol(argv[2]) : 0;
    if (n < 1 || n > MANY || hold_ms < 1) {
        fprintf(stderr, "usage: many N(1..%d) HOLD_MS\n", MANY);
        return 2;
    }
    double t = now_ms();
    for (int i = 0; i < n; i++)
        if (pthread_mutex_lock(&many[i]) != 0) {
            fprintf(stderr, "many: lock %d failed\n", i);
            return 1;
        }
    printf("{\"locked_ms\": %.1f}\n", now_ms() - t);
    fflush(stdout);
    double c0 = cpu_ms(), w0 = now_ms();
    sleep_ms(hold_ms);
    printf("{\"cpu_ms\": %.2f, \"wall_ms\": %.1f}\n", cpu_ms() - c0, now_ms() - w0);
    fflush(stdout);
    for (int i = 0; i < n; i++)
        pthread_mutex_unlock(&many[i]);
    return 0;
}
