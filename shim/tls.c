/* tls: TLS sessions on connected sockets for both stores (tls.h says the
 * contract): OpenSSL loaded with dlopen on first need, the context made
 * from the config, the handshake with its certificate checks, a session's
 * reads and writes one non-blocking step each or bounded by poll(2),
 * failures in words, fork and exit. Below both stores: it knows neither
 * hiredis nor HTTP; shim/redis/tls.c adapts it to a redisContext,
 * shim/etcd/http.c calls it for https:// members.
 *
 * OpenSSL is initialised once, when a config with TLS is set up (at the
 * process's start; a process without TLS never initialises it), without
 * an atexit handler: the shim's destructor runs after atexit handlers and
 * may still release holds over TLS. The first initialisation of a process
 * decides that for everyone, so a program that uses the same libssl
 * itself then gets no cleanup at exit either (memory a leak checker
 * reports as still reachable, nothing else). Had the program initialised
 * OpenSSL before the shim (in a constructor of its own), its cleanup may
 * run first: OPENSSL_atexit tells us, and from then on a TLS call fails
 * with words (DM_TLS_GONE) instead of touching freed state. */
#include "tls.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "real.h"
#include "util.h"

#define DM_TLS_ERRSTR_MAX 128           /* hiredis's errstr */

struct dm_tls {
    SSL *ssl;
    int fd;
    enum dm_tls_err err;            /* the last failure */
    int sys_errno;                  /* DM_TLS_SYS */
    char errstr[DM_TLS_ERRSTR_MAX];
    char why[DM_TLS_WHY_MAX];       /* DM_TLS_FAILED: the long words */
    const char *addr;               /* the caller's: the server's address text */
    char name[256];                 /* the name the certificate must be for */
};

/* OpenSSL is loaded with dlopen when a config with TLS is set up, not
 * linked: a process without TLS (most, and every program the shim is
 * preloaded into by inheritance) does not pay for loading and relocating
 * libcrypto at its start. A program that uses the same libssl gets the
 * copy it already has. Every OpenSSL function of this file is in this list;
 * below it, each name stands for the loaded pointer, so the code reads as
 * plain OpenSSL (the headers' macros, SSL_CTX_set_mode and the like,
 * expand to SSL_CTX_ctrl, which is in the list too). */
#define DM_OSSL_FUNCS(X) \
    X(OPENSSL_init_ssl) X(OPENSSL_atexit) X(ERR_peek_error) X(ERR_reason_error_string) \
    X(ERR_error_string_n) X(ERR_clear_error) X(ERR_get_error_all) X(ERR_new) X(ERR_set_debug) \
    X(ERR_set_error) X(TLS_client_method) X(SSL_CTX_new) \
    X(SSL_CTX_free) X(SSL_CTX_up_ref) X(SSL_CTX_ctrl) X(SSL_CTX_set_verify) \
    X(SSL_CTX_load_verify_locations) X(SSL_CTX_set_default_verify_paths) \
    X(SSL_CTX_use_certificate_chain_file) X(SSL_CTX_use_PrivateKey_file) \
    X(SSL_CTX_check_private_key) X(SSL_new) X(SSL_free) X(SSL_ctrl) X(SSL_set1_host) \
    X(SSL_get0_param) X(X509_VERIFY_PARAM_set1_ip_asc) X(SSL_connect) \
    X(SSL_read) X(SSL_write) X(SSL_pending) X(SSL_get_error) X(SSL_get_verify_result) \
    X(X509_verify_cert_error_string) \
    X(BIO_meth_new) X(BIO_get_new_index) X(BIO_s_socket) X(BIO_meth_set_write) \
    X(BIO_meth_set_read) X(BIO_meth_set_puts) X(BIO_meth_set_ctrl) X(BIO_meth_set_create) \
    X(BIO_meth_set_destroy) X(BIO_meth_get_read) X(BIO_meth_get_puts) X(BIO_meth_get_ctrl) \
    X(BIO_meth_get_create) X(BIO_meth_get_destroy) X(BIO_new) X(BIO_int_ctrl) X(BIO_ctrl) \
    X(BIO_clear_flags) X(BIO_set_flags) X(SSL_set_bio)

