/* faultserver: a misbehaving "Redis" for the fault-injection suite. It
 * listens on a free loopback port, writes that port to PORTFILE once it
 * listens, and serves each connection in a child of its own until killed
 * (a shim opens several: its lock calls' and its renewal thread's).
 *
 *   faultserver half-load PORTFILE
 *       reads a request, writes the first half of a SCRIPT LOAD reply,
 *       closes: the connection dies before the client's scripts are known.
 *   faultserver half-eval PORTFILE
 *       answers SCRIPT LOAD with a made-up SHA1, PING/AUTH/SELECT with +OK;
 *       to EVAL/EVALSHA it writes the first half of a grant
 *       ("*3\r\n:1\r\n:7\r\n:0\r\n") and closes the connection.
 *   faultserver drop-release PORTFILE HOST PORT
 *       a proxy to the real server at HOST:PORT that passes everything
 *       through, except that the reply to the first EVAL/EVALSHA carrying a
 *       ":released" channel (the release script) is swallowed and the
 *       client's connection closed: the release happened, its answer was
 *       lost.
 *   faultserver reply PORTFILE HOST PORT SCRIPT ACTION [N]
 *       a proxy to HOST:PORT that passes everything through except the Nth
 *       (default 1st) call of SCRIPT (acquire, release, renew or cancel, told
 *       apart by their key arguments; "N+": the Nth and every later one),
 *       to which it does ACTION:
 *         drop       the call runs; its reply is swallowed and the client's
 *                    connection closed
 *         delay:MS   the call reaches the server MS ms late, even if the
 *                    client has closed meanwhile (a late copy, as after a
 *                    CLIENT PAUSE); its reply, if anyone still listens
 *         error:TEXT the call runs; the client gets "-TEXT" instead
 *   faultserver slow-accept PORTFILE HOST PORT MS
 *       a proxy to HOST:PORT that passes everything through, but whose
 *       listening socket's accept queue is full for the first MS ms: a
 *       client's SYN is dropped meanwhile and its connect(2) stays in
 *       progress (Linux sends the SYN again after 1 s, 3 s, ...) until the
 *       queue has room. Says "accepting" when it opens the queue.
 *   faultserver noscript PORTFILE
 *       answers SCRIPT LOAD with a made-up SHA1, INFO with a made-up run_id,
 *       anything else but EVALSHA with +OK; to EVALSHA it writes NOSCRIPT
 *       and closes the connection: the server lost its scripts, and the
 *       connection breaks before the script is sent again.
 *   faultserver trickle PORTFILE MS
 *       answers SCRIPT LOAD with a made-up SHA1 and INFO (the connection's
 *       set-up) with a made-up run_id at once, and every other
 *       request with a long bulk string, one byte every MS ms: a reply
 *       that keeps coming, too slowly to ever end within a timeout.
 * Prints one line per event ("half-reply EVALSHA", "dropped release reply",
 * "reply: acquire drop", "reply: acquire delay sent") on stdout. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fdio.h"
#include "keys.h"
#include "prog.h"

#define BUF_MAX 65536
#define MAX_CONN 64
#define TRICKLE_LEN 1000        /* bytes of a trickled reply */

/* A socket listening on a free loopback port with this backlog. */
static int listen_on(int backlog)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = { .sin_family = AF_INET };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(s, backlog) != 0) {
        perror("faultserver: listen");
        exit(1);
    }
    return s;
}

/* Writes the port of `s` to portfile (whole, by rename): clients may come. */
static void tell_port(int s, const char *portfile)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", portfile);
    FILE *f = getsockname(s, (struct sockaddr *)&sa, &len) == 0 ? fopen(tmp, "w") : NULL;
    if (!f || fprintf(f, "%d\n", ntohs(sa.sin_port)) < 0 || fclose(f) != 0 ||
        rename(tmp, portfile) != 0) {
        perror("faultserver: port file");
        exit(1);
    }
}

