/* test_metrics: the metrics file (shim/metrics.c) and the exit summary,
 * from the outside: tests/progs/metricsprog runs a known workload under
 * the shim against the group's own redis-server, maps lock_a as "A" and
 * lock_b as "B", and the test reads the Prometheus text file it leaves:
 * exact lock and acquisition counts, histograms that agree with them, the
 * held gauge, every read of a file being replaced a whole file, writes at
 * every interval, the exit write with a thread still locking, a fork
 * child that does not replace its parent's file, renewals and a lease
 * loss counted, a handover counted, a failed Redis call counted,
 * DMUTEX_METRICS over metrics.file, an unwritable
 * directory reported once while the program runs on, and the one summary
 * line per name with DMUTEX_LOG=info. And what an adversarial review
 * found: more than 65,536 names all written; fork() not held up by a
 * write that cannot go on (a FIFO at the temporary path); a symbolic link
 * at the temporary path neither followed nor in the way; counters that go
 * on across a name's destruction and re-creation; names with a record
 * counted (dmutex_names), none left by per-object names destroyed as
 * their batch's hold lingers out, nor by a cond a fork child destroys
 * that its parent's thread waited on; a fork+exec child
 * (preloaded with the same config) that leaves its parent's file alone;
 * file names too long for the file system refused at config load.
 *
 * The file is parsed here by the text format's rules (0.0.4): # HELP and
 * # TYPE lines, samples `metric{label="value",...} number`, and the
 * shim's closing "# EOF" line, so a file cut short anywhere fails. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "lock.h"
#include "config.h"
#include "dmutex.h"
#include "harness.h"
#include "keys.h"
#include "metrics.h"

#define PROG            TH_BUILD "/tests/progs/metricsprog"
#define RUN_MS          30000L  /* longest a run that should end may take (a slow machine) */
#define LEASE_MS        3000L
#define LONG_INTERVAL   3600000L        /* only the exit write happens */
#define SHORT_INTERVAL  20L
#define LOSS_LEASE_MS   1000L   /* the lease-loss run: renew 333, margin 100 */
#define GROUP_ALARM_S   300

static struct th_redis rs;
static redisContext *conn;
static char prog_path[PATH_MAX], shim_path[PATH_MAX];
static char dir[64];            /* each test's directory for metrics files */

/* ---- the text format --------------------------------------------------- */

