/* admin: the Redis store's calls for the tools: store.h's admin_*
 * entries (what each guarantees is said there). */
#ifndef DM_ADMIN_H
#define DM_ADMIN_H

#include <stddef.h>

#include "store.h"

int dm_admin_connect(char *err, size_t errlen);
void dm_admin_disconnect(void);
int dm_admin_list(const char *ns, struct dm_lock_row **rows, size_t *n, char *err, size_t errlen);
int dm_admin_partner(const char *name, int protocol, struct dm_lock_row *row, char *err,
                     size_t errlen);
int dm_admin_who(const char *ns, char ***texts, size_t *n, char *err, size_t errlen);
int dm_admin_force(const char *ns, const char *name, int force, const char *who,
                   struct dm_force *out, char *err, size_t errlen);
int dm_admin_fresh(const char *ns, int durable, char *said, size_t saidlen, char *err,
                   size_t errlen);
int dm_admin_keys(int argc, char **argv);

#endif
