-- setnx_renew: the setnx protocol's renewal (docs/interop.md): PEXPIRE
-- the string KEYS[1] to ARGV[2] ms only while it holds token ARGV[1]
-- (compare-and-PEXPIRE, as redis-py's reacquire and redlock's extend do).
-- Returns 1 renewed, 0 the hold is gone: the key expired, was deleted, is
-- another client's now, or is not a string (renew.lua's answers).
if redis.call('type', KEYS[1])['ok'] == 'string' and redis.call('get', KEYS[1]) == ARGV[1] then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 1
end
return 0
