/* test_etcd: the etcd store (shim/etcd/) against a real 3-member etcd
 * cluster (Debian's etcd-server, started here on free ports with temp data
 * dirs and fast heartbeat/election settings, stopped by pid), with the
 * exclusion checker (tests/checker.h) and, when the machine allows it, the
 * two network-namespace "machines": faultworker processes on both run
 * sections of one mapped mutex. What must hold: no two sections overlap,
 * the counter they increment is exact, every fenced write is accepted
 * (tokens only grow), through a leader killed mid-run, a member (a
 * follower, then the leader) cut off from its peers while the processes
 * still reach it, and a restart of the whole cluster; a holder cut off
 * from every member is stopped by on_lease_lost before another process
 * enters. The third member lives on machine 1 (its cut is iptables
 * there). The life of a process on etcd (issue 27): a timed lock whose
 * deadline passes while it, or its member, is stopped or cut off leaves no
 * key behind, nor does a copy of an enqueue a stopped member serves late;
 * an idle process's lease that lapsed is no lost hold; exec, dlopen and
 * dlclose, pthread_cancel of a waiter; dmutex unlock --force's next waiter. */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <cmocka.h>

#include "checker.h"
#include "harness.h"

#define WORKER   TH_BUILD "/tests/progs/faultworker"
#define RWPROG   TH_BUILD "/tests/progs/rwprog"
#define CONDPROG TH_BUILD "/tests/progs/condprog"
#define FORKPROG TH_BUILD "/tests/progs/forkprog"
#define LIFEPROG TH_BUILD "/tests/progs/lifeprog"
#define PLUGIN   TH_BUILD "/tests/progs/liblifeplug.so"
#define MEMBERS  3
#define LEASE_MS 2000L
#define RUN_MS   30000L

static struct th_checker chk;
static struct th_net net;
static char shim_path[PATH_MAX], worker_path[PATH_MAX], rw_path[PATH_MAX], cond_path[PATH_MAX];
static char life_path[PATH_MAX], plugin_path[PATH_MAX];
static struct th_redis ds;      /* the data server of rwprog */

struct member {
    pid_t pid;
    int cport, pport;
    char ip[24];            /* its address: this machine's, or machine 1's */
    const char *ns;         /* its namespace (NULL: this machine's) */
};
static struct member m[MEMBERS];
static char data_root[64];
static char addr[24] = "127.0.0.1";
static char url[256];           /* etcd://a:p,b:p,c:p */
static int have_etcd;
static char etcd_path[PATH_MAX] = "/usr/bin/etcd";

static void member_start(int i, int fresh)
{
    char name[8], dir[128], curl[64], purl[64], cluster[512] = "", logf[160];
    snprintf(name, sizeof name, "m%d", i);
    snprintf(dir, sizeof dir, "%s/%s", data_root, name);
    snprintf(curl, sizeof curl, "http://%s:%d", m[i].ip, m[i].cport);
    snprintf(purl, sizeof purl, "http://%s:%d", m[i].ip, m[i].pport);
    snprintf(logf, sizeof logf, "%s/%s.log", data_root, name);
    for (int k = 0; k < MEMBERS; k++) {
        char one[96];
        snprintf(one, sizeof one, "%sm%d=http://%s:%d", k ? "," : "", k, m[k].ip, m[k].pport);
        strcat(cluster, one);
    }
    char *argv[] = { net.ip_cmd, "netns", "exec", (char *)m[i].ns, etcd_path, "--name", name, "--data-dir", dir, "--listen-client-urls", curl,
                     "--advertise-client-urls", curl, "--listen-peer-urls", purl,
                     "--initial-advertise-peer-urls", purl, "--initial-cluster", cluster,
                     "--initial-cluster-token", "dmx-test", "--initial-cluster-state",
                     fresh ? "new" : "existing", "--heartbeat-interval", "50",
                     "--election-timeout", "500", "--logger", "zap", "--log-outputs", logf, NULL };
    /* Not th_child: a test's teardown kills its children, and the
     * cluster outlives the tests (the group's teardown and atexit stop it). */
    m[i].pid = th_spawn(m[i].ns ? argv : argv + 4, NULL, "/dev/null");  /* ip netns exec execs etcd */
}

static void member_kill(int i)
{
    if (m[i].pid > 0) {
        kill(m[i].pid, SIGKILL);
        waitpid(m[i].pid, NULL, 0);     /* its ports and data dir free again */
        m[i].pid = 0;
    }
}

/* Member i's own status: its id and the leader's id as it sees them
 * (decimal strings), 0; -1 when it did not answer within 1 s. */
static int member_status(int i, char *id, char *lead, size_t len)
{
    char cmd[256], buf[1024] = "";
    if (m[i].pid <= 0)
        return -1;
    snprintf(cmd, sizeof cmd, "curl -s -m 1 http://%s:%d/v3/maintenance/status -d '{}'",
             m[i].ip, m[i].cport);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    pclose(f);
    char *mid = strstr(buf, "\"member_id\":\""), *ld = strstr(buf, "\"leader\":\"");
    if (!mid)
        return -1;
    snprintf(id, len, "%.*s", (int)strcspn(mid + 13, "\""), mid + 13);
    if (ld)     /* left out when 0: no leader */
        snprintf(lead, len, "%.*s", (int)strcspn(ld + 10, "\""), ld + 10);
    else
        snprintf(lead, len, "0");
    return 0;
}

/* The member that is the leader now (by its own status), or -1. */
static int leader(void)
{
    char id[32], lead[32];
    for (int i = 0; i < MEMBERS; i++)
        if (member_status(i, id, lead, sizeof id) == 0 && strcmp(id, lead) == 0)
            return i;
    return -1;
}

static int wait_leader(long ms)
{
    long long end = th_now_ms() + ms;
    while (th_now_ms() < end) {
        int l = leader();
        if (l >= 0)
            return l;
        usleep(50000);
    }
    return -1;
}

static void cluster_start(int fresh)
{
    for (int i = 0; i < MEMBERS; i++)
        member_start(i, fresh);
    if (wait_leader(20000) < 0)
        fail_msg("the etcd cluster elected no leader in 20 s (logs in %s)", data_root);
}

static void cluster_stop(void)
{
    for (int i = 0; i < MEMBERS; i++)
        member_kill(i);
}

static void cluster_stop_at_exit(void)
{
    for (int i = 0; i < MEMBERS; i++)
        if (m[i].pid > 0)
            kill(m[i].pid, SIGKILL);
}

static int group_setup(void **state)
{
    (void)state;
    th_machines_group_start(&chk, &net, 600, "test_etcd",
                            "the processes run on this machine, the cut-off test is skipped");
    FILE *f = popen("command -v etcd", "r");
    if (f) {
        if (!fgets(etcd_path, sizeof etcd_path, f))
            etcd_path[0] = '\0';
        etcd_path[strcspn(etcd_path, "\n")] = '\0';
        pclose(f);
    }
    if (!etcd_path[0]) {
        printf("test_etcd: etcd is not installed (tools/deps.sh installs etcd-server)\n");
        return 0;
    }
    have_etcd = 1;
    if (net.up)
        snprintf(addr, sizeof addr, "%s", net.host_ip);
    snprintf(data_root, sizeof data_root, "/tmp/dmutex-etcd-%d", (int)getpid());
    mkdir(data_root, 0700);
    size_t o = (size_t)snprintf(url, sizeof url, "etcd://");
    /* The last member lives on machine 1 when there are machines, so
     * that it can be cut off from its peers (iptables there) while the
     * processes still reach it: a minority member that answers. */
    for (int i = 0; i < MEMBERS; i++) {
        int away = net.up && i == MEMBERS - 1;
        snprintf(m[i].ip, sizeof m[i].ip, "%s", away ? net.ip[1] : addr);
        m[i].ns = away ? net.ns[1] : NULL;
        m[i].cport = th_free_port(addr);
        m[i].pport = th_free_port(addr);
        o += (size_t)snprintf(url + o, sizeof url - o, "%s%s:%d", i ? "," : "", m[i].ip,
                              m[i].cport);
    }
    th_built_paths(TH_SHIM, shim_path, WORKER, worker_path, RWPROG, rw_path, CONDPROG, cond_path,
                   LIFEPROG, life_path, PLUGIN, plugin_path, NULL);
    th_redis_start(&ds, addr, NULL);
    atexit(cluster_stop_at_exit);
    cluster_start(1);
    return 0;
}

static int group_teardown(void **state)
{
    cluster_stop();
    if (ds.pid > 0)
        th_redis_stop(&ds);
    if (data_root[0])
        th_sh("rm -rf %s", data_root);
    return th_machines_group_teardown(state);
}

static int test_setup(void **state)
{
    if (!have_etcd)
        skip();
    if (wait_leader(20000) < 0)
        fail_msg("no etcd leader before the test");
    return th_machines_test_setup(state);
}

static int cut_member = -1;     /* the member a test cut off from its peers (peer_cut) */

/* A test's teardown: a member a test stopped (SIGSTOP) runs again, a cut
 * one is mended and a killed one started again, even after a failure
 * (the next test would signal pid 0: this process's group); then the
 * children and files go. */
static void peer_cut(int i, int on);
static int test_teardown(void **state)
{
    for (int i = 0; i < MEMBERS; i++)
        if (m[i].pid > 0)
            kill(m[i].pid, SIGCONT);
        else if (have_etcd)
            member_start(i, 0);
    if (cut_member >= 0)
        peer_cut(cut_member, 0);
    return th_test_teardown(state);
}

