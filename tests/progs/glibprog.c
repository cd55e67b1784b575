/* glibprog: locks of kinds the shim does not interpose, for the refusal
 * tests (tests/admin.test.sh, tests/scan.test.sh). The GLib types are
 * declared here with GLib's own layouts and names (glib/gthread.h and
 * glib/deprecated/gthread.h, GLib 2.76; no GLib is needed to build it):
 * GLib locks a GMutex with a futex of its own and a GStaticMutex through
 * the GMutex it points to, never through pthread_mutex_lock, so a config
 * entry naming one would be a lock that excludes nothing. Beside them a
 * pthread_mutex_t and a C11 mtx_t, which the shim does honour.
 *
 *   glibprog        says "main ran" (the refusals stop the program before
 *                   main), locks plain_lock and c11_lock once: "locked" */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <threads.h>

typedef void *gpointer;
typedef unsigned int guint;

typedef union _GMutex GMutex;
union _GMutex {
    gpointer p;
    guint i[2];
};

typedef struct _GRecMutex GRecMutex;
struct _GRecMutex {
    gpointer p;
    guint i[2];
};

typedef struct _GCond GCond;
struct _GCond {
    gpointer p;
    guint i[2];
};

typedef struct {
    GMutex *mutex;
    pthread_mutex_t unused;     /* only for ABI compatibility reasons (GLib's words) */
} GStaticMutex;

GMutex cache_lock;                      /* 8 bytes: no pthread_mutex_t fits */
GRecMutex tree_lock;                    /* 16 bytes */
GCond cache_cond;                       /* 16 bytes: no pthread_cond_t fits */
GStaticMutex legacy_lock = { NULL, PTHREAD_MUTEX_INITIALIZER };  /* 48: a mutex would fit */
struct registry {
    int entries;
    GStaticMutex lock;                  /* at offset 8; its pthread_mutex_t at 16 */
} registry;
pthread_spinlock_t stats_lock;          /* 4 bytes */
pthread_mutex_t plain_lock = PTHREAD_MUTEX_INITIALIZER;
mtx_t c11_lock;

int main(void)
{
    printf("main ran\n");
    fflush(stdout);
    mtx_init(&c11_lock, mtx_plain);
    pthread_mutex_lock(&plain_lock);
    pthread_mutex_unlock(&plain_lock);
    mtx_lock(&c11_lock);
    mtx_unlock(&c11_lock);
    printf("locked\n");
    return 0;
}
