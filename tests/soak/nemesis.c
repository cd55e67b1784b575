/* soaknemesis: the fault driver of `make soak` (tests/soak/soak.sh makes
 * the network namespaces and the config, then runs this). It starts and
 * owns every process of one run: the fenced resource (soakfence), the
 * store (one Redis node, or with -k a primary, two replicas and three
 * sentinels, inside the server namespace; or with -E three etcd members,
 * each in a namespace of its own so that one can be cut off from its
 * peers), and the workers (soakworker under LD_PRELOAD) inside the
 * machine namespaces, each started again when it dies. While the run lasts it picks faults from a seeded PRNG
 * (which fault, whom, how long, when) and writes every one to
 * DIR/nemesis.log with its CLOCK_MONOTONIC begin and end, the clock the
 * workers' records use, so that tests/soak/check.c can tell an overlap a
 * fault explains from a defect.
 *
 * The seed fixes the choices, not the outcome: what a fault meets (who
 * holds, who waits) depends on the machine's timing. The nemesis reads
 * the workers' logs as they grow, so it can aim at a holder, a waiter, or
 * a holder that was just handed the lock.
 *
 * nemesis.log, one line per event, NS first (CLOCK_MONOTONIC ns):
 *   NS config KEY=VALUE...           the run's settings (lease_ms, mode...)
 *   NS spawn PID HOST LOG            a worker started
 *   NS died PID exit CODE | PID signal SIG
 *   NS hang PID                      still running END + grace: killed
 *   NS fault ID begin KIND KEY=VALUE...   target=PID host= dur= cut=HOST|all
 *                                    stall=all loss=1 (what the fault does;
 *                                    etcd: member=I leader=0|1, and stall=all
 *                                    when it hits the leader or a majority;
 *                                    member-rejoin, stall=all, follows a cut:
 *                                    back, the member deposes the leader)
 *   NS fault ID end KIND
 *   NS fault ID skip KIND WHY        nothing to aim at, or a command failed
 *   NS primary NODE PORT             (Sentinel) the primary the sentinels name
 *   NS leader MEMBER                 (etcd) the leader, when a fault ends
 *   NS member I exited (signal N)    (etcd) a member's process ended
 *   NS end
 *
 * Stops on SIGINT/SIGTERM: every stopped process continued, every link
 * up, every child killed. The namespaces are the shell's to remove. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_MACHINES 8
#define MAX_WORKERS 64          /* slots; a dead worker's slot is used again */
#define MAX_THREADS 16
#define MAX_FAULTS 65536        /* about 0.7 a second: a day of one mode */
#define MAX_HELPERS 64
#define NNODES_MAX 3
#define NSENTINELS 3
#define MASTER "soak"
#define MS 1000000LL
#define TICK_US 1000             /* main loop period */
#define READY_WAIT_MS 20000      /* servers starting, replicas syncing */
#define HANDOVER_ARM_MS 3000     /* how long a stop-after-handover waits for one */
#define HANDOVER_FRESH_NS (3 * MS)   /* an enter this recent is "just handed over" */
#define HANDOVER_WAITED_NS (1 * MS)  /* a lock call that took this long waited */
#define SENTINEL_DOWN_AFTER_MS 1000
#define SENTINEL_FAILOVER_TIMEOUT_MS 4000
#define NMEMBERS 3               /* etcd members */
#define ETCD_HEARTBEAT_MS "50"   /* as tests/test_etcd.c: elections within a second */
#define ETCD_ELECTION_MS "500"
#define ETCD_STATUS_MS 300       /* one member's status answer */
#define ETCD_REJOIN_MS 1000      /* a cut member back: the election it may cause */

/* ---- settings ---------------------------------------------------------- */

static const char *dir, *mode = "fair", *srv_ns, *srv_ip, *worker_bin, *shim, *config_path;
static const char *faults_arg = "all", *down = "block", *extra = "";
static unsigned long long seed = 1;
static long run_s = 60, procs_per = 2, threads_per = 2, concurrency = 2;
static long lease = 2000, renew = 666, margin = 200;
static int sentinel_mode, etcd_mode, base_port;
static long stall_max;                /* -M: cap on a server stall, ms (0: none) */

struct machine { char ns[64], veth[64], host[32]; int cut; };
static struct machine machines[MAX_MACHINES];
static int nmachines;

/* ---- time, log, PRNG --------------------------------------------------- */

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static FILE *nlog;
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    fprintf(nlog, "%lld ", now_ns());
    va_start(ap, fmt);
    vfprintf(nlog, fmt, ap);
    va_end(ap);
    fputc('\n', nlog);
    fflush(nlog);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static uint64_t rng_state;
static uint64_t rnd(void)   /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static long uni(long lo, long hi) { return hi <= lo ? lo : lo + (long)(rnd() % (uint64_t)(hi - lo + 1)); }

/* ---- children ---------------------------------------------------------- */

enum ckind { C_NONE, C_WORKER, C_NODE, C_SENTINEL, C_FENCE, C_HELPER, C_MEMBER };
struct child { pid_t pid; enum ckind kind; int idx; };
static struct child children[MAX_WORKERS + MAX_HELPERS + 16];
static int nchildren;

static void child_add(pid_t pid, enum ckind kind, int idx)
{
    for (int i = 0; i < nchildren; i++)
        if (children[i].kind == C_NONE) {
            children[i] = (struct child){ pid, kind, idx };
            return;
        }
    if (nchildren == (int)(sizeof children / sizeof children[0]))
        die("too many children");
    children[nchildren++] = (struct child){ pid, kind, idx };
}

static void enter_ns(const char *ns)
{
    char path[128];
    snprintf(path, sizeof path, "/var/run/netns/%s", ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
        fprintf(stderr, "soaknemesis: setns %s: %s\n", ns, strerror(errno));
        _exit(126);
    }
    close(fd);
}