static char *config_lease(const char *name, long lease_ms)
{
    return th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\nbatch_ms = 0;\nmutexes = ( { symbol = \"fault_lock\"; name = \"%s\"; } );\n",
        lease_ms, name));
}

static char *config(const char *name)
{
    return config_lease(name, LEASE_MS);
}

static pid_t worker_v(const char *u, const char *cfg, const char *ns, const char *out, va_list ap)
{
    static struct th_shim_env e;
    char **env = cfg ? th_shim_env(&e, cfg, u, getenv("DM_TEST_WLOG")) : NULL;
    return th_checker_progv(&chk, NULL, &net, net.up ? ns : NULL, env, worker_path, out, ap);
}

/* faultworker ARGS... (NULL-terminated) on machine ns (NULL: here);
 * DM_TEST_WLOG=debug gives the workers that DMUTEX_LOG (a failing
 * worker's output is printed). */
static pid_t worker(const char *cfg, const char *ns, const char *out, ...)
{
    va_list ap;
    va_start(ap, out);
    pid_t pid = worker_v(url, cfg, ns, out, ap);
    va_end(ap);
    return pid;
}

/* The same, with the members in the order of url u (url_first's). */
static pid_t worker_url(const char *u, const char *cfg, const char *ns, const char *out, ...)
{
    va_list ap;
    va_start(ap, out);
    pid_t pid = worker_v(u, cfg, ns, out, ap);
    va_end(ap);
    return pid;
}

/* An etcd:// URL of every member with member `first` first (buf: 256 bytes). */
static char *url_first(int first, char *buf)
{
    size_t o = (size_t)snprintf(buf, 256, "etcd://");
    for (int k = 0; k < MEMBERS; k++) {
        int i = (first + k) % MEMBERS;
        o += (size_t)snprintf(buf + o, 256 - o, "%s%s:%d", k ? "," : "", m[i].ip, m[i].cport);
    }
    return buf;
}

/* np loop workers, alternating machines, for ms. */
static void start_loop(const char *cfg, int np, const char *ms, char **out, pid_t *p)
{
    for (int i = 0; i < np; i++) {
        out[i] = th_out_file();
        p[i] = worker(cfg, net.ns[i % 2], out[i], "loop", "-t", "2", "-d", ms, "-u", "200", "-c", NULL);
    }
}

static long long finish_loop(int np, char **out, pid_t *p)
{
    long long sections = 0;
    for (int i = 0; i < np; i++) {
        char *text = th_finish(p[i], out[i], 0, RUN_MS);
        sections += th_field_after(text, "done ");
        free(text);
    }
    return sections;
}

static void assert_exclusion(long long sections)
{
    th_checker_assert_no_overlap(&chk, 0);
    long long seen = th_checker_get(&chk, 0, "sections");
    long long count = th_checker_get(&chk, 0, "counter");
    long long rejects = th_checker_get(&chk, 0, "rejects");
    if (sections <= 0 || seen != sections)
        fail_msg("the workers said %lld sections, the checker saw %lld", sections, seen);
    if (count != sections)
        fail_msg("the counter is %lld after %lld sections: an update was lost", count, sections);
    if (rejects != 0)
        fail_msg("%lld fenced writes were rejected: a token did not grow", rejects);
    printf("measured: %lld sections, counter exact, 0 overlaps, 0 rejected writes\n", sections);
}

static void test_counter_is_exact_and_tokens_grow_across_machines(void **s)
{
    (void)s;
    char *out[4];
    pid_t p[4];
    start_loop(config("etcd_counter"), 4, "3000", out, p);
    assert_exclusion(finish_loop(4, out, p));
}

static void test_leader_killed_mid_run_keeps_exclusion_and_every_process_finishes(void **s)
{
    (void)s;
    char *out[4];
    pid_t p[4];
    /* a lease with room for the election (docs/etcd.md, "Leases and the
     * election"): with 2 s a loaded machine lost a hold to it */
    start_loop(config_lease("etcd_leader", 4000), 4, "6000", out, p);
    usleep(2000000);
    int l = leader();
    if (l < 0)
        fail_msg("no leader to kill");
    long long t0 = th_now_ms();
    member_kill(l);
    int nl = wait_leader(10000);
    printf("measured: member m%d (the leader) killed; m%d leads after %lld ms\n", l, nl,
           th_now_ms() - t0);
    assert_exclusion(finish_loop(4, out, p));
    member_start(l, 0);         /* back, for the next tests */
}

static void test_minority_member_stopped_keeps_exclusion(void **s)
{
    (void)s;
    /* One member stopped (SIGSTOP: it keeps its connections, answers
     * nothing), then let go: the minority that cannot answer. */
    char *out[4];
    pid_t p[4];
    /* a lease with room for a renewal that tries the stopped member first */
    start_loop(config_lease("etcd_minority", 4000), 4, "5000", out, p);
    usleep(1500000);
    int l = leader();
    int victim = (l + 1) % MEMBERS;
    if (m[victim].pid <= 0)
        fail_msg("member m%d is not running", victim);
    kill(m[victim].pid, SIGSTOP);
    usleep(2000000);
    kill(m[victim].pid, SIGCONT);
    assert_exclusion(finish_loop(4, out, p));
}

/* Makes member `to` the leader (the leader's MoveLeader), within 10 s. */
static void move_leader(int to)
{
    char id[32], lead[32], target[32];
    long long end = th_now_ms() + 10000;
    if (member_status(to, target, lead, sizeof target) != 0)
        fail_msg("member m%d does not answer", to);
    while (th_now_ms() < end) {
        int l = leader();
        if (l == to)
            return;
        if (l >= 0 && member_status(l, id, lead, sizeof id) == 0)
            th_sh("curl -s -m 2 http://%s:%d/v3/maintenance/transfer-leadership "
                  "-d '{\"targetID\":\"%s\"}' >/dev/null", m[l].ip, m[l].cport, target);
        usleep(200000);
    }
    fail_msg("member m%d did not become the leader in 10 s", to);
}

/* Cuts member i (on machine 1) off from its peers, or mends the cut:
 * iptables in its namespace drops the Raft traffic (its peer port, and
 * its connections to the others' peer ports), while the processes keep
 * reaching its client port. The rules go with the namespace too. */
static void peer_cut(int i, int on)
{
    const char *op = on ? "-A" : "-D";
    cut_member = on ? i : -1;
    int bad = th_sh("ip netns exec %s iptables -w %s INPUT -p tcp --dport %d -j DROP", m[i].ns,
                    op, m[i].pport) |
              th_sh("ip netns exec %s iptables -w %s OUTPUT -p tcp --sport %d -j DROP", m[i].ns,
                    op, m[i].pport);
    for (int k = 0; k < MEMBERS; k++)
        if (k != i)
            bad |= th_sh("ip netns exec %s iptables -w %s OUTPUT -p tcp -d %s --dport %d -j DROP",
                         m[i].ns, op, m[k].ip, m[k].pport) |
                   th_sh("ip netns exec %s iptables -w %s INPUT -p tcp -s %s --sport %d -j DROP",
                         m[i].ns, op, m[k].ip, m[k].pport);
    if (bad)
        fail_msg("iptables in %s failed (tools/deps.sh installs iptables)", m[i].ns);
}

/* Member m2 (a follower, or the leader) cut off from its peers for
 * CUT_MS while every process still reaches it: the two others go on as
 * the majority; m2 knows no leader after an election timeout, so its
 * watches are cancelled (Grpc-Metadata-hasleader) and its calls fail,
 * and a process asking it turns to another member. Sections go on during
 * the cut; none overlap; every process finishes. */
#define CUT_MS 4000L
static void cut_run(const char *name, int cut_the_leader)
{
    if (!net.up)
        skip();
    int v = MEMBERS - 1;
    move_leader(cut_the_leader ? v : 0);
    char *out[4];
    pid_t p[4];
    /* A lease with room for an election after the cut: the last renewal
     * may be renew_ms old when it comes, and the renewals asked of the
     * majority wait for the new leader (docs/etcd.md, "Leases and the
     * election"). */
    start_loop(config_lease(name, 4000), 4, "7000", out, p);
    usleep(1500000);
    long long before = th_checker_get(&chk, 0, "sections");
    peer_cut(v, 1);
    long long t0 = th_now_ms(), elected = -1;
    char id[32], lead[32];
    while (th_now_ms() < t0 + CUT_MS) {
        if (elected < 0 && cut_the_leader) {
            int l = leader();
            if (l >= 0 && l != v)
                elected = th_now_ms() - t0;
        }
        usleep(100000);
    }
    int alone = member_status(v, id, lead, sizeof id) == 0 && strcmp(lead, "0") == 0;
    long long during = th_checker_get(&chk, 0, "sections") - before;
    peer_cut(v, 0);
    long long sections = finish_loop(4, out, p);
    printf("measured: m%d (%s) cut off from its peers for %ld ms: %s; %lld sections during "
           "the cut\n", v, cut_the_leader ? "the leader" : "a follower", CUT_MS,
           cut_the_leader ? (elected < 0 ? "no new leader seen" : "a new leader") :
           "the majority kept its leader", during);
    if (cut_the_leader)
        printf("measured: the majority elected a new leader %lld ms after the cut\n", elected);
    if (!alone)
        fail_msg("the cut-off member m%d still saw a leader (%s) at the end of the cut: the cut "
                 "did not take", v, lead);
    if (during <= 0)
        fail_msg("no section ran in the %ld ms m%d was cut off: the processes did not turn to the "
                 "majority", CUT_MS, v);
    assert_exclusion(sections);
}

static void test_minority_member_cut_off_from_its_peers_keeps_exclusion_and_progress(void **s)
{
    (void)s;
    cut_run("etcd_cut_follower", 0);
}

