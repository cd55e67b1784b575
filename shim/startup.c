/* startup: the shim's configuration of a process (see startup.h).
 *
 * The constructor reads the config and resolves symbols (file I/O only):
 * no threads, no network. A config error stops the program with status 78
 * before main: a program must never run believing it is protected when it
 * is not. Whether this process is meant is decided from `programs` alone,
 * first. Entries of objects loaded later are mapped and unmapped as
 * dlopen/dlclose bring and take them; init_site functions are listed for
 * preload's pthread_mutex_init. This is the one place fork handlers are
 * registered, with the one order of the shim's internal locks.
 *
 * Talks to Redis only through what it configures (cluster, mapped): it
 * sends nothing itself, and registers nothing but the fork handlers. */
#include "startup.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "config.h"
#include "dmutex.h"
#include "log.h"
#include "mapped.h"
#include "metrics.h"
#include "real.h"
#include "registry.h"
#include "store.h"
#include "symbols.h"
#include "tls.h"
#include "watchdog.h"
#include "who.h"

_Static_assert(DM_REAL_EX_MISSING == DM_EX_CONFIG,
               "a missing glibc function stops the program as a config error does");

static struct dm_config config;
static int configured;

/* DMUTEX_CHECK (`dmutex check`, and `dmutex run` before it starts the
 * program): the constructor resolves the config exactly as below, prints
 * what it would map (unless "quiet"), reports every entry's error rather
 * than stopping at the first, and ends the process before main with 0 or
 * DM_EX_CONFIG. 0: a normal run. */
enum { CHECK_OFF, CHECK_PRINT, CHECK_QUIET };
static int check_mode;
static int check_errors;

/* DMUTEX_CHECK_FD (set by `dmutex check` and `dmutex run` with
 * DMUTEX_CHECK): a descriptor the command reads, so that it can hold what
 * each entry resolved to against the program's debug info, which the shim
 * never reads (a GLib GStaticMutex is big enough for a mutex, so only its
 * type tells it is none). "C<TAB>CONFIG" (its path, as errors name it),
 * then per data entry mapped at start
 * "E<TAB>LINE<TAB>LIST<TAB>FILE<TAB>VADDR<TAB>WHAT<TAB>NAME", then the
 * verdict: "S<TAB>SUMMARY" (the summary line, which the command prints
 * once the debug info agrees) or "N<TAB>ERRORS" (the count of errors
 * already printed, which the command adds its own to); a line each. -1:
 * none, the shim prints the summary and the count itself. */
static int check_fd = -1;

/* init_site functions: [start, end) of each, filled by the constructor,
 * read without a lock (they never change afterwards). */
static struct dm_init_site *init_sites;
size_t dm_startup_ninit_sites;

static struct dm_init_site *cond_sites;
size_t dm_startup_ncond_sites;

static struct dm_init_site *rw_sites;
size_t dm_startup_nrw_sites;

static const struct dm_init_site *site_of(const struct dm_init_site *sites, size_t n,
                                          uintptr_t caller)
{
    for (size_t i = 0; i < n; i++)
        if (caller >= sites[i].start && caller < sites[i].end)
            return &sites[i];
    return NULL;
}

const struct dm_init_site *dm_startup_cond_site(uintptr_t caller)
{
    return site_of(cond_sites, dm_startup_ncond_sites, caller);
}

const struct dm_init_site *dm_startup_rw_site(uintptr_t caller)
{
    return site_of(rw_sites, dm_startup_nrw_sites, caller);
}

const struct dm_init_site *dm_startup_init_site(uintptr_t caller)
{
    for (size_t i = 0; i < dm_startup_ninit_sites; i++)
        if (caller >= init_sites[i].start && caller < init_sites[i].end)
            return &init_sites[i];
    return NULL;
}

int dm_startup_configured(void)
{
    return configured;
}

/* This process's pid, set by the constructor and a fork child: a vfork
 * child (no fork handler runs) has another one. */
static pid_t own_pid;

void dm_startup_image_ends(void)
{
    if (!__atomic_load_n(&configured, __ATOMIC_ACQUIRE) ||
        getpid() != __atomic_load_n(&own_pid, __ATOMIC_RELAXED))
        return;
    dm_mapped_image_ends();     /* its releases are among those flushed next */
    dm_store->flush_bounded();
}

static void config_fail(const char *fmt, const char *a, const char *b)
{
    char line[DM_ERR_MAX * 2];
    snprintf(line, sizeof line, fmt, a, b);
    dm_error("%s", line);
    dm_real.exit_now(DM_EX_CONFIG);
}

/* An error of one entry at start: the end of the program, or, checking,
 * one more error to report before the check's verdict. */
static void entry_fail(const char *fmt, const char *a, const char *b)
{
    if (!check_mode)
        config_fail(fmt, a, b);
    char line[DM_ERR_MAX * 2];
    snprintf(line, sizeof line, fmt, a, b);
    dm_error("%s", line);
    check_errors++;
}

/* Checking: "ADDR (FILE+OFFSET)", the object that holds `addr` as the
 * loader says (not always the entry's `object`: a library's variable that
 * the executable refers to lives in the executable, by a copy relocation). */
