/*
 * Sentinel deployments: discovery, failover, replica sync.
 */
#include "harness/sentinel_group.h"
#include "lock_util.h"

TEST(sentinel_group_fails_over) {
  sg_group_t *g = NULL;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(sg_start(NULL, &g), 0);
  printf("group up in %" PRId64 " ms: %s\n", lu_now_ms() - t0, sg_url(g));
  ASSERT_EQ(sg_master_index(g), 0);
  t0 = lu_now_ms();
  int m = sg_failover(g, 20000);
  printf("SENTINEL FAILOVER: node %d master after %" PRId64 " ms\n", m,
         lu_now_ms() - t0);
  ASSERT_GT(m, 0);
  ASSERT_EQ(sg_wait_replicas(g, 2, 20000), 0);
  t0 = lu_now_ms();
  ASSERT_EQ(rp_kill(sg_node(g, m)), 0);
  int m2 = sg_wait_new_master(g, m, 20000);
  printf("SIGKILL: node %d master after %" PRId64 " ms\n", m2,
         lu_now_ms() - t0);
  ASSERT_GE(m2, 0);
  ASSERT_NE(m2, m);
  sg_free(g);
}
