/* test_etcd_tls: the etcd store over TLS (shim/etcd/http.c through
 * shim/tls.c) against two real single-member etcds started here on free
 * loopback ports with certificates made by tests/tls-certs.sh: `open`
 * serves https:// only (on 127.0.0.1 and 127.0.0.2, its certificate for
 * 127.0.0.1 and localhost), `mtls` asks for client certificates
 * (--client-cert-auth). What must hold: processes keep a counter exact and
 * every fenced write accepted over https://; each way a certificate can be
 * wrong (CA, name, address, a client certificate missing or foreign) is
 * refused with words naming the cause and the etcd.tls key, never taken
 * for "no connection" (on_store_down = "local" never locks alone for it);
 * etcds:// works for dmutex ls and run; fork children lock over sessions
 * of their own; a member stopped mid-handshake costs a timed lock no more
 * than its deadline; a process exits at once while its watch streams. */
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
#include <unistd.h>
#include <arpa/inet.h>

#include <cmocka.h>

#include "checker.h"
#include "harness.h"

#define WORKER    TH_BUILD "/tests/progs/faultworker"
#define FORKPROG  TH_BUILD "/tests/progs/forkprog"
#define LIFEPROG  TH_BUILD "/tests/progs/lifeprog"
#define DMUTEX    TH_BUILD "/dmutex"
#define SUITE_ALARM_S 240
#define LEASE_MS  2000L
#define RUN_MS    30000L
#define UP_MS     20000L        /* an etcd's start, at most */
#define TIMED_MS  1500          /* the timed lock against a stopped member */

static struct th_checker chk;
static char etcd_path[PATH_MAX], certs[64], data_root[80];
static char shim_path[PATH_MAX], worker_path[PATH_MAX];
static int have_etcd;

struct member {
    pid_t pid;
    int cport, pport;
};
static struct member open_m, mtls_m;

static const char *cert(const char *file)
{
    static char path[8][128];
    static unsigned next;
    char *p = path[next++ % 8];
    snprintf(p, sizeof path[0], "%s/%s", certs, file);
    return p;
}

/* One etcd member of its own cluster: https:// on `hosts` (a
 * comma-separated list of addresses) at m->cport, with `crt`/`key`;
 * client certificates from ca.crt required when `mtls`. */
static void member_start(struct member *m, const char *name, const char *hosts, const char *crt,
                         const char *key, int mtls)
{
    char dir[128], curl[256] = "", adv[64], purl[64], cluster[96], logf[128];
    m->cport = th_free_port("127.0.0.1");
    m->pport = th_free_port("127.0.0.1");
    snprintf(dir, sizeof dir, "%s/%s", data_root, name);
    snprintf(logf, sizeof logf, "%s/%s.log", data_root, name);
    char hs[64];
    snprintf(hs, sizeof hs, "%s", hosts);
    for (char *h = strtok(hs, ","); h; h = strtok(NULL, ",")) {
        size_t o = strlen(curl);
        snprintf(curl + o, sizeof curl - o, "%shttps://%s:%d", o ? "," : "", h, m->cport);
    }
    snprintf(adv, sizeof adv, "https://127.0.0.1:%d", m->cport);
    snprintf(purl, sizeof purl, "http://127.0.0.1:%d", m->pport);
    snprintf(cluster, sizeof cluster, "%s=%s", name, purl);
    char *argv[32] = { etcd_path, "--name", (char *)name, "--data-dir", dir,
                       "--listen-client-urls", curl, "--advertise-client-urls", adv,
                       "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                       "--initial-cluster", cluster, "--cert-file", (char *)cert(crt),
                       "--key-file", (char *)cert(key), "--logger", "zap", "--log-outputs", logf,
                       NULL };
    int n = 23;
    if (mtls) {
        argv[n++] = "--client-cert-auth";
        argv[n++] = "--trusted-ca-file";
        argv[n++] = (char *)cert("ca.crt");
        argv[n] = NULL;
    }
    m->pid = th_spawn(argv, NULL, "/dev/null");
    char out[512];
    long long end = th_now_ms() + UP_MS;
    while (th_now_ms() < end) {
        if (th_sh_out(out, sizeof out, "curl -s -m 1 --cacert %s --cert %s --key %s "
                   "https://127.0.0.1:%d/health", cert("ca.crt"), cert("client.crt"),
                   cert("client.key"), m->cport) == 0 && strstr(out, "\"health\":\"true\""))
            return;
        usleep(100000);
    }
    fail_msg("etcd %s did not become healthy in %d ms (log: %s)", name, (int)UP_MS, logf);
}

