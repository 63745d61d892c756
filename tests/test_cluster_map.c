/*
 * The cluster's slot map (src/topo/cluster.c) as the nodes' replies shape
 * it, with scripted fake nodes (harness/fake_server.h) that answer CLUSTER
 * SHARDS and CLUSTER SLOTS the way a given server version does. What a
 * real cluster says after a failover depends on the server's version, and
 * the version on the machine is one: these replies keep each shape that
 * was seen tested whatever server runs the rest of the suite.
 */
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "harness/fake_server.h"
#include "lock_util.h"
#include "monotime.h"
#include "url.h"

/* One node of a CLUSTER SHARDS reply (RESP2: a flat array of pairs). */
static size_t shard_node(char *buf, size_t n, const char *id, int port,
                         const char *role, const char *health) {
  return (size_t)snprintf(buf, n,
                          "*10\r\n$2\r\nid\r\n$%zu\r\n%s\r\n"
                          "$4\r\nport\r\n:%d\r\n"
                          "$2\r\nip\r\n$9\r\n127.0.0.1\r\n"
                          "$4\r\nrole\r\n$%zu\r\n%s\r\n"
                          "$6\r\nhealth\r\n$%zu\r\n%s\r\n",
                          strlen(id), id, port, strlen(role), role,
                          strlen(health), health);
}

/*
 * A CLUSTER SHARDS reply of two shards: the first with slots 0-5460 (or
 * none when 'first_slots' is 0) and nodes 'x' and 'b' as given, the second
 * with 5461-16383 and the master 'a'.
 */
static void shards_reply(char *buf, size_t n, int first_slots, int x_port,
                         const char *x_role, const char *x_health, int b_port,
                         const char *b_role, int a_port) {
  char nx[512], nb[512], na[512];
  shard_node(nx, sizeof(nx), "x", x_port, x_role, x_health);
  shard_node(nb, sizeof(nb), "b", b_port, b_role, "online");
  shard_node(na, sizeof(na), "a", a_port, "master", "online");
  snprintf(buf, n,
           "*2\r\n"
           "*4\r\n$5\r\nslots\r\n%s$5\r\nnodes\r\n*2\r\n%s%s"
           "*4\r\n$5\r\nslots\r\n*2\r\n:5461\r\n:16383\r\n"
           "$5\r\nnodes\r\n*1\r\n%s",
           first_slots ? "*2\r\n:0\r\n:5460\r\n" : "*0\r\n", nx, nb, na);
}

/* A CLUSTER SLOTS reply: slots 0-5460 served by 'first', the rest by 'a'. */
static void slots_reply(char *buf, size_t n, int first, int a) {
  snprintf(buf, n,
           "*2\r\n"
           "*3\r\n:0\r\n:5460\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n"
           "*3\r\n:5461\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:%d\r\n",
           first, a);
}

/* A cluster whose only seed is the node on 'port', its map read once. */
static dlock__cluster *open_cluster(int port) {
  char url[128];
  snprintf(url, sizeof(url), "redis-cluster://127.0.0.1:%d", port);
  dlock__cluster_url u;
  ASSERT_DLOCK_OK(dlock__url_parse_cluster(url, &u));
  dlock__cluster *cl = NULL;
  ASSERT_DLOCK_OK(dlock__cluster_new(&u, NULL, 5000, 5000, &cl));
  ASSERT_DLOCK_OK(dlock__cluster_refresh(cl, 0));
  return cl;
}

static int owner_port(dlock__cluster *cl, int slot) {
  int rc = 0;
  int idx = dlock__cluster_owner(cl, slot, &rc);
  ASSERT_DLOCK_OK(rc);
  ASSERT_GE(idx, 0);
  return dlock__cluster_node_ep(cl, idx)->port;
}

/*
 * Redis 7.2 to 7.4 take a shard's slots in CLUSTER SHARDS from the first
 * node listed in it. After a failover that is often the dead master, which
 * owns nothing any more: the promoted replica's shard then comes with no
 * slots. The map must still move the slots to the new master (CLUSTER
 * SLOTS has them right), or every call keeps going to the dead one. A
 * healthy map is read with CLUSTER SHARDS alone.
 */
TEST(cluster_map_after_failover_with_slotless_shard) {
  fs_server_t *a = fs_start(), *b = fs_start(), *gone = fs_start();
  int pa = fs_port(a), pb = fs_port(b), px = fs_port(gone);
  fs_free(gone); /* the old master: nothing listens there any more */

  char shards[4096];
  shards_reply(shards, sizeof(shards), 1, px, "master", "online", pb, "replica",
               pa);
  fs_set(a, "CLUSTER SHARDS", &(fs_action_t){.reply = shards});

  dlock__cluster *cl = open_cluster(pa);
  ASSERT_EQ(owner_port(cl, 0), px);
  ASSERT_EQ(owner_port(cl, 5460), px);
  ASSERT_EQ(owner_port(cl, 5461), pa);
  ASSERT_EQ(fs_count(a, "CLUSTER SLOTS"), 0);

  /* The failover as Redis 7.4 reports it: the dead master first, with no
   * slots, and the promoted one a master of the same shard. */
  shards_reply(shards, sizeof(shards), 0, px, "master", "fail", pb, "master",
               pa);
  char slots[512];
  slots_reply(slots, sizeof(slots), pb, pa);
  fs_set(a, "CLUSTER SHARDS", &(fs_action_t){.reply = shards});
  fs_set(a, "CLUSTER SLOTS", &(fs_action_t){.reply = slots});
  ASSERT_DLOCK_OK(dlock__cluster_refresh(cl, 0));
  ASSERT_EQ(owner_port(cl, 0), pb);
  ASSERT_EQ(owner_port(cl, 5460), pb);
  ASSERT_EQ(owner_port(cl, 16383), pa);
  ASSERT_EQ(fs_count(a, "CLUSTER SLOTS"), 1);

  dlock__cluster_free(cl);
  fs_free(a);
  fs_free(b);
}

/*
 * A master that failed and has no successor yet: its shard lists it as
 * failed and no other master. Its slots keep it as their owner (CLUSTER
 * SLOTS still names it), so that a call goes there and fails like a call to
 * a server that is down, and the map is read again after it.
 */
TEST(cluster_map_keeps_a_failed_master_until_replaced) {
  fs_server_t *a = fs_start(), *b = fs_start(), *gone = fs_start();
  int pa = fs_port(a), pb = fs_port(b), px = fs_port(gone);
  fs_free(gone);

  char shards[4096];
  shards_reply(shards, sizeof(shards), 1, px, "master", "fail", pb, "replica",
               pa);
  char slots[512];
  slots_reply(slots, sizeof(slots), px, pa);
  fs_set(a, "CLUSTER SHARDS", &(fs_action_t){.reply = shards});
  fs_set(a, "CLUSTER SLOTS", &(fs_action_t){.reply = slots});

  dlock__cluster *cl = open_cluster(pa);
  ASSERT_EQ(owner_port(cl, 0), px);
  ASSERT_EQ(owner_port(cl, 16383), pa);

  dlock__cluster_free(cl);
  fs_free(a);
  fs_free(b);
}
