/* http: one HTTP/1.1 connection at a time, written for etcd's gateway
 * (grpc-gateway): requests are POSTs of JSON; unary answers come with a
 * Content-Length or chunked, streams (watch, keep-alive) as chunks of one
 * JSON object per line. Non-blocking socket, poll for every deadline. An
 * https:// member's bytes go through a TLS session (shim/tls.h) on the
 * same socket: sock_send and sock_recv are the one place that tells the
 * two apart; a TLS read that needs a write (or a write a read) waits for
 * what the session asks. */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tls.h"
#include "util.h"

void dm_http_init(struct dm_http *h, const char *host, int port, int tls)
{
    memset(h, 0, sizeof *h);
    h->fd = -1;
    snprintf(h->host, sizeof h->host, "%s", host);
    h->port = port;
    h->tls = tls;
    snprintf(h->addr, sizeof h->addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

void dm_http_close(struct dm_http *h)
{
    dm_tls_free(h->s);
    h->s = NULL;
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    free(h->in);
    free(h->body);
    h->in = h->body = NULL;
    h->inlen = h->incap = h->bodylen = h->bodycap = 0;
}

void dm_http_abort(struct dm_http *h)
{
    int fd = __atomic_load_n(&h->fd, __ATOMIC_ACQUIRE);
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR);
}

static int fail(struct dm_http *h, int e, const char *what)
{
    snprintf(h->err, sizeof h->err, "%.*s", (int)sizeof h->err - 1, what);
    dm_http_close(h);
    return e;
}

static int wait_fd(int fd, short ev, long long deadline_ms)
{
    for (;;) {
        long long left = deadline_ms - dm_now_ms();
        if (left <= 0)
            return ETIMEDOUT;
        struct pollfd p = { fd, ev, 0 };
        int r = poll(&p, 1, left > 1000000 ? 1000000 : (int)left);
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return errno;
    }
}

static void connected(struct dm_http *h, int fd)
{
    h->tls_failed = 0;
    __atomic_store_n(&h->fd, fd, __ATOMIC_RELEASE);
}

/* The handshake on fd, just connected, by the connect's deadline. Its
 * failure is the connect's (fd closed): a certificate or an alert is
 * EPROTO with tls_failed, the words naming the member. */
static int tls_start(struct dm_http *h, int fd, long long deadline)
{
    char why[DM_TLS_WHY_MAX];
    struct dm_tls *s = dm_tls_start(fd, h->host, h->addr, deadline, why, sizeof why);
    if (!s) {
        close(fd);
        snprintf(h->err, sizeof h->err, "%s", why);
        h->tls_failed = strstr(why, "no answer within") == NULL;
        return h->tls_failed ? EPROTO : ETIMEDOUT;
    }
    h->s = s;
    h->tls_fresh = 1;
    connected(h, fd);
    return 0;
}

int dm_http_connect(struct dm_http *h, long timeout_ms)
{
    if (h->fd >= 0)
        return 0;
    h->tls_failed = 0;
    long long deadline = dm_now_ms() + timeout_ms;
    char port[16];
    snprintf(port, sizeof port, "%d", h->port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
    int g = getaddrinfo(h->host, port, &hints, &ai);
    if (g != 0) {
        snprintf(h->err, sizeof h->err, "%s", gai_strerror(g));
        return EHOSTUNREACH;
    }
    int e = ECONNREFUSED;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
            e = errno;
            close(fd);
            continue;
        }
        e = wait_fd(fd, POLLOUT, deadline);
        if (e == 0) {
            int so = 0;
            socklen_t sl = sizeof so;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl);
            e = so;
        }
        if (e == 0) {
            freeaddrinfo(ai);
            return h->tls ? tls_start(h, fd, deadline) : (connected(h, fd), 0);
        }
        close(fd);
    }
    freeaddrinfo(ai);
    snprintf(h->err, sizeof h->err, "connect: %s", strerror(e));
    return e;
}

/* A TLS session's failure as an errno, its words in h->err (the
 * connection then closed). */