static int metric_name_ok(const char **p)
{
    const char *s = *p;
    if (!(*s == '_' || *s == ':' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
        return 0;
    while (*s == '_' || *s == ':' || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
           (*s >= '0' && *s <= '9'))
        s++;
    *p = s;
    return 1;
}

/* The end of the line at l (its '\n'), or NULL; `end`: the text's end.
 * memchr with a length, not strchr: a file of 100 MB is read in linear
 * time under AddressSanitizer too (its strchr measures the whole rest). */
static const char *line_end(const char *l, const char *end)
{
    return memchr(l, '\n', (size_t)(end - l));
}

/* 1 when `t` is a whole file: every line a HELP, a TYPE or a sample, the
 * last one "# EOF". Else 0 with the reason in why. */
static int prom_parses(const char *t, char *why, size_t n)
{
    size_t len = strlen(t);
    if (len < 6 || strcmp(t + len - 6, "# EOF\n") != 0)
        return snprintf(why, n, "does not end with \"# EOF\\n\""), 0;
    int lineno = 0;
    for (const char *l = t; *l; l = line_end(l, t + len) + 1) {
        lineno++;
        const char *e = line_end(l, t + len);
        if (!e)
            return snprintf(why, n, "line %d has no newline", lineno), 0;
        if (strncmp(l, "# EOF\n", 6) == 0) {
            if (e[1] != '\0')
                return snprintf(why, n, "# EOF before the end (line %d)", lineno), 0;
            continue;
        }
        const char *s = l;
        if (strncmp(l, "# HELP ", 7) == 0 || strncmp(l, "# TYPE ", 7) == 0) {
            s += 7;
            if (!metric_name_ok(&s) || *s != ' ')
                return snprintf(why, n, "line %d: bad metric name", lineno), 0;
            if (l[2] == 'T' && strncmp(s, " counter\n", 9) != 0 && strncmp(s, " gauge\n", 7) != 0 &&
                strncmp(s, " histogram\n", 11) != 0)
                return snprintf(why, n, "line %d: bad type", lineno), 0;
            continue;
        }
        if (!metric_name_ok(&s))
            return snprintf(why, n, "line %d: bad sample name", lineno), 0;
        if (*s == '{') {
            s++;
            for (;;) {
                if (!metric_name_ok(&s) || strncmp(s, "=\"", 2) != 0)
                    return snprintf(why, n, "line %d: bad label", lineno), 0;
                for (s += 2; *s != '"'; s++) {
                    if (*s == '\n' || *s == '\0')
                        return snprintf(why, n, "line %d: open label value", lineno), 0;
                    if (*s == '\\' && (s[1] == '\\' || s[1] == '"' || s[1] == 'n'))
                        s++;
                    else if (*s == '\\')
                        return snprintf(why, n, "line %d: bad escape", lineno), 0;
                }
                s++;
                if (*s == '}')
                    break;
                if (*s != ',')
                    return snprintf(why, n, "line %d: labels not closed", lineno), 0;
                s++;
            }
            s++;
        }
        char *end;
        if (*s != ' ' || (strtod(s + 1, &end), end == s + 1) || end != e)
            return snprintf(why, n, "line %d: bad value", lineno), 0;
    }
    return 1;
}

/* The value of the sample `series` (its name and labels, exactly as
 * written), or -1 when the file has none. */
static double prom_get(const char *t, const char *series)
{
    size_t n = strlen(series);
    const char *end = t + strlen(t);
    for (const char *l = t; l && *l; l = line_end(l, end), l = l ? l + 1 : NULL)
        if ((size_t)(end - l) > n && memcmp(l, series, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return -1;
}

/* The lines of t that start with `prefix`. */
static long prom_lines(const char *t, const char *prefix)
{
    size_t n = strlen(prefix);
    const char *end = t + strlen(t);
    long count = 0;
    for (const char *l = t; l && *l; l = line_end(l, end), l = l ? l + 1 : NULL)
        count += (size_t)(end - l) >= n && memcmp(l, prefix, n) == 0;
    return count;
}

static double metric(const char *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static double metric(const char *t, const char *fmt, ...)
{
    char series[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(series, sizeof series, fmt, ap);
    va_end(ap);
    double v = prom_get(t, series);
    if (v < 0)
        fail_msg("no sample %s in the metrics file:\n%s", series, t);
    return v;
}

/* Reads the metrics file at `path`, which must exist and parse. */
static char *read_prom(const char *path)
{
    char *t = th_read_file(path);
    if (!t)
        fail_msg("no metrics file %s", path);
    char why[128];
    if (!prom_parses(t, why, sizeof why))
        fail_msg("%s: %s:\n%s", path, why, t);
    return t;
}

/* ---- runs ---------------------------------------------------------------- */

/* A config mapping lock_a as A and lock_b as B, with `extra` (the metrics
 * group, policies) at the top. batch_ms = 0: every lock call a process's
 * threads contend for is a cluster acquisition of its own, so that the
 * counts of a known workload are exact (batches: test_shim). */
static char *config(long lease_ms, const char *extra)
{
    return th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\nbatch_ms = 0;\n%s\nmutexes = (\n"
                                      "  { symbol = \"lock_a\"; name = \"A\"; },\n"
                                      "  { symbol = \"lock_b\"; name = \"B\"; }\n);\n",
                                      lease_ms, extra));
}

static char *metrics_group(const char *file, long interval_ms)
{
    static char g[PATH_MAX + 64];
    snprintf(g, sizeof g, "metrics = { file = \"%s\"; interval_ms = %ld; };", file, interval_ms);
    return g;
}

/* Starts metricsprog with args under the shim (config cfg, log level log,
 * DMUTEX_METRICS=env_metrics when not NULL). */
static const char *redis_url;          /* NULL: the group's server */

static pid_t start(const char *cfg, const char *log, const char *env_metrics, char **args,
                   const char *out)
{
    static struct th_shim_env e;
    static char metrics_var[PATH_MAX + 32];
    const char *extra[] = { env_metrics ? metrics_var : NULL, NULL };
    if (env_metrics)
        snprintf(metrics_var, sizeof metrics_var, "DMUTEX_METRICS=%s", env_metrics);
    char **env = th_shim_env_extra(&e, cfg, redis_url ? redis_url : rs.url, log, extra);
    char *argv[8] = { prog_path };
    for (int i = 0; args[i] && i < 6; i++)
        argv[i + 1] = args[i];
    return th_child(argv, env, out);
}

static char *path_in_dir(const char *name)
{
    char *p = malloc(PATH_MAX);
    assert_non_null(p);
    snprintf(p, PATH_MAX, "%s/%s", dir, name);
    return p;
}

/* Files in the test's directory (a temporary one left behind counts). */
static int files_in_dir(void)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* The known workload: two threads, each N locks of A and M of B. */
#define WORK_N 150
#define WORK_M 100

static char *run_work(const char *path, const char *log, char **out_text)
{
    char *cfg = config(LEASE_MS, metrics_group(path, LONG_INTERVAL));
    char *out = th_out_file();
    char *args[] = { "work", "150", "100", NULL };
    pid_t pid = start(cfg, log, NULL, args, out);
    char *text = th_finish(pid, out, 0, RUN_MS);
    th_assert_has(text, "done 300 200");
    if (out_text)
        *out_text = text;
    else
        free(text);
    return read_prom(path);
}

/* ---- tests --------------------------------------------------------------- */

static void test_file_counts_a_known_workload_exactly(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *t = run_work(path, NULL, NULL);
    const char *names[] = { "A", "B" };
    const int calls[] = { 2 * WORK_N, 2 * WORK_M };
    for (int i = 0; i < 2; i++) {
        const char *nm = names[i];
        double n = calls[i];
        assert_true(metric(t, "dmutex_lock_calls_total{name=\"%s\"}", nm) == n);
        /* One mutex per name, no caching: every lock call is a grant. */
        assert_true(metric(t, "dmutex_acquisitions_total{name=\"%s\"}", nm) == n);
        assert_true(metric(t, "dmutex_wait_seconds_count{name=\"%s\"}", nm) == n);
        assert_true(metric(t, "dmutex_wait_seconds_bucket{name=\"%s\",le=\"+Inf\"}", nm) == n);
        assert_true(metric(t, "dmutex_hold_seconds_count{name=\"%s\"}", nm) == n);
        assert_true(metric(t, "dmutex_hold_seconds_bucket{name=\"%s\",le=\"+Inf\"}", nm) == n);
        assert_true(metric(t, "dmutex_wait_seconds_bucket{name=\"%s\",le=\"0.0001\"}", nm) <=
                    metric(t, "dmutex_wait_seconds_bucket{name=\"%s\",le=\"10\"}", nm));
        assert_true(metric(t, "dmutex_wait_seconds_sum{name=\"%s\"}", nm) > 0);
        assert_true(metric(t, "dmutex_contended_total{name=\"%s\"}", nm) <= n);
        assert_true(metric(t, "dmutex_handoffs_total{name=\"%s\"}", nm) <= n);
        assert_true(metric(t, "dmutex_held{name=\"%s\"}", nm) == 0);
        assert_true(metric(t, "dmutex_leases_lost_total{name=\"%s\"}", nm) == 0);
        assert_true(metric(t, "dmutex_redis_errors_total{name=\"%s\"}", nm) == 0);
        assert_true(metric(t, "dmutex_lease_renewals_total{name=\"%s\"}", nm) >= 0);
    }
    assert_true(metric(t, "dmutex_info{version=\"%s\"}", DMUTEX_VERSION) == 1);
    static const char *const families[] = {
        "dmutex_lock_calls_total counter", "dmutex_contended_total counter",
        "dmutex_acquisitions_total counter", "dmutex_handoffs_total counter",
        "dmutex_lease_renewals_total counter", "dmutex_leases_lost_total counter",
        "dmutex_redis_errors_total counter", "dmutex_held gauge",
        "dmutex_wait_seconds histogram", "dmutex_hold_seconds histogram", "dmutex_info gauge",
    };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        char line[128];
        snprintf(line, sizeof line, "# TYPE %s\n", families[i]);
        th_assert_has(t, line);
    }
    assert_int_equal(files_in_dir(), 2);    /* the file and its lock file: no temporary one */
    char *lock = path_in_dir(".app.prom.lock");
    struct stat st;
    assert_int_equal(stat(lock, &st), 0);
    free(lock);
    free(t);
    free(path);
}

static void test_summary_at_exit_has_one_line_per_name_with_log_info(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *out;
    free(run_work(path, "info", &out));
    static const char la[] = "exit: lock A: 300 lock calls, 300 cluster acquisitions";
    static const char lb[] = "exit: lock B: 200 lock calls, 200 cluster acquisitions";
    int a = 0, b = 0;
    for (const char *l = out; (l = strstr(l, "exit: lock ")) != NULL; l++) {
        a += strncmp(l, la, sizeof la - 1) == 0;
        b += strncmp(l, lb, sizeof lb - 1) == 0;
        if (strncmp(l + 11, "A:", 2) != 0 && strncmp(l + 11, "B:", 2) != 0)
            fail_msg("a summary line of another name:\n%s", out);
    }
    if (a != 1 || b != 1)
        fail_msg("expected one summary line each for A (300 calls) and B (200), got %d and %d:\n%s",
                 a, b, out);
    th_assert_has(out, "wait p50 ");
    th_assert_has(out, " leases lost, 0 expired after unlock, 0 redis errors");
    free(out);
    /* Without info, no summary. */
    free(run_work(path, NULL, &out));
    if (strstr(out, "exit: lock "))
        fail_msg("a summary line at the default log level:\n%s", out);
    free(out);
    free(path);
}

/* The summary of each process is its own: a fork child says it is one
 * (its counts start at the fork), and a mapped name a process never
 * locked is said to be that, not "0 lock calls", which read the same for
 * a child that left its parent's lock alone and for a mutex whose calls
 * never reached the shim. Here the parent locks A 5 times, the child not
 * at all, and neither locks B. */
static void test_summary_says_a_fork_child_and_a_name_never_locked_plainly(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *cfg = config(LEASE_MS, metrics_group(path, LONG_INTERVAL));
    char *out = th_out_file(), *go = th_go_file();
    char *args[] = { "fork", "5", "0", go, NULL };
    pid_t pid = start(cfg, "info", NULL, args, out);
    th_wait_for(out, "parent waits", RUN_MS);
    th_touch(go);
    char *text = th_finish(pid, out, 0, RUN_MS);
    long long child = th_field_after(text, "child done ");
    char want[6][160];
    snprintf(want[0], sizeof want[0], "dmutex[%lld]: exit: this process is a fork child of %d: "
             "its counts start at the fork\n", child, (int)pid);
    snprintf(want[1], sizeof want[1], "dmutex[%lld]: exit: lock A: never locked by this "
             "process\n", child);
    snprintf(want[2], sizeof want[2], "dmutex[%lld]: exit: lock B: never locked by this "
             "process\n", child);
    snprintf(want[3], sizeof want[3], "dmutex[%d]: exit: lock A: 5 lock calls, 5 cluster "
             "acquisitions", (int)pid);
    snprintf(want[4], sizeof want[4], "dmutex[%d]: exit: lock B: never locked by this "
             "process\n", (int)pid);
    for (int i = 0; i < 5; i++)
        th_assert_has(text, want[i]);
    snprintf(want[5], sizeof want[5], "dmutex[%d]: exit: this process is a fork child", (int)pid);
    if (strstr(text, want[5]) || strstr(text, " 0 lock calls"))
        fail_msg("the parent called a fork child, or a summary of 0 lock calls:\n%s", text);
    free(text);
    free(path);
}

/* A reader polling the file while it is rewritten every 20 ms sees whole
 * files only, and new ones keep coming: each rename brings a new file,
 * told apart by its inode and modification time together (the file
 * system may give a new file the inode number the replaced one just
 * freed: with inodes alone, one run here saw 2 versions in 806 reads). */
static void test_file_is_replaced_whole_at_every_interval(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *cfg = config(LEASE_MS, metrics_group(path, SHORT_INTERVAL));
    char *out = th_out_file();
    char *args[] = { "work", "1500", "1000", "600", NULL };
    pid_t pid = start(cfg, NULL, NULL, args, out);
    struct { ino_t ino; struct timespec mtime; } seen[64];
    int nseen = 0, reads = 0;
    double last_calls = 0;
    long long end = th_now_ms() + RUN_MS;
    while (waitpid(pid, NULL, WNOHANG) == 0 && th_now_ms() < end) {
        struct stat st;
        char *t = th_read_file(path);
        if (t && stat(path, &st) == 0) {
            reads++;
            char why[128];
            if (!prom_parses(t, why, sizeof why))
                fail_msg("read %d of %s is not a whole file: %s:\n%s", reads, path, why, t);
            double calls = prom_get(t, "dmutex_lock_calls_total{name=\"A\"}");
            if (calls >= 0) {
                assert_true(calls >= last_calls);
                last_calls = calls;
            }
            int known = 0;
            for (int i = 0; i < nseen; i++)
                known |= seen[i].ino == st.st_ino && seen[i].mtime.tv_sec == st.st_mtim.tv_sec &&
                         seen[i].mtime.tv_nsec == st.st_mtim.tv_nsec;
            if (!known && nseen < 64) {
                seen[nseen].ino = st.st_ino;
                seen[nseen++].mtime = st.st_mtim;
            }
        }
        free(t);
        usleep(1000);
    }
    th_forget(pid);
    if (nseen < 3)
        fail_msg("only %d versions of the file seen in %d reads (interval %ld ms)", nseen, reads,
                 SHORT_INTERVAL);
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") == 3000);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"B\"}") == 2000);
    free(t);
    free(path);
}

/* exit() while another thread keeps locking: the last write still
 * happens, whole, with the calls done so far. */
static void test_exit_with_a_thread_still_locking_writes_the_file(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *cfg = config(LEASE_MS, metrics_group(path, LONG_INTERVAL));
    char *out = th_out_file();
    char *args[] = { "exit-busy", "50", NULL };
    char *text = th_finish(start(cfg, NULL, NULL, args, out), out, 0, RUN_MS);
    th_assert_has(text, "exiting 50");
    free(text);
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") >= 50);
    assert_true(metric(t, "dmutex_held{name=\"A\"}") <= 1);
    free(t);
    free(path);
}

/* Without %p a fork child writes no file: the parent's stays the parent's. */
static void test_fork_child_does_not_write_the_parents_file(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *cfg = config(LEASE_MS, metrics_group(path, LONG_INTERVAL));
    char *out = th_out_file(), *go = th_go_file();
    char *args[] = { "fork", "5", "3", go, NULL };
    pid_t pid = start(cfg, NULL, NULL, args, out);
    th_wait_for(out, "parent waits", RUN_MS);
    struct stat st;
    if (stat(path, &st) == 0)
        fail_msg("the fork child wrote the parent's metrics file:\n%s", th_read_file(path));
    th_touch(go);
    free(th_finish(pid, out, 0, RUN_MS));
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") == 5);
    free(t);
    free(path);
}

/* With %p each process writes its own file, with a pid label; the child
 * counts its own calls only. */
static void test_fork_child_with_pid_in_the_path_writes_its_own_file(void **state)
{
    (void)state;
    char *tmpl = path_in_dir("app-%p.prom");
    char *cfg = config(LEASE_MS, metrics_group(tmpl, LONG_INTERVAL));
    char *out = th_out_file(), *go = th_go_file();
    char *args[] = { "fork", "5", "3", go, NULL };
    pid_t pid = start(cfg, NULL, NULL, args, out);
    th_wait_for(out, "parent waits", RUN_MS);
    char *text = th_read_output(out);
    long long child = th_field_after(text, "child done ");
    free(text);
    char name[64];
    snprintf(name, sizeof name, "app-%lld.prom", child);
    char *cpath = path_in_dir(name);
    char *t = read_prom(cpath);
    assert_true(metric(t, "dmutex_lock_calls_total{pid=\"%lld\",name=\"A\"}", child) == 3);
    assert_true(metric(t, "dmutex_info{pid=\"%lld\",version=\"%s\"}", child, DMUTEX_VERSION) == 1);
    free(t);
    th_touch(go);
    free(th_finish(pid, out, 0, RUN_MS));
    snprintf(name, sizeof name, "app-%d.prom", (int)pid);
    char *ppath = path_in_dir(name);
    t = read_prom(ppath);
    assert_true(metric(t, "dmutex_lock_calls_total{pid=\"%d\",name=\"A\"}", (int)pid) == 5);
    free(t);
    assert_int_equal(files_in_dir(), 2);
    free(cpath);
    free(ppath);
    free(tmpl);
}

/* A held lock's renewals are counted, and show in the interval writes
 * with the held gauge at 1; a hold whose key is deleted under it is lost
 * (on_lease_lost = "warn"): counted once, and the held gauge is 0 at exit. */
static void test_a_lost_lease_is_counted(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char extra[PATH_MAX + 128];
    snprintf(extra, sizeof extra, "on_lease_lost = \"warn\";\n%s",
             metrics_group(path, SHORT_INTERVAL));
    char *cfg = config(LOSS_LEASE_MS, extra);
    char *out = th_out_file(), *go = th_go_file();
    char *args[] = { "hold", go, NULL };
    pid_t pid = start(cfg, NULL, NULL, args, out);
    th_wait_for(out, "locked", RUN_MS);
    long long end = th_now_ms() + RUN_MS;
    double renewals = 0, held = 0;
    while (renewals < 1 && th_now_ms() < end) {
        char *t = th_read_file(path);
        char why[128];
        if (t && prom_parses(t, why, sizeof why)) {
            renewals = prom_get(t, "dmutex_lease_renewals_total{name=\"A\"}");
            held = prom_get(t, "dmutex_held{name=\"A\"}");
        }
        free(t);
        usleep(10000);
    }
    if (renewals < 1)
        fail_msg("no renewal of the held lock counted within %ld ms", RUN_MS);
    assert_true(held == 1);
    th_cmd_int(conn, "DEL %s", th_key("A", DM_KEY_LOCK));
    th_wait_for(out, "lost the lease of lock A", RUN_MS);
    th_touch(go);
    char *text = th_finish(pid, out, 0, RUN_MS);
    th_assert_has(text, "unlocked EPERM");
    free(text);
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_leases_lost_total{name=\"A\"}") == 1);
    assert_true(metric(t, "dmutex_held{name=\"A\"}") == 0);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") == 1);
    free(t);
    free(path);
}

/* A process that queues behind another's hold (fair mode, the default)
 * gets the lock handed over: counted as contended, as a grant and as a
 * handover, in its own file (%p). */
static void test_a_handover_counts_as_contended_grant_and_handoff(void **state)
{
    (void)state;
    char *tmpl = path_in_dir("app-%p.prom");
    char *cfg = config(LEASE_MS, metrics_group(tmpl, LONG_INTERVAL));
    char *out1 = th_out_file(), *out2 = th_out_file(), *go = th_go_file();
    char *hold[] = { "hold", go, NULL };
    pid_t holder = start(cfg, NULL, NULL, hold, out1);
    th_wait_for(out1, "locked", RUN_MS);
    char *work[] = { "work", "1", "0", NULL };     /* two threads, one lock of A each */
    pid_t waiter = start(cfg, NULL, NULL, work, out2);
    th_wait_blocked(conn, "A", RUN_MS);
    th_touch(go);
    free(th_finish(holder, out1, 0, RUN_MS));
    free(th_finish(waiter, out2, 0, RUN_MS));
    char name[64];
    snprintf(name, sizeof name, "app-%d.prom", (int)waiter);
    char *path = path_in_dir(name);
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_lock_calls_total{pid=\"%d\",name=\"A\"}", (int)waiter) == 2);
    assert_true(metric(t, "dmutex_acquisitions_total{pid=\"%d\",name=\"A\"}", (int)waiter) == 2);
    assert_true(metric(t, "dmutex_handoffs_total{pid=\"%d\",name=\"A\"}", (int)waiter) >= 1);
    assert_true(metric(t, "dmutex_contended_total{pid=\"%d\",name=\"A\"}", (int)waiter) >= 1);
    free(t);
    free(path);
    free(tmpl);
}

