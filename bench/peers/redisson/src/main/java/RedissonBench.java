// Redisson (the Java library dlock is wire-compatible with) under the
// workloads of bench/driver.py. Same options and the same one-line
// key=value output as bench_lock, bench_handoff, bench_sem and
// bench_watchdog, so the driver treats every contender alike.
//
//   java -cp CP RedissonBench --port P --mode loop|herd|handoff|sem|watchdog
//        [--procs N] [--threads T] [--distinct] [--work] [--fair]
//        [--seconds S] [--timeout S] [--permits N] [--locks N] [--rounds N]
//        [--watchdog-ms MS] [--warmup S] [--name NAME] [--dist PREFIX]
//
// Redisson runs with its defaults: a lock taken without a lease is kept by
// its watchdog (30 s, renewed every 10 s), waiters sleep until the unlock
// message on the lock's channel, and each worker thread is an owner of its
// own, as a Java application's threads are. The threads of a process
// share one RedissonClient, as the C workers of a process share one dlock
// client; --procs starts that many JVMs. Each JVM first runs a warm-up of
// --warmup seconds on names of its own (the same calls as the workload),
// so that the JIT has compiled them before anything is measured; the
// commands counted start after every process has warmed up.
//
// The watchdog mode watches Redisson's own renewal rounds, a third of the
// watchdog timeout apart (--watchdog-ms, by default Redisson's 30 000).

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

public final class RedissonBench {
  static final Map<String, String> opt = new HashMap<>();
  static int port, procs, threads, permits, locks, rounds;
  static double seconds, timeout, warmup;
  static String mode, name;
  static boolean distinct, work, fair;

  static final String COUNTER = "bench:counter";
  static final String HOLDERS = "bench:sem:holders";

  public static void main(String[] args) throws Exception {
    for (int i = 0; i < args.length; i++) {
      String a = args[i].replaceFirst("^--", "");
      if (a.equals("distinct") || a.equals("work") || a.equals("fair")) opt.put(a, "1");
      else opt.put(a, args[++i]);
    }
    port = Integer.parseInt(opt.getOrDefault("port", "6379"));
    mode = opt.getOrDefault("mode", "loop");
    procs = Integer.parseInt(opt.getOrDefault("procs", "1"));
    threads = Integer.parseInt(opt.getOrDefault("threads", "1"));
    permits = Integer.parseInt(opt.getOrDefault("permits", "4"));
    locks = Integer.parseInt(opt.getOrDefault("locks", "10000"));
    rounds = Integer.parseInt(opt.getOrDefault("rounds", "3"));
    seconds = Double.parseDouble(opt.getOrDefault("seconds", "2"));
    timeout = Double.parseDouble(opt.getOrDefault("timeout", "120"));
    warmup = Double.parseDouble(opt.getOrDefault("warmup", "2"));
    name = opt.getOrDefault("name", "bench:lock");
    distinct = opt.containsKey("distinct");
    work = opt.containsKey("work");
    fair = opt.containsKey("fair");
    int rc;
    if (opt.containsKey("child")) rc = child(Integer.parseInt(opt.get("child")));
    else if (mode.equals("handoff")) rc = handoff();
    else if (mode.equals("watchdog")) rc = watchdog();
    else rc = parent(args);
    System.out.flush();
    System.exit(rc);
  }

  static RedissonClient client(long watchdogMs) {
    Config c = new Config();
    c.useSingleServer().setAddress("redis://127.0.0.1:" + port);
    if (watchdogMs > 0) c.setLockWatchdogTimeout(watchdogMs);
    return Redisson.create(c);
  }

  static RLock lockOf(RedissonClient r, String n) {
    return fair ? r.getFairLock(n) : r.getLock(n);
  }

  // The critical section: a non-atomic read-modify-write of the counter.
  static void critical(RedissonClient r) {
    RBucket<String> b = r.getBucket(COUNTER, StringCodec.INSTANCE);
    String v = b.get();
    b.set(Long.toString((v == null ? 0 : Long.parseLong(v)) + 1));
  }

  // ---- the warm-up ------------------------------------------------------

