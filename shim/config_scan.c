/* config_scan: the pre-scan of a config file's raw text, before libconfig
 * reads it. libconfig 1.5 reads any integer without an L suffix into an
 * int with no overflow check (port = 4294973675 arrives as 6379), follows
 * @include to any file (a fuzzer could name /dev/stdin), and cuts strings
 * at "\x00".
 * This walk follows libconfig's own tokens (strings, comments, numbers,
 * names) just far enough to refuse those before libconfig sees them, and
 * reports an unclosed string or comment at the line where it starts
 * (libconfig would leak the one and silently accept the other). */

#include "config_impl.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

/* libconfig's name characters (scanner.l). */
static int is_name_start(int c) { return az_alpha(c) || c == '*'; }
static int is_name_char(int c) { return az_alnum(c) || c == '*' || c == '-' || c == '_'; }

/* The key a number belongs to, as far as the pre-scan can tell: the last
 * name followed by '=' or ':'. Only used to word the message. */
struct last_key { const char *s; size_t len; };

/* Quotes the key and the number, so the message is only given once the
 * file has parsed as libconfig (config.c's load_text): a file that does
 * not parse may be no config file at all, and none of its bytes may be
 * shown. The
 * first one is kept; the scan goes on for the errors that must stop it
 * before libconfig reads the text (@include). */
static int number_out_of_range(struct parse *p, unsigned line, const struct last_key *key,
                               const char *start, size_t len, const char *limit)
{
    if (p->number_error)
        return 0;
    p->number_error = 1;
    p->number_line = line;
    p->number_limit = limit;
    char lit[DM_SHOW_MAX + 1];
    size_t n = len < DM_SHOW_MAX ? len : DM_SHOW_MAX;
    memcpy(lit, start, n);
    lit[n] = '\0';
    if (key->s && key->len < DM_SHOW_MAX)
        fail(p, line, "%.*s = %s%s: number out of range (%s)", (int)key->len, key->s, lit,
             len > n ? "..." : "", limit);
    else
        fail(p, line, "number %s%s is out of range (%s)", lit, len > n ? "..." : "", limit);
    return 0;
}

/* Scans one number at *pp (sign, digits, hex, L suffix, float) and checks
 * that libconfig will read it exactly. Advances *pp past it. */
static int prescan_number(struct parse *p, unsigned line, const struct last_key *key,
                          const char **pp)
{
    const char *s = *pp, *q = s;
    int neg = 0;
    if (*q == '+' || *q == '-')
        neg = *q++ == '-';
    if (q[0] == '0' && (q[1] == 'x' || q[1] == 'X') && is_hex((unsigned char)q[2])) {
        uint64_t v = 0;
        int over = 0;
        for (q += 2; is_hex((unsigned char)*q); q++) {
            if (v > (UINT64_MAX >> 4))
                over = 1;
            v = v << 4 | (uint64_t)hex_val((unsigned char)*q);
        }
        int is64 = *q == 'L';
        if (is64)
            q += q[1] == 'L' ? 2 : 1;
        *pp = q;
        if (over || v > (is64 ? (uint64_t)INT64_MAX : (uint64_t)INT_MAX))
            return number_out_of_range(p, line, key, s, (size_t)(q - s),
                                       is64 ? "the largest is 0x7fffffffffffffffL"
                                            : "the largest is 0x7fffffff");
        return 0;
    }
    const char *digits = q;
    while (az_digit((unsigned char)*q))
        q++;
    int has_digits = q > digits;
    if (*q == '.' || (has_digits && (*q == 'e' || *q == 'E'))) {
        /* A float: libconfig converts it with atof, which cannot overflow
         * into a wrong value; integer keys refuse floats anyway. */
        if (*q == '.')
            for (q++; az_digit((unsigned char)*q); q++)
                ;
        if ((*q == 'e' || *q == 'E')) {
            const char *e = q + 1;
            if (*e == '+' || *e == '-')
                e++;
            if (az_digit((unsigned char)*e))
                for (q = e; az_digit((unsigned char)*q); q++)
                    ;
        }
        *pp = q > s ? q : s + 1;
        return 0;
    }
    if (!has_digits) {          /* a lone sign: libconfig's syntax error */
        *pp = s + 1;
        return 0;
    }
    uint64_t v = 0;
    int over = 0;
    for (const char *d = digits; d < q; d++) {
        if (v > (UINT64_MAX - 9) / 10)
            over = 1;
        else
            v = v * 10 + (uint64_t)(*d - '0');
    }
    int is64 = *q == 'L';
    if (is64)
        q += q[1] == 'L' ? 2 : 1;
    *pp = q;
    uint64_t max = is64 ? (uint64_t)INT64_MAX : (uint64_t)INT_MAX;
    if (over || v > max + (uint64_t)neg)
        return number_out_of_range(p, line, key, s, (size_t)(q - s),
                                   is64 ? "64-bit integers run from -9223372036854775808 to 9223372036854775807"
                                        : "integers run from -2147483648 to 2147483647");
    return 0;
}

int dm_config_prescan(struct parse *p, const char *text)
{
    unsigned line = 1;
    int bol = 1;
    struct last_key key = { NULL, 0 };
    for (const char *s = text; *s;) {
        if (bol) {
            const char *t = s;
            while (*t == ' ' || *t == '\t')
                t++;
            if (strncmp(t, "@include", 8) == 0)
                return fail(p, line, "@include is not supported: keep the whole configuration in one file");
            bol = 0;
        }
        unsigned char c = (unsigned char)*s;
        if (c == '\n') {
            line++;
            bol = 1;
            s++;
        } else if (c == '/' && s[1] == '*') {
            unsigned start = line;
            for (s += 2; *s && !(s[0] == '*' && s[1] == '/'); s++)
                if (*s == '\n')
                    line++;
            if (!*s)
                return fail(p, start, "comment /* is never closed with */");
            s += 2;
        } else if (c == '#' || (c == '/' && s[1] == '/')) {
            while (*s && *s != '\n')
                s++;
        } else if (c == '"') {
            unsigned start = line;
            for (s++; *s && *s != '"'; s++) {
                if (*s == '\n') {
                    line++;
                } else if (*s == '\\') {
                    if ((s[1] == 'x' || s[1] == 'X') && is_hex((unsigned char)s[2])
                        && is_hex((unsigned char)s[3])
                        && hex_val((unsigned char)s[2]) == 0 && hex_val((unsigned char)s[3]) == 0)
                        return fail(p, line, "a string holds \\x00, a NUL byte, which no value may contain");
                    if (s[1] == '\0') {
                        s++;
                        break;
                    }
                    if (s[1] == '\n')
                        line++;
                    s++;
                }
            }
            /* libconfig 1.5 would report this too, but leaks the string */
            if (!*s)
                return fail(p, start, "string is never closed with '\"'");
            s++;
        } else if (is_name_start(c)) {
            const char *name = s;
            while (is_name_char((unsigned char)*s))
                s++;
            const char *t = s;
            while (*t == ' ' || *t == '\t' || *t == '\r')
                t++;
            if (*t == '=' || *t == ':') {
                key.s = name;
                key.len = (size_t)(s - name);
            }
        } else if (az_digit(c) || c == '.'
                   || ((c == '-' || c == '+') && (az_digit((unsigned char)s[1]) || s[1] == '.'))) {
            if (prescan_number(p, line, &key, &s) < 0)
                return -1;
        } else {
            s++;
        }
    }
    return 0;
}
