/* tls: TLS sessions on connected sockets, for either store (the Redis
 * store's net under hiredis, the etcd store's http). OpenSSL is loaded
 * with dlopen on first need, not linked; the context is made from the
 * config's struct dm_tls_config at the first session; a handshake checks
 * the server's certificate and name; every read and write is one
 * non-blocking step (the caller polls) or bounded by a deadline; failures
 * come in words that name the cause, the config key to change and the
 * address. Knows no protocol above the bytes, no pool, no store: a store
 * says which of its groups the settings came from ("redis", "etcd"), for
 * the words. */
#ifndef DM_TLS_H
#define DM_TLS_H

#include <stddef.h>

#include "config.h"
#include "util.h"

#define DM_TLS_WHY_MAX 400

/* One session on a socket; the socket stays the caller's. */
struct dm_tls;

/* Remembers the settings for the sessions started after it (NULL or
 * !enabled: none) and the store they are for (static text: "redis" or
 * "etcd", the config group of messages, "redis.tls.ca"). With TLS
 * enabled, OpenSSL is loaded and initialised here, at the process's start
 * (the first initialisation decides whether OpenSSL's cleanup runs at
 * exit: it must not run before the shim's destructor has released its
 * holds over TLS). The config outlives every session; the files are read
 * at the first dm_tls_start. One store per process: a later call replaces
 * the settings. */
void dm_tls_setup(const struct dm_tls_config *tls, const char *store);

/* Starts TLS on fd, a connected TCP socket of `host` (the name or address
 * the config gives: the certificate must be for it, unless server_name
 * says otherwise), which is made non-blocking. The handshake must end by
 * deadline_ms (dm_now_ms's clock). `addr` names the server in messages
 * ("10.0.0.1:6379", "sentinel 10.0.0.2:26379"; it must outlive the
 * session). Returns the session, or NULL with `why` naming the cause and
 * addr: a certificate that is untrusted, expired or for another name, a
 * client certificate refused, a server that does not speak TLS, a
 * timeout, a file that cannot be read, OpenSSL missing or shut down. */
struct dm_tls *dm_tls_start(int fd, const char *host, const char *addr, long long deadline_ms,
                            char *why, size_t len);

/* One non-blocking step: bytes read into buf (or written from it), > 0;
 * 0 when the socket must first be ready for *events (POLLIN or POLLOUT:
 * a TLS read may need to write, and a write to read), then call again
 * with the same arguments; -1 when the session failed (dm_tls_error says
 * how). A read that returns 0 may leave bytes inside the session which
 * poll(2) cannot see: dm_tls_pending. */
int dm_tls_read(struct dm_tls *t, void *buf, size_t len, short *events);
int dm_tls_write(struct dm_tls *t, const void *buf, size_t len, short *events);

/* Bounded by deadline_ms: writes all of buf (0, or -1 with the error;
 * DM_TLS_TIMEOUT at the deadline); reads what comes (> 0 bytes, 0 at the
 * deadline with the session still good, -1 failed). */
int dm_tls_write_all(struct dm_tls *t, const void *buf, size_t len, long long deadline_ms);
int dm_tls_read_by(struct dm_tls *t, void *buf, size_t len, long long deadline_ms);

/* Bytes the session has read from the socket and not handed out yet. */
int dm_tls_pending(const struct dm_tls *t);

/* How the last call failed, and its words: DM_TLS_CLOSED (the server
 * closed the connection), DM_TLS_SYS (a socket error: dm_tls_errno), DM_TLS_TIMEOUT,
 * DM_TLS_GONE (OpenSSL was shut down: the program is exiting), DM_TLS_FAILED (a
 * TLS failure: an alert, a certificate, a protocol error; dm_tls_why then
 * holds the long words, naming the address). dm_tls_errstr: the short
 * words of any of them (hiredis's errstr size). */
enum dm_tls_err { DM_TLS_OK, DM_TLS_CLOSED, DM_TLS_SYS, DM_TLS_TIMEOUT, DM_TLS_GONE,
                  DM_TLS_FAILED };
enum dm_tls_err dm_tls_error(const struct dm_tls *t);
const char *dm_tls_errstr(const struct dm_tls *t);
int dm_tls_errno(const struct dm_tls *t);
const char *dm_tls_why(const struct dm_tls *t);

/* The client certificate of the settings (NULL: none given), for the
 * words of a session the server ended right after its handshake. */
const char *dm_tls_client_cert(void);

/* 1 once OpenSSL's cleanup has run (the program is exiting): no session
 * can be used or made any more. */
int dm_tls_gone(void);

/* Frees the session (no close_notify is sent; the socket is left open).
 * NULL is allowed. */
void dm_tls_free(struct dm_tls *t);

/* Fork (startup's fork_order, right after the store): prepare waits until
 * no thread of the shim is inside OpenSSL and keeps it so across fork(),
 * so the child inherits none of OpenSSL's internal locks held. The child
 * forgets the context (made again at its first session); a session it
 * inherited may be freed (dm_tls_free touches no socket) or left alone. */
void dm_tls_atfork(enum dm_fork_phase phase);

#endif
