// redisson_partner: node-redisson 1.0.4 (npm, bench/node_modules: `npm ci
// --prefix bench`) on lock NAME, as a Node service beside a dmutex-mapped
// C program would take it: Redisson's RLock scripts (a hash at NAME, field
// "<client uuid>:<lock uuid>" -> hold count, PEXPIRE = the lease, renewed
// by its watchdog every lease / 3; an unlock that ends the hold DELs it
// and PUBLISHes "0" on redisson_lock__channel:{NAME}; its waiters
// subscribe there). For test_interop. Times are CLOCK_MONOTONIC ms
// (process.hrtime), as tests/progs/interprog prints them.
//
//   node redisson_partner.js PORT NAME count KEY N HOLD_US
//       N sections, each a reentrant hold (lock, lock again: count 2 in
//       the hash, said once as "nested 2"): GET KEY, sleep HOLD_US, SET
//       KEY +1, unlock twice; "done N"
//   node redisson_partner.js PORT NAME hold MS [WATCHDOG_MS]
//       lock ("held T"), hold MS, "unlocking T", unlock ("released T")
//   node redisson_partner.js PORT NAME wait [WATCHDOG_MS]
//       "waiting T", lock (waits), "got T", unlock
//
// WATCHDOG_MS: the client's lockWatchdogTimeout (its lease; default
// Redisson's 30000). Any redis error (WRONGTYPE...) is printed and ends it
// with status 1. It exits when done: node-redisson leaves a wait's timer armed.
'use strict';
const path = require('path');
const modules = path.join(__dirname, '..', '..', 'bench', 'node_modules');
const { Redisson } = require(path.join(modules, 'node-redisson'));
const Redis = require(path.join(modules, 'ioredis'));

const [port, name, mode, ...rest] = process.argv.slice(2);
const monoMs = () => Number(process.hrtime.bigint() / 1000000n);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function client(watchdogMs) {
  const config = { redis: { options: { host: '127.0.0.1', port: Number(port),
                                       maxRetriesPerRequest: 1 } } };
  if (watchdogMs) config.lockWatchdogTimeout = BigInt(watchdogMs);
  const r = new Redisson(config);
  r.redis.on('error', (e) => { console.log('redis error: ' + e.message); process.exit(1); });
  return r;
}

async function main() {
  if (mode === 'count') {
    const [key, n, holdUs] = [rest[0], Number(rest[1]), Number(rest[2])];
    const redisson = client(0);
    const plain = new Redis({ host: '127.0.0.1', port: Number(port) });
    const lock = redisson.getLock(name);
    for (let i = 0; i < n; i++) {
      await lock.lock();
      await lock.lock();                // reentrant: the same client and lock id
      if (i === 0) {
        const h = await plain.hgetall(name);
        console.log('nested ' + Object.values(h).join(' '));
      }
      const v = Number(await plain.get(key)) || 0;
      if (holdUs) await sleep(holdUs / 1000);
      await plain.set(key, v + 1);
      await lock.unlock();
      await lock.unlock();
    }
    console.log('done ' + n);
    await plain.quit();
    await redisson.quit();
  } else if (mode === 'hold') {
    const redisson = client(Number(rest[1] || 0));
    const lock = redisson.getLock(name);
    await lock.lock();
    console.log('held ' + monoMs());
    await sleep(Number(rest[0]));
    console.log('unlocking ' + monoMs());
    await lock.unlock();
    console.log('released ' + monoMs());
    await redisson.quit();
  } else if (mode === 'wait') {
    const redisson = client(Number(rest[0] || 0));
    const lock = redisson.getLock(name);
    console.log('waiting ' + monoMs());
    await lock.lock();
    console.log('got ' + monoMs());
    await lock.unlock();
    await redisson.quit();
  } else {
    throw new Error('unknown mode ' + mode);
  }
}

main().then(() => process.exit(0))
  .catch((e) => { console.log('redis error: ' + (e && e.message)); process.exit(1); });
