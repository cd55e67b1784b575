-- release: end the hold of owner ARGV[1] on the lock KEYS[1]. When fair
-- waiters queue, the lock goes straight to the first live one, which is
-- told on its own channel: it owns the lock the moment the notice arrives,
-- and nobody else wakes. Otherwise the lock is deleted and a notice is
-- published to everyone waiting.
--
-- KEYS[1] lock  KEYS[2] holder  KEYS[3] token  KEYS[4] queue  KEYS[5] qtime
-- KEYS[6] lost  (see acquire.lua; names built by shim/redis/keys.c)
-- KEYS[7] readers  KEYS[8] rgrant: an rwlock's (acquire.lua); a token the
--         owner's read grant has is a read release: the last live reader
--         wakes the first queued writer (a message on its channel that is
--         no handover: it asks again)
-- ARGV[1] owner  ARGV[2] fencing token of the hold  ARGV[3] release channel
-- ARGV[4] how long to remember the release, ms (the lease)
-- ARGV[5] waiter channel prefix: a waiter "<pid>:<seq>|<id>" is told on
--         ARGV[5] .. "<pid>" with the message "<pid>:<seq>|<id> <token>",
--         followed by " +" when more waiters queue behind it, then
--         " @<ms>:<lease>": the server's clock at the handover and the
--         lease set, ms (it runs from then; the waiter places it on its
--         own clock, and renews early when it is shorter than its own)
-- ARGV[6] lease of a handed-over lock, ms: the releaser's whole lease
-- ARGV[7] (optional) "spublish": Redis Cluster's sharded pub/sub (the
--         notices go to the shard of the lock's slot); absent or "": PUBLISH
-- ARGV[8] (optional) "<owner>|<wait id>": the request whose grant this
--         releases. An unlock sends its release without waiting for the
--         reply, and the owner's next acquire may go out on another
--         connection and run first: finding the lock still held by the
--         owner, it grants it again under the same token (acquire.lua)
--         and names its own request in the holder marker. This release
--         is then older than that grant and leaves it alone (returns 1).
--         "": no request named (as when absent).
-- (The lost list KEYS[6] may hold "<C:N" too: a token above C and below
-- N that nothing else here names was lost with the server's data,
-- acquire.lua's restart check.)
-- ARGV[9], ARGV[10] (optional): the server run the caller's connection
--         reached (INFO's run_id; "": not known) and the lock's epoch key
--         (acquire.lua's restart check: the first grant of a server run
--         sets it to that run's id). A hold not found, while the epoch
--         names another run (or none), was lost with the server's data
--         (a restart without persistence, an older snapshot, a failover
--         to a replica that lacked it) after it was granted, and nobody
--         has been granted the lock in this run: returns 3, not 0.
--
-- A release is retried when its reply is lost or late, and meanwhile the
-- lock may have passed to others. So a release of token T by an owner that
-- does not hold T answers from what the grant of T became (acquire.lua
-- explains why this is complete): lost while the holder marker still names
-- T unreleased or T is in the lost list; released if any later state
-- exists (T is not above the counter). A late copy of an old release by an
-- owner that holds a newer grant (the marker names the owner with another
-- token) is such a retry too and leaves the newer hold alone.
--
-- Returns 1: released (or already released by this same hold: a retry
-- whose first reply was lost); 2: still held (a nested count from another
-- client); 0: not held by this owner (its lease expired: the hold was lost);
-- 3: not held, lost with the server's data, nobody granted it since
-- (ARGV[9], ARGV[10]; a grant whose run was not known, or a handover,
-- marks the epoch "-": then 0).
local lock, holder, tokenkey, queue, qtime = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lostkey = KEYS[6]
local owner, token, channel, keep = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local wprefix, handlease = ARGV[5], tonumber(ARGV[6])
local sharded = ARGV[7] == 'spublish'
local request = ARGV[8] ~= '' and ARGV[8] or nil
local runid, epochkey = ARGV[9] or '', ARGV[10] or ''
local readers, rgrant = KEYS[7], KEYS[8]

-- "not held": 3 when the server lost the lock's data since the grant and
-- granted it to nobody since (ARGV[9], ARGV[10]), else 0.
local function not_held()
    if runid ~= '' and epochkey ~= '' then
        local e = redis.call('get', epochkey)
        if e ~= runid and e ~= '-' then
            return 3
        end
    end
    return 0
end

-- A handover is a grant that makes no restart check: unless the epoch
-- names this run, it says "-" (a grant of a run not known), so that a
-- release of a hold lost with older data is not taken for one nobody was
-- granted since (not_held), while the next free grant still checks.
local function handover_marks_epoch()
    if epochkey ~= '' and (runid == '' or redis.call('get', epochkey) ~= runid) then
        redis.call('set', epochkey, '-')
    end
end

local function publish(ch, msg)
    if sharded then
        redis.call('spublish', ch, msg)
    else
        redis.call('publish', ch, msg)
    end
end

if readers then
    local rg = redis.call('hget', rgrant, owner)
    if rg and string.match(rg, ' #(%d+)$') == token then
        local t = redis.call('time')
        local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        local d = tonumber(redis.call('zscore', readers, owner))
        redis.call('hdel', rgrant, owner)
        redis.call('zrem', readers, owner)
        if not d or d < now then
            redis.call('lpush', lostkey, token)     -- a retry answers "lost" too
            redis.call('pexpire', lostkey, keep)
            return 0
        end
        if redis.call('zcount', readers, now, '+inf') == 0 then
            local head = redis.call('lindex', queue, 0)
            if head then
                publish(wprefix .. string.match(head, '^[^:|]+'), 'readers gone')
            end
        end
        return 1
    end
end

local last = redis.call('get', holder)
local mowner, mtok
if last then
    mowner, mtok = string.match(last, '^([^ |]+)|[^ ]* #(%d+)$')
end

if request and mowner == owner and mtok == token and
        string.match(last, '^([^ ]+) #') ~= request then
    return 1        -- re-granted to a later request of the owner: not ours to end
end

-- The owner's count: nil when the lock is free or another owner's. A key
-- of another type is refused (HGET's WRONGTYPE, caught: one call instead
-- of a TYPE before every release); any other error (NOPERM...) is
-- returned as the server gave it.
local n = redis.pcall('hget', lock, owner)
if type(n) == 'table' and n.err then
    if string.sub(n.err, 1, 9) ~= 'WRONGTYPE' then
        return n
    end
    return redis.error_reply('WRONGTYPE ' .. lock .. ' holds a ' .. redis.call('type', lock)['ok']
                             .. ', not a dmutex lock')
end
n = tonumber(n)
if n and not (mowner == owner and mtok ~= token) then
    if n > 1 then
        redis.call('hset', lock, owner, n - 1)
        return 2
    end
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
        handover_marks_epoch()
        local next_owner = string.match(head, '^[^|]+')
        redis.call('hset', lock, next_owner, 1)
        redis.call('pexpire', lock, handlease)
        local granted = redis.call('incr', tokenkey)    -- exists: the releaser's grant made it
        redis.call('set', holder, head .. ' #' .. string.format('%d', granted))
        -- " +": more waiters queue behind it (a caching holder then
        -- gives the lock up after its critical section, not when asked).
        local more = redis.call('llen', queue) > 0 and ' +' or ''
        local wchannel = wprefix .. string.match(next_owner, '^[^:]+')
        publish(wchannel, head .. ' ' .. string.format('%d', granted) .. more ..
                ' @' .. string.format('%d', now) .. ':' .. string.format('%d', handlease))
    else
        redis.call('set', holder, '=' .. token, 'px', keep)
        publish(channel, token)
    end
    return 1
end
-- Not held by this owner: a retry, a late copy, or a lost hold.
-- (An rwlock's read grant leaves no marker: no marker is not "lost" there.)
if (not last and not readers) or mtok == token or string.match(last or '', ' #(%d+)$') == token then
    return not_held()
end
for _, t in ipairs(redis.call('lrange', lostkey, 0, -1)) do
    -- "<C:N": the restart check raised the counter from C to N
    -- (acquire.lua): a token between them was granted after the data that
    -- came back, and lost with what did not
    local lo, hi = string.match(t, '^<(%d+):(%d+)$')
    local tn = tonumber(token)
    if t == token or (lo and tn and tn > tonumber(lo) and tn < tonumber(hi)) then
        return not_held()
    end
end
local counter = tonumber(redis.call('get', tokenkey))
if counter and tonumber(token) and tonumber(token) <= counter then
    return 1
end
return not_held()