/* fork + (setns) + exec, output to OUT (appended). */
static pid_t spawn(const char *ns, const char *out, char *const argv[], char *const envp[])
{
    fflush(nlog);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid > 0)
        return pid;
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setpgid(0, 0);   /* a Ctrl-C at the terminal reaches the nemesis only */
    if (ns)
        enter_ns(ns);
    int fd = open(out ? out : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
    int nul = open("/dev/null", O_RDONLY);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    if (nul >= 0)
        dup2(nul, 0);
    if (envp)
        execvpe(argv[0], argv, envp);
    else
        execvp(argv[0], argv);
    fprintf(stderr, "soaknemesis: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* ---- Redis nodes and sentinels ----------------------------------------- */

struct node { int port, alive, stopped, pid, aof; char sock[256], ddir[256], log[256]; };
static struct node nodes[NNODES_MAX];
static int nnodes, primary;          /* primary: index the sentinels name */
static int sentinel_pids[NSENTINELS];

static redisContext *node_conn(int i, int ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    redisContext *c = redisConnectUnixWithTimeout(nodes[i].sock, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

static int node_pong(int i)
{
    redisContext *c = node_conn(i, 300);
    if (!c)
        return 0;
    redisReply *r = redisCommand(c, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return ok;
}

static void node_start(int i, int keep_data)
{
    struct node *n = &nodes[i];
    if (!keep_data) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s/appendonlydir' '%s'/*.rdb", n->ddir, n->ddir);
        if (system(cmd) != 0)
            say("note: could not empty %s", n->ddir);
    }
    char port[16];
    snprintf(port, sizeof port, "%d", n->port);
    char *argv[40];
    int k = 0;
    argv[k++] = "redis-server";
    argv[k++] = "--port"; argv[k++] = port;
    argv[k++] = "--bind"; argv[k++] = (char *)srv_ip;
    argv[k++] = "--unixsocket"; argv[k++] = n->sock;
    argv[k++] = "--unixsocketperm"; argv[k++] = "777";
    argv[k++] = "--dir"; argv[k++] = n->ddir;
    argv[k++] = "--save"; argv[k++] = "";
    argv[k++] = "--appendonly"; argv[k++] = n->aof ? "yes" : "no";
    argv[k++] = "--appendfsync"; argv[k++] = "always";
    argv[k++] = "--protected-mode"; argv[k++] = "no";
    argv[k++] = "--daemonize"; argv[k++] = "no";
    argv[k++] = "--enable-debug-command"; argv[k++] = "yes";
    argv[k++] = "--maxmemory-policy"; argv[k++] = "noeviction";
    argv[k++] = "--repl-diskless-sync-delay"; argv[k++] = "0";
    argv[k++] = "--maxclients"; argv[k++] = "2000";
    char primary_port[16];
    if (sentinel_mode && i != 0 && n->pid == 0) {
        /* a replica's first start; after a restart the sentinels say whose */
        snprintf(primary_port, sizeof primary_port, "%d", nodes[0].port);
        argv[k++] = "--replicaof"; argv[k++] = (char *)srv_ip; argv[k++] = primary_port;
    }
    argv[k] = NULL;
    n->pid = spawn(srv_ns, n->log, argv, NULL);
    n->alive = 1;
    n->stopped = 0;
    child_add(n->pid, C_NODE, i);
}

static void sentinel_start(int j)
{
    char conf[300], sdir[256], slog[300];
    snprintf(sdir, sizeof sdir, "%s/sentinel%d", dir, j);
    mkdir(sdir, 0755);
    snprintf(conf, sizeof conf, "%s/sentinel.conf", sdir);
    snprintf(slog, sizeof slog, "%s/sentinel.log", sdir);
    FILE *f = fopen(conf, "w");
    if (!f)
        die("%s: %s", conf, strerror(errno));
    fprintf(f, "port %d\nbind %s\ndir %s\nprotected-mode no\n"
               "sentinel monitor %s %s %d 2\n"
               "sentinel down-after-milliseconds %s %d\n"
               "sentinel failover-timeout %s %d\n"
               "sentinel parallel-syncs %s 2\n",
            base_port + 10 + j, srv_ip, sdir, MASTER, srv_ip, nodes[0].port,
            MASTER, SENTINEL_DOWN_AFTER_MS, MASTER, SENTINEL_FAILOVER_TIMEOUT_MS, MASTER);
    fclose(f);
    char *argv[] = { "redis-server", conf, "--sentinel", NULL };
    sentinel_pids[j] = spawn(srv_ns, slog, argv, NULL);
    child_add(sentinel_pids[j], C_SENTINEL, j);
}

static redisContext *sentinel_conn(int j, int ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    redisContext *c = redisConnectWithTimeout(srv_ip, base_port + 10 + j, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* The node the sentinels name as primary (-1: none answered). */
static int sentinel_primary(void)
{
    for (int j = 0; j < NSENTINELS; j++) {
        redisContext *c = sentinel_conn(j, 300);
        if (!c)
            continue;
        redisReply *r = redisCommand(c, "SENTINEL get-master-addr-by-name %s", MASTER);
        int found = -1;
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
            int port = atoi(r->element[1]->str);
            for (int i = 0; i < nnodes; i++)
                if (nodes[i].port == port)
                    found = i;
        }
        if (r)
            freeReplyObject(r);
        redisFree(c);
        if (found >= 0)
            return found;
    }
    return -1;
}

static int online_replicas(int node)
{
    redisContext *c = node_conn(node, 500);
    if (!c)
        return 0;
    redisReply *r = redisCommand(c, "INFO replication");
    int n = 0;
    if (r && (r->type == REDIS_REPLY_STRING))
        for (const char *p = r->str; (p = strstr(p, "state=online")); p++)
            n++;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return n;
}

static int sentinels_ready(void)
{
    for (int j = 0; j < NSENTINELS; j++) {
        redisContext *c = sentinel_conn(j, 300);
        if (!c)
            return 0;
        redisReply *r = redisCommand(c, "SENTINEL ckquorum %s", MASTER);
        int ok = r && r->type == REDIS_REPLY_STATUS && strncmp(r->str, "OK", 2) == 0;
        if (r)
            freeReplyObject(r);
        redisFree(c);
        if (!ok)
            return 0;
    }
    return 1;
}

/* ---- etcd members -------------------------------------------------------- */

/* Each member in a namespace of its own (-E NS:IP,...), its data in
 * DIR/memberI (kept across its restarts: a restart is from its data dir),
 * its log in DIR/memberI.log. The nemesis reaches every member's client
 * port from its own namespace, over the bridge. */
struct member { char ns[64], ip[32]; int cport, pport, pid, alive, stopped, cut, started, killed;
                char ddir[256], log[256]; };
static struct member members[NMEMBERS];
static int nmembers;

static void member_start(int i)
{
    struct member *mb = &members[i];
    char name[8], curl[64], purl[64], cluster[512] = "";
    snprintf(name, sizeof name, "m%d", i);
    snprintf(curl, sizeof curl, "http://%s:%d", mb->ip, mb->cport);
    snprintf(purl, sizeof purl, "http://%s:%d", mb->ip, mb->pport);
    for (int k = 0; k < nmembers; k++)
        snprintf(cluster + strlen(cluster), sizeof cluster - strlen(cluster), "%sm%d=http://%s:%d",
                 k ? "," : "", k, members[k].ip, members[k].pport);
    char *argv[] = { "etcd", "--name", name, "--data-dir", mb->ddir,
                     "--listen-client-urls", curl, "--advertise-client-urls", curl,
                     "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                     "--initial-cluster", cluster, "--initial-cluster-token", "dmsoak",
                     "--initial-cluster-state", mb->started ? "existing" : "new",
                     "--heartbeat-interval", ETCD_HEARTBEAT_MS,
                     "--election-timeout", ETCD_ELECTION_MS, "--logger", "zap", NULL };
    mb->pid = spawn(mb->ns, mb->log, argv, NULL);
    mb->alive = 1;
    mb->stopped = 0;
    mb->killed = 0;
    mb->started = 1;
    child_add(mb->pid, C_MEMBER, i);
}

/* Member i's own status (POST /v3/maintenance/status, as tests/test_etcd.c's
 * leader()): its id and the leader's as it sees them; 0, or -1 when it did
 * not answer within ms. */
static int member_status(int i, int ms, char *id, char *lead, size_t n)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)members[i].cport) };
    inet_pton(AF_INET, members[i].ip, &a.sin_addr);
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);   /* connect(2) too */
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    static const char req[] = "POST /v3/maintenance/status HTTP/1.0\r\nHost: etcd\r\n"
                              "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    char buf[2048];
    size_t got = 0;
    long long until = now_ns() + ms * MS;
    if (connect(s, (struct sockaddr *)&a, sizeof a) != 0 ||
        send(s, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1)) {
        close(s);
        return -1;
    }
    for (;;) {      /* HTTP/1.0: the member closes after its answer */
        ssize_t r = recv(s, buf + got, sizeof buf - 1 - got, 0);
        if (r <= 0 || (got += (size_t)r) == sizeof buf - 1 || now_ns() > until)
            break;
    }
    close(s);
    buf[got] = '\0';
    char *mid = strstr(buf, "\"member_id\":\""), *ld = strstr(buf, "\"leader\":\"");
    if (!mid)
        return -1;
    snprintf(id, n, "%.*s", (int)strcspn(mid + 13, "\""), mid + 13);
    snprintf(lead, n, "%.*s", ld ? (int)strcspn(ld + 10, "\"") : 1, ld ? ld + 10 : "0");
    return 0;
}