  // The workload's own calls on names of this process, for 'warmup'
  // seconds, by up to 4 threads: the lock's take and release (reentrant or
  // fair, contended by the threads), the semaphore's, the counter's GET
  // and SET.
  static void warmUp(RedissonClient r, String tag) throws InterruptedException {
    long end = System.nanoTime() + (long) (warmup * 1e9);
    String wname = "bench:warmup:" + tag;
    RSemaphore sem = r.getSemaphore(wname + ":sem");
    if (mode.equals("sem")) sem.trySetPermits(2);
    int n = Math.min(4, Math.max(threads, 2));
    Thread[] ts = new Thread[n];
    for (int i = 0; i < n; i++) {
      ts[i] =
          new Thread(
              () -> {
                try {
                  while (System.nanoTime() < end) {
                    if (mode.equals("sem")) {
                      if (sem.tryAcquire(30, TimeUnit.SECONDS)) sem.release();
                    } else {
                      RLock l = lockOf(r, wname);
                      if (l.tryLock(30, TimeUnit.SECONDS)) l.unlock();
                    }
                    r.getBucket(wname + ":bucket", StringCodec.INSTANCE).get();
                  }
                } catch (InterruptedException e) {
                  Thread.currentThread().interrupt();
                }
              });
      ts[i].start();
    }
    for (Thread t : ts) t.join();
    r.getKeys().delete(wname, wname + ":sem", wname + ":bucket");
  }

  // ---- worker processes -------------------------------------------------

  static final class Result {
    final long[] acq;
    final List<Long> pair = new ArrayList<>(), wait = new ArrayList<>();
    long total, errors, done, maxHolders;

    Result(int n) {
      acq = new long[n];
    }
  }

  static int child(int k) throws Exception {
    RedissonClient r = client(0);
    warmUp(r, Integer.toString(k));
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    System.out.println("ready");
    System.out.flush();
    if (in.readLine() == null) return 1;
    Result res = new Result(threads);
    long start = System.nanoTime(), end = start + (long) (seconds * 1e9);
    CountDownLatch lined = new CountDownLatch(threads);
    Thread[] ts = new Thread[threads];
    for (int i = 0; i < threads; i++) {
      final int w = i;
      ts[i] =
          new Thread(
              () -> {
                try {
                  if (mode.equals("herd")) herdWorker(r, w, res, lined);
                  else if (mode.equals("sem")) semWorker(r, w, res, end);
                  else loopWorker(r, w, k, res, end);
                } catch (Exception e) {
                  synchronized (res) {
                    res.errors++;
                  }
                  System.err.println("redisson_bench: " + e);
                }
              });
      ts[i].start();
    }
    if (mode.equals("herd")) {
      lined.await();
      System.out.println("waiting");
      System.out.flush();
    }
    for (Thread t : ts) t.join();
    Path dir = Path.of(opt.get("tmp"));
    writeLongs(dir.resolve("pair." + k), res.pair);
    writeLongs(dir.resolve("wait." + k), res.wait);
    StringBuilder acq = new StringBuilder();
    for (long a : res.acq) acq.append(acq.length() > 0 ? "," : "").append(a);
    System.out.println(
        "result total="
            + res.total
            + " errors="
            + res.errors
            + " done="
            + res.done
            + " max_holders="
            + res.maxHolders
            + " acq="
            + acq);
    System.out.flush();
    r.shutdown();
    return 0;
  }

  // What a worker of the loop and semaphore workloads does: take, work
  // (the number returned is the holders seen, 0 when not counted), give
  // back.
  interface Hold {
    boolean take() throws InterruptedException;

    long work();

    void give();
  }

  // Takes and gives back 'h' until 'end', recording each acquisition.
  static void loop(Hold h, int i, Result res, long end) throws InterruptedException {
    long count = 0, total = 0, most = 0;
    List<Long> pair = new ArrayList<>(), wait = new ArrayList<>();
    for (long t = System.nanoTime(); t < end; ) {
      if (!h.take()) {
        synchronized (res) {
          res.errors++;
        }
        break;
      }
      long got = System.nanoTime();
      most = Math.max(most, h.work());
      h.give();
      long done = System.nanoTime();
      wait.add(got - t);
      pair.add(done - t);
      total++;
      if (done <= end) count++;
      t = done;
    }
    synchronized (res) {
      res.acq[i] = count;
      res.total += total;
      res.maxHolders = Math.max(res.maxHolders, most);
      res.pair.addAll(pair);
      res.wait.addAll(wait);
    }
  }