static int listen_any(const char *portfile)
{
    int s = listen_on(64);
    tell_port(s, portfile);
    return s;
}

/* Parses one RESP request ("*N\r\n$L\r\n...") at buf; returns its length,
 * 0 if incomplete, -1 if malformed. Copies the first two arguments
 * (truncated) into a0 and a1. */
static long parse_request(const char *buf, size_t len, char *a0, char *a1, size_t alen)
{
    a0[0] = a1[0] = 0;
    if (len < 1)
        return 0;
    if (buf[0] != '*')
        return -1;
    const char *p = buf + 1, *end = buf + len;
    char *e;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
        return 0;
    long n = strtol(p, &e, 10);
    p = nl + 1;
    for (long i = 0; i < n; i++) {
        if (p >= end)
            return 0;
        if (*p != '$')
            return -1;
        nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return 0;
        long l = strtol(p + 1, &e, 10);
        p = nl + 1;
        if (end - p < l + 2)
            return 0;
        char *dst = i == 0 ? a0 : i == 1 ? a1 : NULL;
        if (dst) {
            size_t c = (size_t)l < alen - 1 ? (size_t)l : alen - 1;
            memcpy(dst, p, c);
            dst[c] = 0;
        }
        p += l + 2;
    }
    return p - buf;
}

/* The next connection, served by a child of its own: the child returns
 * with it (and ends in client_done), the parent goes on accepting. */
static int in_child;

static int accept_client(int ls)
{
    signal(SIGCHLD, SIG_IGN);   /* no zombies */
    for (;;) {
        int c = accept(ls, NULL, NULL);
        if (c < 0)
            continue;
        pid_t p = fork();
        if (p == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);   /* stopped by pid: its children with it */
            close(ls);
            in_child = 1;
            return c;
        }
        close(c);
    }
}

static void client_done(int c)
{
    close(c);
    if (in_child)
        _exit(0);
}

/* half-load and half-eval: each client in a child of its own. */
static void serve_fake(int ls, int eval_only)
{
    static const char sha[] = "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n";
    static const char grant[] = "*3\r\n:1\r\n:7\r\n:0\r\n";
    for (;;) {
        int c = accept_client(ls);
        char buf[BUF_MAX];
        size_t have = 0;
        int open = 1;
        while (open) {
            ssize_t r = read(c, buf + have, sizeof buf - have);
            if (r <= 0)
                break;
            have += (size_t)r;
            for (;;) {
                char a0[32], a1[32];
                long used = parse_request(buf, have, a0, a1, sizeof a0);
                if (used <= 0) {
                    if (used < 0)
                        open = 0;
                    break;
                }
                memmove(buf, buf + used, have - (size_t)used);
                have -= (size_t)used;
                int is_eval = strcasecmp(a0, "EVALSHA") == 0 || strcasecmp(a0, "EVAL") == 0;
                if (!eval_only || is_eval) {
                    const char *full = is_eval ? grant : sha;
                    fd_write_all(c, full, strlen(full) / 2);
                    say(is_eval ? "half-reply EVAL" : "half-reply SCRIPT");
                    open = 0;
                    break;
                }
                if (strcasecmp(a0, "SCRIPT") == 0)
                    fd_write_all(c, sha, sizeof sha - 1);
                else
                    fd_write_all(c, "+OK\r\n", 5);
            }
        }
        client_done(c);
    }
}

