/* faultworker: the program the fault-injection suite (tests/test_faults.c)
 * runs on its "machines". It is an ordinary pthread program: its global
 * mutexes become cluster-wide only through the config the suite writes.
 *
 * Every critical section reports itself to the exclusion checker
 * (checkclient.h: entry, a write fenced by the section's token, exit). The
 * fencing token comes from dmutex_token(), looked up with
 * dlsym(RTLD_DEFAULT) so that the same binary runs without the shim (token
 * 0: every write is accepted, and the checker sees the races).
 *
 *   faultworker MODE [options]
 *   modes:
 *     loop      each thread runs sections until -d MS or -n N; prints
 *               "done SECTIONS LOCKERR UNLOCKERR" and exits 0
 *     once OP   one section in thread 0: OP is lock, try, or timed:MS;
 *               prints "OP RC MS" when the lock call returns, "inside TOKEN
 *               MONO_MS REAL_MS", "fenced ok|rejected TOKEN" and "unlocked RC"
 *     cycles N  N lock/unlock of the first lock, no checker; prints
 *               "rss KB_AT_10% KB_AT_END MS"
 *     idle      prints "main" and exits 0 (bad-config tests)
 *   options:
 *     -s SOCK   checker unix socket     -k PREFIX  checker key prefix
 *     -t N      threads (loop)          -n N       sections per thread (loop)
 *     -d MS     run time (loop)         -u US      time inside each section
 *     -g FILE   (once) stay inside until FILE exists
 *     -G FILE   (once) after the unlock, stay (and print "stayed") until FILE exists
 *     -A        (once) then lock again: a second section ("again OP RC MS",
 *               "inside ...", "fenced ...", "unlocked RC" once more)
 *     -S FILE   (once -A) after the second lock call (and its section, if
 *               any), stay (and print "stayed again") until FILE exists
 *     -a N      (loop) use named_lock[0..N) instead, picked at random (N <= 256)
 *     -l N      use the first N locks of fault_lock, fair_lock, cache_lock,
 *               picked at random per section (loop; default 1)
 *     -r        make fault_lock robust: EOWNERDEAD is reported as "ownerdead"
 *     -c        also count: each section reads PREFIX:L:counter from the
 *               checker, waits, and writes it back plus one (a non-atomic
 *               increment: a lost update shows as a count below the sections)
 *
 * Every line is one write(2), so lines of several processes appended to one
 * file keep their order. Times: MONO_MS CLOCK_MONOTONIC, REAL_MS
 * CLOCK_REALTIME (to compare with the server's PEXPIRETIME). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkclient.h"
#include "prog.h"

#define MAX_THREADS 64
#define NLOCKS 3
#define RETRY_US 20000          /* after a failed lock call, in loop mode */

pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t fair_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
/* Bad-input targets: an object too small to be a mutex, a second name for
 * fault_lock, and an array whose elements can be named two ways. */
char tiny_obj[8];
extern pthread_mutex_t alias_lock __attribute__((alias("fault_lock")));
pthread_mutex_t lock_array[2] = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER };

static pthread_mutex_t *const locks[NLOCKS] = { &fault_lock, &fair_lock, &cache_lock };
/* Many names (the Redis Cluster test maps each element under its own
 * name, so that the names spread over every shard): -a N. */
#define NAMED_MAX 256
pthread_mutex_t named_lock[NAMED_MAX];
static int nnamed;

static pthread_mutex_t *lock_of(int i)
{
    return nnamed ? &named_lock[i] : locks[i];
}

static const char *sock_path, *prefix = "chk", *gofile, *stayfile, *stay2file;
static int again;
static int nthreads = 1, nlocks = 1, robust, count;
static long per_thread, run_ms, hold_us = 1000;
static long long stop_at;
static uint64_t (*token_fn)(pthread_mutex_t *);

static redisContext *checker(void)
{
    return chk_connect(sock_path);
}

/* The body of one critical section, the lock already held. Returns the
 * unlock's result. `loud`: print each step (once mode). */
