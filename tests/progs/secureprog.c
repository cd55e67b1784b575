/* secureprog: loads a library (the shim) with dlopen and says so, for
 * test_shim's set-user-ID test: run from a set-user-ID copy by another
 * user, the process is AT_SECURE, and the shim's constructor must ignore
 * the environment. Knows nothing of dmutex.
 *
 *   secureprog LIB      prints "secure S" (getauxval(AT_SECURE)), then
 *                       "loaded" once dlopen(LIB) returned */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/auxv.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: secureprog LIB\n");
        return 2;
    }
    printf("secure %lu\n", getauxval(AT_SECURE));
    fflush(stdout);
    if (!dlopen(argv[1], RTLD_NOW)) {
        printf("dlopen: %s\n", dlerror());
        return 1;
    }
    printf("loaded\n");
    return 0;
}