/* noscript: each client in a child of its own; see the usage above. */
static void serve_noscript(int ls)
{
    static const char sha[] = "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n";
    static const char info[] =
        "$59\r\nrun_id:0123456789abcdef0123456789abcdef01234567\r\nuptime:1\r\n\r\n";
    static const char noscript[] = "-NOSCRIPT No matching script. Please use EVAL.\r\n";
    for (;;) {
        int c = accept_client(ls);
        char buf[BUF_MAX];
        size_t have = 0;
        int open = 1;
        while (open) {
            ssize_t r = read(c, buf + have, sizeof buf - have);
            if (r <= 0)
                break;
            have += (size_t)r;
            for (;;) {
                char a0[32], a1[32];
                long used = parse_request(buf, have, a0, a1, sizeof a0);
                if (used <= 0) {
                    if (used < 0)
                        open = 0;
                    break;
                }
                memmove(buf, buf + used, have - (size_t)used);
                have -= (size_t)used;
                if (strcasecmp(a0, "EVALSHA") == 0) {
                    fd_write_all(c, noscript, sizeof noscript - 1);
                    say("noscript EVALSHA");
                    open = 0;
                    break;
                }
                if (strcasecmp(a0, "SCRIPT") == 0)
                    fd_write_all(c, sha, sizeof sha - 1);
                else if (strcasecmp(a0, "INFO") == 0)
                    fd_write_all(c, info, sizeof info - 1);
                else
                    fd_write_all(c, "+OK\r\n", 5);
            }
        }
        client_done(c);
    }
}

/* trickle: each client in a child of its own; see the usage above. */
static void serve_trickle(int ls, long ms)
{
    static const char sha[] = "$40\r\n0123456789abcdef0123456789abcdef01234567\r\n";
    char reply[TRICKLE_LEN + 32];
    int n = snprintf(reply, sizeof reply, "$%d\r\n", TRICKLE_LEN);
    memset(reply + n, 'x', TRICKLE_LEN);
    memcpy(reply + n + TRICKLE_LEN, "\r\n", 2);
    n += TRICKLE_LEN + 2;
    for (;;) {
        int c = accept_client(ls);
        char buf[BUF_MAX];
        size_t have = 0;
        int open = 1;
        while (open) {
            ssize_t r = read(c, buf + have, sizeof buf - have);
            if (r <= 0)
                break;
            have += (size_t)r;
            for (;;) {
                char a0[32], a1[32];
                long used = parse_request(buf, have, a0, a1, sizeof a0);
                if (used <= 0) {
                    if (used < 0)
                        open = 0;
                    break;
                }
                memmove(buf, buf + used, have - (size_t)used);
                have -= (size_t)used;
                if (strcasecmp(a0, "SCRIPT") == 0) {
                    fd_write_all(c, sha, sizeof sha - 1);
                    continue;
                }
                if (strcasecmp(a0, "INFO") == 0) {
                    static const char info[] =
                        "$59\r\nrun_id:0123456789abcdef0123456789abcdef01234567\r\nuptime:1\r\n\r\n";
                    fd_write_all(c, info, sizeof info - 1);
                    continue;
                }
                say("trickle %s", a0);
                for (int i = 0; i < n && open; i++) {
                    struct timespec d = { ms / 1000, (ms % 1000) * 1000000L };
                    nanosleep(&d, NULL);
                    open = send(c, reply + i, 1, MSG_NOSIGNAL) == 1;
                }
                say(open ? "trickle done" : "trickle: the client left");
                open = 0;
                break;
            }
        }
        client_done(c);
    }
}

static int connect_to(const char *host, int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, host, &sa.sin_addr);
    if (connect(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(s);
        return -1;
    }
    return s;
}

