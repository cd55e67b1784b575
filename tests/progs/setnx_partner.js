// setnx_partner: redlock 5 (npm, bench/node_modules: bench/run.sh's `npm
// ci`) with one server, on lock NAME, as a Node service beside a
// dmutex-mapped C program would take it: SET NAME VALUE PX after an EXISTS
// (its acquire script), extended and released by compare. For
// test_interop. Times are CLOCK_MONOTONIC ms (process.hrtime).
//
//   node setnx_partner.js PORT NAME count KEY N HOLD_US
//       N sections (lease 10 s, retry every 2-4 ms, no limit): GET KEY,
//       sleep HOLD_US, SET KEY +1; "done N"
//   node setnx_partner.js PORT NAME poll TTL_MS FOR_MS
//       one attempt every 2 ms for FOR_MS: "got T" (then release) or "never T"
//
// Any redis error (WRONGTYPE...) is printed and ends it with status 1.
'use strict';
const path = require('path');
const modules = path.join(__dirname, '..', '..', 'bench', 'node_modules');
const Redis = require(path.join(modules, 'ioredis'));
const Redlock = require(path.join(modules, 'redlock')).default;

const [port, name, mode, ...rest] = process.argv.slice(2);
const monoMs = () => Number(process.hrtime.bigint() / 1000000n);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const client = new Redis({ host: '127.0.0.1', port: Number(port), lazyConnect: true,
                             maxRetriesPerRequest: 1 });
  await client.connect();
  client.on('error', (e) => { console.log('redis error: ' + e.message); process.exit(1); });
  if (mode === 'count') {
    const [key, n, holdUs] = [rest[0], Number(rest[1]), Number(rest[2])];
    const redlock = new Redlock([client], { retryCount: -1, retryDelay: 2, retryJitter: 2 });
    redlock.on('error', () => {});
    for (let i = 0; i < n; i++) {
      const lock = await redlock.acquire([name], 10000);
      const v = Number(await client.get(key)) || 0;
      if (holdUs) await sleep(holdUs / 1000);
      await client.set(key, v + 1);
      await lock.release();
    }
    console.log('done ' + n);
  } else if (mode === 'poll') {
    const [ttl, forMs] = [Number(rest[0]), Number(rest[1])];
    const redlock = new Redlock([client], { retryCount: 0 });
    redlock.on('error', () => {});
    const end = monoMs() + forMs;
    while (monoMs() < end) {
      try {
        const lock = await redlock.acquire([name], ttl);
        console.log('got ' + monoMs());
        await lock.release();
        await client.quit();
        return;
      } catch (e) {
        if (!(e.name === 'ExecutionError')) throw e;
        const why = (e.attempts || []).map((a) => String(a)).join(' ');
        if (/WRONGTYPE|ERR/.test(why)) throw e;
      }
      await sleep(2);
    }
    console.log('never ' + monoMs());
  } else {
    throw new Error('unknown mode ' + mode);
  }
  await client.quit();
}

main().catch((e) => { console.log('redis error: ' + (e && e.message)); process.exit(1); });
