#!/usr/bin/env node
// The node lock libraries (over ioredis) under the lock workloads of
// bench/run.sh: node-redlock v4 and v5 beta (--lib 4, 5), its maintained
// successor @sesamecare-oss/redlock (--lib sesame) and redis-semaphore's
// Mutex (--lib mutex). Same options and the same one-line key=value output
// as bench_lock / bench_handoff, so the driver treats every contender alike.
//
//   node redlock_bench.js --lib 4|5|sesame|mutex --port P --mode loop|herd|handoff
//        [--procs N] [--threads T] [--distinct] [--work] [--seconds S]
//        [--retry-delay MS] [--timeout S] [--name NAME] [--dist PREFIX]
//
// A "thread" is an async worker; the workers of a process share one ioredis
// client and one Redlock instance, as the C workers of a process share one
// dlock client. Without --retry-delay the library runs with its defaults
// (the redlocks: 10 retries 200 +- 100 ms apart; the Mutex: an attempt every
// 10 ms for up to 10 s; when they run out the worker simply asks again, as
// an application would); with it the delay is that (the redlocks' jitter
// half of it) and the retries unlimited. Every lock has a 10 s lease. The
// Mutex refreshes its lease every 8 s, which no run here lasts long enough
// to see.
'use strict';
const { fork } = require('child_process');
const fs = require('fs');
const Redis = require('ioredis');

