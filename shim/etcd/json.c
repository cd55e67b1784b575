/* json: a recursive-descent reader of one JSON value into an array of
 * nodes (siblings linked, strings left in place), and base64. etcd's
 * gateway writes small objects (a Txn answer, a watch event, a lease); the
 * depth is bounded so that a hostile or broken answer cannot exhaust the
 * stack of the thread that reads it. */
#include "json.h"

#include <stdlib.h>
#include <string.h>

#define DEPTH_MAX 32

struct rd {
    struct dm_json *j;
    const char *p, *end;
};

static void ws(struct rd *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static int node_new(struct rd *r, enum dm_json_type t)
{
    struct dm_json *j = r->j;
    if (j->count == j->cap) {
        int cap = j->cap ? j->cap * 2 : 32;
        struct dm_json_node *nn = realloc(j->nodes, (size_t)cap * sizeof *nn);
        if (!nn)
            return -1;
        j->nodes = nn;
        j->cap = cap;
    }
    struct dm_json_node *n = &j->nodes[j->count];
    memset(n, 0, sizeof *n);
    n->type = t;
    n->child = n->next = -1;
    return j->count++;
}

/* A string at r->p (its '"'): *s, *n its raw contents. */
static int str(struct rd *r, const char **s, size_t *n)
{
    if (r->p >= r->end || *r->p != '"')
        return -1;
    const char *b = ++r->p;
    while (r->p < r->end && *r->p != '"') {
        if ((unsigned char)*r->p < 0x20)
            return -1;
        if (*r->p == '\\')
            r->p++;
        r->p++;
    }
    if (r->p >= r->end)
        return -1;
    *s = b;
    *n = (size_t)(r->p - b);
    r->p++;
    return 0;
}

static int value(struct rd *r, int depth);

/* The elements (or members) of an array (object) node `at`, after its
 * opening bracket. */
static int items(struct rd *r, int at, int obj, int depth)
{
    char close = obj ? '}' : ']';
    ws(r);
    if (r->p < r->end && *r->p == close) {
        r->p++;
        return 0;
    }
    int last = -1;
    for (;;) {
        const char *k = NULL;
        size_t kn = 0;
        ws(r);
        if (obj) {
            if (str(r, &k, &kn) < 0)
                return -1;
            ws(r);
            if (r->p >= r->end || *r->p != ':')
                return -1;
            r->p++;
        }
        int v = value(r, depth + 1);
        if (v < 0)
            return -1;
        r->j->nodes[v].key = k;
        r->j->nodes[v].keylen = kn;
        if (last < 0)
            r->j->nodes[at].child = v;
        else
            r->j->nodes[last].next = v;
        last = v;
        ws(r);
        if (r->p >= r->end)
            return -1;
        if (*r->p == ',') {
            r->p++;
            continue;
        }
        if (*r->p != close)
            return -1;
        r->p++;
        return 0;
    }
}

static int word(struct rd *r, const char *w, enum dm_json_type t)
{
    size_t n = strlen(w);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, w, n) != 0)
        return -1;
    r->p += n;
    return node_new(r, t);
}

static int value(struct rd *r, int depth)
{
    if (depth > DEPTH_MAX)
        return -1;
    ws(r);
    if (r->p >= r->end)
        return -1;
    char c = *r->p;
    if (c == '{' || c == '[') {
        int at = node_new(r, c == '{' ? DM_J_OBJ : DM_J_ARR);
        if (at < 0)
            return -1;
        r->p++;
        return items(r, at, c == '{', depth) < 0 ? -1 : at;
    }
    if (c == '"') {
        const char *s;
        size_t n;
        if (str(r, &s, &n) < 0)
            return -1;
        int at = node_new(r, DM_J_STR);
        if (at >= 0) {
            r->j->nodes[at].s = s;
            r->j->nodes[at].n = n;
        }
        return at;
    }
    if (c == 't')
        return word(r, "true", DM_J_TRUE);
    if (c == 'f')
        return word(r, "false", DM_J_FALSE);
    if (c == 'n')
        return word(r, "null", DM_J_NULL);
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *b = r->p;
        while (r->p < r->end && strchr("+-.eE0123456789", *r->p))
            r->p++;
        int at = node_new(r, DM_J_NUM);
        if (at >= 0) {
            r->j->nodes[at].s = b;
            r->j->nodes[at].n = (size_t)(r->p - b);
        }
        return at;
    }
    return -1;
}