static int section(redisContext *c, int lock, const char *id, int loud)
{
    pthread_mutex_t *m = lock_of(lock);
    struct chk_keys k;
    chk_keys_make(&k, prefix, lock);
    uint64_t tok = token_fn ? token_fn(m) : 0;
    char tokbuf[24];
    snprintf(tokbuf, sizeof tokbuf, "%llu", (unsigned long long)tok);
    chk_enter(c, &k, id);
    long long seen = -1;
    char counter[160];
    snprintf(counter, sizeof counter, "%s:%d:counter", prefix, lock);
    if (count) {
        redisReply *r = redisCommand(c, "GET %s", counter);
        if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_NIL))
            chk_fail("GET counter", r ? "bad reply" : c->errstr);
        seen = r->type == REDIS_REPLY_STRING ? atoll(r->str) : 0;
        freeReplyObject(r);
    }
    if (loud)
        say("inside %s %lld %lld", tokbuf, clock_ms(CLOCK_MONOTONIC), clock_ms(CLOCK_REALTIME));
    if (gofile)
        wait_file(gofile);
    else if (hold_us)
        usleep((useconds_t)hold_us);
    if (count) {
        redisReply *r = redisCommand(c, "SET %s %lld", counter, seen + 1);
        if (!r || r->type != REDIS_REPLY_STATUS)
            chk_fail("SET counter", r ? "bad reply" : c->errstr);
        freeReplyObject(r);
    }
    long long ok = chk_fence(c, &k, tok);
    if (loud)
        say("fenced %s %s", ok ? "ok" : "rejected", tokbuf);
    chk_leave(c, &k, id);
    int rc = pthread_mutex_unlock(m);
    if (rc != 0) {
        say("unlock %s token %s", ename(rc), tokbuf);
        chk_count_unlock_error(c, &k);
    }
    if (loud)
        say("unlocked %s %lld", ename(rc), clock_ms(CLOCK_MONOTONIC));
    return rc;
}

static int take(pthread_mutex_t *m, const char *op)
{
    if (strcmp(op, "try") == 0)
        return pthread_mutex_trylock(m);
    if (strncmp(op, "timed:", 6) == 0) {
        long ms = atol(op + 6);
        struct timespec dl = deadline_in(CLOCK_REALTIME, ms);
        return pthread_mutex_timedlock(m, &dl);
    }
    return pthread_mutex_lock(m);
}

/* A lock result the section may go on with; EOWNERDEAD is made consistent. */
static int usable(pthread_mutex_t *m, int rc, int loud)
{
    if (rc == EOWNERDEAD) {
        if (loud)
            say("ownerdead");
        pthread_mutex_consistent(m);
        return 1;
    }
    return rc == 0;
}

struct tstate {
    int index;
    long sections, lockerr, unlockerr;
};