static int tls_io_fail(struct dm_http *h)
{
    enum dm_tls_err k = dm_tls_error(h->s);
    if (h->tls_fresh && (k == DM_TLS_CLOSED || k == DM_TLS_SYS)) {
        /* The server ended a session with no answer on it yet: TLS 1.3
         * checks the client's certificate after the client's handshake,
         * so a refusal shows here, as an alert to read (a write failed
         * first: its alert may be waiting) or as a closed connection. */
        char b[64];
        short ev;
        if (k == DM_TLS_SYS && dm_tls_read(h->s, b, sizeof b, &ev) < 0 &&
            dm_tls_error(h->s) == DM_TLS_FAILED)
            return tls_io_fail(h);
        const char *crt = dm_tls_client_cert();
        char words[sizeof h->err + 200];   /* fail() keeps what fits */
        snprintf(words, sizeof words, "TLS session with etcd at %.80s ended by the server right "
                 "after the handshake: did it refuse the client certificate (etcd.tls.cert = "
                 "%s%.150s%s)? %.60s", h->addr, crt ? "\"" : "", crt ? crt : "none given",
                 crt ? "\"" : "", dm_tls_errstr(h->s));
        h->tls_failed = 1;
        return fail(h, EPROTO, words);
    }
    int e = k == DM_TLS_CLOSED ? ECONNRESET : k == DM_TLS_SYS ? dm_tls_errno(h->s)
          : k == DM_TLS_GONE ? ESHUTDOWN : EPROTO;
    char words[sizeof h->err];
    snprintf(words, sizeof words, "%s", k == DM_TLS_FAILED ? dm_tls_why(h->s)
             : k == DM_TLS_CLOSED ? "the server closed the connection" : dm_tls_errstr(h->s));
    h->tls_failed = k == DM_TLS_FAILED;
    return fail(h, e ? e : EIO, words);
}

/* One send or recv: > 0 bytes; 0 after which the socket must be ready
 * for *ev (plain: EAGAIN; TLS: what the session asks); -1 with errno, or
 * -2 for a TLS failure (tls_io_fail); recv's 0 (the peer closed) is -3. */
static ssize_t sock_send(struct dm_http *h, const char *p, size_t n, short *ev)
{
    *ev = POLLOUT;
    if (h->s) {
        int w = dm_tls_write(h->s, p, n, ev);
        return w < 0 ? -2 : w;
    }
    ssize_t w = send(h->fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    return w;
}

static ssize_t sock_recv(struct dm_http *h, char *p, size_t n, short *ev)
{
    *ev = POLLIN;
    if (h->s) {
        int r = dm_tls_read(h->s, p, n, ev);
        return r < 0 ? (dm_tls_error(h->s) == DM_TLS_CLOSED ? -3 : -2) : r;
    }
    ssize_t r = recv(h->fd, p, n, 0);
    if (r == 0)
        return -3;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    return r;
}

static int send_all(struct dm_http *h, const char *p, size_t n, long long deadline)
{
    while (n > 0) {
        short ev;
        ssize_t w = sock_send(h, p, n, &ev);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w == 0) {
            int e = wait_fd(h->fd, ev, deadline);
            if (e)
                return fail(h, e, e == ETIMEDOUT ? "timed out sending" : "send");
            continue;
        }
        if (w == -2)
            return tls_io_fail(h);
        return fail(h, errno ? errno : EIO, "send");
    }
    return 0;
}

static int grow(char **b, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    char *nb = realloc(*b, c);
    if (!nb)
        return -1;
    *b = nb;
    *cap = c;
    return 0;
}

/* More bytes into h->in, by the deadline. */
static int read_more(struct dm_http *h, long long deadline)
{
    if (grow(&h->in, &h->incap, h->inlen + 4096 + 1) < 0)
        return fail(h, ENOMEM, "out of memory");
    for (;;) {
        short ev;
        ssize_t r = sock_recv(h, h->in + h->inlen, h->incap - h->inlen - 1, &ev);
        if (r > 0) {
            h->inlen += (size_t)r;
            h->in[h->inlen] = '\0';
            return 0;
        }
        if (r == -2 || (r == -3 && h->s && h->tls_fresh))
            return tls_io_fail(h);
        if (r == -3)
            return fail(h, ECONNRESET, "the server closed the connection");
        if (r < 0)
            return fail(h, errno, strerror(errno));
        int e = wait_fd(h->fd, ev, deadline);
        if (e == ETIMEDOUT)
            return ETIMEDOUT;       /* the caller decides: the connection is still good */
        if (e)
            return fail(h, e, strerror(e));
    }
}

