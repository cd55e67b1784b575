/* trace_routes: a global pthread_rwlock_t whose name says nothing of a
 * lock (g_routes), for tests/trace.test.sh: `dmutex trace` must find it by
 * its calls alone and print an rwlocks entry for it, and that entry pasted
 * into a config must make the program's two keys consistent across
 * processes.
 *
 *   trace_routes HOST PORT PREFIX WRITES READERS READS [HOLD_US]
 * One writer thread does WRITES updates under the write lock: PREFIX:a and
 * PREFIX:b of a redis-server both + 1, a sleep of HOLD_US between them.
 * READERS threads each do READS checks under the read lock: GET a, sleep
 * HOLD_US, GET b; a difference is a torn read. Prints "torn N". */
#define _GNU_SOURCE
#include "prog.h"

pthread_rwlock_t g_routes = PTHREAD_RWLOCK_INITIALIZER;

static const char *host, *prefix;
static int port, writes, reads, hold_us;
static long torn;

static long long get_int(redisContext *c, const char *key)
{
    redisReply *r = redisCommand(c, "GET %s:%s", prefix, key);
    if (!r) {
        say("redis: %s", c->errstr);
        exit(1);
    }
    long long v = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
    freeReplyObject(r);
    return v;
}

static void set_int(redisContext *c, const char *key, long long v)
{
    redisReply *r = redisCommand(c, "SET %s:%s %lld", prefix, key, v);
    if (!r) {
        say("redis: %s", c->errstr);
        exit(1);
    }
    freeReplyObject(r);
}

static void *writer(void *arg)
{
    (void)arg;
    redisContext *c = prog_connect(host, port);
    for (int i = 0; i < writes; i++) {
        pthread_rwlock_wrlock(&g_routes);
        set_int(c, "a", get_int(c, "a") + 1);
        usleep((useconds_t)hold_us);
        set_int(c, "b", get_int(c, "b") + 1);
        pthread_rwlock_unlock(&g_routes);
        usleep((useconds_t)hold_us);    /* room for the readers */
    }
    redisFree(c);
    return NULL;
}

static void *reader(void *arg)
{
    (void)arg;
    redisContext *c = prog_connect(host, port);
    for (int i = 0; i < reads; i++) {
        pthread_rwlock_rdlock(&g_routes);
        long long a = get_int(c, "a");
        usleep((useconds_t)hold_us);
        long long b = get_int(c, "b");
        pthread_rwlock_unlock(&g_routes);
        if (a != b)
            __atomic_add_fetch(&torn, 1, __ATOMIC_RELAXED);
    }
    redisFree(c);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: trace_routes HOST PORT PREFIX WRITES READERS READS [HOLD_US]\n");
        return 2;
    }
    host = argv[1];
    port = atoi(argv[2]);
    prefix = argv[3];
    writes = atoi(argv[4]);
    int nreaders = atoi(argv[5]);
    reads = atoi(argv[6]);
    hold_us = argc > 7 ? atoi(argv[7]) : 0;
    pthread_t w;
    if (pthread_create(&w, NULL, writer, NULL) != 0)
        return 1;
    prog_run_threads(nreaders, reader, NULL);
    pthread_join(w, NULL);
    say("torn %ld", torn);
    return 0;
}
