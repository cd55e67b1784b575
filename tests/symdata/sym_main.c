/* Test data for dmutex scan: a program made of the same translation units
 * as test_symbols, which uses every variable so none is dropped. */
#include <stdio.h>

#include "sym_data.h"
#include "sym_sync.h"

int main(void)
{
    pthread_mutex_lock(&sym_global_lock);
    pthread_mutex_unlock(&sym_global_lock);
    printf("%p %p %p %p %p %p %p %p %p %d\n", sym_a_cache_lock(), sym_b_cache_lock(),
           sym_a_only_lock(), (void *)&sym_inventory, (void *)sym_slots, sym_fn_lock(),
           sym_cxx_lock(), sym_tls_lock_addr(), (void *)&symlib_copied_lock,
           sym_known_function(2));
    printf("%p %p %p %p %p %p %p %p\n", (void *)&sym_ready_cond, (void *)sym_wake_cond,
           (void *)&sym_queue, (void *)&sym_routes_rwlock, (void *)&sym_table_lock,
           sym_static_cv_addr(), sym_cxx_cv_addr(), sym_cxx_shared_mutex_addr());
    return 0;
}