int dm_json_parse(struct dm_json *j, const char *text, size_t len)
{
    j->nodes = NULL;
    j->count = j->cap = 0;
    struct rd r = { j, text, text + len };
    if (value(&r, 0) != 0)
        return -1;
    ws(&r);
    return r.p == r.end ? 0 : -1;
}

void dm_json_free(struct dm_json *j)
{
    free(j->nodes);
    j->nodes = NULL;
    j->count = j->cap = 0;
}

static int key_is(const struct dm_json_node *n, const char *key, size_t kn)
{
    return n->keylen == kn && memcmp(n->key, key, kn) == 0;
}

static int get_n(const struct dm_json *j, int at, const char *key, size_t kn)
{
    if (at < 0 || at >= j->count || j->nodes[at].type != DM_J_OBJ)
        return -1;
    for (int c = j->nodes[at].child; c >= 0; c = j->nodes[c].next)
        if (key_is(&j->nodes[c], key, kn))
            return c;
    return -1;
}

int dm_json_get(const struct dm_json *j, int at, const char *key)
{
    return get_n(j, at, key, strlen(key));
}

int dm_json_path(const struct dm_json *j, int at, const char *path)
{
    while (at >= 0 && *path) {
        const char *dot = strchr(path, '.');
        size_t kn = dot ? (size_t)(dot - path) : strlen(path);
        at = get_n(j, at, path, kn);
        path += kn + (dot != NULL);
    }
    return at;
}

int dm_json_at(const struct dm_json *j, int at, int i)
{
    if (at < 0 || at >= j->count || j->nodes[at].type != DM_J_ARR)
        return -1;
    int c = j->nodes[at].child;
    while (c >= 0 && i-- > 0)
        c = j->nodes[c].next;
    return c;
}

int dm_json_len(const struct dm_json *j, int at)
{
    if (at < 0 || at >= j->count || (j->nodes[at].type != DM_J_ARR && j->nodes[at].type != DM_J_OBJ))
        return 0;
    int n = 0;
    for (int c = j->nodes[at].child; c >= 0; c = j->nodes[c].next)
        n++;
    return n;
}

long long dm_json_int(const struct dm_json *j, int at, long long dflt)
{
    if (at < 0 || at >= j->count)
        return dflt;
    const struct dm_json_node *n = &j->nodes[at];
    if (n->type != DM_J_NUM && n->type != DM_J_STR)
        return dflt;
    size_t i = 0;
    int neg = 0;
    if (i < n->n && n->s[i] == '-') {
        neg = 1;
        i++;
    }
    if (i == n->n)
        return dflt;
    unsigned long long v = 0;
    for (; i < n->n; i++) {
        if (n->s[i] < '0' || n->s[i] > '9')
            return dflt;
        unsigned d = (unsigned)(n->s[i] - '0');
        if (v > (9223372036854775807ULL - d) / 10)
            return dflt;
        v = v * 10 + d;
    }
    return neg ? -(long long)v : (long long)v;
}

int dm_json_true(const struct dm_json *j, int at)
{
    return at >= 0 && at < j->count && j->nodes[at].type == DM_J_TRUE;
}

