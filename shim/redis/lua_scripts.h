/* The Lua scripts of shim/redis/lua/, embedded at build time by
 * tools/embed-lua.sh. One constant per file, named dm_lua_<file>. */
#ifndef DM_LUA_SCRIPTS_H
#define DM_LUA_SCRIPTS_H

extern const char dm_lua_acquire[];
extern const char dm_lua_cancel[];
extern const char dm_lua_force[];     /* dmutex unlock (tools/unlock.c), not the shim */
extern const char dm_lua_redisson_acquire[];
extern const char dm_lua_redisson_release[];
extern const char dm_lua_redisson_renew[];
extern const char dm_lua_release[];
extern const char dm_lua_renew[];
extern const char dm_lua_setnx_acquire[];
extern const char dm_lua_setnx_release[];
extern const char dm_lua_setnx_renew[];

#endif