/* A server nobody answers at (on_redis_down = "error": the lock returns
 * EAGAIN): the failed attempt is a Redis error of the name. */
static void test_a_failed_redis_call_is_counted(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char extra[PATH_MAX + 128];
    snprintf(extra, sizeof extra, "on_redis_down = \"error\";\n%s",
             metrics_group(path, LONG_INTERVAL));
    char *cfg = config(LEASE_MS, extra);
    char *out = th_out_file();
    char *args[] = { "lock-once", NULL };
    redis_url = "redis://127.0.0.1:1";     /* nothing listens on port 1 */
    pid_t pid = start(cfg, NULL, NULL, args, out);
    redis_url = NULL;
    char *text = th_finish(pid, out, 0, RUN_MS);
    th_assert_has(text, "lock EAGAIN");
    free(text);
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_redis_errors_total{name=\"A\"}") >= 1);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") == 0);
    assert_true(metric(t, "dmutex_acquisitions_total{name=\"A\"}") == 0);
    assert_true(metric(t, "dmutex_held{name=\"A\"}") == 0);
    free(t);
    free(path);
}

static void test_dmutex_metrics_overrides_the_config_file(void **state)
{
    (void)state;
    char *cfg_path = path_in_dir("from-config.prom"), *env_path = path_in_dir("from-env.prom");
    char *cfg = config(LEASE_MS, metrics_group(cfg_path, LONG_INTERVAL));
    char *out = th_out_file();
    char *args[] = { "work", "3", "2", NULL };
    free(th_finish(start(cfg, NULL, env_path, args, out), out, 0, RUN_MS));
    char *t = read_prom(env_path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") == 6);
    free(t);
    struct stat st;
    assert_int_not_equal(stat(cfg_path, &st), 0);
    /* And with no metrics group at all. */
    unlink(env_path);
    cfg = config(LEASE_MS, "");
    free(th_finish(start(cfg, NULL, env_path, args, out), out, 0, RUN_MS));
    t = read_prom(env_path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"B\"}") == 4);
    free(t);
    /* A bad one stops the program before main, as a bad config does. */
    char *bad = th_out_file();
    char *text = th_finish(start(cfg, NULL, "relative.prom", args, bad), bad, 78, RUN_MS);
    th_assert_has(text, "DMUTEX_METRICS=relative.prom: must be an absolute path");
    free(text);
    free(cfg_path);
    free(env_path);
}

