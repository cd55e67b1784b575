-- force: `dmutex unlock` of lock KEYS[1], run by an operator, not by a
-- holder. While the lock is held (its lease alive) it is refused unless
-- ARGV[1] is '1' (--force): a lease that is alive may be a live holder's.
-- Forced, the hold ends as a release would end it (release.lua: the lock
-- goes to the first live fair waiter, told on its own channel (the
-- message ends in " !": the holder is dead, EOWNERDEAD for it), or is
-- deleted and a release notice published), with three differences that
-- make the old holder's hold lost for good, never released:
--   * its token goes to KEYS[6] (lost), so a later release of it answers 0
--     (lost) as for an expired grant (release.lua), and its renewal finds
--     the owner gone from KEYS[1] (renew.lua: 0, the watchdog's loss path);
--   * the fencing counter is bumped once for the force itself, so every
--     later grant's token is above the old holder's;
--   * with nobody waiting, the marker says "~<forced token> <who>": the
--     next acquire treats it as an expiry (another owner's unreleased
--     grant: EOWNERDEAD for a robust mutex, lock_delay_ms applies).
-- Who did it is logged by the server (redis.log, warning) and kept in
-- KEYS[7] ("<server ms> <who>: <old owner> #<old token> -> #<forced
-- token>[, handed to <request> #<token>]"), until the next force.
--
-- KEYS[1] lock  KEYS[2] holder  KEYS[3] token  KEYS[4] queue  KEYS[5] qtime
-- KEYS[6] lost  KEYS[7] forced  (see acquire.lua; names built by shim/redis/keys.c)
-- KEYS[8] (optional) epoch: a handover marks it "-" (release.lua)
-- ARGV[1] '1': force  ARGV[2] who (operator, host, pid: for the log)
-- ARGV[3] release channel  ARGV[4] how long to keep the lost token, ms
-- ARGV[5] waiter channel prefix  ARGV[6] lease of a handed-over lock, ms
--         (as release.lua: the whole lease)
-- ARGV[7] LOST_KEEP: how many lost tokens KEYS[6] keeps (as acquire.lua's
--         ARGV[8], DM_KEYS_LOST_KEEP in shim/redis/keys.h)
-- ARGV[9] (optional) the run_id the caller's connection read (INFO
--         server; "": not known): a handover leaves an epoch naming it
-- ARGV[8] (optional) "spublish": Redis Cluster's sharded pub/sub, as
--         release.lua's ARGV[7]; absent: PUBLISH
--
-- Returns {0, owner, pttl, token}: held, not forced (refused).
-- Returns {1, owner, old token, forced token, next request or '', its token}.
-- Returns {2, marker or ''}: not held (nothing to release).
--
-- By hand: redis-cli --eval force.lua 'dmutex:{x}' 'dmutex:{x}:holder' \
--   'dmutex:{x}:token' 'dmutex:{x}:queue' 'dmutex:{x}:qtime' 'dmutex:{x}:lost' \
--   'dmutex:{x}:forced' , 1 me@host 'dmutex:{x}:released' 30000 'dmutex:{x}:w:' 30000 48
local lock, holder, tokenkey, queue, qtime = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lostkey, forcedkey = KEYS[6], KEYS[7]
local force, who, channel, keep = ARGV[1] == '1', ARGV[2], ARGV[3], tonumber(ARGV[4])
local wprefix, handlease = ARGV[5], tonumber(ARGV[6])
local LOST_KEEP = tonumber(ARGV[7])
local sharded = ARGV[8] == 'spublish'
local runid = ARGV[9] or ''

local kind = redis.call('type', lock)['ok']
if kind == 'none' then
    return {2, redis.call('get', holder) or ''}
elseif kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE ' .. lock .. ' holds a ' .. kind .. ', not a dmutex lock')
end
local fields = redis.call('hkeys', lock)
local owner = fields[1] or ''
local last = redis.call('get', holder) or ''
local old = string.match(last, ' #(%d+)$') or ''
if not force then
    return {0, owner, redis.call('pttl', lock), old}
end

if old ~= '' then
    redis.call('lpush', lostkey, old)
    redis.call('ltrim', lostkey, 0, LOST_KEEP - 1)
    if redis.call('pttl', lostkey) < keep then
        redis.call('pexpire', lostkey, keep)
    end
end
redis.call('del', lock)
local forced = redis.call('incr', tokenkey)
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The handover, as release.lua does it.
local head = redis.call('lpop', queue)
while head do
    local d = tonumber(redis.call('zscore', qtime, head))
    redis.call('zrem', qtime, head)
    if d and d >= now then
        break
    end
    head = redis.call('lpop', queue)
end
local granted = 0
if head then
    -- a grant with no restart check (release.lua's handover_marks_epoch)
    if KEYS[8] and (runid == '' or redis.call('get', KEYS[8]) ~= runid) then
        redis.call('set', KEYS[8], '-')
    end
    local next_owner = string.match(head, '^[^|]+')
    redis.call('hset', lock, next_owner, 1)
    redis.call('pexpire', lock, handlease)
    granted = redis.call('incr', tokenkey)
    redis.call('set', holder, head .. ' #' .. string.format('%d', granted))
    local more = redis.call('llen', queue) > 0 and ' +' or ''
    local wchannel = wprefix .. string.match(next_owner, '^[^:]+')
    -- " !": the holder is dead (the operator says so): the waiter hears it
    -- as after an expiry (EOWNERDEAD for a robust mutex), as the next
    -- locker of a lock forced free with nobody waiting does
    local msg = head .. ' ' .. string.format('%d', granted) .. more .. ' ! @' ..
                string.format('%d', now) .. ':' .. string.format('%d', handlease)
    if sharded then
        redis.call('spublish', wchannel, msg)
    else
        redis.call('publish', wchannel, msg)
    end
else
    redis.call('set', holder, '~' .. string.format('%d', forced) .. ' ' .. who)
    if sharded then
        redis.call('spublish', channel, string.format('%d', forced))
    else
        redis.call('publish', channel, string.format('%d', forced))
    end
end

local record = string.format('%d', now) .. ' ' .. who .. ': ' .. owner .. ' #' .. old ..
               ' -> #' .. string.format('%d', forced)
if head then
    record = record .. ', handed to ' .. head .. ' #' .. string.format('%d', granted)
end
redis.call('set', forcedkey, record)
redis.log(redis.LOG_WARNING, 'dmutex: forced release of ' .. lock .. ' by ' .. record)
return {1, owner, old, forced, head or '', granted}
