// Test data for dmutex scan: a std::condition_variable (a conds entry) and
// a std::shared_mutex (an rwlocks entry).
#include <condition_variable>
#include <shared_mutex>

std::condition_variable sym_cxx_cv;
std::shared_mutex sym_cxx_shared_mutex;

extern "C" void *sym_cxx_cv_addr(void) { return &sym_cxx_cv; }
extern "C" void *sym_cxx_shared_mutex_addr(void) { return &sym_cxx_shared_mutex; }