  static void loopWorker(RedissonClient r, int i, int k, Result res, long end)
      throws InterruptedException {
    RLock lock = lockOf(r, distinct ? name + ":" + k + ":" + i : name);
    loop(
        new Hold() {
          public boolean take() throws InterruptedException {
            return lock.tryLock(30, TimeUnit.SECONDS);
          }

          public long work() {
            if (work) critical(r);
            return 0;
          }

          public void give() {
            lock.unlock();
          }
        },
        i,
        res,
        end);
  }

  static void herdWorker(RedissonClient r, int i, Result res, CountDownLatch lined)
      throws InterruptedException {
    RLock lock = lockOf(r, name);
    lined.countDown();
    long t = System.nanoTime();
    if (!lock.tryLock((long) (timeout * 1000), TimeUnit.MILLISECONDS)) {
      synchronized (res) {
        res.errors++;
      }
      return;
    }
    long got = System.nanoTime();
    critical(r);
    lock.unlock();
    long done = System.nanoTime();
    synchronized (res) {
      res.acq[i] = 1;
      res.total++;
      res.done = Math.max(res.done, done);
      res.wait.add(got - t);
      res.pair.add(done - t);
    }
  }

  // One permit per acquisition; with --work each hold INCRs a counter of
  // holders on entry and DECRs it on exit, which must never exceed the
  // permits.
  static void semWorker(RedissonClient r, int i, Result res, long end)
      throws InterruptedException {
    RSemaphore sem = r.getSemaphore(name);
    org.redisson.api.RAtomicLong holders = r.getAtomicLong(HOLDERS);
    loop(
        new Hold() {
          public boolean take() throws InterruptedException {
            return sem.tryAcquire(30, TimeUnit.SECONDS);
          }

          public long work() {
            if (!work) return 0;
            long n = holders.incrementAndGet();
            holders.decrementAndGet();
            return n;
          }

          public void give() {
            sem.release();
          }
        },
        i,
        res,
        end);
  }

  static void writeLongs(Path p, List<Long> xs) throws IOException {
    StringBuilder sb = new StringBuilder();
    for (long x : xs) sb.append(x).append('\n');
    Files.writeString(p, sb.toString());
  }

  static long[] readLongs(Path p) throws IOException {
    if (!Files.exists(p)) return new long[0];
    return Files.readAllLines(p).stream()
        .filter(s -> !s.isEmpty())
        .mapToLong(Long::parseLong)
        .toArray();
  }

  // ---- the parent -------------------------------------------------------

  // Commands the server ran, from INFO commandstats (INFO itself excluded):
  // 'all' counts those run inside scripts too; 'wire' only those no script
  // can run (EVAL*, SUBSCRIBE*, PING, ...), i.e. sent by a client.
  static final Pattern WIRE =
      Pattern.compile(
          "^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro|s?subscribe|s?unsubscribe"
              + "|p(un)?subscribe|ping|auth|select|hello|quit|reset|client\\|.*|script\\|.*)$");
  static final Pattern CALLS = Pattern.compile("calls=(\\d+)");
  static long[] cmdstats(RedissonClient r) {
    Map<String, String> stats =
        r.getRedisNodes(org.redisson.api.redisnode.RedisNodes.SINGLE)
            .getInstance()
            .info(org.redisson.api.redisnode.RedisNode.InfoSection.COMMANDSTATS);
    long all = 0, wire = 0;
    for (Map.Entry<String, String> e : stats.entrySet()) {
      String cmd = e.getKey().replaceFirst("^cmdstat_", "");
      Matcher m = CALLS.matcher(e.getValue());
      if (!m.find()) continue;
      long n = Long.parseLong(m.group(1));
      if (!cmd.equals("info")) all += n;
      if (WIRE.matcher(cmd).matches()) wire += n;
    }
    return new long[] {all, wire};
  }

  static double quantile(long[] sorted, double q) {
    if (sorted.length == 0) return 0;
    int i = (int) Math.min(sorted.length - 1, Math.round((sorted.length - 1) * q));
    return sorted[i] / 1e3;
  }