static int hex4(const char *s, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16;
        if (d == 16)
            return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

long dm_json_str(const struct dm_json *j, int at, char *buf, size_t len)
{
    if (at < 0 || at >= j->count || j->nodes[at].type != DM_J_STR)
        return -1;
    const struct dm_json_node *n = &j->nodes[at];
    size_t o = 0;
    long total = 0;
    char tmp[4];
    for (size_t i = 0; i < n->n; i++) {
        size_t tn = 1;
        tmp[0] = n->s[i];
        if (n->s[i] == '\\' && i + 1 < n->n) {
            char e = n->s[++i];
            unsigned u;
            switch (e) {
            case 'n': tmp[0] = '\n'; break;
            case 't': tmp[0] = '\t'; break;
            case 'r': tmp[0] = '\r'; break;
            case 'b': tmp[0] = '\b'; break;
            case 'f': tmp[0] = '\f'; break;
            case 'u':
                if (i + 4 < n->n + 0 && hex4(n->s + i + 1, &u) == 0) {
                    i += 4;
                    /* UTF-8 of the code unit (a surrogate stays as three bytes:
                     * etcd's messages are ASCII) */
                    if (u < 0x80)
                        tmp[0] = (char)u;
                    else if (u < 0x800) {
                        tmp[0] = (char)(0xc0 | u >> 6);
                        tmp[1] = (char)(0x80 | (u & 0x3f));
                        tn = 2;
                    } else {
                        tmp[0] = (char)(0xe0 | u >> 12);
                        tmp[1] = (char)(0x80 | (u >> 6 & 0x3f));
                        tmp[2] = (char)(0x80 | (u & 0x3f));
                        tn = 3;
                    }
                } else
                    tmp[0] = 'u';
                break;
            default: tmp[0] = e; break;
            }
        }
        for (size_t k = 0; k < tn; k++, total++)
            if (len > 0 && o + 1 < len)
                buf[o++] = tmp[k];
    }
    if (len > 0)
        buf[o] = '\0';
    return total;
}

static const char b64chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t dm_b64_encode(const void *src, size_t n, char *out)
{
    const unsigned char *s = src;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0)
                   | (i + 2 < n ? s[i + 2] : 0);
        out[o++] = b64chars[v >> 18 & 63];
        out[o++] = b64chars[v >> 12 & 63];
        out[o++] = i + 1 < n ? b64chars[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? b64chars[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

static int b64val(char c)
{
    const char *p = c ? strchr(b64chars, c) : NULL;
    return p ? (int)(p - b64chars) : -1;
}

long dm_b64_decode(const char *src, size_t n, unsigned char *out)
{
    if (n % 4 != 0)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (src[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            if (pad || (v[k] = b64val(src[i + k])) < 0)
                return -1;
        }
        unsigned x = (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
        out[o++] = (unsigned char)(x >> 16);
        if (pad < 2)
            out[o++] = (unsigned char)(x >> 8);
        if (pad < 1)
            out[o++] = (unsigned char)x;
    }
    return (long)o;
}

long dm_json_b64(const struct dm_json *j, int at, char *buf, size_t len)
{
    if (at < 0 || at >= j->count || j->nodes[at].type != DM_J_STR || len == 0)
        return -1;
    const struct dm_json_node *n = &j->nodes[at];
    unsigned char *tmp = malloc(n->n / 4 * 3 + 1);
    if (!tmp)
        return -1;
    long got = dm_b64_decode(n->s, n->n, tmp);
    if (got >= 0) {
        size_t c = (size_t)got < len - 1 ? (size_t)got : len - 1;
        memcpy(buf, tmp, c);
        buf[c] = '\0';
    }
    free(tmp);
    return got;
}

size_t dm_json_escape(const char *src, char *out, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (; *src; src++) {
        unsigned char c = (unsigned char)*src;
        char e[7];
        size_t en = 0;
        if (c == '"' || c == '\\') {
            e[en++] = '\\';
            e[en++] = (char)c;
        } else if (c < 0x20) {
            memcpy(e, "\\u00", 4);
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            en = 6;
        } else
            e[en++] = (char)c;
        if (o + en + 1 > len)
            break;
        memcpy(out + o, e, en);
        o += en;
    }
    if (len > 0)
        out[o] = '\0';
    return o;
}
