/* stock: an ordinary multi-threaded seller that knows nothing of dmutex.
 *
 * Every thread sells items from one stock counter kept in Redis, guarded by
 * the global stock_lock: lock, GET, check, SET value-1, unlock. The
 * read-check-write is deliberately not atomic on the Redis side; the mutex is
 * all that makes it correct. Within one process it is. Two processes (two
 * machines) each have their own stock_lock, so together they oversell --
 * unless stock_lock is made cluster-wide, e.g. with
 *
 *   LD_PRELOAD=build/libdmutex.so DMUTEX_CONFIG=config/demo.cfg build/stock
 *
 * With -g the seller connects, then waits for an item on a Redis list, so a
 * driver (demo/run.sh) can start sellers on several machines at the same
 * moment. At the end the seller adds its sales to demo:sold:<seller> and
 * prints one line. Exit status: 0 done, 1 Redis error, 2 usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STOCK_THREADS_DEFAULT 8
#define STOCK_THREADS_MAX 1024
#define STOCK_HOST_DEFAULT "127.0.0.1"
#define STOCK_PORT_DEFAULT 6379
#define STOCK_KEY_DEFAULT "demo:stock"
#define STOCK_SOLD_PREFIX "demo:sold:"
#define STOCK_CONNECT_TIMEOUT_S 5
/* A single GET or SET; waiting for the lock is not a Redis command here. */
#define STOCK_COMMAND_TIMEOUT_S 10

/* The mutex the demo maps by name: keep it global and non-static. */
pthread_mutex_t stock_lock = PTHREAD_MUTEX_INITIALIZER;

struct seller {
    pthread_t tid;
    redisContext *redis;
    long sales;
    char error[256];        /* empty unless this thread stopped on an error */
};

static const char *opt_host = STOCK_HOST_DEFAULT;
static int opt_port = STOCK_PORT_DEFAULT;
static const char *opt_key = STOCK_KEY_DEFAULT;
static const char *opt_gate;  /* list to BLPOP before selling, or NULL */
static const char *opt_password;
static atomic_bool failed;  /* one thread failed: the others stop too */
static pthread_barrier_t start_line;

static void usage(FILE *out)
{
    fprintf(out,
        "usage: stock [-t THREADS] [-h HOST] [-p PORT] [-k KEY] [-s SELLER] [-g GATE]\n"
        "             [-a PASSWORD]\n"
        "\n"
        "Sells items from a stock counter in Redis with THREADS threads, each\n"
        "doing: lock stock_lock; GET KEY; stop if <= 0; SET KEY value-1; unlock.\n"
        "Then adds its sales to " STOCK_SOLD_PREFIX "SELLER and prints one line:\n"
        "seller, threads, sales, elapsed seconds, sales per second.\n"
        "\n"
        "  -t, --threads N    selling threads (default %d)\n"
        "  -h, --host HOST    Redis host (default " STOCK_HOST_DEFAULT ")\n"
        "  -p, --port PORT    Redis port (default %d)\n"
        "  -a, --pass PASS    Redis password (AUTH), as in redis-cli\n"
        "  -k, --key KEY      stock key (default " STOCK_KEY_DEFAULT ")\n"
        "  -s, --seller NAME  this seller's name (default: the host name)\n"
        "  -g, --gate LIST    connect, then wait for an item pushed to LIST before\n"
        "                     selling, so that several sellers start together\n"
        "                     (redis-cli RPUSH LIST go go ...: one item per seller)\n"
        "      --help         this text (so does -h with no host after it)\n"
        "\n"
        "Exit status: 0 sold out, 1 Redis error, 2 bad usage.\n",
        STOCK_THREADS_DEFAULT, STOCK_PORT_DEFAULT);
}