#define DM_OSSL_SONAME "libssl.so." DM_STR(OPENSSL_SHLIB_VERSION)
#define DM_STR(x) DM_STR2(x)
#define DM_STR2(x) #x

#define DM_OSSL_FIELD(f) __typeof__(&f) p_##f;
static struct { DM_OSSL_FUNCS(DM_OSSL_FIELD) } ossl;
#undef DM_OSSL_FIELD

#define OPENSSL_init_ssl ossl.p_OPENSSL_init_ssl
#define OPENSSL_atexit ossl.p_OPENSSL_atexit
#define ERR_peek_error ossl.p_ERR_peek_error
#define ERR_reason_error_string ossl.p_ERR_reason_error_string
#define ERR_error_string_n ossl.p_ERR_error_string_n
#define ERR_clear_error ossl.p_ERR_clear_error
#define ERR_get_error_all ossl.p_ERR_get_error_all
#define ERR_new ossl.p_ERR_new
#define ERR_set_debug ossl.p_ERR_set_debug
#define ERR_set_error ossl.p_ERR_set_error
#define TLS_client_method ossl.p_TLS_client_method
#define SSL_CTX_new ossl.p_SSL_CTX_new
#define SSL_CTX_free ossl.p_SSL_CTX_free
#define SSL_CTX_up_ref ossl.p_SSL_CTX_up_ref
#define SSL_CTX_ctrl ossl.p_SSL_CTX_ctrl
#define SSL_CTX_set_verify ossl.p_SSL_CTX_set_verify
#define SSL_CTX_load_verify_locations ossl.p_SSL_CTX_load_verify_locations
#define SSL_CTX_set_default_verify_paths ossl.p_SSL_CTX_set_default_verify_paths
#define SSL_CTX_use_certificate_chain_file ossl.p_SSL_CTX_use_certificate_chain_file
#define SSL_CTX_use_PrivateKey_file ossl.p_SSL_CTX_use_PrivateKey_file
#define SSL_CTX_check_private_key ossl.p_SSL_CTX_check_private_key
#define SSL_new ossl.p_SSL_new
#define SSL_free ossl.p_SSL_free
#define SSL_ctrl ossl.p_SSL_ctrl
#define SSL_set1_host ossl.p_SSL_set1_host
#define SSL_get0_param ossl.p_SSL_get0_param
#define X509_VERIFY_PARAM_set1_ip_asc ossl.p_X509_VERIFY_PARAM_set1_ip_asc
#define SSL_connect ossl.p_SSL_connect
#define SSL_read ossl.p_SSL_read
#define SSL_write ossl.p_SSL_write
#define SSL_pending ossl.p_SSL_pending
#define SSL_get_error ossl.p_SSL_get_error
#define SSL_get_verify_result ossl.p_SSL_get_verify_result
#define X509_verify_cert_error_string ossl.p_X509_verify_cert_error_string
#define BIO_meth_new ossl.p_BIO_meth_new
#define BIO_get_new_index ossl.p_BIO_get_new_index
#define BIO_s_socket ossl.p_BIO_s_socket
#define BIO_meth_set_write ossl.p_BIO_meth_set_write
#define BIO_meth_set_read ossl.p_BIO_meth_set_read
#define BIO_meth_set_puts ossl.p_BIO_meth_set_puts
#define BIO_meth_set_ctrl ossl.p_BIO_meth_set_ctrl
#define BIO_meth_set_create ossl.p_BIO_meth_set_create
#define BIO_meth_set_destroy ossl.p_BIO_meth_set_destroy
#define BIO_meth_get_read ossl.p_BIO_meth_get_read
#define BIO_meth_get_puts ossl.p_BIO_meth_get_puts
#define BIO_meth_get_ctrl ossl.p_BIO_meth_get_ctrl
#define BIO_meth_get_create ossl.p_BIO_meth_get_create
#define BIO_meth_get_destroy ossl.p_BIO_meth_get_destroy
#define BIO_new ossl.p_BIO_new
#define BIO_int_ctrl ossl.p_BIO_int_ctrl
#define BIO_ctrl ossl.p_BIO_ctrl
#define BIO_clear_flags ossl.p_BIO_clear_flags
#define BIO_set_flags ossl.p_BIO_set_flags
#define SSL_set_bio ossl.p_SSL_set_bio



