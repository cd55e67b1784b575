/* keys: builds every key and channel name of a lock from (namespace, name)
 * and decodes the holder marker; see keys.h. The layout itself is the
 * table below and the "NS:{NAME}" of dm_keys_build: nothing else in the
 * tree spells it. Must not know Redis commands, the scripts' logic or any state. */
#include "keys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const suffixes[DM_KEY_COUNT] = {
    [DM_KEY_LOCK] = "",
    [DM_KEY_TOKEN] = ":token",
    [DM_KEY_HOLDER] = ":holder",
    [DM_KEY_LOST] = ":lost",
    [DM_KEY_VOID] = ":void",
    [DM_KEY_RELEASED] = ":released",
    [DM_KEY_QUEUE] = ":queue",
    [DM_KEY_QTIME] = ":qtime",
    [DM_KEY_WANT] = ":want",
    [DM_KEY_FORCED] = ":forced",
    [DM_KEY_COND] = ":cond",
    [DM_KEY_READERS] = ":readers",
    [DM_KEY_RGRANT] = ":rgrant",
    [DM_KEY_WAIT] = ":w:",
    [DM_KEY_EPOCH] = ":epoch",
};

const char *dm_keys_suffix(enum dm_key k)
{
    return (unsigned)k < DM_KEY_COUNT ? suffixes[k] : "";
}

static const char *const kinds[DM_KEY_COUNT] = {
    [DM_KEY_LOCK] = "lock", [DM_KEY_TOKEN] = "token", [DM_KEY_HOLDER] = "holder",
    [DM_KEY_LOST] = "lost", [DM_KEY_VOID] = "void", [DM_KEY_RELEASED] = "released",
    [DM_KEY_QUEUE] = "queue", [DM_KEY_QTIME] = "qtime", [DM_KEY_WANT] = "want",
    [DM_KEY_FORCED] = "forced", [DM_KEY_COND] = "cond", [DM_KEY_READERS] = "readers",
    [DM_KEY_RGRANT] = "rgrant", [DM_KEY_WAIT] = "w", [DM_KEY_EPOCH] = "epoch",
};

const char *dm_keys_kind(enum dm_key k)
{
    return (unsigned)k < DM_KEY_COUNT ? kinds[k] : "";
}

int dm_keys_kind_parse(const char *s, enum dm_key *k)
{
    for (int i = 0; i < DM_KEY_COUNT; i++) {
        if (strcmp(s, kinds[i]) == 0) {
            *k = (enum dm_key)i;
            return 0;
        }
    }
    return -1;
}

const enum dm_key dm_keys_release[DM_KEYS_RELEASE_N] = {
    DM_KEY_LOCK, DM_KEY_HOLDER, DM_KEY_TOKEN, DM_KEY_QUEUE, DM_KEY_QTIME, DM_KEY_LOST,
};

/* snprintf's result as a size: a negative one (an encoding error, which
 * "%s" cannot have) counts as nothing written. */
size_t dm_keys_build(char *buf, size_t len, const char *ns, const char *name, enum dm_key k)
{
    int n = snprintf(buf, len, "%s:{%s}%s", ns, name, dm_keys_suffix(k));
    return n < 0 ? 0 : (size_t)n;
}

size_t dm_keys_len(const char *ns, const char *name, enum dm_key k)
{
    return strlen(ns) + strlen(name) + strlen(":{}") + strlen(dm_keys_suffix(k));
}

size_t dm_keys_intact(char *buf, size_t len, const char *ns)
{
    int n = snprintf(buf, len, "%s" DM_KEYS_INTACT_SUFFIX, ns);
    return n < 0 ? 0 : (size_t)n;
}

size_t dm_keys_redisson_channel(char *buf, size_t len, const char *name)
{
    int n = snprintf(buf, len, strchr(name, '{') ? DM_KEYS_REDISSON_CHANNEL ":%s"
                                                 : DM_KEYS_REDISSON_CHANNEL ":{%s}", name);
    return n < 0 ? 0 : (size_t)n;
}

size_t dm_keys_who(char *buf, size_t len, const char *ns, const char *process_id)
{
    int n = snprintf(buf, len, "%s:who:{%s}", ns, process_id);
    return n < 0 ? 0 : (size_t)n;
}

size_t dm_keys_wait_channel(char *buf, size_t len, const char *ns, const char *name,
                            const char *process_id)
{
    size_t n = dm_keys_build(buf, len, ns, name, DM_KEY_WAIT);
    size_t m = strlen(process_id);
    if (n < len)
        snprintf(buf + n, len - n, "%s", process_id);
    return n + m;
}

int dm_keys_name(const char *key, size_t klen, const char *ns, enum dm_key k,
                 const char **name, size_t *namelen)
{
    const char *tail = dm_keys_suffix(k);
    size_t nl = strlen(ns), tl = strlen(tail);
    /* ns ":{" name "}" tail, name possibly empty */
    if (klen < nl + 3 + tl || memcmp(key, ns, nl) != 0 || memcmp(key + nl, ":{", 2) != 0 ||
        key[klen - tl - 1] != '}' || memcmp(key + klen - tl, tail, tl) != 0)
        return 0;
    *name = key + nl + 2;
    *namelen = klen - nl - 3 - tl;
    return 1;
}

/* A decimal number that runs to the end of s. */
static int whole_number(const char *s, unsigned long long *v)
{
    if (*s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    *v = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0' ? 0 : -1;
}

int dm_keys_holder_decode(const char *marker, struct dm_holder *h)
{
    unsigned long long v;
    memset(h, 0, sizeof *h);
    switch (marker[0]) {
    case '=':
        h->state = DM_HOLDER_RELEASED;
        if (whole_number(marker + 1, &v) != 0)
            return -1;
        h->token = v;
        return 0;
    case '!': {
        h->state = DM_HOLDER_EXPIRY_SEEN;
        char num[24];
        size_t len = strcspn(marker + 1, " ");
        if (len >= sizeof num)
            return -1;
        memcpy(num, marker + 1, len);
        num[len] = 0;
        if (whole_number(num, &v) != 0)
            return -1;
        h->seen_ms = (long long)v;
        if (marker[1 + len] == 0)
            return 0;
        h->forced = strcmp(marker + 1 + len, " forced") == 0;
        return h->forced ? 0 : -1;
    }
    case '?':
        h->state = DM_HOLDER_KEPT_OFF;
        if (whole_number(marker + 1, &v) != 0)
            return -1;
        h->seen_ms = (long long)v;
        return 0;
    case '~': {
        h->state = DM_HOLDER_FORCED;
        const char *sp = strchr(marker + 1, ' ');
        char num[24];
        size_t len = sp ? (size_t)(sp - marker - 1) : strlen(marker + 1);
        if (len >= sizeof num)
            return -1;
        memcpy(num, marker + 1, len);
        num[len] = 0;
        if (whole_number(num, &v) != 0)
            return -1;
        h->token = v;
        h->by = sp ? sp + 1 : "";
        return 0;
    }
    default: {
        h->state = DM_HOLDER_GRANTED;
        /* a request id has no " #": the last one ends it */
        const char *sep = NULL;
        for (const char *p = marker; (p = strstr(p, " #")) != NULL; p++)
            sep = p;
        if (!sep || sep == marker || whole_number(sep + 2, &v) != 0)
            return -1;
        h->request = marker;
        h->request_len = (size_t)(sep - marker);
        const char *bar = memchr(marker, '|', h->request_len);
        h->owner_len = bar ? (size_t)(bar - marker) : h->request_len;
        h->token = v;
        return 0;
    }
    }
}