static void test_leader_cut_off_from_its_peers_keeps_exclusion_and_progress(void **s)
{
    (void)s;
    cut_run("etcd_cut_leader", 1);
}

/* The token of the first "inside TOKEN" line of a once run. */
static unsigned long long once_token(const char *cfg)
{
    char *out = th_out_file();
    pid_t w = worker(cfg, net.ns[0], out, "once", "lock", NULL);
    char *text = th_finish(w, out, 0, RUN_MS);
    unsigned long long t = (unsigned long long)th_field_after(text, "inside ");
    if (!t)
        fail_msg("no token in:\n%s", text);
    free(text);
    return t;
}

static void test_restart_of_the_whole_cluster_keeps_tokens_growing(void **s)
{
    (void)s;
    char *cfg = config("etcd_restart");
    unsigned long long before = once_token(cfg);
    cluster_stop();
    cluster_start(0);
    unsigned long long after = once_token(cfg);
    printf("measured: token %llu before the restart, %llu after\n", before, after);
    if (after <= before)
        fail_msg("token %llu after the restart is not above %llu before it", after, before);
}

/* The holder's death and the waiter's entry on one clock (the machines
 * share CLOCK_MONOTONIC): the checker's own overlap count would also see
 * the dead holder's section, which never says it left. */
static void test_holder_cut_off_from_every_member_stops_before_another_enters(void **s)
{
    (void)s;
    if (!net.up)
        skip();
    char *cfg = config("etcd_cutoff");
    char *hout = th_out_file(), *go = th_go_file(), *wout = th_out_file();
    pid_t h = worker(cfg, net.ns[0], hout, "once", "lock", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    th_sh("ip link set %s down", net.veth[0]);
    long long cut = th_now_ms();
    pid_t w = worker(cfg, net.ns[1], wout, "once", "lock", NULL);
    long long died = 0;
    int st = th_wait_end(h, RUN_MS, &died, NULL);
    char *wtext = th_finish(w, wout, 0, RUN_MS);
    th_net_reconnect(&net);
    th_touch(go);
    if (!(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT))
        fail_msg("the cut-off holder did not abort (status %d)", st);
    const char *in = strstr(wtext, "inside ");
    long long entered = 0;
    unsigned long long tok;
    if (!in || sscanf(in, "inside %llu %lld", &tok, &entered) != 2)
        fail_msg("the waiter never said it entered:\n%s", wtext);
    if (entered <= died)
        fail_msg("the waiter entered at %lld, before the cut-off holder died at %lld", entered, died);
    printf("measured: the cut-off holder aborted %lld ms after the cut (lease %ld ms); the "
           "waiter entered %lld ms after that\n", died - cut, LEASE_MS, entered - died);
    free(wtext);
}

/* A holder SIGSTOPped past its lease (on_lease_lost = "warn"): etcd's
 * lease runs out, the waiter on the other machine enters with a higher
 * token; the resumed holder is told of the loss, its late write is
 * refused by the fencing token, its unlock says EPERM. No lease can stop
 * a stopped process from running on: the overlap is the checker's one,
 * and it is fenced off. */
static void test_holder_stopped_past_its_lease_is_told_and_fenced_off(void **s)
{
    (void)s;
    char *cfg = th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\nbatch_ms = 0;\non_lease_lost = \"warn\";\n"
        "mutexes = ( { symbol = \"fault_lock\"; name = \"etcd_stopped\"; } );\n", LEASE_MS));
    char *hout = th_out_file(), *go = th_go_file(), *wout = th_out_file();
    pid_t h = worker(cfg, net.ns[0], hout, "once", "lock", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    pid_t w = worker(cfg, net.ns[1], wout, "once", "lock", "-u", "0", NULL);
    usleep(300000);                 /* the waiter queued */
    long long stopped = th_now_ms();
    kill(h, SIGSTOP);
    long long at = th_wait_for(wout, "inside ", RUN_MS);
    char *wt = th_finish(w, wout, 0, RUN_MS);
    th_assert_has(wt, "fenced ok");
    th_touch(go);
    kill(h, SIGCONT);
    char *text = th_finish(h, hout, 0, RUN_MS);
    th_assert_has(text, "lost the lease of lock etcd_stopped");
    th_assert_has(text, "fenced rejected");
    th_assert_has(text, "unlocked EPERM");
    long long ov = th_checker_get(&chk, 0, "overlaps"), rej = th_checker_get(&chk, 0, "rejects");
    printf("measured: holder SIGSTOPped past its lease: the waiter entered %lld ms after the stop "
           "(lease %ld ms, etcd TTL %ld s); %lld overlap, %lld stale write rejected\n",
           at - stopped, LEASE_MS, (LEASE_MS + 999) / 1000, ov, rej);
    assert_int_equal(ov, 1);
    assert_int_equal(rej, 1);
    free(wt);
    free(text);
}

/* `dmutex ls --json -r URL`'s object of lock `name` (its line), or "" */
static void ls_row(const char *name, char *row, size_t len)
{
    char cmd[512], want[300];
    snprintf(cmd, sizeof cmd, TH_BUILD "/dmutex ls --json -r '%s' 2>&1", url);
    snprintf(want, sizeof want, "{\"name\": \"%s\",", name);
    FILE *f = popen(cmd, "r");
    row[0] = '\0';
    char line[1024];
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, want))
            snprintf(row, len, "%s", line);
    if (f)
        pclose(f);
}

static void test_trylock_and_timedlock_on_a_held_lock_fail_and_leave_no_key(void **s)
{
    (void)s;
    char *cfg = config("etcd_try");
    char *hout = th_out_file(), *go = th_go_file();
    pid_t h = worker(cfg, net.ns[0], hout, "once", "lock", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    char *tout = th_out_file(), *dout = th_out_file();
    char *tt = th_finish(worker(cfg, net.ns[1], tout, "once", "try", NULL), tout, 0, RUN_MS);
    th_assert_has(tt, "try EBUSY");
    char *dt = th_finish(worker(cfg, net.ns[1], dout, "once", "timed:400", NULL), dout, 0, RUN_MS);
    th_assert_has(dt, "timed:400 ETIMEDOUT");
    char row[1024];
    ls_row("etcd_try", row, sizeof row);
    /* held, with no waiter left behind by the two that gave up */
    printf("measured: dmutex ls --json while held: %s", row);
    if (!strstr(row, "\"state\": \"held\"") || !strstr(row, "\"waiters\": 0,"))
        fail_msg("dmutex ls after a trylock and a timedlock gave up: \"%s\"", row);
    /* the holder as host:pid program, from its record under the process
     * lease, renewing (etcd's TTLs are whole seconds: within the slack) */
    char host[256] = "", who[300];
    gethostname(host, sizeof host - 1);
    snprintf(who, sizeof who, "\"who\": \"%s:%ld ", host, (long)h);
    if (!strstr(row, who) || !strstr(row, "\"alive\": true"))
        fail_msg("dmutex ls on etcd: no %s...\" or not alive: \"%s\"", who, row);
    th_touch(go);
    free(th_finish(h, hout, 0, RUN_MS));
    ls_row("etcd_try", row, sizeof row);
    if (!strstr(row, "\"state\": \"free\""))
        fail_msg("dmutex ls after the holder's unlock: \"%s\"", row);
    free(tt);
    free(dt);
}

static void test_killed_holder_of_a_robust_mutex_gives_the_next_eownerdead(void **s)
{
    (void)s;
    char *cfg = config("etcd_robust");
    char *hout = th_out_file(), *go = th_go_file(), *wout = th_out_file();
    pid_t h = worker(cfg, net.ns[0], hout, "once", "lock", "-r", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    long long t0 = th_now_ms();
    kill(h, SIGKILL);
    th_wait_end(h, RUN_MS, NULL, NULL);
    th_checker_forget(&chk, h);
    char *wt = th_finish(worker(cfg, net.ns[1], wout, "once", "lock", "-r", NULL), wout, 0, RUN_MS);
    th_assert_has(wt, "ownerdead");
    long long took = th_now_ms() - t0;
    printf("measured: the next holder got EOWNERDEAD %lld ms after the kill (lease %ld ms)\n",
           took, LEASE_MS);
    if (took > 3 * LEASE_MS + 5000)
        fail_msg("the dead holder's lock freed only after %lld ms", took);
    free(wt);
    th_touch(go);
}

/* prog (rwprog, condprog) MODE ARGS... (NULL-terminated) on machine ns
 * (NULL: here) with config text cfg_text, state under the test's prefix. */
static pid_t data_prog(const char *path, const char *cfg_text, const char *ns, const char *out,
                       const char *mode, va_list ap)
{
    char *cfg = th_keep_file(th_write_file(".cfg", "%s", cfg_text));
    static struct th_shim_env e;
    char **env = th_shim_env(&e, cfg, url, NULL);
    const char *args[12] = { mode, ds.addr, ds.port_text, chk.prefix };
    int k = 4;
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && k < 11;)
        args[k++] = a;
    args[k] = NULL;
    if (ns && net.up)
        return th_checker_prog(&chk, NULL, &net, ns, env, path, args, out);
    char *argv[14] = { (char *)path };
    for (int i = 0; i <= k; i++)
        argv[i + 1] = (char *)args[i];
    return th_child(argv, env, out);
}

static pid_t cond(const char *ns, const char *out, const char *mode, ...)
{
    va_list ap;
    va_start(ap, mode);
    pid_t p = data_prog(cond_path, "lease_ms = 2000;\n"
                        "mutexes = ( { symbol = \"q_lock\"; name = \"etcd_q\"; } );\n"
                        "conds = ( { symbol = \"not_empty\"; name = \"etcd_ne\"; },\n"
                        "          { symbol = \"not_full\"; name = \"etcd_nf\"; } );\n",
                        ns, out, mode, ap);
    va_end(ap);
    return p;
}

/* Two producers and two consumers, one of each per machine, on listed
 * conds through etcd watches: every item taken once, nobody waits out
 * condprog's 30 s timeout (it would exit 3). */
static void test_listed_conds_queue_on_two_machines_takes_every_item_once(void **s)
{
    (void)s;
    char *out[4];
    pid_t p[4];
    long long t0 = th_now_ms();
    for (int i = 0; i < 2; i++) {
        out[i] = th_out_file();
        p[i] = cond(net.ns[i], out[i], "consume", "60", "1500", NULL);
    }
    for (int i = 0; i < 2; i++) {
        out[2 + i] = th_out_file();
        p[2 + i] = cond(net.ns[i], out[2 + i], "produce", "30", "3", "1500", NULL);
    }
    long consumed = 0;
    for (int i = 0; i < 4; i++) {
        char *text = th_finish(p[i], out[i], 0, RUN_MS);
        if (strstr(text, "dup "))
            fail_msg("an item was taken twice:\n%s", text);
        if (i < 2)
            consumed += (long)th_field_after(text, "consumed ");
        free(text);
    }
    assert_int_equal(consumed, 60);
    printf("measured: 60 items through a queue of 3 on listed conds, 2 producers and 2 "
           "consumers on two machines: %lld ms\n", th_now_ms() - t0);
}

/* rwprog MODE ARGS... (NULL-terminated) on machine ns (NULL: here), its
 * rwlock routes_lock mapped as etcd_rw, state under the test's prefix. */
static pid_t rw(const char *ns, const char *out, const char *mode, ...)
{
    /* a test's files go with it: one config per call */
    char *cfg = th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\nmutexes = ();\n"
                                           "rwlocks = ( { symbol = \"routes_lock\"; name = \"etcd_rw\"; } );\n",
                                           LEASE_MS));
    static struct th_shim_env e;
    char **env = th_shim_env(&e, cfg, url, NULL);
    const char *args[12] = { mode, ds.addr, ds.port_text, chk.prefix };
    int k = 4;
    va_list ap;
    va_start(ap, mode);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && k < 11;)
        args[k++] = a;
    va_end(ap);
    args[k] = NULL;
    if (ns && net.up)
        return th_checker_prog(&chk, NULL, &net, ns, env, rw_path, args, out);
    char *argv[14] = { rw_path };
    for (int i = 0; i <= k; i++)
        argv[i + 1] = (char *)args[i];
    return th_child(argv, env, out);
}

