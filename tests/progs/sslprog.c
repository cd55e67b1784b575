/* sslprog: a program that uses OpenSSL itself (the same libssl as the
 * shim's), as a program with TLS connections of its own does: it
 * initialises OpenSSL the default way, which registers OpenSSL's cleanup
 * at exit, then returns from main holding held_lock. Knows nothing of
 * dmutex.
 *
 *   sslprog FILE    init OpenSSL, lock, "locked RC", wait until FILE
 *                   exists, an SSL_CTX of its own, "returning", return */
#define _GNU_SOURCE
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
    int rc = pthread_mutex_lock(&held_lock);
    say("locked %s", ename(rc));
    wait_file(argv[1]);
    SSL_CTX *x = SSL_CTX_new(TLS_client_method());
    say("own SSL_CTX %s", x ? "made" : "failed");
    SSL_CTX_free(x);
    say("returning");
    return 0;
}