const opt = { procs: 1, threads: 1, seconds: 2, timeout: 120, name: 'bench:lock' };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i].replace(/^--/, '');
  if (a === 'distinct' || a === 'work') opt[a] = true;
  else opt[a.replace(/-(.)/g, (_, c) => c.toUpperCase())] = process.argv[++i];
}
['procs', 'threads', 'seconds', 'timeout', 'port', 'child'].forEach((k) => {
  if (opt[k] !== undefined) opt[k] = Number(opt[k]);
});
const LEASE = 10000;
const now = () => Number(process.hrtime.bigint()); // CLOCK_MONOTONIC, ns
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The lock library for one process: { redis, acquire(name, deadline) ->
// lock or null, release(lock) }.
function makeLock() {
  const redis = new Redis({ host: '127.0.0.1', port: opt.port });
  if (opt.lib === 'mutex') return makeMutex(redis);
  const tuned = opt.retryDelay !== undefined;
  const settings = tuned
    ? { retryDelay: Number(opt.retryDelay), retryJitter: Math.floor(opt.retryDelay / 2), retryCount: -1 }
    : {};
  const v4 = opt.lib === '4';
  let redlock;
  if (v4) redlock = new (require('redlock4'))([redis], settings);
  else if (opt.lib === '5') redlock = new (require('redlock5').default)([redis], settings);
  else redlock = new (require('@sesamecare-oss/redlock').Redlock)([redis], settings);
  // v5 and its successor report every refused attempt as an 'error' event;
  // v4 reports client errors. A taken lock is the normal case here;
  // anything else is fatal.
  redlock.on('error', (e) => {
    if (!/ResourceLocked|LockError|ExecutionError/.test(e.name)) throw e;
  });
  // Acquire, asking again when the library gives up (defaults: ~2 s), until
  // 'deadline' (ns). Returns the lock or null.
  async function acquire(name, deadline) {
    while (now() < deadline) {
      try {
        return v4 ? await redlock.lock(name, LEASE) : await redlock.acquire([name], LEASE);
      } catch (e) {
        if (!/LockError|ExecutionError/.test(e.name)) throw e;
      }
    }
    return null;
  }
  const release = (lock) => (v4 ? lock.unlock() : lock.release());
  return { redis, acquire, release };
}

// redis-semaphore's Mutex: one object per acquisition, as it keeps the
// holder's identifier. tryAcquire() keeps trying for acquireTimeout (10 s)
// and then returns false.
function makeMutex(redis) {
  const { Mutex } = require('redis-semaphore');
  const settings = { lockTimeout: LEASE };
  if (opt.retryDelay !== undefined) settings.retryInterval = Number(opt.retryDelay);
  async function acquire(name, deadline) {
    while (now() < deadline) {
      const m = new Mutex(redis, name, settings);
      if (await m.tryAcquire()) return m;
    }
    return null;
  }
  return { redis, acquire, release: (m) => m.release() };
}

// The critical section: a non-atomic read-modify-write of the counter.
async function critical(redis) {
  const v = Number(await redis.get('bench:counter'));
  await redis.set('bench:counter', v + 1);
}

// ---- worker processes -----------------------------------------------------
async function child() {
  const L = makeLock();
  const send = (m) => new Promise((r) => process.send(m, r));
  const go = new Promise((r) => process.once('message', r));
  await L.redis.ping();
  await send({ ready: true });
  const msg = await go;
  const start = now();
  const end = start + opt.seconds * 1e9;
  // acq: per worker, done within the window (the rate and fairness);
  // total: all, the last lock calls finishing after it (the counter check).
  const res = { acq: [], total: 0, pair: [], wait: [], done: 0, errors: 0 };
  if (opt.mode === 'handoff') return handoffSide(L, msg.first, send);
  const worker = async (i) => {
    const name = opt.distinct ? `${opt.name}:${opt.child}:${i}` : opt.name;
    let n = 0;
    if (opt.mode === 'herd') {
      await send({ waiting: true });
      const t = now();
      const lock = await L.acquire(name, t + opt.timeout * 1e9);
      if (!lock) return res.errors++, (res.acq[i] = 0);
      const got = now();
      await critical(L.redis);
      await L.release(lock);
      res.done = Math.max(res.done, now());
      res.wait.push(got - t);
      res.pair.push(res.done - t);
      res.total++;
      return (res.acq[i] = 1);
    }
    for (let t = now(); t < end; ) {
      const lock = await L.acquire(name, t + 30e9);
      if (!lock) return res.errors++, (res.acq[i] = n);
      const got = now();
      if (opt.work) await critical(L.redis);
      await L.release(lock);
      const done = now();
      res.wait.push(got - t);
      res.pair.push(done - t);
      res.total++;
      if (done <= end) n++;
      t = done;
    }
    res.acq[i] = n;
  };
  await Promise.all([...Array(opt.threads).keys()].map(worker));
  await send({ result: res });
  L.redis.disconnect();
  process.disconnect(); // nothing else keeps this process alive
}

// One side of the hand-off: the holder tells the other (through the parent)
// to wait, holds 5-15 ms, notes the time and releases; the waiter notes when
// its acquisition returns. Roles swap each time.
async function handoffSide(L, first, send) {
  const released = [], acquired = [];
  const end = now() + opt.seconds * 1e9;
  let lock = first ? await L.acquire(opt.name, end + 30e9) : null;
  let errors = 0;
  const inbox = [];
  let wake = null;
  process.on('message', (m) => (inbox.push(m), wake && wake()));
  const next = async () => {
    while (!inbox.length) await new Promise((r) => (wake = r));
    return inbox.shift();
  };
  for (;;) {
    if (lock) {
      const over = now() >= end;
      await send({ peer: over ? 'q' : 'w' });
      await sleep(5 + Math.random() * 10);
      released.push(now());
      await L.release(lock);
      lock = null;
      if (over) break;
    } else {
      if ((await next()).peer === 'q') break;
      lock = await L.acquire(opt.name, now() + 30e9);
      acquired.push(now());
      if (!lock) {
        errors++;
        await send({ peer: 'q' });
        break;
      }
    }
  }
  await send({ result: { released, acquired, errors } });
  L.redis.disconnect();
  process.disconnect();
}

// ---- the parent -----------------------------------------------------------
function quantile(sorted, q) {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.round((sorted.length - 1) * q))] / 1e3 : 0;
}
function writeDist(sorted, suffix) {
  if (!opt.dist || !sorted.length) return;
  let s = '';
  for (let i = 0; i <= 200; i++) s += `${(i / 200).toFixed(3)} ${quantile(sorted, i / 200).toFixed(1)}\n`;
  fs.writeFileSync(`${opt.dist}.${suffix}`, s);
}
// Commands the server ran, from INFO commandstats (INFO itself excluded):
// 'all' counts those run inside scripts too; 'wire' only those no script
// can run (EVAL*, SUBSCRIBE*, PING, ...), i.e. sent by a client.
const WIRE = /^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro|s?subscribe|s?unsubscribe|p(un)?subscribe|ping|auth|select|hello|quit|reset|client\|.*|script\|.*)$/;
async function cmdstats(redis) {
  const text = await redis.info('commandstats');
  const n = { all: 0, wire: 0 };
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (m[1] !== 'info') n.all += Number(m[2]);
    if (WIRE.test(m[1])) n.wire += Number(m[2]);
  }
  return n;
}

