-- redisson_renew: the redisson protocol's renewal (docs/interop.md):
-- PEXPIRE the hash KEYS[1] to ARGV[2] ms only while it has field ARGV[1]
-- (compare-and-PEXPIRE, as Redisson's watchdog renews: renewExpiration).
-- Returns 1 renewed, 0 the hold is gone: the key expired, was deleted, is
-- another client's now, or is not a hash (renew.lua's answers).
if redis.call('type', KEYS[1])['ok'] == 'hash' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 1
end
return 0
