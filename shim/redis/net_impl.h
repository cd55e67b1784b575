/* net_impl: what net.c and tls.c share (net.c moves a connection's
 * bytes and calls tls.c for a TLS session, which adapts shim/tls.c's;
 * tls.c calls nothing of net.c).
 * Not for other modules: they see net.h. */
#ifndef DM_NET_IMPL_H
#define DM_NET_IMPL_H

#include <hiredis/hiredis.h>

#include "net.h"

/* What one read takes from the socket (or the TLS session) into the
 * reader: on the caller's stack, which may be a small one (a program's
 * thread of PTHREAD_STACK_MIN: docs/semantics.md). A lock call's reply is
 * a few dozen bytes; a longer one (CLUSTER SLOTS, a tool's listing) takes
 * more reads, each at once (the socket, or the session's buffered record,
 * has the rest). */
#define DM_NET_READ_CHUNK 1024

struct dm_tls;

/* A TLS connection: the shared module's session (shim/tls.h) and the
 * time one reply may take. */
struct dm_net {
    struct dm_tls *s;
    long timeout_ms;                /* one reply */
};

/* c->err/errstr as hiredis sets them, for callers that read the context. */
void net_set_ctx_err(redisContext *c, int type, const char *what);

/* A TLS session's I/O for net.c's requests. tls_usable: 0 (c->err set)
 * once OpenSSL was shut down (the program is exiting). tls_wait_io:
 * dm_wait_fd for a command, REDIS_OK or REDIS_ERR with the cause on c.
 * tls_flush: c->obuf out before the deadline. tls_read_once: one read
 * into the reader, 1 bytes came, 0 wait for *events, -1 failed. */
int tls_usable(redisContext *c);
int tls_wait_io(redisContext *c, const struct dm_net *t, short events, long long deadline_ms);
int tls_flush(redisContext *c, struct dm_net *t, long long deadline_ms);
int tls_read_once(redisContext *c, struct dm_net *t, short *events);

#endif
