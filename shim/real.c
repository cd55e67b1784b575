/* real: resolves the table of glibc's functions (see real.h). Runs from
 * inside interposed calls, possibly before any constructor of the shim:
 * no allocation, no lock, no other module but log. */
#include "real.h"

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

/* The resolvers that the table starts with: each fills the table, then
 * calls through. */
#define DM_REAL_FIRST(kind, type, member, sym, ver, params, args)                 \
    DM_REAL_ATTR_##kind static type first_##member params                        \
    {                                                                            \
        dm_real_resolve();                                                       \
        DM_REAL_RET_##kind dm_real.member args;                                  \
    }
DM_REAL_FUNCS(DM_REAL_FIRST)

#define DM_REAL_FIRST_OF(kind, type, member, sym, ver, params, args) first_##member,
struct dm_real dm_real = { DM_REAL_FUNCS(DM_REAL_FIRST_OF) };

static void *must_sym(const char *name, const char *version)
{
    void *p = version ? dlvsym(RTLD_NEXT, name, version) : NULL;
    if (!p)
        p = dlsym(RTLD_NEXT, name);
    if (!p) {
        dm_error("cannot find the real %s: %s", name, dlerror());
        /* not _exit: the shim's own, whose real one may be what is missing */
        syscall(SYS_exit_group, DM_REAL_EX_MISSING);
    }
    return p;
}

void dm_real_resolve(void)
{
    /* Racing resolvers store the same values: no lock needed. */
    struct dm_real r;
#define DM_REAL_LOOKUP(kind, type, member, sym, ver, params, args) \
    *(void **)&r.member = must_sym(sym, ver);
    DM_REAL_FUNCS(DM_REAL_LOOKUP)
    void **dst = (void **)&dm_real;
    void **src = (void **)&r;
    for (size_t i = 0; i < sizeof r / sizeof(void *); i++)
        __atomic_store_n(&dst[i], src[i], __ATOMIC_RELEASE);
}