static void consume(struct dm_http *h, size_t n)
{
    memmove(h->in, h->in + n, h->inlen - n);
    h->inlen -= n;
    if (h->in)
        h->in[h->inlen] = '\0';
}

static int request(struct dm_http *h, const char *path, const char *body, size_t len,
                   const char *auth, long long deadline)
{
    long left = (long)(deadline - dm_now_ms());
    int e = dm_http_connect(h, left > 0 ? left : 1);
    if (e)
        return e;
    char head[1024];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                     "Grpc-Metadata-hasleader: true\r\n%s%s%sContent-Length: %zu\r\n\r\n",
                     path, h->host, h->port, auth ? "Authorization: " : "", auth ? auth : "",
                     auth ? "\r\n" : "", len);
    if (n < 0 || (size_t)n >= sizeof head)
        return fail(h, EINVAL, "request head too long");
    h->inlen = 0;
    h->bodylen = 0;
    if ((e = send_all(h, head, (size_t)n, deadline)) || (e = send_all(h, body, len, deadline)))
        return e;
    return 0;
}

/* The answer's head: status, and how its body is framed (*clen -1: not
 * by length; *chunked). */
static int read_head(struct dm_http *h, long long deadline, int *status, long long *clen,
                     int *chunked, int *close_after)
{
    char *end;
    while (!(end = h->in ? strstr(h->in, "\r\n\r\n") : NULL)) {
        if (h->inlen > 65536)
            return fail(h, EPROTO, "answer head too long");
        size_t had = h->inlen;
        int e = read_more(h, deadline);
        if (e == ETIMEDOUT)
            return fail(h, e, "timed out waiting for the answer");
        if (e == ECONNRESET && had == 0 && !h->tls)
            snprintf(h->err, sizeof h->err, "the server closed the connection without an answer "
                     "(an https:// member? then write https:// endpoints, or etcds://)");
        if (e)
            return e;
    }
    *end = '\0';
    h->tls_fresh = 0;           /* answered: the session was accepted */
    int maj = 0, min = 0;
    if (sscanf(h->in, "HTTP/%d.%d %d", &maj, &min, status) != 3)
        return fail(h, EPROTO, "not an HTTP answer");
    *clen = -1;
    *chunked = 0;
    *close_after = maj == 1 && min == 0;
    for (char *l = strstr(h->in, "\r\n"); l; l = strstr(l, "\r\n")) {
        l += 2;
        if (strncasecmp(l, "Content-Length:", 15) == 0)
            *clen = strtoll(l + 15, NULL, 10);
        else if (strncasecmp(l, "Transfer-Encoding:", 18) == 0 && strstr(l, "chunked"))
            *chunked = 1;
        else if (strncasecmp(l, "Connection:", 11) == 0 && strcasestr(l, "close"))
            *close_after = 1;
    }
    consume(h, (size_t)(end + 4 - h->in));
    return 0;
}

/* Moves whole chunk data from h->in to h->body; *done at the last chunk
 * (its trailer read). 0 or EPROTO/ENOMEM. */
static int dechunk(struct dm_http *h, int *done)
{
    *done = 0;
    for (;;) {
        if (h->chunk_left < 0) {
            char *nl = h->in ? strstr(h->in, "\r\n") : NULL;
            if (!nl)
                return 0;
            char *e;
            long long sz = strtoll(h->in, &e, 16);
            if (e == h->in || sz < 0)
                return fail(h, EPROTO, "bad chunk");
            if (sz == 0) {
                char *t = strstr(h->in, "\r\n\r\n");
                if (!t)
                    return 0;
                consume(h, (size_t)(t + 4 - h->in));
                *done = 1;
                return 0;
            }
            consume(h, (size_t)(nl + 2 - h->in));
            h->chunk_left = sz;
        }
        if (h->chunk_left > 0) {
            size_t take = h->inlen < (size_t)h->chunk_left ? h->inlen : (size_t)h->chunk_left;
            if (take == 0)
                return 0;
            if (grow(&h->body, &h->bodycap, h->bodylen + take + 1) < 0)
                return fail(h, ENOMEM, "out of memory");
            memcpy(h->body + h->bodylen, h->in, take);
            h->bodylen += take;
            h->body[h->bodylen] = '\0';
            consume(h, take);
            h->chunk_left -= (long long)take;
        }
        if (h->chunk_left == 0) {
            if (h->inlen < 2)
                return 0;
            consume(h, 2);      /* the chunk's CRLF */
            h->chunk_left = -1;
        }
    }
}

