-- acquire: grant the lock KEYS[1] to owner ARGV[1] if it is free (and, when
-- fair waiters queue, if the caller is first in line), else report how long
-- the current lease has left, queueing the caller in fair mode.
--
-- Acquiring a lock the owner already holds grants it again without
-- counting: the shim counts nested holds in the process and asks Redis only
-- for the outermost, so a second acquire by the same owner is a retry whose
-- reply was lost, or the confirmation of a lock a release handed over.
--
-- Every call carries a request id, "<owner>|<wait id>" (ARGV[5]), new for
-- each lock call of a thread. A request the caller gave up (cancel.lua, on
-- a reply that never came: the request may still sit unexecuted in the
-- server, e.g. behind a CLIENT PAUSE, and run after the abandon) is in
-- KEYS[7] and does nothing here.
--
-- The key and channel names are built by shim/redis/keys.c (enum dm_key in
-- shim/redis/keys.h), the one source of the layout; docs/design.md maps them. This
-- header documents what the script does with each.
--
-- KEYS[1] lock     ns:{NAME}          hash owner -> hold count, PEXPIRE = lease
-- KEYS[2] token    ns:{NAME}:token    fencing counter, INCR per grant; a missing
--                                     counter starts from the server's clock in
--                                     microseconds, so tokens keep growing even
--                                     across a restart that lost the counter
-- KEYS[3] holder   ns:{NAME}:holder   how the last grant ended:
--                    "<req> #<tok>"     grant <tok> to request <req> (its owner is
--                                       the part before '|'), here or by a release's
--                                       handover; not released; with KEYS[1] gone
--                                       its lease expired (owner dead)
--                    "=<tok>"           released cleanly (kept a lease long so
--                                       a retried release recognises itself)
--                    "!<ms>"            expiry seen at server time ms; no grant
--                                       until lock_delay has passed
--                    "!<ms> forced"     the same after a forced release (below)
--                    "~<tok> <who>"     released by `dmutex unlock --force`
--                                       (force.lua), which drew token <tok>;
--                                       taken next as after an expiry, but
--                                       reported as forced (dead = 2)
--                    "?<ms>"            no grant before server time ms: the lock's
--                                       data was missing on a server up for less
--                                       than a lease (see "Restarts" below)
-- KEYS[4] queue    ns:{NAME}:queue    fair waiters, "<owner>|<wait id>", oldest first
-- KEYS[5] qtime    ns:{NAME}:qtime    zset waiter -> deadline (server ms); a waiter
--                                     past its deadline is dead and skipped
-- KEYS[6] lost     ns:{NAME}:lost     list of the last LOST_KEEP tokens whose grant
--                                     ended by expiry (found here), PEXPIRE a lease
-- KEYS[7] void     ns:{NAME}:void     zset abandoned request -> until (server ms);
--                                     written by cancel.lua only
-- An rwlock (rwlocks entries) passes two more; KEYS[1] is then its write
-- hold, exactly a mutex's:
-- KEYS[8] readers  ns:{NAME}:readers  zset read holder -> lease deadline (server
--                                     ms), PEXPIRE the longest lease in it (extended,
--                                     never cut); renewed by renew.lua
-- KEYS[9] rgrant   ns:{NAME}:rgrant   hash read holder -> "<req> #<tok>"; no
--                                     expiry: an entry whose holder is not in
--                                     KEYS[8] any more is an expired read grant
-- ARGV[1] owner  ARGV[2] lease ms  ARGV[3] lock delay ms after an expiry
-- ARGV[4] 1: queue the caller if not granted (fair); r: a read lock (an
--         rwlock's reader: granted while no writer holds or queues, never
--         queued, every grant a token of its own)  ARGV[5] "<owner>|<wait id>"
-- ARGV[6] queue deadline, ms from now  ARGV[7] channel to announce that the
--         caller wants the lock (lock caching), or ""
-- ARGV[8] LOST_KEEP: how many lost tokens KEYS[6] keeps (DM_KEYS_LOST_KEEP
--         in shim/redis/keys.h; force.lua is given the same)
-- ARGV[9] "spublish": Redis Cluster's sharded pub/sub (the notice goes to
--         the shard of the lock's slot); "": PUBLISH
-- ARGV[10] the namespace's intact marker "NS:intact" (see "Restarts"); ""
--          on Redis Cluster (another slot): no wait after a node's start there
-- ARGV[11] the run_id of the server this connection reached (INFO server at
--          connect, redis.c); "": unknown (INFO refused): no restart check
-- ARGV[12] the lock's epoch key "NS:{NAME}:epoch": the run_id of the server
--          run on which the lock's data was last found continuous
--
-- Restarts. A server that restarts loses what it had not persisted: every
-- hold (no persistence), or the last writes (an RDB snapshot, AOF everysec
-- after an OS crash), counter included. A holder of the lost data goes on
-- until its next renewal finds the hold gone, up to a renewal period
-- later. So a grant first checks that the lock's epoch names this server
-- run (one GET); when it does not (the lock's first grant here, a restart,
-- a failover), the counter is raised to the server's clock in
-- microseconds (above every token handed out before: a restored counter
-- may lag), and a server up for less than a lease (INFO's uptime) grants
-- the lock to nobody until a lease after its start, unless it was
-- promoted from a replica that synced (INFO replication second_repl_offset: its data
-- came by replication, not from a restart) or declared new with
-- `dmutex fresh` (ARGV[10] holds its run_id; a restart gives another),
-- or declared durable (`dmutex fresh --durable`: ARGV[10] holds
-- "durable", for a server with appendfsync always, whose restarts lose
-- no acknowledged write; void while the server writes no AOF).
-- By then every holder of the lost data has been refused a renewal, or
-- its lease has run out, and has stopped. The marker "?<ms>" keeps the
-- waiters off until then.
--
-- Why a retried release can trust KEYS[6] (release.lua): a grant that
-- expires leaves the marker "<req> #<tok>" with KEYS[1] gone. The marker is
-- only ever rewritten (1) by a release, which runs only for an owner still
-- in KEYS[1], i.e. for a grant that did not expire, or (2) here, on the
-- "lock is free" path, which pushes <tok> to KEYS[6] before it writes "!"
-- or the next grant. So from "my hold expired" to "marker overwritten"
-- every path passes through this script recording the loss; until then the
-- marker itself still names the unreleased grant. Expiries are at most a
-- few per lease, so LOST_KEEP entries are plenty, and a lease covers the
-- release that matters: one the holder's watchdog has not already found
-- lost starts within a renewal period of the loss (renewals would have
-- heard it) and retries for less than lease - margin - renew_ms, so it
-- ends within lease - margin of the loss, which is before its recording.
--
-- An rwlock: a writer is granted only once no live reader holds (it waits
-- queued, first in line: the last reader's release wakes it); a reader
-- only while no writer holds and no live writer queues (writers queue,
-- readers do not), so a stream of readers cannot starve a writer. Read
-- holders whose lease ran out are dropped by the next call that looks,
-- their tokens recorded in KEYS[6] like an expired write grant's.
--
-- Returns {1, token, dead}: granted; dead = 1 when the previous holder's
-- lease expired instead of being released (robust mutexes: EOWNERDEAD),
-- 2 when `dmutex unlock --force` ended it (EOWNERDEAD too);
-- {1, token, 0, 1}: granted, the caller held it already (a retry, or the
-- confirmation of a handover: its token is the handover's, or, when the
-- restart check raised the counter, one of this run).
-- Returns {0, pttl, now[, 'restarted']}: not granted ('restarted': kept off
-- after a restart, see "Restarts"); retry within pttl ms (or on a
-- notice); now is the server's clock (ms) when it ran: a handover notice
-- that follows names its own grant's time on that clock, and the waiter
-- places the grant on its own clock from the pair (cluster.c, handed_over).
--
-- By hand: redis-cli --eval acquire.lua 'dmutex:{x}' 'dmutex:{x}:token' \
--   'dmutex:{x}:holder' 'dmutex:{x}:queue' 'dmutex:{x}:qtime' 'dmutex:{x}:lost' \
--   'dmutex:{x}:void' , me:1 30000 0 0 me:1\|1 3000 '' 48
local lock, tokenkey, holder, queue, qtime = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local lostkey, void = KEYS[6], KEYS[7]
local owner, lease, delay = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local fair, member, qttl, want = ARGV[4] == '1', ARGV[5], tonumber(ARGV[6]), ARGV[7]
local LOST_KEEP = tonumber(ARGV[8])
local intact, runid, epochkey = ARGV[10] or '', ARGV[11] or '', ARGV[12]
local readers, rgrant = KEYS[8], KEYS[9]
local read = ARGV[4] == 'r'

-- The uncontended path: no request was ever given up here, nobody
-- queues and the lock is free, which one call tells (then none of the
-- three keys is read again). Otherwise the lock's type says which of
-- them exist (nothing below writes KEYS[1] before it is used).
local kind = 'none'
local quiet = true
local present = redis.call('exists', void, queue, lock)
if present > 0 then
    kind = redis.call('type', lock)['ok']
    quiet = present == (kind == 'none' and 0 or 1)
end

if not quiet and redis.call('zscore', void, member) then
    return {0, qttl}        -- abandoned: a late copy of a request nobody waits for
end

-- Server time in ms, read only when a deadline is involved (TIME is one
-- more call on the uncontended path otherwise).
local now
local function clock()
    if not now then
        local t = redis.call('time')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    return now
end

-- Drop waiters at the head of the queue that stopped refreshing.
local head = not quiet and redis.call('lindex', queue, 0) or nil
while head do
    local d = tonumber(redis.call('zscore', qtime, head))
    if d and d >= clock() then
        break
    end
    redis.call('lpop', queue)
    redis.call('zrem', qtime, head)
    head = redis.call('lindex', queue, 0)
end

-- A grant that ended without a release: remember its token for the
-- release that may still come (see above).
local function record_lost(tok)
    redis.call('lpush', lostkey, tok)
    redis.call('ltrim', lostkey, 0, LOST_KEEP - 1)
    redis.call('pexpire', lostkey, lease)
end

-- An rwlock: drop the read holders whose lease ran out (all of them when
-- the set itself expired), and count the live ones.
local nreaders = 0
if readers then
    local gone
    if redis.call('exists', readers) == 1 then
        gone = redis.call('zrangebyscore', readers, '-inf', '(' .. clock())
    else
        gone = redis.call('hkeys', rgrant)
    end
    for _, r in ipairs(gone) do
        local tok = string.match(redis.call('hget', rgrant, r) or '', ' #(%d+)$')
        if tok then
            record_lost(tok)
        end
        redis.call('hdel', rgrant, r)
        redis.call('zrem', readers, r)
    end
    nreaders = redis.call('zcard', readers)
end

-- The readers set's own expiry is the longest lease in it, never cut
-- short: processes with a shorter lease_ms share the set, and a PEXPIRE
-- to theirs would drop every longer-leased reader with it, live or not.
local function keep_readers()
    if redis.call('pttl', readers) < lease then
        redis.call('pexpire', readers, lease)
    end
end

local function leave_queue()
    if redis.call('zrem', qtime, member) == 1 then
        redis.call('lrem', queue, 1, member)
    end
end

-- The next fencing token.
local function next_token()
    local tok = redis.call('incr', tokenkey)
    if tok == 1 then
        local t = redis.call('time')
        tok = tonumber(t[1]) * 1000000 + tonumber(t[2])
        redis.call('set', tokenkey, tok)
    end
    return tok
end

local function not_granted(pttl)
    if fair then
        if not redis.call('zscore', qtime, member) then
            redis.call('rpush', queue, member)
        end
        redis.call('zadd', qtime, clock() + qttl, member)
        redis.call('pexpire', queue, qttl * 2)
        redis.call('pexpire', qtime, qttl * 2)
    end
    -- Only the first in line (or a trylock, which does not queue) asks the
    -- caching holder to let go: the others are announced by the handover
    -- itself (" +"), and K waiters must not wake every holder K times.
    if want ~= '' and (not fair or redis.call('lindex', queue, 0) == member) then
        if ARGV[9] == 'spublish' then
            redis.call('spublish', want, owner)
        else
            redis.call('publish', want, owner)
        end
    end
    if pttl <= 0 or pttl > qttl then
        pttl = qttl
    end
    return {0, pttl, clock()}
end

-- Not granted: the lock is kept off until server time `untl` ("?<ms>").
local function kept_off(untl)
    local r = not_granted(untl - clock())
    r[2] = untl - clock()       -- the whole wait (not_granted caps it), for the log
    r[4] = 'restarted'
    return r
end

-- Does the intact marker's value v vouch for this server run: its run_id
-- (`dmutex fresh`), or "durable" (`dmutex fresh --durable`: appendfsync
-- always, checked then) while the server still writes an AOF?
local function declared(v)
    return v == runid or (v == 'durable' and
                          string.match(redis.call('info', 'persistence'), 'aof_enabled:1') ~= nil)
end

-- Was this server promoted from a replica that had synced in this run
-- (its data came by replication, not from a restart)? A replica promoted
-- before any sync shows a second_repl_offset of 1, a server never
-- promoted -1.
local function synced_replica()
    local so = string.match(redis.call('info', 'replication'), 'second_repl_offset:(%-?%d+)')
    return (tonumber(so) or -1) > 1
end

-- Before a grant, every one (a re-grant to the same owner too): is the
-- lock's data known continuous on this server run (see "Restarts")? nil:
-- the grant may go ahead (and true when the check ran: the epoch named
-- another run); else the refusal. A grant whose run is not known (INFO
-- refused: runid "") marks the epoch "-", so that release.lua never takes
-- an epoch of another run for "granted to nobody in this one". Raising
-- the counter from C to N also leaves "<C:N" in the lost list: a token
-- above C and below N was granted after the data that came back and is
-- lost with it, never "released" (release.lua; one at or below C is in
-- that data, judged as before), unless the server is declared durable. A
-- re-grant (`regrant`: the lock hash has the caller) that is refused
-- leaves the holder marker alone: it names the caller's hold, which a
-- withdrawal (cancel.lua) must still find.
local function restart_check(regrant)
    if runid == '' then
        if epochkey and redis.call('get', epochkey) ~= '-' then
            redis.call('set', epochkey, '-')
        end
        return nil
    end
    if redis.call('get', epochkey) == runid then
        return nil
    end
    local up = tonumber(string.match(redis.call('info', 'server'), 'uptime_in_seconds:(%d+)')) or 0
    local t = redis.call('time')
    local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local trusted = intact ~= '' and declared(redis.call('get', intact))
    local was = tonumber(redis.call('get', tokenkey)) or 0
    if was < us then
        redis.call('set', tokenkey, us)
        if not trusted then
            record_lost('<' .. string.format('%d', was) .. ':' .. string.format('%d', us))
            -- past a wait of a lease after the start, and a lease more:
            -- the lost holds' releases come no later
            if redis.call('pttl', lostkey) < 2 * lease then
                redis.call('pexpire', lostkey, 2 * lease)
            end
        end
    end
    if up * 1000 < lease and intact ~= '' and not trusted and not synced_replica() then
        local untl = clock() - up * 1000 + lease    -- it started no later than up s ago
        if not regrant then
            redis.call('set', holder, '?' .. string.format('%d', untl))
        end
        return kept_off(untl)
    end
    redis.call('set', epochkey, runid)
    return nil, true
end

-- A reader that holds already: a retry whose reply was lost. The hold is
-- this request's now (as for a writer below).
if read then
    local tok = string.match(redis.call('hget', rgrant, owner) or '', ' #(%d+)$')
    if tok and redis.call('zscore', readers, owner) then
        local refused, checked = restart_check(true)   -- a share restored from older data too
        if refused then
            return refused
        end
        if checked then
            tok = string.format('%d', next_token())     -- a token of this run
        end
        redis.call('zadd', readers, clock() + lease, owner)
        keep_readers()
        redis.call('hset', rgrant, owner, member .. ' #' .. tok)
        return {1, tonumber(tok), 0}
    end
end

if kind == 'none' then
    if head and (read or head ~= member) then
        return not_granted(0)     -- someone is first in line: its turn
    end
    local dead = 0
    local last = redis.call('get', holder)
    local quarantine = last and tonumber(string.match(last, '^%?(%d+)$'))
    if quarantine then
        -- (a declaration made meanwhile, `dmutex fresh`, lifts it)
        if clock() < quarantine and not (intact ~= '' and runid ~= '' and
                                         declared(redis.call('get', intact))) then
            return kept_off(quarantine)
        end
        last = nil          -- over: no owner died; restart_check decides (the marker may
                            -- be an older run's, restored from a snapshot)
    end
    if last and string.sub(last, 1, 1) ~= '=' then
        local lost = string.match(last, ' #(%d+)$')
        if lost then
            record_lost(lost)     -- then overwritten
        end
        dead = string.match(last, '^[^ |]+') ~= owner and 1 or 0
        local forced = string.sub(last, 1, 1) == '~' or string.match(last, '^!%d+ forced$')
        if dead == 1 and forced then
            dead = 2
        end
        if dead > 0 and delay > 0 then
            local since = tonumber(string.match(last, '^!(%d+)'))
            if not since then
                redis.call('set', holder, '!' .. clock() .. (forced and ' forced' or ''))
                return not_granted(delay)
            end
            if clock() - since < delay then
                return not_granted(delay - (clock() - since))
            end
        end
    end
    if read then
        local refused = restart_check()
        if refused then
            return refused
        end
        local tok = next_token()
        redis.call('zadd', readers, clock() + lease, owner)
        keep_readers()
        redis.call('hset', rgrant, owner, member .. ' #' .. string.format('%d', tok))
        if quarantine or (last and string.sub(last, 1, 1) ~= '=') then
            redis.call('set', holder, '=' .. string.format('%d', tok), 'px', lease)
        end
        return {1, tok, 0}
    end
    if nreaders > 0 then
        -- Readers hold it: wait first in line (the last one's release wakes us).
        -- A reader whose lease ends this very millisecond is not expired yet:
        -- retry at once (1 ms), not after the "unknown" wait of a pttl of 0
        -- (a dead reader's end would cost a writer a whole wait cap).
        local first = redis.call('zrange', readers, 0, 0, 'withscores')
        local left = tonumber(first[2]) - clock()
        if left < 1 then
            left = 1
        end
        return not_granted(left)
    end
    local refused = restart_check()
    if refused then
        return refused
    end
    local tok = next_token()
    if head then
        leave_queue()
    end
    redis.call('set', holder, member .. ' #' .. string.format('%d', tok))
    redis.call('hset', lock, owner, 1)
    redis.call('pexpire', lock, lease)
    return {1, tok, dead}
elseif kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE ' .. lock .. ' holds a ' .. kind .. ', not a dmutex lock')
end

if not read and redis.call('hexists', lock, owner) == 1 then
    -- A hold restored from older data (a snapshot from before this owner
    -- released it) is no retry's: the restart check decides, as for a free
    -- lock, and a raised counter gives the grant a token of this run.
    local refused = restart_check(true)
    if refused then
        return refused
    end
    leave_queue()
    redis.call('pexpire', lock, lease)
    local tok = tonumber(redis.call('get', tokenkey)) or 0
    -- The hold is this request's now: an abandon of an older request of
    -- the same owner, run late, must not release it.
    redis.call('set', holder, member .. ' #' .. string.format('%d', tok))
    return {1, tok, 0, 1}   -- 1: the caller held it already (a handover being confirmed)
end
-- PTTL is 0 in the last millisecond of a lease: a waiter that slept until
-- the lease's end arrives just then, and must retry at once, not after
-- the "unknown" wait that not_granted gives a pttl of 0.
local pttl = redis.call('pttl', lock)
if pttl == 0 then
    pttl = 1
end
return not_granted(pttl)
