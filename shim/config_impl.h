/* config_impl.h: what the config module's files share, below config.h;
 * only shim/config*.c include it. config.c walks a file into a struct,
 * config_scan.c checks the raw text before libconfig reads it,
 * config_url.c reads DMUTEX_REDIS URLs, config_keys.c declares every key
 * once (config_keys.h, which the config tests and `dmutex config-keys`
 * include too). The helpers here are static inline so that each file
 * keeps their short names (fail, show) without exporting them. */
#ifndef DM_CONFIG_IMPL_H
#define DM_CONFIG_IMPL_H

#include <stddef.h>
#include <stdio.h>
#include <sys/un.h>

#include <stdarg.h>
#include <string.h>

#include <libconfig.h>

#include "config_keys.h"

#define DM_CONFIG_FILE_MAX      (4L << 20)  /* bytes; a config is a few kB */
#define DM_LEASE_MIN_MS         100L
#define DM_LEASE_MAX_MS         3600000L    /* one hour */
#define DM_RENEW_MIN_MS         10L
#define DM_TIMEOUT_MIN_MS       1L
#define DM_TIMEOUT_MAX_MS       600000L     /* ten minutes */
#define DM_LOCK_DELAY_MAX_MS    600000L
#define DM_BATCH_DEFAULT_MS     5L
#define DM_BATCH_MAX_MS         1000L
#define DM_BATCH_HOLD_DEFAULT_US 1000L
#define DM_BATCH_HOLD_MAX_US    1000000L
#define DM_RENEW_DIVISOR        3           /* renew_ms default: lease / 3 */
#define DM_MARGIN_DIVISOR       10          /* lease_margin_ms default: lease / 10 */
#define DM_REDIS_DB_MAX         1000000L
#define DM_PORT_MAX             65535L
#define DM_OFFSET_MAX           (1L << 30)
#define DM_INDEX_MAX            (1L << 24)
#define DM_ADDRESS_MAX          (1L << 47)  /* a file-relative address: below user space's top */
#define DM_BUILD_ID_HEX_MAX     128         /* a GNU build-id of up to 64 bytes, as hex */
#define DM_SYMBOL_MAX           4096        /* mangled C++ names run long */
#define DM_FILE_NAME_MAX        255         /* NAME_MAX of Linux file systems */
#define DM_PATH_MAX             4096        /* PATH_MAX */
#define DM_HOST_MAX             255         /* longest DNS name */
#define DM_ENV_NAME_MAX         255
#define DM_UNIX_PATH_MAX        ((int)sizeof(((struct sockaddr_un *)0)->sun_path) - 1)
#define DM_SHOW_MAX             48          /* bytes of a value quoted in a message */
#define DM_MIN_REPLICAS_MAX     100L        /* replicas a grant may wait for */

/* One load in progress: where errors go and what to call the file. */
struct parse {
    const char *label;
    char *err;
    size_t errlen;
    int number_error;           /* the pre-scan found a number out of range: */
    unsigned number_line;       /* where */
    const char *number_limit;   /* and what the limit is */
};

/* "LABEL:LINE: " and the message into p->err. Always returns -1. */
__attribute__((format(printf, 3, 4)))
static inline int fail(struct parse *p, unsigned line, const char *fmt, ...)
{
    if (!p->err || p->errlen == 0)
        return -1;
    int n = snprintf(p->err, p->errlen, "%s:%u: ", p->label, line);
    if (n < 0 || (size_t)n >= p->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err + n, p->errlen - n, fmt, ap);
    va_end(ap);
    return -1;
}