/* A file that cannot be written: one error, not one per interval, and the
 * program's own work goes on to its end. */
static void test_unwritable_directory_is_reported_once_and_the_program_runs_on(void **state)
{
    (void)state;
    char *path = path_in_dir("missing-dir/app.prom");
    char *cfg = config(LEASE_MS, metrics_group(path, SHORT_INTERVAL));
    char *out = th_out_file();
    char *args[] = { "work", "50", "50", "400", NULL };
    char *text = th_finish(start(cfg, NULL, NULL, args, out), out, 0, RUN_MS);
    th_assert_has(text, "done 100 100");
    int n = 0;
    for (const char *l = text; (l = strstr(l, "metrics: ")) != NULL; l++)
        n++;
    if (n != 1)
        fail_msg("expected one metrics error, got %d:\n%s", n, text);
    th_assert_has(text, path);
    th_assert_has(text, strerror(ENOENT));
    free(text);
    free(path);
}

/* The snapshot once stopped at 65,536 names (its array could not double
 * past a cap of 100,000) and wrote no file, reporting ENOMEM. Every name
 * is written, however many. */
#define MANY_NAMES 70000

static void test_more_than_65536_names_are_all_written(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *cfg = config(LEASE_MS, metrics_group(path, LONG_INTERVAL));
    char *out = th_out_file();
    char n[16];
    snprintf(n, sizeof n, "%d", MANY_NAMES);
    char *args[] = { "names", n, NULL };
    char *text = th_finish(start(cfg, NULL, NULL, args, out), out, 0, 10 * RUN_MS);
    char said[32];
    snprintf(said, sizeof said, "named %d", MANY_NAMES);
    th_assert_has(text, said);
    if (strstr(text, "metrics: "))
        fail_msg("the metrics write reported a failure:\n%s", text);
    free(text);
    char *t = read_prom(path);
    long rows = prom_lines(t, "dmutex_lock_calls_total{name=\"h");
    if (rows != MANY_NAMES)
        fail_msg("%ld names of h0 .. h%d in the file, expected %d", rows, MANY_NAMES - 1,
                 MANY_NAMES);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"h0\"}") == 1);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"h%d\"}", MANY_NAMES - 1) == 0);
    assert_true(metric(t, "dmutex_hold_seconds_count{name=\"h%d\"}", MANY_NAMES - 1) == 0);
    /* none destroyed: every one has its record still, and A and B */
    assert_true(metric(t, "dmutex_names") == MANY_NAMES + 2);
    free(t);
    free(path);
}

