/* trace_early: linked with libtraceearly.so (its constructor locks before
 * the tracer's runs); locks nothing itself and prints "threads N", the
 * number of threads the process has. */
#include <dirent.h>
#include <stdio.h>

int main(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    printf("threads %d\n", n);
    return 0;
}
