/* metrics: the per-lock counters (stats.h, one set per name, kept by
 * cluster beyond the name's record) as operators read them: a file in the
 * Prometheus text exposition format (0.0.4), for node_exporter's textfile
 * collector, replaced atomically (a temporary file in the same directory,
 * renamed over it) every metrics.interval_ms by a thread of its own and
 * once more at exit, written by one process at a time (a lock file beside
 * it) unless the path has %p; and, with DMUTEX_LOG=info, one summary line
 * per lock name at exit. Sits under mapped and startup, over cluster
 * (whose list of counters it walks, without a lock). Counts nothing
 * itself. */
#ifndef DM_METRICS_H
#define DM_METRICS_H

#include "config.h"
#include "util.h"

/* Keeps the file's path (metrics.file or DMUTEX_METRICS, already in cfg;
 * NULL: no file) and interval. No I/O, no thread: the constructor's. */
void dm_metrics_init(const struct dm_config *cfg);

/* Starts the writer thread if a file is configured and it is not running
 * (first call, or the first in a fork child that writes its own file).
 * Cheap when it runs already (one load); called before the first round
 * trip of a name, with no shim lock held. A thread that cannot start is
 * reported once; the exit write still happens. */
void dm_metrics_start(void);

/* Process exit (the destructor, after held locks went back): the summary
 * lines (DMUTEX_LOG=info) and the last write of the file; the writer
 * thread writes no more. */
void dm_metrics_exit(void);

/* `v` as a label value of the text format (\ " and newline escaped) into
 * out (len bytes, NUL-terminated, cut short if it does not fit); returns
 * the length the whole escaped value needs. Lock names have none of
 * those bytes today; the format must not break if they ever do. */
size_t dm_metrics_escape(const char *v, char *out, size_t len);

/* Fork: prepare takes the module's mutex (never held across I/O: a
 * write in progress goes on, outside it); the child has no writer thread
 * and counts from zero: it writes its own file only when the path has %p
 * (never its parent's). */
void dm_metrics_atfork(enum dm_fork_phase phase);

#endif
