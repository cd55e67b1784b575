/* What tests/symdata/sym_sync.c and sym_sync_cxx.cc define (conds and
 * rwlocks for dmutex scan). */
#ifndef SYM_SYNC_H
#define SYM_SYNC_H

#include <pthread.h>

struct sym_queue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    int n;
};

extern pthread_cond_t sym_ready_cond;
extern pthread_cond_t sym_wake_cond[3];
extern struct sym_queue sym_queue;
extern pthread_rwlock_t sym_routes_rwlock;
extern pthread_rwlock_t sym_table_lock;

void *sym_static_cv_addr(void);
void *sym_cxx_cv_addr(void);
void *sym_cxx_shared_mutex_addr(void);

#endif