static void check_where(uintptr_t addr, char *out, size_t len)
{
    Dl_info info;
    if (dladdr((void *)addr, &info) && info.dli_fbase) {
        const char *f = info.dli_fname && *info.dli_fname ? info.dli_fname : "?";
        snprintf(out, len, "%#lx (%s+%#lx)", (unsigned long)addr,
                 strrchr(f, '/') ? strrchr(f, '/') + 1 : f,
                 (unsigned long)(addr - (uintptr_t)info.dli_fbase));
    } else {
        snprintf(out, len, "%#lx", (unsigned long)addr);
    }
}

/* Checking: one line per entry on stdout, "NAME<TAB>OBJECT<TAB>WHAT<TAB>
 * WHERE<TAB>PROTOCOL" (OBJECT "-" for the executable; WHERE the address
 * and its offset in the object, or why nothing is there yet; PROTOCOL the
 * lock on the wire: dmutex, setnx, redisson). */
static void check_print(const struct dm_object_config *mc, const char *what, const char *where)
{
    if (check_mode != CHECK_PRINT)
        return;
    printf("%s\t%s\t%s\t%s\t%s\n", mc->name, mc->object ? mc->object : "-", what, where,
           dm_config_protocol_name(mc->protocol));
}

/* The executable's file name, or NULL when it cannot be told (then the
 * config applies, and fails loudly if it does not fit). */
static const char *exe_name(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);
    if (n < 0)
        return NULL;
    buf[n] = 0;
    return strrchr(buf, '/') ? strrchr(buf, '/') + 1 : buf;
}

/* Entries naming an `object` that was not loaded at start (or was unloaded
 * since): mapped when a dlopen brings it in, unmapped when a dlclose takes
 * it away. Their state is guarded by objects_mu; the dlopen hook only looks
 * when there are such entries at all (the list is fixed at start). */
struct object_entry {
    struct dm_object_config *mc;
    uintptr_t addr;             /* 0 while its object is not loaded */
    uintptr_t bias;             /* load bias of the object `addr` was found in */
    unsigned long gen;          /* the sync whose view was applied last */
};
static struct object_entry *object_entries;
static size_t nobject_entries;
static pthread_mutex_t objects_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long objects_gen;       /* syncs started; under objects_mu */

static size_t conds_mapped;     /* of the registry's entries, conds (for the summaries) */
static size_t rwlocks_mapped;   /* and rwlocks */

/* For the start-up line: of each kind's entries (mutexes, conds,
 * rwlocks), those mapped when dlopen loads their object, and those
 * skipped (required = false, not found). */
enum { KIND_MUTEX, KIND_COND, KIND_RWLOCK, KINDS };
static size_t later_at_start[KINDS], skipped_at_start[KINDS];
/* Of each kind's init sites (dm_startup_n*_sites), the init_site_address
 * entries: one init call's return address each, not a function. */
static size_t site_calls[KINDS];

/* The init calls an init site of a kind catches, as messages name them. */
static const char *const init_calls[KINDS] = {
    "pthread_mutex_init or mtx_init", "pthread_cond_init or cnd_init", "pthread_rwlock_init",
};

static int kind_of(const struct dm_object_config *mc)
{
    return mc->cond ? KIND_COND : mc->rw ? KIND_RWLOCK : KIND_MUTEX;
}

/* How messages name what a data entry maps: its symbol, or for an
 * address entry the address, marked as the weak name it is. */
struct entry_what { char s[96]; };

static const char *entry_what(const struct dm_object_config *mc, struct entry_what *w)
{
    if (mc->symbol)
        return mc->symbol;
    snprintf(w->s, sizeof w->s, "address %#lx (weak: address of this build only)",
             (unsigned long)mc->address);
    return w->s;
}

static int entry_flags(const struct dm_object_config *mc)
{
    return (mc->fair ? DM_MAP_FAIR : 0) | (mc->cache ? DM_MAP_CACHE : 0) |
           DM_MAP_PROTOCOL(mc->protocol);
}

/* Resolves one symbol entry (calls the loader: never with a lock of the
 * shim held). At start (`fatal`) every error that is not excused by
 * required = false ends the program; after a dlopen the program is
 * running, so errors are logged and the entry stays unmapped. */
static int lookup_symbol(const struct dm_object_config *mc, uintptr_t *out,
                         char *err, size_t errlen)
{
    long size = mc->cond ? (long)sizeof(pthread_cond_t)
              : mc->rw ? (long)sizeof(pthread_rwlock_t) : (long)sizeof(pthread_mutex_t);
    if (!mc->symbol)
        return dm_symbols_at(mc->object, (uintptr_t)mc->address, (size_t)size, 0, mc->build_id,
                             out, err, errlen);
    long offset = mc->offset + (mc->index > 0 ? mc->index * size : 0);
    const char *what = mc->cond ? "a pthread_cond_t" : mc->rw ? "a pthread_rwlock_t"
                                                               : "a pthread_mutex_t";
    return dm_symbols_find(mc->object, mc->symbol, offset, (size_t)size, what, out, err, errlen);
}