/* The temporary file's path, as metrics.c names it: ".NAME.PID.tmp"
 * beside the file. */
static char *tmp_path_of(const char *name, pid_t pid)
{
    char tmp[128];
    snprintf(tmp, sizeof tmp, ".%s.%d.tmp", name, (int)pid);
    return path_in_dir(tmp);
}

/* A FIFO at the temporary path once held the writer in open(2) with the
 * module's mutex taken, and fork()'s prepare handler waits for that mutex:
 * every fork() of the program hung. The program here forks again and
 * again until the file is there: with the FIFO in the way from before the
 * first write, both must happen. */
static void test_fork_returns_while_a_fifo_sits_at_the_temporary_path(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *cfg = config(LEASE_MS, metrics_group(path, SHORT_INTERVAL));
    char *out = th_out_file(), *go = th_go_file();
    char *args[] = { "fork-until", path, go, NULL };
    pid_t pid = start(cfg, NULL, NULL, args, out);
    char *fifo = tmp_path_of("app.prom", pid);
    if (mkfifo(fifo, 0600) != 0)
        fail_msg("mkfifo %s: %s", fifo, strerror(errno));
    th_touch(go);
    char *text = th_finish(pid, out, 0, RUN_MS);
    th_assert_has(text, "forked ");
    free(text);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") == 1);
    free(t);
    free(fifo);
    free(path);
}

/* A symbolic link at the temporary path (someone else's file, or a
 * planted one) is neither followed nor a reason to give up: it is removed
 * and the file written. A link at the file's own path is replaced by the
 * rename (docs/deploying.md): the file it pointed to is left alone. */
