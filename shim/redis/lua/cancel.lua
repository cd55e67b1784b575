-- cancel (abandon): the caller gives up the acquire request ARGV[2]
-- ("<owner>|<wait id>"): a timed lock past its deadline, or any lock call
-- that returns after a request whose reply never came (it may have run, or
-- may still run: a paused server executes it later, perhaps after this
-- script, which comes on another connection). Takes the request out of the
-- fair queue and, with ARGV[3] > 0, voids it for ARGV[3] ms so that a late
-- copy of it grants nothing (acquire.lua). Returns {1, token} if the owner
-- holds the lock through this request (granted or handed over meanwhile:
-- the caller then releases it, handing it on), else {0, 0}. An old request
-- run late cannot take a newer hold of the same owner: the holder marker
-- names the request each hold came through.
--
-- KEYS[1] lock  KEYS[2] queue  KEYS[3] qtime  KEYS[4] token (unused)  KEYS[5] holder
-- KEYS[6] void  (see acquire.lua; names built by shim/redis/keys.c)
-- KEYS[7] readers  KEYS[8] rgrant: an rwlock's; a read grant that came
--         through the request counts as one through the lock
-- ARGV[1] owner  ARGV[2] "<owner>|<wait id>"  ARGV[3] void for ms, 0: do not
--
-- By hand: redis-cli --eval cancel.lua 'dmutex:{x}' 'dmutex:{x}:queue' \
--   'dmutex:{x}:qtime' 'dmutex:{x}:token' 'dmutex:{x}:holder' 'dmutex:{x}:void' , \
--   me:1 me:1\|1 0
local lock, queue, qtime, holder, void = KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6]
local owner, member, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
-- The queue first: ZREM and LREM are allowed under maxmemory, ZADD is not.
if redis.call('zrem', qtime, member) == 1 then
    redis.call('lrem', queue, 1, member)
end
local res = {0, 0}
if redis.call('hexists', lock, owner) == 1 then
    local m, tok = string.match(redis.call('get', holder) or '', '^(.*) #(%d+)$')
    if m == member then
        res = {1, tonumber(tok)}
    end
end
if res[1] == 0 and KEYS[8] and redis.call('zscore', KEYS[7], owner) then
    local m, tok = string.match(redis.call('hget', KEYS[8], owner) or '', '^(.*) #(%d+)$')
    if m == member then
        res = {1, tonumber(tok)}
    end
end
if ttl > 0 then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('zremrangebyscore', void, '-inf', now)
    redis.call('zadd', void, now + ttl, member)
    redis.call('pexpire', void, ttl)
end
return res