/* What a symbol too small for its list's type (dm_symbols_find's ERANGE)
 * is, most likely: a lock of another kind, locked through calls the shim
 * does not interpose (GLib's GMutex is a futex of GLib's own, 8 bytes; its
 * GRecMutex, GRWLock and GCond 16; a spin lock 4), which mapped would
 * exclude nothing. The cause and the fix, said after the sizes. */
static const char *kind_hint(const struct dm_object_config *mc)
{
    if (mc->cond)
        return "so it is no pthread_cond_t, cnd_t or std::condition_variable. A condition "
               "variable of another kind (GLib's GCond, 16 bytes) waits and wakes through "
               "calls the shim does not interpose: listed, it would wake no other process. "
               "Wait on a pthread_cond_t, cnd_t or std::condition_variable and list that one";
    if (mc->rw)
        return "so it is no pthread_rwlock_t or std::shared_mutex. A read-write lock of "
               "another kind (GLib's GRWLock, 16 bytes) locks through calls the shim does not "
               "interpose: listed, it would exclude nothing. Lock the data with a "
               "pthread_rwlock_t or std::shared_mutex and list that one";
    return "so it is no pthread_mutex_t, mtx_t or std::mutex. A lock of another kind (GLib's "
           "GMutex, 8 bytes, a futex of GLib's own; GRecMutex, 16; a pthread_spinlock_t, 4) "
           "locks through calls the shim does not interpose: mapped, it would exclude "
           "nothing. Lock the data with a pthread_mutex_t, mtx_t or std::mutex and map that one";
}

static void lookup_failed(const struct dm_config *cfg, const struct dm_object_config *mc,
                          int rc, const char *err, int fatal)
{
    char where[DM_ERR_MAX];
    struct entry_what w;
    snprintf(where, sizeof where, "%s:%d", cfg->path, mc->line);
    /* Only a symbol too small as a whole is another kind of lock, likely;
     * past an offset or an index, the numbers say what is wrong. */
    int hint = rc == ERANGE && mc->offset == 0 && mc->index <= 0;
    char why[DM_ERR_MAX + 512];
    snprintf(why, sizeof why, "%s%s%s", err, hint ? ", " : "", hint ? kind_hint(mc) : "");
    if (!mc->required) {
        dm_info("%s: %s (required = false: skipped)", where, why);
        check_print(mc, entry_what(mc, &w), "not found: skipped (required = false)");
        return;
    }
    if (fatal) {
        char more[DM_ERR_MAX + 672];
        snprintf(more, sizeof more, "%s%s", why, cfg->nprograms || hint ? "" :
                 " (if this process is not the program the config is for, list that "
                 "program in `programs`)");
        entry_fail("%s: %s", where, more);
        return;
    }
    dm_error("%s: %s: this mutex is NOT cluster-wide", where, why);
}

static int resolve_symbol(const struct dm_config *cfg, const struct dm_object_config *mc,
                          uintptr_t *out, int fatal)
{
    char err[DM_ERR_MAX];
    int rc = lookup_symbol(mc, out, err, sizeof err);
    if (rc == 0)
        return 0;
    lookup_failed(cfg, mc, rc, err, fatal);
    return -1;
}

/* Maps an entry resolved to `addr`. No loader calls: may run under
 * objects_mu. */
static int map_address(const struct dm_config *cfg, const struct dm_object_config *mc,
                       uintptr_t addr, int fatal)
{
    char where[DM_ERR_MAX];
    struct entry_what w;
    const char *what = entry_what(mc, &w);
    snprintf(where, sizeof where, "%s:%d", cfg->path, mc->line);
    int r = mc->cond ? dm_mapped_add_cond((void *)addr, mc->name, 0)
          : mc->rw ? dm_mapped_add_rwlock((void *)addr, mc->name, 0)
                   : dm_mapped_add((void *)addr, mc->name, entry_flags(mc));
    if (r == EEXIST) {
        if (fatal) {
            entry_fail(mc->cond || mc->rw ? "%s: %s is already mapped by another entry (one "
                       "variable, two names, or two kinds: mutex, cond, rwlock)"
                       : "%s: %s is already mapped by another entry under another name "
                       "(one mutex, two lock names)", where, what);
            return -1;
        }
        dm_error("%s: %s is already mapped under another name", where, what);
        return -1;
    }
    if (r != 0) {
        if (fatal) {
            entry_fail("%s: cannot map a mutex: %s", where, strerror(r));
            return -1;
        }
        dm_error("%s: cannot map %s: %s", where, what, strerror(r));
        return -1;
    }
    if (mc->cond)
        conds_mapped++;
    if (mc->rw)
        rwlocks_mapped++;
    dm_debug("mapped %s%s%s at %p as %s", what, mc->object ? " in " : "",
             mc->object ? mc->object : "", (void *)addr, mc->name);
    return 0;
}