static void test_symbolic_links_at_the_paths_are_not_followed(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom"), *victim = path_in_dir("victim");
    char *victim2 = path_in_dir("victim2");
    char *cfg = config(LEASE_MS, metrics_group(path, SHORT_INTERVAL));
    char *out = th_out_file(), *go = th_go_file();
    char *args[] = { "fork-until", path, go, NULL };
    pid_t pid = start(cfg, NULL, NULL, args, out);
    char *tmp = tmp_path_of("app.prom", pid);
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("keep\n", f);
    fclose(f);
    assert_int_equal(symlink(victim, tmp), 0);
    assert_int_equal(symlink(victim2, path), 0);      /* a dangling one */
    th_touch(go);
    free(th_finish(pid, out, 0, RUN_MS));
    char *kept = th_read_file(victim);
    assert_non_null(kept);
    assert_string_equal(kept, "keep\n");
    free(kept);
    struct stat st;
    assert_int_not_equal(stat(victim2, &st), 0);
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_not_equal(lstat(tmp, &st), 0);
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") == 1);
    free(t);
    free(tmp);
    free(victim);
    free(victim2);
    free(path);
}

/* A name whose last mutex is destroyed and then made again (a heap mutex
 * per request): its counters go on from where they were, so a _total
 * never goes down for the life of the process. */
#define RECREATE_K 40

static void test_counters_of_a_name_destroyed_and_made_again_go_on(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *cfg = config(LEASE_MS, metrics_group(path, LONG_INTERVAL));
    char *out = th_out_file();
    char k[16];
    snprintf(k, sizeof k, "%d", RECREATE_K);
    char *args[] = { "recreate", k, NULL };
    char *text = th_finish(start(cfg, NULL, NULL, args, out), out, 0, RUN_MS);
    char said[32];
    snprintf(said, sizeof said, "recreated %d", RECREATE_K);
    th_assert_has(text, said);
    free(text);
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"R\"}") == RECREATE_K);
    assert_true(metric(t, "dmutex_acquisitions_total{name=\"R\"}") == RECREATE_K);
    assert_true(metric(t, "dmutex_hold_seconds_count{name=\"R\"}") == RECREATE_K);
    assert_true(metric(t, "dmutex_wait_seconds_bucket{name=\"R\",le=\"+Inf\"}") == RECREATE_K);
    assert_true(metric(t, "dmutex_held{name=\"R\"}") == 0);
    free(t);
    free(path);
}

/* Names gone keep their counters only if they counted anything, and only
 * the DM_NAME_STATS_KEPT_MAX that went last: a program that names a mutex
 * per object does not grow without end. Here every other name is locked
 * once; the four oldest of those fall out. The writer writes every 20 ms
 * meanwhile: its walks meet counters being dropped and freed (under
 * `make test-asan`, a read of freed memory fails the run). */
#define CHURN_KEPT      DM_NAME_STATS_KEPT_MAX
#define CHURN_N         (2 * (CHURN_KEPT + 4))

static void test_names_gone_keep_their_counters_within_a_bound(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom");
    char *cfg = config(LEASE_MS, metrics_group(path, SHORT_INTERVAL));
    char *out = th_out_file();
    char n[16];
    snprintf(n, sizeof n, "%d", CHURN_N);
    char *args[] = { "churn", n, NULL };
    char *text = th_finish(start(cfg, NULL, NULL, args, out), out, 0, 10 * RUN_MS);
    char said[32];
    snprintf(said, sizeof said, "churned %d", CHURN_N);
    th_assert_has(text, said);
    free(text);
    char *t = read_prom(path);
    long rows = prom_lines(t, "dmutex_lock_calls_total{name=\"c");
    if (rows != CHURN_KEPT)
        fail_msg("%ld names gone in the file, expected %d", rows, CHURN_KEPT);
    assert_true(prom_get(t, "dmutex_lock_calls_total{name=\"c0\"}") < 0);     /* the oldest */
    assert_true(prom_get(t, "dmutex_lock_calls_total{name=\"c6\"}") < 0);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"c8\"}") == 1);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"c%d\"}", CHURN_N - 2) == 1);
    char odd[64];
    snprintf(odd, sizeof odd, "dmutex_lock_calls_total{name=\"c%d\"}", CHURN_N - 1);
    assert_true(prom_get(t, odd) < 0);          /* never locked: gone with its mutex */
    assert_true(prom_get(t, "dmutex_lock_calls_total{name=\"c1\"}") < 0);
    /* Counters kept, records gone: of the names, only A's and B's are left. */
    assert_true(metric(t, "dmutex_names") == 2);
    free(t);
    free(path);
}

/* Per-object names must cost nothing once their objects are gone
 * (docs/decisions.md, "an idle name costs under 1 KB"), also when an object is
 * destroyed just as its batch's hold lingers out (notify's thread is
 * giving the hold back). name_put once left such a record in the table
 * for good: 105 of 1000 names, found by review. Two processes take turns
 * on TURNS_N names (metricsprog turns); b destroys each 150-270 us after
 * its unlock, around the linger's end (200 us). Its exit write must
 * count the two mapped names only. */
#define TURNS_N         300

static void test_names_destroyed_as_their_hold_lingers_out_leave_no_record(void **state)
{
    (void)state;
    char *path = path_in_dir("b.prom");
    char *shm = path_in_dir("turns.shm");
    /* config() turns batches off; here they must be on (the linger).
     * Only b writes a file. */
    const char *fmt = "lease_ms = %ld;\nbatch_ms = 5;\n%s\nmutexes = (\n"
                      "  { symbol = \"lock_a\"; name = \"A\"; },\n"
                      "  { symbol = \"lock_b\"; name = \"B\"; }\n);\n";
    char *cfg_a = th_keep_file(th_write_file(".cfg", fmt, LEASE_MS, ""));
    char *cfg_b = th_keep_file(th_write_file(".cfg", fmt, LEASE_MS,
                                             metrics_group(path, LONG_INTERVAL)));
    char n[16];
    snprintf(n, sizeof n, "%d", TURNS_N);
    char *out_a = th_out_file(), *out_b = th_out_file();
    char *args_a[] = { "turns", shm, "a", n, NULL };
    char *args_b[] = { "turns", shm, "b", n, NULL };
    pid_t a = start(cfg_a, NULL, NULL, args_a, out_a);
    pid_t b = start(cfg_b, NULL, NULL, args_b, out_b);
    char said[32];
    snprintf(said, sizeof said, "turns %d", TURNS_N);
    /* Each waits for the other at most 20 s (metricsprog says so). */
    char *text = th_finish(b, out_b, 0, RUN_MS);
    th_assert_has(text, said);
    free(text);
    text = th_finish(a, out_a, 0, RUN_MS);
    th_assert_has(text, said);
    free(text);
    char *t = read_prom(path);
    /* b locked every one: each counted, none held */
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"t%d\"}", TURNS_N - 1) == 1);
    double live = metric(t, "dmutex_names");
    if (live != 2)
        fail_msg("%.0f names with a record at b's exit, expected 2 (A and B): %.0f of the "
                 "%d destroyed ones stayed", live, live - 2, TURNS_N);
    free(t);
    free(shm);
    free(path);
}

