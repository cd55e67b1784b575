/* net: moves a connection's bytes. A plain connection (t == NULL) keeps
 * the blocking socket hiredis connected, with its SO_RCVTIMEO/SO_SNDTIMEO,
 * but never hiredis's write(2): a write to a connection the server closed
 * or reset raises SIGPIPE, which kills a program that does not ignore it
 * (an interposer must never do that). Its bytes go out with
 * send(MSG_NOSIGNAL) and come in with recv(2), one call each way per
 * request as hiredis made them (plain_flush, plain_read).
 *
 * A TLS connection (its session: tls.c) keeps hiredis for the protocol
 * only: commands are formatted into c->obuf by redisAppendCommand*,
 * replies parsed by c->reader. Its socket is non-blocking from the handshake on, and every
 * wait is a poll(2) bounded by the session's deadline, so the handshake
 * gets what is left of the connect timeout and each reply the command
 * timeout, as a plain connection does. Failures land in c->err/errstr like
 * hiredis's; a TLS failure (an alert, a certificate) also in t->why, long
 * enough to name the cause, the file and the address.
 *
 * OpenSSL, its initialisation and its exit: shim/tls.c. */
#include "net.h"
#include "net_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "real.h"
#include "util.h"

/* ---- connecting --------------------------------------------------------
 * dmutex's own connect, not hiredis's: hiredis 0.14 takes the EINTR of its
 * poll(2) for an I/O error, so a signal of the program (a timer, a
 * profiler) arriving during a connect made it "no connection", the one
 * failure on_redis_down = "local" locks alone on, although the server was
 * there. Here every wait restarts for what is left of the connect's
 * deadline. TCP: a non-blocking connect, poll(2) for POLLOUT, SO_ERROR.
 * A unix socket: a blocking connect bounded by SO_SNDTIMEO (the time
 * left), which waits for room in a full accept queue (a non-blocking one
 * fails at once with EAGAIN: hiredis's did). Then the socket is handed to
 * hiredis (redisConnectFd) set up as hiredis sets up its own: blocking,
 * SO_RCVTIMEO/SO_SNDTIMEO, TCP_NODELAY, keepalive. Close-on-exec, so a
 * program's exec'ed children never inherit the shim's connections. */

/* Waits for a non-blocking TCP connect started on fd. 0, or -1 with why. */
static int tcp_connect_wait(int fd, long long deadline_ms, char *why, size_t len)
{
    int w = dm_wait_fd(fd, POLLOUT, deadline_ms);
    if (w == 0) {
        snprintf(why, len, "no connection within the connect timeout (connect_timeout_ms)");
        return -1;
    }
    if (w < 0) {
        snprintf(why, len, "poll(2): %s", strerror(errno));
        return -1;
    }
    int err = 0;
    socklen_t elen = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
        err = errno;
    if (err) {
        snprintf(why, len, "%s", strerror(err));
        return -1;
    }
    return 0;
}

/* The addresses of host, as hiredis looks them up: IPv4 first, IPv6 only
 * when the name has no IPv4 address. NULL with why. */
static struct addrinfo *resolve(const char *host, int port, long long deadline_ms, char *why,
                                size_t len)
{
    static const int families[] = { AF_INET, AF_INET6 };
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo *ai = NULL;
    int rv = EAI_NONAME;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        struct addrinfo hints;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = families[i];
        hints.ai_socktype = SOCK_STREAM;
        do
            rv = getaddrinfo(host, ps, &hints, &ai);
        while (rv == EAI_SYSTEM && errno == EINTR && dm_now_ms() < deadline_ms);
        if (rv == 0)
            return ai;
    }
    snprintf(why, len, "%s", rv == EAI_SYSTEM ? strerror(errno) : gai_strerror(rv));
    return NULL;
}

/* A connected TCP socket (blocking again, TCP_NODELAY), or -1 with why.
 * Each address in turn until one connects or the deadline passes. */