/* After dlopen or dlclose: map the entries whose object came, unmap those
 * whose object went.
 *
 * The loader is asked (dl_iterate_phdr, dlsym, dladdr: they take the
 * loader's lock) with no lock of the shim held: a library constructor runs
 * under the loader's lock, and if it calls dlopen (or anything that gets
 * here) while another thread held objects_mu and waited for the loader,
 * both would wait forever. So each sync observes without the lock and
 * applies under it. Syncs may overlap; each takes a number when it starts,
 * after its own dlopen/dlclose, and an entry only takes a view from a sync
 * that started later than the one it last took: a slow sync's older view
 * never undoes a newer one, and when dlopen returns, every entry shows a
 * view taken after that dlopen. */
static void sync_objects(void)
{
    dm_lock(&objects_mu);
    unsigned long gen = ++objects_gen;
    dm_unlock(&objects_mu);
    int changed = 0;
    for (size_t i = 0; i < nobject_entries; i++) {
        struct object_entry *oe = &object_entries[i];
        uintptr_t bias = 0, addr = 0;
        int loaded = dm_symbols_bias(oe->mc->object, &bias);
        int resolved = 0, failed = 0;
        for (;;) {
            dm_lock(&objects_mu);
            if (oe->gen >= gen) {
                dm_unlock(&objects_mu);
                break;          /* a later sync has applied a newer view */
            }
            int need = loaded && !(oe->addr && oe->bias == bias) && !resolved && !failed;
            if (need) {
                dm_unlock(&objects_mu);
                /* A failed lookup is not retried. It is only reported
                 * when the object is still there as observed: else it
                 * was unloaded meanwhile, and that dlclose's sync says
                 * what is true now. */
                char err[DM_ERR_MAX];
                uintptr_t again = 0;
                int rc = lookup_symbol(oe->mc, &addr, err, sizeof err);
                if (rc == 0) {
                    resolved = 1;
                } else {
                    failed = 1;
                    if (dm_symbols_bias(oe->mc->object, &again) && again == bias)
                        lookup_failed(&config, oe->mc, rc, err, 0);
                }
                continue;
            }
            if (oe->addr && (!loaded || oe->bias != bias)) {
                dm_mapped_remove((void *)oe->addr);
                struct entry_what w;
                dm_debug("unmapped %s: %s was unloaded", entry_what(oe->mc, &w), oe->mc->object);
                oe->addr = 0;
                changed = 1;
            }
            if (loaded && !oe->addr && resolved &&
                map_address(&config, oe->mc, addr, 0) == 0) {
                oe->addr = addr;
                oe->bias = bias;
                changed = 1;
            }
            oe->gen = gen;
            dm_unlock(&objects_mu);
            break;
        }
    }
    if (changed)
        dm_symbols_flush();
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
        if (!origin && memchr(dirs, '$', n))
            dir[0] = 0;         /* set-user-ID: ld.so would not expand it either */
        else if (n >= 7 && strncmp(dirs, "$ORIGIN", 7) == 0 && (n == 7 || dirs[7] == '/'))
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
    /* A set-user-ID (AT_SECURE) process: ld.so ignores LD_LIBRARY_PATH
     * and $ORIGIN there, and so must we, or the environment would choose
     * the code a privileged program runs. */
    int secure = getauxval(AT_SECURE) != 0;
    if ((!secure && search_dirs(getenv("LD_LIBRARY_PATH"), origin, file, buf, len)) ||
        search_dirs((const char *)(strtab + runpath), secure ? NULL : origin, file, buf, len))
        return buf;
    return file;
}

void *dm_startup_dlopen(const char *file, int flags, const void *caller)
{
    char path[PATH_MAX];
    const char *f = nobject_entries ? runpath_of_caller(file, caller, path, sizeof path) : file;
    void *h = dm_real.dlopen(f, flags);
    if (h && nobject_entries)
        sync_objects();
    return h;
}

int dm_startup_dlclose(void *handle)
{
    int r = dm_real.dlclose(handle);
    if (r == 0 && nobject_entries)
        sync_objects();
    return r;
}

static void add_object_entry(const struct dm_config *cfg, struct dm_object_config *mc,
                             uintptr_t addr, uintptr_t bias)
{
    struct object_entry *n = realloc(object_entries, (nobject_entries + 1) * sizeof *n);
    if (!n)
        config_fail("%s%s: out of memory", cfg->path, "");
    n[nobject_entries].mc = mc;
    n[nobject_entries].addr = addr;
    n[nobject_entries].bias = bias;
    n[nobject_entries].gen = 0;
    object_entries = n;
    nobject_entries++;
}

/* Checking with DMUTEX_CHECK_FD: entry mc, mapped at addr, for the
 * command to hold against the debug info of the file that holds addr. A
 * tab or newline in a field would break the line: such an entry is not
 * sent (and so not checked against debug info). */
static void check_record(const struct dm_object_config *mc, const char *what, uintptr_t addr)
{
    struct dm_symbols_where w;
    if (check_fd < 0 || dm_symbols_where(addr, 0, &w) != 0 ||
        strpbrk(w.path, "\t\n") || strpbrk(what, "\t\n") || strpbrk(mc->name, "\t\n"))
        return;
    dprintf(check_fd, "E\t%d\t%s\t%s\t%#lx\t%s\t%s\n", mc->line,
            mc->cond ? "conds" : mc->rw ? "rwlocks" : "mutexes", w.path,
            (unsigned long)w.vaddr, what, mc->name);
}

