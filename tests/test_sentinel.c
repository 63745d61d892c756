/*
 * Sentinel deployments: discovery, failover, replica sync.
 */
#include "harness/sentinel_group.h"
#include "lock_util.h"

static sg_group_t *group(void) {
  sg_group_t *g = NULL;
  int64_t t0 = lu_now_ms();
  ASSERT_EQ(sg_start(NULL, &g), 0);
  printf("group up in %" PRId64 " ms: %s\n", lu_now_ms() - t0, sg_url(g));
  return g;
}

static dlock_client_t *sentinel_client(sg_group_t *g, int sync) {
  dlock_options_t o;
  dlock_options_init(&o);
  o.url = sg_url(g);
  o.connect_timeout_ms = 1000;
  o.command_timeout_ms = 2000;
  o.watchdog_timeout_ms = 3000;
  o.replica_sync = sync;
  return lu_client_opts(&o);
}

TEST(sentinel_discovers_the_master) {
  sg_group_t *g = group();
  dlock_client_t *c = sentinel_client(g, 1);
  dlock_t *l = lu_get(c, "sent:a");
  ASSERT_DLOCK_OK(dlock_lock(l, DLOCK_WATCHDOG));
  /* On the master, and on both replicas by the time the call returned. */
  for (int i = 0; i < sg_nnodes(g); i++) {
    redisReply *r = rp_cmd(sg_node(g, i), "EXISTS sent:a");
    ASSERT_NOT_NULL(r);
    printf("node %d has the lock: %lld\n", i, r->integer);
    ASSERT_EQ(r->integer, 1);
    freeReplyObject(r);
  }
  ASSERT_DLOCK_OK(dlock_unlock(l));
  dlock_free(l);
  dlock_client_close(c);
  sg_free(g);
}