async function parent() {
  const redis = new Redis({ host: '127.0.0.1', port: opt.port });
  await redis.set('bench:counter', 0);
  const nprocs = opt.mode === 'handoff' ? 2 : opt.procs;
  const kids = [];
  const results = [];
  let ready = 0, waiting = 0;
  let onReady, onWaiting, onDone;
  const allReady = new Promise((r) => (onReady = r));
  const allWaiting = new Promise((r) => (onWaiting = r));
  const allDone = new Promise((r) => (onDone = r));
  for (let k = 0; k < nprocs; k++) {
    const args = process.argv.slice(2).concat(['--child', String(k)]);
    const kid = fork(__filename, args);
    kid.on('message', (m) => {
      if (m.ready && ++ready === nprocs) onReady();
      if (m.waiting && ++waiting === nprocs * opt.threads) onWaiting();
      if (m.peer) kids[1 - k].send(m); // hand-off: relay to the other side
      if (m.result) (results[k] = m.result), results.filter(Boolean).length === nprocs && onDone();
    });
    kid.on('exit', (code) => code && (process.exitCode = 1) && onDone());
    kids.push(kid);
  }
  // In a herd the parent holds the lock while the workers line up.
  const L = opt.mode === 'herd' ? makeLock() : null;
  const held = L ? await L.acquire(opt.name, now() + 30e9) : null;
  await allReady;
  let before = await cmdstats(redis);
  let t0 = now();
  kids.forEach((kid, k) => kid.send({ go: true, first: k === 0 }));
  if (L) {
    await allWaiting;
    await sleep(200); // the last ones make their first attempt and sleep
    before = await cmdstats(redis);
    t0 = now();
    await L.release(held);
  }
  await allDone;
  const after = await cmdstats(redis);
  const counter = Number(await redis.get('bench:counter'));
  redis.disconnect();
  if (L) L.redis.disconnect();
  const errors = results.reduce((s, r) => s + (r ? r.errors : 1), 0);
  if (opt.mode === 'handoff') {
    const h = [];
    for (let k = 0; k < 2; k++) {
      const from = results[k] || { released: [] }, to = results[1 - k] || { acquired: [] };
      from.released.forEach((t, i) => i < to.acquired.length && to.acquired[i] > t && h.push(to.acquired[i] - t));
    }
    h.sort((a, b) => a - b);
    writeDist(h, 'handoff');
    console.log(`handoffs=${h.length} p50=${quantile(h, 0.5).toFixed(1)} p99=${quantile(h, 0.99).toFixed(1)} errors=${errors}`);
    if (errors || !h.length) process.exitCode = 1;
    return;
  }
  const acqs = results.flatMap((r) => (r ? r.acq : []));
  const win = acqs.reduce((a, b) => a + b, 0);
  const acq = results.reduce((s, r) => s + (r ? r.total : 0), 0);
  const pair = results.flatMap((r) => (r ? r.pair : [])).sort((a, b) => a - b);
  const wait = results.flatMap((r) => (r ? r.wait : [])).sort((a, b) => a - b);
  writeDist(pair, 'pair');
  writeDist(wait, 'wait');
  const done = Math.max(...results.map((r) => (r ? r.done : 0)));
  const secs = opt.mode === 'herd' ? (done - t0) / 1e9 : opt.seconds;
  const checked = opt.work || opt.mode === 'herd';
  const ok = counter === acq;
  // What the clients sent: the script calls, plus GET and SET per hold.
  const cmds = after.wire - before.wire + (checked ? 2 * acq : 0);
  const all = after.all - before.all;
  console.log(
    `acq=${acq} win=${win} seconds=${secs.toFixed(3)} rate=${(win / secs).toFixed(1)} ` +
      `pair_p50=${quantile(pair, 0.5).toFixed(1)} pair_p99=${quantile(pair, 0.99).toFixed(1)} ` +
      `wait_p50=${quantile(wait, 0.5).toFixed(1)} wait_p99=${quantile(wait, 0.99).toFixed(1)} ` +
      `min=${Math.min(...acqs)} max=${Math.max(...acqs)} cmds=${cmds} cmds_all=${all} ` +
      `counter=${checked ? (ok ? 'ok' : 'bad') : '-'} errors=${errors}`
  );
  if (errors || (checked && !ok)) process.exitCode = 1;
}

(opt.child !== undefined ? child() : parent()).catch((e) => {
  console.error(`redlock_bench: ${e.stack || e}`);
  process.exit(1);
});