static void map_entries(struct dm_config *cfg)
{
    char err[DM_ERR_MAX];
    if (check_fd >= 0 && !strpbrk(cfg->path, "\t\n"))
        dprintf(check_fd, "C\t%s\n", cfg->path);
    for (size_t i = 0; i < cfg->nmutexes + cfg->nconds + cfg->nrwlocks; i++) {
        struct dm_object_config *mc = i < cfg->nmutexes ? &cfg->mutexes[i]
            : i < cfg->nmutexes + cfg->nconds ? &cfg->conds[i - cfg->nmutexes]
                                              : &cfg->rwlocks[i - cfg->nmutexes - cfg->nconds];
        if (mc->init_site || mc->init_site_address >= 0) {
            uintptr_t start, end;
            char isa[96];
            snprintf(isa, sizeof isa, "init_site_address %#lx (weak: address of this build only)",
                     (unsigned long)mc->init_site_address);
            const char *site = mc->init_site ? mc->init_site : isa;
            int r;
            if (mc->init_site) {
                r = dm_symbols_function(mc->object, mc->init_site, &start, &end, err, sizeof err);
            } else {
                /* One call: the return address of that pthread_mutex_init call. */
                r = dm_symbols_at(mc->object, (uintptr_t)mc->init_site_address, 1, 1,
                                  mc->build_id, &start, err, sizeof err);
                end = start + 1;
            }
            if (r != 0) {
                if (!mc->required) {
                    dm_info("%s:%d: %s (required = false: skipped)", cfg->path, mc->line, err);
                    check_print(mc, site, "not found: skipped (required = false)");
                    skipped_at_start[kind_of(mc)]++;
                    continue;
                }
                char where[DM_ERR_MAX];
                snprintf(where, sizeof where, "%s:%d", cfg->path, mc->line);
                entry_fail("%s: %s", where, err);
                continue;
            }
            if (check_mode) {
                char what[DM_ERR_MAX], where[PATH_MAX + 128], at[PATH_MAX + 64];
                snprintf(what, sizeof what, "%s%s", mc->init_site ? "init_site " : "", site);
                check_where(start, at, sizeof at);
                if (mc->init_site)
                    snprintf(where, sizeof where, "%s, %lu byte%s", at,
                             (unsigned long)(end - start), end - start == 1 ? "" : "s");
                else
                    snprintf(where, sizeof where, "%s, the return address of one %s call", at,
                             init_calls[kind_of(mc)]);
                check_print(mc, what, where);
            }
            struct dm_init_site **sites = mc->cond ? &cond_sites : mc->rw ? &rw_sites : &init_sites;
            size_t *nsites = mc->cond ? &dm_startup_ncond_sites
                           : mc->rw ? &dm_startup_nrw_sites : &dm_startup_ninit_sites;
            struct dm_init_site *n = realloc(*sites, (*nsites + 1) * sizeof *n);
            if (!n)
                config_fail("%s%s: out of memory", cfg->path, "");
            n[*nsites].start = start;
            n[*nsites].end = end;
            n[*nsites].name = mc->name;
            n[*nsites].flags = DM_MAP_HEAP | entry_flags(mc);
            *sites = n;
            (*nsites)++;
            if (!mc->init_site)
                site_calls[kind_of(mc)]++;
            continue;
        }
        uintptr_t bias = 0;
        if (mc->object && !dm_symbols_bias(mc->object, &bias)) {
            /* A plugin, perhaps: mapped when it is loaded. */
            add_object_entry(cfg, mc, 0, 0);
            later_at_start[kind_of(mc)]++;
            struct entry_what w;
            check_print(mc, entry_what(mc, &w), "not loaded at start: mapped when dlopen loads it");
            dm_info("%s:%d: %s is not loaded yet: %s is mapped when it is", cfg->path,
                    mc->line, mc->object, entry_what(mc, &w));
            continue;
        }
        uintptr_t addr;
        if (resolve_symbol(cfg, mc, &addr, 1) != 0) {
            if (!mc->required)
                skipped_at_start[kind_of(mc)]++;
            continue;
        }
        if (map_address(cfg, mc, addr, 1) != 0)
            continue;
        if (mc->object)
            add_object_entry(cfg, mc, addr, bias);
        if (check_mode) {
            char what[DM_ERR_MAX], where[PATH_MAX + 64];
            struct entry_what w;
            int n = snprintf(what, sizeof what, "%s", entry_what(mc, &w));
            if (mc->offset && n >= 0 && (size_t)n < sizeof what)
                n += snprintf(what + n, sizeof what - n, "+%ld", mc->offset);
            if (mc->index >= 0 && n >= 0 && (size_t)n < sizeof what)
                snprintf(what + n, sizeof what - n, "[%ld]", mc->index);
            check_where(addr, where, sizeof where);
            check_print(mc, what, where);
            check_record(mc, what, addr);
        }
    }
    dm_symbols_flush();
}

