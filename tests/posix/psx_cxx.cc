// psx_cxx: a C++ program guarding a Redis counter with std::mutex globals
// and std::lock_guard, as C++ code does. Knows nothing of dmutex.
//
//   psx_cxx PORT KEY WHICH THREADS ITERS HOLD_US
//     WHICH: global (::counter_mutex) or ns (shop::stock_mutex, mangled
//     _ZN4shop11stock_mutexE). Prints "done N".
#include <hiredis/hiredis.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

std::mutex counter_mutex;
namespace shop {
std::mutex stock_mutex;
}

static void worker(std::mutex *mu, int port, std::string key, int iters, int hold_us)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        std::fprintf(stderr, "psx_cxx: cannot connect\n");
        std::exit(1);
    }
    for (int i = 0; i < iters; i++) {
        std::lock_guard<std::mutex> guard(*mu);
        auto *r = static_cast<redisReply *>(redisCommand(c, "GET %s", key.c_str()));
        long v = r && r->type == REDIS_REPLY_STRING ? std::atol(r->str) : 0;
        freeReplyObject(r);
        if (hold_us)
            usleep(static_cast<useconds_t>(hold_us));
        r = static_cast<redisReply *>(redisCommand(c, "SET %s %ld", key.c_str(), v + 1));
        freeReplyObject(r);
    }
    redisFree(c);
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        std::fprintf(stderr, "usage: psx_cxx PORT KEY global|ns THREADS ITERS HOLD_US\n");
        return 2;
    }
    std::mutex *mu = std::strcmp(argv[3], "ns") == 0 ? &shop::stock_mutex : &counter_mutex;
    int threads = std::atoi(argv[4]), iters = std::atoi(argv[5]);
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; i++)
        ts.emplace_back(worker, mu, std::atoi(argv[1]), std::string(argv[2]), iters,
                        std::atoi(argv[6]));
    for (auto &t : ts)
        t.join();
    std::printf("done %d\n", threads * iters);
    return 0;
}
