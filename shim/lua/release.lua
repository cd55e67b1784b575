-- release: end the hold of owner ARGV[1] on the lock KEYS[1]. When fair
-- waiters queue, the lock goes straight to the first live one, which is
-- told on its own channel: it owns the lock the moment the notice arrives,
-- and nobody else wakes. Otherwise the lock is deleted and a notice is
-- published to everyone waiting.
--
-- KEYS[1] lock  KEYS[2] holder  KEYS[3] token  KEYS[4] queue  KEYS[5] qtime
-- (see acquire.lua)
-- ARGV[1] owner  ARGV[2] fencing token of the hold  ARGV[3] release channel
-- ARGV[4] how long to remember the release, ms (the lease)
-- ARGV[5] waiter channel prefix: a waiter "<pid>:<seq>|<id>" is told on
--         ARGV[5] .. "<pid>" with the message "<pid>:<seq>|<id> <token>",
--         followed by " +" when more waiters queue behind it
-- ARGV[6] lease of a handed-over lock until its new owner renews it, ms
--
-- Returns 1: released (or already released by this same hold: a retry
-- whose first reply was lost); 2: still held (a nested count from another
-- client); 0: not held by this owner (its lease expired: the hold was lost).
local lock, holder, tokenkey, queue, qtime = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local owner, token, channel, keep = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local wprefix, claim = ARGV[5], tonumber(ARGV[6])

local kind = redis.call('type', lock)['ok']
if kind == 'hash' then
    local n = tonumber(redis.call('hget', lock, owner))
    if n and n > 1 then
        redis.call('hset', lock, owner, n - 1)
        return 2
    end
    if n then
        redis.call('del', lock)
        local head = redis.call('lpop', queue)
        local now
        if head then
            local t = redis.call('time')
            now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        end
        while head do
            local d = tonumber(redis.call('zscore', qtime, head))
            redis.call('zrem', qtime, head)
            if d and d >= now then
                break
            end
            head = redis.call('lpop', queue)
        end
        if head then
            local next_owner = string.match(head, '^[^|]+')
            redis.call('hset', lock, next_owner, 1)
            redis.call('pexpire', lock, claim)
            redis.call('set', holder, next_owner .. ' =' .. token)
            local granted = redis.call('incr', tokenkey)    -- exists: the releaser's grant made it
            -- " +": more waiters queue behind it (a caching holder then
            -- gives the lock up after its critical section, not when asked).
            local more = redis.call('llen', queue) > 0 and ' +' or ''
            redis.call('publish', wprefix .. string.match(next_owner, '^[^:]+'),
                       head .. ' ' .. string.format('%d', granted) .. more)
        else
            redis.call('set', holder, '=' .. token, 'px', keep)
            redis.call('publish', channel, token)
        end
        return 1
    end
elseif kind ~= 'none' then
    return redis.error_reply('WRONGTYPE ' .. lock .. ' holds a ' .. kind .. ', not a dmutex lock')
end
local last = redis.call('get', holder)
if last and (last == '=' .. token or string.sub(last, -(#token + 2)) == ' =' .. token) then
    return 1
end
return 0