/* drop-release: a poll loop over client/server pairs. */
static void serve_proxy(int ls, const char *host, int port)
{
    struct pollfd pf[1 + 2 * MAX_CONN];
    int peer_of[1 + 2 * MAX_CONN];
    int n = 1, dropped = 0;
    pf[0] = (struct pollfd){ ls, POLLIN, 0 };
    for (;;) {
        if (poll(pf, (nfds_t)n, -1) < 0 && errno != EINTR)
            exit(1);
        if ((pf[0].revents & POLLIN) && n + 2 <= 1 + 2 * MAX_CONN) {
            int c = accept(ls, NULL, NULL);
            int s = c >= 0 ? connect_to(host, port) : -1;
            if (c >= 0 && s < 0)
                close(c);
            if (c >= 0 && s >= 0) {
                pf[n] = (struct pollfd){ c, POLLIN, 0 };
                pf[n + 1] = (struct pollfd){ s, POLLIN, 0 };
                peer_of[n] = n + 1;
                peer_of[n + 1] = n;
                n += 2;
            }
        }
        for (int i = 1; i < n; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            int j = peer_of[i];
            char buf[BUF_MAX];
            ssize_t r = read(pf[i].fd, buf, sizeof buf);
            int close_pair = r <= 0;
            if (!close_pair) {
                int client_side = (i % 2) == 1;
                const char *rel = dm_keys_suffix(DM_KEY_RELEASED);
                if (client_side && !dropped && memmem(buf, (size_t)r, "EVAL", 4) &&
                    memmem(buf, (size_t)r, rel, strlen(rel))) {
                    /* Let the release run, swallow its answer. */
                    fd_write_all(pf[j].fd, buf, (size_t)r);
                    struct pollfd w = { pf[j].fd, POLLIN, 0 };
                    if (poll(&w, 1, 2000) > 0) {
                        ssize_t g = read(pf[j].fd, buf, sizeof buf);
                        (void)g;
                    }
                    dropped = 1;
                    say("dropped release reply");
                    close_pair = 1;
                } else {
                    fd_write_all(pf[j].fd, buf, (size_t)r);
                }
            }
            if (close_pair) {
                close(pf[i].fd);
                close(pf[j].fd);
                pf[i].fd = pf[j].fd = -1;
            }
        }
        /* Compact the closed pairs away. */
        int m = 1;
        for (int i = 1; i < n; i += 2) {
            if (pf[i].fd < 0)
                continue;
            pf[m] = pf[i];
            pf[m + 1] = pf[i + 1];
            peer_of[m] = m + 1;
            peer_of[m + 1] = m;
            m += 2;
        }
        n = m;
        for (int i = 0; i < n; i++)
            pf[i].revents = 0;
    }
}

/* ---- reply: one call's reply dropped, delayed or replaced ------------------ */

struct pair {
    int cfd, sfd;               /* client, server; -1 when closed */
    char in[BUF_MAX];           /* client bytes not yet parsed */
    size_t nin;
    char held[BUF_MAX];         /* a delayed call and whatever followed it */
    size_t nheld;
    long long due;              /* when to send held (0: nothing held) */
    int swallow;                /* 1: drop the next reply; 2: replace it */
};

static const char *f_script, *f_action;
static long f_nth = 1, f_seen;
static int f_on;                /* "N+": the Nth call and every one after it */

/* Which script a request calls, from its arguments (EVALSHA SHA NKEYS K1
 * K2...): renew has one key; the others are told apart by their second key,
 * which every version of the scripts has kept (the key names come from
 * shim/redis/keys.c, the one source of the layout). */
static const char *script_of(const char *buf, size_t len)
{
    char a[6][128];
    memset(a, 0, sizeof a);
    const char *p = buf + 1, *end = buf + len;
    long n = strtol(p, NULL, 10);
    p = memchr(p, '\n', (size_t)(end - p)) + 1;
    for (long i = 0; i < n && i < 6; i++) {
        long l = strtol(p + 1, NULL, 10);
        p = memchr(p, '\n', (size_t)(end - p)) + 1;
        size_t c = (size_t)l < sizeof a[i] - 1 ? (size_t)l : sizeof a[i] - 1;
        memcpy(a[i], p, c);
        p += l + 2;
    }
    if (strncasecmp(a[0], "EVAL", 4) != 0)
        return NULL;
    long nk = atol(a[2]);
    size_t k2 = strlen(a[4]);
    static const struct { enum dm_key key; const char *script; } by_key2[] = {
        { DM_KEY_TOKEN, "acquire" }, { DM_KEY_HOLDER, "release" }, { DM_KEY_QUEUE, "cancel" },
    };
    if (nk == 1)
        return "renew";
    for (size_t i = 0; nk > 1 && i < sizeof by_key2 / sizeof by_key2[0]; i++) {
        const char *suffix = dm_keys_suffix(by_key2[i].key);
        size_t n = strlen(suffix);
        if (k2 >= n && strcmp(a[4] + k2 - n, suffix) == 0)
            return by_key2[i].script;
    }
    return NULL;
}