static int tcp_connect(const char *host, int port, long long deadline_ms, char *why, size_t len)
{
    struct addrinfo *ai = resolve(host, port, deadline_ms, why, len);
    if (!ai)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            snprintf(why, len, "cannot make a socket: %s", strerror(errno));
            continue;
        }
        /* EINTR: the connection goes on in the background, as EINPROGRESS. */
        int r = connect(fd, a->ai_addr, a->ai_addrlen);
        if (r != 0 && errno != EINPROGRESS && errno != EINTR)
            snprintf(why, len, "%s", strerror(errno));
        else if (r == 0 || tcp_connect_wait(fd, deadline_ms, why, len) == 0)
            break;
        close(fd);
        fd = -1;
        if (dm_now_ms() >= deadline_ms)
            break;
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return -1;
    int fl = fcntl(fd, F_GETFL), one = 1;
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        snprintf(why, len, "cannot set up the socket: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* A connected unix socket (blocking), or -1 with why. */
static int unix_connect(const char *path, long long deadline_ms, char *why, size_t len)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(why, len, "the socket path is longer than %zu bytes", sizeof sa.sun_path - 1);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, len, "cannot make a socket: %s", strerror(errno));
        return -1;
    }
    for (;;) {
        long long left = deadline_ms - dm_now_ms();
        if (left <= 0) {
            snprintf(why, len, "no connection within the connect timeout (connect_timeout_ms): "
                     "the server's accept queue stayed full");
            break;
        }
        struct timeval tv = dm_ms_timeval((long)(left > 60000 ? 60000 : left));
        if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
            snprintf(why, len, "cannot set up the socket: %s", strerror(errno));
            break;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 || errno == EISCONN)
            return fd;
        if (errno != EINTR && errno != EAGAIN && errno != EINPROGRESS) {
            snprintf(why, len, "%s", strerror(errno));
            break;
        }
    }
    close(fd);
    return -1;
}

redisContext *dm_net_connect(const char *host, int port, const char *path, long long deadline_ms,
                             long timeout_ms, int keepalive, char *why, size_t len)
{
    int fd = path ? unix_connect(path, deadline_ms, why, len)
                  : tcp_connect(host, port, deadline_ms, why, len);
    if (fd < 0)
        return NULL;
    redisContext *c = redisConnectFd(fd);
    if (!c) {
        close(fd);
        snprintf(why, len, "out of memory");
        return NULL;
    }
    if (redisSetTimeout(c, dm_ms_timeval(timeout_ms)) != REDIS_OK ||
        (keepalive && !path && redisEnableKeepAlive(c) != REDIS_OK)) {
        snprintf(why, len, "cannot set up the socket: %s", c->errstr);
        redisFree(c);
        return NULL;
    }
    return c;
}

/* ---- plain TCP and unix sockets -------------------------------------------
 * hiredis formats and parses; the bytes move here, so that no write of
 * the shim raises SIGPIPE (hiredis writes with write(2): a connection the
 * server closed or reset kills a program that does not ignore SIGPIPE, at
 * once on a unix socket). The socket stays blocking with the timeouts
 * dm_net_connect set on it (SO_RCVTIMEO/SO_SNDTIMEO: the command timeout,
 * then dm_net_set_timeout's).
 *
 * A request (its writes and the reads of its reply) has one deadline: the
 * socket's timeout from when it starts. Its first send and its first recv
 * block on the socket, bounded by that timeout, which is all a request
 * costs when it goes out and its reply comes back in one piece (one system
 * call each way, as hiredis made them). Anything else (a signal, a partial
 * write, a reply in pieces, a first recv that would start after the
 * request's first millisecond) and the rest waits in poll(2) for what is
 * left of the deadline, and sends or receives without blocking: neither a
 * signal (EINTR) nor a server trickling bytes can stretch a request past
 * its timeout, as SO_RCVTIMEO alone did (it bounds one recv, and starts
 * again with each). */
struct plain_req {
    long long start;            /* dm_now_ms() when the request began */
    long long deadline;         /* 0: not read from the socket yet */
    int polled;                 /* the rest of the request waits in poll(2) */
};

static void plain_req_start(struct plain_req *q)
{
    q->start = dm_now_ms();
    q->deadline = 0;
    q->polled = 0;
}

