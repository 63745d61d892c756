#!/usr/bin/env node
// redis-semaphore's Semaphore (over ioredis) under the semaphore workloads
// of bench/run.sh. Same options and the same one-line key=value output as
// bench_sem, so the driver treats every contender alike.
//
//   node semaphore_bench.js --port P [--procs N] [--threads T] [--permits N]
//        [--work] [--seconds S] [--retry-delay MS] [--name NAME]
//        [--dist PREFIX]
//
// A "thread" is an async worker with a Semaphore object of its own (one
// holder each, as the library means them to be used); the workers of a
// process share one ioredis client, as the C workers of a process share
// one dlock client. Without --retry-delay the library runs with its
// defaults (10 s lease refreshed every 8 s, a new attempt every 10 ms, up
// to 10 s; when that runs out the worker simply asks again); with it the
// attempts are that many ms apart. With --work each hold INCRs a counter
// of holders on entry and DECRs it on exit: what INCR returns must never
// exceed --permits.
'use strict';
const { fork } = require('child_process');
const fs = require('fs');
const Redis = require('ioredis');
const { Semaphore } = require('redis-semaphore');

const opt = { procs: 1, threads: 1, seconds: 2, permits: 4, name: 'bench:sem' };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i].replace(/^--/, '');
  if (a === 'work') opt[a] = true;
  else opt[a.replace(/-(.)/g, (_, c) => c.toUpperCase())] = process.argv[++i];
}
['procs', 'threads', 'seconds', 'permits', 'port', 'child'].forEach((k) => {
  if (opt[k] !== undefined) opt[k] = Number(opt[k]);
});
const HOLDERS = 'bench:sem:holders';
const now = () => Number(process.hrtime.bigint()); // CLOCK_MONOTONIC, ns

// ---- worker processes -----------------------------------------------------
async function child() {
  const redis = new Redis({ host: '127.0.0.1', port: opt.port });
  const data = opt.work ? new Redis({ host: '127.0.0.1', port: opt.port }) : null;
  const settings = opt.retryDelay !== undefined ? { retryInterval: Number(opt.retryDelay) } : {};
  const send = (m) => new Promise((r) => process.send(m, r));
  const go = new Promise((r) => process.once('message', r));
  await redis.ping();
  await send({ ready: true });
  await go;
  const end = now() + opt.seconds * 1e9;
  const res = { acq: [], total: 0, pair: [], wait: [], errors: 0, maxHolders: 0 };
  const worker = async (i) => {
    const sem = new Semaphore(redis, opt.name, opt.permits, settings);
    let n = 0;
    for (let t = now(); t < end; ) {
      // Asks again when an attempt times out (after 10 s by default), up
      // to 30 s in all, as bench_sem waits.
      let got = false;
      while (!got && now() < t + 30e9) got = await sem.tryAcquire();
      if (!got) return res.errors++, (res.acq[i] = n);
      const held = now();
      if (opt.work) {
        const h = await data.incr(HOLDERS);
        if (h > res.maxHolders) res.maxHolders = h;
        await data.decr(HOLDERS);
      }
      await sem.release();
      const done = now();
      res.wait.push(held - t);
      res.pair.push(done - t);
      res.total++;
      if (done <= end) n++;
      t = done;
    }
    res.acq[i] = n;
  };
  await Promise.all([...Array(opt.threads).keys()].map(worker));
  await send({ result: res });
  redis.disconnect();
  if (data) data.disconnect();
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
// As in redlock_bench.js: 'all' every command, 'wire' those only a client
// can send.
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
  await redis.del(`semaphore:${opt.name}`, HOLDERS);
  const kids = [];
  const results = [];
  let ready = 0;
  let onReady, onDone;
  const allReady = new Promise((r) => (onReady = r));
  const allDone = new Promise((r) => (onDone = r));
  for (let k = 0; k < opt.procs; k++) {
    const kid = fork(__filename, process.argv.slice(2).concat(['--child', String(k)]));
    kid.on('message', (m) => {
      if (m.ready && ++ready === opt.procs) onReady();
      if (m.result) (results[k] = m.result), results.filter(Boolean).length === opt.procs && onDone();
    });
    kid.on('exit', (code) => code && (process.exitCode = 1) && onDone());
    kids.push(kid);
  }
  await allReady;
  const before = await cmdstats(redis);
  kids.forEach((kid) => kid.send({ go: true }));
  await allDone;
  const after = await cmdstats(redis);
  // Every permit must be back: none left taken.
  const left = await redis.zcard(`semaphore:${opt.name}`);
  redis.disconnect();
  const errors = results.reduce((s, r) => s + (r ? r.errors : 1), 0);
  const acqs = results.flatMap((r) => (r ? r.acq : []));
  const win = acqs.reduce((a, b) => a + b, 0);
  const acq = results.reduce((s, r) => s + (r ? r.total : 0), 0);
  const maxHolders = Math.max(0, ...results.map((r) => (r ? r.maxHolders : 0)));
  const pair = results.flatMap((r) => (r ? r.pair : [])).sort((a, b) => a - b);
  const wait = results.flatMap((r) => (r ? r.wait : [])).sort((a, b) => a - b);
  writeDist(pair, 'pair');
  writeDist(wait, 'wait');
  const ok = maxHolders <= opt.permits && left === 0;
  if (opt.work && !ok) console.error(`semaphore_bench: ${maxHolders} held at once of ${opt.permits}, ${left} left taken`);
  // What the clients sent: the script calls, the ZREM of each release (a
  // plain command, which a script could also run), and with --work the
  // INCR and DECR of each hold.
  const cmds = after.wire - before.wire + acq + (opt.work ? 2 * acq : 0);
  console.log(
    `acq=${acq} win=${win} seconds=${opt.seconds.toFixed(3)} rate=${(win / opt.seconds).toFixed(1)} ` +
      `pair_p50=${quantile(pair, 0.5).toFixed(1)} pair_p99=${quantile(pair, 0.99).toFixed(1)} ` +
      `wait_p50=${quantile(wait, 0.5).toFixed(1)} wait_p99=${quantile(wait, 0.99).toFixed(1)} ` +
      `min=${Math.min(...acqs)} max=${Math.max(...acqs)} cmds=${cmds} cmds_all=${after.all - before.all} ` +
      `counter=${opt.work ? (ok ? 'ok' : 'bad') : '-'} errors=${errors} max_holders=${maxHolders} permits=${opt.permits}`
  );
  if (errors || (opt.work && !ok)) process.exitCode = 1;
}

(opt.child !== undefined ? child() : parent()).catch((e) => {
  console.error(`semaphore_bench: ${e.stack || e}`);
  process.exit(1);
});
