package dlock.peer;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.redisson.Redisson;
import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;
import org.redisson.config.Config;

/**
 * The Java buyers of the MoonCake sale in scripts/demo-interop.sh: THREADS
 * threads each buy one cake under Redisson's RLock "MoonCake", taken with
 * tryLock(5, SECONDS) as in the scenario this project started from, while
 * dlock's buyers (examples/stock) take the same lock from C.
 *
 * <pre>
 *   Buyers redis://host:port THREADS
 * </pre>
 *
 * It connects, prints "ready", and starts every thread at once when a line
 * (any) comes on standard input. Each buyer reads the stock
 * "MoonCakeStock", sells one if any is left by writing back the decremented
 * value (not atomic: the lock is what keeps two buyers from selling the
 * same cake), and counts its outcome with INCR on
 * "MoonCake:java:sold|refused|timedout|failed"; a sale also pushes the stock
 * it saw onto the list "MoonCake:java:at".
 */
public final class Buyers {
  private Buyers() {}

  public static void main(String[] args) throws Exception {
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    Config config = new Config();
    config.useSingleServer().setAddress(args[0]);
    int threads = Integer.parseInt(args[1]);
    RedissonClient redisson = Redisson.create(config);
    RBucket<String> stock = redisson.getBucket("MoonCakeStock", StringCodec.INSTANCE);
    stock.isExists();
    // One lock taken and given back before the sale, so that the buyers do
    // not pay for loading Redisson's classes and scripts, which the C
    // buyers do not have to.
    RLock warm = redisson.getLock("MoonCake:java:warm-up");
    if (warm.tryLock(5, TimeUnit.SECONDS)) {
      warm.unlock();
    }
    redisson.getAtomicLong("MoonCake:java:warm-up").delete();
    System.out.println("ready");
    System.out.flush();
    new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();

    CountDownLatch go = new CountDownLatch(1);
    List<Thread> buyers = new ArrayList<>();
    for (int i = 0; i < threads; i++) {
      Thread t = new Thread(() -> {
        String outcome = "failed";
        try {
          go.await();
          RLock lock = redisson.getLock("MoonCake");
          if (lock.tryLock(5, TimeUnit.SECONDS)) {
            try {
              String v = stock.get();
              long left = v == null ? 0 : Long.parseLong(v);
              if (left > 0) {
                // The work between reading and writing, as the C buyers do.
                Thread.sleep(1);
                stock.set(String.valueOf(left - 1));
                // Which sale this was (the 1st at 90 left, the 90th at 1),
                // so that the demo can show how the languages took turns.
                redisson.<String>getList("MoonCake:java:at", StringCodec.INSTANCE)
                    .add(String.valueOf(left));
                outcome = "sold";
              } else {
                outcome = "refused";
              }
            } finally {
              lock.unlock();
            }
          } else {
            outcome = "timedout";
          }
        } catch (Exception e) {
          System.err.println("buyer: " + e);
        }
        redisson.getAtomicLong("MoonCake:java:" + outcome).incrementAndGet();
      });
      t.start();
      buyers.add(t);
    }
    go.countDown();
    for (Thread t : buyers) {
      t.join();
    }
    redisson.shutdown(0, 2, TimeUnit.SECONDS);
    System.exit(0);
  }
}
