/* harness: real redis-server processes and real child processes for tests.
 * See harness.h. Every failure to set up aborts with a message: a test that
 * cannot build its world must not pass. */
#include "harness.h"
#include "config.h"
#include "redis.h"
#include "progs/clock.h"

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TH_REDIS_START_MS 5000
#define TH_MAX_CHILDREN   128
#define TH_MAX_FILES      256
#define TH_POLL_US        5000
#define TH_PORT_TRIES     8
#define TH_MAX_SERVERS    16

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "harness: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

/* DM_TEST_FILTER=PATTERN (cmocka's * and ? wildcards) runs only the
 * tests of a group whose names match: one test again and again, e.g.
 * beside a CPU hog. Set before main, so every group has it. */
__attribute__((constructor)) static void th_filter_from_env(void)
{
    const char *only = getenv("DM_TEST_FILTER");
    if (only && *only)
        cmocka_set_test_filter(only);
}

long long th_now_ms(void)
{
    return now_ms();
}

struct timespec th_deadline_in(clockid_t clk, long ms)
{
    return deadline_in(clk, ms);
}

int th_free_port(const char *addr)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t len = sizeof sa;
    if (s < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        die("socket for a free port on %s: %s", addr, strerror(errno));
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(s, (struct sockaddr *)&sa, &len) != 0)
        die("bind for a free port on %s: %s", addr, strerror(errno));
    close(s);
    return ntohs(sa.sin_port);
}

/* redis-server with `argv` (argv[0] "redis-server"): stdin and stdout on
 * /dev/null, and without the shim. */
static pid_t exec_server(const char *const *argv)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open("/dev/null", O_RDWR);
        dup2(fd, 0); dup2(fd, 1);
        unsetenv("LD_PRELOAD");
        execvp("redis-server", (char *const *)argv);
        _exit(127);
    }
    return pid;
}

/* A Redis Cluster node's bus port, by its port: a restart keeps it (the
 * node's nodes.conf names it). */
static struct { int port, bus; } bus_ports[64];

static int bus_port_of(const struct th_redis *r)
{
    size_t i;
    for (i = 0; i < sizeof bus_ports / sizeof bus_ports[0] && bus_ports[i].port; i++)
        if (bus_ports[i].port == r->port)
            return bus_ports[i].bus;
    if (i == sizeof bus_ports / sizeof bus_ports[0])
        die("more than %zu cluster nodes", i);
    bus_ports[i].port = r->port;
    bus_ports[i].bus = th_free_port(r->addr);
    return bus_ports[i].bus;
}

static pid_t spawn_redis(struct th_redis *r, const char *const *extra)
{
    char port[16], log[200];
    snprintf(port, sizeof port, "%d", r->port);
    snprintf(log, sizeof log, "%s/redis.log", r->dir);
    const char *argv[64];
    int n = 0;
    argv[n++] = "redis-server";
    if (r->tls) {
        argv[n++] = "--port";   argv[n++] = "0";
        argv[n++] = "--tls-port";
    } else {
        argv[n++] = "--port";
    }
    argv[n++] = port;
    argv[n++] = "--bind";       argv[n++] = r->addr;
    argv[n++] = "--dir";        argv[n++] = r->dir;
    argv[n++] = "--logfile";    argv[n++] = log;
    argv[n++] = "--save";       argv[n++] = "";
    argv[n++] = "--appendonly"; argv[n++] = "no";
    argv[n++] = "--protected-mode"; argv[n++] = "no";
    argv[n++] = "--daemonize";  argv[n++] = "no";
    int cluster = 0;
    for (int i = 0; extra && extra[i] && n < 60; i++) {
        cluster |= strcmp(extra[i], "--cluster-enabled") == 0;
        argv[n++] = extra[i];
    }
    char bus[16];
    if (cluster) {
        /* The default bus port (port + 10000) may be taken or past 65535. */
        snprintf(bus, sizeof bus, "%d", bus_port_of(r));
        argv[n++] = "--cluster-port";
        argv[n++] = bus;
    }
    argv[n] = NULL;
    return exec_server(argv);
}

/* 1 when process `pid` has a socket listening on TCP `port` (the LISTEN
 * sockets of /proc/PID/net/tcp and tcp6 on that port, against the
 * sockets among its fds), 0 when not; 1 too when /proc cannot tell. The
 * port came from th_free_port and was free a moment before the server
 * bound it, or is a restarted server's: another group running at the same
 * time (tests/run.sh) may have been given it meanwhile, and its server
 * answers there while ours fails to bind and exits. */
