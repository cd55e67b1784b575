/* trace_malloc: a program whose malloc takes a pthread mutex (as programs
 * with an allocator of their own do), over glibc's __libc_* functions.
 * Its first lock is inside malloc: a tracer that started a thread there
 * (pthread_create allocates) would wait for that mutex forever, with
 * every signal blocked. Locks g_work 3 times and prints "allocs N". */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void *__libc_malloc(size_t n);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void __libc_free(void *p);

static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_work = PTHREAD_MUTEX_INITIALIZER;
static long allocs;

#define UNDER_HEAP_LOCK(expr)                                                 \
    ({                                                                        \
        pthread_mutex_lock(&heap_lock);                                       \
        allocs++;                                                             \
        __typeof__(expr) r_ = (expr);                                         \
        pthread_mutex_unlock(&heap_lock);                                     \
        r_;                                                                   \
    })

void *malloc(size_t n) { return UNDER_HEAP_LOCK(__libc_malloc(n)); }
void *calloc(size_t n, size_t size) { return UNDER_HEAP_LOCK(__libc_calloc(n, size)); }
void *realloc(void *p, size_t n) { return UNDER_HEAP_LOCK(__libc_realloc(p, n)); }
void *memalign(size_t a, size_t n) { return UNDER_HEAP_LOCK(__libc_memalign(a, n)); }
void *aligned_alloc(size_t a, size_t n) { return UNDER_HEAP_LOCK(__libc_memalign(a, n)); }

int posix_memalign(void **out, size_t a, size_t n)
{
    void *p = UNDER_HEAP_LOCK(__libc_memalign(a, n));
    if (!p)
        return 12;      /* ENOMEM */
    *out = p;
    return 0;
}

void free(void *p)
{
    pthread_mutex_lock(&heap_lock);
    __libc_free(p);
    pthread_mutex_unlock(&heap_lock);
}

int main(void)
{
    char *s = malloc(16);
    if (!s)
        return 1;
    strcpy(s, "x");
    free(s);
    for (int i = 0; i < 3; i++) {
        pthread_mutex_lock(&g_work);
        pthread_mutex_unlock(&g_work);
    }
    char line[64];
    int n = snprintf(line, sizeof line, "allocs %ld\n", allocs);
    return write(STDOUT_FILENO, line, (size_t)n) == n ? 0 : 1;
}