static void *loop_thread(void *arg)
{
    struct tstate *ts = arg;
    redisContext *c = checker();
    char id[32];
    snprintf(id, sizeof id, "%d.%d", (int)getpid(), ts->index);
    unsigned seed = (unsigned)getpid() * 31u + (unsigned)ts->index;
    while ((per_thread == 0 || ts->sections < per_thread) &&
           (run_ms == 0 || clock_ms(CLOCK_MONOTONIC) < stop_at)) {
        int n = nnamed ? nnamed : nlocks;
        int lock = n > 1 ? (int)(rand_r(&seed) % (unsigned)n) : 0;
        int rc = pthread_mutex_lock(lock_of(lock));
        if (!usable(lock_of(lock), rc, 0)) {
            if (ts->lockerr++ == 0)
                say("lock %s", ename(rc));
            usleep(RETRY_US);
            continue;
        }
        if (section(c, lock, id, 0) != 0)
            ts->unlockerr++;
        ts->sections++;
    }
    redisFree(c);
    return NULL;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

static int usage(void)
{
    fprintf(stderr, "usage: faultworker loop|once OP|cycles N|idle [-s SOCK] [-k PREFIX] [-t N]"
                    " [-n N] [-d MS] [-u US] [-g FILE] [-G FILE] [-A] [-S FILE] [-l N] [-a N] [-r] [-c]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    const char *mode = argv[1], *marg = NULL;
    int first = 2;
    if (strcmp(mode, "once") == 0 || strcmp(mode, "cycles") == 0) {
        if (argc < 3)
            return usage();
        marg = argv[2];
        first = 3;
    }
    optind = first;
    int ch;
    while ((ch = getopt(argc, argv, "s:k:t:n:d:u:g:G:AS:l:a:rc")) != -1) {
        switch (ch) {
        case 's': sock_path = optarg; break;
        case 'k': prefix = optarg; break;
        case 't': nthreads = atoi(optarg); break;
        case 'n': per_thread = atol(optarg); break;
        case 'd': run_ms = atol(optarg); break;
        case 'u': hold_us = atol(optarg); break;
        case 'g': gofile = optarg; break;
        case 'G': stayfile = optarg; break;
        case 'A': again = 1; break;
        case 'S': stay2file = optarg; break;
        case 'l': nlocks = atoi(optarg); break;
        case 'a': nnamed = atoi(optarg); break;
        case 'r': robust = 1; break;
        case 'c': count = 1; break;
        default: return usage();
        }
    }
    if (nthreads < 1 || nthreads > MAX_THREADS || nlocks < 1 || nlocks > NLOCKS ||
        nnamed < 0 || nnamed > NAMED_MAX)
        return usage();
    say("main");
    *(void **)&token_fn = dlsym(RTLD_DEFAULT, "dmutex_token");
    if (robust) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&fault_lock, &a);
        pthread_mutexattr_destroy(&a);
    }

    if (strcmp(mode, "idle") == 0)
        return 0;
    if (strcmp(mode, "cycles") == 0) {
        long n = atol(marg), tenth = n / 10, at10 = 0;
        long long t0 = clock_ms(CLOCK_MONOTONIC);
        for (long i = 0; i < n; i++) {
            if (i == tenth)
                at10 = rss_kb();
            int rc = pthread_mutex_lock(&fault_lock);
            if (rc != 0) {
                say("lock %s at %ld", ename(rc), i);
                return 1;
            }
            if ((rc = pthread_mutex_unlock(&fault_lock)) != 0) {
                say("unlock %s at %ld", ename(rc), i);
                return 1;
            }
        }
        say("rss %ld %ld %lld", at10, rss_kb(), clock_ms(CLOCK_MONOTONIC) - t0);
        return 0;
    }
    if (!sock_path)
        return usage();
    if (strcmp(mode, "once") == 0) {
        redisContext *c = checker();
        char id[32];
        snprintf(id, sizeof id, "%d.0", (int)getpid());
        long long t0 = clock_ms(CLOCK_MONOTONIC);
        int rc = take(&fault_lock, marg);
        say("%s %s %lld", marg, ename(rc), clock_ms(CLOCK_MONOTONIC) - t0);
        if (usable(&fault_lock, rc, 1))
            section(c, 0, id, 1);
        redisFree(c);
        if (stayfile) {
            wait_file(stayfile);
            say("stayed");
        }
        if (again) {
            c = checker();
            t0 = clock_ms(CLOCK_MONOTONIC);
            rc = take(&fault_lock, marg);
            say("again %s %s %lld", marg, ename(rc), clock_ms(CLOCK_MONOTONIC) - t0);
            if (usable(&fault_lock, rc, 1))
                section(c, 0, id, 1);
            redisFree(c);
            if (stay2file) {
                wait_file(stay2file);
                say("stayed again");
            }
        }
        return 0;
    }
    if (strcmp(mode, "loop") != 0)
        return usage();
    stop_at = clock_ms(CLOCK_MONOTONIC) + run_ms;
    pthread_t t[MAX_THREADS];
    struct tstate ts[MAX_THREADS];
    for (int i = 0; i < nthreads; i++) {
        ts[i] = (struct tstate){ .index = i };
        pthread_create(&t[i], NULL, loop_thread, &ts[i]);
    }
    long sections = 0, lockerr = 0, unlockerr = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(t[i], NULL);
        sections += ts[i].sections;
        lockerr += ts[i].lockerr;
        unlockerr += ts[i].unlockerr;
    }
    say("done %ld %ld %ld", sections, lockerr, unlockerr);
    return 0;
}