/* The member that is the leader by its own status, asking the members
 * that are up (a cut-off one last: it may not know yet that it lost), or -1. */
static int etcd_leader(int ms)
{
    char id[32], lead[32];
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nmembers; i++)
            if (members[i].alive && !members[i].stopped && members[i].cut == pass &&
                member_status(i, ms, id, lead, sizeof id) == 0 && strcmp(id, lead) == 0)
                return i;
    return -1;
}

/* Members out of the cluster's reach (dead, stopped, cut off), with i too. */
static int members_down_with(int i)
{
    int n = 0;
    for (int k = 0; k < nmembers; k++)
        n += k == i || !members[k].alive || members[k].stopped || members[k].cut;
    return n;
}

/* iptables inside member i's namespace: its peers' packets dropped both
 * ways (cut), or every rule flushed (the namespace is the run's own). */
static char *const *member_cut_argv(int i, int cut)
{
    static char script[1024];
    static char *argv[] = { "sh", "-c", script, NULL };
    size_t o = (size_t)snprintf(script, sizeof script, "PATH=/usr/sbin:/sbin:$PATH; true");
    if (!cut)
        snprintf(script + o, sizeof script - o, " && iptables -w -F INPUT && iptables -w -F OUTPUT");
    for (int k = 0; cut && k < nmembers; k++)
        if (k != i)
            o += (size_t)snprintf(script + o, sizeof script - o,
                                  " && iptables -w -A INPUT -s %s -j DROP"
                                  " && iptables -w -A OUTPUT -d %s -j DROP",
                                  members[k].ip, members[k].ip);
    return argv;
}

/* ---- workers and what their logs say ----------------------------------- */

enum tstate { T_IDLE, T_WAIT, T_IN };
struct thread { enum tstate st; long long t_want, t_enter; int blocking; };
struct worker {
    int pid, machine, seq, tail_fd, stopped, dead;
    char log[256];
    char buf[4096];
    size_t blen;
    struct thread th[MAX_THREADS];
    long long respawn_at;    /* a dead worker's machine gets a new one then */
};
static struct worker workers[MAX_WORKERS];
static int nworkers;
static long long end_ns, t0_ns;

static int nspawned;    /* workers started so far: their logs' numbers */

static void worker_spawn(int machine)
{
    int slot = -1;
    for (int i = 0; i < nworkers && slot < 0; i++)
        if (workers[i].dead && !workers[i].respawn_at)
            slot = i;    /* dead and replaced (or not to be): its log is complete */
    if (slot < 0 && nworkers == MAX_WORKERS) {
        say("note: no room for another worker");
        return;
    }
    if (slot < 0)
        slot = nworkers++;
    int seq = nspawned++;
    struct worker *w = &workers[slot];
    *w = (struct worker){ .machine = machine, .seq = seq, .tail_fd = -1 };
    snprintf(w->log, sizeof w->log, "%s/w%02d-%s.log", dir, seq, machines[machine].host);
    int fd = open(w->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0)
        close(fd);
    w->tail_fd = open(w->log, O_RDONLY | O_CLOEXEC);
    char err[300], endarg[32], th[16], sd[32], fence[300];
    snprintf(err, sizeof err, "%s/w%02d-%s.err", dir, seq, machines[machine].host);
    snprintf(endarg, sizeof endarg, "%lld", end_ns);
    snprintf(th, sizeof th, "%ld", threads_per);
    snprintf(sd, sizeof sd, "%llu", (seed * 1000003ULL + (unsigned long long)seq) % 4000000000ULL);
    snprintf(fence, sizeof fence, "%s/fence.sock", dir);
    char *argv[] = { (char *)worker_bin, "-o", w->log, "-H", machines[machine].host, "-e", endarg,
                     "-f", fence, "-t", th, "-s", sd, NULL };
    char e_pre[300], e_cfg[300];
    snprintf(e_pre, sizeof e_pre, "LD_PRELOAD=%s", shim);
    snprintf(e_cfg, sizeof e_cfg, "DMUTEX_CONFIG=%s", config_path);
    /* ASAN_OPTIONS: a soak of an AddressSanitizer build (soak.sh's SOAK_PRELOAD) */
    char e_asan[600];
    const char *asan = getenv("ASAN_OPTIONS");
    snprintf(e_asan, sizeof e_asan, "ASAN_OPTIONS=%s", asan ? asan : "");
    char *envp[] = { e_pre, e_cfg, "DMUTEX_LOG=warn", "PATH=/usr/bin:/bin", asan ? e_asan : NULL,
                     NULL };
    w->pid = spawn(machines[machine].ns, err, argv, envp);
    child_add(w->pid, C_WORKER, slot);
    say("spawn %d %s %s", w->pid, machines[machine].host, w->log);
}

static void worker_line(struct worker *w, char *line)
{
    long long ns;
    char kind[16];
    int pid, tid;
    char lock[32], arg[32];
    int n = sscanf(line, "%lld %15s %d %d %31s %31s", &ns, kind, &pid, &tid, lock, arg);
    if (n < 4 || tid < 0 || tid >= MAX_THREADS)
        return;
    struct thread *t = &w->th[tid];
    if (strcmp(kind, "want") == 0) {
        t->st = T_WAIT;
        t->t_want = ns;
        t->blocking = n == 6 && strcmp(arg, "lock") == 0;
    } else if (strcmp(kind, "enter") == 0) {
        t->st = T_IN;
        t->t_enter = ns;
    } else if (strcmp(kind, "unlocked") == 0 || strcmp(kind, "fail") == 0) {
        t->st = T_IDLE;
    }
}

static void worker_tail(struct worker *w)
{
    if (w->tail_fd < 0)
        return;
    for (;;) {
        ssize_t got = read(w->tail_fd, w->buf + w->blen, sizeof w->buf - 1 - w->blen);
        if (got <= 0)
            return;
        w->blen += (size_t)got;
        char *start = w->buf, *nl;
        while ((nl = memchr(start, '\n', w->blen - (size_t)(start - w->buf)))) {
            *nl = '\0';
            worker_line(w, start);
            start = nl + 1;
        }
        w->blen -= (size_t)(start - w->buf);
        memmove(w->buf, start, w->blen);
        if (w->blen == sizeof w->buf - 1)
            w->blen = 0;   /* a line that long is not ours */
    }
}

static int w_inside(const struct worker *w)
{
    for (int i = 0; i < threads_per; i++)
        if (w->th[i].st == T_IN)
            return 1;
    return 0;
}

static int w_waiting(const struct worker *w)
{
    for (int i = 0; i < threads_per; i++)
        if (w->th[i].st == T_WAIT && w->th[i].blocking)
            return 1;
    return 0;
}