static int listens_on(pid_t pid, int port)
{
    unsigned long inodes[16];
    int n = 0, readable = 0;
    for (int v6 = 0; v6 < 2; v6++) {
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/%d/net/tcp%s", (int)pid, v6 ? "6" : "");
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        readable = 1;
        while (fgets(line, sizeof line, f) && n < 16) {
            unsigned lport, st;
            unsigned long ino;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*d: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu",
                       &lport, &st, &ino) == 3 && lport == (unsigned)port && st == 0x0A)
                inodes[n++] = ino;
        }
        fclose(f);
    }
    if (!readable)
        return 1;
    for (int i = 0; i < n; i++) {
        char want[64], path[64], got[64];
        snprintf(want, sizeof want, "socket:[%lu]", inodes[i]);
        for (int fd = 0; fd < 1024; fd++) {
            snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
            ssize_t len = readlink(path, got, sizeof got - 1);
            if (len <= 0)
                continue;
            got[len] = '\0';
            if (strcmp(got, want) == 0)
                return 1;
        }
    }
    return 0;
}

/* 0 once r's own server (r->pid, not another that holds the port)
 * answers; -1 when it exits first or does not answer in time. */
static int wait_ping(struct th_redis *r)
{
    long long end = th_now_ms() + TH_REDIS_START_MS;
    while (th_now_ms() < end) {
        int st;
        if (waitpid(r->pid, &st, WNOHANG) == r->pid)
            return -1;
        struct timeval tv = { 0, 200000 };
        redisContext *c = redisConnectWithTimeout(r->addr, r->port, tv);
        int up = 0;
        if (c && !c->err && r->tls) {
            up = 1;             /* it accepts: listening is the last step of its start */
        } else if (c && !c->err) {
            redisReply *rep = redisCommand(c, "PING");
            up = rep && rep->type == REDIS_REPLY_STATUS;
            if (rep) freeReplyObject(rep);
        }
        if (c)
            redisFree(c);
        if (up && listens_on(r->pid, r->port))
            return 0;
        usleep(10000);
    }
    return -1;
}

/* The pids of the servers running now, for the fatal-signal handler. */
static volatile pid_t servers[TH_MAX_SERVERS];

static void server_up(pid_t pid)
{
    for (int i = 0; i < TH_MAX_SERVERS; i++)
        if (servers[i] <= 0) {
            servers[i] = pid;
            return;
        }
    die("more than %d redis-servers at once", TH_MAX_SERVERS);
}

static void server_down(pid_t pid)
{
    for (int i = 0; i < TH_MAX_SERVERS; i++)
        if (servers[i] == pid)
            servers[i] = 0;
}

/* redis-server in sentinel mode: its config file (which it rewrites) in
 * r->dir, the options that every server here gets, then `sentinel`
 * lines. */
/* What a sentinel monitors, and how fast it fails over. */
struct sentinel_spec {
    const char *master, *mhost;
    int mport, quorum;
    long down_ms, failover_ms;
    const char *const *tls;     /* TLS only: "directive value" lines (tls-cert-file ...) */
};

static pid_t spawn_sentinel(struct th_redis *r, const struct sentinel_spec *m)
{
    char conf[200];
    snprintf(conf, sizeof conf, "%s/sentinel.conf", r->dir);
    FILE *f = fopen(conf, "w");
    if (!f)
        die("cannot write %s: %s", conf, strerror(errno));
    if (m->tls) {
        fprintf(f, "port 0\ntls-port %d\n", r->port);
        for (int i = 0; m->tls[i]; i++)
            fprintf(f, "%s\n", m->tls[i]);
    } else {
        fprintf(f, "port %d\n", r->port);
    }
    fprintf(f, "bind %s\ndir %s\nlogfile %s/redis.log\ndaemonize no\n"
            "protected-mode no\n"
            "sentinel monitor %s %s %d %d\n"
            "sentinel down-after-milliseconds %s %ld\n"
            "sentinel failover-timeout %s %ld\n"
            "sentinel parallel-syncs %s 2\n",
            r->addr, r->dir, r->dir, m->master, m->mhost, m->mport, m->quorum,
            m->master, m->down_ms, m->master, m->failover_ms, m->master);
    fclose(f);
    const char *argv[] = { "redis-server", conf, "--sentinel", NULL };
    return exec_server(argv);
}

/* One start of r's server on r's port (a sentinel when `sen` is not NULL):
 * 0 once it answers, else -1 with nothing left running. */
static int try_spawn(struct th_redis *r, const char *const *extra, const struct sentinel_spec *sen)
{
    r->pid = sen ? spawn_sentinel(r, sen) : spawn_redis(r, extra);
    if (wait_ping(r) == 0) {
        server_up(r->pid);
        return 0;
    }
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    return -1;
}