static void test_rwlock_readers_on_two_machines_share_and_a_writer_waits_for_both(void **s)
{
    (void)s;
    char *a = th_out_file(), *b = th_out_file(), *ga = th_go_file(), *gb = th_go_file();
    pid_t ra = rw(net.ns[0], a, "hold", "rd", ga, NULL);
    th_wait_for(a, "held", RUN_MS);
    pid_t rb = rw(net.ns[1], b, "hold", "rd", gb, NULL);
    th_wait_for(b, "held", RUN_MS);     /* both inside at once: shared */
    char *t = th_out_file();
    char *tt = th_finish(rw(NULL, t, "try", "wr", NULL), t, 0, RUN_MS);
    th_assert_has(tt, "rc EBUSY");
    char *w = th_out_file();
    pid_t wp = rw(NULL, w, "write1", NULL);
    usleep(300000);
    th_touch(ga);
    free(th_finish(ra, a, 0, RUN_MS));
    usleep(300000);
    th_touch(gb);
    free(th_finish(rb, b, 0, RUN_MS));
    char *wtext = th_finish(wp, w, 0, RUN_MS);
    long long waited = th_field_after(wtext, "waited ");
    if (waited < 500)
        fail_msg("the writer waited %lld ms: it got in while a reader held the lock\n%s", waited, wtext);
    printf("measured: the writer waited %lld ms for two readers on two machines\n", waited);
    free(tt);
    free(wtext);
}

static void test_rwlock_mix_on_two_machines_has_no_torn_read(void **s)
{
    (void)s;
    char *o[2];
    pid_t p[2];
    for (int i = 0; i < 2; i++) {
        o[i] = th_out_file();
        p[i] = rw(net.ns[i], o[i], "mix", "20", "2", "20", "500", NULL);
    }
    for (int i = 0; i < 2; i++) {
        char *text = th_finish(p[i], o[i], 0, RUN_MS);
        th_assert_has(text, "torn 0 inwrite 0");
        printf("measured: %s", strstr(text, "torn"));
        free(text);
    }
}

/* A release that cannot reach etcd (every member stopped) is retried by
 * the holder's store thread once they answer again: the next process gets
 * in then, not a lease later. */
static void test_release_while_etcd_is_stopped_is_retried_not_left_to_the_lease(void **s)
{
    (void)s;
    const long lease = 20000;
    char *cfg = config_lease("etcd_stopped_release", lease);
    char *hout = th_out_file(), *go = th_go_file(), *stay = th_go_file(), *wout = th_out_file();
    pid_t h = worker(cfg, net.ns[0], hout, "once", "lock", "-g", go, "-G", stay, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    pid_t w = worker(cfg, net.ns[1], wout, "once", "lock", NULL);
    usleep(500000);                     /* queued behind the holder */
    for (int i = 0; i < MEMBERS; i++)
        kill(m[i].pid, SIGSTOP);
    th_touch(go);                       /* the unlock's release finds nobody */
    th_wait_for(hout, "unlocked", RUN_MS);
    usleep(1500000);
    for (int i = 0; i < MEMBERS; i++)
        kill(m[i].pid, SIGCONT);
    long long cont = th_now_ms();
    char *wt = th_finish(w, wout, 0, RUN_MS);
    long long entered = th_now_ms();
    th_touch(stay);
    char *ht = th_finish(h, hout, 0, RUN_MS);
    printf("measured: the waiter entered %lld ms after etcd answered again (lease %ld ms)\n",
           entered - cont, lease);
    if (entered - cont > lease / 2)
        fail_msg("the waiter entered %lld ms after etcd came back: the release was left to "
                 "the lease\nholder:\n%s", entered - cont, ht);
    free(wt);
    free(ht);
}

/* Runs a shell command, its output (stdout and stderr) into out (len
 * bytes); returns its exit status. */
/* etcd with authentication on (a member of its own on a free port): the
 * lines `dmutex acl` prints make a user that can lock and list, and
 * nothing more is needed; a wrong password is named as such. */
static void test_authenticated_user_made_from_dmutex_acl_locks_and_a_bad_password_is_named(void **s)
{
    (void)s;
    int cp = th_free_port(addr), pp = th_free_port(addr);
    char dir[128], curl[64], purl[64], cluster[96], out[8192];
    snprintf(dir, sizeof dir, "%s/auth", data_root);
    snprintf(curl, sizeof curl, "http://%s:%d", addr, cp);
    snprintf(purl, sizeof purl, "http://%s:%d", addr, pp);
    snprintf(cluster, sizeof cluster, "a=%s", purl);
    char *argv[] = { etcd_path, "--name", "a", "--data-dir", dir, "--listen-client-urls", curl,
                     "--advertise-client-urls", curl, "--listen-peer-urls", purl,
                     "--initial-advertise-peer-urls", purl, "--initial-cluster", cluster,
                     "--logger", "zap", "--log-outputs", "/dev/null", NULL };
    pid_t e = th_spawn(argv, NULL, "/dev/null");
    char ep[64];
    snprintf(ep, sizeof ep, "%s:%d", addr, cp);
    int up = 0;
    for (int i = 0; i < 100 && !up; i++, usleep(100000))
        up = th_sh_out(out, sizeof out, "etcdctl --endpoints=%s endpoint health 2>&1", ep) == 0;
    if (!up || th_sh_out(out, sizeof out, "etcdctl --endpoints=%s user add root "
                      "--new-user-password=rootpw 2>&1 && etcdctl --endpoints=%s auth enable 2>&1",
                      ep, ep) != 0) {
        kill(e, SIGKILL);
        waitpid(e, NULL, 0);
        fail_msg("the etcd with authentication did not start: %s", out);
    }
    char *cfg = th_keep_file(th_write_file(".cfg",
        "etcd = { endpoints = ( \"http://%s\" ); username = \"dmapp\"; password_env = \"DM_ETCD_PW\"; };\n"
        "lease_ms = 2000;\nmutexes = ( { symbol = \"fault_lock\"; name = \"etcd_auth\"; } );\n", ep));
    int acl = th_sh_out(out, sizeof out, "DM_ETCD_PW=s3cret " TH_BUILD "/dmutex acl -c %s --plain-password "
                     "| sed 's|^etcdctl |etcdctl --endpoints=%s --user root:rootpw |' | sh 2>&1", cfg, ep);
    char lock[8192], bad[8192];
    int lr = th_sh_out(lock, sizeof lock, "DM_ETCD_PW=s3cret " TH_BUILD "/dmutex run -c %s -- %s once lock "
                    "-s %s -k %s 2>&1", cfg, worker_path, chk.sock, chk.prefix);
    int br = th_sh_out(bad, sizeof bad, "DM_ETCD_PW=wrong " TH_BUILD "/dmutex ls -c %s 2>&1", cfg);
    kill(e, SIGKILL);
    waitpid(e, NULL, 0);
    if (acl != 0)
        fail_msg("the lines of dmutex acl did not run: %s", out);
    if (lr != 0 || !strstr(lock, "inside ") || !strstr(lock, "fenced ok"))
        fail_msg("the user of dmutex acl's lines could not lock (exit %d):\n%s", lr, lock);
    if (br != 1 || !strstr(bad, "authentication failed") || !strstr(bad, "etcd.username"))
        fail_msg("a wrong password (exit %d) was not named:\n%s", br, bad);
}

/* A process that exits while a thread waits in lock takes its place in
 * the queue with it (its lease revoked at exit): the next process gets the
 * lock when the holder lets go, not a lease later. */
static void test_exit_while_a_thread_waits_in_lock_leaves_no_key_in_the_queue(void **s)
{
    (void)s;
    const long lease = 20000;
    char *fcfg = config_lease("etcd_exit_wait", lease);
    char *lcfg = th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\nbatch_ms = 0;\n"
        "mutexes = ( { symbol = \"life_lock\"; name = \"etcd_exit_wait\"; } );\n", lease));
    char *hout = th_out_file(), *go = th_go_file(), *aout = th_out_file(), *goa = th_go_file();
    char *cout = th_out_file();
    pid_t h = worker(fcfg, net.ns[0], hout, "once", "lock", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    static struct th_shim_env e;
    char **env = th_shim_env(&e, lcfg, url, NULL);
    const char *args[] = { "life", "-S", "lock", "-E", "exit", "-g", goa, NULL };
    pid_t a = th_checker_prog(&chk, NULL, &net, net.up ? net.ns[1] : NULL, env, LIFEPROG, args, aout);
    th_wait_for(aout, "locking", RUN_MS);
    usleep(500000);                     /* queued behind the holder */
    th_touch(goa);
    if (th_wait_end(a, RUN_MS, NULL, NULL) == -1)
        fail_msg("the process that exited while waiting hung");
    pid_t c = worker(fcfg, net.ns[1], cout, "once", "lock", NULL);
    usleep(300000);                     /* queued behind the holder too */
    long long t0 = th_now_ms();
    th_touch(go);
    char *ct = th_finish(c, cout, 0, RUN_MS);
    long long took = th_now_ms() - t0;
    free(th_finish(h, hout, 0, RUN_MS));
    printf("measured: the next process entered %lld ms after the holder let go (lease %ld ms)\n",
           took, lease);
    if (took > lease / 2)
        fail_msg("the next process waited %lld ms: the exited waiter's key held the queue\n%s",
                 took, ct);
    free(ct);
}