/* A fork child has none of its parent's waiting threads: the references
 * they held to a listed condition variable's name are given back, so a
 * heap cond the child destroys leaves no record there (found by review:
 * it stayed for the child's life, counted by dmutex_names). */
static void test_a_fork_child_keeps_no_record_of_a_cond_its_parent_waited_on(void **state)
{
    (void)state;
    char *tmpl = path_in_dir("app-%p.prom");
    char extra[PATH_MAX + 128];
    snprintf(extra, sizeof extra, "%s\nconds = ( { init_site = \"cond_new\"; name = \"C\"; } );",
             metrics_group(tmpl, LONG_INTERVAL));
    char *cfg = config(LEASE_MS, extra);
    char *out = th_out_file();
    char *args[] = { "forkcond", NULL };
    pid_t p = start(cfg, NULL, NULL, args, out);
    char *text = th_finish(p, out, 0, RUN_MS);
    th_assert_has(text, "forkcond done");
    int child = 0;
    const char *at = strstr(text, "child ");
    if (!at || sscanf(at, "child %d destroyed 0", &child) != 1)
        fail_msg("the child did not destroy the cond:\n%s", text);
    free(text);
    char name[64];
    snprintf(name, sizeof name, "app-%d.prom", child);
    char *path = path_in_dir(name);
    char *t = read_prom(path);
    double live = metric(t, "dmutex_names{pid=\"%d\"}", child);
    if (live != 2)
        fail_msg("%.0f names with a record at the child's exit, expected 2 (A and B):\n%s",
                 live, t);
    free(t);
    free(path);
    snprintf(name, sizeof name, "app-%d.prom", (int)p);
    path = path_in_dir(name);
    t = read_prom(path);
    assert_true(metric(t, "dmutex_names{pid=\"%d\"}", (int)p) == 2);   /* the parent's too */
    free(t);
    free(path);
    free(tmpl);
}

/* The lock file beside the metrics file holds the pid of the process that
 * writes it; wait until it names `pid`. */
static void wait_for_owner(const char *lock, pid_t pid)
{
    char want[32];
    snprintf(want, sizeof want, "%d\n", (int)pid);
    long long end = th_now_ms() + RUN_MS;
    for (;;) {
        char *t = th_read_file(lock);
        int ok = t && strcmp(t, want) == 0;
        if (ok || th_now_ms() > end) {
            if (!ok)
                fail_msg("%s does not name process %d after %ld ms: \"%s\"", lock, (int)pid,
                         RUN_MS, t ? t : "(no file)");
            free(t);
            return;
        }
        free(t);
        usleep(2000);
    }
}

/* A program that runs another program preloaded with the same config (a
 * path without %p): the second process writes no file while the first
 * runs (it says so once), so the first one's file is never replaced by
 * another process's counts. */
static void test_an_exec_child_does_not_replace_the_parents_file(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom"), *lock = path_in_dir(".app.prom.lock");
    char *cfg = config(LEASE_MS, metrics_group(path, LONG_INTERVAL));
    char *out = th_out_file(), *go1 = th_go_file(), *go2 = th_go_file();
    char *args[] = { "exec", "5", "4", go1, go2, NULL };
    pid_t pid = start(cfg, NULL, NULL, args, out);
    th_wait_for(out, "parent locked", RUN_MS);
    wait_for_owner(lock, pid);
    th_touch(go1);
    th_wait_for(out, "child exited", RUN_MS);
    char *text = th_read_output(out);
    th_assert_has(text, "child exited 0");
    th_assert_has(text, "done 8 0");        /* the child's two threads, 4 locks each */
    char said[160];
    snprintf(said, sizeof said, "is written by process %d", (int)pid);
    th_assert_has(text, said);
    free(text);
    struct stat st;
    if (stat(path, &st) == 0)
        fail_msg("the exec'd child wrote the parent's metrics file:\n%s", th_read_file(path));
    th_touch(go2);
    text = th_finish(pid, out, 0, RUN_MS);
    int warnings = 0;
    for (const char *l = text; (l = strstr(l, "is written by process")) != NULL; l++)
        warnings++;
    if (warnings != 1)
        fail_msg("expected one warning of the child, got %d:\n%s", warnings, text);
    free(text);
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") == 5);
    free(t);
    free(lock);
    free(path);
}

/* The same with a child that never locks a mapped mutex (a helper the
 * program runs): it writes nothing and says nothing. */
static void test_an_exec_child_that_never_locks_says_nothing(void **state)
{
    (void)state;
    char *path = path_in_dir("app.prom"), *lock = path_in_dir(".app.prom.lock");
    char *cfg = config(LEASE_MS, metrics_group(path, LONG_INTERVAL));
    char *out = th_out_file(), *go1 = th_go_file(), *go2 = th_go_file();
    char *args[] = { "exec", "5", "0", go1, go2, NULL };
    pid_t pid = start(cfg, NULL, NULL, args, out);
    th_wait_for(out, "parent locked", RUN_MS);
    wait_for_owner(lock, pid);
    th_touch(go1);
    th_wait_for(out, "child exited", RUN_MS);
    struct stat st;
    if (stat(path, &st) == 0)
        fail_msg("the exec'd child wrote the parent's metrics file:\n%s", th_read_file(path));
    th_touch(go2);
    char *text = th_finish(pid, out, 0, RUN_MS);
    th_assert_has(text, "done 0 0");
    if (strstr(text, "metrics: "))
        fail_msg("a metrics line:\n%s", text);
    free(text);
    char *t = read_prom(path);
    assert_true(metric(t, "dmutex_lock_calls_total{name=\"A\"}") == 5);
    free(t);
    free(lock);
    free(path);
}

