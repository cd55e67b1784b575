/* statics_other.c: a second file of trace_misc with a file-static mutex
 * of the same name as one in trace_misc.c: two mutexes, so `dmutex trace`
 * must give them two names. */
#include <pthread.h>

void statics_other_work(int times);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void statics_other_work(int times)
{
    for (int i = 0; i < times; i++) {
        pthread_mutex_lock(&lock);
        pthread_mutex_unlock(&lock);
    }
}