static int parse_int(const char *s, long min, long max, long *out)
{
    char *end;

    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static void set_error(struct seller *s, const char *what, const redisReply *r)
{
    if (r == NULL)
        snprintf(s->error, sizeof s->error, "%s: %s", what,
                 s->redis->errstr[0] ? s->redis->errstr : "connection lost");
    else if (r->type == REDIS_REPLY_ERROR)
        snprintf(s->error, sizeof s->error, "%s: %s", what, r->str);
    else
        snprintf(s->error, sizeof s->error, "%s: unexpected reply type %d", what, r->type);
    atomic_store(&failed, 1);
}

/* Reads the stock under stock_lock. Returns 1 with *stock set, 0 when the
 * key does not exist (nothing to sell), -1 on error. */
static int read_stock(struct seller *s, long *stock)
{
    redisReply *r = redisCommand(s->redis, "GET %s", opt_key);
    int rc = -1;

    if (r && r->type == REDIS_REPLY_NIL) {
        rc = 0;
    } else if (r && r->type == REDIS_REPLY_STRING) {
        if (parse_int(r->str, LONG_MIN, LONG_MAX, stock) == 0) {
            rc = 1;
        } else {
            snprintf(s->error, sizeof s->error, "GET %s: not an integer: \"%.64s\"",
                     opt_key, r->str);
            atomic_store(&failed, 1);
        }
    } else {
        set_error(s, "GET", r);
    }
    if (r)
        freeReplyObject(r);
    return rc;
}

static void *sell(void *arg)
{
    struct seller *s = arg;

    pthread_barrier_wait(&start_line);
    while (!atomic_load(&failed)) {
        long stock;

        pthread_mutex_lock(&stock_lock);
        int rc = read_stock(s, &stock);
        if (rc <= 0 || stock <= 0) {
            pthread_mutex_unlock(&stock_lock);
            break;
        }
        redisReply *r = redisCommand(s->redis, "SET %s %ld", opt_key, stock - 1);
        if (r && r->type == REDIS_REPLY_STATUS)
            s->sales++;
        else
            set_error(s, "SET", r);
        if (r)
            freeReplyObject(r);
        pthread_mutex_unlock(&stock_lock);
    }
    return NULL;
}

static redisContext *connect_redis(void)
{
    struct timeval ct = { STOCK_CONNECT_TIMEOUT_S, 0 };
    struct timeval rt = { STOCK_COMMAND_TIMEOUT_S, 0 };
    redisContext *c = redisConnectWithTimeout(opt_host, opt_port, ct);

    if (c == NULL) {
        fprintf(stderr, "stock: cannot connect to redis at %s:%d: out of memory\n",
                opt_host, opt_port);
        exit(1);
    }
    if (c->err) {
        fprintf(stderr, "stock: cannot connect to redis at %s:%d: %s\n",
                opt_host, opt_port, c->errstr);
        exit(1);
    }
    redisSetTimeout(c, rt);
    if (opt_password) {
        redisReply *r = redisCommand(c, "AUTH %s", opt_password);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "stock: redis at %s:%d: AUTH: %s\n", opt_host, opt_port,
                    r ? r->str : c->errstr);
            exit(1);
        }
        freeReplyObject(r);
    }
    return c;
}

/* Blocks until an item can be popped from the gate list: the caller's start
 * signal. The command timeout is lifted meanwhile; the start may be far. */
