/* statics_other.c: a second file of trace_misc with a file-static mutex,
 * cond and rwlock of the same names as trace_misc.c's: two of each, so
 * `dmutex trace` must give them two names. */
#include <pthread.h>

void statics_other_work(int times);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;

void statics_other_work(int times)
{
    for (int i = 0; i < times; i++) {
        pthread_mutex_lock(&lock);
        pthread_mutex_unlock(&lock);
        pthread_cond_signal(&cond);
        pthread_rwlock_wrlock(&rw);
        pthread_rwlock_unlock(&rw);
    }
}