/* dmutex check and the start line name the store: etcd, at its member. */
static void test_check_and_the_start_line_name_etcd_not_redis(void **s)
{
    (void)s;
    char *cfg = config("etcd_check"), out[4096];
    int rc = th_sh_out(out, sizeof out, "DMUTEX_REDIS='%s' " TH_BUILD "/dmutex check -c %s %s 2>&1",
                    url, cfg, worker_path);
    if (rc != 0 || !strstr(out, ", etcd at ") || strstr(out, "redis at"))
        fail_msg("dmutex check (exit %d) does not name etcd:\n%s", rc, out);
    rc = th_sh_out(out, sizeof out, "DMUTEX_LOG=info DMUTEX_REDIS='%s' DMUTEX_CONFIG=%s "
                "LD_PRELOAD=%s %s idle 2>&1", url, cfg, shim_path, worker_path);
    if (!strstr(out, "; etcd at "))
        fail_msg("the start line does not name etcd:\n%s", out);
}

/* Forks while threads lock mapped heap mutexes through etcd: every child
 * (no store thread, no connection, no lease of its own yet) locks a mapped
 * mutex through etcd and exits; none hangs. */
static void test_fork_children_lock_through_etcd_and_never_hang(void **s)
{
    (void)s;
    if (getenv("DM_TEST_PRELOAD"))
        skip();     /* ASan's allocator lock across fork: no finding about the shim */
    char *cfg = th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\nmutexes = (\n"
        "  { symbol = \"fork_lock\"; name = \"etcd_fork\"; },\n"
        "  { init_site = \"heap_mutex_new\"; name = \"etcd_heap\"; } );\n", LEASE_MS));
    static struct th_shim_env e;
    char *argv[] = { FORKPROG, "3", "300", NULL };
    char *out = th_out_file();
    char *text = th_finish(th_child(argv, th_shim_env(&e, cfg, url, NULL), out), out, 0, 120000);
    th_assert_has(text, "forks 300 ok");
    free(text);
}

/* ---- the life of a process on etcd (issue 27) ----------------------------- */

/* Waits until `dmutex ls` says lock `name` has n waiters (keys queued
 * behind its holder); returns when (th_now_ms), or -1 after timeout_ms. */
static long long wait_waiters(const char *name, int n, long timeout_ms)
{
    char want[32], row[1024];
    snprintf(want, sizeof want, "\"waiters\": %d,", n);
    long long end = th_now_ms() + timeout_ms;
    for (;;) {
        ls_row(name, row, sizeof row);
        if (strstr(row, want))
            return th_now_ms();
        if (th_now_ms() > end)
            return -1;
        usleep(20000);
    }
}

/* Waits until the file out holds needle; returns when (th_now_ms), or -1
 * after timeout_ms (the caller says what that means). */
static long long seen_within(const char *out, const char *needle, long timeout_ms)
{
    long long end = th_now_ms() + timeout_ms;
    for (;;) {
        char *t = th_read_output(out);
        int got = strstr(t, needle) != NULL;
        free(t);
        if (got)
            return th_now_ms();
        if (th_now_ms() > end)
            return -1;
        usleep(5000);
    }
}

/* A late withdraw. H holds; A's timed lock queues behind it, C's lock
 * behind A. A's deadline passes while A's process is SIGSTOPped
 * (member < 0), or while the member A talks to (a follower, first in A's
 * endpoint list) is SIGSTOPped or, cut, cut off from its peers (the
 * processes still reach it). A's timed lock must say ETIMEDOUT and take
 * its key out of the queue: once H lets go, C gets in at once, not when
 * A's lease ends (A lives on after the timeout, its lease kept: a key
 * left behind would be granted to nobody for as long as A runs). */
