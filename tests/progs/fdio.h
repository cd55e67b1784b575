/* fdio.h: writing a whole buffer to a socket, for the fake servers of the
 * tests (tests/progs/faultserver.c, test_sentinel's fake sentinel).
 * Static inline, libc only. */
#ifndef DM_TEST_FDIO_H
#define DM_TEST_FDIO_H

#include <stddef.h>
#include <sys/types.h>
#include <unistd.h>

/* Writes all n bytes of s to fd; stops quietly when the peer is gone (a
 * fake server's client may hang up at any time: that is what is tested). */
static inline void fd_write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

#endif
