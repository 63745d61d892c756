package dlock.peer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.redisson.Redisson;
import org.redisson.api.RCountDownLatch;
import org.redisson.api.LockOptions;
import org.redisson.api.RFencedLock;
import org.redisson.api.RLock;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * Redisson driven line by line from standard input, for the C tests in
 * tests/test_redisson_jvm.c and for scripts/demo-interop.sh.
 *
 * <pre>
 *   Peer URL [WATCHDOG_MS]
 *     URL: redis://host:port                     one server
 *          sentinel://host:port,host:port/MASTER Sentinel, with
 *                                                checkLockSyncedSlaves
 *          cluster://host:port,host:port         a cluster (sharded
 *                                                pub/sub where it has it)
 *          masterslave://host:port/host:port,... a master and its
 *                                                replicas, with
 *                                                checkLockSyncedSlaves
 * </pre>
 *
 * Every command line is "TAG ACTOR OP ARGS...". Redisson's locks belong to
 * threads, so each ACTOR is a thread of its own that runs its commands in
 * order (a waiting lock holds up that actor only); a reply is one line
 * "TAG WORDS... T", T being when it was known on CLOCK_MONOTONIC in ms (the
 * clock the C tests read), or "TAG error TEXT T". The peer prints "ready"
 * once connected. KIND is lock, fair, spin, spinconst (getSpinLock with
 * LockOptions.ConstantBackOff), read, write, fenced, nr
 * (getNonReentrantLock) or nrfair (getNonReentrantFairLock).
 *
 * <pre>
 *   lock KIND NAME [LEASE_MS]        locked [TOKEN]
 *   trylock KIND NAME WAIT_MS [LEASE_MS]   true [TOKEN] | false
 *   unlock KIND NAME                 unlocked SENT_T
 *   force KIND NAME                  forced true|false
 *   count KIND NAME                  count N      (this actor's holds)
 *   locked KIND NAME                 locked true|false
 *   field KIND NAME                  field F      (this actor's hash field)
 *   hget NAME FIELD                  hget VALUE|nil (a lock hash's field)
 *   token NAME                       token N      (fenced lock's last)
 *   mlock NAMES [LEASE_MS]           locked       (MultiLock of RLocks,
 *   mtrylock NAMES WAIT_MS           true|false    NAMES comma-separated)
 *   munlock NAMES                    unlocked SENT_T
 *   sem_set NAME N | sem_acquire NAME N | sem_try NAME N WAIT_MS |
 *   sem_release NAME N | sem_avail NAME
 *   psem_set NAME N | psem_acquire NAME LEASE_MS | psem_try NAME WAIT LEASE
 *   | psem_release NAME ID | psem_avail NAME
 *   latch_set NAME N | latch_down NAME | latch_await NAME WAIT_MS |
 *   latch_count NAME
 *   incr KEY                         value N  (a plain counter, INCR-like,
 *                                    read and written as two commands)
 *   rounds KIND NAME KEY N           done     (N times under the lock: incr
 *                                    KEY, and push "J" on KEY:order)
 *   restart                          drops the Redisson client without
 *                                    unlocking (its watchdog stops, as in
 *                                    a crash) and connects a new one
 *   quit
 * </pre>
 */
public final class Peer {
  private static final PrintStream OUT =
      new PrintStream(System.out, true, StandardCharsets.UTF_8);
  private static final Map<String, BlockingQueue<String[]>> ACTORS =
      new ConcurrentHashMap<>();
  private static volatile RedissonClient redisson;
  private static String url;
  private static long watchdogMs;

  private Peer() {}

  static String now() {
    return String.format("%.3f", System.nanoTime() / 1e6);
  }

  static synchronized void say(String line) {
    OUT.println(line);
  }

  static RedissonClient connect() {
    Config config = new Config();
    if (watchdogMs > 0) {
      config.setLockWatchdogTimeout(watchdogMs);
    }
    if (url.startsWith("redis://")) {
      config.useSingleServer().setAddress(url);
    } else if (url.startsWith("sentinel://")) {
      String rest = url.substring("sentinel://".length());
      int slash = rest.indexOf('/');
      var sentinel = config.useSentinelServers().setMasterName(rest.substring(slash + 1));
      for (String hp : rest.substring(0, slash).split(",")) {
        sentinel.addSentinelAddress("redis://" + hp);
      }
      // The harness's sentinels know each other by loopback addresses.
      sentinel.setCheckSentinelsList(false);
      config.setCheckLockSyncedSlaves(true);
    } else if (url.startsWith("masterslave://")) {
      // A master and its replicas named outright: not a single-server
      // config, so Redisson syncs lock writes with its replicas.
      String[] parts = url.substring("masterslave://".length()).split("/");
      var ms = config.useMasterSlaveServers().setMasterAddress("redis://" + parts[0]);
      for (String hp : parts[1].split(",")) {
        ms.addSlaveAddress("redis://" + hp);
      }
      // Redisson retries an acquisition that no replica acknowledged
      // retryAttempts times (4 by default, each given back first, about
      // 17 s in all): once is enough for the tests.
      ms.setRetryAttempts(0);
      config.setCheckLockSyncedSlaves(true);
    } else if (url.startsWith("cluster://")) {
      var cluster = config.useClusterServers();
      for (String hp : url.substring("cluster://".length()).split(",")) {
        cluster.addNodeAddress("redis://" + hp);
      }
    } else {
      throw new IllegalArgumentException("unknown URL " + url);
    }
    return Redisson.create(config);
  }

  static RLock lock(String kind, String name) {
    RedissonClient r = redisson;
    switch (kind) {
      case "lock":
        return r.getLock(name);
      case "fair":
        return r.getFairLock(name);
      case "spin":
        return r.getSpinLock(name);
      case "spinconst":
        return r.getSpinLock(name, new LockOptions.ConstantBackOff());
      case "read":
        return r.getReadWriteLock(name).readLock();
      case "write":
        return r.getReadWriteLock(name).writeLock();
      case "fenced":
        return r.getFencedLock(name);
      case "nr":
        return r.getNonReentrantLock(name);
      case "nrfair":
        return r.getNonReentrantFairLock(name);
      default:
        throw new IllegalArgumentException("unknown kind " + kind);
    }
  }

  static RLock multi(String names) {
    List<RLock> locks = new ArrayList<>();
    for (String n : names.split(",")) {
      locks.add(redisson.getLock(n));
    }
    return redisson.getMultiLock(locks.toArray(new RLock[0]));
  }

  static long num(String s) {
    return Long.parseLong(s);
  }

  /** Runs one command on the calling actor thread; returns the reply words. */
  static String run(String[] w) throws Exception {
    String op = w[0];
    RedissonClient r = redisson;
    switch (op) {
      case "lock": {
        RLock l = lock(w[1], w[2]);
        if (l instanceof RFencedLock) {
          RFencedLock f = (RFencedLock) l;
          Long t = w.length > 3 ? f.lockAndGetToken(num(w[3]), TimeUnit.MILLISECONDS)
              : f.lockAndGetToken();
          return "locked " + t;
        }
        if (w.length > 3) {
          l.lock(num(w[3]), TimeUnit.MILLISECONDS);
        } else {
          l.lock();
        }
        return "locked";
      }
      case "trylock": {
        RLock l = lock(w[1], w[2]);
        long lease = w.length > 4 ? num(w[4]) : -1;
        if (l instanceof RFencedLock) {
          Long t = ((RFencedLock) l).tryLockAndGetToken(num(w[3]), lease, TimeUnit.MILLISECONDS);
          return t == null ? "false" : "true " + t;
        }
        return String.valueOf(l.tryLock(num(w[3]), lease, TimeUnit.MILLISECONDS));
      }
      case "unlock": {
        String sent = now();
        lock(w[1], w[2]).unlock();
        return "unlocked " + sent;
      }
      case "force":
        return "forced " + lock(w[1], w[2]).forceUnlock();
      case "count":
        return "count " + lock(w[1], w[2]).getHoldCount();
      case "locked":
        return "locked " + lock(w[1], w[2]).isLocked();
      case "field": {
        String f = r.getId() + ":" + Thread.currentThread().getId();
        return "field " + (w[1].equals("write") ? f + ":write" : f);
      }
      case "hget": {
        Object v = r.<String, String>getMap(w[1], StringCodec.INSTANCE).get(w[2]);
        return "hget " + (v == null ? "nil" : v);
      }
      case "token":
        return "token " + r.getFencedLock(w[1]).getToken();
      case "mlock": {
        RLock m = multi(w[1]);
        if (w.length > 2) {
          m.lock(num(w[2]), TimeUnit.MILLISECONDS);
        } else {
          m.lock();
        }
        return "locked";
      }
      case "mtrylock":
        return String.valueOf(multi(w[1]).tryLock(num(w[2]), -1, TimeUnit.MILLISECONDS));
      case "munlock": {
        String sent = now();
        multi(w[1]).unlock();
        return "unlocked " + sent;
      }
      case "sem_set":
        return "set " + r.getSemaphore(w[1]).trySetPermits((int) num(w[2]));
      case "sem_acquire":
        r.getSemaphore(w[1]).acquire((int) num(w[2]));
        return "acquired";
      case "sem_try": {
        RSemaphore s = r.getSemaphore(w[1]);
        return String.valueOf(
            s.tryAcquire((int) num(w[2]), num(w[3]), TimeUnit.MILLISECONDS));
      }
      case "sem_release": {
        String sent = now();
        r.getSemaphore(w[1]).release((int) num(w[2]));
        return "released " + sent;
      }
      case "sem_avail":
        return "avail " + r.getSemaphore(w[1]).availablePermits();
      case "psem_set":
        return "set " + r.getPermitExpirableSemaphore(w[1]).trySetPermits((int) num(w[2]));
      case "psem_acquire":
        return "permit " + r.getPermitExpirableSemaphore(w[1])
            .acquire(num(w[2]), TimeUnit.MILLISECONDS);
      case "psem_try": {
        RPermitExpirableSemaphore s = r.getPermitExpirableSemaphore(w[1]);
        String id = s.tryAcquire(num(w[2]), num(w[3]), TimeUnit.MILLISECONDS);
        return id == null ? "false" : "permit " + id;
      }
      case "psem_release": {
        String sent = now();
        r.getPermitExpirableSemaphore(w[1]).release(w[2]);
        return "released " + sent;
      }
      case "psem_avail":
        return "avail " + r.getPermitExpirableSemaphore(w[1]).availablePermits();
      case "latch_set":
        return "set " + r.getCountDownLatch(w[1]).trySetCount(num(w[2]));
      case "latch_down": {
        String sent = now();
        r.getCountDownLatch(w[1]).countDown();
        return "down " + sent;
      }
      case "latch_await": {
        RCountDownLatch l = r.getCountDownLatch(w[1]);
        return String.valueOf(l.await(num(w[2]), TimeUnit.MILLISECONDS));
      }
      case "latch_count":
        return "count " + r.getCountDownLatch(w[1]).getCount();
      case "incr": {
        var b = r.<String>getBucket(w[1], StringCodec.INSTANCE);
        String v = b.get();
        long n = (v == null ? 0 : Long.parseLong(v)) + 1;
        b.set(String.valueOf(n));
        return "value " + n;
      }
      case "rounds": {
        // N times: take the lock, add one to KEY by a read and a write (a
        // lost update if the lock let two in), note "J" on KEY:order.
        RLock l = lock(w[1], w[2]);
        var counter = r.<String>getBucket(w[3], StringCodec.INSTANCE);
        var order = r.<String>getList(w[3] + ":order", StringCodec.INSTANCE);
        for (long i = num(w[4]); i > 0; i--) {
          l.lock();
          try {
            String v = counter.get();
            counter.set(String.valueOf((v == null ? 0 : Long.parseLong(v)) + 1));
            order.add("J");
          } finally {
            l.unlock();
          }
        }
        return "done";
      }
      case "restart": {
        RedissonClient old = redisson;
        redisson = connect();
        old.shutdown(0, 2, TimeUnit.SECONDS);
        return "restarted";
      }
      default:
        throw new IllegalArgumentException("unknown command " + op);
    }
  }

  static void actor(BlockingQueue<String[]> q) {
    for (;;) {
      String[] c;
      try {
        c = q.take();
      } catch (InterruptedException e) {
        return;
      }
      String tag = c[0];
      String[] w = java.util.Arrays.copyOfRange(c, 2, c.length);
      String out;
      try {
        out = run(w);
      } catch (Throwable e) {
        // The exception and its causes: Redisson wraps the one that says
        // why (NoSyncedSlavesException, ...) in a RedisException.
        StringBuilder b = new StringBuilder("error ").append(e);
        for (Throwable x = e.getCause(); x != null && x != x.getCause(); x = x.getCause()) {
          b.append(" <- ").append(x);
        }
        out = b.toString().replace('\n', ' ');
      }
      say(tag + " " + out + " " + now());
    }
  }

  public static void main(String[] args) throws Exception {
    // Redisson's warnings and errors only, on stderr.
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    url = args[0];
    watchdogMs = args.length > 1 ? Long.parseLong(args[1]) : 0;
    redisson = connect();
    // One round trip, so that "ready" means connected.
    redisson.getBucket("dlock-peer-ping", StringCodec.INSTANCE).isExists();
    say("ready " + redisson.getId());
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      String[] c = line.trim().split("\\s+");
      if (c.length >= 1 && c[0].equals("quit")) {
        break;
      }
      if (c.length < 3) {
        say("? error bad line: " + line + " " + now());
        continue;
      }
      ACTORS.computeIfAbsent(c[1], a -> {
        BlockingQueue<String[]> q = new LinkedBlockingQueue<>();
        Thread t = new Thread(() -> actor(q), "actor-" + a);
        t.setDaemon(true);
        t.start();
        return q;
      }).add(c);
    }
    redisson.shutdown(0, 2, TimeUnit.SECONDS);
    System.exit(0);
  }
}
