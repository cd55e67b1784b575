-- setnx_release: the setnx protocol's release (docs/interop.md): DEL the
-- string KEYS[1] only while it holds token ARGV[1] (compare-and-DEL, as
-- the partners' clients release), then, when ARGV[2] is not empty, PUBLISH
-- "0" on it: dmutex's release channel NS:{NAME}:released, so that dmutex
-- waiters of the name retry at once (a partner publishes nothing: they
-- poll for its releases).
-- Returns 1 released; 0 the key is gone (expired, deleted); 2 it holds
-- another token (the lease ran out and another client took it); -1 it is
-- not a string (another protocol's lock at the name).
local t = redis.call('type', KEYS[1])['ok']
if t == 'none' then
    return 0
end
if t ~= 'string' then
    return -1
end
if redis.call('get', KEYS[1]) ~= ARGV[1] then
    return 2
end
redis.call('del', KEYS[1])
if ARGV[2] ~= '' then
    redis.call('publish', ARGV[2], '0')
end
return 1