static pthread_once_t ssl_once = PTHREAD_ONCE_INIT;
static int ssl_ready;
static char ssl_load_error[200];    /* why OpenSSL could not be loaded */
static int ssl_gone;                /* OpenSSL's cleanup ran (a program's exit) */

/* Every OpenSSL call of the shim's threads runs between ssl_enter() and
 * ssl_leave() (read side; the calls are short: the socket is non-blocking
 * and every wait is a poll(2) outside). The fork prepare handler takes the
 * write side, so no thread of the shim is inside OpenSSL at fork, holding
 * one of its internal locks that a child's first handshake would wait for
 * forever. Writers are preferred: a steady stream of readers cannot keep a
 * fork waiting; no thread takes the read side twice. */
static pthread_rwlock_t ssl_rw;
static pthread_once_t ssl_rw_once = PTHREAD_ONCE_INIT;

static void ssl_rw_init(void)
{
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    dm_rw_init(&ssl_rw, &a);
    pthread_rwlockattr_destroy(&a);
}

/* The calling thread's OpenSSL error queue is the program's: errors it
 * queued before a lock call (and has not read yet) are set aside while the
 * shim works (SSL_get_error needs an empty queue) and put back after, and
 * the shim's own errors never stay behind. Set aside on the heap, and only
 * when there are some (a program that left errors queued): the caller's
 * stack may be a small one (3 KB of saved errors once sat there). Out of
 * memory, the program's errors are dropped (the shim's calls go on). */
#define DM_OSSL_SAVED 16                /* OpenSSL's queue holds 16 */
#define DM_OSSL_DATA  160
struct ossl_err {
    unsigned long code;
    const char *file, *func;            /* OpenSSL's static strings */
    int line;
    char data[DM_OSSL_DATA];            /* "" when none */
};
struct ossl_errs {
    int n;
    struct ossl_err *e;                 /* DM_OSSL_SAVED of them, NULL when none were queued */
};

static int ossl_usable(void)
{
    return __atomic_load_n(&ssl_ready, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&ssl_gone, __ATOMIC_ACQUIRE);
}

static void ssl_enter(struct ossl_errs *oe)
{
    pthread_once(&ssl_rw_once, ssl_rw_init);
    dm_rw_rdlock(&ssl_rw);
    oe->n = 0;
    oe->e = NULL;
    if (!ossl_usable() || !ERR_peek_error())
        return;
    oe->e = malloc(DM_OSSL_SAVED * sizeof *oe->e);
    const char *file, *func, *data;
    int line, flags;
    unsigned long e;
    while ((e = ERR_get_error_all(&file, &line, &func, &data, &flags)) != 0) {
        if (!oe->e || oe->n == DM_OSSL_SAVED)
            continue;                   /* out of memory; or cannot happen: the queue holds 16 */
        oe->e[oe->n].code = e;
        oe->e[oe->n].file = file;
        oe->e[oe->n].func = func;
        oe->e[oe->n].line = line;
        snprintf(oe->e[oe->n].data, DM_OSSL_DATA, "%s",
                 data && (flags & ERR_TXT_STRING) ? data : "");
        oe->n++;
    }
}

static void ssl_leave(struct ossl_errs *oe)
{
    if (ossl_usable()) {
        ERR_clear_error();
        for (int i = 0; i < oe->n; i++) {
            ERR_new();
            ERR_set_debug(oe->e[i].file, oe->e[i].line, oe->e[i].func);
            if (oe->e[i].data[0])
                ERR_set_error(ERR_GET_LIB(oe->e[i].code), ERR_GET_REASON(oe->e[i].code), "%s",
                              oe->e[i].data);
            else
                ERR_set_error(ERR_GET_LIB(oe->e[i].code), ERR_GET_REASON(oe->e[i].code), NULL);
        }
    }
    free(oe->e);
    oe->e = NULL;
    dm_rw_unlock(&ssl_rw);
}

static pthread_mutex_t ctx_mu = PTHREAD_MUTEX_INITIALIZER;
static const struct dm_tls_config *tcfg;
static const char *grp = "redis";  /* whose settings: "redis" or "etcd" (messages) */
static SSL_CTX *ctx;                /* made from tcfg at the first session */

