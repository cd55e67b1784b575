/* psx_host: a program whose mutexes live where test_posix's naming tests
 * need them: two files with a file-static of one name (twin_a.c,
 * twin_b.c), a library linked in (libpsxlib.so) and a plugin loaded later
 * with dlopen by its bare name (libpsxplug.so, found through RUNPATH).
 * Knows nothing of dmutex.
 *
 *   psx_host PORT KEY count WHICH THREADS ITERS HOLD_US
 *       the counter of pp.h under WHICH: twin_a, twin_b, lib, lib_static, plug
 *       (plug: the plugin is dlopen'ed first)
 *   psx_host PORT KEY dlclose N
 *       dlopen the plugin, one section, dlclose it; then put a mutex of the
 *       program's own at the address the plugin's had and lock it N times;
 *       then dlopen again and one more section:
 *       "dlclose unloaded=U placed=P RC" (P: the old address could be reused) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <sys/mman.h>

#include "pp.h"

int twin_a_enter(void *), twin_a_leave(void *), twin_b_enter(void *), twin_b_leave(void *);
int psxlib_enter(void *), psxlib_leave(void *);
int psxlib_static_enter(void *), psxlib_static_leave(void *);

#define PLUGIN "libpsxplug.so"

static void *load_plugin(int (**enter)(void *), int (**leave)(void *))
{
    void *h = dlopen(PLUGIN, RTLD_NOW);
    if (!h) {
        say("dlopen %s: %s", PLUGIN, dlerror());
        exit(1);
    }
    *(void **)enter = dlsym(h, "plug_enter");
    *(void **)leave = dlsym(h, "plug_leave");
    if (!*enter || !*leave) {
        say("plugin symbols missing");
        exit(1);
    }
    return h;
}

static int one_section(int (*enter)(void *), int (*leave)(void *))
{
    int r = enter(NULL);
    return r ? r : leave(NULL);
}

/* Says which mapping of /proc/self/maps holds `addr` (a diagnostic). */
static void say_mapping(uintptr_t addr)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && addr >= lo && addr < hi) {
            line[strcspn(line, "\n")] = 0;
            say("occupied: %s", line);
        }
    }
    if (f)
        fclose(f);
}

static int mode_dlclose(int n)
{
    int (*enter)(void *), (*leave)(void *);
    void *h = load_plugin(&enter, &leave);
    void *(*addr_fn)(void) = (void *(*)(void))dlsym(h, "plug_lock_addr");
    uintptr_t addr = (uintptr_t)addr_fn();
    int first = one_section(enter, leave);
    dlclose(h);
    int unloaded = dlopen(PLUGIN, RTLD_NOW | RTLD_NOLOAD) == NULL;

    /* Something else of the program's now lives where the plugin's mutex
     * was: an anonymous page at the same address. */
    long pg = sysconf(_SC_PAGESIZE);
    uintptr_t page = addr & ~(uintptr_t)(pg - 1);
    size_t len = ((addr + sizeof(pthread_mutex_t) - page + (uintptr_t)pg - 1) / (uintptr_t)pg) *
                 (size_t)pg;
    void *p = mmap((void *)page, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    int placed = p == (void *)page;
    if (placed) {
        pthread_mutex_t *mine = (pthread_mutex_t *)addr;
        pthread_mutex_init(mine, NULL);
        for (int i = 0; i < n; i++) {
            int r = pthread_mutex_lock(mine);
            if (r == 0)
                r = pthread_mutex_unlock(mine);
            if (r && !first)
                first = r;
        }
        pthread_mutex_destroy(mine);
        munmap(p, len);
    } else {
        if (p != MAP_FAILED)
            munmap(p, len);
        say("mmap at %#lx: %s", (unsigned long)page, strerror(errno));
        say_mapping(page);
    }
    h = load_plugin(&enter, &leave);
    int r = one_section(enter, leave);
    if (r && !first)
        first = r;
    dlclose(h);
    say("dlclose unloaded=%d placed=%d %s", unloaded, placed, ename(first));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: psx_host PORT KEY count WHICH THREADS ITERS HOLD_US | "
                        "psx_host PORT KEY dlclose N\n");
        return 2;
    }
    int port = atoi(argv[1]);
    const char *key = argv[2], *mode = argv[3];
    if (strcmp(mode, "dlclose") == 0 && argc >= 5)
        return mode_dlclose(atoi(argv[4]));
    if (strcmp(mode, "count") != 0 || argc < 8)
        return 2;
    /* WHICH: whose mutex the sections lock (the plugin's is loaded). */
    static const struct {
        const char *which;
        int (*enter)(void *), (*leave)(void *);
    } sections[] = {
        { "twin_a", twin_a_enter, twin_a_leave },
        { "twin_b", twin_b_enter, twin_b_leave },
        { "lib", psxlib_enter, psxlib_leave },
        { "lib_static", psxlib_static_enter, psxlib_static_leave },
        { "plug", NULL, NULL },
    };
    const char *which = argv[4];
    struct pp_counter k = { port, key, atoi(argv[6]), atoi(argv[7]), NULL, NULL, NULL };
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++)
        if (strcmp(which, sections[i].which) == 0) {
            k.enter = sections[i].enter;
            k.leave = sections[i].leave;
            if (!k.enter)
                load_plugin(&k.enter, &k.leave);
        }
    if (!k.enter)
        return 2;
    pp_run_counter(&k, atoi(argv[5]));
    return 0;
}
