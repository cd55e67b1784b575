/* Test data for test_symbols: one translation unit of the program whose
 * symbols the test resolves. Each variable's real address is exported
 * through a function so the test can compare it with what symbols found. */
#include <pthread.h>

#include "sym_data.h"

pthread_mutex_t sym_global_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;       /* also in sym_b.c */
static pthread_mutex_t only_in_a_lock = PTHREAD_MUTEX_INITIALIZER;
struct sym_inventory sym_inventory = { .lock = PTHREAD_MUTEX_INITIALIZER };
pthread_mutex_t sym_slots[4];
int sym_small_lock = 1;                 /* a lock-ish name, 4 bytes: too small */
__thread pthread_mutex_t sym_tls_lock;

/* A data object whose symbol has no size, as assembly writes them. */
__asm__(".data\n"
        ".globl sym_sizeless\n"
        ".type sym_sizeless, @object\n"
        "sym_sizeless:\n"
        ".zero 40\n"
        ".text\n");

void *sym_a_cache_lock(void) { return &cache_lock; }
void *sym_a_only_lock(void) { return &only_in_a_lock; }
void *sym_tls_lock_addr(void) { return &sym_tls_lock; }

/* A function-scope static: gcc names its symbol "fn_lock.0". */
void *sym_fn_lock(void)
{
    static pthread_mutex_t fn_lock = PTHREAD_MUTEX_INITIALIZER;
    return &fn_lock;
}

__attribute__((noinline)) int sym_known_function(int x)
{
    return x * 3 + sym_small_lock;
}

/* An indirect function: its symbol is the resolver, not the code. */
static int sym_ifunc_impl(void) { return 7; }
static int (*sym_ifunc_resolver(void))(void) { return sym_ifunc_impl; }
int sym_ifunc(void) __attribute__((ifunc("sym_ifunc_resolver")));