static void on_openssl_cleanup(void)
{
    __atomic_store_n(&ssl_gone, 1, __ATOMIC_RELEASE);
}

/* Loads libssl (and with it libcrypto) and every function of the list.
 * dm_real's dlopen: the loader's own, not the shim's export (which
 * re-maps config entries). 0, or -1 with ssl_load_error set. */
static int ssl_load(void)
{
    void *h = dm_real.dlopen(DM_OSSL_SONAME, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(ssl_load_error, sizeof ssl_load_error, "cannot load %s (install libssl3): %s",
                 DM_OSSL_SONAME, e ? e : "unknown error");
        return -1;
    }
#define DM_OSSL_LOAD(f) \
    if (!(*(void **)&ossl.p_##f = dlsym(h, #f))) { \
        snprintf(ssl_load_error, sizeof ssl_load_error, "%s has no %s", DM_OSSL_SONAME, #f); \
        return -1; \
    }
    DM_OSSL_FUNCS(DM_OSSL_LOAD)
#undef DM_OSSL_LOAD
    return 0;
}

/* The socket BIO with its write made by send(MSG_NOSIGNAL): OpenSSL's
 * own writes with write(2), and a write to a connection the server has
 * reset (a request, or the alert OpenSSL sends when a read fails) would
 * raise SIGPIPE, which kills a program that does not ignore it. */
static BIO_METHOD *nosig_method;

static int nosig_write(BIO *b, const char *buf, int len)
{
    int fd = -1;
    BIO_get_fd(b, &fd);
    BIO_clear_retry_flags(b);
    ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        BIO_set_retry_write(b);
    return (int)n;
}

static int nosig_make(void)
{
    const BIO_METHOD *sock = BIO_s_socket();
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK |
                                 BIO_TYPE_DESCRIPTOR, "dmutex socket");
    if (!m || BIO_meth_set_write(m, nosig_write) != 1 ||
        BIO_meth_set_read(m, BIO_meth_get_read(sock)) != 1 ||
        BIO_meth_set_puts(m, BIO_meth_get_puts(sock)) != 1 ||
        BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(sock)) != 1 ||
        BIO_meth_set_create(m, BIO_meth_get_create(sock)) != 1 ||
        BIO_meth_set_destroy(m, BIO_meth_get_destroy(sock)) != 1) {
        snprintf(ssl_load_error, sizeof ssl_load_error, "cannot make a socket BIO");
        return -1;
    }
    nosig_method = m;
    return 0;
}

static void ssl_init(void)
{
    if (ssl_load() != 0)
        return;
    if (OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT | OPENSSL_INIT_LOAD_SSL_STRINGS |
                         OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL) != 1)
        return;
    OPENSSL_atexit(on_openssl_cleanup);
    if (nosig_make() != 0)
        return;
    ssl_ready = 1;
}

/* OpenSSL's words for the oldest error of this thread's queue. */
static const char *ssl_words(char *buf, size_t len)
{
    unsigned long e = ERR_peek_error();
    if (!e)
        return "no further detail";
    const char *r = ERR_reason_error_string(e);
    if (r)
        snprintf(buf, len, "%s", r);
    else
        ERR_error_string_n(e, buf, len);
    return buf;
}

