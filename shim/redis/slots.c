/* slots: the slot map under one mutex. A node is an index into a table of
 * addresses (to DM_SLOTS_NODES_MAX), so that redis.c can keep a connection
 * pool per index; an index keeps its address until the table is full and
 * no slot names it, then it may be given another one (its epoch moves, and
 * what was connected to it is dropped); the map is one short per slot
 * (node + 1, 0: unknown). */
#include "slots.h"

#include "real.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct node {
    char host[DM_SLOTS_HOST_MAX];
    int port;
    unsigned long epoch;        /* moves when the index is given another address */
};

static pthread_mutex_t smu = PTHREAD_MUTEX_INITIALIZER;
static int enabled;
static struct node nodes[DM_SLOTS_NODES_MAX];
static int nnodes;
static int nseeds;              /* nodes[0..nseeds): the config's, never reused */
static int reuse_next;          /* where the search for an index to reuse starts */
static unsigned short map[DM_SLOTS_COUNT];
static int want_refresh = 1;
static long long refreshed_ms;
static unsigned long gen;
static struct dm_hooks change_hooks;   /* notify's thread, rlock's release resender */

void dm_slots_setup(const struct dm_redis_config *cfg)
{
    dm_lock(&smu);
    enabled = cfg->ncluster > 0;
    nnodes = 0;
    for (size_t i = 0; i < cfg->ncluster && nnodes < DM_SLOTS_NODES_MAX; i++) {
        snprintf(nodes[nnodes].host, sizeof nodes[nnodes].host, "%s", cfg->cluster[i].host);
        nodes[nnodes].port = cfg->cluster[i].port;
        nnodes++;
    }
    nseeds = nnodes;
    memset(map, 0, sizeof map);
    want_refresh = 1;
    dm_unlock(&smu);
}

int dm_slots_enabled(void)
{
    return enabled;
}

/* CRC16-CCITT (XMODEM: poly 0x1021, init 0), bit by bit: the keys are
 * short and the slot is computed once per lock record. */
static unsigned crc16(const char *s, size_t len)
{
    unsigned crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (unsigned)(unsigned char)s[i] << 8;
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
        crc &= 0xffff;
    }
    return crc;
}

unsigned dm_slots_keyslot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & (DM_SLOTS_COUNT - 1);
    }
    return crc16(key, len) & (DM_SLOTS_COUNT - 1);
}

/* "?": the endpoint Redis names for a node whose preferred endpoint it
 * does not know (cluster-preferred-endpoint-type hostname, none
 * announced), in CLUSTER SLOTS and in MOVED/ASK ("MOVED 42 ?:7000"): no
 * address to connect to. */
static int unknown_host(const char *h, size_t len)
{
    return len == 1 && h[0] == '?';
}

/* Is node n the owner of a slot in m? smu held. */
static int in_map(const unsigned short *m, int n)
{
    for (int s = 0; s < DM_SLOTS_COUNT; s++)
        if (m[s] == n + 1)
            return 1;
    return 0;
}

/* The index of host:port, added when new. A full table gives the address
 * an index no slot of `map` nor of `building` (NULL: none) names, and
 * that is not a seed: addresses change over a cluster's life (a node
 * replaced, a container given a new IP), and a table that only grew
 * would refuse every new node after DM_SLOTS_NODES_MAX of them. The
 * reused index's epoch moves, so that redis and notify drop what they
 * connected to its old address. -1 when no index is free. smu held. */
static int node_index_locked(const char *host, size_t hlen, int port,
                             const unsigned short *building)
{
    for (int i = 0; i < nnodes; i++)
        if (nodes[i].port == port && strlen(nodes[i].host) == hlen &&
            memcmp(nodes[i].host, host, hlen) == 0)
            return i;
    if (hlen >= DM_SLOTS_HOST_MAX)
        return -1;
    int n = -1;
    if (nnodes < DM_SLOTS_NODES_MAX) {
        n = nnodes++;
    } else {
        for (int k = 0; k < DM_SLOTS_NODES_MAX - nseeds && n < 0; k++) {
            int i = nseeds + (reuse_next + k) % (DM_SLOTS_NODES_MAX - nseeds);
            if (!in_map(map, i) && !(building && in_map(building, i)))
                n = i;
        }
        if (n < 0)
            return -1;
        reuse_next = n - nseeds + 1;
    }
    memcpy(nodes[n].host, host, hlen);
    nodes[n].host[hlen] = 0;
    nodes[n].port = port;
    __atomic_add_fetch(&nodes[n].epoch, 1, __ATOMIC_RELEASE);
    return n;
}

unsigned long dm_slots_node_epoch(int node)
{
    if (node < 0 || node >= DM_SLOTS_NODES_MAX)
        return 0;
    return __atomic_load_n(&nodes[node].epoch, __ATOMIC_ACQUIRE);
}

int dm_slots_node_of(unsigned slot)
{
    dm_lock(&smu);
    int n = map[slot & (DM_SLOTS_COUNT - 1)] - 1;
    dm_unlock(&smu);
    return n;
}

int dm_slots_want_refresh(void)
{
    dm_lock(&smu);
    long long now = dm_now_ms();
    int yes = want_refresh && now - refreshed_ms >= DM_SLOTS_REFRESH_MIN_MS;
    if (yes)
        refreshed_ms = now;     /* one thread asks; the others go on with the map */
    dm_unlock(&smu);
    return yes;
}

void dm_slots_stale(void)
{
    dm_lock(&smu);
    want_refresh = 1;
    dm_unlock(&smu);
}

