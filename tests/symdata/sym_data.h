/* What the test data translation units and libraries define, for
 * test_symbols. */
#ifndef SYM_DATA_H
#define SYM_DATA_H

#include <pthread.h>

struct sym_inventory {
    long count;
    pthread_mutex_t lock;
    char name[16];
};

extern pthread_mutex_t sym_global_lock;
extern struct sym_inventory sym_inventory;
extern pthread_mutex_t sym_slots[4];
extern int sym_small_lock;
extern char sym_sizeless[];

void *sym_a_cache_lock(void);
void *sym_a_only_lock(void);
void *sym_b_cache_lock(void);
void *sym_tls_lock_addr(void);
void *sym_fn_lock(void);
int sym_known_function(int x);
int sym_ifunc(void);

/* sym_cxx.cc */
void *sym_cxx_lock(void);
void *sym_cxx_ns_lock(void);
void *sym_cxx_recursive_lock(void);

/* libsymlib.so, linked in */
extern pthread_mutex_t symlib_copied_lock;  /* referenced directly: copy relocation */
void *symlib_lock_addr(void);
void *symlib_static_lock_addr(void);
void *symlib_copied_lock_addr(void);

#endif