static void members_kill_at_exit(void)
{
    if (open_m.pid > 0)
        kill(open_m.pid, SIGKILL);
    if (mtls_m.pid > 0)
        kill(mtls_m.pid, SIGKILL);
}

static int group_setup(void **state)
{
    (void)state;
    th_group_start(NULL, NULL, SUITE_ALARM_S, NULL);
    FILE *f = popen("command -v etcd", "r");
    if (f) {
        if (!fgets(etcd_path, sizeof etcd_path, f))
            etcd_path[0] = '\0';
        etcd_path[strcspn(etcd_path, "\n")] = '\0';
        pclose(f);
    }
    if (!etcd_path[0]) {
        printf("test_etcd_tls: etcd is not installed (tools/deps.sh installs etcd-server)\n");
        return 0;
    }
    th_checker_start(&chk);
    th_built_paths(TH_SHIM, shim_path, WORKER, worker_path, NULL);
    snprintf(certs, sizeof certs, "/tmp/dmutex-etcd-tls.XXXXXX");
    if (!mkdtemp(certs))
        fail_msg("mkdtemp: %s", strerror(errno));
    snprintf(data_root, sizeof data_root, "%s/data", certs);
    mkdir(data_root, 0700);
    if (th_sh("tests/tls-certs.sh %s", certs) != 0)
        fail_msg("tests/tls-certs.sh %s failed", certs);
    atexit(members_kill_at_exit);
    member_start(&open_m, "open", "127.0.0.1,127.0.0.2", "server.crt", "server.key", 0);
    /* etcd 3.4's gateway dials its own gRPC with the server certificate:
     * with client certificates required, it must be a client's too */
    member_start(&mtls_m, "mtls", "127.0.0.1", "both.crt", "both.key", 1);
    have_etcd = 1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    members_kill_at_exit();
    if (open_m.pid > 0)
        waitpid(open_m.pid, NULL, 0);
    if (mtls_m.pid > 0)
        waitpid(mtls_m.pid, NULL, 0);
    open_m.pid = mtls_m.pid = 0;
    if (certs[0])
        th_sh("rm -rf '%s'", certs);
    if (have_etcd)
        th_checker_stop(&chk);
    th_group_stop(NULL, NULL);
    return 0;
}

static int test_setup(void **state)
{
    (void)state;
    if (!have_etcd)
        skip();
    th_checker_next(&chk);
    return 0;
}

/* A config for member m (host: how it is written in the endpoint), its
 * tls group body `tls` (NULL: none), and `more` top-level lines. */
static char *config_for(const struct member *m, const char *host, const char *tls,
                        const char *name, const char *more)
{
    return th_keep_file(th_write_file(".cfg",
        "etcd = { endpoints = ( \"https://%s:%d\" ); connect_timeout_ms = 500; "
        "command_timeout_ms = 500;\n%s%s%s };\n"
        "lease_ms = %ld;\nbatch_ms = 0;\n%s\n"
        "mutexes = ( { symbol = \"fault_lock\"; name = \"%s\"; },\n"
        "            { symbol = \"life_lock\"; name = \"%s\"; required = false; } );\n",
        host, m->cport, tls ? "  tls = { " : "", tls ? tls : "", tls ? " };" : "", LEASE_MS,
        more ? more : "", name, name));
}

static const char *ca_only(const char *ca)
{
    static char b[256];
    snprintf(b, sizeof b, "ca = \"%s\";", cert(ca));
    return b;
}

static const char *client(const char *crt, const char *key)
{
    static char b[512];
    snprintf(b, sizeof b, "ca = \"%s\"; cert = \"%s\"; key = \"%s\";", cert("ca.crt"), cert(crt),
             cert(key));
    return b;
}

/* faultworker ARGS... (NULL-terminated) under the shim with cfg (and the
 * extra environment entries `extra`, NULL: none). */
static pid_t worker_env(const char *cfg, const char *url, const char *const *extra,
                        const char *out, ...)
{
    static struct th_shim_env e;
    char **env = th_shim_env_extra(&e, cfg, url, NULL, extra);
    va_list ap;
    va_start(ap, out);
    pid_t pid = th_checker_progv(&chk, NULL, NULL, NULL, env, worker_path, out, ap);
    va_end(ap);
    return pid;
}
#define worker(cfg, out, ...) worker_env(cfg, NULL, NULL, out, __VA_ARGS__)

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
    printf("measured: %lld sections over TLS, counter exact, 0 overlaps, 0 rejected writes\n",
           sections);
}

