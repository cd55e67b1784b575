/* preload: the exported pthread_* entry points. Each is a few lines: probe
 * the registry; on a miss (every unmapped mutex) tail-call glibc; on a hit
 * hand off to mapped. The real functions are resolved once, in one place
 * (resolve_real), by the first call of any of them or by the constructor.
 *
 * The constructor reads the config and resolves symbols (file I/O only):
 * no threads, no network. A config error stops the program with status 78
 * before main: a program must never run believing it is protected when it
 * is not. Knows nothing of Redis. */
#include "preload.h"

#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "dmutex.h"
#include "log.h"
#include "mapped.h"
#include "notify.h"
#include "redis.h"
#include "registry.h"
#include "symbols.h"
#include "watchdog.h"

#define DM_EXPORT __attribute__((visibility("default")))

static void resolve_real(void);

/* The resolvers that the table starts with. */
static int first_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{ resolve_real(); return dm_real.mutex_init(m, a); }
static int first_mutex_destroy(pthread_mutex_t *m)
{ resolve_real(); return dm_real.mutex_destroy(m); }
static int first_mutex_lock(pthread_mutex_t *m)
{ resolve_real(); return dm_real.mutex_lock(m); }
static int first_mutex_trylock(pthread_mutex_t *m)
{ resolve_real(); return dm_real.mutex_trylock(m); }
static int first_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{ resolve_real(); return dm_real.mutex_timedlock(m, t); }
static int first_mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{ resolve_real(); return dm_real.mutex_clocklock(m, c, t); }
static int first_mutex_unlock(pthread_mutex_t *m)
{ resolve_real(); return dm_real.mutex_unlock(m); }
static int first_mutex_consistent(pthread_mutex_t *m)
{ resolve_real(); return dm_real.mutex_consistent(m); }
static int first_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{ resolve_real(); return dm_real.cond_wait(c, m); }
static int first_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t)
{ resolve_real(); return dm_real.cond_timedwait(c, m, t); }
static int first_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t k,
                                const struct timespec *t)
{ resolve_real(); return dm_real.cond_clockwait(c, m, k, t); }

struct dm_real dm_real = {
    first_mutex_init, first_mutex_destroy, first_mutex_lock, first_mutex_trylock,
    first_mutex_timedlock, first_mutex_clocklock, first_mutex_unlock,
    first_mutex_consistent, first_cond_wait, first_cond_timedwait, first_cond_clockwait,
};

static void *must_sym(const char *name, const char *version)
{
    void *p = version ? dlvsym(RTLD_NEXT, name, version) : NULL;
    if (!p)
        p = dlsym(RTLD_NEXT, name);
    if (!p) {
        dm_error("cannot find the real %s: %s", name, dlerror());
        _exit(DM_EX_CONFIG);
    }
    return p;
}

static void resolve_real(void)
{
    /* Racing resolvers store the same values: no lock needed. */
    struct dm_real r;
    *(void **)&r.mutex_init = must_sym("pthread_mutex_init", NULL);
    *(void **)&r.mutex_destroy = must_sym("pthread_mutex_destroy", NULL);
    *(void **)&r.mutex_lock = must_sym("pthread_mutex_lock", NULL);
    *(void **)&r.mutex_trylock = must_sym("pthread_mutex_trylock", NULL);
    *(void **)&r.mutex_timedlock = must_sym("pthread_mutex_timedlock", NULL);
    *(void **)&r.mutex_clocklock = must_sym("pthread_mutex_clocklock", NULL);
    *(void **)&r.mutex_unlock = must_sym("pthread_mutex_unlock", NULL);
    *(void **)&r.mutex_consistent = must_sym("pthread_mutex_consistent", NULL);
    /* The condvar functions exist in two ABIs on x86_64; a plain dlsym may
     * hand back the old GLIBC_2.2.5 one, which uses another layout. */
    *(void **)&r.cond_wait = must_sym("pthread_cond_wait", "GLIBC_2.3.2");
    *(void **)&r.cond_timedwait = must_sym("pthread_cond_timedwait", "GLIBC_2.3.2");
    *(void **)&r.cond_clockwait = must_sym("pthread_cond_clockwait", NULL);
    void **dst = (void **)&dm_real;
    void **src = (void **)&r;
    for (size_t i = 0; i < sizeof r / sizeof(void *); i++)
        __atomic_store_n(&dst[i], src[i], __ATOMIC_RELEASE);
}

