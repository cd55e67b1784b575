// trace_books: a C++ program with a std::mutex that has no lock-like name,
// built stripped (g++ -O2 -s, tests/tests.mk) for tests/trace.test.sh:
// `dmutex trace` must find g_books by its address (no symbol is left) and
// the printed config must make the counter exact across processes.
//
//   trace_books HOST PORT KEY THREADS ITERATIONS [HOLD_US]
// T threads each do N counted sections (read a Redis counter, wait,
// write it back plus one) under g_books; prints "done N".
#include <hiredis/hiredis.h>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>
#include <unistd.h>

std::mutex g_books;
static const char *host, *key;
static int port, iters, hold_us;

static void count_once(redisContext *c)
{
    redisReply *r = (redisReply *)redisCommand(c, "GET %s", key);
    if (!r) {
        std::fprintf(stderr, "trace_books: GET: %s\n", c->errstr);
        std::exit(1);
    }
    long v = r->type == REDIS_REPLY_STRING ? std::atol(r->str) : 0;
    freeReplyObject(r);
    if (hold_us)
        usleep(hold_us);
    r = (redisReply *)redisCommand(c, "SET %s %ld", key, v + 1);
    if (!r) {
        std::fprintf(stderr, "trace_books: SET: %s\n", c->errstr);
        std::exit(1);
    }
    freeReplyObject(r);
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        std::fprintf(stderr, "usage: trace_books HOST PORT KEY THREADS ITERATIONS [HOLD_US]\n");
        return 2;
    }
    host = argv[1];
    port = std::atoi(argv[2]);
    key = argv[3];
    int nthreads = std::atoi(argv[4]);
    iters = std::atoi(argv[5]);
    hold_us = argc > 6 ? std::atoi(argv[6]) : 0;
    std::vector<std::thread> ts;
    for (int t = 0; t < nthreads; t++)
        ts.emplace_back([] {
            redisContext *c = redisConnect(host, port);
            if (!c || c->err) {
                std::fprintf(stderr, "trace_books: connect %s:%d failed\n", host, port);
                std::exit(1);
            }
            for (int i = 0; i < iters; i++) {
                std::lock_guard<std::mutex> g(g_books);
                count_once(c);
            }
            redisFree(c);
        });
    for (auto &t : ts)
        t.join();
    std::printf("done %d\n", nthreads * iters);
    return 0;
}