static void start(struct th_redis *r, const char *bind_addr, const char *const *extra, int tls,
                  const struct sentinel_spec *sen)
{
    memset(r, 0, sizeof *r);
    r->tls = tls;
    snprintf(r->addr, sizeof r->addr, "%s", bind_addr ? bind_addr : "127.0.0.1");
    snprintf(r->dir, sizeof r->dir, "/tmp/dmutex-test-%s.XXXXXX", sen ? "sentinel" : "redis");
    if (!mkdtemp(r->dir))
        die("mkdtemp: %s", strerror(errno));
    for (int tries = 0; tries < TH_PORT_TRIES; tries++) {
        r->port = th_free_port(r->addr);
        if (sen)    /* as redis.sentinels lists it */
            snprintf(r->url, sizeof r->url, "%s:%d", r->addr, r->port);
        else
            snprintf(r->url, sizeof r->url, "%s://%s:%d", tls ? "rediss" : "redis", r->addr,
                     r->port);
        snprintf(r->port_text, sizeof r->port_text, "%d", r->port);
        if (try_spawn(r, extra, sen) == 0) {
            if (!sen && !tls)
                th_redis_declare_fresh(r, DM_NAMESPACE_DEFAULT);
            return;
        }
    }
    if (sen)
        die("redis-server --sentinel did not start on %s (is redis-sentinel installed? see "
            "%s/redis.log)", r->addr, r->dir);
    die("redis-server did not start on %s (see %s/redis.log)", r->addr, r->dir);
}

void th_redis_declare_fresh(const struct th_redis *r, const char *ns)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout(r->addr, r->port, tv);
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        /* as `dmutex fresh` does it (tools/fresh.c); a server that wants
         * a password is left undeclared: its new locks wait a lease */
        redisReply *rep = redisCommand(c, "EVAL %s 1 %s%s",
                                       "local id = string.match(redis.call('info', 'server'), "
                                       "'run_id:(%x+)') redis.call('set', KEYS[1], id) return id",
                                       ns, DM_KEYS_INTACT_SUFFIX);
        if (rep)
            freeReplyObject(rep);
    }
    if (c)
        redisFree(c);
}

void th_redis_start(struct th_redis *r, const char *bind_addr, const char *const *extra)
{
    start(r, bind_addr, extra, 0, NULL);
}

void th_redis_start_tls(struct th_redis *r, const char *const *extra)
{
    start(r, NULL, extra, 1, NULL);
}

void th_sentinel_start(struct th_redis *r, const char *bind_addr, const char *master,
                       const char *mhost, int mport, int quorum, long down_ms, long failover_ms)
{
    const struct sentinel_spec sen = { master, mhost, mport, quorum, down_ms, failover_ms, NULL };
    start(r, bind_addr, NULL, 0, &sen);
}

void th_sentinel_start_tls(struct th_redis *r, const char *master, const char *mhost, int mport,
                           int quorum, long down_ms, long failover_ms, const char *const *tls)
{
    const struct sentinel_spec sen = { master, mhost, mport, quorum, down_ms, failover_ms, tls };
    start(r, NULL, NULL, 1, &sen);
}

void th_redis_kill(struct th_redis *r)
{
    if (r->pid > 0) {
        server_down(r->pid);
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        r->pid = 0;
    }
}

void th_redis_restart(struct th_redis *r, const char *const *extra)
{
    for (int tries = 0; tries < 50; tries++) {
        if (try_spawn(r, extra, NULL) == 0)
            return;
        usleep(100000);     /* the old socket may linger a moment */
    }
    die("redis-server did not restart on port %d", r->port);
}

void th_redis_stop(struct th_redis *r)
{
    if (r->pid > 0) {
        server_down(r->pid);
        kill(r->pid, SIGTERM);
        long long end = th_now_ms() + 1000;
        int st;
        while (waitpid(r->pid, &st, WNOHANG) == 0) {
            if (th_now_ms() > end) {
                kill(r->pid, SIGKILL);
                waitpid(r->pid, &st, 0);
                break;
            }
            usleep(5000);
        }
        r->pid = 0;
    }
    if (r->dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "harness: could not remove %s\n", r->dir);
        r->dir[0] = 0;
    }
}

void th_redis_drop(struct th_redis *r, redisContext **c)
{
    if (c && *c) {
        redisFree(*c);
        *c = NULL;
    }
    th_redis_stop(r);
    memset(r, 0, sizeof *r);
}

redisContext *th_redis_connect(const struct th_redis *r)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout(r->addr, r->port, tv);
    if (!c || c->err)
        die("connect to redis %s:%d: %s", r->addr, r->port, c ? c->errstr : "out of memory");
    redisSetTimeout(c, tv);
    return c;
}

static redisReply *cmd_v(redisContext *c, const char *fmt, va_list ap)
{
    redisReply *rep = redisvCommand(c, fmt, ap);
    if (!rep)
        die("redis command '%s': %s", fmt, c->errstr);
    return rep;
}

