/* tls (the Redis store's): a connection's TLS session under hiredis, for
 * net (net.c's header says how a TLS connection's bytes move). The
 * session itself, OpenSSL, the certificates' checks, the words of a
 * failure and fork are the shared module's (shim/tls.c); this file only
 * carries them to and from a redisContext: c->obuf out, bytes into
 * c->reader, failures into c->err/errstr as hiredis sets them. net.c
 * calls it; it calls nothing of net.c. */
#include "net.h"
#include "net_impl.h"

#include <errno.h>
#include <hiredis/sds.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tls.h"
#include "util.h"

void dm_net_setup(const struct dm_tls_config *tls)
{
    dm_tls_setup(tls, "redis");
}

/* c->err/errstr as hiredis sets them, for callers that read the context. */
void net_set_ctx_err(redisContext *c, int type, const char *what)
{
    c->err = type;
    snprintf(c->errstr, sizeof c->errstr, "%.*s", (int)sizeof c->errstr - 1, what);
}

/* The session's last failure on c. */
static void ctx_err_of(redisContext *c, const struct dm_net *t)
{
    net_set_ctx_err(c, dm_tls_error(t->s) == DM_TLS_CLOSED ? REDIS_ERR_EOF : REDIS_ERR_IO,
                    dm_tls_errstr(t->s));
}

int tls_usable(redisContext *c)
{
    if (dm_tls_gone()) {
        net_set_ctx_err(c, REDIS_ERR_IO, "OpenSSL was shut down (the program is exiting)");
        return 0;
    }
    return 1;
}

/* dm_wait_fd for a command's write or read: REDIS_OK once the socket is
 * ready, else REDIS_ERR with the timeout or the poll error on c. */
int tls_wait_io(redisContext *c, const struct dm_net *t, short events, long long deadline_ms)
{
    int w = dm_wait_fd(c->fd, events, deadline_ms);
    if (w > 0)
        return REDIS_OK;
    if (w == 0) {
        char m[80];
        snprintf(m, sizeof m, "no reply within %ld ms (TLS)", t->timeout_ms);
        net_set_ctx_err(c, REDIS_ERR_IO, m);
    } else {
        net_set_ctx_err(c, REDIS_ERR_IO, strerror(errno));
    }
    return REDIS_ERR;
}

struct dm_net *dm_net_tls_start(redisContext *c, const char *host, const char *addr,
                                long long deadline_ms, long timeout_ms, char *why, size_t len)
{
    struct dm_net *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(why, len, "TLS to redis at %s: out of memory", addr);
        return NULL;
    }
    t->s = dm_tls_start(c->fd, host, addr, deadline_ms, why, len);
    c->err = 0;
    c->errstr[0] = 0;
    if (!t->s) {
        free(t);
        return NULL;
    }
    t->timeout_ms = timeout_ms;
    return t;
}

void dm_net_set_timeout(redisContext *c, struct dm_net *t, long ms)
{
    if (t) {
        t->timeout_ms = ms;
        return;
    }
    redisSetTimeout(c, dm_ms_timeval(ms));
}

/* Writes all of c->obuf by the deadline. REDIS_OK or REDIS_ERR. */
int tls_flush(redisContext *c, struct dm_net *t, long long deadline_ms)
{
    while (sdslen(c->obuf) > 0) {
        short ev = 0;
        int n = dm_tls_write(t->s, c->obuf, sdslen(c->obuf), &ev);
        if (n > 0) {
            sdsrange(c->obuf, n, -1);
            continue;
        }
        if (n < 0) {
            ctx_err_of(c, t);
            return REDIS_ERR;
        }
        if (tls_wait_io(c, t, ev, deadline_ms) != REDIS_OK)
            return REDIS_ERR;
    }
    return REDIS_OK;
}

/* Reads what the session has now (one read), feeding the reader. 1 bytes
 * fed, 0 nothing yet (*events: what to wait for), -1 on an error or a
 * closed connection. */
int tls_read_once(redisContext *c, struct dm_net *t, short *events)
{
    char buf[DM_NET_READ_CHUNK];
    int n = dm_tls_read(t->s, buf, sizeof buf, events);
    if (n > 0) {
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
            net_set_ctx_err(c, c->reader->err, c->reader->errstr);
            return -1;
        }
        return 1;
    }
    if (n < 0)
        ctx_err_of(c, t);
    return n < 0 ? -1 : 0;
}

int dm_net_buffered(const struct dm_net *t)
{
    return t ? dm_tls_pending(t->s) : 0;
}

int dm_net_tls_failed(const struct dm_net *t)
{
    return t && dm_tls_error(t->s) == DM_TLS_FAILED;
}

const char *dm_net_tls_why(const struct dm_net *t)
{
    return t ? dm_tls_why(t->s) : "";
}

void dm_net_close(redisContext *c, struct dm_net *t)
{
    if (t) {
        dm_tls_free(t->s);
        free(t);
    }
    if (c)
        redisFree(c);
}
