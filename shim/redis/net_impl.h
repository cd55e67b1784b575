/* net_impl: what net.c and tls.c share (net.c moves a connection's
 * bytes and calls tls.c for a TLS session; tls.c calls nothing of net.c).
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
#define DM_NET_WHY_MAX    400

struct dm_net {
    struct ssl_st *ssl;             /* OpenSSL's SSL */
    long timeout_ms;                /* one reply */
    int failed;                     /* the last failure was a TLS one: why says it */
    char why[DM_NET_WHY_MAX];
    const char *addr;               /* static: redis's address text */
    char name[256];                 /* the name the certificate must be for */
};

/* c->err/errstr as hiredis sets them, for callers that read the context. */
void net_set_ctx_err(redisContext *c, int type, const char *what);
/* Waits for `events` on the socket until the deadline. 1 ready, 0 timed
 * out, -1 error (errno). */
int net_wait_fd(int fd, short events, long long deadline_ms);

/* A TLS session's I/O for net.c's requests. tls_usable: 0 (c->err set)
 * once OpenSSL was shut down (the program is exiting). tls_wait_io:
 * net_wait_fd for a command, REDIS_OK or REDIS_ERR with the cause on c.
 * tls_flush: c->obuf out before the deadline. tls_read_once: one read
 * into the reader, 1 bytes came, 0 wait for *events, -1 failed. */
int tls_usable(redisContext *c);
int tls_wait_io(redisContext *c, const struct dm_net *t, short events, long long deadline_ms);
int tls_flush(redisContext *c, struct dm_net *t, long long deadline_ms);
int tls_read_once(redisContext *c, struct dm_net *t, short *events);
/* tls.c's fork handler (net's, dm_net_atfork, is this). */
void dm_tls_atfork(enum dm_fork_phase phase);

#endif
