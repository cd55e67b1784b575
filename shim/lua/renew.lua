-- renew: extend the lease of owner ARGV[1] on KEYS[1] (the lock hash
-- ns:{NAME}, built by shim/keys.c) to ARGV[2] ms.
-- Returns 1 if the owner still holds the lock, 0 if the hold is gone
-- (expired, deleted, or the server lost it): a lost lease.
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 1
end
return 0
