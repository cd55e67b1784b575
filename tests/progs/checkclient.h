/* checkclient: how a test program reports its critical sections to the
 * exclusion checker (tests/checker.h starts the server; the test reads the
 * counts). Static functions, one copy per program: the programs stay
 * ordinary programs linked with hiredis only.
 *
 * Every critical section reports itself to the checker redis-server (a unix
 * socket) in one Lua call on entry and one on exit, under key prefix P and
 * lock index L:
 *   entry  SADD P:L:inside ID; n = SCARD; n > 1 -> INCR P:L:overlaps;
 *          P:L:maxin = max(n); INCR P:L:sections; HINCRBY P:L:byproc PID 1
 *   write  the guarded "resource": accepted only if the section's fencing
 *          token >= the highest seen (P:L:hi), else INCR P:L:rejects
 *   exit   SREM P:L:inside ID
 * ID is "<pid>.<thread>"; a section whose process dies inside never exits,
 * and the test removes the dead process's IDs itself (th_checker_forget).
 *
 * A failure to reach the checker prints "<program>: checker ..." and exits
 * 3: a test that cannot see its sections must not pass. */
#ifndef DM_CHECKCLIENT_H
#define DM_CHECKCLIENT_H

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHK_EXIT 3

struct chk_keys {
    char inside[128], overlaps[128], maxin[128], sections[128], byproc[128];
    char hi[128], rejects[128], writes[128], unlockerr[128];
};

static const char chk_enter_lua[] =
    "redis.call('sadd', KEYS[1], ARGV[1]) "
    "local n = redis.call('scard', KEYS[1]) "
    "if n > 1 then redis.call('incr', KEYS[2]) end "
    "if n > tonumber(redis.call('get', KEYS[3]) or '0') then redis.call('set', KEYS[3], n) end "
    "redis.call('incr', KEYS[4]) "
    "redis.call('hincrby', KEYS[5], ARGV[2], 1) "
    "return n";
static const char chk_fence_lua[] =
    "local t = tonumber(ARGV[1]) "
    "if t < tonumber(redis.call('get', KEYS[1]) or '0') then "
    "  redis.call('incr', KEYS[2]) return 0 end "
    "redis.call('set', KEYS[1], ARGV[1]) "
    "redis.call('incr', KEYS[3]) "
    "return 1";

/* One line, one write(2). */
static inline void chk_fail(const char *what, const char *why)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "%s: checker %s: %s\n", program_invocation_short_name,
                     what, why);
    if (n > 0) {
        ssize_t w = write(STDOUT_FILENO, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
        (void)w;
    }
    exit(CHK_EXIT);
}

static inline redisContext *chk_connect(const char *sock)
{
    redisContext *c = redisConnectUnix(sock);
    if (!c || c->err)
        chk_fail(sock, c ? c->errstr : "out of memory");
    return c;
}

static inline void chk_keys_make(struct chk_keys *k, const char *prefix, int lock)
{
    snprintf(k->inside, sizeof k->inside, "%s:%d:inside", prefix, lock);
    snprintf(k->overlaps, sizeof k->overlaps, "%s:%d:overlaps", prefix, lock);
    snprintf(k->maxin, sizeof k->maxin, "%s:%d:maxin", prefix, lock);
    snprintf(k->sections, sizeof k->sections, "%s:%d:sections", prefix, lock);
    snprintf(k->byproc, sizeof k->byproc, "%s:%d:byproc", prefix, lock);
    snprintf(k->hi, sizeof k->hi, "%s:%d:hi", prefix, lock);
    snprintf(k->rejects, sizeof k->rejects, "%s:%d:rejects", prefix, lock);
    snprintf(k->writes, sizeof k->writes, "%s:%d:writes", prefix, lock);
    snprintf(k->unlockerr, sizeof k->unlockerr, "%s:%d:unlockerr", prefix, lock);
}

static inline long long chk_eval(redisContext *c, const char *script, int nkeys,
                                 const char **keys, int nargs, const char **args)
{
    const char *argv[16];
    int n = 0;
    char nk[8];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[n++] = "EVAL";
    argv[n++] = script;
    argv[n++] = nk;
    for (int i = 0; i < nkeys; i++)
        argv[n++] = keys[i];
    for (int i = 0; i < nargs; i++)
        argv[n++] = args[i];
    redisReply *r = redisCommandArgv(c, n, argv, NULL);
    if (!r || r->type != REDIS_REPLY_INTEGER)
        chk_fail("reply", r ? (r->type == REDIS_REPLY_ERROR ? r->str : "bad reply") : c->errstr);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Entry of section `id`; returns how many sections are inside now. */
static inline long long chk_enter(redisContext *c, const struct chk_keys *k, const char *id)
{
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    const char *ek[] = { k->inside, k->overlaps, k->maxin, k->sections, k->byproc };
    const char *ea[] = { id, pid };
    return chk_eval(c, chk_enter_lua, 5, ek, 2, ea);
}

/* The fenced write; returns 1 when accepted, 0 when rejected. */
static inline long long chk_fence(redisContext *c, const struct chk_keys *k, uint64_t token)
{
    char tokbuf[24];
    snprintf(tokbuf, sizeof tokbuf, "%llu", (unsigned long long)token);
    const char *fk[] = { k->hi, k->rejects, k->writes };
    const char *fa[] = { tokbuf };
    return chk_eval(c, chk_fence_lua, 3, fk, 1, fa);
}

static inline void chk_leave(redisContext *c, const struct chk_keys *k, const char *id)
{
    freeReplyObject(redisCommand(c, "SREM %s %s", k->inside, id));
}

static inline void chk_count_unlock_error(redisContext *c, const struct chk_keys *k)
{
    freeReplyObject(redisCommand(c, "INCR %s", k->unlockerr));
}

#endif
