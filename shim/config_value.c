/* config_value: the config's values, below config.c's sections: typed
 * access to a setting (its line, its type, an int, a bool, a string), the
 * keys a group may have (a near-miss named), and the syntax of every
 * value kind (names, symbols, objects, tokens, environment names); the
 * scalar keys of a group from config_keys.c's table. Calls nothing of
 * config.c. */
#include "config_impl.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libconfig.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- typed access to settings ----------------------------------------- */

unsigned cfg_line_of(const config_setting_t *s)
{
    return config_setting_source_line(s);
}

const char *cfg_type_name(const config_setting_t *s)
{
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_GROUP:  return "a group { ... }";
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64:  return "an integer";
    case CONFIG_TYPE_FLOAT:  return "a floating-point number";
    case CONFIG_TYPE_STRING: return "a string";
    case CONFIG_TYPE_BOOL:   return "a boolean";
    case CONFIG_TYPE_ARRAY:  return "an array [ ... ]";
    case CONFIG_TYPE_LIST:   return "a list ( ... )";
    default:                 return "nothing";
    }
}

/* The member `key` of `grp` as an integer in [lo, hi]. Returns 1 and sets
 * *out (and *line), 0 when absent, -1 on error. `qual` prefixes the key in
 * messages ("redis." for the redis group). */
static int get_int(struct parse *p, const config_setting_t *grp, const char *qual,
                   const char *key, long lo, long hi, long *out, unsigned *line)
{
    config_setting_t *s = config_setting_get_member(grp, key);
    if (!s)
        return 0;
    long long v;
    if (config_setting_type(s) == CONFIG_TYPE_INT)
        v = config_setting_get_int(s);
    else if (config_setting_type(s) == CONFIG_TYPE_INT64)
        v = config_setting_get_int64(s);
    else
        return fail(p, cfg_line_of(s), "%s%s must be an integer, not %s", qual, key, cfg_type_name(s));
    if (v < lo || v > hi)
        return fail(p, cfg_line_of(s), "%s%s = %lld: must be between %ld and %ld", qual, key, v, lo, hi);
    *out = (long)v;
    if (line)
        *line = cfg_line_of(s);
    return 1;
}

static int get_bool(struct parse *p, const config_setting_t *grp, const char *qual,
                    const char *key, int *out)
{
    config_setting_t *s = config_setting_get_member(grp, key);
    if (!s)
        return 0;
    if (config_setting_type(s) != CONFIG_TYPE_BOOL)
        return fail(p, cfg_line_of(s), "%s%s must be true or false, not %s", qual, key, cfg_type_name(s));
    *out = config_setting_get_bool(s);
    return 1;
}

int cfg_get_string(struct parse *p, const config_setting_t *grp, const char *qual,
               const char *key, const char **out, unsigned *line)
{
    config_setting_t *s = config_setting_get_member(grp, key);
    if (!s)
        return 0;
    if (config_setting_type(s) != CONFIG_TYPE_STRING)
        return fail(p, cfg_line_of(s), "%s%s must be a string, not %s", qual, key, cfg_type_name(s));
    *out = config_setting_get_string(s);
    *line = cfg_line_of(s);
    return 1;
}

/* Levenshtein distance of two short strings, for "did you mean". */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 63 || lb >= 63)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Refuses any member of `grp` that is not a key of `group` in the table.
 * `where` says which group, for the message. */
int cfg_check_keys(struct parse *p, const config_setting_t *grp, enum dm_key_group group,
               const char *where)
{
    char list[256];
    size_t o = 0;
    for (int id = 0; id < DM_NKEYS && o < sizeof list; id++)
        if (dm_config_keys[id].group == group)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "",
                                  dm_config_keys[id].name);
    int n = config_setting_length(grp);
    for (int i = 0; i < n; i++) {
        config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
        const char *name = config_setting_name(s);
        if (!name)
            continue;
        const char *guess = NULL;
        size_t best = 3;
        int known = 0;
        for (int id = 0; id < DM_NKEYS && !known; id++) {
            const char *k = dm_config_keys[id].name;
            if (dm_config_keys[id].group != group)
                continue;
            known = strcmp(name, k) == 0;
            size_t d = edit_distance(name, k);
            if (d < best) {
                best = d;
                guess = k;
            }
        }
        if (known)
            continue;
        struct shown sn;
        if (guess)
            return fail(p, cfg_line_of(s), "unknown key %s %s (did you mean %s?); valid "
                        "keys: %s", show(&sn, name), where, guess, list);
        return fail(p, cfg_line_of(s), "unknown key %s %s; valid keys: %s",
                    show(&sn, name), where, list);
    }
    return 0;
}

/* ---- value syntax ----------------------------------------------------- */

/* 1..max bytes: 1, else 0 with the reason in `why`. */
static int length_ok(const char *v, size_t max, char *why, size_t n)
{
    size_t len = strlen(v);
    if (len == 0)
        return snprintf(why, n, "must not be empty"), 0;
    if (len > max)
        return snprintf(why, n, "is %zu bytes, the limit is %zu", len, max), 0;
    return 1;
}