/* dmutex ls -c cfg: its exit status, its output in out. */
static int ls_with(const char *cfg, char *out, size_t len)
{
    return th_sh_out(out, len, DMUTEX " ls -c %s 2>&1", cfg);
}

static void assert_refused(const char *cfg, const char *const *words)
{
    char out[4096];
    int rc = ls_with(cfg, out, sizeof out);
    if (rc != 1)
        fail_msg("dmutex ls exit %d, want 1:\n%s", rc, out);
    for (const char *const *w = words; *w; w++)
        if (!strstr(out, *w))
            fail_msg("dmutex ls does not say \"%s\":\n%s", *w, out);
    printf("measured: %s", out);
}

/* The whole of a child's output file (caller frees). */
static char *read_out(const char *path)
{
    FILE *f = fopen(path, "r");
    char *b = calloc(1, 65536);
    if (f && b)
        b[fread(b, 1, 65535, f)] = '\0';
    if (f)
        fclose(f);
    return b;
}

/* ---- tests ---- */

static void test_counter_is_exact_over_https_across_processes(void **s)
{
    (void)s;
    char *cfg = config_for(&open_m, "127.0.0.1", ca_only("ca.crt"), "etls_counter", NULL);
    char *out[3];
    pid_t p[3];
    for (int i = 0; i < 3; i++) {
        out[i] = th_out_file();
        p[i] = worker(cfg, out[i], "loop", "-t", "2", "-d", "2000", "-u", "200", "-c", NULL);
    }
    long long sections = 0;
    for (int i = 0; i < 3; i++) {
        char *text = th_finish(p[i], out[i], 0, RUN_MS);
        sections += th_field_after(text, "done ");
        free(text);
    }
    assert_exclusion(sections);
}

/* https:// without a tls group: the system's CAs, which do not know the
 * test's CA: refused, as a certificate, not as no connection. */
static void test_https_endpoint_alone_trusts_the_system_cas(void **s)
{
    (void)s;
    const char *w[] = { "not signed by a trusted CA", "etcd.tls.ca = the system's CAs", NULL };
    assert_refused(config_for(&open_m, "127.0.0.1", NULL, "etls_sys", NULL), w);
}

static void test_wrong_ca_is_refused_naming_verification_and_never_locks_alone(void **s)
{
    (void)s;
    const char *w[] = { "TLS handshake with etcd at 127.0.0.1:", "not signed by a trusted CA",
                        "etcd.tls.ca", "ca2.crt", NULL };
    char *cfg = config_for(&open_m, "127.0.0.1", ca_only("ca2.crt"), "etls_ca",
                           "on_store_down = \"local\";");
    assert_refused(cfg, w);
    char *out = th_out_file();
    char *t = th_finish(worker(cfg, out, "once", "timed:1500", NULL), out, 0, RUN_MS);
    if (strstr(t, "inside "))
        fail_msg("with a CA that does not sign the member's certificate, a process locked "
                 "alone (on_store_down = \"local\"):\n%s", t);
    th_assert_has(t, "timed:1500 ETIMEDOUT");
    th_assert_has(t, "not signed by a trusted CA");     /* the shim's own log line */
    free(t);
}

static void test_name_or_address_mismatch_is_refused(void **s)
{
    (void)s;
    char tls[300];
    snprintf(tls, sizeof tls, "%s server_name = \"wrong.example\";", ca_only("ca.crt"));
    const char *w[] = { "not for the name", "etcd.tls.server_name", "checked \"wrong.example\"",
                        NULL };
    assert_refused(config_for(&open_m, "127.0.0.1", tls, "etls_name", NULL), w);
    /* the member's certificate is for 127.0.0.1, reached here at 127.0.0.2 */
    const char *w2[] = { "not for the name", "IP address mismatch", "checked \"127.0.0.2\"", NULL };
    assert_refused(config_for(&open_m, "127.0.0.2", ca_only("ca.crt"), "etls_ip", NULL), w2);
}

static void test_client_certificate_works_and_a_missing_or_foreign_one_is_named(void **s)
{
    (void)s;
    char *cfg = config_for(&mtls_m, "127.0.0.1", client("client.crt", "client.key"), "etls_mtls",
                           NULL);
    char *out = th_out_file();
    char *t = th_finish(worker(cfg, out, "once", "lock", NULL), out, 0, RUN_MS);
    th_assert_has(t, "inside ");
    th_assert_has(t, "fenced ok");
    th_assert_has(t, "unlocked 0");
    free(t);
    const char *w[] = { "refused the client certificate", "etcd.tls.cert = none given", NULL };
    assert_refused(config_for(&mtls_m, "127.0.0.1", ca_only("ca.crt"), "etls_mtls", NULL), w);
    const char *w2[] = { "refused the client certificate", "client2.crt", NULL };
    assert_refused(config_for(&mtls_m, "127.0.0.1", client("client2.crt", "client2.key"),
                              "etls_mtls", NULL), w2);
}