/* The socket's timeout for `opt` in ms (0: none). */
static long sock_timeout_ms(int fd, int opt)
{
    struct timeval tv = { 0, 0 };
    socklen_t len = sizeof tv;
    if (getsockopt(fd, SOL_SOCKET, opt, &tv, &len) != 0)
        return 0;
    return (long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

static long long plain_deadline(redisContext *c, struct plain_req *q)
{
    if (!q->deadline) {
        long ms = sock_timeout_ms(c->fd, SO_RCVTIMEO);
        q->deadline = ms > 0 ? q->start + ms : LLONG_MAX;
    }
    return q->deadline;
}

/* The words of a request that ran out of time (`what`: "no reply"). */
static void plain_timeout(redisContext *c, struct plain_req *q, const char *what)
{
    char m[80];
    long long d = plain_deadline(c, q);
    snprintf(m, sizeof m, "%s within %lld ms", what, d == LLONG_MAX ? 0 : d - q->start);
    net_set_ctx_err(c, REDIS_ERR_IO, m);
}

/* errno of a failed send/recv as words on c: a timeout says so. */
static void plain_fail(redisContext *c, struct plain_req *q, const char *what)
{
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        plain_timeout(c, q, what);
    else
        net_set_ctx_err(c, REDIS_ERR_IO, strerror(errno));
}

/* For the rest of a request: waits until the socket is ready for `events`
 * or the request's deadline. REDIS_OK, or REDIS_ERR with c->errstr. */
static int plain_wait(redisContext *c, struct plain_req *q, short events, const char *what)
{
    q->polled = 1;
    int w = dm_wait_fd(c->fd, events, plain_deadline(c, q));
    if (w > 0)
        return REDIS_OK;
    if (w == 0)
        plain_timeout(c, q, what);
    else
        net_set_ctx_err(c, REDIS_ERR_IO, strerror(errno));
    return REDIS_ERR;
}

/* Writes all of c->obuf by the request's deadline. REDIS_OK, or REDIS_ERR
 * with c->errstr. */
static int plain_flush(redisContext *c, struct plain_req *q)
{
    static const char what[] = "the request could not be sent";
    while (sdslen(c->obuf) > 0) {
        ssize_t n;
        if (!q->polled)
            n = send(c->fd, c->obuf, sdslen(c->obuf), MSG_NOSIGNAL);
        else if (plain_wait(c, q, POLLOUT, what) != REDIS_OK)
            return REDIS_ERR;
        else
            n = send(c->fd, c->obuf, sdslen(c->obuf), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sdsrange(c->obuf, n, -1);
            q->polled |= sdslen(c->obuf) > 0;
        } else if (n < 0 && (errno == EINTR || (q->polled && errno == EAGAIN))) {
            q->polled = 1;
        } else {
            if (n == 0)
                errno = EIO;        /* cannot happen on a stream socket: never spin */
            plain_fail(c, q, what);
            return REDIS_ERR;
        }
    }
    return REDIS_OK;
}

/* Reads once into the reader: as soon as anything comes, by the request's
 * deadline. REDIS_OK, or REDIS_ERR with c->errstr. */
static int plain_read(redisContext *c, struct plain_req *q)
{
    static const char what[] = "no reply";
    char buf[DM_NET_READ_CHUNK];
    ssize_t n;
    q->polled |= dm_now_ms() != q->start;
    for (;;) {
        if (!q->polled)
            n = recv(c->fd, buf, sizeof buf, 0);
        else if (plain_wait(c, q, POLLIN, what) != REDIS_OK)
            return REDIS_ERR;
        else
            n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n >= 0 || (errno != EINTR && !(q->polled && errno == EAGAIN)))
            break;
        q->polled = 1;
    }
    q->polled = 1;                  /* a reply read in pieces: the next one waits in poll */
    if (n < 0) {
        plain_fail(c, q, what);
        return REDIS_ERR;
    }
    if (n == 0) {
        net_set_ctx_err(c, REDIS_ERR_EOF, "Server closed the connection");
        return REDIS_ERR;
    }
    if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
        net_set_ctx_err(c, c->reader->err, c->reader->errstr);
        return REDIS_ERR;
    }
    return REDIS_OK;
}

/* For the subscriber, once poll(2) said the socket has something: one
 * recv that never waits. REDIS_OK (an EINTR or nothing there feeds
 * nothing), or REDIS_ERR with c->errstr. */
static int plain_read_now(redisContext *c)
{
    char buf[DM_NET_READ_CHUNK];
    ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return REDIS_OK;
    if (n < 0) {
        net_set_ctx_err(c, REDIS_ERR_IO, strerror(errno));
        return REDIS_ERR;
    }
    if (n == 0) {
        net_set_ctx_err(c, REDIS_ERR_EOF, "Server closed the connection");
        return REDIS_ERR;
    }
    if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) {
        net_set_ctx_err(c, c->reader->err, c->reader->errstr);
        return REDIS_ERR;
    }
    return REDIS_OK;
}

/* As redisGetReply, with the bytes moved above. */
static int plain_get_reply(redisContext *c, void **reply)
{
    void *r = NULL;
    if (redisGetReplyFromReader(c, &r) != REDIS_OK)
        return REDIS_ERR;
    if (!r) {
        struct plain_req q;
        plain_req_start(&q);
        if (plain_flush(c, &q) != REDIS_OK)
            return REDIS_ERR;
        do {
            if (plain_read(c, &q) != REDIS_OK || redisGetReplyFromReader(c, &r) != REDIS_OK)
                return REDIS_ERR;
        } while (!r);
    }
    if (reply)
        *reply = r;
    else
        freeReplyObject(r);
    return REDIS_OK;
}

/* A context whose err is set is done with: a request timed out (its reply
 * may still come), the connection broke, the reader lost its place. No
 * more bytes go through it, as hiredis's own redisGetReply refuses: a new
 * request on it could be answered by the old one's reply. REDIS_OK when
 * c can be used. */