static void wait_at_gate(redisContext *c)
{
    struct timeval none = { 0, 0 }, rt = { STOCK_COMMAND_TIMEOUT_S, 0 };

    redisSetTimeout(c, none);
    redisReply *r = redisCommand(c, "BLPOP %s 0", opt_gate);
    if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
        fprintf(stderr, "stock: redis at %s:%d: BLPOP %s: %s\n", opt_host, opt_port, opt_gate,
                r == NULL ? c->errstr :
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        exit(1);
    }
    freeReplyObject(r);
    redisSetTimeout(c, rt);
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "threads", required_argument, NULL, 't' },
        { "host",    required_argument, NULL, 'h' },
        { "port",    required_argument, NULL, 'p' },
        { "pass",    required_argument, NULL, 'a' },
        { "key",     required_argument, NULL, 'k' },
        { "seller",  required_argument, NULL, 's' },
        { "gate",    required_argument, NULL, 'g' },
        { "help",    no_argument,       NULL, 'H' },
        { NULL, 0, NULL, 0 }
    };
    long nthreads = STOCK_THREADS_DEFAULT, v;
    char hostname[HOST_NAME_MAX + 1];
    const char *seller = NULL;
    int opt;

    /* -h is the host, as in redis-cli; a bare -h at the end asks for help. */
    if (argc >= 2 && strcmp(argv[argc - 1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":t:h:p:a:k:s:g:", longopts, NULL)) != -1) {
        switch (opt) {
        case 't':
            if (parse_int(optarg, 1, STOCK_THREADS_MAX, &nthreads)) {
                fprintf(stderr, "stock: -t wants a thread count from 1 to %d, not \"%s\"\n",
                        STOCK_THREADS_MAX, optarg);
                return 2;
            }
            break;
        case 'h': opt_host = optarg; break;
        case 'p':
            if (parse_int(optarg, 1, 65535, &v)) {
                fprintf(stderr, "stock: -p wants a port from 1 to 65535, not \"%s\"\n", optarg);
                return 2;
            }
            opt_port = (int)v;
            break;
        case 'a': opt_password = optarg; break;
        case 'k': opt_key = optarg; break;
        case 's': seller = optarg; break;
        case 'g': opt_gate = optarg; break;
        case 'H': usage(stdout); return 0;
        case ':':
            fprintf(stderr, "stock: option %s needs a value (see stock --help)\n",
                    argv[optind - 1]);
            return 2;
        default:
            if (optopt)
                fprintf(stderr, "stock: unknown option -%c (see stock --help)\n", optopt);
            else
                fprintf(stderr, "stock: unknown option %s (see stock --help)\n",
                        argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "stock: unexpected argument \"%s\" (see stock --help)\n", argv[optind]);
        return 2;
    }
    if (seller == NULL) {
        if (gethostname(hostname, sizeof hostname) != 0)
            snprintf(hostname, sizeof hostname, "unknown");
        hostname[sizeof hostname - 1] = '\0';
        seller = hostname;
    }

    struct seller *sellers = calloc(nthreads, sizeof *sellers);
    if (sellers == NULL) {
        fprintf(stderr, "stock: out of memory\n");
        return 1;
    }
    for (long i = 0; i < nthreads; i++)
        sellers[i].redis = connect_redis();

    if (opt_gate)
        wait_at_gate(sellers[0].redis);

    /* The clock starts when every thread is connected and ready. */
    pthread_barrier_init(&start_line, NULL, (unsigned)nthreads + 1);
    for (long i = 0; i < nthreads; i++) {
        int err = pthread_create(&sellers[i].tid, NULL, sell, &sellers[i]);
        if (err) {
            fprintf(stderr, "stock: cannot start thread: %s\n", strerror(err));
            return 1;
        }
    }
    pthread_barrier_wait(&start_line);
    double t0 = now();

    long total = 0;
    const char *error = NULL;
    for (long i = 0; i < nthreads; i++) {
        pthread_join(sellers[i].tid, NULL);
        total += sellers[i].sales;
        if (sellers[i].error[0] && error == NULL)
            error = sellers[i].error;
    }
    double elapsed = now() - t0;

    /* Sales already made are real even if a thread failed: record them. */
    int rc = 0;
    redisReply *r = redisCommand(sellers[0].redis, "INCRBY " STOCK_SOLD_PREFIX "%s %ld",
                                 seller, total);
    if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
        fprintf(stderr, "stock: cannot record %ld sales in %s%s at %s:%d: %s\n",
                total, STOCK_SOLD_PREFIX, seller, opt_host, opt_port,
                r == NULL ? sellers[0].redis->errstr :
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        rc = 1;
    }
    if (r)
        freeReplyObject(r);
    if (error) {
        fprintf(stderr, "stock: redis at %s:%d: %s\n", opt_host, opt_port, error);
        rc = 1;
    }

    printf("seller %s: %ld threads, %ld sales in %.3f s, %.0f sales/s\n",
           seller, nthreads, total, elapsed, elapsed > 0 ? total / elapsed : 0.0);

    for (long i = 0; i < nthreads; i++)
        redisFree(sellers[i].redis);
    free(sellers);
    pthread_barrier_destroy(&start_line);
    return rc;
}
