/* apiprog: a user's program of the explicit API, built by
 * tests/install.test.sh and tests/ls_json.test.sh against an installed
 * dmutex.h with the flags of `pkg-config --cflags --libs dmutex`.
 *
 *   apiprog                  prints "version V absent" or "version V present"
 *   apiprog --preload        prints $LD_PRELOAD
 *   apiprog HELD FREE        maps two mutexes under the lock names HELD and
 *                            FREE, takes and releases FREE, takes HELD and
 *                            prints "held TOKEN", keeps it until stdin ends,
 *                            then releases it and prints "done" */
#include <dmutex.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#pragma weak dmutex_name
#pragma weak dmutex_token

static pthread_mutex_t held = PTHREAD_MUTEX_INITIALIZER, freed = PTHREAD_MUTEX_INITIALIZER;

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--preload") == 0) {
        const char *p = getenv("LD_PRELOAD");
        printf("%s\n", p ? p : "");
        return 0;
    }
    printf("version %s %s\n", DMUTEX_VERSION, dmutex_name ? "present" : "absent");
    fflush(stdout);
    if (argc < 3)
        return 0;
    if (!dmutex_name || !dmutex_token)
        return 1;
    int r1 = dmutex_name(&held, argv[1]), r2 = dmutex_name(&freed, argv[2]);
    if (r1 || r2) {
        printf("dmutex_name: %d %d\n", r1, r2);
        return 1;
    }
    pthread_mutex_lock(&freed);
    pthread_mutex_unlock(&freed);
    pthread_mutex_lock(&held);
    printf("held %" PRIu64 "\n", dmutex_token(&held));
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    pthread_mutex_unlock(&held);
    printf("done\n");
    return 0;
}
