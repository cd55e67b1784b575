/* json: the etcd store's reader of the JSON its gateway answers (RFC 8259,
 * the subset etcd writes and more), and base64 for the keys and values it
 * carries. A parse makes an array of nodes over the text, which must
 * outlive them; nothing is copied until a string is asked for. No I/O, no
 * logging, no lock: any thread, its own struct dm_json. */
#ifndef DM_ETCD_JSON_H
#define DM_ETCD_JSON_H

#include <stddef.h>
#include <stdint.h>

enum dm_json_type { DM_J_NULL, DM_J_FALSE, DM_J_TRUE, DM_J_NUM, DM_J_STR, DM_J_ARR, DM_J_OBJ };

struct dm_json_node {
    enum dm_json_type type;
    const char *key;        /* a member of an object: its name (raw, no quotes) */
    size_t keylen;
    const char *s;          /* a string's raw bytes (escapes kept) or a number's text */
    size_t n;
    int child;              /* first child (array, object), -1 when none */
    int next;               /* next sibling, -1 at the end */
};

struct dm_json {
    struct dm_json_node *nodes;
    int count, cap;
};

/* Parses text[0..len) into j (node 0 is the value); 0, or -1 for text
 * that is not one JSON value (or no memory). dm_json_free frees the nodes
 * (also after a failed parse). */
int dm_json_parse(struct dm_json *j, const char *text, size_t len);
void dm_json_free(struct dm_json *j);

/* The member `key` of object node `at`, or -1 (at < 0, not an object, no
 * such member). path: members separated by '.', as "header.revision". */
int dm_json_get(const struct dm_json *j, int at, const char *key);
int dm_json_path(const struct dm_json *j, int at, const char *path);
/* Element i of array node `at`, or -1; how many it has (0 for -1). */
int dm_json_at(const struct dm_json *j, int at, int i);
int dm_json_len(const struct dm_json *j, int at);

/* An int64 from a number or a string of digits (etcd writes int64 as
 * strings); dflt for -1 (etcd leaves out zero values), for anything else
 * too. */
long long dm_json_int(const struct dm_json *j, int at, long long dflt);
/* true -> 1; -1, false, anything else -> 0. */
int dm_json_true(const struct dm_json *j, int at);
/* A string's value, unescaped, into buf (NUL-terminated, cut to len-1);
 * its full length, or -1 when `at` is not a string. */
long dm_json_str(const struct dm_json *j, int at, char *buf, size_t len);
/* A base64 string's decoded bytes into buf (NUL-terminated, cut to len-1):
 * their length, or -1 (not a string, not base64). */
long dm_json_b64(const struct dm_json *j, int at, char *buf, size_t len);

/* Standard base64 with padding of src[0..n) into out (at least
 * DM_B64_LEN(n) + 1 bytes), NUL-terminated; returns its length. */
#define DM_B64_LEN(n) (((n) + 2) / 3 * 4)
size_t dm_b64_encode(const void *src, size_t n, char *out);
/* Decodes src[0..n) into out (room for n / 4 * 3 bytes); the length, or
 * -1 for bytes that are not base64. */
long dm_b64_decode(const char *src, size_t n, unsigned char *out);

/* src as a JSON string's contents (quotes not included): '"', '\\' and
 * control bytes escaped, into out (len bytes, NUL-terminated, cut whole
 * escapes); the length written. */
size_t dm_json_escape(const char *src, char *out, size_t len);

#endif