/* A live, running worker: inside (want 1), waiting and not inside (2), any (0). */
static int pick_worker(int want)
{
    int cand[MAX_WORKERS], n = 0;
    for (int i = 0; i < nworkers; i++) {
        struct worker *w = &workers[i];
        if (w->dead || w->stopped)
            continue;
        if ((want == 1 && !w_inside(w)) || (want == 2 && (w_inside(w) || !w_waiting(w))))
            continue;
        cand[n++] = i;
    }
    return n ? cand[rnd() % (uint64_t)n] : -1;
}

/* A worker one of whose threads entered within HANDOVER_FRESH_NS after a
 * blocking lock call that waited: most likely handed the lock just now. */
static int pick_handed(long long now)
{
    for (int i = 0; i < nworkers; i++) {
        struct worker *w = &workers[i];
        if (w->dead || w->stopped)
            continue;
        for (int t = 0; t < threads_per; t++)
            if (w->th[t].st == T_IN && w->th[t].blocking && now - w->th[t].t_enter < HANDOVER_FRESH_NS &&
                w->th[t].t_enter - w->th[t].t_want >= HANDOVER_WAITED_NS)
                return i;
    }
    return -1;
}

/* ---- faults -------------------------------------------------------------- */

enum fkind {
    F_STOP_HOLDER, F_STOP_WAITER, F_STOP_HANDOVER, F_KILL_HOLDER, F_KILL_WAITER,
    F_PARTITION, F_PAUSE, F_CLIENT_KILL, F_SCRIPT_FLUSH, F_SLEEP, F_OOM, F_REDIS_STOP,
    F_RESTART_AOF, F_RESTART_NOAOF,
    F_PRIMARY_KILL, F_PRIMARY_RESTART_NOAOF, F_FAILOVER, F_REPLICA_STALL,
    F_LEADER_KILL, F_MEMBER_KILL, F_MEMBER_STOP, F_MEMBER_CUT, F_CLUSTER_RESTART,
    F_MEMBER_REJOIN,          /* what follows a member-cut: never drawn */
    F_NKINDS
};
static const char *const fnames[F_NKINDS] = {
    "stop-holder", "stop-waiter", "stop-handover", "kill-holder", "kill-waiter",
    "partition", "pause", "client-kill", "script-flush", "sleep", "oom", "redis-stop",
    "restart-aof", "restart-noaof",
    "primary-kill", "primary-restart-noaof", "failover", "replica-stall",
    "leader-kill", "member-kill", "member-stop", "member-cut", "cluster-restart",
    "member-rejoin",
};
/* the stores a fault applies to: one Redis node, Sentinel, etcd */
#define W_R 1
#define W_S 2
#define W_E 4
#define W_ALL (W_R | W_S | W_E)
static const int fwhere[F_NKINDS] = {
    W_ALL, W_ALL, W_ALL, W_ALL, W_ALL, W_ALL,                   /* the workers' faults */
    W_R | W_S, W_R | W_S, W_R | W_S, W_R | W_S, W_R | W_S, W_R | W_S,  /* pause..redis-stop */
    W_R, W_R, W_S, W_S, W_S, W_S, W_E, W_E, W_E, W_E, W_E, W_E };
/* a restart, a kill of the primary or a member, a failover: one at a time */
static const int flife[F_NKINDS] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 0,
                                     1, 1, 0, 0, 1, 0 };
static int fenabled[F_NKINDS];

enum fphase { P_OFF, P_ARMED, P_ON, P_DOWN, P_WAITUP, P_WAITMOVE };
struct fault {
    int id;
    enum fkind kind;
    enum fphase phase;
    long long due;            /* the next step's time */
    long long armed_until;
    int target, node, machine;
    long dur;
    int helper;               /* a helper child's pid, or 0 */
    int keep;                 /* restart: keep the data */
    int moved;                /* primary-kill: the sentinels named another */
    int helper_rc;            /* the helper's exit status, once it ended */
};
static struct fault faults[MAX_FAULTS];
static int nfaults;

static int active_faults(int life_only)
{
    int n = 0;
    for (int i = 0; i < nfaults; i++)
        if (faults[i].phase != P_OFF && (!life_only || flife[faults[i].kind]))
            n++;
    return n;
}

/* A helper child: connects to node's unix socket and runs one Redis
 * command (formatted here: no % is left in it), exit 0 when it got an
 * answer that is not an error. Never blocks the nemesis. */
static pid_t helper_redis(int node, int timeout_ms, const char *fmt, ...)
{
    char cmd[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(nlog);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid > 0) {
        child_add(pid, C_HELPER, 0);
        return pid;
    }
    redisContext *c = node_conn(node, timeout_ms);
    if (!c)
        _exit(1);
    redisReply *r = redisCommand(c, cmd);
    _exit(r && r->type != REDIS_REPLY_ERROR ? 0 : 1);
}

static pid_t helper_cmd(char *const argv[])
{
    pid_t pid = spawn(NULL, NULL, argv, NULL);
    child_add(pid, C_HELPER, 0);
    return pid;
}

/* A helper child that sleeps settle_ms, then waits, at most ms, for every
 * member up (alive, not stopped) to answer and one of them to be the
 * leader: exit 10 + the leader's index, or 1 (none in time). */
static pid_t helper_wait_leader(long settle_ms, long ms)
{
    fflush(nlog);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid > 0) {
        child_add(pid, C_HELPER, 0);
        return pid;
    }
    usleep((useconds_t)settle_ms * 1000);
    long long until = now_ns() + ms * MS;
    do {
        char id[32], lead[32];
        int all = 1;
        for (int i = 0; i < nmembers; i++)
            if (members[i].alive && !members[i].stopped &&
                member_status(i, ETCD_STATUS_MS, id, lead, sizeof id) != 0)
                all = 0;
        int l = all ? etcd_leader(ETCD_STATUS_MS) : -1;
        if (l >= 0)
            _exit(10 + l);
        usleep(50000);
    } while (now_ns() < until);
    _exit(1);
}

static pid_t member_cut_set(int i, int cut)
{
    pid_t pid = spawn(members[i].ns, NULL, member_cut_argv(i, cut), NULL);
    child_add(pid, C_HELPER, 0);
    members[i].cut = cut;
    return pid;
}

static void link_set(int m, int up)
{
    char *argv[] = { "ip", "link", "set", machines[m].veth, up ? "up" : "down", NULL };
    helper_cmd(argv);
    machines[m].cut = !up;
}

static long stop_dur(int handover)
{
    long r = uni(0, 99);
    if (handover ? r < 70 : r < 30)   /* past renew_ms, short of the lease: must not lose it */
        return uni(renew + 50, lease - renew - 100);
    if (!handover && r < 70)
        return uni(20, renew - 50);
    return uni(lease + 100, 2 * lease);
}

/* A server stall's length: up to `hi`, or -M's cap. */
static long stall_dur(long lo, long hi)
{
    if (stall_max && hi > stall_max)
        hi = stall_max;
    return uni(lo, hi);
}

static struct fault *fault_new(enum fkind k)
{
    if (nfaults == MAX_FAULTS)
        return NULL;
    struct fault *f = &faults[nfaults];
    *f = (struct fault){ .id = nfaults + 1, .kind = k, .target = -1, .node = -1, .machine = -1 };
    nfaults++;
    return f;
}

static void fault_skip(struct fault *f, const char *why)
{
    say("fault %d skip %s %s", f->id, fnames[f->kind], why);
    f->phase = P_OFF;
}