redisReply *th_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = cmd_v(c, fmt, ap);
    va_end(ap);
    return rep;
}

long long th_cmd_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = cmd_v(c, fmt, ap);
    va_end(ap);
    long long v;
    if (rep->type == REDIS_REPLY_INTEGER)
        v = rep->integer;
    else if (rep->type == REDIS_REPLY_STRING)
        v = strtoll(rep->str, NULL, 10);
    else if (rep->type == REDIS_REPLY_NIL)
        v = 0;
    else
        die("redis command '%s': reply type %d (%s)", fmt, rep->type,
            rep->type == REDIS_REPLY_ERROR ? rep->str : "");
    freeReplyObject(rep);
    return v;
}

char *th_write_file(const char *suffix, const char *fmt, ...)
{
    char *path;
    if (asprintf(&path, "/tmp/dmutex-test-XXXXXX%s", suffix ? suffix : "") < 0)
        die("out of memory");
    int fd = mkstemps(path, suffix ? (int)strlen(suffix) : 0);
    if (fd < 0)
        die("mkstemps: %s", strerror(errno));
    FILE *f = fdopen(fd, "w");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
    return path;
}

char *th_read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += n;
        if (cap - len < 2)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (buf)
        buf[len] = 0;
    return buf;
}

char *th_read_output(const char *path)
{
    char *text = th_read_file(path);
    if (!text)
        fail_msg("cannot read %s: %s", path, strerror(errno));
    return text;
}

pid_t th_spawn(char *const argv[], char *const env[], const char *out_path)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        for (int i = 0; env && env[i]; i++)
            putenv(env[i]);
        /* make test-asan: the ASan runtime must come first in LD_PRELOAD,
         * also for the children whose LD_PRELOAD a test sets itself. */
        const char *first = getenv("DM_TEST_PRELOAD");
        const char *pre = getenv("LD_PRELOAD");
        if (first && *first && pre && *pre && !strstr(pre, first)) {
            char *both;
            if (asprintf(&both, "%s %s", first, pre) >= 0)
                setenv("LD_PRELOAD", both, 1);
        }
        if (out_path) {
            int fd = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
                close(fd);
            }
        }
        execv(argv[0], argv);
        fprintf(stderr, "harness: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

char *th_finish(pid_t pid, const char *out, int want, long timeout_ms)
{
    int st = th_wait_end(pid, timeout_ms, NULL, NULL);
    char *text = th_read_output(out);
    if (st == -1)
        fail_msg("pid %d still running after %ld ms; output:\n%s", (int)pid, timeout_ms, text);
    if (!WIFEXITED(st))
        fail_msg("pid %d died of signal %d; output:\n%s", (int)pid,
                 WIFSIGNALED(st) ? WTERMSIG(st) : -1, text);
    if (WEXITSTATUS(st) != want)
        fail_msg("pid %d exited %d, expected %d; output:\n%s", (int)pid, WEXITSTATUS(st), want,
                 text);
    return text;
}

int th_wait_end(pid_t pid, long timeout_ms, long long *mono, long long *real)
{
    long long end = th_now_ms() + timeout_ms;
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) {
            if (mono)
                *mono = th_now_ms();
            if (real)
                *real = clock_ms(CLOCK_REALTIME);
            th_forget(pid);
            return st;
        }
        if (th_now_ms() > end) {
            kill(pid, SIGCONT);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            th_forget(pid);
            return -1;
        }
        usleep(1000);
    }
}

int th_wait(pid_t pid, long timeout_ms)
{
    long long end = th_now_ms() + timeout_ms;
    int st;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return st;
        if (w < 0)
            return -1;
        if (th_now_ms() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(2000);
    }
}

/* ---- children and files a test group makes ------------------------------- */

static pid_t children[TH_MAX_CHILDREN];
static int nchildren;
static char *kept[TH_MAX_FILES];
static int nkept;

void th_remember(pid_t pid)
{
    assert_true(nchildren < TH_MAX_CHILDREN);
    children[nchildren++] = pid;
}

pid_t th_child(char *const argv[], char *const env[], const char *out_path)
{
    assert_true(nchildren < TH_MAX_CHILDREN);
    pid_t pid = th_spawn(argv, env, out_path);
    th_remember(pid);
    return pid;
}

void th_forget(pid_t pid)
{
    for (int i = 0; i < nchildren; i++)
        if (children[i] == pid)
            children[i] = -1;
}

void th_kill_children(void)
{
    for (int i = 0; i < nchildren; i++)
        if (children[i] > 0) {
            kill(children[i], SIGCONT);
            kill(children[i], SIGKILL);
            waitpid(children[i], NULL, 0);
        }
    nchildren = 0;
}

