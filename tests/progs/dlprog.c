/* dlprog: two threads load plugins at once, for test_shim's check that the
 * shim never calls the loader while holding a lock of its own. Knows
 * nothing of dmutex.
 *
 *   dlprog DIR ITERS
 *
 * One thread loads DIR/libdltarget.so, locks and unlocks its target_lock
 * and unloads it, ITERS times; the other loads and unloads
 * DIR/libdlctor.so meanwhile, whose constructor loads DIR/libdlleaf.so
 * under the loader's lock. Prints "dlprog done ITERS" (and exits 0) when
 * the first thread is through; a deadlock never prints it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char target[4096], ctor[4096];
static int stop;

static void *load(const char *path)
{
    void *h = dlopen(path, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        exit(1);
    }
    return h;
}

static void *ctor_loop(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED))
        dlclose(load(ctor));
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: dlprog DIR ITERS\n");
        return 2;
    }
    int iters = atoi(argv[2]);
    char leaf[4096];
    snprintf(target, sizeof target, "%s/libdltarget.so", argv[1]);
    snprintf(ctor, sizeof ctor, "%s/libdlctor.so", argv[1]);
    snprintf(leaf, sizeof leaf, "%s/libdlleaf.so", argv[1]);
    setenv("DLPROG_LEAF", leaf, 1);

    pthread_t t;
    if (pthread_create(&t, NULL, ctor_loop, NULL) != 0)
        return 1;
    for (int i = 0; i < iters; i++) {
        void *h = load(target);
        int (*enter)(void) = (int (*)(void))dlsym(h, "target_enter");
        int (*leave)(void) = (int (*)(void))dlsym(h, "target_leave");
        if (!enter || !leave || enter() != 0 || leave() != 0) {
            fprintf(stderr, "target plugin: lock failed\n");
            return 1;
        }
        dlclose(h);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    printf("dlprog done %d\n", iters);
    return 0;
}
