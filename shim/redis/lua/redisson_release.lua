-- redisson_release: the redisson protocol's release (docs/interop.md): DEL
-- the hash KEYS[1] only while it has field ARGV[1] (dmutex's hold: its
-- count is 1, so this release ends it, as Redisson's unlockInner does when
-- the count reaches 0), then publish "0" (Redisson's UNLOCK_MESSAGE) on
-- ARGV[2], the lock's channel redisson_lock__channel:{NAME}, with PUBLISH
-- (ARGV[3] "spublish": SPUBLISH, in Redis Cluster): what Redisson's
-- waiters and dmutex's wait for. No unlock latch is written: Redisson's
-- redisson_unlock_latch:{NAME}:<request id> only answers a retry of that
-- client's own unlock request.
-- Returns 1 released; 0 the key is gone (expired, deleted); 2 it has no
-- such field (the lease ran out and another client took it); -1 it is not
-- a hash (another protocol's lock at the name).
local t = redis.call('type', KEYS[1])['ok']
if t == 'none' then
    return 0
end
if t ~= 'hash' then
    return -1
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return 2
end
redis.call('del', KEYS[1])
if ARGV[3] == 'spublish' then
    redis.call('spublish', ARGV[2], '0')
else
    redis.call('publish', ARGV[2], '0')
end
return 1
