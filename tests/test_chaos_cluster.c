/*
 * Fault injection on a Redis Cluster (3 masters with a replica each, the
 * harness's cluster group), the short version: the workers of tests/chaos
 * reach it by a redis-cluster:// URL with replica sync on, and the nemesis
 * fails over the shard that serves the lock's slot, by CLUSTER FAILOVER on
 * its replica or by SIGKILL of its master (restarted afterwards, it rejoins
 * as a replica). The history must show no overlap and no fencing token
 * going back, and a first grant after every fault. "make chaos" runs the
 * same scenarios for longer (dlock_chaos cluster-failover cluster-kill).
 *
 * Starting a cluster takes seconds and each failover seconds more, so each
 * test is one run of 16-18 s. Under valgrind or ThreadSanitizer only the
 * safety promises are checked (chaos_slow_runtime()).
 */
#include "chaos.h"
#include "harness/test.h"

static int at_full_speed(void) { return !chaos_slow_runtime(); }

/* Runs 'scenario' for 'ms', prints its summary and fails the test on any
 * broken promise. */
static void run(const char *scenario, int64_t ms, chaos_result_t *r) {
  chaos_config_t c;
  ASSERT_EQ(chaos_config_init(&c, scenario), 0);
  ASSERT_EQ(c.cluster, 1);
  c.duration_ms = ms;
  ASSERT_EQ(chaos_run(&c, r), 0);
  chaos_print_summary(stdout, &c, r);
  fflush(stdout);
  char why[160];
  if (at_full_speed() ? !chaos_verdict(&c, r, why, sizeof(why))
                      : !chaos_safe(&c, r, why, sizeof(why)))
    TEST_FAIL("scenario %s broke a promise: %s", scenario, why);
  /* Safety with nothing to hold would prove nothing; the bound is low
   * because a loaded machine spends much of a short run on failovers. */
  ASSERT_GT(r->acquired, 10);
  ASSERT_EQ(r->token_regressions, 0);
}

/* CLUSTER FAILOVER of the lock's shard, again and again: holds and waits
 * go on across each switch, and the lock is granted again after each. */
TEST(cluster_failover_repeated) {
  chaos_result_t r;
  run("cluster-failover", 16000, &r);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_CLUSTER_FAILOVER], 2);
    /* Not every one need take: a replica that won its election can be
     * turned back by the old master's newer configuration (Redis's doing,
     * the nemesis then counts no failover). */
    ASSERT_GE(r.failovers, 1);
    /* A grant after the failovers (the last may end too near the end of
     * the run for one; the verdict holds the rest to 5 s after each). */
    ASSERT_GE(r.recovery[CHAOS_CLUSTER_FAILOVER].n, 1);
  }
}

/* SIGKILL of the master serving the lock's slot: its replica takes over
 * after the node timeout, holds survive through replica sync, and the
 * killed node comes back as the new master's replica. */
TEST(cluster_master_killed) {
  chaos_result_t r;
  run("cluster-kill", 18000, &r);
  if (at_full_speed()) {
    ASSERT_GE(r.faults[CHAOS_CLUSTER_KILL], 1);
    ASSERT_GE(r.failovers, 1);
    ASSERT_GE(r.recovery[CHAOS_CLUSTER_KILL].n, 1);
  }
}