/* Every byte c at position i of v passes ok(c, i): 1, else 0 with the
 * first one that does not in `why`, "... is not allowed<what>". */
static int bytes_ok(const char *v, int (*ok)(unsigned char c, size_t i), const char *what,
                    char *why, size_t n)
{
    for (size_t i = 0; v[i]; i++) {
        unsigned char c = (unsigned char)v[i];
        if (!ok(c, i)) {
            struct shown_byte b;
            snprintf(why, n, "%s at byte %zu is not allowed%s", show_byte(&b, c), i + 1, what);
            return 0;
        }
    }
    return 1;
}

static int name_char_ok(unsigned char c)
{
    return az_alnum(c) || (c && strchr("_.:/@-", c));
}

static int name_byte_ok(unsigned char c, size_t i)
{
    (void)i;
    return name_char_ok(c);
}

/* Checks a lock name or namespace: 1..DM_NAME_MAX bytes of
 * [A-Za-z0-9_.:/@-]. Braces would break the {name} hash tag, spaces and
 * newlines the keys and the logs. On error writes the reason to `why`. */
int cfg_name_ok(const char *v, char *why, size_t n)
{
    return length_ok(v, DM_NAME_MAX, why, n)
        && bytes_ok(v, name_byte_ok, " (use letters, digits and _ . : / @ -)", why, n);
}

int dm_config_name_ok(const char *name, char *why, size_t len)
{
    return cfg_name_ok(name, why, len);
}

static int ident_start(unsigned char c) { return az_alpha(c) || c == '_' || c == '$'; }
static int ident_char(unsigned char c) { return az_alnum(c) || c == '_' || c == '$' || c == '.'; }
static int qualifier_char(unsigned char c) { return az_alnum(c) || (c && strchr("_.+/-", c)); }

/* A C identifier or mangled C++ name ([A-Za-z_$][A-Za-z0-9_$.]*) starting
 * at v[from]. Positions in `why` count from the start of the whole value. */
int cfg_ident_ok(const char *v, size_t from, char *why, size_t n)
{
    const char *id = v + from;
    if (!*id)
        return snprintf(why, n, "has no identifier%s", from ? " after the file qualifier" : ""), 0;
    for (size_t i = 0; id[i]; i++) {
        unsigned char c = (unsigned char)id[i];
        if (i == 0 ? !ident_start(c) : !ident_char(c)) {
            struct shown_byte b;
            snprintf(why, n, "%s at byte %zu is not allowed in a C or mangled C++ name%s",
                     show_byte(&b, c), from + i + 1,
                     i == 0 ? " (it must start with a letter, _ or $)" : "");
            return 0;
        }
    }
    return 1;
}

/* "sym" or "file.c:sym"; returns the offset of the identifier, or -1. */
long cfg_symbol_ok(const char *v, char *why, size_t n)
{
    if (!length_ok(v, DM_SYMBOL_MAX, why, n))
        return -1;
    const char *colon = strchr(v, ':');
    size_t from = 0;
    if (colon) {
        if (colon == v)
            return snprintf(why, n, "has an empty file qualifier before ':'"), -1;
        for (const char *q = v; q < colon; q++) {
            if (!qualifier_char((unsigned char)*q)) {
                struct shown_byte b;
                snprintf(why, n, "%s at byte %zu is not allowed in the file qualifier "
                         "(use letters, digits and _ . + / -)",
                         show_byte(&b, (unsigned char)*q), (size_t)(q - v) + 1);
                return -1;
            }
        }
        from = (size_t)(colon - v) + 1;
    }
    return cfg_ident_ok(v, from, why, n) ? (long)from : -1;
}

static int file_byte_ok(unsigned char c, size_t i)
{
    (void)i;
    return c > 0x20 && c != 0x7f;
}

int cfg_object_ok(const char *v, char *why, size_t n)
{
    if (!length_ok(v, strchr(v, '/') ? DM_PATH_MAX : DM_FILE_NAME_MAX, why, n))
        return 0;
    const char *base = strrchr(v, '/') ? strrchr(v, '/') + 1 : v;
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return snprintf(why, n, "is not a file name or path to a file"), 0;
    return bytes_ok(v, file_byte_ok, " in a file name", why, n);
}

static int token_byte_ok(unsigned char c, size_t i)
{
    (void)i;
    return c >= 0x20 && c != 0x7f && c != ' ';
}

static int spaced_token_byte_ok(unsigned char c, size_t i)
{
    (void)i;
    return c >= 0x20 && c != 0x7f;
}

/* No whitespace or control bytes, 1..max bytes (host names, user names). */
int cfg_token_ok(const char *v, int max, int allow_space, char *why, size_t n)
{
    return length_ok(v, (size_t)max, why, n)
        && bytes_ok(v, allow_space ? spaced_token_byte_ok : token_byte_ok, "", why, n);
}