void th_kill_children_now(void)
{
    for (int i = 0; i < nchildren; i++)
        if (children[i] > 0)
            kill(children[i], SIGKILL);
}

char *th_keep_file(char *path)
{
    assert_true(nkept < TH_MAX_FILES);
    kept[nkept++] = path;
    return path;
}

char *th_out_file(void)
{
    return th_keep_file(th_write_file(".out", "%s", ""));
}

char *th_go_file(void)
{
    char *p = th_write_file(".go", "%s", "");
    unlink(p);
    return th_keep_file(p);
}

void th_touch(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
}

void th_remove_files(void)
{
    for (int i = 0; i < nkept; i++) {
        unlink(kept[i]);
        free(kept[i]);
    }
    nkept = 0;
}

int th_built_paths(const char *path, char *abs, ...)
{
    va_list ap;
    va_start(ap, abs);
    int rc = 0;
    while (path) {
        if (!realpath(path, abs)) {
            fprintf(stderr, "harness: %s: %s (make test-build first)\n", path, strerror(errno));
            rc = -1;
            break;
        }
        path = va_arg(ap, const char *);
        abs = path ? va_arg(ap, char *) : NULL;
    }
    va_end(ap);
    return rc;
}

/* ---- programs under the shim ---------------------------------------------- */

char **th_shim_env(struct th_shim_env *e, const char *cfg, const char *url, const char *log)
{
    static char shim[PATH_MAX];
    if (!shim[0] && !realpath(TH_SHIM, shim))
        die("%s: %s (make first)", TH_SHIM, strerror(errno));
    const char *first = getenv("DM_TEST_PRELOAD");
    int n = 0;
    snprintf(e->preload, sizeof e->preload, "LD_PRELOAD=%s%s%s", first ? first : "",
             first && *first ? ":" : "", shim);
    e->env[n++] = e->preload;
    if (cfg) {
        snprintf(e->config, sizeof e->config, "DMUTEX_CONFIG=%s", cfg);
        e->env[n++] = e->config;
    }
    if (url) {
        snprintf(e->redis, sizeof e->redis, "DMUTEX_REDIS=%s", url);
        e->env[n++] = e->redis;
    }
    if (log) {
        snprintf(e->log, sizeof e->log, "DMUTEX_LOG=%s", log);
        e->env[n++] = e->log;
    }
    e->env[n] = NULL;
    return e->env;
}

char **th_shim_env_extra(struct th_shim_env *e, const char *cfg, const char *url, const char *log,
                         const char *const *extra)
{
    th_shim_env(e, cfg, url, log);
    int n = 0;
    while (e->env[n])
        n++;
    for (int i = 0; extra && extra[i]; i++) {
        if (i == TH_ENV_EXTRA_MAX)
            die("th_shim_env_extra: more than %d entries", TH_ENV_EXTRA_MAX);
        e->env[n++] = (char *)extra[i];
    }
    e->env[n] = NULL;
    return e->env;
}

/* ---- a test group's fixtures --------------------------------------------- */

static void (*group_on_fatal)(void);

