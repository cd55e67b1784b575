/* libpsxplug.so: a plugin psx_host loads with dlopen("libpsxplug.so"),
 * found in plugins/ through the host's RUNPATH ($ORIGIN/plugins). Its
 * mutex is a file-static the plugin locks itself. */
#include <pthread.h>

static pthread_mutex_t plug_lock = PTHREAD_MUTEX_INITIALIZER;

int plug_enter(void *arg) { (void)arg; return pthread_mutex_lock(&plug_lock); }
int plug_leave(void *arg) { (void)arg; return pthread_mutex_unlock(&plug_lock); }
void *plug_lock_addr(void) { return &plug_lock; }