static int env_byte_ok(unsigned char c, size_t i)
{
    return az_alpha(c) || c == '_' || (i > 0 && az_digit(c));
}

int cfg_env_name_ok(const char *v, char *why, size_t n)
{
    return length_ok(v, DM_ENV_NAME_MAX, why, n)
        && bytes_ok(v, env_byte_ok, " in an environment variable name", why, n);
}

int cfg_dup_into(struct parse *p, unsigned line, char **dst, const char *v)
{
    char *c = strdup(v);
    if (!c)
        return fail(p, line, "out of memory");
    *dst = c;
    return 0;
}

/* ---- the sections ----------------------------------------------------- */

/* What `qual` prefixes a key with in messages. */
static const char *qualifier(enum dm_key_group group)
{
    return group == DM_GROUP_REDIS ? "redis." : group == DM_GROUP_TLS ? "redis.tls." :
           group == DM_GROUP_METRICS ? "metrics." : group == DM_GROUP_ETCD ? "etcd." : "";
}

/* Reads every key of `group` the table parses (all but DM_CFG_HAND), in
 * table order, into the struct at `base`: type, bounds, the value's own
 * rules. Keys with cross bounds are only read here; their bounds are
 * checked by hand once every key is known. lines[id] gets the line of each
 * key present (0: absent). */
int cfg_parse_scalars(struct parse *p, const config_setting_t *grp, enum dm_key_group group,
                  void *base, unsigned lines[DM_NKEYS])
{
    const char *qual = qualifier(group);
    for (int id = 0; id < DM_NKEYS; id++) {
        const struct dm_config_key *k = &dm_config_keys[id];
        if (k->group != group || k->type == DM_CFG_HAND)
            continue;
        const config_setting_t *s = config_setting_get_member(grp, k->name);
        if (!s)
            continue;
        lines[id] = cfg_line_of(s);
        char *field = (char *)base + k->offset;
        const char *v;
        unsigned line;
        struct shown sv;
        long n = 0;
        switch (k->type) {
        case DM_CFG_INT:
        case DM_CFG_LONG:
            if (get_int(p, grp, qual, k->name, k->cross ? LONG_MIN : k->lo,
                        k->cross ? LONG_MAX : k->hi, &n, NULL) < 0)
                return -1;
            if (k->type == DM_CFG_INT)
                *(int *)field = (int)n;
            else
                *(long *)field = n;
            break;
        case DM_CFG_BOOL:
            if (get_bool(p, grp, qual, k->name, (int *)field) < 0)
                return -1;
            break;
        case DM_CFG_ENUM: {
            if (cfg_get_string(p, grp, qual, k->name, &v, &line) < 0)
                return -1;
            int i = 0;
            while (k->values[i] && strcmp(v, k->values[i]) != 0)
                i++;
            if (!k->values[i]) {
                char list[128];
                size_t o = 0;
                for (int j = 0; k->values[j] && o < sizeof list; j++)
                    o += (size_t)snprintf(list + o, sizeof list - o, "%s\"%s\"",
                                          j == 0 ? "" : k->values[j + 1] ? ", " : " or ",
                                          k->values[j]);
                return fail(p, line, "%s%s = %s: must be %s", qual, k->name, show(&sv, v), list);
            }
            *(int *)field = i;
            break;
        }
        case DM_CFG_NAME: {
            char why[160];
            if (cfg_get_string(p, grp, qual, k->name, &v, &line) < 0)
                return -1;
            if (!cfg_name_ok(v, why, sizeof why))
                return fail(p, line, "%s%s = %s: %s", qual, k->name, show(&sv, v), why);
            if (cfg_dup_into(p, line, (char **)field, v) < 0)
                return -1;
            break;
        }
        case DM_CFG_HAND:
            break;
        }
        const config_setting_t *other = k->not_with ? config_setting_get_member(grp, k->not_with)
                                                    : NULL;
        if (other)
            return fail(p, lines[id], "%s%s has no meaning with %s%s (line %u)", qual, k->name,
                        qual, k->not_with, cfg_line_of(other));
    }
    return 0;
}

/* The group `key` of `parent` (qual: the parent's name for messages,
 * "redis." or ""), its keys checked against `group`: 1 and *g when it is
 * there, 0 when it is absent, -1 after saying that it must be a group
 * `shape` or which key does not belong. */
int cfg_group(struct parse *p, const config_setting_t *parent, const char *qual,
                 const char *key, const char *shape, enum dm_key_group group,
                 config_setting_t **g)
{
    *g = config_setting_get_member(parent, key);
    if (!*g)
        return 0;
    if (!config_setting_is_group(*g))
        return fail(p, cfg_line_of(*g), "%s%s must be a group %s, not %s", qual, key, shape,
                    cfg_type_name(*g));
    char where[64];
    snprintf(where, sizeof where, "in the %s%s group", qual, key);
    return cfg_check_keys(p, *g, group, where) < 0 ? -1 : 1;
}

