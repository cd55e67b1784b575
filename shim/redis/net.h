/* net: the transport under hiredis. hiredis formats commands into the
 * context's output buffer and parses replies with its reader; this module
 * makes the connections (dm_net_connect: hiredis's own connect took a
 * signal for a failure) and moves the bytes. A plain connection (TCP or
 * unix socket) with send(2) (MSG_NOSIGNAL: a connection the server closed
 * never raises SIGPIPE in the program) and recv(2) on its blocking socket,
 * each request bounded by one deadline (the socket's timeout); a TLS
 * connection (hiredis 0.14 has no TLS) through OpenSSL on
 * the context's socket, with the same timeouts and hiredis's err/errstr on
 * the context. Every read or write of a connection goes through here:
 * the data nodes' (redis, notify, watchdog) and the sentinels'
 * (sentinel.c), with the same TLS settings. Knows nothing of scripts,
 * pooling or what a command means. */
#ifndef DM_NET_H
#define DM_NET_H

#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stddef.h>

#include "config.h"
#include "util.h"

/* A TLS session on a context's socket; NULL for a plain connection. */
struct dm_net;

/* Connects to host:port (TCP), or to the unix socket `path` when it is not
 * NULL, by `deadline_ms` (dm_now_ms()'s clock). Blocking; a signal that
 * interrupts a wait restarts it for the time left, never fails the
 * connect. Returns a hiredis context (redisConnectFd) on the blocking
 * socket, close-on-exec, with SO_RCVTIMEO/SO_SNDTIMEO = timeout_ms (the
 * command timeout), TCP_NODELAY and, with `keepalive`, hiredis's TCP
 * keepalive; or NULL with `why` naming the cause (refused, no connection
 * within the connect timeout, an unknown name...: the caller adds the
 * address). Free it with dm_net_close (or redisFree). */
redisContext *dm_net_connect(const char *host, int port, const char *path, long long deadline_ms,
                             long timeout_ms, int keepalive, char *why, size_t len);

/* Remembers the TLS settings (NULL or !enabled: no TLS) for the sessions
 * started after it; the config outlives every session. The certificates
 * are read at the first dm_net_tls_start, not here. */
void dm_net_setup(const struct dm_tls_config *tls);

/* Starts TLS on `c`, a freshly connected TCP context of `host` (the name
 * or address the config gives, checked against the certificate unless
 * server_name says otherwise). `deadline_ms` is dm_now_ms()'s clock: the
 * handshake must end by then. Returns the session, or NULL with `why`
 * naming the cause and `addr` (an untrusted, expired or misnamed
 * certificate, a refused client certificate, a server that does not speak
 * TLS, a timeout, a certificate file that cannot be read). The command
 * timeout of the session starts as `timeout_ms`. */
struct dm_net *dm_net_tls_start(redisContext *c, const char *host, const char *addr,
                                long long deadline_ms, long timeout_ms, char *why, size_t len);

/* Sets the time one reply may take: hiredis's socket timeout for a plain
 * connection, the session's own for TLS (whose socket is non-blocking). */
void dm_net_set_timeout(redisContext *c, struct dm_net *t, long ms);

/* As redisGetReply: sends what the context has buffered, then blocks
 * (the request and its reply bounded by one timeout, whatever signals
 * arrive meanwhile) until one reply is read. REDIS_OK with *reply (caller
 * frees), or REDIS_ERR with c->err and c->errstr set. A context whose err
 * is set already is refused (REDIS_ERR, its words left as they are): no
 * byte goes through a failed connection, here and in every call below. */
int dm_net_get_reply(redisContext *c, struct dm_net *t, void **reply);

/* As redisAppendCommandArgv: the command `argv` (lens NULL: each a C
 * string) in the protocol, appended to c->obuf to go out with the next
 * write. Formatted straight into the buffer (hiredis formats a copy
 * first, with a printf of its own per argument). REDIS_OK, or REDIS_ERR
 * with c->err set (out of memory). */
int dm_net_append_argv(redisContext *c, int argc, const char **argv, const size_t *lens);

/* As redisCommandArgv / redisvCommand: append, then dm_net_get_reply.
 * NULL on error (c->errstr says why). */
void *dm_net_command_argv(redisContext *c, struct dm_net *t, int argc, const char **argv,
                          const size_t *lens);
void *dm_net_vcommand(redisContext *c, struct dm_net *t, const char *fmt, va_list ap);

/* For a thread that polls the socket itself (the subscriber). As
 * redisBufferWrite: writes the output buffer (*done = 1 once it is empty);
 * as redisBufferRead: feeds what the socket has to the reader without
 * waiting for more (REDIS_ERR with c->errstr when the connection is
 * broken). dm_net_buffered: bytes already read from the socket and held
 * inside the TLS session, which poll(2) cannot see: read before polling. */
int dm_net_write(redisContext *c, struct dm_net *t, int *done);
int dm_net_read(redisContext *c, struct dm_net *t);
int dm_net_buffered(const struct dm_net *t);

/* 1 when the session's last failure was a TLS one (an alert from the
 * server, a protocol error), not a timeout or a closed socket; `why` then
 * holds the words, naming the address. */
int dm_net_tls_failed(const struct dm_net *t);
const char *dm_net_tls_why(const struct dm_net *t);

/* Frees the session and the context (closing the socket; no TLS
 * close_notify is sent). Either may be NULL. */
void dm_net_close(redisContext *c, struct dm_net *t);

#endif