static void fault_end(struct fault *f)
{
    say("fault %d end %s", f->id, fnames[f->kind]);
    f->phase = P_OFF;
}

static int server_node(void)
{
    return sentinel_mode ? primary : 0;
}

static void stop_proc(struct fault *f, int wi, const char *what)
{
    struct worker *w = &workers[wi];
    kill(w->pid, SIGSTOP);
    w->stopped = 1;
    f->target = wi;
    f->phase = P_ON;
    f->due = now_ns() + f->dur * MS;
    say("fault %d begin %s target=%d host=%s dur=%ld state=%s", f->id, fnames[f->kind], w->pid,
        machines[w->machine].host, f->dur, what);
}

static void fault_start(enum fkind k)
{
    struct fault *f = fault_new(k);
    if (!f)
        return;
    long long now = now_ns();
    int wi, sn = server_node();
    switch (k) {
    case F_STOP_HOLDER:
    case F_STOP_WAITER:
        wi = pick_worker(k == F_STOP_HOLDER ? 1 : 2);
        if (wi < 0)
            return fault_skip(f, "nobody to aim at");
        f->dur = stop_dur(0);
        return stop_proc(f, wi, k == F_STOP_HOLDER ? "inside" : "waiting");
    case F_STOP_HANDOVER:
        f->phase = P_ARMED;
        f->armed_until = now + HANDOVER_ARM_MS * MS;
        f->dur = stop_dur(1);
        return;
    case F_KILL_HOLDER:
    case F_KILL_WAITER:
        wi = pick_worker(k == F_KILL_HOLDER ? 1 : 2);
        if (wi < 0)
            return fault_skip(f, "nobody to aim at");
        kill(workers[wi].pid, SIGKILL);
        say("fault %d begin %s target=%d host=%s state=%s", f->id, fnames[k], workers[wi].pid,
            machines[workers[wi].machine].host, k == F_KILL_HOLDER ? "inside" : "waiting");
        return fault_end(f);
    case F_PARTITION: {
        int cand[MAX_MACHINES], n = 0;
        for (int m = 0; m < nmachines; m++)
            if (!machines[m].cut)
                cand[n++] = m;
        if (!n)
            return fault_skip(f, "every machine is cut off");
        f->machine = cand[rnd() % (uint64_t)n];
        f->dur = uni(100, 2 * lease);
        link_set(f->machine, 0);
        f->phase = P_ON;
        f->due = now + f->dur * MS;
        say("fault %d begin %s host=%s dur=%ld cut=%s", f->id, fnames[k],
            machines[f->machine].host, f->dur, machines[f->machine].host);
        return;
    }
    case F_PAUSE: {
        f->dur = stall_dur(100, lease * 3 / 2);
        const char *how = rnd() % 2 ? "WRITE" : "ALL";
        f->helper = helper_redis(sn, 2000, "CLIENT PAUSE %ld %s", f->dur, how);
        f->phase = P_ON;
        f->due = now + f->dur * MS;
        say("fault %d begin %s node=%d dur=%ld how=%s stall=all", f->id, fnames[k], sn, f->dur, how);
        return;
    }
    case F_CLIENT_KILL: {
        const char *type = rnd() % 2 ? "normal" : "pubsub";
        helper_redis(sn, 2000, "CLIENT KILL TYPE %s", type);
        say("fault %d begin %s node=%d type=%s", f->id, fnames[k], sn, type);
        return fault_end(f);
    }
    case F_SCRIPT_FLUSH:
        helper_redis(sn, 2000, "SCRIPT FLUSH");
        say("fault %d begin %s node=%d", f->id, fnames[k], sn);
        return fault_end(f);
    case F_SLEEP:
    case F_REPLICA_STALL: {
        f->dur = stall_dur(100, k == F_SLEEP ? lease * 3 / 2 : lease);
        f->node = sn;
        if (k == F_REPLICA_STALL) {
            int cand[NNODES_MAX], n = 0;
            for (int i = 0; i < nnodes; i++)
                if (i != primary && nodes[i].alive && !nodes[i].stopped)
                    cand[n++] = i;
            if (!n)
                return fault_skip(f, "no replica up");
            f->node = cand[rnd() % (uint64_t)n];
        }
        f->helper = helper_redis(f->node, f->dur + 5000, "DEBUG SLEEP %ld.%03ld", f->dur / 1000,
                                 f->dur % 1000);
        f->phase = P_ON;
        f->due = now + (f->dur + 10000) * MS;    /* ends when the helper does */
        say("fault %d begin %s node=%d dur=%ld stall=all", f->id, fnames[k], f->node, f->dur);
        return;
    }
    case F_OOM:
        f->dur = uni(200, lease);
        f->node = sn;
        helper_redis(sn, 2000, "CONFIG SET maxmemory 1");
        f->phase = P_ON;
        f->due = now + f->dur * MS;
        say("fault %d begin %s node=%d dur=%ld", f->id, fnames[k], sn, f->dur);
        return;
    case F_REDIS_STOP:
        if (!nodes[sn].alive || nodes[sn].stopped)
            return fault_skip(f, "the server is down");
        f->dur = stall_dur(100, lease * 3 / 2);
        f->node = sn;
        kill(nodes[sn].pid, SIGSTOP);
        nodes[sn].stopped = 1;
        f->phase = P_ON;
        f->due = now + f->dur * MS;
        say("fault %d begin %s node=%d dur=%ld stall=all", f->id, fnames[k], sn, f->dur);
        return;
    case F_RESTART_AOF:
    case F_RESTART_NOAOF:
    case F_PRIMARY_KILL:
    case F_PRIMARY_RESTART_NOAOF:
        if (!nodes[sn].alive || nodes[sn].stopped)
            return fault_skip(f, "the server is down or stopped");
        f->node = sn;
        f->keep = k == F_RESTART_AOF;
        kill(nodes[sn].pid, SIGKILL);
        f->phase = P_DOWN;
        f->dur = k == F_PRIMARY_KILL ? 0 : k == F_PRIMARY_RESTART_NOAOF ? uni(0, 300)
                                                                        : uni(0, lease / 2);
        f->due = now + f->dur * MS;
        say("fault %d begin %s node=%d down=%ld cut=all%s", f->id, fnames[k], sn, f->dur,
            f->keep ? "" : " loss=1");
        return;
    case F_LEADER_KILL:
    case F_MEMBER_KILL:
    case F_MEMBER_STOP:
    case F_MEMBER_CUT: {
        /* every draw made whatever the cluster's state: the seed fixes them */
        int at_leader = k == F_LEADER_KILL || (k != F_MEMBER_KILL && rnd() % 2);
        uint64_t pick = rnd();
        f->dur = k == F_MEMBER_STOP ? stall_dur(100, lease * 3 / 2)
               : k == F_MEMBER_CUT ? uni(100, 2 * lease) : uni(0, lease);
        int l = etcd_leader(ETCD_STATUS_MS), i = l;
        if (!at_leader) {
            int cand[NMEMBERS], n = 0;
            for (int j = 0; j < nmembers; j++)
                if (members[j].alive && !members[j].stopped && !members[j].cut)
                    cand[n++] = j;
            i = n ? cand[pick % (uint64_t)n] : -1;
        }
        if (i < 0 || members[i].cut)
            return fault_skip(f, at_leader ? "no leader" : "no member up");
        /* the cluster stalls when it loses its leader or its majority */
        int stall = i == l || members_down_with(i) > nmembers / 2;
        f->node = i;
        if (k == F_MEMBER_STOP) {
            kill(members[i].pid, SIGSTOP);
            members[i].stopped = 1;
            f->phase = P_ON;
        } else if (k == F_MEMBER_CUT) {
            f->helper = member_cut_set(i, 1);
            f->phase = P_ON;
        } else {
            kill(members[i].pid, SIGKILL);
            members[i].killed = 1;
            f->phase = P_DOWN;
        }
        f->due = now + f->dur * MS;
        say("fault %d begin %s member=%d leader=%d %s=%ld%s", f->id, fnames[k], i, i == l,
            f->phase == P_DOWN ? "down" : "dur", f->dur, stall ? " stall=all" : "");
        return;
    }
    case F_CLUSTER_RESTART:
        f->dur = uni(0, lease / 2);
        for (int i = 0; i < nmembers; i++)
            if (!members[i].alive)
                return fault_skip(f, "a member is down");
        for (int i = 0; i < nmembers; i++) {
            kill(members[i].pid, SIGKILL);
            members[i].killed = 1;
        }
        f->node = -1;
        f->phase = P_DOWN;
        f->due = now + f->dur * MS;
        say("fault %d begin %s down=%ld cut=all stall=all", f->id, fnames[k], f->dur);
        return;
    case F_FAILOVER:      /* failover_start */
    case F_MEMBER_REJOIN: /* a member-cut's end */
    case F_NKINDS:
        break;
    }
}

