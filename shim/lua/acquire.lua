-- acquire: grant the lock KEYS[1] to owner ARGV[1] if it is free, else
-- report how long the current lease has left. Acquiring a lock the owner
-- already holds grants it again without counting: the shim counts nested
-- holds in the process and asks Redis only for the outermost, so a second
-- acquire by the same owner is a retry whose first reply was lost (or the
-- claim of a lock handed over by a release), and must not leave a count
-- that one release would not clear.
--
-- KEYS[1] lock hash   dmutex:{NAME}          owner -> hold count, PEXPIRE = lease
-- KEYS[2] token       dmutex:{NAME}:token    fencing counter, INCR per grant
-- KEYS[3] holder      dmutex:{NAME}:holder   how the last grant ended:
--                        "<owner>"  granted and not released (if KEYS[1] is
--                                   gone, its lease expired: owner dead)
--                        "=<token>" released cleanly (kept a lease long, so a
--                                   retried release can recognise itself)
--                        "!<ms>"    expiry noticed at server time ms; no
--                                   grant until lock_delay has passed
-- ARGV[1] owner  ARGV[2] lease ms  ARGV[3] lock delay ms after an expiry
--
-- Returns {1, token, dead}: granted; dead = 1 when the previous holder's
-- lease expired instead of being released (robust mutexes: EOWNERDEAD).
-- Returns {0, pttl}: held by another owner (or delayed) for pttl more ms.
--
-- By hand: redis-cli --eval acquire.lua 'dmutex:{x}' 'dmutex:{x}:token' 'dmutex:{x}:holder' , me:1 30000 0
local lock, tokenkey, holder = KEYS[1], KEYS[2], KEYS[3]
local owner, lease, delay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local kind = redis.call('type', lock)['ok']
if kind == 'none' then
    local dead = 0
    local last = redis.call('get', holder)
    if last and string.sub(last, 1, 1) ~= '=' then
        dead = 1
        if delay > 0 then
            local t = redis.call('time')
            local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            local since = tonumber(string.match(last, '^!(%d+)$'))
            if not since then
                redis.call('set', holder, '!' .. now)
                return {0, delay}
            end
            if now - since < delay then
                return {0, delay - (now - since)}
            end
        end
    end
    redis.call('hset', lock, owner, 1)
    redis.call('pexpire', lock, lease)
    redis.call('set', holder, owner)
    return {1, redis.call('incr', tokenkey), dead}
elseif kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE ' .. lock .. ' holds a ' .. kind .. ', not a dmutex lock')
end

if redis.call('hexists', lock, owner) == 1 then
    redis.call('pexpire', lock, lease)
    return {1, tonumber(redis.call('get', tokenkey)) or 0, 0}
end
return {0, redis.call('pttl', lock)}