  static void writeDist(long[] sorted, String suffix) throws IOException {
    String d = opt.get("dist");
    if (d == null || sorted.length == 0) return;
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i <= 200; i++)
      sb.append(String.format("%.3f %.1f%n", i / 200.0, quantile(sorted, i / 200.0)));
    Files.writeString(Path.of(d + "." + suffix), sb.toString());
  }

  static final class Kid {
    Process p;
    BufferedReader out;
    PrintWriter in;
    String result;
  }

  static int parent(String[] args) throws Exception {
    RedissonClient r = client(0);
    RBucket<String> counter = r.getBucket(COUNTER, StringCodec.INSTANCE);
    counter.set("0");
    if (mode.equals("sem")) {
      r.getKeys().delete(name, HOLDERS);
      r.getSemaphore(name).trySetPermits(permits);
    }
    Path tmp = Files.createTempDirectory("redisson-bench.");
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    List<Kid> kids = new ArrayList<>();
    for (int k = 0; k < procs; k++) {
      List<String> argv =
          new ArrayList<>(
              Arrays.asList(
                  java,
                  "-cp",
                  System.getProperty("java.class.path"),
                  "RedissonBench",
                  "--child",
                  Integer.toString(k),
                  "--tmp",
                  tmp.toString()));
      argv.addAll(Arrays.asList(args));
      Kid kid = new Kid();
      kid.p = new ProcessBuilder(argv).redirectError(ProcessBuilder.Redirect.INHERIT).start();
      kid.out =
          new BufferedReader(
              new InputStreamReader(kid.p.getInputStream(), StandardCharsets.UTF_8));
      kid.in = new PrintWriter(kid.p.getOutputStream(), true, StandardCharsets.UTF_8);
      kids.add(kid);
    }
    // In a herd the parent holds the lock while the workers line up.
    RLock held = mode.equals("herd") ? lockOf(r, name) : null;
    if (held != null && !held.tryLock(30, TimeUnit.SECONDS)) throw new IllegalStateException();
    for (Kid kid : kids) expect(kid, "ready");
    long[] before = cmdstats(r);
    long t0 = System.nanoTime();
    for (Kid kid : kids) kid.in.println("go");
    if (held != null) {
      for (Kid kid : kids) expect(kid, "waiting");
      Thread.sleep(200); // the last ones make their first attempt and wait
      before = cmdstats(r);
      t0 = System.nanoTime();
      held.unlock();
    }
    int failed = 0;
    for (Kid kid : kids) {
      String line;
      while ((line = kid.out.readLine()) != null && !line.startsWith("result ")) {}
      kid.result = line;
      if (kid.p.waitFor() != 0 || line == null) failed++;
    }
    long[] after = cmdstats(r);
    long count = Long.parseLong(counter.get());
    long acq = 0, errors = failed, done = 0, win = 0, maxHolders = 0;
    long mn = Long.MAX_VALUE, mx = 0;
    List<Long> pairs = new ArrayList<>(), waits = new ArrayList<>();
    for (int k = 0; k < kids.size(); k++) {
      String res = kids.get(k).result;
      if (res == null) continue;
      Map<String, String> f = new HashMap<>();
      for (String kv : res.substring(7).split(" ")) {
        int eq = kv.indexOf('=');
        f.put(kv.substring(0, eq), kv.substring(eq + 1));
      }
      acq += Long.parseLong(f.get("total"));
      errors += Long.parseLong(f.get("errors"));
      done = Math.max(done, Long.parseLong(f.get("done")));
      maxHolders = Math.max(maxHolders, Long.parseLong(f.get("max_holders")));
      for (String a : f.get("acq").split(",")) {
        long n = Long.parseLong(a);
        win += n;
        mn = Math.min(mn, n);
        mx = Math.max(mx, n);
      }
      for (long x : readLongs(tmp.resolve("pair." + k))) pairs.add(x);
      for (long x : readLongs(tmp.resolve("wait." + k))) waits.add(x);
    }
    for (File f : tmp.toFile().listFiles()) f.delete();
    tmp.toFile().delete();
    long[] pair = pairs.stream().mapToLong(Long::longValue).sorted().toArray();
    long[] wait = waits.stream().mapToLong(Long::longValue).sorted().toArray();
    writeDist(pair, "pair");
    writeDist(wait, "wait");
    double secs = mode.equals("herd") ? (done - t0) / 1e9 : seconds;
    boolean sem = mode.equals("sem");
    boolean checked = !sem && (work || mode.equals("herd"));
    boolean ok = sem ? (!work || maxHolders <= permits) : count == acq;
    // What the clients sent: the script calls, plus the plain commands of
    // each hold (GET and SET of the counter, or INCR and DECR of the
    // holders).
    long cmds = after[1] - before[1] + ((checked || (sem && work)) ? 2 * acq : 0);
    String line =
        String.format(
            "acq=%d win=%d seconds=%.3f rate=%.1f pair_p50=%.1f pair_p99=%.1f wait_p50=%.1f"
                + " wait_p99=%.1f min=%d max=%d cmds=%d cmds_all=%d counter=%s errors=%d",
            acq,
            win,
            secs,
            win / secs,
            quantile(pair, 0.5),
            quantile(pair, 0.99),
            quantile(wait, 0.5),
            quantile(wait, 0.99),
            mn == Long.MAX_VALUE ? 0 : mn,
            mx,
            cmds,
            after[0] - before[0],
            (checked || (sem && work)) ? (ok ? "ok" : "bad") : "-",
            errors);
    if (sem) line += " max_holders=" + maxHolders + " permits=" + permits;
    System.out.println(line);
    r.shutdown();
    return errors > 0 || ((checked || (sem && work)) && !ok) ? 1 : 0;
  }

  static void expect(Kid kid, String what) throws IOException {
    String line;
    while ((line = kid.out.readLine()) != null && !line.equals(what)) {}
    if (line == null) throw new IOException("a worker process ended before saying " + what);
  }

  // ---- the hand-off -------------------------------------------------------

  // Two clients in one JVM (two connections and two pub/sub connections to
  // the server, two owner ids, as two processes would have), a thread
  // each. The holder tells the other to wait, holds 5-15 ms, notes the time
  // and releases; the waiter notes when its acquisition returns. Roles swap
  // each time.
  static int handoff() throws Exception {
    RedissonClient[] c = {client(0), client(0)};
    Thread[] warm = new Thread[2];
    for (int i = 0; i < 2; i++) {
      final int k = i;
      warm[i] =
          new Thread(
              () -> {
                try {
                  warmUp(c[k], "h" + k);
                } catch (InterruptedException e) {
                  Thread.currentThread().interrupt();
                }
              });
      warm[i].start();
    }
    for (Thread t : warm) t.join();
    List<BlockingQueue<String>> inbox =
        List.of(new LinkedBlockingQueue<>(), new LinkedBlockingQueue<>());
    long[][] released = new long[2][], acquired = new long[2][];
    AtomicInteger errors = new AtomicInteger();
    long end = System.nanoTime() + (long) (seconds * 1e9);
    Thread[] ts = new Thread[2];
    for (int i = 0; i < 2; i++) {
      final int k = i;
      ts[i] =
          new Thread(
              () -> {
                List<Long> rel = new ArrayList<>(), got = new ArrayList<>();
                RLock lock = lockOf(c[k], name);
                try {
                  boolean holding = k == 0 && lock.tryLock(30, TimeUnit.SECONDS);
                  for (; ; ) {
                    if (holding) {
                      boolean over = System.nanoTime() >= end;
                      inbox.get(1 - k).put(over ? "q" : "w");
                      Thread.sleep(5 + ThreadLocalRandom.current().nextInt(11));
                      rel.add(System.nanoTime());
                      lock.unlock();
                      holding = false;
                      if (over) break;
                    } else {
                      if (inbox.get(k).take().equals("q")) break;
                      holding = lock.tryLock(30, TimeUnit.SECONDS);
                      got.add(System.nanoTime());
                      if (!holding) {
                        errors.incrementAndGet();
                        inbox.get(1 - k).put("q");
                        break;
                      }
                    }
                  }
                } catch (InterruptedException e) {
                  errors.incrementAndGet();
                }
                released[k] = rel.stream().mapToLong(Long::longValue).toArray();
                acquired[k] = got.stream().mapToLong(Long::longValue).toArray();
              });
      ts[i].start();
    }
    for (Thread t : ts) t.join();
    List<Long> h = new ArrayList<>();
    for (int k = 0; k < 2; k++) {
      long[] from = released[k], to = acquired[1 - k];
      for (int i = 0; i < from.length && i < to.length; i++)
        if (to[i] > from[i]) h.add(to[i] - from[i]);
    }
    long[] hs = h.stream().mapToLong(Long::longValue).sorted().toArray();
    writeDist(hs, "handoff");
    System.out.printf(
        "handoffs=%d p50=%.1f p99=%.1f errors=%d%n",
        hs.length, quantile(hs, 0.5), quantile(hs, 0.99), errors.get());
    c[0].shutdown();
    c[1].shutdown();
    return errors.get() > 0 || hs.length == 0 ? 1 : 0;
  }

  // ---- the watchdog -------------------------------------------------------

  // One client holds --locks watchdog locks, taken by 16 threads (each its
  // own names, as each is an owner). Redisson's renewals run on its own
  // timer and cannot be started from outside: the commands of a round are
  // counted over --rounds renewal periods (INFO commandstats), and how long
  // a round takes is read from the locks' remaining times to live, sampled
  // at several moments: the locks that one round renewed
  // differ by how far apart in the round they were renewed, so the
  // smallest spread seen (one script reads them all at one instant) is the
  // length of a round.
  static int watchdog() throws Exception {
    long wdMs = Long.parseLong(opt.getOrDefault("watchdog-ms", "30000"));
    RedissonClient r = client(opt.containsKey("watchdog-ms") ? wdMs : 0);
    warmUp(r, "wd");
    int nthreads = 16;
    CountDownLatch taken = new CountDownLatch(nthreads), release = new CountDownLatch(1);
    AtomicLong errors = new AtomicLong(), lost = new AtomicLong();
    long t0 = System.nanoTime();
    Thread[] ts = new Thread[nthreads];
    for (int i = 0; i < nthreads; i++) {
      final int w = i;
      ts[i] =
          new Thread(
              () -> {
                List<RLock> mine = new ArrayList<>();
                for (int j = w; j < locks; j += nthreads) {
                  RLock l = r.getLock("bench:wd:" + j);
                  try {
                    if (l.tryLock(30, TimeUnit.SECONDS)) mine.add(l);
                    else errors.incrementAndGet();
                  } catch (InterruptedException e) {
                    errors.incrementAndGet();
                  }
                }
                taken.countDown();
                try {
                  release.await();
                } catch (InterruptedException e) {
                  errors.incrementAndGet();
                }
                for (RLock l : mine) {
                  try {
                    l.unlock();
                  } catch (IllegalMonitorStateException e) {
                    lost.incrementAndGet();
                  }
                }
              });
      ts[i].start();
    }
    taken.await();
    double takeS = (System.nanoTime() - t0) / 1e9;
    long period = wdMs / 3;
    Thread.sleep(period + period / 2);
    long[] before = cmdstats(r);
    long w0 = System.nanoTime();
    List<Double> spans = new ArrayList<>();
    for (int k = 0; k < rounds; k++) {
      Thread.sleep(period / 2);
      // One script reads every lock's PTTL at one instant of the server.
      List<Object> mm =
          r.getScript(StringCodec.INSTANCE)
              .eval(
                  org.redisson.api.RScript.Mode.READ_ONLY,
                  "local lo, hi = math.huge, -math.huge "
                      + "for i = 0, tonumber(ARGV[1]) - 1 do "
                      + "local t = redis.call('PTTL', 'bench:wd:' .. i) "
                      + "if t < lo then lo = t end if t > hi then hi = t end end "
                      + "return {lo, hi}",
                  org.redisson.api.RScript.ReturnType.LIST,
                  List.of(),
                  Integer.toString(locks));
      long lo = ((Number) mm.get(0)).longValue(), hi = ((Number) mm.get(1)).longValue();
      spans.add((double) (hi - lo));
      long next = w0 + (k + 1) * period * 1_000_000L;
      long left = next - System.nanoTime();
      if (left > 0) Thread.sleep(left / 1_000_000L);
    }
    long[] after = cmdstats(r);
    double windowRounds = (System.nanoTime() - w0) / 1e6 / period;
    release.countDown();
    for (Thread t : ts) t.join();
    spans.sort(null);
    // The PTTL scripts are not renewals: their commands are taken out.
    long pttl = (long) locks * rounds;
    double cmds = (after[1] - before[1] - rounds) / windowRounds;
    double all = (after[0] - before[0] - pttl) / windowRounds;
    System.out.printf(
        "locks=%d rounds=%d round_p50=%.2f round_max=%.2f cmds=%.0f cmds_all=%.0f"
            + " renewed=%s take_s=%.2f period_ms=%d errors=%d%n",
        locks,
        rounds,
        spans.get(0),
        spans.get(spans.size() - 1),
        cmds,
        all,
        lost.get() == 0 ? "ok" : "bad",
        takeS,
        period,
        errors.get() + lost.get());
    r.shutdown();
    return errors.get() + lost.get() > 0 ? 1 : 0;
  }
}
