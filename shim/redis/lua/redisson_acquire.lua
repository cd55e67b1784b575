-- redisson_acquire: the redisson protocol's attempt (docs/interop.md): the
-- lock is a hash at the bare name KEYS[1], one field per holder whose
-- value is its hold count, the key's PEXPIRE its lease, as Redisson's
-- RLock (Java Redisson, node-redisson) writes it. Takes it for field
-- ARGV[1] with a lease of ARGV[2] ms while the key is not there: HSET the
-- field to 1 and PEXPIRE, as Redisson's tryLockInner does with HINCRBY
-- (dmutex's nested holds are counted in the process: on the wire the
-- count stays 1). A TYPE first tells another protocol's lock (a string:
-- a SET NX lock) from a held one. No other key, nothing published.
-- Returns {1, 0} granted; {1, 1} granted already to this field (a retry
-- whose first reply was lost: its lease renewed); {0, pttl} held by
-- another field (pttl -1: a key with no expiry); {-1, type, pttl} the
-- key is not a hash.
local t = redis.call('type', KEYS[1])['ok']
if t == 'none' then
    redis.call('hset', KEYS[1], ARGV[1], 1)
    redis.call('pexpire', KEYS[1], ARGV[2])
    return {1, 0}
end
if t ~= 'hash' then
    return {-1, t, redis.call('pttl', KEYS[1])}
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return {1, 1}
end
return {0, redis.call('pttl', KEYS[1])}
