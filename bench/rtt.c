/* rtt: the round trips the lock figures are measured against, from a C
 * hiredis client as the shim uses.
 *
 *   rtt ping HOST PORT N GAP_US
 *       N PINGs, each after sleeping GAP_US (0: back to back).
 *   rtt notice HOST PORT N GAP_US
 *       A forked subscriber blocks on a channel; the parent PUBLISHes the
 *       send time N times, GAP_US apart. Measures publish -> the blocked
 *       subscriber's read returning: the floor of any handoff that wakes a
 *       waiter with a notice.
 *   rtt notice_thread HOST PORT N GAP_US
 *       The same, but the subscriber's reading thread hands each message
 *       to a second thread asleep on a condition variable, and the time is
 *       taken when that thread wakes: a notice's delivery plus the wake-up
 *       of the thread that waits for it, as a lock waiter of the shim is
 *       woken by its process's subscriber thread.
 * Prints {"p50_us": x, "p90_us": y, "mean_us": z}.
 *
 * Why a gap: on a virtual machine an idle vCPU halts, and waking it costs
 * far more than a round trip between two busy processes. A lock waiter
 * has slept through the holder's critical section, so its wake-up pays
 * that; a back-to-back PING loop never does. */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define CHANNEL "dmutex-bench:rtt"
#define SUBSCRIBER_SETTLE_US 200000

static void sleep_us(long us)
{
    if (us <= 0)
        return;
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

static void print_stats(long long *d, int n)
{
    long long sum = 0;
    for (int i = 0; i < n; i++)
        sum += d[i];
    qsort(d, (size_t)n, sizeof *d, cmp_ll);
    printf("{\"p50_us\": %.1f, \"p90_us\": %.1f, \"mean_us\": %.1f}\n", d[n / 2] / 1e3,
           d[n * 9 / 10] / 1e3, (double)sum / n / 1e3);
}

static void command_or_die(redisContext *c, const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(c, fmt, arg);
    if (!r) {
        fprintf(stderr, "rtt: %s\n", c->errstr);
        exit(1);
    }
    freeReplyObject(r);
}

/* notice_thread: the reading thread stores each message's send time in
 * sent[i] and counts it; the waiting thread sleeps until the count passes
 * the message it is at. */
struct handoff {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long long *sent;
    int n, got, failed;
    redisContext *c;
};

static void *reader(void *p)
{
    struct handoff *h = p;
    for (int i = 0; i < h->n; i++) {
        redisReply *r;
        long long sent = -1;
        if (redisGetReply(h->c, (void **)&r) == REDIS_OK) {
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 3)
                sent = atoll(r->element[2]->str);
            freeReplyObject(r);
        }
        pthread_mutex_lock(&h->mu);
        if (sent < 0)
            h->failed = 1;
        else
            h->sent[h->got++] = sent;
        pthread_cond_signal(&h->cv);
        pthread_mutex_unlock(&h->mu);
        if (sent < 0)
            break;
    }
    return NULL;
}

/* The subscriber of notice_thread: a reading thread, and this one asleep
 * until it is handed a message. Fills d[0..n). Returns 0, or -1. */
static int subscriber_threaded(redisContext *c, long long *d, int n)
{
    struct handoff h = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, d, n, 0, 0, c };
    pthread_t t;
    if (pthread_create(&t, NULL, reader, &h) != 0)
        return -1;
    int rc = 0;
    pthread_mutex_lock(&h.mu);
    for (int i = 0; i < n; i++) {
        while (h.got <= i && !h.failed)
            pthread_cond_wait(&h.cv, &h.mu);
        long long now = now_ns();
        if (h.got <= i) {
            rc = -1;
            break;
        }
        d[i] = now - d[i];
    }
    pthread_mutex_unlock(&h.mu);
    pthread_join(t, NULL);
    return rc;
}

int main(int argc, char **argv)
{
    int threaded = argc > 1 && strcmp(argv[1], "notice_thread") == 0;
    if (argc != 6 || (strcmp(argv[1], "ping") != 0 && strcmp(argv[1], "notice") != 0 &&
                      !threaded) || atoi(argv[4]) < 1) {
        fprintf(stderr, "usage: rtt ping|notice|notice_thread HOST PORT N GAP_US\n");
        return 2;
    }
    const char *host = argv[2];
    int port = atoi(argv[3]), n = atoi(argv[4]);
    long gap = atol(argv[5]);
    long long *d = malloc((size_t)n * sizeof *d);
    if (!d)
        return 1;

    if (strcmp(argv[1], "ping") == 0) {
        redisContext *c = connect_or_die("rtt", host, port);
        for (int i = 0; i < n; i++) {
            sleep_us(gap);
            long long t = now_ns();
            command_or_die(c, "PING", NULL);
            d[i] = now_ns() - t;
        }
        print_stats(d, n);
        return 0;
    }

    int pipefd[2];
    if (pipe(pipefd) != 0)
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        redisContext *c = connect_or_die("rtt", host, port);
        command_or_die(c, "SUBSCRIBE %s", CHANNEL);
        if (threaded && subscriber_threaded(c, d, n) != 0)
            _exit(1);
        for (int i = 0; i < n && !threaded; i++) {
            redisReply *r;
            if (redisGetReply(c, (void **)&r) != REDIS_OK)
                _exit(1);
            long long t = now_ns();
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 3)
                d[i] = t - atoll(r->element[2]->str);
            freeReplyObject(r);
        }
        if (write(pipefd[1], d, (size_t)n * sizeof *d) < 0)
            _exit(1);
        _exit(0);
    }
    redisContext *c = connect_or_die("rtt", host, port);
    sleep_us(SUBSCRIBER_SETTLE_US);
    for (int i = 0; i < n; i++) {
        sleep_us(gap);
        char t[32];
        snprintf(t, sizeof t, "%lld", now_ns());
        redisReply *r = redisCommand(c, "PUBLISH %s %s", CHANNEL, t);
        if (!r)
            return 1;
        freeReplyObject(r);
    }
    size_t got = 0, want = (size_t)n * sizeof *d;
    while (got < want) {
        ssize_t k = read(pipefd[0], (char *)d + got, want - got);
        if (k <= 0)
            return 1;
        got += (size_t)k;
    }
    waitpid(pid, NULL, 0);
    print_stats(d, n);
    return 0;
}