#define LATE_LEASE_MS 8000L     /* longer than any stop here: no lease ends */
#define LATE_TIMED_MS "2500"
#define LATE_STOP_MS  3500L     /* A stopped: past its deadline */
static void late_withdraw(const char *name, int member, int cut)
{
    /* A stopped right after it queued cannot time out before C queues;
     * a member is stopped (or cut) once C has queued behind A: room for C
     * to start on a loaded machine before A's deadline. */
    const char *op = member < 0 ? "timed:" LATE_TIMED_MS : "timed:4000";
    if (cut && !net.up)
        skip();
    char *cfg = config_lease(name, LATE_LEASE_MS), aurl[256];
    snprintf(aurl, sizeof aurl, "%s", url);
    if (member >= 0) {
        move_leader(0);         /* the others (and dmutex ls) start at m0, the leader */
        url_first(member, aurl);
    }
    char *hout = th_out_file(), *go = th_go_file(), *aout = th_out_file(), *stay = th_go_file();
    char *cout = th_out_file();
    pid_t h = worker(cfg, net.ns[0], hout, "once", "lock", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    pid_t a = worker_url(aurl, cfg, net.ns[1], aout, "once", op, "-G", stay, NULL);
    if (wait_waiters(name, 1, RUN_MS) < 0)
        fail_msg("A's timed lock did not queue behind the holder");
    long long t_stop = th_now_ms();
    if (member < 0)
        kill(a, SIGSTOP);
    pid_t c = worker(cfg, net.ns[0], cout, "once", "lock", NULL);
    if (wait_waiters(name, 2, RUN_MS) < 0)
        fail_msg("C's lock did not queue behind A");
    if (member >= 0) {
        char *early = th_read_output(aout);
        if (strstr(early, "timed:"))
            fail_msg("A's timed lock returned before its member was %s (C took that long to "
                     "queue):\n%s", cut ? "cut off" : "stopped", early);
        free(early);
        t_stop = th_now_ms();
        if (cut)
            peer_cut(member, 1);
        else
            kill(m[member].pid, SIGSTOP);
    } else {
        long long left = t_stop + LATE_STOP_MS - th_now_ms();
        if (left > 0)
            usleep((useconds_t)left * 1000);
        char *early = th_read_output(aout);
        if (strstr(early, "timed:"))
            fail_msg("A's timed lock returned while A was stopped:\n%s", early);
        free(early);
        kill(a, SIGCONT);
    }
    char done[32];
    snprintf(done, sizeof done, "%s ETIMEDOUT ", op);
    long long t_out = th_wait_for(aout, done, RUN_MS);
    char *at = th_read_output(aout);
    long long took = th_field_after(at, done);
    free(at);
    long long gone = wait_waiters(name, 1, LATE_LEASE_MS / 2);
    if (gone < 0) {
        char row[1024];
        ls_row(name, row, sizeof row);
        fail_msg("A's timed lock said ETIMEDOUT, and %ld ms later its key is still queued: %s",
                 LATE_LEASE_MS / 2, row);
    }
    th_touch(go);
    long long let_go = th_wait_for(hout, "unlocked", RUN_MS);
    long long in = seen_within(cout, "inside ", LATE_LEASE_MS / 2);
    if (in < 0)
        fail_msg("C was not in %ld ms after the holder let go: A's timed-out key held the "
                 "queue (lease %ld ms)", LATE_LEASE_MS / 2, LATE_LEASE_MS);
    if (cut)
        peer_cut(member, 0);
    else if (member >= 0)
        kill(m[member].pid, SIGCONT);
    th_touch(stay);
    char *ct = th_finish(c, cout, 0, RUN_MS);
    th_assert_has(ct, "fenced ok");
    free(th_finish(a, aout, 0, RUN_MS));
    free(th_finish(h, hout, 0, RUN_MS));
    th_checker_assert_no_overlap(&chk, 0);
    printf("measured: %s %s: A's %s lock returned ETIMEDOUT after %lld ms (%lld ms after "
           "the fault); its key gone %lld ms after; C in %lld ms after the holder let go "
           "(lease %ld ms)\n", member >= 0 ? "A's member (a follower, first in its list)" : "A",
           cut ? "cut off from its peers" : "stopped", op, took, t_out - t_stop, gone - t_out,
           in - let_go, LATE_LEASE_MS);
    free(ct);
}

static void test_timedlock_past_its_deadline_while_stopped_takes_its_key_out_of_the_queue(void **s)
{
    (void)s;
    late_withdraw("etcd_late_stop", -1, 0);
}

static void test_timedlock_past_its_deadline_while_its_member_is_stopped_takes_its_key_out(void **s)
{
    (void)s;
    late_withdraw("etcd_late_member", 1, 0);
}

static void test_timedlock_past_its_deadline_while_its_member_is_cut_off_takes_its_key_out(void **s)
{
    (void)s;
    late_withdraw("etcd_late_cut", MEMBERS - 1, 1);     /* the member on machine 1 */
}

/* Late copies of enqueues. Each A locked and unlocked once through m1 (a
 * follower, first in its endpoint list); then m1 is SIGSTOPped and each
 * A's timed lock queues behind H: its request waits unread in stopped m1,
 * and the next member runs it. Each A times out and withdraws. When m1
 * runs again it serves the copies it kept (etcd runs such a request, or
 * not, as its gateway sees the client gone first: about one in two here,
 * hence three As): none may put an A's key back (the As live on, their
 * leases kept: the key would reach the head and hold the lock for
 * nobody). C, queued once m1 ran again, gets in as soon as H lets go,
 * and the lock is free once C is done. */
#define LATE_COPIES 3
static void test_a_late_copy_of_a_timed_out_enqueue_puts_no_key_back_in_the_queue(void **s)
{
    (void)s;
    const char *name = "etcd_late_copy";
    /* renewals far apart: the store's thread leaves m1 alone meanwhile */
    char *cfg = th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\nrenew_ms = 3600;\nbatch_ms = 0;\n"
        "mutexes = ( { symbol = \"fault_lock\"; name = \"%s\"; } );\n", LATE_LEASE_MS, name));
    char aurl[256];
    move_leader(0);
    url_first(1, aurl);
    char *aout[LATE_COPIES], *stay[LATE_COPIES], *stay2 = th_go_file();
    char *hout = th_out_file(), *go = th_go_file(), *cout = th_out_file();
    pid_t a[LATE_COPIES];
    for (int i = 0; i < LATE_COPIES; i++) {
        aout[i] = th_out_file();
        stay[i] = th_go_file();
        a[i] = worker_url(aurl, cfg, net.ns[1], aout[i], "once", "timed:" LATE_TIMED_MS, "-G",
                          stay[i], "-A", "-S", stay2, NULL);
    }
    for (int i = 0; i < LATE_COPIES; i++)
        th_wait_for(aout[i], "unlocked", RUN_MS);
    pid_t h = worker(cfg, net.ns[0], hout, "once", "lock", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    kill(m[1].pid, SIGSTOP);
    for (int i = 0; i < LATE_COPIES; i++)
        th_touch(stay[i]);
    for (int i = 0; i < LATE_COPIES; i++)
        th_wait_for(aout[i], "again timed:" LATE_TIMED_MS " ETIMEDOUT", RUN_MS);
    if (wait_waiters(name, 0, LATE_LEASE_MS / 2) < 0)
        fail_msg("the As' timed locks said ETIMEDOUT, and a key of theirs is still queued");
    kill(m[1].pid, SIGCONT);
    long long cont = th_now_ms();
    usleep(1000000);            /* m1 serves what it kept */
    pid_t c = worker(cfg, net.ns[0], cout, "once", "lock", NULL);
    th_wait_for(cout, "main", RUN_MS);
    th_touch(go);
    long long let_go = th_wait_for(hout, "unlocked", RUN_MS);
    if (seen_within(cout, "inside ", LATE_LEASE_MS / 2) < 0) {
        char row[1024];
        ls_row(name, row, sizeof row);
        fail_msg("C was not in %ld ms after H let go, the As still running: a late copy of a "
                 "timed-out enqueue put an A's key back: %s", LATE_LEASE_MS / 2, row);
    }
    char *ct = th_finish(c, cout, 0, RUN_MS);
    th_assert_has(ct, "fenced ok");
    free(ct);
    char row[1024] = "";
    long long end = th_now_ms() + LATE_LEASE_MS / 2;
    for (;;) {
        ls_row(name, row, sizeof row);
        if (strstr(row, "\"state\": \"free\"") && strstr(row, "\"waiters\": 0,"))
            break;
        if (th_now_ms() > end)
            fail_msg("the lock is not free %ld ms after its last holder left, the As still "
                     "running: a late copy of a timed-out enqueue put an A's key back: %s",
                     LATE_LEASE_MS / 2, row);
        usleep(20000);
    }
    th_touch(stay2);
    for (int i = 0; i < LATE_COPIES; i++)
        free(th_finish(a[i], aout[i], 0, RUN_MS));
    free(th_finish(h, hout, 0, RUN_MS));
    th_checker_assert_no_overlap(&chk, 0);
    printf("measured: m1 ran again %lld ms before H let go; the lock free after C, no key of "
           "the %d As\n", let_go - cont, LATE_COPIES);
}

/* Trylocks whose answers never came: every member SIGSTOPped, each A's
 * trylock (of a free lock) goes unanswered and says EBUSY; its request
 * waits unread in each member. When they run again they serve those
 * copies, the first of which finds the queue empty: none may leave an A
 * a hold (the As live on, their leases kept: nobody else would ever get
 * the lock). B gets in at once. */
static void test_an_unanswered_trylock_served_late_leaves_no_hold(void **s)
{
    (void)s;
    const char *name = "etcd_late_try";
    char *cfg = config_lease(name, LATE_LEASE_MS);
    char *aout[LATE_COPIES], *stay[LATE_COPIES], *stay2 = th_go_file(), *bout = th_out_file();
    pid_t a[LATE_COPIES];
    for (int i = 0; i < LATE_COPIES; i++) {     /* one at a time: each one's first try gets it */
        aout[i] = th_out_file();
        stay[i] = th_go_file();
        a[i] = worker(cfg, net.ns[1], aout[i], "once", "try", "-G", stay[i], "-A", "-S", stay2,
                      NULL);
        th_wait_for(aout[i], "unlocked", RUN_MS);
    }
    for (int i = 0; i < MEMBERS; i++)
        kill(m[i].pid, SIGSTOP);
    for (int i = 0; i < LATE_COPIES; i++)
        th_touch(stay[i]);
    for (int i = 0; i < LATE_COPIES; i++)
        th_wait_for(aout[i], "again try EBUSY", RUN_MS);
    for (int i = 0; i < MEMBERS; i++)
        kill(m[i].pid, SIGCONT);
    long long cont = th_now_ms();
    usleep(1000000);            /* the members serve what they kept */
    pid_t b = worker(cfg, net.ns[0], bout, "once", "lock", NULL);
    long long in = seen_within(bout, "inside ", LATE_LEASE_MS / 2);
    if (in < 0) {
        char row[1024];
        ls_row(name, row, sizeof row);
        fail_msg("B was not in %ld ms: a late copy of an unanswered trylock left an A a hold "
                 "(the As still running): %s", LATE_LEASE_MS / 2, row);
    }
    free(th_finish(b, bout, 0, RUN_MS));
    th_touch(stay2);
    for (int i = 0; i < LATE_COPIES; i++)
        free(th_finish(a[i], aout[i], 0, RUN_MS));
    th_checker_assert_no_overlap(&chk, 0);
    printf("measured: B entered %lld ms after etcd answered again; no hold left by %d "
           "unanswered trylocks\n", in - cont, LATE_COPIES);
}

/* Fails the test when a shim line of `text` warns or errs (what: whose). */
static void assert_no_shim_warning(const char *text, const char *what)
{
    for (const char *l = text; (l = strstr(l, "dmutex[")) != NULL; l++) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        const char *w = strstr(l, "]: warning: "), *x = strstr(l, "]: error: ");
        if ((w && (size_t)(w - l) < n) || (x && (size_t)(x - l) < n))
            fail_msg("%s logged \"%.*s\":\n%s", what, (int)n, l, text);
    }
}

/* Idle past the lease: two processes lock and unlock once, then sit idle
 * longer than lease_ms, one running (its store thread keeps the lease),
 * one SIGSTOPped (etcd's lease lapses: nothing was held under it), while
 * B takes the lock. Then both lock again behind B: each gets in after
 * B, fenced, and neither logs a lost lease or any other warning. */