/* ---- the exported entry points ---------------------------------------- */

DM_EXPORT int pthread_mutex_lock(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_lock(m);
    return dm_mapped_lock(e, m, DM_LOCK, CLOCK_REALTIME, NULL);
}

DM_EXPORT int pthread_mutex_unlock(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_unlock(m);
    return dm_mapped_unlock(e, m);
}

DM_EXPORT int pthread_mutex_trylock(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_trylock(m);
    return dm_mapped_lock(e, m, DM_TRYLOCK, CLOCK_REALTIME, NULL);
}

DM_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_timedlock(m, t);
    return dm_mapped_lock(e, m, DM_TIMEDLOCK, CLOCK_REALTIME, t);
}

DM_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t c, const struct timespec *t)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_clocklock(m, c, t);
    return dm_mapped_lock(e, m, DM_TIMEDLOCK, c, t);
}

DM_EXPORT int pthread_mutex_consistent(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_consistent(m);
    return dm_mapped_consistent(e, m);
}

DM_EXPORT int pthread_mutex_destroy(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.mutex_destroy(m);
    return dm_mapped_destroy(e, m);
}

/* init_site mapping: [start, end) of each named function, filled by the
 * constructor, read here without a lock (it never changes afterwards). */
struct init_site {
    uintptr_t start, end;
    const char *name;
    int flags;                  /* DM_MAP_* */
};
static struct init_site *init_sites;
static size_t ninit_sites;

DM_EXPORT int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (e) {
        if (!e->heap)
            return dm_mapped_init_mutex(e, m, a);
        /* A heap mutex freed without pthread_mutex_destroy left its
         * mapping behind: the mutex made here is a new one, mapped only if
         * its own init site says so. */
        dm_mapped_remove(m);
    }
    if (__builtin_expect(ninit_sites == 0, 1))
        return dm_real.mutex_init(m, a);
    uintptr_t caller = (uintptr_t)__builtin_return_address(0);
    int r = dm_real.mutex_init(m, a);
    for (size_t i = 0; r == 0 && i < ninit_sites; i++)
        if (caller >= init_sites[i].start && caller < init_sites[i].end) {
            int rc = dm_mapped_add(m, init_sites[i].name, init_sites[i].flags);
            if (rc != 0)
                dm_error("mutex %p from %s() not mapped: %s", (void *)m,
                         init_sites[i].name, strerror(rc));
            break;
        }
    return r;
}

DM_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.cond_wait(c, m);
    return dm_mapped_cond_wait(e, c, m, 0, CLOCK_REALTIME, NULL);
}

DM_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                     const struct timespec *t)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.cond_timedwait(c, m, t);
    return dm_mapped_cond_wait(e, c, m, 1, CLOCK_REALTIME, t);
}

DM_EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t k,
                                     const struct timespec *t)
{
    struct dm_entry *e = dm_registry_lookup(m);
    if (__builtin_expect(e == NULL, 1))
        return dm_real.cond_clockwait(c, m, k, t);
    return dm_mapped_cond_wait(e, c, m, 1, k, t);
}

/* ---- the explicit API --------------------------------------------------- */

static struct dm_config config;
static int configured;

DM_EXPORT int dmutex_name(pthread_mutex_t *m, const char *name)
{
    if (!configured)
        return ENOSYS;
    char why[160];
    if (!m || !name || !dm_config_name_ok(name, why, sizeof why))
        return EINVAL;
    return dm_mapped_add(m, name, DM_MAP_HEAP | (DM_FAIR_DEFAULT ? DM_MAP_FAIR : 0));
}