/* etcds://: dmutex ls sees a hold made over TLS; dmutex run takes it; a
 * plain etcd:// URL to the TLS port says the member may be https://. */
static void test_etcds_url_works_for_dmutex_ls_and_run(void **s)
{
    (void)s;
    char *cfg = config_for(&open_m, "127.0.0.1", ca_only("ca.crt"), "etls_ls", NULL);
    char *hout = th_out_file(), *go = th_go_file();
    pid_t h = worker(cfg, hout, "once", "lock", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    char out[8192];
    int rc = th_sh_out(out, sizeof out, "DMUTEX_TLS_CA=%s " DMUTEX " ls --json -r etcds://127.0.0.1:%d "
                    "2>&1", cert("ca.crt"), open_m.cport);
    th_touch(go);
    free(th_finish(h, hout, 0, RUN_MS));
    if (rc != 0 || !strstr(out, "{\"name\": \"etls_ls\",") || !strstr(out, "\"state\": \"held\""))
        fail_msg("dmutex ls -r etcds:// (exit %d) does not show the hold:\n%s", rc, out);
    char *plain = th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\n"
        "mutexes = ( { symbol = \"fault_lock\"; name = \"etls_run\"; } );\n", LEASE_MS));
    rc = th_sh_out(out, sizeof out, "DMUTEX_TLS_CA=%s " DMUTEX " run -r etcds://127.0.0.1:%d -c %s -- "
                "%s once lock -s %s -k %s 2>&1", cert("ca.crt"), open_m.cport, plain, worker_path,
                chk.sock, chk.prefix);
    if (rc != 0 || !strstr(out, "inside ") || !strstr(out, "fenced ok"))
        fail_msg("dmutex run -r etcds:// (exit %d) did not lock:\n%s", rc, out);
    /* A connect that timed out on a loaded machine (the member's accept
     * queue) reaches no member and can give no hint: tried again, up to
     * three times; the hint must come once one is reached. */
    for (int i = 0; i < 3; i++) {
        rc = th_sh_out(out, sizeof out, DMUTEX " ls -r etcd://127.0.0.1:%d 2>&1", open_m.cport);
        if (!strstr(out, "connect: Connection timed out"))
            break;
    }
    if (rc != 1 || !strstr(out, "an https:// member?"))
        fail_msg("a plain etcd:// URL to a TLS port (exit %d) does not say so:\n%s", rc, out);
}

/* Forks while threads lock mapped heap mutexes over TLS: each child (no
 * session, no thread of its parent's) locks through a session of its own
 * and exits; none hangs on a lock of OpenSSL held at the fork. */
static void test_fork_children_lock_over_tls_and_never_hang(void **s)
{
    (void)s;
    if (getenv("DM_TEST_PRELOAD"))
        skip();     /* ASan's allocator lock across fork: no finding about the shim */
    char *cfg = th_keep_file(th_write_file(".cfg", "lease_ms = %ld;\nmutexes = (\n"
        "  { symbol = \"fork_lock\"; name = \"etls_fork\"; },\n"
        "  { init_site = \"heap_mutex_new\"; name = \"etls_heap\"; } );\n", LEASE_MS));
    char url[64], ca[200];
    snprintf(url, sizeof url, "etcds://127.0.0.1:%d", open_m.cport);
    snprintf(ca, sizeof ca, "DMUTEX_TLS_CA=%s", cert("ca.crt"));
    const char *extra[] = { ca, NULL };
    static struct th_shim_env e;
    char *argv[] = { FORKPROG, "3", "60", NULL };
    char *out = th_out_file();
    char *text = th_finish(th_child(argv, th_shim_env_extra(&e, cfg, url, NULL, extra), out), out,
                           0, 120000);
    th_assert_has(text, "forks 60 ok");
    free(text);
}

/* A process that exits while a thread waits in lock, its watch streaming
 * over TLS, ends at once, and its place in the queue with it: the next
 * process enters when the holder lets go, not a lease later. */
