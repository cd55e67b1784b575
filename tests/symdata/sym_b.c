/* Test data for test_symbols: a second translation unit with a file-static
 * of the same name as one in sym_a.c. */
#include <pthread.h>

#include "sym_data.h"

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;       /* also in sym_a.c */

void *sym_b_cache_lock(void) { return &cache_lock; }
