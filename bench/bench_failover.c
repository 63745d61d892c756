/*
 * bench_failover: how long a dlock client on a redis-sentinel:// URL takes
 * to acquire a lock again after its master dies.
 *
 * The program opens a client, takes and gives back a lock a few times (so
 * that it is connected to the master and knows it), takes a second lock
 * that its watchdog holds, prints "ready" and waits for a line on stdin
 * holding the CLOCK_MONOTONIC time in ns at which the driver killed the
 * master. It then calls dlock_trylock with a --wait ms wait at once, which
 * rides the outage, and reports when it returned. Last it releases the lock
 * held across the failover: that tells whether the failover kept it.
 *
 * Output, one line of key=value pairs for the driver:
 *   recovery_ms (from the kill to the trylock returning with the lock)
 *   call_ms (from the trylock call to its return) held_kept (1: the lock
 *   held across the failover was still ours, 0: DLOCK_ELOST) errors
 * The exit status is non-zero when the acquisition failed.
 */
#include "common.h"

#include <dlock.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void) {
  fprintf(stderr, "usage: bench_failover --url redis-sentinel://... "
                  "[--name NAME] [--wait MS] [--no-sync]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *url = NULL, *name = "bench:failover";
  int64_t wait_ms = 30000;
  int no_sync = 0, rc;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--no-sync") == 0)
      no_sync = 1;
    else if (v == NULL)
      usage();
    else if (strcmp(a, "--url") == 0)
      url = v, i++;
    else if (strcmp(a, "--name") == 0)
      name = v, i++;
    else if (strcmp(a, "--wait") == 0)
      wait_ms = atoll(v), i++;
    else
      usage();
  }
  if (url == NULL || wait_ms <= 0)
    usage();

  dlock_options_t o;
  dlock_client_t *client;
  dlock_t *lock, *held;
  char held_name[512];
  dlock_options_init(&o);
  o.url = url;
  o.replica_sync = !no_sync;
  if ((rc = dlock_client_open(&o, &client)) < 0)
    bench_die("client_open", rc);
  snprintf(held_name, sizeof held_name, "%s:held", name);
  if ((rc = dlock_get(client, name, &lock)) < 0 ||
      (rc = dlock_get(client, held_name, &held)) < 0)
    bench_die("get", rc);
  for (int i = 0; i < 5; i++) {
    if ((rc = dlock_trylock(lock, 5000, DLOCK_WATCHDOG)) < 0)
      bench_die("trylock before the failover", rc);
    if ((rc = dlock_unlock(lock)) < 0)
      bench_die("unlock before the failover", rc);
  }
  if ((rc = dlock_trylock(held, 5000, DLOCK_WATCHDOG)) < 0)
    bench_die("trylock of the held lock", rc);

  printf("ready\n");
  fflush(stdout);
  char line[64];
  if (fgets(line, sizeof line, stdin) == NULL)
    bench_fail("no kill time on stdin");
  uint64_t killed = strtoull(line, NULL, 10);

  uint64_t t0 = bench_now_ns();
  rc = dlock_trylock(lock, wait_ms, DLOCK_WATCHDOG);
  uint64_t t1 = bench_now_ns();
  int errors = 0;
  if (rc != 0) {
    fprintf(stderr,
            "bench_failover: trylock after the kill: %s (%s) after %.0f ms\n",
            dlock_strerror(rc), dlock_last_error(), (double)(t1 - t0) / 1e6);
    errors++;
  } else if ((rc = dlock_unlock(lock)) < 0) {
    fprintf(stderr, "bench_failover: unlock after the failover: %s (%s)\n",
            dlock_strerror(rc), dlock_last_error());
    errors++;
  }
  rc = dlock_unlock(held);
  int kept = rc == 0;
  if (rc < 0 && rc != DLOCK_ELOST) {
    fprintf(stderr, "bench_failover: unlock of the held lock: %s (%s)\n",
            dlock_strerror(rc), dlock_last_error());
    errors++;
  }
  dlock_free(lock);
  dlock_free(held);
  dlock_client_close(client);
  printf("recovery_ms=%.1f call_ms=%.1f held_kept=%d errors=%d\n",
         (double)(int64_t)(t1 - killed) / 1e6, (double)(t1 - t0) / 1e6, kept,
         errors);
  return errors ? 1 : 0;
}