static int ctx_ok(const redisContext *c)
{
    return c->err ? REDIS_ERR : REDIS_OK;
}

int dm_net_get_reply(redisContext *c, struct dm_net *t, void **reply)
{
    if (ctx_ok(c) != REDIS_OK)
        return REDIS_ERR;
    if (!t)
        return plain_get_reply(c, reply);
    void *r = NULL;
    if (!tls_usable(c) || redisGetReplyFromReader(c, &r) != REDIS_OK)
        return REDIS_ERR;
    long long deadline = dm_now_ms() + t->timeout_ms;
    if (!r && tls_flush(c, t, deadline) != REDIS_OK)
        return REDIS_ERR;
    /* A request just sent is not answered yet: wait for the socket before
     * the first read (a read now would only say EAGAIN), unless the
     * session holds bytes already. */
    int fresh = !r && !dm_net_buffered(t);
    while (!r) {
        short ev = POLLIN;
        int k = fresh ? 0 : tls_read_once(c, t, &ev);
        fresh = 0;
        if (k < 0)
            return REDIS_ERR;
        if (k == 0 && tls_wait_io(c, t, ev, deadline) != REDIS_OK)
            return REDIS_ERR;
        if (redisGetReplyFromReader(c, &r) != REDIS_OK)
            return REDIS_ERR;
    }
    if (reply)
        *reply = r;
    else
        freeReplyObject(r);
    return REDIS_OK;
}

/* "<c><n>\r\n" at p; returns the end. */
static char *resp_header(char *p, char c, size_t n)
{
    *p++ = c;
    p += dm_fmt_u64(p, n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

int dm_net_append_argv(redisContext *c, int argc, const char **argv, const size_t *lens)
{
    size_t len[argc > 0 ? argc : 1];
    size_t total = 1 + DM_FMT_U64_MAX + 2;
    for (int i = 0; i < argc; i++) {
        len[i] = lens ? lens[i] : strlen(argv[i]);
        total += 1 + DM_FMT_U64_MAX + 2 + len[i] + 2;
    }
    sds ob = sdsMakeRoomFor(c->obuf, total);
    if (!ob) {
        net_set_ctx_err(c, REDIS_ERR_OOM, "Out of memory");
        return REDIS_ERR;
    }
    c->obuf = ob;
    char *start = ob + sdslen(ob), *p = resp_header(start, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        p = resp_header(p, '$', len[i]);
        memcpy(p, argv[i], len[i]);
        p += len[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    sdsIncrLen(ob, (int)(p - start));
    return REDIS_OK;
}

void *dm_net_command_argv(redisContext *c, struct dm_net *t, int argc, const char **argv,
                          const size_t *lens)
{
    void *r = NULL;
    if (ctx_ok(c) != REDIS_OK || dm_net_append_argv(c, argc, argv, lens) != REDIS_OK)
        return NULL;
    return dm_net_get_reply(c, t, &r) == REDIS_OK ? r : NULL;
}

void *dm_net_vcommand(redisContext *c, struct dm_net *t, const char *fmt, va_list ap)
{
    void *r = NULL;
    if (ctx_ok(c) != REDIS_OK || redisvAppendCommand(c, fmt, ap) != REDIS_OK)
        return NULL;
    return dm_net_get_reply(c, t, &r) == REDIS_OK ? r : NULL;
}

int dm_net_write(redisContext *c, struct dm_net *t, int *done)
{
    if (ctx_ok(c) != REDIS_OK)
        return REDIS_ERR;
    if (!t) {
        struct plain_req q;
        plain_req_start(&q);
        if (plain_flush(c, &q) != REDIS_OK)
            return REDIS_ERR;
    } else if (!tls_usable(c) || tls_flush(c, t, dm_now_ms() + t->timeout_ms) != REDIS_OK) {
        return REDIS_ERR;
    }
    if (done)
        *done = 1;
    return REDIS_OK;
}

int dm_net_read(redisContext *c, struct dm_net *t)
{
    if (ctx_ok(c) != REDIS_OK)
        return REDIS_ERR;
    if (!t)
        return plain_read_now(c);
    if (!tls_usable(c))
        return REDIS_ERR;
    /* One record from the socket, then what the session still holds of
     * it (which poll(2) cannot see); the socket itself is polled again by
     * the caller, so a flood of messages cannot keep this loop going. A
     * wait for a write (a key update) is left to the next call. */
    short ev;
    int k;
    do
        k = tls_read_once(c, t, &ev);
    while (k > 0 && dm_net_buffered(t));
    return k < 0 ? REDIS_ERR : REDIS_OK;
}