static SSL_CTX *ctx_make(const struct dm_tls_config *tc, char *why, size_t len)
{
    char w[200];
    SSL_CTX *x = SSL_CTX_new(TLS_client_method());
    if (!x) {
        snprintf(why, len, "cannot make a TLS context: %s", ssl_words(w, sizeof w));
        return NULL;
    }
    SSL_CTX_set_min_proto_version(x, TLS1_2_VERSION);
    SSL_CTX_set_mode(x, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (tc->verify) {
        SSL_CTX_set_verify(x, SSL_VERIFY_PEER, NULL);
        struct stat st;
        int ok;
        if (tc->ca && stat(tc->ca, &st) == 0 && S_ISDIR(st.st_mode))
            ok = SSL_CTX_load_verify_locations(x, NULL, tc->ca);
        else if (tc->ca)
            ok = SSL_CTX_load_verify_locations(x, tc->ca, NULL);
        else
            ok = SSL_CTX_set_default_verify_paths(x);
        if (ok != 1) {
            snprintf(why, len, "cannot read the CA certificates %s.tls.ca = \"%s\": %s",
                     grp, tc->ca ? tc->ca : "(the system's)", ssl_words(w, sizeof w));
            goto fail;
        }
    } else {
        SSL_CTX_set_verify(x, SSL_VERIFY_NONE, NULL);
    }
    if (tc->cert) {
        const char *key = tc->key ? tc->key : tc->cert;
        if (SSL_CTX_use_certificate_chain_file(x, tc->cert) != 1) {
            snprintf(why, len, "cannot read the client certificate %s.tls.cert = \"%s\": %s",
                     grp, tc->cert, ssl_words(w, sizeof w));
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(x, key, SSL_FILETYPE_PEM) != 1) {
            snprintf(why, len, "cannot read the client key %s.tls.key = \"%s\": %s",
                     grp, key, ssl_words(w, sizeof w));
            goto fail;
        }
        if (SSL_CTX_check_private_key(x) != 1) {
            snprintf(why, len, "%s.tls.key = \"%s\" is not the key of %s.tls.cert = "
                     "\"%s\": %s", grp, key, grp, tc->cert, ssl_words(w, sizeof w));
            goto fail;
        }
    }
    return x;
fail:
    SSL_CTX_free(x);
    return NULL;
}

/* The context for a new session, with a reference of its own. */
static SSL_CTX *ctx_get(char *why, size_t len)
{
    dm_lock(&ctx_mu);
    SSL_CTX *x = NULL;
    if (!tcfg)
        snprintf(why, len, "TLS is not configured");
    else if (!ctx)
        ctx = ctx_make(tcfg, why, len);
    if (ctx && SSL_CTX_up_ref(ctx) == 1)
        x = ctx;
    dm_unlock(&ctx_mu);
    return x;
}

void dm_tls_setup(const struct dm_tls_config *tls, const char *store)
{
    struct ossl_errs oe;
    ssl_enter(&oe);
    if (tls && tls->enabled)
        pthread_once(&ssl_once, ssl_init);
    dm_lock(&ctx_mu);
    tcfg = tls && tls->enabled ? tls : NULL;
    grp = store;
    if (ctx && !__atomic_load_n(&ssl_gone, __ATOMIC_ACQUIRE))
        SSL_CTX_free(ctx);      /* sessions hold their own reference */
    ctx = NULL;
    dm_unlock(&ctx_mu);
    ssl_leave(&oe);
}

const char *dm_tls_client_cert(void)
{
    const struct dm_tls_config *tc = tcfg;
    return tc ? tc->cert : NULL;
}

int dm_tls_gone(void)
{
    return __atomic_load_n(&ssl_gone, __ATOMIC_ACQUIRE);
}

/* An IPv4 or IPv6 address: checked as an address, never sent as SNI. */
static int is_ip_literal(const char *s)
{
    unsigned char a[sizeof(struct in6_addr)];
    return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

static void set_err(struct dm_tls *t, enum dm_tls_err e, const char *what)
{
    t->err = e;
    snprintf(t->errstr, sizeof t->errstr, "%.*s", (int)sizeof t->errstr - 1, what);
}

/* The hint after "does not speak TLS on this port": what else is there. */
static const char *plain_server(void)
{
    return strcmp(grp, "etcd") == 0 ? "an http:// etcd member (no --cert-file)?"
                                    : "a plain-TCP Redis?";
}

/* Words for a failed TLS call (an alert, a protocol error, a
 * certificate): t->why and, shortened, t->errstr. Consumes the thread's
 * OpenSSL error queue. */
static void tls_fail(struct dm_tls *t, const char *during)
{
    char w[200];
    unsigned long e = ERR_peek_error();
    int reason = e ? ERR_GET_REASON(e) : 0;
    long vr = SSL_get_verify_result(t->ssl);
    const char *cause;
    const struct dm_tls_config *tc = tcfg;
    char detail[DM_TLS_WHY_MAX];

    if (vr != X509_V_OK && e && reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
        const char *vs = X509_verify_cert_error_string(vr);
        switch (vr) {
        case X509_V_ERR_CERT_HAS_EXPIRED:
            cause = "the server's certificate has expired";
            break;
        case X509_V_ERR_CERT_NOT_YET_VALID:
            cause = "the server's certificate is not valid yet (check the clocks)";
            break;
        case X509_V_ERR_HOSTNAME_MISMATCH:
        case X509_V_ERR_IP_ADDRESS_MISMATCH:
            cause = "the server's certificate is not for the name dmutex checks";
            break;
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
        case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
        case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
        case X509_V_ERR_CERT_SIGNATURE_FAILURE:
            cause = "the server's certificate is not signed by a trusted CA";
            break;
        default:
            cause = "the server's certificate does not verify";
            break;
        }
        if (vr == X509_V_ERR_HOSTNAME_MISMATCH || vr == X509_V_ERR_IP_ADDRESS_MISMATCH)
            snprintf(detail, sizeof detail, "%s (the host, or %s.tls.server_name): %s "
                     "(checked \"%s\")", cause, grp, vs, t->name);
        else if (strstr(cause, "trusted CA"))
            snprintf(detail, sizeof detail, "%s (%s.tls.ca = %s%s%s): %s", cause, grp,
                     tc && tc->ca ? "\"" : "", tc && tc->ca ? tc->ca : "the system's CAs",
                     tc && tc->ca ? "\"" : "", vs);
        else
            snprintf(detail, sizeof detail, "%s: %s", cause, vs);
    } else if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
               reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
               reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN ||
               reason == SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE ||
               reason == SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED ||
               reason == SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED ||
               reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
               reason == SSL_R_TLSV1_ALERT_ACCESS_DENIED ||
               reason == SSL_R_TLSV1_ALERT_DECRYPT_ERROR) {
        snprintf(detail, sizeof detail, "the server refused the client certificate "
                 "(%s.tls.cert = %s%s%s): %s", grp, tc && tc->cert ? "\"" : "",
                 tc && tc->cert ? tc->cert : "none given", tc && tc->cert ? "\"" : "",
                 ssl_words(w, sizeof w));
    } else if (reason == SSL_R_UNEXPECTED_EOF_WHILE_READING && strcmp(during, "handshake") == 0) {
        snprintf(detail, sizeof detail, "the server closed the connection during the handshake "
                 "(not a TLS port: %s or it refused this client)", plain_server());
    } else if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
               reason == SSL_R_UNKNOWN_PROTOCOL) {
        snprintf(detail, sizeof detail, "the server does not speak TLS on this port "
                 "(%s): %s", plain_server(), ssl_words(w, sizeof w));
    } else {
        snprintf(detail, sizeof detail, "%s", e ? ssl_words(w, sizeof w) : "protocol error");
    }
    ERR_clear_error();
    snprintf(t->why, sizeof t->why, "TLS %s with %s at %.60s failed: %.300s", during, grp,
             t->addr, detail);
    set_err(t, DM_TLS_FAILED, detail);
}