static void emergency_stop(int sig)
{
    th_kill_children_now();
    for (int i = 0; i < TH_MAX_SERVERS; i++)
        if (servers[i] > 0) {
            kill(servers[i], SIGCONT);      /* a paused server must die too */
            kill(servers[i], SIGKILL);
        }
    if (group_on_fatal)
        group_on_fatal();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* What th_group_start started, for th_group_teardown. */
static struct th_redis *group_server;
static redisContext **group_conn;

void th_group_start(struct th_redis *server, redisContext **conn, unsigned alarm_s,
                    void (*on_fatal)(void))
{
    group_server = server;
    group_conn = conn;
    static const int fatal[] = { SIGABRT, SIGSEGV, SIGALRM, SIGPIPE, SIGTERM, SIGINT, SIGHUP };
    group_on_fatal = on_fatal;
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        signal(fatal[i], emergency_stop);
    alarm(alarm_s);
    unsetenv("LD_PRELOAD");
    unsetenv("DMUTEX_CONFIG");
    unsetenv("DMUTEX_REDIS");
    unsetenv("DMUTEX_LOG");
    struct rlimit nocore = { 0, 0 };
    setrlimit(RLIMIT_CORE, &nocore);
    if (server) {
        th_redis_start(server, NULL, NULL);
        if (conn)
            *conn = th_redis_connect(server);
    }
}

void th_test_cleanup(void)
{
    th_kill_children();
    th_remove_files();
}

void th_group_stop(struct th_redis *server, redisContext **conn)
{
    th_test_cleanup();
    if (server)
        th_redis_drop(server, conn);
    alarm(0);
}

int th_group_setup(void **state)
{
    (void)state;
    th_group_start(NULL, NULL, TH_GROUP_ALARM_S, NULL);
    return 0;
}

int th_shim_group_start(struct th_redis *server, redisContext **conn, unsigned alarm_s,
                        char *shim_path)
{
    if (th_built_paths(TH_SHIM, shim_path, NULL) != 0)
        return -1;
    th_group_start(server, conn, alarm_s, NULL);
    return 0;
}

int th_group_teardown(void **state)
{
    (void)state;
    th_group_stop(group_server, group_conn);
    return 0;
}

int th_test_teardown(void **state)
{
    (void)state;
    th_test_cleanup();
    return 0;
}

long long th_wait_for(const char *out, const char *needle, long timeout_ms)
{
    long long end = th_now_ms() + timeout_ms;
    for (;;) {
        char *text = th_read_file(out);
        int found = text && strstr(text, needle);
        long long now = th_now_ms();
        if (found) {
            free(text);
            return now;
        }
        if (now > end)
            fail_msg("no \"%s\" after %ld ms; output:\n%s", needle, timeout_ms, text ? text : "");
        free(text);
        usleep(TH_POLL_US);
    }
}

/* ---- reading outputs and the server's statistics ------------------------- */

long long th_run_counters(redisContext *c, const struct th_redis *server, const char *key,
                          char *const *env, const struct th_counters *how, const char *never)
{
    if (how->procs > TH_COUNTER_PROCS_MAX)
        fail_msg("%d counter processes: at most %d", how->procs, TH_COUNTER_PROCS_MAX);
    char threads[16], iters[16], done[48];
    snprintf(threads, sizeof threads, "%d", how->threads);
    snprintf(iters, sizeof iters, "%d", how->iters);
    snprintf(done, sizeof done, "done %d", how->threads * how->iters);
    char *argv[] = { TH_COUNTER, (char *)server->addr, (char *)server->port_text, (char *)key,
                     threads, iters, (char *)how->hold_us, NULL };
    freeReplyObject(th_cmd(c, "DEL %s", key));
    pid_t pid[TH_COUNTER_PROCS_MAX];
    char *out[TH_COUNTER_PROCS_MAX];
    for (int i = 0; i < how->procs; i++) {
        out[i] = th_out_file();
        pid[i] = th_child(argv, env, out[i]);
    }
    for (int i = 0; i < how->procs; i++) {
        char *text = th_finish(pid[i], out[i], 0, how->run_ms);
        th_assert_has(text, done);
        if (never && strstr(text, never))
            fail_msg("a counter process said %s:\n%s", never, text);
        free(text);
    }
    return th_cmd_int(c, "GET %s", key);
}

void th_assert_has(const char *text, const char *needle)
{
    if (!strstr(text, needle))
        fail_msg("\"%s\" not in the output:\n%s", needle, text);
}

long long th_field_after(const char *text, const char *prefix)
{
    const char *p = strstr(text, prefix);
    if (!p)
        fail_msg("\"%s\" not in the output:\n%s", prefix, text);
    return strtoll(p + strlen(prefix), NULL, 10);
}

long long th_info_num(redisContext *c, const char *section, const char *field)
{
    redisReply *r = th_cmd(c, "INFO %s", section);
    assert_int_equal(r->type, REDIS_REPLY_STRING);
    const char *p = strstr(r->str, field);
    long long v = p ? strtoll(p + strlen(field), NULL, 10) : 0;
    freeReplyObject(r);
    return v;
}

void th_reset_stats(redisContext *c)
{
    freeReplyObject(th_cmd(c, "CONFIG RESETSTAT"));
}

long long th_script_calls(redisContext *c)
{
    return th_info_num(c, "commandstats", "cmdstat_evalsha:calls=") +
           th_info_num(c, "commandstats", "cmdstat_eval:calls=");
}

long long th_numsub(redisContext *c, const char *channel)
{
    redisReply *r = th_cmd(c, "PUBSUB NUMSUB %s", channel);
    long long n = r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->integer : 0;
    freeReplyObject(r);
    return n;
}

/* Processes waiting for lock `name` (th_wait_listeners). */
static long long listeners(redisContext *c, const char *name)
{
    long long n = th_numsub(c, th_key(name, DM_KEY_RELEASED));
    redisReply *r = th_cmd(c, "PUBSUB CHANNELS %s*", th_key(name, DM_KEY_WAIT));
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        n += th_numsub(c, r->element[i]->str);
    freeReplyObject(r);
    return n;
}

long long th_wait_listeners(redisContext *c, const char *name, long long n, long timeout_ms)
{
    long long end = th_now_ms() + timeout_ms;
    for (;;) {
        if (listeners(c, name) >= n)
            return th_now_ms();
        if (th_now_ms() > end)
            fail_msg("%lld waiters expected on lock %s, %lld seen", n, name, listeners(c, name));
        usleep(TH_POLL_US);
    }
}

void th_wait_blocked(redisContext *c, const char *name, long timeout_ms)
{
    long long end = th_now_ms() + timeout_ms;
    while (th_numsub(c, th_key(name, DM_KEY_RELEASED)) +
           th_cmd_int(c, "LLEN %s", th_key(name, DM_KEY_QUEUE)) == 0) {
        if (th_now_ms() > end)
            fail_msg("nobody waits on lock %s", name);
        usleep(TH_POLL_US);
    }
}

const char *th_key(const char *name, enum dm_key k)
{
    static _Thread_local char slot[TH_KEY_SLOTS][TH_KEY_MAX];
    static _Thread_local unsigned next;
    char *buf = slot[next++ % TH_KEY_SLOTS];
    if (dm_keys_build(buf, TH_KEY_MAX, DM_NAMESPACE_DEFAULT, name, k) >= TH_KEY_MAX) {
        fprintf(stderr, "th_key: the key of lock %s is longer than %d bytes\n", name, TH_KEY_MAX);
        abort();
    }
    return buf;
}

char *th_config(long lease_ms, const char *mutexes)
{
    return th_config_top(lease_ms, "", mutexes);
}

char *th_config_top(long lease_ms, const char *top, const char *mutexes)
{
    return th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\n%smutexes = (\n%s\n);\n",
                                      lease_ms, top, mutexes));
}