/* SENTINEL FAILOVER goes to a sentinel, not a node: its own helper. */
static void failover_start(void)
{
    struct fault *f = fault_new(F_FAILOVER);
    if (!f)
        return;
    fflush(nlog);
    pid_t pid = fork();
    if (pid == 0) {
        redisContext *c = sentinel_conn((int)(rnd() % NSENTINELS), 2000);
        if (!c)
            _exit(1);
        redisReply *r = redisCommand(c, "SENTINEL FAILOVER %s", MASTER);
        _exit(r && r->type != REDIS_REPLY_ERROR ? 0 : 1);
    }
    child_add(pid, C_HELPER, 0);
    f->node = primary;
    f->phase = P_WAITMOVE;
    f->due = now_ns() + 15000 * MS;
    say("fault %d begin %s node=%d stall=all", f->id, fnames[F_FAILOVER], primary);
}

static void node_died(int i)
{
    nodes[i].alive = 0;
    nodes[i].stopped = 0;
}

static void fault_step(struct fault *f, long long now)
{
    switch (f->phase) {
    case P_ARMED: {
        int wi = pick_handed(now);
        if (wi >= 0)
            stop_proc(f, wi, "handed-over");
        else if (now > f->armed_until)
            fault_skip(f, "no handover seen");
        return;
    }
    case P_ON:
        if ((f->kind == F_SLEEP || f->kind == F_REPLICA_STALL) && !f->helper)
            return fault_end(f);    /* DEBUG SLEEP returned */
        if (now < f->due)
            return;
        switch (f->kind) {
        case F_STOP_HOLDER: case F_STOP_WAITER: case F_STOP_HANDOVER:
            if (!workers[f->target].dead)
                kill(workers[f->target].pid, SIGCONT);
            workers[f->target].stopped = 0;
            break;
        case F_PARTITION:
            link_set(f->machine, 1);
            break;
        case F_OOM:
            helper_redis(f->node, 5000, "CONFIG SET maxmemory 0");
            break;
        case F_REDIS_STOP:
            if (nodes[f->node].alive)
                kill(nodes[f->node].pid, SIGCONT);
            nodes[f->node].stopped = 0;
            break;
        case F_MEMBER_STOP:
            if (members[f->node].alive && members[f->node].stopped)
                kill(members[f->node].pid, SIGCONT);
            members[f->node].stopped = 0;
            break;
        case F_MEMBER_CUT: {
            /* Back with its peers, the member deposes the leader (etcd 3.4
             * runs without pre-vote: its term grew while it was alone): a
             * stall of its own, until a leader answers a second later. */
            member_cut_set(f->node, 0);
            fault_end(f);
            struct fault *g = fault_new(F_MEMBER_REJOIN);
            if (!g)
                return;
            g->node = f->node;
            g->helper = helper_wait_leader(ETCD_REJOIN_MS, READY_WAIT_MS);
            g->phase = P_WAITUP;
            g->due = now + (ETCD_REJOIN_MS + READY_WAIT_MS + 2000) * MS;
            say("fault %d begin %s member=%d stall=all", g->id, fnames[g->kind], g->node);
            return;
        }
        default:
            break;
        }
        return fault_end(f);
    case P_DOWN:
        if (fwhere[f->kind] == W_E) {
            for (int i = 0; i < nmembers; i++)
                if ((f->node < 0 || f->node == i) && members[i].alive)
                    return;     /* not reaped yet */
            if (now < f->due)
                return;
            for (int i = 0; i < nmembers; i++)
                if (f->node < 0 || f->node == i)
                    member_start(i);    /* from its data dir */
            f->helper = helper_wait_leader(0, READY_WAIT_MS);
            f->phase = P_WAITUP;
            f->due = now + (READY_WAIT_MS + 2000) * MS;
            return;
        }
        if (nodes[f->node].alive || now < f->due)
            return;     /* not reaped yet */
        if (f->kind == F_PRIMARY_KILL && !f->moved) {
            f->phase = P_WAITMOVE;
            f->due = now + 20000 * MS;
            return;
        }
        node_start(f->node, f->keep);
        f->phase = P_WAITUP;
        f->due = now + READY_WAIT_MS * MS;
        return;
    case P_WAITUP:
        if (fwhere[f->kind] == W_E) {
            if (f->helper && now <= f->due)
                return;
            if (f->helper_rc >= 10)
                say("leader %d", f->helper_rc - 10);
            else
                say("fault %d note %s: no leader within %d ms", f->id, fnames[f->kind],
                    READY_WAIT_MS);
            return fault_end(f);
        }
        if (node_pong(f->node) || now > f->due)
            return fault_end(f);
        return;
    case P_WAITMOVE: {
        static long long last_ask;
        if (now - last_ask < 50 * MS && now < f->due)
            return;
        last_ask = now;
        int p = sentinel_primary();
        if ((p < 0 || p == f->node) && now <= f->due)
            return;
        if (p >= 0 && p != primary) {
            primary = p;
            say("primary %d %d", p, nodes[p].port);
        }
        if (f->kind != F_PRIMARY_KILL)
            return fault_end(f);
        /* the old primary comes back later, empty: the sentinels make it a replica */
        f->moved = 1;
        f->phase = P_DOWN;
        f->due = now + uni(lease / 2, 2 * lease) * MS;
        return;
    }
    default:
        return;
    }
}

static void heal_all(void)
{
    for (int i = 0; i < nworkers; i++)
        if (workers[i].stopped && !workers[i].dead) {
            kill(workers[i].pid, SIGCONT);
            workers[i].stopped = 0;
        }
    for (int m = 0; m < nmachines; m++)
        if (machines[m].cut) {
            char *argv[] = { "ip", "link", "set", machines[m].veth, "up", NULL };
            pid_t p = spawn(NULL, NULL, argv, NULL);
            waitpid(p, NULL, 0);
            machines[m].cut = 0;
        }
    for (int i = 0; i < nnodes; i++)
        if (nodes[i].alive && nodes[i].stopped) {
            kill(nodes[i].pid, SIGCONT);
            nodes[i].stopped = 0;
        }
    for (int i = 0; i < nmembers; i++) {
        if (members[i].alive && members[i].stopped)
            kill(members[i].pid, SIGCONT);
        members[i].stopped = 0;
        if (members[i].cut) {
            pid_t p = spawn(members[i].ns, NULL, member_cut_argv(i, 0), NULL);
            waitpid(p, NULL, 0);
            members[i].cut = 0;
        }
    }
}

