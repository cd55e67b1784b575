/* sslprog: a program that uses OpenSSL itself (the same libssl as the
 * shim's), as a program with TLS connections of its own does: it
 * initialises OpenSSL the default way, which registers OpenSSL's cleanup
 * at exit, then returns from main holding held_lock. Knows nothing of
 * dmutex.
 *
 *   sslprog FILE    init OpenSSL, queue an error of its own (a failed
 *                   call), lock, "locked RC", "own error queue kept|lost"
 *                   (the queued error still first after the lock: the
 *                   shim's TLS work must not touch it), wait until FILE
 *                   exists, an SSL_CTX of its own, "returning", return */
#define _GNU_SOURCE
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>

#include "prog.h"

pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;

int main(int argc, char **argv)
{
    say("main");
    if (argc != 2) {
        fprintf(stderr, "usage: sslprog FILE\n");
        return 2;
    }
    if (OPENSSL_init_ssl(0, NULL) != 1) {
        say("OPENSSL_init_ssl failed");
        return 1;
    }
    SSL_CTX *bad = SSL_CTX_new(TLS_client_method());
    int loaded = bad && SSL_CTX_use_certificate_file(bad, "/nonexistent/dmutex-test.pem",
                                                     SSL_FILETYPE_PEM) == 1;
    unsigned long queued = ERR_peek_error();
    int rc = pthread_mutex_lock(&held_lock);
    say("locked %s", ename(rc));
    unsigned long after = ERR_peek_error();
    say("own error queue %s", !loaded && queued && after == queued ? "kept" : "lost");
    ERR_clear_error();
    SSL_CTX_free(bad);
    wait_file(argv[1]);
    SSL_CTX *x = SSL_CTX_new(TLS_client_method());
    say("own SSL_CTX %s", x ? "made" : "failed");
    SSL_CTX_free(x);
    say("returning");
    return 0;
}