/* After an SSL call returned ret <= 0: 1 to wait for `*events` and call
 * again, -1 on a failure (t->err set). */
static int ssl_retry(struct dm_tls *t, int ret, short *events, const char *during)
{
    int saved = errno;
    switch (SSL_get_error(t->ssl, ret)) {
    case SSL_ERROR_WANT_READ:
        *events = POLLIN;
        return 1;
    case SSL_ERROR_WANT_WRITE:
        *events = POLLOUT;
        return 1;
    case SSL_ERROR_ZERO_RETURN:
        set_err(t, DM_TLS_CLOSED, "Server closed the connection");
        return -1;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error()) {
            tls_fail(t, during);
            return -1;
        }
        if (ret == 0 || saved == 0) {
            set_err(t, DM_TLS_CLOSED, "Server closed the connection");
            return -1;
        }
        t->sys_errno = saved;
        set_err(t, DM_TLS_SYS, strerror(saved));
        return -1;
    default:
        tls_fail(t, during);
        return -1;
    }
}

static int usable(struct dm_tls *t)
{
    if (__atomic_load_n(&ssl_gone, __ATOMIC_ACQUIRE)) {
        set_err(t, DM_TLS_GONE, "OpenSSL was shut down (the program is exiting)");
        return 0;
    }
    return 1;
}