static void test_idle_past_the_lease_then_lock_again_works_and_logs_no_lost_lease(void **s)
{
    (void)s;
    char *cfg = config("etcd_idle");
    char *o[2], *stay[2], *bout = th_out_file(), *gob = th_go_file();
    pid_t p[2];
    for (int i = 0; i < 2; i++) {
        o[i] = th_out_file();
        stay[i] = th_go_file();
        p[i] = worker(cfg, net.ns[i], o[i], "once", "lock", "-G", stay[i], "-A", NULL);
    }
    for (int i = 0; i < 2; i++)
        th_wait_for(o[i], "unlocked", RUN_MS);
    kill(p[1], SIGSTOP);
    long long idle0 = th_now_ms();
    pid_t b = worker(cfg, net.ns[0], bout, "once", "lock", "-g", gob, NULL);
    th_wait_for(bout, "inside ", RUN_MS);
    /* Past a lease, its TTL and etcd's expiry round (500 ms) */
    long long left = idle0 + LEASE_MS + 1500 - th_now_ms();
    if (left > 0)
        usleep((useconds_t)left * 1000);
    kill(p[1], SIGCONT);
    for (int i = 0; i < 2; i++)
        th_touch(stay[i]);
    if (wait_waiters("etcd_idle", 2, RUN_MS) < 0)
        fail_msg("the two idle processes did not queue behind B");
    th_touch(gob);
    long long out = th_wait_for(bout, "unlocked", RUN_MS);
    for (int i = 0; i < 2; i++) {
        char *t = th_finish(p[i], o[i], 0, RUN_MS);
        th_assert_has(t, "again lock 0 ");
        const char *again = strstr(t, "again lock 0 ");
        if (!strstr(again, "fenced ok"))
            fail_msg("the second section of %s was not fenced ok:\n%s", i ? "the stopped one" :
                     "the idle one", t);
        assert_no_shim_warning(t, i ? "the process stopped past its lease while idle" :
                               "the process idle past its lease");
        free(t);
    }
    free(th_finish(b, bout, 0, RUN_MS));
    th_checker_assert_no_overlap(&chk, 0);
    printf("measured: idle %lld ms (lease %ld ms), one of them stopped; both locked again after B "
           "let go, no warning\n", out - idle0, LEASE_MS);
}

/* lifeprog ARGS... (NULL-terminated) with config cfg, on machine ns. */
static pid_t life(const char *cfg, const char *ns, const char *out, ...)
{
    static struct th_shim_env e;
    char **env = th_shim_env(&e, cfg, url, getenv("DM_TEST_WLOG"));
    va_list ap;
    va_start(ap, out);
    pid_t pid = th_checker_progv(&chk, NULL, &net, net.up ? ns : NULL, env, life_path, out, ap);
    va_end(ap);
    return pid;
}

/* lifeprog's config: life_lock as `name`, the plugin's plug_lock as
 * `pname` (checker lock 1), `extra` in life_lock's entry. */
static char *life_config(const char *name, const char *pname, const char *extra, long lease_ms)
{
    return th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\nbatch_ms = 0;\n"
        "mutexes = ( { symbol = \"life_lock\"; name = \"%s\"; %s },\n"
        "            { symbol = \"plug_lock\"; object = \"liblifeplug.so\"; name = \"%s\"; } );\n",
        lease_ms, name, extra ? extra : "", pname));
}

/* The number after `needle` in the file out (a line seen already). */
static long long num_after(const char *out, const char *needle)
{
    char *t = th_read_output(out);
    long long v = th_field_after(t, needle);
    free(t);
    return v;
}

/* exec with a thread inside (docs/semantics.md: a hold a thread is inside
 * is not released at exec, the lease ends it; the new image holds
 * nothing): B, queued, enters after the exec and once the old image's
 * lease has run out, not before, and not much later. */
