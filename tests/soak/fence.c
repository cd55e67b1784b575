/* soakfence: the fenced resource of `make soak`. A unix SOCK_SEQPACKET
 * server (a path, so the workers of every network namespace reach it, and
 * a partition never cuts them off from it) that keeps, per lock name, the
 * highest fencing token it accepted. A write "w LOCK TOKEN PID TID SENT_NS"
 * is accepted when TOKEN is at least that highest (equal: threads of one
 * process share a grant's token) and rejected when it is lower, or 0 (a
 * write without a token: a hold that Redis never granted) once a token was
 * seen. Every write is logged, one line each (-o):
 *
 *   NS ok LOCK TOKEN HIGHEST_BEFORE PID TID SENT_NS
 *   NS rej LOCK TOKEN HIGHEST PID TID SENT_NS
 *
 * NS is CLOCK_MONOTONIC in nanoseconds, when the write was decided. The
 * reply is "ok" or "rej HIGHEST". Never faulted by the nemesis; stops on
 * SIGTERM or SIGINT.
 *
 *   soakfence -s SOCK -o LOG */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS 512
#define MAX_LOCKS 64

static volatile sig_atomic_t stopping;
static void on_stop(int sig) { (void)sig; stopping = 1; }

static struct { char name[64]; uint64_t highest; } lock_tab[MAX_LOCKS];
static int nlocks;

static uint64_t *highest_of(const char *name)
{
    for (int i = 0; i < nlocks; i++)
        if (strcmp(lock_tab[i].name, name) == 0)
            return &lock_tab[i].highest;
    if (nlocks == MAX_LOCKS)
        return NULL;
    snprintf(lock_tab[nlocks].name, sizeof lock_tab[nlocks].name, "%s", name);
    return &lock_tab[nlocks++].highest;
}

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void put(int fd, const char *s, size_t n)
{
    if (write(fd, s, n) != (ssize_t)n) {
        perror("soakfence: log");
        exit(1);
    }
}

/* One request: decide, log, answer. */
static void serve(int cfd, int log_fd, char *msg)
{
    char name[64];
    unsigned long long token;
    int pid, tid;
    long long sent;
    char line[256], reply[64];
    if (sscanf(msg, "w %63s %llu %d %d %lld", name, &token, &pid, &tid, &sent) != 5) {
        send(cfd, "bad", 3, MSG_NOSIGNAL);
        return;
    }
    uint64_t *h = highest_of(name);
    if (!h) {
        send(cfd, "bad", 3, MSG_NOSIGNAL);
        return;
    }
    int n, r;
    if (token >= *h && !(token == 0 && *h != 0)) {
        n = snprintf(line, sizeof line, "%lld ok %s %llu %llu %d %d %lld\n", mono_ns(), name,
                     token, (unsigned long long)*h, pid, tid, sent);
        *h = token;
        r = snprintf(reply, sizeof reply, "ok");
    } else {
        n = snprintf(line, sizeof line, "%lld rej %s %llu %llu %d %d %lld\n", mono_ns(), name,
                     token, (unsigned long long)*h, pid, tid, sent);
        r = snprintf(reply, sizeof reply, "rej %llu", (unsigned long long)*h);
    }
    put(log_fd, line, (size_t)n);
    send(cfd, reply, (size_t)r, MSG_NOSIGNAL);
}

int main(int argc, char **argv)
{
    const char *sock = NULL, *log_path = NULL;
    int ch;
    while ((ch = getopt(argc, argv, "s:o:")) != -1) {
        if (ch == 's')
            sock = optarg;
        else if (ch == 'o')
            log_path = optarg;
        else
            return 2;
    }
    if (!sock || !log_path) {
        fprintf(stderr, "usage: soakfence -s SOCK -o LOG\n");
        return 2;
    }
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    unlink(sock);
    if (log_fd < 0 || lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(lfd, 128) != 0) {
        fprintf(stderr, "soakfence: %s: %s\n", sock, strerror(errno));
        return 1;
    }
    struct sigaction sa = { .sa_handler = on_stop };
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    static struct pollfd p[MAX_CLIENTS + 1];
    int n = 1;
    p[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
    while (!stopping) {
        if (poll(p, (nfds_t)n, 500) < 0) {
            if (errno == EINTR)
                continue;
            perror("soakfence: poll");
            return 1;
        }
        for (int i = n - 1; i >= 1; i--) {
            if (!p[i].revents)
                continue;
            char msg[256];
            ssize_t got = recv(p[i].fd, msg, sizeof msg - 1, 0);
            if (got <= 0) {
                close(p[i].fd);
                p[i] = p[--n];
                continue;
            }
            msg[got] = '\0';
            serve(p[i].fd, log_fd, msg);
        }
        if (p[0].revents & POLLIN) {
            int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (cfd >= 0 && n <= MAX_CLIENTS)
                p[n++] = (struct pollfd){ .fd = cfd, .events = POLLIN };
            else if (cfd >= 0)
                close(cfd);
        }
    }
    unlink(sock);
    return 0;
}
