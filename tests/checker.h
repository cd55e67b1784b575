/* checker: the shared world of the tests that check exclusion between real
 * processes (test_faults, test_lifecycle).
 *
 * The exclusion checker is a separate redis-server on a unix socket, so
 * that the faults a test injects (the lock server killed, a "machine" cut
 * off its network) never reach it. Every critical section of a test
 * program reports its entry, its fenced write and its exit to it (see
 * tests/progs/checkclient.h for the keys and scripts); the test reads the
 * counts under its own key prefix, one per test.
 *
 * The "machines" are two network namespaces on a bridge with a private /24,
 * created by th_net_setup and always removed (also those an earlier run
 * left behind when it was killed). */
#ifndef DM_CHECKER_H
#define DM_CHECKER_H

#include <hiredis/hiredis.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/types.h>

#include "harness.h"

struct th_checker {
    struct th_redis server;
    redisContext *c;            /* the test's own connection */
    char sock[128];             /* unix socket the programs report to */
    char prefix[32];            /* key prefix of the current test */
    int seq;
};

/* Starts the checker server on /tmp/dmutex-chk-<pid>.sock (shutting down
 * any checker whose test process is gone) and connects to it. Aborts the
 * test program if it cannot. A th_redis server: a fatal signal after
 * th_group_start kills it with the others. */
void th_checker_start(struct th_checker *k);
/* Stops it and removes its socket. */
void th_checker_stop(struct th_checker *k);

/* How a test program finds the checker: appends "-s SOCK -k PREFIX" to
 * argv at index n (PREFIX NULL: the current test's) and returns the new n.
 * The caller leaves room for the four words. */
int th_checker_argv(const struct th_checker *k, char **argv, int n, const char *prefix);

/* A program that reports to the checker: prog, args (NULL-terminated),
 * then th_checker_argv's "-s SOCK -k PREFIX" (prefix NULL: the current
 * test's), remembered (th_child) with its output to `out`. On the machine
 * `ns` (a name in net->ns, run through "ip netns exec", the environment
 * `env` then set by env(1) at the end of the exec chain so that ip(8)
 * itself does not load the shim), or on this one (ns NULL: net unused, env
 * given to th_child). env: th_shim_env's list, or NULL for none. */
struct th_net;
pid_t th_checker_prog(const struct th_checker *k, const char *prefix, const struct th_net *net,
                      const char *ns, char *const *env, const char *prog,
                      const char *const *args, const char *out);
/* The same with the arguments as a va_list of strings ending with NULL,
 * for a group's own variadic "program ARGS..., NULL" helper. */
pid_t th_checker_progv(const struct th_checker *k, const char *prefix, const struct th_net *net,
                       const char *ns, char *const *env, const char *prog, const char *out,
                       va_list ap);
/* A fresh key prefix ("t1", "t2", ...) for the next test. */
void th_checker_next(struct th_checker *k);

/* A count of lock index `lock` under the current prefix: "overlaps",
 * "sections", "maxin", "rejects", "writes", "unlockerr" (0 when never set). */
long long th_checker_get(struct th_checker *k, int lock, const char *what);

/* A process that died inside its critical section never said it left:
 * removes its ids ("<pid>.<thread>") from every lock's "inside" set of the
 * current prefix, so that the next section is not counted as an overlap. */
void th_checker_forget(struct th_checker *k, pid_t pid);

/* Fails the test when the checker saw overlapping sections on `lock`. */
void th_checker_assert_no_overlap(struct th_checker *k, int lock);

/* ---- network namespaces: two "machines" on a bridge ---------------------- */

struct th_net {
    int up;
    int k;                      /* third octet of our /24 */
    char bridge[16], ns[2][16], veth[2][16];
    char host_ip[24], ip[2][24];
    char ip_cmd[PATH_MAX];      /* ip(8), for "ip netns exec" */
};

/* Runs a shell command (printf format); returns its exit status, -1 if it
 * did not exit. */
int th_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Runs a shell command with its output (what it prints on stdout; add
 * 2>&1 for stderr) into out (len bytes, NUL-terminated); returns its exit
 * status, -1 if it did not exit. */
int th_sh_out(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Creates the bridge (host address host_ip) and two namespaces ns[0..1]
 * with addresses ip[0..1], each behind veth[i] ("ip link set veth[i] down"
 * cuts machine i off). Returns -1 when that is impossible (not root, no
 * ip(8)); the caller skips what needs it. Removed at exit too. */
int th_net_setup(struct th_net *n);
/* Brings both machines' links up again (a test's teardown). */
void th_net_reconnect(struct th_net *n);
/* Removes everything th_net_setup made. Safe to call twice, and from a
 * fatal-signal handler. */
void th_net_down(struct th_net *n);

/* ---- the group fixture of the groups that use both ------------------------ */
/* Group setup: th_group_start(NULL, NULL, alarm_s, ...) whose fatal-signal
 * handler also takes the machines down, then the checker started and the
 * machines set up; without network namespaces prints "<group>: no network
 * namespaces (not root, or ip(8) failed): <without>" and goes on (n->up is
 * 0). */
void th_machines_group_start(struct th_checker *k, struct th_net *n, unsigned alarm_s,
                             const char *group, const char *without);
/* cmocka fixtures of such a group: as its group teardown, th_group_stop,
 * the checker stopped and the machines removed (what
 * th_machines_group_start started); as a test's setup, the checker's next
 * key prefix (th_checker_next). */
int th_machines_group_teardown(void **state);
int th_machines_test_setup(void **state);
#endif
