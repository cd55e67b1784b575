/* fdio.h: writing a whole buffer to a socket, for the fake servers of the
 * tests (tests/progs/faultserver.c, test_sentinel's fake sentinel).
 * Static inline, libc only. */
#ifndef DM_TEST_FDIO_H
#define DM_TEST_FDIO_H

#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

/* Writes all n bytes of s to fd; stops quietly when the peer is gone (a
 * fake server's client may hang up at any time: that is what is tested).
 * A socket is written with MSG_NOSIGNAL: a write(2) to a peer that reset
 * raises SIGPIPE, which killed the fake server mid-test (test_replies'
 * cancel-delay case: its client gave up and closed while a reply was
 * relayed, and every later connect was refused). */
static inline void fd_write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK)
            w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

#endif
