/* log: the one way the shim speaks. Every line goes to stderr as a single
 * write(2), prefixed "dmutex[pid]: ", so lines from many threads and
 * processes do not interleave. The level comes from DMUTEX_LOG
 * (error|warn|info|debug, default warn). Must not allocate or lock: it is
 * called from inside interposed pthread calls and from fork handlers. */
#ifndef DM_LOG_H
#define DM_LOG_H

#include <stdarg.h>

enum dm_log_level { DM_LOG_ERROR, DM_LOG_WARN, DM_LOG_INFO, DM_LOG_DEBUG };

extern int dm_log_level;

/* Reads DMUTEX_LOG; an unknown value is reported and treated as "warn". */
void dm_log_init(void);

void dm_log(enum dm_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Logs at most once per `every_ms` for one call site: pass the address of a
 * static long that remembers when it last spoke (CLOCK_MONOTONIC, ms).
 * Returns 1 if it logged. */
int dm_log_every(long *last_ms, long every_ms, enum dm_log_level level,
                 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define dm_error(...) dm_log(DM_LOG_ERROR, __VA_ARGS__)
#define dm_warn(...)  dm_log(DM_LOG_WARN, __VA_ARGS__)
#define dm_info(...)  do { if (dm_log_level >= DM_LOG_INFO) dm_log(DM_LOG_INFO, __VA_ARGS__); } while (0)
#define dm_debug(...) do { if (dm_log_level >= DM_LOG_DEBUG) dm_log(DM_LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