/* ---- fork --------------------------------------------------------------
 * A fork copies the shim's internal locks in whatever state other threads
 * left them; a lock held by a thread that does not exist in the child is
 * held there forever. So, as glibc does for malloc, the forking thread
 * takes every internal lock before the fork (prepare) and lets go of them
 * after it, in the parent and in the child; the data they guard is then
 * consistent on both sides. This is the one place fork handling is
 * registered, and this is the one order of the internal locks:
 *
 *   startup objects_mu -> symbols cache_lock -> mapped names_mu -> mapped conds_mu
 *     -> registry writer lock -> metrics mu
 *     -> [the store's: release reader_mu -> resend resend_mu -> rlock locks_mu
 *         -> notify nmu -> redis pool_mu -> sentinel smu -> slots smu; or etcd's:
 *         elock, cmu, watch all_mu, etcd emu] -> tls ssl_rw (write side)
 *     -> watchdog wmu
 *
 * It is the order the code nests them: sync_objects maps (names_mu, the
 * registry) under objects_mu; mapped's name_get makes the cluster lock
 * (locks_mu) under names_mu, which registers its channels (nmu) under
 * locks_mu; a cond name's record (conds_mu) takes the cluster record and a
 * channel the same way; mapped walks the registry (dm_registry_foreach holds its writer
 * lock) to count or drop holds, taking a name's mutex and, through the
 * watchdog, wmu; release's reader_mu (the reader's start) and resend's
 * resend_mu (the resender's) are held alone, never with locks_mu;
 * cache_lock, pool_mu, slots's smu (the slot map) and wmu hold nothing else (the
 * watchdog and notify threads let go of theirs before any I/O); metrics's
 * mu guards its flags only: never held across I/O (a write of the metrics
 * file runs outside it and takes no lock), it takes nothing else; ssl_rw's
 * read side is held only inside OpenSSL calls, which take no shim lock. A lock may
 * only be taken while holding locks to its left. Logging takes no lock.
 * Not included: the per-name mutexes of mapped (never held across I/O,
 * taken under names_mu and the registry lock, and taking wmu themselves),
 * tls's ctx_mu (the TLS context, made once) and sentinel's ask_mu (held
 * while the sentinels are asked, taking nothing else); the child makes
 * them anew (dm_mapped_atfork, dm_tls_atfork, dm_sentinel_atfork).
 * The callbacks sentinel and slots call when a primary may have moved
 * (util's dm_hooks: notify's wake-up, rlock's resender) take no lock at
 * all: notify's thread reaches slots's with nmu held (a MOVED answering a
 * subscription), and rlock's prepare takes its own mutexes before nmu.
 *
 * The child lets go in the reverse order, so that each module's child
 * handler, which may take the locks to its right (rlock's registers
 * channels, nmu; mapped's walks the registry), finds them free. Handlers
 * that make a mutex anew in the child instead of unlocking it are
 * equivalent: the prepare handler held it, so nothing it guards is half
 * changed. */
static void symbols_atfork(enum dm_fork_phase phase)
{
    if (phase == DM_FORK_PREPARE)
        dm_symbols_atfork_prepare();
    else
        dm_symbols_atfork_release();
}

static void registry_atfork(enum dm_fork_phase phase)
{
    if (phase == DM_FORK_PREPARE)
        dm_registry_atfork_prepare();
    else
        dm_registry_atfork_release();
}

/* The lock order above, after objects_mu: prepare walks it forward,
 * parent and child backward. */
static void (*const fork_order[])(enum dm_fork_phase) = {
    symbols_atfork, dm_mapped_atfork, registry_atfork, dm_metrics_atfork,
    dm_store_atfork,    /* the store's own: Redis's release reader_mu ... slots smu */
    dm_tls_atfork,      /* ssl_rw, below either store (shim/tls.c) */
    dm_watchdog_atfork,
    dm_who_atfork,      /* who's mutex (who takes wmu only without it: any place works) */
};
#define FORK_MODULES (sizeof fork_order / sizeof fork_order[0])

static void atfork_prepare(void)
{
    dm_lock(&objects_mu);
    for (size_t i = 0; i < FORK_MODULES; i++)
        fork_order[i](DM_FORK_PREPARE);
}

static void atfork_after(enum dm_fork_phase phase)
{
    for (size_t i = FORK_MODULES; i-- > 0;)
        fork_order[i](phase);
    /* A normal mutex: in the child, unlocked by the thread that is now the
     * child's. */
    dm_unlock(&objects_mu);
}

static void atfork_parent(void)
{
    atfork_after(DM_FORK_PARENT);
}

static void atfork_child(void)
{
    __atomic_store_n(&own_pid, getpid(), __ATOMIC_RELAXED);
    atfork_after(DM_FORK_CHILD);
}

/* ---- start ------------------------------------------------------------- */

/* The config file as an absolute path, also in this process's environment:
 * a helper this process starts after a chdir() must find the same file
 * (and learn from its `programs` that it is not meant), not fail to read a
 * relative name. Left alone when it cannot be resolved: reading it fails
 * with a message then. */
