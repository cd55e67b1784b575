/* liblifeplug: the plugin test_lifecycle's lifeprog dlopens. An ordinary
 * library with one global mutex; the test's config maps it (object =
 * "liblifeplug.so"), so it is mapped while the library is loaded. */
#include <pthread.h>

pthread_mutex_t plug_lock = PTHREAD_MUTEX_INITIALIZER;
