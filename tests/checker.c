/* checker: the exclusion checker server and the two network "machines".
 * See checker.h. */
#include "checker.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#define NET_PREFIX "10.231"     /* our /24 is NET_PREFIX.K.0/24, K picked free */
/* Held from the choice of K until the bridge has its address: groups that
 * run at once (tests/run.sh), or test runs of other trees, never take the
 * same /24. One file for the machine, as demo/run.sh has its own. */
#define NET_LOCK   "/run/lock/dmutex-test-net.lock"

int th_sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int th_sh_out(char *out, size_t len, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *f = popen(cmd, "r");
    size_t n = f ? fread(out, 1, len - 1, f) : 0;
    out[n] = '\0';
    int st = f ? pclose(f) : -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- the checker --------------------------------------------------------- */

/* A checker server left by an earlier run that was killed outright (its
 * pid, in the socket's name, is gone): shut it down. The old name
 * (dmutex-faults-) is swept too. */
static void chk_sweep_stale(void)
{
    th_sh("for s in /tmp/dmutex-chk-*.sock /tmp/dmutex-faults-*.sock; do [ -S \"$s\" ] || continue;"
          "  p=${s##*-}; p=${p%%.sock};"
          "  [ -d /proc/$p ] || { redis-cli -s \"$s\" shutdown nosave >/dev/null 2>&1; rm -f \"$s\"; };"
          " done");
}

void th_checker_start(struct th_checker *k)
{
    memset(k, 0, sizeof *k);
    chk_sweep_stale();
    snprintf(k->sock, sizeof k->sock, "/tmp/dmutex-chk-%d.sock", (int)getpid());
    const char *extra[] = { "--unixsocket", k->sock, "--unixsocketperm", "700", NULL };
    th_redis_start(&k->server, NULL, extra);
    k->c = th_redis_connect(&k->server);
}

int th_checker_argv(const struct th_checker *k, char **argv, int n, const char *prefix)
{
    argv[n++] = "-s";
    argv[n++] = (char *)k->sock;
    argv[n++] = "-k";
    argv[n++] = (char *)(prefix ? prefix : k->prefix);
    return n;
}

#define PROG_ARGV_MAX 64

pid_t th_checker_prog(const struct th_checker *k, const char *prefix, const struct th_net *net,
                      const char *ns, char *const *env, const char *prog,
                      const char *const *args, const char *out)
{
    char *argv[PROG_ARGV_MAX];
    int n = 0;
    const int room = PROG_ARGV_MAX - 5;     /* the checker's four words and NULL */
    if (ns) {
        argv[n++] = (char *)net->ip_cmd;
        argv[n++] = "netns";
        argv[n++] = "exec";
        argv[n++] = (char *)ns;
        argv[n++] = "/usr/bin/env";
        for (; env && *env && n < room; env++)
            argv[n++] = *env;
        env = NULL;
    }
    argv[n++] = (char *)prog;
    for (; args && *args && n < room; args++)
        argv[n++] = (char *)*args;
    if (args && *args)
        fail_msg("%s: more than %d arguments", prog, room);
    n = th_checker_argv(k, argv, n, prefix);
    argv[n] = NULL;
    return th_child(argv, env, out);
}

pid_t th_checker_progv(const struct th_checker *k, const char *prefix, const struct th_net *net,
                       const char *ns, char *const *env, const char *prog, const char *out,
                       va_list ap)
{
    const char *args[PROG_ARGV_MAX];
    int n = 0;
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < PROG_ARGV_MAX - 1)
        args[n++] = a;
    if (a)
        fail_msg("%s: more than %d arguments", prog, PROG_ARGV_MAX - 1);
    args[n] = NULL;
    return th_checker_prog(k, prefix, net, ns, env, prog, args, out);
}

void th_checker_stop(struct th_checker *k)
{
    if (k->c)
        redisFree(k->c);
    k->c = NULL;
    th_redis_stop(&k->server);
    if (k->sock[0])
        unlink(k->sock);
}

void th_checker_next(struct th_checker *k)
{
    snprintf(k->prefix, sizeof k->prefix, "t%d", ++k->seq);
}

long long th_checker_get(struct th_checker *k, int lock, const char *what)
{
    return th_cmd_int(k->c, "GET %s:%d:%s", k->prefix, lock, what);
}

void th_checker_forget(struct th_checker *k, pid_t pid)
{
    char p[24];
    int n = snprintf(p, sizeof p, "%d.", (int)pid);
    redisReply *sets = th_cmd(k->c, "KEYS %s:*:inside", k->prefix);
    for (size_t s = 0; sets->type == REDIS_REPLY_ARRAY && s < sets->elements; s++) {
        const char *key = sets->element[s]->str;
        redisReply *r = th_cmd(k->c, "SMEMBERS %s", key);
        for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
            if (strncmp(r->element[i]->str, p, (size_t)n) == 0)
                freeReplyObject(th_cmd(k->c, "SREM %s %s", key, r->element[i]->str));
        freeReplyObject(r);
    }
    freeReplyObject(sets);
}

void th_checker_assert_no_overlap(struct th_checker *k, int lock)
{
    long long ov = th_checker_get(k, lock, "overlaps");
    if (ov != 0)
        fail_msg("%lld overlapping critical sections on lock %d", ov, lock);
}