/* The session for fd, ready for its handshake. NULL with `why`. Called
 * inside ssl_enter(). */
static struct dm_tls *session_new(int fd, const char *host, const char *addr, char *why,
                                  size_t len)
{
    pthread_once(&ssl_once, ssl_init);
    if (!ssl_ready) {
        snprintf(why, len, "TLS to %s at %s: %s", grp, addr,
                 ssl_load_error[0] ? ssl_load_error : "OpenSSL cannot be initialised");
        return NULL;
    }
    if (__atomic_load_n(&ssl_gone, __ATOMIC_ACQUIRE)) {
        snprintf(why, len, "TLS to %s at %s: OpenSSL was shut down (the program is exiting)",
                 grp, addr);
        return NULL;
    }
    char cwhy[DM_TLS_WHY_MAX];
    ERR_clear_error();
    SSL_CTX *x = ctx_get(cwhy, sizeof cwhy);
    if (!x) {
        ERR_clear_error();
        snprintf(why, len, "TLS to %s at %s: %s", grp, addr, cwhy);
        return NULL;
    }
    struct dm_tls *t = calloc(1, sizeof *t);
    SSL *ssl = t ? SSL_new(x) : NULL;
    SSL_CTX_free(x);            /* the session keeps its own reference */
    if (!ssl) {
        free(t);
        ERR_clear_error();
        snprintf(why, len, "TLS to %s at %s: out of memory", grp, addr);
        return NULL;
    }
    t->ssl = ssl;
    t->fd = fd;
    t->addr = addr;
    const struct dm_tls_config *tc = tcfg;
    const char *name = tc && tc->server_name ? tc->server_name : host;
    snprintf(t->name, sizeof t->name, "%s", name);
    if (!is_ip_literal(name))
        SSL_set_tlsext_host_name(ssl, name);    /* SNI is for names only */
    if (tc && tc->verify) {
        if (is_ip_literal(name))
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name);
        else
            SSL_set1_host(ssl, name);
    }
    int fl = fcntl(fd, F_GETFL);
    BIO *bio = NULL;
    if (fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0 && (bio = BIO_new(nosig_method))) {
        BIO_set_fd(bio, fd, BIO_NOCLOSE);
        SSL_set_bio(ssl, bio, bio);         /* the session owns it now */
    }
    if (!bio) {
        snprintf(why, len, "TLS to %s at %s: cannot set up the socket: %s", grp, addr,
                 strerror(errno));
        ERR_clear_error();
        SSL_free(ssl);
        free(t);
        return NULL;
    }
    return t;
}

struct dm_tls *dm_tls_start(int fd, const char *host, const char *addr, long long deadline_ms,
                            char *why, size_t len)
{
    struct ossl_errs oe;
    ssl_enter(&oe);
    struct dm_tls *t = session_new(fd, host, addr, why, len);
    ssl_leave(&oe);
    if (!t)
        return NULL;
    for (;;) {
        ssl_enter(&oe);
        ERR_clear_error();
        int r = usable(t) ? SSL_connect(t->ssl) : -2;
        short ev = 0;
        int k = r == 1 ? 2 : r == -2 ? -1 : ssl_retry(t, r, &ev, "handshake");
        ssl_leave(&oe);
        if (k == 2)
            break;
        if (k < 0) {
            if (t->err == DM_TLS_FAILED)
                snprintf(why, len, "%s", t->why);
            else if (t->err == DM_TLS_CLOSED)
                snprintf(why, len, "TLS handshake with %s at %s failed: the server closed the "
                         "connection (not a TLS port, or it refused this client)", grp, addr);
            else
                snprintf(why, len, "TLS handshake with %s at %s failed: %s", grp, addr,
                         t->errstr);
            goto fail;
        }
        int w = dm_wait_fd(fd, ev, deadline_ms);
        if (w <= 0) {
            if (w == 0)
                snprintf(why, len, "TLS handshake with %s at %s failed: no answer within the "
                         "connect timeout (is it a TLS port? %s waits in silence)", grp, addr,
                         strcmp(grp, "etcd") == 0 ? "a stopped member" : "a plain-TCP Redis");
            else
                snprintf(why, len, "TLS handshake with %s at %s failed: %s", grp, addr,
                         strerror(errno));
            goto fail;
        }
    }
    t->err = DM_TLS_OK;
    return t;
fail:
    dm_tls_free(t);
    return NULL;
}

