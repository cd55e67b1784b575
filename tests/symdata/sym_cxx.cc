// Test data for test_symbols: C++ mutexes. A variable at namespace scope of
// the global namespace is not mangled; one inside a namespace is.
#include <mutex>

std::mutex sym_cxx_global_lock;
std::recursive_mutex sym_cxx_recursive;
namespace app {
std::mutex ns_lock;
}

extern "C" void *sym_cxx_lock(void) { return &sym_cxx_global_lock; }
extern "C" void *sym_cxx_ns_lock(void) { return &app::ns_lock; }
extern "C" void *sym_cxx_recursive_lock(void) { return &sym_cxx_recursive; }
