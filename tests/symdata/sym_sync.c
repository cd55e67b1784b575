/* Test data for dmutex scan: condition variables and rwlocks (conds and
 * rwlocks entries) as globals, a file-static, struct members beside a
 * mutex and array elements. Linked into sym_prog and sym_resolve only. */
#include "sym_sync.h"

pthread_cond_t sym_ready_cond = PTHREAD_COND_INITIALIZER;
pthread_cond_t sym_wake_cond[3] = { PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
                                    PTHREAD_COND_INITIALIZER };
struct sym_queue sym_queue = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
                               PTHREAD_COND_INITIALIZER, 0 };
pthread_rwlock_t sym_routes_rwlock = PTHREAD_RWLOCK_INITIALIZER;
/* An rwlock named like a mutex: without debug info its size tells. */
pthread_rwlock_t sym_table_lock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_cond_t sym_static_cv = PTHREAD_COND_INITIALIZER;

void *sym_static_cv_addr(void) { return &sym_static_cv; }