static const char *absolute_config(const char *path, char *buf, size_t len)
{
    if (path[0] == '/' || len < PATH_MAX || !realpath(path, buf))
        return path;
    if (setenv("DMUTEX_CONFIG", buf, 1) != 0)
        dm_warn("cannot make DMUTEX_CONFIG=%s absolute for child processes: %s", path,
                strerror(errno));
    return buf;
}

/* "N init_site functions[, M init_site_address calls]": a kind's init
 * sites, each counted as what it is. */
static const char *sites_summary(int kind, size_t nsites, char *buf, size_t len)
{
    size_t calls = site_calls[kind], funcs = nsites - calls;
    int n = snprintf(buf, len, "%zu init_site function%s", funcs, funcs == 1 ? "" : "s");
    if (calls && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", %zu init_site_address call%s", calls,
                 calls == 1 ? "" : "s");
    return buf;
}

/* ", N conds (M init_site functions...)" when the config lists conds,
 * and the same for rwlocks. */
static const char *conds_summary(void)
{
    static char buf[256];
    char sites[96];
    buf[0] = 0;
    size_t n = 0;
    if (config.nconds)
        n = (size_t)snprintf(buf, sizeof buf, ", %zu conds (%s)", conds_mapped,
                             sites_summary(KIND_COND, dm_startup_ncond_sites, sites, sizeof sites));
    if (config.nrwlocks && n < sizeof buf)
        snprintf(buf + n, sizeof buf - n, ", %zu rwlocks (%s)", rwlocks_mapped,
                 sites_summary(KIND_RWLOCK, dm_startup_nrw_sites, sites, sizeof sites));
    return buf;
}

/* The start-up line's account of the entries: for each kind the config
 * lists, "KIND: N entries, M mapped now, K by init_site" (init_site
 * entries map their mutexes as they are made), then those that dlopen
 * maps and those skipped, when there are some; "; " between kinds. */
static const char *entries_summary(void)
{
    static const char *const kinds[KINDS] = { "mutexes", "conds", "rwlocks" };
    size_t entries[KINDS] = { config.nmutexes, config.nconds, config.nrwlocks };
    size_t now[KINDS] = { dm_registry_count() - conds_mapped - rwlocks_mapped, conds_mapped,
                          rwlocks_mapped };
    size_t sites[KINDS] = { dm_startup_ninit_sites, dm_startup_ncond_sites,
                            dm_startup_nrw_sites };
    static char buf[3 * 192];
    size_t n = 0;
    buf[0] = 0;
    for (int k = 0; k < KINDS; k++) {
        if (entries[k] == 0)
            continue;
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s: %zu entr%s, %zu mapped now, %zu by "
                              "init_site", n ? "; " : "", kinds[k], entries[k],
                              entries[k] == 1 ? "y" : "ies", now[k], sites[k]);
        if (later_at_start[k] && n < sizeof buf)
            n += (size_t)snprintf(buf + n, sizeof buf - n, ", %zu when dlopen loads their "
                                  "object", later_at_start[k]);
        if (skipped_at_start[k] && n < sizeof buf)
            n += (size_t)snprintf(buf + n, sizeof buf - n, ", %zu skipped (required = false)",
                                  skipped_at_start[k]);
        if (n >= sizeof buf)
            break;
    }
    return buf;
}

/* The end of a check, before main: its verdict as the exit status. No
 * destructor runs (nothing is held: no lock was taken, no thread made). */
static void check_exit(int summary)
{
    char line[PATH_MAX + 512];
    if (summary && check_errors == 0) {
        char sites[96];
        snprintf(line, sizeof line, "%s: %zu mutexes would be mapped (%s)%s, %s at %s, "
                 "namespace %s", config.path ? config.path : "config",
                 dm_registry_count() - conds_mapped - rwlocks_mapped,
                 sites_summary(KIND_MUTEX, dm_startup_ninit_sites, sites, sizeof sites),
                 conds_summary(), dm_store->name, dm_store->where(), config.ns ? config.ns : "-");
        if (check_fd >= 0)
            dprintf(check_fd, "S\t%s\n", line);
        else if (check_mode == CHECK_PRINT)
            printf("%s\n", line);
    }
    if (check_errors && check_fd >= 0)
        dprintf(check_fd, "N\t%d\n", check_errors);
    else if (check_errors)
        dm_error("%d error%s: the program would not start", check_errors,
                 check_errors == 1 ? "" : "s");
    fflush(stdout);
    dm_real.exit_now(check_errors ? DM_EX_CONFIG : 0);
}

