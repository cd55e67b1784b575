-- cancel: a fair waiter gives up (timed lock past its deadline): take it
-- out of the queue. Returns {1, token} if a release had already handed it
-- the lock (the caller then has it), else {0, 0}.
--
-- KEYS[1] lock  KEYS[2] queue  KEYS[3] qtime  KEYS[4] token
-- ARGV[1] owner  ARGV[2] "<owner>|<wait id>"
if redis.call('zrem', KEYS[3], ARGV[2]) == 1 then
    redis.call('lrem', KEYS[2], 1, ARGV[2])
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
    return {1, tonumber(redis.call('get', KEYS[4])) or 0}
end
return {0, 0}