/* The address of a node entry of CLUSTER SLOTS ({endpoint, port, id,
 * {"ip": ..., "hostname": ...}}): its preferred endpoint (an IP, or the
 * hostname it announces with cluster-preferred-endpoint-type hostname),
 * else, when that is unknown ("?" or ""), the "ip" of its metadata (Redis
 * 7 answers "?" for a node that announces no hostname). NULL: none. */
static const redisReply *endpoint(const redisReply *p)
{
    const redisReply *h = p->element[0];
    if (h->type == REDIS_REPLY_STRING && h->len > 0 && !unknown_host(h->str, h->len))
        return h;
    const redisReply *m = p->elements >= 4 ? p->element[3] : NULL;
    if (!m || m->type != REDIS_REPLY_ARRAY)     /* RESP2: the map as a flat array */
        return NULL;
    for (size_t i = 0; i + 1 < m->elements; i += 2) {
        const redisReply *k = m->element[i], *v = m->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && strcmp(k->str, "ip") == 0 &&
            v->type == REDIS_REPLY_STRING && v->len > 0 && !unknown_host(v->str, v->len))
            return v;
    }
    return NULL;
}

int dm_slots_update(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return -1;
    static unsigned short next[DM_SLOTS_COUNT];
    dm_lock(&smu);
    memset(next, 0, sizeof next);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            continue;
        const redisReply *p = e->element[2];
        const redisReply *host = endpoint(p);
        if (!host || p->element[1]->type != REDIS_REPLY_INTEGER)
            continue;       /* no address known for it: asked again later */
        int n = node_index_locked(host->str, host->len, (int)p->element[1]->integer, next);
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        if (n < 0 || lo < 0 || hi >= DM_SLOTS_COUNT || lo > hi)
            continue;
        for (long long s = lo; s <= hi; s++)
            next[s] = (unsigned short)(n + 1);
    }
    int changed = memcmp(next, map, sizeof map) != 0;
    if (changed) {
        memcpy(map, next, sizeof map);
        gen++;
    }
    want_refresh = 0;
    refreshed_ms = dm_now_ms();
    dm_unlock(&smu);
    if (changed)
        dm_hooks_call(&change_hooks);
    return 0;
}

unsigned long dm_slots_gen(void)
{
    return __atomic_load_n(&gen, __ATOMIC_ACQUIRE);
}

int dm_slots_on_change(void (*fn)(void))
{
    return dm_hooks_add(&change_hooks, fn);
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK 3999 [::1]:6381" (host may be empty:
 * the node that answered, which a client cannot name: refused here). */
static int parse(const char *msg, int *ask, unsigned *slot, const char **host, size_t *hlen,
                 int *port)
{
    const char *p;
    if (strncmp(msg, "MOVED ", 6) == 0) {
        *ask = 0;
        p = msg + 6;
    } else if (strncmp(msg, "ASK ", 4) == 0) {
        *ask = 1;
        p = msg + 4;
    } else {
        return 0;
    }
    char *end;
    unsigned long s = strtoul(p, &end, 10);
    if (end == p || *end != ' ' || s >= DM_SLOTS_COUNT)
        return 0;
    const char *a = end + 1;
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a)
        return 0;
    const char *h = a;
    size_t hl = (size_t)(colon - a);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    long pt = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || (*end && *end != ' ') || pt < 1 || pt > 65535 || hl == 0)
        return 0;
    *slot = (unsigned)s;
    *host = h;
    *hlen = hl;
    *port = (int)pt;
    return 1;
}

int dm_slots_parse_redirect(const char *msg, int *ask, unsigned *slot, char *host,
                            size_t hostlen, int *port)
{
    const char *h;
    size_t hl;
    if (!parse(msg, ask, slot, &h, &hl, port) || hl >= hostlen)
        return 0;
    memcpy(host, h, hl);
    host[hl] = 0;
    return 1;
}

int dm_slots_redirect(const char *msg, int *ask, unsigned *slot, int *node)
{
    const char *h;
    size_t hl;
    int port;
    if (!parse(msg, ask, slot, &h, &hl, &port))
        return 0;
    dm_lock(&smu);
    /* "?": the node is not named; the map (which has its IP) is asked again */
    *node = unknown_host(h, hl) ? -1 : node_index_locked(h, hl, port, NULL);
    if (*node < 0)
        want_refresh = 1;
    int changed = !*ask && *node >= 0 && map[*slot] != *node + 1;
    if (changed) {
        map[*slot] = (unsigned short)(*node + 1);
        gen++;
    }
    if (!*ask)
        want_refresh = 1;   /* other slots may have moved with it */
    dm_unlock(&smu);
    if (changed)
        dm_hooks_call(&change_hooks);
    return 1;
}

int dm_slots_node_addr(int node, char *host, size_t hostlen, int *port)
{
    dm_lock(&smu);
    int ok = node >= 0 && node < nnodes;
    if (ok) {
        snprintf(host, hostlen, "%s", nodes[node].host);
        *port = nodes[node].port;
    }
    dm_unlock(&smu);
    return ok ? 0 : -1;
}

int dm_slots_nnodes(void)
{
    dm_lock(&smu);
    int n = nnodes;
    dm_unlock(&smu);
    return n;
}

int dm_slots_primaries(int *out, int max)
{
    unsigned char seen[DM_SLOTS_NODES_MAX] = { 0 };
    int k = 0;
    dm_lock(&smu);
    for (int s = 0; s < DM_SLOTS_COUNT; s++) {
        int n = map[s] - 1;
        if (n >= 0 && !seen[n] && k < max) {
            seen[n] = 1;
            out[k++] = n;
        }
    }
    dm_unlock(&smu);
    return k;
}

void dm_slots_atfork(enum dm_fork_phase phase)
{
    dm_fork_mutex(&smu, phase);
}