int th_fork_with_handlers(int (*fn)(void *), void *arg)
{
    dm_store_atfork(DM_FORK_PREPARE);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dm_store_atfork(DM_FORK_CHILD);
        _exit(fn(arg));
    }
    dm_store_atfork(DM_FORK_PARENT);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return st;
}

struct dm_rlock *th_lock_get(const char *name)
{
    struct dm_rlock *l = dm_rlock_get(name);
    assert_non_null(l);
    return l;
}

uint64_t th_grant(struct dm_rlock *l, const char *who, struct dm_grant *g)
{
    struct timespec dl = th_deadline_in(CLOCK_MONOTONIC, TH_GRANT_MS);
    int r = dm_rlock_acquire(l, who, &dl, 0, g);
    if (r != 0)
        fail_msg("acquire of %s by %s = %d (%s), expected 0", l->name, who, r, strerror(r));
    return g->token;
}

struct th_hold th_owners(const char *name)
{
    struct th_hold h = { .l = th_lock_get(name) };
    dm_store_owner(h.a, 1);
    dm_store_owner(h.b, 2);
    return h;
}

struct th_hold th_hold_by_a(const char *name)
{
    struct th_hold h = th_owners(name);
    h.t = th_grant(h.l, h.a, &h.g);
    return h;
}

void th_cluster_config(struct dm_config *cfg, const struct th_redis *server,
                       long command_timeout_ms, long lease_ms)
{
    dm_config_defaults(cfg);
    cfg->redis.host = (char *)server->addr;
    cfg->redis.port = server->port;
    cfg->redis.command_timeout_ms = command_timeout_ms;
    th_cluster_lease(cfg, lease_ms);
}

void th_cluster_lease(struct dm_config *cfg, long lease_ms)
{
    cfg->lease_ms = lease_ms;
    cfg->renew_ms = lease_ms / 3;
    cfg->lease_margin_ms = lease_ms / 10;
}

/* ---- Redis Cluster ---------------------------------------------------------- */

#define TH_RCLUSTER_OK_MS 60000L
#define TH_REDIS_CLI      "/usr/bin/redis-cli"  /* Debian's redis-tools, beside redis-server */        /* a slow machine forms a cluster within this */

void th_rcluster_id(struct th_redis *r, char *id)
{
    redisContext *c = th_redis_connect(r);
    redisReply *rep = th_cmd(c, "CLUSTER MYID");
    if (rep->type != REDIS_REPLY_STRING || rep->len != 40)
        fail_msg("CLUSTER MYID on %s: unexpected reply", r->url);
    memcpy(id, rep->str, 41);
    freeReplyObject(rep);
    redisFree(c);
}

/* The primary's port of every slot as one node sees it (0: none), and
 * whether that node says cluster_state:ok. */