static void test_exec_with_a_thread_inside_leaves_the_hold_to_its_lease_then_the_next_enters(void **s)
{
    (void)s;
    char *cfg = life_config("etcd_exec_held", "etcd_exec_plug", "", LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file();
    pid_t a = life(cfg, net.ns[0], aout, "life", "-S", "held", "-E", "exec", "-g", goa, NULL);
    th_wait_for(aout, "inside ", RUN_MS);
    pid_t b = life(cfg, net.ns[1], bout, "hold", NULL);
    if (wait_waiters("etcd_exec_held", 1, RUN_MS) < 0)
        fail_msg("B did not queue behind A");
    th_touch(goa);
    long long execd = th_wait_for(aout, "exec'd", RUN_MS);
    th_checker_forget(&chk, a);         /* T's section ended with the image */
    free(th_finish(a, aout, 0, RUN_MS));
    long long in = seen_within(bout, "inside ", LEASE_MS + 5000);
    if (in < 0)
        fail_msg("B was not in %ld ms after A's exec (lease %ld ms): the old image's hold "
                 "outlived its lease", LEASE_MS + 5000, LEASE_MS);
    free(th_finish(b, bout, 0, RUN_MS));
    th_checker_assert_no_overlap(&chk, 0);
    printf("measured: exec with a thread inside: B entered %lld ms after the new image ran "
           "(lease %ld ms, etcd TTL %ld s)\n", in - execd, LEASE_MS, (LEASE_MS + 999) / 1000);
}

/* exec with a cached hold nobody is inside: the exec gives it back
 * first (docs/semantics.md), so B, queued, enters right after, not a
 * lease later (10 s: a hold left to its lease stands out). */
#define EXEC_LONG_LEASE_MS 10000L
static void test_exec_with_a_cached_hold_gives_it_back_before_the_new_image(void **s)
{
    (void)s;
    char *cfg = life_config("etcd_exec_cached", "etcd_exec_plug", "cache = true;",
                            EXEC_LONG_LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file();
    pid_t a = life(cfg, net.ns[0], aout, "life", "-S", "cached", "-E", "exec", "-g", goa, NULL);
    th_wait_for(aout, "cached", RUN_MS);
    char row[1024];
    ls_row("etcd_exec_cached", row, sizeof row);
    if (!strstr(row, "\"state\": \"held\""))
        fail_msg("A's cached hold is not held in etcd: %s", row);
    th_touch(goa);
    long long execd = th_wait_for(aout, "exec'd", RUN_MS);
    ls_row("etcd_exec_cached", row, sizeof row);
    if (!strstr(row, "\"state\": \"free\""))
        fail_msg("the new image runs, and the old one's cached hold is still in etcd: %s", row);
    free(th_finish(a, aout, 0, RUN_MS));
    pid_t b = life(cfg, net.ns[1], bout, "hold", NULL);
    long long in = seen_within(bout, "inside ", EXEC_LONG_LEASE_MS / 2);
    if (in < 0)
        fail_msg("B was not in %ld ms after A's exec: the cached hold was left to its lease "
                 "(%ld ms)", EXEC_LONG_LEASE_MS / 2, EXEC_LONG_LEASE_MS);
    free(th_finish(b, bout, 0, RUN_MS));
    th_checker_assert_no_overlap(&chk, 0);
    printf("measured: exec with a cached hold: B entered %lld ms after the new image ran "
           "(lease %ld ms)\n", in - execd, EXEC_LONG_LEASE_MS);
}

/* A mapped mutex of a dlopen'ed library (lifeprog dlagain): a section,
 * dlclose while nothing is held (the library unloaded: no key of its lock
 * left, the lock free), dlopen again: it is mapped again, locks through
 * etcd, and excludes B, which gets in right after A's unlock. */
static void test_dlopened_mutex_locks_through_etcd_and_dlclose_leaves_no_key(void **s)
{
    (void)s;
    const char *pname = "etcd_dl_plug";
    char *cfg = life_config("etcd_dl_life", pname, "", EXEC_LONG_LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *goa = th_go_file(), *go2 = th_go_file();
    pid_t a = life(cfg, net.ns[0], aout, "dlagain", "-p", plugin_path, "-g", goa, "-G", go2,
                   NULL);
    th_wait_for(aout, "reloaded", RUN_MS);
    char *text = th_read_output(aout);
    th_assert_has(text, "unloaded 0 gone");
    free(text);
    char row[1024];
    ls_row(pname, row, sizeof row);
    if (!strstr(row, "\"state\": \"free\"") || !strstr(row, "\"waiters\": 0,"))
        fail_msg("after the section and the dlclose, lock %s is not free with no key queued: "
                 "\"%s\"", pname, row);
    th_touch(goa);
    th_wait_for(aout, "inside again", RUN_MS);
    ls_row(pname, row, sizeof row);
    if (!strstr(row, "\"state\": \"held\""))
        fail_msg("after a new dlopen, locking plug_lock took no etcd lock %s: \"%s\"", pname, row);
    pid_t b = life(cfg, net.ns[1], bout, "hold", "-p", plugin_path, NULL);
    if (wait_waiters(pname, 1, RUN_MS) < 0)
        fail_msg("B did not queue behind A's plug_lock");
    th_touch(go2);
    long long out = 0;          /* the second section's unlock */
    for (long long end = th_now_ms() + RUN_MS; !out; usleep(5000)) {
        char *at = th_read_output(aout);
        if (strstr(strstr(at, "inside again"), "unlocked 0 "))
            out = th_field_after(strstr(at, "inside again"), "unlocked 0 ");
        free(at);
        if (!out && th_now_ms() > end)
            fail_msg("A did not unlock the dlopen'ed mutex again");
    }
    long long in = seen_within(bout, "inside ", EXEC_LONG_LEASE_MS / 2);
    if (in < 0)
        fail_msg("B was not in %ld ms after A's unlock of the dlopen'ed mutex",
                 EXEC_LONG_LEASE_MS / 2);
    in = num_after(bout, "inside ");
    if (in < out)
        fail_msg("overlap: B entered lock %s %lld ms before A unlocked it", pname, out - in);
    free(th_finish(a, aout, 0, RUN_MS));
    free(th_finish(b, bout, 0, RUN_MS));
    th_checker_assert_no_overlap(&chk, 1);
    ls_row(pname, row, sizeof row);
    if (!strstr(row, "\"state\": \"free\"") || !strstr(row, "\"waiters\": 0,"))
        fail_msg("lock %s at the end: \"%s\"", pname, row);
    printf("measured: a dlopen'ed mutex on etcd: B entered %lld ms after A's unlock\n", in - out);
}

/* pthread_cancel of T waiting in pthread_mutex_lock behind B, with C
 * queued behind T (docs/design.md, "cancellation": the shim's wait runs
 * with cancellation off, so T's lock completes when B lets go and T is
 * cancelled at its next cancellation point, inside). unlocks: T's
 * cleanup handler unlocks, and C gets in right after it, not a lease
 * later; without (-n) the mutex stays locked in A as in glibc, and A's
 * exit gives the hold back: C gets in right after A is gone. Either way
 * nothing of A is left in the queue, and no section overlaps. */
#define CANCEL_LEASE_MS 10000L
static void cancel_waiter(const char *name, int unlocks)
{
    char *cfg = life_config(name, "etcd_cancel_plug", "", CANCEL_LEASE_MS);
    char *aout = th_out_file(), *bout = th_out_file(), *cout = th_out_file();
    char *goa = th_go_file(), *gob = th_go_file();
    pid_t b = life(cfg, net.ns[1], bout, "hold", "-g", gob, NULL);
    th_wait_for(bout, "inside ", RUN_MS);
    pid_t a = unlocks ? life(cfg, net.ns[0], aout, "life", "-S", "lock", "-E", "cancel", "-g", goa, NULL)
                      : life(cfg, net.ns[0], aout, "life", "-S", "lock", "-E", "cancel", "-n", "-g",
                             goa, NULL);
    if (wait_waiters(name, 1, RUN_MS) < 0)
        fail_msg("A's T did not queue behind B");
    pid_t c = life(cfg, net.ns[1], cout, "hold", NULL);
    if (wait_waiters(name, 2, RUN_MS) < 0)
        fail_msg("C did not queue behind A's T");
    th_touch(goa);
    th_wait_for(aout, "event cancel", RUN_MS);
    usleep(300000);             /* time for a wrong shim to run ahead */
    char *text = th_read_output(aout);
    if (strstr(text, "lock returned"))
        fail_msg("the cancelled lock call returned while B held the lock:\n%s", text);
    free(text);
    th_touch(gob);
    th_wait_for(bout, "unlocked 0 ", RUN_MS);
    long long since;
    if (unlocks) {
        th_wait_for(aout, "cleanup unlocked 0 ", RUN_MS);
        since = num_after(aout, "cleanup unlocked 0 ");
    } else {
        th_wait_for(aout, "cleanup keeps the mutex locked", RUN_MS);
        th_wait_end(a, RUN_MS, NULL, NULL);
        since = th_now_ms();
    }
    long long in = seen_within(cout, "inside ", CANCEL_LEASE_MS / 2);
    if (in < 0)
        fail_msg("C was not in %ld ms after %s (lease %ld ms): the cancelled waiter's hold "
                 "was left to its lease", CANCEL_LEASE_MS / 2,
                 unlocks ? "T's cleanup unlocked" : "A was gone", CANCEL_LEASE_MS);
    in = num_after(cout, "inside ");
    free(th_finish(c, cout, 0, RUN_MS));
    if (unlocks) {
        char *at = th_finish(a, aout, 0, RUN_MS);
        static const char *const steps[] = { "lock returned 0 ", "cleanup inside",
                                             "cleanup unlocked 0 ", "joined", "relocked 0 ",
                                             "reunlocked 0 " };
        for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
            th_assert_has(at, steps[i]);
        free(at);
    } else {
        char *at = th_read_output(aout);
        th_assert_has(at, "lock returned 0 ");
        free(at);
    }
    free(th_finish(b, bout, 0, RUN_MS));
    th_checker_assert_no_overlap(&chk, 0);
    char row[1024];
    ls_row(name, row, sizeof row);
    if (!strstr(row, "\"state\": \"free\"") || !strstr(row, "\"waiters\": 0,"))
        fail_msg("lock %s at the end: \"%s\"", name, row);
    printf("measured: a waiter cancelled (%s): C entered %lld ms %s %s (lease %ld ms)\n",
           unlocks ? "its cleanup unlocks" : "its cleanup keeps the mutex",
           in >= since ? in - since : since - in, in >= since ? "after" : "before",
           unlocks ? "the cleanup's unlock" : "A was seen gone (its exit gave the hold back)",
           CANCEL_LEASE_MS);
}

static void test_cancel_of_a_waiter_completes_its_lock_and_its_cleanup_hands_the_lock_on(void **s)
{
    (void)s;
    cancel_waiter("etcd_cancel", 1);
}

static void test_cancel_of_a_waiter_whose_cleanup_keeps_the_mutex_ends_the_hold_at_exit(void **s)
{
    (void)s;
    cancel_waiter("etcd_cancel_keep", 0);
}

/* dmutex unlock --force of a held lock with a waiter: its line names the
 * waiter the lock goes to and its token, the waiter's own; the waiter
 * gets in; the forced holder (on_lease_lost = "warn") is told. */
static void test_unlock_force_names_the_next_waiter_and_its_token(void **s)
{
    (void)s;
    char *cfg = th_keep_file(th_write_file(".cfg",
        "lease_ms = %ld;\nbatch_ms = 0;\non_lease_lost = \"warn\";\n"
        "mutexes = ( { symbol = \"fault_lock\"; name = \"etcd_force\"; } );\n", LEASE_MS));
    char *hout = th_out_file(), *go = th_go_file(), *wout = th_out_file(), out[4096];
    pid_t h = worker(cfg, net.ns[0], hout, "once", "lock", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    pid_t w = worker(cfg, net.ns[1], wout, "once", "lock", NULL);
    if (wait_waiters("etcd_force", 1, RUN_MS) < 0)
        fail_msg("the waiter did not queue");
    int rc = th_sh_out(out, sizeof out, TH_BUILD "/dmutex unlock -c %s -r '%s' --force etcd_force 2>&1",
                       cfg, url);
    char *wt = th_finish(w, wout, 0, RUN_MS);
    const char *next = strstr(out, "handed to the next waiter ");
    unsigned long long next_tok = 0, in_tok = 0;
    const char *tk = next ? strstr(next, "(token ") : NULL;
    if (rc != 0 || !next || !tk || sscanf(tk, "(token %llu)", &next_tok) != 1)
        fail_msg("dmutex unlock --force (exit %d) did not name the next waiter:\n%s", rc, out);
    in_tok = (unsigned long long)th_field_after(wt, "inside ");
    if (in_tok != next_tok)
        fail_msg("unlock --force named token %llu, the waiter entered with %llu:\n%s\n%s",
                 next_tok, in_tok, out, wt);
    th_assert_has(wt, "fenced ok");
    th_touch(go);
    char *ht = th_finish(h, hout, 0, RUN_MS);
    th_assert_has(ht, "unlocked EPERM");
    printf("measured: %s", out);
    free(wt);
    free(ht);
}

#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, test_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_counter_is_exact_and_tokens_grow_across_machines),
        T(test_leader_killed_mid_run_keeps_exclusion_and_every_process_finishes),
        T(test_minority_member_stopped_keeps_exclusion),
        T(test_minority_member_cut_off_from_its_peers_keeps_exclusion_and_progress),
        T(test_leader_cut_off_from_its_peers_keeps_exclusion_and_progress),
        T(test_restart_of_the_whole_cluster_keeps_tokens_growing),
        T(test_holder_cut_off_from_every_member_stops_before_another_enters),
        T(test_holder_stopped_past_its_lease_is_told_and_fenced_off),
        T(test_trylock_and_timedlock_on_a_held_lock_fail_and_leave_no_key),
        T(test_killed_holder_of_a_robust_mutex_gives_the_next_eownerdead),
        T(test_rwlock_readers_on_two_machines_share_and_a_writer_waits_for_both),
        T(test_rwlock_mix_on_two_machines_has_no_torn_read),
        T(test_listed_conds_queue_on_two_machines_takes_every_item_once),
        T(test_release_while_etcd_is_stopped_is_retried_not_left_to_the_lease),
        T(test_authenticated_user_made_from_dmutex_acl_locks_and_a_bad_password_is_named),
        T(test_fork_children_lock_through_etcd_and_never_hang),
        T(test_check_and_the_start_line_name_etcd_not_redis),
        T(test_exit_while_a_thread_waits_in_lock_leaves_no_key_in_the_queue),
        T(test_timedlock_past_its_deadline_while_stopped_takes_its_key_out_of_the_queue),
        T(test_timedlock_past_its_deadline_while_its_member_is_stopped_takes_its_key_out),
        T(test_timedlock_past_its_deadline_while_its_member_is_cut_off_takes_its_key_out),
        T(test_a_late_copy_of_a_timed_out_enqueue_puts_no_key_back_in_the_queue),
        T(test_an_unanswered_trylock_served_late_leaves_no_hold),
        T(test_idle_past_the_lease_then_lock_again_works_and_logs_no_lost_lease),
        T(test_exec_with_a_thread_inside_leaves_the_hold_to_its_lease_then_the_next_enters),
        T(test_exec_with_a_cached_hold_gives_it_back_before_the_new_image),
        T(test_dlopened_mutex_locks_through_etcd_and_dlclose_leaves_no_key),
        T(test_cancel_of_a_waiter_completes_its_lock_and_its_cleanup_hands_the_lock_on),
        T(test_cancel_of_a_waiter_whose_cleanup_keeps_the_mutex_ends_the_hold_at_exit),
        T(test_unlock_force_names_the_next_waiter_and_its_token),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
