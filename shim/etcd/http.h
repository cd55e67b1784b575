/* http: the etcd store's HTTP/1.1 client, enough for etcd's JSON gateway:
 * a POST with a JSON body on a kept-alive TCP connection (plain, or TLS
 * through shim/tls.h for an https:// member), its answer read whole
 * (Content-Length or chunked), or read a line at a time while the server
 * streams it (a watch). Every wait is bounded by a deadline (poll), the
 * TLS handshake included; nothing is sent with SIGPIPE. A connection is
 * one thread's at a time. No lock, no logging: errors are errno values
 * and h->err's words. */
#ifndef DM_ETCD_HTTP_H
#define DM_ETCD_HTTP_H

#include <stddef.h>

struct dm_tls;

struct dm_http {
    int fd;                 /* -1: not connected */
    char host[256];
    int port;
    int tls;                /* connect with TLS (shim/tls.h's settings) */
    struct dm_tls *s;       /* the TLS session while connected, or NULL */
    int tls_fresh;          /* a TLS session with no answer on it yet */
    int tls_failed;         /* the last failure was a TLS one (a certificate, an alert):
                               err names it with the address; nothing was sent */
    char addr[300];         /* "host:port", for the TLS session's words */
    char *in;               /* bytes read and not yet used */
    size_t inlen, incap;
    char *body;             /* a streamed answer's bytes, chunk framing removed */
    size_t bodylen, bodycap;
    int chunked;            /* the streamed answer is chunked */
    long long chunk_left;   /* bytes left in the current chunk; -1: at a chunk header */
    char err[420];          /* the last failure, in words (without the address, but
                               a TLS one's, which names it) */
};

/* A closed connection to host:port (no I/O), over TLS when tls is 1. */
void dm_http_init(struct dm_http *h, const char *host, int port, int tls);
/* Connects if not connected, the TLS handshake included, all within
 * timeout_ms: 0 or an errno (ETIMEDOUT, ECONNREFUSED...; EPROTO with
 * h->tls_failed for a certificate or a TLS alert). */
int dm_http_connect(struct dm_http *h, long timeout_ms);
/* Closes the socket (no TLS close_notify) and frees the session. */
void dm_http_close(struct dm_http *h);
/* Interrupts a wait of the connection's thread from another thread
 * (shutdown(2): its read returns at once, a TLS one as a closed
 * connection); the owner still closes it. */
void dm_http_abort(struct dm_http *h);

/* POSTs body to path (connecting first if needed) and reads the answer
 * until deadline_ms (dm_now_ms): 0 with *status and *out (malloc'ed,
 * NUL-terminated, *outlen bytes), or an errno, the connection then closed.
 * auth: an Authorization header's value, or NULL. */
int dm_http_post(struct dm_http *h, const char *path, const char *body, size_t len,
                 const char *auth, long long deadline_ms, int *status, char **out,
                 size_t *outlen);
/* POSTs body and reads only the answer's head: 0 with *status; the body
 * then comes a line at a time from dm_http_line. */
int dm_http_stream(struct dm_http *h, const char *path, const char *body, size_t len,
                   const char *auth, long long deadline_ms, int *status);
/* The next '\n'-terminated line of a streamed answer: 0 with *line
 * (malloc'ed, NUL-terminated, the '\n' removed), ETIMEDOUT at deadline_ms
 * (the stream goes on), or another errno (the stream ended). */
int dm_http_line(struct dm_http *h, long long deadline_ms, char **line);

#endif