/* ---- the run ------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

static void kill_everything(void)
{
    heal_all();
    for (int i = 0; i < nchildren; i++)
        if (children[i].kind != C_NONE && children[i].pid > 0)
            kill(children[i].pid, SIGKILL);
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "soaknemesis: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    if (nlog)
        say("error (see stderr)");
    kill_everything();
    exit(1);
}

static void reap(long long now)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < nchildren; i++) {
            struct child *c = &children[i];
            if (c->kind == C_NONE || c->pid != pid)
                continue;
            enum ckind kind = c->kind;
            int idx = c->idx;
            c->kind = C_NONE;
            if (kind == C_WORKER) {
                struct worker *w = &workers[idx];
                worker_tail(w);
                if (WIFSIGNALED(status))
                    say("died %d signal %d", pid, WTERMSIG(status));
                else
                    say("died %d exit %d", pid, WEXITSTATUS(status));
                w->dead = 1;
                w->stopped = 0;
                if (w->tail_fd >= 0)
                    close(w->tail_fd);
                w->tail_fd = -1;
                if (now < end_ns - 2000 * MS)
                    w->respawn_at = now + uni(0, lease) * MS;
            } else if (kind == C_NODE) {
                if (nodes[idx].pid == pid)
                    node_died(idx);
                say("node %d exited (%s %d)", idx, WIFSIGNALED(status) ? "signal" : "exit",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            } else if (kind == C_MEMBER) {
                int own = members[idx].pid == pid;
                if (own) {
                    members[idx].alive = 0;
                    members[idx].stopped = 0;
                }
                say("member %d exited (%s %d)%s", idx, WIFSIGNALED(status) ? "signal" : "exit",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                    own && !members[idx].killed ? "; note: by itself, not by a fault (see its log)"
                                                : "");
            } else if (kind == C_HELPER) {
                for (int j = 0; j < nfaults; j++)
                    if (faults[j].helper == pid) {
                        faults[j].helper = 0;
                        faults[j].helper_rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
                        if (WIFEXITED(status) && WEXITSTATUS(status) != 0 &&
                            faults[j].phase != P_OFF && faults[j].phase != P_WAITUP)
                            say("fault %d note %s: its command failed", faults[j].id,
                                fnames[faults[j].kind]);
                    }
            } else if (kind == C_SENTINEL || kind == C_FENCE) {
                say("note: %s %d exited", kind == C_FENCE ? "fence" : "sentinel", pid);
            }
            break;
        }
    }
}

static void parse_machines(char *arg)
{
    for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
        if (nmachines == MAX_MACHINES)
            die("too many machines");
        struct machine *m = &machines[nmachines];
        if (sscanf(tok, "%63[^:]:%63[^:]:%31s", m->ns, m->veth, m->host) != 3)
            die("-n wants NS:VETH:HOST,..., not %s", tok);
        nmachines++;
    }
}

static void parse_faults(void)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", faults_arg);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int neg = tok[0] == '-';
        const char *name = tok + neg;
        int found = 0;
        for (int k = 0; k < F_NKINDS; k++)
            if (strcmp(name, "all") == 0 || strcmp(name, fnames[k]) == 0) {
                fenabled[k] = !neg;
                found = 1;
            }
        if (!found)
            die("unknown fault %s", name);
    }
    int here = etcd_mode ? W_E : sentinel_mode ? W_S : W_R;
    for (int k = 0; k < F_NKINDS; k++)
        if (!(fwhere[k] & here))
            fenabled[k] = 0;
    fenabled[F_MEMBER_REJOIN] = 0;
}

static void wait_ready(int with_sentinels)
{
    long long until = now_ns() + READY_WAIT_MS * MS;
    for (int i = 0; i < nnodes; i++)
        while (!node_pong(i)) {
            if (now_ns() > until)
                die("redis node %d did not answer (see %s)", i, nodes[i].log);
            usleep(20000);
        }
    if (!with_sentinels)
        return;
    while (online_replicas(0) < nnodes - 1 || !sentinels_ready()) {
        if (now_ns() > until)
            die("the replicas or the sentinels did not come up (see %s)", dir);
        usleep(50000);
    }
}

/* -E NS:IP,NS:IP,NS:IP: the etcd members' namespaces and addresses. */
static void parse_members(char *arg)
{
    for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
        if (nmembers == NMEMBERS)
            die("-E wants %d members", NMEMBERS);
        struct member *mb = &members[nmembers];
        if (sscanf(tok, "%63[^:]:%31s", mb->ns, mb->ip) != 2)
            die("-E wants NS:IP,..., not %s", tok);
        mb->cport = base_port + 20 + nmembers;
        mb->pport = base_port + 30 + nmembers;
        snprintf(mb->ddir, sizeof mb->ddir, "%s/member%d", dir, nmembers);
        snprintf(mb->log, sizeof mb->log, "%s/member%d.log", dir, nmembers);
        nmembers++;
    }
    if (nmembers != NMEMBERS)
        die("-E wants %d members", NMEMBERS);
}

static void etcd_ready(void)
{
    long long until = now_ns() + READY_WAIT_MS * MS;
    char id[32], lead[32];
    for (;;) {
        int all = 1;
        for (int i = 0; i < nmembers; i++)
            all &= member_status(i, ETCD_STATUS_MS, id, lead, sizeof id) == 0;
        int l = all ? etcd_leader(ETCD_STATUS_MS) : -1;
        if (l >= 0) {
            say("leader %d", l);
            return;
        }
        if (now_ns() > until)
            die("the etcd members elected no leader (see %s/member*.log)", dir);
        usleep(50000);
    }
}

static int usage(void)
{
    fprintf(stderr,
            "usage: soaknemesis -d DIR -n NS:VETH:HOST,... -S SRV_NS -A SRV_IP -P BASE_PORT\n"
            "         -w WORKER -L SHIM -C CONFIG [-s SEED] [-T SECONDS] [-m MODE]\n"
            "         [-k | -E ETCD_NS:IP,ETCD_NS:IP,ETCD_NS:IP]\n"
            "         [-p PROCS_PER_MACHINE] [-t THREADS] [-l LEASE -r RENEW -g MARGIN]\n"
            "         [-D ON_REDIS_DOWN] [-F FAULTS] [-c CONCURRENT] [-X 'KEY=VALUE...'] [-M STALL_MAX_MS]\n");
    return 2;
}

