-- renew: extend the lease of owner ARGV[1] on KEYS[1] (the lock hash
-- ns:{NAME}, built by shim/redis/keys.c) to ARGV[2] ms. With ARGV[3] = 'r', a
-- read hold of an rwlock: KEYS[1] is its readers set ns:{NAME}:readers
-- (acquire.lua), and only a reader whose own deadline has not passed is
-- renewed (an expired one waits to be dropped by the next acquire).
-- Returns 1 if the owner still holds the lock, 0 if the hold is gone
-- (expired, deleted, or the server lost it): a lost lease.
if ARGV[3] == 'r' then
    local d = tonumber(redis.call('zscore', KEYS[1], ARGV[1]))
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if d and d >= now then
        redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
        -- Extended, never cut: the set's expiry is its longest lease (a
        -- process with a shorter lease_ms would drop the others' holds).
        if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
            redis.call('pexpire', KEYS[1], ARGV[2])
        end
        return 1
    end
    return 0
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 1
end
return 0
