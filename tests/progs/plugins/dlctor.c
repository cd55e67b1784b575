/* libdlctor.so: a plugin whose constructor, which runs while the loader
 * holds its own lock, loads and unloads another plugin (the path in
 * DLPROG_LEAF) and locks a mutex, as real plugins' initialisers do. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t ctor_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor)) static void dlctor_start(void)
{
    pthread_mutex_lock(&ctor_lock);
    const char *leaf = getenv("DLPROG_LEAF");
    void *h = leaf ? dlopen(leaf, RTLD_NOW) : NULL;
    if (h)
        dlclose(h);
    pthread_mutex_unlock(&ctor_lock);
}