static void close_pair(struct pair *p)
{
    if (p->cfd >= 0)
        close(p->cfd);
    if (p->sfd >= 0 && !p->due)
        close(p->sfd), p->sfd = -1;
    p->cfd = -1;
}

/* Client bytes: forward whole requests, acting on the chosen one. */
static void from_client(struct pair *p)
{
    for (;;) {
        char a0[8], a1[8];
        long used = parse_request(p->in, p->nin, a0, a1, sizeof a0);
        if (used <= 0)
            break;
        const char *sc = script_of(p->in, (size_t)used);
        int act = sc && strcmp(sc, f_script) == 0 &&
                  (++f_seen == f_nth || (f_on && f_seen > f_nth));
        if (p->due) {
            memcpy(p->held + p->nheld, p->in, (size_t)used);    /* keep the order */
            p->nheld += (size_t)used;
        } else if (act && strncmp(f_action, "delay:", 6) == 0) {
            memcpy(p->held, p->in, (size_t)used);
            p->nheld = (size_t)used;
            p->due = now_ms() + atol(f_action + 6);
            say("reply: delay held");
        } else {
            if (act)
                p->swallow = strcmp(f_action, "drop") == 0 ? 1 : 2;
            fd_write_all(p->sfd, p->in, (size_t)used);
        }
        memmove(p->in, p->in + used, p->nin - (size_t)used);
        p->nin -= (size_t)used;
    }
}

static void serve_reply(int ls, const char *host, int port)
{
    static struct pair pairs[MAX_CONN];
    for (int i = 0; i < MAX_CONN; i++)
        pairs[i].cfd = pairs[i].sfd = -1;
    for (;;) {
        struct pollfd pf[1 + 2 * MAX_CONN];
        int who[1 + 2 * MAX_CONN], n = 1;
        long long now = now_ms(), wait = 1000;
        pf[0] = (struct pollfd){ ls, POLLIN, 0 };
        for (int i = 0; i < MAX_CONN; i++) {
            struct pair *p = &pairs[i];
            if (p->due && p->due <= now) {
                fd_write_all(p->sfd, p->held, p->nheld);
                p->due = 0;
                p->nheld = 0;
                say("reply: delay sent");
            }
            if (p->due && p->due - now < wait)
                wait = p->due - now;
            if (p->cfd >= 0) {
                pf[n] = (struct pollfd){ p->cfd, POLLIN, 0 };
                who[n++] = i;
            }
            if (p->sfd >= 0) {
                pf[n] = (struct pollfd){ p->sfd, POLLIN, 0 };
                who[n++] = i + MAX_CONN;
            }
        }
        if (poll(pf, (nfds_t)n, (int)wait) < 0 && errno != EINTR)
            exit(1);
        if (pf[0].revents & POLLIN) {
            int c = accept(ls, NULL, NULL);
            int s = c >= 0 ? connect_to(host, port) : -1;
            int slot = -1;
            for (int i = 0; i < MAX_CONN && slot < 0; i++)
                if (pairs[i].cfd < 0 && pairs[i].sfd < 0)
                    slot = i;
            if (c >= 0 && (s < 0 || slot < 0)) {
                close(c);
                if (s >= 0)
                    close(s);
            } else if (c >= 0) {
                memset(&pairs[slot], 0, sizeof pairs[slot]);
                pairs[slot].cfd = c;
                pairs[slot].sfd = s;
            }
        }
        for (int k = 1; k < n; k++) {
            if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            struct pair *p = &pairs[who[k] % MAX_CONN];
            int client = who[k] < MAX_CONN;
            if (client && p->cfd < 0)
                continue;
            if (!client && p->sfd < 0)
                continue;
            char buf[BUF_MAX];
            if (client) {
                ssize_t r = read(p->cfd, p->in + p->nin, sizeof p->in - p->nin);
                if (r <= 0) {
                    close_pair(p);      /* a held call still goes out when due */
                    continue;
                }
                p->nin += (size_t)r;
                from_client(p);
                continue;
            }
            ssize_t r = read(p->sfd, buf, sizeof buf);
            if (r <= 0) {
                if (p->cfd >= 0)
                    close(p->cfd);
                close(p->sfd);
                p->cfd = p->sfd = -1;
                continue;
            }
            if (p->swallow == 1) {
                say("reply: dropped");
                p->swallow = 0;
                close(p->cfd);
                close(p->sfd);
                p->cfd = p->sfd = -1;
            } else if (p->swallow == 2) {
                char e[300];
                int m = snprintf(e, sizeof e, "-%s\r\n", f_action + 6);
                p->swallow = 0;
                if (p->cfd >= 0)
                    fd_write_all(p->cfd, e, (size_t)m);
                say("reply: replaced by an error");
            } else if (p->cfd >= 0) {
                fd_write_all(p->cfd, buf, (size_t)r);
            } else if (!p->due) {
                close(p->sfd);          /* the late call's reply: nobody listens */
                p->sfd = -1;
            }
        }
    }
}

