-- release: end one hold of owner ARGV[1] on the lock KEYS[1]; when it was
-- the last, delete the lock, record a clean release and publish a notice.
--
-- KEYS[1] lock hash  KEYS[2] holder marker (see acquire.lua)
-- ARGV[1] owner  ARGV[2] fencing token of the hold  ARGV[3] release channel
-- ARGV[4] how long to remember the release, ms (the lease)
--
-- Returns 1: released (or already released by this same hold: a retry
-- whose first reply was lost); 2: still held (nested hold count > 0);
-- 0: not held by this owner (its lease expired: the hold was lost).
local lock, holder = KEYS[1], KEYS[2]
local owner, token, channel, keep = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])

local kind = redis.call('type', lock)['ok']
if kind == 'hash' then
    local n = tonumber(redis.call('hget', lock, owner))
    if n and n > 1 then
        redis.call('hset', lock, owner, n - 1)
        return 2
    end
    if n then
        redis.call('del', lock)
        redis.call('set', holder, '=' .. token, 'px', keep)
        redis.call('publish', channel, token)
        return 1
    end
elseif kind ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. lock .. ' holds a ' .. kind .. ', not a dmutex lock')
end
if redis.call('get', holder) == '=' .. token then
    return 1
end
return 0