DM_EXPORT uint64_t dmutex_token(pthread_mutex_t *m)
{
    struct dm_entry *e = dm_registry_lookup(m);
    return e ? dm_mapped_token(e) : 0;
}

/* ---- start, fork, exit -------------------------------------------------- */

static void config_fail(const char *fmt, const char *a, const char *b)
{
    char line[DM_ERR_MAX * 2];
    snprintf(line, sizeof line, fmt, a, b);
    dm_error("%s", line);
    _exit(DM_EX_CONFIG);
}

static void atfork_child(void)
{
    dm_redis_atfork_child();
    dm_notify_atfork_child();
    dm_watchdog_atfork_child();
    dm_cluster_atfork_child();
    dm_mapped_atfork_child();
}

/* Is this process one of the config's `programs` (all, when none are
 * listed)? Matched on the executable's file name. */
static int program_selected(const struct dm_config *cfg)
{
    if (cfg->nprograms == 0)
        return 1;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0)
        return 1;       /* cannot tell: apply the config, and fail loudly if it does not fit */
    exe[n] = 0;
    const char *base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
    for (size_t i = 0; i < cfg->nprograms; i++)
        if (strcmp(base, cfg->programs[i]) == 0)
            return 1;
    dm_debug("%s is not among the config's programs: nothing mapped", base);
    return 0;
}

/* Entries naming an `object` that was not loaded at start (or was unloaded
 * since): mapped when a dlopen brings it in, unmapped when a dlclose takes
 * it away. Guarded by objects_mu; the dlopen hook only looks when there
 * are such entries at all. */
struct object_entry {
    struct dm_mutex_config *mc;
    uintptr_t addr;             /* 0 while its object is not loaded */
};
static struct object_entry *object_entries;
static size_t nobject_entries;
static pthread_mutex_t objects_mu = PTHREAD_MUTEX_INITIALIZER;
static void *(*real_dlopen)(const char *, int);
static int (*real_dlclose)(void *);

static int entry_flags(const struct dm_mutex_config *mc)
{
    return (mc->fair ? DM_MAP_FAIR : 0) | (mc->cache ? DM_MAP_CACHE : 0);
}

/* Resolves and maps one symbol entry. At start (`fatal`) every error that
 * is not excused by required = false ends the program; after a dlopen the
 * program is running, so errors are logged and the entry stays unmapped. */
static int map_symbol(const struct dm_config *cfg, const struct dm_mutex_config *mc,
                      uintptr_t *out, int fatal)
{
    char err[DM_ERR_MAX], where[DM_ERR_MAX];
    snprintf(where, sizeof where, "%s:%d", cfg->path, mc->line);
    long offset = mc->offset + (mc->index > 0 ? mc->index * (long)sizeof(pthread_mutex_t) : 0);
    uintptr_t addr;
    int r = dm_symbols_find(mc->object, mc->symbol, offset, sizeof(pthread_mutex_t),
                            &addr, err, sizeof err);
    if (r != 0) {
        if (!mc->required) {
            dm_info("%s: %s (required = false: skipped)", where, err);
            return -1;
        }
        if (fatal) {
            char more[DM_ERR_MAX + 160];
            snprintf(more, sizeof more, "%s%s", err, cfg->nprograms ? "" :
                     " (if this process is not the program the config is for, list that "
                     "program in `programs`)");
            config_fail("%s: %s", where, more);
        }
        dm_error("%s: %s: this mutex is NOT cluster-wide", where, err);
        return -1;
    }
    r = dm_mapped_add((void *)addr, mc->name, entry_flags(mc));
    if (r == EEXIST) {
        if (fatal)
            config_fail("%s: %s is already mapped by another entry under another name "
                        "(one mutex, two lock names)", where, mc->symbol);
        dm_error("%s: %s is already mapped under another name", where, mc->symbol);
        return -1;
    }
    if (r != 0) {
        if (fatal)
            config_fail("%s: cannot map a mutex: %s", where, strerror(r));
        dm_error("%s: cannot map %s: %s", where, mc->symbol, strerror(r));
        return -1;
    }
    dm_debug("mapped %s%s%s at %p as %s", mc->symbol, mc->object ? " in " : "",
             mc->object ? mc->object : "", (void *)addr, mc->name);
    *out = addr;
    return 0;
}