int dm_http_post(struct dm_http *h, const char *path, const char *body, size_t len,
                 const char *auth, long long deadline_ms, int *status, char **out,
                 size_t *outlen)
{
    int e = request(h, path, body, len, auth, deadline_ms);
    long long clen;
    int chunked, close_after;
    if (e || (e = read_head(h, deadline_ms, status, &clen, &chunked, &close_after)))
        return e;
    if (chunked) {
        h->chunk_left = -1;
        int done = 0;
        while ((e = dechunk(h, &done)) == 0 && !done)
            if ((e = read_more(h, deadline_ms)) != 0)
                break;
        if (e)
            return e == ETIMEDOUT ? fail(h, e, "timed out reading the answer") : e;
    } else {
        while (clen < 0 || h->inlen < (size_t)clen) {
            e = read_more(h, deadline_ms);
            if (e == ECONNRESET && clen < 0)
                break;      /* the body ran to the close */
            if (e)
                return e == ETIMEDOUT ? fail(h, e, "timed out reading the answer") : e;
        }
        size_t n = clen < 0 ? h->inlen : (size_t)clen;
        if (grow(&h->body, &h->bodycap, n + 1) < 0)
            return fail(h, ENOMEM, "out of memory");
        if (n)
            memcpy(h->body, h->in, n);
        h->body[n] = '\0';
        h->bodylen = n;
        if (h->fd >= 0)
            consume(h, n);
    }
    *out = h->body;
    *outlen = h->bodylen;
    h->body = NULL;
    h->bodylen = h->bodycap = 0;
    if (close_after || (clen < 0 && !chunked)) {
        char *keep = *out;
        dm_http_close(h);
        *out = keep;
    }
    return 0;
}

int dm_http_stream(struct dm_http *h, const char *path, const char *body, size_t len,
                   const char *auth, long long deadline_ms, int *status)
{
    int e = request(h, path, body, len, auth, deadline_ms);
    long long clen;
    int close_after;
    if (e || (e = read_head(h, deadline_ms, status, &clen, &h->chunked, &close_after)))
        return e;
    h->chunk_left = h->chunked ? -1 : clen;
    return 0;
}

int dm_http_line(struct dm_http *h, long long deadline_ms, char **line)
{
    for (;;) {
        if (h->fd < 0)
            return ECONNRESET;
        int done = 0, e = 0;
        if (h->chunked)
            e = dechunk(h, &done);
        else if (h->inlen) {
            if (grow(&h->body, &h->bodycap, h->bodylen + h->inlen + 1) < 0)
                return fail(h, ENOMEM, "out of memory");
            memcpy(h->body + h->bodylen, h->in, h->inlen);
            h->bodylen += h->inlen;
            h->body[h->bodylen] = '\0';
            consume(h, h->inlen);
        }
        if (e)
            return e;
        char *nl = h->body ? memchr(h->body, '\n', h->bodylen) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - h->body);
            char *l = malloc(n + 1);
            if (!l)
                return fail(h, ENOMEM, "out of memory");
            memcpy(l, h->body, n);
            l[n] = '\0';
            memmove(h->body, nl + 1, h->bodylen - n - 1);
            h->bodylen -= n + 1;
            *line = l;
            return 0;
        }
        if (done)
            return fail(h, ECONNRESET, "the stream ended");
        if ((e = read_more(h, deadline_ms)) != 0)
            return e;
    }
}