static void test_exit_while_a_watch_streams_over_tls(void **s)
{
    (void)s;
    const long lease = 20000;
    char *cfg = th_keep_file(th_write_file(".cfg",
        "etcd = { endpoints = ( \"https://127.0.0.1:%d\" ); tls = { ca = \"%s\"; }; };\n"
        "lease_ms = %ld;\nbatch_ms = 0;\n"
        "mutexes = ( { symbol = \"fault_lock\"; name = \"etls_exit\"; required = false; },\n"
        "            { symbol = \"life_lock\"; name = \"etls_exit\"; required = false; } );\n",
        open_m.cport, cert("ca.crt"), lease));
    char *hout = th_out_file(), *go = th_go_file(), *aout = th_out_file(), *goa = th_go_file();
    char *cout = th_out_file();
    pid_t h = worker(cfg, hout, "once", "lock", "-g", go, NULL);
    th_wait_for(hout, "inside ", RUN_MS);
    static struct th_shim_env e;
    const char *args[] = { "life", "-S", "lock", "-E", "exit", "-g", goa, NULL };
    pid_t a = th_checker_prog(&chk, NULL, NULL, NULL, th_shim_env(&e, cfg, NULL, NULL), LIFEPROG,
                              args, aout);
    th_wait_for(aout, "locking", RUN_MS);
    usleep(500000);                     /* queued behind the holder, watching */
    long long t0 = th_now_ms();
    th_touch(goa);
    if (th_wait_end(a, RUN_MS, NULL, NULL) == -1)
        fail_msg("the process that exited while its watch streamed over TLS hung");
    long long exit_ms = th_now_ms() - t0;
    pid_t c = worker(cfg, cout, "once", "lock", NULL);
    usleep(300000);
    long long t1 = th_now_ms();
    th_touch(go);
    char *ct = th_finish(c, cout, 0, RUN_MS);
    long long took = th_now_ms() - t1;
    free(th_finish(h, hout, 0, RUN_MS));
    printf("measured: the waiter exited %lld ms after its go; the next entered %lld ms after "
           "the holder let go (lease %ld ms)\n", exit_ms, took, lease);
    if (exit_ms > 5000)
        fail_msg("the waiter took %lld ms to exit", exit_ms);
    if (took > lease / 2)
        fail_msg("the next process waited %lld ms: the exited waiter's key held the queue\n%s",
                 took, ct);
    free(ct);
}

/* The member SIGSTOPped: the kernel still accepts the TCP connection, the
 * handshake gets no answer. A timed lock returns by its deadline plus
 * about one call's time, never hangs; the member back, locks work again. */
static void test_member_stopped_mid_handshake_costs_a_timed_lock_its_deadline_only(void **s)
{
    (void)s;
    char *cfg = config_for(&open_m, "127.0.0.1", ca_only("ca.crt"), "etls_stop", NULL);
    kill(open_m.pid, SIGSTOP);
    char *out = th_out_file();
    long long t0 = th_now_ms();
    char timed[32];
    snprintf(timed, sizeof timed, "timed:%d", TIMED_MS);
    pid_t w = worker(cfg, out, "once", timed, NULL);
    int st = th_wait_end(w, 10L * TIMED_MS, NULL, NULL);
    long long took = th_now_ms() - t0;
    kill(open_m.pid, SIGCONT);          /* before any failure: the next tests need it */
    char *t = read_out(out);
    if (st == -1)
        fail_msg("a %d ms timed lock against a stopped member hung (killed after %d ms):\n%s",
                 TIMED_MS, 10 * TIMED_MS, t);
    printf("measured: a %d ms timed lock against a stopped TLS member returned after %lld ms "
           "(process start to exit)\n", TIMED_MS, took);
    th_assert_has(t, "ETIMEDOUT");
    if (took > TIMED_MS + 2000)
        fail_msg("the timed lock took %lld ms against a stopped member (deadline %d ms):\n%s",
                 took, TIMED_MS, t);
    free(t);
    out = th_out_file();
    t = th_finish(worker(cfg, out, "once", "lock", NULL), out, 0, RUN_MS);
    th_assert_has(t, "fenced ok");
    free(t);
}

#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, th_test_teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_counter_is_exact_over_https_across_processes),
        T(test_https_endpoint_alone_trusts_the_system_cas),
        T(test_wrong_ca_is_refused_naming_verification_and_never_locks_alone),
        T(test_name_or_address_mismatch_is_refused),
        T(test_client_certificate_works_and_a_missing_or_foreign_one_is_named),
        T(test_etcds_url_works_for_dmutex_ls_and_run),
        T(test_fork_children_lock_over_tls_and_never_hang),
        T(test_exit_while_a_watch_streams_over_tls),
        T(test_member_stopped_mid_handshake_costs_a_timed_lock_its_deadline_only),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