/* After dlopen or dlclose: map the entries whose object came, unmap those
 * whose object went. */
static void sync_objects(void)
{
    pthread_mutex_lock(&objects_mu);
    int changed = 0;
    for (size_t i = 0; i < nobject_entries; i++) {
        struct object_entry *oe = &object_entries[i];
        int loaded = dm_symbols_loaded(oe->mc->object);
        if (loaded && !oe->addr) {
            uintptr_t addr;
            if (map_symbol(&config, oe->mc, &addr, 0) == 0)
                oe->addr = addr;
            changed = 1;
        } else if (!loaded && oe->addr) {
            dm_mapped_remove((void *)oe->addr);
            dm_debug("unmapped %s: %s was unloaded", oe->mc->symbol, oe->mc->object);
            oe->addr = 0;
            changed = 1;
        }
    }
    if (changed)
        dm_symbols_flush();
    pthread_mutex_unlock(&objects_mu);
}

/* glibc searches a dlopen'ed bare name along the *caller's* DT_RUNPATH.
 * Called from here, the caller would be the shim, so a program relying on
 * its own RUNPATH (e.g. $ORIGIN) would not find its plugin. For a bare name
 * and a caller with a DT_RUNPATH, search as ld.so would (LD_LIBRARY_PATH,
 * then that RUNPATH) and hand glibc the path found; otherwise pass the name
 * through unchanged. */
static int search_dirs(const char *dirs, const char *origin, const char *file,
                       char *buf, size_t len)
{
    while (dirs && *dirs) {
        size_t n = strcspn(dirs, ":");
        char dir[PATH_MAX];
        if (n >= 7 && strncmp(dirs, "$ORIGIN", 7) == 0 && (n == 7 || dirs[7] == '/'))
            snprintf(dir, sizeof dir, "%s%.*s", origin, (int)(n - 7), dirs + 7);
        else if (n >= 9 && strncmp(dirs, "${ORIGIN}", 9) == 0)
            snprintf(dir, sizeof dir, "%s%.*s", origin, (int)(n - 9), dirs + 9);
        else
            snprintf(dir, sizeof dir, "%.*s", (int)n, dirs);
        if (dir[0] && snprintf(buf, len, "%s/%s", dir, file) < (int)len && access(buf, F_OK) == 0)
            return 1;
        dirs += n;
        if (*dirs == ':')
            dirs++;
    }
    return 0;
}

static const char *runpath_of_caller(const char *file, const void *caller, char *buf, size_t len)
{
    if (!file || strchr(file, '/'))
        return file;
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm || !lm->l_ld)
        return file;
    uintptr_t strtab = 0, runpath = 0;
    int has_runpath = 0;
    for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB)
            strtab = d->d_un.d_ptr;
        else if (d->d_tag == DT_RUNPATH) {
            runpath = d->d_un.d_val;
            has_runpath = 1;
        }
    }
    if (!has_runpath || !strtab)
        return file;
    if (strtab < lm->l_addr)
        strtab += lm->l_addr;   /* not relocated in place by ld.so */
    char origin[PATH_MAX];
    if (lm->l_name && lm->l_name[0]) {
        snprintf(origin, sizeof origin, "%s", lm->l_name);
    } else {
        ssize_t n = readlink("/proc/self/exe", origin, sizeof origin - 1);
        if (n < 0)
            return file;
        origin[n] = 0;
    }
    char *slash = strrchr(origin, '/');
    if (!slash)
        return file;
    *slash = 0;
    if (search_dirs(getenv("LD_LIBRARY_PATH"), origin, file, buf, len) ||
        search_dirs((const char *)(strtab + runpath), origin, file, buf, len))
        return buf;
    return file;
}

