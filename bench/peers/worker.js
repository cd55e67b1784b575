// The peers' benchmark worker for node: the same steps as bench/cycle.c
// `run`, with redlock 5 or redis-semaphore's Mutex over ioredis.
//
//   node worker.js redlock|semaphore PORT KEY HOLD_US default|1ms
//
// Warm-up cycles for 0.3 s, then "ready"; waits for "go DEADLINE_NS" on stdin
// (CLOCK_MONOTONIC, as process.hrtime), then repeats lock; INCR KEY; sleep
// HOLD_US; unlock until the deadline. Prints {"acq": [[t0, t1, t2, t3], ...],
// "fail": n, "censored": [[t0, t]]}: times lock was called, returned, unlock
// called and returned; `fail` counts acquire calls that gave up (redlock after its
// retryCount, the semaphore after acquireTimeout), retried at once; a wait
// still unfinished at the deadline is reported as censored. Then waits for
// end of file on stdin, like the C worker.
//
// Retry settings: "default" keeps each library's own (redlock: retryDelay
// 200 ms, retryJitter 100 ms, retryCount 10; redis-semaphore: retryInterval
// 10 ms, acquireTimeout 10 s); "1ms" retries every millisecond. The lease
// is 30 s for both, as dmutex's default lease_ms.
'use strict';
const path = require('path');
const readline = require('readline');
const modules = path.join(__dirname, '..', 'node_modules');
const Redis = require(path.join(modules, 'ioredis'));

const [system, port, key, holdArg, retry] = process.argv.slice(2);
const holdMs = Number(holdArg) / 1000;
const LEASE_MS = 30000;
const WARMUP_NS = 300000000n;
const lockKey = key + ':lock';
const now = () => process.hrtime.bigint();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function makeLock(client) {
  if (system === 'redlock') {
    const Redlock = require(path.join(modules, 'redlock')).default;
    const settings = retry === '1ms' ? { retryDelay: 1, retryJitter: 0 } : {};
    const redlock = new Redlock([client], settings);
    // redlock reports every refused attempt as an 'error' event; an
    // EventEmitter without a listener would throw it.
    redlock.on('error', () => {});
    return {
      acquire: () => redlock.acquire([lockKey], LEASE_MS),
      release: (l) => l.release(),
    };
  }
  if (system === 'semaphore') {
    const { Mutex } = require(path.join(modules, 'redis-semaphore'));
    const opts = { lockTimeout: LEASE_MS };
    if (retry === '1ms') opts.retryInterval = 1;
    const mutex = new Mutex(client, lockKey, opts);
    return {
      acquire: async () => { await mutex.acquire(); return mutex; },
      release: (m) => m.release(),
    };
  }
  throw new Error('unknown system ' + system);
}

async function main() {
  const client = new Redis({ host: '127.0.0.1', port: Number(port), lazyConnect: true });
  await client.connect();
  const lock = makeLock(client);
  const rl = readline.createInterface({ input: process.stdin });
  const lines = rl[Symbol.asyncIterator]();

  // Warm-up (connection, scripts, JIT): cycles for WARMUP_NS, a refused
  // acquire included, before the measured window.
  const warmEnd = now() + WARMUP_NS;
  do {
    try {
      const w = await lock.acquire();
      await client.incr(key);
      await lock.release(w);
    } catch (e) { /* contended: fine for a warm-up */ }
  } while (now() < warmEnd);
  process.stdout.write('ready\n');

  const go = (await lines.next()).value || '';
  const m = /^go (\d+)$/.exec(go.trim());
  if (!m) throw new Error('expected "go DEADLINE_NS", got ' + go);
  const deadline = BigInt(m[1]);
  const acq = [];
  const censored = [];
  let fail = 0;
  while (now() < deadline) {
    const t0 = now();
    let l;
    try {
      l = await lock.acquire();
    } catch (e) {
      fail++;
      if (now() >= deadline) censored.push([Number(t0), Number(now())]);
      continue;
    }
    const t1 = now();
    await client.incr(key);
    if (holdMs > 0) await sleep(holdMs);
    const t2 = now();
    await lock.release(l);
    acq.push([Number(t0), Number(t1), Number(t2), Number(now())]);
  }
  process.stdout.write(JSON.stringify({ fail, censored, acq }) + '\n');
  for (;;) {
    const r = await lines.next();
    if (r.done) break;
  }
  client.disconnect();
}

main().catch((e) => {
  process.stderr.write('worker.js: ' + (e && e.stack ? e.stack : e) + '\n');
  process.exit(1);
});