/* The message alone into err (no file and line). Always returns -1. */
__attribute__((format(printf, 3, 4)))
static inline int fail_plain(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* A user's string as it should appear in a message: quoted, with control
 * and non-ASCII bytes escaped, cut after DM_SHOW_MAX bytes with its length
 * said, so a 10 kB value still gives a readable one-line error. */
struct shown { char s[DM_SHOW_MAX * 4 + 48]; };

static inline const char *show(struct shown *out, const char *v)
{
    size_t len = strlen(v), o = 0;
    out->s[o++] = '"';
    for (size_t i = 0; i < len && i < DM_SHOW_MAX; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c == '"' || c == '\\')
            o += sprintf(out->s + o, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            o += sprintf(out->s + o, "\\x%02x", c);
        else
            out->s[o++] = (char)c;
    }
    out->s[o++] = '"';
    if (len > DM_SHOW_MAX)
        o += sprintf(out->s + o, "... (%zu bytes)", len);
    out->s[o] = '\0';
    return out->s;
}

/* One byte for a message: 'c' when printable, else its code. */
struct shown_byte { char s[16]; };

static inline const char *show_byte(struct shown_byte *out, unsigned char c)
{
    if (c > 0x20 && c < 0x7f && c != '\'')
        snprintf(out->s, sizeof out->s, "'%c'", c);
    else if (c == ' ')
        snprintf(out->s, sizeof out->s, "a space");
    else
        snprintf(out->s, sizeof out->s, "byte 0x%02x", c);
    return out->s;
}

/* ASCII only, whatever the locale: the character sets of the config are
 * the contract, not what a program's setlocale() makes of byte 0xe9. */
static inline int az_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static inline int az_digit(int c) { return c >= '0' && c <= '9'; }
static inline int az_alnum(int c) { return az_alpha(c) || az_digit(c); }
static inline int is_hex(int c) { return az_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static inline int hex_val(int c) { return az_digit(c) ? c - '0' : ((c | 0x20) - 'a' + 10); }

/* config_scan.c: refuses what libconfig 1.5 would read wrongly (@include,
 * "\x00", unclosed strings and comments) and notes, without failing yet,
 * an integer it would silently truncate (p->number_error). 0 or -1. */
int dm_config_prescan(struct parse *p, const char *text);

/* config.c: "host[:port]" or "[v6][:port]" (len bytes of v) into *e (host
 * malloc'ed), dflt_port when none is given; 0, or -1 with `why`. */
struct dm_endpoint;
int dm_config_endpoint(const char *v, size_t len, int dflt_port, struct dm_endpoint *e,
                       char *why, size_t n);
/* Frees the sentinels, master and sentinel credentials of r, leaving none. */
struct dm_redis_config;
void dm_config_free_sentinels(struct dm_redis_config *r);
/* Frees the cluster seeds of r, leaving none. */
void dm_config_free_cluster(struct dm_redis_config *r);
/* Frees the etcd group's members, user and TLS settings, leaving none. */
void dm_config_free_etcd(struct dm_config *cfg);
/* Frees a tls group's strings, leaving its defaults (TLS off). */
struct dm_tls_config;
void dm_config_free_tls(struct dm_tls_config *tls);
/* "http://host:port", "https://host:port" or "host:port" of an etcd member
 * into e, *scheme saying which: 0, or -1 with why. */
enum { DM_ETCD_BARE, DM_ETCD_HTTP, DM_ETCD_HTTPS };
int dm_config_etcd_endpoint(const char *v, struct dm_endpoint *e, int *scheme, char *why,
                            size_t len);


/* ---- config_value.c: the values (config.c's sections call these) ---- */

unsigned cfg_line_of(const config_setting_t *s);
const char *cfg_type_name(const config_setting_t *s);
int cfg_get_string(struct parse *p, const config_setting_t *grp, const char *qual,
               const char *key, const char **out, unsigned *line);
/* Refuses any member of `grp` that is not a key of `group` in the table.
 * `where` says which group, for the message. */
int cfg_check_keys(struct parse *p, const config_setting_t *grp, enum dm_key_group group,
               const char *where);
/* Checks a lock name or namespace: 1..DM_NAME_MAX bytes of
 * [A-Za-z0-9_.:/@-]. Braces would break the {name} hash tag, spaces and
 * newlines the keys and the logs. On error writes the reason to `why`. */
int cfg_name_ok(const char *v, char *why, size_t n);
/* A C identifier or mangled C++ name ([A-Za-z_$][A-Za-z0-9_$.]*) starting
 * at v[from]. Positions in `why` count from the start of the whole value. */
int cfg_ident_ok(const char *v, size_t from, char *why, size_t n);
/* "sym" or "file.c:sym"; returns the offset of the identifier, or -1. */
long cfg_symbol_ok(const char *v, char *why, size_t n);
int cfg_object_ok(const char *v, char *why, size_t n);
/* No whitespace or control bytes, 1..max bytes (host names, user names). */
int cfg_token_ok(const char *v, int max, int allow_space, char *why, size_t n);
int cfg_env_name_ok(const char *v, char *why, size_t n);
int cfg_dup_into(struct parse *p, unsigned line, char **dst, const char *v);
/* Reads every key of `group` the table parses (all but DM_CFG_HAND), in
 * table order, into the struct at `base`: type, bounds, the value's own
 * rules. Keys with cross bounds are only read here; their bounds are
 * checked by hand once every key is known. lines[id] gets the line of each
 * key present (0: absent). */
int cfg_parse_scalars(struct parse *p, const config_setting_t *grp, enum dm_key_group group,
                  void *base, unsigned lines[DM_NKEYS]);
/* The group `key` of `parent` (qual: the parent's name for messages,
 * "redis." or ""), its keys checked against `group`: 1 and *g when it is
 * there, 0 when it is absent, -1 after saying that it must be a group
 * `shape` or which key does not belong. */
int cfg_group(struct parse *p, const config_setting_t *parent, const char *qual,
                 const char *key, const char *shape, enum dm_key_group group,
                 config_setting_t **g);

/* Is `s` one of the static default strings (never freed)? */
int dm_config_is_default(const char *s);

#endif