/* ---- network namespaces -------------------------------------------------- */

static struct th_net *at_exit_net;

void th_net_down(struct th_net *n)
{
    if (!n || !n->bridge[0])
        return;
    for (int i = 0; i < 2; i++) {
        th_sh("ip link del %s 2>/dev/null", n->veth[i]);
        th_sh("ip netns del %s 2>/dev/null", n->ns[i]);
    }
    th_sh("ip link del %s 2>/dev/null", n->bridge);
    n->up = 0;
}

static void net_down_at_exit(void)
{
    th_net_down(at_exit_net);
}

/* Namespaces and links left by an earlier run that died without cleaning
 * up (its pid is in their names). */
static void net_sweep_stale(void)
{
    th_sh("for n in $(ip netns list 2>/dev/null | sed -n 's/^\\(dmf[0-9]*[ab]\\).*/\\1/p'); do"
          "  p=${n#dmf}; p=${p%%[ab]};"
          "  [ -d /proc/$p ] || { ip netns del $n; ip link del dmfv$p${n#dmf$p} 2>/dev/null;"
          "                       ip link del dmfbr$p 2>/dev/null; }; done");
}

int th_net_setup(struct th_net *n)
{
    memset(n, 0, sizeof *n);
    if (access("/usr/sbin/ip", X_OK) == 0)
        snprintf(n->ip_cmd, sizeof n->ip_cmd, "/usr/sbin/ip");
    else if (access("/sbin/ip", X_OK) == 0)
        snprintf(n->ip_cmd, sizeof n->ip_cmd, "/sbin/ip");
    if (geteuid() != 0 || !n->ip_cmd[0])
        return -1;
    net_sweep_stale();
    int pid = (int)getpid();
    snprintf(n->bridge, sizeof n->bridge, "dmfbr%d", pid);
    int lock = open(NET_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock >= 0)
        flock(lock, LOCK_EX);   /* without the file: as before, unlocked */
    for (int k = 20 + pid % 200, tries = 0; tries < 200; tries++, k = 20 + (k - 19) % 200) {
        if (th_sh("ip -4 addr show | grep -q ' %s\\.%d\\.'", NET_PREFIX, k) != 0 &&
            th_sh("ip -4 route show | grep -q '^%s\\.%d\\.'", NET_PREFIX, k) != 0) {
            n->k = k;
            break;
        }
    }
    if (!n->k) {
        if (lock >= 0)
            close(lock);
        return -1;
    }
    if (!at_exit_net) {
        at_exit_net = n;
        atexit(net_down_at_exit);
    }
    snprintf(n->host_ip, sizeof n->host_ip, "%s.%d.1", NET_PREFIX, n->k);
    int made = th_sh("ip link add %s type bridge && ip addr add %s/24 dev %s && ip link set %s up",
                     n->bridge, n->host_ip, n->bridge, n->bridge);
    if (lock >= 0)
        close(lock);
    if (made != 0)
        goto fail;
    for (int i = 0; i < 2; i++) {
        char c = (char)('a' + i);
        snprintf(n->ns[i], sizeof n->ns[i], "dmf%d%c", pid, c);
        snprintf(n->veth[i], sizeof n->veth[i], "dmfv%d%c", pid, c);
        snprintf(n->ip[i], sizeof n->ip[i], "%s.%d.%d", NET_PREFIX, n->k, 2 + i);
        if (th_sh("ip netns add %s && ip link add %s type veth peer name %sp &&"
                  " ip link set %sp netns %s && ip -n %s link set %sp name eth0 &&"
                  " ip -n %s addr add %s/24 dev eth0 && ip -n %s link set eth0 up &&"
                  " ip -n %s link set lo up && ip link set %s master %s && ip link set %s up",
                  n->ns[i], n->veth[i], n->veth[i], n->veth[i], n->ns[i], n->ns[i],
                  n->veth[i], n->ns[i], n->ip[i], n->ns[i], n->ns[i], n->veth[i],
                  n->bridge, n->veth[i]) != 0)
            goto fail;
    }
    n->up = 1;
    return 0;
fail:
    th_net_down(n);
    return -1;
}

void th_net_reconnect(struct th_net *n)
{
    if (n->up)
        for (int i = 0; i < 2; i++)
            th_sh("ip link set %s up", n->veth[i]);
}

/* ---- the group fixture --------------------------------------------------- */

static struct th_net *fatal_net;
static struct th_checker *group_chk;

/* A fatal signal: the harness kills children and servers; the machines go too. */
static void machines_down_now(void)
{
    th_net_down(fatal_net);
}

void th_machines_group_start(struct th_checker *k, struct th_net *n, unsigned alarm_s,
                             const char *group, const char *without)
{
    fatal_net = n;
    group_chk = k;
    th_group_start(NULL, NULL, alarm_s, machines_down_now);
    th_checker_start(k);
    if (th_net_setup(n) != 0)
        printf("%s: no network namespaces (not root, or ip(8) failed): %s\n", group, without);
}

int th_machines_group_teardown(void **state)
{
    (void)state;
    th_group_stop(NULL, NULL);
    th_checker_stop(group_chk);
    th_net_down(fatal_net);
    return 0;
}

int th_machines_test_setup(void **state)
{
    (void)state;
    th_checker_next(group_chk);
    return 0;
}