/* A file name the file system cannot take (NAME_MAX, or PATH_MAX for the
 * whole path, with %p as the longest pid and the temporary file's ".",
 * ".PID.tmp" added) is refused when the config is read, with FILE:LINE,
 * and in DMUTEX_METRICS before main: not accepted and then never
 * written. */
static void test_file_names_too_long_to_write_are_refused_at_load(void **state)
{
    (void)state;
    struct dm_config cfg;
    char err[DM_ERR_MAX], name[300], text[5200], longdir[4200];
    /* The longest name that fits, and one byte more. */
    memset(name, 'n', DM_METRICS_NAME_MAX);
    name[DM_METRICS_NAME_MAX] = '\0';
    snprintf(text, sizeof text, "mutexes = ();\nmetrics = { file = \"/tmp/%s\"; };\n", name);
    if (dm_config_load_string(text, "t.cfg", &cfg, err, sizeof err) != 0)
        fail_msg("a file name of %d bytes refused: %s", DM_METRICS_NAME_MAX, err);
    dm_config_free(&cfg);
    snprintf(text, sizeof text, "mutexes = ();\nmetrics = { file = \"/tmp/%sn\"; };\n", name);
    assert_int_equal(dm_config_load_string(text, "t.cfg", &cfg, err, sizeof err), -1);
    if (strncmp(err, "t.cfg:2: metrics.file", 21) != 0 || !strstr(err, "too long"))
        fail_msg("unexpected error: %s", err);
    /* %p counts as the longest pid: 2 bytes in the file, up to 10 written. */
    name[DM_METRICS_NAME_MAX - 7] = '\0';
    snprintf(text, sizeof text, "mutexes = ();\nmetrics = { file = \"/tmp/%s%%p\"; };\n", name);
    assert_int_equal(dm_config_load_string(text, "t.cfg", &cfg, err, sizeof err), -1);
    if (strncmp(err, "t.cfg:2: metrics.file", 21) != 0 || !strstr(err, "too long"))
        fail_msg("unexpected error: %s", err);
    /* A whole path too long, each part short. */
    size_t o = 0;
    for (int i = 0; i < 40; i++)       /* 40 times "/" and 99 bytes, then "/" and 74: 4075 */
        o += (size_t)snprintf(longdir + o, sizeof longdir - o, "/%.*s", 99, name);
    snprintf(longdir + o, sizeof longdir - o, "/%.*s", 74, name);
    snprintf(text, sizeof text, "mutexes = ();\n\nmetrics = { file = \"%s/a.prom\"; };\n",
             longdir);
    assert_int_equal(dm_config_load_string(text, "t.cfg", &cfg, err, sizeof err), -1);
    if (strncmp(err, "t.cfg:3: metrics.file", 21) != 0 || !strstr(err, "too long"))
        fail_msg("unexpected error: %s", err);
    /* DMUTEX_METRICS: the program stops before main, saying why. */
    char *cfgp = config(LEASE_MS, "");
    memset(name, 'n', DM_METRICS_NAME_MAX + 1);
    name[DM_METRICS_NAME_MAX + 1] = '\0';
    char envpath[400];
    snprintf(envpath, sizeof envpath, "%s/%s", dir, name);
    char *bad = th_out_file();
    char *args[] = { "work", "1", "1", NULL };
    char *out = th_finish(start(cfgp, NULL, envpath, args, bad), bad, 78, RUN_MS);
    th_assert_has(out, "DMUTEX_METRICS=");
    th_assert_has(out, "too long");
    free(out);
}

static void test_label_values_are_escaped(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(dm_metrics_escape("a\\b\"c\nd", out, sizeof out), 10);
    assert_string_equal(out, "a\\\\b\\\"c\\nd");
    assert_int_equal(dm_metrics_escape("plain:name/1", out, sizeof out), 12);
    assert_string_equal(out, "plain:name/1");
    char small[4];
    assert_int_equal(dm_metrics_escape("\"\"\"", small, sizeof small), 6);
    assert_string_equal(small, "\\\"\\");
}

/* ---- fixtures -------------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/dmutex-metrics-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    th_test_cleanup();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    int r = system(cmd);
    (void)r;
    (void)state;
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    if (th_built_paths(PROG, prog_path, NULL) != 0)
        return -1;
    return th_shim_group_start(&rs, &conn, GROUP_ALARM_S, shim_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(test_label_values_are_escaped),
        T(test_file_counts_a_known_workload_exactly),
        T(test_summary_at_exit_has_one_line_per_name_with_log_info),
        T(test_summary_says_a_fork_child_and_a_name_never_locked_plainly),
        T(test_file_is_replaced_whole_at_every_interval),
        T(test_exit_with_a_thread_still_locking_writes_the_file),
        T(test_fork_child_does_not_write_the_parents_file),
        T(test_fork_child_with_pid_in_the_path_writes_its_own_file),
        T(test_a_lost_lease_is_counted),
        T(test_a_handover_counts_as_contended_grant_and_handoff),
        T(test_a_failed_redis_call_is_counted),
        T(test_dmutex_metrics_overrides_the_config_file),
        T(test_unwritable_directory_is_reported_once_and_the_program_runs_on),
        T(test_more_than_65536_names_are_all_written),
        T(test_fork_returns_while_a_fifo_sits_at_the_temporary_path),
        T(test_symbolic_links_at_the_paths_are_not_followed),
        T(test_counters_of_a_name_destroyed_and_made_again_go_on),
        T(test_names_gone_keep_their_counters_within_a_bound),
        T(test_names_destroyed_as_their_hold_lingers_out_leave_no_record),
        T(test_a_fork_child_keeps_no_record_of_a_cond_its_parent_waited_on),
        T(test_an_exec_child_does_not_replace_the_parents_file),
        T(test_an_exec_child_that_never_locks_says_nothing),
        T(test_file_names_too_long_to_write_are_refused_at_load),
    };
    return cmocka_run_group_tests(tests, group_setup, th_group_teardown);
}
