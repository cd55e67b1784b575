/* registry: the address -> entry table (see registry.h for the design).
 * Writers take a spinlock rather than a pthread mutex: pthread_mutex_lock is
 * the very function being interposed, and the registry must work before the
 * shim has resolved anything. */
#include "registry.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#define DM_REGISTRY_MIN_SLOTS 64

struct dm_registry_table *dm_registry_current;
unsigned char dm_registry_filter[DM_REGISTRY_FILTER_SIZE];

static int writer_lock_word;

static void writer_lock(void)
{
    while (__atomic_exchange_n(&writer_lock_word, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&writer_lock_word, __ATOMIC_RELAXED))
            __builtin_ia32_pause();
}

static void writer_unlock(void)
{
    __atomic_store_n(&writer_lock_word, 0, __ATOMIC_RELEASE);
}

/* Fork: startup's prepare handler holds the writer lock across fork(), so
 * neither side inherits it held by a thread that is not there. */
void dm_registry_atfork_prepare(void)
{
    writer_lock();
}

void dm_registry_atfork_release(void)
{
    writer_unlock();
}

/* mmap rather than malloc: tables may be made from inside malloc-sensitive
 * contexts (fork handlers, early constructors), and they are never freed. */
static struct dm_registry_table *table_new(size_t nslots)
{
    size_t bytes = sizeof(struct dm_registry_table) + nslots * sizeof(struct dm_registry_slot);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    struct dm_registry_table *t = p;
    t->mask = nslots - 1;
    return t;           /* mmap'ed memory is zero: every slot EMPTY */
}

static void slot_put(struct dm_registry_table *t, uintptr_t key, void *value)
{
    size_t i = dm_registry_hash(key) & t->mask;
    while (t->slots[i].key != DM_REGISTRY_EMPTY && t->slots[i].key != DM_REGISTRY_DELETED &&
           t->slots[i].key != key)
        i = (i + 1) & t->mask;
    /* A reused DELETED slot can only be found by readers once the key is
     * stored, and the value is stored before it. */
    uintptr_t old = t->slots[i].key;
    __atomic_store_n(&dm_registry_filter[dm_registry_filter_index(key)], 1, __ATOMIC_RELEASE);
    __atomic_store_n(&t->slots[i].value, value, __ATOMIC_RELAXED);
    __atomic_store_n(&t->slots[i].key, key, __ATOMIC_RELEASE);
    if (old != key) {
        t->live++;
        if (old == DM_REGISTRY_EMPTY)
            t->used++;
    }
}

int dm_registry_add(const void *addr, void *value)
{
    uintptr_t key = (uintptr_t)addr;
    if (key <= DM_REGISTRY_DELETED)
        return EINVAL;
    writer_lock();
    struct dm_registry_table *t = dm_registry_current;
    if (!t || (t->used + 1) * 4 > (t->mask + 1) * 3) {
        /* Grow (or clean out tombstones) into a fresh table. */
        size_t n = DM_REGISTRY_MIN_SLOTS;
        size_t live = t ? t->live : 0;
        while ((live + 1) * 2 > n)
            n *= 2;
        struct dm_registry_table *nt = table_new(n);
        if (!nt) {
            writer_unlock();
            return ENOMEM;
        }
        if (t) {
            /* Bytes of removed addresses stay set (a reader may be between
             * the filter and the table): they only cost a table probe. */
            for (size_t i = 0; i <= t->mask; i++)
                if (t->slots[i].key > DM_REGISTRY_DELETED)
                    slot_put(nt, t->slots[i].key, t->slots[i].value);
            nt->older = t;
        }
        __atomic_store_n(&dm_registry_current, nt, __ATOMIC_RELEASE);
        t = nt;
    }
    slot_put(t, key, value);
    writer_unlock();
    return 0;
}

void *dm_registry_remove(const void *addr)
{
    uintptr_t key = (uintptr_t)addr;
    void *value = NULL;
    writer_lock();
    struct dm_registry_table *t = dm_registry_current;
    if (t) {
        for (size_t i = dm_registry_hash(key) & t->mask;; i = (i + 1) & t->mask) {
            if (t->slots[i].key == key) {
                value = t->slots[i].value;
                __atomic_store_n(&t->slots[i].key, DM_REGISTRY_DELETED, __ATOMIC_RELEASE);
                t->live--;
                break;
            }
            if (t->slots[i].key == DM_REGISTRY_EMPTY)
                break;
        }
    }
    writer_unlock();
    return value;
}

void dm_registry_foreach(void (*fn)(const void *addr, void *value, void *arg), void *arg)
{
    writer_lock();
    struct dm_registry_table *t = dm_registry_current;
    for (size_t i = 0; t && i <= t->mask; i++)
        if (t->slots[i].key > DM_REGISTRY_DELETED)
            fn((const void *)t->slots[i].key, t->slots[i].value, arg);
    writer_unlock();
}

size_t dm_registry_count(void)
{
    struct dm_registry_table *t = __atomic_load_n(&dm_registry_current, __ATOMIC_ACQUIRE);
    return t ? t->live : 0;
}
