-- setnx_acquire: the setnx protocol's attempt (docs/interop.md): the lock
-- is a string at the bare name KEYS[1] holding its holder's token, as
-- redis-py's Lock, redlock, redsync and Jedis's SET NX PX write it. Takes
-- it for token ARGV[1] with a lease of ARGV[2] ms: SET KEYS[1] ARGV[1] NX
-- PX ARGV[2], after a TYPE that tells a lock of another protocol (a hash:
-- dmutex's or Redisson's layout) from a held one. No other key, nothing
-- published.
-- Returns {1, 0} granted; {1, 1} granted already to this token (a retry
-- whose first reply was lost: its lease renewed); {0, pttl} held by
-- another token (pttl -1: a key with no expiry); {-1, type, pttl} the key
-- is not a string.
local t = redis.call('type', KEYS[1])['ok']
if t == 'none' then
    redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
    return {1, 0}
end
if t ~= 'string' then
    return {-1, t, redis.call('pttl', KEYS[1])}
end
if redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return {1, 1}
end
return {0, redis.call('pttl', KEYS[1])}