int dm_tls_read(struct dm_tls *t, void *buf, size_t len, short *events)
{
    struct ossl_errs oe;
    ssl_enter(&oe);
    int n = -1, k = -1;
    if (usable(t)) {
        ERR_clear_error();
        n = SSL_read(t->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
        k = n > 0 ? 1 : ssl_retry(t, n, events, "read");
    }
    ssl_leave(&oe);
    return n > 0 ? n : k > 0 ? 0 : -1;
}

int dm_tls_write(struct dm_tls *t, const void *buf, size_t len, short *events)
{
    struct ossl_errs oe;
    ssl_enter(&oe);
    int n = -1, k = -1;
    if (usable(t)) {
        ERR_clear_error();
        n = SSL_write(t->ssl, buf, len > INT_MAX ? INT_MAX : (int)len);
        k = n > 0 ? 1 : ssl_retry(t, n, events, "write");
    }
    ssl_leave(&oe);
    return n > 0 ? n : k > 0 ? 0 : -1;
}

/* dm_wait_fd for a session's read or write: 0 ready, -1 with t->err. */
static int wait_io(struct dm_tls *t, short events, long long deadline_ms)
{
    int w = dm_wait_fd(t->fd, events, deadline_ms);
    if (w > 0)
        return 0;
    if (w == 0) {
        set_err(t, DM_TLS_TIMEOUT, "no answer in time (TLS)");
    } else {
        t->sys_errno = errno;
        set_err(t, DM_TLS_SYS, strerror(errno));
    }
    return -1;
}

int dm_tls_write_all(struct dm_tls *t, const void *buf, size_t len, long long deadline_ms)
{
    const char *p = buf;
    while (len > 0) {
        short ev = 0;
        int n = dm_tls_write(t, p, len, &ev);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 || wait_io(t, ev, deadline_ms) < 0) {
            return -1;
        }
    }
    return 0;
}

int dm_tls_read_by(struct dm_tls *t, void *buf, size_t len, long long deadline_ms)
{
    for (;;) {
        short ev = POLLIN;
        int n = dm_tls_read(t, buf, len, &ev);
        if (n != 0)
            return n;
        if (wait_io(t, ev, deadline_ms) < 0)
            return t->err == DM_TLS_TIMEOUT ? 0 : -1;
    }
}

int dm_tls_pending(const struct dm_tls *t)
{
    struct ossl_errs oe;
    if (!t)
        return 0;
    ssl_enter(&oe);
    int n = ossl_usable() ? SSL_pending(t->ssl) : 0;
    ssl_leave(&oe);
    return n > 0;
}

enum dm_tls_err dm_tls_error(const struct dm_tls *t)
{
    return t ? t->err : DM_TLS_OK;
}

const char *dm_tls_errstr(const struct dm_tls *t)
{
    return t ? t->errstr : "";
}

int dm_tls_errno(const struct dm_tls *t)
{
    return t ? t->sys_errno : 0;
}

const char *dm_tls_why(const struct dm_tls *t)
{
    return t && t->err == DM_TLS_FAILED ? t->why : "";
}

void dm_tls_free(struct dm_tls *t)
{
    struct ossl_errs oe;
    if (!t)
        return;
    ssl_enter(&oe);
    if (!__atomic_load_n(&ssl_gone, __ATOMIC_ACQUIRE))
        SSL_free(t->ssl);
    ssl_leave(&oe);
    free(t);
}

/* Fork: the write side of ssl_rw is held across fork() (no thread of the
 * shim is inside OpenSSL then); the child makes the lock anew and forgets
 * the parent's context (sessions keep their own references). */
void dm_tls_atfork(enum dm_fork_phase phase)
{
    if (phase == DM_FORK_PREPARE) {
        pthread_once(&ssl_rw_once, ssl_rw_init);
        dm_rw_wrlock(&ssl_rw);
    } else if (phase == DM_FORK_PARENT) {
        dm_rw_unlock(&ssl_rw);
    } else {
        ssl_rw_init();
        dm_fork_mutex(&ctx_mu, phase);
        ctx = NULL;
    }
}