static int node_view(struct th_redis *r, int *owner_port)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout(r->addr, r->port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return -1;
    }
    redisSetTimeout(c, tv);
    int ok = 0;
    redisReply *rep = redisCommand(c, "CLUSTER INFO");
    if (rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_state:ok"))
        ok = 1;
    if (rep)
        freeReplyObject(rep);
    memset(owner_port, 0, 16384 * sizeof *owner_port);
    rep = ok ? redisCommand(c, "CLUSTER SLOTS") : NULL;
    for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements; i++) {
        redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
            continue;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        int port = (int)e->element[2]->element[1]->integer;
        for (long long s = lo; s <= hi && s < 16384; s++)
            owner_port[s] = port;
    }
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return ok ? 0 : -1;
}

int th_rcluster_wait_ok(struct th_rcluster *k, long timeout_ms)
{
    static int first[16384], other[16384];
    long long end = th_now_ms() + timeout_ms;
    while (th_now_ms() < end) {
        int good = 1, seen = 0;
        for (int i = 0; i < TH_RCLUSTER_NODES && good; i++) {
            if (k->node[i].pid <= 0)
                continue;
            if (node_view(&k->node[i], seen ? other : first) != 0) {
                good = 0;
                break;
            }
            if (seen && memcmp(first, other, sizeof first) != 0)
                good = 0;
            seen = 1;
        }
        for (int s = 0; good && s < 16384; s++)
            good = first[s] != 0;
        if (good && seen)
            return 0;
        usleep(100000);
    }
    return -1;
}

int th_rcluster_owner(struct th_rcluster *k, int slot)
{
    static int view[16384];
    for (int i = 0; i < TH_RCLUSTER_NODES; i++) {
        if (k->node[i].pid <= 0 || node_view(&k->node[i], view) != 0)
            continue;
        for (int j = 0; j < TH_RCLUSTER_NODES; j++)
            if (k->node[j].port == view[slot])
                return j;
    }
    return -1;
}

void th_rcluster_start(struct th_rcluster *k, long node_timeout_ms)
{
    memset(k, 0, sizeof *k);
    k->node_timeout_ms = node_timeout_ms;
    char nt[24];
    snprintf(nt, sizeof nt, "%ld", node_timeout_ms);
    const char *extra[] = { "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                            "--cluster-node-timeout", nt, "--repl-diskless-sync", "yes",
                            "--repl-diskless-sync-delay", "0", NULL };
    char *argv[TH_RCLUSTER_NODES + 8];
    char addrs[TH_RCLUSTER_NODES][80];
    int n = 0, u = snprintf(k->url, sizeof k->url, "redis-cluster://");
    argv[n++] = TH_REDIS_CLI;
    argv[n++] = "--cluster";
    argv[n++] = "create";
    for (int i = 0; i < TH_RCLUSTER_NODES; i++) {
        th_redis_start(&k->node[i], NULL, extra);
        snprintf(addrs[i], sizeof addrs[i], "%s:%d", k->node[i].addr, k->node[i].port);
        argv[n++] = addrs[i];
        u += snprintf(k->url + u, sizeof k->url - (size_t)u, "%s%s", i ? "," : "", addrs[i]);
    }
    argv[n++] = "--cluster-replicas";
    argv[n++] = "1";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    char *out = th_out_file();
    char *env[] = { NULL };
    pid_t pid = th_spawn(argv, env, out);
    int st = th_wait(pid, TH_RCLUSTER_OK_MS);
    if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char *text = th_read_file(out);
        fail_msg("redis-cli --cluster create failed (status %d):\n%s", st, text ? text : "");
    }
    if (th_rcluster_wait_ok(k, TH_RCLUSTER_OK_MS) != 0)
        fail_msg("the cluster %s never said cluster_state:ok with one slot map", k->url);
}

void th_rcluster_stop(struct th_rcluster *k)
{
    for (int i = 0; i < TH_RCLUSTER_NODES; i++)
        th_redis_stop(&k->node[i]);
}

/* ---- a signal storm ---------------------------------------------------------- */

static volatile sig_atomic_t storm_hits;
static struct {
    pthread_t target, thread;
    long every_us;
    int stop;
} storm;

static void on_storm(int sig)
{
    (void)sig;
    storm_hits++;
}

static void *storm_main(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&storm.stop, __ATOMIC_ACQUIRE)) {
        pthread_kill(storm.target, SIGUSR1);
        usleep((useconds_t)storm.every_us);
    }
    return NULL;
}

void th_storm_start(long every_us)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_storm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;                /* no SA_RESTART */
    assert_int_equal(sigaction(SIGUSR1, &sa, NULL), 0);
    storm_hits = 0;
    storm.target = pthread_self();
    storm.every_us = every_us;
    storm.stop = 0;
    assert_int_equal(pthread_create(&storm.thread, NULL, storm_main, NULL), 0);
}

long th_storm_stop(void)
{
    __atomic_store_n(&storm.stop, 1, __ATOMIC_RELEASE);
    pthread_join(storm.thread, NULL);
    return (long)storm_hits;
}
