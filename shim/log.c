/* log: formats into a stack buffer and writes it with one write(2). No
 * malloc, no stdio locks, no pthread calls: safe inside the shim's own
 * interposed functions and in a fork child. Knows nothing of Redis. The
 * bottom of the shim: includes no other module (real and util log). */
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define DM_LOG_LINE_MAX 1024

int dm_log_level = DM_LOG_WARN;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

void dm_log_init(void)
{
    /* secure_getenv: a set-user-ID process ignores its starter's environment. */
    const char *v = secure_getenv("DMUTEX_LOG");
    if (!v || !*v)
        return;
    for (int i = 0; i <= DM_LOG_DEBUG; i++) {
        if (strcasecmp(v, level_names[i]) == 0) {
            dm_log_level = i;
            return;
        }
    }
    dm_log(DM_LOG_WARN, "DMUTEX_LOG=%s is not one of error|warn|info|debug; using warn", v);
}

static void vlog(enum dm_log_level level, const char *fmt, va_list ap)
{
    char buf[DM_LOG_LINE_MAX];
    int n = snprintf(buf, sizeof buf, "dmutex[%d]: %s", (int)getpid(),
                     level == DM_LOG_ERROR ? "error: " :
                     level == DM_LOG_WARN ? "warning: " : "");
    if (n < 0)
        return;
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}

void dm_log(enum dm_log_level level, const char *fmt, ...)
{
    if ((int)level > dm_log_level)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

static long now_ms(void)      /* CLOCK_MONOTONIC, as util's dm_now_ms */
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)(ts.tv_sec * 1000LL + ts.tv_nsec / 1000000L);
}

int dm_log_every(long *last_ms, long every_ms, enum dm_log_level level,
                 const char *fmt, ...)
{
    if ((int)level > dm_log_level)
        return 0;
    long now = now_ms();
    long last = __atomic_load_n(last_ms, __ATOMIC_RELAXED);
    if (last != 0 && now - last < every_ms)
        return 0;
    if (!__atomic_compare_exchange_n(last_ms, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return 0;
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
    return 1;
}