int main(int argc, char **argv)
{
    int ch;
    char *machines_arg = NULL, *members_arg = NULL;
    while ((ch = getopt(argc, argv, "d:n:S:A:P:w:L:C:s:T:m:kE:p:t:l:r:g:D:F:c:X:M:")) != -1) {
        switch (ch) {
        case 'd': dir = optarg; break;
        case 'n': machines_arg = optarg; break;
        case 'S': srv_ns = optarg; break;
        case 'A': srv_ip = optarg; break;
        case 'P': base_port = atoi(optarg); break;
        case 'w': worker_bin = optarg; break;
        case 'L': shim = optarg; break;
        case 'C': config_path = optarg; break;
        case 's': seed = strtoull(optarg, NULL, 10); break;
        case 'T': run_s = atol(optarg); break;
        case 'm': mode = optarg; break;
        case 'k': sentinel_mode = 1; break;
        case 'E': members_arg = optarg; etcd_mode = 1; break;
        case 'p': procs_per = atol(optarg); break;
        case 't': threads_per = atol(optarg); break;
        case 'l': lease = atol(optarg); break;
        case 'r': renew = atol(optarg); break;
        case 'g': margin = atol(optarg); break;
        case 'D': down = optarg; break;
        case 'F': faults_arg = optarg; break;
        case 'c': concurrency = atol(optarg); break;
        case 'X': extra = optarg; break;
        case 'M': stall_max = atol(optarg); break;
        default: return usage();
        }
    }
    if (!dir || !machines_arg || !srv_ns || !srv_ip || !base_port || !worker_bin || !shim ||
        !config_path || run_s < 5 || threads_per < 1 || threads_per > MAX_THREADS ||
        (sentinel_mode && etcd_mode))
        return usage();
    char path[512];
    snprintf(path, sizeof path, "%s/nemesis.log", dir);
    nlog = fopen(path, "a");
    if (!nlog) {
        fprintf(stderr, "soaknemesis: %s: %s\n", path, strerror(errno));
        return 1;
    }
    parse_machines(machines_arg);
    if (members_arg)
        parse_members(members_arg);
    parse_faults();
    rng_state = seed;

    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* the fenced resource, then the servers */
    char fsock[300], flog[300];
    snprintf(fsock, sizeof fsock, "%s/fence.sock", dir);
    snprintf(flog, sizeof flog, "%s/fence.log", dir);
    char *fargv[] = { "soakfence", "-s", fsock, "-o", flog, NULL };
    char fence_bin[600];    /* beside the worker */
    const char *slash = strrchr(worker_bin, '/');
    snprintf(fence_bin, sizeof fence_bin, "%.*s/soakfence",
             slash ? (int)(slash - worker_bin) : 1, slash ? worker_bin : ".");
    fargv[0] = fence_bin;
    child_add(spawn(NULL, NULL, fargv, NULL), C_FENCE, 0);

    nnodes = etcd_mode ? 0 : sentinel_mode ? 3 : 1;
    for (int i = 0; i < nnodes; i++) {
        struct node *n = &nodes[i];
        n->port = base_port + i;
        n->aof = !sentinel_mode;
        snprintf(n->sock, sizeof n->sock, "%s/node%d.sock", dir, i);
        snprintf(n->ddir, sizeof n->ddir, "%s/node%d", dir, i);
        snprintf(n->log, sizeof n->log, "%s/node%d.log", dir, i);
        mkdir(n->ddir, 0755);
        node_start(i, 1);
    }
    wait_ready(0);
    if (sentinel_mode) {
        for (int j = 0; j < NSENTINELS; j++)
            sentinel_start(j);
        wait_ready(1);
    }
    if (etcd_mode) {
        for (int i = 0; i < nmembers; i++) {
            mkdir(members[i].ddir, 0700);   /* etcd wants its data dir private */
            member_start(i);
        }
        etcd_ready();
    }
    for (int t = 0; t < 100 && access(fsock, F_OK) != 0; t++)
        usleep(20000);

    t0_ns = now_ns();
    end_ns = t0_ns + run_s * 1000 * MS;
    long quiet_ms = lease * 2 > 3000 ? lease * 2 : 3000;
    long long faults_until = end_ns - quiet_ms * MS;
    char flist[1024] = "";
    for (int k = 0; k < F_NKINDS; k++)
        if (fenabled[k])
            snprintf(flist + strlen(flist), sizeof flist - strlen(flist), "%s%s",
                     flist[0] ? "," : "", fnames[k]);
    say("config mode=%s seed=%llu run_s=%ld lease_ms=%ld renew_ms=%ld margin_ms=%ld "
        "on_redis_down=%s store=%s sentinel=%d machines=%d procs=%ld threads=%ld t0=%lld "
        "end=%lld stall_max_ms=%ld faults=%s %s", mode, seed, run_s, lease, renew, margin, down,
        etcd_mode ? "etcd" : sentinel_mode ? "sentinel" : "redis", sentinel_mode, nmachines, procs_per, threads_per, t0_ns, end_ns, stall_max,
        flist[0] ? flist : "none", extra);
    if (sentinel_mode)
        say("primary 0 %d", nodes[0].port);
    for (int m = 0; m < nmachines; m++)
        for (int p = 0; p < procs_per; p++)
            worker_spawn(m);

    int kinds[F_NKINDS], nk = 0;
    for (int k = 0; k < F_NKINDS; k++)
        if (fenabled[k])
            kinds[nk++] = k;
    long long next_fault = t0_ns + uni(500, 1500) * MS;
    long long grace_until = end_ns + (3 * lease + 15000) * MS;
    int hung = 0;
    long long primary_asked = 0;
    for (;;) {
        if (interrupted) {
            say("interrupted by signal %d", (int)interrupted);
            kill_everything();
            return 130;
        }
        long long now = now_ns();
        reap(now);
        for (int i = 0; i < nworkers; i++)
            if (!workers[i].dead)
                worker_tail(&workers[i]);
        if (sentinel_mode && now - primary_asked > 500 * MS) {
            /* a long stop of the primary may make the sentinels move it */
            primary_asked = now;
            int p = sentinel_primary();
            if (p >= 0 && p != primary) {
                primary = p;
                say("primary %d %d", p, nodes[p].port);
            }
        }
        for (int i = 0; i < nworkers; i++)
            if (workers[i].dead && workers[i].respawn_at && now >= workers[i].respawn_at) {
                workers[i].respawn_at = 0;
                worker_spawn(workers[i].machine);
            }
        for (int i = 0; i < nfaults; i++)
            if (faults[i].phase != P_OFF) {
                if (now >= faults_until && faults[i].phase == P_ON)
                    faults[i].due = now < faults[i].due ? now : faults[i].due;
                if (now >= faults_until && faults[i].phase == P_ARMED)
                    fault_skip(&faults[i], "the run is ending");
                else
                    fault_step(&faults[i], now);
            }
        if (nk && now >= next_fault && now < faults_until && active_faults(0) < concurrency) {
            int k = kinds[rnd() % (uint64_t)nk];
            if (!flife[k] || active_faults(1) == 0) {
                if (k == F_FAILOVER)
                    failover_start();
                else
                    fault_start((enum fkind)k);
            }
            next_fault = now + uni(300, 2500) * MS;
        }
        if (now > end_ns) {
            int alive = 0;
            for (int i = 0; i < nworkers; i++)
                alive += !workers[i].dead;
            int busy = active_faults(0);
            if (!alive && !busy)
                break;
            if (now > grace_until && !hung) {
                hung = 1;
                for (int i = 0; i < nworkers; i++)
                    if (!workers[i].dead) {
                        say("hang %d", workers[i].pid);
                        kill(workers[i].pid, SIGKILL);
                    }
                for (int i = 0; i < nfaults; i++)
                    if (faults[i].phase != P_OFF)
                        fault_skip(&faults[i], "still on at the end");
            }
        }
        usleep(TICK_US);
    }
    say("end");
    kill_everything();
    return 0;
}