/* slow-accept: the queue of `ls` is made full (backlog 0 holds one
 * connection, our own), kept so for `ms`, then emptied and widened; from
 * then on a pass-through proxy (serve_reply acting on no script). */
static void serve_slow_accept(const char *portfile, const char *host, int port, long ms)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int ls = listen_on(0);
    int own = socket(AF_INET, SOCK_STREAM, 0);
    if (getsockname(ls, (struct sockaddr *)&sa, &len) != 0 || own < 0 ||
        connect(own, (struct sockaddr *)&sa, len) != 0) {
        perror("faultserver: slow-accept");
        exit(1);
    }
    tell_port(ls, portfile);
    long long until = now_ms() + ms;
    while (now_ms() < until)
        usleep(10000);
    int c = accept(ls, NULL, NULL);     /* ours: the first in the queue */
    close(c);
    close(own);
    listen(ls, 64);
    say("accepting");
    f_script = "none";
    f_action = "drop";
    serve_reply(ls, host, port);
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "half-load") == 0)
        serve_fake(listen_any(argv[2]), 0);
    else if (argc >= 3 && strcmp(argv[1], "half-eval") == 0)
        serve_fake(listen_any(argv[2]), 1);
    else if (argc >= 5 && strcmp(argv[1], "drop-release") == 0)
        serve_proxy(listen_any(argv[2]), argv[3], atoi(argv[4]));
    else if (argc >= 7 && strcmp(argv[1], "reply") == 0) {
        f_script = argv[5];
        f_action = argv[6];
        f_nth = argc >= 8 ? atol(argv[7]) : 1;
        f_on = argc >= 8 && argv[7][strlen(argv[7]) - 1] == '+';
        serve_reply(listen_any(argv[2]), argv[3], atoi(argv[4]));
    }
    else if (argc >= 6 && strcmp(argv[1], "slow-accept") == 0)
        serve_slow_accept(argv[2], argv[3], atoi(argv[4]), atol(argv[5]));
    else if (argc >= 4 && strcmp(argv[1], "trickle") == 0)
        serve_trickle(listen_any(argv[2]), atol(argv[3]));
    else if (argc >= 3 && strcmp(argv[1], "noscript") == 0)
        serve_noscript(listen_any(argv[2]));
    fprintf(stderr, "usage: faultserver half-load|half-eval PORTFILE | "
                    "drop-release PORTFILE HOST PORT | "
                    "reply PORTFILE HOST PORT acquire|release|renew|cancel "
                    "drop|delay:MS|error:TEXT [N] | slow-accept PORTFILE HOST PORT MS | "
                    "trickle PORTFILE MS | noscript PORTFILE\n");
    return 2;
}