__attribute__((constructor)) static void dm_startup_start(void)
{
    dm_log_init();
    dm_real_resolve();
    /* secure_getenv: in a set-user-ID or set-group-ID process (AT_SECURE)
     * the environment belongs to whoever started it and is ignored. */
    const char *path = secure_getenv("DMUTEX_CONFIG");
    const char *check = secure_getenv("DMUTEX_CHECK");
    if (check && *check) {
        check_mode = strcmp(check, "quiet") == 0 ? CHECK_QUIET : CHECK_PRINT;
        const char *fd = secure_getenv("DMUTEX_CHECK_FD");
        char *end;
        long v = fd && *fd ? strtol(fd, &end, 10) : -1;
        if (v >= 0 && v <= INT_MAX && *end == '\0' && fcntl((int)v, F_GETFD) >= 0)
            check_fd = (int)v;
    }
    if ((!path || !*path) && getauxval(AT_SECURE) && getenv("DMUTEX_CONFIG"))
        config_fail("this is a set-user-ID or set-group-ID process (AT_SECURE): DMUTEX_CONFIG "
                    "and every other DMUTEX_* variable of the environment are ignored%s%s, so "
                    "no mutex would be cluster-wide (take libdmutex.so out of its preload)",
                    "", "");
    if (!path || !*path)
        config_fail("DMUTEX_CONFIG is not set: no mutex would be cluster-wide%s%s "
                    "(set it to a config file, or take libdmutex.so out of LD_PRELOAD)", "", "");
    char abs[PATH_MAX], exe[PATH_MAX], err[DM_ERR_MAX];
    path = absolute_config(path, abs, sizeof abs);
    /* Whether this process is one the config is for is decided from
     * `programs` alone, before anything that only the program needs
     * (password_env, DMUTEX_REDIS, symbols) can stop a helper. */
    const char *prog = exe_name(exe, sizeof exe);
    int r = dm_config_load_for(path, prog, &config, err, sizeof err);
    if (r < 0)
        config_fail("%s%s", err, "");
    if (r == DM_CONFIG_NOT_FOR) {
        dm_debug("%s is not among the programs of %s: nothing mapped", prog, path);
        if (check_mode == CHECK_PRINT)
            printf("%s is not among the programs of %s: nothing would be mapped\n", prog, path);
        dm_config_free(&config);
        if (check_mode)
            check_exit(0);
        return;
    }
    if (dm_config_check_mutexes(&config, err, sizeof err) != 0)
        config_fail("%s%s", err, "");
    const char *url = secure_getenv("DMUTEX_REDIS");
    if (url && *url && dm_config_set_redis_url(&config, url, err, sizeof err) != 0) {
        char shown[DM_ERR_MAX];
        dm_config_redact_url(url, shown, sizeof shown);
        config_fail("DMUTEX_REDIS=%s: %s", shown, err);
    }
    const char *etcd = secure_getenv("DMUTEX_ETCD");
    if (etcd && *etcd) {
        char u[4096];
        snprintf(u, sizeof u, "%s%s", strstr(etcd, "://") ? "" : "etcd://", etcd);
        if (strncmp(u, "etcd://", 7) != 0 && strncmp(u, "etcds://", 8) != 0)
            config_fail("DMUTEX_ETCD=%s: %s", etcd, "must be etcd://host:port[,host:port...], "
                        "etcds://... (TLS) or the host:port list alone");
        if (dm_config_set_redis_url(&config, u, err, sizeof err) != 0)
            config_fail("DMUTEX_ETCD=%s: %s", etcd, err);
    }
    const char *metrics = secure_getenv("DMUTEX_METRICS");
    if (metrics && *metrics && dm_config_set_metrics_file(&config, metrics, err, sizeof err) != 0)
        config_fail("DMUTEX_METRICS=%s: %s", metrics, err);
    if (dm_config_check_protocols(&config, err, sizeof err) != 0)
        config_fail("%s%s", err, etcd && *etcd ? " (DMUTEX_ETCD)" : "");
    dm_store_init(&config, DM_STORE_OF(&config));
    dm_metrics_init(&config);
    dm_mapped_init(&config);
    map_entries(&config);
    if (check_mode)
        check_exit(1);
    int fr = pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    if (fr != 0)
        config_fail("cannot register the fork handlers: %s%s (a fork child could inherit a "
                    "held lock of the shim)", strerror(fr), "");
    __atomic_store_n(&own_pid, getpid(), __ATOMIC_RELAXED);
    __atomic_store_n(&configured, 1, __ATOMIC_RELEASE);
    /* Who this process is to the tools: `dmutex ls` shows its holds as
     * host:pid program (its record, who.h), and its owner ids start with
     * the process id. */
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    if (config.nmutexes == 0 && config.nconds == 0 && config.nrwlocks == 0)
        dm_info("libdmutex %s: %s: mutexes = (): nothing mapped, %s at %s; this process is "
                "%s:%ld %s, process id %s", DMUTEX_VERSION, config.path, dm_store->name,
                dm_store->where(), host, (long)getpid(), program_invocation_short_name,
                dm_store_process_id());
    else
        dm_info("libdmutex %s: %s; %s at %s, namespace %s; this process is %s:%ld %s, process "
                "id %s", DMUTEX_VERSION, entries_summary(), dm_store->name, dm_store->where(),
                config.ns, host, (long)getpid(), program_invocation_short_name,
                dm_store_process_id());
}

__attribute__((destructor)) static void dm_startup_stop(void)
{
    if (configured) {
        dm_mapped_release_all();
        dm_metrics_exit();      /* after the releases: the held gauges say what stays held */
    }
}