DM_EXPORT void *dlopen(const char *file, int flags)
{
    if (!real_dlopen)
        *(void **)&real_dlopen = must_sym("dlopen", NULL);
    char path[PATH_MAX];
    const char *f = nobject_entries ? runpath_of_caller(file, __builtin_return_address(0),
                                                        path, sizeof path) : file;
    void *h = real_dlopen(f, flags);
    if (h && nobject_entries)
        sync_objects();
    return h;
}

DM_EXPORT int dlclose(void *handle)
{
    if (!real_dlclose)
        *(void **)&real_dlclose = must_sym("dlclose", NULL);
    int r = real_dlclose(handle);
    if (r == 0 && nobject_entries)
        sync_objects();
    return r;
}

static void add_object_entry(const struct dm_config *cfg, struct dm_mutex_config *mc,
                             uintptr_t addr)
{
    struct object_entry *n = realloc(object_entries, (nobject_entries + 1) * sizeof *n);
    if (!n)
        config_fail("%s%s: out of memory", cfg->path, "");
    n[nobject_entries].mc = mc;
    n[nobject_entries].addr = addr;
    object_entries = n;
    nobject_entries++;
}

static void map_entries(struct dm_config *cfg)
{
    char err[DM_ERR_MAX];
    for (size_t i = 0; i < cfg->nmutexes; i++) {
        struct dm_mutex_config *mc = &cfg->mutexes[i];
        if (mc->init_site) {
            uintptr_t start, end;
            int r = dm_symbols_function(mc->object, mc->init_site, &start, &end, err, sizeof err);
            if (r != 0) {
                if (!mc->required) {
                    dm_info("%s:%d: %s (required = false: skipped)", cfg->path, mc->line, err);
                    continue;
                }
                char where[DM_ERR_MAX];
                snprintf(where, sizeof where, "%s:%d", cfg->path, mc->line);
                config_fail("%s: %s", where, err);
            }
            struct init_site *n = realloc(init_sites, (ninit_sites + 1) * sizeof *n);
            if (!n)
                config_fail("%s%s: out of memory", cfg->path, "");
            n[ninit_sites].start = start;
            n[ninit_sites].end = end;
            n[ninit_sites].name = mc->name;
            n[ninit_sites].flags = DM_MAP_HEAP | entry_flags(mc);
            init_sites = n;
            ninit_sites++;
            continue;
        }
        if (mc->object && !dm_symbols_loaded(mc->object)) {
            /* A plugin, perhaps: mapped when it is loaded. */
            add_object_entry(cfg, mc, 0);
            dm_info("%s:%d: %s is not loaded yet: %s is mapped when it is", cfg->path,
                    mc->line, mc->object, mc->symbol);
            continue;
        }
        uintptr_t addr;
        if (map_symbol(cfg, mc, &addr, 1) == 0 && mc->object)
            add_object_entry(cfg, mc, addr);
    }
    dm_symbols_flush();
}

__attribute__((constructor)) static void dm_preload_start(void)
{
    dm_log_init();
    resolve_real();
    const char *path = getenv("DMUTEX_CONFIG");
    if (!path || !*path)
        config_fail("DMUTEX_CONFIG is not set: no mutex would be cluster-wide%s%s "
                    "(set it to a config file, or take libdmutex.so out of LD_PRELOAD)", "", "");
    char err[DM_ERR_MAX];
    if (dm_config_load(path, &config, err, sizeof err) != 0)
        config_fail("%s%s", err, "");
    const char *url = getenv("DMUTEX_REDIS");
    if (url && *url && dm_config_set_redis_url(&config, url, err, sizeof err) != 0)
        config_fail("DMUTEX_REDIS=%s: %s", url, err);
    if (!program_selected(&config))
        return;
    dm_cluster_init(&config);
    dm_mapped_init(&config);
    map_entries(&config);
    pthread_atfork(NULL, NULL, atfork_child);
    configured = 1;
    dm_info("%zu mutexes mapped, redis at %s, namespace %s", dm_registry_count(),
            dm_redis_addr(), config.ns);
}

__attribute__((destructor)) static void dm_preload_stop(void)
{
    if (configured)
        dm_mapped_release_all();
}
