#!/usr/bin/env node
// A node-redisson client driven line by line from standard input, for
// tests/test_redisson_node.c. node-redisson ports Redisson's RLock to node
// and shares its Redis layout, so it is a real Redisson-compatible peer.
//
//   peer.js URL          connects to redis://host:port, or with ioredis's
//                        Cluster to the seed nodes of
//                        redis-cluster://host:port[,host:port...]
//                        (node-redisson's { redis: { clusters } } config)
//
// Commands (one per line; each lock name is one RLock object, so locking
// it twice is a reentrant acquisition):
//   lock NAME [LEASE_MS]        waits for the lock (watchdog without lease)
//   trylock NAME WAIT_MS [LEASE_MS]
//   unlock NAME
//   field NAME                  the lock's hash field "<client>:<id>"
//   quit
// Answers, one line each, with CLOCK_MONOTONIC in ms (the clock the C tests
// read) when the outcome was known:
//   ready | locked NAME T | trylock NAME true|false T |
//   unlocked NAME T0 T | field NAME F | error TEXT
// (T0: when the unlock was sent).
'use strict';

const readline = require('readline');
const { Redisson } = require('node-redisson');

function redisConfig(arg) {
  const scheme = 'redis-cluster://';
  if (arg.startsWith(scheme)) {
    const clusters = arg
      .slice(scheme.length)
      .split(',')
      .map((hp) => {
        const colon = hp.lastIndexOf(':');
        return { host: hp.slice(0, colon), port: Number(hp.slice(colon + 1)) };
      });
    return { clusters, options: {} };
  }
  const url = new URL(arg);
  return { options: { host: url.hostname, port: Number(url.port) } };
}

const redisson = new Redisson({ redis: redisConfig(process.argv[2]) });
const locks = new Map();

function getLock(name) {
  if (!locks.has(name)) locks.set(name, redisson.getLock(name));
  return locks.get(name);
}

// process.hrtime is CLOCK_MONOTONIC on Linux, like the tests' clock.
function nowMs() {
  return (Number(process.hrtime.bigint() / 1000n) / 1000).toFixed(3);
}

function say(line) {
  process.stdout.write(line + '\n');
}

async function run(words) {
  const [cmd, name] = words;
  const lease = (s) => (s === undefined ? true : Number(s));
  switch (cmd) {
    case 'lock':
      await getLock(name).lock(lease(words[2]));
      return `locked ${name} ${nowMs()}`;
    case 'trylock': {
      const got = await getLock(name).tryLock(Number(words[2]), lease(words[3]));
      return `trylock ${name} ${got} ${nowMs()}`;
    }
    case 'unlock': {
      const sent = nowMs();
      await getLock(name).unlock();
      return `unlocked ${name} ${sent} ${nowMs()}`;
    }
    case 'field':
      return `field ${name} ${getLock(name).getClientName(getLock(name).clientId)}`;
    case 'quit':
      await redisson.quit();
      process.exit(0);
      return null;
    default:
      return `error unknown command ${cmd}`;
  }
}

// One command at a time, in order: a waiting lock holds up the next.
let chain = Promise.resolve();
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const words = line.trim().split(/\s+/);
  chain = chain.then(() => run(words)).then(
    (out) => out && say(out),
    (err) => say(`error ${String(err && err.message).replace(/\n/g, ' ')}`),
  );
});
process.stdin.on('end', () => chain.then(() => redisson.quit()).then(() => process.exit(0)));
redisson.redis.ping().then(() => say('ready'), (err) => say(`error ${err.message}`));
